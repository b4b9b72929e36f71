//! One ebtables rule as `ebtables-legacy-save` prints it: the entry's header fields (protocol,
//! interfaces, MAC addresses), its matches, watchers and target, each extension by name;
//! unknown ones print their data so that nothing in a rule is dropped.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::*;

pub(super) fn verdict_name(v: i32) -> Option<&'static str> {
    Some(match v {
        -1 => "ACCEPT",
        -2 => "DROP",
        -3 => "CONTINUE",
        -4 => "RETURN",
        _ => return None,
    })
}

/// `/etc/ethertypes` as Debian's netbase ships it (ebtables prints these names).
const ETHERTYPES: &[(&str, u16)] = &[
    ("IPv4", 0x0800),
    ("X25", 0x0805),
    ("ARP", 0x0806),
    ("FR_ARP", 0x0808),
    ("BPQ", 0x08FF),
    ("TRILL", 0x22F3),
    ("L2-IS-IS", 0x22F4),
    ("TEB", 0x6558),
    ("RAW_FR", 0x6559),
    ("RARP", 0x8035),
    ("ATALK", 0x809B),
    ("AARP", 0x80F3),
    ("802_1Q", 0x8100),
    ("IPX", 0x8137),
    ("NetBEUI", 0x8191),
    ("IPv6", 0x86DD),
    ("PPP", 0x880B),
    ("MPLS", 0x8847),
    ("MPLS_MULTI", 0x8848),
    ("ATMMPOA", 0x884C),
    ("PPP_DISC", 0x8863),
    ("PPP_SES", 0x8864),
    ("ATMFATE", 0x8884),
    ("EAPOL", 0x888E),
    ("S-TAG", 0x88A8),
    ("EAP_PREAUTH", 0x88C7),
    ("LLDP", 0x88CC),
    ("MACSEC", 0x88E5),
    ("PBB", 0x88E7),
    ("MVRP", 0x88F5),
    ("PTP", 0x88F7),
    ("FCOE", 0x8906),
    ("FIP", 0x8914),
    ("ROCE", 0x8915),
    ("LoWPAN", 0xA0ED),
];

fn ethertype(out: &mut String, v: u16) {
    match ETHERTYPES.iter().find(|(_, n)| *n == v) {
        Some((name, _)) => out.push_str(name),
        None => {
            let _ = write!(out, "0x{v:x}");
        }
    }
}

/// `ether_ntoa`: `0:1:2:3:4:5`.
fn mac(out: &mut String, m: &[u8]) {
    for (i, b) in m.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        let _ = write!(out, "{b:x}");
    }
}

/// A MAC with its mask, or the names ebtables gives well-known pairs.
fn mac_and_mask(out: &mut String, m: &[u8], k: &[u8]) {
    const MC: [u8; 6] = [1, 0, 0, 0, 0, 0];
    const BGA: [u8; 6] = [0x01, 0x80, 0xc2, 0, 0, 0];
    if k == MC {
        if m == [0; 6] {
            out.push_str("Unicast");
            return;
        }
        if m == MC {
            out.push_str("Multicast");
            return;
        }
    }
    if k == [0xff; 6] {
        if m == [0xff; 6] {
            out.push_str("Broadcast");
            return;
        }
        if m == BGA {
            out.push_str("BGA");
            return;
        }
    }
    mac(out, m);
    if k != [0xff; 6] {
        out.push('/');
        mac(out, k);
    }
}

/// An interface name; byte 1 is ebtables' `+` wildcard.
fn iface(b: &[u8]) -> String {
    cstr(b).replace('\u{1}', "+")
}

fn bang(out: &mut String, invert: bool) {
    if invert {
        out.push_str("! ");
    }
}

/// One extension of an entry: name and data.
struct Ext<'a> {
    name: String,
    data: &'a [u8],
}

/// The extensions packed in `b[from..to]` of entry bytes `e`.
fn exts(e: &[u8], from: usize, to: usize, base: usize) -> Result<Vec<Ext<'_>>, XtError> {
    let mut out = Vec::new();
    let mut at = from;
    while at < to {
        if to - at < EXT_HEAD {
            return Err(malformed(base + at, "truncated extension header"));
        }
        let size = u32_at(e, at + 32).unwrap_or(0) as usize;
        let end = at
            .checked_add(EXT_HEAD)
            .and_then(|s| s.checked_add(size))
            .filter(|&end| end <= to)
            .ok_or_else(|| malformed(base + at + 32, "extension size runs past its section"))?;
        out.push(Ext {
            name: cstr(&e[at..at + 31]),
            data: &e[at + EXT_HEAD..end],
        });
        at = end;
    }
    Ok(out)
}

