//! What the ruleset holds, and what each recent change took from it: the restorer's memory.
//!
//! One model per namespace and backend (the record's own model: chains as rule text), seeded
//! from the engine's first read and rolled forward with every change line. Before a transaction
//! is applied, what it takes is kept for a while: a deleted or flushed chain whole, a deleted
//! table whole, a deleted rule that jumps somewhere, a deleted set, the old text of a replaced
//! rule. That is what [`Keeper::lost`] puts together for an incident.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::forensics::model::{Chain, Set, Table, Tables};
use crate::forensics::replay::{Process, Recorded, Replay};
use crate::output::{ChangeLine, IncidentLine};
use crate::ruleset::{Backend, Family, Op};
use crate::timestamp::Timestamp;

use super::plan::{jump_target, set_refs, Jump, Lost, Now};

/// What one change took.
#[derive(Debug, Clone)]
enum Took {
    Table(Table),
    Chain(Chain),
    /// A rule that jumps, at its position before the change.
    Rule {
        chain: String,
        position: usize,
        rule: String,
    },
    Set(Set),
}

#[derive(Debug, Clone)]
struct Taken {
    seq: u64,
    txn: String,
    time: Timestamp,
    netns: u32,
    backend: Backend,
    family: Family,
    table: String,
    took: Took,
}

/// At most this many things taken are kept (the oldest go first).
const MAX_TAKEN: usize = 100_000;

pub struct Keeper {
    models: HashMap<(u32, Backend), Replay>,
    taken: VecDeque<Taken>,
    /// How long what was taken is kept.
    keep: Duration,
}

impl Now for Replay {
    fn chain(&self, family: Family, table: &str, name: &str) -> Option<&Chain> {
        Replay::chain(self, family, table, name)
    }
    fn has_set(&self, family: Family, table: &str, name: &str) -> bool {
        Replay::set(self, family, table, name).is_some()
    }
}

/// The ruleset of a namespace nothing is known of: empty.
struct Nothing;

impl Now for Nothing {
    fn chain(&self, _: Family, _: &str, _: &str) -> Option<&Chain> {
        None
    }
    fn has_set(&self, _: Family, _: &str, _: &str) -> bool {
        false
    }
}

impl Keeper {
    pub fn new(keep: Duration) -> Keeper {
        Keeper {
            models: HashMap::new(),
            taken: VecDeque::new(),
            keep,
        }
    }

    /// What a namespace's backend holds, read from the kernel (its first read, or a snapshot).
    pub fn seed(&mut self, netns: u32, backend: Backend, tables: Tables) {
        self.models.insert((netns, backend), Replay::new(tables));
    }

    /// A namespace is gone.
    pub fn forget(&mut self, netns: u32) {
        self.models.retain(|(n, _), _| *n != netns);
        self.taken.retain(|t| t.netns != netns);
    }

    /// The ruleset of a namespace's backend now.
    pub fn now(&self, netns: u32, backend: Backend) -> &dyn Now {
        match self.models.get(&(netns, backend)) {
            Some(m) => m,
            None => &Nothing,
        }
    }

    /// One transaction's change lines (one namespace, one backend): keep what they take, then
    /// apply them. Returns the chains it took (whole, or a jump into them).
    pub fn txn(&mut self, lines: &[ChangeLine]) -> Vec<String> {
        let Some(first) = lines.first() else {
            return Vec::new();
        };
        // Replayed lines tell what the first read (the seed) already holds.
        if first.backend == Backend::Ipset || first.replayed {
            return Vec::new();
        }
        let mut hit: Vec<String> = Vec::new();
        let rec: Vec<Recorded> = lines.iter().map(recorded).collect();
        let key = (first.netns, first.backend);
        let model = self
            .models
            .entry(key)
            .or_insert_with(|| Replay::new(Tables::default()));
        for (c, r) in lines.iter().zip(&rec) {
            if !r.applied() {
                continue;
            }
            if let Some(took) = took_by(model, r) {
                match &took {
                    Took::Table(t) => hit.extend(t.chains.iter().map(|c| c.name.clone())),
                    Took::Chain(c) => hit.push(c.name.clone()),
                    Took::Rule { rule, .. } => hit.extend(jump_target(rule).map(str::to_string)),
                    Took::Set(_) => {}
                }
                self.taken.push_back(Taken {
                    seq: c.seq,
                    txn: c.txn.clone(),
                    time: c.time,
                    netns: c.netns,
                    backend: c.backend,
                    family: c.family,
                    table: c.table.clone(),
                    took,
                });
            }
        }
        model.apply_txn(&rec);
        self.prune(first.time);
        hit
    }

    fn prune(&mut self, now: Timestamp) {
        while self.taken.len() > MAX_TAKEN
            || self
                .taken
                .front()
                .is_some_and(|t| now.elapsed_since(t.time) > self.keep)
        {
            self.taken.pop_front();
        }
    }

