//! The options of match extensions (`-m tcp --dport 80`, `-m set --match-set ...`), after
//! " -m ": [`match_options`] picks the extension by name and revision.
//!
//! Part of [`ext`](super), called by [`render`](crate::xtables::render); it imports
//! [`conntrack`](super::conntrack) for the connection-tracking matches and the readers and text
//! helpers below it.

use std::fmt::Write as _;

use crate::xtables::bytes::{i32_at, ipv4_at, ipv6_at, str_at, u16_at, u32_at, u8_at};
use crate::xtables::decode::Ext;
use crate::xtables::text::{inv, ip6_text, save_string, Cx};
use crate::xtables::XtProto;

use super::conntrack::{conntrack, states};

/// Write `NAME options` of a match after " -m "; `None` means "render it generically".
pub(crate) fn match_options(out: &mut String, cx: &Cx<'_>, m: &Ext<'_>) -> Option<()> {
    let d = m.data;
    let rev = m.revision;
    match (m.name, rev) {
        (b"tcp", 0) => tcp(out, d),
        (b"udp", 0) => udp(out, d),
        (b"icmp", 0) if cx.proto == XtProto::Ipv4 => icmp(out, d, "icmp", "--icmp-type"),
        (b"icmp6", 0) if cx.proto == XtProto::Ipv6 => icmp(out, d, "icmp6", "--icmpv6-type"),
        (b"comment", 0) => {
            out.push_str("comment --comment");
            save_string(out, &str_at(d, 0, 256.min(d.len()))?);
            Some(())
        }
        (b"mark", 1) | (b"connmark", 1) => {
            let (mark, mask, invert) = (u32_at(d, 0)?, u32_at(d, 4)?, u8_at(d, 8)?);
            out.push_str(if m.is("mark") { "mark" } else { "connmark" });
            inv(out, invert != 0);
            out.push_str(" --mark");
            mark_mask(out, mark, mask);
            Some(())
        }
        (b"conntrack", 1..=3) => conntrack(out, cx, d, rev),
        (b"state", 0) => {
            let mask = u32_at(d, 0)?;
            out.push_str("state --state");
            states(out, mask, 0x40);
            Some(())
        }
        (b"addrtype", 1) => addrtype(out, d),
        (b"multiport", 0 | 1) => multiport(out, d, rev),
        (b"set", 1..=4) => set_match(out, cx, d, rev),
        (b"statistic", 0) => statistic(out, d),
        (b"limit", 0) => limit(out, d),
        (b"physdev", 0) => physdev(out, d),
        (b"recent", 0 | 1) => recent(out, cx, d, rev),
        (b"length", 0) => {
            let (min, max, invert) = (u16_at(d, 0)?, u16_at(d, 2)?, u8_at(d, 4)?);
            out.push_str("length");
            inv(out, invert != 0);
            let _ = write!(out, " --length {min}");
            if min != max {
                let _ = write!(out, ":{max}");
            }
            Some(())
        }
        (b"socket", 0) if d.is_empty() => {
            out.push_str("socket");
            Some(())
        }
        (b"socket", 1..=3) => {
            let flags = u8_at(d, 0)?;
            out.push_str("socket");
            for (bit, opt) in [
                (0x1, " --transparent"),
                (0x2, " --nowildcard"),
                (0x4, " --restore-skmark"),
            ] {
                if flags & bit != 0 {
                    out.push_str(opt);
                }
            }
            Some(())
        }
        (b"mac", 0) => {
            let (addr, invert) = (d.get(0..6)?, i32_at(d, 8)?);
            out.push_str("mac");
            inv(out, invert != 0);
            out.push_str(" --mac-source ");
            for (i, b) in addr.iter().enumerate() {
                let _ = write!(out, "{}{b:02x}", if i > 0 { ":" } else { "" });
            }
            Some(())
        }
        _ => None,
    }
}

fn mark_mask(out: &mut String, mark: u32, mask: u32) {
    if mask != u32::MAX {
        let _ = write!(out, " 0x{mark:x}/0x{mask:x}");
    } else {
        let _ = write!(out, " 0x{mark:x}");
    }
}

