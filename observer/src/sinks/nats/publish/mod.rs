//! `observer run --nats URL`: publish the record's rows to JetStream, in order, each once.
//!
//! The record is the spool. The publisher reads the rows after the last one JetStream holds for
//! this node and record and keeps up to `--nats-window` of them in flight: row n is sent only
//! once row n-window is acknowledged, acknowledgements are taken oldest first, and the cursor
//! moves only over rows acknowledged in order. Any failure ends the session. While the server is
//! unreachable nothing is published and nothing is lost: the rows wait in the record.
//!
//! Every session starts by reconciling each subject with the record ([`plan`]): a connection that
//! dies with rows in flight can leave a hole (a row lost while a later one was stored, e.g. sent
//! again from the old connection's queue after a reconnect, or a cluster leader lost mid-window),
//! and by the window's rule it can only be among the last `window` rows. The publisher reads the
//! headers of the subject's last messages, keeps the longest in-order run, deletes the messages of
//! this record stored after it, and publishes again after that run. A row published again after a
//! delete carries a fresh message id (`.r<epoch>` appended): the stream's duplicate window still
//! remembers the deleted ids.
//!
//! A message of an earlier session can still be stored after the next one read the subject: one
//! the old connection had queued while it was down and sends once it is back, or one the stream's
//! new leader commits from its predecessor's log. Two rules keep that from going unseen:
//! - a session that ends while its connection is down keeps the connection for the next one (what
//!   it had queued then goes out before anything of the next session) until it is back or gives
//!   up reconnecting (its queue dies with it); a connection that is up is flushed before it is
//!   dropped, so nothing of it can follow;
//! - each session, once its first row of a kind is acknowledged, reads the subject again from the
//!   run it resumed after to that row ([`Publisher::check_first`]). Anything stored in between
//!   ends the session, and the next one reconciles it away. After that acknowledgement nothing
//!   older can be stored: the old messages went out first on the same connection, and a stream
//!   leader commits what it inherited before its own new entries.

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
    /// A message of an earlier session was stored after this session read the subject.
    #[error(
        "{subject} holds rows {rows:?} from row {resume_after} to this session's first: an \
         earlier session's message was stored late; reconciling again"
    )]
    StoredLate {
        subject: String,
        resume_after: u64,
        rows: Vec<u64>,
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

/// Where the publisher is: the last change `seq` and incident record number JetStream holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Cursor {
    change: u64,
    incident: u64,
}

struct Publisher {
    settings: NatsSettings,
    /// Until when rows are published with fresh message ids (a delete or a duplicate was seen:
    /// the stream's duplicate window may remember ids of messages no longer stored).
    fresh_until: Mutex<Option<std::time::Instant>>,
    record: PathBuf,
    record_id: String,
    stats: Arc<NatsStats>,
    store: Arc<crate::sinks::record_writer::StoreStats>,
}

