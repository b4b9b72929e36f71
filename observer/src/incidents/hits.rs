//! What a transaction did, and to whose objects: the hits found before it is applied, and
//! the model brought up to date after.

use super::*;

impl Correlator {
    /// What the transaction does to objects the actor may not change (checked before applying).
    pub(super) fn find_hits(&self, netns: u32, actor: &str, txn: &[&ChangeLine]) -> Vec<Hit> {
        let Some(net) = self.nets.get(&netns) else {
            return Vec::new();
        };
        let mut scan = Scan {
            model: self,
            net,
            actor,
            txn,
            hits: Vec::new(),
            unhooks: Vec::new(),
        };
        for c in txn {
            scan.change(c);
        }
        scan.with_unhooks()
    }

    /// An unhooked chain that the same transaction deleted is part of the delete.
    pub(super) fn keep_unhooks_of_surviving(&self, netns: u32, hits: Vec<Hit>) -> Vec<Hit> {
        let Some(net) = self.nets.get(&netns) else {
            return hits;
        };
        hits.into_iter()
            .filter(|h| {
                h.kind != IncidentKind::Unhooked
                    || net
                        .objs
                        .contains_key(&obj_key(h.backend, h.family, &h.table, &h.chain))
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
        txn: &[&ChangeLine],
    ) -> Vec<Restore> {
        let mut restored: Vec<(ObjKey, u64)> = Vec::new();
        let net = self.nets.entry(netns).or_default();
        // One name for every object the transaction writes.
        let writer: Arc<str> = Arc::from(actor);
        for c in txn {
            apply_change(net, &self.owners, &writer, c, &mut restored);
        }
        net.names.tidy(net.objs.len());
        if learn {
            self.learn(netns, actor, txn);
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

    /// Learning: the writer of a chain nobody is known to own becomes its owner.
    fn learn(&mut self, netns: u32, actor: &str, txn: &[&ChangeLine]) {
        let learned: Arc<str> = Arc::from(actor);
        let keys: Vec<ObjKey> = txn
            .iter()
            .filter_map(|c| {
                c.chain
                    .as_ref()
                    .map(|ch| obj_key(c.backend, c.family, &c.table, ch))
            })
            .collect();
        for key in keys {
            if is_builtin_chain(&key.3) && !self.is_set(netns, &key) {
                continue;
            }
            if let Some(info) = self.nets.get_mut(&netns).and_then(|n| n.objs.get_mut(&key)) {
                if info.claim.is_none() && info.learned.is_none() {
                    info.learned = Some(Arc::clone(&learned));
                }
            }
        }
    }

    pub(super) fn is_set(&self, netns: u32, key: &ObjKey) -> bool {
        self.nets
            .get(&netns)
            .and_then(|n| n.objs.get(key))
            .is_some_and(|i| i.is_set)
    }
}

/// One transaction read against the model, change by change, before it is applied.
struct Scan<'a> {
    model: &'a Correlator,
    net: &'a Net,
    actor: &'a str,
    txn: &'a [&'a ChangeLine],
    hits: Vec<Hit>,
    /// Jumps removed: (the target chain's key, the chain that held the jump, seq).
    unhooks: Vec<(ObjKey, Name, u64)>,
}

impl Scan<'_> {
    /// A hit, when the object has an owner and the actor may not change it.
    fn push(
        &mut self,
        kind: IncidentKind,
        key: &ObjKey,
        info: &ObjInfo,
        seq: u64,
        drift: Option<Drift>,
    ) {
        if let Some((owner, _)) = self.model.owner_of(&key.3, info) {
            if !self.model.allowed(&key.3, info, self.actor) {
                self.hits.push(Hit {
                    kind,
                    owner,
                    backend: key.0,
                    family: key.1,
                    table: key.2.to_string(),
                    chain: key.3.to_string(),
                    seq,
                    drift,
                });
            }
        }
    }

    /// The jumps of chain `key` (holding `jumps`) that change `c` removes.
    fn unhook_all<'j>(
        &mut self,
        c: &ChangeLine,
        key: &ObjKey,
        jumps: impl IntoIterator<Item = &'j str>,
    ) {
        for j in jumps {
            self.unhooks.push((target_key(c, j), key.3.clone(), c.seq));
        }
    }

