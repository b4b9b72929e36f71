//! Statements and less common loads, as nft prints them: log, limit, quota, reject, nat,
//! masquerade, redirect, queue, objref, connlimit, tproxy, dup, fwd, synproxy, and the fib, rt,
//! socket, numgen, hash, exthdr, osf and xfrm loads. Anything else prints as `<name> …`.
//! dynset (`add @set { ... }`) renders nested expressions through the dispatch, so it is in
//! `render`.

use super::decode::Expr;
use super::expr::Attrs;
use super::fields::{Field, NFPROTO_INET, NFPROTO_IPV6};
use super::nla;
use super::renderer::{Renderer, Val};
use super::values::{self, push_log_flags, Order, Ty};

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
        "masq" => {
            let text = ports_stmt(r, "masquerade", a.reg(2), a.reg(3), a.u32(1));
            r.emit(text);
        }
        "redir" => {
            let text = ports_stmt(r, "redirect", a.reg(1), a.reg(2), a.u32(3));
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
            let mut text = format!("{} to", e.name);
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
            if let Some(mss) = a.bytes(1).and_then(|b| nla::be_u16(b).ok()) {
                text = format!("{text} mss {mss}");
            }
            if let Some(ws) = a.bytes(2).and_then(|b| b.first().copied()) {
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
        "fib" => {
            let flags = a.u32(3).unwrap_or(0);
            let mut parts = Vec::new();
            for (bit, name) in [
                (1, "saddr"),
                (2, "daddr"),
                (4, "mark"),
                (8, "iif"),
                (16, "oif"),
            ] {
                if flags & bit != 0 {
                    parts.push(name);
                }
            }
            let (res, ty) = match a.u32(2).unwrap_or(0) {
                1 => ("oif", Ty::Ifindex),
                2 => ("oifname", Ty::Ifname),
                3 => ("type", Ty::FibAddrType),
                _ => ("?", Ty::Integer),
            };
            let text = format!("fib {} {res}", parts.join(" . "));
            let v = if flags & 32 != 0 {
                Val::Presence(text)
            } else {
                Val::Field(field(text, ty, Order::Host, 4))
            };
            r.store(a.reg(1), v);
        }
        "rt" => {
            let (text, ty, order, len) = match a.u32(2).unwrap_or(u32::MAX) {
                0 => ("rt classid", Ty::Integer, Order::Host, 4),
                1 => ("rt ip nexthop", Ty::Ipv4, Order::Big, 4),
                2 => ("rt ip6 nexthop", Ty::Ipv6, Order::Big, 16),
                3 => ("rt mtu", Ty::Integer, Order::Host, 2),
                4 => ("rt ipsec", Ty::Boolean, Order::Host, 1),
                _ => ("rt ?", Ty::Integer, Order::Host, 4),
            };
            r.store(a.reg(1), Val::Field(field(text, ty, order, len)));
        }
        "socket" => {
            let text = match a.u32(1).unwrap_or(u32::MAX) {
                0 => "socket transparent".to_string(),
                1 => "socket mark".into(),
                2 => "socket wildcard".into(),
                3 => format!("socket cgroupv2 level {}", a.u32(3).unwrap_or(0)),
                k => format!("socket key {k}"),
            };
            let ty = if text == "socket mark" {
                Ty::Mark
            } else {
                Ty::Integer
            };
            r.store(a.reg(2), Val::Field(field(text, ty, Order::Host, 4)));
        }
        "numgen" => {
            let kind = if a.u32(3) == Some(1) { "random" } else { "inc" };
            let mut text = format!("numgen {kind} mod {}", a.u32(2).unwrap_or(0));
            if let Some(off) = a.u32(4).filter(|o| *o != 0) {
                text = format!("{text} offset {off}");
            }
            r.store(
                a.reg(1),
                Val::Field(field(text, Ty::Integer, Order::Host, 4)),
            );
        }
        "hash" => {
            let mut text = if a.u32(7) == Some(1) {
                "symhash".to_string()
            } else {
                let src = r.load(a.reg(1));
                let f = r.field(&src);
                format!("jhash {}", f.text)
            };
            text = format!("{text} mod {}", a.u32(4).unwrap_or(0));
            if let Some(seed) = a.u32(5).filter(|_| a.u32(7) != Some(1)) {
                text = format!("{text} seed 0x{seed:x}");
            }
            if let Some(off) = a.u32(6).filter(|o| *o != 0) {
                text = format!("{text} offset {off}");
            }
            r.store(
                a.reg(2),
                Val::Field(field(text, Ty::Integer, Order::Host, 4)),
            );
        }
        "exthdr" => exthdr(r, a),
        "osf" => {
            let mut text = "osf".to_string();
            match a.bytes(2).and_then(|b| b.first().copied()) {
                Some(1) => text.push_str(" ttl loose"),
                Some(2) => text.push_str(" ttl skip"),
                _ => {}
            }
            text.push_str(if a.u32(3).unwrap_or(0) & 1 != 0 {
                " version"
            } else {
                " name"
            });
            r.store(
                a.reg(1),
                Val::Field(field(text, Ty::Ifname, Order::Big, 16)),
            );
        }
        "xfrm" => {
            let dir = match a.bytes(3).and_then(|b| b.first().copied()) {
                Some(0) => "in",
                _ => "out",
            };
            let (key, ty, len) = match a.u32(2).unwrap_or(0) {
                1 => ("ip daddr", Ty::Ipv4, 4),
                2 => ("ip6 daddr", Ty::Ipv6, 16),
                3 => ("ip saddr", Ty::Ipv4, 4),
                4 => ("ip6 saddr", Ty::Ipv6, 16),
                5 => ("reqid", Ty::Integer, 4),
                6 => ("spi", Ty::Integer, 4),
                _ => ("?", Ty::Integer, 4),
            };
            let mut text = format!("ipsec {dir}");
            if let Some(n) = a.u32(4).filter(|n| *n != 0) {
                text = format!("{text} spnum {n}");
            }
            let order = if matches!(ty, Ty::Integer) {
                Order::Host
            } else {
                Order::Big
            };
            r.store(
                a.reg(1),
                Val::Field(field(format!("{text} {key}"), ty, order, len)),
            );
        }
        other => r.emit(format!("{other} …")),
    }
}

