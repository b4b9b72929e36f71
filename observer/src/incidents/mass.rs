//! `mass_flush`: one writer wiping several owners' chains within the window.

use super::*;

impl Correlator {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mass_flush(
        &mut self,
        netns: u32,
        actor: &str,
        first: &ChangeLine,
        hits: &[Hit],
        existing: Option<String>,
        (since, now): (Timestamp, Timestamp),
        out: &mut Vec<IncidentLine>,
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
                    None => t
                        .record
                        .owners
                        .push(unrepaired(owner, chains.into_iter().collect())),
                }
            }
            add_events(&mut t.record, &seqs);
            add_tables(&mut t.record, hits);
            t.record.chains = all_chains(&t.record.owners);
            t.record.state = IncidentState::Update;
            t.record.time = first.time;
            t.record.summary = mass_summary(&t.record);
            t.last = now;
            out.push(t.record.clone());
            return t.record.id.clone();
        }
        let mut r = new_incident(IncidentKind::MassFlush, netns, hits, actor, first);
        r.owners = per_owner
            .into_iter()
            .map(|(owner, chains)| unrepaired(owner, chains.into_iter().collect()))
            .collect();
        r.owner = r.owners[0].owner.clone();
        r.chains = all_chains(&r.owners);
        r.summary = mass_summary(&r);
        // The hits were already reported as foreign_* incidents? They become part of this one.
        // Repairs count from the sweep's first wipe, not from the one that made it a mass flush.
        let id = r.id.clone();
        self.incidents
            .insert(id.clone(), Tracked::new(r.clone(), since, now));
        out.push(r);
        id
    }

    /// A new `mass_flush` takes in the foreign_* and unhooked incidents that the same actor's
    /// wipe raised a moment earlier (before a second owner was hit): one wipe, one incident.
    /// Each gets a last line, `resolved` with `merged_into`, and is followed no more.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn merge_into_mass(
        &mut self,
        netns: u32,
        actor: &str,
        hits: &[Hit],
        since: Timestamp,
        mass_id: &str,
        now: Timestamp,
        out: &mut Vec<IncidentLine>,
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
                if t.since < since || t.record.state.is_final() {
                    continue;
                }
                c.open.retain(|_, v| *v != id);
                if let Some(mut t) = self.incidents.remove(&id) {
                    t.record.state = IncidentState::Resolved;
                    t.record.time = now;
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
}