/// Render the entry at `at` of `entries`; `chains` are the chains' offsets and names.
pub(super) fn render_entry(
    entries: &[u8],
    at: usize,
    chains: &[(usize, String)],
) -> Result<String, XtError> {
    let next = u32_at(entries, at + 108).unwrap_or(0) as usize;
    let e = &entries[at..at + next];
    let bitmask = u32_at(e, 0).unwrap_or(0);
    let inv = u32_at(e, 4).unwrap_or(0);
    let watchers = u32_at(e, 100).unwrap_or(0) as usize;
    let target = u32_at(e, 104).unwrap_or(0) as usize;
    if !(ENTRY_LEN <= watchers && watchers <= target && target <= next) {
        return Err(malformed(at + 100, "entry offsets out of order"));
    }
    let mut out = String::with_capacity(96);
    // EBT_NOPROTO 0x02, EBT_802_3 0x04, EBT_SOURCEMAC 0x08, EBT_DESTMAC 0x10.
    if bitmask & 0x02 == 0 {
        out.push_str("-p ");
        bang(&mut out, inv & 0x01 != 0);
        if bitmask & 0x04 != 0 {
            out.push_str("Length");
        } else {
            ethertype(&mut out, be16_at(e, 8).unwrap_or(0));
        }
        out.push(' ');
    }
    if bitmask & 0x08 != 0 {
        out.push_str("-s ");
        bang(&mut out, inv & 0x08 != 0);
        mac_and_mask(&mut out, &e[74..80], &e[80..86]);
        out.push(' ');
    }
    if bitmask & 0x10 != 0 {
        out.push_str("-d ");
        bang(&mut out, inv & 0x10 != 0);
        mac_and_mask(&mut out, &e[86..92], &e[92..98]);
        out.push(' ');
    }
    // in 10, logical_in 26, out 42, logical_out 58; EBT_IIN 0x02, EBT_IOUT 0x04,
    // EBT_ILOGICALIN 0x20, EBT_ILOGICALOUT 0x40.
    for (opt, field, bit) in [
        ("-i", 10, 0x02),
        ("--logical-in", 26, 0x20),
        ("--logical-out", 58, 0x40),
        ("-o", 42, 0x04),
    ] {
        let name = iface(&e[field..field + 16]);
        if !name.is_empty() {
            let _ = write!(out, "{opt} ");
            bang(&mut out, inv & bit != 0);
            let _ = write!(out, "{name} ");
        }
    }
    for m in exts(e, ENTRY_LEN, watchers, at)? {
        let start = out.len();
        if match_text(&mut out, &m).is_none() {
            out.truncate(start);
            generic(&mut out, "-m", &m);
        }
    }
    for w in exts(e, watchers, target, at)? {
        generic(&mut out, "--watcher", &w);
    }
    let t = exts(e, target, next, at)?;
    let [t] = t.as_slice() else {
        return Err(malformed(at + 104, "entry without exactly one target"));
    };
    out.push_str("-j ");
    if t.name == "standard" {
        let v = i32_at(t.data, 0).ok_or_else(|| malformed(at + target, "short verdict"))?;
        match verdict_name(v) {
            Some(n) => out.push_str(n),
            None => match chains.iter().find(|(off, _)| *off as i64 == i64::from(v)) {
                Some((_, name)) => out.push_str(name),
                None => {
                    let _ = write!(out, "[jump to byte {v}]");
                }
            },
        }
    } else {
        let start = out.len();
        if target_text(&mut out, t).is_none() {
            // Drop the "-j " too: the generic form writes its own.
            out.truncate(start - 3);
            generic(&mut out, "-j", t);
        }
    }
    Ok(out.trim_end().to_string())
}

/// `-m NAME [data 0x...] `: an extension this renderer does not know.
fn generic(out: &mut String, opt: &str, x: &Ext<'_>) {
    let _ = write!(out, "{opt} {} [data 0x", x.name);
    for b in x.data {
        let _ = write!(out, "{b:02x}");
    }
    out.push_str("] ");
}

fn ipv4(b: &[u8], at: usize) -> Option<Ipv4Addr> {
    let s: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(Ipv4Addr::from(s))
}

/// ebtables' address with mask: bare for a host, `/N` for a prefix, else `/a.b.c.d`.
fn ip_mask(out: &mut String, addr: Ipv4Addr, mask: Ipv4Addr) {
    let m = u32::from(mask);
    let _ = write!(out, "{addr}");
    if m == u32::MAX {
        return;
    }
    if m.leading_ones() + m.trailing_zeros() == 32 {
        let _ = write!(out, "/{}", m.leading_ones());
    } else {
        let _ = write!(out, "/{mask}");
    }
}

