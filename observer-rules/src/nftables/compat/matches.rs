//! iptables-nft's `match` expressions, printed as nft prints them through libxtables'
//! translations: comment, conntrack (state/status/direction), state, multiport, addrtype,
//! mark, connmark, statistic, icmp, icmp6, tcp, udp, sctp, iprange, pkttype, owner, length,
//! ttl, hl, mac, dscp, helper, cpu, devgroup, quota, ebtables' ip (addresses). `None` for any
//! other match, revision or option these decoders do not model.
//!
//! Layering: called by `compat`; imports `info` and the renderer's state (`renderer`)
//! and what is below it.

use crate::nftables::compat::info::Info;
use crate::nftables::render::fields::NFPROTO_IPV6;
use crate::nftables::render::renderer::Renderer;
use crate::nftables::render::values::{self, Order, Ty};

pub(crate) fn match_text(
    r: &mut Renderer<'_>,
    name: &str,
    rev: u32,
    i: &Info<'_>,
) -> Option<String> {
    match (name, rev) {
        ("comment", _) => comment_match(r, i),
        ("conntrack", 1..=3) => conntrack(i, rev),
        ("state", _) => state_match(i),
        ("multiport", 0 | 1) => multiport(r, i, rev),
        ("addrtype", 1) => addrtype_match(i),
        ("addrtype", 0) => addrtype_v0_match(i),
        ("mark", 1) => mark_match(i),
        ("connmark", 1) => connmark_match(i),
        ("statistic", 0) => statistic_match(i),
        ("icmp", 0) | ("icmp6", 0) => icmp_match(name, i),
        ("tcp", 0) => tcp_match(i),
        ("udp", 0) => Some(ports_parts("udp", i, i.u8(8)?)?.join(" ")),
        ("iprange", 1) => iprange_match(r, i),
        ("pkttype", 0) => pkttype_match(i),
        ("owner", 1) => owner_match(i),
        ("length", 0) => length_match(i),
        ("sctp", _) => sctp_match(i),
        ("mac", 0) => mac_match(i),
        ("dscp", 0) => dscp_match(r, i),
        ("helper", 0) => helper_match(i),
        ("cpu", 0) => cpu_match(i),
        ("devgroup", 0) => devgroup_match(i),
        ("quota", 0) => quota_match(i),
        ("ip", 0) if r.family == 7 => ip_match(i),
        ("ttl", 0) | ("hl", 0) => ttl_hl_match(name, i),
        _ => None,
    }
}

/// The `comment` match.
fn comment_match(r: &mut Renderer<'_>, i: &Info<'_>) -> Option<String> {
    r.comment(i.cstr(0, 256)?);
    Some(String::new())
}

/// The `state` match.
fn state_match(i: &Info<'_>) -> Option<String> {
    let mask = i.u32(0)?;
    Some(format!("ct state {}", ct_states(mask)))
}

/// The `addrtype` revision 1 match.
fn addrtype_match(i: &Info<'_>) -> Option<String> {
    let (src, dst, flags) = (i.u16(0)?, i.u16(2)?, i.u32(4)?);
    addrtype(
        src,
        dst,
        flags & 1 != 0,
        flags & 2 != 0,
        flags & 4 != 0,
        flags & 8 != 0,
    )
}

/// The `addrtype` revision 0 match.
fn addrtype_v0_match(i: &Info<'_>) -> Option<String> {
    let (src, dst) = (i.u16(0)?, i.u16(2)?);
    addrtype(src, dst, i.u32(4)? != 0, i.u32(8)? != 0, false, false)
}

/// The `mark` revision 1 match.
fn mark_match(i: &Info<'_>) -> Option<String> {
    let (mark, mask, inv) = (i.u32(0)?, i.u32(4)?, i.u8(8)? != 0);
    Some(format!("mark{}", mark_cmp(mark, mask, inv)))
}

