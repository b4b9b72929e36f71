//! Hits become incidents: one conflict per owner and writer, a mass flush when one writer wipes
//! several owners, and the attempts the kernel refused.

use super::*;

/// Where, by whom and when the transaction whose hits are handled was made.
#[derive(Clone, Copy)]
struct Txn<'a> {
    netns: u32,
    actor: &'a str,
    first: &'a ChangeLine,
    now: Timestamp,
}

impl Correlator {
    pub(super) fn handle_hits(
        &mut self,
        netns: u32,
        actor: &str,
        first: &ChangeLine,
        hits: Vec<Hit>,
        now: Timestamp,
        out: &mut Vec<IncidentLine>,
    ) {
        if hits.is_empty() {
            return;
        }
        let txn = Txn {
            netns,
            actor,
            first,
            now,
        };
        let consumed_by_sweep = self.sweep(txn, &hits, out);
        // Everything else, per owner: one conflict each.
        for (owner, hits) in by_owner(hits, consumed_by_sweep) {
            self.conflict(txn, owner, hits, out);
        }
    }

    /// Mass flush: flushes and deletes of several owners by this actor within the window. True
    /// when the actor's sweep is a mass flush, which then holds this transaction's flushes,
    /// deletes and unhooks.
    fn sweep(&mut self, txn: Txn, hits: &[Hit], out: &mut Vec<IncidentLine>) -> bool {
        let Txn {
            netns,
            actor,
            first,
            now,
        } = txn;
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
        if sweeping.is_empty() {
            return false;
        }
        let window = self.cfg.mass_window;
        let sweep = self.sweeps.entry(sweep_key.clone()).or_default();
        end_on_rewipe(sweep, &mut self.incidents, &sweeping, actor, now, out);
        if sweep.incident.is_none() && now.elapsed_since(sweep.first) > window {
            *sweep = Sweep {
                first: now,
                ..Sweep::default()
            };
        }
        sweep.hits.extend(sweeping);
        let owners: BTreeSet<&str> = sweep.hits.iter().map(|h| h.owner.as_str()).collect();
        if owners.len() < 2 && sweep.incident.is_none() {
            return false;
        }
        let hits = sweep.hits.clone();
        let existing = sweep.incident.clone();
        let since = sweep.first;
        let id = self.mass_flush(
            netns,
            actor,
            first,
            &hits,
            existing.clone(),
            (since, now),
            out,
        );
        if let Some(s) = self.sweeps.get_mut(&sweep_key) {
            s.incident = Some(id.clone());
        }
        if existing.is_none() {
            self.merge_into_mass(netns, actor, &hits, since, &id, now, out);
        }
        true
    }

    /// The hits on one owner's objects: added to the conflict's `flapping` loop when there is
    /// one, else one incident per kind, updated while it is open (within the flap window).
    fn conflict(&mut self, txn: Txn, owner: String, hits: Vec<Hit>, out: &mut Vec<IncidentLine>) {
        let now = txn.now;
        let key = ConflictKey {
            netns: txn.netns,
            owner: owner.clone(),
            actor: txn.actor.to_string(),
        };
        let window = self.cfg.flap_window;
        let conflict = self.conflicts.entry(key.clone()).or_default();
        conflict.pending = true;
        conflict.last = now;
        let open_ids = conflict.open.clone();
        if let Some(id) = conflict.flapping.clone() {
            let seqs: Vec<u64> = hits.iter().map(|h| h.seq).collect();
            if let Some(t) = self.incidents.get_mut(&id) {
                add_events(&mut t.record, &seqs);
                t.last = now;
            }
            return;
        }
        let mut kinds: BTreeMap<IncidentKind, Vec<Hit>> = BTreeMap::new();
        for h in hits {
            kinds.entry(h.kind).or_default().push(h);
        }
        for (kind, hits) in kinds {
            let open = open_ids.get(&kind).cloned().filter(|id| {
                self.incidents
                    .get(id)
                    .is_some_and(|t| now.elapsed_since(t.last) <= window)
            });
            let record = match open.and_then(|id| self.incidents.get_mut(&id)) {
                Some(t) => update_conflict(t, &hits, txn),
                None => self.open_conflict(txn, &key, kind, &hits),
            };
            out.push(record);
        }
    }

