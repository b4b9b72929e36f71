//! Extensions that match IPsec and IPv6 extension headers: esp, ah (IPv4 and IPv6), ipcomp,
//! frag, mh; and the IPsec policy a packet was (or will be) processed by (policy). Tables of rows as in [`header`](super::header).
//!
//! Part of [`ext`](super), dispatched from [`match_options`](super::match_options).

use std::fmt::Write as _;

use crate::xtables::bytes::{ipv4_at, ipv6_at, u16_at, u32_at, u8_at};
use crate::xtables::text::{inv, ip6_text, prefix_len, Cx};
use crate::xtables::XtProto;

use super::header::Row;

pub(super) const MATCHES: &[Row] = &[
    ("esp", 0, 0, |o, _, d, _| {
        spis(o, d, "--espspi", u8_at(d, 8)? & 0x1 != 0)
    }),
    ("ah", 0, 0, |o, cx, d, _| ah(o, cx, d)),
    ("ipcomp", 0, 0, |o, _, d, _| {
        // xt_ipcomp: spis[2], invflags, hdrres.
        spis(o, d, "--ipcompspi", u8_at(d, 8)? & 0x1 != 0)?;
        if u8_at(d, 9)? != 0 {
            o.push_str(" --compres");
        }
        Some(())
    }),
    ("frag", 0, 0, |o, _, d, _| {
        // ip6t_frag: ids[2], hdrlen, flags, invflags.
        let (len, flags, invf) = (u32_at(d, 8)?, u8_at(d, 12)?, u8_at(d, 13)?);
        spis(o, d, "--fragid", invf & 0x1 != 0)?;
        if flags & 0x02 != 0 {
            inv(o, invf & 0x2 != 0);
            let _ = write!(o, " --fraglen {len}");
        }
        for (bit, opt) in [
            (0x04, " --fragres"),
            (0x08, " --fragfirst"),
            (0x10, " --fragmore"),
            (0x20, " --fraglast"),
        ] {
            if flags & bit != 0 {
                o.push_str(opt);
            }
        }
        Some(())
    }),
    ("dst", 0, 0, |o, _, d, _| opts(o, d, "dst")),
    ("hbh", 0, 0, |o, _, d, _| opts(o, d, "hbh")),
    ("rt", 0, 0, |o, _, d, _| rt(o, d)),
    ("ipv6header", 0, 0, |o, _, d, _| {
        // The tool names each header's protocol from /etc/protocols (netbase's names), all but
        // hop-by-hop (protocol 0) and the upper-layer "protocol".
        const NAMES: [(u8, &str); 8] = [
            (0x80, "hop-by-hop"),
            (0x40, "ipv6-opts"),
            (0x20, "ipv6-route"),
            (0x10, "ipv6-frag"),
            (0x08, "ah"),
            (0x04, "esp"),
            (0x02, "ipv6-nonxt"),
            (0x01, "protocol"),
        ];
        let (set, invf, soft) = (u8_at(d, 0)?, u8_at(d, 1)?, u8_at(d, 2)?);
        inv(o, invf != 0);
        let names: Vec<&str> = NAMES
            .iter()
            .filter(|(bit, _)| set & bit != 0)
            .map(|(_, n)| *n)
            .collect();
        let names = if names.is_empty() {
            "NONE".to_string()
        } else {
            names.join(",")
        };
        let _ = write!(o, " --header {names}");
        if soft != 0 {
            o.push_str(" --soft");
        }
        Some(())
    }),
    ("eui64", 0, 0, |_, _, _, _| Some(())),
    ("srh", 1, 1, |o, _, d, _| srh(o, d)),
    ("policy", 0, 0, |o, cx, d, _| policy(o, cx, d)),
    ("mh", 0, 0, |o, _, d, _| {
        let (lo, hi, invf) = (u8_at(d, 0)?, u8_at(d, 1)?, u8_at(d, 2)?);
        if lo == 0 && hi == u8::MAX {
            return Some(());
        }
        inv(o, invf & 0x1 != 0);
        let _ = write!(o, " --mh-type {lo}");
        if lo != hi {
            let _ = write!(o, ":{hi}");
        }
        Some(())
    }),
];

