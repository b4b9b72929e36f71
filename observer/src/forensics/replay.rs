//! Replaying recorded changes onto a snapshot: the ruleset at any moment is the newest snapshot
//! before it plus the changes after that snapshot, applied one transaction at a time.
//!
//! A change line carries what replay needs: the rule text, the rule's `position` in its chain
//! (before the transaction for a delete, after it for an add, as the readers compute them), a
//! chain's header in `detail`, and `txn`, which groups one replace or one generation. Within a
//! transaction the deletes are applied first (highest position first), then the adds (lowest
//! first): every position then means what the reader meant.

use serde::Deserialize;

use indexmap::IndexMap;

use super::model::{Chain, Last, Set, Table, Tables};
use crate::ruleset::{Backend, ChangeResult, Family, Op};
use crate::timestamp::Timestamp;

/// The fields of a change line that replay reads.
#[derive(Debug, Clone, Deserialize)]
pub struct Recorded {
    pub seq: u64,
    pub time: Timestamp,
    pub netns: u32,
    pub backend: Backend,
    pub family: Family,
    pub table: String,
    #[serde(default)]
    pub chain: Option<String>,
    pub op: Op,
    #[serde(default)]
    pub rule: Option<String>,
    #[serde(default)]
    pub detail: Option<String>,
    #[serde(default)]
    pub position: Option<usize>,
    #[serde(default)]
    pub txn: String,
    /// A line without one was not applied (as a refusal without its error).
    #[serde(default = "no_result")]
    pub result: ChangeResult,
    #[serde(default)]
    pub process: Process,
    /// The namespace's name, when it has one.
    #[serde(default)]
    pub netns_name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Process {
    #[serde(default)]
    pub pid: u32,
    #[serde(default)]
    pub comm: String,
    #[serde(default)]
    pub actor: String,
}

fn no_result() -> ChangeResult {
    ChangeResult::Refused(String::new())
}

impl Recorded {
    pub fn last(&self) -> Last {
        Last {
            seq: self.seq,
            time: self.time,
            actor: self.process.actor.clone(),
            comm: self.process.comm.clone(),
            pid: self.process.pid,
            op: self.op.as_str().to_string(),
        }
    }

    /// Whether the change altered the ruleset (a refused write or an undecoded replace did not).
    pub fn applied(&self) -> bool {
        self.result.is_applied() && self.op != Op::TableReplace && self.backend != Backend::Ipset
    }
}

/// A table being replayed: its chains found by name at once, in their order.
#[derive(Clone)]
struct WorkTable {
    family: Family,
    name: String,
    sets: Vec<Set>,
    chains: IndexMap<String, Chain>,
}

/// Tables being replayed. Finding a chain by name was a search of the table's chains for every
/// change (kube-proxy's nat table holds thousands); here it is a hash lookup. A table with two
/// chains of one name (only a hand-made table blob can hold that) keeps the last.
#[derive(Clone)]
pub struct Replay {
    tables: Vec<WorkTable>,
}

impl Replay {
    pub fn new(tables: Tables) -> Replay {
        Replay {
            tables: tables
                .tables
                .into_iter()
                .map(|t| WorkTable {
                    family: t.family,
                    name: t.name,
                    sets: t.sets,
                    chains: t.chains.into_iter().map(|c| (c.name.clone(), c)).collect(),
                })
                .collect(),
        }
    }

    /// The tables. `legacy`: user chains in name order after the built-in ones, as
    /// `iptables-save` prints them (a replay appends the chains it creates); nft chains keep
    /// the order they were made in.
    pub fn finish(self, legacy: bool) -> Tables {
        Tables {
            tables: self
                .tables
                .into_iter()
                .map(|t| {
                    let mut chains: Vec<Chain> = t.chains.into_values().collect();
                    if legacy {
                        // Stable: the built-in chains keep their order (the table's hooks').
                        chains.sort_by(|a, b| match (&a.head, &b.head) {
                            (Some(_), Some(_)) => std::cmp::Ordering::Equal,
                            (Some(_), None) => std::cmp::Ordering::Less,
                            (None, Some(_)) => std::cmp::Ordering::Greater,
                            (None, None) => a.name.as_bytes().cmp(b.name.as_bytes()),
                        });
                    }
                    Table {
                        family: t.family,
                        name: t.name,
                        sets: t.sets,
                        chains,
                    }
                })
                .collect(),
        }
    }

