//! Putting back what a foreign wipe took (`--restore OWNER,...`): opt-in, the one place observer
//! writes to the kernel.
//!
//! An incident (`foreign_delete`, `foreign_flush`, `unhooked`, `mass_flush`, `rule_drift`) that
//! takes chains or jumps from an owner on the list makes a job for that owner in that
//! namespace, due `--restore-after` later. When it is due, and the owner has not repaired its
//! chains itself, [`plan`] says what to write from what the [`keeper`] kept of the chains before
//! the wipe and what the ruleset holds now; the engine's shell writes it through the backend's
//! own tool, in the namespace, as one atomic write, and says how it went as a line of the
//! incident (`restore`). The writes themselves come back as change lines with `restore` set,
//! which count as the owner's repair and never raise an incident.
//!
//! Guards: nothing is written over content that is not what was lost; an owner's own changes
//! raise no incident, so they are never undone; and after `max` restores of one owner in one
//! namespace within `window`, observer stops and says so (`gave_up`).

pub mod apply;
pub mod ipsets;
pub mod keeper;
pub mod plan;
pub mod record;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use crate::attribution::ProcessInfo;
use crate::output::line::{IncidentKind, IncidentState};
use crate::output::{ChangeLine, IncidentLine};
use crate::timestamp::Timestamp;

pub use crate::output::restore::{Outcome, RestoreNote};
use keeper::Keeper;
use plan::{Decision, Script, Tool};

/// Which owners to restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Which {
    All,
    Only(Vec<String>),
}

impl Which {
    /// `all`, or a comma-separated list of owners.
    pub fn parse(s: &str) -> Result<Which, String> {
        let names: Vec<String> = s
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect();
        if names.is_empty() {
            return Err("names no owner: give `all` or owners such as kubelet,cni-plugins".into());
        }
        if names.iter().any(|n| n == "all") {
            return Ok(Which::All);
        }
        Ok(Which::Only(names))
    }

    pub fn covers(&self, owner: &str) -> bool {
        match self {
            Which::All => true,
            Which::Only(l) => l.iter().any(|o| o == owner),
        }
    }

    /// The names that are not among `known`.
    pub fn unknown<'a>(&'a self, known: &[String]) -> Vec<&'a str> {
        match self {
            Which::All => Vec::new(),
            Which::Only(l) => l
                .iter()
                .filter(|n| !known.contains(n))
                .map(String::as_str)
                .collect(),
        }
    }
}

/// `--restore` and its guards.
#[derive(Debug, Clone)]
pub struct RestoreConfig {
    pub owners: Which,
    /// How long an owner has to repair its chains itself.
    pub after: Duration,
    /// Say what would be written; write nothing.
    pub dry_run: bool,
    /// At most this many restores of one owner in one namespace within `window`.
    pub max: u32,
    pub window: Duration,
    /// Only in this namespace (`observer tail --netns`): a tail that shows one namespace writes
    /// in no other.
    pub netns: Option<u32>,
}

impl RestoreConfig {
    pub fn new(owners: Which, after: Duration, dry_run: bool) -> RestoreConfig {
        RestoreConfig {
            owners,
            after,
            dry_run,
            max: 3,
            window: Duration::from_secs(300),
            netns: None,
        }
    }
}

/// Incidents whose objects a restore can put back.
pub fn restorable(kind: IncidentKind) -> bool {
    matches!(
        kind,
        IncidentKind::ForeignDelete
            | IncidentKind::ForeignFlush
            | IncidentKind::Unhooked
            | IncidentKind::MassFlush
            | IncidentKind::RuleDrift
    )
}

/// Each owner an incident takes objects from, with the chains it takes: the owners it names
/// (every incident but `split_brain` and `flapping` does), or else its owner and chains.
pub fn owners_hit(i: &IncidentLine) -> Vec<(&str, Vec<&str>)> {
    if i.owners.is_empty() {
        return vec![(
            i.owner.as_str(),
            i.chains.iter().map(String::as_str).collect(),
        )];
    }
    i.owners
        .iter()
        .map(|o| {
            (
                o.owner.as_str(),
                o.chains.iter().map(String::as_str).collect(),
            )
        })
        .collect()
}

/// One owner's pending restore in one namespace: the incidents that took its objects.
#[derive(Debug)]
struct Job {
    due: Timestamp,
    /// When the loss began: the first incident's start, or the change that took again what
    /// observer had put back (what `after_ms` counts from).
    since: Timestamp,
    /// The last line of each incident, by id.
    incidents: BTreeMap<String, IncidentLine>,
}

