//! Expression attributes and the structural fingerprint of a rule.
//!
//! [`Attrs`] gives typed, length-checked access to one expression's `NFTA_EXPR_DATA`.
//! [`fingerprint`] hashes a rule's expressions the way `ruleset::summarize` needs: equal for
//! the same rule re-added (an `iptables-nft-restore` rewriting a chain as it was), so it leaves
//! out what is runtime state rather than ruleset (counter values, quota consumption, `last`
//! timestamps) and what is renamed on every add (anonymous sets `__set%d`, replaced by a digest
//! of their elements). The hash is FNV-1a: stable across runs, builds and Rust versions.

use crate::netlink::{self, Attr};
use crate::nftables::netlink::decode::{self, Data, Expr};

/// Typed access to one expression's attributes.
pub(crate) struct Attrs<'a> {
    list: Vec<Attr<'a>>,
}

impl<'a> Attrs<'a> {
    pub(crate) fn of(expr: &'a Expr) -> Attrs<'a> {
        Attrs { list: expr.attrs() }
    }

    pub(crate) fn has(&self, kind: u16) -> bool {
        netlink::find(&self.list, kind).is_some()
    }

    pub(crate) fn bytes(&self, kind: u16) -> Option<&'a [u8]> {
        netlink::find(&self.list, kind).map(|a| a.value)
    }

    pub(crate) fn u32(&self, kind: u16) -> Option<u32> {
        self.bytes(kind).and_then(|v| netlink::be_u32(v).ok())
    }

    pub(crate) fn u64(&self, kind: u16) -> Option<u64> {
        self.bytes(kind).and_then(|v| netlink::be_u64(v).ok())
    }

    pub(crate) fn string(&self, kind: u16) -> Option<String> {
        self.bytes(kind).map(netlink::string)
    }

    /// A nested `NFTA_DATA_*` attribute.
    pub(crate) fn data(&self, kind: u16) -> Option<Data> {
        self.bytes(kind).and_then(|v| decode::data(v).ok())
    }

    /// A nested `NFTA_DATA_VALUE`.
    pub(crate) fn value(&self, kind: u16) -> Option<Vec<u8>> {
        match self.data(kind)? {
            Data::Value(v) => Some(v),
            Data::Verdict(_) => None,
        }
    }

    /// A register attribute as an index into the 32-bit register file (see [`reg_index`]).
    pub(crate) fn reg(&self, kind: u16) -> Option<u32> {
        self.u32(kind).map(reg_index)
    }
}

/// The verdict register.
pub(crate) const REG_VERDICT: u32 = u32::MAX;

/// Normalise a register number: NFT_REG_1..4 are 16-byte registers overlaying the 32-bit
/// registers NFT_REG32_00.., so both map onto 32-bit slots (reg 1 → 0, reg 2 → 4, reg 9 → 1).
pub(crate) fn reg_index(reg: u32) -> u32 {
    match reg {
        0 => REG_VERDICT,
        1..=4 => (reg - 1) * 4,
        8.. => reg - 8,
        _ => reg.saturating_mul(1000),
    }
}

/// A 64-bit FNV-1a hasher.
#[derive(Clone, Copy)]
pub(crate) struct Fnv(u64);

