//! The forensic record: every change and incident `observer run` saw, in an SQLite file, to
//! answer "who deleted KUBE-SVC-X at 03:12?" after the fact.
//!
//! Writes happen on one dedicated thread fed by a channel: the engine never waits for the disk.
//! Each row comes with what streams it (stdout, the HTTP clients), run by that thread once the
//! row's batch is committed: whatever was streamed is in the record, even after a `kill -9`.
//! When more than the queue's capacity of rows wait for the disk, further rows are counted as
//! dropped from the record and the loss is reported (log line and metric), never silently; they
//! are still streamed, in order. Rows are written in batches, one transaction each, in WAL mode. The file is kept within an age (`--retain`) and a size (`--max-record`) by deleting
//! the oldest rows; it is checked after writes, so an idle daemon does no work.
//!
//! Each row keeps the record's JSON line exactly as it was streamed, plus the columns that
//! queries filter on (time, chain, actor, op, netns...), each indexed with the time.
//!
//! The file is kept small (layout 2): the text columns hold numbers standing for strings kept
//! once in `strs`, and the JSON line is compressed with zstd and a dictionary trained on the
//! record's own first rows (kept in `dicts`; rows written before it exist stay plain text).
//! A kube-proxy-like change takes about a quarter of layout 1's 865 bytes. Layout 1 records
//! are read as they are and converted the first time `observer run` opens them. Layout 3 is
//! layout 2 with snapshots stored as frames, deltas of the snapshot before ([`crate::forensics::frames`]), which an
//! observer of layout 2 cannot read: it refuses the record instead of misreading it. A layout 2
//! record becomes layout 3 when `observer run` opens it (its snapshots stay as they are).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

/// Version of the file layout, kept in `PRAGMA user_version`.
const SCHEMA_VERSION: i64 = 3;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS strs (id INTEGER PRIMARY KEY, s TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS dicts (id INTEGER PRIMARY KEY, dict BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS changes (
    seq     INTEGER PRIMARY KEY,
    time_ns INTEGER NOT NULL,
    netns   INTEGER,
    backend INTEGER,
    tbl     INTEGER,
    chain   INTEGER,
    op      INTEGER,
    actor   INTEGER,
    comm    INTEGER,
    dict    INTEGER,
    body    BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS changes_time  ON changes(time_ns);
CREATE INDEX IF NOT EXISTS changes_chain ON changes(chain, time_ns);
CREATE INDEX IF NOT EXISTS changes_actor ON changes(actor, time_ns);
CREATE INDEX IF NOT EXISTS changes_op    ON changes(op, time_ns);
CREATE INDEX IF NOT EXISTS changes_netns ON changes(netns, time_ns);
CREATE TABLE IF NOT EXISTS incidents (
    no       INTEGER PRIMARY KEY,
    time_ns  INTEGER NOT NULL,
    type     TEXT,
    netns    INTEGER,
    json     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS incidents_time ON incidents(time_ns);
CREATE INDEX IF NOT EXISTS incidents_type ON incidents(type, time_ns);
";

/// The string columns of `changes`, in the order of [`Row::Change`]'s fields.
const STR_COLUMNS: [&str; 6] = ["backend", "tbl", "chain", "op", "actor", "comm"];

/// Rows kept to train the record's dictionary, and its size.
const DICT_SAMPLES: usize = 1000;
const DICT_BYTES: usize = 16 * 1024;
/// zstd's level for rows: 3 is its default; higher levels gain nothing on rows this short.
const ZSTD_LEVEL: i32 = 3;

/// What can go wrong with the record file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file could not be opened or created.
    #[error("cannot open the record {path}: {cause} (check that the directory exists and is writable, or pass --record PATH or --no-record)")]
    Open {
        path: PathBuf,
        cause: rusqlite::Error,
    },
    /// There is no record at that path.
    #[error("no record at {0} (observer run writes it; pass --record PATH)")]
    Missing(PathBuf),
    /// The file exists but is not an observer record (or is damaged).
    #[error("{path} is not a readable observer record ({cause}); it was left untouched: move it away or pass another --record PATH")]
    NotARecord {
        path: PathBuf,
        cause: rusqlite::Error,
    },
    /// An SQLite file of something else.
    #[error(
        "{0} is an SQLite file but not an observer record; pass the record's path with --record"
    )]
    Foreign(PathBuf),
    /// The file was written by a newer observer.
    #[error("{path} has record layout {found}, this observer knows {SCHEMA_VERSION}: use a newer observer or another --record PATH")]
    Version { path: PathBuf, found: i64 },
    /// A query failed.
    #[error("reading the record: {0}")]
    Query(#[from] rusqlite::Error),
    /// A stored row does not decode.
    #[error("change {seq} of the record cannot be read ({cause}): the file is damaged at that row; rows before and after it still read with --until/--since around its time")]
    Damaged { seq: u64, cause: String },
}

/// One row to write.
#[derive(Debug, Clone)]
pub enum Row {
    Change {
        seq: u64,
        time_ns: i64,
        netns: Option<u32>,
        backend: Option<String>,
        table: Option<String>,
        chain: Option<String>,
        op: Option<String>,
        actor: Option<String>,
        comm: Option<String>,
        json: Arc<str>,
    },
    Incident {
        no: u64,
        time_ns: i64,
        kind: Option<String>,
        netns: Option<u32>,
        json: Arc<str>,
    },
    /// A namespace's tables of one backend after change `seq` (see `crate::forensics`).
    Snapshot(crate::forensics::Snapshot),
}

/// Limits on the record's size.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub retain: Duration,
    pub max_bytes: u64,
}

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
}

impl Default for StoreStats {
    fn default() -> Self {
        let s = StoreStats {
            rows: Family::default(),
            bytes: Gauge::default(),
            committed: tokio::sync::Notify::new(),
            reopened: Counter::default(),
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
}

/// Open (or create) a record for writing and check it.
pub fn open_rw(path: &Path) -> Result<Connection, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Open {
                path: path.into(),
                cause: rusqlite::Error::InvalidPath(format!("{}: {e}", dir.display()).into()),
            })?;
        }
    }
    let mut conn = Connection::open(path).map_err(|source| StoreError::Open {
        path: path.into(),
        cause: source,
    })?;
    let not_a_record = |source| StoreError::NotARecord {
        path: path.into(),
        cause: source,
    };
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(not_a_record)?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::Version {
            path: path.into(),
            found: version,
        });
    }
    // auto_vacuum only takes effect on an empty file: set it before the first table.
    conn.execute_batch(
        "PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;",
    )
    .map_err(|source| classify(path, source))?;
    if version == 1 {
        migrate_v1(&mut conn, path)?;
    }
    conn.execute_batch(SCHEMA)
        .map_err(|source| classify(path, source))?;
    // Snapshots (layout 3 adds frames to a layout 2 record's snapshot tables).
    conn.execute_batch(crate::forensics::record::SCHEMA)
        .and_then(|()| crate::forensics::record::upgrade(&conn))
        .map_err(|source| classify(path, source))?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(|source| classify(path, source))?;
    Ok(conn)
}