/// What the shell is to do now.
#[derive(Debug)]
pub enum Step {
    /// Write these scripts in the namespace (one per tool), then call [`Restorer::written`].
    Write(Pending),
    /// Nothing to write: these incident lines say why.
    Say(Vec<IncidentLine>),
}

/// A restore being written.
#[derive(Debug)]
pub struct Pending {
    pub netns: u32,
    pub owner: String,
    pub scripts: Vec<Script>,
    incidents: Vec<IncidentLine>,
    since: Timestamp,
    /// Lines to give before the write's (incidents of the job that were repaired meanwhile).
    pub said: Vec<IncidentLine>,
}

impl Pending {
    /// The incident the writes are tagged with (`restore` on their change lines).
    pub fn incident_id(&self) -> &str {
        self.incidents.first().map_or("", |i| i.id.as_str())
    }
}

pub struct Restorer {
    cfg: RestoreConfig,
    keeper: Keeper,
    /// The ipsets of each namespace with their members, as the last `ipset save` printed them.
    ipsets: ipsets::Ipsets,
    jobs: BTreeMap<(u32, String), Job>,
    /// When each owner was restored in each namespace, within the window.
    history: HashMap<(u32, String), VecDeque<Timestamp>>,
    /// What observer put back for each owner in each namespace, and the incident line a
    /// later wipe of it is told on (the `flapping` one, once the loop is one).
    put_back: HashMap<(u32, String), PutBack>,
    /// Legacy tables held at chain level (`--rule-level-limit`), by namespace, family and
    /// name: observer does not hold their rules, so it never writes them.
    chain_level: std::collections::HashSet<(u32, crate::ruleset::Family, String)>,
    /// Namespaces whose nftables ruleset is held at chain level: never written.
    nft_chain_level: std::collections::HashSet<u32>,
}

#[derive(Debug)]
struct PutBack {
    chains: Vec<String>,
    line: IncidentLine,
    /// observer said it stopped: it says so once.
    gave_up: bool,
}

impl Restorer {
    pub fn new(cfg: RestoreConfig) -> Restorer {
        // What a change took is needed until its job is due, and a little after.
        let keep = cfg.after * 2 + Duration::from_secs(30);
        Restorer {
            cfg,
            keeper: Keeper::new(keep),
            ipsets: ipsets::Ipsets::new(keep),
            jobs: BTreeMap::new(),
            history: HashMap::new(),
            put_back: HashMap::new(),
            chain_level: Default::default(),
            nft_chain_level: Default::default(),
        }
    }

    pub fn dry_run(&self) -> bool {
        self.cfg.dry_run
    }

    /// Is namespace `netns` one to restore in?
    fn in_scope(&self, netns: u32) -> bool {
        self.cfg.netns.is_none_or(|n| n == netns)
    }

    pub fn seed(
        &mut self,
        netns: u32,
        backend: crate::ruleset::Backend,
        tables: crate::forensics::model::Tables,
    ) {
        self.keeper.seed(netns, backend, tables);
    }

    /// `ipset save`'s text in `netns` at `now` (after an ipset command there, or when it starts
    /// being watched). `Err` when it is too big to keep (said once).
    pub fn ipsets_saved(
        &mut self,
        netns: u32,
        text: &str,
        now: Timestamp,
    ) -> Result<(), ipsets::TooBig> {
        self.ipsets.saved(netns, text, now)
    }

    /// Legacy table `table` of `netns` is held at chain level (`yes`), or at rule level again.
    pub fn held_at_chain_level(
        &mut self,
        netns: u32,
        family: crate::ruleset::Family,
        table: &str,
        yes: bool,
    ) {
        let key = (netns, family, table.to_string());
        if yes {
            self.chain_level.insert(key);
        } else {
            self.chain_level.remove(&key);
        }
    }

    /// Namespace `netns`'s nftables ruleset is held at chain level (until observer restarts).
    pub fn nft_held_at_chain_level(&mut self, netns: u32) {
        self.nft_chain_level.insert(netns);
    }

    pub fn forget(&mut self, netns: u32) {
        self.chain_level.retain(|(n, _, _)| *n != netns);
        self.nft_chain_level.remove(&netns);
        self.keeper.forget(netns);
        self.ipsets.forget(netns);
        self.jobs.retain(|(n, _), _| *n != netns);
        self.history.retain(|(n, _), _| *n != netns);
        self.put_back.retain(|(n, _), _| *n != netns);
    }

