//! Targets that rewrite, copy or answer packets: ECN, TEE, SYNPROXY, IDLETIMER, DNPT/SNPT,
//! NETMAP. Tables of rows as in [`header`](super::header).
//!
//! Part of [`ext`](super), dispatched from [`target_options`](super::target_options).

use std::fmt::Write as _;

use crate::xtables::bytes::{be16_at, ipv4_at, ipv6_at, str_at, u16_at, u32_at, u8_at};
use crate::xtables::text::{ip6_text, prefix_len, Cx};
use crate::xtables::XtProto;

use super::header::Row;

pub(super) const TARGETS: &[Row] = &[
    ("ECN", 0, 0, |o, _, d, _| {
        // ipt_ECN_info: operation, ip_ect, tcp bits (ece, cwr).
        const IP: u8 = 0x01;
        const ECE: u8 = 0x10;
        const CWR: u8 = 0x20;
        let (op, ect, bits) = (u8_at(d, 0)?, u8_at(d, 1)?, u8_at(d, 2)?);
        let (ece, cwr) = (bits & 0x1, (bits >> 1) & 0x1);
        if op == ECE | CWR && ece == 0 && cwr == 0 {
            o.push_str(" --ecn-tcp-remove");
            return Some(());
        }
        if op & ECE != 0 {
            let _ = write!(o, " --ecn-tcp-ece {ece}");
        }
        if op & CWR != 0 {
            let _ = write!(o, " --ecn-tcp-cwr {cwr}");
        }
        if op & IP != 0 {
            let _ = write!(o, " --ecn-ip-ect {ect}");
        }
        Some(())
    }),
    ("TEE", 1, 1, |o, cx, d, _| {
        // xt_tee_tginfo: gw (nf_inet_addr), oif[16].
        let gw = match cx.proto {
            XtProto::Ipv6 => ip6_text(&ipv6_at(d, 0)?),
            _ => ipv4_at(d, 0)?.to_string(),
        };
        let _ = write!(o, " --gateway {gw}");
        let oif = str_at(d, 16, 16)?;
        if !oif.is_empty() {
            let _ = write!(o, " --oif {oif}");
        }
        Some(())
    }),
    ("SYNPROXY", 0, 0, |o, _, d, _| {
        // xt_synproxy_info: options, wscale, mss.
        let (opts, wscale, mss) = (u8_at(d, 0)?, u8_at(d, 1)?, u16_at(d, 2)?);
        if opts & 0x04 != 0 {
            o.push_str(" --sack-perm");
        }
        if opts & 0x08 != 0 {
            o.push_str(" --timestamp");
        }
        if opts & 0x02 != 0 {
            let _ = write!(o, " --wscale {wscale}");
        }
        if opts & 0x01 != 0 {
            let _ = write!(o, " --mss {mss}");
        }
        if opts & 0x10 != 0 {
            o.push_str(" --ecn");
        }
        Some(())
    }),
    ("IDLETIMER", 0, 1, |o, _, d, rev| {
        // idletimer_tg_info: timeout, label[28]; v1 adds send_nl_msg, timer_type.
        let _ = write!(
            o,
            " --timeout {} --label {}",
            u32_at(d, 0)?,
            str_at(d, 4, 28)?
        );
        if rev == 1 && u8_at(d, 33)? == 1 {
            o.push_str(" --alarm");
        }
        Some(())
    }),
    ("TCPOPTSTRIP", 0, 0, |o, _, d, _| {
        // xt_tcpoptstrip_target_info: strip_bmap[8] (u32), one bit per option kind.
        let kinds: Vec<String> = (0..256usize)
            .filter(|&k| u32_at(d, k / 32 * 4).is_some_and(|w| w & (1 << (k % 32)) != 0))
            .map(|k| k.to_string())
            .collect();
        if !kinds.is_empty() {
            let _ = write!(o, " --strip-options {}", kinds.join(","));
        }
        Some(())
    }),
    ("RATEEST", 0, 0, |o, _, d, _| {
        // xt_rateest_target_info: name[16], interval (s8), ewma_log.
        let name = str_at(d, 0, 16)?;
        let (interval, ewma) = (i8::from_ne_bytes([u8_at(d, 16)?]), u8_at(d, 17)?);
        let shift = u32::try_from(i32::from(interval) + 2).ok()?;
        let interval = 1_000_000u64.checked_shl(shift)? / 4;
        let ewma = interval.checked_shl(u32::from(ewma))?;
        let _ = write!(
            o,
            " --rateest-name {name} --rateest-interval {} --rateest-ewmalog {}",
            rate_time(interval),
            rate_time(ewma)
        );
        Some(())
    }),
    ("HMARK", 0, 0, |o, cx, d, _| hmark(o, cx, d)),
    ("DNPT", 0, 0, |o, cx, d, _| npt(o, cx, d)),
    ("SNPT", 0, 0, |o, cx, d, _| npt(o, cx, d)),
    ("NETMAP", 0, 0, |o, cx, d, _| netmap(o, cx, d)),
];

