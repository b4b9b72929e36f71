//! iptables-nft's `target` expressions, printed as nft prints them through libxtables'
//! translations: REJECT, LOG, NFLOG, MARK, CONNMARK, SNAT, DNAT, MASQUERADE, REDIRECT, TCPMSS,
//! CLASSIFY, CT (notrack), NOTRACK, TRACE. `None` for any other target, revision or option
//! these decoders do not model.
//!
//! Layering: called by `compat`; imports `info` and the renderer's state (`renderer`)
//! and what is below it.

use crate::nftables::compat::info::Info;
use crate::nftables::render::fields::NFPROTO_IPV6;
use crate::nftables::render::renderer::Renderer;
use crate::nftables::render::values::{self, Order, Ty};

pub(crate) fn target_text(
    r: &mut Renderer<'_>,
    name: &str,
    rev: u32,
    i: &Info<'_>,
) -> Option<String> {
    let v6 = r.family == NFPROTO_IPV6;
    match (name, rev) {
        ("REJECT", 0) => reject_target(i, v6),
        ("LOG", 0) => log_target(i),
        ("NFLOG", 0) => nflog_target(i),
        ("MARK", 2) => Some(format!(
            "meta mark set {}",
            mark_set("mark", i.u32(0)?, i.u32(4)?)
        )),
        ("CONNMARK", 1 | 2) => connmark_target(rev, i),
        ("SNAT" | "DNAT", 0) => nat_compat_target(name, i),
        ("SNAT" | "DNAT", 1 | 2) => nat_target(name, i, v6),
        ("MASQUERADE" | "REDIRECT", 0) => masquerade_redirect_target(name, i, v6),
        ("TCPMSS", 0) => match i.u16(0)? {
            u16::MAX => Some("tcp option maxseg size set rt mtu".into()),
            mss => Some(format!("tcp option maxseg size set {mss}")),
        },
        ("CLASSIFY", 0) => classify_target(i),
        ("CT", 1 | 2) if i.u16(0)? & 1 != 0 => Some("notrack".into()),
        ("NOTRACK", _) => Some("notrack".into()),
        ("TRACE", _) => Some("meta nftrace set 1".into()),
        _ => None,
    }
}

/// The `REJECT` target (`("REJECT", 0)`).
fn reject_target(i: &Info<'_>, v6: bool) -> Option<String> {
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

/// The `LOG` target (`("LOG", 0)`).
fn log_target(i: &Info<'_>) -> Option<String> {
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

/// The `NFLOG` target (`("NFLOG", 0)`).
fn nflog_target(i: &Info<'_>) -> Option<String> {
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

/// The `CONNMARK` target (`("CONNMARK", 1 | 2)`).
fn connmark_target(rev: u32, i: &Info<'_>) -> Option<String> {
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
        2 if ctmask == u32::MAX && nfmask == u32::MAX => Some("meta mark set ct mark".into()),
        _ => None,
    }
}

/// The `SNAT` and `DNAT` targets (`("SNAT" | "DNAT", 0)`).
fn nat_compat_target(name: &str, i: &Info<'_>) -> Option<String> {
    let range = compat_range(i)?;
    Some(nat_text(&name.to_lowercase(), &range))
}

/// The `SNAT` and `DNAT` targets (`("SNAT" | "DNAT", 1 | 2)`).
fn nat_target(name: &str, i: &Info<'_>, v6: bool) -> Option<String> {
    let range = full_range(i, v6)?;
    Some(nat_text(&name.to_lowercase(), &range))
}

/// The `MASQUERADE` and `REDIRECT` targets (`("MASQUERADE" | "REDIRECT", 0)`).
fn masquerade_redirect_target(name: &str, i: &Info<'_>, v6: bool) -> Option<String> {
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

/// The `CLASSIFY` target (`("CLASSIFY", 0)`).
fn classify_target(i: &Info<'_>) -> Option<String> {
    let p = i.u32(0)?;
    Some(format!("meta priority set {:x}:{:x}", p >> 16, p & 0xffff))
}

/// The value of `meta mark set` / `ct mark set` for an x_tables (mark, mask) pair.
pub(crate) fn mark_set(field: &str, mark: u32, mask: u32) -> String {
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

pub(crate) struct NatRange {
    flags: u32,
    addr: Option<(String, String)>,
    ports: Option<(u16, u16)>,
    v6: bool,
}

/// `struct nf_nat_ipv4_multi_range_compat` (rev 0 IPv4 NAT targets).
pub(crate) fn compat_range(i: &Info<'_>) -> Option<NatRange> {
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
