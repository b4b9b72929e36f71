//! x_tables (iptables-legacy, ip6tables-legacy, arptables-legacy, ebtables-legacy): decode a
//! table as the kernel returns it, render its rules in `iptables-save` syntax and diff two copies.
//!
//! x_tables sends no notifications: the agent's eBPF hooks see that a table was replaced, and the
//! agent then reads the whole table once through getsockopt (in the netns where it changed) and
//! hands the bytes here, to compare with the copy it read last time. The pieces:
//! - [`decode`]: the `GET_ENTRIES` blob into chains and rules with structural fingerprints;
//! - [`render`]: one rule into `iptables-save` text, only when a change needs it;
//! - [`diff`]: two copies of a table into [`ruleset::Change`]s, summarized.
//!
//! Decoding keeps the raw blob and renders lazily: a 20,000-rule table is read, fingerprinted and
//! diffed without formatting the rules that did not change.

use std::collections::HashMap;
use std::fmt;

use crate::ruleset;

pub mod bytes;
pub mod decode;
pub mod diff;
pub mod ebt;
mod ext;
mod packed;
mod render;
mod text;

#[cfg(any(test, feature = "test-utils"))]
#[doc(hidden)]
pub mod testblob;
#[cfg(test)]
mod tests;

pub use decode::decode_replace;
pub use diff::diff;
pub(crate) use render::{ext_text, ext_text_named, proto_name};

/// Which x_tables family a table belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XtProto {
    /// `ip_tables` (iptables-legacy).
    Ipv4,
    /// `ip6_tables` (ip6tables-legacy).
    Ipv6,
    /// `arp_tables` (arptables-legacy).
    Arp,
}

impl XtProto {
    /// The family as the shared change model names it.
    pub fn family(self) -> ruleset::Family {
        match self {
            XtProto::Ipv4 => ruleset::Family::Ip,
            XtProto::Ipv6 => ruleset::Family::Ip6,
            XtProto::Arp => ruleset::Family::Arp,
        }
    }

    /// Names of the hooks, indexed by hook number (NF_INET_* or NF_ARP_*).
    pub fn hook_names(self) -> &'static [&'static str] {
        match self {
            XtProto::Ipv4 | XtProto::Ipv6 => {
                &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]
            }
            XtProto::Arp => &["INPUT", "OUTPUT", "FORWARD"],
        }
    }
}

impl fmt::Display for XtProto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            XtProto::Ipv4 => "ip",
            XtProto::Ipv6 => "ip6",
            XtProto::Arp => "arp",
        })
    }
}

/// Errors of reading and decoding an x_tables table.
#[derive(Debug, thiserror::Error)]
pub enum XtError {
    /// The table does not exist in this network namespace (it is not listed in
    /// `*_tables_names`, or the kernel answered ENOENT).
    #[error("no {proto} table {name:?} in this network namespace")]
    NoSuchTable { proto: XtProto, name: String },
    /// The kernel refused the request: reading x_tables needs root (CAP_NET_ADMIN in the
    /// network namespace that owns the table).
    #[error("{op}: permission denied: reading x_tables needs root (CAP_NET_ADMIN)")]
    PermissionDenied { op: &'static str },
    /// The table name does not fit the kernel's 32-byte, NUL-terminated name field.
    #[error("invalid table name {0:?}")]
    BadName(String),
    /// A system call failed for another reason.
    #[error("{op}: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The table is larger than the reader may read at once (its entries are copied out in
    /// one call: reading it would take that much memory).
    #[error(
        "{proto} table {name:?} takes {size} bytes in the kernel, more than the {cap} bytes \
         observer reads at once"
    )]
    TooLarge {
        proto: XtProto,
        name: String,
        size: u64,
        cap: usize,
    },
    /// The table was replaced again between `GET_INFO` and `GET_ENTRIES` on every attempt.
    #[error("{proto} table {name:?} kept changing while being read ({attempts} attempts)")]
    Unstable {
        proto: XtProto,
        name: String,
        attempts: u32,
    },
    /// The kernel's answer does not have the layout this decoder expects.
    #[error("malformed x_tables data at byte {offset}: {reason}")]
    Malformed { offset: usize, reason: &'static str },
}