    fn change(&mut self, c: &ChangeLine) {
        let key = c
            .chain
            .as_ref()
            .map(|ch| obj_key(c.backend, c.family, &c.table, ch));
        let net = self.net;
        let info = key.as_ref().and_then(|k| net.objs.get(k));
        match c.op {
            Op::ChainDelete | Op::SetDelete => {
                if let (Some(k), Some(i)) = (&key, info) {
                    self.push(IncidentKind::ForeignDelete, k, i, c.seq, None);
                    self.unhook_all(c, k, i.jumps.iter().map(|j| &**j));
                }
            }
            Op::ChainFlush | Op::SetFlush => {
                if let (Some(k), Some(i)) = (&key, info) {
                    self.push(IncidentKind::ForeignFlush, k, i, c.seq, None);
                    self.unhook_all(c, k, i.jumps.iter().map(|j| &**j));
                }
            }
            Op::TableFlush | Op::TableDelete => self.table_emptied(c),
            Op::RuleDelete => self.rule_delete(c, key.as_ref(), info),
            Op::RuleReplace => {
                if let Some(k) = &key {
                    self.rule_replace(c, k, info);
                }
            }
            _ => {}
        }
    }

    /// A table flushed or deleted: every chain of it (flushed: those that held rules).
    fn table_emptied(&mut self, c: &ChangeLine) {
        let kind = if c.op == Op::TableFlush {
            IncidentKind::ForeignFlush
        } else {
            IncidentKind::ForeignDelete
        };
        let in_table = |k: &ObjKey| k.0 == c.backend && k.1 == c.family && *k.2 == *c.table;
        let net = self.net;
        for (k, i) in net.objs.iter().filter(|(k, _)| in_table(k)) {
            if kind == IncidentKind::ForeignDelete || i.rules > 0 {
                self.push(kind, k, i, c.seq, None);
            }
            self.unhook_all(c, k, i.jumps.iter().map(|j| &**j));
        }
    }

    fn rule_delete(&mut self, c: &ChangeLine, key: Option<&ObjKey>, info: Option<&ObjInfo>) {
        let txn = self.txn;
        // Deleting the only rule of someone else's chain empties it, as a flush would (the
        // kernel could not tell which it was).
        if let (Some(k), Some(i)) = (key, info) {
            let removed = txn
                .iter()
                .filter(|d| d.op == Op::RuleDelete && d.chain == c.chain)
                .count();
            let first = txn
                .iter()
                .position(|d| d.op == Op::RuleDelete && d.chain == c.chain)
                .is_some_and(|p| txn[p].seq == c.seq);
            let refilled = txn
                .iter()
                .any(|d| matches!(d.op, Op::RuleAdd | Op::RuleReplace) && d.chain == c.chain);
            if first && !refilled && i.rules > 0 && removed >= i.rules {
                self.push(IncidentKind::ForeignFlush, k, i, c.seq, None);
            }
        }
        if let (Some(k), Some(rule)) = (key, c.rule.as_deref()) {
            let jumps = drift::jump_targets(c.rule_backend(), rule);
            self.unhook_all(c, k, jumps.iter().map(String::as_str));
        }
    }

    /// A rule rewritten: the jumps it no longer makes, and a `rule_drift` when it lost or
    /// changed something.
    fn rule_replace(&mut self, c: &ChangeLine, key: &ObjKey, info: Option<&ObjInfo>) {
        let was = c
            .detail
            .as_deref()
            .and_then(|d| d.strip_prefix("was: "))
            .unwrap_or_default();
        let new = c.rule.as_deref().unwrap_or_default();
        let new_jumps = drift::jump_targets(c.rule_backend(), new);
        for j in drift::jump_targets(c.rule_backend(), was) {
            if !new_jumps.contains(&j) {
                self.unhooks.push((target_key(c, &j), key.3.clone(), c.seq));
            }
        }
        if let Some(i) = info {
            if let Some(drift) = rule_drift(c, was, new) {
                self.push(IncidentKind::RuleDrift, key, i, c.seq, Some(drift));
            }
        }
    }

    /// The hits, then the unhooks of chains the actor may not change.
    fn with_unhooks(self) -> Vec<Hit> {
        let Scan {
            model,
            net,
            actor,
            mut hits,
            unhooks,
            ..
        } = self;
        for (target, holder, seq) in unhooks {
            let Some(info) = net.objs.get(&target) else {
                continue;
            };
            let Some((owner, _)) = model.owner_of(&target.3, info) else {
                continue;
            };
            if model.allowed(&target.3, info, actor) {
                continue;
            }
            // A jump from the owner's own chain that this transaction also flushed or deleted is
            // part of that incident.
            let holder_key = (target.0, target.1, target.2.clone(), holder.clone());
            let holder_same_owner = net
                .objs
                .get(&holder_key)
                .and_then(|i| model.owner_of(&holder, i))
                .is_some_and(|(o, _)| o == owner);
            if holder_same_owner {
                continue;
            }
            hits.push(Hit {
                kind: IncidentKind::Unhooked,
                owner,
                backend: target.0,
                family: target.1,
                table: target.2.to_string(),
                chain: target.3.to_string(),
                seq,
                drift: None,
            });
        }
        hits
    }
}

