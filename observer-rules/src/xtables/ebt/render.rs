//! One ebtables rule as `ebtables-legacy-save` prints it: the entry's header fields (protocol,
//! interfaces, MAC addresses), its matches, watchers and target, each extension by name;
//! unknown ones print their data so that nothing in a rule is dropped.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::*;
use crate::xtables::text::ip6_text;

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
        let start = out.len();
        if watcher_text(&mut out, &w).is_none() {
            out.truncate(start);
            generic(&mut out, "--watcher", &w);
        }
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
    let s: [u8; 4] = b.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(Ipv4Addr::from(s))
}

/// ebtables' address with mask (`ebt_mask_to_dotted`): bare for a host and for mask 0, `/N`
/// for a prefix, else `/a.b.c.d`.
fn ip_mask(out: &mut String, addr: Ipv4Addr, mask: Ipv4Addr) {
    let m = u32::from(mask);
    let _ = write!(out, "{addr}");
    if m == u32::MAX || m == 0 {
        return;
    }
    if m.leading_ones() + m.trailing_zeros() == 32 {
        let _ = write!(out, "/{}", m.leading_ones());
    } else {
        let _ = write!(out, "/{mask}");
    }
}

/// `getprotobynumber()`'s name (Debian netbase's `/etc/protocols`, where 0 is `ip`), else the
/// number.
fn proto_name(p: u8) -> String {
    match p {
        0 => "ip".into(),
        _ => crate::xtables::render::proto_name(u16::from(p))
            .map_or_else(|| p.to_string(), str::to_string),
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

/// A table of ICMP (IGMP) type names: name, type, lowest and highest code.
type IcmpNames = &'static [(&'static str, u8, u8, u8)];

/// The ICMP names ebtables prints.
const ICMP_NAMES: IcmpNames = &[
    ("echo-reply", 0, 0, 0xff),
    ("destination-unreachable", 3, 0, 0xff),
    ("network-unreachable", 3, 0, 0),
    ("host-unreachable", 3, 1, 1),
    ("protocol-unreachable", 3, 2, 2),
    ("port-unreachable", 3, 3, 3),
    ("fragmentation-needed", 3, 4, 4),
    ("source-route-failed", 3, 5, 5),
    ("network-unknown", 3, 6, 6),
    ("host-unknown", 3, 7, 7),
    ("network-prohibited", 3, 9, 9),
    ("host-prohibited", 3, 10, 10),
    ("TOS-network-unreachable", 3, 11, 11),
    ("TOS-host-unreachable", 3, 12, 12),
    ("communication-prohibited", 3, 13, 13),
    ("host-precedence-violation", 3, 14, 14),
    ("precedence-cutoff", 3, 15, 15),
    ("source-quench", 4, 0, 0xff),
    ("redirect", 5, 0, 0xff),
    ("network-redirect", 5, 0, 0),
    ("host-redirect", 5, 1, 1),
    ("TOS-network-redirect", 5, 2, 2),
    ("TOS-host-redirect", 5, 3, 3),
    ("echo-request", 8, 0, 0xff),
    ("router-advertisement", 9, 0, 0xff),
    ("router-solicitation", 10, 0, 0xff),
    ("time-exceeded", 11, 0, 0xff),
    ("ttl-zero-during-transit", 11, 0, 0),
    ("ttl-zero-during-reassembly", 11, 1, 1),
    ("parameter-problem", 12, 0, 0xff),
    ("ip-header-bad", 12, 0, 0),
    ("required-option-missing", 12, 1, 1),
    ("timestamp-request", 13, 0, 0xff),
    ("timestamp-reply", 14, 0, 0xff),
    ("address-mask-request", 17, 0, 0xff),
    ("address-mask-reply", 18, 0, 0xff),
];

/// The IGMP names (ebtables matches them on the type alone).
const IGMP_NAMES: IcmpNames = &[
    ("membership-query", 0x11, 0, 0),
    ("membership-report-v1", 0x12, 0, 0),
    ("membership-report-v2", 0x16, 0, 0),
    ("leave-group", 0x17, 0, 0),
    ("membership-report-v3", 0x22, 0, 0),
];

