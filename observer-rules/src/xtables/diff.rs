//! Compare two copies of one x_tables table and say what changed, as [`ruleset::Change`]s.
//!
//! x_tables only ever replaces whole tables, so the change a person made (`iptables -A`, `-D`,
//! `-R`, `-F`, a restore) has to be recovered by comparing the table before and after. Chains are
//! matched by name; the rules of a chain are compared by fingerprint (structure, not text, not
//! counters) with a Myers sequence diff after trimming the common prefix and suffix, so one
//! change in a 20,000-rule chain costs a linear scan. Text is rendered only for changed rules.
//! The raw deltas then go through [`ruleset::summarize`] (replace, flush detection).

use foldhash::{HashMap, HashMapExt};

use crate::ruleset::{self, Change, Op};

use super::{XtChain, XtTable};

/// Above this many edits in one chain, stop searching for the shortest edit script and report
/// the differing middle part as deleted and re-added (still a correct script, and
/// `summarize` cancels the pairs that are the same rule). Bounds time and memory (O(D²)).
const MAX_EDIT_DISTANCE: usize = 1000;

/// What happened between two reads of one table (`None`: the table does not exist).
pub fn diff(old: Option<&XtTable>, new: Option<&XtTable>) -> Vec<Change> {
    let raw = raw_changes(old, new);
    let Some(old) = old else {
        return ruleset::summarize(raw, |_, _, _| 0, |_, _| 0);
    };
    // The rule counts of the chains the changes name, only: a sync that rewrote one chain of
    // 40,000 should not index all 40,000.
    let named: std::collections::HashSet<&str> =
        raw.iter().filter_map(|c| c.chain.as_deref()).collect();
    let counts: HashMap<&str, usize> = old
        .chains
        .iter()
        .filter(|c| named.contains(c.name.as_str()))
        .map(|c| (c.name.as_str(), c.rule_count()))
        .collect();
    let family = old.proto.family();
    let total = old.rule_count();
    ruleset::summarize(
        raw,
        |f, table, chain| {
            if f == family && table == old.name {
                counts.get(chain).copied().unwrap_or(0)
            } else {
                0
            }
        },
        |f, table| {
            if f == family && table == old.name {
                total
            } else {
                0
            }
        },
    )
}

/// What [`diff`] says of a table that did not exist (`diff(None, Some(new))`), made a chain at a
/// time as it is read: a table of 440,000 rules loaded in one restore is never held as its
/// 600,000 changes at once. A table's creation has nothing to summarize (no delete to pair or
/// to read as a flush), so the changes are the raw ones, in the same order.
pub fn created(new: std::sync::Arc<XtTable>) -> impl Iterator<Item = Change> + Send + 'static {
    let head = Change::new(Op::TableCreate, new.proto.family(), &new.name);
    let chains = new.chains.len();
    std::iter::once(head).chain((0..chains).flat_map(move |i| {
        let mut out = Vec::with_capacity(new.chains[i].rules.len() + 1);
        chain_created(&mut out, &new, &new.chains[i]);
        out
    }))
}

/// How many changes [`created`] makes of `t`: the table, its chains and its rules (none for a
/// table held at chain level).
pub fn created_count(t: &XtTable) -> usize {
    let rules = if t.chain_level { 0 } else { t.rule_count() };
    1 + t.chains.len() + rules
}

/// The per-rule and per-chain deltas, before summarizing.
pub(crate) fn raw_changes(old: Option<&XtTable>, new: Option<&XtTable>) -> Vec<Change> {
    let mut out = Vec::new();
    match (old, new) {
        (None, None) => {}
        (Some(o), None) => {
            out.push(
                Change::new(Op::TableDelete, o.proto.family(), &o.name).detail(format!(
                    "{} chains, {} rules",
                    o.chains.len(),
                    o.rule_count()
                )),
            );
        }
        (None, Some(n)) => {
            out.push(Change::new(Op::TableCreate, n.proto.family(), &n.name));
            for c in &n.chains {
                chain_created(&mut out, n, c);
            }
        }
        (Some(o), Some(n)) if o.has_chains_named(n.chains.iter().map(|c| c.name.as_str())) => {
            // The same chains in the same order (a replace that rewrote rules, not chains): the
            // k-th chain of a name is the chain at the same place in both.
            for (oc, c) in o.chains.iter().zip(&n.chains) {
                chain_changed(&mut out, o, oc, n, c);
            }
        }
        (Some(o), Some(n)) => {
            let (old_keyed, new_keyed) = (keyed(o), keyed(n));
            let old_by_key: HashMap<ChainKey, &XtChain> = old_keyed.iter().copied().collect();
            let new_keys: HashMap<ChainKey, ()> = new_keyed.iter().map(|(k, _)| (*k, ())).collect();
            // In the order the kernel could have applied them: a chain exists before rules
            // jump to it, and is deleted after the jumps to it are gone.
            for (k, c) in &new_keyed {
                if !old_by_key.contains_key(k) {
                    chain_created(&mut out, n, c);
                }
            }
            for (k, c) in &new_keyed {
                if let Some(oc) = old_by_key.get(k) {
                    chain_changed(&mut out, o, oc, n, c);
                }
            }
            for (k, c) in &old_keyed {
                if !new_keys.contains_key(k) {
                    let mut ch =
                        Change::new(Op::ChainDelete, o.proto.family(), &o.name).chain(&c.name);
                    if c.rule_count() > 0 {
                        ch = ch.detail(format!("{} rules deleted", c.rule_count()));
                    }
                    out.push(ch);
                }
            }
        }
    }
    out
}