    /// The tables as they are now (see [`Replay::finish`]), leaving the replay as it is.
    pub fn snapshot(&self, legacy: bool) -> Tables {
        self.clone().finish(legacy)
    }

    /// A chain as it is now.
    pub fn chain(&self, family: Family, table: &str, name: &str) -> Option<&Chain> {
        self.tables
            .iter()
            .find(|t| t.family == family && t.name == table)?
            .chains
            .get(name)
    }

    /// A table as it is now, its chains in their order.
    pub fn table(&self, family: Family, table: &str) -> Option<Table> {
        let t = self
            .tables
            .iter()
            .find(|t| t.family == family && t.name == table)?;
        Some(Table {
            family: t.family,
            name: t.name.clone(),
            sets: t.sets.clone(),
            chains: t.chains.values().cloned().collect(),
        })
    }

    /// A named set as it is now.
    pub fn set(&self, family: Family, table: &str, name: &str) -> Option<&Set> {
        self.tables
            .iter()
            .find(|t| t.family == family && t.name == table)?
            .sets
            .iter()
            .find(|s| s.name == name)
    }

    /// How many rules the tables hold.
    pub fn rule_count(&self) -> usize {
        self.tables
            .iter()
            .flat_map(|t| t.chains.values())
            .map(|c| c.rules.len())
            .sum()
    }

    fn table_mut(&mut self, family: Family, name: &str) -> Option<&mut WorkTable> {
        self.tables
            .iter_mut()
            .find(|t| t.family == family && t.name == name)
    }

    /// The table, made empty when missing.
    fn table_entry(&mut self, family: Family, name: &str) -> &mut WorkTable {
        let i = match self
            .tables
            .iter()
            .position(|t| t.family == family && t.name == name)
        {
            Some(i) => i,
            None => {
                self.tables.push(WorkTable {
                    family,
                    name: name.to_string(),
                    sets: Vec::new(),
                    chains: IndexMap::new(),
                });
                self.tables.len() - 1
            }
        };
        &mut self.tables[i]
    }

    fn chain_of(&mut self, c: &Recorded) -> Option<&mut Chain> {
        self.table_mut(c.family, &c.table)?
            .chains
            .get_mut(c.chain.as_deref()?)
    }

    fn set_of(&mut self, c: &Recorded) -> Option<&mut Set> {
        let name = c.chain.as_deref()?;
        self.table_mut(c.family, &c.table)?
            .sets
            .iter_mut()
            .find(|s| s.name == name)
    }

    /// Apply changes (oldest first) one transaction at a time; returns how many there were.
    pub fn replay(&mut self, changes: &[Recorded]) -> usize {
        let mut start = 0;
        for i in 1..=changes.len() {
            if i == changes.len() || changes[i].txn != changes[start].txn {
                self.apply_txn(&changes[start..i]);
                start = i;
            }
        }
        changes.len()
    }

    /// Apply the changes of one transaction (all of one namespace and backend).
    pub fn apply_txn(&mut self, txn: &[Recorded]) {
        let legacy = txn.first().is_some_and(|c| c.backend == Backend::Legacy);
        let applied: Vec<&Recorded> = txn.iter().filter(|c| c.applied()).collect();
        // Objects first: a rule's chain exists before the rule is added.
        for c in &applied {
            self.create(legacy, c);
        }
        let deletes = self.flush(&applied);
        self.delete_rules(deletes);
        self.add_rules(&applied);
        // Updates, elements, then what goes away.
        for c in &applied {
            self.update_or_remove(legacy, c);
        }
        for c in &applied {
            if c.op == Op::TableDelete {
                self.tables
                    .retain(|t| !(t.family == c.family && t.name == c.table));
            }
        }
    }