/// The `connmark` revision 1 match.
fn connmark_match(i: &Info<'_>) -> Option<String> {
    let (mark, mask, inv) = (i.u32(0)?, i.u32(4)?, i.u8(8)? != 0);
    Some(format!("ct mark{}", mark_cmp(mark, mask, inv)))
}

/// The `statistic` revision 0 match.
fn statistic_match(i: &Info<'_>) -> Option<String> {
    let (mode, inv) = (i.u16(0)?, i.u16(2)? & 1 != 0);
    match mode {
        0 => {
            let op = if inv { ">=" } else { "<" };
            Some(format!("meta random & 2147483647 {op} {}", i.u32(4)?))
        }
        1 => {
            let ne = if inv { "!= " } else { "" };
            let every = u64::from(i.u32(4)?) + 1;
            Some(format!("numgen inc mod {every} {ne}{}", i.u32(8)?))
        }
        _ => None,
    }
}

/// The `icmp` revision 0 and `icmp6` revision 0 matches.
fn icmp_match(name: &str, i: &Info<'_>) -> Option<String> {
    let (ty, lo, hi, inv) = (i.u8(0)?, i.u8(1)?, i.u8(2)?, i.u8(3)? & 1 != 0);
    let v6 = name == "icmp6";
    if ty == 0xff && !v6 {
        return Some("ip protocol icmp".into());
    }
    if (lo, hi) != (0, 0xff) {
        return None;
    }
    let (proto, t) = if v6 {
        ("icmpv6", Ty::Icmp6Type)
    } else {
        ("icmp", Ty::IcmpType)
    };
    let ne = if inv { "!= " } else { "" };
    Some(format!(
        "{proto} type {ne}{}",
        values::format(t, Order::Big, &[ty])
    ))
}

/// The `tcp` revision 0 match.
fn tcp_match(i: &Info<'_>) -> Option<String> {
    let inv = i.u8(11)?;
    if i.u8(8)? != 0 {
        return None; // --tcp-option
    }
    let mut parts = ports_parts("tcp", i, inv)?;
    let (mask, cmp) = (i.u8(9)?, i.u8(10)?);
    if mask != 0 {
        let ne = if inv & 4 != 0 { "!= " } else { "" };
        parts.push(format!(
            "tcp flags {ne}{} / {}",
            values::flags(Ty::TcpFlags, u64::from(cmp)),
            values::flags(Ty::TcpFlags, u64::from(mask))
        ));
    }
    Some(parts.join(" "))
}

/// The `iprange` revision 1 match.
fn iprange_match(r: &mut Renderer<'_>, i: &Info<'_>) -> Option<String> {
    let v6 = r.family == NFPROTO_IPV6;
    let (ty, len, proto) = if v6 {
        (Ty::Ipv6, 16, "ip6")
    } else {
        (Ty::Ipv4, 4, "ip")
    };
    let flags = i.u8(64)?;
    let mut parts = Vec::new();
    for (bit, inv, off, dir) in [(1, 0x10, 0, "saddr"), (2, 0x20, 32, "daddr")] {
        if flags & bit != 0 {
            let lo = values::format(ty, Order::Big, i.bytes(off, len)?);
            let hi = values::format(ty, Order::Big, i.bytes(off + 16, len)?);
            let ne = if flags & inv != 0 { "!= " } else { "" };
            parts.push(format!("{proto} {dir} {ne}{lo}-{hi}"));
        }
    }
    Some(parts.join(" "))
}

/// The `pkttype` revision 0 match.
fn pkttype_match(i: &Info<'_>) -> Option<String> {
    let ne = if i.u32(4)? != 0 { "!= " } else { "" };
    let t = i.u32(0)?;
    let name = values::format(Ty::PktType, Order::Big, &[u8::try_from(t).ok()?]);
    Some(format!("pkttype {ne}{name}"))
}