/// ` [!] OPT lo[:hi]`; iptables 1.8.9 leaves the full range out, even inverted.
fn ports(out: &mut String, opt: &str, lo: u16, hi: u16, invert: bool) {
    if lo == 0 && hi == u16::MAX {
        return;
    }
    inv(out, invert);
    if lo != hi {
        let _ = write!(out, " {opt} {lo}:{hi}");
    } else {
        let _ = write!(out, " {opt} {lo}");
    }
}

fn tcp_flags(out: &mut String, flags: u8) {
    const NAMES: [&str; 6] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG"];
    let mut first = true;
    for (i, n) in NAMES.iter().enumerate() {
        if flags & (1 << i) != 0 {
            if !first {
                out.push(',');
            }
            out.push_str(n);
            first = false;
        }
    }
    if first {
        out.push_str("NONE");
    }
}

fn tcp(out: &mut String, d: &[u8]) -> Option<()> {
    let (s0, s1, d0, d1) = (u16_at(d, 0)?, u16_at(d, 2)?, u16_at(d, 4)?, u16_at(d, 6)?);
    let (option, fmask, fcmp, invf) = (u8_at(d, 8)?, u8_at(d, 9)?, u8_at(d, 10)?, u8_at(d, 11)?);
    out.push_str("tcp");
    ports(out, "--sport", s0, s1, invf & 0x01 != 0);
    ports(out, "--dport", d0, d1, invf & 0x02 != 0);
    if option != 0 || invf & 0x08 != 0 {
        inv(out, invf & 0x08 != 0);
        let _ = write!(out, " --tcp-option {option}");
    }
    if fmask != 0 || invf & 0x04 != 0 {
        inv(out, invf & 0x04 != 0);
        out.push_str(" --tcp-flags ");
        tcp_flags(out, fmask);
        out.push(' ');
        tcp_flags(out, fcmp);
    }
    Some(())
}

fn udp(out: &mut String, d: &[u8]) -> Option<()> {
    let (s0, s1, d0, d1) = (u16_at(d, 0)?, u16_at(d, 2)?, u16_at(d, 4)?, u16_at(d, 6)?);
    let invf = u8_at(d, 8)?;
    out.push_str("udp");
    ports(out, "--sport", s0, s1, invf & 0x01 != 0);
    ports(out, "--dport", d0, d1, invf & 0x02 != 0);
    Some(())
}

fn icmp(out: &mut String, d: &[u8], name: &str, opt: &str) -> Option<()> {
    let (ty, c0, c1, invf) = (u8_at(d, 0)?, u8_at(d, 1)?, u8_at(d, 2)?, u8_at(d, 3)?);
    out.push_str(name);
    inv(out, invf & 0x01 != 0);
    if ty == 0xff && name == "icmp" {
        let _ = write!(out, " {opt} any");
    } else {
        let _ = write!(out, " {opt} {ty}");
        if c0 != 0 || c1 != 0xff {
            let _ = write!(out, "/{c0}");
        }
    }
    Some(())
}

fn addrtype(out: &mut String, d: &[u8]) -> Option<()> {
    const TYPES: [&str; 12] = [
        "UNSPEC",
        "UNICAST",
        "LOCAL",
        "BROADCAST",
        "ANYCAST",
        "MULTICAST",
        "BLACKHOLE",
        "UNREACHABLE",
        "PROHIBIT",
        "THROW",
        "NAT",
        "XRESOLVE",
    ];
    let (src, dst, flags) = (u16_at(d, 0)?, u16_at(d, 2)?, u32_at(d, 4)?);
    let types = |out: &mut String, mask: u16| {
        let names: Vec<&str> = (0..TYPES.len())
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| TYPES[i])
            .collect();
        out.push_str(&names.join(","));
    };
    out.push_str("addrtype");
    if src != 0 {
        inv(out, flags & 0x1 != 0);
        out.push_str(" --src-type ");
        types(out, src);
    }
    if dst != 0 {
        inv(out, flags & 0x2 != 0);
        out.push_str(" --dst-type ");
        types(out, dst);
    }
    if flags & 0x4 != 0 {
        out.push_str(" --limit-iface-in");
    }
    if flags & 0x8 != 0 {
        out.push_str(" --limit-iface-out");
    }
    Some(())
}

