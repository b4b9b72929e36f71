//! `observer run --nats URL`: publish the record's rows to JetStream, in order, each once.
//!
//! The record is the spool. The publisher reads the rows after the last one JetStream holds for
//! this node and record and keeps up to `--nats-window` of them in flight: row n is sent only
//! once row n-window is acknowledged, acknowledgements are taken oldest first, and the cursor
//! moves only over rows acknowledged in order. Any failure ends the session. While the server is
//! unreachable nothing is published and nothing is lost: the rows wait in the record. Rows the
//! record could not take (a full disk, a writer behind) are held in memory for the publisher
//! (`record_writer::held`, bounded) and read in their places among the record's.
//!
//! Every session starts by reconciling each subject with the record (`reconcile`): a connection
//! that dies with rows in flight can leave a hole (a row lost while a later one was stored, e.g.
//! sent again from the old connection's queue after a reconnect, or a cluster leader lost
//! mid-window), and by the window's rule it can only be among the last `window` rows. The publisher
//! reads the headers of the subject's last messages, keeps the longest in-order run, deletes the
//! messages of this record stored after it, and publishes again after that run. A row published
//! again after a delete carries a fresh message id (`.r<epoch>` appended): the stream's duplicate
//! window still remembers the deleted ids.
//!
//! A message of an earlier session can still be stored after the next one read the subject: one
//! the old connection had queued while it was down and sends once it is back, or one the stream's
//! new leader commits from its predecessor's log (a leader just elected can also answer reads
//! before it has applied all it inherited). Two rules keep that from going unseen:
//! - a session that ends while its connection is down keeps the connection for the next one (what
//!   it had queued then goes out before anything of the next session) until it is back or gives
//!   up reconnecting (its queue dies with it); a connection that is up is flushed before it is
//!   dropped, so nothing of it can follow;
//! - each session checks what it stored ([`Publisher::verify`]): every `window` rows
//!   acknowledged, and when it has nothing more to send (at most once a second). Where the
//!   acknowledgements' stream sequences follow each other, nothing can lie between them;
//!   elsewhere the subject is read back from the last row checked, and this record's messages
//!   there must be exactly the rows acknowledged, in order. When idle, the subject's last
//!   message must also be the row acknowledged last. Anything else ends the session, and the
//!   next one reconciles the subject from the last row checked.
//!
//! Here is the session (connect, send, take the acknowledgements in order); `reconcile` finds
//! where it resumes and checks that nothing was stored late, `spool` reads the record.

mod reconcile;
mod spool;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, message::PublishMessage};
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
use tokio::sync::watch;

use super::{
    message_id, stream_config, subject, Kind, NatsSettings, HEADER_NODE, HEADER_RECORD, HEADER_SEQ,
};
use crate::store::{self, StoreError, Stored};
use reconcile::Published;
pub use spool::Spool;
use spool::{count_backlog, oldest_kept, open_record, read_after};

/// When there were no rows to publish, the publisher waits for the record writer's next commit,
/// and reads the record after this long at most anyway.
const POLL: Duration = Duration::from_secs(1);

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
    /// JetStream acknowledged a row as a duplicate of a message it already held: the stream is
    /// read again before going on.
    #[error("JetStream took {id} for a duplicate of a message it holds")]
    Duplicate { id: String },
    /// The subject's last messages could not be read (reconciling the stream with the record).
    #[error("reading the last messages on {subject}")]
    Scan {
        subject: String,
        #[source]
        cause: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A message of an earlier session was stored among this session's rows: after row `after`,
    /// the subject holds rows other than those this session had acknowledged.
    #[error(
        "{subject} holds, after row {after}, this record's rows {found} where this session had \
         stored rows {acked}: an earlier session's message was stored late; reconciling again"
    )]
    StoredLate {
        subject: String,
        after: u64,
        found: String,
        acked: String,
    },
    /// A message of an earlier session was stored after the row this session acknowledged last.
    #[error(
        "{subject}'s last message is {found}, not row {row} (stream sequence {seq}) that this \
         session published last: an earlier session's message was stored late; reconciling again"
    )]
    NotLast {
        subject: String,
        row: u64,
        seq: u64,
        found: String,
    },
    /// A message stored out of order could not be deleted.
    #[error("deleting message {seq} (stored out of order) from the stream")]
    Delete {
        seq: u64,
        #[source]
        cause: jetstream::stream::DeleteMessageError,
    },
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

/// One of each, for the change and the incident subject.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Kinds<T> {
    change: T,
    incident: T,
}

impl<T> Kinds<T> {
    fn get_mut(&mut self, kind: Kind) -> &mut T {
        match kind {
            Kind::Change => &mut self.change,
            Kind::Incident => &mut self.incident,
        }
    }
}

/// Where the publisher is: the last change `seq` and incident record number JetStream holds
/// (or that were sent).
type Cursor = Kinds<u64>;