/// The `owner` revision 1 match.
fn owner_match(i: &Info<'_>) -> Option<String> {
    let (what, inv) = (i.u8(16)?, i.u8(17)?);
    if what & !3 != 0 {
        return None;
    }
    let mut parts = Vec::new();
    for (bit, off, key) in [(1u8, 0, "skuid"), (2, 8, "skgid")] {
        if what & bit != 0 {
            let (lo, hi) = (i.u32(off)?, i.u32(off + 4)?);
            let ne = if inv & bit != 0 { "!= " } else { "" };
            let v = if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            };
            parts.push(format!("{key} {ne}{v}"));
        }
    }
    Some(parts.join(" "))
}

/// The `length` revision 0 match.
fn length_match(i: &Info<'_>) -> Option<String> {
    let (lo, hi, inv) = (i.u16(0)?, i.u16(2)?, i.u8(4)? != 0);
    let ne = if inv { "!= " } else { "" };
    let v = if lo == hi {
        lo.to_string()
    } else {
        format!("{lo}-{hi}")
    };
    Some(format!("meta length {ne}{v}"))
}

/// The `sctp` match.
fn sctp_match(i: &Info<'_>) -> Option<String> {
    // xt_sctp_info: dpts[2] then spts[2]; chunk matching is not modelled.
    let (flags, inv) = (i.u32(284)?, i.u32(288)?);
    if flags & !3 != 0 {
        return None;
    }
    let mut parts = Vec::new();
    for (bit, off, dir) in [(1u32, 4, "sport"), (2, 0, "dport")] {
        if flags & bit != 0 {
            let (lo, hi) = (i.u16(off)?, i.u16(off + 2)?);
            let ne = if inv & bit != 0 { "!= " } else { "" };
            let v = if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            };
            parts.push(format!("sctp {dir} {ne}{v}"));
        }
    }
    Some(parts.join(" "))
}

/// The `mac` revision 0 match.
fn mac_match(i: &Info<'_>) -> Option<String> {
    let ne = if i.u32(8)? != 0 { "!= " } else { "" };
    let mac = values::format(Ty::EtherAddr, Order::Big, i.bytes(0, 6)?);
    Some(format!("ether saddr {ne}{mac}"))
}

/// The `dscp` revision 0 match.
fn dscp_match(r: &mut Renderer<'_>, i: &Info<'_>) -> Option<String> {
    let ne = if i.u8(1)? != 0 { "!= " } else { "" };
    let proto = if r.family == NFPROTO_IPV6 {
        "ip6"
    } else {
        "ip"
    };
    Some(format!("{proto} dscp {ne}0x{:02x}", i.u8(0)?))
}

/// The `helper` revision 0 match.
fn helper_match(i: &Info<'_>) -> Option<String> {
    let ne = if i.u32(0)? != 0 { "!= " } else { "" };
    Some(format!("ct helper {ne}\"{}\"", i.cstr(4, 30)?))
}

/// The `cpu` revision 0 match.
fn cpu_match(i: &Info<'_>) -> Option<String> {
    let ne = if i.u32(4)? != 0 { "!= " } else { "" };
    Some(format!("cpu {ne}{}", i.u32(0)?))
}

/// The `devgroup` revision 0 match.
fn devgroup_match(i: &Info<'_>) -> Option<String> {
    let flags = i.u32(0)?;
    let mut parts = Vec::new();
    for (bit, inv, off, key) in [(1, 4, 4, "iifgroup"), (2, 8, 12, "oifgroup")] {
        if flags & bit != 0 {
            if i.u32(off + 4)? != u32::MAX {
                return None;
            }
            let ne = if flags & inv != 0 { "!= " } else { "" };
            parts.push(format!("{key} {ne}0x{:x}", i.u32(off)?));
        }
    }
    Some(parts.join(" "))
}

/// The `quota` revision 0 match.
fn quota_match(i: &Info<'_>) -> Option<String> {
    let over = if i.u32(0)? & 1 != 0 { "over " } else { "" };
    let b = i.bytes(8, 8)?;
    let bytes = u64::from_ne_bytes(<[u8; 8]>::try_from(b).ok()?);
    Some(format!("quota {over}{bytes} bytes"))
}

