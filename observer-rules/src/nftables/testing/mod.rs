//! Test helpers of the nftables decoder, for its own tests and for the agent's live tests
//! (the `test-utils` feature): set elements, the hex fixture format of captured datagrams
//! (`testdata/*.hex`: one datagram per line, `#` lines are comments naming the command that
//! produced the datagrams below them), their replay through a [`GenerationBuilder`], and the
//! line form of a change the tests compare.

pub mod scenarios;

use crate::nftables::decode::{decode, Element, ElementMore};
use crate::nftables::generation::{GenerationBuilder, Transaction};
use crate::nftables::state::NftState;
use crate::nftables::Dump;

/// `NFT_OPS` captured.
pub const NFT_OPS_HEX: &str = include_str!("../testdata/nft_ops.hex");
/// `IPTABLES_OPS` captured.
pub const IPTABLES_OPS_HEX: &str = include_str!("../testdata/iptables_ops.hex");
/// `RENDER_CORPUS` captured: the datagrams of its dump.
pub const CORPUS_BIN: &[u8] = include_bytes!("../testdata/render_corpus.bin");
/// `nft list ruleset` of `RENDER_CORPUS`.
pub const CORPUS_NFT: &str = include_str!("../testdata/render_corpus.nft");

/// A set element of a 4-byte key, with no range end, data or comment.
pub fn element(key: [u8; 4], flags: u32) -> Element {
    Element::new(key.to_vec(), None, flags, ElementMore::default())
}

pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parse a fixture: `(comment lines before it, datagram)` for each datagram line.
pub fn parse_fixture(text: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut comment = String::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(c) = line.strip_prefix('#') {
            comment = c.trim().to_string();
            continue;
        }
        if line.is_empty() {
            continue;
        }
        let bytes = (0..line.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&line[i..i + 2], 16).expect("hex fixture"))
            .collect();
        out.push((comment.clone(), bytes));
    }
    out
}

/// Datagrams of a binary fixture: each a little-endian u32 length and its bytes.
pub fn parse_bin(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let [a, b, c, d, rest @ ..] = bytes {
        let len = u32::from_le_bytes([*a, *b, *c, *d]) as usize;
        out.push(rest[..len].to_vec());
        bytes = &rest[len..];
    }
    out
}

/// `nft -a list ruleset` rule lines: ((family, table, chain, handle), text).
pub fn nft_rules(listing: &str) -> Vec<((String, String, String, u64), String)> {
    let mut out = Vec::new();
    let (mut fam, mut table, mut chain) = (String::new(), String::new(), String::new());
    for line in listing.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("table ") {
            let mut it = rest.split_whitespace();
            fam = it.next().unwrap_or_default().into();
            table = it.next().unwrap_or_default().into();
        } else if let Some(rest) = l.strip_prefix("chain ") {
            chain = rest.split_whitespace().next().unwrap_or_default().into();
        } else if let Some((body, h)) = l.rsplit_once(" # handle ") {
            if body.starts_with("type ") || body.ends_with('{') {
                continue;
            }
            if let Ok(h) = h.trim().parse() {
                out.push((
                    (fam.clone(), table.clone(), chain.clone(), h),
                    body.trim().to_string(),
                ));
            }
        }
    }
    out
}

pub fn nfproto(family: &str) -> u8 {
    match family {
        "inet" => 1,
        "ip" => 2,
        "arp" => 3,
        "netdev" => 5,
        "bridge" => 7,
        "ip6" => 10,
        _ => 0,
    }
}

/// nft prints counters with their values; the renderer prints `counter` alone.
pub fn strip_counters(s: &str) -> String {
    let words: Vec<&str> = s.split(' ').collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        out.push(words[i]);
        if words[i] == "counter" && words.get(i + 1) == Some(&"packets") {
            i += 5;
        } else {
            i += 1;
        }
    }
    out.join(" ")
}

/// One change as a line: `rule_add ip t c @3: iifname "lo" accept (detail)`.
pub fn line(c: &crate::ruleset::Change) -> String {
    let mut s = format!("{} {} {}", c.op, c.family, c.table);
    if let Some(ch) = &c.chain {
        s = format!("{s} {ch}");
    }
    if let Some(p) = c.position {
        s = format!("{s} @{p}");
    }
    // The nft form, when the rule is also in its writer's (iptables-nft-save) syntax.
    if let Some(r) = c.forms.rule_nft.as_ref().or(c.rule.as_ref()) {
        s = format!("{s}: {r}");
    }
    if let Some(d) = &c.detail {
        s = format!("{s} ({d})");
    }
    s
}

/// A fixture replayed through a builder.
pub struct Replay {
    pub builder: GenerationBuilder,
    /// Transactions produced by the setup notifications (older than the dump).
    pub setup_transactions: usize,
    /// The transactions of each command.
    pub steps: Vec<(String, Vec<Transaction>)>,
    /// The dump taken after the last command.
    pub final_dump: Dump,
}

pub fn replay(text: &str) -> Replay {
    let mut setup = Vec::new();
    let (mut dump_msgs, mut final_msgs) = (Vec::new(), Vec::new());
    let (mut gen_id, mut final_gen) = (0, 0);
    let mut steps: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
    for (comment, bytes) in parse_fixture(text) {
        if let Some(g) = comment.strip_prefix("dump gen ") {
            gen_id = g.parse().expect("gen");
            dump_msgs.extend(decode(&bytes));
        } else if let Some(g) = comment.strip_prefix("final dump gen ") {
            final_gen = g.parse().expect("gen");
            final_msgs.extend(decode(&bytes));
        } else if comment.starts_with("setup: ") {
            setup.push(bytes);
        } else if let Some(cmd) = comment.strip_prefix("cmd: ") {
            match steps.last_mut() {
                Some((c, v)) if c == cmd => v.push(bytes),
                _ => steps.push((cmd.to_string(), vec![bytes])),
            }
        }
    }
    let dump = Dump::from_notifications(gen_id, dump_msgs);
    let mut builder = GenerationBuilder::new(NftState::from_dump(&dump));
    let setup_transactions = setup
        .iter()
        .map(|d| builder.feed(d).transactions.len())
        .sum();
    let steps = steps
        .into_iter()
        .map(|(cmd, ds)| {
            let txns = ds
                .iter()
                .flat_map(|d| builder.feed(d).transactions)
                .collect();
            (cmd, txns)
        })
        .collect();
    Replay {
        builder,
        setup_transactions,
        steps,
        final_dump: Dump::from_notifications(final_gen, final_msgs),
    }
}

/// What must agree between an incrementally maintained state and a fresh dump: per chain the
/// rules (handle, text, fingerprint) in order, per set its elements.
pub fn projection(st: &NftState) -> Vec<String> {
    let mut out = Vec::new();
    for ((fam, name), t) in &st.tables {
        out.push(format!("table {fam} {name}"));
        for (cname, c) in &t.chains {
            out.push(format!(
                "chain {cname} {:?}",
                crate::nftables::state::describe_chain(&c.chain)
            ));
            for r in &c.rules {
                out.push(format!("  #{} {:016x} {}", r.handle, r.fingerprint, r.text));
            }
        }
        for (sname, s) in &t.sets {
            out.push(format!("set {sname} {} elements", s.elements.len()));
        }
    }
    out
}