    /// A table, chain or set made (one already there is kept as it is).
    fn create(&mut self, legacy: bool, c: &Recorded) {
        match c.op {
            Op::TableCreate => {
                self.table_entry(c.family, &c.table);
            }
            Op::ChainCreate => {
                let Some(name) = &c.chain else { return };
                let t = self.table_entry(c.family, &c.table);
                if t.chains.contains_key(name) {
                    return;
                }
                let chain = Chain {
                    name: name.clone(),
                    head: chain_head(legacy, c.detail.as_deref()),
                    rules: Vec::new(),
                    last: Some(c.last()),
                };
                t.chains.insert(name.clone(), chain);
            }
            Op::SetCreate => {
                let Some(name) = &c.chain else { return };
                let t = self.table_entry(c.family, &c.table);
                if !t.sets.iter().any(|s| s.name == *name) {
                    t.sets.push(Set {
                        name: name.clone(),
                        decl: c.detail.clone().unwrap_or_default(),
                        elements: Vec::new(),
                        incomplete: false,
                        last: Some(c.last()),
                    });
                }
            }
            _ => {}
        }
    }

    /// The flushes, applied; returns the rules to delete (a replaced rule's old text too), each
    /// with the change that deletes it.
    fn flush<'a>(&mut self, applied: &[&'a Recorded]) -> Vec<(&'a Recorded, &'a str)> {
        let mut deletes: Vec<(&Recorded, &str)> = Vec::new();
        for &c in applied {
            match c.op {
                Op::RuleDelete => deletes.push((c, c.rule.as_deref().unwrap_or_default())),
                Op::RuleReplace => {
                    let was = c.detail.as_deref().and_then(|d| d.strip_prefix("was: "));
                    deletes.push((c, was.unwrap_or_default()));
                }
                Op::ChainFlush => {
                    if let Some(ch) = self.chain_of(c) {
                        ch.rules.clear();
                        ch.last = Some(c.last());
                    }
                }
                Op::TableFlush => {
                    if let Some(t) = self.table_mut(c.family, &c.table) {
                        for ch in t.chains.values_mut() {
                            if !ch.rules.is_empty() {
                                ch.rules.clear();
                                ch.last = Some(c.last());
                            }
                        }
                    }
                }
                Op::SetFlush => {
                    if let Some(s) = self.set_of(c) {
                        s.elements.clear();
                        s.incomplete = false;
                        s.last = Some(c.last());
                    }
                }
                _ => {}
            }
        }
        deletes
    }

    /// Deletes, at positions from before the transaction: the highest first.
    fn delete_rules(&mut self, mut deletes: Vec<(&Recorded, &str)>) {
        deletes.sort_by_key(|(c, _)| std::cmp::Reverse(c.position.unwrap_or(0)));
        for (c, text) in deletes {
            let Some(ch) = self.chain_of(c) else {
                continue;
            };
            // The rule at its position when the text agrees; else the first rule with that text.
            let at = c
                .position
                .filter(|&p| ch.rules.get(p).is_some_and(|r| r == text))
                .or_else(|| ch.rules.iter().position(|r| r == text));
            if let Some(i) = at {
                ch.rules.remove(i);
            }
            ch.last = Some(c.last());
        }
    }

    /// Adds at positions from after the transaction: the lowest first.
    fn add_rules(&mut self, applied: &[&Recorded]) {
        let mut adds: Vec<&Recorded> = applied
            .iter()
            .copied()
            .filter(|c| matches!(c.op, Op::RuleAdd | Op::RuleReplace))
            .collect();
        adds.sort_by_key(|c| c.position.unwrap_or(usize::MAX));
        for c in adds {
            let Some(ch) = self.chain_of(c) else {
                continue;
            };
            let at = c.position.unwrap_or(usize::MAX).min(ch.rules.len());
            ch.rules.insert(at, c.rule.clone().unwrap_or_default());
            ch.last = Some(c.last());
        }
    }

    /// A chain's header changed, a set's elements added or deleted, a chain or set removed.
    fn update_or_remove(&mut self, legacy: bool, c: &Recorded) {
        match c.op {
            Op::ChainUpdate => {
                if let Some(ch) = self.chain_of(c) {
                    if let Some(d) = c.detail.as_deref() {
                        ch.head = updated_head(legacy, d).or(ch.head.take());
                    }
                    ch.last = Some(c.last());
                }
            }
            Op::ElementAdd | Op::ElementDelete => {
                let Some(s) = self.set_of(c) else { return };
                let (items, cut) = element_items(c.rule.as_deref().unwrap_or(""));
                if c.op == Op::ElementAdd {
                    for i in items {
                        if !s.elements.contains(&i) {
                            s.elements.push(i);
                        }
                    }
                } else {
                    s.elements.retain(|e| !items.contains(e));
                }
                s.incomplete |= cut;
                s.last = Some(c.last());
            }
            Op::ChainDelete => {
                if let (Some(t), Some(name)) = (self.table_mut(c.family, &c.table), &c.chain) {
                    // Order kept: the chains after it move up.
                    t.chains.shift_remove(name);
                }
            }
            Op::SetDelete => {
                if let (Some(t), Some(name)) = (self.table_mut(c.family, &c.table), &c.chain) {
                    t.sets.retain(|s| s.name != *name);
                }
            }
            _ => {}
        }
    }
}

