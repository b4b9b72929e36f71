//! The owner writes its objects again: a repair (the incident resolves with the time it took
//! from the first change that undid them), or, when another writer keeps undoing them, one more
//! cycle of a `flapping` loop.

use super::*;

impl Correlator {
    /// Open foreign_*, unhooked and rule_drift incidents of this namespace whose objects are
    /// back: the deleted chains exist, the flushed ones hold rules, the jumps are in place, the
    /// drifted rule was rewritten by its owner. `fresh`: incidents this transaction raised.
    pub(super) fn check_repairs(
        &mut self,
        netns: u32,
        actor: &str,
        now: Timestamp,
        seqs: &[u64],
        fresh: &BTreeSet<String>,
        out: &mut Vec<IncidentLine>,
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
                        .is_some_and(|l| l.seq > undo_seq && *l.actor == *owner)
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
            let ms = now.elapsed_since(t.undone).as_millis() as u64;
            for o in &mut t.record.owners {
                o.repaired = true;
                o.repair_ms = Some(ms);
                o.repaired_by = Some(actor.to_string());
            }
            t.record.state = IncidentState::Resolved;
            t.record.time = now;
            add_events(&mut t.record, seqs);
            t.record.summary = resolved_summary(&t.record, actor, ms);
            t.last = now;
            out.push(t.record.clone());
        }
    }

    /// The owner wrote its own objects again: a flapping cycle, or a repair after a mass flush.
    pub(super) fn handle_restores(
        &mut self,
        netns: u32,
        (actor, repairer): (&str, &str),
        restored: &[Restore],
        now: Timestamp,
        out: &mut Vec<IncidentLine>,
    ) {
        if restored.is_empty() {
            return;
        }
        let seqs: Vec<u64> = restored.iter().map(|r| r.seq).collect();
        self.mass_repairs(netns, (actor, repairer), restored, &seqs, now, out);
        // Flapping cycles: every conflict where this owner had something undone.
        let keys: Vec<ConflictKey> = self
            .conflicts
            .iter()
            .filter(|(k, c)| k.netns == netns && k.owner == actor && c.pending)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            self.cycle(&key, &seqs, now, out);
        }
    }

    /// Mass flush repairs; a mass flush every owner repaired is resolved.
    fn mass_repairs(
        &mut self,
        netns: u32,
        (actor, repairer): (&str, &str),
        restored: &[Restore],
        seqs: &[u64],
        now: Timestamp,
        out: &mut Vec<IncidentLine>,
    ) {
        let mut resolved: Vec<String> = Vec::new();
        for (id, t) in self.incidents.iter_mut() {
            let since = t.since;
            let Some(o) = unrepaired_owner(t, netns, actor) else {
                continue;
            };
            if restored
                .iter()
                .any(|r| o.chains.iter().any(|c| **c == *r.key.3))
            {
                o.repaired = true;
                o.repair_ms = Some(now.elapsed_since(since).as_millis() as u64);
                o.repaired_by = Some(repairer.to_string());
                let all = t.record.owners.iter().all(|o| o.repaired);
                t.record.state = if all {
                    resolved.push(id.clone());
                    IncidentState::Resolved
                } else {
                    IncidentState::Update
                };
                t.record.time = now;
                t.record.summary = mass_summary(&t.record);
                add_events(&mut t.record, seqs);
                t.last = now;
                out.push(t.record.clone());
            }
        }
        for id in resolved {
            self.incidents.remove(&id);
            self.sweeps
                .retain(|_, s| s.incident.as_deref() != Some(id.as_str()));
        }
    }

    /// One more undo/redo cycle of the conflict `key`: an update of its `flapping` incident, or
    /// the cycle that makes one.
    fn cycle(
        &mut self,
        key: &ConflictKey,
        seqs: &[u64],
        now: Timestamp,
        out: &mut Vec<IncidentLine>,
    ) {
        let window = self.cfg.flap_window;
        let threshold = self.cfg.flap_cycles;
        let Some(c) = self.conflicts.get_mut(key) else {
            return;
        };
        c.pending = false;
        c.cycles.push(now);
        c.cycles.retain(|&t| now.elapsed_since(t) <= window);
        c.total_cycles += 1;
        c.last = now;
        let total = c.total_cycles;
        if let Some(id) = c.flapping.clone() {
            if let Some(t) = self.incidents.get_mut(&id) {
                add_events(&mut t.record, seqs);
                t.record.cycles = Some(total);
                t.record.last = Some(now);
                t.record.time = now;
                t.record.state = IncidentState::Update;
                t.record.summary = flap_summary(&t.record);
                t.last = now;
                out.push(t.record.clone());
            }
            return;
        }
        if c.cycles.len() as u32 >= threshold {
            // The conflict's earlier incidents become this one.
            let earlier: Vec<String> = c.open.drain().map(|(_, id)| id).collect();
            self.start_flapping(key, &earlier, total, seqs, now, out);
        }
    }

    /// A `flapping` incident made of the conflict's `earlier` incidents; those still open end,
    /// pointing at it.
    fn start_flapping(
        &mut self,
        key: &ConflictKey,
        earlier: &[String],
        total: u32,
        seqs: &[u64],
        now: Timestamp,
        out: &mut Vec<IncidentLine>,
    ) {
        let mut events = Vec::new();
        let mut chains = BTreeSet::new();
        let mut base: Option<IncidentLine> = None;
        let mut absorbed = Vec::new();
        for id in earlier {
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
        let Some(mut r) = base else { return };
        events.extend(seqs.iter().copied());
        events.sort_unstable();
        events.dedup();
        r.id = format!(
            "flapping-{}-{}",
            key.netns,
            events.first().copied().unwrap_or_default()
        );
        r.kind = IncidentKind::Flapping;
        r.severity = Severity::Critical;
        r.state = IncidentState::Open;
        r.time = now;
        r.events = events;
        r.chains = chains.into_iter().collect();
        r.cycles = Some(total);
        r.last = Some(now);
        r.rule = None;
        r.was = None;
        r.lost = Vec::new();
        trim_events(&mut r);
        r.summary = flap_summary(&r);
        r.owners = Vec::new();
        r.merged_into = None;
        let since = r.since;
        if let Some(c) = self.conflicts.get_mut(key) {
            c.flapping = Some(r.id.clone());
        }
        self.incidents
            .insert(r.id.clone(), Tracked::new(r.clone(), since, now));
        // The conflict's incidents still open end here, pointing at the loop.
        for mut a in absorbed {
            a.state = IncidentState::Resolved;
            a.time = now;
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
