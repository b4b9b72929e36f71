//! What a transaction did, and to whose objects: the hits found before it is applied, and
//! the model brought up to date after.

use super::*;

impl Correlator {
    /// What the transaction does to objects the actor may not change (checked before applying).
    pub(super) fn find_hits(&self, netns: u32, actor: &str, txn: &[&ChangeRecord]) -> Vec<Hit> {
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
                        for j in drift::jump_targets(c.rule_backend(), rule) {
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
                        let new_jumps = drift::jump_targets(c.rule_backend(), new);
                        for j in drift::jump_targets(c.rule_backend(), was) {
                            if !new_jumps.contains(&j) {
                                unhooks.push((target_key(&j), k.3.clone(), c.seq));
                            }
                        }
                        if let Some(i) = info {
                            let d = drift::diff(c.rule_backend(), was, new);
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
    pub(super) fn keep_unhooks_of_surviving(&self, netns: u32, hits: Vec<Hit>) -> Vec<Hit> {
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
    pub(super) fn apply(
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
                time: c.time,
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
                                info.jumps.extend(drift::jump_targets(c.rule_backend(), r));
                            }
                            restored.push((key.clone(), c.seq));
                        }
                        Op::RuleDelete => {
                            info.rules = info.rules.saturating_sub(1);
                            if let Some(r) = &c.rule {
                                for j in drift::jump_targets(c.rule_backend(), r) {
                                    if let Some(p) = info.jumps.iter().position(|x| *x == j) {
                                        info.jumps.swap_remove(p);
                                    }
                                }
                            }
                        }
                        Op::RuleReplace => {
                            let was = c.detail.as_deref().and_then(|d| d.strip_prefix("was: "));
                            for j in was
                                .map(|w| drift::jump_targets(c.rule_backend(), w))
                                .unwrap_or_default()
                            {
                                if let Some(p) = info.jumps.iter().position(|x| *x == j) {
                                    info.jumps.swap_remove(p);
                                }
                            }
                            if let Some(r) = &c.rule {
                                info.jumps.extend(drift::jump_targets(c.rule_backend(), r));
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

    pub(super) fn is_set(&self, netns: u32, key: &ObjKey) -> bool {
        self.nets
            .get(&netns)
            .and_then(|n| n.objs.get(key))
            .is_some_and(|i| i.is_set)
    }
}