struct Publisher {
    settings: NatsSettings,
    /// Until when rows are published with fresh message ids (a delete or a duplicate was seen:
    /// the stream's duplicate window may remember ids of messages no longer stored).
    fresh_until: Mutex<Option<std::time::Instant>>,
    /// Where the next session reads each subject back from, at least: the last row checked
    /// before a message was found stored late among the rows after it.
    rescan: Mutex<Kinds<Option<u64>>>,
    record: PathBuf,
    record_id: String,
    stats: Arc<NatsStats>,
    store: Arc<crate::sinks::record_writer::StoreStats>,
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
        fresh_until: Mutex::new(None),
        rescan: Mutex::new(Kinds::default()),
        record: spool.path,
        record_id: spool.id,
        stats,
        store: spool.stats,
    };
    // What the record cannot take is held for the publisher from now on.
    p.store.held.want();
    tokio::spawn(count_backlog(
        p.record.clone(),
        p.settings.max_age,
        p.stats.clone(),
        p.store.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(async move {
        let mut delay = Duration::from_millis(250);
        let mut failing = false;
        let mut kept: Option<Kept> = None;
        loop {
            let res = tokio::select! {
                r = p.session(&mut kept, &mut failing) => r,
                _ = shutdown.wait_for(|s| *s) => return,
            };
            p.stats.connected.set(0);
            match res {
                Ok(()) => return,
                Err(
                    e @ (PublishError::StoredLate { .. }
                    | PublishError::NotLast { .. }
                    | PublishError::Duplicate { .. }),
                ) => {
                    // The stream is read again at once: not a failure of the server.
                    tracing::warn!("NATS {}: {}", p.settings.url, crate::hooks::error_chain(&e));
                }
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
                _ = async {
                    p.settle(&mut kept).await;
                    tokio::time::sleep(delay).await;
                } => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    })
}

/// Reconnection attempts before a connection gives up (with async-nats' delays, growing to 4 s
/// between attempts: one to three minutes). What it had queued is dropped with it, and the next
/// session connects anew, with the credentials read again.
const RECONNECTS: usize = 30;

/// The connection kept from one session to the next.
struct Kept {
    client: async_nats::Client,
    /// Set when the connection gave up reconnecting: nothing it had queued can be sent anymore.
    gave_up: Arc<std::sync::atomic::AtomicBool>,
}

impl Publisher {
    /// After a failed session: drop its connection if it is up and everything it was given has
    /// been written, or if it gave up reconnecting (nothing of it can be sent later); keep it
    /// for the next session while it is down and trying (what it queued then goes out first).
    async fn settle(&self, kept: &mut Option<Kept>) {
        let Some(k) = kept.as_mut() else { return };
        let up = k.client.connection_state() == async_nats::connection::State::Connected;
        let flushed = up
            && tokio::time::timeout(Duration::from_secs(5), k.client.flush())
                .await
                .is_ok_and(|r| r.is_ok());
        if flushed || k.gave_up.load(Ordering::Relaxed) {
            *kept = None;
        }
    }

    /// The connection kept from the session before, or a new one, kept for the next.
    async fn connect(&self, kept: &mut Option<Kept>) -> Result<async_nats::Client, PublishError> {
        if let Some(k) = kept {
            return Ok(k.client.clone());
        }
        let s = &self.settings;
        let gave_up = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = gave_up.clone();
        let client = s
            .auth
            .options(&s.url, format!("observer {}", s.node))
            .await?
            .connection_timeout(Duration::from_secs(5))
            .request_timeout(Some(Duration::from_secs(5)))
            .max_reconnects(RECONNECTS)
            .event_callback(move |event| {
                if let async_nats::Event::ClientError(async_nats::ClientError::MaxReconnects) =
                    event
                {
                    flag.store(true, Ordering::Relaxed);
                }
                std::future::ready(())
            })
            .connect(super::auth::url_list(&s.url))
            .await
            .map_err(|cause| PublishError::Connect {
                url: s.url.clone(),
                cause,
            })?;
        Ok(kept.insert(Kept { client, gave_up }).client.clone())
    }

    /// One session: find where the stream is, then publish until an error.
    async fn session(
        &self,
        kept: &mut Option<Kept>,
        failing: &mut bool,
    ) -> Result<(), PublishError> {
        let s = &self.settings;
        let client = self.connect(kept).await?;
        let js = jetstream::new(client);
        let stream = js
            .get_or_create_stream(stream_config(s))
            .await
            .map_err(|cause| PublishError::Stream {
                stream: s.stream.clone(),
                cause,
            })?;
        let change = self.reconcile(&stream, Kind::Change).await?;
        let incident = self.reconcile(&stream, Kind::Incident).await?;
        let mut stored = Kinds {
            change: Published::from(change),
            incident: Published::from(incident),
        };
        let epoch = self.fresh_epoch();
        let fresh = epoch.is_some();
        let mut checked_at = std::time::Instant::now();
        // Rows older than the stream keeps are not sent again after the stream lost them.
        let since_ns = oldest_kept(crate::timestamp::Timestamp::now().unix_nanos(), s.max_age);
        let acked = stored.acked();
        self.stats.acked(acked);
        let window = s.window.max(1);
        let mut sent = acked;
        let mut in_flight: std::collections::VecDeque<InFlight> =
            std::collections::VecDeque::with_capacity(window);
        let mut conn = open_record(&self.record).await?;
        let mut ino = store::inode(&self.record);
        self.stats.connected.set(1);
        if *failing {
            tracing::info!(
                "NATS {}: connected; publishing from change {} and incident line {} of the record",
                s.url,
                acked.change + 1,
                acked.incident + 1
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
            let rows = read_after(&conn, &self.store, sent, since_ns).await?;
            if rows.is_empty() {
                // Nothing more to send: take the acknowledgements still due, check what was
                // stored, then wait.
                while let Some(f) = in_flight.pop_front() {
                    self.acked(f, &mut stored, fresh).await?;
                }
                // At most once a POLL: a node that changes often goes idle after each change.
                if checked_at.elapsed() >= POLL {
                    for kind in [Kind::Change, Kind::Incident] {
                        self.verify(&stream, kind, stored.get_mut(kind), true)
                            .await?;
                    }
                    checked_at = std::time::Instant::now();
                }
                let _ = tokio::time::timeout(POLL, committed).await;
                continue;
            }
            for (kind, row) in rows {
                if in_flight.len() >= window {
                    if let Some(f) = in_flight.pop_front() {
                        let k = f.kind;
                        self.acked(f, &mut stored, fresh).await?;
                        if stored.get_mut(k).unchecked() >= window {
                            self.verify(&stream, k, stored.get_mut(k), false).await?;
                        }
                    }
                }
                let id = message_id(&s.node, &self.record_id, kind, row.number);
                let id = match epoch {
                    Some(e) => format!("{id}.r{e}"),
                    None => id,
                };
                let number = row.number;
                let ack = self.send(&js, kind, row, id.clone()).await?;
                *sent.get_mut(kind) = number;
                in_flight.push_back(InFlight {
                    kind,
                    number,
                    id,
                    ack,
                });
            }
        }
    }

    /// The epoch appended to message ids in this session, while fresh ids are due.
    fn fresh_epoch(&self) -> Option<i64> {
        let until = self.fresh_until.lock().ok().and_then(|g| *g)?;
        (std::time::Instant::now() < until).then(|| crate::timestamp::Timestamp::now().unix_nanos())
    }

    /// From now on, and for the stream's duplicate window, publish with fresh message ids.
    fn need_fresh_ids(&self) {
        if let Ok(mut g) = self.fresh_until.lock() {
            // The duplicate window (120 s) and some margin for clocks and retries.
            *g = Some(std::time::Instant::now() + Duration::from_secs(300));
        }
    }

    /// Wait for the oldest row in flight's acknowledgement and move over it; what it stored is
    /// checked later ([`Publisher::verify`]).
    async fn acked(
        &self,
        f: InFlight,
        stored: &mut Kinds<Published>,
        fresh: bool,
    ) -> Result<(), PublishError> {
        let ack = f.ack.await.map_err(PublishError::Ack)?;
        if ack.duplicate {
            // Within one session every row is sent once, after the stream was read: a duplicate
            // is a message from an older connection stored meanwhile, or (plain ids) an id the
            // stream remembers from a deleted message. Read the stream again.
            if !fresh {
                self.need_fresh_ids();
            }
            return Err(PublishError::Duplicate { id: f.id });
        }
        stored.get_mut(f.kind).acked(f.number, ack.sequence);
        self.store.held.sent(f.kind.held(), f.number);
        self.stats.acked(stored.acked());
        self.stats
            .published
            .get_or_create(&KindLabel {
                kind: f.kind.suffix().into(),
            })
            .inc();
        Ok(())
    }

    /// Send one row; its acknowledgement is awaited later, oldest first.
    async fn send(
        &self,
        js: &jetstream::Context,
        kind: Kind,
        row: Stored,
        id: String,
    ) -> Result<jetstream::context::PublishAckFuture, PublishError> {
        let s = &self.settings;
        let msg = PublishMessage::build()
            .message_id(id)
            .header(HEADER_NODE, s.node.as_str())
            .header(HEADER_RECORD, self.record_id.as_str())
            .header(HEADER_SEQ, row.number.to_string().as_str())
            .payload(row.json.into());
        js.send_publish(subject(&s.node, kind), msg)
            .await
            .map_err(PublishError::Send)
    }
}

/// A row sent and not yet acknowledged.
struct InFlight {
    kind: Kind,
    number: u64,
    id: String,
    ack: jetstream::context::PublishAckFuture,
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
