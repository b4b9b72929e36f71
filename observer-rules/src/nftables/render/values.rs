//! Values as `nft list ruleset` prints them: addresses, ports, protocol names, marks, flag
//! sets (ct state, tcp flags), icmp types... keyed by a datatype ([`Ty`]) and a byte order;
//! and the flag words of a log statement, shared by nft's `log` and iptables' `LOG` target.
//!
//! Symbol tables are the ones nft ships built in; values without a name print as numbers.
//! Interface indexes print as numbers (nft resolves them to names in its own namespace, which
//! the observer cannot do reliably for another namespace).
//!
//! Layering: the bottom of the rule renderer; uses only `crate::netlink` (strings) and `ifnames`
//! (interface names), never the printers above it.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::nftables::render::symtab::*;

/// How a value is laid out in a register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Network order (payload fields, addresses, ports).
    Big,
    /// Host order (meta and ct keys).
    Host,
}

/// The datatypes the renderer knows how to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Integer,
    /// Printed as hex (`0x...`), zero-padded to the value's width.
    Hex,
    /// An integer nft prints in hex without padding (raw payload `@nh,8,8 0xff`, `comp flags`).
    HexInt,
    Mark,
    Ipv4,
    Ipv6,
    Port,
    InetProto,
    Ifname,
    Ifindex,
    EtherAddr,
    EtherType,
    NfProto,
    CtState,
    CtStatus,
    CtDir,
    /// Conntrack event bits (`ct event set new,destroy`).
    CtEvent,
    /// Conntrack labels, a bitmap whose bit n is in byte n / 8: printed as the bit number.
    CtLabel,
    TcpFlags,
    IcmpType,
    Icmp6Type,
    IcmpCode,
    Icmp6Code,
    FibAddrType,
    PktType,
    ArpOp,
    Dscp,
    /// IPv6 mobility header type.
    MhType,
    /// A link type (ARPHRD_*: `meta iiftype ether`).
    Arphrd,
    /// A device group (`iifgroup "default"`).
    Devgroup,
    /// A routing realm (`meta rtclassid "cosmos"`).
    Realm,
    /// Nanoseconds since the epoch (`meta time "2019-07-01 00:00:00"`, UTC).
    Time,
    /// A day of the week (`meta day "Saturday"`).
    Day,
    /// Seconds since midnight (`meta hour "17:00"`).
    Hour,
    /// Milliseconds (`ct expiration 30s`).
    Msecs,
    Ecn,
    IgmpType,
    DccpType,
    Boolean,
    Verdict,
    /// A tc handle (`meta priority`): `major:minor`.
    TcHandle,
    /// A type nft knows and this renderer does not: printed as hex.
    Other,
}

impl Ty {
    /// From nft's datatype id (as stored in NFTA_SET_KEY_TYPE / NFTA_SET_DATA_TYPE).
    pub(crate) fn from_nft_id(id: u32) -> Ty {
        match id {
            1 => Ty::Verdict,
            2 => Ty::NfProto,
            3 => Ty::Hex,
            4 => Ty::Integer,
            5 | 41 => Ty::Ifname,
            6 | 9 => Ty::EtherAddr,
            7 => Ty::Ipv4,
            8 => Ty::Ipv6,
            10 => Ty::EtherType,
            11 => Ty::ArpOp,
            12 => Ty::InetProto,
            13 => Ty::Port,
            14 => Ty::IcmpType,
            15 => Ty::TcpFlags,
            19 => Ty::Mark,
            20 => Ty::Ifindex,
            24 | 25 => Ty::Integer,
            26 => Ty::CtState,
            27 => Ty::CtDir,
            28 => Ty::CtStatus,
            29 => Ty::Icmp6Type,
            31 => Ty::PktType,
            32 => Ty::IcmpCode,
            33 => Ty::Icmp6Code,
            36 => Ty::Dscp,
            38 => Ty::FibAddrType,
            39 => Ty::Boolean,
            _ => Ty::Other,
        }
    }

