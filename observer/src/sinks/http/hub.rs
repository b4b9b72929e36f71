//! The live streams of `observer run`'s HTTP endpoint, fed by [`crate::sinks::fanout`].
//!
//! Two streams are numbered for resumption: changes by their `seq`, incidents by a record
//! number of their own (1, 2, 3... continuing across restarts with the record). Recent events
//! are also kept in memory, so that a client that falls behind or reconnects catches up from
//! memory, and from the record for anything older.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{broadcast, watch};

use crate::output::filter::Filter;
use crate::output::{ChangeLine, IncidentLine};
use crate::sinks::metrics::Metrics;
use crate::store::{self};
use crate::timestamp::Timestamp;

/// Events kept in memory per stream for clients that fall behind or reconnect.
const RING: usize = 8192;

/// Why the record's incidents could not be read for a list of them (the endpoint answers 500
/// with this text).
#[derive(Debug, thiserror::Error)]
pub enum IncidentsError {
    /// The task that reads the record ended without an answer (it panicked or was cancelled).
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    /// The record could not be opened or read.
    #[error(transparent)]
    Store(#[from] store::StoreError),
}

/// The two resumable streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Changes,
    Incidents,
}

/// The fields the stream filters look at.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Meta {
    pub time_ns: i64,
    pub netns: Option<u32>,
    pub backend: Option<String>,
    pub table: Option<String>,
    /// The change's chain, or every chain an incident names.
    pub chains: Vec<String>,
    /// The actor and the command of a change, or an incident's actors and owner.
    pub actors: Vec<String>,
    pub op: Option<String>,
    /// An incident's type.
    pub kind: Option<String>,
}

/// The actors, with both sides of each `caller (via manager)` added: `--actor firewalld` and
/// `--actor firewall-cmd` both find such a line.
fn with_via_parts(mut actors: Vec<String>) -> Vec<String> {
    let parts: Vec<String> = actors
        .iter()
        .filter_map(|a| crate::attribution::split_via(a))
        .flat_map(|(c, m)| [c.to_string(), m.to_string()])
        .collect();
    actors.extend(parts);
    actors
}

impl Meta {
    pub(in crate::sinks) fn from_change(c: &ChangeLine) -> Meta {
        Meta {
            time_ns: c.time.unix_nanos(),
            netns: Some(c.netns),
            backend: Some(c.backend.as_str().into()),
            table: Some(c.table.clone()),
            chains: c.chain.iter().cloned().collect(),
            actors: {
                let mut a = vec![c.process.actor.clone(), c.process.comm.clone()];
                if let Some(r) = &c.process.requested_by {
                    a.extend([r.comm.clone(), r.actor.clone()]);
                }
                a
            },
            op: Some(c.op.as_str().into()),
            kind: None,
        }
    }

    pub(in crate::sinks) fn from_incident(i: &IncidentLine) -> Meta {
        let mut actors = with_via_parts(i.actors.clone());
        actors.push(i.owner.clone());
        if let Some(r) = &i.requested_by {
            actors.push(r.actor.clone());
        }
        Meta {
            time_ns: i.time.unix_nanos(),
            netns: Some(i.netns),
            backend: Some(i.backend.as_str().into()),
            table: Some(i.table.clone()),
            chains: i.chains.clone(),
            actors,
            op: None,
            kind: Some(i.kind.as_str().into()),
        }
    }

    /// From a record's JSON (changes and incidents read back from the record).
    pub fn from_json(v: &Value) -> Meta {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let list = |k: &str| -> Vec<String> {
            match v.get(k) {
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect(),
                Some(Value::String(x)) => vec![x.clone()],
                _ => vec![],
            }
        };
        let mut chains = list("chain");
        chains.extend(list("chains"));
        let mut actors = with_via_parts(list("actors"));
        actors.extend(list("owner"));
        if let Some(p) = v.get("process") {
            for k in ["actor", "comm"] {
                if let Some(x) = p.get(k).and_then(Value::as_str) {
                    actors.push(x.into());
                }
            }
        }
        for r in [v.get("requested_by"), v.pointer("/process/requested_by")]
            .into_iter()
            .flatten()
        {
            for k in ["actor", "comm"] {
                if let Some(x) = r.get(k).and_then(Value::as_str) {
                    actors.push(x.into());
                }
            }
        }
        Meta {
            time_ns: s("time")
                .and_then(|t| Timestamp::parse(&t).ok())
                .unwrap_or_else(Timestamp::now)
                .unix_nanos(),
            netns: v.get("netns").and_then(Value::as_u64).map(|n| n as u32),
            backend: s("backend"),
            table: s("table"),
            chains,
            actors,
            op: s("op"),
            kind: s("type"),
        }
    }
}

