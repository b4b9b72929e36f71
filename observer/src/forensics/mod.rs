//! Forensics on the record: what the ruleset was at any moment, what changed between two
//! moments, and the full story of one incident.
//!
//! `observer run` writes snapshots of every namespace's rulesets into the record (when it starts
//! watching a namespace, after every re-read that follows lost events, and then after a number
//! of changes or a time, whichever comes first). The ruleset at a moment is the newest snapshot
//! before it with the recorded changes after it replayed on top ([`replay`]). Needs nothing of
//! the kernel: it reads the record only.

pub mod frames;
pub mod gaps;
pub mod model;
pub mod query;
pub mod replay;
pub mod snapshots;
pub mod story;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ruleset::Backend;

/// What can go wrong reading the forensic record.
#[derive(Debug, thiserror::Error)]
pub enum ForensicsError {
    /// The record could not be read.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// An SQL query failed.
    #[error("reading the record: {0}")]
    Query(#[from] rusqlite::Error),
    /// A stored snapshot or change does not decode.
    #[error("{what} of the record cannot be read ({cause}): the file is damaged there; a time before or after it may still be rebuilt")]
    Damaged { what: String, cause: String },
    /// A time argument that is not one.
    #[error("{flag}: {cause}")]
    BadTime {
        flag: &'static str,
        cause: crate::timestamp::TimeError,
    },
    /// No incident has this id.
    #[error("no incident `{0}` in the record (ids look like foreign_delete-4026532177-17; `observer query --incidents` lists them)")]
    UnknownIncident(String),
    /// A `FROM..TO` range that is not one.
    #[error("--diff: `{0}` is not FROM..TO (two times, each relative like 2h or RFC 3339, e.g. 2h..now)")]
    BadRange(String),
}

/// When `observer run` takes snapshots beyond the ones at start and after re-reads.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotPolicy {
    /// After this many changes in a namespace's backend.
    pub changes: u64,
    /// With the first change after this long.
    pub every: Duration,
}

impl Default for SnapshotPolicy {
    fn default() -> Self {
        SnapshotPolicy {
            changes: 10_000,
            every: Duration::from_secs(3600),
        }
    }
}

/// One snapshot for the record: a namespace's tables of one backend after change `seq`.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub seq: u64,
    pub time_ns: i64,
    pub netns: u32,
    pub netns_name: Option<String>,
    pub backend: Backend,
    pub tables: Arc<model::Tables>,
}

/// Which namespaces' backends are due for a snapshot.
#[derive(Debug)]
pub struct Due {
    policy: SnapshotPolicy,
    since: HashMap<(u32, Backend), (u64, Instant)>,
}

impl Due {
    pub fn new(policy: SnapshotPolicy) -> Due {
        Due {
            policy,
            since: HashMap::new(),
        }
    }

    /// A snapshot of this namespace's backend was taken.
    pub fn taken(&mut self, netns: u32, backend: Backend) {
        self.since.insert((netns, backend), (0, Instant::now()));
    }

    /// `n` changes were made; true when a snapshot is due.
    pub fn changed(&mut self, netns: u32, backend: Backend, n: u64) -> bool {
        let e = self
            .since
            .entry((netns, backend))
            .or_insert((0, Instant::now()));
        e.0 += n;
        e.0 >= self.policy.changes || e.1.elapsed() >= self.policy.every
    }

    /// Make a snapshot of this namespace's backend due now: the next check of it says so.
    pub fn make_due(&mut self, netns: u32, backend: Backend) {
        let changes = self.policy.changes;
        let e = self
            .since
            .entry((netns, backend))
            .or_insert((0, Instant::now()));
        e.0 = e.0.max(changes);
    }

    pub fn forget(&mut self, netns: u32) {
        self.since.retain(|k, _| k.0 != netns);
    }
}

#[cfg(test)]
mod due_tests {
    use super::*;

    #[test]
    fn a_snapshot_made_due_is_due_at_the_next_check_whatever_was_counted() {
        let mut due = Due::new(SnapshotPolicy {
            changes: 10,
            every: Duration::from_secs(3600),
        });
        assert!(!due.changed(7, Backend::Legacy, 3));
        due.make_due(7, Backend::Legacy);
        assert!(due.changed(7, Backend::Legacy, 0));
        assert!(!due.changed(7, Backend::Nft, 0), "only that backend");
        due.taken(7, Backend::Legacy);
        assert!(!due.changed(7, Backend::Legacy, 1));
    }
}
