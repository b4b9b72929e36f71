//! Extensions that count, meter or select by who and when: hashlimit, connlimit, quota, time,
//! owner, iprange, string; and the targets that hand packets to user space (NFLOG, NFQUEUE).
//! Tables of rows as in [`header`](super::header).
//!
//! Part of [`ext`](super), dispatched from [`match_options`](super::match_options) and
//! [`target_options`](super::target_options).

use std::fmt::Write as _;

use crate::xtables::bytes::{ipv4_at, ipv6_at, str_at, u16_at, u32_at, u8_at};
use crate::xtables::text::{inv, ip6_text, save_string, Cx};
use crate::xtables::XtProto;

use super::header::Row;

pub(super) const MATCHES: &[Row] = &[
    ("hashlimit", 3, 3, |o, cx, d, _| hashlimit(o, cx, d)),
    ("connlimit", 1, 1, |o, cx, d, _| {
        // xt_connlimit_info: mask (nf_inet_addr), limit, flags.
        let (limit, flags) = (u32_at(d, 16)?, u32_at(d, 20)?);
        let above = if flags & 0x1 != 0 { "upto" } else { "above" };
        let bits: u32 = match cx.proto {
            XtProto::Ipv6 => d.get(..16)?.iter().map(|b| b.count_ones()).sum(),
            _ => d.get(..4)?.iter().map(|b| b.count_ones()).sum(),
        };
        let side = if flags & 0x2 != 0 { "daddr" } else { "saddr" };
        let _ = write!(
            o,
            " --connlimit-{above} {limit} --connlimit-mask {bits} --connlimit-{side}"
        );
        Some(())
    }),
    ("quota", 0, 0, |o, _, d, _| {
        let (flags, quota) = (u32_at(d, 0)?, u64_at(d, 8)?);
        inv(o, flags & 0x1 != 0);
        let _ = write!(o, " --quota {quota}");
        Some(())
    }),
    ("owner", 1, 1, |o, _, d, _| {
        // xt_owner_match_info: uid_min, uid_max, gid_min, gid_max, match, invert.
        let (what, invert) = (u8_at(d, 16)?, u8_at(d, 17)?);
        for (bit, opt, at) in [
            (0x4, "--socket-exists", None),
            (0x1, "--uid-owner", Some(0)),
            (0x2, "--gid-owner", Some(8)),
            (0x8, "--suppl-groups", None),
        ] {
            if what & bit == 0 {
                continue;
            }
            inv(o, invert & bit != 0);
            let _ = write!(o, " {opt}");
            if let Some(at) = at {
                let (lo, hi) = (u32_at(d, at)?, u32_at(d, at + 4)?);
                let _ = write!(o, " {lo}");
                if lo != hi {
                    let _ = write!(o, "-{hi}");
                }
            }
        }
        Some(())
    }),
    ("iprange", 1, 1, |o, cx, d, _| {
        // xt_iprange_mtinfo: src_min, src_max, dst_min, dst_max (nf_inet_addr), flags.
        let flags = u8_at(d, 64)?;
        for (bit, invbit, opt, at) in [
            (0x01, 0x10, "--src-range", 0),
            (0x02, 0x20, "--dst-range", 32),
        ] {
            if flags & bit == 0 {
                continue;
            }
            inv(o, flags & invbit != 0);
            let addr = |at: usize| match cx.proto {
                XtProto::Ipv6 => ipv6_at(d, at).map(|a| ip6_text(&a)),
                _ => ipv4_at(d, at).map(|a| a.to_string()),
            };
            let _ = write!(o, " {opt} {}-{}", addr(at)?, addr(at + 16)?);
        }
        Some(())
    }),
    ("string", 0, 1, |o, _, d, rev| {
        // xt_string_info: from, to, algo[16], pattern[128], patlen, invert (v0) / flags (v1).
        let (from, to) = (u16_at(d, 0)?, u16_at(d, 2)?);
        let algo = str_at(d, 4, 16)?;
        let len = usize::from(u8_at(d, 148)?);
        let pattern = d.get(20..20 + len.min(128))?;
        let flags = u8_at(d, 149)?;
        inv(o, flags & 0x1 != 0);
        if pattern.iter().all(|c| (0x20..0x7f).contains(c)) {
            o.push_str(" --string \"");
            for &c in pattern {
                if c == b'"' || c == b'\\' {
                    o.push('\\');
                }
                o.push(char::from(c));
            }
        } else {
            o.push_str(" --hex-string \"|");
            for c in pattern {
                let _ = write!(o, "{c:02x}");
            }
            o.push('|');
        }
        let _ = write!(o, "\" --algo {algo}");
        if from != 0 {
            let _ = write!(o, " --from {from}");
        }
        if to != u16::MAX {
            let _ = write!(o, " --to {to}");
        }
        if rev > 0 && flags & 0x2 != 0 {
            o.push_str(" --icase");
        }
        Some(())
    }),
    ("time", 0, 0, |o, _, d, _| time(o, d)),
    ("rateest", 0, 0, |o, _, d, _| rateest(o, d)),
];