fn proto_name(p: u8) -> String {
    match p {
        1 => "icmp".into(),
        2 => "igmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        33 => "dccp".into(),
        47 => "gre".into(),
        50 => "esp".into(),
        51 => "ah".into(),
        58 => "ipv6-icmp".into(),
        132 => "sctp".into(),
        136 => "udplite".into(),
        _ => p.to_string(),
    }
}

fn port_range(out: &mut String, opt: &str, invert: bool, lo: u16, hi: u16) {
    let _ = write!(out, "{opt} ");
    bang(out, invert);
    if lo == hi {
        let _ = write!(out, "{lo} ");
    } else {
        let _ = write!(out, "{lo}:{hi} ");
    }
}

/// The options of the `ip` and `ip6` matches, whose structs differ only in their addresses'
/// width: after the addresses and masks come, at `class_at`, the tos (tclass), the protocol,
/// the option bits, their inversions, and the source and destination port ranges. `addr`
/// prints the source (`true`) or destination address with its mask. `None` for options not
/// decoded (icmp, igmp types).
fn ip_options(
    out: &mut String,
    d: &[u8],
    opt: &str,
    class: &str,
    class_at: usize,
    addr: impl Fn(&mut String, bool) -> Option<()>,
) -> Option<()> {
    let (bits, inv) = (*d.get(class_at + 2)?, *d.get(class_at + 3)?);
    for (bit, dir, src) in [(0x01, "src", true), (0x02, "dst", false)] {
        if bits & bit != 0 {
            let _ = write!(out, "--{opt}-{dir} ");
            bang(out, inv & bit != 0);
            addr(out, src)?;
            out.push(' ');
        }
    }
    if bits & 0x04 != 0 {
        let _ = write!(out, "--{opt}-{class} ");
        bang(out, inv & 0x04 != 0);
        let _ = write!(out, "0x{:02x} ", d.get(class_at)?);
    }
    if bits & 0x08 != 0 {
        let _ = write!(out, "--{opt}-proto ");
        bang(out, inv & 0x08 != 0);
        let _ = write!(out, "{} ", proto_name(*d.get(class_at + 1)?));
    }
    for (bit, dir, at) in [(0x10, "sport", class_at + 4), (0x20, "dport", class_at + 8)] {
        if bits & bit != 0 {
            let (lo, hi) = (u16_at(d, at)?, u16_at(d, at + 2)?);
            port_range(out, &format!("--{opt}-{dir}"), inv & bit != 0, lo, hi);
        }
    }
    (bits & 0xc0 == 0).then_some(())
}

