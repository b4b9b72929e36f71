//! Statements, as nft prints them: log, limit, quota, reject, nat, masquerade, redirect, queue,
//! objref, connlimit, tproxy, dup, fwd, synproxy, last, flow add. Anything else that reaches
//! here prints as `<name> …`. The less common loads (fib, rt, socket...) are in `loads`;
//! dynset (`add @set { ... }`) renders nested expressions through the dispatch, so it is in
//! `render`.
//!
//! Layering: called by `render`'s dispatch, beside `loads` and `compat`; imports only the
//! renderer's state (`renderer`) and what is below it.

use crate::netlink;
use crate::nftables::netlink::decode::Expr;
use crate::nftables::netlink::expr::Attrs;
use crate::nftables::render::fields::{
    Layer, NFPROTO_BRIDGE, NFPROTO_INET, NFPROTO_IPV4, NFPROTO_IPV6, NFPROTO_NETDEV,
};
use crate::nftables::render::renderer::{Renderer, Val};
use crate::nftables::render::values::{self, push_log_flags, Order, Ty};

pub(crate) fn render(r: &mut Renderer<'_>, e: &Expr, a: &Attrs<'_>) {
    match e.name.as_str() {
        "log" => r.emit(log(a)),
        "limit" => r.emit(limit(a)),
        "quota" => {
            let (v, unit) = byte_unit(a.u64(1).unwrap_or(0));
            let over = if a.u32(2).unwrap_or(0) & 1 != 0 {
                "over "
            } else {
                ""
            };
            r.emit(format!("quota {over}{v} {unit}"));
        }
        "connlimit" => {
            let over = if a.u32(2).unwrap_or(0) & 1 != 0 {
                "over "
            } else {
                ""
            };
            r.emit(format!("ct count {over}{}", a.u32(1).unwrap_or(0)));
        }
        "reject" => {
            let text = reject(r, a);
            r.emit(text);
        }
        "nat" => {
            let text = nat(r, a);
            r.emit(text);
        }
        // nft hides no dependency for the ports of a masquerade or redirect (`ip protocol tcp
        // redirect to :tcp dport map { 22 : 8000 }` keeps its `ip protocol tcp`).
        "masq" => {
            let text = ports_stmt(r, "masquerade", a.reg(2), a.reg(3), a.u32(1));
            r.forget_needs(0);
            r.emit(text);
        }
        "redir" => {
            let text = ports_stmt(r, "redirect", a.reg(1), a.reg(2), a.u32(3));
            r.forget_needs(0);
            r.emit(text);
        }
        "queue" => {
            let text = queue(r, a);
            r.emit(text);
        }
        "objref" => {
            let text = objref(r, a);
            r.emit(text);
        }
        "tproxy" => {
            let text = tproxy(r, a);
            r.emit(text);
        }
        "dup" | "fwd" => {
            let (dev_reg, addr_reg) = if e.name == "dup" {
                (a.reg(2), a.reg(1))
            } else {
                (a.reg(1), a.reg(2))
            };
            let dev = r.load(dev_reg);
            let mut text = e.name.clone();
            // fwd to an address names the address family.
            if e.name == "fwd" && addr_reg.is_some() {
                match a.u32(3) {
                    Some(2) => text.push_str(" ip"),
                    Some(10) => text.push_str(" ip6"),
                    _ => {}
                }
            }
            text.push_str(" to");
            if let Some(addr) = addr_reg {
                let v = r.load(Some(addr));
                text = format!("{text} {}", value_as(r, &v, Ty::Ipv4));
                if dev_reg.is_some() {
                    text = format!("{text} device {}", value_as(r, &dev, Ty::Ifindex));
                }
            } else {
                text = format!("{text} {}", value_as(r, &dev, Ty::Ifindex));
            }
            r.emit(text);
        }
        "synproxy" => {
            let flags = a.u32(3).unwrap_or(0);
            let mut text = "synproxy".to_string();
            // The values are sent either way; the flags say which options were given.
            if let Some(mss) = a.bytes(1).and_then(|b| netlink::be_u16(b).ok()) {
                if flags & 0x1 != 0 {
                    text = format!("{text} mss {mss}");
                }
            }
            if let Some(ws) = a
                .bytes(2)
                .and_then(|b| b.first().copied())
                .filter(|_| flags & 0x2 != 0)
            {
                text = format!("{text} wscale {ws}");
            }
            if flags & 0x8 != 0 {
                text.push_str(" timestamp");
            }
            if flags & 0x4 != 0 {
                text.push_str(" sack-perm");
            }
            r.emit(text);
        }
        "last" => r.emit("last"),
        "flow_offload" => {
            let name = a.string(1).unwrap_or_default();
            r.emit(format!("flow add @{name}"));
        }
        other => r.emit(format!("{other} …")),
    }
}