/// Convert a layout 1 record (text columns, plain JSON) to layout 2, in one transaction: a
/// failure leaves the file as it was.
fn migrate_v1(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let n: i64 = conn.query_row("SELECT COUNT(*) FROM changes", [], |r| r.get(0))?;
    tracing::info!(
        "converting the record {} to layout 2 ({n} changes; once, the first time this version \
         opens it)",
        path.display()
    );
    let tx = conn.transaction()?;
    tx.execute_batch(
        "DROP INDEX IF EXISTS changes_time; DROP INDEX IF EXISTS changes_chain;
         DROP INDEX IF EXISTS changes_actor; DROP INDEX IF EXISTS changes_op;
         DROP INDEX IF EXISTS changes_netns; ALTER TABLE changes RENAME TO changes_v1;",
    )?;
    tx.execute_batch(SCHEMA)?;
    let mut enc = Encoder::load(&tx)?;
    {
        let mut old = tx.prepare(
            "SELECT seq, time_ns, netns, backend, tbl, chain, op, actor, comm, json \
             FROM changes_v1 ORDER BY seq",
        )?;
        let mut insert = tx.prepare(INSERT_CHANGE)?;
        let mut rows = old.query([])?;
        while let Some(r) = rows.next()? {
            let row = Row::Change {
                seq: r.get::<_, i64>(0)? as u64,
                time_ns: r.get(1)?,
                netns: r.get(2)?,
                backend: r.get(3)?,
                table: r.get(4)?,
                chain: r.get(5)?,
                op: r.get(6)?,
                actor: r.get(7)?,
                comm: r.get(8)?,
                json: r.get::<_, String>(9)?.into(),
            };
            enc.insert_change(&tx, &mut insert, &row)?;
        }
    }
    tx.execute_batch("DROP TABLE changes_v1;")?;
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    conn.execute_batch("PRAGMA incremental_vacuum;")?;
    Ok(())
}

const INSERT_CHANGE: &str = "INSERT OR REPLACE INTO changes (seq, time_ns, netns, backend, tbl, \
     chain, op, actor, comm, dict, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

/// Turns rows into layout 2: strings to their numbers in `strs`, JSON lines compressed with
/// the record's dictionary (trained on its first [`DICT_SAMPLES`] rows, plain text before).
#[derive(Default)]
struct Encoder {
    /// Numbers of strings already in `strs` (cleared when large or when `strs` is swept).
    ids: std::collections::HashMap<String, i64>,
    dict: Option<(i64, zstd::bulk::Compressor<'static>)>,
    samples: Vec<Vec<u8>>,
}

/// A compressor with `dict` for frames that [`DictFrames`] reads back.
pub(crate) fn compressor(dict: &[u8]) -> std::io::Result<zstd::bulk::Compressor<'static>> {
    let mut c = zstd::bulk::Compressor::with_dictionary(ZSTD_LEVEL, dict)?;
    // The row knows its dictionary; the frame keeps its size (to decompress in one step).
    c.include_checksum(false)?;
    c.include_dictid(false)?;
    c.include_contentsize(true)?;
    Ok(c)
}

impl Encoder {
    /// The encoder for a record: its newest dictionary, if it has one.
    fn load(conn: &Connection) -> rusqlite::Result<Encoder> {
        let newest: Option<(i64, Vec<u8>)> = conn
            .query_row(
                "SELECT id, dict FROM dicts ORDER BY id DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let dict = newest.and_then(|(id, bytes)| match compressor(&bytes) {
            Ok(c) => Some((id, c)),
            Err(e) => {
                tracing::warn!(
                    "the record's dictionary {id} does not load ({e}); a new one will be trained"
                );
                None
            }
        });
        Ok(Encoder {
            dict,
            ..Encoder::default()
        })
    }

    /// The number standing for `s` in `strs`, added when new.
    fn id(&mut self, conn: &Connection, s: &str) -> rusqlite::Result<i64> {
        if let Some(&id) = self.ids.get(s) {
            return Ok(id);
        }
        if self.ids.len() >= 100_000 {
            self.ids.clear();
        }
        let found: Option<i64> = conn
            .query_row("SELECT id FROM strs WHERE s = ?1", [s], |r| r.get(0))
            .optional()?;
        let id = match found {
            Some(id) => id,
            None => {
                conn.execute("INSERT INTO strs (s) VALUES (?1)", [s])?;
                conn.last_insert_rowid()
            }
        };
        self.ids.insert(s.to_string(), id);
        Ok(id)
    }

    /// The stored form of a JSON line: (dictionary, bytes), or (None, the text itself).
    fn body(
        &mut self,
        conn: &Connection,
        json: &str,
    ) -> rusqlite::Result<(Option<i64>, rusqlite::types::Value)> {
        use rusqlite::types::Value;
        if let Some((id, c)) = &mut self.dict {
            match c.compress(json.as_bytes()) {
                Ok(b) => return Ok((Some(*id), Value::Blob(b))),
                Err(e) => tracing::debug!("compressing a record row: {e}; kept as text"),
            }
        } else {
            self.samples.push(json.as_bytes().to_vec());
            if self.samples.len() >= DICT_SAMPLES {
                self.train(conn)?;
            }
        }
        Ok((None, Value::Text(json.to_string())))
    }

    /// Train the dictionary on the rows seen so far and keep it in the record.
    fn train(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        let samples = std::mem::take(&mut self.samples);
        let dict = zstd::dict::from_samples(&samples, DICT_BYTES).unwrap_or_else(|e| {
            // Too uniform to train on (zstd's trainer refuses some inputs): the rows
            // themselves serve as a raw dictionary, newest last.
            tracing::debug!("training the record's dictionary: {e}; using raw rows");
            let mut raw: Vec<u8> = samples.concat();
            let cut = raw.len().saturating_sub(DICT_BYTES);
            raw.drain(..cut);
            raw
        });
        conn.execute("INSERT INTO dicts (dict) VALUES (?1)", [&dict])?;
        let id = conn.last_insert_rowid();
        match compressor(&dict) {
            Ok(c) => self.dict = Some((id, c)),
            Err(e) => tracing::warn!(
                "the record's new dictionary does not load ({e}); rows stay plain text"
            ),
        }
        Ok(())
    }

    fn insert_change(
        &mut self,
        conn: &Connection,
        insert: &mut rusqlite::Statement<'_>,
        row: &Row,
    ) -> rusqlite::Result<()> {
        let Row::Change {
            seq,
            time_ns,
            netns,
            backend,
            table,
            chain,
            op,
            actor,
            comm,
            json,
        } = row
        else {
            return Ok(());
        };
        let mut ids = [None; STR_COLUMNS.len()];
        for (slot, v) in ids.iter_mut().zip([backend, table, chain, op, actor, comm]) {
            *slot = v.as_deref().map(|s| self.id(conn, s)).transpose()?;
        }
        let (dict, body) = self.body(conn, json)?;
        insert.execute(params![
            *seq as i64,
            time_ns,
            netns,
            ids[0],
            ids[1],
            ids[2],
            ids[3],
            ids[4],
            ids[5],
            dict,
            body
        ])?;
        Ok(())
    }
}

