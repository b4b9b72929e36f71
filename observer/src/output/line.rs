//! The lines of the output contract: `status`, `change` and `incident` (and `gap`), one
//! [`Line`] each (docs/tail.md, "JSON lines"; docs/incidents.md, "Fields"). Field names are
//! stable; new fields may be added.

use serde::{Deserialize, Serialize};

use crate::attribution::ProcessInfo;
use crate::ruleset::{Backend, ChangeResult, Family, Op, RuleForms, RuleSyntax};
use crate::timestamp::Timestamp;

/// Where a change was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Fentry,
    Kprobe,
    Tracepoint,
    Netlink,
}

impl Source {
    /// The name in the JSON line (`source`) and the metrics' label.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Fentry => "fentry",
            Source::Kprobe => "kprobe",
            Source::Tracepoint => "tracepoint",
            Source::Netlink => "netlink",
        }
    }
}

/// One line of output.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Line {
    Status(StatusLine),
    Change(ChangeLine),
    /// Boxed: an incident line is twice a change line's size, and changes are most lines.
    Incident(Box<IncidentLine>),
}

/// `{"kind":"status",...}`: readiness, what is watched, what is lost.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusLine {
    pub state: StatusState,
    pub time: Timestamp,
    /// One sentence for a person.
    pub message: String,
    /// Which backend each hook is on, and why better ones were refused (the kernel's error), e.g.
    /// `x_tables=kprobe namespaces=tracepoint nf_tables=netlink nf_writers=tracepoint
    /// (x_tables: fentry refused: ...)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hooks: Option<String>,
    /// The sources that feed the stream.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<Source>,
    /// Namespaces watched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netns_watched: Option<usize>,
    /// What this run cannot see, one sentence each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<String>,
    /// On a gap line of `observer query`: the stretch the record does not hold (its first and
    /// last seq and time, how many changes, and why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_gap: Option<crate::store::RecordGap>,
    /// What a gap line lost, for counters; not part of the line.
    #[serde(skip)]
    pub gap: Option<Gap>,
    /// The backend of the x_tables hook (`fentry`, `kprobe`, `tracepoint`, or `none`) on a ready
    /// line from the kernel, for counters; not part of the line.
    #[serde(skip)]
    pub x_tables_hook: Option<&'static str>,
}

/// What a status line says of the run. The names are part of the output contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusState {
    /// Every hook attached and every subscription open (for a view of a record or a stream:
    /// following it); what cannot be seen is listed in `lost`.
    Ready,
    /// Something was not seen or not sent, and the message says what.
    Gap,
    /// Running, with something wrong that the message names.
    Warning,
    /// The run ended.
    Stopped,
}

impl StatusState {
    /// The name in the JSON line.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusState::Ready => "ready",
            StatusState::Gap => "gap",
            StatusState::Warning => "warning",
            StatusState::Stopped => "stopped",
        }
    }
}

impl std::fmt::Display for StatusState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a gap line lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    /// Kernel records: lost in a full ring buffer, replaces not tracked, records undecodable.
    Kernel { records: u64 },
    /// A namespace's nftables notifications (overflow, or its reader stopped).
    Netlink,
    /// Anything else (a failed kernel read or map update, a table replaced before its read).
    Other,
}

impl Gap {
    /// The `cause` label of the gap counter.
    pub fn cause(self) -> &'static str {
        match self {
            Gap::Kernel { .. } => "ringbuf",
            Gap::Netlink => "netlink",
            Gap::Other => "other",
        }
    }
}

impl StatusLine {
    /// A ready line that says only what is followed (views fed from a record or a stream
    /// rather than from the kernel: no hooks, no namespaces of their own).
    pub fn ready(message: String) -> StatusLine {
        StatusLine::new(StatusState::Ready, message)
    }

    /// A gap line: something was not seen or not sent, and the message says what.
    pub fn gap(gap: Gap, message: String) -> StatusLine {
        StatusLine {
            gap: Some(gap),
            ..StatusLine::new(StatusState::Gap, message)
        }
    }

    /// A warning line: observer goes on, and the message says what it does differently.
    pub fn warning(message: String) -> StatusLine {
        StatusLine::new(StatusState::Warning, message)
    }

    /// A status line of `state` with only a message.
    fn new(state: StatusState, message: String) -> StatusLine {
        StatusLine {
            state,
            time: Timestamp::now(),
            message,
            hooks: None,
            sources: Vec::new(),
            netns_watched: None,
            lost: Vec::new(),
            record_gap: None,
            gap: None,
            x_tables_hook: None,
        }
    }