/// The ICMPv6 names.
const ICMPV6_NAMES: IcmpNames = &[
    ("destination-unreachable", 1, 0, 0xff),
    ("no-route", 1, 0, 0),
    ("communication-prohibited", 1, 1, 1),
    ("address-unreachable", 1, 3, 3),
    ("port-unreachable", 1, 4, 4),
    ("packet-too-big", 2, 0, 0xff),
    ("time-exceeded", 3, 0, 0xff),
    ("ttl-zero-during-transit", 3, 0, 0),
    ("ttl-zero-during-reassembly", 3, 1, 1),
    ("parameter-problem", 4, 0, 0xff),
    ("bad-header", 4, 0, 0),
    ("unknown-header-type", 4, 1, 1),
    ("unknown-option", 4, 2, 2),
    ("echo-request", 128, 0, 0xff),
    ("echo-reply", 129, 0, 0xff),
    ("router-solicitation", 133, 0, 0xff),
    ("router-advertisement", 134, 0, 0xff),
    ("neighbour-solicitation", 135, 0, 0xff),
    ("neighbour-advertisement", 136, 0, 0xff),
    ("redirect", 137, 0, 0xff),
];

/// An ICMP (or IGMP, without `code`) type as ebtables prints it: a type range as `A:B`, a single
/// type by the name that covers exactly its code range, else as a number; the code range
/// (`/C` or `/C:D`) follows a number. A name ends with a blank, a number only when a code follows
/// (so an IGMP number runs into what comes next, as ebtables prints it).
fn icmp_type(out: &mut String, names: IcmpNames, types: [u8; 2], code: Option<[u8; 2]>) {
    let codes = |out: &mut String| {
        if let Some([lo, hi]) = code {
            if lo == hi {
                let _ = write!(out, "/{lo} ");
            } else {
                let _ = write!(out, "/{lo}:{hi} ");
            }
        }
    };
    if types[0] != types[1] {
        let _ = write!(out, "{}:{}", types[0], types[1]);
        codes(out);
        return;
    }
    let named = names.iter().find(|(_, t, lo, hi)| {
        *t == types[0] && code.is_none_or(|[clo, chi]| *lo == clo && *hi == chi)
    });
    match named {
        Some((name, ..)) => {
            let _ = write!(out, "{name} ");
        }
        None => {
            let _ = write!(out, "{}", types[0]);
            codes(out);
        }
    }
}

/// The options of the `ip` and `ip6` matches, whose structs differ only in their addresses'
/// width: after the addresses and masks come, at `class_at`, the tos (tclass), the protocol,
/// the option bits, their inversions, then two 4-byte unions: the source port range or the
/// ICMP (IGMP) types, the destination port range or the ICMP codes. `addr` prints the source
/// (`true`) or destination address with its mask; `icmp` names the ICMP types, `igmp` the IGMP
/// ones (`None`: bit 0x80 is not an option of this match).
fn ip_options(
    out: &mut String,
    d: &[u8],
    (opt, class, class_at): (&str, &str, usize),
    (icmp, igmp): (IcmpNames, Option<IcmpNames>),
    addr: impl Fn(&mut String, bool) -> Option<()>,
) -> Option<()> {
    let (bits, inv) = (*d.get(class_at + 2)?, *d.get(class_at + 3)?);
    if bits & 0x80 != 0 && igmp.is_none() {
        return None;
    }
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
        let _ = write!(out, "0x{:02X} ", d.get(class_at)?);
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
    let pair = |at: usize| -> Option<[u8; 2]> { d.get(at..at + 2)?.try_into().ok() };
    if bits & 0x40 != 0 {
        let (types, codes) = (pair(class_at + 4)?, pair(class_at + 8)?);
        let _ = write!(out, "--{opt}-icmp-type ");
        bang(out, inv & 0x40 != 0);
        icmp_type(out, icmp, types, Some(codes));
    }
    if let (true, Some(igmp)) = (bits & 0x80 != 0, igmp) {
        let types = pair(class_at + 4)?;
        let _ = write!(out, "--{opt}-igmp-type ");
        bang(out, inv & 0x80 != 0);
        icmp_type(out, igmp, types, None);
    }
    Some(())
}