    /// The byte order nft uses for this type when it has no other hint.
    pub(crate) fn natural_order(self) -> Order {
        match self {
            Ty::Mark
            | Ty::Ifindex
            | Ty::CtState
            | Ty::CtStatus
            | Ty::CtDir
            | Ty::CtEvent
            | Ty::FibAddrType
            | Ty::PktType
            | Ty::NfProto
            | Ty::TcHandle
            | Ty::Boolean => Order::Host,
            _ => Order::Big,
        }
    }

    /// Size in bytes of one value of this type in a set key, before padding.
    pub(crate) fn size(self) -> Option<usize> {
        Some(match self {
            Ty::Ipv4
            | Ty::Mark
            | Ty::Ifindex
            | Ty::CtState
            | Ty::CtStatus
            | Ty::CtEvent
            | Ty::Integer => 4,
            Ty::Ipv6 => 16,
            Ty::Port | Ty::EtherType | Ty::ArpOp => 2,
            Ty::InetProto
            | Ty::NfProto
            | Ty::IcmpType
            | Ty::Icmp6Type
            | Ty::Icmp6Code
            | Ty::TcpFlags => 1,
            Ty::PktType
            | Ty::Dscp
            | Ty::MhType
            | Ty::Ecn
            | Ty::IgmpType
            | Ty::DccpType
            | Ty::CtDir
            | Ty::IcmpCode
            | Ty::Boolean => 1,
            Ty::EtherAddr => 6,
            Ty::Arphrd => 2,
            Ty::Ifname => 16,
            Ty::Devgroup | Ty::Realm | Ty::Hour | Ty::Msecs => 4,
            Ty::Time => 8,
            Ty::Day => 1,
            _ => return None,
        })
    }

    pub(crate) fn is_flags(self) -> bool {
        matches!(self, Ty::CtState | Ty::CtStatus | Ty::TcpFlags)
    }
}

/// Split a concatenated nft datatype id into its fields, first field first.
pub(crate) fn concat_types(id: u32) -> Vec<Ty> {
    if id <= 0x3f {
        return vec![Ty::from_nft_id(id)];
    }
    let mut parts = Vec::new();
    let mut rest = id;
    while rest != 0 {
        parts.push(Ty::from_nft_id(rest & 0x3f));
        rest >>= 6;
    }
    parts.reverse();
    parts
}

/// The integer value of a register's bytes in the given order (up to 8 bytes; longer values
/// keep their low 8 bytes).
pub(crate) fn int(bytes: &[u8], order: Order) -> u64 {
    let mut v: u64 = 0;
    match order {
        Order::Big => {
            for b in bytes {
                v = (v << 8) | u64::from(*b);
            }
        }
        Order::Host => {
            if cfg!(target_endian = "little") {
                for b in bytes.iter().rev() {
                    v = (v << 8) | u64::from(*b);
                }
            } else {
                for b in bytes {
                    v = (v << 8) | u64::from(*b);
                }
            }
        }
    }
    v
}

pub(crate) fn hex(bytes: &[u8], order: Order) -> String {
    if bytes.len() > 8 {
        let digits: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        return format!("0x{digits}");
    }
    format!("0x{:0width$x}", int(bytes, order), width = bytes.len() * 2)
}

