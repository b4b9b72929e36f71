//! Resync after lost notifications: the notifications that turn the builder's state into a fresh
//! dump's, for [`crate::nftables::model::generation::GenerationBuilder::resync`] to apply as one transaction.
//! Deletes come first, then creations, rules in each chain's dump order so that their positions
//! come out right; a renamed chain (same handle) is matched to its old name.
//!
//! Layering: below `generation`; imports only `decode`, the dump and `state`.

use std::collections::HashMap;

use crate::nftables::model::state::{describe_chain, ChainState, NftState, TableKey, TableState};
use crate::nftables::netlink::decode::{Element, Notification, Rule, SetElems, Verb};
use crate::nftables::Dump;

/// The notifications that turn `old` into `new` (`new` is `dump` as a state): deletes first,
/// then creations, with rules in their chain's order so that positions come out right.
pub(crate) fn catch_up(old: &NftState, new: &NftState, dump: &Dump) -> Vec<Notification> {
    let mut dels = Vec::new();
    let mut adds = Vec::new();
    let mut gone_tables = Vec::new();
    // Rules whose handle is new or whose content changed, to add in dump order below.
    let mut changed_rules: std::collections::HashSet<(u8, String, String, u64)> =
        std::collections::HashSet::new();
    for (key, ot) in &old.tables {
        let Some(nt) = new.tables.get(key) else {
            gone_tables.push(Notification::Table(Verb::Del, ot.table.clone()));
            continue;
        };
        if ot.table.flags != nt.table.flags {
            adds.push(Notification::Table(Verb::New, nt.table.clone()));
        }
        let renamed = Handles::of(nt);
        for (name, oc) in &ot.chains {
            let Some(nc) = nt.chains.get(name).or_else(|| renamed.other_name(oc)) else {
                dels.push(Notification::Chain(Verb::Del, (*oc.chain).clone()));
                continue;
            };
            let now: HashMap<u64, u64> =
                nc.rules.iter().map(|r| (r.handle, r.fingerprint)).collect();
            for r in &oc.rules {
                if now.get(&r.handle) != Some(&r.fingerprint) {
                    dels.push(Notification::Rule(
                        Verb::Del,
                        bare_rule(key.0, &key.1, name, r.handle),
                    ));
                }
            }
            if describe_chain(&oc.chain) != describe_chain(&nc.chain) {
                adds.push(Notification::Chain(Verb::New, (*nc.chain).clone()));
            }
        }
        for (name, os) in &ot.sets {
            let Some(ns) = nt.sets.get(name) else {
                dels.push(Notification::Set(Verb::Del, os.set.clone()));
                continue;
            };
            let removed: Vec<Element> = os
                .elements
                .values()
                .filter(|e| !ns.elements.contains(e))
                .cloned()
                .collect();
            if !removed.is_empty() {
                dels.push(elems(Verb::Del, key, name, removed));
            }
            let added: Vec<Element> = ns
                .elements
                .values()
                .filter(|e| !os.elements.contains(e))
                .cloned()
                .collect();
            if !added.is_empty() {
                adds.push(elems(Verb::New, key, name, added));
            }
        }
    }
    dels.extend(gone_tables);
    for (key, nt) in &new.tables {
        let ot = old.tables.get(key);
        if ot.is_none() {
            adds.push(Notification::Table(Verb::New, nt.table.clone()));
        }
        let renamed = ot.map(Handles::of);
        // New chains in the order the kernel made them (their handles): the builder's rename
        // check is skipped for a chain above every handle it has seen.
        let mut new_chains: Vec<&ChainState> = Vec::new();
        for (name, nc) in &nt.chains {
            let same_name = ot.and_then(|t| t.chains.get(name));
            // A chain renamed keeps its handle (the builder reports the rename).
            let oc = same_name.or_else(|| renamed.as_ref().and_then(|r| r.other_name(nc)));
            if same_name.is_none() {
                new_chains.push(nc);
            }
            let before: HashMap<u64, u64> = oc
                .map(|c| c.rules.iter().map(|r| (r.handle, r.fingerprint)).collect())
                .unwrap_or_default();
            for r in &nc.rules {
                if before.get(&r.handle) != Some(&r.fingerprint) {
                    changed_rules.insert((key.0, key.1.clone(), name.clone(), r.handle));
                }
            }
        }
        new_chains.sort_by_key(|c| c.chain.handle);
        adds.extend(
            new_chains
                .into_iter()
                .map(|c| Notification::Chain(Verb::New, (*c.chain).clone())),
        );
        for (name, ns) in &nt.sets {
            if ot.and_then(|t| t.sets.get(name)).is_none() {
                adds.push(Notification::Set(Verb::New, ns.set.clone()));
                let all: Vec<Element> = ns.elements.values().cloned().collect();
                if !all.is_empty() {
                    adds.push(elems(Verb::New, key, name, all));
                }
            }
        }
    }
    // Rules in each chain's order: a new rule follows the one before it in the dump.
    let mut previous: HashMap<(u8, &str, &str), u64> = HashMap::new();
    for r in &dump.rules {
        let chain_key = (r.family, r.table.as_str(), r.chain.as_str());
        let after = previous.insert(chain_key, r.handle);
        if changed_rules.contains(&(r.family, r.table.clone(), r.chain.clone(), r.handle)) {
            let mut rule = r.clone();
            rule.position = after;
            rule.append = after.is_some();
            adds.push(Notification::Rule(Verb::New, rule));
        }
    }
    dels.extend(adds);
    dels
}

/// The chain of `table` that has `old`'s handle under another name.
/// A table's chains by handle, to find a chain renamed (it keeps its handle).
struct Handles<'t>(HashMap<u64, &'t ChainState>);

impl<'t> Handles<'t> {
    fn of(table: &'t TableState) -> Handles<'t> {
        Handles(
            table
                .chains
                .values()
                .filter_map(|c| Some((c.chain.handle?, c)))
                .collect(),
        )
    }

    /// The chain of the table with `c`'s handle under another name.
    fn other_name(&self, c: &ChainState) -> Option<&'t ChainState> {
        self.0
            .get(&c.chain.handle?)
            .copied()
            .filter(|o| o.chain.name != c.chain.name)
    }
}

fn bare_rule(family: u8, table: &str, chain: &str, handle: u64) -> Rule {
    Rule {
        family,
        table: table.to_string(),
        chain: chain.to_string(),
        handle,
        position: None,
        exprs: Vec::new(),
        comment: None,
        append: false,
    }
}

fn elems(verb: Verb, table: &TableKey, set: &str, elements: Vec<Element>) -> Notification {
    Notification::Elements(
        verb,
        SetElems {
            family: table.0,
            table: table.1.clone(),
            set: set.to_string(),
            elements,
        },
    )
}
