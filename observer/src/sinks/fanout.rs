//! `observer run`'s `engine::Output`: a fan-out of every record to the daemon's sinks, stdout
//! (JSON lines), the record writer, the metrics, and the live streams of the HTTP endpoint
//! ([`super::http::hub`]); NATS reads the record behind it.
//!
//! Each record is serialised once; that JSON text is what stdout, the record and every stream
//! carry. The metrics are counted from the typed record. No sink waits for another: each has
//! its own bound.

use std::collections::HashMap;
use std::sync::Arc;

use super::http::hub::{Event, Hub, Meta, Stream};
use super::metrics::{ChangeLabels, GapLabels, HookLabels, IncidentLabels};
use super::record_writer::{Row, StoreSender};
use super::stdout::StdoutQueue;
use crate::engine::Output;
use crate::output::line::{Gap, IncidentState, StatusState};
use crate::output::{Line, StatusLine};
use crate::store::ChangeRow;

/// The engine's output in `observer run`.
pub struct DaemonOutput {
    hub: Arc<Hub>,
    store: Option<StoreSender>,
    streamer: Arc<Streamer>,
    /// The record number of the last incident.
    incident_no: u64,
    /// Incidents open now, by id, with their metric labels.
    open: HashMap<String, IncidentLabels>,
    /// When snapshots go into the record.
    snapshots: crate::forensics::SnapshotPolicy,
}

/// Streams a line: into stdout's queue, then to the HTTP clients. With a record, the record's
/// writer runs it once the line's row is committed, so that nothing is streamed that the record
/// lacks. Neither waits for its reader: stdout has a bounded queue of its own
/// ([`super::stdout`]), the clients a ring they catch up from ([`super::http::hub`]).
struct Streamer {
    hub: Arc<Hub>,
    stdout: Option<StdoutQueue>,
}

impl Streamer {
    fn stream(&self, json: Arc<str>, publish: Option<(Stream, Event)>) {
        if let Some(out) = &self.stdout {
            out.push(json);
        }
        if let Some((s, ev)) = publish {
            self.hub.publish(s, ev);
        }
    }
}

impl DaemonOutput {
    pub fn new(
        hub: Arc<Hub>,
        stdout: Option<StdoutQueue>,
        store: Option<StoreSender>,
        last_incident: u64,
        snapshots: crate::forensics::SnapshotPolicy,
    ) -> DaemonOutput {
        DaemonOutput {
            streamer: Arc::new(Streamer {
                hub: hub.clone(),
                stdout,
            }),
            hub,
            store,
            incident_no: last_incident,
            open: HashMap::new(),
            snapshots,
        }
    }

    /// Record `row` (if any), then stream `json` and publish it: at once without a record,
    /// after the row's commit with one.
    fn out(&self, row: Option<Row>, json: Arc<str>, publish: Option<(Stream, Event)>) {
        let streamer = self.streamer.clone();
        let then = move || streamer.stream(json, publish);
        match &self.store {
            Some(st) => {
                st.send_then(row, Some(Box::new(then)));
            }
            None => then(),
        }
    }

    fn on_status(&self, s: &StatusLine, json: &Arc<str>) {
        let m = &self.hub.metrics;
        match s.state {
            StatusState::Ready => {
                if let Some(backend) = s.x_tables_hook {
                    m.hooks
                        .get_or_create(&HookLabels {
                            backend: backend.into(),
                        })
                        .set(1);
                }
                if let Some(n) = s.netns_watched {
                    m.netns_watched.set(n as i64);
                }
                m.ready.set(1);
                self.hub.set_ready(json.clone());
            }
            StatusState::Gap => {
                let gap = s.gap.unwrap_or(Gap::Other);
                if let Gap::Kernel { records } = gap {
                    m.kernel_records_lost.inc_by(records);
                }
                m.gaps
                    .get_or_create(&GapLabels {
                        cause: gap.cause().into(),
                    })
                    .inc();
            }
            StatusState::Warning | StatusState::Stopped => {}
        }
    }
}

impl Output for DaemonOutput {
    fn chain_level_tables(&mut self, tables: usize) {
        self.hub.metrics.chain_level_tables.set(tables as i64);
    }

    fn nft_chain_level(&mut self, namespaces: usize) {
        self.hub.metrics.nft_chain_level.set(namespaces as i64);
    }