/// One x_tables table as read from the kernel.
#[derive(Clone)]
pub struct XtTable {
    pub proto: XtProto,
    pub name: String,
    /// Chains in kernel order: built-in chains in hook order, then user chains. A chain that
    /// did not change is shared with the copy of the table before it.
    pub chains: Vec<std::sync::Arc<XtChain>>,
    /// The rules' entries as the kernel returned them, packed; kept so that a rule's text is
    /// rendered only when a change needs it.
    entries: packed::Packed,
    /// ipset indices that `-m set` matches and `-j SET` targets refer to, sorted.
    set_refs: Vec<u16>,
    /// ipset index -> name, resolved when the table was read (for `-m set`).
    set_names: HashMap<u16, String>,
    /// How many of its chains were taken from the previous copy instead of decoded.
    carried: usize,
    /// Bytes of `entries` its rules use (the rest is what other copies of the table use).
    live: usize,
    /// Held at chain level: its chains' names, policies, keys and rule counts only, no rules
    /// (a table with more rules than the decode had room for; see [`Against::room`]).
    chain_level: bool,
}

impl fmt::Debug for XtTable {
    // The entries can be megabytes: show their size, not their bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XtTable")
            .field("proto", &self.proto)
            .field("name", &self.name)
            .field("chains", &self.chains)
            .field("entries_packed", &self.entries.len())
            .field("set_names", &self.set_names)
            .field("chain_level", &self.chain_level)
            .finish()
    }
}

/// One chain of an [`XtTable`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XtChain {
    pub name: String,
    /// A built-in chain (attached to a hook) rather than a user chain.
    pub builtin: bool,
    /// The policy of a built-in chain (`ACCEPT`, `DROP`, ...); `None` for user chains.
    pub policy: Option<String>,
    /// Its rules; empty for a chain of a table held at chain level (see
    /// [`XtChain::rule_count`]).
    pub rules: Vec<XtRule>,
    /// How many rules it has (`rules.len()`, unless its table is held at chain level).
    pub(crate) count: usize,
    /// A hash of the chain's entries as they define its rules and policy (not its counters, not
    /// where in the table it sits): equal keys in two copies of a table mean the chain did not
    /// change, so it is neither decoded again nor diffed. Comparable within one process run.
    pub(crate) key: u64,
    /// The ipset indices its rules refer to, sorted.
    pub(crate) sets: Vec<u16>,
    /// Bytes its rules' packed entries take.
    pub(crate) kept: usize,
}

/// One rule of an [`XtChain`]. Its text is rendered on demand by [`XtTable::rule_text`].
/// Two rules are equal when their structure and verdict are, wherever their entries are kept.
#[derive(Debug, Clone, Copy)]
pub struct XtRule {
    /// A hash of the rule's structure (addresses, interfaces, matches, target; for a jump the
    /// target chain's name), not of its counters. Comparable within one process run only.
    pub fingerprint: u64,
    /// Where the rule's entry is in the table's packed entries.
    packed_at: u32,
    /// What the standard target of the entry means, resolved at decode time.
    verdict: Verdict,
}

impl PartialEq for XtRule {
    fn eq(&self, other: &Self) -> bool {
        (self.fingerprint, self.verdict) == (other.fingerprint, other.verdict)
    }
}

impl Eq for XtRule {}

/// The meaning of an entry's target, as far as decoding needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A target extension (`-j MARK ...`): rendered from the entry.
    Extension,
    /// A standard verdict (the raw negative value: -1 DROP, -2 ACCEPT, -4 QUEUE, -5 RETURN).
    Standard(i32),
    /// A jump (`-j`) or goto (`-g`) to the chain with this index in [`XtTable::chains`].
    Jump { chain: u32, goto: bool },
    /// A rule without a target: the verdict points at the next entry.
    Fallthrough,
    /// A jump to an offset where no chain starts (never written by iptables).
    BadJump(i32),
}

impl XtChain {
    /// How many rules it has, whether they are held or not.
    pub fn rule_count(&self) -> usize {
        self.count
    }
}

/// What a table is decoded against: the last copy of it, whose unchanged chains are taken as
/// they are, and how many rules may be held rule by rule.
#[derive(Debug, Clone, Copy)]
pub struct Against<'p> {
    pub prev: Option<&'p XtTable>,
    /// The most rules the table may have to be held rule by rule; a table with more is held at
    /// chain level (its chains' names, policies, rule counts and a hash of each, no rules), so
    /// that one namespace's huge table costs little memory.
    pub room: usize,
}