/// A damaged file reads as "not a database"; anything else is a problem opening it.
fn classify(path: &Path, source: rusqlite::Error) -> StoreError {
    match source.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) | Some(rusqlite::ErrorCode::DatabaseCorrupt) => {
            StoreError::NotARecord {
                path: path.into(),
                cause: source,
            }
        }
        _ => StoreError::Open {
            path: path.into(),
            cause: source,
        },
    }
}

/// Open a record read-only (for `observer query` and the HTTP backlog). A copied file works.
pub fn open_ro(path: &Path) -> Result<Connection, StoreError> {
    if !path.exists() {
        return Err(StoreError::Missing(path.into()));
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|source| StoreError::Open {
        path: path.into(),
        cause: source,
    })?;
    let (conn, version) = match conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0)) {
        Ok(v) => (conn, v),
        // A copy in a read-only place: the write-ahead log's shared memory cannot be created.
        // Read it as an immutable file.
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::CannotOpen) => {
            let mut uri = String::from("file:");
            uri.extend(form_urlencoded::byte_serialize(
                path.as_os_str().as_encoded_bytes(),
            ));
            uri.push_str("?immutable=1");
            let conn = Connection::open_with_flags(&uri, flags | OpenFlags::SQLITE_OPEN_URI)
                .map_err(|source| StoreError::Open {
                    path: path.into(),
                    cause: source,
                })?;
            let v = conn
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .map_err(|source| classify(path, source))?;
            (conn, v)
        }
        Err(source) => return Err(classify(path, source)),
    };
    let has_changes: Option<String> = conn
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'changes'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|source| classify(path, source))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::Version {
            path: path.into(),
            found: version,
        });
    }
    if has_changes.is_none() {
        return Err(StoreError::Foreign(path.into()));
    }
    Ok(conn)
}

/// The record's identity: a random id made when the record is first opened for writing and kept
/// in it. Change `seq`s and incident numbers are unique within one record, so (node, id, number)
/// names a row for good (NATS message ids are made of it).
pub fn record_id(conn: &Connection) -> Result<String, StoreError> {
    // Made the first time it is asked for (only publishing to NATS needs it).
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    )?;
    let found: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'id'", [], |r| r.get(0))
        .optional()?;
    if let Some(id) = found {
        return Ok(id);
    }
    let id = std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map(|u| u.trim().replace('-', ""))
        .unwrap_or_else(|_| format!("{:x}", now_ns()));
    conn.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('id', ?1)",
        params![id],
    )?;
    Ok(conn.query_row("SELECT value FROM meta WHERE key = 'id'", [], |r| r.get(0))?)
}

/// The last change `seq` and incident number stored (0 when empty).
pub fn last_numbers(conn: &Connection) -> Result<(u64, u64), StoreError> {
    let seq: i64 = conn.query_row("SELECT COALESCE(MAX(seq), 0) FROM changes", [], |r| {
        r.get(0)
    })?;
    let no: i64 = conn.query_row("SELECT COALESCE(MAX(no), 0) FROM incidents", [], |r| {
        r.get(0)
    })?;
    Ok((seq as u64, no as u64))
}

/// What streams a row, run once the row is committed (or known not to be recorded).
pub type Then = Box<dyn FnOnce() + Send>;

/// A row to write (if any) and what to do once it is written.
type Item = (Option<Row>, Option<Then>);

/// The sending side: never blocks.
#[derive(Clone)]
pub struct StoreSender {
    tx: Sender<Item>,
    /// Rows queued and not yet written.
    pending: Arc<AtomicUsize>,
    capacity: usize,
    stats: Arc<StoreStats>,
}

impl StoreSender {
    /// Queue a row (if any), then `then`, which the writer runs once the row is committed, in
    /// the order sent. When more than the capacity of rows are waiting for the disk, the row is
    /// dropped from the record (counted, reported) and `then` still runs in its turn; false is
    /// returned. When the writer is gone, `then` runs here and now.
    pub fn send_then(&self, mut row: Option<Row>, then: Option<Then>) -> bool {
        let mut recorded = true;
        if row.is_some() && self.pending.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            row = None;
            recorded = false;
            self.dropped();
        }
        if let Err(e) = self.tx.send((row, then)) {
            let (row, then) = e.0;
            if row.is_some() {
                self.pending.fetch_sub(1, Ordering::AcqRel);
                recorded = false;
                self.dropped();
            }
            if let Some(then) = then {
                then();
            }
        }
        recorded
    }

    fn dropped(&self) {
        let n = self.stats.count("dropped", 1);
        if n == 1 || n.is_power_of_two() {
            tracing::error!(
                "the record writer is behind: {n} records not written to the record (the disk \
                 is too slow or full); they were still streamed"
            );
        }
    }
}

/// Start the writer thread. Dropping every `StoreSender` makes it write what is queued and end;
/// join the handle to wait for that.
pub fn spawn_writer(
    conn: Connection,
    path: PathBuf,
    limits: Limits,
    capacity: usize,
    stats: Arc<StoreStats>,
) -> std::io::Result<(StoreSender, std::thread::JoinHandle<()>)> {
    let (tx, rx) = channel();
    let pending = Arc::new(AtomicUsize::new(0));
    let s = stats.clone();
    let p = pending.clone();
    let handle = std::thread::Builder::new()
        .name("record-writer".into())
        .spawn(move || Writer::new(conn, path, limits, s).run(rx, &p))?;
    Ok((
        StoreSender {
            tx,
            pending,
            capacity,
            stats,
        },
        handle,
    ))
}

/// The most rows in one transaction.
const BATCH: usize = 2048;

pub struct Writer {
    conn: Connection,
    path: PathBuf,
    /// The inode of the file `conn` writes, to notice the file deleted or replaced.
    ino: Option<u64>,
    /// The path's trouble was reported (once until it changes).
    path_trouble: bool,
    limits: Limits,
    stats: Arc<StoreStats>,
    last_check: Option<Instant>,
    since_check: u64,
    enc: Encoder,
    /// Each chain's last writer, stamped on the snapshots.
    last: crate::forensics::record::LastWriters,
}

impl Writer {
    pub fn new(conn: Connection, path: PathBuf, limits: Limits, stats: Arc<StoreStats>) -> Writer {
        let enc = load_encoder(&conn, &path);
        let last = load_last_writers(&conn, &path);
        Writer {
            enc,
            last,
            ino: inode(&path),
            path_trouble: false,
            conn,
            path,
            limits,
            stats,
            last_check: None,
            since_check: 0,
        }
    }

    /// The record's file deleted or replaced under the daemon (removed by hand, a clean-up job):
    /// rows written to the old file would reach no reader. Make a new record at the path and go
    /// on there, saying so; when that fails, say why once and keep writing the old file.
    fn check_file(&mut self) {
        let now = inode(&self.path);
        if now.is_some() && now == self.ino {
            return;
        }
        let what = if now.is_none() {
            "was deleted"
        } else {
            "was replaced by another file"
        };
        match open_rw(&self.path) {
            Ok(conn) => {
                self.enc = load_encoder(&conn, &self.path);
                self.last = load_last_writers(&conn, &self.path);
                self.conn = conn;
                self.ino = inode(&self.path);
                self.path_trouble = false;
                self.stats.reopened.inc();
                tracing::error!(
                    "the record {} {what} while observer was writing it: a new record was made \
                     at that path and rows go there from now on (the rows before are only in the \
                     old file, if anything still holds it)",
                    self.path.display()
                );
            }
            Err(e) => {
                if !self.path_trouble {
                    tracing::error!(
                        "the record {} {what} while observer was writing it, and no new record \
                         can be made there ({e}); rows go on to the old file, which no reader \
                         finds at that path",
                        self.path.display()
                    );
                    self.path_trouble = true;
                }
            }
        }
    }