/// A chain's name and how many chains of the table before it have that name: the kernel does not
/// make names unique (a writer of raw `SET_REPLACE` blobs can repeat one), and the k-th chain of
/// a name is matched with the k-th of the other copy, so that a table never differs from itself.
type ChainKey<'t> = (&'t str, usize);

fn keyed(t: &XtTable) -> Vec<(ChainKey<'_>, &XtChain)> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    t.chains
        .iter()
        .map(|c| {
            let nth = seen.entry(c.name.as_str()).or_insert(0);
            let key = (c.name.as_str(), *nth);
            *nth += 1;
            (key, &**c)
        })
        .collect()
}

/// What is said of a chain's rules when its table is held at chain level.
const NOT_RULE_BY_RULE: &str = "table held at chain level: rules not told one by one";

fn chain_created(out: &mut Vec<Change>, t: &XtTable, c: &XtChain) {
    let mut ch = Change::new(Op::ChainCreate, t.proto.family(), &t.name).chain(&c.name);
    let policy = c.policy.as_ref().map(|p| format!("builtin, policy {p}"));
    if t.chain_level {
        let rules = ruleset::plural(c.rule_count() as u64, "rule", "rules");
        let head = policy.map_or(String::new(), |p| format!("{p}; "));
        out.push(ch.detail(format!("{head}{rules} ({NOT_RULE_BY_RULE})")));
        return;
    }
    if let Some(p) = policy {
        ch = ch.detail(p);
    }
    out.push(ch);
    for (i, r) in c.rules.iter().enumerate() {
        out.push(
            Change::new(Op::RuleAdd, t.proto.family(), &t.name)
                .chain(&c.name)
                .rule(t.rule_text(r), Some(i), r.fingerprint),
        );
    }
}

fn chain_changed(out: &mut Vec<Change>, o: &XtTable, oc: &XtChain, n: &XtTable, nc: &XtChain) {
    let family = n.proto.family();
    if oc.policy != nc.policy {
        let show = |p: &Option<String>| p.clone().unwrap_or_else(|| "-".to_string());
        out.push(
            Change::new(Op::ChainUpdate, family, &n.name)
                .chain(&nc.name)
                .detail(format!(
                    "policy {} -> {}",
                    show(&oc.policy),
                    show(&nc.policy)
                )),
        );
    }
    if oc.key == nc.key {
        // The same entries (the policy's included): the same rules.
        return;
    }
    if o.chain_level || n.chain_level {
        return chain_level_changed(out, oc, n, nc);
    }
    let a: Vec<u64> = oc.rules.iter().map(|r| r.fingerprint).collect();
    let b: Vec<u64> = nc.rules.iter().map(|r| r.fingerprint).collect();
    if a == b {
        return;
    }
    for edit in edit_script(&a, &b) {
        out.push(match edit {
            Edit::Delete(i) => {
                let r = &oc.rules[i];
                Change::new(Op::RuleDelete, family, &n.name)
                    .chain(&nc.name)
                    .rule(o.rule_text(r), Some(i), r.fingerprint)
            }
            Edit::Insert(j) => {
                let r = &nc.rules[j];
                Change::new(Op::RuleAdd, family, &n.name)
                    .chain(&nc.name)
                    .rule(n.rule_text(r), Some(j), r.fingerprint)
            }
        });
    }
}