/// A register's value printed as the given type (addresses, ports, interfaces).
fn value_as(r: &mut Renderer<'_>, v: &Val, ty: Ty) -> String {
    match v {
        Val::Imm(b) => match ty {
            Ty::Ipv4 if b.len() == 16 => values::format(Ty::Ipv6, Order::Big, b),
            Ty::Port => values::format(Ty::Port, Order::Big, b.get(..2).unwrap_or(b)),
            _ => values::format(ty, ty.natural_order(), b),
        },
        other => r.field(other).text,
    }
}

fn log(a: &Attrs<'_>) -> String {
    let mut text = "log".to_string();
    if let Some(p) = a.string(2) {
        text = format!("{text} prefix \"{p}\"");
    }
    if let Some(g) = a.bytes(1).and_then(|b| netlink::be_u16(b).ok()) {
        text = format!("{text} group {g}");
    }
    if let Some(s) = a.u32(3).filter(|s| *s != 0) {
        text = format!("{text} snaplen {s}");
    }
    if let Some(q) = a
        .bytes(4)
        .and_then(|b| netlink::be_u16(b).ok())
        .filter(|q| *q != 0)
    {
        text = format!("{text} queue-threshold {q}");
    }
    if let Some(level) = a.u32(5).filter(|l| *l != 4) {
        const LEVELS: [&str; 9] = [
            "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug", "audit",
        ];
        let name = LEVELS.get(level as usize).copied().unwrap_or("?");
        text = format!("{text} level {name}");
    }
    let flags = a.u32(6).unwrap_or(0);
    if flags & 0x2f == 0x2f {
        text.push_str(" flags all");
    } else {
        push_log_flags(&mut text, flags);
    }
    text
}

fn time_unit(seconds: u64) -> &'static str {
    match seconds {
        1 => "second",
        60 => "minute",
        3600 => "hour",
        86400 => "day",
        604800 => "week",
        _ => "error",
    }
}

/// nft's choice of byte unit: the largest of mbytes/kbytes/bytes that divides evenly.
pub(crate) fn byte_unit(v: u64) -> (u64, &'static str) {
    if v.is_multiple_of(1024 * 1024) {
        (v / (1024 * 1024), "mbytes")
    } else if v.is_multiple_of(1024) {
        (v / 1024, "kbytes")
    } else {
        (v, "bytes")
    }
}

fn limit(a: &Attrs<'_>) -> String {
    let rate = a.u64(1).unwrap_or(0);
    let unit = time_unit(a.u64(2).unwrap_or(1));
    let burst = a.u32(3).unwrap_or(0);
    let over = if a.u32(5).unwrap_or(0) & 1 != 0 {
        "over "
    } else {
        ""
    };
    if a.u32(4) == Some(1) {
        let (r, u) = byte_unit(rate);
        let mut text = format!("limit rate {over}{r} {u}/{unit}");
        if burst != 0 {
            let (b, bu) = byte_unit(u64::from(burst));
            text = format!("{text} burst {b} {bu}");
        }
        text
    } else {
        let mut text = format!("limit rate {over}{rate}/{unit}");
        if burst != 0 && burst != 5 {
            text = format!("{text} burst {burst} packets");
        }
        text
    }
}

/// `reject ...`. Like nft (stmt_reject_postprocess), it hides the dependency its type implies:
/// `meta l4proto tcp` before a TCP reset in ip and ip6 tables; in inet, bridge and netdev
/// tables, the network protocol match before an icmp or icmpv6 reject or a TCP reset.
fn reject(r: &mut Renderer<'_>, a: &Attrs<'_>) -> String {
    let code = a.bytes(2).and_then(|b| b.first().copied()).unwrap_or(0);
    let ty = a.u32(1).unwrap_or(0);
    if ty != 2 {
        match r.family {
            NFPROTO_IPV4 | NFPROTO_IPV6 if ty == 1 => r.release(Layer::L4),
            NFPROTO_INET | NFPROTO_BRIDGE | NFPROTO_NETDEV => r.release(Layer::L3),
            _ => {}
        }
    }
    match ty {
        1 => "reject with tcp reset".into(),
        2 => {
            const ICMPX: [&str; 4] = [
                "no-route",
                "port-unreachable",
                "host-unreachable",
                "admin-prohibited",
            ];
            if code == 1 {
                "reject".into()
            } else {
                let name = ICMPX.get(code as usize).map(|s| s.to_string());
                format!("reject with icmpx {}", name.unwrap_or(code.to_string()))
            }
        }
        _ => {
            let v6 = r.family == NFPROTO_IPV6 || r.l3() == Some(10);
            if v6 {
                const ICMP6: [&str; 7] = [
                    "no-route",
                    "admin-prohibited",
                    "2",
                    "addr-unreachable",
                    "port-unreachable",
                    "policy-fail",
                    "reject-route",
                ];
                if code == 4 && r.family == NFPROTO_IPV6 {
                    return "reject".into();
                }
                let name = ICMP6.get(code as usize).map(|s| s.to_string());
                format!("reject with icmpv6 {}", name.unwrap_or(code.to_string()))
            } else {
                if code == 3 && r.family == NFPROTO_IPV4 {
                    return "reject".into();
                }
                let name = values::format(Ty::IcmpCode, Order::Big, &[code]);
                format!("reject with icmp {name}")
            }
        }
    }
}

