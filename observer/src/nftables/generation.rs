//! Transactions: notifications grouped by the `NFT_MSG_NEWGEN` that closes them.
//!
//! [`GenerationBuilder`] takes notifications in order, buffers them until the NEWGEN of their
//! transaction (the kernel sends it after the objects), applies them to the [`NftState`] and
//! returns a [`Transaction`] whose changes went through [`ruleset::summarize`] with the rule
//! counts from before the transaction. Tables, chains, sets and set elements get their *net*
//! change over the whole transaction (a restore that deletes and recreates a table as it was is
//! no change); rules go to `summarize` one by one, which pairs deletes and re-adds.
//!
//! Rule positions: the kernel only says where a new rule went when it is neither first nor last
//! (`NFTA_RULE_POSITION`, the handle of the rule before it). Otherwise an appended rule
//! (NLM_F_APPEND) goes last, an inserted one first, and a rule re-using a handle deleted earlier
//! in the same transaction from the same chain object (a replace, `iptables -R`) goes where the
//! old one was (a deleted and recreated chain or table reuses handles, so that memory goes with
//! it). Positions of deletes are from before the transaction, of adds from after it.

use std::collections::{BTreeMap, HashMap};

use super::catch_up::catch_up;
use super::decode::{
    self, Chain, Element, Gen, Notification, Rule, Set, SetElems, Skipped, Table, Verb,
};
use super::ifnames::{self, IfNames};
use super::render;
use super::socket::Dump;
use super::state::{
    chain_entry, describe_chain, describe_set, elem_key, merge_chain, table_flags, ChainKey,
    ChainState, ElemKey, NftState, SetState, TableKey, TableState, ELEMENTS_SHOWN,
};
use crate::ruleset::{self, Change, Family, Op};

/// The changes of one nft generation, summarized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    pub gen_id: u32,
    /// The writer's thread id, from NEWGEN (0 when the kernel does not send it).
    pub pid: u32,
    /// The writer's comm (`NFTA_GEN_PROC_NAME`), at most 15 characters.
    pub comm: String,
    pub changes: Vec<Change>,
}

/// What one datagram produced.
#[derive(Debug, Default)]
pub struct Fed {
    pub transactions: Vec<Transaction>,
    /// Messages that were not understood or not tracked (counted, never fatal).
    pub skipped: Vec<Skipped>,
}

/// Groups notifications into transactions and applies them to a state.
#[derive(Debug)]
pub struct GenerationBuilder {
    state: NftState,
    pending: Vec<Notification>,
    skipped: u64,
    /// The namespace's interface names, for `iif`/`oif` in rule text.
    ifnames: Option<IfNames>,
}

impl GenerationBuilder {
    /// Start from a state (usually [`NftState::from_dump`] of a dump taken after subscribing):
    /// transactions up to `state.gen_id` are already in it and are dropped when they close.
    pub fn new(state: NftState) -> GenerationBuilder {
        GenerationBuilder {
            state,
            pending: Vec::new(),
            skipped: 0,
            ifnames: None,
        }
    }

    /// Name interfaces in rule text from this namespace's link table (see [`ifnames`]).
    pub fn with_ifnames(mut self, names: Option<IfNames>) -> GenerationBuilder {
        self.ifnames = names;
        self
    }

