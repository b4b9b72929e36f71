//! `observer run --nats URL`: publish the record's rows to JetStream, in order, each once.
//!
//! The record is the spool. The publisher reads the rows after the last one JetStream holds for
//! this node and record, publishes them one at a time, and moves on only when the server has
//! acknowledged the row (so the stream keeps each node's order even when a connection dies with
//! messages in flight). While the server is unreachable nothing is published and nothing is
//! lost: the rows wait in the record, and when the server is back the publisher asks the stream
//! for the last row it holds (`Observer-Seq` of the last message on each subject) and goes on
//! after it. A row published again after an acknowledgement that never arrived carries the same
//! message id, and JetStream stores it once.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, message::PublishMessage, stream::LastRawMessageErrorKind};
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
use tokio::sync::watch;

use super::{
    message_id, stream_config, subject, Kind, NatsSettings, HEADER_NODE, HEADER_RECORD, HEADER_SEQ,
};
use crate::store::{self, Selection, StoreError, Stored};

/// When there were no rows to publish, the publisher waits for the record writer's next commit,
/// and reads the record after this long at most anyway.
const POLL: Duration = Duration::from_secs(1);
/// Rows read from the record at a time.
const BATCH: usize = 512;

/// Why a publishing session ended (the publisher logs it, with its causes, and connects again).
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The server could not be reached.
    #[error("cannot connect to {url}")]
    Connect {
        url: String,
        #[source]
        cause: async_nats::ConnectError,
    },
    /// The TLS or credential files could not be read.
    #[error(transparent)]
    Auth(#[from] super::auth::NatsAuthError),
    /// The stream could not be looked up or created.
    #[error("cannot get or create the stream {stream}")]
    Stream {
        stream: String,
        #[source]
        cause: jetstream::context::CreateStreamError,
    },
    /// The last message on a subject could not be read (where the stream stands).
    #[error("reading the last message on {subject}")]
    LastMessage {
        subject: String,
        #[source]
        cause: jetstream::stream::LastRawMessageError,
    },
    /// The task that opens the record stopped before it answered.
    #[error("opening the record")]
    Open(#[source] tokio::task::JoinError),
    /// The record could not be opened or read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The record's connection was poisoned by a reader that panicked.
    #[error("record reader poisoned")]
    Poisoned,
    /// The task that reads the record stopped before it answered.
    #[error("the record reader stopped")]
    Reader(#[source] tokio::task::JoinError),
    /// A row could not be sent.
    #[error("publishing")]
    Send(#[source] jetstream::context::PublishError),
    /// JetStream did not acknowledge a row.
    #[error("waiting for JetStream's acknowledgement")]
    Ack(#[source] jetstream::context::PublishError),
}

/// Counters shared with `/metrics`.
#[derive(Debug, Default)]
pub struct NatsStats {
    /// Messages acknowledged by JetStream, by `kind` (`change`, `incident`).
    pub published: Family<KindLabel, Counter>,
    /// 1 while connected to the server and publishing.
    pub connected: Gauge,
    /// Rows of the record that JetStream has not acknowledged yet (changes and incident lines
    /// within the stream's max age), counted once a second from the record.
    pub backlog: Gauge,
    /// Seconds since the oldest of them was recorded (0: none waits).
    pub backlog_age: Gauge<f64, AtomicU64>,
    /// The last change and incident line acknowledged (what the backlog is counted after).
    acked_change: AtomicU64,
    acked_incident: AtomicU64,
}

impl NatsStats {
    fn acked(&self, cursor: Cursor) {
        self.acked_change.store(cursor.change, Ordering::Relaxed);
        self.acked_incident
            .store(cursor.incident, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

/// Where the publisher is: the last change `seq` and incident record number JetStream holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Cursor {
    change: u64,
    incident: u64,
}

struct Publisher {
    settings: NatsSettings,
    record: PathBuf,
    record_id: String,
    stats: Arc<NatsStats>,
    store: Arc<crate::recorder::StoreStats>,
}

/// The record the publisher reads: its path, its id and its writer's signals.
pub struct Spool {
    pub path: PathBuf,
    pub id: String,
    pub stats: Arc<crate::recorder::StoreStats>,
}

/// Start publishing the record until `shutdown` is set.
pub fn spawn(
    settings: NatsSettings,
    spool: Spool,
    stats: Arc<NatsStats>,
    mut shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let p = Publisher {
        settings,
        record: spool.path,
        record_id: spool.id,
        stats,
        store: spool.stats,
    };
    tokio::spawn(count_backlog(
        p.record.clone(),
        p.settings.max_age,
        p.stats.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(async move {
        let mut delay = Duration::from_millis(250);
        let mut failing = false;
        loop {
            let res = tokio::select! {
                r = p.session(&mut failing) => r,
                _ = shutdown.wait_for(|s| *s) => return,
            };
            p.stats.connected.set(0);
            match res {
                Ok(()) => return,
                Err(e) => {
                    let e = crate::hooks::error_chain(&e);
                    if !failing {
                        tracing::warn!(
                            "NATS {}: {e}; the rows wait in the record and are published when \
                             the server is back (retrying)",
                            p.settings.url
                        );
                        failing = true;
                    } else {
                        tracing::debug!("NATS {}: {e}", p.settings.url);
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    })
}

impl Publisher {
    /// One connection: find where the stream is, then publish until an error.
    async fn session(&self, failing: &mut bool) -> Result<(), PublishError> {
        let s = &self.settings;
        let client = s
            .auth
            .options(&s.url, format!("observer {}", s.node))
            .await?
            .connection_timeout(Duration::from_secs(5))
            .request_timeout(Some(Duration::from_secs(5)))
            .connect(super::auth::url_list(&s.url))
            .await
            .map_err(|cause| PublishError::Connect {
                url: s.url.clone(),
                cause,
            })?;
        let js = jetstream::new(client);
        let stream = js
            .get_or_create_stream(stream_config(s))
            .await
            .map_err(|cause| PublishError::Stream {
                stream: s.stream.clone(),
                cause,
            })?;
        let mut cursor = Cursor {
            change: self.last_held(&stream, Kind::Change).await?,
            incident: self.last_held(&stream, Kind::Incident).await?,
        };
        // Rows older than the stream keeps are not sent again after the stream lost them.
        let since_ns = oldest_kept(crate::timestamp::Timestamp::now().unix_nanos(), s.max_age);
        self.stats.acked(cursor);
        let mut conn = open_record(&self.record).await?;
        let mut ino = store::inode(&self.record);
        self.stats.connected.set(1);
        if *failing {
            tracing::info!(
                "NATS {}: connected; publishing from change {} and incident line {} of the record",
                s.url,
                cursor.change + 1,
                cursor.incident + 1
            );
            *failing = false;
        } else {
            tracing::info!("NATS {}: publishing to stream {}", s.url, s.stream);
        }
        loop {
            // Asked for before reading: a commit that lands during the read is not missed.
            let committed = self.store.committed.notified();
            // The writer makes a new record when the file was deleted or replaced: follow it.
            let now = store::inode(&self.record);
            if now != ino {
                conn = open_record(&self.record).await?;
                ino = now;
            }
            let rows = read_after(&conn, cursor, since_ns).await?;
            if rows.is_empty() {
                let _ = tokio::time::timeout(POLL, committed).await;
                continue;
            }
            for (kind, row) in rows {
                self.publish(&js, kind, &row).await?;
                match kind {
                    Kind::Change => cursor.change = row.number,
                    Kind::Incident => cursor.incident = row.number,
                }
                self.stats.acked(cursor);
            }
        }
    }

    /// The number of the last row of this record the stream holds on `kind`'s subject (0: none).
    async fn last_held(
        &self,
        stream: &jetstream::stream::Stream,
        kind: Kind,
    ) -> Result<u64, PublishError> {
        let subj = subject(&self.settings.node, kind);
        match stream.get_last_raw_message_by_subject(&subj).await {
            Ok(m) => {
                let header = |name: &str| m.headers.get(name).map(|v| v.as_str().to_string());
                if header(HEADER_RECORD).as_deref() != Some(self.record_id.as_str()) {
                    // Another record (this node's record was replaced): all of ours is new.
                    return Ok(0);
                }
                Ok(header(HEADER_SEQ).and_then(|v| v.parse().ok()).unwrap_or(0))
            }
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(0),
            Err(cause) => Err(PublishError::LastMessage {
                subject: subj,
                cause,
            }),
        }
    }

    async fn publish(
        &self,
        js: &jetstream::Context,
        kind: Kind,
        row: &Stored,
    ) -> Result<(), PublishError> {
        let s = &self.settings;
        let msg = PublishMessage::build()
            .message_id(message_id(&s.node, &self.record_id, kind, row.number))
            .header(HEADER_NODE, s.node.as_str())
            .header(HEADER_RECORD, self.record_id.as_str())
            .header(HEADER_SEQ, row.number.to_string().as_str())
            .payload(row.json.clone().into());
        js.send_publish(subject(&s.node, kind), msg)
            .await
            .map_err(PublishError::Send)?
            .await
            .map_err(PublishError::Ack)?;
        self.stats
            .published
            .get_or_create(&KindLabel {
                kind: kind.suffix().into(),
            })
            .inc();
        Ok(())
    }
}

/// The record, read-only, for the publisher or the backlog count.
async fn open_record(
    path: &std::path::Path,
) -> Result<Arc<Mutex<rusqlite::Connection>>, PublishError> {
    let path = path.to_path_buf();
    let conn = tokio::task::spawn_blocking(move || store::open_ro(&path))
        .await
        .map_err(PublishError::Open)??;
    Ok(Arc::new(Mutex::new(conn)))
}

/// The time (ns) of the oldest row the stream still keeps at `now_ns`: rows older than its max
/// age are neither sent nor counted as waiting.
fn oldest_kept(now_ns: i64, max_age: Duration) -> i64 {
    now_ns.saturating_sub(i64::try_from(max_age.as_nanos()).unwrap_or(i64::MAX))
}

/// How often the backlog gauges are counted.
const BACKLOG_EVERY: Duration = Duration::from_secs(1);

/// Count, once a second until `shutdown`, the rows of the record after the last acknowledged
/// ones (within the stream's max age) into the backlog gauges: apart from the publisher, so
/// that they still move while it waits on a server that does not answer.
async fn count_backlog(
    record: PathBuf,
    max_age: Duration,
    stats: Arc<NatsStats>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut conn: Option<(Option<u64>, Arc<Mutex<rusqlite::Connection>>)> = None;
    loop {
        let ino = store::inode(&record);
        if conn.as_ref().is_none_or(|(i, _)| *i != ino) {
            conn = open_record(&record).await.ok().map(|c| (ino, c));
        }
        if let Some((_, c)) = &conn {
            let c = c.clone();
            let (change, incident) = (
                stats.acked_change.load(Ordering::Relaxed),
                stats.acked_incident.load(Ordering::Relaxed),
            );
            let now = crate::timestamp::Timestamp::now().unix_nanos();
            let since_ns = oldest_kept(now, max_age);
            let counted = tokio::task::spawn_blocking(move || {
                let conn = c.lock().map_err(|_| PublishError::Poisoned)?;
                Ok::<_, PublishError>(store::pending(&conn, change, incident, since_ns)?)
            })
            .await;
            match counted {
                Ok(Ok(p)) => {
                    stats.backlog.set(i64::try_from(p.rows).unwrap_or(i64::MAX));
                    let age = p.oldest_ns.map_or(0.0, |t| (now - t).max(0) as f64 / 1e9);
                    stats.backlog_age.set(age);
                }
                Ok(Err(e)) => tracing::debug!("counting the NATS backlog: {e}"),
                Err(e) => tracing::debug!("counting the NATS backlog: {e}"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(BACKLOG_EVERY) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// The next rows after `cursor`, changes and incident lines interleaved by time (so that a
/// fleet tail sees an incident after the changes that made it), each kind in its own order.
async fn read_after(
    conn: &Arc<Mutex<rusqlite::Connection>>,
    cursor: Cursor,
    since_ns: i64,
) -> Result<Vec<(Kind, Stored)>, PublishError> {
    let conn = conn.clone();
    tokio::task::spawn_blocking(move || -> Result<Vec<(Kind, Stored)>, PublishError> {
        let conn = conn.lock().map_err(|_| PublishError::Poisoned)?;
        let sel = |after: u64| Selection {
            after: Some(after),
            since_ns: Some(since_ns),
            limit: Some(BATCH),
            ..Default::default()
        };
        let changes = store::select_changes(&conn, &sel(cursor.change))?;
        let incidents = store::select_incidents(&conn, &sel(cursor.incident))?;
        Ok(merge(changes, incidents))
    })
    .await
    .map_err(PublishError::Reader)?
}

/// Merge the two lists, each in its numbers' order, by time. A list read in full (shorter than
/// [`BATCH`]) has nothing more before the other's rows; a list cut at `BATCH` may have, so the
/// merge stops where such a list ends.
fn merge(changes: Vec<Stored>, incidents: Vec<Stored>) -> Vec<(Kind, Stored)> {
    let (c_cut, i_cut) = (changes.len() == BATCH, incidents.len() == BATCH);
    let mut c = changes.into_iter().peekable();
    let mut i = incidents.into_iter().peekable();
    let mut out = Vec::new();
    loop {
        let take_change = match (c.peek(), i.peek()) {
            (Some(a), Some(b)) => a.time_ns <= b.time_ns,
            (Some(_), None) if i_cut => break,
            (None, Some(_)) if c_cut => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        if take_change {
            out.extend(c.next().map(|r| (Kind::Change, r)));
        } else {
            out.extend(i.next().map(|r| (Kind::Incident, r)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(number: u64, time_ns: i64) -> Stored {
        Stored {
            number,
            time_ns,
            json: String::new(),
        }
    }

    #[test]
    fn rows_interleave_by_time_and_keep_each_kinds_order() {
        // Change 2 carries an earlier time than change 1 (a recovered change): numbers win.
        let out = merge(vec![row(1, 10), row(2, 5), row(3, 30)], vec![row(7, 20)]);
        let got: Vec<(Kind, u64)> = out.iter().map(|(k, r)| (*k, r.number)).collect();
        assert_eq!(
            got,
            vec![
                (Kind::Change, 1),
                (Kind::Change, 2),
                (Kind::Incident, 7),
                (Kind::Change, 3)
            ]
        );
    }

    #[test]
    fn a_session_error_is_logged_as_its_context_then_each_cause() {
        let e = PublishError::Connect {
            url: "nats://n:4222".into(),
            cause: async_nats::ConnectError::new(async_nats::ConnectErrorKind::TimedOut),
        };
        assert_eq!(
            crate::hooks::error_chain(&e),
            "cannot connect to nats://n:4222: timed out"
        );
        assert_eq!(
            crate::hooks::error_chain(&PublishError::Poisoned),
            "record reader poisoned"
        );
    }

    #[test]
    fn a_list_cut_short_stops_the_merge_where_it_ends() {
        let changes: Vec<Stored> = (1..=BATCH as u64).map(|n| row(n, n as i64)).collect();
        let out = merge(changes, vec![row(1, BATCH as i64 + 100)]);
        assert_eq!(out.len(), BATCH);
        assert!(out.iter().all(|(k, _)| *k == Kind::Change));
    }
}