/// The `tail` filters (plus incident types) applied to a stream.
#[derive(Debug, Default, Clone)]
pub struct StreamFilter {
    pub filter: Filter,
    pub types: Vec<String>,
}

impl StreamFilter {
    /// Missing fields never match a filter on them (as in `tail`); an incident has no op, so
    /// `op` does not apply to it.
    pub fn matches(&self, m: &Meta, stream: Stream) -> bool {
        let f = &self.filter;
        f.netns.is_none_or(|n| m.netns == Some(n))
            && f.backend
                .is_none_or(|b| m.backend.as_deref() == Some(b.as_str()))
            && f.table.as_ref().is_none_or(|t| m.table.as_ref() == Some(t))
            && f.chain
                .as_ref()
                .is_none_or(|g| m.chains.iter().any(|c| g.is_match(c)))
            && f.actor.as_ref().is_none_or(|a| m.actors.contains(a))
            && (stream == Stream::Incidents
                || f.ops.is_empty()
                || f.ops.iter().any(|o| m.op.as_deref() == Some(o.as_str())))
            && (self.types.is_empty() || m.kind.as_ref().is_some_and(|k| self.types.contains(k)))
    }
}

/// One event of a stream.
#[derive(Debug)]
pub struct Event {
    /// The SSE id: `seq` for changes, the incident's record number; none for status lines.
    pub id: Option<u64>,
    pub json: Arc<str>,
    pub meta: Meta,
}

struct Inner {
    changes: VecDeque<Arc<Event>>,
    incidents: VecDeque<Arc<Event>>,
}

/// Shared by the output and the HTTP handlers.
pub struct Hub {
    inner: Mutex<Inner>,
    changes_tx: broadcast::Sender<Arc<Event>>,
    incidents_tx: broadcast::Sender<Arc<Event>>,
    pub metrics: Metrics,
    ready: AtomicBool,
    /// The ready line, sent first to every new `/events` client.
    ready_line: Mutex<Option<Arc<str>>>,
    pub record: Option<PathBuf>,
    shutdown: watch::Sender<bool>,
}