/// `ip6t_npt_tginfo`: src_pfx, dst_pfx (nf_inet_addr), src_pfx_len, dst_pfx_len.
fn npt(o: &mut String, _: &Cx<'_>, d: &[u8]) -> Option<()> {
    for (opt, at, len_at) in [("--src-pfx", 0, 32), ("--dst-pfx", 16, 33)] {
        let (pfx, len) = (ipv6_at(d, at)?, u8_at(d, len_at)?);
        if !pfx.is_unspecified() || len != 0 {
            let _ = write!(o, " {opt} {}/{len}", ip6_text(&pfx));
        }
    }
    Some(())
}

/// NETMAP: an `nf_nat_ipv4_multi_range_compat` (IPv4) or `nf_nat_range` (IPv6); `--to
/// ADDR/LEN` from the range's first address and the prefix its two bounds share.
fn netmap(o: &mut String, cx: &Cx<'_>, d: &[u8]) -> Option<()> {
    let (min, max): (Vec<u8>, Vec<u8>) = match cx.proto {
        XtProto::Ipv6 => (d.get(4..20)?.to_vec(), d.get(20..36)?.to_vec()),
        _ => (d.get(8..12)?.to_vec(), d.get(12..16)?.to_vec()),
    };
    let mask: Vec<u8> = min.iter().zip(&max).map(|(a, b)| !(a ^ b)).collect();
    let addr = match cx.proto {
        XtProto::Ipv6 => ip6_text(&ipv6_at(&min, 0)?),
        _ => ipv4_at(&min, 0)?.to_string(),
    };
    match prefix_len(&mask) {
        Some(len) => {
            let _ = write!(o, " --to {addr}/{len}");
        }
        None => return None,
    }
    Some(())
}

/// A time in microseconds as RATEEST prints it: `1.5s`, `250.0ms`, `10us`.
fn rate_time(us: u64) -> String {
    if us >= 1_000_000 {
        format!("{:.1}s", us as f64 / 1e6)
    } else if us >= 1000 {
        format!("{:.1}ms", us as f64 / 1e3)
    } else {
        format!("{us}us")
    }
}

/// `xt_hmark_info`: src_mask, dst_mask (nf_inet_addr), port_mask, port_set (two be16 or one
/// be32), flags (one bit per option), proto_mask, hashrnd, hmodulus, hoffset.
fn hmark(o: &mut String, cx: &Cx<'_>, d: &[u8]) -> Option<()> {
    let flags = u32_at(d, 40)?;
    let has = |bit: u32| flags & (1 << bit) != 0;
    let n = if cx.proto == XtProto::Ipv6 { 16 } else { 4 };
    for (bit, opt, at) in [(0, "src", 0), (1, "dst", 16)] {
        if has(bit) {
            let len = prefix_len(d.get(at..at + n)?)?;
            let _ = write!(o, " --hmark-{opt}-prefix {len}");
        }
    }
    let be32 = |at: usize| u32_at(d, at).map(u32::from_be);
    for (bit, opt, value) in [
        (6, "sport-mask", format!("0x{:04x}", be16_at(d, 32)?)),
        (7, "dport-mask", format!("0x{:04x}", be16_at(d, 34)?)),
        (3, "spi-mask", format!("0x{:08x}", be32(32)?)),
        (4, "sport", format!("0x{:04x}", be16_at(d, 36)?)),
        (5, "dport", format!("0x{:04x}", be16_at(d, 38)?)),
        (2, "spi", format!("0x{:08x}", be32(36)?)),
        (8, "proto-mask", format!("0x{:02x}", u16_at(d, 44)?)),
        (9, "rnd", format!("0x{:08x}", u32_at(d, 48)?)),
        (10, "mod", u32_at(d, 52)?.to_string()),
        (11, "offset", u32_at(d, 56)?.to_string()),
    ] {
        if has(bit) {
            let _ = write!(o, " --hmark-{opt} {value}");
        }
    }
    if has(12) {
        o.push_str(" --hmark-tuple ct");
    }
    Some(())
}