/// An IPv6 address as inet_ntop writes it, which nft uses: like Rust's, except that an
/// IPv4-compatible address (`::a.b.c.d`, first 96 bits zero) keeps its dotted tail.
fn ipv6_text(a: Ipv6Addr) -> String {
    let w = a.segments();
    if w[..6].iter().all(|x| *x == 0) && w[6] != 0 {
        let o = a.octets();
        return format!("::{}", Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    a.to_string()
}

/// Print one value of a type.
pub(crate) fn format(ty: Ty, order: Order, bytes: &[u8]) -> String {
    let n = int(bytes, order);
    match ty {
        Ty::Ipv4 => match <[u8; 4]>::try_from(bytes) {
            Ok(a) => Ipv4Addr::from(a).to_string(),
            Err(_) => hex(bytes, Order::Big),
        },
        Ty::Ipv6 => match <[u8; 16]>::try_from(bytes) {
            Ok(a) => ipv6_text(Ipv6Addr::from(a)),
            Err(_) => hex(bytes, Order::Big),
        },
        // A whole name ending in `*` escapes it: unescaped, it would read as a wildcard.
        Ty::Ifname => {
            let s = crate::netlink::string(bytes);
            match s.strip_suffix('*') {
                Some(stem) => format!("\"{stem}\\*\""),
                None => format!("\"{s}\""),
            }
        }
        Ty::Mark | Ty::Hex | Ty::Other => hex(bytes, order),
        Ty::HexInt => {
            if bytes.len() <= 8 {
                format!("0x{n:x}")
            } else {
                let digits: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                let digits = digits.trim_start_matches('0');
                format!("0x{}", if digits.is_empty() { "0" } else { digits })
            }
        }
        Ty::EtherAddr => bytes
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":"),
        // Named as `nft` names it, from the namespace's own link table (see `ifnames`).
        Ty::Ifindex => match crate::nftables::render::ifnames::lookup(n as u32) {
            Some(name) => format!("\"{name}\""),
            None => n.to_string(),
        },
        Ty::Integer | Ty::Port => n.to_string(),
        Ty::Boolean => if n == 0 { "missing" } else { "exists" }.into(),
        Ty::InetProto => match crate::nftables::render::symbols::protocol(n) {
            Some(name) => name.to_string(),
            None => named(INET_PROTO, n),
        },
        Ty::EtherType => match n {
            0x0800 => "ip".into(),
            0x86dd => "ip6".into(),
            0x0806 => "arp".into(),
            0x8100 => "8021q".into(),
            0x88a8 => "8021ad".into(),
            _ => format!("0x{n:04x}"),
        },
        Ty::NfProto => match n {
            2 => "ipv4".into(),
            10 => "ipv6".into(),
            _ => n.to_string(),
        },
        Ty::CtDir => match n {
            0 => "original".into(),
            1 => "reply".into(),
            _ => n.to_string(),
        },
        Ty::CtState | Ty::CtStatus | Ty::TcpFlags | Ty::CtEvent => flags(ty, n),
        Ty::IcmpType => named(ICMP_TYPE, n),
        Ty::Icmp6Type => named(ICMP6_TYPE, n),
        Ty::IcmpCode => named(ICMP_CODE, n),
        Ty::Icmp6Code => named(ICMP6_CODE, n),
        Ty::FibAddrType => named(FIB_ADDR, n),
        Ty::PktType => named(PKTTYPE, n),
        Ty::ArpOp => named(ARPOP, n),
        // DSCP values without a name are hex, two digits (`ip6 dscp set 0x3f`).
        Ty::Dscp => match DSCP.iter().find(|(v, _)| *v == n) {
            Some((_, name)) => (*name).to_string(),
            None => format!("0x{n:02x}"),
        },
        Ty::MhType => named(MH_TYPE, n),
        Ty::Arphrd => named(ARPHRD, n),
        Ty::Devgroup => quoted(crate::nftables::render::symbols::devgroup(n), n),
        Ty::Realm => quoted(crate::nftables::render::symbols::realm(n), n),
        Ty::Time => date(n),
        Ty::Day => match DAYS.get(n as usize) {
            Some(d) => format!("\"{d}\""),
            None => n.to_string(),
        },
        Ty::Hour => {
            let (h, m, s) = (n / 3600, n / 60 % 60, n % 60);
            if s == 0 {
                format!("\"{h:02}:{m:02}\"")
            } else {
                format!("\"{h:02}:{m:02}:{s:02}\"")
            }
        }
        Ty::Msecs => duration(n),
        Ty::Ecn => named(ECN, n),
        Ty::CtLabel => {
            let set: Vec<usize> = (0..bytes.len() * 8)
                .filter(|i| bytes[i / 8] & (1 << (i % 8)) != 0)
                .collect();
            match set.as_slice() {
                [bit] => bit.to_string(),
                _ => hex(bytes, Order::Big),
            }
        }
        Ty::IgmpType => named(IGMP_TYPE, n),
        Ty::DccpType => named(DCCP_TYPE, n),
        Ty::Verdict => n.to_string(),
        Ty::TcHandle => match n {
            0xffff_ffff => "root".into(),
            0 => "none".into(),
            _ => format!("{:x}:{:x}", n >> 16, n & 0xffff),
        },
    }
}

/// A flag set as nft prints it: names joined by commas, in bit order.
pub(crate) fn flags(ty: Ty, v: u64) -> String {
    let table: &[(u64, &str)] = match ty {
        Ty::CtState => CT_STATE,
        Ty::CtStatus => CT_STATUS,
        Ty::TcpFlags => TCP_FLAGS,
        Ty::CtEvent => CT_EVENT,
        _ => &[],
    };
    let mut names = Vec::new();
    let mut rest = v;
    for (bit, name) in table {
        if v & bit != 0 {
            names.push((*name).to_string());
            rest &= !bit;
        }
    }
    if rest != 0 || names.is_empty() {
        names.push(format!("0x{rest:x}"));
    }
    names.join(",")
}

/// A flag set as nft prints a set element or a mask: names joined by ` | `, in bit order.
pub(crate) fn flags_or(ty: Ty, v: u64) -> String {
    flags(ty, v).replace(',', " | ")
}

/// The `flags ...` words of a log statement (NF_LOG_* bits), as nft prints them one by one.
pub(crate) fn push_log_flags(text: &mut String, flags: u32) {
    match (flags & 1 != 0, flags & 2 != 0) {
        (true, true) => text.push_str(" flags tcp sequence,options"),
        (true, false) => text.push_str(" flags tcp sequence"),
        (false, true) => text.push_str(" flags tcp options"),
        _ => {}
    }
    if flags & 4 != 0 {
        text.push_str(" flags ip options");
    }
    if flags & 8 != 0 {
        text.push_str(" flags skuid");
    }
    if flags & 0x20 != 0 {
        text.push_str(" flags ether");
    }
}

fn quoted(name: Option<&str>, n: u64) -> String {
    match name {
        Some(name) => format!("\"{name}\""),
        None => n.to_string(),
    }
}

const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// Nanoseconds since the epoch as nft prints a date (nft uses local time; observer UTC).
fn date(ns: u64) -> String {
    let fmt = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns))
        .ok()
        .and_then(|t| t.format(&fmt).ok())
        .map(|t| format!("\"{t}\""))
        .unwrap_or_else(|| ns.to_string())
}