    fn run(mut self, rx: Receiver<Item>, pending: &AtomicUsize) {
        self.enforce_limits();
        let mut rows = Vec::with_capacity(BATCH);
        let mut thens = Vec::with_capacity(BATCH);
        while let Ok(first) = rx.recv() {
            let mut next = Some(first);
            while let Some((row, then)) = next.take() {
                rows.extend(row);
                thens.extend(then);
                if rows.len() < BATCH {
                    next = rx.try_recv().ok();
                }
            }
            if !rows.is_empty() {
                self.check_file();
                self.write_batch(&rows);
                pending.fetch_sub(rows.len(), Ordering::AcqRel);
                rows.clear();
                self.stats.committed.notify_waiters();
            }
            // Committed (or counted as failed): stream, in order.
            for then in thens.drain(..) {
                then();
            }
            let due = self
                .last_check
                .is_none_or(|t| t.elapsed() > Duration::from_secs(30));
            if due || self.since_check > 50_000 {
                self.enforce_limits();
            }
        }
        // Senders gone: everything queued has been written. Fold the log into the file.
        if let Err(e) = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);") {
            tracing::debug!("record checkpoint: {e}");
        }
        self.update_size();
    }

    /// Write rows in one transaction. On failure (disk full...) the rows are counted as failed
    /// and reported; what was written before stays.
    pub fn write_batch(&mut self, rows: &[Row]) {
        match self.try_write(rows) {
            Ok(()) => {
                self.stats.count("written", rows.len() as u64);
                self.since_check += rows.len() as u64;
            }
            Err(e) => {
                // Strings and a dictionary the rolled-back transaction added are not there.
                self.enc = load_encoder(&self.conn, &self.path);
                let n = self.stats.count("failed", rows.len() as u64);
                tracing::error!(
                    "could not write {} records to the record {} ({e}); {n} lost so far. Free \
                     space on its file system, or lower --max-record / --retain",
                    rows.len(),
                    self.path.display()
                );
            }
        }
    }

    fn try_write(&mut self, rows: &[Row]) -> rusqlite::Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut change = tx.prepare_cached(INSERT_CHANGE)?;
            let mut incident = tx.prepare_cached(
                "INSERT OR REPLACE INTO incidents (no, time_ns, type, netns, json) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for row in rows {
                match row {
                    Row::Change { json, .. } => {
                        self.enc.insert_change(&tx, &mut change, row)?;
                        self.last.note(json);
                    }
                    Row::Snapshot(s) => {
                        let mut tables = (*s.tables).clone();
                        self.last.stamp(s.netns, s.backend, &mut tables);
                        crate::forensics::frames::insert(
                            &tx,
                            s.seq,
                            s.time_ns,
                            s.netns,
                            s.netns_name.as_deref(),
                            s.backend,
                            &tables,
                        )?;
                    }
                    Row::Incident {
                        no,
                        time_ns,
                        kind,
                        netns,
                        json,
                    } => {
                        incident.execute(params![*no as i64, time_ns, kind, netns, &**json])?;
                    }
                }
            }
        }
        tx.commit()
    }

    /// Delete rows older than `--retain`, then the oldest rows until the file fits
    /// `--max-record`, and give the freed pages back to the file system.
    pub fn enforce_limits(&mut self) {
        self.last_check = Some(Instant::now());
        self.since_check = 0;
        if let Err(e) = self.try_enforce() {
            tracing::warn!(
                "keeping the record {} within its limits: {e}",
                self.path.display()
            );
        }
        self.update_size();
    }

    fn try_enforce(&mut self) -> rusqlite::Result<()> {
        let cutoff = now_ns() - self.limits.retain.as_nanos().min(i64::MAX as u128) as i64;
        // The state after the last change to go becomes the snapshot the rest replays on.
        let last_gone: Option<i64> = self.conn.query_row(
            "SELECT MAX(seq) FROM changes WHERE time_ns < ?1",
            [cutoff],
            |r| r.get(0),
        )?;
        if let Some(k) = last_gone {
            self.roll_forward(k as u64);
        }
        let mut deleted = self
            .conn
            .execute("DELETE FROM changes WHERE time_ns < ?1", [cutoff])?;
        deleted += self
            .conn
            .execute("DELETE FROM incidents WHERE time_ns < ?1", [cutoff])?;
        // Bytes in use (free pages do not count: they are reused or vacuumed below).
        let used = |c: &Connection| -> rusqlite::Result<u64> {
            let pages: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            let free: i64 = c.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
            let size: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0))?;
            Ok(((pages - free).max(0) * size) as u64)
        };
        // Aim a little under the limit so that this does not run on every batch.
        let target = self.limits.max_bytes / 10 * 9;
        let mut rounds = 0;
        while used(&self.conn)? > self.limits.max_bytes && rounds < 100 {
            rounds += 1;
            let total: i64 = self
                .conn
                .query_row("SELECT COUNT(*) FROM changes", [], |r| r.get(0))?;
            if total == 0 {
                break;
            }
            let now_used = used(&self.conn)?;
            // Delete the share of rows that is over the target (at least 1,000).
            let share = 1.0 - target as f64 / now_used as f64;
            let n = ((total as f64 * share) as i64).max(1000);
            let last_gone: Option<i64> = self
                .conn
                .query_row(
                    "SELECT seq FROM changes ORDER BY seq LIMIT 1 OFFSET ?1",
                    [n - 1],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(k) = last_gone {
                self.roll_forward(k as u64);
            }
            deleted += self.conn.execute(
                "DELETE FROM changes WHERE seq IN (SELECT seq FROM changes ORDER BY seq LIMIT ?1)",
                [n],
            )?;
            let oldest: Option<i64> =
                self.conn
                    .query_row("SELECT MIN(time_ns) FROM changes", [], |r| r.get(0))?;
            if let Some(t) = oldest {
                deleted += self
                    .conn
                    .execute("DELETE FROM incidents WHERE time_ns < ?1", [t])?;
            }
        }
        if deleted > 0 {
            self.stats.count("expired", deleted as u64);
            self.sweep_strings()?;
            self.conn
                .execute_batch("PRAGMA incremental_vacuum; PRAGMA wal_checkpoint(TRUNCATE);")?;
            tracing::info!(
                "record {}: {deleted} old records deleted to stay within --retain and --max-record",
                self.path.display()
            );
        }
        Ok(())
    }

    /// Make the state after change `seq` a snapshot before the changes up to it go. A failure
    /// is logged: the changes still go (the size limit wins), and `query --at` says what it lacks.
    fn roll_forward(&mut self, seq: u64) {
        let res = self
            .conn
            .execute_batch("BEGIN")
            .map_err(crate::forensics::ForensicsError::from)
            .and_then(|_| crate::forensics::record::roll_forward(&self.conn, seq));
        let end = if res.is_ok() { "COMMIT" } else { "ROLLBACK" };
        if let Err(e) = self.conn.execute_batch(end) {
            tracing::warn!("record {}: {end}: {e}", self.path.display());
        }
        if let Err(e) = res {
            tracing::warn!(
                "record {}: keeping the ruleset's state before deleting old changes: {e}",
                self.path.display()
            );
        }
    }

    /// Strings no row uses any more (their rows expired) go, once there are many of them: a
    /// node's chain names come and go (kube-proxy's per-endpoint chains).
    fn sweep_strings(&mut self) -> rusqlite::Result<()> {
        let n: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM strs", [], |r| r.get(0))?;
        if n < STRS_SWEPT_FROM {
            return Ok(());
        }
        let used = STR_COLUMNS
            .iter()
            .map(|c| format!("SELECT {c} FROM changes WHERE {c} IS NOT NULL"))
            .collect::<Vec<_>>()
            .join(" UNION ");
        self.conn
            .execute(&format!("DELETE FROM strs WHERE id NOT IN ({used})"), [])?;
        self.enc.ids.clear();
        Ok(())
    }

    fn update_size(&self) {
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        let bytes = size(&self.path) + size(Path::new(&wal));
        self.stats.bytes.set(bytes as i64);
    }
}