pub(super) const TARGETS: &[Row] = &[
    ("NFLOG", 0, 0, |o, _, d, _| {
        // xt_nflog_info: len, group, threshold, flags, pad, prefix[64] (iptables-nft reads nft's
        // longer prefixes into a longer buffer: the prefix runs to its NUL).
        let (len, group, threshold) = (u32_at(d, 0)?, u16_at(d, 4)?, u16_at(d, 6)?);
        let prefix_len = d.len().saturating_sub(12).max(64);
        let (flags, prefix) = (u16_at(d, 8)?, str_at(d, 12, prefix_len)?);
        if !prefix.is_empty() {
            o.push_str(" --nflog-prefix");
            save_string(o, &prefix);
        }
        if group != 0 {
            let _ = write!(o, " --nflog-group {group}");
        }
        if flags & 0x1 != 0 {
            let _ = write!(o, " --nflog-size {len}");
        } else if len != 0 {
            let _ = write!(o, " --nflog-range {len}");
        }
        if threshold != 0 {
            let _ = write!(o, " --nflog-threshold {threshold}");
        }
        Some(())
    }),
    ("NFQUEUE", 0, 3, |o, _, d, rev| {
        // xt_NFQ_info: queuenum; v1 adds queues_total; v2 bypass; v3 flags (bypass, fanout).
        let num = u16_at(d, 0)?;
        let total = if rev >= 1 { u16_at(d, 2)? } else { 1 };
        if total > 1 {
            let last = u32::from(num) + u32::from(total) - 1;
            let _ = write!(o, " --queue-balance {num}:{last}");
        } else {
            let _ = write!(o, " --queue-num {num}");
        }
        let flags = if rev >= 2 { u16_at(d, 4)? } else { 0 };
        if flags & 0x1 != 0 {
            o.push_str(" --queue-bypass");
        }
        if rev >= 3 && flags & 0x2 != 0 {
            o.push_str(" --queue-cpu-fanout");
        }
        Some(())
    }),
];

/// `xt_rateest_match_info`: name1[16], name2[16], flags, mode, bps1, pps1, bps2, pps2.
fn rateest(o: &mut String, d: &[u8]) -> Option<()> {
    const INVERT: u16 = 0x01;
    const ABS: u16 = 0x02;
    const REL: u16 = 0x04;
    const DELTA: u16 = 0x08;
    const BPS: u16 = 0x10;
    const PPS: u16 = 0x20;
    let (name1, name2) = (str_at(d, 0, 16)?, str_at(d, 16, 16)?);
    let (flags, mode) = (u16_at(d, 32)?, u16_at(d, 34)?);
    let op = match mode {
        1 => "eq",
        2 => "lt",
        3 => "gt",
        _ => return None,
    };
    let print_rate = |o: &mut String, r: u32, numeric: bool| {
        let bits = f64::from(r) * 8.0;
        if numeric {
            let _ = write!(o, " {r}");
        } else if bits >= 1e9 {
            let _ = write!(o, " {:.0}Mbit", bits / 1e6);
        } else if bits >= 1e6 {
            let _ = write!(o, " {:.0}Kbit", bits / 1e3);
        } else {
            let _ = write!(o, " {bits:.0}bit");
        }
    };
    let mode = |o: &mut String| {
        inv(o, flags & INVERT != 0);
        let _ = write!(o, " --rateest-{op}");
    };
    if flags & DELTA != 0 {
        o.push_str(" --rateest-delta");
    }
    let (first, name) = if flags & REL != 0 {
        (" --rateest1", &name1)
    } else {
        (" --rateest", &name1)
    };
    let _ = write!(o, "{first} {name}");
    for (bit, what, r1, r2, numeric) in [
        (BPS, "bps", u32_at(d, 36)?, u32_at(d, 44)?, false),
        (PPS, "pps", u32_at(d, 40)?, u32_at(d, 48)?, true),
    ] {
        if flags & bit == 0 {
            continue;
        }
        if flags & DELTA != 0 {
            let _ = write!(o, " --rateest-{what}1");
            print_rate(o, r1, numeric);
            mode(o);
            let _ = write!(o, " --rateest-{what}2");
        } else {
            mode(o);
            let _ = write!(o, " --rateest-{what}");
        }
        if flags & (ABS | DELTA) != 0 {
            print_rate(o, r2, numeric);
        }
    }
    if flags & REL != 0 {
        let _ = write!(o, " --rateest2 {name2}");
    }
    Some(())
}

