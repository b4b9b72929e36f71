//! `GET /metrics`: Prometheus text exposition of what the daemon saw and lost.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::sinks::nats::publish::NatsStats;
use crate::sinks::record_writer::StoreStats;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChangeLabels {
    pub backend: String,
    pub op: String,
    pub source: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IncidentLabels {
    pub r#type: String,
    pub severity: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GapLabels {
    /// `ringbuf` (kernel records lost or untracked), `netlink` (nftables notifications lost), or
    /// `other`.
    pub cause: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KernelErrorLabels {
    pub kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LegacyTableLabels {
    /// `writer_copy` (decoded from the table the writer handed the kernel, as the eBPF side
    /// copied it) or `read_back` (read from the kernel: the table was too large to copy, the
    /// ring buffer too full, or the copy not usable).
    pub from: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    /// `stdout` (the HTTP streams' clients catch up from memory and the record; the NATS
    /// publisher from the record).
    pub sink: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RestoreLabels {
    /// An owner `--restore` names (the list bounds the series).
    pub owner: String,
    /// restored, skipped_owner_repaired, refused_conflict, gave_up, failed, dry_run.
    pub outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HookLabels {
    pub backend: String,
}

/// `from` of a legacy table decoded from its writer's copy.
pub const LEGACY_FROM_COPY: &str = "writer_copy";
/// `from` of a legacy table read back from the kernel.
pub const LEGACY_FROM_READ: &str = "read_back";

pub struct Metrics {
    registry: Registry,
    pub changes: Family<ChangeLabels, Counter>,
    pub incidents: Family<IncidentLabels, Counter>,
    /// Incidents open now (raised and neither resolved nor expired).
    pub incidents_open: Family<IncidentLabels, Gauge>,
    /// What `--restore` did, by owner and outcome.
    pub restores: Family<RestoreLabels, Counter>,
    pub gaps: Family<GapLabels, Counter>,
    pub kernel_records_lost: Counter,
    /// The eBPF programs' own error counters, by kind.
    pub kernel_errors: Family<KernelErrorLabels, Counter>,
    /// Legacy tables learned after a replace, by where from.
    pub legacy_tables: Family<LegacyTableLabels, Counter>,
    /// Legacy tables held at chain level now (`--rule-level-limit`).
    pub chain_level_tables: Gauge,
    /// Namespaces whose nftables ruleset is held at chain level.
    pub nft_chain_level: Gauge,
    pub hooks: Family<HookLabels, Gauge>,
    pub netns_watched: Gauge,
    pub sse_clients: Gauge,
    pub ready: Gauge,
    /// Lines a reader lost because it did not keep up, by reader.
    pub sink_dropped: Family<SinkLabels, Counter>,
}

impl Metrics {
    pub fn new(store: Option<Arc<StoreStats>>, nats: Option<Arc<NatsStats>>) -> Metrics {
        let mut registry = Registry::with_prefix("observer");
        let changes = Family::<ChangeLabels, Counter>::default();
        registry.register(
            "changes",
            "Ruleset changes seen, by backend, op and source",
            changes.clone(),
        );
        let incidents = Family::<IncidentLabels, Counter>::default();
        registry.register(
            "incidents",
            "Ownership-conflict incidents raised, by type and severity",
            incidents.clone(),
        );
        let incidents_open = Family::<IncidentLabels, Gauge>::default();
        registry.register(
            "incidents_open",
            "Incidents open now (neither resolved nor expired), by type and severity",
            incidents_open.clone(),
        );
        let restores = Family::<RestoreLabels, Counter>::default();
        registry.register(
            "restores",
            "Restores of what a foreign wipe took (--restore), by owner and outcome",
            restores.clone(),
        );
        let gaps = Family::<GapLabels, Counter>::default();
        // Every cause exists from the start, at 0: an alert on `increase()` then sees the first
        // gap (a series born at 1 has no increase).
        for cause in ["ringbuf", "netlink", "other"] {
            let _ = gaps.get_or_create(&GapLabels {
                cause: cause.into(),
            });
        }
        registry.register(
            "gaps",
            "Times the stream reported that changes may be missing, by cause",
            gaps.clone(),
        );
        let kernel_records_lost = Counter::default();
        registry.register(
            "kernel_records_lost",
            "Kernel records lost (ring buffer full, too many replaces in flight, undecodable)",
            kernel_records_lost.clone(),
        );
        let kernel_errors = Family::<KernelErrorLabels, Counter>::default();
        for (kind, _) in crate::hooks::KernelErrors::default().by_kind() {
            let _ = kernel_errors.get_or_create(&KernelErrorLabels { kind: kind.into() });
        }
        registry.register(
            "kernel_errors",
            "Errors counted by the eBPF programs: ring buffer full (records lost), calls in \
             flight not followed (map full), failed memory reads, other failed map updates",
            kernel_errors.clone(),
        );
        let legacy_tables = Family::<LegacyTableLabels, Counter>::default();
        for from in [LEGACY_FROM_COPY, LEGACY_FROM_READ] {
            let _ = legacy_tables.get_or_create(&LegacyTableLabels { from: from.into() });
        }
        registry.register(
            "legacy_tables",
            "Legacy (x_tables) tables learned after a replace, by where from: the writer's copy, \
             or read back from the kernel (the fallback: the kernel's copy alone costs about a \
             fifth of an iptables-save of the table)",
            legacy_tables.clone(),
        );
        let chain_level_tables = Gauge::default();
        registry.register(
            "chain_level_tables",
            "Legacy tables held at chain level now: more rules than --rule-level-limit leaves \
             for their namespace, or --rule-level-budget for the namespaces other than the node's together; their changes are told a \
             chain at a time, without rule text",
            chain_level_tables.clone(),
        );
        let nft_chain_level = Gauge::default();
        registry.register(
            "nft_chain_level_namespaces",
            "Namespaces whose nftables ruleset is held at chain level: it has more rules than \
             --rule-level-limit (and, for a namespace other than the node's, --rule-level-budget) \
             allows; its changes are told a chain at a time, without rule text",
            nft_chain_level.clone(),
        );
        let hooks = Family::<HookLabels, Gauge>::default();
        registry.register(
            "hook_backend",
            "The kernel hook backend in use (1 for the one in use)",
            hooks.clone(),
        );
        let netns_watched = Gauge::default();
        registry.register(
            "netns_watched",
            "Network namespaces watched when the stream became ready",
            netns_watched.clone(),
        );
        let sse_clients = Gauge::default();
        registry.register(
            "stream_clients",
            "Clients connected to /events or /incidents",
            sse_clients.clone(),
        );
        let ready = Gauge::default();
        registry.register(
            "ready",
            "1 once every hook is attached and every subscription open",
            ready.clone(),
        );
        let sink_dropped = Family::<SinkLabels, Counter>::default();
        // The series exists from the start, at 0 (the NATS publisher and the stream clients
        // catch up from the record and lose nothing).
        let _ = sink_dropped.get_or_create(&SinkLabels {
            sink: "stdout".into(),
        });
        registry.register(
            "sink_dropped",
            "Lines a reader did not get because it did not keep up, by reader",
            sink_dropped.clone(),
        );
        if let Some(stats) = &store {
            register_record(&mut registry, stats);
        }
        if let Some(nats) = nats {
            register_nats(&mut registry, &nats);
            if let Some(stats) = &store {
                register_held(&mut registry, stats);
            }
        }
        Metrics {
            registry,
            changes,
            incidents,
            incidents_open,
            restores,
            gaps,
            kernel_records_lost,
            kernel_errors,
            legacy_tables,
            chain_level_tables,
            nft_chain_level,
            hooks,
            netns_watched,
            sse_clients,
            ready,
            sink_dropped,
        }
    }

    /// The drop counter of one reader.
    pub fn dropped(&self, sink: &str) -> Counter {
        self.sink_dropped
            .get_or_create(&SinkLabels { sink: sink.into() })
            .clone()
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!("encoding metrics: {e}");
        }
        out
    }
}

/// The record writer's counters, kept by the writer and shown here.
fn register_record(registry: &mut Registry, stats: &StoreStats) {
    registry.register(
        "record_rows",
        "Records written to the record, dropped (writer behind), failed (write error such \
         as a full disk) or expired (retention)",
        stats.rows.clone(),
    );
    registry.register(
        "record_reopened",
        "Times the record's file was found deleted or replaced and a new one was made \
         at its path",
        stats.reopened.clone(),
    );
    registry.register(
        "record_size_bytes",
        "Size of the record file and its write-ahead log",
        stats.bytes.clone(),
    );
    registry.register(
        "record_gaps",
        "Gap rows written to the record: stretches of rows it could not take (disk full, \
         I/O error, writer behind), each kept so that queries say so",
        stats.gaps.clone(),
    );
    registry.register(
        "record_failing_since_seconds",
        "While rows are not reaching the record: since when (Unix time); 0 while it takes them",
        stats.failing_since.clone(),
    );
    registry.register(
        "record_failing",
        "1 for the reason rows are not reaching the record (disk full, i/o error: ...), \
         while they are not",
        stats.failing.clone(),
    );
}

/// The rows the record could not take, held for the NATS publisher.
fn register_held(registry: &mut Registry, stats: &StoreStats) {
    registry.register(
        "nats_unrecorded_held_rows",
        "Rows the record could not take (disk full, I/O error, writer behind), held in memory \
         until NATS JetStream acknowledges them",
        stats.held.rows_held.clone(),
    );
    registry.register(
        "nats_unrecorded_lost",
        "Rows the record could not take that could not be held for NATS either (past 32 MiB \
         held): the stream lacks them as the record does, whose gap row says so",
        stats.held.not_held.clone(),
    );
}

/// The NATS publisher's counters, kept by the publisher and shown here.
fn register_nats(registry: &mut Registry, nats: &NatsStats) {
    registry.register(
        "nats_published",
        "Lines acknowledged by NATS JetStream, by kind (change, incident)",
        nats.published.clone(),
    );
    registry.register(
        "nats_connected",
        "1 while connected to the NATS server and publishing",
        nats.connected.clone(),
    );
    registry.register(
        "nats_backlog_rows",
        "Rows of the record not yet acknowledged by NATS JetStream (within the stream's \
         max age)",
        nats.backlog.clone(),
    );
    registry.register(
        "nats_backlog_oldest_seconds",
        "Seconds since the oldest row not yet acknowledged by NATS JetStream was \
         recorded (0: none waits)",
        nats.backlog_age.clone(),
    );
}
