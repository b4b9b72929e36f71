//! [`summarize`]: the raw per-rule deltas of one transaction into the changes a person means
//! (flushes, replaces, no change for a rule re-added as it was), and the settling of one-rule
//! flushes by what the writer asked for ([`FlushEvidence`]).

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::{Change, Family, Op, RuleForms};

/// Turn the raw deltas of one transaction into the changes a person means.
///
/// `changes` are the deltas of one transaction (one x_tables replace, one nft generation), in the
/// order the reader saw them, possibly for several tables. `rules_before` gives, for a
/// `(family, table, chain)`, how many rules the chain held before the transaction (0 or absent for
/// chains that did not exist); `table_rules_before` how many the whole table held.
///
/// Rules applied, per table:
/// - rule deletes of a chain that the transaction deletes are implied by the `chain_delete`;
/// - a rule deleted and re-added with the same fingerprint in the same chain is no change;
/// - a delete and an add left at the same position of the same chain are a `rule_replace`;
/// - all rules of a surviving chain deleted and none added: one `chain_flush`;
/// - every chain of the table that had rules flushed (the flushed rules are all the table held),
///   and more than one of them: one `table_flush`.
pub fn summarize(
    changes: Vec<Change>,
    rules_before: impl Fn(Family, &str, &str) -> usize,
    table_rules_before: impl Fn(Family, &str) -> usize,
) -> Vec<Change> {
    // One table, as nearly every transaction: its changes are summarized where they are (a
    // re-read of 110,000 chains is 220,000 changes, 40 MB, not to be copied).
    if let Some(first) = changes.first() {
        let key = (first.family, first.table.clone());
        if changes
            .iter()
            .all(|c| c.family == key.0 && c.table == key.1)
        {
            let table_total = table_rules_before(key.0, &key.1);
            return summarize_table(
                changes,
                |chain| rules_before(key.0, &key.1, chain),
                table_total,
            );
        }
    }
    // Keep tables in first-seen order so the output follows the transaction.
    let mut order: Vec<(Family, String)> = Vec::new();
    let mut by_table: HashMap<(Family, String), Vec<Change>> = HashMap::new();
    for c in changes {
        let key = (c.family, c.table.clone());
        if !by_table.contains_key(&key) {
            order.push(key.clone());
        }
        by_table.entry(key).or_default().push(c);
    }
    let mut out = Vec::new();
    for key in order {
        let list = by_table.remove(&key).unwrap_or_default();
        let table_total = table_rules_before(key.0, &key.1);
        out.extend(summarize_table(
            list,
            |chain| rules_before(key.0, &key.1, chain),
            table_total,
        ));
    }
    out
}

