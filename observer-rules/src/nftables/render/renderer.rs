//! The renderer's state: what each register holds ([`Val`]), the statements printed so far with
//! the protocols they pin or rely on, and nft's dependency elimination when the rule is done
//! ([`Renderer::finish`]), and the primitives the statement printers share: how a register
//! prints as a field or a value. The core matches that consume registers (cmp, range, lookup),
//! set keys and set references are in `matches`, a child module.
//!
//! Layering: below `render` (which holds the expression dispatch, [`Renderer::run`] included),
//! `stmts`, `loads` and `compat`; imports only `decode`, `elements`, `expr`, `fields` and
//! `values`, never the printers above it.

use std::collections::HashMap;

mod matches;

use matches::{mask_text, to_u128};

use crate::nftables::netlink::decode::{Element, Set};
use crate::nftables::netlink::expr::{Attrs, REG_VERDICT};
use crate::nftables::render::elements::{elements_text, elements_text_sized};
use crate::nftables::render::exthdrs;
use crate::nftables::render::fields::{
    self, Field, Layer, NFPROTO_ARP, NFPROTO_BRIDGE, NFPROTO_INET, NFPROTO_IPV4, NFPROTO_IPV6,
    NFPROTO_NETDEV,
};
use crate::nftables::render::values::{self, Order, Ty};

/// Where the renderer finds sets referenced by rules (`@name`, anonymous `{ ... }`).
pub trait SetSource {
    /// The set and its elements.
    fn set_info(&self, name: &str) -> Option<(&Set, Vec<&Element>)>;
}

/// No sets known: lookups print as `@name`.
#[cfg(test)]
pub struct NoSets;

#[cfg(test)]
impl SetSource for NoSets {
    fn set_info(&self, _: &str) -> Option<(&Set, Vec<&Element>)> {
        None
    }
}

/// Most elements a rule's anonymous set prints before it is cut short.
const RULE_SET_MAX: usize = 1000;

/// What a register holds.
#[derive(Debug, Clone)]
pub(crate) enum Val {
    Payload {
        base: u32,
        offset: u32,
        len: u32,
    },
    Meta(u32),
    Ct {
        key: u32,
        dir: Option<u8>,
    },
    /// A value whose printed form and type are already known (fib, rt, numgen, hash...).
    Field(Field),
    /// `fib ... oif` or `tcp option ...` with the "present" flag: compares to exists/missing.
    Presence(String),
    Imm(Vec<u8>),
    Bits {
        src: Box<Val>,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    Shift {
        src: Box<Val>,
        left: bool,
        n: u64,
    },
    /// An extension header, TCP option or SCTP chunk load (offset and length in bytes).
    Exthdr {
        op: u32,
        ty: u8,
        off: u32,
        len: u32,
    },
    /// A value whose byte order a `byteorder` expression reversed.
    Swapped(Box<Val>),
    /// Text already printed (`bitwise …`).
    Text(String),
    /// The result of a map lookup, already printed (`ip saddr map @m`), with the map's name and
    /// the protocols its key relies on: they count for the statement that uses the value.
    Map {
        text: String,
        set: String,
        needs: Vec<(Layer, u32)>,
    },
    Unknown,
}

#[derive(Debug)]
struct Stmt {
    text: String,
    /// This statement pins a layer's protocol (`meta l4proto tcp`).
    dep: Option<(Layer, u32)>,
    /// The payload base of the dependency's field (1 for `ip protocol`, 0 for `ether type`):
    /// nft keeps a network header dependency before transport fields where the family does not
    /// imply the network protocol, and a dependency before a protocol field of its own header
    /// (`ether type 8021q` before `vlan type ip`).
    dep_base: Option<u32>,
    /// A match (`tcp dport 22`), not a statement (`counter`, `meta mark set 1`): a statement
    /// hides the dependencies its own fields rely on, then ends the reach of earlier ones.
    is_match: bool,
    /// Protocols this statement's fields rely on.
    needs: Vec<(Layer, u32)>,
    /// Layers whose dependency this statement hides whatever its protocol (`reject with icmp`
    /// hides `meta nfproto ipv4`).
    releases: Vec<Layer>,
}

pub(crate) struct Renderer<'a> {
    pub(crate) family: u8,
    pub(crate) sets: &'a dyn SetSource,
    regs: HashMap<u32, Val>,
    l3: Option<u32>,
    pub(crate) l4: Option<u32>,
    /// The ICMP type a single `icmp type` match pinned.
    icmp: Option<u32>,
    stmts: Vec<Stmt>,
    comments: Vec<String>,
    needs: Vec<(Layer, u32)>,
    releases: Vec<Layer>,
}