    /// A gap line of `observer query`: the record does not hold `g`; `message` says so.
    pub fn record_gap(g: &crate::store::RecordGap, message: String) -> StatusLine {
        StatusLine {
            time: g.first_time,
            record_gap: Some(g.clone()),
            ..StatusLine::gap(Gap::Other, message)
        }
    }
}

/// `{"kind":"change",...}`: one change to one object. Read back by `observer query`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChangeLine {
    pub seq: u64,
    /// RFC 3339 with nanoseconds, UTC, in the line.
    pub time: Timestamp,
    /// The network namespace inode.
    pub netns: u32,
    /// The `ip netns` name of the namespace, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netns_name: Option<String>,
    /// The node that saw the change: set by the fleet view (`tail --nats`), which shows many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub backend: Backend,
    pub family: Family,
    pub table: String,
    pub chain: Option<String>,
    pub op: Op,
    /// The rule, for rule ops (backend syntax); the elements, for element ops.
    pub rule: Option<String>,
    /// For nftables rule ops: `rule_syntax` (`iptables` or `nft`: the syntax of `rule`),
    /// `rule_nft` (the rule in nft syntax) and `iptables_unreadable` (see [`RuleForms`]).
    #[serde(flatten, default)]
    pub forms: RuleForms,
    /// The rule's position in its chain, from 0: before the transaction for a delete, after it
    /// for an add or a replace. What `observer query --at` replays rules at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<usize>,
    /// What else a person needs: the old rule of a replace, a chain's hook and policy, how many
    /// rules a flush removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Groups the changes of one x_tables replace or one nftables generation.
    pub txn: String,
    /// `ok`, or the error.
    pub result: ChangeResult,
    pub source: Source,
    pub process: std::sync::Arc<ProcessInfo>,
    /// Set when the change predates observer's subscription to a namespace it found late: it was
    /// read from the namespace's ruleset, not seen as it happened.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// Set when the kernel dropped this change's notifications (the socket's buffer overflowed)
    /// and it was found by re-reading the namespace: its writer is the one the kernel hooks saw
    /// writing there meanwhile, when that is one writer (else `unknown`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recovered: bool,
    /// Set on observer's own writes (`--restore`): the incident whose losses they put back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<String>,
}

impl ChangeLine {
    /// The backend whose syntax `rule` is written in: an iptables-nft rule printed as
    /// `iptables-nft-save` prints it reads like a legacy one.
    pub fn rule_backend(&self) -> Backend {
        if self.forms.rule_syntax == Some(RuleSyntax::Iptables) {
            Backend::Legacy
        } else {
            self.backend
        }
    }
}

/// Where a line happened, for people: the namespace's name (else its inode), after the node's
/// name when the view shows several nodes (`node-a/blue`).
/// The node is named by [`node_label`].
pub fn where_label(node: Option<&str>, netns_name: Option<&str>, netns: u32) -> String {
    let ns = netns_name.map_or_else(|| netns.to_string(), str::to_string);
    match node {
        Some(n) => format!("{}/{ns}", node_label(n)),
        None => ns,
    }
}

/// A node's name as the screen shows it: its first DNS label, whole, the part that tells the
/// nodes of one fleet apart (`ip-10-0-1-23` for `ip-10-0-1-23.us-west-2.compute.internal`,
/// as `kubectl get nodes` reads on most clusters once the shared domain is dropped). A name
/// that is an IP address, or whose first label is empty, is shown whole. JSON keeps the full
/// name.
pub fn node_label(node: &str) -> &str {
    if node.parse::<std::net::IpAddr>().is_ok() {
        return node;
    }
    match node.split_once('.') {
        Some((first, _)) if !first.is_empty() => first,
        _ => node,
    }
}

