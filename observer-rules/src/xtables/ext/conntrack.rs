//! The connection-tracking matches: `-m conntrack` (revisions 1 to 3, with the `-m state`
//! alias it saves as such) and the state names `-m state` shares.
//!
//! Part of [`ext`](super), called by [`matches`](mod@super::matches); it imports only the readers
//! and text helpers below it.

use std::fmt::Write as _;

use crate::xtables::bytes::{ipv4_at, ipv6_at, u16_at, u32_at, u8_at};
use crate::xtables::text::{inv, ip6_text, prefix_len, Cx};
use crate::xtables::XtProto;

/// Connection states; `untracked` is the UNTRACKED bit (0x100 for conntrack, 0x40 for state).
pub(super) fn states(out: &mut String, mask: u32, untracked: u32) {
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

pub(super) fn conntrack(out: &mut String, cx: &Cx<'_>, d: &[u8], rev: u8) -> Option<()> {
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