/// Apply changes (oldest first, all of one namespace and backend) to `tables`, one transaction
/// at a time; returns how many there were.
pub fn replay(tables: &mut Tables, changes: &[Recorded]) -> usize {
    if changes.is_empty() {
        return 0;
    }
    let legacy = changes[0].backend == Backend::Legacy;
    let mut r = Replay::new(std::mem::take(tables));
    let n = r.replay(changes);
    *tables = r.finish(legacy);
    n
}

/// A created chain's header from its change's `detail`: `builtin, policy ACCEPT` (legacy), the
/// nft base chain's `type ... hook ...; policy accept`.
fn chain_head(legacy: bool, detail: Option<&str>) -> Option<String> {
    let d = detail?;
    if legacy {
        d.strip_prefix("builtin, policy ").map(str::to_string)
    } else {
        d.starts_with("type ").then(|| d.to_string())
    }
}

/// The new header in a `chain_update`'s detail: `policy ACCEPT -> DROP` (legacy), `type ...;
/// policy drop (was: ...)` or `regular chain (was: ...)` (nft).
fn updated_head(legacy: bool, detail: &str) -> Option<String> {
    if legacy {
        let (_, new) = detail.strip_prefix("policy ")?.split_once(" -> ")?;
        return (new != "-").then(|| new.to_string());
    }
    let now = detail.split(" (was: ").next()?;
    now.starts_with("type ").then(|| now.to_string())
}

