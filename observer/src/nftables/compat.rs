//! iptables-nft's compat expressions (`match` / `target`: an x_tables extension run inside
//! nf_tables), printed as `nft list ruleset` prints them through libxtables' translations
//! (iptables 1.8.9 + nft 1.0.6 were used as the reference).
//!
//! Decoded here: comment, conntrack (state/status/direction), state, multiport, addrtype,
//! mark, connmark, statistic, icmp, icmp6, tcp, udp, sctp, iprange, pkttype, owner, length,
//! ttl, hl, mac, dscp, helper, cpu, devgroup, quota, ebtables' ip (addresses); targets REJECT,
//! LOG, NFLOG, MARK, CONNMARK, SNAT, DNAT, MASQUERADE, REDIRECT, TCPMSS, CLASSIFY,
//! CT (notrack), NOTRACK, TRACE. Everything else, and any option these decoders do not model, prints as
//! `xt match NAME` / `xt target NAME`, as nft does when there is no translation.
//! Layouts are the uapi structs of include/uapi/linux/netfilter*/xt_*.h (host byte order for
//! plain integers, network order for `__be` fields); a short info blob falls back, never panics.

use super::expr::Attrs;
use super::fields::NFPROTO_IPV6;
use super::renderer::Renderer;
use super::values::{self, Order, Ty};

pub(crate) fn render(r: &mut Renderer<'_>, kind: &str, a: &Attrs<'_>) -> String {
    let name = a.string(1).unwrap_or_default();
    let rev = a.u32(2).unwrap_or(0);
    let info = Info(a.bytes(3).unwrap_or(&[]));
    let text = if kind == "match" {
        match_text(r, &name, rev, &info)
    } else {
        target_text(r, &name, rev, &info)
    };
    text.unwrap_or_else(|| format!("xt {kind} {name}"))
}

/// Bounds-checked reads from an extension's info blob.
struct Info<'a>(&'a [u8]);

