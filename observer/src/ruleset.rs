//! The backend-neutral view of a ruleset change.
//!
//! Both readers (the x_tables reader, which diffs whole tables, and the nftables reader, which
//! receives per-object notifications) produce [`Change`]s for one transaction of one table. They
//! then hand the list to [`summarize`], which turns the raw per-rule deltas into what a person
//! means: a chain whose rules were all deleted is a `chain_flush`, a table whose chains were all
//! emptied is a `table_flush`, a delete and an add at the same position is a `rule_replace`, and a
//! rule deleted and re-added unchanged (a restore that rewrites a chain as it was) is no change.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;

use serde::{Deserialize, Serialize};

mod forms;
pub use forms::{RuleForms, RuleSyntax};

/// Which kernel subsystem holds the ruleset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// x_tables: iptables-legacy, ip6tables-legacy, arptables-legacy, ebtables-legacy.
    Legacy,
    /// nf_tables: nft, iptables-nft, firewalld...
    Nft,
    /// ipset (the `ip_set` nfnetlink subsystem): kube-proxy's ipset mode, Calico, Azure NPM...
    Ipset,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Legacy => "legacy",
            Backend::Nft => "nft",
            Backend::Ipset => "ipset",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The address family of a table, named as `nft` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    Ip,
    Ip6,
    Inet,
    Arp,
    Bridge,
    Netdev,
    /// A family number this build does not know.
    Unknown,
}