fn u64_at(d: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(d.get(at..at + 8)?.try_into().ok()?))
}

/// `xt_hashlimit_mtinfo3`: name[255], then `hashlimit_cfg3` at 256.
fn hashlimit(o: &mut String, cx: &Cx<'_>, d: &[u8]) -> Option<()> {
    const DIP: u32 = 0x01;
    const DPT: u32 = 0x02;
    const SIP: u32 = 0x04;
    const SPT: u32 = 0x08;
    const INVERT: u32 = 0x10;
    const BYTES: u32 = 0x20;
    const RATE_MATCH: u32 = 0x40;
    const SCALE: u64 = 1_000_000;
    let name = str_at(d, 0, 255)?;
    let (avg, burst) = (u64_at(d, 256)?, u64_at(d, 264)?);
    let (mode, size, max) = (u32_at(d, 272)?, u32_at(d, 276)?, u32_at(d, 280)?);
    let (gc, expire, interval) = (u32_at(d, 284)?, u32_at(d, 288)?, u32_at(d, 292)?);
    let (srcmask, dstmask) = (u8_at(d, 296)?, u8_at(d, 297)?);
    let dmask = if cx.proto == XtProto::Ipv6 { 128 } else { 32 };
    o.push_str(if mode & INVERT != 0 {
        " --hashlimit-above"
    } else {
        " --hashlimit-upto"
    });
    let quantum = if mode & BYTES != 0 {
        hashlimit_bytes(o, avg, burst)
    } else {
        let q = rate(o, avg, SCALE);
        let _ = write!(o, " --hashlimit-burst {burst}");
        q
    };
    if mode & (SIP | SPT | DIP | DPT) != 0 {
        let names: Vec<&str> = [
            (SIP, "srcip"),
            (SPT, "srcport"),
            (DIP, "dstip"),
            (DPT, "dstport"),
        ]
        .iter()
        .filter(|(bit, _)| mode & bit != 0)
        .map(|(_, n)| *n)
        .collect();
        let _ = write!(o, " --hashlimit-mode {}", names.join(","));
    }
    let _ = write!(o, " --hashlimit-name {name}");
    if size != 0 {
        let _ = write!(o, " --hashlimit-htable-size {size}");
    }
    if max != 0 {
        let _ = write!(o, " --hashlimit-htable-max {max}");
    }
    if gc != 1000 {
        let _ = write!(o, " --hashlimit-htable-gcinterval {gc}");
    }
    if u64::from(expire) != quantum {
        let _ = write!(o, " --hashlimit-htable-expire {expire}");
    }
    if srcmask != dmask {
        let _ = write!(o, " --hashlimit-srcmask {srcmask}");
    }
    if dstmask != dmask {
        let _ = write!(o, " --hashlimit-dstmask {dstmask}");
    }
    if mode & RATE_MATCH != 0 {
        o.push_str(" --hashlimit-rate-match");
        if interval != 1 {
            let _ = write!(o, " --hashlimit-rate-interval {interval}");
        }
    }
    Some(())
}