    /// One transaction's change lines. One that takes again what observer put back is a job of
    /// its own: once the correlator sees a loop, it tells of it on the `flapping` incident, not
    /// with a new incident of each wipe. One by the owner itself (`writes_as` the owner: the
    /// owner or a writer of its) is the owner's own change, never undone: a CNI plugin's DEL
    /// removes the chains observer put back, and they stay removed.
    pub fn txn(&mut self, lines: &[ChangeLine], writes_as: &dyn Fn(&ProcessInfo, &str) -> bool) {
        let took = self.keeper.txn(lines);
        let Some(first) = lines.first() else { return };
        if took.is_empty() || first.restore.is_some() || !self.in_scope(first.netns) {
            return;
        }
        let seqs: Vec<u64> = lines.iter().map(|c| c.seq).collect();
        let after = self.cfg.after;
        for ((netns, owner), pb) in &mut self.put_back {
            if *netns != first.netns || !took.iter().any(|c| pb.chains.contains(c)) {
                continue;
            }
            if writes_as(&first.process, owner) {
                // The owner's chains are its own again: a later wipe is a new incident.
                pb.chains.retain(|c| !took.contains(c));
                continue;
            }
            let mut line = pb.line.clone();
            line.events.extend(&seqs);
            line.time = first.time;
            if line.actors.is_empty() {
                line.actors.push(first.process.actor.clone());
            }
            pb.line = line.clone();
            let job = self
                .jobs
                .entry((*netns, owner.clone()))
                .or_insert_with(|| Job {
                    due: first.time.saturating_add(after),
                    since: first.time,
                    incidents: BTreeMap::new(),
                });
            job.incidents.insert(line.id.clone(), line);
        }
    }

    /// An incident line: a job for each listed owner it takes objects from; an owner that
    /// repaired them is left alone.
    pub fn incident(&mut self, i: &IncidentLine) {
        if i.kind == IncidentKind::Flapping {
            if let Some(pb) = self.put_back.get_mut(&(i.netns, i.owner.clone())) {
                let events = std::mem::take(&mut pb.line.events);
                pb.line = i.clone();
                pb.line.events.extend(events);
            }
            return;
        }
        if !restorable(i.kind) || !self.in_scope(i.netns) {
            return;
        }
        for (owner, _) in owners_hit(i) {
            if !self.cfg.owners.covers(owner) {
                continue;
            }
            let key = (i.netns, owner.to_string());
            let gone = i.state.is_final() || i.merged_into.is_some();
            match self.jobs.get_mut(&key) {
                Some(job) => {
                    job.incidents.insert(i.id.clone(), i.clone());
                }
                None if !gone => {
                    let mut incidents = BTreeMap::new();
                    incidents.insert(i.id.clone(), i.clone());
                    self.jobs.insert(
                        key,
                        Job {
                            due: i.time.saturating_add(self.cfg.after),
                            since: i.since,
                            incidents,
                        },
                    );
                }
                None => {}
            }
        }
    }