impl Info<'_> {
    fn u8(&self, off: usize) -> Option<u8> {
        self.0.get(off).copied()
    }

    fn u16(&self, off: usize) -> Option<u16> {
        let b = self.0.get(off..off + 2)?;
        Some(u16::from_ne_bytes([b[0], b[1]]))
    }

    fn be16(&self, off: usize) -> Option<u16> {
        let b = self.0.get(off..off + 2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&self, off: usize) -> Option<u32> {
        let b = self.0.get(off..off + 4)?;
        Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn bytes(&self, off: usize, len: usize) -> Option<&[u8]> {
        self.0.get(off..off + len)
    }

    fn cstr(&self, off: usize, len: usize) -> Option<String> {
        let b = self.0.get(off..(off + len).min(self.0.len()))?;
        Some(super::nla::string(b))
    }
}

fn match_text(r: &mut Renderer<'_>, name: &str, rev: u32, i: &Info<'_>) -> Option<String> {
    match (name, rev) {
        ("comment", _) => {
            r.comment(i.cstr(0, 256)?);
            Some(String::new())
        }
        ("conntrack", 1..=3) => conntrack(i, rev),
        ("state", _) => {
            let mask = i.u32(0)?;
            Some(format!("ct state {}", ct_states(mask)))
        }
        ("multiport", 0 | 1) => multiport(r, i, rev),
        ("addrtype", 1) => {
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
        ("addrtype", 0) => {
            let (src, dst) = (i.u16(0)?, i.u16(2)?);
            addrtype(src, dst, i.u32(4)? != 0, i.u32(8)? != 0, false, false)
        }
        ("mark", 1) => {
            let (mark, mask, inv) = (i.u32(0)?, i.u32(4)?, i.u8(8)? != 0);
            Some(format!("mark{}", mark_cmp(mark, mask, inv)))
        }
        ("connmark", 1) => {
            let (mark, mask, inv) = (i.u32(0)?, i.u32(4)?, i.u8(8)? != 0);
            Some(format!("ct mark{}", mark_cmp(mark, mask, inv)))
        }
        ("statistic", 0) => {
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
        ("icmp", 0) | ("icmp6", 0) => {
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
        ("tcp", 0) => {
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
        ("udp", 0) => Some(ports_parts("udp", i, i.u8(8)?)?.join(" ")),
        ("iprange", 1) => {
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
        ("pkttype", 0) => {
            let ne = if i.u32(4)? != 0 { "!= " } else { "" };
            let t = i.u32(0)?;
            let name = values::format(Ty::PktType, Order::Big, &[u8::try_from(t).ok()?]);
            Some(format!("pkttype {ne}{name}"))
        }
        ("owner", 1) => {
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
        ("length", 0) => {
            let (lo, hi, inv) = (i.u16(0)?, i.u16(2)?, i.u8(4)? != 0);
            let ne = if inv { "!= " } else { "" };
            let v = if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            };
            Some(format!("meta length {ne}{v}"))
        }
        ("sctp", _) => {
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
        ("mac", 0) => {
            let ne = if i.u32(8)? != 0 { "!= " } else { "" };
            let mac = values::format(Ty::EtherAddr, Order::Big, i.bytes(0, 6)?);
            Some(format!("ether saddr {ne}{mac}"))
        }
        ("dscp", 0) => {
            let ne = if i.u8(1)? != 0 { "!= " } else { "" };
            let proto = if r.family == NFPROTO_IPV6 {
                "ip6"
            } else {
                "ip"
            };
            Some(format!("{proto} dscp {ne}0x{:02x}", i.u8(0)?))
        }
        ("helper", 0) => {
            let ne = if i.u32(0)? != 0 { "!= " } else { "" };
            Some(format!("ct helper {ne}\"{}\"", i.cstr(4, 30)?))
        }
        ("cpu", 0) => {
            let ne = if i.u32(4)? != 0 { "!= " } else { "" };
            Some(format!("cpu {ne}{}", i.u32(0)?))
        }
        ("devgroup", 0) => {
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
        ("quota", 0) => {
            let over = if i.u32(0)? & 1 != 0 { "over " } else { "" };
            let b = i.bytes(8, 8)?;
            let bytes = u64::from_ne_bytes(<[u8; 8]>::try_from(b).ok()?);
            Some(format!("quota {over}{bytes} bytes"))
        }
        ("ip", 0) if r.family == 7 => {
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
        ("ttl", 0) | ("hl", 0) => {
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
        _ => None,
    }
}

fn target_text(r: &mut Renderer<'_>, name: &str, rev: u32, i: &Info<'_>) -> Option<String> {
    let v6 = r.family == NFPROTO_IPV6;
    match (name, rev) {
        ("REJECT", 0) => {
            let with = i.u32(0)?;
            let (tcp_reset, default, names): (u32, u32, &[&str]) = if v6 {
                (
                    6,
                    4,
                    &[
                        "no-route",
                        "admin-prohibited",
                        "",
                        "addr-unreachable",
                        "port-unreachable",
                        "",
                        "",
                        "policy-fail",
                        "reject-route",
                    ],
                )
            } else {
                (
                    7,
                    3,
                    &[
                        "net-unreachable",
                        "host-unreachable",
                        "prot-unreachable",
                        "port-unreachable",
                        "",
                        "net-prohibited",
                        "host-prohibited",
                        "",
                        "admin-prohibited",
                    ],
                )
            };
            if with == tcp_reset {
                return Some("reject with tcp reset".into());
            }
            if with == default {
                return Some("reject".into());
            }
            let n = names.get(with as usize).filter(|n| !n.is_empty())?;
            let proto = if v6 { "icmpv6" } else { "icmp" };
            Some(format!("reject with {proto} type {n}"))
        }
        ("LOG", 0) => {
            let (level, flags) = (i.u8(0)?, i.u8(1)?);
            let prefix = i.cstr(2, 30)?;
            let mut text = "log".to_string();
            if !prefix.is_empty() {
                text = format!("{text} prefix \"{prefix}\"");
            }
            if level != 4 {
                const LEVELS: [&str; 8] = [
                    "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug",
                ];
                text = format!("{text} level {}", LEVELS.get(level as usize)?);
            }
            values::push_log_flags(&mut text, u32::from(flags));
            Some(text)
        }
        ("NFLOG", 0) => {
            let (len, group, threshold, flags) = (i.u32(0)?, i.u16(4)?, i.u16(6)?, i.u16(8)?);
            let prefix = i.cstr(12, 64)?;
            let mut text = "log".to_string();
            if !prefix.is_empty() {
                text = format!("{text} prefix \"{prefix}\"");
            }
            if flags & 1 != 0 {
                text = format!("{text} snaplen {len}");
            }
            if threshold != 0 {
                text = format!("{text} queue-threshold {threshold}");
            }
            Some(format!("{text} group {group}"))
        }
        ("MARK", 2) => Some(format!(
            "meta mark set {}",
            mark_set("mark", i.u32(0)?, i.u32(4)?)
        )),
        ("CONNMARK", 1 | 2) => {
            let (ctmark, ctmask, nfmask) = (i.u32(0)?, i.u32(4)?, i.u32(8)?);
            let mode = if rev == 1 {
                i.u8(12)?
            } else {
                if i.u8(13)? != 0 {
                    return None; // shifted marks
                }
                i.u8(14)?
            };
            match mode {
                0 => Some(format!(
                    "ct mark set {}",
                    mark_set("ct mark", ctmark, ctmask)
                )),
                1 if ctmask == u32::MAX && nfmask == u32::MAX => Some("ct mark set mark".into()),
                2 if ctmask == u32::MAX && nfmask == u32::MAX => {
                    Some("meta mark set ct mark".into())
                }
                _ => None,
            }
        }
        ("SNAT" | "DNAT", 0) => {
            let range = compat_range(i)?;
            Some(nat_text(&name.to_lowercase(), &range))
        }
        ("SNAT" | "DNAT", 1 | 2) => {
            let range = full_range(i, v6)?;
            Some(nat_text(&name.to_lowercase(), &range))
        }
        ("MASQUERADE" | "REDIRECT", 0) => {
            let mut range = if v6 {
                full_range(i, true)?
            } else {
                compat_range(i)?
            };
            range.addr = None;
            let word = if name == "MASQUERADE" {
                "masquerade"
            } else {
                "redirect"
            };
            Some(nat_text(word, &range))
        }
        ("TCPMSS", 0) => match i.u16(0)? {
            u16::MAX => Some("tcp option maxseg size set rt mtu".into()),
            mss => Some(format!("tcp option maxseg size set {mss}")),
        },
        ("CLASSIFY", 0) => {
            let p = i.u32(0)?;
            Some(format!("meta priority set {:x}:{:x}", p >> 16, p & 0xffff))
        }
        ("CT", 1 | 2) if i.u16(0)? & 1 != 0 => Some("notrack".into()),
        ("NOTRACK", _) => Some("notrack".into()),
        ("TRACE", _) => Some("meta nftrace set 1".into()),
        _ => None,
    }
}

/// XT_CONNTRACK_* match flags this decoder models: state, status, direction, state alias.
const CT_MODELLED: u16 = 1 | (1 << 6) | (1 << 12) | (1 << 13);

fn conntrack(i: &Info<'_>, rev: u32) -> Option<String> {
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
fn ct_states(mask: u32) -> String {
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
fn mark_cmp(mark: u32, mask: u32, inv: bool) -> String {
    if mask == u32::MAX {
        let ne = if inv { "!= " } else { "" };
        format!(" {ne}0x{mark:x}")
    } else {
        let op = if inv { "!=" } else { "==" };
        format!(" and 0x{mask:x} {op} 0x{mark:x}")
    }
}

/// The value of `meta mark set` / `ct mark set` for an x_tables (mark, mask) pair.
fn mark_set(field: &str, mark: u32, mask: u32) -> String {
    if mark == 0 {
        format!("{field} and 0x{:x}", !mask)
    } else if mark == mask {
        format!("{field} or 0x{mark:x}")
    } else if mask == 0 {
        format!("{field} xor 0x{mark:x}")
    } else if mask == u32::MAX {
        format!("0x{mark:x}")
    } else {
        format!("{field} and 0x{:x} xor 0x{mark:x}", !mask)
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

struct NatRange {
    flags: u32,
    addr: Option<(String, String)>,
    ports: Option<(u16, u16)>,
    v6: bool,
}

/// `struct nf_nat_ipv4_multi_range_compat` (rev 0 IPv4 NAT targets).
fn compat_range(i: &Info<'_>) -> Option<NatRange> {
    let flags = i.u32(4)?;
    let ip = |off| values::format(Ty::Ipv4, Order::Big, i.bytes(off, 4).unwrap_or(&[]));
    Some(NatRange {
        flags,
        addr: (flags & 1 != 0).then(|| (ip(8), ip(12))),
        ports: (flags & 2 != 0)
            .then(|| Some((i.be16(16)?, i.be16(18)?)))
            .flatten(),
        v6: false,
    })
}

/// `struct nf_nat_range` / `nf_nat_range2` (rev 1/2 NAT targets, all IPv6 NAT targets).
fn full_range(i: &Info<'_>, v6: bool) -> Option<NatRange> {
    let flags = i.u32(0)?;
    let (ty, len) = if v6 { (Ty::Ipv6, 16) } else { (Ty::Ipv4, 4) };
    let addr = |off| values::format(ty, Order::Big, i.bytes(off, len).unwrap_or(&[]));
    Some(NatRange {
        flags,
        addr: (flags & 1 != 0).then(|| (addr(4), addr(20))),
        ports: (flags & 2 != 0)
            .then(|| Some((i.be16(36)?, i.be16(38)?)))
            .flatten(),
        v6,
    })
}

fn nat_text(word: &str, r: &NatRange) -> String {
    let mut text = word.to_string();
    let ports = r.ports.map(|(lo, hi)| {
        if lo == hi {
            lo.to_string()
        } else {
            format!("{lo}-{hi}")
        }
    });
    let addr = r.addr.as_ref().map(|(lo, hi)| {
        if lo == hi {
            lo.clone()
        } else {
            format!("{lo}-{hi}")
        }
    });
    match (addr, ports) {
        (Some(a), Some(p)) if r.v6 => text = format!("{text} to [{a}]:{p}"),
        (Some(a), Some(p)) => text = format!("{text} to {a}:{p}"),
        (Some(a), None) => text = format!("{text} to {a}"),
        (None, Some(p)) => text = format!("{text} to :{p}"),
        (None, None) => {}
    }
    let mut flags = Vec::new();
    if r.flags & 0x4 != 0 {
        flags.push("random");
    }
    if r.flags & 0x10 != 0 {
        flags.push("fully-random");
    }
    if r.flags & 0x8 != 0 {
        flags.push("persistent");
    }
    if !flags.is_empty() {
        text = format!("{text} {}", flags.join(","));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mark_translations_follow_iptables() {
        assert_eq!(mark_set("mark", 0x10, u32::MAX), "0x10");
        assert_eq!(mark_set("mark", 0x10, 0xff), "mark and 0xffffff00 xor 0x10");
        assert_eq!(mark_set("mark", 0, !0xff), "mark and 0xff");
        assert_eq!(mark_set("mark", 0x4000, 0x4000), "mark or 0x4000");
        assert_eq!(mark_set("mark", 1, 0), "mark xor 0x1");
        assert_eq!(mark_cmp(1, 1, false), " and 0x1 == 0x1");
        assert_eq!(ct_states(2 | 4), "related,established");
    }

    #[test]
    fn short_info_falls_back() {
        let i = Info(&[1, 2]);
        assert!(conntrack(&i, 3).is_none());
        assert!(compat_range(&i).is_none());
    }
}
