//! A namespace's ruleset held at chain level. Past what its namespace may hold (the builder's
//! cap), the state keeps its tables, chains and named sets, and of each chain only how many
//! rules it has: a transaction's rule notifications are counted per chain as they come instead
//! of being kept, and its anonymous sets and set elements are not kept either. A transaction
//! then says, for each chain whose rules changed, how many it had and has (`chain_update`
//! "rules changed: N -> M", or `chain_flush` when none are left), as a legacy table held at
//! chain level does; its tables, chains and named sets are told as at rule level.
//!
//! Layering: below `generation`; imports `state`, `decode` and `crate::ruleset`.

use std::collections::HashMap;

use crate::nftables::model::state::{ChainKey, NftState};
use crate::nftables::netlink::decode::{Notification, Set, Verb};
use crate::ruleset::{self, Change, Family, Op};

/// What a change of a chain held at chain level says of its rules.
const NOT_RULE_BY_RULE: &str = "ruleset held at chain level: rules not told one by one";

/// Each chain's rule count, and what the transaction under way did to it.
#[derive(Debug, Default)]
pub(crate) struct ChainLevel {
    counts: HashMap<ChainKey, usize>,
    /// Rules added and removed per chain by the transaction under way.
    txn: HashMap<ChainKey, (usize, usize)>,
}

/// Whether a set is a rule's own (`{ 22, 80 }`, `vmap { … }`): not kept at chain level.
pub(crate) fn anonymous(s: &Set) -> bool {
    s.is_anonymous() || s.name.starts_with("__set") || s.name.starts_with("__map")
}

impl ChainLevel {
    /// Hold `state` at chain level from now on: its chains' rule counts are kept; its rules,
    /// anonymous sets and set elements are let go.
    pub(crate) fn take(state: &mut NftState) -> ChainLevel {
        let mut counts = HashMap::new();
        for ((family, table), t) in &state.tables {
            for (name, c) in &t.chains {
                counts.insert((*family, table.clone(), name.clone()), c.rules.len());
            }
        }
        strip(state);
        ChainLevel {
            counts,
            txn: HashMap::new(),
        }
    }

    /// Held at chain level with the rule counts a dump counted.
    pub(crate) fn with_counts(counts: HashMap<ChainKey, usize>) -> ChainLevel {
        ChainLevel {
            counts,
            txn: HashMap::new(),
        }
    }

    /// The rules of every chain.
    pub(crate) fn rules(&self) -> usize {
        self.counts.values().sum()
    }

    /// Take one notification of the transaction under way: a rule is counted, an anonymous set
    /// or a set's elements dropped; anything else is handed back to be applied at its NEWGEN.
    pub(crate) fn fold(&mut self, n: Notification) -> Option<Notification> {
        match n {
            Notification::Rule(verb, r) => {
                let e = self.txn.entry((r.family, r.table, r.chain)).or_default();
                match verb {
                    Verb::New => e.0 += 1,
                    Verb::Del => e.1 += 1,
                }
                None
            }
            Notification::Elements(..) => None,
            Notification::Set(_, s) if anonymous(&s) => None,
            other => Some(other),
        }
    }

    /// Forget what the transaction under way counted (it was already in a dump).
    pub(crate) fn discard(&mut self) {
        self.txn.clear();
    }

    /// The transaction's changes to chains' rules, once it was applied to `state`: one per
    /// chain whose rules it added or removed and that still exists (a chain deleted says so
    /// itself). Chains gone are forgotten.
    pub(crate) fn finish(&mut self, state: &NftState) -> Vec<Change> {
        let mut touched: Vec<(ChainKey, (usize, usize))> = self.txn.drain().collect();
        touched.sort();
        let mut out = Vec::new();
        for (key, (added, removed)) in touched {
            if state.chain(key.0, &key.1, &key.2).is_none() {
                continue;
            }
            let was = self.counts.get(&key).copied().unwrap_or(0);
            let now = (was + added).saturating_sub(removed);
            self.counts.insert(key.clone(), now);
            out.extend(changed(&key, was, now, added > 0 && removed > 0));
        }
        self.forget_gone(state);
        out
    }

    /// Against the rule counts of a dump (after lost notifications), whose state is `state`:
    /// one change per chain whose count moved; the dump's counts are kept from now on (those of
    /// its chains still in `state`: a chain with no rule left is not among them).
    pub(crate) fn resync(
        &mut self,
        state: &NftState,
        mut counts: HashMap<ChainKey, usize>,
    ) -> Vec<Change> {
        self.txn.clear();
        let mut out = Vec::new();
        for ((family, table), t) in &state.tables {
            for name in t.chains.keys() {
                let key: ChainKey = (*family, table.clone(), name.clone());
                let now = counts.get(&key).copied().unwrap_or(0);
                let was = self.counts.get(&key).copied().unwrap_or(0);
                out.extend(changed(&key, was, now, false));
            }
        }
        counts.retain(|k, _| state.chain(k.0, &k.1, &k.2).is_some());
        self.counts = counts;
        out
    }

    fn forget_gone(&mut self, state: &NftState) {
        self.counts
            .retain(|k, _| state.chain(k.0, &k.1, &k.2).is_some());
    }
}

/// Let go of what a state held at chain level does not keep: its rules, anonymous sets and set
/// elements.
pub(crate) fn strip(state: &mut NftState) {
    for t in state.tables.values_mut() {
        for c in t.chains.values_mut() {
            c.rules = Vec::new();
        }
        t.sets.retain(|_, s| !anonymous(&s.set));
        for s in t.sets.values_mut() {
            s.elements = Default::default();
        }
    }
}

/// A chain's rules went from `was` to `now` (`both`: some were added and some removed, so
/// that the count alone may not move): a flush when none are left, else a `chain_update`.
fn changed(key: &ChainKey, was: usize, now: usize, both: bool) -> Option<Change> {
    let (family, table, chain) = (Family::from_nfproto(key.0), key.1.clone(), key.2.clone());
    if now == 0 && was > 0 {
        return Some(
            Change::new(Op::ChainFlush, family, table)
                .chain(chain)
                .detail(format!(
                    "{} flushed ({NOT_RULE_BY_RULE})",
                    ruleset::plural(was as u64, "rule", "rules")
                )),
        );
    }
    (was != now || both).then(|| {
        Change::new(Op::ChainUpdate, family, table)
            .chain(chain)
            .detail(format!(
                "rules changed: {was} -> {now} ({NOT_RULE_BY_RULE})"
            ))
    })
}