    /// When the next job is due.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.jobs.values().map(|j| j.due).min()
    }

    /// The jobs due by `now`, each as what to do.
    pub fn due(&mut self, now: Timestamp) -> Vec<Step> {
        let keys: Vec<(u32, String)> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.due <= now)
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::new();
        for key in keys {
            let Some(job) = self.jobs.remove(&key) else {
                continue;
            };
            out.push(self.step(key, job, now));
        }
        out
    }

    fn step(&mut self, (netns, owner): (u32, String), job: Job, now: Timestamp) -> Step {
        let (repaired, open): (Vec<IncidentLine>, Vec<IncidentLine>) = job
            .incidents
            .into_values()
            .filter(|i| i.merged_into.is_none())
            .partition(|i| owner_repaired(i, &owner));
        let mut said: Vec<IncidentLine> = repaired
            .into_iter()
            .map(|i| {
                note_line(&i, now, note(Outcome::SkippedOwnerRepaired, &owner), |o| {
                    format!("{o} repaired its chains itself: observer did not restore them")
                })
            })
            .collect();
        if open.is_empty() {
            return Step::Say(said);
        }
        let since = job.since;
        // The guard against a fight: `max` restores within the window, then stop.
        let history = self.history.entry((netns, owner.clone())).or_default();
        while history
            .front()
            .is_some_and(|t| now.elapsed_since(*t) > self.cfg.window)
        {
            history.pop_front();
        }
        let full = history.len() as u32 >= self.cfg.max;
        if !full {
            if let Some(pb) = self.put_back.get_mut(&(netns, owner.clone())) {
                pb.gave_up = false;
            }
        }
        if full {
            if let Some(pb) = self.put_back.get_mut(&(netns, owner.clone())) {
                if std::mem::replace(&mut pb.gave_up, true) {
                    return Step::Say(said);
                }
            }
            let wipers = open
                .iter()
                .flat_map(|i| i.actors.iter().cloned())
                .collect::<Vec<_>>()
                .join(", ");
            let n = self.cfg.max;
            let window = humantime::format_duration(self.cfg.window);
            said.extend(open.iter().map(|i| {
                let mut nt = note(Outcome::GaveUp, &owner);
                nt.reason = Some(format!(
                    "restored {n} times within {window}, and {wipers} keeps removing them"
                ));
                note_line(i, now, nt, |o| {
                    format!(
                        "observer stopped restoring: {wipers} keeps removing {o}'s chains \
                         ({n} restores within {window})"
                    )
                })
            }));
            return Step::Say(said);
        }
        // What was lost, table by table, against what is there now.
        let lost = self.keeper.lost(&open, &owner);
        let mut scripts: Vec<Script> = Vec::new();
        let mut conflicts: Vec<String> = Vec::new();
        for l in &lost {
            // Without the kernel saying where nft rules go, the order held for nft chains may
            // not be the kernel's.
            if l.backend == crate::ruleset::Backend::Nft
                && !observer_rules::nftables::rule_positions_told()
            {
                conflicts.push(format!(
                    "this kernel's nf_tables notifications do not say where a rule went \
                     (kernels before 6.1), so the order observer holds for table {} may not be \
                     the kernel's: nothing of it is written",
                    l.table
                ));
                continue;
            }
            if l.backend == crate::ruleset::Backend::Legacy
                && self
                    .chain_level
                    .contains(&(netns, l.family, l.table.clone()))
            {
                conflicts.push(format!(
                    "legacy table {} is held at chain level (it has more rules than \
                     --rule-level-limit or --rule-level-budget leaves for it): observer does not hold its rules, so \
                     nothing of it is written",
                    l.table
                ));
                continue;
            }
            if l.backend == crate::ruleset::Backend::Nft && self.nft_chain_level.contains(&netns) {
                conflicts.push(format!(
                    "the nftables ruleset of this namespace is held at chain level (it has more \
                     rules than --rule-level-limit or --rule-level-budget allows): observer does \
                     not hold its rules, so nothing of table {} is written",
                    l.table
                ));
                continue;
            }
            match plan::plan(l, self.keeper.now(netns, l.backend)) {
                Decision::Write(s) => merge(&mut scripts, s),
                Decision::Repaired => {}
                Decision::Conflict(why) | Decision::Unsupported(why) => conflicts.push(why),
            }
        }
        if !conflicts.is_empty() {
            said.extend(open.iter().map(|i| {
                let mut nt = note(Outcome::RefusedConflict, &owner);
                nt.reason = Some(conflicts.join("; "));
                note_line(i, now, nt, |o| {
                    format!(
                        "observer did not restore {o}'s chains: {}",
                        conflicts.join("; ")
                    )
                })
            }));
            return Step::Say(said);
        }
        // The ipsets the iptables scripts' rules name that went with the chains, created again
        // first (the rules cannot be written without them).
        let named = scripts
            .iter()
            .filter(|s| matches!(s.tool, Tool::IptablesLegacy(_) | Tool::IptablesNft(_)))
            .flat_map(|s| ipsets::named_in(&s.text));
        if let Some(sets) = self.ipsets.script(netns, named) {
            scripts.insert(0, sets);
        }
        if scripts.is_empty() {
            said.extend(open.iter().map(|i| {
                note_line(i, now, note(Outcome::SkippedOwnerRepaired, &owner), |o| {
                    format!("{o}'s chains are back as they were: observer did not restore them")
                })
            }));
            return Step::Say(said);
        }
        Step::Write(Pending {
            netns,
            owner,
            scripts,
            incidents: open,
            since,
            said,
        })
    }

    /// A pending restore was written (or, in a dry run, not): its lines. `results`: one per
    /// script, `Ok` or what the tool said.
    pub fn written(
        &mut self,
        p: Pending,
        results: Vec<Result<(), String>>,
        now: Timestamp,
    ) -> Vec<IncidentLine> {
        let failed: Vec<String> = results.iter().filter_map(|r| r.clone().err()).collect();
        let outcome = if self.cfg.dry_run {
            Outcome::DryRun
        } else if failed.is_empty() {
            Outcome::Restored
        } else {
            Outcome::Failed
        };
        let chains: Vec<String> = p.scripts.iter().flat_map(|s| s.chains.clone()).collect();
        let sets: Vec<String> = p.scripts.iter().flat_map(|s| s.sets.clone()).collect();
        if outcome == Outcome::Restored {
            let key = (p.netns, p.owner.clone());
            self.history.entry(key.clone()).or_default().push_back(now);
            let pb = self.put_back.entry(key).or_insert_with(|| PutBack {
                chains: Vec::new(),
                line: p.incidents[0].clone(),
                gave_up: false,
            });
            for c in chains
                .iter()
                .chain(p.incidents.iter().flat_map(|i| i.chains.iter()))
            {
                if !pb.chains.contains(c) {
                    pb.chains.push(c.clone());
                }
            }
        }
        let jumps: usize = p.scripts.iter().map(|s| s.jumps).sum();
        let what = what_was_put(&chains, jumps, &sets);
        let after_ms = now.elapsed_since(p.since).as_millis() as u64;
        p.incidents
            .iter()
            .map(|i| {
                let mut nt = note(outcome, &p.owner);
                nt.chains.clone_from(&chains);
                nt.jumps = jumps;
                nt.sets.clone_from(&sets);
                nt.command = Some(
                    p.scripts
                        .iter()
                        .map(|s| s.tool.command())
                        .collect::<Vec<_>>()
                        .join("; "),
                );
                nt.script = Some(p.scripts.iter().map(|s| s.text.as_str()).collect());
                nt.after_ms = Some(after_ms);
                if !failed.is_empty() {
                    nt.reason = Some(failed.join("; "));
                }
                note_line(i, now, nt, |o| match outcome {
                    Outcome::DryRun => format!("observer would restore {o}'s {what} (dry run)"),
                    Outcome::Failed => format!(
                        "observer could not restore {o}'s {what}: {}",
                        failed.join("; ")
                    ),
                    _ => format!("observer restored {o}'s {what} {after_ms} ms after the wipe"),
                })
            })
            .collect()
    }
}

