//! Event-time windows: when the engine must look again, and what closes when nothing happens.

use super::*;

impl Correlator {
    /// When the next window expires (event-time ns), if anything waits for one.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        let mut next: Option<Timestamp> = None;
        let mut consider = |t: Timestamp| next = Some(next.map_or(t, |n| n.min(t)));
        for t in self.incidents.values() {
            match t.record.kind {
                IncidentKind::Flapping => consider(t.last.saturating_add(self.cfg.flap_window)),
                IncidentKind::MassFlush => consider(t.since.saturating_add(self.cfg.repair_within)),
                IncidentKind::SplitBrain => {}
                _ if t.record.state.is_final() => {
                    consider(t.last.saturating_add(self.cfg.flap_window))
                }
                _ => consider(t.undone.saturating_add(self.cfg.repair_within)),
            }
        }
        for c in self.conflicts.values() {
            consider(c.last.saturating_add(self.cfg.flap_window));
        }
        for s in self.sweeps.values() {
            if s.incident.is_none() {
                consider(s.first.saturating_add(self.cfg.mass_window));
            }
        }
        next
    }

    /// Close what its window ended, and forget what no longer matters. `now`: event time.
    pub fn tick(&mut self, now: Timestamp) -> Vec<IncidentLine> {
        let mut out = Vec::new();
        let flap = self.cfg.flap_window;
        let repair = self.cfg.repair_within;
        let mut ended: Vec<String> = Vec::new();
        for (id, t) in &self.incidents {
            let done = match t.record.kind {
                IncidentKind::Flapping => now.elapsed_since(t.last) > flap,
                IncidentKind::MassFlush => now.elapsed_since(t.since) > repair,
                IncidentKind::SplitBrain => false,
                // Resolved: kept for a window so that a repeat reopens it, then forgotten.
                _ if t.record.state.is_final() => now.elapsed_since(t.last) > flap,
                _ => now.elapsed_since(t.undone) > repair,
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
                    t.record.time = now;
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
                    t.record.time = now;
                    t.record.summary = mass_summary(&t.record);
                    out.push(t.record);
                    self.sweeps
                        .retain(|_, s| s.incident.as_deref() != Some(id.as_str()));
                }
                // A resolved foreign_*, unhooked or rule_drift was said; now it is forgotten.
                _ if t.record.state.is_final() => {}
                _ => {
                    t.record.state = IncidentState::Expired;
                    t.record.time = now;
                    t.record.summary = format!(
                        "Not repaired within {} s: {}",
                        repair.as_secs(),
                        summary(&t.record, &[])
                    );
                    out.push(t.record);
                }
            }
        }
        self.conflicts
            .retain(|_, c| now.elapsed_since(c.last) <= flap || c.flapping.is_some());
        for c in self.conflicts.values_mut() {
            if let Some(id) = &c.flapping {
                if !self.incidents.contains_key(id) {
                    c.flapping = None;
                }
            }
            c.open.retain(|_, id| self.incidents.contains_key(id));
        }
        let mass = self.cfg.mass_window;
        self.sweeps
            .retain(|_, s| s.incident.is_some() || now.elapsed_since(s.first) <= mass);
        out
    }
}
