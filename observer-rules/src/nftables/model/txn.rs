//! One transaction's book-keeping ([`Txn`]): what each touched table, chain, set and set
//! element looked like before the transaction, the rule handles and positions of each touched
//! chain, and the slots that keep changes in notification order; then [`Txn::finish`], which
//! turns that into the transaction's *net* changes (a restore that deletes and recreates a
//! table as it was is no change) and puts them through [`ruleset::summarize`] with the rule
//! counts from before the transaction.
//!
//! Layering: below `txn_apply` (which applies notifications to the state through this
//! book-keeping) and `generation`; imports `decode`, `render` (set elements as text), `state`
//! and `crate::ruleset`.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use crate::nftables::model::state::{
    describe_chain, describe_set, elem_key, table_flags, ChainKey, ElemKey, NftState, TableKey,
    ELEMENTS_SHOWN,
};
use crate::nftables::netlink::decode::{Chain, Element, Set, Table};
use crate::nftables::render;
use crate::ruleset::{self, Change, Family, Op};

/// Where a net change will go, and what the object looked like before the transaction.
struct Net<T> {
    slot: usize,
    /// Boxed: most objects of a big transaction are new, and a chain is 160 bytes.
    before: Option<Box<T>>,
}

/// Set elements touched by a transaction: whether each was there before it.
struct ElemNet {
    slot: usize,
    count_before: usize,
    touched: BTreeMap<ElemKey, (bool, Element)>,
}

/// Book-keeping while one transaction is applied. Tables, chains, sets and set elements get
/// their *net* change (compared before/after the whole transaction, so a restore that deletes
/// and recreates a table as it was is no change); rules go to `summarize` one by one.
#[derive(Default)]
pub(crate) struct Txn {
    /// Changes in order; a slot may hold none (a net no-op) or several.
    slots: Vec<Vec<Change>>,
    /// Rule handles of each touched chain before the transaction, and their index.
    pub(crate) before: HashMap<ChainKey, (usize, HashMap<u64, usize>)>,
    /// Current index of rules deleted in this transaction (a re-add of the handle replaces).
    pub(crate) deleted_at: HashMap<(ChainKey, u64), usize>,
    /// Added rules, to give them their final position: (chain, handle, slot). The rules of a
    /// chain come one after another: they share its key.
    pub(crate) added: Vec<(Rc<ChainKey>, u64, usize)>,
    tables: HashMap<TableKey, Net<Table>>,
    chains: HashMap<ChainKey, Net<Chain>>,
    sets: HashMap<ChainKey, Net<Set>>,
    elems: HashMap<ChainKey, ElemNet>,
}

impl Txn {
    /// A rule added to chain `key` (its handle, its change's slot), to be given its position.
    pub(crate) fn note_added(&mut self, key: ChainKey, handle: u64, slot: usize) {
        let key = match self.added.last() {
            Some((last, _, _)) if **last == key => Rc::clone(last),
            _ => Rc::new(key),
        };
        self.added.push((key, handle, slot));
    }

    pub(crate) fn push(&mut self, c: Change) -> usize {
        self.slots.push(vec![c]);
        self.slots.len() - 1
    }

    fn slot(&mut self) -> usize {
        self.slots.push(Vec::new());
        self.slots.len() - 1
    }

    /// Put `c` (if any) in `slot`. Most slots get one change: its room is made for one (a
    /// `Vec` grows from nothing to room for four, 0.8 KB per chain of a 110,000-chain load).
    fn fill(&mut self, slot: usize, c: impl IntoIterator<Item = Change>) {
        let slot = &mut self.slots[slot];
        for c in c {
            if slot.capacity() == 0 {
                slot.reserve_exact(1);
            }
            slot.push(c);
        }
    }

