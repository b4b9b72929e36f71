//! The nf_tables ruleset of one network namespace, and the transactions that change it.
//!
//! [`NftState`] mirrors the kernel: tables → chains (hook, priority, policy, type) → ordered
//! rules (handle, rendered text, fingerprint), and sets with their elements (anonymous sets,
//! which belong to a rule, let rules print `{ 22, 80 }`; named sets' elements let a transaction
//! report only the elements it really added or removed).
//! It is built from a dump ([`NftState::from_dump`]) and kept up to date by
//! [`crate::nftables::model::generation::GenerationBuilder`].

use std::collections::BTreeMap;

use crate::nftables::compat::xt_syntax::{self, XtText};
use crate::nftables::netlink::decode::{self, Chain, Element, Rule, Set, Table};
use crate::nftables::netlink::expr::{self, Fnv};
use crate::nftables::render::fields;
use crate::nftables::render::{self, SetSource};
use crate::nftables::Dump;
use crate::ruleset::RuleForms;

/// Elements listed in one element change before the list is cut short.
pub const ELEMENTS_SHOWN: usize = 32;

/// One rule as the state keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleState {
    pub handle: u64,
    /// The rule in `nft list ruleset` syntax (boxed: no spare room kept beside the text).
    pub text: Box<str>,
    /// For a rule of a table iptables-nft manages: its `iptables-nft-save` text, or why
    /// iptables-nft cannot read it back. `None` for nft's own tables (boxed: most rules have
    /// none, and a rule state is kept for every rule of the namespace).
    pub xt: Option<Box<XtText>>,
    /// Structural fingerprint (see `expr::fingerprint`).
    pub fingerprint: u64,
}

