//! Rules in `nft list ruleset` syntax.
//!
//! The kernel stores a rule as a small register program: loads (payload, meta, ct, fib...) into
//! registers, then matches (cmp, range, lookup) and statements (verdicts, nat, log...) that read
//! them. Like nft, the renderer replays that program, turning load + match pairs back into
//! `tcp dport 22`, ranges, prefixes and set lookups, and finally removes the protocol
//! "dependencies" nft adds implicitly (`meta l4proto tcp` before `tcp dport 22`), which nft
//! does not print either. Differences from nft, on purpose: counters print as `counter` (their
//! values are runtime state), interface indexes print as numbers, and iptables' `-m comment`
//! becomes a trailing `comment "..."` (nft prints nothing for it). Expressions this renderer
//! does not know print as `<name> …`; nothing is dropped and nothing here panics on input.
//!
//! This file is the top of the renderer: [`rule`], the expression dispatch (the core loads,
//! `cmp`/`range`/`lookup` and verdicts through `Renderer`'s own methods, the less common
//! loads to `loads`, statements to `stmts`, x_tables extensions to `compat`) and dynset, whose
//! nested expressions go through the dispatch again. Below it: `loads`, `stmts` and `compat`,
//! then `renderer` (the state they all write to), then `elements`, `fields`, `expr` and
//! `values`; nothing below imports this file.

pub(crate) mod elements;
pub(crate) mod exthdrs;
pub(crate) mod fields;
pub mod ifnames;
mod loads;
pub(crate) mod renderer;
mod stmts;
mod symbols;
mod symtab;
pub(crate) mod values;

use crate::netlink;
use crate::nftables::compat;
use crate::nftables::netlink::decode::{Data, Expr, Rule};
use crate::nftables::netlink::expr::{nested_expr, Attrs, REG_VERDICT};
use crate::nftables::render::elements::verdict;
use crate::nftables::render::renderer::{Renderer, Val, CMP_GTE, CMP_LTE};
use crate::nftables::render::values::duration;

pub use crate::nftables::render::elements::{element_items, elements_text};
#[cfg(test)]
pub use crate::nftables::render::renderer::NoSets;
pub use crate::nftables::render::renderer::SetSource;
pub use crate::nftables::render::values::{Order, Ty};

/// Render a rule's expressions (and comment) as nft prints the rule body.
pub fn rule(rule: &Rule, sets: &dyn SetSource) -> String {
    let mut r = Renderer::new(rule.family, sets);
    r.run(&rule.exprs);
    r.finish(rule.comment.as_deref())
}

impl<'a> Renderer<'a> {
    pub(crate) fn run(&mut self, exprs: &[Expr]) {
        let mut i = 0;
        while i < exprs.len() {
            let e = &exprs[i];
            let a = Attrs::of(e);
            // nft writes `a-b` as `cmp gte a; cmp lte b` on one register.
            if e.name == "cmp" && a.u32(2) == Some(CMP_GTE) {
                if let Some(next) = exprs.get(i + 1).filter(|n| n.name == "cmp") {
                    let b = Attrs::of(next);
                    if b.u32(2) == Some(CMP_LTE) && b.reg(1) == a.reg(1) {
                        let v = self.load(a.reg(1));
                        let (from, to) = (a.value(3).unwrap_or_default(), b.value(3));
                        self.range(&v, false, &from, &to.unwrap_or_default());
                        i += 2;
                        continue;
                    }
                }
            }
            self.expr(e, &a);
            i += 1;
        }
    }