/// ` N/unit` of a period in `scale` units per second; the default expiry in ms.
fn rate(o: &mut String, period: u64, scale: u64) -> u64 {
    let rates = [
        ("day", scale * 24 * 60 * 60),
        ("hour", scale * 60 * 60),
        ("min", scale * 60),
        ("sec", scale),
    ];
    if period == 0 {
        o.push_str(" inf");
        return 0;
    }
    let mut i = 1;
    while i < rates.len() {
        let mult = rates[i].1;
        if period > mult || mult / period < mult % period {
            break;
        }
        i += 1;
    }
    let (name, mult) = rates[i - 1];
    let _ = write!(o, " {}/{name}", mult / period);
    mult / scale * 1000
}

/// ` Nkb/s --hashlimit-burst Nkb` of a byte-mode hashlimit; the default expiry in ms.
fn hashlimit_bytes(o: &mut String, avg: u64, burst: u64) -> u64 {
    const UNITS: [(&str, u64); 3] = [("m", 1024 * 1024), ("k", 1024), ("", 1)];
    let cost_to_bytes = |cost: u64| {
        let r = u64::from(u32::MAX)
            .checked_div(cost)
            .unwrap_or(u64::from(u32::MAX));
        r.wrapping_sub(1) << 4
    };
    let bytes_to_cost = |bytes: u64| {
        let r = (bytes >> 4) as u32;
        u64::from(u32::MAX) / (u64::from(r) + 1)
    };
    let r = cost_to_bytes(avg);
    let mut i = 0;
    while i < UNITS.len() - 1 {
        let t = UNITS[i].1;
        if r >= t && bytes_to_cost(r & !(t - 1)) == avg {
            break;
        }
        i += 1;
    }
    let _ = write!(o, " {}{}b/s", r / UNITS[i].1, UNITS[i].0);
    if burst == 0 {
        return 15 * 1000;
    }
    let r = r.wrapping_mul(burst);
    let mut i = 0;
    while i < UNITS.len() - 1 && r < UNITS[i].1 {
        i += 1;
    }
    let _ = write!(o, " --hashlimit-burst {}{}b", r / UNITS[i].1, UNITS[i].0);
    60 * 1000
}

/// `xt_time_info`: date_start, date_stop, daytime_start, daytime_stop, monthdays, weekdays,
/// flags.
fn time(o: &mut String, d: &[u8]) -> Option<()> {
    const WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    let (date_start, date_stop) = (u32_at(d, 0)?, u32_at(d, 4)?);
    let (day_start, day_stop) = (u32_at(d, 8)?, u32_at(d, 12)?);
    let (monthdays, weekdays, flags) = (u32_at(d, 16)?, u8_at(d, 20)?, u8_at(d, 21)?);
    let hms = |s: u32| format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
    if day_start != 0 || day_stop != 24 * 60 * 60 - 1 {
        let _ = write!(
            o,
            " --timestart {} --timestop {}",
            hms(day_start),
            hms(day_stop)
        );
    }
    if monthdays != 0xffff_fffe {
        let days: Vec<String> = (1..=31)
            .filter(|i| monthdays & (1 << i) != 0)
            .map(|i: u32| i.to_string())
            .collect();
        let _ = write!(o, " --monthdays {}", days.join(","));
    }
    if weekdays != 0xfe {
        let days: Vec<&str> = (1..=7)
            .filter(|i| weekdays & (1 << i) != 0)
            .map(|i| WEEKDAYS[i - 1])
            .collect();
        let _ = write!(o, " --weekdays {}", days.join(","));
    }
    for (opt, date) in [("--datestart", date_start), ("--datestop", date_stop)] {
        if date != 0 {
            let _ = write!(o, " {opt} {}", iso_date(date));
        }
    }
    if flags & 0x1 != 0 {
        o.push_str(" --kerneltz");
    }
    if flags & 0x2 != 0 {
        o.push_str(" --contiguous");
    }
    Some(())
}

/// `YYYY-MM-DDTHH:MM:SS` in UTC of seconds since 1970.
fn iso_date(secs: u32) -> String {
    let (days, rem) = (i64::from(secs / 86_400), secs % 86_400);
    // Days since 1970-01-01 to a civil date (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}