fn multiport(out: &mut String, d: &[u8], rev: u8) -> Option<()> {
    let (flags, count) = (u8_at(d, 0)?, usize::from(u8_at(d, 1)?));
    if count > 15 {
        return None;
    }
    let opt = match flags {
        0 => "--sports",
        1 => "--dports",
        2 => "--ports",
        _ => return None,
    };
    out.push_str("multiport");
    if rev == 1 {
        inv(out, u8_at(d, 47)? != 0);
    }
    let _ = write!(out, " {opt} ");
    let mut i = 0;
    while i < count {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}", u16_at(d, 2 + 2 * i)?);
        if rev == 1 && u8_at(d, 32 + i)? != 0 {
            i += 1;
            let _ = write!(out, ":{}", u16_at(d, 2 + 2 * i)?);
        }
        i += 1;
    }
    Some(())
}

fn set_name(cx: &Cx<'_>, index: u16) -> String {
    if let Some(n) = cx.table.set_names.get(&index) {
        return n.clone();
    }
    cx.sets
        .and_then(|sets| sets(index))
        .unwrap_or_else(|| format!("#{index}"))
}

/// The `xt_set_info` at `at`: the set's index, its dimension and its flags.
pub(super) fn set_info_at(d: &[u8], at: usize) -> Option<(u16, u8, u8)> {
    Some((u16_at(d, at)?, u8_at(d, at + 2)?, u8_at(d, at + 3)?))
}

/// ` OPT NAME src,dst`: a set by name, then the direction of each of its `dim` parts.
pub(super) fn set_ref(out: &mut String, cx: &Cx<'_>, opt: &str, index: u16, dim: u8, flags: u8) {
    let _ = write!(out, " {opt} {}", set_name(cx, index));
    for i in 1..=dim {
        out.push(if i == 1 { ' ' } else { ',' });
        out.push_str(if flags & (1 << i) != 0 { "src" } else { "dst" });
    }
}

/// `--match-set NAME src,dst` from an `xt_set_info` at `at`.
fn set_info(out: &mut String, cx: &Cx<'_>, d: &[u8], at: usize, opt: &str) -> Option<()> {
    let (index, dim, flags) = set_info_at(d, at)?;
    if dim > 6 {
        return None;
    }
    inv(out, flags & 0x01 != 0);
    set_ref(out, cx, opt, index, dim, flags);
    Some(())
}

fn set_match(out: &mut String, cx: &Cx<'_>, d: &[u8], rev: u8) -> Option<()> {
    out.push_str("set");
    set_info(out, cx, d, 0, "--match-set")?;
    if rev < 3 {
        return Some(());
    }
    let flags = u32_at(d, 40)?;
    if flags & 0x80 != 0 {
        out.push_str(" --return-nomatch");
    }
    if flags & 0x08 != 0 {
        out.push_str(" ! --update-counters");
    }
    if flags & 0x10 != 0 {
        out.push_str(" ! --update-subcounters");
    }
    for (at, what) in [(8, "packets"), (24, "bytes")] {
        let (value, op) = (
            u64::from(u32_at(d, at)?) | (u64::from(u32_at(d, at + 4)?) << 32),
            u8_at(d, at + 8)?,
        );
        match op {
            0 => {}
            1 => {
                let _ = write!(out, " --{what}-eq {value}");
            }
            2 => {
                let _ = write!(out, " ! --{what}-eq {value}");
            }
            3 => {
                let _ = write!(out, " --{what}-lt {value}");
            }
            4 => {
                let _ = write!(out, " --{what}-gt {value}");
            }
            _ => return None,
        }
    }
    Some(())
}