    /// What `incidents` (of one namespace) took from `owner`, per table: the owner's chains
    /// they name as they were before the first of them, and the rules of the same transactions
    /// that jumped into them.
    pub fn lost(&self, incidents: &[IncidentLine], owner: &str) -> Vec<Lost> {
        let Some(netns) = incidents.first().map(|i| i.netns) else {
            return Vec::new();
        };
        let names: Vec<&str> = incidents
            .iter()
            .flat_map(super::owners_hit)
            .filter(|(o, _)| *o == owner)
            .flat_map(|(_, chains)| chains)
            .collect();
        let txns: Vec<&str> = self
            .taken
            .iter()
            .filter(|t| t.netns == netns && incidents.iter().any(|i| i.events.contains(&t.seq)))
            .map(|t| t.txn.as_str())
            .collect();
        let mut out: Vec<Lost> = Vec::new();
        // Oldest first: a chain flushed, then deleted, is kept as the flush found it.
        for t in self
            .taken
            .iter()
            .filter(|t| t.netns == netns && txns.contains(&t.txn.as_str()))
        {
            let at = |out: &mut Vec<Lost>| -> usize {
                if let Some(i) = out.iter().position(|l| {
                    l.backend == t.backend && l.family == t.family && l.table == t.table
                }) {
                    return i;
                }
                out.push(Lost {
                    backend: t.backend,
                    family: t.family,
                    table: t.table.clone(),
                    chains: Vec::new(),
                    jumps: Vec::new(),
                    sets: Vec::new(),
                });
                out.len() - 1
            };
            match &t.took {
                Took::Table(table) => {
                    let i = at(&mut out);
                    for c in &table.chains {
                        take_chain(&mut out[i], c, &names, Some(table));
                    }
                }
                Took::Chain(c) => {
                    let i = at(&mut out);
                    take_chain(&mut out[i], c, &names, None);
                }
                Took::Rule {
                    chain,
                    position,
                    rule,
                } => {
                    if jump_target(rule).is_some_and(|j| names.contains(&j)) {
                        let i = at(&mut out);
                        push_jump(&mut out[i], chain, *position, rule);
                    }
                }
                Took::Set(s) => {
                    let i = at(&mut out);
                    out[i].sets.push(s.clone());
                }
            }
        }
        for l in &mut out {
            // Only the sets the lost rules use.
            let used: Vec<String> = l
                .chains
                .iter()
                .flat_map(|c| c.rules.iter())
                .chain(l.jumps.iter().map(|j| &j.rule))
                .flat_map(|r| set_refs(r).map(str::to_string).collect::<Vec<_>>())
                .collect();
            l.sets.retain(|s| used.contains(&s.name));
            l.sets.dedup_by(|a, b| a.name == b.name);
        }
        out.retain(|l| !l.chains.is_empty() || !l.jumps.is_empty());
        out
    }
}

/// A chain a wipe took: the owner's (named by the incident) whole; another's, for the rules in
/// it that jumped into the owner's. Sets of a deleted table go with it.
fn take_chain(l: &mut Lost, c: &Chain, names: &[&str], table: Option<&Table>) {
    if names.contains(&c.name.as_str()) {
        if !l.chains.iter().any(|k| k.name == c.name) {
            l.chains.push(c.clone());
        }
        if let Some(t) = table {
            for s in &t.sets {
                if !l.sets.iter().any(|k| k.name == s.name) {
                    l.sets.push(s.clone());
                }
            }
        }
        return;
    }
    for (i, r) in c.rules.iter().enumerate() {
        if jump_target(r).is_some_and(|j| names.contains(&j)) {
            push_jump(l, &c.name, i, r);
        }
    }
}

fn push_jump(l: &mut Lost, chain: &str, position: usize, rule: &str) {
    let j = Jump {
        chain: chain.to_string(),
        position,
        rule: rule.to_string(),
    };
    if !l.jumps.contains(&j) {
        l.jumps.push(j);
    }
}

/// What applying `r` to `model` will take from it.
fn took_by(model: &Replay, r: &Recorded) -> Option<Took> {
    let chain = || model.chain(r.family, &r.table, r.chain.as_deref()?);
    match r.op {
        Op::TableDelete | Op::TableFlush => model.table(r.family, &r.table).map(Took::Table),
        Op::ChainDelete | Op::ChainFlush => chain()
            .filter(|c| !c.rules.is_empty() || r.op == Op::ChainDelete)
            .cloned()
            .map(Took::Chain),
        Op::RuleDelete | Op::RuleReplace => {
            // A replaced rule's old text: a jump that another rule took the place of.
            let rule = match r.op {
                Op::RuleDelete => r.rule.as_deref()?,
                _ => r.detail.as_deref()?.strip_prefix("was: ")?,
            };
            jump_target(rule)?;
            let c = chain()?;
            let position = r
                .position
                .filter(|&p| c.rules.get(p).is_some_and(|x| x == rule))
                .or_else(|| c.rules.iter().position(|x| x == rule))?;
            Some(Took::Rule {
                chain: c.name.clone(),
                position,
                rule: rule.to_string(),
            })
        }
        Op::SetDelete => model
            .set(r.family, &r.table, r.chain.as_deref()?)
            .cloned()
            .map(Took::Set),
        _ => None,
    }
}

/// A change line as the record's model reads it.
pub fn recorded(c: &ChangeLine) -> Recorded {
    Recorded {
        seq: c.seq,
        time: c.time,
        netns: c.netns,
        backend: c.backend,
        family: c.family,
        table: c.table.clone(),
        chain: c.chain.clone(),
        op: c.op,
        rule: c.rule.clone(),
        detail: c.detail.clone(),
        position: c.position,
        txn: c.txn.clone(),
        result: c.result.clone(),
        process: Process {
            pid: c.process.pid,
            comm: c.process.comm.clone(),
            actor: c.process.actor.clone(),
        },
        netns_name: c.netns_name.clone(),
    }
}
