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

pub mod bench;
pub mod drift;
pub mod owners;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::attribution::ProcessInfo;
use crate::output::record::{
    parse_rfc3339_ns, rfc3339, ChangeRecord, IncidentKind, IncidentRecord, IncidentState, OwnerHit,
    Severity, SplitBackends,
};
use crate::ruleset::{Backend, Family, Op};
use owners::{is_builtin_chain, Claim, How, Owners};

/// At most this many `seq`s are listed in one incident's `events` (the most recent ones).
pub const MAX_EVENTS: usize = 256;

const NS_PER_MS: i128 = 1_000_000;

/// Windows and thresholds.
#[derive(Debug, Clone)]
pub struct Config {
    /// Cycles of undo/redo that make a `flapping` incident.
    pub flap_cycles: u32,
    /// The window those cycles must fall in; also how long a loop must stop for its incident to
    /// close, and how long a foreign_* incident takes repeats as updates.
    pub flap_window_ns: i128,
    /// Flushes and deletes of several owners by one actor within this window are one `mass_flush`.
    pub mass_window_ns: i128,
    /// How long a `mass_flush` waits for each owner to repair before it closes.
    pub repair_within_ns: i128,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            flap_cycles: 3,
            flap_window_ns: 60_000 * NS_PER_MS,
            mass_window_ns: 5_000 * NS_PER_MS,
            repair_within_ns: 60_000 * NS_PER_MS,
        }
    }
}

/// A chain (or a set) as the model knows it.
#[derive(Debug, Clone, Default)]
struct ObjInfo {
    /// What the catalog or the file says about this name (resolved once, when the object
    /// enters the model).
    claim: Option<Claim>,
    /// Learned owner (the catalog and the file are asked first, see [`Correlator::owner_of`]).
    learned: Option<String>,
    rules: usize,
    /// Chains the rules of this chain jump to (one entry per rule).
    jumps: Vec<String>,
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
    pub actor: String,
    pub time: String,
    pub seq: u64,
    pub op: Op,
}

/// Where an object lives: backend, family, table, name.
type ObjKey = (Backend, Family, String, String);

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
    record: IncidentRecord,
    since_ns: i128,
    last_ns: i128,
    /// When the owner's objects were last undone: repair times count from here.
    undone_ns: i128,
    /// What was undone (foreign_*, unhooked, rule_drift): what a repair must bring back.
    targets: Vec<(IncidentKind, ObjKey)>,
}

impl Tracked {
    fn new(record: IncidentRecord, since_ns: i128, now_ns: i128) -> Tracked {
        Tracked {
            record,
            since_ns,
            last_ns: now_ns,
            undone_ns: now_ns,
            targets: Vec::new(),
        }
    }

    fn add_targets(&mut self, hits: &[Hit]) {
        for h in hits {
            let t = (
                h.kind,
                (h.backend, h.family, h.table.clone(), h.chain.clone()),
            );
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
    cycles: Vec<i128>,
    total_cycles: u32,
    last_ns: i128,
    /// Open foreign_* / unhooked / rule_drift incidents of this conflict, by type.
    open: HashMap<IncidentKind, String>,
    flapping: Option<String>,
}

/// Flushes and deletes by one actor in one namespace within the mass window.
#[derive(Debug, Default)]
struct Sweep {
    first_ns: i128,
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
            net.objs.insert(
                (c.backend, c.family, c.table, c.chain),
                ObjInfo {
                    claim,
                    rules: c.rules,
                    jumps: c.jumps,
                    is_set: c.is_set,
                    ..ObjInfo::default()
                },
            );
        }
    }

    pub fn forget_netns(&mut self, netns: u32) {
        self.nets.remove(&netns);
        self.conflicts.retain(|k, _| k.netns != netns);
        self.sweeps.retain(|k, _| k.0 != netns);
        self.splits.retain(|k, _| k.0 != netns);
        self.incidents.retain(|_, t| t.record.netns != netns);
    }