    fn expr(&mut self, e: &Expr, a: &Attrs<'_>) {
        match e.name.as_str() {
            "payload" => {
                let v = Val::Payload {
                    base: a.u32(2).unwrap_or(0),
                    offset: a.u32(3).unwrap_or(0),
                    len: a.u32(4).unwrap_or(0),
                };
                if a.has(1) {
                    self.store(a.reg(1), v);
                } else {
                    self.set_stmt(&v, a.reg(5));
                }
            }
            "meta" => {
                let v = Val::Meta(a.u32(2).unwrap_or(u32::MAX));
                if a.has(1) {
                    self.store(a.reg(1), v);
                } else {
                    self.set_stmt(&v, a.reg(3));
                }
            }
            "ct" => {
                let dir = a.bytes(3).and_then(|b| b.first().copied());
                let v = Val::Ct {
                    key: a.u32(2).unwrap_or(u32::MAX),
                    dir,
                };
                if a.has(1) {
                    self.store(a.reg(1), v);
                } else {
                    self.set_stmt(&v, a.reg(4));
                }
            }
            "immediate" => match (a.reg(1), a.data(2)) {
                (Some(REG_VERDICT), Some(Data::Verdict(v))) => self.emit(verdict(&v)),
                (reg, Some(Data::Value(v))) => self.store(reg, Val::Imm(v)),
                _ => self.emit("immediate …"),
            },
            "bitwise" => {
                let src = Box::new(self.load(a.reg(1)));
                let v = match a.u32(6).unwrap_or(0) {
                    0 => Val::Bits {
                        src,
                        mask: a.value(4).unwrap_or_default(),
                        xor: a.value(5).unwrap_or_default(),
                    },
                    op @ (1 | 2) => Val::Shift {
                        src,
                        left: op == 1,
                        n: values::int(&a.value(7).unwrap_or_default(), Order::Host),
                    },
                    _ => Val::Text("bitwise …".into()),
                };
                self.store(a.reg(2), v);
            }
            // hton turns a host-order value into network order before a range or a set
            // lookup (nft stores those in network order); ntoh the other way.
            "byteorder" => {
                let v = self.load(a.reg(1));
                self.store(a.reg(2), Val::Swapped(Box::new(v)));
            }
            "cmp" => self.cmp(a),
            "range" => {
                let v = self.load(a.reg(1));
                let (from, to) = (a.value(3).unwrap_or_default(), a.value(4));
                self.range(&v, a.u32(2) == Some(1), &from, &to.unwrap_or_default());
            }
            "lookup" => self.lookup(a),
            "counter" => self.emit("counter"),
            "notrack" => self.emit("notrack"),
            "match" | "target" => {
                let text = compat::render(self, &e.name, a);
                self.emit(text);
            }
            "dynset" => {
                let text = dynset(self, a);
                self.emit(text);
            }
            "fib" | "rt" | "socket" | "numgen" | "hash" | "exthdr" | "osf" | "xfrm" => {
                loads::render(self, e, a)
            }
            _ => stmts::render(self, e, a),
        }
    }
}

/// `add @set { key ... }`: a set update from the packet path. Its nested expressions (counter,
/// limit...) go through the dispatch above, which is why it is here and not in `stmts`.
fn dynset(r: &mut Renderer<'_>, a: &Attrs<'_>) -> String {
    let op = match a.u32(3).unwrap_or(0) {
        0 => "add",
        1 => "update",
        _ => "delete",
    };
    let set = a.string(1).unwrap_or_default();
    let (key, _, _) = r.key_text(a.reg(4), &set);
    let mut inner = key;
    if let Some(t) = a.u64(6).filter(|t| *t != 0) {
        inner = format!("{inner} timeout {}", duration(t));
    }
    let mut nested = Vec::new();
    if let Some(e) = a.bytes(7).and_then(nested_expr) {
        nested.push(e);
    }
    if let Some(list) = a.bytes(10) {
        for item in netlink::attrs(list).unwrap_or_default() {
            if let Some(e) = nested_expr(item.value) {
                nested.push(e);
            }
        }
    }
    // An update of an anonymous set with a statement and no data is what `meter` makes: nft
    // prints it as the meter, with the set's size and only the first statement.
    let meter = match r.sets.set_info(&set) {
        Some((s, _)) if s.is_anonymous() && a.reg(5).is_none() && !nested.is_empty() => {
            nested.truncate(1);
            Some(s.size.unwrap_or(0))
        }
        _ => None,
    };
    if !nested.is_empty() {
        let mut sub = Renderer::new(r.family, r.sets);
        sub.run(&nested);
        inner = format!("{inner} {}", sub.take_text());
    }
    if let Some(size) = meter {
        return format!("meter {set} size {size} {{ {inner} }}");
    }
    if let Some(dreg) = a.reg(5) {
        let v = r.load(Some(dreg));
        let f = r.field(&v);
        inner = format!("{inner} : {}", f.text);
    }
    format!("{op} @{set} {{ {inner} }}")
}