/// ` [!] OPT lo[:hi]` of a `u32 [2]` range at 0, left out when it is the full range.
fn spis(o: &mut String, d: &[u8], opt: &str, invert: bool) -> Option<()> {
    let (lo, hi) = (u32_at(d, 0)?, u32_at(d, 4)?);
    if lo == 0 && hi == u32::MAX {
        return Some(());
    }
    inv(o, invert);
    let _ = write!(o, " {opt} {lo}");
    if lo != hi {
        let _ = write!(o, ":{hi}");
    }
    Some(())
}

/// `ipt_ah` (spis, invflags) or `ip6t_ah` (spis, hdrlen, hdrres, invflags).
fn ah(o: &mut String, cx: &Cx<'_>, d: &[u8]) -> Option<()> {
    if cx.proto != XtProto::Ipv6 {
        return spis(o, d, "--ahspi", u8_at(d, 8)? & 0x1 != 0);
    }
    let (len, res, invf) = (u32_at(d, 8)?, u8_at(d, 12)?, u8_at(d, 13)?);
    spis(o, d, "--ahspi", invf & 0x1 != 0)?;
    if len != 0 || invf & 0x2 != 0 {
        inv(o, invf & 0x2 != 0);
        let _ = write!(o, " --ahlen {len}");
    }
    if res != 0 {
        o.push_str(" --ahres");
    }
    Some(())
}

/// `xt_policy_info`: four `xt_policy_elem` of 76 bytes (saddr, smask, daddr, dmask, spi, reqid,
/// proto, mode, match bits, invert bits), then flags and len.
fn policy(o: &mut String, cx: &Cx<'_>, d: &[u8]) -> Option<()> {
    const ELEM: usize = 76;
    let (flags, len) = (u16_at(d, 4 * ELEM)?, usize::from(u16_at(d, 4 * ELEM + 2)?));
    o.push_str(if flags & 0x1 != 0 {
        " --dir in"
    } else {
        " --dir out"
    });
    o.push_str(if flags & 0x4 != 0 {
        " --pol none"
    } else {
        " --pol ipsec"
    });
    if flags & 0x8 != 0 {
        o.push_str(" --strict");
    }
    for i in 0..len.min(4) {
        let e = d.get(i * ELEM..(i + 1) * ELEM)?;
        let (spi, reqid, proto, mode) =
            (u32_at(e, 64)?, u32_at(e, 68)?, u8_at(e, 72)?, u8_at(e, 73)?);
        let (set, invf) = (u8_at(e, 74)?, u8_at(e, 75)?);
        const SADDR: u8 = 0x01;
        const DADDR: u8 = 0x02;
        const PROTO: u8 = 0x04;
        const MODE: u8 = 0x08;
        const SPI: u8 = 0x10;
        const REQID: u8 = 0x20;
        if set & REQID != 0 {
            inv(o, invf & REQID != 0);
            let _ = write!(o, " --reqid {reqid}");
        }
        if set & SPI != 0 {
            inv(o, invf & SPI != 0);
            let _ = write!(o, " --spi 0x{spi:x}");
        }
        if set & PROTO != 0 {
            inv(o, invf & PROTO != 0);
            match proto {
                50 => o.push_str(" --proto esp"),
                51 => o.push_str(" --proto ah"),
                108 => o.push_str(" --proto ipcomp"),
                p => {
                    let _ = write!(o, " --proto {p}");
                }
            }
        }
        if set & MODE != 0 {
            inv(o, invf & MODE != 0);
            let m = ["transport", "tunnel"]
                .get(usize::from(mode))
                .unwrap_or(&"???");
            let _ = write!(o, " --mode {m}");
        }
        for (bit, opt, at) in [(DADDR, "--tunnel-dst", 32), (SADDR, "--tunnel-src", 0)] {
            if set & bit == 0 {
                continue;
            }
            inv(o, invf & bit != 0);
            let _ = write!(o, " {opt} {}", addr_mask(cx, e, at)?);
        }
        if i + 1 < len {
            o.push_str(" --next");
        }
    }
    Some(())
}

/// `addr[/len]` of an address at `at` and its mask 16 bytes later, as iptables prints them.
fn addr_mask(cx: &Cx<'_>, e: &[u8], at: usize) -> Option<String> {
    let v6 = cx.proto == XtProto::Ipv6;
    let (n, full) = if v6 { (16, 128) } else { (4, 32) };
    let mask = e.get(at + 16..at + 16 + n)?;
    let addr = if v6 {
        ip6_text(&ipv6_at(e, at)?)
    } else {
        ipv4_at(e, at)?.to_string()
    };
    Some(match prefix_len(mask) {
        Some(l) if l == full => addr,
        Some(l) => format!("{addr}/{l}"),
        None if v6 => format!("{addr}/{}", ip6_text(&ipv6_at(e, at + 16)?)),
        None => format!("{addr}/{}", ipv4_at(e, at + 16)?),
    })
}