impl Fnv {
    pub(crate) fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    pub(crate) fn bytes(&mut self, data: &[u8]) -> &mut Fnv {
        for b in data {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }

    /// A length-prefixed field, so that ("ab","c") and ("a","bc") differ.
    pub(crate) fn field(&mut self, data: &[u8]) -> &mut Fnv {
        self.bytes(&(data.len() as u32).to_le_bytes()).bytes(data)
    }

    pub(crate) fn finish(&self) -> u64 {
        self.0
    }
}

/// The structural fingerprint of a rule's expressions. `anon_set` returns a digest of an
/// anonymous set's contents by name (None for named sets, which are hashed by name).
pub(crate) fn fingerprint(exprs: &[Expr], anon_set: &dyn Fn(&str) -> Option<u64>) -> u64 {
    let mut h = Fnv::new();
    for e in exprs {
        hash_expr(&mut h, &e.name, &e.data, anon_set);
    }
    h.finish()
}

fn hash_expr(h: &mut Fnv, name: &str, data: &[u8], anon_set: &dyn Fn(&str) -> Option<u64>) {
    h.field(name.as_bytes());
    let Ok(list) = netlink::attrs(data) else {
        h.field(data);
        return;
    };
    for a in list {
        match (name, a.kind) {
            // Runtime state, not ruleset: counter bytes/packets, quota consumed, last used.
            ("counter", _) | ("last", _) | ("quota", 4) => continue,
            // Transaction-local ids (never in notifications, but never structural either).
            ("lookup", 4) | ("dynset", 2) | ("objref", 5) => continue,
            // Set names: anonymous sets are renamed on every add; hash their contents.
            ("lookup", 1) | ("dynset", 1) | ("objref", 4) => {
                let set = netlink::string(a.value);
                h.field(&a.kind.to_le_bytes());
                match anon_set(&set) {
                    Some(digest) => h.field(&digest.to_le_bytes()),
                    None => h.field(set.as_bytes()),
                };
                continue;
            }
            // dynset carries its own expressions (often a counter): normalise them too.
            ("dynset", 7) => {
                h.field(&a.kind.to_le_bytes());
                hash_nested_expr(h, a.value, anon_set);
                continue;
            }
            ("dynset", 10) => {
                h.field(&a.kind.to_le_bytes());
                for elem in netlink::attrs(a.value).unwrap_or_default() {
                    hash_nested_expr(h, elem.value, anon_set);
                }
                continue;
            }
            _ => {}
        }
        h.field(&a.kind.to_le_bytes()).field(a.value);
    }
}

fn hash_nested_expr(h: &mut Fnv, buf: &[u8], anon_set: &dyn Fn(&str) -> Option<u64>) {
    let parts = netlink::attrs(buf).unwrap_or_default();
    let name = netlink::find(&parts, 1)
        .map(|a| netlink::string(a.value))
        .unwrap_or_default();
    let data = netlink::find(&parts, 2).map(|a| a.value).unwrap_or(&[]);
    hash_expr(h, &name, data, anon_set);
}

/// Parse the (name, data) of an expression nested in another (dynset, set element exprs).
pub(crate) fn nested_expr(buf: &[u8]) -> Option<Expr> {
    let parts = netlink::attrs(buf).ok()?;
    Some(Expr {
        name: netlink::find(&parts, 1).map(|a| netlink::string(a.value))?,
        data: netlink::find(&parts, 2)
            .map(|a| a.value.to_vec())
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expr(name: &str, attrs: &[(u16, &[u8])]) -> Expr {
        let mut data = Vec::new();
        for (k, v) in attrs {
            netlink::push_attr(&mut data, *k, v);
        }
        Expr {
            name: name.into(),
            data,
        }
    }

    #[test]
    fn counters_do_not_change_the_fingerprint() {
        let none = &|_: &str| None;
        let a = [
            expr(
                "counter",
                &[(1, &5u64.to_be_bytes()), (2, &1u64.to_be_bytes())],
            ),
            expr("immediate", &[(1, &0u32.to_be_bytes())]),
        ];
        let b = [
            expr(
                "counter",
                &[(1, &999u64.to_be_bytes()), (2, &7u64.to_be_bytes())],
            ),
            expr("immediate", &[(1, &0u32.to_be_bytes())]),
        ];
        let c = [
            expr("counter", &[]),
            expr("immediate", &[(1, &1u32.to_be_bytes())]),
        ];
        assert_eq!(fingerprint(&a, none), fingerprint(&b, none));
        assert_ne!(fingerprint(&a, none), fingerprint(&c, none));
    }

    #[test]
    fn anonymous_sets_hash_by_content() {
        let digest = |name: &str| match name {
            "__set0" | "__set7" => Some(42),
            "__set1" => Some(43),
            _ => None,
        };
        let lookup = |set: &str| [expr("lookup", &[(1, &netlink::cstr(set))])];
        assert_eq!(
            fingerprint(&lookup("__set0"), &digest),
            fingerprint(&lookup("__set7"), &digest)
        );
        assert_ne!(
            fingerprint(&lookup("__set0"), &digest),
            fingerprint(&lookup("__set1"), &digest)
        );
        assert_ne!(
            fingerprint(&lookup("named"), &digest),
            fingerprint(&lookup("other"), &digest)
        );
    }

    #[test]
    fn registers_normalise() {
        assert_eq!(reg_index(1), 0);
        assert_eq!(reg_index(2), 4);
        assert_eq!(reg_index(8), 0);
        assert_eq!(reg_index(9), 1);
        assert_eq!(reg_index(0), REG_VERDICT);
    }
}