impl Hub {
    pub fn new(metrics: Metrics, record: Option<PathBuf>) -> Hub {
        Hub {
            inner: Mutex::new(Inner {
                changes: VecDeque::new(),
                incidents: VecDeque::new(),
            }),
            changes_tx: broadcast::channel(4096).0,
            incidents_tx: broadcast::channel(1024).0,
            metrics,
            ready: AtomicBool::new(false),
            ready_line: Mutex::new(None),
            record,
            shutdown: watch::channel(false).0,
        }
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The engine is ready: `line` is its ready line, which every new client gets first.
    pub(in crate::sinks) fn set_ready(&self, line: Arc<str>) {
        if let Ok(mut l) = self.ready_line.lock() {
            *l = Some(line);
        }
        self.ready.store(true, Ordering::Relaxed);
    }

    pub fn ready_line(&self) -> Option<Arc<str>> {
        self.ready_line.lock().ok().and_then(|l| l.clone())
    }

    /// Ends every stream (at shutdown).
    pub fn shut_down(&self) {
        self.shutdown.send_replace(true);
    }

    pub fn on_shutdown(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    fn tx(&self, s: Stream) -> &broadcast::Sender<Arc<Event>> {
        match s {
            Stream::Changes => &self.changes_tx,
            Stream::Incidents => &self.incidents_tx,
        }
    }

    pub(in crate::sinks) fn publish(&self, s: Stream, ev: Event) {
        let ev = Arc::new(ev);
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if ev.id.is_some() {
            let ring = match s {
                Stream::Changes => &mut inner.changes,
                Stream::Incidents => &mut inner.incidents,
            };
            if ring.len() == RING {
                ring.pop_front();
            }
            ring.push_back(ev.clone());
        }
        // Sent under the lock: a client that subscribes sees each event either in its backlog or
        // on its receiver.
        let _ = self.tx(s).send(ev);
    }

    /// Subscribe to a stream; with `after`, also return what came after that id (from memory,
    /// and from the record for what memory no longer holds).
    ///
    /// The backlog holds at most [`PAGE`] events from the record: when more wait there,
    /// `Backlog::more` says so and [`Hub::since`] gives the next page.
    pub async fn attach(
        self: &Arc<Self>,
        s: Stream,
        after: Option<u64>,
    ) -> (Backlog, broadcast::Receiver<Arc<Event>>) {
        let (rx, ring, oldest) = {
            let inner = self.inner.lock().expect("hub lock");
            let rx = self.tx(s).subscribe();
            let (ring, oldest) = ring_after(&inner, s, after.unwrap_or(u64::MAX));
            (rx, ring, oldest)
        };
        let backlog = match after {
            Some(a) => self.with_record(s, a, oldest, ring).await,
            None => Backlog {
                events: ring,
                more: false,
            },
        };
        (backlog, rx)
    }

    /// The id to resume after so that a client sees everything from time `since_ns` on (for
    /// `observer tail --since`): from memory when it reaches back that far, else from the record.
    pub async fn after_time(self: &Arc<Self>, s: Stream, since_ns: i64) -> u64 {
        let (covered, in_ring, newest) = {
            let inner = self.inner.lock().expect("hub lock");
            let ring = match s {
                Stream::Changes => &inner.changes,
                Stream::Incidents => &inner.incidents,
            };
            let covered = ring.front().is_some_and(|e| e.meta.time_ns < since_ns);
            let first = ring
                .iter()
                .find(|e| e.meta.time_ns >= since_ns)
                .and_then(|e| e.id);
            (covered, first, ring.back().and_then(|e| e.id))
        };
        let from_memory = || match (in_ring, newest) {
            (Some(first), _) => first.saturating_sub(1),
            (None, Some(newest)) => newest,
            (None, None) => 0,
        };
        if covered {
            return from_memory();
        }
        let Some(path) = self.record.clone() else {
            // Memory is all there is: replay all of it.
            return in_ring.map_or(0, |f| f.saturating_sub(1));
        };
        let sel = store::Selection {
            since_ns: Some(since_ns),
            limit: Some(1),
            ..Default::default()
        };
        let first = tokio::task::spawn_blocking(move || -> Result<_, store::StoreError> {
            let conn = store::open_ro(&path)?;
            match s {
                Stream::Changes => store::select_changes(&conn, &sel),
                Stream::Incidents => store::select_incidents(&conn, &sel),
            }
        })
        .await;
        match first {
            Ok(Ok(rows)) => match rows.first() {
                Some(r) => r.number.saturating_sub(1),
                None => from_memory(),
            },
            Ok(Err(e)) => {
                tracing::warn!("finding where --since starts in the record: {e}; from memory");
                in_ring.map_or(0, |f| f.saturating_sub(1))
            }
            Err(e) => {
                tracing::warn!("finding where --since starts in the record: {e}; from memory");
                in_ring.map_or(0, |f| f.saturating_sub(1))
            }
        }
    }

    /// What came after `after` (for a client that fell behind): at most [`PAGE`] events from
    /// the record, then what memory holds.
    pub async fn since(self: &Arc<Self>, s: Stream, after: u64) -> Backlog {
        let (ring, oldest) = {
            let inner = self.inner.lock().expect("hub lock");
            ring_after(&inner, s, after)
        };
        self.with_record(s, after, oldest, ring).await
    }

    /// Put the record's events between `after` and the oldest one in memory before `ring`: at
    /// most [`PAGE`] of them, and then not `ring` when more wait in the record (a client far
    /// behind is caught up page by page, in bounded memory).
    async fn with_record(
        &self,
        s: Stream,
        after: u64,
        oldest: Option<u64>,
        ring: Vec<Arc<Event>>,
    ) -> Backlog {
        let gap = match oldest {
            Some(o) => o > after.saturating_add(1),
            None => true,
        };
        let Some(path) = self.record.clone().filter(|_| gap) else {
            let mut events = ring;
            if let (true, None, Some(o)) = (gap, &self.record, oldest) {
                events.insert(0, missed(s, o - after - 1));
            }
            return Backlog {
                events,
                more: false,
            };
        };
        let sel = store::Selection {
            after: Some(after),
            before: oldest,
            limit: Some(PAGE),
            ..Default::default()
        };
        let rows = tokio::task::spawn_blocking(move || -> Result<_, store::StoreError> {
            let conn = store::open_ro(&path)?;
            let rows = match s {
                Stream::Changes => store::select_changes(&conn, &sel)?,
                Stream::Incidents => store::select_incidents(&conn, &sel)?,
            };
            // The record's holes among the changes read: the client is told where it will not
            // get what it asked for. What memory holds after them it gets.
            let upto = match rows.last() {
                Some(r) if rows.len() == PAGE => r.number,
                _ => oldest.map_or(u64::MAX, |o| o.saturating_sub(1)),
            };
            let gaps = match s {
                Stream::Changes => store::gaps::gaps_in_seqs(&conn, after, upto)?,
                Stream::Incidents => Vec::new(),
            };
            Ok((rows, gaps))
        })
        .await;
        let mut full = false;
        let mut out: Vec<Arc<Event>> = match rows {
            Ok(Ok((rows, gaps))) => {
                full = rows.len() == PAGE;
                let mut gaps = gaps.into_iter().peekable();
                let mut out = Vec::with_capacity(rows.len() + 1);
                for r in rows {
                    while let Some(g) = gaps.next_if(|g| g.first_seq.is_none_or(|f| f < r.number)) {
                        out.push(record_gap(&g));
                    }
                    let meta = serde_json::from_str(&r.json)
                        .map(|v| Meta::from_json(&v))
                        .unwrap_or_default();
                    out.push(Arc::new(Event {
                        id: Some(r.number),
                        json: r.json.into(),
                        meta,
                    }));
                }
                out.extend(gaps.map(|g| record_gap(&g)));
                out
            }
            Ok(Err(e)) => {
                tracing::warn!("catching a client up from the record: {e}");
                vec![]
            }
            Err(e) => {
                tracing::warn!("catching a client up from the record: {e}");
                vec![]
            }
        };
        if full {
            return Backlog {
                events: out,
                more: true,
            };
        }
        out.extend(ring);
        Backlog {
            events: out,
            more: false,
        }
    }

    /// Incidents since a time, oldest first: from the record, then from memory.
    pub async fn incidents_since(
        self: &Arc<Self>,
        since_ns: Option<i64>,
    ) -> Result<Vec<Arc<Event>>, IncidentsError> {
        let ring: Vec<Arc<Event>> = {
            let inner = self.inner.lock().expect("hub lock");
            inner.incidents.iter().cloned().collect()
        };
        let mut out = Vec::new();
        if let Some(path) = self.record.clone() {
            let sel = store::Selection {
                since_ns,
                before: ring.first().and_then(|e| e.id),
                ..Default::default()
            };
            let rows = tokio::task::spawn_blocking(move || {
                let conn = store::open_ro(&path)?;
                store::select_incidents(&conn, &sel)
            })
            .await??;
            for r in rows {
                let meta = serde_json::from_str(&r.json)
                    .map(|v| Meta::from_json(&v))
                    .unwrap_or_default();
                out.push(Arc::new(Event {
                    id: Some(r.number),
                    json: r.json.into(),
                    meta,
                }));
            }
        }
        out.extend(
            ring.into_iter()
                .filter(|e| since_ns.is_none_or(|t| e.meta.time_ns >= t)),
        );
        Ok(out)
    }
}

fn ring_after(inner: &Inner, s: Stream, after: u64) -> (Vec<Arc<Event>>, Option<u64>) {
    let ring = match s {
        Stream::Changes => &inner.changes,
        Stream::Incidents => &inner.incidents,
    };
    let oldest = ring.front().and_then(|e| e.id);
    let items = ring
        .iter()
        .filter(|e| e.id.is_some_and(|i| i > after))
        .cloned()
        .collect();
    (items, oldest)
}

/// The gap line a client gets when events it asked for are gone from memory and there is no
/// record to read them from: said, never silent.
fn missed(s: Stream, n: u64) -> Arc<Event> {
    let what = match s {
        Stream::Changes => "changes",
        Stream::Incidents => "incidents",
    };
    status_event(crate::output::line::StatusLine::gap(
        crate::output::line::Gap::Other,
        format!(
            "{n} {what} were not sent to this client: they are older than the last {RING} this \
         observer keeps in memory (the client fell behind, or asked for them) and it keeps no \
         record (--no-record); run it with a record to catch clients up"
        ),
    ))
}

/// A status line as an event of its own (no id: a client's filters do not apply to it).
fn status_event(line: crate::output::StatusLine) -> Arc<Event> {
    let line = crate::output::Line::Status(line);
    Arc::new(Event {
        id: None,
        json: serde_json::to_string(&line)
            .unwrap_or_else(|e| format!(r#"{{"kind":"status","state":"gap","message":"{e}"}}"#))
            .into(),
        meta: Meta::default(),
    })
}

/// The status line (state `gap`) a client caught up from the record gets where the record
/// lacks changes.
fn record_gap(g: &store::RecordGap) -> Arc<Event> {
    status_event(crate::output::StatusLine::record_gap(g, g.message()))
}

/// The most events a client's catch-up takes from the record at a time.
pub const PAGE: usize = 1024;

/// Events for a client to send before the live stream.
#[derive(Debug, Default)]
pub struct Backlog {
    pub events: Vec<Arc<Event>>,
    /// More wait in the record after these: ask [`Hub::since`] again once they are sent.
    pub more: bool,
}

/// What every HTTP handler shares: the hub, and the bearer token that guards the endpoints.
#[derive(Clone)]
pub struct AppState {
    pub hub: Arc<Hub>,
    pub token: Option<Arc<str>>,
}

#[cfg(test)]
mod tests;