/// `{"kind":"incident",...}`: one state of an ownership conflict. Every line of one incident has
/// the same `id`; `state` says whether it opened, grew, or ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct IncidentLine {
    pub id: String,
    /// When the event that produced this line happened (or when a window expired).
    pub time: Timestamp,
    /// When the incident's first event happened.
    pub since: Timestamp,
    pub state: IncidentState,
    #[serde(rename = "type")]
    pub kind: IncidentKind,
    pub severity: Severity,
    pub netns: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netns_name: Option<String>,
    /// The node that saw the incident: set by the fleet view (`tail --nats`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub backend: Backend,
    pub family: Family,
    pub table: String,
    pub chains: Vec<String>,
    pub owner: String,
    pub actors: Vec<String>,
    /// The `seq` of every change line that makes the incident.
    pub events: Vec<u64>,
    pub summary: String,
    /// `flapping`: how many times the objects were undone and restored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycles: Option<u32>,
    /// `flapping`: when the last cycle completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<Timestamp>,
    /// `rule_drift`: the new rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// `rule_drift`: the rule it replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub was: Option<String>,
    /// `rule_drift`: what the new rule lost, in rule syntax.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<String>,
    /// Each owner hit, and whether, when and by whom it was repaired (every type but
    /// `split_brain` and `flapping`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<OwnerHit>,
    /// Every `family table` involved, when the incident spans more than one table.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<String>,
    /// The `mass_flush` this incident became part of (its last line, state `resolved`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged_into: Option<String>,
    /// `split_brain`: the owner's chains in each backend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backends: Option<SplitBackends>,
    /// `split_brain`: the backend the owner wrote last, when a write was seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_backend: Option<Backend>,
    /// The line that tells of a restore (`--restore`): what observer put back, would have, or
    /// why it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<super::restore::RestoreNote>,
    /// When a D-Bus firewall manager made the changes on a caller's request: the first such
    /// caller (as in the changes' `process.requested_by`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<Box<crate::attribution::Requester>>,
}

impl IncidentLine {
    /// The owners (of a `mass_flush`) that have not repaired what was undone.
    pub fn unrepaired_owners(&self) -> Vec<&str> {
        self.owners
            .iter()
            .filter(|o| !o.repaired)
            .map(|o| o.owner.as_str())
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IncidentState {
    /// Raised (or raised again: a repeat after a repair, within the flapping window).
    Open,
    /// It grew: more events, a repair of one owner, a flapping cycle.
    Update,
    /// Over: the owners repaired what was undone (`owners[].repair_ms`), the loop stopped with
    /// the owner's objects in place, or the split is gone.
    Resolved,
    /// Over without a repair within the bound (`--repair-within`): still broken, said plainly.
    Expired,
}

impl IncidentState {
    pub fn as_str(self) -> &'static str {
        match self {
            IncidentState::Open => "open",
            IncidentState::Update => "update",
            IncidentState::Resolved => "resolved",
            IncidentState::Expired => "expired",
        }
    }

    /// Resolved or expired: no more lines follow for this incident.
    pub fn is_final(self) -> bool {
        matches!(self, IncidentState::Resolved | IncidentState::Expired)
    }
}

/// The incident types of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IncidentKind {
    ForeignDelete,
    ForeignFlush,
    Unhooked,
    Flapping,
    RuleDrift,
    MassFlush,
    SplitBrain,
}

