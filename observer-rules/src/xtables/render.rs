//! Render one x_tables rule in `iptables-save` syntax (without the `-A CHAIN ` prefix).
//!
//! The output follows what `iptables-legacy-save` 1.8 prints for the extensions people meet on
//! Kubernetes nodes and firewalls (tcp/udp/icmp, comment, mark, conntrack/state, addrtype,
//! multiport, set, statistic, limit, physdev, recent; MARK, CONNMARK, DNAT/SNAT, MASQUERADE,
//! REJECT, LOG, CT/NOTRACK). Anything else, or any payload shorter than its layout, is rendered
//! generically (`-m NAME [rev N data 0x...]`) so that nothing in a rule is ever dropped.
//! Rendering is only done for rules that changed; it never panics on odd input.
//!
//! [`XtTable::rule_text`] calls it. It renders the entry header itself and leaves the matches'
//! and targets' options to [`ext`]; it imports that, [`decode`], [`bytes`](super::bytes) and
//! [`text`](super::text), none of which import it.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::bytes::{be16_at, ipv4_at, ipv6_at, u16_at, u8_at};
use super::decode::{self, verdict_name, Entry, Ext};
use super::ext;
use super::text::{inv, ip6_text, prefix_len, Cx};
use super::{Verdict, XtProto, XtRule, XtTable};

/// Render `rule` of `table`.
pub(crate) fn rule_text(table: &XtTable, rule: &XtRule) -> String {
    let layout = decode::layout(table.proto);
    let bytes = table.entry_bytes(rule).unwrap_or_default();
    let Ok(e) = Entry::at(layout, &bytes, 0) else {
        return format!("[unreadable entry {}]", rule.packed_at);
    };
    let mut out = String::with_capacity(128);
    let header = e.header();
    if table.proto == XtProto::Arp {
        arp_rule(&mut out, table, &e, rule.verdict, header);
        return out;
    }
    match table.proto {
        XtProto::Ipv4 => ipv4_header(&mut out, header),
        XtProto::Ipv6 => ipv6_header(&mut out, header),
        XtProto::Arp => arp_header(&mut out, header),
    }
    let cx = Cx {
        table,
        proto: table.proto,
        sets: None,
    };
    for m in e.matches() {
        let start = out.len();
        out.push_str(" -m ");
        let ok = ext::match_options(&mut out, &cx, &m);
        if ok.is_none() {
            out.truncate(start);
            generic(&mut out, "-m", &m);
        }
    }
    target(&mut out, &cx, &e, rule.verdict);
    if out.starts_with(' ') {
        out.remove(0);
    }
    out
}

/// An arp_tables rule as arptables-legacy (0.0.5) lists it, which `arptables-legacy-save` copies:
/// the target name first, then the `arpt_arp` fields, then the target's options (arp_tables
/// has no matches).
fn arp_rule(out: &mut String, table: &XtTable, e: &Entry<'_>, verdict: Verdict, header: &[u8]) {
    let cx = Cx {
        table,
        proto: table.proto,
        sets: None,
    };
    let mut t = String::new();
    target(&mut t, &cx, e, verdict);
    // " -j NAME[ options]": the name goes first, the options last.
    let (name, options) = match t.strip_prefix(" -j ") {
        Some(rest) => match rest.find(' ') {
            Some(i) => (&t[..4 + i], &rest[i..]),
            None => (t.as_str(), ""),
        },
        None => (t.as_str(), ""),
    };
    out.push_str(name);
    arp_header(out, header);
    out.push_str(options);
    if out.starts_with(' ') {
        out.remove(0);
    }
}

/// `/24`, or `/255.0.255.0` for a mask that is not a prefix; nothing for `/32` when `omit_host`
/// (arptables prints host addresses bare, iptables does not).
fn ipv4_mask(out: &mut String, mask: &[u8], omit_host: bool) {
    match prefix_len(mask) {
        Some(32) if omit_host => {}
        Some(n) => {
            let _ = write!(out, "/{n}");
        }
        None => {
            let _ = write!(
                out,
                "/{}",
                ipv4_at(mask, 0).unwrap_or(Ipv4Addr::UNSPECIFIED)
            );
        }
    }
}