/// The `ip` revision 0 match (ebtables' ip).
fn ip_match(i: &Info<'_>) -> Option<String> {
    // ebtables' ip match: only addresses are modelled.
    let (bits, inv) = (i.u8(18)?, i.u8(19)?);
    if bits & !3 != 0 {
        return None;
    }
    let mut parts = Vec::new();
    for (bit, off, dir) in [(1u8, 0, "saddr"), (2, 4, "daddr")] {
        if bits & bit != 0 {
            let addr = i.bytes(off, 4)?;
            let plen = values::prefix_len(i.bytes(off + 8, 4)?)?;
            let ne = if inv & bit != 0 { "!= " } else { "" };
            let v = if plen == 32 {
                values::format(Ty::Ipv4, Order::Big, addr)
            } else {
                values::prefix(Ty::Ipv4, addr, plen)
            };
            parts.push(format!("ip {dir} {ne}{v}"));
        }
    }
    Some(parts.join(" "))
}

/// The `ttl` revision 0 and `hl` revision 0 matches.
fn ttl_hl_match(name: &str, i: &Info<'_>) -> Option<String> {
    let field = if name == "ttl" {
        "ip ttl"
    } else {
        "ip6 hoplimit"
    };
    let op = match i.u8(0)? {
        0 => "",
        1 => "!= ",
        2 => "< ",
        3 => "> ",
        _ => return None,
    };
    Some(format!("{field} {op}{}", i.u8(1)?))
}

/// XT_CONNTRACK_* match flags this decoder models: state, status, direction, state alias.
const CT_MODELLED: u16 = 1 | (1 << 6) | (1 << 12) | (1 << 13);

pub(crate) fn conntrack(i: &Info<'_>, rev: u32) -> Option<String> {
    let (flags, inv) = (i.u16(146)?, i.u16(148)?);
    if flags & !CT_MODELLED != 0 {
        return None;
    }
    let (state, status) = if rev == 1 {
        (u32::from(i.u8(150)?), u32::from(i.u8(151)?))
    } else {
        (u32::from(i.u16(150)?), u32::from(i.u16(152)?))
    };
    let mut parts = Vec::new();
    if flags & 1 != 0 {
        // XT_CONNTRACK_STATE_SNAT / _DNAT are conntrack status bits in nft.
        if state & (64 | 128) != 0 {
            let ne = if inv & (1 << 6) != 0 { "!=" } else { "" };
            let which = if state & 64 != 0 { "snat" } else { "dnat" };
            parts.push(format!("ct status {ne}{which}"));
        } else {
            let not = if inv & 1 != 0 { "! " } else { "" };
            parts.push(format!("ct state {not}{}", ct_states(state)));
        }
    }
    if flags & (1 << 6) != 0 {
        let not = if inv & (1 << 6) != 0 { "! " } else { "" };
        let mut names = Vec::new();
        for (bit, n) in [
            (1, "expected"),
            (2, "seen-reply"),
            (4, "assured"),
            (8, "confirmed"),
        ] {
            if status & bit != 0 {
                names.push(n);
            }
        }
        parts.push(format!("ct status {not}{}", names.join(",")));
    }
    if flags & (1 << 12) != 0 {
        let dir = if inv & (1 << 12) != 0 {
            "reply"
        } else {
            "original"
        };
        parts.push(format!("ct direction {dir}"));
    }
    Some(parts.join(" "))
}

/// conntrack/state match states (XT_CONNTRACK_STATE_BIT), in iptables' translation order.
pub(crate) fn ct_states(mask: u32) -> String {
    let mut names = Vec::new();
    for (bit, n) in [
        (1, "invalid"),
        (8, "new"),
        (4, "related"),
        (2, "established"),
        (256, "untracked"),
        (64, "untracked"),
    ] {
        if mask & bit != 0 && !names.contains(&n) {
            names.push(n);
        }
    }
    names.join(",")
}