/// `strs` is swept of unused strings once it holds this many.
const STRS_SWEPT_FROM: i64 = 10_000;

/// The encoder for a record's connection; a record whose tables cannot be read yet gets a fresh
/// one (its errors show at the first write).
fn load_encoder(conn: &Connection, path: &Path) -> Encoder {
    Encoder::load(conn).unwrap_or_else(|e| {
        tracing::debug!("record {}: {e}", path.display());
        Encoder::default()
    })
}

/// The last writers of a record's chains; a record whose snapshots cannot be read starts
/// without them (its chains then say they were not written since).
fn load_last_writers(conn: &Connection, path: &Path) -> crate::forensics::record::LastWriters {
    crate::forensics::record::LastWriters::load(conn).unwrap_or_else(|e| {
        tracing::warn!("record {}: last writers of chains: {e}", path.display());
        Default::default()
    })
}

/// The inode of the file at `path` (to notice it replaced).
pub fn inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).ok().map(|m| m.ino())
}

pub fn now_ns() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp_nanos() as i64
}

/// A relative (`2h`: that long ago) or RFC 3339 time, as nanoseconds since the epoch.
pub fn parse_time(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if s == "now" {
        return Ok(now_ns());
    }
    if let Some(t) = parse_time_ns(s) {
        return Ok(t);
    }
    let ago = humantime::parse_duration(s.trim_end_matches(" ago")).map_err(|_| {
        format!("`{s}` is neither a duration like 2h or 7d nor an RFC 3339 time like 2026-11-21T03:12:00Z")
    })?;
    Ok(now_ns() - ago.as_nanos().min(i64::MAX as u128) as i64)
}

/// Nanoseconds since the epoch of an RFC 3339 time (the `time` of a record).
pub fn parse_time_ns(s: &str) -> Option<i64> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|t| t.unix_timestamp_nanos() as i64)
}

/// Which rows a query wants. Glob filters are applied in SQL (SQLite's GLOB has the same `*`,
/// `?` and `[...]` syntax, case-sensitive) and can use the indexes.
#[derive(Debug, Default, Clone)]
pub struct Selection {
    pub since_ns: Option<i64>,
    pub until_ns: Option<i64>,
    pub chain_glob: Option<String>,
    pub actor: Option<String>,
    pub ops: Vec<String>,
    pub netns: Option<u32>,
    pub backend: Option<String>,
    pub table: Option<String>,
    pub types: Vec<String>,
    /// Rows after this number (`seq` for changes, record number for incidents).
    pub after: Option<u64>,
    /// Rows before this number.
    pub before: Option<u64>,
    pub limit: Option<usize>,
}

/// A stored row, as streamed.
#[derive(Debug, Clone)]
pub struct Stored {
    /// `seq` for changes, the record number for incidents.
    pub number: u64,
    pub time_ns: i64,
    pub json: String,
}

/// A WHERE clause with numbered parameters, for a record of layout 1 (text columns) or 2
/// (string numbers).
#[derive(Default)]
struct Where {
    sql: String,
    args: Vec<rusqlite::types::Value>,
    numbered_strings: bool,
}

impl Where {
    fn for_record(conn: &Connection) -> Result<Where, StoreError> {
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        Ok(Where {
            numbered_strings: version >= 2,
            ..Where::default()
        })
    }

    fn arg(&mut self, v: rusqlite::types::Value) -> String {
        self.args.push(v);
        format!("?{}", self.args.len())
    }

    fn cond(&mut self, cond: &str, v: rusqlite::types::Value) {
        let mark = self.arg(v);
        self.sql.push_str(&format!(" AND {cond} {mark}"));
    }

    /// `column` holds a string matching `test` (e.g. `= ?1`, `GLOB ?1`, `IN (?1,?2)`).
    fn string_is(&self, column: &str, test: &str) -> String {
        if self.numbered_strings {
            format!("{column} IN (SELECT id FROM strs WHERE s {test})")
        } else {
            format!("{column} {test}")
        }
    }

    /// A string column compared with one value.
    fn string_cond(&mut self, column: &str, op: &str, value: &str) {
        let mark = self.arg(rusqlite::types::Value::Text(value.into()));
        let c = self.string_is(column, &format!("{op} {mark}"));
        self.sql.push_str(&format!(" AND {c}"));
    }

    fn any_of(&mut self, column: &str, values: &[String]) {
        if values.is_empty() {
            return;
        }
        let marks: Vec<String> = values
            .iter()
            .map(|v| self.arg(rusqlite::types::Value::Text(v.clone())))
            .collect();
        let c = self.string_is(column, &format!("IN ({})", marks.join(",")));
        self.sql.push_str(&format!(" AND {c}"));
    }

    fn common(&mut self, s: &Selection, number: &str) {
        use rusqlite::types::Value as V;
        if let Some(t) = s.since_ns {
            self.cond("time_ns >=", V::Integer(t));
        }
        if let Some(t) = s.until_ns {
            self.cond("time_ns <", V::Integer(t));
        }
        if let Some(n) = s.netns {
            self.cond("netns =", V::Integer(n as i64));
        }
        if let Some(a) = s.after {
            self.cond(
                &format!("{number} >"),
                V::Integer(a.min(i64::MAX as u64) as i64),
            );
        }
        if let Some(b) = s.before {
            self.cond(
                &format!("{number} <"),
                V::Integer(b.min(i64::MAX as u64) as i64),
            );
        }
    }

    /// Run `select` (number, time, dictionary, body) with this clause and decode the rows.
    fn run(
        mut self,
        conn: &Connection,
        select: &str,
        order: &str,
        limit: Option<usize>,
    ) -> Result<Vec<Stored>, StoreError> {
        self.sql.push_str(&format!(" ORDER BY {order}"));
        if let Some(l) = limit {
            self.sql.push_str(&format!(" LIMIT {l}"));
        }
        let mut stmt = conn.prepare(&format!("{select} WHERE 1{}", self.sql))?;
        let mut rows = stmt.query(rusqlite::params_from_iter(self.args))?;
        let mut dec = Decoder::default();
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let number = r.get::<_, i64>(0)? as u64;
            out.push(Stored {
                number,
                time_ns: r.get(1)?,
                json: dec.decode(conn, number, r.get(2)?, r.get_ref(3)?)?,
            });
        }
        Ok(out)
    }
}