/// NAT flags as nft prints them.
fn nat_flags(flags: u32) -> String {
    let mut names = Vec::new();
    if flags & 0x4 != 0 {
        names.push("random");
    }
    if flags & 0x10 != 0 {
        names.push("fully-random");
    }
    if flags & 0x8 != 0 {
        names.push("persistent");
    }
    if names.is_empty() {
        String::new()
    } else {
        format!(" {}", names.join(","))
    }
}

fn ports(r: &mut Renderer<'_>, min: Option<u32>, max: Option<u32>) -> Option<String> {
    let lo = value_as(r, &r.load(Some(min?)), Ty::Port);
    match max {
        Some(m) if Some(m) != min => {
            let hi = value_as(r, &r.load(Some(m)), Ty::Port);
            if hi == lo {
                Some(lo)
            } else {
                Some(format!("{lo}-{hi}"))
            }
        }
        _ => Some(lo),
    }
}

fn ports_stmt(
    r: &mut Renderer<'_>,
    name: &str,
    min: Option<u32>,
    max: Option<u32>,
    flags: Option<u32>,
) -> String {
    let mut text = name.to_string();
    if let Some(p) = ports(r, min, max) {
        text = format!("{text} to :{p}");
    }
    format!("{text}{}", nat_flags(flags.unwrap_or(0)))
}

/// `snat`/`dnat`. As nft does: the address family is named in inet tables, and wherever the
/// address comes from a map whose values are ranges or address . port pairs; the addresses'
/// fields can hide a dependency, the ports' cannot.
fn nat(r: &mut Renderer<'_>, a: &Attrs<'_>) -> String {
    let kind = if a.u32(1) == Some(1) { "dnat" } else { "snat" };
    let fam = a.u32(2).unwrap_or(2);
    let flags = a.u32(7).unwrap_or(0);
    let addr_ty = if fam == 10 { Ty::Ipv6 } else { Ty::Ipv4 };
    let fam_word = if fam == 10 { " ip6" } else { " ip" };
    // NF_NAT_RANGE_NETMAP: the map's addresses are prefixes mapped onto prefixes.
    let prefix = if flags & 0x40 != 0 { " prefix" } else { "" };
    let v6 = addr_ty == Ty::Ipv6;
    let addr_bits = if v6 { 128 } else { 32 };
    let max_reg = a.reg(4).filter(|m| Some(*m) != a.reg(3));
    let addr_v = r.load(a.reg(3));
    if let Val::Map { text: map, set, .. } = &addr_v {
        let (interval, bits) = r
            .sets
            .set_info(set)
            .map(|(s, _)| (s.data_interval, s.data_len.unwrap_or(0) * 8))
            .unwrap_or((false, 0));
        // Values that are ranges (of addresses, or of address . port), or address . port
        // pairs: the map fills every register of the statement.
        let ranges = interval && (bits == 2 * addr_bits || bits == 2 * (addr_bits + 32));
        let pairs = max_reg.is_none() && bits == addr_bits + 32;
        if ranges || pairs {
            // The key's fields, which can hide a dependency.
            r.field(&addr_v);
            return format!("{kind}{fam_word}{prefix} to {map}{}", nat_flags(flags));
        }
    }
    let mut text = kind.to_string();
    // The address family is named where the table's does not say it, and only for an address.
    if r.family == NFPROTO_INET && a.reg(3).is_some() {
        text.push_str(fam_word);
    }
    if a.reg(3).is_some() || a.reg(5).is_some() {
        text.push_str(prefix);
    }
    let addr = a.reg(3).map(|min| {
        let lo_v = r.load(Some(min));
        let lo = value_as(r, &lo_v, addr_ty);
        match max_reg {
            Some(max) => {
                let hi_v = r.load(Some(max));
                // A range that is exactly a prefix prints as one (`192.168.3.0/24`).
                if let (Val::Imm(l), Val::Imm(h)) = (&lo_v, &hi_v) {
                    let whole = values::interval(addr_ty, Order::Big, l, h);
                    if whole.contains('/') {
                        return whole;
                    }
                }
                let hi = value_as(r, &hi_v, addr_ty);
                if v6 && a.reg(5).is_some() {
                    format!("[{lo}]-[{hi}]")
                } else {
                    format!("{lo}-{hi}")
                }
            }
            _ if v6 && a.reg(5).is_some() => format!("[{lo}]"),
            _ => lo,
        }
    });
    let mark = r.needs_mark();
    let port = ports(r, a.reg(5), a.reg(6));
    r.forget_needs(mark);
    match (addr, port) {
        (Some(ad), Some(p)) => text = format!("{text} to {ad}:{p}"),
        (Some(ad), None) => text = format!("{text} to {ad}"),
        (None, Some(p)) => text = format!("{text} to :{p}"),
        (None, None) => {}
    }
    format!("{text}{}", nat_flags(flags))
}