/// A chain whose rules changed, in a table held at chain level (before or after): a flush when
/// it has none left, else one `chain_update` that says how many rules it had and has.
fn chain_level_changed(out: &mut Vec<Change>, oc: &XtChain, n: &XtTable, nc: &XtChain) {
    let (was, now) = (oc.rule_count(), nc.rule_count());
    let family = n.proto.family();
    if now == 0 && was > 0 {
        out.push(
            Change::new(Op::ChainFlush, family, &n.name)
                .chain(&nc.name)
                .detail(format!(
                    "{} flushed ({NOT_RULE_BY_RULE})",
                    ruleset::plural(was as u64, "rule", "rules")
                )),
        );
        return;
    }
    out.push(
        Change::new(Op::ChainUpdate, family, &n.name)
            .chain(&nc.name)
            .detail(format!(
                "rules changed: {was} -> {now} ({NOT_RULE_BY_RULE})"
            )),
    );
}

/// One step of an edit script: delete `a[i]` or insert `b[j]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Edit {
    Delete(usize),
    Insert(usize),
}

/// A shortest edit script from `a` to `b` (up to [`MAX_EDIT_DISTANCE`]), in sequence order.
pub(crate) fn edit_script(a: &[u64], b: &[u64]) -> Vec<Edit> {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let (a2, b2) = (&a[pre..], &b[pre..]);
    let suf = a2
        .iter()
        .rev()
        .zip(b2.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (a2, b2) = (&a2[..a2.len() - suf], &b2[..b2.len() - suf]);
    let mut out = Vec::new();
    if a2.is_empty() || b2.is_empty() {
        out.extend((0..a2.len()).map(|i| Edit::Delete(pre + i)));
        out.extend((0..b2.len()).map(|j| Edit::Insert(pre + j)));
        return out;
    }
    match myers(a2, b2, MAX_EDIT_DISTANCE) {
        Some(script) => out.extend(script.into_iter().map(|e| match e {
            Edit::Delete(i) => Edit::Delete(pre + i),
            Edit::Insert(j) => Edit::Insert(pre + j),
        })),
        None => {
            out.extend((0..a2.len()).map(|i| Edit::Delete(pre + i)));
            out.extend((0..b2.len()).map(|j| Edit::Insert(pre + j)));
        }
    }
    out
}

/// Myers' greedy O((N+M)·D) shortest edit script; `None` when more than `max_d` edits are needed.
fn myers(a: &[u64], b: &[u64], max_d: usize) -> Option<Vec<Edit>> {
    let (n, m) = (a.len() as isize, b.len() as isize);
    let max = (a.len() + b.len()).min(max_d) as isize;
    // v[k + off] = furthest x on diagonal k.
    let off = max + 1;
    let mut v = vec![0isize; 2 * off as usize + 1];
    // trace[d] = v[-d..=d] after round d.
    let mut trace: Vec<Vec<isize>> = Vec::new();
    for d in 0..=max {
        for k in (-d..=d).step_by(2) {
            let idx = (k + off) as usize;
            let mut x = if k == -d || (k != d && v[idx - 1] < v[idx + 1]) {
                v[idx + 1]
            } else {
                v[idx - 1] + 1
            };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            v[idx] = x;
            if x >= n && y >= m {
                trace.push(v[(off - d) as usize..=(off + d) as usize].to_vec());
                return Some(backtrack(&trace, n, m));
            }
        }
        trace.push(v[(off - d) as usize..=(off + d) as usize].to_vec());
    }
    None
}

fn backtrack(trace: &[Vec<isize>], n: isize, m: isize) -> Vec<Edit> {
    let mut edits = Vec::new();
    let (mut x, mut y) = (n, m);
    for d in (1..trace.len() as isize).rev() {
        let prev = &trace[(d - 1) as usize];
        // prev holds k in -(d-1)..=(d-1) at index k + d - 1.
        let at = |k: isize| prev[(k + d - 1) as usize];
        let k = x - y;
        let prev_k = if k == -d || (k != d && at(k - 1) < at(k + 1)) {
            k + 1
        } else {
            k - 1
        };
        let prev_x = at(prev_k);
        let prev_y = prev_x - prev_k;
        while x > prev_x && y > prev_y {
            x -= 1;
            y -= 1;
        }
        if prev_k == k + 1 {
            edits.push(Edit::Insert(prev_y as usize));
        } else {
            edits.push(Edit::Delete(prev_x as usize));
        }
        x = prev_x;
        y = prev_y;
    }
    edits.reverse();
    edits
}