fn ipv4_addr(out: &mut String, letter: char, addr: Ipv4Addr, mask: &[u8], invert: bool) {
    if mask.iter().all(|&b| b == 0) && !invert {
        return;
    }
    inv(out, invert);
    let _ = write!(out, " -{letter} {addr}");
    ipv4_mask(out, mask, false);
}

fn ipv6_addr(out: &mut String, letter: char, addr: Ipv6Addr, mask: &[u8], invert: bool) {
    let len = prefix_len(mask);
    if len == Some(0) && !invert {
        return;
    }
    inv(out, invert);
    let _ = write!(out, " -{letter} {}", ip6_text(&addr));
    match len {
        Some(n) => {
            let _ = write!(out, "/{n}");
        }
        None => {
            let m = ipv6_at(mask, 0).unwrap_or(Ipv6Addr::UNSPECIFIED);
            let _ = write!(out, "/{}", ip6_text(&m));
        }
    }
}

/// An interface with its mask: `eth0`, or `veth+` when the mask stops before the name's end.
fn iface(out: &mut String, letter: char, name: &[u8], mask: &[u8], invert: bool) {
    if mask.first().copied().unwrap_or(0) == 0 {
        return;
    }
    inv(out, invert);
    let _ = write!(out, " -{letter} ");
    let mut bytes = Vec::with_capacity(name.len() + 1);
    for i in 0..name.len().min(mask.len()) {
        if mask[i] != 0 {
            if name[i] != 0 {
                bytes.push(name[i]);
            }
        } else {
            if i > 0 && name[i - 1] != 0 {
                bytes.push(b'+');
            }
            break;
        }
    }
    out.push_str(&String::from_utf8_lossy(&bytes));
}

/// `-p`: the name `iptables-save` prints, which is `getprotobynumber()`'s: this is Debian
/// netbase's `/etc/protocols` (fixed here so that the output does not depend on the host).
pub(crate) fn proto_name(p: u16) -> Option<&'static str> {
    Some(match p {
        1 => "icmp",
        2 => "igmp",
        3 => "ggp",
        4 => "ipencap",
        5 => "st",
        6 => "tcp",
        8 => "egp",
        9 => "igp",
        12 => "pup",
        17 => "udp",
        20 => "hmp",
        22 => "xns-idp",
        27 => "rdp",
        29 => "iso-tp4",
        33 => "dccp",
        36 => "xtp",
        37 => "ddp",
        38 => "idpr-cmtp",
        41 => "ipv6",
        43 => "ipv6-route",
        44 => "ipv6-frag",
        45 => "idrp",
        46 => "rsvp",
        47 => "gre",
        50 => "esp",
        51 => "ah",
        57 => "skip",
        58 => "ipv6-icmp",
        59 => "ipv6-nonxt",
        60 => "ipv6-opts",
        73 => "rspf",
        81 => "vmtp",
        88 => "eigrp",
        89 => "ospf",
        93 => "ax.25",
        94 => "ipip",
        97 => "etherip",
        98 => "encap",
        103 => "pim",
        108 => "ipcomp",
        112 => "vrrp",
        115 => "l2tp",
        124 => "isis",
        132 => "sctp",
        133 => "fc",
        135 => "mobility-header",
        136 => "udplite",
        137 => "mpls-in-ip",
        138 => "manet",
        139 => "hip",
        140 => "shim6",
        141 => "wesp",
        142 => "rohc",
        143 => "ethernet",
        _ => return None,
    })
}

const INV_VIA_IN: u8 = 0x01;
const INV_VIA_OUT: u8 = 0x02;
const INV_SRCIP: u8 = 0x08;
const INV_DSTIP: u8 = 0x10;
const INV_FRAG: u8 = 0x20;
const INV_PROTO: u8 = 0x40;