/// How a value prints as one end of a range: symbolic protocol numbers stay numbers, and
/// milliseconds print as seconds, as nft prints them there.
pub(crate) fn range_end(ty: Ty, order: Order, bytes: &[u8]) -> String {
    match ty {
        Ty::InetProto | Ty::ArpOp | Ty::Icmp6Code => int(bytes, order).to_string(),
        Ty::Msecs => format!("{}s", int(bytes, order) / 1000),
        _ => format(ty, order, bytes),
    }
}

fn named(table: &[(u64, &str)], v: u64) -> String {
    table
        .iter()
        .find(|(n, _)| *n == v)
        .map(|(_, s)| (*s).to_string())
        .unwrap_or_else(|| v.to_string())
}

/// `10.0.0.0/8` from a (possibly shortened) address and a prefix length.
pub(crate) fn prefix(ty: Ty, bytes: &[u8], plen: u32) -> String {
    let full = match ty {
        Ty::Ipv6 => 16,
        _ => 4,
    };
    let mut addr = bytes.to_vec();
    addr.resize(full, 0);
    format!("{}/{plen}", format(ty, Order::Big, &addr))
}

/// The prefix length of a mask made of leading ones, if it is one.
pub(crate) fn prefix_len(mask: &[u8]) -> Option<u32> {
    let mut len = 0;
    let mut ended = false;
    for b in mask {
        for i in (0..8).rev() {
            let one = b & (1 << i) != 0;
            if one && ended {
                return None;
            }
            if one {
                len += 1;
            } else {
                ended = true;
            }
        }
    }
    Some(len)
}

