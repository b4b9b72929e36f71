//! The `iptables-save` options of match and target extensions (`-m tcp --dport 80`,
//! `-j DNAT --to-destination ...`), one function per extension, from their uapi structs
//! (`include/uapi/linux/netfilter/xt_*.h`). Each returns `None` when the payload is shorter
//! than its layout or holds a value it does not know; the caller then renders the extension
//! generically. Formats follow iptables 1.8's `*_save` functions.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::bytes::{i32_at, ipv4_at, ipv6_at, str_at, u16_at, u32_at, u8_at};
use super::decode::Ext;
use super::text::{inv, ip6_text, prefix_len, save_string, Cx};
use super::XtProto;

/// Write `NAME options` of a match after " -m "; `None` means "render it generically".
pub(super) fn match_options(out: &mut String, cx: &Cx<'_>, m: &Ext<'_>) -> Option<()> {
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

fn ports(out: &mut String, opt: &str, lo: u16, hi: u16, invert: bool) {
    if lo == 0 && hi == u16::MAX && !invert {
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

/// Connection states; `untracked` is the UNTRACKED bit (0x100 for conntrack, 0x40 for state).
fn states(out: &mut String, mask: u32, untracked: u32) {
    let mut names: Vec<&str> = Vec::new();
    for (bit, n) in [
        (0x1, "INVALID"),
        (0x8, "NEW"),
        (0x4, "RELATED"),
        (0x2, "ESTABLISHED"),
    ] {
        if mask & bit != 0 {
            names.push(n);
        }
    }
    if mask & untracked != 0 {
        names.push("UNTRACKED");
    }
    if untracked == 0x100 {
        for (bit, n) in [(0x40, "SNAT"), (0x80, "DNAT")] {
            if mask & bit != 0 {
                names.push(n);
            }
        }
    }
    out.push(' ');
    out.push_str(&names.join(","));
}

fn conntrack(out: &mut String, cx: &Cx<'_>, d: &[u8], rev: u8) -> Option<()> {
    // mtinfo1/2/3 share the first 146 bytes; the flag and mask fields then widen.
    let flags = u16_at(d, 146)?;
    let invf = u16_at(d, 148)?;
    let (state, status) = if rev == 1 {
        (u32::from(u8_at(d, 150)?), u32::from(u8_at(d, 151)?))
    } else {
        (u32::from(u16_at(d, 150)?), u32::from(u16_at(d, 152)?))
    };
    let on = |bit: u16| flags & bit != 0;
    let neg = |out: &mut String, bit: u16| inv(out, invf & bit != 0);
    // XT_CONNTRACK_STATE_ALIAS: written by `-m state`, saved as such.
    if on(1 << 13) {
        out.push_str("state");
        neg(out, 1);
        out.push_str(" --state");
        states(out, state, 0x100);
        return Some(());
    }
    out.push_str("conntrack");
    if on(1) {
        neg(out, 1);
        out.push_str(" --ctstate");
        states(out, state, 0x100);
    }
    if on(1 << 1) {
        neg(out, 1 << 1);
        let _ = write!(out, " --ctproto {}", u16_at(d, 136)?);
    }
    for (i, opt) in ["--ctorigsrc", "--ctorigdst", "--ctreplsrc", "--ctrepldst"]
        .iter()
        .enumerate()
    {
        let bit = 1 << (2 + i);
        if !on(bit) {
            continue;
        }
        neg(out, bit);
        let (a, m) = (32 * i, 32 * i + 16);
        let _ = write!(out, " {opt} ");
        if cx.proto == XtProto::Ipv6 {
            let _ = write!(out, "{}", ip6_text(&ipv6_at(d, a)?));
            mask_suffix(out, d.get(m..m + 16)?, true);
        } else {
            let _ = write!(out, "{}", ipv4_at(d, a)?);
            mask_suffix(out, d.get(m..m + 4)?, false);
        }
    }
    for (i, opt) in [
        "ctorigsrcport",
        "ctorigdstport",
        "ctreplsrcport",
        "ctrepldstport",
    ]
    .iter()
    .enumerate()
    {
        let bit = 1 << (8 + i);
        if !on(bit) {
            continue;
        }
        neg(out, bit);
        let raw = u16_at(d, 138 + 2 * i)?;
        let (lo, hi) = if rev == 3 {
            (raw, u16_at(d, 154 + 2 * i)?)
        } else {
            (u16::from_be(raw), 0)
        };
        if hi == 0 || lo == hi {
            let _ = write!(out, " --{opt} {lo}");
        } else {
            let _ = write!(out, " --{opt} {lo}:{hi}");
        }
    }
    if on(1 << 6) {
        neg(out, 1 << 6);
        out.push_str(" --ctstatus");
        let mut names = Vec::new();
        for (bit, n) in [
            (1, "EXPECTED"),
            (2, "SEEN_REPLY"),
            (4, "ASSURED"),
            (8, "CONFIRMED"),
        ] {
            if status & bit != 0 {
                names.push(n);
            }
        }
        if status == 0 {
            names.push("NONE");
        }
        let _ = write!(out, " {}", names.join(","));
    }
    if on(1 << 7) {
        neg(out, 1 << 7);
        let (lo, hi) = (u32_at(d, 128)?, u32_at(d, 132)?);
        if lo == hi {
            let _ = write!(out, " --ctexpire {lo}");
        } else {
            let _ = write!(out, " --ctexpire {lo}:{hi}");
        }
    }
    if on(1 << 12) {
        let dir = if invf & (1 << 12) != 0 {
            "REPLY"
        } else {
            "ORIGINAL"
        };
        let _ = write!(out, " --ctdir {dir}");
    }
    Some(())
}

/// `xtables_ip(6)mask_to_numeric`: `/len`, or `/dotted` for a mask with holes; nothing for /32
/// (/128) in the conntrack printer's numeric form.
fn mask_suffix(out: &mut String, mask: &[u8], v6: bool) {
    match prefix_len(mask) {
        Some(n) if n as usize == mask.len() * 8 => {}
        Some(n) => {
            let _ = write!(out, "/{n}");
        }
        None if v6 => {
            if let Some(m) = ipv6_at(mask, 0) {
                let _ = write!(out, "/{}", ip6_text(&m));
            }
        }
        None => {
            if let Some(m) = ipv4_at(mask, 0) {
                let _ = write!(out, "/{m}");
            }
        }
    }
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
    match cx.table.set_names.get(&index) {
        Some(n) => n.clone(),
        None => format!("#{index}"),
    }
}

/// `--match-set NAME src,dst` from an `xt_set_info` at `at`.
fn set_info(out: &mut String, cx: &Cx<'_>, d: &[u8], at: usize, opt: &str) -> Option<()> {
    let (index, dim, flags) = (u16_at(d, at)?, u8_at(d, at + 2)?, u8_at(d, at + 3)?);
    if dim > 6 {
        return None;
    }
    inv(out, flags & 0x01 != 0);
    let _ = write!(out, " {opt} {}", set_name(cx, index));
    for i in 1..=dim {
        out.push(if i == 1 { ' ' } else { ',' });
        out.push_str(if flags & (1 << i) != 0 { "src" } else { "dst" });
    }
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

/// Write `NAME options` of a target after " -j "; `None` means "render it generically".
pub(super) fn target_options(out: &mut String, cx: &Cx<'_>, t: &Ext<'_>) -> Option<()> {
    let d = t.data;
    match (t.name, t.revision) {
        (b"MARK", 2) => {
            let (mark, mask) = (u32_at(d, 0)?, u32_at(d, 4)?);
            let _ = write!(out, "MARK --set-xmark 0x{mark:x}/0x{mask:x}");
        }
        (b"CONNMARK", 1 | 2) => {
            let (ctmark, ctmask, nfmask) = (u32_at(d, 0)?, u32_at(d, 4)?, u32_at(d, 8)?);
            // tginfo1 ends with `mode`; tginfo2 has `shift_dir, shift_bits, mode`.
            let mode = u8_at(d, if t.revision == 1 { 12 } else { 14 })?;
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
            if t.revision == 2 {
                let (dir, bits) = (u8_at(d, 12)?, u8_at(d, 13)?);
                if bits != 0 {
                    let side = if dir == 0 { "left" } else { "right" };
                    let _ = write!(out, " --{side}-shift-mark {bits}");
                }
            }
        }
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
        (b"REJECT", 0) => {
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
        }
        (b"LOG", 0) => {
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
        }
        (b"TPROXY", 0 | 1) => {
            // v0: mark_mask, mark_value, laddr (__be32), lport; v1: laddr is nf_inet_addr.
            let (mask, value) = (u32_at(d, 0)?, u32_at(d, 4)?);
            let (addr, port_at) = match (t.revision, cx.proto) {
                (0, _) => (ipv4_at(d, 8)?.to_string(), 12),
                (_, XtProto::Ipv6) => (ip6_text(&ipv6_at(d, 8)?), 24),
                _ => (ipv4_at(d, 8)?.to_string(), 24),
            };
            let port = u16::from_be(u16_at(d, port_at)?);
            let _ = write!(
                out,
                "TPROXY --on-port {port} --on-ip {addr} --tproxy-mark 0x{value:x}/0x{mask:x}"
            );
        }
        (b"NOTRACK", 0) if d.is_empty() => out.push_str("NOTRACK"),
        (b"CT", 0..=2) => ct(out, d, t.revision)?,
        _ => return None,
    }
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