/// The options of a match, each followed by a blank; `None`: render it generically.
fn match_text(out: &mut String, m: &Ext<'_>) -> Option<()> {
    let d = m.data;
    // The structs' sizes: data shorter than its struct is not what ebtables wrote.
    let size = match m.name.as_str() {
        "ip" => 28,
        "ip6" => 76,
        "arp" => 52,
        "802_3" => 6,
        "among" => 12,
        "stp" => 72,
        _ => 0,
    };
    if d.len() < size {
        return None;
    }
    match m.name.as_str() {
        "ip" => {
            // struct ebt_ip_info: saddr, daddr, smsk, dmsk, then the common tail at 16.
            ip_options(
                out,
                d,
                ("ip", "tos", 16),
                (ICMP_NAMES, Some(IGMP_NAMES)),
                |out, src| {
                    let (a, m) = if src { (0, 8) } else { (4, 12) };
                    ip_mask(out, ipv4(d, a)?, ipv4(d, m)?);
                    Some(())
                },
            )?;
        }
        "ip6" => {
            // struct ebt_ip6_info: saddr, daddr, smsk, dmsk (16 each), then the common tail at 64.
            let a6 = |at: usize| -> Option<Ipv6Addr> {
                let s: [u8; 16] = d.get(at..at + 16)?.try_into().ok()?;
                Some(Ipv6Addr::from(s))
            };
            ip_options(
                out,
                d,
                ("ip6", "tclass", 64),
                (ICMPV6_NAMES, None),
                |out, src| {
                    let (a, m) = if src { (0, 32) } else { (16, 48) };
                    let (a, m) = (a6(a)?, a6(m)?);
                    let mb = u128::from(m);
                    out.push_str(&ip6_text(&a));
                    if mb == u128::MAX {
                    } else if mb.leading_ones() + mb.trailing_zeros() == 128 {
                        let _ = write!(out, "/{}", mb.leading_ones());
                    } else {
                        let _ = write!(out, "/{}", ip6_text(&m));
                    }
                    Some(())
                },
            )?;
        }
        "arp" => arp(out, d)?,
        "802_3" => {
            // struct ebt_802_3_info: sap, (pad), type (be16), bitmask, invflags.
            let (bits, inv) = (*d.get(4)?, *d.get(5)?);
            let (sap, ty) = (*d.first()?, be16_at(d, 2)?);
            // 0x04 is EBT_802_3, which the kernel lets through and ebtables does not print.
            if bits & !0x07 != 0 {
                return None;
            }
            if bits & 0x01 != 0 {
                out.push_str("--802_3-sap ");
                bang(out, inv & 0x01 != 0);
                let _ = write!(out, "0x{sap:02x} ");
            }
            if bits & 0x02 != 0 {
                out.push_str("--802_3-type ");
                bang(out, inv & 0x02 != 0);
                let _ = write!(out, "0x{ty:04x} ");
            }
        }
        "among" => among(out, d)?,
        "stp" => stp(out, d)?,
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

/// The `arp` match (`struct ebt_arp_info`: htype, ptype, opcode (be16 each), 2 bytes of
/// padding, saddr, smsk, daddr, dmsk, source MAC and mask, target MAC and mask, bitmask,
/// invflags).
fn arp(out: &mut String, d: &[u8]) -> Option<()> {
    const OPCODES: [&str; 9] = [
        "Request",
        "Reply",
        "Request_Reverse",
        "Reply_Reverse",
        "DRARP_Request",
        "DRARP_Reply",
        "DRARP_Error",
        "InARP_Request",
        "ARP_NAK",
    ];
    let (bits, inv) = (*d.get(48)?, *d.get(49)?);
    let opt = |out: &mut String, bit: u8, name: &str| {
        let _ = write!(out, "--arp-{name} ");
        bang(out, inv & bit != 0);
    };
    if bits & 0x01 != 0 {
        opt(out, 0x01, "op");
        let op = be16_at(d, 4)?;
        match OPCODES.get(usize::from(op).wrapping_sub(1)) {
            Some(n) => {
                let _ = write!(out, "{n} ");
            }
            None => {
                let _ = write!(out, "{op} ");
            }
        }
    }
    if bits & 0x02 != 0 {
        opt(out, 0x02, "htype");
        let _ = write!(out, "{} ", be16_at(d, 0)?);
    }
    if bits & 0x04 != 0 {
        opt(out, 0x04, "ptype");
        ethertype(out, be16_at(d, 2)?);
        out.push(' ');
    }
    for (bit, name, a, m) in [(0x08, "ip-src", 8, 12), (0x10, "ip-dst", 16, 20)] {
        if bits & bit != 0 {
            opt(out, bit, name);
            ip_mask(out, ipv4(d, a)?, ipv4(d, m)?);
            out.push(' ');
        }
    }
    for (bit, name, a) in [(0x20, "mac-src", 24), (0x40, "mac-dst", 36)] {
        if bits & bit != 0 {
            opt(out, bit, name);
            mac_and_mask(out, d.get(a..a + 6)?, d.get(a + 6..a + 12)?);
            out.push(' ');
        }
    }
    if bits & 0x80 != 0 {
        bang(out, inv & 0x80 != 0);
        out.push_str("--arp-gratuitous ");
    }
    Some(())
}

/// The `among` match: `struct ebt_among_info` (the offsets, from the data's start, of the
/// destination and source lists, 0 for none; bitmask 1 and 2: each list inverted), then the
/// lists. A list is a `struct ebt_mac_wormhash`: a 257-int index, the tuple count, then the
/// tuples (12 bytes: two bytes of padding, the MAC, the IPv4 address or 0), printed in order as
/// `MAC[=IP],` with a blank after the last. The destination list comes first.
fn among(out: &mut String, d: &[u8]) -> Option<()> {
    const POOL_AT: usize = 257 * 4 + 4;
    let neg = i32_at(d, 8)?;
    for (ofs_at, name, bit) in [(0, "dst", 0x1), (4, "src", 0x2)] {
        let ofs = i32_at(d, ofs_at)?;
        if ofs == 0 {
            continue;
        }
        // As the kernel checks it: past the info and aligned for the list's ints.
        let ofs = usize::try_from(ofs)
            .ok()
            .filter(|&o| o >= 12 && o % 4 == 0)?;
        let n = usize::try_from(i32_at(d, ofs.checked_add(POOL_AT - 4)?)?).ok()?;
        let pool = ofs.checked_add(POOL_AT)?;
        let tuples = d.get(pool..pool.checked_add(n.checked_mul(12)?)?)?;
        let _ = write!(out, "--among-{name} ");
        bang(out, neg & bit != 0);
        for t in tuples.chunks_exact(12) {
            mac(out, &t[2..8]);
            if t[8..12] != [0; 4] {
                let _ = write!(out, "={}.{}.{}.{}", t[8], t[9], t[10], t[11]);
            }
            out.push(',');
        }
        out.push(' ');
    }
    Some(())
}

/// The `stp` match: `struct ebt_stp_info` is the BPDU type, the config (at 4, aligned for its
/// u32s: flags, root prio range, root MAC and mask, root cost range, sender prio range, sender
/// MAC and mask, port, message age, max age, hello time and forward delay ranges), bitmask and
/// invflags (u16 each, at 68). Each option in bit order, as `--NAME [! ]VALUE ` with one more
/// blank after a range (ebtables prints both).
fn stp(out: &mut String, d: &[u8]) -> Option<()> {
    const NAMES: [&str; 12] = [
        "stp-type",
        "stp-flags",
        "stp-root-prio",
        "stp-root-addr",
        "stp-root-cost",
        "stp-sender-prio",
        "stp-sender-addr",
        "stp-port",
        "stp-msg-age",
        "stp-max-age",
        "stp-hello-time",
        "stp-forward-delay",
    ];
    const C: usize = 4;
    let (bits, inv) = (u16_at(d, 68)?, u16_at(d, 70)?);
    if bits & !0x0fff != 0 {
        return None;
    }
    let range = |out: &mut String, lo: u32, hi: u32| {
        if lo == hi {
            let _ = write!(out, "{lo} ");
        } else {
            let _ = write!(out, "{lo}:{hi} ");
        }
    };
    let r16 = |at: usize| -> Option<(u32, u32)> {
        Some((
            u32::from(u16_at(d, C + at)?),
            u32::from(u16_at(d, C + at + 2)?),
        ))
    };
    let maddr = |out: &mut String, at: usize| -> Option<()> {
        mac_and_mask(
            out,
            d.get(C + at..C + at + 6)?,
            d.get(C + at + 6..C + at + 12)?,
        );
        Some(())
    };
    for (i, name) in NAMES.iter().enumerate() {
        let bit = 1u16 << i;
        if bits & bit == 0 {
            continue;
        }
        let _ = write!(out, "--{name} ");
        bang(out, inv & bit != 0);
        match i {
            0 => match *d.first()? {
                0 => out.push_str("config"),
                0x80 => out.push_str("tcn"),
                t => {
                    let _ = write!(out, "{t}");
                }
            },
            1 => match *d.get(C)? {
                0x01 => out.push_str("topology-change"),
                0x80 => out.push_str("topology-change-ack"),
                f => {
                    let _ = write!(out, "{f}");
                }
            },
            2 => {
                let (lo, hi) = r16(2)?;
                range(out, lo, hi);
            }
            3 => maddr(out, 6)?,
            4 => range(out, u32_at(d, C + 20)?, u32_at(d, C + 24)?),
            5 => {
                let (lo, hi) = r16(28)?;
                range(out, lo, hi);
            }
            6 => maddr(out, 32)?,
            _ => {
                // port, msg age, max age, hello time, forward delay: u16 pairs from 44.
                let (lo, hi) = r16(44 + 4 * (i - 7))?;
                range(out, lo, hi);
            }
        }
        out.push(' ');
    }
    Some(())
}

/// The options of a watcher, as ebtables prints them (blanks and all); `None`: render it
/// generically.
fn watcher_text(out: &mut String, w: &Ext<'_>) -> Option<()> {
    let d = w.data;
    let size = match w.name.as_str() {
        "log" => 36,
        "nflog" => 76,
        "ulog" => 44,
        _ => 0,
    };
    if d.len() < size {
        return None;
    }
    match w.name.as_str() {
        "log" => {
            // struct ebt_log_info: loglevel, prefix[30], (pad), u32 bitmask at 32.
            const LEVELS: [&str; 8] = [
                "emerg", "alert", "crit", "error", "warning", "notice", "info", "debug",
            ];
            let level = LEVELS.get(usize::from(*d.first()?))?;
            let prefix = cstr(d.get(1..31)?);
            let bits = u32_at(d, 32)?;
            let _ = write!(out, "--log-level {level} --log-prefix \"{prefix}\"");
            for (bit, opt) in [(0x01, "ip"), (0x02, "arp"), (0x08, "ip6")] {
                if bits & bit != 0 {
                    let _ = write!(out, " --log-{opt}");
                }
            }
            out.push(' ');
        }
        "nflog" => {
            // struct ebt_nflog_info: u32 len, u16 group, threshold, flags, pad, prefix[64].
            // ebtables leaves out the blank after the prefix and the range.
            let (len, group, threshold) = (u32_at(d, 0)?, u16_at(d, 4)?, u16_at(d, 6)?);
            let prefix = cstr(d.get(12..76)?);
            if !prefix.is_empty() {
                let _ = write!(out, "--nflog-prefix \"{prefix}\"");
            }
            if group != 0 {
                let _ = write!(out, "--nflog-group {group} ");
            }
            if len != 0 {
                let _ = write!(out, "--nflog-range {}", len as i32);
            }
            if threshold != 1 {
                let _ = write!(out, " --nflog-threshold {threshold} ");
            }
        }
        "ulog" => {
            // struct ebt_ulog_info: u32 nlgroup, cprange, qthreshold, prefix[32].
            let (group, cprange, qthreshold) = (u32_at(d, 0)?, u32_at(d, 4)?, u32_at(d, 8)?);
            let prefix = cstr(d.get(12..44)?);
            let _ = write!(
                out,
                "--ulog-prefix \"{prefix}\" --ulog-nlgroup {} --ulog-cprange ",
                (group as i32).wrapping_add(1)
            );
            if cprange == 0 {
                out.push_str("default_cprange");
            } else {
                let _ = write!(out, "{}", cprange as i32);
            }
            let _ = write!(out, " --ulog-qthreshold {} ", qthreshold as i32);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(name: &str, data: &[u8]) -> Ext<'static> {
        Ext {
            name: name.to_string(),
            data: Vec::leak(data.to_vec()),
        }
    }

    fn text(f: fn(&mut String, &Ext<'_>) -> Option<()>, name: &str, data: &[u8]) -> Option<String> {
        let mut out = String::new();
        f(&mut out, &ext(name, data))?;
        Some(out)
    }

    /// A well-formed struct of each decoded kind, with the text ebtables prints for it.
    fn samples() -> Vec<(&'static str, bool, Vec<u8>, &'static str)> {
        let mut arp = vec![0u8; 52];
        arp[4..6].copy_from_slice(&1u16.to_be_bytes()); // Request
        arp[8..12].copy_from_slice(&[10, 0, 0, 1]);
        arp[12..16].copy_from_slice(&[255, 255, 255, 0]);
        arp[24..30].copy_from_slice(&[0, 1, 2, 3, 4, 5]);
        arp[30..36].copy_from_slice(&[0xff; 6]);
        (arp[48], arp[49]) = (0x01 | 0x08 | 0x20 | 0x80, 0x08 | 0x80);

        let mut stp = vec![0u8; 72];
        stp[0] = 0x80;
        stp[4 + 2..4 + 4].copy_from_slice(&1u16.to_ne_bytes());
        stp[4 + 4..4 + 6].copy_from_slice(&2u16.to_ne_bytes());
        stp[4 + 20..4 + 24].copy_from_slice(&7u32.to_ne_bytes());
        stp[4 + 24..4 + 28].copy_from_slice(&7u32.to_ne_bytes());
        stp[68..70].copy_from_slice(&(0x01u16 | 0x04 | 0x10).to_ne_bytes());
        stp[70..72].copy_from_slice(&0x10u16.to_ne_bytes());

        let mut among = vec![0u8; 12];
        among[0..4].copy_from_slice(&12i32.to_ne_bytes());
        among[8..12].copy_from_slice(&1i32.to_ne_bytes());
        let mut wh = vec![0u8; 1032];
        wh[1028..1032].copy_from_slice(&2i32.to_ne_bytes());
        among.extend(wh);
        among.extend([0, 0, 0xde, 0xad, 0, 0xbe, 0xee, 0xff, 10, 0, 0, 1]);
        among.extend([0, 0, 0, 1, 2, 3, 4, 5, 0, 0, 0, 0]);

        let mut ip = vec![0u8; 28];
        (ip[18], ip[19]) = (0x08 | 0x80, 0x80);
        ip[17] = 2;
        ip[20..22].copy_from_slice(&[1, 3]);

        let mut ip6 = vec![0u8; 76];
        ip6[65] = 58;
        ip6[66] = 0x08 | 0x40;
        ip6[68..70].copy_from_slice(&[128, 128]);
        ip6[72..74].copy_from_slice(&[0, 0xff]);

        let mut log = vec![0u8; 36];
        log[0] = 5;
        log[1..4].copy_from_slice(b"foo");
        log[32..36].copy_from_slice(&(0x01u32 | 0x08).to_ne_bytes());

        let mut nflog = vec![0u8; 76];
        nflog[0..4].copy_from_slice(&42u32.to_ne_bytes());
        nflog[4..6].copy_from_slice(&1u16.to_ne_bytes());
        nflog[6..8].copy_from_slice(&1u16.to_ne_bytes());
        nflog[12..15].copy_from_slice(b"foo");

        let mut ulog = vec![0u8; 44];
        ulog[8..12].copy_from_slice(&1u32.to_ne_bytes());
        ulog[12..14].copy_from_slice(b"x\xff");

        vec![
            (
                "arp",
                false,
                arp,
                "--arp-op Request --arp-ip-src ! 10.0.0.1/24 --arp-mac-src 0:1:2:3:4:5 ! --arp-gratuitous ",
            ),
            (
                "stp",
                false,
                stp,
                "--stp-type tcn --stp-root-prio 1:2  --stp-root-cost ! 7  ",
            ),
            (
                "among",
                false,
                among,
                "--among-dst ! de:ad:0:be:ee:ff=10.0.0.1,0:1:2:3:4:5, ",
            ),
            ("802_3", false, vec![0x0a, 0, 0x08, 0x00, 0x03, 0x02], "--802_3-sap 0x0a --802_3-type ! 0x0800 "),
            ("ip", false, ip, "--ip-proto igmp --ip-igmp-type ! 1:3"),
            ("ip6", false, ip6, "--ip6-proto ipv6-icmp --ip6-icmp-type echo-request "),
            ("log", true, log, "--log-level notice --log-prefix \"foo\" --log-ip --log-ip6 "),
            ("nflog", true, nflog, "--nflog-prefix \"foo\"--nflog-group 1 --nflog-range 42"),
            (
                "ulog",
                true,
                ulog,
                "--ulog-prefix \"x\u{fffd}\" --ulog-nlgroup 1 --ulog-cprange default_cprange --ulog-qthreshold 1 ",
            ),
        ]
    }

    #[test]
    fn decoders_print_as_ebtables() {
        for (name, watcher, data, want) in samples() {
            let f = if watcher { watcher_text } else { match_text };
            assert_eq!(text(f, name, &data).as_deref(), Some(want), "{name}");
        }
    }

    /// Every truncation of each kind's data is rendered generically or not at all, never a
    /// panic; a cut that removes bytes the text needs gives `None`.
    #[test]
    fn truncated_data_falls_back() {
        for (name, watcher, data, _) in samples() {
            let f = if watcher { watcher_text } else { match_text };
            for len in 0..data.len() {
                assert_eq!(text(f, name, &data[..len]), None, "{name} cut to {len}");
            }
        }
    }

    /// Hostile values: bad offsets and counts in `among`, a log level past the table, unknown
    /// option bits.
    #[test]
    fn hostile_values_fall_back() {
        let none = |f: fn(&mut String, &Ext<'_>) -> Option<()>, name: &str, d: &[u8]| {
            assert_eq!(text(f, name, d), None, "{name} {d:?}");
        };
        for ofs in [-1i32, 1, i32::MAX, 12] {
            let mut d = vec![0u8; 12 + 1032];
            d[4..8].copy_from_slice(&ofs.to_ne_bytes());
            d[12 + 1028..12 + 1032].copy_from_slice(&(-1i32).to_ne_bytes());
            none(match_text, "among", &d);
            d[12 + 1028..12 + 1032].copy_from_slice(&i32::MAX.to_ne_bytes());
            none(match_text, "among", &d);
        }
        let mut log = vec![0u8; 36];
        log[0] = 8;
        none(watcher_text, "log", &log);
        let mut stp = vec![0u8; 72];
        stp[68..70].copy_from_slice(&0x1000u16.to_ne_bytes());
        none(match_text, "stp", &stp);
        let mut ip6 = vec![0u8; 76];
        ip6[66] = 0x80;
        none(match_text, "ip6", &ip6);
        none(match_text, "802_3", &[0, 0, 0, 0, 0x08, 0]);
    }

    /// Through a whole entry: a watcher it cannot read is printed generically, with its bytes.
    #[test]
    fn unreadable_watcher_is_generic() {
        let mut e = vec![0u8; ENTRY_LEN];
        e[0..4].copy_from_slice(&(0x01u32 | 0x02).to_ne_bytes());
        let mut w = vec![0u8; EXT_HEAD];
        w[..3].copy_from_slice(b"log");
        w[32..36].copy_from_slice(&8u32.to_ne_bytes());
        w.extend([9u8, 0, 0, 0, 0, 0, 0, 0]);
        let mut t = vec![0u8; EXT_HEAD];
        t[..8].copy_from_slice(b"standard");
        t[32..36].copy_from_slice(&8u32.to_ne_bytes());
        t.extend((-1i32).to_ne_bytes());
        t.extend([0u8; 4]);
        let target = ENTRY_LEN + w.len();
        let next = target + t.len();
        e[100..104].copy_from_slice(&(ENTRY_LEN as u32).to_ne_bytes());
        e[104..108].copy_from_slice(&(target as u32).to_ne_bytes());
        e[108..112].copy_from_slice(&(next as u32).to_ne_bytes());
        e.extend(w);
        e.extend(t);
        assert_eq!(
            render_entry(&e, 0, &[]).expect("renders"),
            "--watcher log [data 0x0900000000000000] -j ACCEPT"
        );
    }
}
