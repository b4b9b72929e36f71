//! The transport protocols with ports and chunk or packet types: sctp and dccp. Tables of rows
//! as in [`header`](super::header).
//!
//! Part of [`ext`](super), dispatched from [`match_options`](super::match_options).

use std::fmt::Write as _;

use crate::xtables::bytes::{i32_at, u16_at, u32_at, u8_at};
use crate::xtables::text::inv;

use super::header::Row;

pub(super) const MATCHES: &[Row] = &[
    ("sctp", 0, 0, |o, _, d, _| sctp(o, d)),
    ("dccp", 0, 0, |o, _, d, _| dccp(o, d)),
];

/// SCTP chunk types by number, and the flag letters of each, most significant bit first.
const CHUNKS: &[(u8, &str, &[u8; 8])] = &[
    (0, "DATA", b"----IUBE"),
    (1, "INIT", b"--------"),
    (2, "INIT_ACK", b"--------"),
    (3, "SACK", b"--------"),
    (4, "HEARTBEAT", b"--------"),
    (5, "HEARTBEAT_ACK", b"--------"),
    (6, "ABORT", b"-------T"),
    (7, "SHUTDOWN", b"--------"),
    (8, "SHUTDOWN_ACK", b"--------"),
    (9, "ERROR", b"--------"),
    (10, "COOKIE_ECHO", b"--------"),
    (11, "COOKIE_ACK", b"--------"),
    (12, "ECN_ECNE", b"--------"),
    (13, "ECN_CWR", b"--------"),
    (14, "SHUTDOWN_COMPLETE", b"-------T"),
    (64, "I_DATA", b"----IUBE"),
    (130, "RE_CONFIG", b"--------"),
    (132, "PAD", b"--------"),
    (193, "ASCONF", b"--------"),
    (128, "ASCONF_ACK", b"--------"),
    (192, "FORWARD_TSN", b"--------"),
    (194, "I_FORWARD_TSN", b"--------"),
];

/// ` [!] OPT lo[:hi]` of a `u16 [2]` at `at` when `flag` is set.
fn ports(o: &mut String, d: &[u8], at: usize, opt: &str, set: bool, invert: bool) -> Option<()> {
    if !set {
        return Some(());
    }
    let (lo, hi) = (u16_at(d, at)?, u16_at(d, at + 2)?);
    inv(o, invert);
    let _ = write!(o, " {opt} {lo}");
    if lo != hi {
        let _ = write!(o, ":{hi}");
    }
    Some(())
}

/// `xt_sctp_info`: dpts, spts, chunkmap[64] (u32), chunk_match_type, flag_info[4]
/// (type, flag, mask), flag_count, flags, invflags.
fn sctp(o: &mut String, d: &[u8]) -> Option<()> {
    const MAP: usize = 8;
    let (match_type, flag_count) = (u32_at(d, 264)?, i32_at(d, 280)?);
    let (flags, invf) = (u32_at(d, 284)?, u32_at(d, 288)?);
    ports(o, d, 4, "--sport", flags & 0x1 != 0, invf & 0x1 != 0)?;
    ports(o, d, 0, "--dport", flags & 0x2 != 0, invf & 0x2 != 0)?;
    if flags & 0x4 == 0 {
        return Some(());
    }
    inv(o, invf & 0x4 != 0);
    o.push_str(" --chunk-types");
    o.push_str(match match_type {
        1 => " any",
        2 => " all",
        4 => " only",
        _ => return None,
    });
    let words: Vec<u32> = (0..64)
        .map(|i| u32_at(d, MAP + 4 * i))
        .collect::<Option<_>>()?;
    if words.iter().all(|&w| w == 0) {
        o.push_str(" NONE");
        return Some(());
    }
    if words.iter().all(|&w| w == u32::MAX) {
        o.push_str(" ALL");
        return Some(());
    }
    let mut first = true;
    for ty in 0..256usize {
        if words[ty / 32] & (1 << (ty % 32)) == 0 {
            continue;
        }
        o.push(if first { ' ' } else { ',' });
        first = false;
        let Some((_, name, letters)) = CHUNKS.iter().find(|c| usize::from(c.0) == ty) else {
            continue;
        };
        o.push_str(name);
        for j in 0..usize::try_from(flag_count.clamp(0, 4)).ok()? {
            let at = 268 + 3 * j;
            if usize::from(u8_at(d, at)?) != ty {
                continue;
            }
            let (flag, mask) = (u8_at(d, at + 1)?, u8_at(d, at + 2)?);
            if mask != 0 {
                o.push(':');
            }
            for i in (0..8).rev() {
                if mask & (1 << i) != 0 {
                    let c = char::from(letters[7 - i]);
                    o.push(if flag & (1 << i) != 0 {
                        c
                    } else {
                        c.to_ascii_lowercase()
                    });
                }
            }
        }
    }
    Some(())
}

/// `xt_dccp_info`: dpts, spts, flags, invflags, typemask, option.
fn dccp(o: &mut String, d: &[u8]) -> Option<()> {
    const TYPES: [&str; 11] = [
        "REQUEST", "RESPONSE", "DATA", "ACK", "DATAACK", "CLOSEREQ", "CLOSE", "RESET", "SYNC",
        "SYNCACK", "INVALID",
    ];
    let (flags, invf) = (u16_at(d, 8)?, u16_at(d, 10)?);
    let (mut types, option) = (u16_at(d, 12)?, u8_at(d, 14)?);
    ports(o, d, 4, "--sport", flags & 0x1 != 0, invf & 0x1 != 0)?;
    ports(o, d, 0, "--dport", flags & 0x2 != 0, invf & 0x2 != 0)?;
    if flags & 0x4 != 0 {
        inv(o, invf & 0x4 != 0);
        o.push_str(" --dccp-types ");
        let mut first = true;
        while types != 0 {
            let i = types.trailing_zeros() as usize;
            if !first {
                o.push(',');
            }
            first = false;
            o.push_str(TYPES[i.min(10)]);
            if i >= 10 {
                break;
            }
            types &= !(1 << i);
        }
    }
    if flags & 0x8 != 0 {
        inv(o, invf & 0x8 != 0);
        let _ = write!(o, " --dccp-option {option}");
    }
    Some(())
}