impl RuleState {
    /// The rule in its writer's syntax and its forms, for a change.
    pub fn forms(&self) -> (String, RuleForms) {
        let xt = self.xt.as_deref().map(|x| match x {
            XtText::Saved(s) => Ok(s.as_str()),
            XtText::Unreadable(why) => Err(why.as_str()),
        });
        RuleForms::of(&self.text, xt)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainState {
    /// Boxed: the chain map's nodes hold a pointer instead of the whole chain, and a node
    /// has room for 11 entries, of which an ordered load fills about half.
    pub chain: Box<Chain>,
    pub rules: Vec<RuleState>,
}

/// Chains shorter than this grow their rule list one rule at a time (and sets their elements).
const FEW_RULES: usize = 4;

/// Insert `rs` at `idx` in a chain's rules. Most chains hold one to three rules (a kube-proxy
/// table's 40,000 chains hold two each) and a vector's first growth makes room for four: a
/// short list grows by one instead, and a long one as vectors do.
pub(crate) fn insert_rule(rules: &mut Vec<RuleState>, idx: usize, rs: RuleState) {
    if rules.len() == rules.capacity() && rules.len() < FEW_RULES {
        rules.reserve_exact(1);
    }
    rules.insert(idx, rs);
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetState {
    pub set: Set,
    /// The elements in the kernel (an interval is a start and an end element).
    pub elements: Elements,
}

/// A set's elements, in the order of their identity ([`ElemKey`]), each once.
///
/// Most sets are small: the anonymous set of a rule (`vmap { 0 : goto a, 1 : goto b }`) holds a
/// few elements, and a big kube-proxy table has one per service. A map's first node has room
/// for 11 entries (2.3 KiB with an element's size), so a set of up to [`SMALL_SET`] elements is
/// kept in a sorted vector instead, and becomes a map when it grows past that.
#[derive(Debug, Clone)]
pub struct Elements(Repr);

#[derive(Debug, Clone)]
enum Repr {
    Small(Vec<Element>),
    Large(BTreeMap<ElemKey, Element>),
}

/// The most elements a set keeps in a vector.
pub const SMALL_SET: usize = 16;

impl Default for Elements {
    fn default() -> Elements {
        Elements(Repr::Small(Vec::new()))
    }
}

/// An element's identity, borrowed: it orders as [`ElemKey`] does.
type Ident<'a> = (&'a [u8], Option<&'a [u8]>, u32);

fn ident(e: &Element) -> Ident<'_> {
    (e.key.as_slice(), e.key_end(), identity_flags(e))
}

fn key_ident(k: &ElemKey) -> Ident<'_> {
    (k.0.as_slice(), k.1.as_deref(), k.2)
}

/// Where the element of identity `id` is in a small set's sorted vector, or where it would go.
fn position(v: &[Element], id: Ident<'_>) -> Result<usize, usize> {
    v.binary_search_by(|x| ident(x).cmp(&id))
}

impl Elements {
    pub fn new() -> Elements {
        Elements::default()
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Small(v) => v.len(),
            Repr::Large(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements in order.
    pub fn values(&self) -> Box<dyn Iterator<Item = &Element> + '_> {
        match &self.0 {
            Repr::Small(v) => Box::new(v.iter()),
            Repr::Large(m) => Box::new(m.values()),
        }
    }

    /// Add `e`, or replace the element of the same identity.
    pub fn insert(&mut self, e: Element) {
        match &mut self.0 {
            Repr::Small(v) => match position(v, ident(&e)) {
                Ok(i) => v[i] = e,
                Err(_) if v.len() >= SMALL_SET => {
                    let mut m: BTreeMap<ElemKey, Element> =
                        v.drain(..).map(|x| (elem_key(&x), x)).collect();
                    m.insert(elem_key(&e), e);
                    self.0 = Repr::Large(m);
                }
                Err(i) => {
                    // One at a time, as a short rule list grows (see [`insert_rule`]).
                    if v.len() == v.capacity() && v.len() < FEW_RULES {
                        v.reserve_exact(1);
                    }
                    v.insert(i, e);
                }
            },
            Repr::Large(m) => {
                m.insert(elem_key(&e), e);
            }
        }
    }

    /// Remove the element of `e`'s identity, if present.
    pub fn remove(&mut self, e: &Element) {
        match &mut self.0 {
            Repr::Small(v) => {
                if let Ok(i) = position(v, ident(e)) {
                    v.remove(i);
                }
            }
            Repr::Large(m) => {
                m.remove(&elem_key(e));
            }
        }
    }

    /// Whether an element of identity `k` is present.
    pub fn contains_key(&self, k: &ElemKey) -> bool {
        match &self.0 {
            Repr::Small(v) => position(v, key_ident(k)).is_ok(),
            Repr::Large(m) => m.contains_key(k),
        }
    }

    /// Whether an element of `e`'s identity is present.
    pub fn contains(&self, e: &Element) -> bool {
        match &self.0 {
            Repr::Small(v) => position(v, ident(e)).is_ok(),
            Repr::Large(m) => m.contains_key(&elem_key(e)),
        }
    }
}

/// Two sets hold the same elements whichever way each keeps them.
impl PartialEq for Elements {
    fn eq(&self, other: &Elements) -> bool {
        self.len() == other.len() && self.values().eq(other.values())
    }
}

impl Eq for Elements {}

impl FromIterator<Element> for Elements {
    fn from_iter<I: IntoIterator<Item = Element>>(iter: I) -> Elements {
        let mut out = Elements::new();
        for e in iter {
            out.insert(e);
        }
        out
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableState {
    pub table: Table,
    pub chains: BTreeMap<String, ChainState>,
    pub sets: BTreeMap<String, SetState>,
    /// No chain of the table has a higher handle (see [`HandleBound`]).
    pub(crate) chain_handles: HandleBound,
}

/// A bound on the handles of a table's chains. The kernel gives each new object of a table the
/// next handle, so a chain whose handle is above the bound is new, not one renamed: the rename
/// check, which looks through every chain of the table, is skipped for it (a table of 160,000
/// chains loaded in one transaction would otherwise look through them for each). The bound may
/// stay above the handles left after deletes; it is not part of the state's identity.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HandleBound(pub u64);

impl HandleBound {
    pub(crate) fn note(&mut self, handle: Option<u64>) {
        self.0 = self.0.max(handle.unwrap_or(0));
    }

    /// Whether a chain of `handle` may be one the table already holds.
    pub(crate) fn may_hold(&self, handle: u64) -> bool {
        handle <= self.0
    }
}

/// Equal whatever their bounds: two copies of a table built in different ways hold the same.
impl PartialEq for HandleBound {
    fn eq(&self, _: &HandleBound) -> bool {
        true
    }
}

impl Eq for HandleBound {}

impl SetSource for TableState {
    fn set_info(&self, name: &str) -> Option<(&Set, Vec<&Element>)> {
        self.sets
            .get(name)
            .map(|s| (&s.set, s.elements.values().collect()))
    }
}

impl TableState {
    pub(crate) fn new(table: Table) -> TableState {
        TableState {
            table,
            chains: BTreeMap::new(),
            sets: BTreeMap::new(),
            chain_handles: HandleBound::default(),
        }
    }

    /// A digest of an anonymous set's contents, for rule fingerprints.
    fn anon_digest(&self, name: &str) -> Option<u64> {
        let s = self.sets.get(name)?;
        if !s.set.is_anonymous() {
            return None;
        }
        let mut h = Fnv::new();
        for e in s.elements.values() {
            h.field(&e.key)
                .field(e.key_end().unwrap_or(&[]))
                .field(&e.flags.to_le_bytes());
            if let Some(d) = &e.data {
                h.field(format!("{d:?}").as_bytes());
            }
        }
        Some(h.finish())
    }

    pub(crate) fn rule_state(&self, rule: &Rule) -> RuleState {
        RuleState {
            handle: rule.handle,
            text: render::rule(rule, self).into_boxed_str(),
            xt: xt_syntax::rule_text(rule, self.chains.get(&rule.chain).map(|c| &*c.chain))
                .map(Box::new),
            fingerprint: expr::fingerprint(&rule.exprs, &|n| self.anon_digest(n)),
        }
    }
}

pub(crate) type TableKey = (u8, String);
pub(crate) type ChainKey = (u8, String, String);

/// The ruleset of one namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NftState {
    /// The generation this state shows.
    pub gen_id: u32,
    pub tables: BTreeMap<TableKey, TableState>,
}

impl NftState {
    /// The state a dump shows.
    pub fn from_dump(dump: &Dump) -> NftState {
        let mut st = NftState {
            gen_id: dump.gen_id,
            tables: BTreeMap::new(),
        };
        for t in &dump.tables {
            st.tables
                .insert((t.family, t.name.clone()), TableState::new(t.clone()));
        }
        for c in &dump.chains {
            let t = st.table_mut(c.family, &c.table);
            t.chain_handles.note(c.handle);
            t.chains.insert(
                c.name.clone(),
                ChainState {
                    chain: Box::new(c.clone()),
                    rules: Vec::new(),
                },
            );
        }
        for s in &dump.sets {
            st.table_mut(s.family, &s.table).sets.insert(
                s.name.clone(),
                SetState {
                    set: s.clone(),
                    elements: Elements::new(),
                },
            );
        }
        for e in &dump.elements {
            if let Some(s) = st.table_mut(e.family, &e.table).sets.get_mut(&e.set) {
                for el in &e.elements {
                    s.elements.insert(el.clone());
                }
            }
        }
        for r in &dump.rules {
            let t = st.table_mut(r.family, &r.table);
            let rs = t.rule_state(r);
            let rules = &mut chain_entry(t, r.family, &r.table, &r.chain).rules;
            insert_rule(rules, rules.len(), rs);
        }
        st
    }

