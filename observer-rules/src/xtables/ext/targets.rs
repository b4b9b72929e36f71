//! The options of target extensions (`-j MARK --set-xmark ...`, `-j DNAT --to-destination ...`,
//! `-j CT ...`), after " -j ": [`target_options`] picks the extension by name and revision.
//!
//! Part of [`ext`](super), called by [`render`](crate::xtables::render); it imports only the
//! readers and text helpers below it.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::matches::{set_info_at, set_ref};
use crate::xtables::bytes::{ipv4_at, ipv6_at, str_at, u16_at, u32_at, u8_at};
use crate::xtables::decode::Ext;
use crate::xtables::text::{ip6_text, save_string, Cx};
use crate::xtables::XtProto;

/// Write `NAME options` of a target after " -j "; `None` means "render it generically".
pub(crate) fn target_options(out: &mut String, cx: &Cx<'_>, t: &Ext<'_>) -> Option<()> {
    let d = t.data;
    match (t.name, t.revision) {
        (b"MARK", 2) => {
            let (mark, mask) = (u32_at(d, 0)?, u32_at(d, 4)?);
            let _ = write!(out, "MARK --set-xmark 0x{mark:x}/0x{mask:x}");
        }
        (b"CONNMARK", 1 | 2) => connmark(out, d, t.revision)?,
        (b"DNAT", 0..=2) | (b"SNAT", 0..=2) => {
            let opt = if t.is("DNAT") {
                "--to-destination "
            } else {
                "--to-source "
            };
            let r = nat_range(cx, d, t.revision)?;
            out.push_str(if t.is("DNAT") { "DNAT" } else { "SNAT" });
            nat(out, cx, &r, opt, false);
        }
        (b"MASQUERADE", 0) | (b"REDIRECT", 0) => {
            let r = nat_range(cx, d, 0)?;
            out.push_str(if t.is("MASQUERADE") {
                "MASQUERADE"
            } else {
                "REDIRECT"
            });
            nat(out, cx, &r, "--to-ports ", true);
        }
        (b"REJECT", 0) => reject(out, cx, d)?,
        (b"LOG", 0) => log(out, d)?,
        (b"TPROXY", 0 | 1) => tproxy(out, cx, d, t.revision)?,
        (b"NOTRACK", 0) if d.is_empty() => out.push_str("NOTRACK"),
        (b"CT", 0..=2) => ct(out, d, t.revision)?,
        (b"SET", 1..=3) => set_target(out, cx, d, t.revision)?,
        _ => return None,
    }
    Some(())
}

/// `SET` (revisions 1 to 3, `xt_set_info_target_v1..v3`): the sets to add to, delete from or
/// map from, each `NAME src,dst`, with the flags and timeout of revisions 2 and 3, as
/// `iptables-save` prints them.
fn set_target(out: &mut String, cx: &Cx<'_>, d: &[u8], revision: u8) -> Option<()> {
    const EXIST: u32 = 1;
    const MAP_MARK: u32 = 1 << 8;
    const MAP_PRIO: u32 = 1 << 9;
    const MAP_QUEUE: u32 = 1 << 10;
    // An unused slot holds no set; a target's sets are never inverted.
    let slot = |out: &mut String, at: usize, opt: &str| -> Option<()> {
        let (index, dim, flags) = set_info_at(d, at)?;
        if index == crate::xtables::decode::IPSET_INVALID_ID {
            return Some(());
        }
        if dim > 6 {
            return None;
        }
        set_ref(out, cx, opt, index, dim, flags);
        Some(())
    };
    out.push_str("SET");
    slot(out, 0, "--add-set")?;
    let (flags, timeout) = if revision >= 2 {
        let at = if revision == 3 { 12 } else { 8 };
        (u32_at(d, at)?, u32_at(d, at + 4)?)
    } else {
        (0, u32::MAX)
    };
    if flags & EXIST != 0 {
        out.push_str(" --exist");
    }
    if timeout != u32::MAX {
        let _ = write!(out, " --timeout {timeout}");
    }
    slot(out, 4, "--del-set")?;
    if revision == 3 {
        slot(out, 8, "--map-set")?;
        for (bit, opt) in [
            (MAP_MARK, " --map-mark"),
            (MAP_PRIO, " --map-prio"),
            (MAP_QUEUE, " --map-queue"),
        ] {
            if flags & bit != 0 {
                out.push_str(opt);
            }
        }
    }
    Some(())
}