    /// Incidents the current state shows without any change (split brain), for every namespace.
    pub fn check_all(&mut self, now_ns: i128) -> Vec<IncidentRecord> {
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
            self.check_split(netns, &owner, now_ns, &[], &mut out);
        }
        out
    }

    /// Is `owner` the owner of this object? (Like [`Correlator::owner_of`], without allocating.)
    fn owned_by(&self, name: &str, info: &ObjInfo, owner: &str) -> bool {
        if !info.is_set && is_builtin_chain(name) {
            return false;
        }
        match &info.claim {
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
        match &info.claim {
            Some(Claim::Owned { owner, how }) => Some((owner.clone(), *how)),
            Some(Claim::Shared { .. }) => None,
            None => info.learned.clone().map(|o| (o, How::Learned)),
        }
    }

    /// May `actor` change `name` without it being an incident? (Its owner, or a shared writer.)
    fn allowed(&self, name: &str, info: &ObjInfo, actor: &str) -> bool {
        if let Some(Claim::Shared { writers, .. }) = &info.claim {
            return writers.iter().any(|w| self.owners.canonical(w) == actor);
        }
        match self.owner_of(name, info) {
            Some((o, _)) => o == actor || self.owners.writes_for(actor, &o),
            None => true,
        }
    }

    /// One transaction: every change line of one x_tables replace or one nft generation, in
    /// order (all in one namespace, by one writer). Returns the incident lines it produces.
    pub fn observe(&mut self, txn: &[ChangeRecord]) -> Vec<IncidentRecord> {
        let Some(first) = txn.first() else {
            return Vec::new();
        };
        let netns = first.netns;
        let now_ns = parse_rfc3339_ns(&first.time).unwrap_or_else(now_ns);
        let actor = self.owners.identity(&first.process);
        let known_actor = !(first.process.actor == "unknown" && first.process.unit.is_none());
        {
            let net = self.nets.entry(netns).or_default();
            if net.name.is_none() {
                net.name.clone_from(&first.netns_name);
            }
        }
        let mut out = Vec::new();
        let failed: Vec<&ChangeRecord> = txn.iter().filter(|c| c.result != "ok").collect();
        if !failed.is_empty() {
            self.note_failures(netns, &actor, &failed, now_ns, &mut out);
        }
        let applied: Vec<&ChangeRecord> = txn.iter().filter(|c| c.result == "ok").collect();
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
            self.handle_hits(netns, &actor, first, hits, now_ns, &mut out);
            self.handle_restores(netns, &actor, &restored, now_ns, &mut out);
            let fresh: BTreeSet<String> = out.iter().map(|r| r.id.clone()).collect();
            let seqs: Vec<u64> = applied.iter().map(|c| c.seq).collect();
            self.check_repairs(netns, &actor, now_ns, &seqs, &fresh, &mut out);
        }
        // Split brain, for every owner this transaction touched (before or after it).
        if reshapes {
            let seqs: Vec<u64> = applied.iter().map(|c| c.seq).collect();
            for owner in touched {
                self.check_split(netns, &owner, now_ns, &seqs, &mut out);
            }
        }
        out
    }

    /// The owners of the objects a transaction names, as the model knows them now.
    fn owners_touched(&self, netns: u32, txn: &[&ChangeRecord]) -> BTreeSet<String> {
        let mut touched = BTreeSet::new();
        let Some(net) = self.nets.get(&netns) else {
            return touched;
        };
        for c in txn {
            if let Some(chain) = c.chain.as_deref() {
                let key = (c.backend, c.family, c.table.clone(), chain.to_string());
                if let Some((o, _)) = net.objs.get(&key).and_then(|i| self.owner_of(chain, i)) {
                    touched.insert(o);
                }
            }
        }
        touched
    }

    /// What the transaction does to objects the actor may not change (checked before applying).
    fn find_hits(&self, netns: u32, actor: &str, txn: &[&ChangeRecord]) -> Vec<Hit> {
        let Some(net) = self.nets.get(&netns) else {
            return Vec::new();
        };
        let mut hits = Vec::new();
        let mut push = |kind, key: &ObjKey, info: &ObjInfo, seq, drift| {
            if let Some((owner, _)) = self.owner_of(&key.3, info) {
                if !self.allowed(&key.3, info, actor) {
                    hits.push(Hit {
                        kind,
                        owner,
                        backend: key.0,
                        family: key.1,
                        table: key.2.clone(),
                        chain: key.3.clone(),
                        seq,
                        drift,
                    });
                }
            }
        };
        // Jumps removed: (table key, target chain, holder chain, seq).
        let mut unhooks: Vec<(ObjKey, String, u64)> = Vec::new();
        for c in txn {
            let in_table = |k: &ObjKey| k.0 == c.backend && k.1 == c.family && k.2 == c.table;
            let target_key = |target: &str| -> ObjKey {
                (c.backend, c.family, c.table.clone(), target.to_string())
            };
            let key = c
                .chain
                .as_ref()
                .map(|ch| (c.backend, c.family, c.table.clone(), ch.clone()));
            let info = key.as_ref().and_then(|k| net.objs.get(k));
            match c.op {
                Op::ChainDelete | Op::SetDelete => {
                    if let (Some(k), Some(i)) = (&key, info) {
                        push(IncidentKind::ForeignDelete, k, i, c.seq, None);
                        for j in &i.jumps {
                            unhooks.push((target_key(j), k.3.clone(), c.seq));
                        }
                    }
                }
                Op::ChainFlush | Op::SetFlush => {
                    if let (Some(k), Some(i)) = (&key, info) {
                        push(IncidentKind::ForeignFlush, k, i, c.seq, None);
                        for j in &i.jumps {
                            unhooks.push((target_key(j), k.3.clone(), c.seq));
                        }
                    }
                }
                Op::TableFlush | Op::TableDelete => {
                    let kind = if c.op == Op::TableFlush {
                        IncidentKind::ForeignFlush
                    } else {
                        IncidentKind::ForeignDelete
                    };
                    for (k, i) in net.objs.iter().filter(|(k, _)| in_table(k)) {
                        if kind == IncidentKind::ForeignDelete || i.rules > 0 {
                            push(kind, k, i, c.seq, None);
                        }
                        for j in &i.jumps {
                            unhooks.push((target_key(j), k.3.clone(), c.seq));
                        }
                    }
                }
                Op::RuleDelete => {
                    // Deleting the only rule of someone else's chain empties it, as a flush
                    // would (the kernel could not tell which it was).
                    if let (Some(k), Some(i)) = (&key, info) {
                        let removed = txn
                            .iter()
                            .filter(|d| d.op == Op::RuleDelete && d.chain == c.chain)
                            .count();
                        let first = txn
                            .iter()
                            .position(|d| d.op == Op::RuleDelete && d.chain == c.chain)
                            .is_some_and(|p| txn[p].seq == c.seq);
                        let refilled = txn.iter().any(|d| {
                            matches!(d.op, Op::RuleAdd | Op::RuleReplace) && d.chain == c.chain
                        });
                        if first && !refilled && i.rules > 0 && removed >= i.rules {
                            push(IncidentKind::ForeignFlush, k, i, c.seq, None);
                        }
                    }
                    if let (Some(k), Some(rule)) = (&key, c.rule.as_deref()) {
                        for j in drift::jump_targets(c.backend, rule) {
                            unhooks.push((target_key(&j), k.3.clone(), c.seq));
                        }
                    }
                }
                Op::RuleReplace => {
                    let was = c
                        .detail
                        .as_deref()
                        .and_then(|d| d.strip_prefix("was: "))
                        .unwrap_or_default();
                    let new = c.rule.as_deref().unwrap_or_default();
                    if let Some(k) = &key {
                        let new_jumps = drift::jump_targets(c.backend, new);
                        for j in drift::jump_targets(c.backend, was) {
                            if !new_jumps.contains(&j) {
                                unhooks.push((target_key(&j), k.3.clone(), c.seq));
                            }
                        }
                        if let Some(i) = info {
                            let d = drift::diff(c.backend, was, new);
                            if !was.is_empty() && d.is_drift() {
                                let mut what = Vec::new();
                                if !d.lost.is_empty() {
                                    what.push(format!("lost `{}`", d.lost.join(" ")));
                                }
                                if let Some((o, n)) = &d.verdict {
                                    what.push(format!("changed `{o}` to `{n}`"));
                                }
                                if !d.added.is_empty() {
                                    what.push(format!("gained `{}`", d.added.join(" ")));
                                }
                                let drift = Drift {
                                    rule: new.to_string(),
                                    was: was.to_string(),
                                    critical: d.drops && !d.lost.is_empty(),
                                    lost: d.lost,
                                    what: what.join(", "),
                                };
                                push(IncidentKind::RuleDrift, k, i, c.seq, Some(drift));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        for (target, holder, seq) in unhooks {
            let Some(info) = net.objs.get(&target) else {
                continue;
            };
            let Some((owner, _)) = self.owner_of(&target.3, info) else {
                continue;
            };
            if self.allowed(&target.3, info, actor) {
                continue;
            }
            // A jump from the owner's own chain that this transaction also flushed or deleted is
            // part of that incident.
            let holder_key = (target.0, target.1, target.2.clone(), holder.clone());
            let holder_same_owner = net
                .objs
                .get(&holder_key)
                .and_then(|i| self.owner_of(&holder, i))
                .is_some_and(|(o, _)| o == owner);
            if holder_same_owner {
                continue;
            }
            hits.push(Hit {
                kind: IncidentKind::Unhooked,
                owner,
                backend: target.0,
                family: target.1,
                table: target.2,
                chain: target.3,
                seq,
                drift: None,
            });
        }
        hits
    }

    /// An unhooked chain that the same transaction deleted is part of the delete.
    fn keep_unhooks_of_surviving(&self, netns: u32, hits: Vec<Hit>) -> Vec<Hit> {
        let Some(net) = self.nets.get(&netns) else {
            return hits;
        };
        hits.into_iter()
            .filter(|h| {
                h.kind != IncidentKind::Unhooked
                    || net.objs.contains_key(&(
                        h.backend,
                        h.family,
                        h.table.clone(),
                        h.chain.clone(),
                    ))
            })
            .collect()
    }

    /// Apply the transaction to the model; returns the objects the writer (re)created or filled,
    /// by their owner (restores).
    fn apply(
        &mut self,
        netns: u32,
        actor: &str,
        learn: bool,
        txn: &[&ChangeRecord],
    ) -> Vec<Restore> {
        let mut restored: Vec<(ObjKey, u64)> = Vec::new();
        let net = self.nets.entry(netns).or_default();
        for c in txn {
            let key = c
                .chain
                .as_ref()
                .map(|ch| (c.backend, c.family, c.table.clone(), ch.clone()));
            let last = LastWrite {
                actor: actor.to_string(),
                time: c.time.clone(),
                seq: c.seq,
                op: c.op,
            };
            let in_table = |k: &ObjKey| k.0 == c.backend && k.1 == c.family && k.2 == c.table;
            match c.op {
                Op::TableDelete => net.objs.retain(|k, _| !in_table(k)),
                Op::TableFlush => {
                    for (_, i) in net.objs.iter_mut().filter(|(k, _)| in_table(k)) {
                        if !i.is_set {
                            i.rules = 0;
                            i.jumps.clear();
                            i.last = Some(last.clone());
                        }
                    }
                }
                Op::TableCreate => {}
                _ => {
                    let Some(key) = key else { continue };
                    match c.op {
                        Op::ChainDelete | Op::SetDelete => {
                            net.objs.remove(&key);
                            continue;
                        }
                        Op::ChainCreate | Op::SetCreate => {
                            let info = net
                                .objs
                                .entry(key.clone())
                                .or_insert_with(|| ObjInfo::named(&self.owners, &key));
                            info.is_set = c.op == Op::SetCreate;
                            restored.push((key.clone(), c.seq));
                        }
                        _ => {}
                    }
                    let info = net
                        .objs
                        .entry(key.clone())
                        .or_insert_with(|| ObjInfo::named(&self.owners, &key));
                    match c.op {
                        Op::RuleAdd => {
                            info.rules += 1;
                            if let Some(r) = &c.rule {
                                info.jumps.extend(drift::jump_targets(c.backend, r));
                            }
                            restored.push((key.clone(), c.seq));
                        }
                        Op::RuleDelete => {
                            info.rules = info.rules.saturating_sub(1);
                            if let Some(r) = &c.rule {
                                for j in drift::jump_targets(c.backend, r) {
                                    if let Some(p) = info.jumps.iter().position(|x| *x == j) {
                                        info.jumps.swap_remove(p);
                                    }
                                }
                            }
                        }
                        Op::RuleReplace => {
                            let was = c.detail.as_deref().and_then(|d| d.strip_prefix("was: "));
                            for j in was
                                .map(|w| drift::jump_targets(c.backend, w))
                                .unwrap_or_default()
                            {
                                if let Some(p) = info.jumps.iter().position(|x| *x == j) {
                                    info.jumps.swap_remove(p);
                                }
                            }
                            if let Some(r) = &c.rule {
                                info.jumps.extend(drift::jump_targets(c.backend, r));
                            }
                        }
                        Op::ChainFlush => {
                            info.rules = 0;
                            info.jumps.clear();
                        }
                        Op::ElementAdd => restored.push((key.clone(), c.seq)),
                        _ => {}
                    }
                    info.last = Some(last);
                }
            }
        }
        // Learning: the writer of a chain nobody is known to own becomes its owner.
        if learn {
            let keys: Vec<ObjKey> = txn
                .iter()
                .filter_map(|c| {
                    c.chain
                        .as_ref()
                        .map(|ch| (c.backend, c.family, c.table.clone(), ch.clone()))
                })
                .collect();
            for key in keys {
                if is_builtin_chain(&key.3) && !self.is_set(netns, &key) {
                    continue;
                }
                if let Some(info) = self.nets.get_mut(&netns).and_then(|n| n.objs.get_mut(&key)) {
                    if info.claim.is_none() && info.learned.is_none() {
                        info.learned = Some(actor.to_string());
                    }
                }
            }
        }
        // Restores are writes by an object's owner.
        let net = &self.nets[&netns];
        restored
            .into_iter()
            .filter_map(|(k, seq)| {
                let info = net.objs.get(&k)?;
                let (owner, _) = self.owner_of(&k.3, info)?;
                (owner == actor || self.owners.writes_for(actor, &owner))
                    .then_some(Restore { key: k, seq })
            })
            .collect()
    }

    fn is_set(&self, netns: u32, key: &ObjKey) -> bool {
        self.nets
            .get(&netns)
            .and_then(|n| n.objs.get(key))
            .is_some_and(|i| i.is_set)
    }

    fn handle_hits(
        &mut self,
        netns: u32,
        actor: &str,
        first: &ChangeRecord,
        hits: Vec<Hit>,
        now_ns: i128,
        out: &mut Vec<IncidentRecord>,
    ) {
        if hits.is_empty() {
            return;
        }
        // Mass flush: flushes and deletes of several owners by this actor within the window.
        let sweep_key = (netns, actor.to_string());
        let sweeping: Vec<Hit> = hits
            .iter()
            .filter(|h| {
                matches!(
                    h.kind,
                    IncidentKind::ForeignDelete | IncidentKind::ForeignFlush
                )
            })
            .cloned()
            .collect();
        let mut consumed_by_sweep = false;
        if !sweeping.is_empty() {
            let window = self.cfg.mass_window_ns;
            let sweep = self.sweeps.entry(sweep_key.clone()).or_default();
            // A wipe that hits an owner who already repaired is a new wipe (a firewall reloaded
            // twice): the earlier incident ends and a new one starts; nothing inherits "repaired".
            if let Some(old) = sweep.incident.clone() {
                let rewipe = self.incidents.get(&old).is_none_or(|t| {
                    t.record.state.is_final()
                        || sweeping.iter().any(|h| {
                            t.record
                                .owners
                                .iter()
                                .any(|o| o.owner == h.owner && o.repaired)
                        })
                });
                if rewipe {
                    *sweep = Sweep {
                        first_ns: now_ns,
                        ..Sweep::default()
                    };
                    if let Some(mut t) = self.incidents.remove(&old) {
                        if !t.record.state.is_final() {
                            let all = t.record.owners.iter().all(|o| o.repaired);
                            t.record.state = if all {
                                IncidentState::Resolved
                            } else {
                                IncidentState::Expired
                            };
                            t.record.time = rfc3339_ns(now_ns);
                            t.record.summary = format!(
                                "{} A new wipe by {actor} started a new incident.",
                                mass_summary(&t.record)
                            );
                            out.push(t.record);
                        }
                    }
                }
            }
            if sweep.incident.is_none() && now_ns - sweep.first_ns > window {
                *sweep = Sweep {
                    first_ns: now_ns,
                    ..Sweep::default()
                };
            }
            sweep.hits.extend(sweeping);
            let owners: BTreeSet<&str> = sweep.hits.iter().map(|h| h.owner.as_str()).collect();
            if owners.len() >= 2 || sweep.incident.is_some() {
                consumed_by_sweep = true;
                let hits = sweep.hits.clone();
                let existing = sweep.incident.clone();
                let since = sweep.first_ns;
                let id = self.mass_flush(
                    netns,
                    actor,
                    first,
                    &hits,
                    existing.clone(),
                    (since, now_ns),
                    out,
                );
                if let Some(s) = self.sweeps.get_mut(&sweep_key) {
                    s.incident = Some(id.clone());
                }
                if existing.is_none() {
                    self.merge_into_mass(netns, actor, &hits, since, &id, now_ns, out);
                }
            }
        }
        // Everything else, per owner: one conflict each.
        let mut by_owner: BTreeMap<String, Vec<Hit>> = BTreeMap::new();
        for h in hits {
            let swept = consumed_by_sweep
                && matches!(
                    h.kind,
                    IncidentKind::ForeignDelete
                        | IncidentKind::ForeignFlush
                        | IncidentKind::Unhooked
                );
            if !swept {
                by_owner.entry(h.owner.clone()).or_default().push(h);
            }
        }
        for (owner, hits) in by_owner {
            let key = ConflictKey {
                netns,
                owner: owner.clone(),
                actor: actor.to_string(),
            };
            let window = self.cfg.flap_window_ns;
            let conflict = self.conflicts.entry(key.clone()).or_default();
            conflict.pending = true;
            conflict.last_ns = now_ns;
            let open_ids = conflict.open.clone();
            if let Some(id) = conflict.flapping.clone() {
                let seqs: Vec<u64> = hits.iter().map(|h| h.seq).collect();
                if let Some(t) = self.incidents.get_mut(&id) {
                    add_events(&mut t.record, &seqs);
                    t.last_ns = now_ns;
                }
                continue;
            }
            let mut kinds: BTreeMap<IncidentKind, Vec<Hit>> = BTreeMap::new();
            for h in hits {
                kinds.entry(h.kind).or_default().push(h);
            }
            for (kind, hits) in kinds {
                let open = open_ids.get(&kind).cloned().filter(|id| {
                    self.incidents
                        .get(id)
                        .is_some_and(|t| now_ns - t.last_ns <= window)
                });
                let record = match open.and_then(|id| self.incidents.get_mut(&id)) {
                    Some(t) => {
                        let reopened = t.record.state.is_final();
                        update_with_hits(&mut t.record, &hits, actor, first);
                        if reopened {
                            // Undone again after a repair: open again, nothing repaired.
                            t.record.state = IncidentState::Open;
                            t.undone_ns = now_ns;
                            for o in &mut t.record.owners {
                                o.repaired = false;
                                o.repair_ms = None;
                                o.repaired_by = None;
                            }
                        }
                        t.add_targets(&hits);
                        t.record.summary = summary(&t.record, &hits);
                        t.last_ns = now_ns;
                        t.record.clone()
                    }
                    None => {
                        let mut r = new_incident(kind, netns, &hits, actor, first);
                        if let Some(d) = &hits[0].drift {
                            r.rule = Some(d.rule.clone());
                            r.was = Some(d.was.clone());
                            r.lost = d.lost.clone();
                            if d.critical {
                                r.severity = Severity::Critical;
                            }
                        }
                        r.summary = summary(&r, &hits);
                        let mut t = Tracked::new(r.clone(), now_ns, now_ns);
                        t.add_targets(&hits);
                        self.incidents.insert(r.id.clone(), t);
                        if let Some(c) = self.conflicts.get_mut(&key) {
                            c.open.insert(kind, r.id.clone());
                        }
                        r
                    }
                };
                out.push(record);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn mass_flush(
        &mut self,
        netns: u32,
        actor: &str,
        first: &ChangeRecord,
        hits: &[Hit],
        existing: Option<String>,
        (since_ns, now_ns): (i128, i128),
        out: &mut Vec<IncidentRecord>,
    ) -> String {
        let mut per_owner: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for h in hits {
            per_owner
                .entry(h.owner.clone())
                .or_default()
                .insert(h.chain.clone());
        }
        let seqs: Vec<u64> = hits.iter().map(|h| h.seq).collect();
        if let Some(t) = existing.as_ref().and_then(|id| self.incidents.get_mut(id)) {
            for (owner, chains) in per_owner {
                match t.record.owners.iter_mut().find(|o| o.owner == owner) {
                    Some(o) => {
                        for c in chains {
                            if !o.chains.contains(&c) {
                                o.chains.push(c);
                            }
                        }
                    }
                    None => t.record.owners.push(OwnerHit {
                        owner,
                        chains: chains.into_iter().collect(),
                        repaired: false,
                        repair_ms: None,
                        repaired_by: None,
                        failed: None,
                    }),
                }
            }
            add_events(&mut t.record, &seqs);
            add_tables(&mut t.record, hits);
            t.record.chains = all_chains(&t.record.owners);
            t.record.state = IncidentState::Update;
            t.record.time = first.time.clone();
            t.record.summary = mass_summary(&t.record);
            t.last_ns = now_ns;
            out.push(t.record.clone());
            return t.record.id.clone();
        }
        let mut r = new_incident(IncidentKind::MassFlush, netns, hits, actor, first);
        r.owners = per_owner
            .into_iter()
            .map(|(owner, chains)| OwnerHit {
                owner,
                chains: chains.into_iter().collect(),
                repaired: false,
                repair_ms: None,
                repaired_by: None,
                failed: None,
            })
            .collect();
        r.owner = r.owners[0].owner.clone();
        r.chains = all_chains(&r.owners);
        r.summary = mass_summary(&r);
        // The hits were already reported as foreign_* incidents? They become part of this one.
        // Repairs count from the sweep's first wipe, not from the one that made it a mass flush.
        let id = r.id.clone();
        self.incidents
            .insert(id.clone(), Tracked::new(r.clone(), since_ns, now_ns));
        out.push(r);
        id
    }

    /// A new `mass_flush` takes in the foreign_* and unhooked incidents that the same actor's
    /// wipe raised a moment earlier (before a second owner was hit): one wipe, one incident.
    /// Each gets a last line, `resolved` with `merged_into`, and is followed no more.
    #[allow(clippy::too_many_arguments)]
    fn merge_into_mass(
        &mut self,
        netns: u32,
        actor: &str,
        hits: &[Hit],
        since_ns: i128,
        mass_id: &str,
        now_ns: i128,
        out: &mut Vec<IncidentRecord>,
    ) {
        let owners: BTreeSet<&str> = hits.iter().map(|h| h.owner.as_str()).collect();
        for owner in owners {
            let key = ConflictKey {
                netns,
                owner: owner.to_string(),
                actor: actor.to_string(),
            };
            let Some(c) = self.conflicts.get_mut(&key) else {
                continue;
            };
            let merged: Vec<String> = c
                .open
                .iter()
                .filter(|(k, _)| {
                    matches!(
                        k,
                        IncidentKind::ForeignDelete
                            | IncidentKind::ForeignFlush
                            | IncidentKind::Unhooked
                    )
                })
                .map(|(_, id)| id.clone())
                .collect();
            for id in merged {
                let Some(t) = self.incidents.get(&id) else {
                    continue;
                };
                if t.since_ns < since_ns || t.record.state.is_final() {
                    continue;
                }
                c.open.retain(|_, v| *v != id);
                if let Some(mut t) = self.incidents.remove(&id) {
                    t.record.state = IncidentState::Resolved;
                    t.record.time = rfc3339_ns(now_ns);
                    t.record.merged_into = Some(mass_id.to_string());
                    t.record.summary = format!(
                        "Part of {mass_id}: {actor}'s wipe reached other owners' chains too; that \
                         incident follows the repair of {}.",
                        list(&t.record.chains)
                    );
                    out.push(t.record);
                }
            }
        }
    }

    /// Open foreign_*, unhooked and rule_drift incidents of this namespace whose objects are
    /// back: the deleted chains exist, the flushed ones hold rules, the jumps are in place, the
    /// drifted rule was rewritten by its owner. `fresh`: incidents this transaction raised.
    fn check_repairs(
        &mut self,
        netns: u32,
        actor: &str,
        now_ns: i128,
        seqs: &[u64],
        fresh: &BTreeSet<String>,
        out: &mut Vec<IncidentRecord>,
    ) {
        let Some(net) = self.nets.get(&netns) else {
            return;
        };
        let mut done: Vec<String> = Vec::new();
        for (id, t) in &self.incidents {
            if t.record.netns != netns
                || t.record.state.is_final()
                || t.targets.is_empty()
                || fresh.contains(id)
            {
                continue;
            }
            let undo_seq = t.record.events.iter().copied().max().unwrap_or_default();
            let owner = t.record.owner.as_str();
            let back = t.targets.iter().all(|(kind, k)| {
                let rewritten_by_owner = |i: &ObjInfo| {
                    i.last
                        .as_ref()
                        .is_some_and(|l| l.seq > undo_seq && l.actor == owner)
                };
                match kind {
                    IncidentKind::ForeignDelete => net.objs.contains_key(k),
                    IncidentKind::ForeignFlush => net
                        .objs
                        .get(k)
                        .is_some_and(|i| i.rules > 0 || (i.is_set && rewritten_by_owner(i))),
                    IncidentKind::Unhooked => net.objs.iter().any(|(hk, hi)| {
                        hk.0 == k.0 && hk.1 == k.1 && hk.2 == k.2 && hi.jumps.contains(&k.3)
                    }),
                    IncidentKind::RuleDrift => net.objs.get(k).is_some_and(rewritten_by_owner),
                    _ => false,
                }
            });
            if back {
                done.push(id.clone());
            }
        }
        done.sort();
        for id in done {
            let Some(t) = self.incidents.get_mut(&id) else {
                continue;
            };
            let ms = ((now_ns - t.undone_ns).max(0) / NS_PER_MS) as u64;
            for o in &mut t.record.owners {
                o.repaired = true;
                o.repair_ms = Some(ms);
                o.repaired_by = Some(actor.to_string());
            }
            t.record.state = IncidentState::Resolved;
            t.record.time = rfc3339_ns(now_ns);
            add_events(&mut t.record, seqs);
            t.record.summary = resolved_summary(&t.record, actor, ms);
            t.last_ns = now_ns;
            out.push(t.record.clone());
        }
    }

    /// The owner wrote its own objects again: a flapping cycle, or a repair after a mass flush.
    fn handle_restores(
        &mut self,
        netns: u32,
        actor: &str,
        restored: &[Restore],
        now_ns: i128,
        out: &mut Vec<IncidentRecord>,
    ) {
        if restored.is_empty() {
            return;
        }
        let seqs: Vec<u64> = restored.iter().map(|r| r.seq).collect();
        // Mass flush repairs; a mass flush every owner repaired is resolved.
        let mut resolved: Vec<String> = Vec::new();
        for (id, t) in self.incidents.iter_mut() {
            let since = t.since_ns;
            let Some(o) = unrepaired_owner(t, netns, actor) else {
                continue;
            };
            if restored.iter().any(|r| o.chains.contains(&r.key.3)) {
                o.repaired = true;
                o.repair_ms = Some(((now_ns - since).max(0) / NS_PER_MS) as u64);
                o.repaired_by = Some(actor.to_string());
                let all = t.record.owners.iter().all(|o| o.repaired);
                t.record.state = if all {
                    resolved.push(id.clone());
                    IncidentState::Resolved
                } else {
                    IncidentState::Update
                };
                t.record.time = rfc3339_ns(now_ns);
                t.record.summary = mass_summary(&t.record);
                add_events(&mut t.record, &seqs);
                t.last_ns = now_ns;
                out.push(t.record.clone());
            }
        }
        for id in resolved {
            self.incidents.remove(&id);
            self.sweeps
                .retain(|_, s| s.incident.as_deref() != Some(id.as_str()));
        }
        // Flapping cycles: every conflict where this owner had something undone.
        let keys: Vec<ConflictKey> = self
            .conflicts
            .iter()
            .filter(|(k, c)| k.netns == netns && k.owner == actor && c.pending)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let window = self.cfg.flap_window_ns;
            let threshold = self.cfg.flap_cycles;
            let Some(c) = self.conflicts.get_mut(&key) else {
                continue;
            };
            c.pending = false;
            c.cycles.push(now_ns);
            c.cycles.retain(|&t| now_ns - t <= window);
            c.total_cycles += 1;
            c.last_ns = now_ns;
            let total = c.total_cycles;
            if let Some(id) = c.flapping.clone() {
                if let Some(t) = self.incidents.get_mut(&id) {
                    add_events(&mut t.record, &seqs);
                    t.record.cycles = Some(total);
                    t.record.last = Some(rfc3339_ns(now_ns));
                    t.record.time = rfc3339_ns(now_ns);
                    t.record.state = IncidentState::Update;
                    t.record.summary = flap_summary(&t.record);
                    t.last_ns = now_ns;
                    out.push(t.record.clone());
                }
                continue;
            }
            if c.cycles.len() as u32 >= threshold {
                // The conflict's earlier incidents become this one.
                let earlier: Vec<String> = c.open.drain().map(|(_, id)| id).collect();
                let mut events = Vec::new();
                let mut chains = BTreeSet::new();
                let mut base: Option<IncidentRecord> = None;
                let mut absorbed = Vec::new();
                for id in &earlier {
                    if let Some(t) = self.incidents.remove(id) {
                        events.extend(t.record.events.iter().copied());
                        chains.extend(t.record.chains.iter().cloned());
                        if !t.record.state.is_final() {
                            absorbed.push(t.record.clone());
                        }
                        if base.is_none() {
                            base = Some(t.record);
                        }
                    }
                }
                let Some(mut r) = base else { continue };
                events.extend(seqs.iter().copied());
                events.sort_unstable();
                events.dedup();
                r.id = format!(
                    "flapping-{}-{}",
                    netns,
                    events.first().copied().unwrap_or_default()
                );
                r.kind = IncidentKind::Flapping;
                r.severity = Severity::Critical;
                r.state = IncidentState::Open;
                r.time = rfc3339_ns(now_ns);
                r.events = events;
                r.chains = chains.into_iter().collect();
                r.cycles = Some(total);
                r.last = Some(rfc3339_ns(now_ns));
                r.rule = None;
                r.was = None;
                r.lost = Vec::new();
                trim_events(&mut r);
                r.summary = flap_summary(&r);
                r.owners = Vec::new();
                r.merged_into = None;
                let since_ns = parse_rfc3339_ns(&r.since).unwrap_or(now_ns);
                if let Some(c) = self.conflicts.get_mut(&key) {
                    c.flapping = Some(r.id.clone());
                }
                self.incidents
                    .insert(r.id.clone(), Tracked::new(r.clone(), since_ns, now_ns));
                // The conflict's incidents still open end here, pointing at the loop.
                for mut a in absorbed {
                    a.state = IncidentState::Resolved;
                    a.time = rfc3339_ns(now_ns);
                    a.merged_into = Some(r.id.clone());
                    a.summary = format!(
                        "Part of {}: {} and {} undo each other in a loop; that incident follows it.",
                        r.id,
                        a.actors.join("/"),
                        a.owner
                    );
                    out.push(a);
                }
                out.push(r);
            }
        }
    }

    /// Writes the kernel refused: named in an open mass flush of the writer's own chains.
    fn note_failures(
        &mut self,
        netns: u32,
        actor: &str,
        failed: &[&ChangeRecord],
        now_ns: i128,
        out: &mut Vec<IncidentRecord>,
    ) {
        for t in self.incidents.values_mut() {
            let Some(o) = unrepaired_owner(t, netns, actor) else {
                continue;
            };
            let f = failed[0];
            o.failed = Some(format!(
                "{} {} {} at {}: {}",
                f.op,
                f.table,
                f.chain.as_deref().unwrap_or_default(),
                f.time,
                f.result
            ));
            t.record.state = IncidentState::Update;
            t.record.time = f.time.clone();
            t.record.summary = mass_summary(&t.record);
            add_events(
                &mut t.record,
                &failed.iter().map(|c| c.seq).collect::<Vec<_>>(),
            );
            t.last_ns = now_ns;
            out.push(t.record.clone());
        }
    }

    fn check_split(
        &mut self,
        netns: u32,
        owner: &str,
        now_ns: i128,
        seqs: &[u64],
        out: &mut Vec<IncidentRecord>,
    ) {
        let Some(net) = self.nets.get(&netns) else {
            return;
        };
        let mut legacy = BTreeSet::new();
        let mut nft = BTreeSet::new();
        let mut sample: Option<(Family, String)> = None;
        for (k, info) in &net.objs {
            if info.is_set {
                continue;
            }
            if self.owned_by(&k.3, info, owner) {
                if k.0 == Backend::Legacy {
                    legacy.insert(k.3.clone());
                    sample.get_or_insert((k.1, k.2.clone()));
                } else if k.0 == Backend::Nft && is_iptables_nft_table(k.1, &k.2) {
                    nft.insert(k.3.clone());
                }
            }
        }
        let key = (netns, owner.to_string());
        let split = !legacy.is_empty() && !nft.is_empty();
        match (split, self.splits.get(&key).cloned()) {
            (true, None) => {
                let (family, table) = sample.unwrap_or((Family::Ip, String::new()));
                let last_backend = self.last_backend.get(&key).copied();
                let first_seq = seqs.first().copied().unwrap_or_default();
                let mut chains: Vec<String> = legacy.union(&nft).cloned().collect();
                chains.sort();
                let time = rfc3339_ns(now_ns);
                let mut r = IncidentRecord {
                    id: format!("split_brain-{netns}-{first_seq}-{owner}"),
                    time: time.clone(),
                    since: time,
                    state: IncidentState::Open,
                    kind: IncidentKind::SplitBrain,
                    severity: Severity::Warning,
                    netns,
                    netns_name: net.name.clone(),
                    node: None,
                    backend: last_backend.unwrap_or(Backend::Nft),
                    family,
                    table,
                    chains,
                    owner: owner.to_string(),
                    actors: vec![owner.to_string()],
                    events: seqs.to_vec(),
                    summary: String::new(),
                    cycles: None,
                    last: None,
                    rule: None,
                    was: None,
                    lost: Vec::new(),
                    owners: Vec::new(),
                    tables: Vec::new(),
                    merged_into: None,
                    backends: Some(SplitBackends {
                        legacy: legacy.into_iter().collect(),
                        nft: nft.into_iter().collect(),
                    }),
                    last_backend,
                };
                trim_events(&mut r);
                r.summary = split_summary(&r);
                self.splits.insert(key, r.id.clone());
                self.incidents
                    .insert(r.id.clone(), Tracked::new(r.clone(), now_ns, now_ns));
                out.push(r);
            }
            (false, Some(id)) => {
                self.splits.remove(&key);
                if let Some(mut t) = self.incidents.remove(&id) {
                    t.record.state = IncidentState::Resolved;
                    t.record.time = rfc3339_ns(now_ns);
                    add_events(&mut t.record, seqs);
                    t.record.summary = format!(
                        "{owner}'s chains now live in one backend only; the split brain is over."
                    );
                    out.push(t.record);
                }
            }
            _ => {}
        }
    }

    /// When the next window expires (event-time ns), if anything waits for one.
    pub fn next_deadline(&self) -> Option<i128> {
        let mut next: Option<i128> = None;
        let mut consider = |t: i128| next = Some(next.map_or(t, |n: i128| n.min(t)));
        for t in self.incidents.values() {
            match t.record.kind {
                IncidentKind::Flapping => consider(t.last_ns + self.cfg.flap_window_ns),
                IncidentKind::MassFlush => consider(t.since_ns + self.cfg.repair_within_ns),
                IncidentKind::SplitBrain => {}
                _ if t.record.state.is_final() => consider(t.last_ns + self.cfg.flap_window_ns),
                _ => consider(t.undone_ns + self.cfg.repair_within_ns),
            }
        }
        for c in self.conflicts.values() {
            consider(c.last_ns + self.cfg.flap_window_ns);
        }
        for s in self.sweeps.values() {
            if s.incident.is_none() {
                consider(s.first_ns + self.cfg.mass_window_ns);
            }
        }
        next
    }

    /// Close what its window ended, and forget what no longer matters. `now_ns`: event time.
    pub fn tick(&mut self, now_ns: i128) -> Vec<IncidentRecord> {
        let mut out = Vec::new();
        let flap = self.cfg.flap_window_ns;
        let repair = self.cfg.repair_within_ns;
        let mut ended: Vec<String> = Vec::new();
        for (id, t) in &self.incidents {
            let done = match t.record.kind {
                IncidentKind::Flapping => now_ns - t.last_ns > flap,
                IncidentKind::MassFlush => now_ns - t.since_ns > repair,
                IncidentKind::SplitBrain => false,
                // Resolved: kept for a window so that a repeat reopens it, then forgotten.
                _ if t.record.state.is_final() => now_ns - t.last_ns > flap,
                _ => now_ns - t.undone_ns > repair,
            };
            if done {
                ended.push(id.clone());
            }
        }
        ended.sort();
        for id in ended {
            let Some(mut t) = self.incidents.remove(&id) else {
                continue;
            };
            match t.record.kind {
                IncidentKind::Flapping => {
                    // Stopped with the owner's objects in place (its restore came last), or
                    // with them undone.
                    let undone = self
                        .conflicts
                        .values()
                        .any(|c| c.flapping.as_deref() == Some(id.as_str()) && c.pending);
                    t.record.state = if undone {
                        IncidentState::Expired
                    } else {
                        IncidentState::Resolved
                    };
                    t.record.time = rfc3339_ns(now_ns);
                    let end = if undone {
                        format!(
                            "{} undid them last: they are still missing; restart {}.",
                            t.record.actors.join("/"),
                            t.record.owner
                        )
                    } else {
                        format!(
                            "{} restored them last; check that it does not come back after the \
                             next restart of either.",
                            t.record.owner
                        )
                    };
                    t.record.summary = format!(
                        "The loop between {} and {} over {} stopped ({} cycles); {end}",
                        t.record.owner,
                        t.record.actors.join(", "),
                        list(&t.record.chains),
                        t.record.cycles.unwrap_or_default(),
                    );
                    out.push(t.record);
                }
                IncidentKind::MassFlush => {
                    t.record.state = IncidentState::Expired;
                    t.record.time = rfc3339_ns(now_ns);
                    t.record.summary = mass_summary(&t.record);
                    out.push(t.record);
                    self.sweeps
                        .retain(|_, s| s.incident.as_deref() != Some(id.as_str()));
                }
                // A resolved foreign_*, unhooked or rule_drift was said; now it is forgotten.
                _ if t.record.state.is_final() => {}
                _ => {
                    t.record.state = IncidentState::Expired;
                    t.record.time = rfc3339_ns(now_ns);
                    t.record.summary = format!(
                        "Not repaired within {} s: {}",
                        repair / 1_000_000_000,
                        summary(&t.record, &[])
                    );
                    out.push(t.record);
                }
            }
        }
        self.conflicts
            .retain(|_, c| now_ns - c.last_ns <= flap || c.flapping.is_some());
        for c in self.conflicts.values_mut() {
            if let Some(id) = &c.flapping {
                if !self.incidents.contains_key(id) {
                    c.flapping = None;
                }
            }
            c.open.retain(|_, id| self.incidents.contains_key(id));
        }
        let mass = self.cfg.mass_window_ns;
        self.sweeps
            .retain(|_, s| s.incident.is_some() || now_ns - s.first_ns <= mass);
        out
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
                let (owner, how, writers) = match &info.claim {
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
                    table: k.2.clone(),
                    chain: k.3.clone(),
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

fn now_ns() -> i128 {
    time::OffsetDateTime::now_utc().unix_timestamp_nanos()
}

fn rfc3339_ns(ns: i128) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(ns)
        .map(rfc3339)
        .unwrap_or_default()
}

/// In an open `mass_flush` of this namespace, the entry of `owner` while it has not repaired.
fn unrepaired_owner<'a>(t: &'a mut Tracked, netns: u32, owner: &str) -> Option<&'a mut OwnerHit> {
    if t.record.kind != IncidentKind::MassFlush
        || t.record.netns != netns
        || t.record.state.is_final()
    {
        return None;
    }
    t.record
        .owners
        .iter_mut()
        .find(|o| o.owner == owner && !o.repaired)
}

fn add_events(r: &mut IncidentRecord, seqs: &[u64]) {
    for &s in seqs {
        if !r.events.contains(&s) {
            r.events.push(s);
        }
    }
    trim_events(r);
}

fn trim_events(r: &mut IncidentRecord) {
    if r.events.len() > MAX_EVENTS {
        let cut = r.events.len() - MAX_EVENTS;
        r.events.drain(..cut);
    }
}

fn actors_of(actor: &str, first: &ChangeRecord) -> Vec<String> {
    let mut actors = vec![actor.to_string()];
    let p: &ProcessInfo = &first.process;
    if p.actor != actor && p.actor != "unknown" {
        actors.push(p.actor.clone());
    }
    if let Some(u) = &p.unit {
        if !actors.contains(u) {
            actors.push(u.clone());
        }
    }
    actors
}

fn new_incident(
    kind: IncidentKind,
    netns: u32,
    hits: &[Hit],
    actor: &str,
    first: &ChangeRecord,
) -> IncidentRecord {
    let h = &hits[0];
    let mut chains: Vec<String> = hits.iter().map(|h| h.chain.clone()).collect();
    chains.sort();
    chains.dedup();
    let mut events: Vec<u64> = hits.iter().map(|h| h.seq).collect();
    events.sort_unstable();
    events.dedup();
    let severity = match kind {
        IncidentKind::Unhooked | IncidentKind::MassFlush | IncidentKind::Flapping => {
            Severity::Critical
        }
        _ => Severity::Warning,
    };
    let mut r = IncidentRecord {
        id: format!(
            "{}-{}-{}",
            kind.as_str(),
            netns,
            events.first().copied().unwrap_or_default()
        ),
        time: first.time.clone(),
        since: first.time.clone(),
        state: IncidentState::Open,
        kind,
        severity,
        netns,
        netns_name: first.netns_name.clone(),
        node: None,
        backend: h.backend,
        family: h.family,
        table: h.table.clone(),
        chains,
        owner: h.owner.clone(),
        actors: actors_of(actor, first),
        events,
        summary: String::new(),
        cycles: None,
        last: None,
        rule: None,
        was: None,
        lost: Vec::new(),
        owners: Vec::new(),
        tables: Vec::new(),
        merged_into: None,
        backends: None,
        last_backend: None,
    };
    if kind != IncidentKind::MassFlush {
        r.owners = vec![OwnerHit {
            owner: h.owner.clone(),
            chains: r.chains.clone(),
            repaired: false,
            repair_ms: None,
            repaired_by: None,
            failed: None,
        }];
    }
    add_tables(&mut r, hits);
    trim_events(&mut r);
    r
}

/// Every `family table` the hits touched, listed when there is more than one.
fn add_tables(r: &mut IncidentRecord, hits: &[Hit]) {
    let mut all: BTreeSet<String> = r.tables.iter().cloned().collect();
    all.insert(format!("{} {}", r.family, r.table));
    for h in hits {
        all.insert(format!("{} {}", h.family, h.table));
    }
    r.tables = if all.len() > 1 {
        all.into_iter().collect()
    } else {
        Vec::new()
    };
}

fn update_with_hits(r: &mut IncidentRecord, hits: &[Hit], actor: &str, first: &ChangeRecord) {
    r.state = IncidentState::Update;
    r.time = first.time.clone();
    for h in hits {
        if !r.chains.contains(&h.chain) {
            r.chains.push(h.chain.clone());
        }
    }
    r.chains.sort();
    if let Some(o) = r.owners.first_mut() {
        o.chains.clone_from(&r.chains);
    }
    add_tables(r, hits);
    for a in actors_of(actor, first) {
        if !r.actors.contains(&a) {
            r.actors.push(a);
        }
    }
    add_events(r, &hits.iter().map(|h| h.seq).collect::<Vec<_>>());
}

fn all_chains(owners: &[OwnerHit]) -> Vec<String> {
    let mut v: Vec<String> = owners.iter().flat_map(|o| o.chains.clone()).collect();
    v.sort();
    v.dedup();
    v
}

/// `A, B, C and 4 more`.
fn list(items: &[String]) -> String {
    const SHOWN: usize = 4;
    if items.len() <= SHOWN {
        items.join(", ")
    } else {
        format!(
            "{} and {} more",
            items[..SHOWN].join(", "),
            items.len() - SHOWN
        )
    }
}

fn where_(r: &IncidentRecord) -> String {
    let ns = r.netns_name.clone().unwrap_or_else(|| r.netns.to_string());
    if r.tables.len() > 1 {
        format!("{} tables {} (netns {ns})", r.backend, r.tables.join(", "))
    } else {
        format!("{} {} table {} (netns {ns})", r.backend, r.family, r.table)
    }
}

/// The last line of a foreign_*, unhooked or rule_drift incident whose objects are back.
fn resolved_summary(r: &IncidentRecord, by: &str, ms: u64) -> String {
    let what = match r.kind {
        IncidentKind::ForeignDelete => "re-created",
        IncidentKind::ForeignFlush => "refilled",
        IncidentKind::Unhooked => "hooked in again",
        _ => "rewritten by their owner",
    };
    format!(
        "Resolved: {}'s {} {what} by {by} after {ms} ms, in the {}. {} did it: if it happens \
         again, make only one component manage these chains.",
        r.owner,
        list(&r.chains),
        where_(r),
        r.actors.join("/"),
    )
}

fn summary(r: &IncidentRecord, hits: &[Hit]) -> String {
    let by = r.actors.join("/");
    let owner = &r.owner;
    let chains = list(&r.chains);
    let n = r.chains.len();
    let plural = if n == 1 { "chain" } else { "chains" };
    match r.kind {
        IncidentKind::ForeignDelete => format!(
            "{by} deleted {owner}'s {plural} {chains} in the {}; {owner} loses its rules until it \
             re-creates them, and will fight {by} if both keep running: make only one of them \
             manage these chains.",
            where_(r)
        ),
        IncidentKind::ForeignFlush => format!(
            "{by} flushed {owner}'s {plural} {chains} in the {}; {owner}'s rules are gone until \
             it resyncs: find why {by} flushes chains it does not own (a firewall reload or a \
             save/restore of the whole table) and exclude {owner}'s chains from it.",
            where_(r)
        ),
        IncidentKind::Unhooked => format!(
            "{by} removed the jump into {owner}'s {plural} {chains} in the {}: the chains still \
             exist but no packet reaches them; restore the jump (restart {owner}) and stop {by} \
             from rewriting the built-in chains.",
            where_(r)
        ),
        IncidentKind::RuleDrift => {
            let what = hits
                .iter()
                .filter_map(|h| h.drift.as_ref())
                .map(|d| d.what.clone())
                .next()
                .unwrap_or_default();
            let danger = if r.severity == Severity::Critical {
                " This DROP/REJECT rule now matches more than before and may drop all traffic."
            } else {
                ""
            };
            format!(
                "{by} rewrote {owner}'s rule in {chains} ({}): it {what}.{danger} Restore the rule \
                 (restart {owner}) and upgrade or reconfigure {by} so that its save/restore keeps \
                 every match.",
                where_(r)
            )
        }
        _ => String::new(),
    }
}

fn flap_summary(r: &IncidentRecord) -> String {
    format!(
        "{} and {} keep undoing each other on {} in the {}: {} cycles so far, last at {}; two \
         components manage the same chains: disable one of them (e.g. kube-proxy alongside a CNI \
         that replaces it).",
        r.actors.join("/"),
        r.owner,
        list(&r.chains),
        where_(r),
        r.cycles.unwrap_or_default(),
        r.last.as_deref().unwrap_or(&r.time)
    )
}

fn mass_summary(r: &IncidentRecord) -> String {
    let mut parts = Vec::new();
    for o in &r.owners {
        let state = match (o.repaired, o.repair_ms, &o.failed) {
            (true, Some(ms), _) => format!("repaired after {ms} ms"),
            (_, _, Some(f)) => format!("NOT repaired (its re-creation failed: {f})"),
            _ if r.state.is_final() => "NEVER repaired".to_string(),
            _ => "not repaired yet".to_string(),
        };
        parts.push(format!(
            "{} ({} {}: {state})",
            o.owner,
            o.chains.len(),
            if o.chains.len() == 1 {
                "chain"
            } else {
                "chains"
            }
        ));
    }
    let never: Vec<&str> = r
        .owners
        .iter()
        .filter(|o| !o.repaired)
        .map(|o| o.owner.as_str())
        .collect();
    let fix = if r.state.is_final() && !never.is_empty() {
        format!(
            " Restart {} to re-create its chains, and make {} keep other components' chains \
             (e.g. do not flush the whole ruleset on reload).",
            never.join(", "),
            r.actors.join("/")
        )
    } else {
        format!(
            " A reload that flushes everything (systemctl restart iptables, firewall reload) \
             wipes other components' chains: make {} leave them alone.",
            r.actors.join("/")
        )
    };
    format!(
        "{} flushed or deleted the chains of {} owners at once in the {}: {}.{fix}",
        r.actors.join("/"),
        r.owners.len(),
        where_(r),
        parts.join("; ")
    )
}

fn split_summary(r: &IncidentRecord) -> String {
    let b = r.backends.as_ref();
    let legacy = b.map(|b| list(&b.legacy)).unwrap_or_default();
    let nft = b.map(|b| list(&b.nft)).unwrap_or_default();
    let last = r
        .last_backend
        .map(|b| format!("; it wrote {b} last"))
        .unwrap_or_default();
    format!(
        "{}'s chains live in both iptables backends of netns {} (legacy: {legacy}; nft: {nft}){last}: \
         tools that detect the backend from these chains may pick the wrong one; delete the stale \
         set (usually the legacy one) and run every component with the same iptables mode.",
        r.owner,
        r.netns_name.clone().unwrap_or_else(|| r.netns.to_string()),
    )
}

#[cfg(test)]
mod tests;
