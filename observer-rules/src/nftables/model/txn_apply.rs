//! Applying a transaction's notifications to the [`NftState`], object by object ([`Txn::apply`]):
//! tables, chains (renames included), rules with their positions, sets and set elements, each
//! noted in the [`Txn`] book-keeping before it changes, then the net changes from
//! [`Txn::finish`].
//!
//! Rule positions: the kernel only says where a new rule went when it is neither first nor last
//! (`NFTA_RULE_POSITION`, the handle of the rule before it). Otherwise an appended rule
//! (NLM_F_APPEND) goes last, an inserted one first, and a rule re-using a handle deleted earlier
//! in the same transaction from the same chain object (a replace, `iptables -R`) goes where the
//! old one was (a deleted and recreated chain or table reuses handles, so that memory goes with
//! it). Positions of deletes are from before the transaction, of adds from after it.
//!
//! Layering: below `generation`, above `txn` (the book-keeping); imports `decode`, `state`,
//! `txn` and `crate::ruleset`.

use crate::nftables::model::state::{
    chain_entry, insert_rule, merge_chain, ChainKey, ChainState, Elements, NftState, SetState,
    TableState,
};
use crate::nftables::model::txn::Txn;
use crate::nftables::netlink::decode::{
    Chain, Element, Notification, Rule, Set, SetElems, Table, Verb,
};
use crate::ruleset::{Change, Family, Op};

/// Whether this kernel has said where a new rule went (`NLM_F_APPEND` or `NFTA_RULE_POSITION`
/// in a rule notification) since the process started. Kernels before 6.1 (5.10 among the
/// tested ones) send neither: every rule then reads as inserted first, so the order held for
/// the rules added since is not the kernel's.
static RULE_POSITIONS_TOLD: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// See [`RULE_POSITIONS_TOLD`].
pub fn rule_positions_told() -> bool {
    RULE_POSITIONS_TOLD.load(std::sync::atomic::Ordering::Relaxed)
}

impl Txn {
    pub(crate) fn apply(
        mut self,
        st: &mut NftState,
        items: impl IntoIterator<Item = Notification>,
    ) -> Vec<Change> {
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
            let renamed_from = c
                .handle
                .filter(|&h| t.chain_handles.may_hold(h))
                .and_then(|h| {
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
                t.chain_handles.note(c.handle);
                match t.chains.get_mut(&c.name) {
                    Some(cs) => merge_chain(&mut cs.chain, &c),
                    None => {
                        let cs = ChainState {
                            chain: Box::new(c),
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
                if r.append || r.position.is_some() {
                    RULE_POSITIONS_TOLD.store(true, std::sync::atomic::Ordering::Relaxed);
                }
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
                let replaced = if self.deleted_at.is_empty() {
                    None
                } else {
                    self.deleted_at.get(&(key.clone(), r.handle)).copied()
                };
                let idx = match (anchor, replaced) {
                    (Some(i), _) => i,
                    (None, Some(i)) => i.min(c.rules.len()),
                    (None, None) if r.append => c.rules.len(),
                    (None, None) => 0,
                };
                let change = Change::new(Op::RuleAdd, fam, r.table.clone())
                    .chain(r.chain.clone())
                    .nft_rule(rs.forms(), None, rs.fingerprint);
                insert_rule(&mut c.rules, idx, rs);
                let slot = self.push(change);
                self.note_added(key, r.handle, slot);
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
                        .nft_rule(rs.forms(), position, rs.fingerprint),
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
                            elements: Elements::new(),
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
                Verb::New => s.elements.insert(el),
                Verb::Del => s.elements.remove(&el),
            }
        }
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