/// `ip6t_opts` of dst and hbh: hdrlen, flags, invflags, opts[16] (type << 8 | length), optsnr.
fn opts(o: &mut String, d: &[u8], name: &str) -> Option<()> {
    let (len, flags, invf, n) = (u32_at(d, 0)?, u8_at(d, 4)?, u8_at(d, 5)?, u8_at(d, 38)?);
    if flags & 0x1 != 0 {
        inv(o, invf & 0x1 != 0);
        let _ = write!(o, " --{name}-len {len}");
    }
    if flags & 0x2 != 0 {
        let _ = write!(o, " --{name}-opts");
    }
    for i in 0..usize::from(n.min(16)) {
        let opt = u16_at(d, 6 + 2 * i)?;
        let _ = write!(o, "{}{}", if i == 0 { ' ' } else { ',' }, opt >> 8);
        if opt & 0xff != 0xff {
            let _ = write!(o, ":{}", opt & 0xff);
        }
    }
    Some(())
}

/// `ip6t_rt`: rt_type, segsleft[2], hdrlen, flags, invflags, addrs[16], addrnr.
fn rt(o: &mut String, d: &[u8]) -> Option<()> {
    let (ty, len, flags, invf) = (u32_at(d, 0)?, u32_at(d, 12)?, u8_at(d, 16)?, u8_at(d, 17)?);
    if flags & 0x01 != 0 {
        inv(o, invf & 0x01 != 0);
        let _ = write!(o, " --rt-type {ty}");
    }
    let (lo, hi) = (u32_at(d, 4)?, u32_at(d, 8)?);
    if !(lo == 0 && hi == u32::MAX) {
        inv(o, invf & 0x02 != 0);
        let _ = write!(o, " --rt-segsleft {lo}");
        if lo != hi {
            let _ = write!(o, ":{hi}");
        }
    }
    if flags & 0x04 != 0 {
        inv(o, invf & 0x04 != 0);
        let _ = write!(o, " --rt-len {len}");
    }
    if flags & 0x08 != 0 {
        o.push_str(" --rt-0-res");
    }
    if flags & 0x10 != 0 {
        o.push_str(" --rt-0-addrs");
    }
    for i in 0..usize::from(u8_at(d, 274)?.min(16)) {
        let a = ipv6_at(d, 18 + 16 * i)?;
        let _ = write!(o, "{}{}", if i == 0 { ' ' } else { ',' }, ip6_text(&a));
    }
    if flags & 0x20 != 0 {
        o.push_str(" --rt-0-not-strict");
    }
    Some(())
}

/// `ip6t_srh1`: next_hdr, hdr_len, segs_left, last_entry, tag, psid, nsid, lsid, their masks,
/// mt_flags, mt_invflags.
fn srh(o: &mut String, d: &[u8]) -> Option<()> {
    let (flags, invf) = (u16_at(d, 104)?, u16_at(d, 106)?);
    let mut bit = 1u16;
    let mut field = |o: &mut String, opt: &str, value: u32| {
        if flags & bit != 0 {
            inv(o, invf & bit != 0);
            let _ = write!(o, " --srh-{opt} {value}");
        }
        bit <<= 1;
    };
    field(o, "next-hdr", u8_at(d, 0)?.into());
    for (name, at) in [("hdr-len", 1), ("segs-left", 2), ("last-entry", 3)] {
        let v = u8_at(d, at)?.into();
        for op in ["eq", "gt", "lt"] {
            field(o, &format!("{name}-{op}"), v);
        }
    }
    field(o, "tag", u16_at(d, 4)?.into());
    for (i, name) in ["psid", "nsid", "lsid"].iter().enumerate() {
        let bit = 0x0800 << i;
        if flags & bit != 0 {
            inv(o, invf & bit != 0);
            let addr = ip6_text(&ipv6_at(d, 8 + 16 * i)?);
            let len = prefix_len(d.get(56 + 16 * i..72 + 16 * i)?)?;
            let _ = write!(o, " --srh-{name} {addr}/{len}");
        }
    }
    Some(())
}
