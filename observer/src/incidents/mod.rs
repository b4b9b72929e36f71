//! The correlation engine: turns the change stream into ownership-conflict incidents.
//!
//! It keeps a model of every chain (and set) of every watched namespace: who owns it, how that is
//! known, how many rules it holds, which chains its rules jump to, and who changed it last. The
//! model is filled once from the ruleset each namespace holds when observer starts watching it,
//! then only from change transactions: nothing is ever polled.
//!
//! Each transaction (one x_tables replace, one nft generation) is checked against the model
//! *before* it is applied (what did it delete, flush, unhook or rewrite, and whose was it), then
//! applied. Windows (flapping, mass flush, repair bound) are measured in event time; the engine
//! calls [`Correlator::tick`] when [`Correlator::next_deadline`] passes so that incidents also
//! close when nothing more happens.
//!
//! Memory is bounded by the size of the rulesets and the windows, not by how long it runs:
//! incidents are forgotten once closed, conflicts once their window passes, and the `events`
//! list of one incident keeps at most [`MAX_EVENTS`] sequence numbers.
//!
//! The files follow a transaction through [`Correlator::observe`] (here, with the model's
//! types): `hits` finds what it did to whose objects and applies it to the model; `conflict`
//! turns hits into incidents (one per owner and writer) and names refused attempts; `mass`
//! gathers one writer's wipe of several owners; `repair` follows owners writing their objects
//! again (repairs, and the cycles of a `flapping` loop); `split` checks an owner's chains across
//! the two backends; `clock` closes what a window ends when nothing else happens. `lines` builds
//! and updates incident lines, `summary` writes their sentences, `owners` knows who owns what,
//! `drift` compares rules.

mod clock;
mod conflict;
pub mod drift;
mod hits;
mod lines;
mod mass;
pub mod owners;
mod repair;
mod split;
mod summary;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::attribution::ProcessInfo;
use crate::output::line::{
    ChangeLine, IncidentKind, IncidentLine, IncidentState, OwnerHit, Severity, SplitBackends,
};
use crate::ruleset::{is_builtin_chain, Backend, Family, Op};
use crate::timestamp::Timestamp;
use lines::*;
use owners::{Claim, How, Owners};
use summary::*;

/// At most this many `seq`s are listed in one incident's `events` (the most recent ones).
pub const MAX_EVENTS: usize = 256;

/// Windows and thresholds.
#[derive(Debug, Clone)]
pub struct Config {
    /// Cycles of undo/redo that make a `flapping` incident.
    pub flap_cycles: u32,
    /// The window those cycles must fall in; also how long a loop must stop for its incident to
    /// close, and how long a foreign_* incident takes repeats as updates.
    pub flap_window: Duration,
    /// Flushes and deletes of several owners by one actor within this window are one `mass_flush`.
    pub mass_window: Duration,
    /// How long a `mass_flush` waits for each owner to repair before it closes.
    pub repair_within: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            flap_cycles: 3,
            flap_window: Duration::from_secs(60),
            mass_window: Duration::from_secs(5),
            repair_within: Duration::from_secs(60),
        }
    }
}

/// A chain (or a set) as the model knows it.
#[derive(Debug, Clone, Default)]
struct ObjInfo {
    /// What the catalog or the file says about this name (resolved once, when the object
    /// enters the model).
    claim: Option<Arc<Claim>>,
    /// Learned owner (the catalog and the file are asked first, see [`Correlator::owner_of`]).
    learned: Option<Arc<str>>,
    rules: usize,
    /// Chains the rules of this chain jump to (one entry per jump; the names are the
    /// namespace's own, shared with the objects they name).
    jumps: Vec<Name>,
    is_set: bool,
    last: Option<LastWrite>,
}