impl IncidentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            IncidentKind::ForeignDelete => "foreign_delete",
            IncidentKind::ForeignFlush => "foreign_flush",
            IncidentKind::Unhooked => "unhooked",
            IncidentKind::Flapping => "flapping",
            IncidentKind::RuleDrift => "rule_drift",
            IncidentKind::MassFlush => "mass_flush",
            IncidentKind::SplitBrain => "split_brain",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// One owner hit by a `mass_flush`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OwnerHit {
    pub owner: String,
    pub chains: Vec<String>,
    pub repaired: bool,
    /// Milliseconds from the flush to the owner's first re-creation.
    pub repair_ms: Option<u64>,
    /// The actor whose write repaired it (usually the owner itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repaired_by: Option<String>,
    /// A write by the owner that the kernel refused during the gap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// One owner's chains in each backend.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SplitBackends {
    pub legacy: Vec<String>,
    pub nft: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_named_by_its_first_label_unless_it_is_an_address() {
        let eks = "ip-10-0-1-23.us-west-2.compute.internal";
        assert_eq!(node_label(eks), "ip-10-0-1-23");
        assert_eq!(where_label(Some(eks), None, 7), "ip-10-0-1-23/7");
        assert_eq!(node_label("node-a"), "node-a");
        assert_eq!(node_label("10.0.1.23"), "10.0.1.23");
        assert_eq!(node_label("fd00::1"), "fd00::1");
        assert_eq!(node_label(".odd"), ".odd");
        assert_eq!(where_label(None, Some("blue"), 7), "blue");
    }

    fn sample() -> ChangeLine {
        ChangeLine {
            seq: 3,
            time: crate::timestamp::Timestamp::parse("2026-11-21T05:42:37.000000001Z").unwrap(),
            netns: 4026532317,
            netns_name: Some("blue".into()),
            node: None,
            backend: Backend::Legacy,
            family: Family::Ip,
            table: "filter".into(),
            chain: Some("KUBE-FIREWALL".into()),
            op: Op::RuleAdd,
            rule: Some("-j DROP".into()),
            forms: Default::default(),
            position: None,
            detail: None,
            txn: "xt-1".into(),
            result: "ok".into(),
            source: Source::Tracepoint,
            process: ProcessInfo {
                cgroup: Some(1),
                ..ProcessInfo::named(10, "iptables-legacy", Some((9, "kubelet")), "kubelet")
            }
            .into(),
            replayed: false,
            recovered: false,
            restore: None,
        }
    }

    #[test]
    fn change_lines_carry_the_contract_fields() {
        let v: serde_json::Value = serde_json::to_value(Line::Change(sample())).unwrap();
        for key in [
            "kind", "seq", "time", "netns", "backend", "family", "table", "chain", "op", "rule",
            "txn", "result", "source", "process",
        ] {
            assert!(v.get(key).is_some(), "missing {key} in {v}");
        }
        assert_eq!(v["kind"], "change");
        assert_eq!(v["backend"], "legacy");
        assert_eq!(v["family"], "ip");
        assert_eq!(v["op"], "rule_add");
        assert_eq!(v["source"], "tracepoint");
        for key in [
            "pid",
            "tid",
            "comm",
            "ppid",
            "parent_comm",
            "actor",
            "cgroup",
        ] {
            assert!(v["process"].get(key).is_some(), "missing process.{key}");
        }
        assert!(
            v.get("replayed").is_none(),
            "replayed appears only when true"
        );
    }

    #[test]
    fn status_lines_start_with_kind_status() {
        let s = Line::Status(StatusLine {
            state: StatusState::Ready,
            time: Timestamp::now(),
            message: "watching".into(),
            hooks: Some("tracepoint".into()),
            sources: vec![Source::Tracepoint, Source::Netlink],
            netns_watched: Some(2),
            lost: vec![],
            record_gap: None,
            gap: None,
            x_tables_hook: Some("tracepoint"),
        });
        let line = serde_json::to_string(&s).unwrap();
        assert!(
            line.starts_with(r#"{"kind":"status","state":"ready""#),
            "{line}"
        );
    }

    #[test]
    fn an_iptables_nft_rule_carries_its_nft_form_and_reads_back() {
        let mut c = sample();
        c.backend = Backend::Nft;
        c.forms = RuleForms {
            rule_syntax: Some(RuleSyntax::Iptables),
            rule_nft: Some("counter drop".into()),
            iptables_unreadable: None,
        };
        let line = serde_json::to_string(&Line::Change(c.clone())).unwrap();
        assert!(
            line.contains(r#""rule":"-j DROP","rule_syntax":"iptables","rule_nft":"counter drop""#),
            "{line}"
        );
        assert!(!line.contains("iptables_unreadable"), "{line}");
        let Line::Change(back) = serde_json::from_str(&line).unwrap() else {
            panic!("not a change: {line}");
        };
        assert_eq!(back.forms, c.forms);
        assert_eq!(back.rule_backend(), Backend::Legacy);
        // A legacy line has none of these fields, and reads back without them.
        let legacy = serde_json::to_string(&Line::Change(sample())).unwrap();
        assert!(
            !legacy.contains("rule_nft") && !legacy.contains("rule_syntax"),
            "{legacy}"
        );
        let Line::Change(back) = serde_json::from_str(&legacy).unwrap() else {
            panic!("not a change: {legacy}");
        };
        assert!(back.forms.is_empty());
    }

    #[test]
    fn result_and_status_state_read_back_as_they_are_written() {
        let mut c = sample();
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["result"], "ok");
        c.result = ChangeResult::Refused("EBUSY: Device or resource busy".into());
        let line = serde_json::to_string(&c).unwrap();
        assert!(
            line.contains(r#""result":"EBUSY: Device or resource busy""#),
            "{line}"
        );
        let back: ChangeLine = serde_json::from_str(&line).unwrap();
        assert!(!back.result.is_applied());
        assert_eq!(back.result, c.result);
        assert_eq!(back.time, c.time);

        let gap = Line::Status(StatusLine::gap(Gap::Netlink, "lost".into()));
        let line = serde_json::to_string(&gap).unwrap();
        assert!(line.contains(r#""state":"gap""#), "{line}");
        let Line::Status(back) = serde_json::from_str(&line).unwrap() else {
            panic!("not a status line: {line}");
        };
        assert_eq!(back.state, StatusState::Gap);
        assert!(serde_json::from_str::<StatusState>(r#""paused""#).is_err());
    }
}