/// `-i`, `-o`, `-p`, `-f` in `save_rule_details` order.
fn rule_details(out: &mut String, h: &[u8], at: [usize; 4], proto_at: usize, frag: bool, invf: u8) {
    let (i, o, im, om) = (at[0], at[1], at[2], at[3]);
    if let (Some(n), Some(m)) = (h.get(i..i + 16), h.get(im..im + 16)) {
        iface(out, 'i', n, m, invf & INV_VIA_IN != 0);
    }
    if let (Some(n), Some(m)) = (h.get(o..o + 16), h.get(om..om + 16)) {
        iface(out, 'o', n, m, invf & INV_VIA_OUT != 0);
    }
    let proto = u16_at(h, proto_at).unwrap_or(0);
    if proto > 0 {
        inv(out, invf & INV_PROTO != 0);
        match proto_name(proto) {
            Some(n) => {
                let _ = write!(out, " -p {n}");
            }
            None => {
                let _ = write!(out, " -p {proto}");
            }
        }
    }
    if frag {
        inv(out, invf & INV_FRAG != 0);
        out.push_str(" -f");
    }
}

fn ipv4_header(out: &mut String, h: &[u8]) {
    let invf = u8_at(h, 83).unwrap_or(0);
    let flags = u8_at(h, 82).unwrap_or(0);
    if let (Some(src), Some(smsk)) = (ipv4_at(h, 0), h.get(8..12)) {
        ipv4_addr(out, 's', src, smsk, invf & INV_SRCIP != 0);
    }
    if let (Some(dst), Some(dmsk)) = (ipv4_at(h, 4), h.get(12..16)) {
        ipv4_addr(out, 'd', dst, dmsk, invf & INV_DSTIP != 0);
    }
    rule_details(out, h, [16, 32, 48, 64], 80, flags & 0x01 != 0, invf);
}

fn ipv6_header(out: &mut String, h: &[u8]) {
    let invf = u8_at(h, 132).unwrap_or(0);
    if let (Some(src), Some(smsk)) = (ipv6_at(h, 0), h.get(32..48)) {
        ipv6_addr(out, 's', src, smsk, invf & INV_SRCIP != 0);
    }
    if let (Some(dst), Some(dmsk)) = (ipv6_at(h, 16), h.get(48..64)) {
        ipv6_addr(out, 'd', dst, dmsk, invf & INV_DSTIP != 0);
    }
    rule_details(out, h, [64, 80, 96, 112], 128, false, invf);
}

/// The `arpt_arp` part, in the order arptables prints it.
fn arp_header(out: &mut String, h: &[u8]) {
    let invf = u16_at(h, 160).unwrap_or(0);
    let flag = |bit: u16| invf & bit != 0;
    if let (Some(n), Some(m)) = (h.get(94..110), h.get(126..142)) {
        iface(out, 'i', n, m, flag(0x0001));
    }
    if let (Some(n), Some(m)) = (h.get(110..126), h.get(142..158)) {
        iface(out, 'o', n, m, flag(0x0002));
    }
    let addr = |out: &mut String, opt: &str, a: usize, m: usize, invert: bool| {
        let (Some(ip), Some(mask)) = (ipv4_at(h, a), h.get(m..m + 4)) else {
            return;
        };
        if mask.iter().all(|&b| b == 0) && !invert {
            return;
        }
        inv(out, invert);
        let _ = write!(out, " {opt} {ip}");
        ipv4_mask(out, mask, true);
    };
    let mac = |out: &mut String, opt: &str, at: usize, invert: bool| {
        let (Some(a), Some(m)) = (h.get(at..at + 6), h.get(at + 16..at + 22)) else {
            return;
        };
        if m.iter().all(|&b| b == 0) && !invert {
            return;
        }
        inv(out, invert);
        let _ = write!(out, " {opt} ");
        mac_text(out, a);
        if m.iter().any(|&b| b != 0xff) {
            out.push('/');
            mac_text(out, m);
        }
    };
    addr(out, "-s", 0, 8, flag(0x0004));
    mac(out, "--src-mac", 18, flag(0x0010));
    addr(out, "-d", 4, 12, flag(0x0008));
    mac(out, "--dst-mac", 50, flag(0x0020));
    let hln_mask = u8_at(h, 17).unwrap_or(0);
    if hln_mask != 0 {
        inv(out, flag(0x0200));
        let _ = write!(out, " --h-length {}", u8_at(h, 16).unwrap_or(0));
        if hln_mask != 0xff {
            let _ = write!(out, "/{hln_mask}");
        }
    }
    let word = |out: &mut String, opt: &str, at: usize, invert: bool, hex: bool| {
        let (Some(v), Some(m)) = (be16_at(h, at), be16_at(h, at + 2)) else {
            return;
        };
        if m == 0 {
            return;
        }
        inv(out, invert);
        if hex {
            let _ = write!(out, " {opt} 0x{v:x}");
        } else {
            let _ = write!(out, " {opt} {v}");
        }
        if m != 0xffff {
            let _ = write!(out, "/{m}");
        }
    };
    word(out, "--opcode", 82, flag(0x0040), false);
    word(out, "--h-type", 86, flag(0x0080), false);
    word(out, "--proto-type", 90, flag(0x0100), true);
}

