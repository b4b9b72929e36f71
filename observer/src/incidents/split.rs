//! `split_brain`: one owner's chains in both the legacy and the nft backend.

use super::*;

impl Correlator {
    pub(super) fn check_split(
        &mut self,
        netns: u32,
        owner: &str,
        now: Timestamp,
        seqs: &[u64],
        out: &mut Vec<IncidentLine>,
    ) {
        let Some(net) = self.nets.get(&netns) else {
            return;
        };
        let key = (netns, owner.to_string());
        // Called for every transaction of an owner: whether it has chains in both backends is
        // found without collecting them (the chains are listed only when an incident opens).
        let split = self.has_chains_in_both(net, owner);
        match (split, self.splits.get(&key).cloned()) {
            (true, None) => {
                let mut legacy = BTreeSet::new();
                let mut nft = BTreeSet::new();
                let mut sample: Option<(Family, String)> = None;
                for (k, info) in &net.objs {
                    if info.is_set || !self.owned_by(&k.3, info, owner) {
                        continue;
                    }
                    if k.0 == Backend::Legacy {
                        legacy.insert(k.3.to_string());
                        sample.get_or_insert((k.1, k.2.to_string()));
                    } else if k.0 == Backend::Nft && is_iptables_nft_table(k.1, &k.2) {
                        nft.insert(k.3.to_string());
                    }
                }
                let (family, table) = sample.unwrap_or((Family::Ip, String::new()));
                let last_backend = self.last_backend.get(&key).copied();
                let first_seq = seqs.first().copied().unwrap_or_default();
                let mut chains: Vec<String> = legacy.union(&nft).cloned().collect();
                chains.sort();
                let mut r = IncidentLine {
                    id: format!("split_brain-{netns}-{first_seq}-{owner}"),
                    netns_name: net.name.clone(),
                    backend: last_backend.unwrap_or(Backend::Nft),
                    family,
                    table,
                    chains,
                    owner: owner.to_string(),
                    actors: vec![owner.to_string()],
                    events: seqs.to_vec(),
                    backends: Some(SplitBackends {
                        legacy: legacy.into_iter().collect(),
                        nft: nft.into_iter().collect(),
                    }),
                    last_backend,
                    ..blank(IncidentKind::SplitBrain, netns, now)
                };
                trim_events(&mut r);
                r.summary = split_summary(&r);
                self.splits.insert(key, r.id.clone());
                self.incidents
                    .insert(r.id.clone(), Tracked::new(r.clone(), now, now));
                out.push(r);
            }
            (false, Some(id)) => {
                self.splits.remove(&key);
                if let Some(mut t) = self.incidents.remove(&id) {
                    t.record.state = IncidentState::Resolved;
                    t.record.time = now;
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

    /// Does `owner` have a chain in the legacy backend and one in an iptables-nft table? Stops
    /// at the first of each; once one backend is found its objects cost a comparison each.
    fn has_chains_in_both(&self, net: &Net, owner: &str) -> bool {
        let (mut legacy, mut nft) = (false, false);
        for (k, info) in &net.objs {
            if info.is_set {
                continue;
            }
            let wanted = match k.0 {
                Backend::Legacy => !legacy,
                Backend::Nft => !nft && is_iptables_nft_table(k.1, &k.2),
                Backend::Ipset => false,
            };
            if wanted && self.owned_by(&k.3, info, owner) {
                if k.0 == Backend::Legacy {
                    legacy = true;
                } else {
                    nft = true;
                }
                if legacy && nft {
                    return true;
                }
            }
        }
        false
    }
}
