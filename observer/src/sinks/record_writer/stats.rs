//! The record writer's counters, shown by the metrics endpoint (and through it by `observer
//! doctor --remote`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};

use crate::timestamp::Timestamp;

/// The `outcome` label of the record's row counter: `written`, `dropped` (the writer was
/// behind), `failed` (a write failed: disk full, I/O error) or `expired` (retention).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    pub outcome: String,
}

/// Counters shared with the metrics endpoint.
#[derive(Debug)]
pub struct StoreStats {
    pub rows: Family<Outcome, Counter>,
    /// Size of the file and its write-ahead log, in bytes.
    pub bytes: Gauge,
    /// Signalled after each batch the writer commits: a reader of the record (the NATS
    /// publisher) waits on it instead of polling.
    pub committed: tokio::sync::Notify,
    /// Times the record's file was found deleted or replaced under the writer, which then made
    /// a new record at its path.
    pub reopened: Counter,
    /// Gap rows written (stretches the record could not take, see [`gaps`]).
    pub gaps: Counter,
    /// While rows are being lost: since when (Unix seconds); 0 while the record takes them.
    pub failing_since: Gauge,
    /// While rows are being lost: 1 for the reason (`disk full`, `i/o error: ...`).
    pub failing: Family<Reason, Gauge>,
    /// Rows the record could not take, held for the NATS publisher until it has sent them.
    pub held: super::held::Held,
    /// Signalled after the writer wrote the gap rows of a stretch it could not take: the
    /// engine then snapshots every namespace, so that the rulesets rebuilt after the gap are
    /// whole again.
    pub resumed: std::sync::Arc<tokio::sync::Notify>,
}

/// The `reason` label of `observer_record_failing`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    pub reason: String,
}

impl Default for StoreStats {
    fn default() -> Self {
        let s = StoreStats {
            rows: Family::default(),
            bytes: Gauge::default(),
            committed: tokio::sync::Notify::new(),
            reopened: Counter::default(),
            gaps: Counter::default(),
            failing_since: Gauge::default(),
            failing: Family::default(),
            held: Default::default(),
            resumed: Default::default(),
        };
        // Every series exists from the start, at 0.
        for o in ["written", "dropped", "failed", "expired"] {
            s.count(o, 0);
        }
        s
    }
}

impl StoreStats {
    /// Add `n` rows to an outcome; returns the new total.
    pub fn count(&self, outcome: &str, n: u64) -> u64 {
        self.rows
            .get_or_create(&Outcome {
                outcome: outcome.into(),
            })
            .inc_by(n)
            + n
    }

    /// Rows are being lost for `reason` since `since`.
    pub(super) fn failing_for(&self, reason: &str, since: Timestamp) {
        self.failing_since
            .set(since.unix_nanos().div_euclid(1_000_000_000));
        self.failing.clear();
        self.failing
            .get_or_create(&Reason {
                reason: reason.into(),
            })
            .set(1);
    }

    /// The record takes rows again.
    pub(super) fn recovered(&self) {
        self.failing_since.set(0);
        self.failing.clear();
    }
}