    /// Run `f` with the namespace's interface names lent to the renderer.
    fn named<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let mut names = self.ifnames.take();
        let out = ifnames::scope(&mut names, || f(self));
        self.ifnames = names;
        out
    }

    #[allow(
        dead_code,
        reason = "for the pipeline: inspect the namespace's ruleset"
    )]
    pub fn state(&self) -> &NftState {
        &self.state
    }

    /// Messages skipped so far.
    #[allow(dead_code, reason = "for the pipeline: report undecodable messages")]
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Objects waiting for their NEWGEN.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Decode a datagram and feed every message in it.
    pub fn feed(&mut self, datagram: &[u8]) -> Fed {
        self.named(|b| b.feed_named(datagram))
    }

    fn feed_named(&mut self, datagram: &[u8]) -> Fed {
        let mut fed = Fed::default();
        for n in decode::decode(datagram) {
            match n {
                Notification::Skipped(s) => {
                    self.skipped += 1;
                    fed.skipped.push(s);
                }
                n => fed.transactions.extend(self.push_named(n)),
            }
        }
        fed
    }

    /// Feed one notification; a NEWGEN closes the transaction and returns it (unless the
    /// generation is not newer than the state, i.e. already in the dump).
    pub fn push(&mut self, n: Notification) -> Option<Transaction> {
        self.named(|b| b.push_named(n))
    }

    fn push_named(&mut self, n: Notification) -> Option<Transaction> {
        let gen = match n {
            Notification::Gen(g) => g,
            Notification::Skipped(_) => {
                self.skipped += 1;
                return None;
            }
            other => {
                self.pending.push(other);
                return None;
            }
        };
        let pending = std::mem::take(&mut self.pending);
        if (gen.id.wrapping_sub(self.state.gen_id) as i32) <= 0 {
            return None;
        }
        let changes = Txn::default().apply(&mut self.state, pending);
        self.state.gen_id = gen.id;
        Some(transaction(gen, changes))
    }
}

impl GenerationBuilder {
    /// Catch up with a dump taken after notifications were lost (ENOBUFS): the changes between
    /// the state and the dump, summarized as one transaction (generation `dump.gen_id`, no writer),
    /// and the dump becomes the state. Notifications waiting for their NEWGEN are dropped: the
    /// dump holds what they described.
    pub fn resync(&mut self, dump: &Dump) -> Transaction {
        self.pending.clear();
        // Interfaces may have been renamed meanwhile.
        if let Some(n) = self.ifnames.as_mut() {
            n.clear();
        }
        let (new, changes) = self.named(|b| {
            let new = NftState::from_dump(dump);
            let items = catch_up(&b.state, &new, dump);
            let changes = Txn::default().apply(&mut b.state, items);
            (new, changes)
        });
        self.state = new;
        Transaction {
            gen_id: dump.gen_id,
            pid: 0,
            comm: String::new(),
            changes,
        }
    }
}
fn transaction(gen: Gen, changes: Vec<Change>) -> Transaction {
    Transaction {
        gen_id: gen.id,
        pid: gen.pid.unwrap_or(0),
        comm: gen.comm.unwrap_or_default(),
        changes,
    }
}

/// Where a net change will go, and what the object looked like before the transaction.
struct Net<T> {
    slot: usize,
    before: Option<T>,
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
struct Txn {
    /// Changes in order; a slot may hold none (a net no-op) or several.
    slots: Vec<Vec<Change>>,
    /// Rule handles of each touched chain before the transaction, and their index.
    before: HashMap<ChainKey, (usize, HashMap<u64, usize>)>,
    /// Current index of rules deleted in this transaction (a re-add of the handle replaces).
    deleted_at: HashMap<(ChainKey, u64), usize>,
    /// Added rules, to give them their final position: (chain, handle, slot).
    added: Vec<(ChainKey, u64, usize)>,
    tables: HashMap<TableKey, Net<Table>>,
    chains: HashMap<ChainKey, Net<Chain>>,
    sets: HashMap<ChainKey, Net<Set>>,
    elems: HashMap<ChainKey, ElemNet>,
}

impl Txn {
    fn apply(mut self, st: &mut NftState, items: Vec<Notification>) -> Vec<Change> {
        for n in items {
            match n {
                Notification::Table(v, t) => self.table(st, v, t),
                Notification::Chain(v, c) => self.chain(st, v, c),
                Notification::Rule(v, r) => self.rule(st, v, r),
                Notification::Set(v, s) => self.set(st, v, s),
                Notification::Elements(v, e) => self.elements(st, v, e),
                Notification::Gen(_) | Notification::Skipped(_) => {}
            }
        }
        self.finish(st)
    }

    fn push(&mut self, c: Change) -> usize {
        self.slots.push(vec![c]);
        self.slots.len() - 1
    }

    fn slot(&mut self) -> usize {
        self.slots.push(Vec::new());
        self.slots.len() - 1
    }