/// `CONNMARK` (revisions 1 and 2): set, save or restore the mark.
fn connmark(out: &mut String, d: &[u8], revision: u8) -> Option<()> {
    let (ctmark, ctmask, nfmask) = (u32_at(d, 0)?, u32_at(d, 4)?, u32_at(d, 8)?);
    // tginfo1 ends with `mode`; tginfo2 has `shift_dir, shift_bits, mode`.
    let mode = u8_at(d, if revision == 1 { 12 } else { 14 })?;
    out.push_str("CONNMARK");
    match mode {
        0 => {
            let _ = write!(out, " --set-xmark 0x{ctmark:x}/0x{ctmask:x}");
        }
        1 => {
            let _ = write!(
                out,
                " --save-mark --nfmask 0x{nfmask:x} --ctmask 0x{ctmask:x}"
            );
        }
        2 => {
            let _ = write!(
                out,
                " --restore-mark --nfmask 0x{nfmask:x} --ctmask 0x{ctmask:x}"
            );
        }
        _ => return None,
    }
    if revision == 2 {
        let (dir, bits) = (u8_at(d, 12)?, u8_at(d, 13)?);
        if bits != 0 {
            let side = if dir == 0 { "left" } else { "right" };
            let _ = write!(out, " --{side}-shift-mark {bits}");
        }
    }
    Some(())
}

/// `REJECT`: the ICMP (ICMPv6) answer or TCP reset it sends.
fn reject(out: &mut String, cx: &Cx<'_>, d: &[u8]) -> Option<()> {
    let with = u32_at(d, 0)?;
    let name = if cx.proto == XtProto::Ipv6 {
        [
            "icmp6-no-route",
            "icmp6-adm-prohibited",
            "icmp6-not-neighbor",
            "icmp6-addr-unreachable",
            "icmp6-port-unreachable",
            "echo-reply",
            "tcp-reset",
            "icmp6-policy-fail",
            "icmp6-reject-route",
        ]
        .get(with as usize)
    } else {
        [
            "icmp-net-unreachable",
            "icmp-host-unreachable",
            "icmp-proto-unreachable",
            "icmp-port-unreachable",
            "echo-reply",
            "icmp-net-prohibited",
            "icmp-host-prohibited",
            "tcp-reset",
            "icmp-admin-prohibited",
        ]
        .get(with as usize)
    }?;
    let _ = write!(out, "REJECT --reject-with {name}");
    Some(())
}

/// `LOG`: prefix, level and what it logs.
fn log(out: &mut String, d: &[u8]) -> Option<()> {
    let (level, flags) = (u8_at(d, 0)?, u8_at(d, 1)?);
    let prefix = str_at(d, 2, 30)?;
    out.push_str("LOG");
    if !prefix.is_empty() {
        out.push_str(" --log-prefix");
        save_string(out, &prefix);
    }
    if level != 4 {
        let _ = write!(out, " --log-level {level}");
    }
    for (bit, opt) in [
        (0x01, "--log-tcp-sequence"),
        (0x02, "--log-tcp-options"),
        (0x04, "--log-ip-options"),
        (0x08, "--log-uid"),
        (0x20, "--log-macdecode"),
    ] {
        if flags & bit != 0 {
            let _ = write!(out, " {opt}");
        }
    }
    Some(())
}

/// `TPROXY` (revisions 0 and 1): the port, address and mark it redirects with.
fn tproxy(out: &mut String, cx: &Cx<'_>, d: &[u8], revision: u8) -> Option<()> {
    // v0: mark_mask, mark_value, laddr (__be32), lport; v1: laddr is nf_inet_addr.
    let (mask, value) = (u32_at(d, 0)?, u32_at(d, 4)?);
    let (addr, port_at) = match (revision, cx.proto) {
        (0, _) => (ipv4_at(d, 8)?.to_string(), 12),
        (_, XtProto::Ipv6) => (ip6_text(&ipv6_at(d, 8)?), 24),
        _ => (ipv4_at(d, 8)?.to_string(), 24),
    };
    let port = u16::from_be(u16_at(d, port_at)?);
    let _ = write!(
        out,
        "TPROXY --on-port {port} --on-ip {addr} --tproxy-mark 0x{value:x}/0x{mask:x}"
    );
    Some(())
}

/// A NAT range, widened to `nf_nat_range2`.
struct NatRange {
    flags: u32,
    min: [u8; 16],
    max: [u8; 16],
    /// Ports in network byte order, as stored.
    min_port: u16,
    max_port: u16,
    base_port: u16,
}

fn nat_range(cx: &Cx<'_>, d: &[u8], rev: u8) -> Option<NatRange> {
    if rev == 0 && cx.proto == XtProto::Ipv4 {
        // nf_nat_ipv4_multi_range_compat: rangesize, then one nf_nat_ipv4_range.
        if u32_at(d, 0)? != 1 {
            return None;
        }
        let mut min = [0u8; 16];
        let mut max = [0u8; 16];
        min[..4].copy_from_slice(d.get(8..12)?);
        max[..4].copy_from_slice(d.get(12..16)?);
        return Some(NatRange {
            flags: u32_at(d, 4)?,
            min,
            max,
            min_port: u16_at(d, 16)?,
            max_port: u16_at(d, 18)?,
            base_port: 0,
        });
    }
    // nf_nat_range (rev 1, and rev 0 on ip6) / nf_nat_range2 (rev 2).
    Some(NatRange {
        flags: u32_at(d, 0)?,
        min: d.get(4..20)?.try_into().ok()?,
        max: d.get(20..36)?.try_into().ok()?,
        min_port: u16_at(d, 36)?,
        max_port: u16_at(d, 38)?,
        base_port: if rev >= 2 { u16_at(d, 40)? } else { 0 },
    })
}