fn l4_name(r: &Renderer<'_>) -> &'static str {
    match r.l4 {
        Some(6) => "tcp",
        Some(17) => "udp",
        Some(132) => "sctp",
        Some(33) => "dccp",
        Some(136) => "udplite",
        _ => "th",
    }
}

fn multiport(r: &Renderer<'_>, i: &Info<'_>, rev: u32) -> Option<String> {
    let (flags, count) = (i.u8(0)?, usize::from(i.u8(1)?).min(15));
    let proto = l4_name(r);
    let mut items = Vec::new();
    let mut k = 0;
    while k < count {
        let p = i.u16(2 + 2 * k)?;
        let ranged = rev == 1 && i.u8(32 + k)? != 0 && k + 1 < count;
        if ranged {
            items.push(format!("{p}-{}", i.u16(2 + 2 * (k + 1))?));
            k += 2;
        } else {
            items.push(p.to_string());
            k += 1;
        }
    }
    let inv = rev == 1 && i.u8(47)? != 0;
    let ne = if inv { "!= " } else { "" };
    let (lhs, items) = match flags {
        0 => (format!("{proto} sport"), items),
        1 => (format!("{proto} dport"), items),
        2 => (
            format!("{proto} sport . {proto} dport"),
            items
                .iter()
                .flat_map(|p| [format!("0-65535 . {p}"), format!("{p} . 0-65535")])
                .collect(),
        ),
        _ => return None,
    };
    if items.len() == 1 {
        Some(format!("{lhs} {ne}{}", items[0]))
    } else {
        Some(format!("{lhs} {ne}{{ {} }}", items.join(", ")))
    }
}

fn addrtype(
    src: u16,
    dst: u16,
    inv_src: bool,
    inv_dst: bool,
    iif: bool,
    oif: bool,
) -> Option<String> {
    const TYPES: [&str; 9] = [
        "unspec",
        "unicast",
        "local",
        "broadcast",
        "anycast",
        "multicast",
        "blackhole",
        "unreachable",
        "prohibit",
    ];
    let mut parts = Vec::new();
    for (mask, inv, dir) in [(src, inv_src, "saddr"), (dst, inv_dst, "daddr")] {
        if mask == 0 {
            continue;
        }
        if mask >> TYPES.len() != 0 {
            return None;
        }
        let names: Vec<&str> = (0..TYPES.len())
            .filter(|b| mask & (1 << b) != 0)
            .map(|b| TYPES[b])
            .collect();
        let mut key = dir.to_string();
        if iif {
            key.push_str(" . iif");
        }
        if oif {
            key.push_str(" . oif");
        }
        let ne = if inv { "!= " } else { "" };
        let value = if names.len() == 1 {
            names[0].to_string()
        } else {
            format!("{{ {} }}", names.join(", "))
        };
        parts.push(format!("fib {key} type {ne}{value}"));
    }
    Some(parts.join(" "))
}

/// ` 0x1` / ` != 0x1` / ` and 0xff == 0x1` after `mark` or `ct mark`.
pub(crate) fn mark_cmp(mark: u32, mask: u32, inv: bool) -> String {
    if mask == u32::MAX {
        let ne = if inv { "!= " } else { "" };
        format!(" {ne}0x{mark:x}")
    } else {
        let op = if inv { "!=" } else { "==" };
        format!(" and 0x{mask:x} {op} 0x{mark:x}")
    }
}

/// `tcp sport 1-1024 tcp dport 80` from an xt_tcp/xt_udp port pair block.
fn ports_parts(proto: &str, i: &Info<'_>, inv: u8) -> Option<Vec<String>> {
    let mut parts = Vec::new();
    for (off, bit, dir) in [(0, 1u8, "sport"), (4, 2, "dport")] {
        let (lo, hi) = (i.u16(off)?, i.u16(off + 2)?);
        if (lo, hi) == (0, u16::MAX) {
            continue;
        }
        let ne = if inv & bit != 0 { "!= " } else { "" };
        let v = if lo == hi {
            lo.to_string()
        } else {
            format!("{lo}-{hi}")
        };
        parts.push(format!("{proto} {dir} {ne}{v}"));
    }
    Some(parts)
}