impl<'p> From<Option<&'p XtTable>> for Against<'p> {
    /// Against `prev`, held rule by rule whatever its size.
    fn from(prev: Option<&'p XtTable>) -> Self {
        Against {
            prev,
            room: usize::MAX,
        }
    }
}

impl XtTable {
    /// Whether the table's chains are, in order, the chains `names` (a replace that rewrote
    /// rules, not chains, keeps them so: the decode and the diff then pair chains by place).
    pub(crate) fn has_chains_named<'a>(
        &self,
        names: impl ExactSizeIterator<Item = &'a str>,
    ) -> bool {
        self.chains.len() == names.len() && self.chains.iter().zip(names).all(|(c, n)| c.name == n)
    }

    /// Bytes kept for the rules' entries (packed), in segments this copy holds, some of them
    /// shared with the copy before it.
    pub fn kept_bytes(&self) -> usize {
        self.entries.len()
    }

    /// Bytes of [`XtTable::kept_bytes`] this copy's rules use.
    pub fn live_bytes(&self) -> usize {
        self.live
    }

    /// How many chains were taken unchanged from the previous copy when this one was decoded
    /// (the others were decoded).
    pub fn carried_chains(&self) -> usize {
        self.carried
    }

    /// The rule's entry as the kernel returned it (`None` only for a rule of another table).
    pub(crate) fn entry_bytes(&self, rule: &XtRule) -> Option<Vec<u8>> {
        self.entries.unpack(rule.packed_at)
    }

    /// The rule in `iptables-save` syntax without the `-A CHAIN ` prefix.
    pub fn rule_text(&self, rule: &XtRule) -> String {
        render::rule_text(self, rule)
    }

    /// The chain with this name.
    #[cfg(any(test, feature = "test-utils"))]
    #[doc(hidden)]
    pub fn chain(&self, name: &str) -> Option<&XtChain> {
        self.chains.iter().find(|c| c.name == name).map(|c| &**c)
    }

    /// The chains that the rules of `chain` jump or go to, one entry per rule.
    pub fn jump_targets(&self, chain: &XtChain) -> Vec<String> {
        chain
            .rules
            .iter()
            .filter_map(|r| match r.verdict {
                Verdict::Jump { chain, .. } => {
                    self.chains.get(chain as usize).map(|c| c.name.clone())
                }
                _ => None,
            })
            .collect()
    }

    /// How many rules the whole table holds.
    pub fn rule_count(&self) -> usize {
        self.chains.iter().map(|c| c.count).sum()
    }

    /// Whether it is held at chain level: its chains without their rules, because it had more
    /// rules than the decode had room for ([`Against::room`]). Its changes are then told a
    /// chain at a time ([`diff`]).
    pub fn chain_level(&self) -> bool {
        self.chain_level
    }

    /// How many entries the kernel holds for it (`num_entries` of `GET_INFO` and of the
    /// replace struct): every rule, each chain's policy or closing `RETURN`, each user chain's
    /// head, and the table's final entry.
    pub fn entry_count(&self) -> usize {
        let heads = self.chains.iter().filter(|c| !c.builtin).count();
        self.rule_count() + self.chains.len() + heads + 1
    }

    /// The table in `iptables-save` format, without counters or the comment lines.
    #[cfg(any(test, feature = "test-utils"))]
    #[doc(hidden)]
    pub fn save_text(&self) -> String {
        let mut out = format!("*{}\n", self.name);
        for c in &self.chains {
            out.push_str(&format!(
                ":{} {}\n",
                c.name,
                c.policy.as_deref().unwrap_or("-")
            ));
        }
        for c in &self.chains {
            for r in &c.rules {
                let text = self.rule_text(r);
                out.push_str("-A ");
                out.push_str(&c.name);
                if !text.is_empty() {
                    out.push(' ');
                    out.push_str(&text);
                }
                out.push('\n');
            }
        }
        out.push_str("COMMIT\n");
        out
    }

    /// The ipset indices that `-m set` matches and `-j SET` targets of this table refer to.
    pub fn set_indices(&self) -> &[u16] {
        &self.set_refs
    }

    /// Record the name of an ipset index, for rendering `-m set`.
    pub fn set_name(&mut self, index: u16, name: String) {
        self.set_names.insert(index, name);
    }
}