    /// The rules of every chain.
    pub fn rule_count(&self) -> usize {
        self.tables
            .values()
            .flat_map(|t| t.chains.values())
            .map(|c| c.rules.len())
            .sum()
    }

    pub fn table(&self, family: u8, name: &str) -> Option<&TableState> {
        self.tables.get(&(family, name.to_string()))
    }

    pub fn chain(&self, family: u8, table: &str, chain: &str) -> Option<&ChainState> {
        self.table(family, table)?.chains.get(chain)
    }

    pub(crate) fn table_mut(&mut self, family: u8, name: &str) -> &mut TableState {
        self.tables
            .entry((family, name.to_string()))
            .or_insert_with(|| {
                TableState::new(Table {
                    family,
                    name: name.to_string(),
                    flags: 0,
                    handle: None,
                })
            })
    }
}

pub(crate) fn chain_entry<'t>(
    t: &'t mut TableState,
    family: u8,
    table: &str,
    name: &str,
) -> &'t mut ChainState {
    t.chains
        .entry(name.to_string())
        .or_insert_with(|| ChainState {
            chain: Box::new(Chain {
                family,
                table: table.to_string(),
                name: name.to_string(),
                handle: None,
                hook: None,
                policy: None,
                kind: None,
                flags: 0,
                comment: None,
            }),
            rules: Vec::new(),
        })
}

/// Take what an update notification carries into the chain we know.
pub(crate) fn merge_chain(old: &mut Chain, new: &Chain) {
    if new.hook.is_some() {
        old.hook = new.hook.clone();
    }
    if new.policy.is_some() {
        old.policy = new.policy;
    }
    if new.kind.is_some() {
        old.kind = new.kind.clone();
    }
    if new.handle.is_some() {
        old.handle = new.handle;
    }
    old.flags = new.flags;
    if new.comment.is_some() {
        old.comment = new.comment.clone();
    }
}

/// A base chain's header as nft prints it: `type filter hook input priority filter; policy
/// accept`. None for regular chains.
pub fn describe_chain(c: &Chain) -> Option<String> {
    let hook = c.hook.as_ref()?;
    let mut text = format!(
        "type {} hook {}",
        c.kind.as_deref().unwrap_or("filter"),
        fields::hook_name(c.family, hook.num)
    );
    match hook.devices.as_slice() {
        [] => {}
        [one] => text = format!("{text} device \"{one}\""),
        many => {
            let list: Vec<String> = many.iter().map(|d| format!("\"{d}\"")).collect();
            text = format!("{text} devices = {{ {} }}", list.join(", "));
        }
    }
    text = format!(
        "{text} priority {}",
        fields::priority_text(c.family, hook.num, hook.priority)
    );
    let policy = match c.policy {
        Some(p) if p == decode::NF_DROP as u32 => "drop",
        _ => "accept",
    };
    Some(format!("{text}; policy {policy}"))
}

pub(crate) fn table_flags(flags: u32) -> String {
    let mut names = Vec::new();
    if flags & 1 != 0 {
        names.push("dormant".to_string());
    }
    if flags & 2 != 0 {
        names.push("owner".to_string());
    }
    if flags & !3 != 0 {
        names.push(format!("0x{:x}", flags & !3));
    }
    if names.is_empty() {
        "none".into()
    } else {
        names.join(",")
    }
}

/// `type ipv4_addr . inet_service : verdict; flags interval` for a set.
pub fn describe_set(s: &Set) -> String {
    let key: Vec<&str> = concat_ids(s.key_type).into_iter().map(type_name).collect();
    let mut text = format!("type {}", key.join(" . "));
    if s.flags & decode::NFT_SET_MAP != 0 {
        let data = match s.data_type {
            Some(decode::NFT_DATA_VERDICT) => "verdict".to_string(),
            Some(t) => concat_ids(t)
                .into_iter()
                .map(type_name)
                .collect::<Vec<_>>()
                .join(" . "),
            None => "?".into(),
        };
        text = format!("{text} : {data}");
    }
    let mut flags = Vec::new();
    for (bit, name) in [
        (0x2, "constant"),
        (0x4, "interval"),
        (0x10, "timeout"),
        (0x20, "dynamic"),
    ] {
        if s.flags & bit != 0 {
            flags.push(name);
        }
    }
    if s.flags & decode::NFT_SET_OBJECT != 0 {
        flags.push("object");
    }
    if !flags.is_empty() {
        text = format!("{text}; flags {}", flags.join(","));
    }
    text
}

fn concat_ids(id: u32) -> Vec<u32> {
    let mut parts = Vec::new();
    let mut rest = id;
    while rest != 0 {
        parts.push(rest & 0x3f);
        rest >>= 6;
    }
    parts.reverse();
    if parts.is_empty() {
        parts.push(0);
    }
    parts
}

fn type_name(id: u32) -> &'static str {
    const NAMES: [&str; 47] = [
        "invalid",
        "verdict",
        "nf_proto",
        "bitmask",
        "integer",
        "string",
        "ll_addr",
        "ipv4_addr",
        "ipv6_addr",
        "ether_addr",
        "ether_type",
        "arp_op",
        "inet_proto",
        "inet_service",
        "icmp_type",
        "tcp_flag",
        "dccp_pkttype",
        "mh_type",
        "time",
        "mark",
        "iface_index",
        "iface_type",
        "realm",
        "classid",
        "uid",
        "gid",
        "ct_state",
        "ct_dir",
        "ct_status",
        "icmpv6_type",
        "ct_label",
        "pkt_type",
        "icmp_code",
        "icmpv6_code",
        "icmpx_code",
        "devgroup",
        "dscp",
        "ecn",
        "fib_addrtype",
        "boolean",
        "ct_event",
        "ifname",
        "igmp_type",
        "time",
        "hour",
        "day",
        "cgroupsv2",
    ];
    NAMES.get(id as usize).copied().unwrap_or("unknown")
}