fn queue(r: &mut Renderer<'_>, a: &Attrs<'_>) -> String {
    let flags = a
        .bytes(3)
        .and_then(|b| netlink::be_u16(b).ok())
        .unwrap_or(0);
    let mut text = "queue".to_string();
    let mut names = Vec::new();
    if flags & 1 != 0 {
        names.push("bypass");
    }
    if flags & 2 != 0 {
        names.push("fanout");
    }
    if !names.is_empty() {
        text = format!("{text} flags {}", names.join(","));
    }
    if let Some(reg) = a.reg(4) {
        let v = r.load(Some(reg));
        let f = r.field(&v);
        return format!("{text} to {}", f.text);
    }
    let num = a
        .bytes(1)
        .and_then(|b| netlink::be_u16(b).ok())
        .unwrap_or(0);
    let total = a
        .bytes(2)
        .and_then(|b| netlink::be_u16(b).ok())
        .unwrap_or(1);
    if total > 1 {
        format!("{text} to {num}-{}", u32::from(num) + u32::from(total) - 1)
    } else {
        format!("{text} to {num}")
    }
}

fn objref(r: &mut Renderer<'_>, a: &Attrs<'_>) -> String {
    let set = a.string(4).unwrap_or_default();
    // An object map says the objects' type in the set, not in the expression.
    let ty = a
        .u32(1)
        .or_else(|| r.sets.set_info(&set).and_then(|(s, _)| s.obj_type));
    let what = match ty.unwrap_or(0) {
        1 => "counter name",
        2 => "quota name",
        3 => "ct helper set",
        4 => "limit name",
        5 => "ct count name",
        6 => "tunnel name",
        7 => "ct timeout set",
        8 => "meta secmark set",
        9 => "ct expectation set",
        10 => "synproxy name",
        _ => "objref",
    };
    if let Some(name) = a.string(2) {
        return format!("{what} \"{name}\"");
    }
    let (key, types, sizes) = r.key_text(a.reg(3), &set);
    let set_text = r.set_ref(&set, &types, &sizes, 1000);
    let what = if what == "objref" {
        "objref name"
    } else {
        what
    };
    format!("{what} {key} map {set_text}")
}

fn tproxy(r: &mut Renderer<'_>, a: &Attrs<'_>) -> String {
    let fam = a.u32(1).unwrap_or(0);
    let mut text = "tproxy".to_string();
    if r.family == NFPROTO_INET {
        match fam {
            2 => text.push_str(" ip"),
            10 => text.push_str(" ip6"),
            _ => {}
        }
    }
    let ty = if fam == 10 { Ty::Ipv6 } else { Ty::Ipv4 };
    let addr = a.reg(2).map(|reg| {
        let v = r.load(Some(reg));
        value_as(r, &v, ty)
    });
    let port = a.reg(3).map(|reg| {
        let v = r.load(Some(reg));
        value_as(r, &v, Ty::Port)
    });
    match (addr, port) {
        (Some(ad), Some(p)) if ty == Ty::Ipv6 => format!("{text} to [{ad}]:{p}"),
        (Some(ad), Some(p)) => format!("{text} to {ad}:{p}"),
        (Some(ad), None) if ty == Ty::Ipv6 => format!("{text} to [{ad}]"),
        (Some(ad), None) => format!("{text} to {ad}"),
        (None, Some(p)) => format!("{text} to :{p}"),
        (None, None) => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::nftables::render::values::duration;

    #[test]
    fn durations_and_units() {
        assert_eq!(duration(10_000), "10s");
        assert_eq!(duration(90_500), "1m30s500ms");
        assert_eq!(duration(0), "0ms");
        assert_eq!(byte_unit(10 * 1024 * 1024), (10, "mbytes"));
        assert_eq!(byte_unit(1500), (1500, "bytes"));
    }
}
