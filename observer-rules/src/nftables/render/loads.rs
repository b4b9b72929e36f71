//! The less common loads, as nft prints them: fib, rt, socket, numgen, hash, exthdr, osf and
//! xfrm. Each stores in its register a field whose printed form and type are already known
//! (or, with the "present" flag, a presence test), for the match or statement that reads it;
//! exthdr without a destination register writes a TCP option (`tcp option maxseg size set ...`).
//!
//! Layering: called by `render`'s dispatch, beside `stmts` and `compat`; imports only the
//! renderer's state (`renderer`) and what is below it.

use crate::nftables::netlink::decode::Expr;
use crate::nftables::netlink::expr::Attrs;
use crate::nftables::render::exthdrs;
use crate::nftables::render::fields::Field;
use crate::nftables::render::renderer::{Renderer, Val};
use crate::nftables::render::values::{Order, Ty};

pub(crate) fn render(r: &mut Renderer<'_>, e: &Expr, a: &Attrs<'_>) {
    match e.name.as_str() {
        "fib" => fib(r, a),
        "rt" => rt(r, a),
        "socket" => socket(r, a),
        "numgen" => numgen(r, a),
        "hash" => hash(r, a),
        "exthdr" => exthdr(r, a),
        "osf" => osf(r, a),
        "xfrm" => xfrm(r, a),
        other => r.emit(format!("{other} …")),
    }
}

/// `fib`: a route lookup result (oif, oifname, address type) or its presence.
fn fib(r: &mut Renderer<'_>, a: &Attrs<'_>) {
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

/// `rt`: routing data of the packet (classid, nexthop, mtu, ipsec).
fn rt(r: &mut Renderer<'_>, a: &Attrs<'_>) {
    let (text, ty, order, len) = match a.u32(2).unwrap_or(u32::MAX) {
        0 => ("rt classid", Ty::Realm, Order::Host, 4),
        1 => ("rt ip nexthop", Ty::Ipv4, Order::Big, 4),
        2 => ("rt ip6 nexthop", Ty::Ipv6, Order::Big, 16),
        3 => ("rt mtu", Ty::Integer, Order::Host, 2),
        4 => ("rt ipsec", Ty::Boolean, Order::Host, 1),
        _ => ("rt ?", Ty::Integer, Order::Host, 4),
    };
    r.store(a.reg(1), Val::Field(field(text, ty, order, len)));
}

/// `socket`: properties of the socket the packet belongs to.
fn socket(r: &mut Renderer<'_>, a: &Attrs<'_>) {
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

/// `numgen`: a counter or random number, modulo.
fn numgen(r: &mut Renderer<'_>, a: &Attrs<'_>) {
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

/// `hash`: jhash of a concatenation of registers, or symhash.
fn hash(r: &mut Renderer<'_>, a: &Attrs<'_>) {
    let mut text = if a.u32(7) == Some(1) {
        "symhash".to_string()
    } else {
        // The key spans as many registers as its length needs: a concatenation.
        let len = a.u32(3).unwrap_or(0) as usize;
        let (mut reg, mut done, mut parts) = (a.reg(1), 0, Vec::new());
        loop {
            let src = r.load(reg);
            let f = r.field(&src);
            let width = f.full_len.max(1).div_ceil(4) * 4;
            parts.push(f.text);
            done += width;
            if done >= len || parts.len() >= 16 {
                break;
            }
            reg = reg.map(|x| x + (width / 4) as u32);
        }
        format!("jhash {}", parts.join(" . "))
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

/// `osf`: the passive OS fingerprint.
fn osf(r: &mut Renderer<'_>, a: &Attrs<'_>) {
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

/// `xfrm`: IPsec state of the packet (`ipsec in/out ...`).
fn xfrm(r: &mut Renderer<'_>, a: &Attrs<'_>) {
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
    let order = if key == "reqid" {
        Order::Host
    } else {
        Order::Big
    };
    r.store(
        a.reg(1),
        Val::Field(field(format!("{text} {key}"), ty, order, len)),
    );
}

fn field(text: impl Into<String>, ty: Ty, order: Order, full_len: usize) -> Field {
    Field {
        ty,
        order,
        full_len,
        ..Field::opaque(text)
    }
}

fn exthdr(r: &mut Renderer<'_>, a: &Attrs<'_>) {
    let ty = a.bytes(2).and_then(|b| b.first().copied()).unwrap_or(0);
    let (off, len) = (a.u32(3).unwrap_or(0), a.u32(4).unwrap_or(0));
    let present = a.u32(5).unwrap_or(0) & 1 != 0;
    let op = a.u32(6).unwrap_or(0);
    if present {
        if let Some(need) = exthdrs::presence_needs(op) {
            r.need(need);
        }
        r.store(a.reg(1), Val::Presence(exthdrs::header(op, ty)));
        return;
    }
    let v = Val::Exthdr { op, ty, off, len };
    if a.has(1) {
        r.store(a.reg(1), v);
    } else if a.has(7) {
        let f = r.field(&v);
        let src = r.load(a.reg(7));
        let value = r.value_text(&src, &f);
        r.emit(format!("{} set {value}", f.text));
    } else {
        r.emit(format!("reset {}", exthdrs::header(op, ty)));
    }
}
