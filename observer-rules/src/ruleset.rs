//! The backend-neutral view of a ruleset change.
//!
//! Both readers (the x_tables reader, which diffs whole tables, and the nftables reader, which
//! receives per-object notifications) produce [`Change`]s for one transaction of one table. They
//! then hand the list to [`summarize`], which turns the raw per-rule deltas into what a person
//! means: a chain whose rules were all deleted is a `chain_flush`, a table whose chains were all
//! emptied is a `table_flush`, a delete and an add at the same position is a `rule_replace`, and a
//! rule deleted and re-added unchanged (a restore that rewrites a chain as it was) is no change.

use std::fmt;

use serde::{Deserialize, Serialize};

mod forms;
mod summary;

pub use forms::{RuleForms, RuleSyntax};
pub use summary::{plural, settle_flushes, settle_set_flushes, summarize, FlushEvidence};

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

/// The built-in chains of x_tables (the hooks: INPUT, FORWARD...; arptables' IN and OUT): nobody
/// owns them; the jumps in them are what matters.
pub fn is_builtin_chain(name: &str) -> bool {
    matches!(
        name,
        "INPUT" | "OUTPUT" | "FORWARD" | "PREROUTING" | "POSTROUTING" | "IN" | "OUT"
    )
}

/// The words of a rule as `iptables-save` or `nft list` prints it: split on whitespace, a
/// double-quoted string (a comment, with `\"` inside) being one word, kept with its quotes.
pub fn words(rule: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = rule.trim_start();
    while !rest.is_empty() {
        let end = if rest.starts_with('"') {
            let mut escaped = false;
            rest.char_indices()
                .skip(1)
                .find(|&(_, c)| {
                    let close = c == '"' && !escaped;
                    escaped = c == '\\' && !escaped;
                    close
                })
                .map_or(rest.len(), |(i, _)| i + 1)
        } else {
            rest.find(char::is_whitespace).unwrap_or(rest.len())
        };
        out.push(&rest[..end]);
        rest = rest[end..].trim_start();
    }
    out
}

/// The chains a rule jumps or goes to, in order: `-j NAME`, `-g NAME` (and `--jump`, `--goto`)
/// in `iptables-save` syntax, `jump NAME`, `goto NAME` in nft's. `syntax` `None` reads it from the
/// text (an `iptables-save` rule begins with an option or a `!`; an nft rule never does). A
/// comment is never taken for a jump: a quoted one is one word (see [`words`]), and the value of
/// `--comment`, which `iptables-save` leaves unquoted when it is one plain word, is skipped.
pub fn jump_targets(syntax: Option<RuleSyntax>, rule: &str) -> Vec<&str> {
    let words = words(rule);
    let syntax = syntax.unwrap_or_else(|| match words.first() {
        Some(w) if w.starts_with('-') || *w == "!" => RuleSyntax::Iptables,
        _ => RuleSyntax::Nft,
    });
    let (flags, comment): (&[&str], &str) = match syntax {
        RuleSyntax::Iptables => (&["-j", "--jump", "-g", "--goto"], "--comment"),
        RuleSyntax::Nft => (&["jump", "goto"], "comment"),
    };
    let mut out = Vec::new();
    let mut it = words.into_iter();
    while let Some(w) = it.next() {
        if flags.contains(&w) {
            out.extend(it.next().map(|t| t.trim_matches('"')));
        } else if w == comment {
            it.next();
        }
    }
    out
}

#[cfg(test)]
mod tests;
