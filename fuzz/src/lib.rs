//! What the fuzz targets and the seed maker share: the input formats that are more than plain
//! bytes, written once so that seeds and targets agree.
//!
//! - `nft_netlink`: a u32 (little endian) dump generation, then records (u32 little-endian
//!   length, bytes): the first record is the dump (its netlink messages back to back), each
//!   later one a notification datagram. A record cut short by the end of the input is kept as
//!   far as it goes.
//! - `nft_expr`: a family byte, a byte that picks the table whose sets lookups refer to, then
//!   the payload of `NFTA_RULE_EXPRESSIONS` (the list of `NFTA_LIST_ELEM`s), which
//!   [`rule_message`] wraps in an `NFT_MSG_NEWRULE`.
//! - `xt_blob`: a byte that picks the family ([`xt_proto`]), then `GET_INFO` and the entries.
//! - `owners`: a byte whose low bit picks TOML (0) or YAML (1), then the file's text.

use observer_rules::xtables::XtProto;

/// `NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWRULE`.
const NEWRULE: u16 = (10 << 8) | 6;
const NLM_F_APPEND: u16 = 0x800;
const NLA_F_NESTED: u16 = 0x8000;

/// Split `data` into u32-length-prefixed records (the format of
/// `observer-rules/src/nftables/testdata/render_corpus.bin`).
pub fn records(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while let [a, b, c, d, rest @ ..] = data {
        let len = (u32::from_le_bytes([*a, *b, *c, *d]) as usize).min(rest.len());
        out.push(&rest[..len]);
        data = &rest[len..];
    }
    out
}

/// Append one record to `out`.
pub fn push_record(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// One netlink attribute, padded to 4 bytes. A value too long for the u16 length is cut.
pub fn nla(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let value = &value[..value.len().min(usize::from(u16::MAX) - 4)];
    out.extend_from_slice(&((value.len() + 4) as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// An `NFT_MSG_NEWRULE` notification for rule 7 of chain `c` in `table`, whose expressions are
/// `exprs` (the payload of `NFTA_RULE_EXPRESSIONS`).
pub fn rule_message(family: u8, table: &str, exprs: &[u8]) -> Vec<u8> {
    let mut body = vec![family, 0, 0, 0]; // nfgenmsg
    nla(&mut body, 1, format!("{table}\0").as_bytes()); // NFTA_RULE_TABLE
    nla(&mut body, 2, b"c\0"); // NFTA_RULE_CHAIN
    nla(&mut body, 3, &7u64.to_be_bytes()); // NFTA_RULE_HANDLE
    nla(&mut body, 4 | NLA_F_NESTED, exprs); // NFTA_RULE_EXPRESSIONS
    let mut msg = Vec::with_capacity(16 + body.len());
    msg.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&NEWRULE.to_ne_bytes());
    msg.extend_from_slice(&NLM_F_APPEND.to_ne_bytes());
    msg.extend_from_slice(&[0; 8]); // seq, pid
    msg.extend_from_slice(&body);
    msg
}

/// The family an `xt_blob` input's first byte picks.
pub fn xt_proto(selector: u8) -> XtProto {
    match selector % 3 {
        0 => XtProto::Ipv4,
        1 => XtProto::Ipv6,
        _ => XtProto::Arp,
    }
}

/// The selector byte of an `xt_blob` input for a family.
pub fn xt_selector(proto: XtProto) -> u8 {
    match proto {
        XtProto::Ipv4 => 0,
        XtProto::Ipv6 => 1,
        XtProto::Arp => 2,
    }
}

/// A fresh directory of this process for the targets that go through files.
pub fn scratch_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("observer-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("creating the fuzz scratch directory");
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_keep_a_cut_tail() {
        let mut buf = Vec::new();
        push_record(&mut buf, b"abc");
        push_record(&mut buf, b"");
        push_record(&mut buf, b"de");
        assert_eq!(records(&buf), vec![&b"abc"[..], b"", b"de"]);
        buf.truncate(buf.len() - 1);
        assert_eq!(records(&buf), vec![&b"abc"[..], b"", b"d"]);
    }

    #[test]
    fn rule_messages_decode() {
        let mut exprs = Vec::new();
        let mut elem = Vec::new();
        nla(&mut elem, 1, b"counter\0");
        nla(&mut exprs, 1 | NLA_F_NESTED, &elem);
        let msg = rule_message(2, "filter", &exprs);
        let n = observer_rules::nftables::decode::decode(&msg);
        let [observer_rules::nftables::decode::Notification::Rule(_, r)] = n.as_slice() else {
            panic!("not a rule: {n:?}")
        };
        assert_eq!(
            (r.table.as_str(), r.chain.as_str(), r.handle),
            ("filter", "c", 7)
        );
        assert_eq!(r.exprs[0].name, "counter");
    }
}