/// Frames compressed with a dictionary of the record (the rows' `dicts`, the snapshots'
/// `snap_dicts`), each dictionary loaded once.
#[derive(Default)]
pub(crate) struct DictFrames {
    dicts: std::collections::HashMap<i64, zstd::bulk::Decompressor<'static>>,
}

impl DictFrames {
    /// `frame` decompressed with dictionary `id` of `table`; the inner error says why the frame
    /// or its dictionary is damaged (for the caller's error, which names what it was reading).
    pub(crate) fn decompress(
        &mut self,
        conn: &Connection,
        table: &'static str,
        id: i64,
        frame: &[u8],
    ) -> rusqlite::Result<Result<Vec<u8>, String>> {
        let d = match self.dicts.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let raw: Option<Vec<u8>> = conn
                    .query_row(
                        &format!("SELECT dict FROM {table} WHERE id = ?1"),
                        [id],
                        |r| r.get(0),
                    )
                    .optional()?;
                let Some(raw) = raw else {
                    return Ok(Err(format!("its dictionary {id} is missing")));
                };
                match zstd::bulk::Decompressor::with_dictionary(&raw) {
                    Ok(d) => e.insert(d),
                    Err(err) => return Ok(Err(format!("dictionary {id}: {err}"))),
                }
            }
        };
        let size = match frame_size(frame) {
            Ok(n) => n,
            Err(e) => return Ok(Err(e.into())),
        };
        Ok(d.decompress(frame, size)
            .map_err(|e| format!("decompressing: {e}")))
    }
}

/// The size a zstd frame of the record decompresses to, as its header says; no size, or one
/// larger than a row may be, is damage.
pub(crate) fn frame_size(frame: &[u8]) -> Result<usize, &'static str> {
    frame_size_at_most(frame, MAX_ROW_BYTES)
}

/// [`frame_size`] with another bound (a snapshot's whole ruleset may be larger than a row).
pub(crate) fn frame_size_at_most(frame: &[u8], max: u64) -> Result<usize, &'static str> {
    zstd::zstd_safe::get_frame_content_size(frame)
        .ok()
        .flatten()
        .filter(|&n| n <= max)
        .map(|n| n as usize)
        .ok_or("no usable size in its compressed frame")
}

/// Turns stored bodies back into the JSON lines that were streamed.
#[derive(Default)]
struct Decoder {
    frames: DictFrames,
}

impl Decoder {
    fn decode(
        &mut self,
        conn: &Connection,
        seq: u64,
        dict: Option<i64>,
        body: rusqlite::types::ValueRef<'_>,
    ) -> Result<String, StoreError> {
        use rusqlite::types::ValueRef;
        let damaged = |cause: String| StoreError::Damaged { seq, cause };
        let bytes = match (dict, body) {
            (None, ValueRef::Text(t)) | (None, ValueRef::Blob(t)) => t.to_vec(),
            (Some(id), ValueRef::Blob(b)) => self
                .frames
                .decompress(conn, "dicts", id, b)?
                .map_err(damaged)?,
            (_, other) => return Err(damaged(format!("a body of type {:?}", other.data_type()))),
        };
        String::from_utf8(bytes).map_err(|e| damaged(format!("not UTF-8: {e}")))
    }
}

/// The largest JSON line a row may decode to (a guard against a damaged size).
const MAX_ROW_BYTES: u64 = 64 << 20;

/// Changes matching the selection, oldest first.
pub fn select_changes(conn: &Connection, s: &Selection) -> Result<Vec<Stored>, StoreError> {
    let mut w = Where::for_record(conn)?;
    w.common(s, "seq");
    if let Some(g) = &s.chain_glob {
        w.string_cond("chain", "GLOB", g);
    }
    if let Some(a) = &s.actor {
        // The actor, or the command itself (as `tail --actor`).
        let mark = w.arg(rusqlite::types::Value::Text(a.clone()));
        let test = format!("= {mark}");
        let c = format!(
            " AND ({} OR {})",
            w.string_is("actor", &test),
            w.string_is("comm", &test)
        );
        w.sql.push_str(&c);
    }
    if let Some(b) = &s.backend {
        w.string_cond("backend", "=", b);
    }
    if let Some(t) = &s.table {
        w.string_cond("tbl", "=", t);
    }
    w.any_of("op", &s.ops);
    let select = if w.numbered_strings {
        "SELECT seq, time_ns, dict, body FROM changes"
    } else {
        "SELECT seq, time_ns, NULL, json FROM changes"
    };
    w.run(conn, select, "seq", s.limit)
}