fn field(text: impl Into<String>, ty: Ty, order: Order, full_len: usize) -> Field {
    Field {
        ty,
        order,
        full_len,
        ..Field::opaque(text)
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
    if let Some(g) = a.bytes(1).and_then(|b| nla::be_u16(b).ok()) {
        text = format!("{text} group {g}");
    }
    if let Some(s) = a.u32(3).filter(|s| *s != 0) {
        text = format!("{text} snaplen {s}");
    }
    if let Some(q) = a
        .bytes(4)
        .and_then(|b| nla::be_u16(b).ok())
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

fn reject(r: &Renderer<'_>, a: &Attrs<'_>) -> String {
    let code = a.bytes(2).and_then(|b| b.first().copied()).unwrap_or(0);
    match a.u32(1).unwrap_or(0) {
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
                if code == 3 && r.family != NFPROTO_INET {
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

fn nat(r: &mut Renderer<'_>, a: &Attrs<'_>) -> String {
    let kind = if a.u32(1) == Some(1) { "dnat" } else { "snat" };
    let fam = a.u32(2).unwrap_or(2);
    let addr_ty = if fam == 10 { Ty::Ipv6 } else { Ty::Ipv4 };
    let mut text = kind.to_string();
    if r.family == NFPROTO_INET {
        text.push_str(if fam == 10 { " ip6" } else { " ip" });
    }
    let addr = a.reg(3).map(|min| {
        let lo_v = r.load(Some(min));
        let lo = value_as(r, &lo_v, addr_ty);
        match a.reg(4) {
            Some(max) if max != min => {
                let hi_v = r.load(Some(max));
                format!("{lo}-{}", value_as(r, &hi_v, addr_ty))
            }
            _ => lo,
        }
    });
    let port = ports(r, a.reg(5), a.reg(6));
    match (addr, port) {
        (Some(ad), Some(p)) if addr_ty == Ty::Ipv6 => text = format!("{text} to [{ad}]:{p}"),
        (Some(ad), Some(p)) => text = format!("{text} to {ad}:{p}"),
        (Some(ad), None) => text = format!("{text} to {ad}"),
        (None, Some(p)) => text = format!("{text} to :{p}"),
        (None, None) => {}
    }
    format!("{text}{}", nat_flags(a.u32(7).unwrap_or(0)))
}

fn queue(r: &mut Renderer<'_>, a: &Attrs<'_>) -> String {
    let flags = a.bytes(3).and_then(|b| nla::be_u16(b).ok()).unwrap_or(0);
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
    let num = a.bytes(1).and_then(|b| nla::be_u16(b).ok()).unwrap_or(0);
    let total = a.bytes(2).and_then(|b| nla::be_u16(b).ok()).unwrap_or(1);
    if total > 1 {
        format!("{text} to {num}-{}", u32::from(num) + u32::from(total) - 1)
    } else {
        format!("{text} to {num}")
    }
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

fn objref(r: &mut Renderer<'_>, a: &Attrs<'_>) -> String {
    let what = match a.u32(1).unwrap_or(0) {
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
    let set = a.string(4).unwrap_or_default();
    let (key, types) = r.key_text(a.reg(3), &set);
    let set_text = r.set_ref(&set, &types, 1000);
    let what = if what == "objref" {
        "objref"
    } else {
        what.split(' ').next().unwrap_or(what)
    };
    format!("{what} name {key} map {set_text}")
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
        (Some(ad), None) => format!("{text} to {ad}"),
        (None, Some(p)) => format!("{text} to :{p}"),
        (None, None) => text,
    }
}

fn exthdr(r: &mut Renderer<'_>, a: &Attrs<'_>) {
    let ty = a.bytes(2).and_then(|b| b.first().copied()).unwrap_or(0);
    let (off, len) = (
        u64::from(a.u32(3).unwrap_or(0)),
        u64::from(a.u32(4).unwrap_or(0)),
    );
    let present = a.u32(5).unwrap_or(0) & 1 != 0;
    let text = match a.u32(6).unwrap_or(0) {
        1 => {
            let name = match ty {
                0 => "eol",
                1 => "nop",
                2 => "maxseg",
                3 => "window",
                4 => "sack-perm",
                5 => "sack",
                8 => "timestamp",
                30 => "mptcp",
                _ => "",
            };
            let field = match (ty, off, len) {
                (_, 0, 1) => "kind",
                (_, 1, 1) => "length",
                (2, 2, 2) => "size",
                (3, 2, 1) => "count",
                (8, 2, 4) => "tsval",
                (8, 6, 4) => "tsecr",
                (5, 2, 4) => "left",
                (5, 6, 4) => "right",
                _ => "",
            };
            match (name, field, present) {
                ("", _, _) => format!("tcp option @{ty},{},{}", off * 8, len * 8),
                (n, _, true) => format!("tcp option {n}"),
                (n, "", _) => format!("tcp option {n} @{},{}", off * 8, len * 8),
                (n, f, _) => format!("tcp option {n} {f}"),
            }
        }
        2 => format!("ip option @{ty},{},{}", off * 8, len * 8),
        op => format!("exthdr op {op} type {ty} @{},{}", off * 8, len * 8),
    };
    let v = if present {
        Val::Presence(text)
    } else {
        Val::Field(field(text, Ty::Integer, Order::Big, len.min(64) as usize))
    };
    if a.has(1) {
        r.store(a.reg(1), v);
    } else if let Val::Field(f) = v {
        let src = r.load(a.reg(7));
        let value = r.value_text(&src, &f);
        r.emit(format!("{} set {value}", f.text));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_units() {
        assert_eq!(duration(10_000), "10s");
        assert_eq!(duration(90_500), "1m30s500ms");
        assert_eq!(duration(0), "0ms");
        assert_eq!(byte_unit(10 * 1024 * 1024), (10, "mbytes"));
        assert_eq!(byte_unit(1500), (1500, "bytes"));
    }
}