/// The key of chain `target` in the table of change `c`.
fn target_key(c: &ChangeLine, target: &str) -> ObjKey {
    obj_key(c.backend, c.family, &c.table, target)
}

/// What a rewrite from `was` to `new` did, when it is drift (something lost or changed).
fn rule_drift(c: &ChangeLine, was: &str, new: &str) -> Option<Drift> {
    let d = drift::diff(c.rule_backend(), was, new);
    if was.is_empty() || !d.is_drift() {
        return None;
    }
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
    Some(Drift {
        rule: new.to_string(),
        was: was.to_string(),
        critical: d.drops && !d.lost.is_empty(),
        lost: d.lost,
        what: what.join(", "),
    })
}

/// One change applied to a namespace's model; the objects it (re)creates or fills go to
/// `restored`.
fn apply_change(
    net: &mut Net,
    owners: &Owners,
    actor: &Arc<str>,
    c: &ChangeLine,
    restored: &mut Vec<(ObjKey, u64)>,
) {
    let last = LastWrite {
        actor: Arc::clone(actor),
        time: c.time,
        seq: c.seq,
        op: c.op,
    };
    let in_table = |k: &ObjKey| k.0 == c.backend && k.1 == c.family && *k.2 == *c.table;
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
            let Some(ch) = &c.chain else { return };
            let key = net.names.key(c.backend, c.family, &c.table, ch);
            match c.op {
                Op::ChainDelete | Op::SetDelete => {
                    net.objs.remove(&key);
                    return;
                }
                Op::ChainCreate | Op::SetCreate => {
                    let info = net
                        .objs
                        .entry(key.clone())
                        .or_insert_with(|| ObjInfo::named(owners, &key));
                    info.is_set = c.op == Op::SetCreate;
                    restored.push((key.clone(), c.seq));
                }
                _ => {}
            }
            let info = net
                .objs
                .entry(key.clone())
                .or_insert_with(|| ObjInfo::named(owners, &key));
            apply_to_object(info, &mut net.names, c, &key, restored);
            info.last = Some(last);
        }
    }
}

/// What a change to one chain or set does to its rule count and jumps.
fn apply_to_object(
    info: &mut ObjInfo,
    names: &mut Names,
    c: &ChangeLine,
    key: &ObjKey,
    restored: &mut Vec<(ObjKey, u64)>,
) {
    match c.op {
        Op::RuleAdd => {
            info.rules += 1;
            if let Some(r) = &c.rule {
                add_jumps(info, names, drift::jump_targets(c.rule_backend(), r));
            }
            restored.push((key.clone(), c.seq));
        }
        Op::RuleDelete => {
            info.rules = info.rules.saturating_sub(1);
            if let Some(r) = &c.rule {
                remove_jumps(info, drift::jump_targets(c.rule_backend(), r));
            }
        }
        Op::RuleReplace => {
            let was = c.detail.as_deref().and_then(|d| d.strip_prefix("was: "));
            remove_jumps(
                info,
                was.map(|w| drift::jump_targets(c.rule_backend(), w))
                    .unwrap_or_default(),
            );
            if let Some(r) = &c.rule {
                add_jumps(info, names, drift::jump_targets(c.rule_backend(), r));
            }
        }
        Op::ChainFlush => {
            info.rules = 0;
            info.jumps.clear();
        }
        Op::ElementAdd => restored.push((key.clone(), c.seq)),
        _ => {}
    }
}

/// A rule's jumps added, named by the namespace's copies of the names. The list grows by what
/// it gains (most chains hold one or two jumps, and a vector's first growth makes room for
/// four).
fn add_jumps(info: &mut ObjInfo, names: &mut Names, jumps: Vec<String>) {
    info.jumps.reserve_exact(jumps.len());
    info.jumps.extend(jumps.iter().map(|j| names.get(j)));
}

/// One jump taken away for each of `gone` (a rule's jumps, when it is deleted).
fn remove_jumps(info: &mut ObjInfo, gone: Vec<String>) {
    for j in gone {
        if let Some(p) = info.jumps.iter().position(|x| **x == *j) {
            info.jumps.swap_remove(p);
        }
    }
}