fn nat(out: &mut String, cx: &Cx<'_>, r: &NatRange, opt: &str, ports_only: bool) {
    const MAP_IPS: u32 = 0x01;
    const PROTO_SPECIFIED: u32 = 0x02;
    const RANDOM: u32 = 0x04;
    const PERSISTENT: u32 = 0x08;
    const RANDOM_FULLY: u32 = 0x10;
    const OFFSET: u32 = 0x20;
    let v6 = cx.proto == XtProto::Ipv6;
    let mut range = String::new();
    if r.flags & MAP_IPS != 0 {
        let brackets = v6 && r.flags & PROTO_SPECIFIED != 0;
        let addr = |b: &[u8; 16]| {
            if v6 {
                ip6_text(&Ipv6Addr::from(*b))
            } else {
                Ipv4Addr::new(b[0], b[1], b[2], b[3]).to_string()
            }
        };
        if brackets {
            range.push('[');
        }
        range.push_str(&addr(&r.min));
        if r.min != r.max {
            range.push('-');
            range.push_str(&addr(&r.max));
        }
        if brackets {
            range.push(']');
        }
    }
    if r.flags & PROTO_SPECIFIED != 0 {
        if !(ports_only && range.is_empty()) {
            range.push(':');
        }
        let _ = write!(range, "{}", u16::from_be(r.min_port));
        if r.max_port != r.min_port {
            let _ = write!(range, "-{}", u16::from_be(r.max_port));
        }
        if r.flags & OFFSET != 0 {
            let _ = write!(range, "/{}", u16::from_be(r.base_port));
        }
    }
    if !range.is_empty() {
        let _ = write!(out, " {opt}{range}");
    }
    if r.flags & RANDOM != 0 {
        out.push_str(" --random");
    }
    if r.flags & RANDOM_FULLY != 0 {
        out.push_str(" --random-fully");
    }
    if r.flags & PERSISTENT != 0 {
        out.push_str(" --persistent");
    }
}

fn ct(out: &mut String, d: &[u8], rev: u8) -> Option<()> {
    const NOTRACK: u16 = 0x1;
    const NOTRACK_ALIAS: u16 = 0x2;
    const ZONE_DIR_ORIG: u16 = 0x4;
    const ZONE_DIR_REPL: u16 = 0x8;
    const ZONE_MARK: u16 = 0x10;
    let (flags, zone) = (u16_at(d, 0)?, u16_at(d, 2)?);
    let (ct_events, exp_events) = (u32_at(d, 4)?, u32_at(d, 8)?);
    let helper = str_at(d, 12, 16)?;
    let timeout = if rev >= 1 {
        str_at(d, 28, 32)?
    } else {
        String::new()
    };
    if flags & NOTRACK_ALIAS != 0 {
        out.push_str("NOTRACK");
        return Some(());
    }
    out.push_str("CT");
    if flags & NOTRACK != 0 {
        out.push_str(" --notrack");
    }
    if !helper.is_empty() {
        let _ = write!(out, " --helper {helper}");
    }
    if !timeout.is_empty() {
        let _ = write!(out, " --timeout {timeout}");
    }
    let events = |out: &mut String, opt: &str, mask: u32, names: &[&str]| {
        if mask == 0 {
            return;
        }
        let list: Vec<&str> = (0..names.len())
            .filter(|&i| mask & (1 << i) != 0)
            .map(|i| names[i])
            .collect();
        let _ = write!(out, " {opt} {}", list.join(","));
    };
    events(
        out,
        "--ctevents",
        ct_events,
        &[
            "new",
            "related",
            "destroy",
            "reply",
            "assured",
            "protoinfo",
            "helper",
            "mark",
            "natseqinfo",
            "secmark",
        ],
    );
    events(out, "--expevents", exp_events, &["new"]);
    let opt = if flags & ZONE_DIR_ORIG != 0 && flags & ZONE_DIR_REPL == 0 {
        "--zone-orig"
    } else if flags & ZONE_DIR_REPL != 0 && flags & ZONE_DIR_ORIG == 0 {
        "--zone-reply"
    } else {
        "--zone"
    };
    if flags & ZONE_MARK != 0 {
        let _ = write!(out, " {opt} mark");
    } else if zone != 0 {
        let _ = write!(out, " {opt} {zone}");
    }
    Some(())
}