const CMP_EQ: u32 = 0;
const CMP_NEQ: u32 = 1;
pub(crate) const CMP_LTE: u32 = 3;
pub(crate) const CMP_GTE: u32 = 5;

impl<'a> Renderer<'a> {
    pub(crate) fn new(family: u8, sets: &'a dyn SetSource) -> Renderer<'a> {
        Renderer {
            family,
            sets,
            regs: HashMap::new(),
            l3: None,
            l4: None,
            icmp: None,
            stmts: Vec::new(),
            comments: Vec::new(),
            needs: Vec::new(),
            releases: Vec::new(),
        }
    }

    /// The rendered statements after dependency elimination, plus comments.
    pub(crate) fn finish(self, comment: Option<&str>) -> String {
        let mut killed = vec![false; self.stmts.len()];
        let mut deps: HashMap<Layer, (usize, u32)> = HashMap::new();
        // In these families `ip protocol` is also what says the packet is IPv4 (nft's
        // payload_may_dependency_kill).
        let keeps_nh = matches!(self.family, NFPROTO_INET | NFPROTO_BRIDGE | NFPROTO_NETDEV);
        for (i, s) in self.stmts.iter().enumerate() {
            for layer in &s.releases {
                if let Some((j, _)) = deps.remove(layer) {
                    killed[j] = true;
                }
            }
            for (layer, proto) in &s.needs {
                if let Some(&(j, p)) = deps.get(layer) {
                    let base = self.stmts[j].dep_base;
                    if *layer == Layer::L4 && keeps_nh && base == Some(1) {
                        continue;
                    }
                    if s.dep.is_some() && base.is_some() && base == s.dep_base {
                        continue;
                    }
                    if p == *proto {
                        killed[j] = true;
                        deps.remove(layer);
                        // icmp implies ipv4 and icmpv6 ipv6: nft drops that dependency too.
                        if *layer == Layer::L4 {
                            kill_implied_l3(&mut deps, &mut killed, *proto);
                        }
                    }
                }
            }
            if let Some((layer, proto)) = s.dep {
                // In inet tables, `meta l4proto ipv6-icmp` says the packet is IPv6 (and `icmp`
                // IPv4): nft hides a `meta nfproto` of that protocol before it, and keeps one of
                // the other protocol.
                if layer == Layer::L4 && s.dep_base.is_none() && self.family == NFPROTO_INET {
                    let meta_l3 = deps
                        .get(&Layer::L3)
                        .is_some_and(|&(k, _)| self.stmts[k].dep_base.is_none());
                    if meta_l3 {
                        kill_implied_l3(&mut deps, &mut killed, proto);
                    }
                }
                deps.insert(layer, (i, proto));
            }
            if !s.is_match {
                deps.clear();
            }
        }
        let mut parts: Vec<String> = self
            .stmts
            .into_iter()
            .zip(killed)
            .filter(|(s, k)| !k && !s.text.is_empty())
            .map(|(s, _)| s.text)
            .collect();
        for c in self.comments.iter().map(String::as_str).chain(comment) {
            // Quotes inside are escaped, so that the text stays one nft string.
            let c = c.replace('\\', "\\\\").replace('"', "\\\"");
            parts.push(format!("comment \"{c}\""));
        }
        parts.join(" ")
    }

    /// The statements rendered so far, for nested expressions (dynset).
    pub(crate) fn take_text(&mut self) -> String {
        let s: Vec<String> = self.stmts.drain(..).map(|s| s.text).collect();
        s.join(" ")
    }

    /// Add a statement (`counter`, `meta mark set 1`, `reject`).
    pub(crate) fn emit(&mut self, text: impl Into<String>) {
        self.push(text.into(), None, None, false);
    }

    /// Add a match (`tcp dport 22`).
    pub(crate) fn emit_match(&mut self, text: impl Into<String>) {
        self.push(text.into(), None, None, true);
    }

    fn push(&mut self, text: String, dep: Option<(Layer, u32)>, base: Option<u32>, m: bool) {
        let needs = std::mem::take(&mut self.needs);
        let releases = std::mem::take(&mut self.releases);
        self.stmts.push(Stmt {
            text,
            dep,
            dep_base: base,
            is_match: m,
            needs,
            releases,
        });
    }

    /// How many protocols the next statement relies on so far (see [`Renderer::forget_needs`]).
    pub(crate) fn needs_mark(&self) -> usize {
        self.needs.len()
    }

    /// The next statement relies on none of the protocols recorded since `mark`: nft does not
    /// let the ports of a nat, masquerade or redirect statement hide a dependency.
    pub(crate) fn forget_needs(&mut self, mark: usize) {
        self.needs.truncate(mark);
    }

    /// The next statement hides the dependency that pinned this layer, whichever protocol.
    pub(crate) fn release(&mut self, layer: Layer) {
        self.releases.push(layer);
    }

    /// Record a protocol the next statement relies on.
    pub(crate) fn need(&mut self, need: (Layer, u32)) {
        self.needs.push(need);
    }

    pub(crate) fn comment(&mut self, text: String) {
        self.comments.push(text);
    }

    pub(crate) fn load(&self, reg: Option<u32>) -> Val {
        reg.and_then(|r| self.regs.get(&r).cloned())
            .unwrap_or(Val::Unknown)
    }

    pub(crate) fn store(&mut self, reg: Option<u32>, v: Val) {
        if let Some(r) = reg {
            self.regs.insert(r, v);
        }
    }

    /// The network protocol in force: the table family's, or the one the rule pinned.
    pub(crate) fn l3(&self) -> Option<u32> {
        match self.family {
            NFPROTO_IPV4 => Some(2),
            NFPROTO_IPV6 => Some(10),
            NFPROTO_ARP => Some(3),
            _ => self.l3,
        }
    }

    /// The protocol context payload fields are named in.
    pub(crate) fn ctx(&self) -> fields::Ctx {
        fields::Ctx {
            l3: self.l3(),
            link: self.l3,
            l4: self.l4,
            icmp: self.icmp,
        }
    }

    /// How to print a register's content; records the protocols it relies on.
    pub(crate) fn field(&mut self, v: &Val) -> Field {
        let f = match v {
            Val::Payload { base, offset, len } => fields::payload(*base, *offset, *len, self.ctx()),
            Val::Meta(k) => fields::meta(*k),
            Val::Exthdr { op, ty, off, len } => {
                let (o, l) = (off.saturating_mul(8), len.saturating_mul(8));
                exthdrs::field(*op, *ty, o, l).unwrap_or_else(|| exthdrs::raw(*op, *ty, o, l))
            }
            // Addresses name their protocol where the rule pinned it (`ct original ip saddr`).
            Val::Ct {
                key: key @ (8 | 9),
                dir,
            } if matches!(self.l3(), Some(2 | 10)) => {
                let p = self.l3().unwrap_or(2);
                let (name, ty, len) = match (p, key) {
                    (10, 8) => ("ip6 saddr", Ty::Ipv6, 16),
                    (10, _) => ("ip6 daddr", Ty::Ipv6, 16),
                    (_, 8) => ("ip saddr", Ty::Ipv4, 4),
                    _ => ("ip daddr", Ty::Ipv4, 4),
                };
                let d = match dir {
                    Some(0) => "original ",
                    Some(1) => "reply ",
                    _ => "",
                };
                let mut f = Field::sized(format!("ct {d}{name}"), ty, Order::Big, len);
                f.needs = Some((Layer::L3, p));
                f
            }
            Val::Ct { key, dir } => fields::ct(*key, *dir),
            Val::Field(f) => f.clone(),
            Val::Presence(t) | Val::Text(t) => Field::opaque(t.clone()),
            Val::Map { text, needs, .. } => {
                self.needs.extend(needs.iter().copied());
                Field::opaque(text.clone())
            }
            Val::Imm(b) => Field::opaque(values::hex(b, Order::Big)),
            Val::Bits { src, mask, xor } => {
                if xor.iter().all(|b| *b == 0) {
                    if let Some((f, 0)) = self.bit_field(src, mask) {
                        return f;
                    }
                }
                let f = self.field(src);
                let text = mask_xor_text(
                    &f.text,
                    mask,
                    xor,
                    |m| mask_text(f.ty, f.order, m),
                    |x| values::format(f.ty, f.order, x),
                );
                Field { text, ..f }
            }
            Val::Shift { src, left, n } => {
                let f = self.field(src);
                let op = if *left { "<<" } else { ">>" };
                // A bit operation under the shift keeps its parentheses.
                let text = if matches!(**src, Val::Bits { .. }) {
                    format!("({}) {op} {n}", f.text)
                } else {
                    format!("{} {op} {n}", f.text)
                };
                Field { text, ..f }
            }
            Val::Swapped(src) => {
                let f = self.field(src);
                let order = match f.order {
                    Order::Host => Order::Big,
                    Order::Big => Order::Host,
                };
                // The needs were recorded by the inner call.
                return Field { order, ..f };
            }
            Val::Unknown => Field::opaque("?"),
        };
        self.note_needs(&f);
        f
    }

    /// Record the protocols a field relies on.
    fn note_needs(&mut self, f: &Field) {
        if let Some(n) = f.needs {
            self.needs.push(n);
        }
        if let Some(t) = f.icmp_need {
            self.needs.push((Layer::IcmpType, t));
        }
    }

    /// A masked load that is one header field narrower than its bytes (`ip hdrlength`,
    /// `frag frag-off`, `tcp option mptcp subtype`): the field, and how far its value sits to
    /// the left in the register. Records the protocol the field relies on.
    pub(crate) fn bit_field(&mut self, src: &Val, mask: &[u8]) -> Option<(Field, u32)> {
        if mask.is_empty() || mask.len() > 16 {
            return None;
        }
        let m = mask.iter().fold(0u128, |v, b| (v << 8) | u128::from(*b));
        let bits = mask.len() as u32 * 8;
        let (ones, tz) = (m.count_ones(), m.trailing_zeros());
        if ones == 0 || ones == bits || (m >> tz) != (1u128 << ones) - 1 {
            return None;
        }
        let lead = bits - ones - tz;
        let f = match src {
            Val::Exthdr { op, ty, off, .. } => {
                exthdrs::field(*op, *ty, off.checked_mul(8)?.checked_add(lead)?, ones)
            }
            Val::Payload { base, offset, .. } => fields::payload_bits(
                *base,
                offset.checked_mul(8)?.checked_add(lead)?,
                ones,
                self.ctx(),
            ),
            _ => None,
        }?;
        self.note_needs(&f);
        if matches!(src, Val::Payload { base: 0, .. }) {
            self.needs.push((Layer::L2, 1));
        }
        Some((f, tz))
    }

    /// A masked payload load that is exactly a whole-byte header field inside it (`ip ttl` in a
    /// 16-bit rewrite): the field and how far its value sits to the left.
    fn byte_field(&mut self, src: &Val, mask: &[u8]) -> Option<(Field, u32)> {
        let Val::Payload { base, offset, .. } = src else {
            return None;
        };
        let m = to_u128(mask);
        let bits = mask.len() as u32 * 8;
        let (ones, tz) = (m.count_ones(), m.trailing_zeros());
        if ones == 0 || ones % 8 != 0 || tz % 8 != 0 || (m >> tz) != (1u128 << ones) - 1 {
            return None;
        }
        let at = offset + (bits - ones - tz) / 8;
        let f = fields::payload(*base, at, ones / 8, self.ctx());
        if f.text.starts_with('@') || f.full_len != (ones / 8) as usize {
            return None;
        }
        self.note_needs(&f);
        Some((f, tz))
    }

    /// `<field> set <value>` for payload/meta/ct writes. A write to a header field narrower
    /// than its bytes is a read-modify-write of those bytes (`@nh,0,16 set (@nh,0,16 & 0xfffc)
    /// ^ 0x1`): the bits the mask clears are the field, the xor its new value (`ip ecn set ect1`).
    pub(crate) fn set_stmt(&mut self, dst: &Val, sreg: Option<u32>) {
        let v = self.load(sreg);
        if let (Val::Payload { .. }, Val::Bits { src, mask, xor }) = (dst, &v) {
            let same = match (src.as_ref(), dst) {
                (
                    Val::Payload { base, offset, len },
                    Val::Payload {
                        base: b,
                        offset: o,
                        len: l,
                    },
                ) => (base, offset, len) == (b, o, l),
                _ => false,
            };
            let keep: Vec<u8> = mask.iter().map(|b| !b).collect();
            let x = to_u128(xor);
            if same && xor.len() == mask.len() && x & to_u128(mask) == 0 {
                if let Some((f, shift)) = self
                    .bit_field(dst, &keep)
                    .or_else(|| self.byte_field(dst, &keep))
                {
                    let value = (x >> shift).to_be_bytes();
                    let text = values::format(f.ty, Order::Big, &value[16 - f.full_len.max(1)..]);
                    self.emit(format!("{} set {text}", f.text));
                    return;
                }
            }
        }
        let f = self.field(dst);
        let value = self.value_text(&v, &f);
        self.emit(format!("{} set {value}", f.text));
    }

    /// A register's content printed as a value of the field `f` (a constant, another field, or
    /// a bit operation on one).
    pub(crate) fn value_text(&mut self, v: &Val, f: &Field) -> String {
        match v {
            Val::Imm(b) => values::format(f.ty, f.order, b),
            Val::Bits { src, mask, xor } => {
                let s = self.field(src).text;
                let hex = |b: &[u8]| values::format(Ty::Hex, f.order, b);
                mask_xor_text(&s, mask, xor, hex, hex)
            }
            other => self.field(other).text,
        }
    }
}

/// A transport protocol that implies its network protocol (icmp ipv4, ipv6-icmp ipv6) hides the
/// dependency that pinned that network protocol, when one is in reach.
fn kill_implied_l3(deps: &mut HashMap<Layer, (usize, u32)>, killed: &mut [bool], l4: u32) {
    let implied = match l4 {
        1 => 2,
        58 => 10,
        _ => return,
    };
    if let Some(&(k, l3)) = deps.get(&Layer::L3) {
        if l3 == implied {
            killed[k] = true;
            deps.remove(&Layer::L3);
        }
    }
}

/// The kernel's `(src & mask) ^ xor` as nft prints it, which turns it back into the operation
/// that was written: `src & m` when xor is 0; `src ^ x` when mask is all ones; when mask and
/// xor share no bit, an and then an or (`src & (m | x) | x`, or `src | x` when `m | x` is all
/// ones, as `meta mark set meta mark & 0xffff00ff | 0xab` is kept by the kernel as
/// `& 0xffff0054 ^ 0xab`); else `src & m ^ x`, without parentheses, as `&` binds first.
/// `and` prints a mask, `value` the other operand.
fn mask_xor_text(
    src: &str,
    mask: &[u8],
    xor: &[u8],
    and: impl Fn(&[u8]) -> String,
    value: impl Fn(&[u8]) -> String,
) -> String {
    if xor.iter().all(|b| *b == 0) {
        return format!("{src} & {}", and(mask));
    }
    if mask.iter().all(|b| *b == 0xff) {
        return format!("{src} ^ {}", value(xor));
    }
    let disjoint = mask.len() == xor.len() && mask.iter().zip(xor).all(|(m, x)| m & x == 0);
    if !disjoint {
        return format!("{src} & {} ^ {}", and(mask), value(xor));
    }
    let or: Vec<u8> = mask.iter().zip(xor).map(|(m, x)| m | x).collect();
    if or.iter().all(|b| *b == 0xff) {
        format!("{src} | {}", value(xor))
    } else {
        format!("{src} & {} | {}", and(&or), value(xor))
    }
}

#[cfg(test)]
mod tests {
    use super::mask_xor_text;