fn statistic(out: &mut String, d: &[u8]) -> Option<()> {
    let (mode, flags) = (u16_at(d, 0)?, u16_at(d, 2)?);
    let invert = if flags & 0x1 != 0 { " !" } else { "" };
    match mode {
        0 => {
            let p = f64::from(u32_at(d, 4)?) / f64::from(0x8000_0000u32);
            let _ = write!(out, "statistic --mode random{invert} --probability {p:.11}");
        }
        1 => {
            let (every, packet) = (u32_at(d, 4)?, u32_at(d, 8)?);
            let _ = write!(
                out,
                "statistic --mode nth{invert} --every {} --packet {packet}",
                u64::from(every) + 1
            );
        }
        _ => return None,
    }
    Some(())
}

fn limit(out: &mut String, d: &[u8]) -> Option<()> {
    const SCALE: u32 = 10_000;
    const RATES: [(&str, u32); 4] = [
        ("day", SCALE * 24 * 60 * 60),
        ("hour", SCALE * 60 * 60),
        ("min", SCALE * 60),
        ("sec", SCALE),
    ];
    let (avg, burst) = (u32_at(d, 0)?, u32_at(d, 4)?);
    out.push_str("limit --limit");
    if avg == 0 {
        out.push_str(" inf");
    } else {
        let mut i = 1;
        while i < RATES.len() {
            let mult = RATES[i].1;
            if avg > mult || mult / avg < mult % avg {
                break;
            }
            i += 1;
        }
        let (name, mult) = RATES[i - 1];
        let _ = write!(out, " {}/{name}", mult / avg);
    }
    if burst != 5 {
        let _ = write!(out, " --limit-burst {burst}");
    }
    Some(())
}

fn physdev(out: &mut String, d: &[u8]) -> Option<()> {
    let (indev, outdev) = (str_at(d, 0, 16)?, str_at(d, 32, 16)?);
    let (invert, bits) = (u8_at(d, 64)?, u8_at(d, 65)?);
    let flag = |out: &mut String, bit: u8| inv(out, invert & bit != 0);
    out.push_str("physdev");
    const IN: u8 = 0x01;
    const OUT: u8 = 0x02;
    const BRIDGED: u8 = 0x04;
    const IS_IN: u8 = 0x08;
    const IS_OUT: u8 = 0x10;
    if bits & IS_IN != 0 {
        flag(out, IS_IN);
        out.push_str(" --physdev-is-in");
    }
    if bits & IN != 0 {
        flag(out, IN);
        let _ = write!(out, " --physdev-in {indev}");
    }
    if bits & IS_OUT != 0 {
        flag(out, IS_OUT);
        out.push_str(" --physdev-is-out");
    }
    if bits & OUT != 0 {
        flag(out, OUT);
        let _ = write!(out, " --physdev-out {outdev}");
    }
    if bits & BRIDGED != 0 {
        flag(out, BRIDGED);
        out.push_str(" --physdev-is-bridged");
    }
    Some(())
}

fn recent(out: &mut String, cx: &Cx<'_>, d: &[u8], rev: u8) -> Option<()> {
    let (seconds, hits) = (u32_at(d, 0)?, u32_at(d, 4)?);
    let (check, invert) = (u8_at(d, 8)?, u8_at(d, 9)?);
    let name = str_at(d, 10, 200)?;
    let side = u8_at(d, 210)?;
    out.push_str("recent");
    inv(out, invert != 0);
    for (bit, opt) in [
        (2, "--set"),
        (1, "--rcheck"),
        (4, "--update"),
        (8, "--remove"),
    ] {
        if check & bit != 0 {
            let _ = write!(out, " {opt}");
        }
    }
    if seconds != 0 {
        let _ = write!(out, " --seconds {seconds}");
    }
    if check & 32 != 0 {
        out.push_str(" --reap");
    }
    if hits != 0 {
        let _ = write!(out, " --hitcount {hits}");
    }
    if check & 16 != 0 {
        out.push_str(" --rttl");
    }
    let _ = write!(out, " --name {name}");
    if rev == 1 {
        if cx.proto == XtProto::Ipv6 {
            let _ = write!(out, " --mask {}", ip6_text(&ipv6_at(d, 212)?));
        } else {
            let _ = write!(out, " --mask {}", ipv4_at(d, 212)?);
        }
    }
    match side {
        0 => out.push_str(" --rsource"),
        1 => out.push_str(" --rdest"),
        _ => {}
    }
    Some(())
}