/// Identity of a set element: its key, range end and interval-end/catch-all flags.
pub type ElemKey = (Vec<u8>, Option<Vec<u8>>, u32);

pub(crate) fn elem_key(e: &Element) -> ElemKey {
    (
        e.key.clone(),
        e.key_end().map(<[u8]>::to_vec),
        identity_flags(e),
    )
}

/// The flags that are part of an element's identity.
fn identity_flags(e: &Element) -> u32 {
    e.flags & (decode::NFT_SET_ELEM_INTERVAL_END | decode::NFT_SET_ELEM_CATCHALL)
}

#[cfg(test)]
mod elements_tests {
    use super::*;

    fn el(key: u32, flags: u32) -> Element {
        crate::nftables::testing::element(key.to_be_bytes(), flags)
    }

    #[test]
    fn an_element_boxes_its_rarer_parts_only_when_it_has_any() {
        use crate::nftables::netlink::decode::ElementMore;
        let plain = el(1, 0);
        assert!(plain.more.is_none(), "a key alone holds no box");
        assert!(std::mem::size_of::<Element>() <= 72);
        // An empty box says what no box says: equal, and hashed and ordered alike.
        let mut boxed = plain.clone();
        boxed.more = Some(Box::default());
        assert_eq!(plain, boxed);
        let hash = |e: &Element| {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            e.hash(&mut h);
            h.finish()
        };
        assert_eq!(hash(&plain), hash(&boxed));
        // A range end orders before the data, as it did as a field of its own.
        let ranged = Element::new(
            1u32.to_be_bytes().to_vec(),
            None,
            0,
            ElementMore {
                key_end: Some(9u32.to_be_bytes().to_vec()),
                ..ElementMore::default()
            },
        );
        assert_eq!(ranged.key_end(), Some(&9u32.to_be_bytes()[..]));
        assert!(plain < ranged);
        let mut commented = plain.clone();
        commented.more_mut().comment = Some("x".into());
        assert_ne!(plain, commented);
        assert_eq!(commented.comment(), Some("x"));
    }

