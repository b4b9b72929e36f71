//! Event-time windows: when the engine must look again, and what closes when nothing happens.

use super::*;

impl Correlator {
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
}