/// The options of a match, each followed by a blank; `None`: render it generically.
fn match_text(out: &mut String, m: &Ext<'_>) -> Option<()> {
    let d = m.data;
    match m.name.as_str() {
        "ip" => {
            // struct ebt_ip_info: saddr, daddr, smsk, dmsk, then the common tail at 16.
            ip_options(out, d, "ip", "tos", 16, |out, src| {
                let (a, m) = if src { (0, 8) } else { (4, 12) };
                ip_mask(out, ipv4(d, a)?, ipv4(d, m)?);
                Some(())
            })?;
        }
        "ip6" => {
            // struct ebt_ip6_info: saddr, daddr, smsk, dmsk (16 each), then the common tail at 64.
            let a6 = |at: usize| -> Option<Ipv6Addr> {
                let s: [u8; 16] = d.get(at..at + 16)?.try_into().ok()?;
                Some(Ipv6Addr::from(s))
            };
            ip_options(out, d, "ip6", "tclass", 64, |out, src| {
                let (a, m) = if src { (0, 32) } else { (16, 48) };
                let (a, m) = (a6(a)?, a6(m)?);
                let mb = u128::from(m);
                let _ = write!(out, "{a}");
                if mb == u128::MAX {
                } else if mb.leading_ones() + mb.trailing_zeros() == 128 {
                    let _ = write!(out, "/{}", mb.leading_ones());
                } else {
                    let _ = write!(out, "/{m}");
                }
                Some(())
            })?;
        }
        "vlan" => {
            // struct ebt_vlan_info: id, prio, encap (be), bitmask, invflags.
            let (bits, inv) = (*d.get(6)?, *d.get(7)?);
            if bits & 0x01 != 0 {
                out.push_str("--vlan-id ");
                bang(out, inv & 0x01 != 0);
                let _ = write!(out, "{} ", u16_at(d, 0)?);
            }
            if bits & 0x02 != 0 {
                out.push_str("--vlan-prio ");
                bang(out, inv & 0x02 != 0);
                let _ = write!(out, "{} ", d[2]);
            }
            if bits & 0x04 != 0 {
                out.push_str("--vlan-encap ");
                bang(out, inv & 0x04 != 0);
                ethertype(out, be16_at(d, 4)?);
                out.push(' ');
            }
        }
        "mark_m" => {
            // struct ebt_mark_m_info: unsigned long mark, mask; invert; bitmask.
            let (mark, mask) = (u64_at(d, 0)?, u64_at(d, 8)?);
            let (invert, bits) = (*d.get(16)?, *d.get(17)?);
            out.push_str("--mark ");
            bang(out, invert != 0);
            if bits == 0x02 {
                let _ = write!(out, "/0x{mask:x} ");
            } else if mask != 0xffff_ffff {
                let _ = write!(out, "0x{mark:x}/0x{mask:x} ");
            } else {
                let _ = write!(out, "0x{mark:x} ");
            }
        }
        "pkttype" => {
            const TYPES: [&str; 7] = [
                "host",
                "broadcast",
                "multicast",
                "otherhost",
                "outgoing",
                "loopback",
                "fastroute",
            ];
            let (t, invert) = (*d.first()?, *d.get(1)?);
            out.push_str("--pkttype-type ");
            bang(out, invert != 0);
            match TYPES.get(usize::from(t)) {
                Some(n) => {
                    let _ = write!(out, "{n} ");
                }
                None => {
                    let _ = write!(out, "{t} ");
                }
            }
        }
        "limit" => {
            // struct ebt_limit_info: avg, burst (u32), then the kernel's state.
            let (avg, burst) = (u32_at(d, 0)?, u32_at(d, 4)?);
            if avg == 0 {
                return None;
            }
            const SCALE: u32 = 10000;
            let rates = [
                ("day", SCALE * 24 * 60 * 60),
                ("hour", SCALE * 60 * 60),
                ("min", SCALE * 60),
                ("sec", SCALE),
            ];
            let mut i = 1;
            while i < rates.len() {
                let mult = rates[i].1;
                if avg > mult || mult / avg < mult % avg {
                    break;
                }
                i += 1;
            }
            let (name, mult) = rates[i - 1];
            let _ = write!(out, "--limit {}/{name} --limit-burst {burst} ", mult / avg);
        }
        _ => return None,
    }
    Some(())
}

/// A target's verdict field (`int target`) with its action bits removed.
fn target_verdict(t: i32) -> &'static str {
    verdict_name(t | !0x0f).unwrap_or("?")
}

/// `NAME options` of a target after `-j `; `None`: render it generically.
fn target_text(out: &mut String, t: &Ext<'_>) -> Option<()> {
    let d = t.data;
    match t.name.as_str() {
        "mark" => {
            // struct ebt_mark_t_info: unsigned long mark; int target (action | verdict).
            let (mark, target) = (u64_at(d, 0)?, i32_at(d, 8)?);
            let action = match (target as u32) & 0xffff_fff0 {
                0xffff_fff0 => "--mark-set",
                0xffff_ffe0 => "--mark-or",
                0xffff_ffd0 => "--mark-and",
                0xffff_ffc0 => "--mark-xor",
                _ => return None,
            };
            let _ = write!(
                out,
                "mark {action} 0x{mark:x} --mark-target {}",
                target_verdict(target)
            );
        }
        "dnat" | "snat" => {
            // struct ebt_nat_info: mac[6]; int target.
            let (m, target) = (d.get(0..6)?, i32_at(d, 8)?);
            let (opt, kind) = if t.name == "dnat" {
                ("--to-dst", "dnat")
            } else {
                ("--to-src", "snat")
            };
            let _ = write!(out, "{kind} {opt} ");
            mac(out, m);
            // NAT_ARP_BIT is flipped by --snat-arp: clear means set.
            if kind == "snat" && target & 0x10 == 0 {
                out.push_str(" --snat-arp");
            }
            let _ = write!(out, " --{kind}-target {}", target_verdict(target));
        }
        "redirect" => {
            let target = i32_at(d, 0)?;
            out.push_str("redirect ");
            let v = target_verdict(target);
            if v != "ACCEPT" {
                let _ = write!(out, " --redirect-target {v}");
            }
        }
        "arpreply" => {
            // struct ebt_arpreply_info: mac[6]; int target.
            let (m, target) = (d.get(0..6)?, i32_at(d, 8)?);
            out.push_str("arpreply --arpreply-mac ");
            mac(out, m);
            let v = target_verdict(target);
            if v != "DROP" {
                let _ = write!(out, " --arpreply-target {v}");
            }
        }
        _ => return None,
    }
    Some(())
}