fn summarize_table(
    changes: Vec<Change>,
    rules_before: impl Fn(&str) -> usize,
    table_rules_before: usize,
) -> Vec<Change> {
    let deleted_chains: Vec<String> = changes
        .iter()
        .filter(|c| c.op == Op::ChainDelete)
        .filter_map(|c| c.chain.clone())
        .collect();
    let table_deleted = changes.iter().any(|c| c.op == Op::TableDelete);

    // Drop rule deletes implied by a chain (or table) delete.
    let mut changes: Vec<Option<Change>> = changes
        .into_iter()
        .filter(|c| {
            !(c.op == Op::RuleDelete
                && (table_deleted
                    || c.chain
                        .as_ref()
                        .is_some_and(|ch| deleted_chains.contains(ch))))
        })
        .map(Some)
        .collect();

    cancel_unchanged(&mut changes);
    pair_replacements(&mut changes);

    // Flush detection, per surviving chain.
    let mut deletes_by_chain: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut adds_by_chain: HashMap<String, usize> = HashMap::new();
    for (i, c) in changes.iter().enumerate() {
        let Some(c) = c else { continue };
        let Some(chain) = c.chain.clone() else {
            continue;
        };
        match c.op {
            Op::RuleDelete => deletes_by_chain.entry(chain).or_default().push(i),
            Op::RuleAdd | Op::RuleReplace => *adds_by_chain.entry(chain).or_default() += 1,
            _ => {}
        }
    }
    let mut flushed: Vec<(String, usize, usize)> = Vec::new(); // chain, rules, first index
    for (chain, idx) in &deletes_by_chain {
        let before = rules_before(chain);
        if before > 0 && idx.len() == before && !adds_by_chain.contains_key(chain) {
            flushed.push((chain.clone(), before, idx[0]));
        }
    }
    for (chain, _, first) in &flushed {
        let idx = &deletes_by_chain[chain];
        let template = changes[*first]
            .take()
            .expect("index points at a rule delete");
        for &i in &idx[1..] {
            changes[i] = None;
        }
        // The only rule of a chain deleted looks exactly like a flush of that chain: keep the
        // rule, so that [`settle_flushes`] can say which it was.
        let only = (idx.len() == 1).then(|| template.rule.clone()).flatten();
        let forms = if only.is_some() {
            template.forms.clone()
        } else {
            RuleForms::default()
        };
        changes[*first] = Some(Change {
            op: Op::ChainFlush,
            rule: only,
            forms,
            position: None,
            fingerprint: None,
            detail: Some(plural(idx.len() as u64, "rule deleted", "rules deleted")),
            ..template
        });
    }
    // Collected in place: an `Option<Change>` is the size of a `Change`, and `filter_map`
    // (unlike `flatten`) reuses the list's room.
    #[allow(clippy::filter_map_identity)]
    let mut out: Vec<Change> = changes.into_iter().filter_map(|c| c).collect();
    let only_flushes = out.iter().all(|c| c.op == Op::ChainFlush);
    let rules: usize = flushed.iter().map(|f| f.1).sum();
    if flushed.len() > 1 && only_flushes && rules == table_rules_before {
        let first = out.remove(0);
        out = vec![Change {
            op: Op::TableFlush,
            chain: None,
            rule: None,
            forms: RuleForms::default(),
            detail: Some(format!("{} chains, {} rules deleted", flushed.len(), rules)),
            ..first
        }];
    }
    out
}

/// What the writer asked for, when known: tells a flush from the delete of a chain's only
/// rule, which the rulesets before and after cannot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlushEvidence {
    /// Nothing known about the request.
    Unknown,
    /// A flush: of these chains, or of every chain when empty (`-F`, a restore).
    Flush(Vec<String>),
    /// Rules deleted one by one (`-D`).
    Delete,
}

impl FlushEvidence {
    /// From an iptables-family command line (`iptables -w 5 -t nat -F KUBE-POSTROUTING`).
    pub fn from_args(args: &[String]) -> FlushEvidence {
        let Some(tool) = args.first() else {
            return FlushEvidence::Unknown;
        };
        let tool = tool.rsplit('/').next().unwrap_or(tool);
        if tool.contains("restore") {
            // A restore writes each chain it names in full: one it left empty is flushed.
            return FlushEvidence::Flush(Vec::new());
        }
        let mut rest = args[1..].iter();
        while let Some(a) = rest.next() {
            match a.as_str() {
                "-F" | "--flush" => {
                    let chain = rest.next().filter(|c| !c.starts_with('-')).cloned();
                    return FlushEvidence::Flush(chain.into_iter().collect());
                }
                "-D" | "--delete" => return FlushEvidence::Delete,
                _ => {}
            }
        }
        FlushEvidence::Unknown
    }

    fn flushes(&self, chain: &str) -> bool {
        match self {
            FlushEvidence::Flush(chains) => chains.is_empty() || chains.iter().any(|c| c == chain),
            _ => false,
        }
    }
}