fn mac_text(out: &mut String, m: &[u8]) {
    for (i, b) in m.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        let _ = write!(out, "{b:02x}");
    }
}

/// `-m NAME [rev N data 0x...]` / `-j NAME [...]`: an extension this renderer does not know.
fn generic(out: &mut String, opt: &str, ext: &Ext<'_>) {
    let name = String::from_utf8_lossy(ext.name);
    let name = if name.is_empty() { "\"\"".into() } else { name };
    let _ = write!(out, " {opt} {name}");
    let used = ext.data.iter().rposition(|&b| b != 0).map_or(0, |n| n + 1);
    if ext.data.is_empty() {
        if ext.revision != 0 {
            let _ = write!(out, " [rev {}]", ext.revision);
        }
        return;
    }
    let _ = write!(out, " [rev {} data 0x", ext.revision);
    if used == 0 {
        out.push_str("00");
    }
    for b in &ext.data[..used] {
        let _ = write!(out, "{b:02x}");
    }
    out.push(']');
}

/// The target part: `-j VERDICT`, `-j CHAIN`, `-g CHAIN`, or an extension with its options.
fn target(out: &mut String, cx: &Cx<'_>, e: &Entry<'_>, verdict: Verdict) {
    match verdict {
        Verdict::Fallthrough => {}
        Verdict::Standard(v) => match verdict_name(v) {
            Some(n) => {
                let _ = write!(out, " -j {n}");
            }
            None => {
                let _ = write!(out, " -j [verdict {v}]");
            }
        },
        Verdict::Jump { chain, goto } => {
            let name = cx
                .table
                .chains
                .get(chain as usize)
                .map_or("?", |c| c.name.as_str());
            let _ = write!(out, " -{} {name}", if goto { 'g' } else { 'j' });
        }
        Verdict::BadJump(v) => {
            let _ = write!(out, " -j [jump to byte {v}]");
        }
        Verdict::Extension => {
            let t = e.target();
            let start = out.len();
            out.push_str(" -j ");
            if ext::target_options(out, cx, &t).is_none() {
                out.truncate(start);
                generic(out, "-j", &t);
            }
        }
    }
}

/// An extension's `iptables-save` options (`tcp --dport 80`, `DNAT --to-destination ...`) from
/// its name, revision and payload, outside any x_tables blob: what iptables-nft's `match` and
/// `target` compat expressions carry. `None` when the printers do not know it.
pub(crate) fn ext_text(
    proto: XtProto,
    is_match: bool,
    name: &str,
    revision: u8,
    data: &[u8],
) -> Option<String> {
    ext_text_named(proto, is_match, name, revision, data, None)
}

/// [`ext_text`], with the names of the ipsets a `set` match or a `SET` target refers to by
/// index (`#<index>` where `sets` has none).
pub(crate) fn ext_text_named(
    proto: XtProto,
    is_match: bool,
    name: &str,
    revision: u8,
    data: &[u8],
    sets: Option<&dyn Fn(u16) -> Option<String>>,
) -> Option<String> {
    let table = XtTable {
        proto,
        name: String::new(),
        chains: Vec::new(),
        entries: Default::default(),
        set_refs: Vec::new(),
        set_names: Default::default(),
        carried: 0,
        live: 0,
        chain_level: false,
    };
    let cx = Cx {
        table: &table,
        proto,
        sets,
    };
    let ext = Ext {
        name: name.as_bytes(),
        revision,
        data,
    };
    let mut out = String::new();
    if is_match {
        ext::match_options(&mut out, &cx, &ext)?;
    } else {
        ext::target_options(&mut out, &cx, &ext)?;
    }
    Some(out)
}