impl Family {
    /// From the nfnetlink `nfgen_family` byte (NFPROTO_*).
    pub fn from_nfproto(v: u8) -> Family {
        match v {
            1 => Family::Inet,
            2 => Family::Ip,
            3 => Family::Arp,
            5 => Family::Netdev,
            7 => Family::Bridge,
            10 => Family::Ip6,
            _ => Family::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
            Family::Inet => "inet",
            Family::Arp => "arp",
            Family::Bridge => "bridge",
            Family::Netdev => "netdev",
            Family::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the kernel made of a change: applied, or refused with its error. In a line (`result`):
/// `ok`, or the error as the kernel's code and text (`EBUSY: Device or resource busy`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(from = "String")]
pub enum ChangeResult {
    Applied,
    Refused(String),
}

impl ChangeResult {
    /// Whether the kernel applied the change.
    pub fn is_applied(&self) -> bool {
        matches!(self, ChangeResult::Applied)
    }

    /// `ok`, or the error.
    pub fn as_str(&self) -> &str {
        match self {
            ChangeResult::Applied => "ok",
            ChangeResult::Refused(e) => e,
        }
    }
}

impl From<String> for ChangeResult {
    /// The word of a line: `ok`, or anything else as the error.
    fn from(s: String) -> ChangeResult {
        if s == "ok" {
            ChangeResult::Applied
        } else {
            ChangeResult::Refused(s)
        }
    }
}

impl From<&str> for ChangeResult {
    fn from(s: &str) -> ChangeResult {
        ChangeResult::from(s.to_string())
    }
}

impl Serialize for ChangeResult {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl PartialEq<&str> for ChangeResult {
    fn eq(&self, word: &&str) -> bool {
        self.as_str() == *word
    }
}

impl fmt::Display for ChangeResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happened to an object. The names are part of the output contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    TableCreate,
    TableDelete,
    TableFlush,
    ChainCreate,
    ChainDelete,
    ChainFlush,
    ChainUpdate,
    RuleAdd,
    RuleDelete,
    RuleReplace,
    SetCreate,
    SetDelete,
    SetFlush,
    ElementAdd,
    ElementDelete,
    /// A whole-table replace seen but not diffed: one the kernel refused (`result` says why), or
    /// an ebtables replace whose table could not be read back.
    TableReplace,
    /// An ipset renamed (`chain` is the old name, `detail` the new one).
    SetRename,
    /// Two ipsets' contents exchanged (`ipset swap`).
    SetSwap,
}

impl Op {
    pub const ALL: [Op; 18] = [
        Op::TableCreate,
        Op::TableDelete,
        Op::TableFlush,
        Op::ChainCreate,
        Op::ChainDelete,
        Op::ChainFlush,
        Op::ChainUpdate,
        Op::RuleAdd,
        Op::RuleDelete,
        Op::RuleReplace,
        Op::SetCreate,
        Op::SetDelete,
        Op::SetFlush,
        Op::ElementAdd,
        Op::ElementDelete,
        Op::TableReplace,
        Op::SetRename,
        Op::SetSwap,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::TableCreate => "table_create",
            Op::TableDelete => "table_delete",
            Op::TableFlush => "table_flush",
            Op::ChainCreate => "chain_create",
            Op::ChainDelete => "chain_delete",
            Op::ChainFlush => "chain_flush",
            Op::ChainUpdate => "chain_update",
            Op::RuleAdd => "rule_add",
            Op::RuleDelete => "rule_delete",
            Op::RuleReplace => "rule_replace",
            Op::SetCreate => "set_create",
            Op::SetDelete => "set_delete",
            Op::SetFlush => "set_flush",
            Op::ElementAdd => "element_add",
            Op::ElementDelete => "element_delete",
            Op::TableReplace => "table_replace",
            Op::SetRename => "set_rename",
            Op::SetSwap => "set_swap",
        }
    }

    pub fn parse(s: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.as_str() == s)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One change to one object of one table, before attribution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub op: Op,
    pub family: Family,
    pub table: String,
    /// The chain for chain and rule ops; the set name for set and element ops.
    pub chain: Option<String>,
    /// For rule ops: the rule in the backend's own syntax (`iptables-save` for legacy, `nft` for
    /// nf_tables). For `rule_replace`, the new rule. For element ops, the element(s).
    pub rule: Option<String>,
    /// Extra words a person needs: for `rule_replace` the old rule (`was: ...`), for chains the
    /// hook and policy, for flushes how many rules went.
    pub detail: Option<String>,
    /// Position of the rule in its chain (0-based): before the transaction for deletes, after it
    /// for adds. `None` when the reader does not know it.
    pub position: Option<usize>,
    /// A structural fingerprint of the rule (not of its text, not of its counters), used to see
    /// that a deleted and re-added rule is the same rule. `None` for non-rule ops.
    pub fingerprint: Option<u64>,
    /// For nftables rule ops: the syntax of `rule` and the rule's nft form.
    pub forms: RuleForms,
}

impl Change {
    /// A change with only the op, family and table filled in.
    pub fn new(op: Op, family: Family, table: impl Into<String>) -> Change {
        Change {
            op,
            family,
            table: table.into(),
            chain: None,
            rule: None,
            detail: None,
            position: None,
            fingerprint: None,
            forms: RuleForms::default(),
        }
    }

    pub fn chain(mut self, chain: impl Into<String>) -> Change {
        self.chain = Some(chain.into());
        self
    }

    pub fn rule(mut self, rule: impl Into<String>, position: Option<usize>, fp: u64) -> Change {
        self.rule = Some(rule.into());
        self.position = position;
        self.fingerprint = Some(fp);
        self
    }

    /// An nftables rule: `rule` in its writer's syntax, the nft form beside it.
    pub fn nft_rule(
        self,
        (text, forms): (String, RuleForms),
        position: Option<usize>,
        fp: u64,
    ) -> Change {
        Change {
            forms,
            ..self.rule(text, position, fp)
        }
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Change {
        self.detail = Some(detail.into());
        self
    }
}

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
            detail: Some(plural(idx.len(), "rule deleted", "rules deleted")),
            ..template
        });
    }
    let mut out: Vec<Change> = changes.into_iter().flatten().collect();
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
fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// The built-in chains of x_tables (the hooks: INPUT, FORWARD...; arptables' IN and OUT): nobody
/// owns them; the jumps in them are what matters.
pub fn is_builtin_chain(name: &str) -> bool {
    matches!(
        name,
        "INPUT" | "OUTPUT" | "FORWARD" | "PREROUTING" | "POSTROUTING" | "IN" | "OUT"
    )
}

#[cfg(test)]
mod tests;