    /// The elements as a map keyed by identity would hold them.
    fn reference(items: &[Element]) -> Vec<Element> {
        let m: BTreeMap<ElemKey, Element> =
            items.iter().map(|e| (elem_key(e), e.clone())).collect();
        m.into_values().collect()
    }

    #[test]
    fn small_and_large_sets_keep_the_maps_order_and_identity() {
        for n in [0, 3, SMALL_SET, SMALL_SET + 1, 100] {
            // Inserted out of order, one twice, and one interval end beside its start.
            let mut items: Vec<Element> = (0..n as u32).rev().map(|k| el(k * 7 % 101, 0)).collect();
            if n > 0 {
                items.push(el(0, 0));
                items.push(el(0, decode::NFT_SET_ELEM_INTERVAL_END));
            }
            let set: Elements = items.iter().cloned().collect();
            let want = reference(&items);
            assert_eq!(set.len(), want.len(), "{n} elements");
            assert!(set.values().eq(want.iter()), "{n} elements: order");
            for e in &items {
                assert!(set.contains(e) && set.contains_key(&elem_key(e)));
            }
            assert!(!set.contains(&el(1000, 0)));
        }
    }

    #[test]
    fn removing_and_replacing_follow_identity_and_equality_ignores_the_form() {
        let mut small: Elements = (0..3).map(|k| el(k, 0)).collect();
        let mut large: Elements = (0..(SMALL_SET as u32 + 5)).map(|k| el(k, 0)).collect();
        for k in 3..(SMALL_SET as u32 + 5) {
            large.remove(&el(k, 0));
        }
        // Three elements each, one kept in a vector and one in a map: the same set.
        assert_eq!(small, large);
        // The interval-end flag is identity; other flags are not.
        small.remove(&el(1, decode::NFT_SET_ELEM_INTERVAL_END));
        assert_eq!(small.len(), 3);
        let mut replaced = el(2, 0);
        replaced.more_mut().comment = Some("new".into());
        small.insert(replaced.clone());
        assert_eq!(small.len(), 3);
        assert!(small.values().any(|e| *e == replaced));
        assert_ne!(small, large);
        small.remove(&el(0, 0));
        assert!(!small.contains(&el(0, 0)) && small.len() == 2);
    }

    #[test]
    fn short_rule_lists_grow_one_rule_at_a_time() {
        let rule = |handle| RuleState {
            handle,
            text: Box::default(),
            xt: None,
            fingerprint: 0,
        };
        let mut rules = Vec::new();
        insert_rule(&mut rules, 0, rule(2));
        insert_rule(&mut rules, 0, rule(1));
        assert_eq!(rules.capacity(), 2);
        for h in 3..20 {
            let end = rules.len();
            insert_rule(&mut rules, end, rule(h));
        }
        let handles: Vec<u64> = rules.iter().map(|r| r.handle).collect();
        assert_eq!(handles, (1..20).collect::<Vec<_>>());
        assert!(rules.capacity() < 40, "long lists grow as vectors do");
    }
}