/// A byte-string interval `[start, end)` as nft prints it: a prefix when it is one, else a
/// range `a-b`, or the single value.
pub(crate) fn interval(ty: Ty, order: Order, start: &[u8], end_inclusive: &[u8]) -> String {
    if start == end_inclusive {
        return format(ty, order, start);
    }
    if matches!(ty, Ty::Ipv4 | Ty::Ipv6) && start.len() == end_inclusive.len() {
        // start/plen covers exactly [start, end] when the host bits are 0 in start and 1 in end.
        let bits = start.len() * 8;
        let mut plen = bits;
        while plen > 0 {
            let bit = plen - 1;
            let (byte, mask) = (bit / 8, 0x80u8 >> (bit % 8));
            if start[byte] & mask == 0 && end_inclusive[byte] & mask != 0 {
                plen -= 1;
            } else {
                break;
            }
        }
        let same_head = (0..plen).all(|bit| {
            let (byte, mask) = (bit / 8, 0x80u8 >> (bit % 8));
            start[byte] & mask == end_inclusive[byte] & mask
        });
        if plen < bits && same_head {
            return prefix(ty, start, plen as u32);
        }
    }
    format!(
        "{}-{}",
        range_end(ty, order, start),
        range_end(ty, order, end_inclusive)
    )
}

/// `bytes - 1` as a big-endian number of the same width (interval ends are exclusive).
pub(crate) fn minus_one(bytes: &[u8]) -> Vec<u8> {
    let mut v = bytes.to_vec();
    for b in v.iter_mut().rev() {
        if *b == 0 {
            *b = 0xff;
        } else {
            *b -= 1;
            break;
        }
    }
    v
}

/// A timeout as nft prints it: `1d2h3m4s500ms`.
pub(crate) fn duration(ms: u64) -> String {
    let mut out = String::new();
    let mut rest = ms;
    for (unit, name) in [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
    ] {
        if rest >= unit {
            out.push_str(&format!("{}{name}", rest / unit));
            rest %= unit;
        }
    }
    if rest > 0 || out.is_empty() {
        out.push_str(&format!("{rest}ms"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_become_prefixes_or_ranges() {
        let iv = |a: [u8; 4], b: [u8; 4]| interval(Ty::Ipv4, Order::Big, &a, &b);
        assert_eq!(iv([10, 0, 0, 0], [10, 255, 255, 255]), "10.0.0.0/8");
        assert_eq!(
            iv([192, 168, 1, 10], [192, 168, 1, 20]),
            "192.168.1.10-192.168.1.20"
        );
        assert_eq!(iv([172, 16, 0, 1], [172, 16, 0, 1]), "172.16.0.1");
        assert_eq!(iv([10, 0, 0, 0], [10, 0, 0, 255]), "10.0.0.0/24");
        assert_eq!(
            interval(Ty::Port, Order::Big, &[3, 232], &[7, 208]),
            "1000-2000"
        );
        assert_eq!(minus_one(&[11, 0, 0, 0]), vec![10, 255, 255, 255]);
    }

    #[test]
    fn flags_and_names() {
        assert_eq!(flags(Ty::CtState, 6), "established,related");
        assert_eq!(flags(Ty::TcpFlags, 0x16), "syn,rst,ack");
        assert_eq!(format(Ty::InetProto, Order::Big, &[6]), "tcp");
        assert_eq!(format(Ty::InetProto, Order::Big, &[250]), "250");
        assert_eq!(
            format(Ty::Mark, Order::Host, &0x10u32.to_ne_bytes()),
            "0x00000010"
        );
        assert_eq!(prefix_len(&[0xff, 0xf0, 0, 0]), Some(12));
        assert_eq!(prefix_len(&[0xff, 0x0f]), None);
        assert_eq!(concat_types((7 << 6) | 13), vec![Ty::Ipv4, Ty::Port]);
    }
}
