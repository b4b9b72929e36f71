//! Fleet streaming on NATS JetStream: `observer run --nats URL` publishes every change and every
//! incident line of the node (`publish`), and `observer tail --nats URL` shows every node's lines,
//! interleaved, with the node named (`fleet`).
//!
//! Subjects are `observer.<node>.change` and `observer.<node>.incident`, where `<node>` is the
//! node's name with the characters a NATS subject token cannot hold (`.`, `*`, `>`, spaces) made
//! `_`; the exact name travels in the `Observer-Node` header. Every message carries the row's
//! number in the record (`Observer-Seq`: a change's `seq`, an incident line's record number) and
//! the record's id (`Observer-Record`), and its message id is `<node>.<record id>.<c|i><number>`:
//! JetStream drops a message it already holds under that id (within the stream's duplicate
//! window), so a publish retried after a lost acknowledgement is stored once.
//!
//! The publisher's bound is `--nats-window` (rows in flight); what waits beyond it waits in the
//! record, which is the spool. `flags` holds the connection's flags and the stream's defaults.

pub mod auth;
pub mod flags;
pub mod publish;

use std::time::Duration;

use async_nats::jetstream;

pub const HEADER_NODE: &str = "Observer-Node";
pub const HEADER_SEQ: &str = "Observer-Seq";
pub const HEADER_RECORD: &str = "Observer-Record";

pub use flags::{DEFAULT_MAX_AGE, DEFAULT_MAX_BYTES, DEFAULT_STREAM, DEFAULT_WINDOW};

/// What `observer run --nats` needs.
#[derive(Debug, Clone)]
pub struct NatsSettings {
    pub url: String,
    /// The node's name (Kubernetes node name; the host name by default).
    pub node: String,
    pub stream: String,
    pub max_age: Duration,
    pub max_bytes: u64,
    pub replicas: usize,
    /// Rows in flight at most (sent, their acknowledgement not yet received).
    pub window: usize,
    /// TLS and credentials.
    pub auth: auth::NatsAuth,
}

/// The kinds of line published, and their subject suffixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Change,
    Incident,
}

impl Kind {
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Kind::Change => "change",
            Kind::Incident => "incident",
        }
    }

    /// The same kind among the rows held for the publisher.
    pub(crate) fn held(self) -> crate::sinks::record_writer::held::HeldKind {
        use crate::sinks::record_writer::held::HeldKind;
        match self {
            Kind::Change => HeldKind::Change,
            Kind::Incident => HeldKind::Incident,
        }
    }

    fn id_letter(self) -> char {
        match self {
            Kind::Change => 'c',
            Kind::Incident => 'i',
        }
    }
}

/// The node's name as one subject token.
pub fn subject_token(node: &str) -> String {
    let t: String = node
        .chars()
        .map(|c| {
            if c == '.' || c == '*' || c == '>' || c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    if t.is_empty() {
        "_".into()
    } else {
        t
    }
}

pub fn subject(node: &str, kind: Kind) -> String {
    format!("observer.{}.{}", subject_token(node), kind.suffix())
}

pub fn message_id(node: &str, record_id: &str, kind: Kind, number: u64) -> String {
    format!("{node}.{record_id}.{}{number}", kind.id_letter())
}

/// The stream every node publishes to, as `observer run` creates it when it is missing.
pub fn stream_config(s: &NatsSettings) -> jetstream::stream::Config {
    jetstream::stream::Config {
        name: s.stream.clone(),
        subjects: vec!["observer.>".into()],
        max_age: s.max_age,
        max_bytes: i64::try_from(s.max_bytes).unwrap_or(i64::MAX),
        num_replicas: s.replicas,
        storage: jetstream::stream::StorageType::File,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    }
}

/// The host name, as the default node name.
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-node".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_become_one_subject_token() {
        assert_eq!(
            subject("ip-10-0-0-1.ec2.internal", Kind::Change),
            "observer.ip-10-0-0-1_ec2_internal.change"
        );
        assert_eq!(subject("a b>*", Kind::Incident), "observer.a_b__.incident");
        assert_eq!(subject("", Kind::Change), "observer._.change");
        assert_eq!(
            message_id("node-a", "f00d", Kind::Incident, 42),
            "node-a.f00d.i42"
        );
    }
}