impl ObjInfo {
    fn named(owners: &Owners, key: &ObjKey) -> ObjInfo {
        ObjInfo {
            claim: owners.claim_in(key.0, key.1, &key.2, &key.3).cloned(),
            ..ObjInfo::default()
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LastWrite {
    /// Shared by every object one transaction wrote.
    pub actor: Arc<str>,
    pub time: Timestamp,
    pub seq: u64,
    pub op: Op,
}

/// A table or chain name the model holds: one copy per namespace, shared by every key and jump
/// that names it (a kube-proxy table's 40,000 chains would otherwise hold the table's name
/// 40,000 times, and each jump its own copy of its target's).
type Name = Arc<str>;

/// Where an object lives: backend, family, table, name.
type ObjKey = (Backend, Family, Name, Name);

/// The key of an object, to look it up (its names need not be the namespace's own copies).
fn obj_key(backend: Backend, family: Family, table: &str, chain: &str) -> ObjKey {
    (backend, family, Arc::from(table), Arc::from(chain))
}

/// The names a namespace's model holds, one copy of each.
#[derive(Debug, Default)]
struct Names(HashSet<Name>);

impl Names {
    /// The namespace's copy of `name`.
    fn get(&mut self, name: &str) -> Name {
        if let Some(n) = self.0.get(name) {
            return Arc::clone(n);
        }
        let n: Name = Arc::from(name);
        self.0.insert(Arc::clone(&n));
        n
    }

    /// The key of an object, named by the namespace's copies of its names.
    fn key(&mut self, backend: Backend, family: Family, table: &str, chain: &str) -> ObjKey {
        (backend, family, self.get(table), self.get(chain))
    }

    /// Let go of the names nothing else holds, once they are more than those in use: the
    /// names of deleted objects would otherwise stay.
    fn tidy(&mut self, objects: usize) {
        if self.0.len() > 2 * objects + 256 {
            self.0.retain(|n| Arc::strong_count(n) > 1);
            self.0.shrink_to_fit();
        }
    }
}

/// An owner writing one of its own objects again.
#[derive(Debug, Clone)]
struct Restore {
    key: ObjKey,
    seq: u64,
}

/// What a namespace holds when observer starts watching it (or finds it).
#[derive(Debug, Clone)]
pub struct InventoryChain {
    pub backend: Backend,
    pub family: Family,
    pub table: String,
    pub chain: String,
    pub rules: usize,
    pub jumps: Vec<String>,
    pub is_set: bool,
}

#[derive(Debug, Default)]
struct Net {
    name: Option<String>,
    objs: BTreeMap<ObjKey, ObjInfo>,
    names: Names,
}

/// What one transaction did to someone else's objects.
#[derive(Debug, Clone)]
struct Hit {
    kind: IncidentKind,
    owner: String,
    backend: Backend,
    family: Family,
    table: String,
    chain: String,
    seq: u64,
    /// `rule_drift` details.
    drift: Option<Drift>,
}

#[derive(Debug, Clone)]
struct Drift {
    rule: String,
    was: String,
    lost: Vec<String>,
    critical: bool,
    what: String,
}

/// An incident being tracked: its last line, and when things happened (event time, ns).
#[derive(Debug, Clone)]
struct Tracked {
    record: IncidentLine,
    since: Timestamp,
    last: Timestamp,
    /// When the owner's objects were last undone: repair times count from here.
    undone: Timestamp,
    /// What was undone (foreign_*, unhooked, rule_drift): what a repair must bring back.
    targets: Vec<(IncidentKind, ObjKey)>,
}

impl Tracked {
    fn new(record: IncidentLine, since: Timestamp, now: Timestamp) -> Tracked {
        Tracked {
            record,
            since,
            last: now,
            undone: now,
            targets: Vec::new(),
        }
    }

    fn add_targets(&mut self, hits: &[Hit]) {
        for h in hits {
            let t = (h.kind, obj_key(h.backend, h.family, &h.table, &h.chain));
            if !self.targets.contains(&t) {
                self.targets.push(t);
            }
        }
    }
}

/// Two parties of one conflict: an owner and the actor undoing its objects.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct ConflictKey {
    netns: u32,
    owner: String,
    actor: String,
}

#[derive(Debug, Default)]
struct Conflict {
    /// The actor undid something the owner has not restored yet.
    pending: bool,
    /// Event times of completed cycles within the window.
    cycles: Vec<Timestamp>,
    total_cycles: u32,
    last: Timestamp,
    /// Open foreign_* / unhooked / rule_drift incidents of this conflict, by type.
    open: HashMap<IncidentKind, String>,
    flapping: Option<String>,
}

/// Flushes and deletes by one actor in one namespace within the mass window.
#[derive(Debug, Default)]
struct Sweep {
    first: Timestamp,
    hits: Vec<Hit>,
    incident: Option<String>,
}

/// One row of `observer owners`.
#[derive(Debug, Clone, Serialize)]
pub struct OwnerRow {
    pub netns: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netns_name: Option<String>,
    pub backend: Backend,
    pub family: Family,
    pub table: String,
    pub chain: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub set: bool,
    /// The owner, `shared` for chains several writers share, or `unknown`.
    pub owner: String,
    /// `catalog`, `config`, `learned`, or absent when unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub how: Option<How>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub writers: Vec<String>,
    pub rules: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<LastWrite>,
}

/// The correlation engine.
pub struct Correlator {
    cfg: Config,
    owners: Owners,
    nets: HashMap<u32, Net>,
    incidents: HashMap<String, Tracked>,
    conflicts: HashMap<ConflictKey, Conflict>,
    sweeps: HashMap<(u32, String), Sweep>,
    /// Open split_brain incidents by (netns, owner).
    splits: HashMap<(u32, String), String>,
    /// The backend each owner wrote last, per namespace.
    last_backend: HashMap<(u32, String), Backend>,
}

impl Correlator {
    pub fn new(cfg: Config, owners: Owners) -> Correlator {
        Correlator {
            cfg,
            owners,
            nets: HashMap::new(),
            incidents: HashMap::new(),
            conflicts: HashMap::new(),
            sweeps: HashMap::new(),
            splits: HashMap::new(),
            last_backend: HashMap::new(),
        }
    }

    /// What a namespace holds when observer starts watching it. Incidents it shows at once
    /// (split brain) come from [`Correlator::check_all`].
    pub fn baseline(&mut self, netns: u32, name: Option<String>, chains: Vec<InventoryChain>) {
        let net = self.nets.entry(netns).or_default();
        net.name = name;
        for c in chains {
            let claim = self
                .owners
                .claim_in(c.backend, c.family, &c.table, &c.chain)
                .cloned();
            let key = net.names.key(c.backend, c.family, &c.table, &c.chain);
            let jumps = c.jumps.iter().map(|j| net.names.get(j)).collect();
            net.objs.insert(
                key,
                ObjInfo {
                    claim,
                    rules: c.rules,
                    jumps,
                    is_set: c.is_set,
                    ..ObjInfo::default()
                },
            );
        }
        net.names.tidy(net.objs.len());
    }

    pub fn forget_netns(&mut self, netns: u32) {
        self.nets.remove(&netns);
        self.conflicts.retain(|k, _| k.netns != netns);
        self.sweeps.retain(|k, _| k.0 != netns);
        self.splits.retain(|k, _| k.0 != netns);
        self.incidents.retain(|_, t| t.record.netns != netns);
    }

    /// Incidents the current state shows without any change (split brain), for every namespace.
    pub fn check_all(&mut self, now: Timestamp) -> Vec<IncidentLine> {
        let mut out = Vec::new();
        let mut keys: Vec<(u32, String)> = Vec::new();
        for (&netns, net) in &self.nets {
            let mut owners = BTreeSet::new();
            for (k, info) in &net.objs {
                if let Some((o, _)) = self.owner_of(&k.3, info) {
                    owners.insert(o);
                }
            }
            keys.extend(owners.into_iter().map(|o| (netns, o)));
        }
        keys.sort();
        for (netns, owner) in keys {
            self.check_split(netns, &owner, now, &[], &mut out);
        }
        out
    }

    /// Is `owner` the owner of this object? (Like [`Correlator::owner_of`], without allocating.)
    fn owned_by(&self, name: &str, info: &ObjInfo, owner: &str) -> bool {
        if !info.is_set && is_builtin_chain(name) {
            return false;
        }
        match info.claim.as_deref() {
            Some(Claim::Owned { owner: o, .. }) => o == owner,
            Some(Claim::Shared { .. }) => false,
            None => info.learned.as_deref() == Some(owner),
        }
    }

    /// The owner of an object and how it is known (`None`: unknown, shared or built in).
    fn owner_of(&self, name: &str, info: &ObjInfo) -> Option<(String, How)> {
        if !info.is_set && is_builtin_chain(name) {
            return None;
        }
        match info.claim.as_deref() {
            Some(Claim::Owned { owner, how }) => Some((owner.clone(), *how)),
            Some(Claim::Shared { .. }) => None,
            None => info
                .learned
                .as_deref()
                .map(|o| (o.to_string(), How::Learned)),
        }
    }

    /// May `actor` change `name` without it being an incident? (Its owner, or a shared writer.)
    fn allowed(&self, name: &str, info: &ObjInfo, actor: &str) -> bool {
        if let Some(Claim::Shared { writers, .. }) = info.claim.as_deref() {
            return writers.iter().any(|w| self.owners.canonical(w) == actor);
        }
        match self.owner_of(name, info) {
            Some((o, _)) => o == actor || self.owners.writes_for(actor, &o),
            None => true,
        }
    }

    /// Does the writer of this process write as `owner` (the owner itself, or a writer that
    /// writes for it)? Its changes to the owner's objects are the owner's own.
    pub fn writes_as(&self, process: &crate::attribution::ProcessInfo, owner: &str) -> bool {
        let actor = self.owners.identity(process);
        actor == owner || self.owners.writes_for(&actor, owner)
    }

    /// One transaction: every change line of one x_tables replace or one nft generation, in
    /// order (all in one namespace, by one writer). Returns the incident lines it produces.
    pub fn observe(&mut self, txn: &[ChangeLine]) -> Vec<IncidentLine> {
        self.observe_for(txn, None)
    }

    /// A transaction observer wrote itself (`--restore`) for `owner`: it counts as the owner's
    /// write (it raises no incident, and what it puts back is the owner's), and repairs what it
    /// puts back as `observer`.
    pub fn observe_restore(&mut self, txn: &[ChangeLine], owner: &str) -> Vec<IncidentLine> {
        self.observe_for(txn, Some(owner))
    }

    fn observe_for(&mut self, txn: &[ChangeLine], for_owner: Option<&str>) -> Vec<IncidentLine> {
        let Some(first) = txn.first() else {
            return Vec::new();
        };
        let netns = first.netns;
        let now = first.time;
        let actor = match for_owner {
            Some(o) => o.to_string(),
            None => self.owners.identity(&first.process),
        };
        let repairer = match for_owner {
            Some(_) => "observer".to_string(),
            None => actor.clone(),
        };
        let known_actor = !(first.process.actor == "unknown" && first.process.unit.is_none());
        {
            let net = self.nets.entry(netns).or_default();
            if net.name.is_none() {
                net.name.clone_from(&first.netns_name);
            }
        }
        let mut out = Vec::new();
        let failed: Vec<&ChangeLine> = txn.iter().filter(|c| !c.result.is_applied()).collect();
        if !failed.is_empty() {
            self.note_failures(netns, &actor, &failed, now, &mut out);
        }
        let applied: Vec<&ChangeLine> = txn.iter().filter(|c| c.result.is_applied()).collect();
        if applied.is_empty() {
            return out;
        }
        let replayed = first.replayed;
        let hits = if replayed || !known_actor {
            if !known_actor && !replayed {
                tracing::debug!(
                    "transaction {} has no known writer: not correlated",
                    first.txn
                );
            }
            Vec::new()
        } else {
            self.find_hits(netns, &actor, &applied)
        };
        // Only creating or deleting chains can start or end a split brain: the owners those
        // chains had before or have after the transaction.
        let reshapes = applied
            .iter()
            .any(|c| matches!(c.op, Op::ChainCreate | Op::ChainDelete | Op::TableDelete));
        let mut touched = if reshapes {
            self.owners_touched(netns, &applied)
        } else {
            BTreeSet::new()
        };
        let restored = self.apply(netns, &actor, known_actor && !replayed, &applied);
        if reshapes {
            touched.extend(self.owners_touched(netns, &applied));
        }
        let hits = self.keep_unhooks_of_surviving(netns, hits);
        if !replayed && known_actor {
            self.last_backend
                .insert((netns, actor.clone()), first.backend);
            self.handle_hits(netns, &actor, first, hits, now, &mut out);
            self.handle_restores(netns, (&actor, &repairer), &restored, now, &mut out);
            let fresh: BTreeSet<String> = out.iter().map(|r| r.id.clone()).collect();
            let seqs: Vec<u64> = applied.iter().map(|c| c.seq).collect();
            self.check_repairs(netns, &repairer, now, &seqs, &fresh, &mut out);
        }
        // Split brain, for every owner this transaction touched (before or after it).
        if reshapes {
            let seqs: Vec<u64> = applied.iter().map(|c| c.seq).collect();
            for owner in touched {
                self.check_split(netns, &owner, now, &seqs, &mut out);
            }
        }
        out
    }

    /// The owners of the objects a transaction names, as the model knows them now.
    fn owners_touched(&self, netns: u32, txn: &[&ChangeLine]) -> BTreeSet<String> {
        let mut touched = BTreeSet::new();
        let Some(net) = self.nets.get(&netns) else {
            return touched;
        };
        for c in txn {
            if let Some(chain) = c.chain.as_deref() {
                let key = obj_key(c.backend, c.family, &c.table, chain);
                if let Some((o, _)) = net.objs.get(&key).and_then(|i| self.owner_of(chain, i)) {
                    touched.insert(o);
                }
            }
        }
        touched
    }

    /// The ownership table: every object of every namespace (or one).
    pub fn owner_rows(&self, netns: Option<u32>) -> Vec<OwnerRow> {
        let mut rows = Vec::new();
        let mut nets: Vec<(&u32, &Net)> = self.nets.iter().collect();
        nets.sort_by_key(|(n, _)| **n);
        for (&inode, net) in nets {
            if netns.is_some_and(|n| n != inode) {
                continue;
            }
            for (k, info) in &net.objs {
                let (owner, how, writers) = match info.claim.as_deref() {
                    Some(Claim::Shared { writers, how }) if !is_builtin_chain(&k.3) => {
                        ("shared".to_string(), Some(*how), writers.clone())
                    }
                    _ => match self.owner_of(&k.3, info) {
                        Some((o, h)) => (o, Some(h), Vec::new()),
                        None if is_builtin_chain(&k.3) && !info.is_set => {
                            ("built-in".to_string(), None, Vec::new())
                        }
                        None => ("unknown".to_string(), None, Vec::new()),
                    },
                };
                rows.push(OwnerRow {
                    netns: inode,
                    netns_name: net.name.clone(),
                    backend: k.0,
                    family: k.1,
                    table: k.2.to_string(),
                    chain: k.3.to_string(),
                    set: info.is_set,
                    owner,
                    how,
                    writers,
                    rules: info.rules,
                    last: info.last.clone(),
                });
            }
        }
        rows
    }
}

/// The nft tables iptables-nft writes (the x_tables table names in the ip, ip6 and arp
/// families): only there do chains compete with the legacy backend. A native nft table
/// (`inet admin`) is another ruleset, not a second copy.
fn is_iptables_nft_table(family: Family, table: &str) -> bool {
    matches!(family, Family::Ip | Family::Ip6 | Family::Arp)
        && matches!(table, "filter" | "nat" | "mangle" | "raw" | "security")
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod names_tests {
    use super::*;

    #[test]
    fn a_name_is_held_once_and_let_go_once_unused() {
        let mut names = Names::default();
        let kept: Vec<Name> = (0..10).map(|i| names.get(&format!("chain-{i}"))).collect();
        assert!(
            Arc::ptr_eq(&kept[3], &names.get("chain-3")),
            "one copy per name"
        );
        for i in 10..600 {
            names.get(&format!("chain-{i}"));
        }
        // Fewer than twice the objects in use (plus room): nothing let go yet.
        names.tidy(300);
        assert_eq!(names.0.len(), 600);
        // The names of the 590 objects gone are let go; those still held stay.
        names.tidy(10);
        assert_eq!(names.0.len(), 10);
        assert!(Arc::ptr_eq(&kept[9], &names.get("chain-9")));
    }
}