    /// Each pair as the kernel keeps it, and as nft 1.0.6 lists it (checked with the real nft).
    #[test]
    fn a_mask_and_xor_prints_as_the_operation_nft_wrote() {
        let hex = |b: &[u8]| {
            let mut s = String::from("0x");
            s.extend(b.iter().map(|b| format!("{b:02x}")));
            s
        };
        let text = |m: u32, x: u32| {
            mask_xor_text("meta mark", &m.to_be_bytes(), &x.to_be_bytes(), hex, hex)
        };
        assert_eq!(
            text(0xffff_0054, 0xab),
            "meta mark & 0xffff00ff | 0x000000ab"
        );
        assert_eq!(text(0xffff_ffef, 0x10), "meta mark | 0x00000010");
        assert_eq!(text(0x0000_00ff, 0), "meta mark & 0x000000ff");
        assert_eq!(text(0xffff_ffff, 0x10), "meta mark ^ 0x00000010");
        assert_eq!(
            text(0x0000_ff00, 0x3),
            "meta mark & 0x0000ff03 | 0x00000003"
        );
        assert_eq!(
            text(0x0000_fc00, 0x300),
            "meta mark & 0x0000ff00 | 0x00000300"
        );
        assert_eq!(text(0x0000_ffff, 0xffff_0000), "meta mark | 0xffff0000");
        assert_eq!(
            text(0x0000_00ff, 0x0f),
            "meta mark & 0x000000ff ^ 0x0000000f"
        );
        assert_eq!(
            text(0xffff_fffe, 0x2),
            "meta mark & 0xfffffffe ^ 0x00000002"
        );
    }
}
