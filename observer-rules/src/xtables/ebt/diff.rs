//! Two reads of one bridge table into chain and rule changes. ebtables tables are small and
//! their rules are rendered at decode time, so the diff compares the rules' text fingerprints.

use crate::ruleset::{self, Change, Family, Op};
use crate::xtables::diff::{edit_script, Edit};

use super::{EbChain, EbTable};

/// What happened between two reads of one bridge table (`None`: the table does not exist), in
/// the ops x_tables changes use.
pub fn diff(old: Option<&EbTable>, new: Option<&EbTable>) -> Vec<Change> {
    let fam = Family::Bridge;
    let mut out = Vec::new();
    match (old, new) {
        (None, None) => {}
        (Some(o), None) => {
            let rules: usize = o.chains.iter().map(|c| c.rules.len()).sum();
            out.push(
                Change::new(Op::TableDelete, fam, &o.name)
                    .detail(format!("{} chains, {rules} rules", o.chains.len())),
            );
        }
        (None, Some(n)) => {
            out.push(Change::new(Op::TableCreate, fam, &n.name));
            for c in &n.chains {
                chain_created(&mut out, n, c);
            }
        }
        (Some(o), Some(n)) => {
            for c in &n.chains {
                if !o.chains.iter().any(|x| x.name == c.name) {
                    chain_created(&mut out, n, c);
                }
            }
            for c in &n.chains {
                let Some(oc) = o.chains.iter().find(|x| x.name == c.name) else {
                    continue;
                };
                if oc.policy != c.policy {
                    out.push(
                        Change::new(Op::ChainUpdate, fam, &n.name)
                            .chain(&c.name)
                            .detail(format!("policy {} -> {}", oc.policy, c.policy)),
                    );
                }
                let a: Vec<u64> = oc.rules.iter().map(|r| r.fingerprint).collect();
                let b: Vec<u64> = c.rules.iter().map(|r| r.fingerprint).collect();
                if a == b {
                    continue;
                }
                for edit in edit_script(&a, &b) {
                    out.push(match edit {
                        Edit::Delete(i) => Change::new(Op::RuleDelete, fam, &n.name)
                            .chain(&c.name)
                            .rule(oc.rules[i].text.clone(), Some(i), oc.rules[i].fingerprint),
                        Edit::Insert(j) => Change::new(Op::RuleAdd, fam, &n.name)
                            .chain(&c.name)
                            .rule(c.rules[j].text.clone(), Some(j), c.rules[j].fingerprint),
                    });
                }
            }
            for c in &o.chains {
                if !n.chains.iter().any(|x| x.name == c.name) {
                    let mut ch = Change::new(Op::ChainDelete, fam, &o.name).chain(&c.name);
                    if !c.rules.is_empty() {
                        ch = ch.detail(format!("{} rules deleted", c.rules.len()));
                    }
                    out.push(ch);
                }
            }
        }
    }
    let counts: foldhash::HashMap<String, usize> = old
        .map(|o| {
            o.chains
                .iter()
                .map(|c| (c.name.clone(), c.rules.len()))
                .collect()
        })
        .unwrap_or_default();
    let total: usize = counts.values().sum();
    let tname = old.map(|o| o.name.clone()).unwrap_or_default();
    ruleset::summarize(
        out,
        |f, table, chain| {
            if f == fam && table == tname {
                counts.get(chain).copied().unwrap_or(0)
            } else {
                0
            }
        },
        |f, table| if f == fam && table == tname { total } else { 0 },
    )
}

fn chain_created(out: &mut Vec<Change>, t: &EbTable, c: &EbChain) {
    let mut ch = Change::new(Op::ChainCreate, Family::Bridge, &t.name).chain(&c.name);
    if c.builtin {
        ch = ch.detail(format!("builtin, policy {}", c.policy));
    }
    out.push(ch);
    for (i, r) in c.rules.iter().enumerate() {
        out.push(
            Change::new(Op::RuleAdd, Family::Bridge, &t.name)
                .chain(&c.name)
                .rule(r.text.clone(), Some(i), r.fingerprint),
        );
    }
}