    fn touch_rules(&mut self, st: &NftState, key: &ChainKey) {
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
    fn note_table(&mut self, st: &NftState, key: &TableKey, deleted: Option<&Table>) {
        if !self.tables.contains_key(key) {
            let before = st.tables.get(key).map(|t| t.table.clone());
            let before = before.or_else(|| deleted.cloned());
            let slot = self.slot();
            self.tables.insert(key.clone(), Net { slot, before });
        }
    }

    fn note_chain(&mut self, st: &NftState, key: &ChainKey, deleted: Option<&Chain>) {
        if !self.chains.contains_key(key) {
            let before = st.chain(key.0, &key.1, &key.2).map(|c| c.chain.clone());
            let before = before.or_else(|| deleted.cloned());
            let slot = self.slot();
            self.chains.insert(key.clone(), Net { slot, before });
        }
    }

    fn note_set(&mut self, st: &NftState, key: &ChainKey, deleted: Option<&Set>) {
        if !self.sets.contains_key(key) {
            let before = st
                .table(key.0, &key.1)
                .and_then(|t| t.sets.get(&key.2))
                .map(|s| s.set.clone());
            let before = before.or_else(|| deleted.cloned());
            let slot = self.slot();
            self.sets.insert(key.clone(), Net { slot, before });
        }
    }

    /// Record the elements about to change (with whether they were there before).
    fn note_elements<'e>(
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

    fn table(&mut self, st: &mut NftState, verb: Verb, t: Table) {
        let key = (t.family, t.name.clone());
        self.note_table(st, &key, (verb == Verb::Del).then_some(&t));
        match verb {
            Verb::New => match st.tables.get_mut(&key) {
                Some(old) => old.table = t,
                None => {
                    st.tables.insert(key, TableState::new(t));
                }
            },
            Verb::Del => {
                // The kernel deletes a table's rules, sets and chains first; account for
                // anything left so that nothing vanishes unreported.
                let (chains, sets) = match st.tables.get(&key) {
                    Some(old) => (
                        old.chains.keys().cloned().collect::<Vec<_>>(),
                        old.sets
                            .iter()
                            .filter(|(_, s)| !s.set.is_anonymous())
                            .map(|(n, _)| n.clone())
                            .collect::<Vec<_>>(),
                    ),
                    None => (Vec::new(), Vec::new()),
                };
                for chain in chains {
                    let ck = (t.family, t.name.clone(), chain);
                    self.touch_rules(st, &ck);
                    self.note_chain(st, &ck, None);
                }
                for set in sets {
                    let sk = (t.family, t.name.clone(), set);
                    self.forget_set(st, &sk, None);
                }
                // A recreated table restarts its handles.
                self.deleted_at
                    .retain(|(k, _), _| !(k.0 == key.0 && k.1 == key.1));
                st.tables.remove(&key);
            }
        }
    }

    fn chain(&mut self, st: &mut NftState, verb: Verb, c: Chain) {
        let fam = Family::from_nfproto(c.family);
        let key: ChainKey = (c.family, c.table.clone(), c.name.clone());
        if verb == Verb::New {
            // A rename keeps the handle and changes the name.
            let t = st.table_mut(c.family, &c.table);
            let renamed_from = c.handle.and_then(|h| {
                t.chains
                    .iter()
                    .find(|(name, cs)| cs.chain.handle == Some(h) && **name != c.name)
                    .map(|(name, _)| name.clone())
            });
            if let Some(old_name) = renamed_from {
                if let Some(mut cs) = t.chains.remove(&old_name) {
                    cs.chain.name = c.name.clone();
                    merge_chain(&mut cs.chain, &c);
                    t.chains.insert(c.name.clone(), cs);
                }
                self.push(
                    Change::new(Op::ChainUpdate, fam, c.table.clone())
                        .chain(c.name.clone())
                        .detail(format!("renamed from {old_name}")),
                );
                return;
            }
        }
        self.note_chain(st, &key, (verb == Verb::Del).then_some(&c));
        match verb {
            Verb::New => {
                let t = st.table_mut(c.family, &c.table);
                match t.chains.get_mut(&c.name) {
                    Some(cs) => merge_chain(&mut cs.chain, &c),
                    None => {
                        let cs = ChainState {
                            chain: c,
                            rules: Vec::new(),
                        };
                        t.chains.insert(cs.chain.name.clone(), cs);
                    }
                }
            }
            Verb::Del => {
                self.touch_rules(st, &key);
                // Handles belong to the chain object: a recreated chain reuses them.
                self.deleted_at.retain(|(k, _), _| *k != key);
                if let Some(t) = st.tables.get_mut(&(c.family, c.table.clone())) {
                    t.chains.remove(&c.name);
                }
            }
        }
    }

    fn rule(&mut self, st: &mut NftState, verb: Verb, r: Rule) {
        let fam = Family::from_nfproto(r.family);
        let key: ChainKey = (r.family, r.table.clone(), r.chain.clone());
        self.touch_rules(st, &key);
        match verb {
            Verb::New => {
                let t = st.table_mut(r.family, &r.table);
                let rs = t.rule_state(&r);
                let c = chain_entry(t, r.family, &r.table, &r.chain);
                if let Some(i) = c.rules.iter().position(|x| x.handle == r.handle) {
                    c.rules.remove(i);
                }
                let anchor = r
                    .position
                    .and_then(|p| c.rules.iter().rposition(|x| x.handle == p))
                    .map(|i| i + 1);
                let replaced = self.deleted_at.get(&(key.clone(), r.handle)).copied();
                let idx = match (anchor, replaced) {
                    (Some(i), _) => i,
                    (None, Some(i)) => i.min(c.rules.len()),
                    (None, None) if r.append => c.rules.len(),
                    (None, None) => 0,
                };
                let change = Change::new(Op::RuleAdd, fam, r.table.clone())
                    .chain(r.chain.clone())
                    .rule(rs.text.clone(), None, rs.fingerprint);
                c.rules.insert(idx, rs);
                let slot = self.push(change);
                self.added.push((key, r.handle, slot));
            }
            Verb::Del => {
                // A rule the state does not know (it drifted) is rendered from the message.
                let tkey = (r.family, r.table.clone());
                let chain = st
                    .tables
                    .get_mut(&tkey)
                    .and_then(|t| t.chains.get_mut(&r.chain));
                let current = chain.and_then(|c| {
                    let i = c.rules.iter().position(|x| x.handle == r.handle)?;
                    Some((i, c.rules.remove(i)))
                });
                let rs = match &current {
                    Some((_, rs)) => rs.clone(),
                    None => match st.tables.get(&tkey) {
                        Some(t) => t.rule_state(&r),
                        None => TableState::new(placeholder_table(&r)).rule_state(&r),
                    },
                };
                let current = current.map(|(i, _)| i);
                if let Some(i) = current {
                    self.deleted_at.insert((key.clone(), r.handle), i);
                }
                let position = self
                    .before
                    .get(&key)
                    .and_then(|(_, idx)| idx.get(&r.handle).copied());
                self.push(
                    Change::new(Op::RuleDelete, fam, r.table)
                        .chain(r.chain)
                        .rule(rs.text, position, rs.fingerprint),
                );
            }
        }
    }

    fn set(&mut self, st: &mut NftState, verb: Verb, s: Set) {
        let key: ChainKey = (s.family, s.table.clone(), s.name.clone());
        let known = st
            .table(s.family, &s.table)
            .and_then(|t| t.sets.get(&s.name));
        let anonymous = known.is_some_and(|x| x.set.is_anonymous())
            || s.is_anonymous()
            || s.name.starts_with("__set")
            || s.name.starts_with("__map");
        match verb {
            Verb::New => {
                if !anonymous {
                    self.note_set(st, &key, None);
                }
                let t = st.table_mut(s.family, &s.table);
                match t.sets.get_mut(&s.name) {
                    Some(old) => old.set = s,
                    None => {
                        let ss = SetState {
                            set: s,
                            elements: BTreeMap::new(),
                        };
                        t.sets.insert(ss.set.name.clone(), ss);
                    }
                }
            }
            Verb::Del if anonymous => {
                if let Some(t) = st.tables.get_mut(&(s.family, s.table.clone())) {
                    t.sets.remove(&s.name);
                }
            }
            Verb::Del => self.forget_set(st, &key, Some(&s)),
        }
    }

    /// A named set goes away with its elements.
    fn forget_set(&mut self, st: &mut NftState, key: &ChainKey, deleted: Option<&Set>) {
        self.note_set(st, key, deleted);
        let elems: Vec<Element> = st
            .table(key.0, &key.1)
            .and_then(|t| t.sets.get(&key.2))
            .map(|s| s.elements.values().cloned().collect())
            .unwrap_or_default();
        self.note_elements(st, key, elems.iter());
        if let Some(t) = st.tables.get_mut(&(key.0, key.1.clone())) {
            t.sets.remove(&key.2);
        }
    }

    fn elements(&mut self, st: &mut NftState, verb: Verb, e: SetElems) {
        let key: ChainKey = (e.family, e.table.clone(), e.set.clone());
        let anonymous = st
            .table(e.family, &e.table)
            .and_then(|t| t.sets.get(&e.set))
            .is_some_and(|s| s.set.is_anonymous());
        if !anonymous {
            self.note_elements(st, &key, e.elements.iter());
        }
        let tkey = (e.family, e.table.clone());
        let Some(s) = st
            .tables
            .get_mut(&tkey)
            .and_then(|t| t.sets.get_mut(&e.set))
        else {
            return;
        };
        for el in e.elements {
            match verb {
                Verb::New => {
                    s.elements.insert(elem_key(&el), el);
                }
                Verb::Del => {
                    s.elements.remove(&elem_key(&el));
                }
            }
        }
    }

    fn finish(mut self, st: &NftState) -> Vec<Change> {
        for (key, handle, slot) in std::mem::take(&mut self.added) {
            let pos = st
                .chain(key.0, &key.1, &key.2)
                .and_then(|c| c.rules.iter().position(|r| r.handle == handle));
            for c in &mut self.slots[slot] {
                c.position = pos;
            }
        }
        for ((family, name), net) in std::mem::take(&mut self.tables) {
            let fam = Family::from_nfproto(family);
            let after = st.table(family, &name).map(|t| &t.table);
            let change = match (&net.before, after) {
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
            self.slots[net.slot].extend(change);
        }
        for ((family, table, name), net) in std::mem::take(&mut self.chains) {
            let fam = Family::from_nfproto(family);
            let after = st.chain(family, &table, &name).map(|c| &c.chain);
            let base = Change::new(Op::ChainCreate, fam, table).chain(name);
            let change = match (&net.before, after) {
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
            self.slots[net.slot].extend(change);
        }
        for ((family, table, name), net) in std::mem::take(&mut self.sets) {
            let fam = Family::from_nfproto(family);
            let after = st.table(family, &table).and_then(|t| t.sets.get(&name));
            let change = match (&net.before, after) {
                (None, Some(a)) => Some(
                    Change::new(Op::SetCreate, fam, table)
                        .chain(name)
                        .detail(describe_set(&a.set)),
                ),
                (Some(_), None) => Some(Change::new(Op::SetDelete, fam, table).chain(name)),
                _ => None,
            };
            self.slots[net.slot].extend(change);
        }
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
        let changes: Vec<Change> = self.slots.into_iter().flatten().collect();
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
        .filter(|e| e.flags & super::decode::NFT_SET_ELEM_INTERVAL_END == 0)
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

fn placeholder_table(r: &Rule) -> Table {
    Table {
        family: r.family,
        name: r.table.clone(),
        flags: 0,
        handle: None,
    }
}

#[cfg(test)]
mod count_tests {
    use super::*;

    fn element(key: [u8; 4], flags: u32) -> Element {
        Element {
            key: key.to_vec(),
            key_end: None,
            data: None,
            objref: None,
            flags,
            timeout_ms: None,
            comment: None,
        }
    }

    #[test]
    fn an_interval_is_one_element() {
        use super::super::decode::NFT_SET_ELEM_INTERVAL_END as END;
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