    /// A new incident of `kind` in the conflict `key`.
    fn open_conflict(
        &mut self,
        txn: Txn,
        key: &ConflictKey,
        kind: IncidentKind,
        hits: &[Hit],
    ) -> IncidentLine {
        let mut r = new_incident(kind, txn.netns, hits, txn.actor, txn.first);
        if let Some(d) = &hits[0].drift {
            r.rule = Some(d.rule.clone());
            r.was = Some(d.was.clone());
            r.lost = d.lost.clone();
            if d.critical {
                r.severity = Severity::Critical;
            }
        }
        r.summary = summary(&r, hits);
        let mut t = Tracked::new(r.clone(), txn.now, txn.now);
        t.add_targets(hits);
        self.incidents.insert(r.id.clone(), t);
        if let Some(c) = self.conflicts.get_mut(key) {
            c.open.insert(kind, r.id.clone());
        }
        r
    }

    /// Writes the kernel refused: named in an open mass flush of the writer's own chains.
    pub(super) fn note_failures(
        &mut self,
        netns: u32,
        actor: &str,
        failed: &[&ChangeLine],
        now: Timestamp,
        out: &mut Vec<IncidentLine>,
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
            t.record.time = f.time;
            t.record.summary = mass_summary(&t.record);
            add_events(
                &mut t.record,
                &failed.iter().map(|c| c.seq).collect::<Vec<_>>(),
            );
            t.last = now;
            out.push(t.record.clone());
        }
    }
}

/// A wipe that hits an owner who already repaired is a new wipe (a firewall reloaded twice): the
/// earlier incident ends and a new one starts; nothing inherits "repaired".
fn end_on_rewipe(
    sweep: &mut Sweep,
    incidents: &mut HashMap<String, Tracked>,
    sweeping: &[Hit],
    actor: &str,
    now: Timestamp,
    out: &mut Vec<IncidentLine>,
) {
    let Some(old) = sweep.incident.clone() else {
        return;
    };
    let rewipe = incidents.get(&old).is_none_or(|t| {
        t.record.state.is_final()
            || sweeping.iter().any(|h| {
                t.record
                    .owners
                    .iter()
                    .any(|o| o.owner == h.owner && o.repaired)
            })
    });
    if !rewipe {
        return;
    }
    *sweep = Sweep {
        first: now,
        ..Sweep::default()
    };
    if let Some(mut t) = incidents.remove(&old) {
        if !t.record.state.is_final() {
            let all = t.record.owners.iter().all(|o| o.repaired);
            t.record.state = if all {
                IncidentState::Resolved
            } else {
                IncidentState::Expired
            };
            t.record.time = now;
            t.record.summary = format!(
                "{} A new wipe by {actor} started a new incident.",
                mass_summary(&t.record)
            );
            out.push(t.record);
        }
    }
}

/// The hits by owner, but for the flushes, deletes and unhooks a mass flush took.
fn by_owner(hits: Vec<Hit>, consumed_by_sweep: bool) -> BTreeMap<String, Vec<Hit>> {
    let mut by_owner: BTreeMap<String, Vec<Hit>> = BTreeMap::new();
    for h in hits {
        let swept = consumed_by_sweep
            && matches!(
                h.kind,
                IncidentKind::ForeignDelete | IncidentKind::ForeignFlush | IncidentKind::Unhooked
            );
        if !swept {
            by_owner.entry(h.owner.clone()).or_default().push(h);
        }
    }
    by_owner
}

/// More hits on an incident still open (or closed within the window: it opens again).
fn update_conflict(t: &mut Tracked, hits: &[Hit], txn: Txn) -> IncidentLine {
    let reopened = t.record.state.is_final();
    update_with_hits(&mut t.record, hits, txn.actor, txn.first);
    if reopened {
        // Undone again after a repair: open again, nothing repaired.
        t.record.state = IncidentState::Open;
        t.undone = txn.now;
        for o in &mut t.record.owners {
            o.repaired = false;
            o.repair_ms = None;
            o.repaired_by = None;
        }
    }
    t.add_targets(hits);
    t.record.summary = summary(&t.record, hits);
    t.last = txn.now;
    t.record.clone()
}