/// The items of an element change's text `{ a, b : c }`; true when the list was cut short.
fn element_items(text: &str) -> (Vec<String>, bool) {
    let inner = text
        .trim()
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .unwrap_or(text)
        .trim();
    let mut cut = false;
    let items = inner
        .split(", ")
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .filter(|i| {
            let more = i.starts_with('…');
            cut |= more;
            !more
        })
        .map(str::to_string)
        .collect();
    (items, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, op: Op, chain: &str, rule: Option<&str>, pos: Option<usize>) -> Recorded {
        Recorded {
            seq,
            time: Timestamp::parse("2026-01-01T00:00:00Z").unwrap(),
            netns: 1,
            backend: Backend::Legacy,
            family: Family::Ip,
            table: "filter".into(),
            chain: Some(chain.into()),
            op,
            rule: rule.map(str::to_string),
            detail: None,
            position: pos,
            txn: "t".into(),
            result: "ok".into(),
            process: Process {
                pid: 7,
                comm: "iptables".into(),
                actor: "kube-proxy".into(),
            },
            netns_name: None,
        }
    }

    #[test]
    fn deletes_then_adds_keep_positions_meaningful() {
        let mut t = Tables::default();
        let mut c = rec(1, Op::ChainCreate, "INPUT", None, None);
        c.detail = Some("builtin, policy ACCEPT".into());
        replay(&mut t, &[rec(0, Op::TableCreate, "", None, None), c]);
        let rules = ["-j A", "-j B", "-j C", "-j D"];
        let adds: Vec<_> = rules
            .iter()
            .enumerate()
            .map(|(i, r)| rec(2 + i as u64, Op::RuleAdd, "INPUT", Some(r), Some(i)))
            .collect();
        replay(&mut t, &adds);
        // [A B C D] -> [B X D Y]: delete A@0, C@2; add X@1, Y@3.
        replay(
            &mut t,
            &[
                rec(10, Op::RuleDelete, "INPUT", Some("-j A"), Some(0)),
                rec(11, Op::RuleDelete, "INPUT", Some("-j C"), Some(2)),
                rec(12, Op::RuleAdd, "INPUT", Some("-j X"), Some(1)),
                rec(13, Op::RuleAdd, "INPUT", Some("-j Y"), Some(3)),
            ],
        );
        let ch = &t.tables[0].chains[0];
        assert_eq!(ch.head.as_deref(), Some("ACCEPT"));
        assert_eq!(ch.rules, ["-j B", "-j X", "-j D", "-j Y"]);
        assert_eq!(ch.last.as_ref().unwrap().seq, 13);
    }

    #[test]
    fn user_chains_go_in_name_order_and_updates_change_policy() {
        let mut t = Tables::default();
        let mut input = rec(1, Op::ChainCreate, "INPUT", None, None);
        input.detail = Some("builtin, policy ACCEPT".into());
        replay(
            &mut t,
            &[
                input,
                rec(2, Op::ChainCreate, "ZED", None, None),
                rec(3, Op::ChainCreate, "ALPHA", None, None),
            ],
        );
        let mut upd = rec(4, Op::ChainUpdate, "INPUT", None, None);
        upd.detail = Some("policy ACCEPT -> DROP".into());
        replay(&mut t, &[upd, rec(5, Op::ChainDelete, "ZED", None, None)]);
        let names: Vec<_> = t.tables[0].chains.iter().map(|c| &c.name).collect();
        assert_eq!(names, ["INPUT", "ALPHA"]);
        assert_eq!(t.tables[0].chains[0].head.as_deref(), Some("DROP"));
    }

    #[test]
    fn refused_changes_are_not_applied_and_elements_are_tracked() {
        let mut t = Tables::default();
        let mut refused = rec(1, Op::ChainCreate, "X", None, None);
        refused.result = "EBUSY: Device or resource busy".into();
        replay(&mut t, &[refused]);
        assert!(t.tables.is_empty());
        let mut set = rec(2, Op::SetCreate, "s", None, None);
        set.backend = Backend::Nft;
        set.detail = Some("type ipv4_addr".into());
        let mut add = rec(3, Op::ElementAdd, "s", Some("{ 10.0.0.1, 10.0.0.2 }"), None);
        add.backend = Backend::Nft;
        let mut del = rec(4, Op::ElementDelete, "s", Some("{ 10.0.0.1 }"), None);
        del.backend = Backend::Nft;
        replay(&mut t, &[set, add]);
        replay(&mut t, &[del]);
        assert_eq!(t.tables[0].sets[0].elements, ["10.0.0.2"]);
    }
}