    pub(crate) fn touch_rules(&mut self, st: &NftState, key: &ChainKey) {
        if self.before.contains_key(key) {
            return;
        }
        let handles: HashMap<u64, usize> = st
            .chain(key.0, &key.1, &key.2)
            .map(|c| {
                c.rules
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (r.handle, i))
                    .collect()
            })
            .unwrap_or_default();
        self.before.insert(key.clone(), (handles.len(), handles));
    }

    /// Remember how a table was before the transaction. `deleted` is the object of a delete
    /// notification: proof that it existed, even if the state missed it.
    pub(crate) fn note_table(&mut self, st: &NftState, key: &TableKey, deleted: Option<&Table>) {
        if !self.tables.contains_key(key) {
            let before = st.tables.get(key).map(|t| t.table.clone());
            let before = before.or_else(|| deleted.cloned());
            let slot = self.slot();
            self.tables.insert(
                key.clone(),
                Net {
                    slot,
                    before: before.map(Box::new),
                },
            );
        }
    }

    pub(crate) fn note_chain(&mut self, st: &NftState, key: &ChainKey, deleted: Option<&Chain>) {
        if !self.chains.contains_key(key) {
            let before = st.chain(key.0, &key.1, &key.2).map(|c| (*c.chain).clone());
            let before = before.or_else(|| deleted.cloned());
            let slot = self.slot();
            self.chains.insert(
                key.clone(),
                Net {
                    slot,
                    before: before.map(Box::new),
                },
            );
        }
    }

    pub(crate) fn note_set(&mut self, st: &NftState, key: &ChainKey, deleted: Option<&Set>) {
        if !self.sets.contains_key(key) {
            let before = st
                .table(key.0, &key.1)
                .and_then(|t| t.sets.get(&key.2))
                .map(|s| s.set.clone());
            let before = before.or_else(|| deleted.cloned());
            let slot = self.slot();
            self.sets.insert(
                key.clone(),
                Net {
                    slot,
                    before: before.map(Box::new),
                },
            );
        }
    }

    /// Record the elements about to change (with whether they were there before).
    pub(crate) fn note_elements<'e>(
        &mut self,
        st: &NftState,
        key: &ChainKey,
        elems: impl Iterator<Item = &'e Element>,
    ) {
        let set = st.table(key.0, &key.1).and_then(|t| t.sets.get(&key.2));
        if !self.elems.contains_key(key) {
            let slot = self.slot();
            let count_before = set.map(|s| counted(s.elements.values())).unwrap_or(0);
            self.elems.insert(
                key.clone(),
                ElemNet {
                    slot,
                    count_before,
                    touched: BTreeMap::new(),
                },
            );
        }
        let Some(net) = self.elems.get_mut(key) else {
            return;
        };
        for e in elems {
            let k = elem_key(e);
            let was = set.is_some_and(|s| s.elements.contains_key(&k));
            net.touched.entry(k).or_insert_with(|| (was, e.clone()));
        }
    }

    /// The transaction's changes: each touched object's net change, in notification order,
    /// through [`ruleset::summarize`] with the rule counts from before the transaction.
    pub(crate) fn finish(mut self, st: &NftState) -> Vec<Change> {
        self.place_added(st);
        self.net_tables(st);
        self.net_chains(st);
        self.net_sets(st);
        self.net_elements(st);
        // Each slot is let go as soon as it is moved: the two are never both whole.
        let mut changes = Vec::with_capacity(self.slots.iter().map(Vec::len).sum());
        for slot in std::mem::take(&mut self.slots) {
            changes.extend(slot);
        }
        let before = &self.before;
        ruleset::summarize(
            changes,
            |fam, table, chain| {
                let f = nfproto_of(fam);
                let key = (f, table.to_string(), chain.to_string());
                match before.get(&key) {
                    Some((n, _)) => *n,
                    None => st
                        .chain(f, table, chain)
                        .map(|c| c.rules.len())
                        .unwrap_or(0),
                }
            },
            |fam, table| {
                // Touched chains as they were; the others have not changed.
                let f = nfproto_of(fam);
                let mut total = 0;
                let mut touched = std::collections::HashSet::new();
                for (key, (n, _)) in before.iter() {
                    if key.0 == f && key.1 == table {
                        total += n;
                        touched.insert(key.2.as_str());
                    }
                }
                if let Some(t) = st.table(f, table) {
                    for (name, c) in &t.chains {
                        if !touched.contains(name.as_str()) {
                            total += c.rules.len();
                        }
                    }
                }
                total
            },
        )
    }

    /// Give each rule added by the transaction its final position in its chain.
    fn place_added(&mut self, st: &NftState) {
        for (key, handle, slot) in std::mem::take(&mut self.added) {
            let pos = st
                .chain(key.0, &key.1, &key.2)
                .and_then(|c| c.rules.iter().position(|r| r.handle == handle));
            for c in &mut self.slots[slot] {
                c.position = pos;
            }
        }
    }

    /// The net change of each touched table (created, deleted, flags changed).
    fn net_tables(&mut self, st: &NftState) {
        for ((family, name), net) in std::mem::take(&mut self.tables) {
            let fam = Family::from_nfproto(family);
            let after = st.table(family, &name).map(|t| &t.table);
            let change = match (net.before.as_deref(), after) {
                (None, Some(a)) => {
                    let c = Change::new(Op::TableCreate, fam, name);
                    Some(match a.flags {
                        0 => c,
                        f => c.detail(format!("flags {}", table_flags(f))),
                    })
                }
                (Some(_), None) => Some(Change::new(Op::TableDelete, fam, name)),
                (Some(b), Some(a)) if b.flags != a.flags => {
                    Some(Change::new(Op::ChainUpdate, fam, name).detail(format!(
                        "table flags {} (was: {})",
                        table_flags(a.flags),
                        table_flags(b.flags)
                    )))
                }
                _ => None,
            };
            self.fill(net.slot, change);
        }
    }

    /// The net change of each touched chain (created, deleted, hook, policy or name changed).
    fn net_chains(&mut self, st: &NftState) {
        for ((family, table, name), net) in std::mem::take(&mut self.chains) {
            let fam = Family::from_nfproto(family);
            let after = st.chain(family, &table, &name).map(|c| &c.chain);
            let base = Change::new(Op::ChainCreate, fam, table).chain(name);
            let change = match (net.before.as_deref(), after) {
                (None, Some(a)) => Some(with_detail(base, describe_chain(a))),
                (Some(b), None) => Some(with_detail(
                    Change {
                        op: Op::ChainDelete,
                        ..base
                    },
                    describe_chain(b),
                )),
                (Some(b), Some(a)) => {
                    let (was, now) = (describe_chain(b), describe_chain(a));
                    (was != now).then(|| {
                        let regular = || "regular chain".to_string();
                        Change {
                            op: Op::ChainUpdate,
                            ..base
                        }
                        .detail(format!(
                            "{} (was: {})",
                            now.unwrap_or_else(regular),
                            was.unwrap_or_else(regular)
                        ))
                    })
                }
                (None, None) => None,
            };
            self.fill(net.slot, change);
        }
    }

    /// The net change of each touched set (created or deleted).
    fn net_sets(&mut self, st: &NftState) {
        for ((family, table, name), net) in std::mem::take(&mut self.sets) {
            let fam = Family::from_nfproto(family);
            let after = st.table(family, &table).and_then(|t| t.sets.get(&name));
            let change = match (net.before.as_deref(), after) {
                (None, Some(a)) => Some(
                    Change::new(Op::SetCreate, fam, table)
                        .chain(name)
                        .detail(describe_set(&a.set)),
                ),
                (Some(_), None) => Some(Change::new(Op::SetDelete, fam, table).chain(name)),
                _ => None,
            };
            self.fill(net.slot, change);
        }
    }

    /// The net change of each touched set's elements: added, deleted, or the set flushed.
    fn net_elements(&mut self, st: &NftState) {
        for ((family, table, name), net) in std::mem::take(&mut self.elems) {
            let Some(set) = st.table(family, &table).and_then(|t| t.sets.get(&name)) else {
                continue; // the set went away: its set_delete says it all
            };
            let fam = Family::from_nfproto(family);
            let mut added = Vec::new();
            let mut removed = Vec::new();
            for (k, (was, e)) in &net.touched {
                match (was, set.elements.contains_key(k)) {
                    (false, true) => added.push(e),
                    (true, false) => removed.push(e),
                    _ => {}
                }
            }
            let base = Change::new(Op::ElementDelete, fam, table).chain(name);
            let slot = &mut self.slots[net.slot];
            if !removed.is_empty() && added.is_empty() && set.elements.is_empty() {
                // A set's only element goes with it: the writer's request (see
                // `ruleset::settle_set_flushes`) may say it was deleted, not flushed.
                let rule = (net.count_before == 1)
                    .then(|| render::elements_text(&set.set, &removed, &[], ELEMENTS_SHOWN));
                slot.push(
                    Change {
                        op: Op::SetFlush,
                        rule,
                        ..base
                    }
                    .detail(format!("{} deleted", plural(net.count_before, "element"))),
                );
                continue;
            }
            for (op, list) in [(Op::ElementDelete, removed), (Op::ElementAdd, added)] {
                if list.is_empty() {
                    continue;
                }
                let text = render::elements_text(&set.set, &list, &[], ELEMENTS_SHOWN);
                slot.push(
                    Change {
                        op,
                        rule: Some(text),
                        ..base.clone()
                    }
                    .detail(plural(counted(list.iter().copied()), "element")),
                );
            }
        }
    }
}