/// Incidents in the time and number range and of the types asked for, oldest first. Chain,
/// actor and backend filters are applied by the caller on the JSON (an incident names several
/// chains and actors).
pub fn select_incidents(conn: &Connection, s: &Selection) -> Result<Vec<Stored>, StoreError> {
    // Incidents keep plain columns in every layout.
    let mut w = Where::default();
    w.common(s, "no");
    w.any_of("type", &s.types);
    w.run(
        conn,
        "SELECT no, time_ns, NULL, json FROM incidents",
        "no",
        s.limit,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(seq: u64, time_ns: i64, chain: &str) -> Row {
        Row::Change {
            seq,
            time_ns,
            netns: Some(7),
            backend: Some("legacy".into()),
            table: Some("nat".into()),
            chain: Some(chain.into()),
            op: Some("chain_delete".into()),
            actor: Some("calico-node".into()),
            comm: Some("iptables-restore".into()),
            json: format!(r#"{{"kind":"change","seq":{seq}}}"#).into(),
        }
    }

    fn tmp_record() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.db");
        (dir, path)
    }

    fn writer(path: &Path, limits: Limits) -> Writer {
        Writer::new(
            open_rw(path).unwrap(),
            path.into(),
            limits,
            Arc::new(StoreStats::default()),
        )
    }

    /// Rows older than an hour go.
    const HOURLY: Limits = Limits {
        retain: Duration::from_secs(3600),
        max_bytes: u64::MAX,
    };

    const WIDE: Limits = Limits {
        retain: Duration::from_secs(3600 * 24 * 365 * 100),
        max_bytes: u64::MAX,
    };

    #[test]
    fn rows_survive_reopening_and_numbers_continue() {
        let (_dir, path) = tmp_record();
        let now = now_ns();
        let mut w = writer(&path, WIDE);
        w.write_batch(&[
            change(1, now, "KUBE-SVC-A"),
            change(2, now + 1, "KUBE-SEP-B"),
        ]);
        drop(w);
        let ro = open_ro(&path).unwrap();
        assert_eq!(last_numbers(&ro).unwrap(), (2, 0));
        let sel = Selection {
            chain_glob: Some("KUBE-SVC-*".into()),
            actor: Some("iptables-restore".into()),
            ..Default::default()
        };
        let got = select_changes(&ro, &sel).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].number, 1);
        assert!(got[0].json.contains(r#""seq":1"#));
    }

    #[test]
    fn old_rows_are_deleted_by_age() {
        let (_dir, path) = tmp_record();
        let now = now_ns();
        let hour = HOURLY.retain.as_nanos() as i64;
        let mut w = writer(&path, HOURLY);
        w.write_batch(&[change(1, now - 2 * hour, "A"), change(2, now, "B")]);
        w.enforce_limits();
        let ro = open_ro(&path).unwrap();
        let all = select_changes(&ro, &Selection::default()).unwrap();
        assert_eq!(all.iter().map(|r| r.number).collect::<Vec<_>>(), vec![2]);
    }

    #[test]
    fn the_record_id_is_made_once_and_kept() {
        let (dir, path) = tmp_record();
        let first = record_id(&open_rw(&path).unwrap()).unwrap();
        assert!(first.len() >= 16, "{first}");
        assert_eq!(record_id(&open_rw(&path).unwrap()).unwrap(), first);
        let other = dir.path().join("other.db");
        assert_ne!(record_id(&open_rw(&other).unwrap()).unwrap(), first);
    }

    #[test]
    fn the_oldest_rows_go_when_the_file_is_too_big() {
        let (_dir, path) = tmp_record();
        let now = now_ns();
        let mut w = writer(
            &path,
            Limits {
                retain: WIDE.retain,
                max_bytes: 256 * 1024,
            },
        );
        let rows: Vec<Row> = (1..=5000).map(|i| change(i, now + i as i64, "C")).collect();
        w.write_batch(&rows);
        w.enforce_limits();
        let ro = open_ro(&path).unwrap();
        let all = select_changes(&ro, &Selection::default()).unwrap();
        assert!(all.len() < 5000 && !all.is_empty(), "{} rows", all.len());
        assert_eq!(all.last().unwrap().number, 5000, "the newest rows stay");
        let pages: i64 = ro.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
        let free: i64 = ro
            .query_row("PRAGMA freelist_count", [], |r| r.get(0))
            .unwrap();
        assert!(
            (pages - free) * 4096 <= 256 * 1024,
            "{pages} pages, {free} free"
        );
    }

    #[test]
    fn a_full_queue_drops_from_the_record_and_still_streams_in_order() {
        let (tx, rx) = channel();
        let stats = Arc::new(StoreStats::default());
        let s = StoreSender {
            tx,
            pending: Arc::new(AtomicUsize::new(0)),
            capacity: 2,
            stats: stats.clone(),
        };
        let streamed = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sent: Vec<bool> = (1..=5)
            .map(|i| {
                let streamed = streamed.clone();
                s.send_then(
                    Some(change(i, 0, "C")),
                    Some(Box::new(move || streamed.lock().unwrap().push(i))),
                )
            })
            .collect();
        assert_eq!(sent, vec![true, true, false, false, false]);
        assert_eq!(stats.count("dropped", 0), 3);
        // Every item is queued, rows only for the first two; nothing streamed before the writer.
        let items: Vec<Item> = rx.try_iter().collect();
        assert_eq!(items.len(), 5);
        assert_eq!(items.iter().filter(|(r, _)| r.is_some()).count(), 2);
        assert!(streamed.lock().unwrap().is_empty());
        // The writer gone: the stream goes on at once.
        drop(rx);
        let streamed2 = streamed.clone();
        assert!(!s.send_then(
            Some(change(6, 0, "C")),
            Some(Box::new(move || streamed2.lock().unwrap().push(6)))
        ));
        assert_eq!(*streamed.lock().unwrap(), vec![6]);
        assert_eq!(stats.count("dropped", 0), 4);
    }

    #[test]
    fn rows_are_streamed_after_their_commit_in_order() {
        let (_dir, path) = tmp_record();
        let stats = Arc::new(StoreStats::default());
        let (s, join) =
            spawn_writer(open_rw(&path).unwrap(), path.clone(), WIDE, 1 << 16, stats).unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let now = now_ns();
        for i in 1..=500u64 {
            let (seen, path) = (seen.clone(), path.clone());
            // Each row, when streamed, is already in the record (read by another connection).
            s.send_then(
                Some(realistic(i, now + i as i64)),
                Some(Box::new(move || {
                    let ro = open_ro(&path).unwrap();
                    let last = last_numbers(&ro).unwrap().0;
                    seen.lock().unwrap().push((i, last >= i));
                })),
            );
        }
        drop(s);
        join.join().unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen.iter().map(|x| x.0).collect::<Vec<_>>(),
            (1..=500).collect::<Vec<_>>()
        );
        assert!(
            seen.iter().all(|x| x.1),
            "a row streamed before it was committed"
        );
    }

    /// A change line like kube-proxy's, different per row.
    fn realistic(seq: u64, time_ns: i64) -> Row {
        let chain = format!("KUBE-SEP-{:016X}", seq.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let json = format!(
            r#"{{"kind":"change","seq":{seq},"time":"t{time_ns}","netns":4026531840,"backend":"legacy","family":"ip","table":"nat","chain":"{chain}","op":"rule_add","rule":"-p tcp -m comment --comment \"default/svc-{}:http\" -j DNAT --to-destination 10.1.{}.{}:8080","process":{{"pid":{},"comm":"iptables-restor","actor":"kube-proxy"}}}}"#,
            seq % 97,
            seq % 251,
            seq % 13,
            1000 + seq % 7
        );
        Row::Change {
            seq,
            time_ns,
            netns: Some(4026531840),
            backend: Some("legacy".into()),
            table: Some("nat".into()),
            chain: Some(chain),
            op: Some(
                if seq.is_multiple_of(5) {
                    "chain_flush"
                } else {
                    "rule_add"
                }
                .into(),
            ),
            actor: Some("kube-proxy".into()),
            comm: Some("iptables-restor".into()),
            json: json.into(),
        }
    }

    fn json_of(rows: &[Row]) -> Vec<(u64, String)> {
        rows.iter()
            .filter_map(|r| match r {
                Row::Change { seq, json, .. } => Some((*seq, json.to_string())),
                Row::Incident { .. } | Row::Snapshot(_) => None,
            })
            .collect()
    }

    fn read_all(conn: &Connection, sel: &Selection) -> Vec<(u64, String)> {
        select_changes(conn, sel)
            .unwrap()
            .into_iter()
            .map(|r| (r.number, r.json))
            .collect()
    }

    #[test]
    fn rows_are_compressed_after_the_dictionary_and_read_back_exactly() {
        let (_dir, path) = tmp_record();
        let now = now_ns();
        let rows: Vec<Row> = (1..=3000).map(|i| realistic(i, now + i as i64)).collect();
        let mut w = writer(&path, WIDE);
        for batch in rows.chunks(700) {
            w.write_batch(batch);
        }
        drop(w);
        let ro = open_ro(&path).unwrap();
        assert_eq!(read_all(&ro, &Selection::default()), json_of(&rows));
        let (plain, packed, packed_bytes): (i64, i64, i64) = ro
            .query_row(
                "SELECT SUM(dict IS NULL), SUM(dict IS NOT NULL), \
                 SUM(CASE WHEN dict IS NULL THEN 0 ELSE length(body) END) FROM changes",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!((plain, packed), (DICT_SAMPLES as i64, 2000));
        let plain_bytes: usize = rows[DICT_SAMPLES..]
            .iter()
            .map(|r| match r {
                Row::Change { json, .. } => json.len(),
                Row::Incident { .. } | Row::Snapshot(_) => 0,
            })
            .sum();
        assert!(
            packed_bytes * 3 < plain_bytes as i64,
            "{packed_bytes} compressed bytes for {plain_bytes}"
        );
        // Each string is kept once.
        let strs: i64 = ro
            .query_row("SELECT COUNT(*) FROM strs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            strs,
            3000 + 6,
            "3000 chains, legacy, nat, 2 ops, actor, comm"
        );
        // Every filter works on numbered strings.
        let one = |sel: Selection| -> Vec<u64> {
            select_changes(&ro, &sel)
                .unwrap()
                .iter()
                .map(|r| r.number)
                .collect()
        };
        let chain_of_7 = format!("KUBE-SEP-{:016X}", 7u64.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        assert_eq!(
            one(Selection {
                chain_glob: Some(chain_of_7),
                ..Default::default()
            }),
            [7]
        );
        let flushes = one(Selection {
            ops: vec!["chain_flush".into()],
            actor: Some("iptables-restor".into()),
            backend: Some("legacy".into()),
            table: Some("nat".into()),
            after: Some(2990),
            ..Default::default()
        });
        assert_eq!(flushes, [2995, 3000]);
        assert!(one(Selection {
            table: Some("filter".into()),
            ..Default::default()
        })
        .is_empty());
        assert_eq!(
            one(Selection {
                actor: Some("kube-proxy".into()),
                limit: Some(2),
                ..Default::default()
            }),
            [1, 2]
        );
    }

    #[test]
    fn a_layout_1_record_is_read_then_converted_unchanged() {
        let (_dir, path) = tmp_record();
        let now = now_ns();
        let rows: Vec<Row> = (1..=1500).map(|i| realistic(i, now + i as i64)).collect();
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE changes (seq INTEGER PRIMARY KEY, time_ns INTEGER NOT NULL, netns INTEGER,
                   backend TEXT, tbl TEXT, chain TEXT, op TEXT, actor TEXT, comm TEXT, json TEXT NOT NULL);
                 CREATE INDEX changes_time ON changes(time_ns);
                 CREATE INDEX changes_chain ON changes(chain, time_ns);
                 CREATE TABLE incidents (no INTEGER PRIMARY KEY, time_ns INTEGER NOT NULL, type TEXT,
                   netns INTEGER, json TEXT NOT NULL);
                 INSERT INTO incidents VALUES (1, 5, 'foreign_delete', 7, '{\"kind\":\"incident\"}');
                 PRAGMA user_version = 1;",
            )
            .unwrap();
            for r in &rows {
                if let Row::Change {
                    seq,
                    time_ns,
                    netns,
                    backend,
                    table,
                    chain,
                    op,
                    actor,
                    comm,
                    json,
                } = r
                {
                    c.execute(
                        "INSERT INTO changes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                        params![
                            *seq as i64,
                            time_ns,
                            netns,
                            backend,
                            table,
                            chain,
                            op,
                            actor,
                            comm,
                            &**json
                        ],
                    )
                    .unwrap();
                }
            }
        }
        let flushes = Selection {
            ops: vec!["chain_flush".into()],
            chain_glob: Some("KUBE-SEP-*".into()),
            ..Default::default()
        };
        let want_flushes: Vec<(u64, String)> = json_of(&rows)
            .into_iter()
            .filter(|(seq, _)| seq.is_multiple_of(5))
            .collect();
        // Read as it is.
        let ro = open_ro(&path).unwrap();
        assert_eq!(read_all(&ro, &Selection::default()), json_of(&rows));
        assert_eq!(read_all(&ro, &flushes), want_flushes);
        drop(ro);
        // Converted by the writer, then written to.
        let mut w = writer(&path, WIDE);
        w.write_batch(&[realistic(1501, now + 1501)]);
        drop(w);
        let ro = open_ro(&path).unwrap();
        let version: i64 = ro
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let mut want = json_of(&rows);
        want.extend(json_of(&[realistic(1501, now + 1501)]));
        assert_eq!(read_all(&ro, &Selection::default()), want);
        assert_eq!(read_all(&ro, &flushes), want_flushes);
        assert_eq!(last_numbers(&ro).unwrap(), (1501, 1));
        let packed: i64 = ro
            .query_row(
                "SELECT COUNT(*) FROM changes WHERE dict IS NOT NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            packed, 501,
            "rows after the first {DICT_SAMPLES} are compressed"
        );
    }

    #[test]
    fn unused_strings_go_with_their_rows() {
        let (_dir, path) = tmp_record();
        let now = now_ns();
        let hour = HOURLY.retain.as_nanos() as i64;
        let mut w = writer(&path, HOURLY);
        let old: Vec<Row> = (1..=STRS_SWEPT_FROM as u64)
            .map(|i| realistic(i, now - 2 * hour))
            .collect();
        w.write_batch(&old);
        w.write_batch(&[realistic(100_000, now)]);
        w.enforce_limits();
        // The expired rows' chain names are gone; the new row still has its strings.
        w.write_batch(&[realistic(100_001, now)]);
        drop(w);
        let ro = open_ro(&path).unwrap();
        let strs: i64 = ro
            .query_row("SELECT COUNT(*) FROM strs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            strs,
            2 + 6,
            "two chains, legacy, nat, rule_add, actor, comm"
        );
        assert_eq!(
            read_all(&ro, &Selection::default()),
            json_of(&[realistic(100_000, now), realistic(100_001, now)])
        );
    }

    #[test]
    fn a_damaged_row_is_an_error_naming_it() {
        let (_dir, path) = tmp_record();
        let now = now_ns();
        let rows: Vec<Row> = (1..=1200).map(|i| realistic(i, now + i as i64)).collect();
        let mut w = writer(&path, WIDE);
        w.write_batch(&rows);
        drop(w);
        let c = Connection::open(&path).unwrap();
        c.execute(
            "UPDATE changes SET body = substr(body, 1, 5) || x'00ff00ff' WHERE seq = 1100",
            [],
        )
        .unwrap();
        drop(c);
        let ro = open_ro(&path).unwrap();
        let err = select_changes(&ro, &Selection::default()).unwrap_err();
        assert!(
            matches!(err, StoreError::Damaged { seq: 1100, .. }),
            "{err}"
        );
        let before = Selection {
            before: Some(1100),
            ..Default::default()
        };
        assert_eq!(read_all(&ro, &before).len(), 1099);
    }

    #[test]
    fn a_file_that_is_not_a_record_is_refused_and_kept() {
        let (_dir, path) = tmp_record();
        let junk = vec![0x5au8; 8192];
        std::fs::write(&path, &junk).unwrap();
        let err = open_rw(&path).expect_err("junk must be refused");
        assert!(matches!(err, StoreError::NotARecord { .. }), "{err}");
        assert!(err.to_string().contains("left untouched"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), junk);
        assert!(open_ro(&path).is_err());
    }
}