/// One script per tool: the lines of several tables go to one program run.
fn merge(scripts: &mut Vec<Script>, s: Script) {
    match scripts
        .iter_mut()
        .find(|k| k.tool == s.tool && k.tool != Tool::Nft)
    {
        Some(k) => {
            k.text.push_str(&s.text);
            k.chains.extend(s.chains);
            k.jumps += s.jumps;
        }
        None => scripts.push(s),
    }
}

fn what_was_put(chains: &[String], jumps: usize, sets: &[String]) -> String {
    let mut parts = Vec::new();
    if !chains.is_empty() {
        parts.push(format!(
            "{} ({})",
            crate::ruleset::plural(chains.len() as u64, "chain", "chains"),
            chains.join(", ")
        ));
    }
    if jumps > 0 {
        parts.push(crate::ruleset::plural(jumps as u64, "jump", "jumps"));
    }
    if !sets.is_empty() {
        parts.push(format!(
            "{} ({})",
            crate::ruleset::plural(sets.len() as u64, "ipset", "ipsets"),
            sets.join(", ")
        ));
    }
    parts.join(" and ")
}

/// The owner (not someone else: that is looked at against what was lost) wrote its objects
/// back.
fn owner_repaired(i: &IncidentLine, owner: &str) -> bool {
    i.owners
        .iter()
        .any(|o| o.owner == owner && o.repaired && o.repaired_by.as_deref() == Some(owner))
}

fn note(outcome: Outcome, owner: &str) -> RestoreNote {
    RestoreNote {
        outcome,
        owner: owner.to_string(),
        chains: Vec::new(),
        jumps: 0,
        sets: Vec::new(),
        command: None,
        script: None,
        reason: None,
        after_ms: None,
    }
}

/// The incident's line that tells of a restore: its last line, at `now`, with the note.
fn note_line(
    i: &IncidentLine,
    now: Timestamp,
    note: RestoreNote,
    summary: impl Fn(&str) -> String,
) -> IncidentLine {
    let mut l = i.clone();
    l.time = now;
    if !l.state.is_final() {
        l.state = IncidentState::Update;
    }
    l.summary = summary(&note.owner);
    l.restore = Some(note);
    l
}

#[cfg(test)]
mod tests;