fn with_detail(c: Change, detail: Option<String>) -> Change {
    match detail {
        Some(d) => c.detail(d),
        None => c,
    }
}

/// How many elements a person counts: an interval is one element, though the kernel keeps it
/// as two (its start, and an end marked `NFT_SET_ELEM_INTERVAL_END`).
fn counted<'e>(elems: impl Iterator<Item = &'e Element>) -> usize {
    elems
        .filter(|e| e.flags & crate::nftables::netlink::decode::NFT_SET_ELEM_INTERVAL_END == 0)
        .count()
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn nfproto_of(f: Family) -> u8 {
    match f {
        Family::Inet => 1,
        Family::Ip => 2,
        Family::Arp => 3,
        Family::Netdev => 5,
        Family::Bridge => 7,
        Family::Ip6 => 10,
        Family::Unknown => 0,
    }
}

#[cfg(test)]
mod count_tests {
    use super::*;
    use crate::nftables::testing::element;

    #[test]
    fn an_interval_is_one_element() {
        use crate::nftables::netlink::decode::NFT_SET_ELEM_INTERVAL_END as END;
        // `{ 10.0.0.0/8, 192.168.1.1-192.168.1.9 }` as the kernel keeps it: a leading end at
        // 0.0.0.0, then each range's start and the end just past it.
        let kept = [
            element([0, 0, 0, 0], END),
            element([10, 0, 0, 0], 0),
            element([11, 0, 0, 0], END),
            element([192, 168, 1, 1], 0),
            element([192, 168, 1, 10], END),
        ];
        assert_eq!(counted(kept.iter()), 2);
        assert_eq!(plural(counted(kept.iter()), "element"), "2 elements");
        assert_eq!(counted([element([10, 0, 0, 3], 0)].iter()), 1);
    }
}