/// Settle each one-rule `chain_flush` of [`summarize`]: a flush when the writer asked for one,
/// otherwise the `rule_delete` of that rule, saying when the kernel alone could not tell.
pub fn settle_flushes(changes: &mut [Change], evidence: &FlushEvidence) {
    for c in changes.iter_mut() {
        if c.op != Op::ChainFlush || c.rule.is_none() {
            continue;
        }
        let chain = c.chain.clone().unwrap_or_default();
        if evidence.flushes(&chain) {
            c.rule = None;
            continue;
        }
        c.op = Op::RuleDelete;
        c.detail = Some(match evidence {
            FlushEvidence::Delete => "the chain's only rule".to_string(),
            _ => "the chain's only rule; a flush (-F) of a one-rule chain looks the same to the \
                  kernel, and the writer's request was not seen"
                .to_string(),
        });
    }
}

/// Settle each `set_flush` that carries the element it emptied the set of (the nftables
/// generation attaches a set's only element): a flush when the writer asked for one (`nft flush
/// set`); the `element_delete` of that element when it asked to delete it (`nft delete
/// element`) or when its request was not seen (saying so). Otherwise a flush, without it.
pub fn settle_set_flushes(changes: &mut [Change], evidence: &FlushEvidence) {
    for c in changes.iter_mut() {
        if c.op != Op::SetFlush || c.rule.is_none() {
            continue;
        }
        let one = c.detail.as_deref() == Some("1 element deleted");
        match evidence {
            FlushEvidence::Delete => {
                c.op = Op::ElementDelete;
                c.detail = c.detail.as_deref().map(|d| d.replace(" deleted", ""));
            }
            FlushEvidence::Unknown if one => {
                c.op = Op::ElementDelete;
                c.detail = Some(
                    "1 element, the set's last; a flush of a one-element set looks the same to \
                     the kernel, and the writer's request was not seen"
                        .into(),
                );
            }
            _ => c.rule = None,
        }
    }
}

/// Remove delete/add pairs of the same rule (same chain, same fingerprint): each delete takes the
/// first remaining add of its twin. Indexed, so a 20,000-rule flush stays linear.
fn cancel_unchanged(changes: &mut [Option<Change>]) {
    let mut adds: HashMap<(Option<String>, u64), VecDeque<usize>> = HashMap::new();
    for (j, c) in changes.iter().enumerate() {
        if let Some(c) = c {
            if let (Op::RuleAdd, Some(fp)) = (c.op, c.fingerprint) {
                adds.entry((c.chain.clone(), fp)).or_default().push_back(j);
            }
        }
    }
    if adds.is_empty() {
        return;
    }
    for i in 0..changes.len() {
        let Some(del) = changes[i].as_ref() else {
            continue;
        };
        let (Op::RuleDelete, Some(fp)) = (del.op, del.fingerprint) else {
            continue;
        };
        let twin = adds
            .get_mut(&(del.chain.clone(), fp))
            .and_then(VecDeque::pop_front);
        if let Some(j) = twin {
            changes[i] = None;
            changes[j] = None;
        }
    }
}

/// Turn a delete and an add at the same position of the same chain into one `rule_replace`.
fn pair_replacements(changes: &mut [Option<Change>]) {
    let mut adds: HashMap<(Option<String>, usize), VecDeque<usize>> = HashMap::new();
    for (j, c) in changes.iter().enumerate() {
        if let Some(c) = c {
            if let (Op::RuleAdd, Some(pos)) = (c.op, c.position) {
                adds.entry((c.chain.clone(), pos)).or_default().push_back(j);
            }
        }
    }
    if adds.is_empty() {
        return;
    }
    for i in 0..changes.len() {
        let Some(del) = changes[i].as_ref() else {
            continue;
        };
        let (Op::RuleDelete, Some(pos)) = (del.op, del.position) else {
            continue;
        };
        let add = adds
            .get_mut(&(del.chain.clone(), pos))
            .and_then(VecDeque::pop_front);
        if let Some(j) = add {
            let old = changes[i].take().expect("checked above");
            let new = changes[j].take().expect("indexed as an add");
            let was = old.rule.unwrap_or_default();
            changes[j] = Some(Change {
                op: Op::RuleReplace,
                detail: Some(format!("was: {was}")),
                ..new
            });
        }
    }
}

/// `1 rule deleted`, `3 rules deleted`.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}