    fn table_learned(&mut self, read_back: bool) {
        use super::metrics::{LegacyTableLabels, LEGACY_FROM_COPY, LEGACY_FROM_READ};
        let from = if read_back {
            LEGACY_FROM_READ
        } else {
            LEGACY_FROM_COPY
        };
        self.hub
            .metrics
            .legacy_tables
            .get_or_create(&LegacyTableLabels { from: from.into() })
            .inc();
    }

    fn kernel_errors(&mut self, errors: &crate::hooks::KernelErrors) {
        for (kind, total) in errors.by_kind() {
            let c = self
                .hub
                .metrics
                .kernel_errors
                .get_or_create(&super::metrics::KernelErrorLabels { kind: kind.into() });
            let seen = c.get();
            if total > seen {
                c.inc_by(total - seen);
            }
        }
    }

    fn snapshot_policy(&self) -> Option<crate::forensics::SnapshotPolicy> {
        self.store.as_ref().map(|_| self.snapshots)
    }

    fn resumed(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        self.store.as_ref().map(StoreSender::resumed)
    }

    fn snapshot(&mut self, snapshot: crate::forensics::Snapshot) {
        if let Some(st) = &self.store {
            st.send_then(Some(Row::Snapshot(snapshot)), None);
        }
    }

    fn emit(&mut self, record: &Line) -> std::io::Result<()> {
        let json: Arc<str> = serde_json::to_string(record)?.into();
        if let Line::Status(s) = record {
            // Before stdout: whoever reads the ready line there may ask /readyz at once.
            self.on_status(s, &json);
        }
        if let Line::Change(c) = record {
            let meta = Meta::from_change(c);
            self.hub
                .metrics
                .changes
                .get_or_create(&ChangeLabels {
                    backend: c.backend.as_str().into(),
                    op: c.op.as_str().into(),
                    source: c.source.as_str().into(),
                })
                .inc();
            let row = self.store.as_ref().map(|_| {
                Row::Change(ChangeRow {
                    seq: c.seq,
                    time_ns: meta.time_ns,
                    netns: Some(c.netns),
                    backend: meta.backend.clone(),
                    table: meta.table.clone(),
                    chain: c.chain.clone(),
                    op: meta.op.clone(),
                    actor: Some(c.process.actor.clone()),
                    comm: Some(c.process.comm.clone()),
                    json: json.clone(),
                })
            });
            let ev = Event {
                id: Some(c.seq),
                json: json.clone(),
                meta,
            };
            self.out(row, json, Some((Stream::Changes, ev)));
        } else if let Line::Status(_) = record {
            // Status lines go to live clients, unnumbered.
            let ev = Event {
                id: None,
                json: json.clone(),
                meta: Meta::default(),
            };
            self.out(None, json, Some((Stream::Changes, ev)));
        } else if let Line::Incident(i) = record {
            let meta = Meta::from_incident(i);
            self.incident_no += 1;
            let no = self.incident_no;
            let labels = IncidentLabels {
                r#type: i.kind.as_str().into(),
                severity: i.severity.as_str().into(),
            };
            let m = &self.hub.metrics;
            if let Some(r) = &i.restore {
                m.restores
                    .get_or_create(&crate::sinks::metrics::RestoreLabels {
                        owner: r.owner.clone(),
                        outcome: r.outcome.as_str().into(),
                    })
                    .inc();
            }
            match i.state {
                IncidentState::Resolved | IncidentState::Expired => {
                    if let Some(l) = self.open.remove(&i.id) {
                        m.incidents_open.get_or_create(&l).dec();
                    }
                }
                IncidentState::Open | IncidentState::Update => {
                    if !self.open.contains_key(&i.id) {
                        // Raised (or raised again after it was resolved).
                        m.incidents.get_or_create(&labels).inc();
                        m.incidents_open.get_or_create(&labels).inc();
                        self.open.insert(i.id.clone(), labels);
                    }
                }
            }
            let row = self.store.as_ref().map(|_| Row::Incident {
                no,
                time_ns: meta.time_ns,
                kind: meta.kind.clone(),
                netns: meta.netns,
                json: json.clone(),
            });
            let ev = Event {
                id: Some(no),
                json: json.clone(),
                meta,
            };
            self.out(row, json, Some((Stream::Incidents, ev)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