/// The record the publisher reads: its path, its id and its writer's signals.
pub struct Spool {
    pub path: PathBuf,
    pub id: String,
    pub stats: Arc<crate::sinks::record_writer::StoreStats>,
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
        let mut kept: Option<Kept> = None;
        loop {
            let res = tokio::select! {
                r = p.session(&mut kept, &mut failing) => r,
                _ = shutdown.wait_for(|s| *s) => return,
            };
            p.stats.connected.set(0);
            match res {
                Ok(()) => return,
                Err(e @ (PublishError::StoredLate { .. } | PublishError::Duplicate { .. })) => {
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

    /// One session: find where the stream is, then publish until an error.
    async fn session(
        &self,
        kept: &mut Option<Kept>,
        failing: &mut bool,
    ) -> Result<(), PublishError> {
        let s = &self.settings;
        let client = match kept {
            Some(k) => k.client.clone(),
            None => {
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
                        if let async_nats::Event::ClientError(
                            async_nats::ClientError::MaxReconnects,
                        ) = event
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
                kept.insert(Kept { client, gave_up }).client.clone()
            }
        };
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
        let mut checks = Checks {
            change: Some(change),
            incident: Some(incident),
        };
        let mut cursor = Cursor {
            change: change.after,
            incident: incident.after,
        };
        let epoch = self.fresh_epoch();
        // Rows older than the stream keeps are not sent again after the stream lost them.
        let since_ns = oldest_kept(crate::timestamp::Timestamp::now().unix_nanos(), s.max_age);
        self.stats.acked(cursor);
        let window = s.window.max(1);
        let mut sent = cursor;
        let mut in_flight: std::collections::VecDeque<InFlight> =
            std::collections::VecDeque::with_capacity(window);
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
            let rows = read_after(&conn, sent, since_ns).await?;
            if rows.is_empty() {
                // Nothing more to send: take the acknowledgements still due, then wait.
                while let Some(f) = in_flight.pop_front() {
                    self.acked(&stream, f, &mut cursor, &mut checks, epoch.is_some())
                        .await?;
                }
                let _ = tokio::time::timeout(POLL, committed).await;
                continue;
            }
            for (kind, row) in rows {
                if in_flight.len() >= window {
                    if let Some(f) = in_flight.pop_front() {
                        self.acked(&stream, f, &mut cursor, &mut checks, epoch.is_some())
                            .await?;
                    }
                }
                let id = message_id(&s.node, &self.record_id, kind, row.number);
                let id = match epoch {
                    Some(e) => format!("{id}.r{e}"),
                    None => id,
                };
                let number = row.number;
                let ack = self.send(&js, kind, row, id.clone()).await?;
                match kind {
                    Kind::Change => sent.change = number,
                    Kind::Incident => sent.incident = number,
                }
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

    /// Wait for the oldest row in flight's acknowledgement and move the cursor over it (the
    /// session's first of its kind is checked first: [`Publisher::check_first`]).
    async fn acked(
        &self,
        stream: &jetstream::stream::Stream,
        f: InFlight,
        cursor: &mut Cursor,
        checks: &mut Checks,
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
        let check = match f.kind {
            Kind::Change => checks.change.take(),
            Kind::Incident => checks.incident.take(),
        };
        if let Some(from) = check {
            self.check_first(stream, f.kind, from, f.number, ack.sequence)
                .await?;
        }
        match f.kind {
            Kind::Change => cursor.change = f.number,
            Kind::Incident => cursor.incident = f.number,
        }
        self.stats.acked(*cursor);
        self.stats
            .published
            .get_or_create(&KindLabel {
                kind: f.kind.suffix().into(),
            })
            .inc();
        Ok(())
    }

    /// Reconcile `kind`'s subject with the record (see [`plan`]) and return where publishing
    /// resumes.
    async fn reconcile(
        &self,
        stream: &jetstream::stream::Stream,
        kind: Kind,
    ) -> Result<Resume, PublishError> {
        let last = match self.last_held(stream, kind).await? {
            Held::Nothing => return Ok(Resume::default()),
            Held::Other { stream_seq } => {
                return Ok(Resume {
                    after: 0,
                    stream_seq,
                })
            }
            Held::Ours(last) => last,
        };
        let window = self.settings.window.max(1) as u64;
        let scanned = self.scan(stream, kind, last.stream_seq, window).await?;
        if !scanned.iter().any(|m| m.ours) {
            return Ok(Resume {
                after: last.number,
                stream_seq: last.stream_seq,
            });
        }
        let p = plan(&scanned);
        if !p.delete.is_empty() {
            tracing::warn!(
                "NATS {}: {} {} message(s) of this node were stored out of order after row {}: \
                 deleting them and publishing again from row {}",
                self.settings.url,
                p.delete.len(),
                kind.suffix(),
                p.resume_after,
                p.resume_after + 1
            );
        }
        if p.fresh_ids {
            self.need_fresh_ids();
        }
        for &seq in &p.delete {
            stream
                .delete_message(seq)
                .await
                .map_err(|cause| PublishError::Delete { seq, cause })?;
        }
        Ok(Resume {
            after: p.resume_after,
            stream_seq: p.resume_seq,
        })
    }

    /// The session's first row of `kind` (`number`, stored at `stream_seq`) is acknowledged:
    /// read the subject from where the session resumed to it. Anything of this record there but
    /// the run's last row and this one was stored late by an earlier session; the session ends,
    /// and the next one reconciles it away.
    async fn check_first(
        &self,
        stream: &jetstream::stream::Stream,
        kind: Kind,
        from: Resume,
        number: u64,
        stream_seq: u64,
    ) -> Result<(), PublishError> {
        let subj = subject(&self.settings.node, kind);
        let (scanned, _) = self
            .scan_from(stream, &subj, from.stream_seq.max(1), stream_seq)
            .await
            .map_err(|cause| PublishError::Scan {
                subject: subj.clone(),
                cause,
            })?;
        let rows: Vec<u64> = scanned
            .iter()
            .filter(|m| m.ours && m.stream_seq > from.stream_seq)
            .map(|m| m.number)
            .collect();
        if rows == [number] {
            return Ok(());
        }
        // The late messages are deleted by the next session's plan: fresh ids from then on.
        self.need_fresh_ids();
        Err(PublishError::StoredLate {
            subject: subj,
            resume_after: from.after,
            rows,
        })
    }

    /// The headers of this record's messages on `kind`'s subject, from far enough back that the
    /// last `window` rows are all among them, up to the stream sequence `last`.
    async fn scan(
        &self,
        stream: &jetstream::stream::Stream,
        kind: Kind,
        last: u64,
        window: u64,
    ) -> Result<Vec<Scanned>, PublishError> {
        let subj = subject(&self.settings.node, kind);
        let err = |cause: Box<dyn std::error::Error + Send + Sync>| PublishError::Scan {
            subject: subj.clone(),
            cause,
        };
        let mut back = window.saturating_mul(4);
        loop {
            let start = last.saturating_sub(back).max(1);
            let (ours, foreign_first) = self
                .scan_from(stream, &subj, start, last)
                .await
                .map_err(&err)?;
            let mine = || ours.iter().filter(|m| m.ours).map(|m| m.number);
            let max = mine().max().unwrap_or(0);
            let min = mine().min().unwrap_or(0);
            if start == 1 || foreign_first || min <= (max + 1).saturating_sub(window).max(1) {
                return Ok(ours);
            }
            back = back.saturating_mul(4);
        }
    }

    /// This record's messages on `subj` from stream sequence `start` to `last`, and whether a
    /// message of another record came before the first of them.
    async fn scan_from(
        &self,
        stream: &jetstream::stream::Stream,
        subj: &str,
        start: u64,
        last: u64,
    ) -> Result<(Vec<Scanned>, bool), Box<dyn std::error::Error + Send + Sync>> {
        use futures_util::StreamExt as _;
        let consumer = stream
            .create_consumer(jetstream::consumer::pull::OrderedConfig {
                filter_subject: subj.to_string(),
                deliver_policy: jetstream::consumer::DeliverPolicy::ByStartSequence {
                    start_sequence: start,
                },
                headers_only: true,
                ..Default::default()
            })
            .await?;
        let mut messages = consumer.messages().await?;
        let mut ours = Vec::new();
        let mut foreign_first = false;
        loop {
            let m = match tokio::time::timeout(Duration::from_secs(5), messages.next()).await {
                Ok(Some(m)) => m?,
                Ok(None) => return Err("the scan ended early".into()),
                Err(_) => return Err("no message within 5s".into()),
            };
            let info = m.info()?;
            let seq = info.stream_sequence;
            let header = |name: &str| {
                m.headers
                    .as_ref()
                    .and_then(|h| h.get(name))
                    .map(|v| v.as_str().to_string())
            };
            let mine = header(HEADER_RECORD).as_deref() == Some(self.record_id.as_str());
            match header(HEADER_SEQ).and_then(|v| v.parse().ok()) {
                Some(number) if mine => ours.push(Scanned {
                    stream_seq: seq,
                    ours: true,
                    number,
                }),
                _ if !ours.is_empty() => ours.push(Scanned {
                    stream_seq: seq,
                    ours: false,
                    number: 0,
                }),
                _ => foreign_first = true,
            }
            if seq >= last || info.pending == 0 {
                return Ok((ours, foreign_first));
            }
        }
    }

    /// The last message on `kind`'s subject: whether it is of this record, its row and its
    /// stream sequence.
    async fn last_held(
        &self,
        stream: &jetstream::stream::Stream,
        kind: Kind,
    ) -> Result<Held, PublishError> {
        let subj = subject(&self.settings.node, kind);
        match stream.get_last_raw_message_by_subject(&subj).await {
            Ok(m) => {
                let header = |name: &str| m.headers.get(name).map(|v| v.as_str().to_string());
                if header(HEADER_RECORD).as_deref() != Some(self.record_id.as_str()) {
                    // Another record (this node's record was replaced): all of ours is new.
                    return Ok(Held::Other {
                        stream_seq: m.sequence,
                    });
                }
                Ok(Held::Ours(Last {
                    number: header(HEADER_SEQ).and_then(|v| v.parse().ok()).unwrap_or(0),
                    stream_seq: m.sequence,
                }))
            }
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(Held::Nothing),
            Err(cause) => Err(PublishError::LastMessage {
                subject: subj,
                cause,
            }),
        }
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

/// What the last message on a subject is.
enum Held {
    /// The subject is empty.
    Nothing,
    /// A message of another record, at this stream sequence.
    Other { stream_seq: u64 },
    /// A message of this record.
    Ours(Last),
}

/// Where a session resumes on a subject: after row `after`, stored at `stream_seq` (0, 0: the
/// subject was empty; row 0 at a stream sequence: another record's message was last).
#[derive(Debug, Clone, Copy, Default)]
struct Resume {
    after: u64,
    stream_seq: u64,
}

/// The subjects whose first acknowledged row of the session is still to be checked, and where
/// the session resumed on them.
struct Checks {
    change: Option<Resume>,
    incident: Option<Resume>,
}

/// The last message on a subject, of this record.
struct Last {
    number: u64,
    stream_seq: u64,
}

/// A message of this record found on a subject: its stream sequence and its row (`Observer-Seq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scanned {
    pub stream_seq: u64,
    /// Of this record (another record's messages on the subject are left alone).
    pub ours: bool,
    pub number: u64,
}

/// What a session does with a subject before publishing on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The last row of the clean run: publishing goes on after it.
    pub resume_after: u64,
    /// Its stream sequence.
    pub resume_seq: u64,
    /// The stream sequences of this record's messages stored after the clean run (a hole, a
    /// duplicate or a row out of order came first): deleted before publishing again.
    pub delete: Vec<u64>,
    /// Rows published again must carry fresh message ids (some ids were deleted).
    pub fresh_ids: bool,
}

/// Reconcile a subject with the record. `scanned` is this record's messages on the subject in
/// stream order, from far enough back that it starts before the last `window` rows (every row
/// before those was acknowledged before a later one was sent, so it is stored, in order). The
/// clean run is the longest prefix where each row follows the one before; every message after it
/// is deleted, and publishing resumes after the run's last row.
pub(crate) fn plan(scanned: &[Scanned]) -> Plan {
    let scanned: Vec<Scanned> = scanned.iter().copied().filter(|m| m.ours).collect();
    let Some(first) = scanned.first() else {
        return Plan {
            resume_after: 0,
            resume_seq: 0,
            delete: Vec::new(),
            fresh_ids: false,
        };
    };
    let mut end = *first;
    let mut clean = 1;
    for m in &scanned[1..] {
        if m.number != end.number + 1 {
            break;
        }
        end = *m;
        clean += 1;
    }
    let delete: Vec<u64> = scanned[clean..].iter().map(|m| m.stream_seq).collect();
    Plan {
        resume_after: end.number,
        resume_seq: end.stream_seq,
        fresh_ids: !delete.is_empty(),
        delete,
    }
}

/// The record, read-only, with the dictionaries of the rows read so far.
struct RecordReader {
    conn: rusqlite::Connection,
    frames: store::DictFrames,
}

/// The record, read-only, for the publisher or the backlog count.
async fn open_record(path: &std::path::Path) -> Result<Arc<Mutex<RecordReader>>, PublishError> {
    let path = path.to_path_buf();
    let conn = tokio::task::spawn_blocking(move || store::open_ro(&path))
        .await
        .map_err(PublishError::Open)??;
    Ok(Arc::new(Mutex::new(RecordReader {
        conn,
        frames: store::DictFrames::default(),
    })))
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
    let mut conn: Option<(Option<u64>, Arc<Mutex<RecordReader>>)> = None;
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
                let reader = c.lock().map_err(|_| PublishError::Poisoned)?;
                Ok::<_, PublishError>(store::pending(&reader.conn, change, incident, since_ns)?)
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
    conn: &Arc<Mutex<RecordReader>>,
    cursor: Cursor,
    since_ns: i64,
) -> Result<Vec<(Kind, Stored)>, PublishError> {
    let conn = conn.clone();
    tokio::task::spawn_blocking(move || -> Result<Vec<(Kind, Stored)>, PublishError> {
        let mut reader = conn.lock().map_err(|_| PublishError::Poisoned)?;
        let RecordReader { conn, frames } = &mut *reader;
        let sel = |after: u64| Selection {
            after: Some(after),
            since_ns: Some(since_ns),
            limit: Some(BATCH),
            ..Default::default()
        };
        let changes = store::select_changes_with(conn, &sel(cursor.change), frames)?;
        let incidents = store::select_incidents(conn, &sel(cursor.incident))?;
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

    /// Messages of this record as (stream sequence, row).
    fn scanned(list: &[(u64, u64)]) -> Vec<Scanned> {
        list.iter()
            .map(|&(stream_seq, number)| Scanned {
                stream_seq,
                ours: true,
                number,
            })
            .collect()
    }

    #[test]
    fn a_clean_run_resumes_after_its_last_row() {
        let p = plan(&scanned(&[(10, 5), (11, 6), (14, 7), (20, 8)]));
        assert_eq!(
            p,
            Plan {
                resume_after: 8,
                resume_seq: 20,
                delete: vec![],
                fresh_ids: false
            }
        );
    }

    #[test]
    fn a_row_stored_without_its_ack_is_not_sent_again() {
        // Row 4 was stored and its acknowledgement lost: the stream holds it.
        let p = plan(&scanned(&[(1, 1), (2, 2), (3, 3), (4, 4)]));
        assert_eq!(p.resume_after, 4);
        assert!(p.delete.is_empty() && !p.fresh_ids);
    }

    #[test]
    fn rows_lost_at_the_end_are_sent_again() {
        // Rows 4.. were sent and never stored: nothing to delete, resume after 3.
        let p = plan(&scanned(&[(1, 1), (2, 2), (3, 3)]));
        assert_eq!(p.resume_after, 3);
        assert!(p.delete.is_empty() && !p.fresh_ids);
    }

    #[test]
    fn a_hole_deletes_every_later_message_and_resumes_before_it() {
        // Row 4 lost, rows 5 and 6 stored after: delete them, resume after 3, fresh ids.
        let p = plan(&scanned(&[(1, 1), (2, 2), (3, 3), (7, 5), (8, 6)]));
        assert_eq!(
            p,
            Plan {
                resume_after: 3,
                resume_seq: 3,
                delete: vec![7, 8],
                fresh_ids: true
            }
        );
    }

    #[test]
    fn a_row_stored_twice_is_deleted_with_what_follows() {
        let p = plan(&scanned(&[(1, 1), (2, 2), (3, 2), (4, 3)]));
        assert_eq!(p.resume_after, 2);
        assert_eq!(p.delete, vec![3, 4]);
        assert!(p.fresh_ids);
        // A row stored late, before the rows it should follow.
        let p = plan(&scanned(&[(1, 1), (2, 3), (3, 2)]));
        assert_eq!(p.resume_after, 1);
        assert_eq!(p.delete, vec![2, 3]);
    }

    #[test]
    fn another_records_rows_are_not_ours() {
        // The scan keeps this record's messages only: another record's rows in between (stream
        // sequences 3 and 4) neither break the run nor get deleted.
        let mut list = scanned(&[(1, 7), (2, 8), (5, 9)]);
        let other = |stream_seq| Scanned {
            stream_seq,
            ours: false,
            number: 1,
        };
        list.insert(2, other(3));
        list.insert(3, other(4));
        let p = plan(&list);
        assert_eq!(p.resume_after, 9);
        assert!(p.delete.is_empty());
        // Nor are they deleted after a hole.
        list.push(other(6));
        list.push(Scanned {
            stream_seq: 7,
            ours: true,
            number: 11,
        });
        let p = plan(&list);
        assert_eq!(p.resume_after, 9);
        assert_eq!(p.delete, vec![7]);
    }

    #[test]
    fn an_empty_subject_publishes_from_the_start() {
        assert_eq!(
            plan(&[]),
            Plan {
                resume_after: 0,
                resume_seq: 0,
                delete: vec![],
                fresh_ids: false
            }
        );
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
