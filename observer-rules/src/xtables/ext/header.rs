//! Extensions that read or set one field of the packet or its metadata: TTL and hop limit, DSCP
//! and TOS, the TCP MSS, the packet type, the checksum. One table of matches and one of targets,
//! each row the extension's name, the revisions the tool writes, and its printer of options.
//!
//! Part of [`ext`](super), dispatched from [`match_options`](super::match_options) and
//! [`target_options`](super::target_options) when their own extensions do not match.

use std::fmt::Write as _;

use crate::xtables::bytes::{i32_at, u16_at, u8_at};
use crate::xtables::text::{inv, Cx};

/// Writes an extension's options (after its name); `None` when the payload does not decode.
pub(super) type Printer = fn(&mut String, &Cx<'_>, &[u8], u8) -> Option<()>;

/// A row of a dispatch table: name, lowest and highest revision, printer.
pub(super) type Row = (&'static str, u8, u8, Printer);

pub(super) const MATCHES: &[Row] = &[
    ("ttl", 0, 0, |o, _, d, _| {
        field_cmp(o, d, ["--ttl-eq", "! --ttl-eq", "--ttl-lt", "--ttl-gt"])
    }),
    ("hl", 0, 0, |o, _, d, _| {
        field_cmp(o, d, ["--hl-eq", "! --hl-eq", "--hl-lt", "--hl-gt"])
    }),
    ("dscp", 0, 0, |o, _, d, _| {
        inv(o, u8_at(d, 1)? != 0);
        let _ = write!(o, " --dscp 0x{:02x}", u8_at(d, 0)?);
        Some(())
    }),
    ("tos", 0, 0, |o, _, d, _| {
        inv(o, u8_at(d, 1)? != 0);
        let _ = write!(o, " --tos 0x{:02x}", u8_at(d, 0)?);
        Some(())
    }),
    ("tos", 1, 1, |o, _, d, _| {
        // xt_tos_match_info: tos_mask, tos_value, invert.
        let (mask, value) = (u8_at(d, 0)?, u8_at(d, 1)?);
        inv(o, u8_at(d, 2)? != 0);
        let _ = write!(o, " --tos 0x{value:02x}/0x{mask:02x}");
        Some(())
    }),
    ("tcpmss", 0, 0, |o, _, d, _| {
        let (min, max) = (u16_at(d, 0)?, u16_at(d, 2)?);
        inv(o, u8_at(d, 4)? != 0);
        let _ = write!(o, " --mss {min}");
        if min != max {
            let _ = write!(o, ":{max}");
        }
        Some(())
    }),
    ("pkttype", 0, 0, |o, _, d, _| {
        const TYPES: [&str; 6] = [
            "unicast",
            "broadcast",
            "multicast",
            "otherhost",
            "outgoing",
            "loopback",
        ];
        let (ty, invert) = (i32_at(d, 0)?, i32_at(d, 4)?);
        inv(o, invert != 0);
        match usize::try_from(ty).ok().and_then(|t| TYPES.get(t)) {
            Some(name) => {
                let _ = write!(o, " --pkt-type {name}");
            }
            None => {
                let _ = write!(o, " --pkt-type {ty}");
            }
        }
        Some(())
    }),
    ("ecn", 0, 0, |o, _, d, _| {
        // xt_ecn_info: operation, invert, ip_ect, tcp-flags-or-unused.
        const IP: u8 = 0x01;
        const ECE: u8 = 0x10;
        const CWR: u8 = 0x20;
        let (op, invert, ect) = (u8_at(d, 0)?, u8_at(d, 1)?, u8_at(d, 2)?);
        if op & ECE != 0 {
            inv(o, invert & ECE != 0);
            o.push_str(" --ecn-tcp-ece");
        }
        if op & CWR != 0 {
            inv(o, invert & CWR != 0);
            o.push_str(" --ecn-tcp-cwr");
        }
        if op & IP != 0 {
            inv(o, invert & IP != 0);
            let _ = write!(o, " --ecn-ip-ect {ect}");
        }
        Some(())
    }),
];

pub(super) const TARGETS: &[Row] = &[
    ("TTL", 0, 0, |o, _, d, _| {
        field_set(o, d, ["--ttl-set", "--ttl-inc", "--ttl-dec"])
    }),
    ("HL", 0, 0, |o, _, d, _| {
        field_set(o, d, ["--hl-set", "--hl-inc", "--hl-dec"])
    }),
    ("DSCP", 0, 0, |o, _, d, _| {
        let _ = write!(o, " --set-dscp 0x{:02x}", u8_at(d, 0)?);
        Some(())
    }),
    ("TOS", 0, 0, |o, _, d, _| {
        let _ = write!(o, " --set-tos 0x{:02x}", u8_at(d, 0)?);
        Some(())
    }),
    ("TOS", 1, 1, |o, _, d, _| {
        let (value, mask) = (u8_at(d, 0)?, u8_at(d, 1)?);
        let _ = write!(o, " --set-tos 0x{value:02x}/0x{mask:02x}");
        Some(())
    }),
    ("CHECKSUM", 0, 0, |o, _, d, _| {
        if u8_at(d, 0)? & 0x01 != 0 {
            o.push_str(" --checksum-fill");
        }
        Some(())
    }),
    ("TCPMSS", 0, 0, |o, _, d, _| {
        match u16_at(d, 0)? {
            u16::MAX => o.push_str(" --clamp-mss-to-pmtu"),
            mss => {
                let _ = write!(o, " --set-mss {mss}");
            }
        }
        Some(())
    }),
    ("CLASSIFY", 0, 0, |o, cx, d, _| {
        let p = crate::xtables::bytes::u32_at(d, 0)?;
        if cx.proto == crate::xtables::XtProto::Arp {
            // arptables prints the class unpadded.
            let _ = write!(o, " --set-class {:x}:{:x}", p >> 16, p & 0xffff);
        } else {
            let _ = write!(o, " --set-class {:04x}:{:04x}", p >> 16, p & 0xffff);
        }
        Some(())
    }),
    // arp_tables' `struct arpt_mangle`: source and target hardware addresses (16 bytes each),
    // source and target IPv4 addresses, flags, then an int verdict at 44.
    ("mangle", 0, 0, |o, cx, d, _| {
        if cx.proto != crate::xtables::XtProto::Arp || d.len() < 48 {
            return None;
        }
        let flags = u8_at(d, 40)?;
        let mac = |o: &mut String, opt: &str, at: usize| {
            let _ = write!(o, " {opt} ");
            for (i, b) in d[at..at + 6].iter().enumerate() {
                if i > 0 {
                    o.push(':');
                }
                let _ = write!(o, "{b:02x}");
            }
        };
        let ip = |at: usize| std::net::Ipv4Addr::new(d[at], d[at + 1], d[at + 2], d[at + 3]);
        if flags & 0x04 != 0 {
            let _ = write!(o, " --mangle-ip-s {}", ip(32));
        }
        if flags & 0x01 != 0 {
            mac(o, "--mangle-mac-s", 0);
        }
        if flags & 0x08 != 0 {
            let _ = write!(o, " --mangle-ip-d {}", ip(36));
        }
        if flags & 0x02 != 0 {
            mac(o, "--mangle-mac-d", 16);
        }
        match crate::xtables::bytes::u32_at(d, 44)? {
            1 => {}
            0 => o.push_str(" --mangle-target DROP"),
            _ => o.push_str(" --mangle-target CONTINUE"),
        }
        Some(())
    }),
];

/// `{u8 mode; u8 value}` compared: equal, not equal, less, greater.
fn field_cmp(o: &mut String, d: &[u8], ops: [&str; 4]) -> Option<()> {
    let (mode, value) = (u8_at(d, 0)?, u8_at(d, 1)?);
    let _ = write!(o, " {} {value}", ops.get(usize::from(mode))?);
    Some(())
}

/// `{u8 mode; u8 value}` written: set, increment, decrement.
fn field_set(o: &mut String, d: &[u8], ops: [&str; 3]) -> Option<()> {
    let (mode, value) = (u8_at(d, 0)?, u8_at(d, 1)?);
    let _ = write!(o, " {} {value}", ops.get(usize::from(mode))?);
    Some(())
}

/// The printer of `name` at `rev` in `table`, if it has one.
pub(super) fn find(table: &[Row], name: &[u8], rev: u8) -> Option<Printer> {
    table
        .iter()
        .find(|(n, lo, hi, _)| n.as_bytes() == name && (*lo..=*hi).contains(&rev))
        .map(|row| row.3)
}
