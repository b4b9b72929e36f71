//! The forensic record: every change and incident `observer run` saw, in an SQLite file, to
//! answer "who deleted KUBE-SVC-X at 03:12?" after the fact.
//!
//! Writes happen on one dedicated thread fed by a bounded channel: the engine never waits for the
//! disk. When the channel is full the record is counted as dropped and the loss is reported
//! (log line and metric), never silently. Rows are written in batches, one transaction each, in
//! WAL mode. The file is kept within an age (`--retain`) and a size (`--max-record`) by deleting
//! the oldest rows; it is checked after writes, so an idle daemon does no work.
//!
//! Each row keeps the record's JSON line exactly as it was streamed, plus the columns that
//! queries filter on (time, chain, actor, op, netns...), each indexed with the time.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

/// Version of the file layout, kept in `PRAGMA user_version`.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS changes (
    seq     INTEGER PRIMARY KEY,
    time_ns INTEGER NOT NULL,
    netns   INTEGER,
    backend TEXT,
    tbl     TEXT,
    chain   TEXT,
    op      TEXT,
    actor   TEXT,
    comm    TEXT,
    json    TEXT NOT NULL
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
    let conn = Connection::open(path).map_err(|source| StoreError::Open {
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
    conn.execute_batch(SCHEMA)
        .map_err(|source| classify(path, source))?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(|source| classify(path, source))?;
    Ok(conn)
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

/// The sending side: never blocks.
#[derive(Clone)]
pub struct StoreSender {
    tx: SyncSender<Row>,
    stats: Arc<StoreStats>,
}

impl StoreSender {
    /// Queue a row; when the writer is behind, count it as dropped and return false.
    pub fn send(&self, row: Row) -> bool {
        match self.tx.try_send(row) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                let n = self.stats.count("dropped", 1);
                if n == 1 || n.is_power_of_two() {
                    tracing::error!(
                        "the record writer is behind: {n} records not written to the record \
                         (the disk is too slow or full); they were still streamed"
                    );
                }
                false
            }
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
    let (tx, rx) = sync_channel(capacity);
    let s = stats.clone();
    let handle = std::thread::Builder::new()
        .name("record-writer".into())
        .spawn(move || Writer::new(conn, path, limits, s).run(rx))?;
    Ok((StoreSender { tx, stats }, handle))
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
}

impl Writer {
    pub fn new(conn: Connection, path: PathBuf, limits: Limits, stats: Arc<StoreStats>) -> Writer {
        Writer {
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

    fn run(mut self, rx: Receiver<Row>) {
        self.enforce_limits();
        let mut batch = Vec::with_capacity(BATCH);
        while let Ok(row) = rx.recv() {
            batch.push(row);
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            self.check_file();
            self.write_batch(&batch);
            batch.clear();
            self.stats.committed.notify_waiters();
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
            let mut change = tx.prepare_cached(
                "INSERT OR REPLACE INTO changes (seq, time_ns, netns, backend, tbl, chain, op, \
                 actor, comm, json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?;
            let mut incident = tx.prepare_cached(
                "INSERT OR REPLACE INTO incidents (no, time_ns, type, netns, json) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for row in rows {
                match row {
                    Row::Change {
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
                    } => {
                        change.execute(params![
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
                        ])?;
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
            self.conn
                .execute_batch("PRAGMA incremental_vacuum; PRAGMA wal_checkpoint(TRUNCATE);")?;
            tracing::info!(
                "record {}: {deleted} old records deleted to stay within --retain and --max-record",
                self.path.display()
            );
        }
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

/// The inode of the file at `path` (to notice it replaced).
pub fn inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).ok().map(|m| m.ino())
}

pub fn now_ns() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp_nanos() as i64
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

/// A WHERE clause with numbered parameters.
#[derive(Default)]
struct Where {
    sql: String,
    args: Vec<rusqlite::types::Value>,
}

impl Where {
    fn arg(&mut self, v: rusqlite::types::Value) -> String {
        self.args.push(v);
        format!("?{}", self.args.len())
    }

    fn cond(&mut self, cond: &str, v: rusqlite::types::Value) {
        let mark = self.arg(v);
        self.sql.push_str(&format!(" AND {cond} {mark}"));
    }

    fn any_of(&mut self, column: &str, values: &[String]) {
        if values.is_empty() {
            return;
        }
        let marks: Vec<String> = values
            .iter()
            .map(|v| self.arg(rusqlite::types::Value::Text(v.clone())))
            .collect();
        self.sql
            .push_str(&format!(" AND {column} IN ({})", marks.join(",")));
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
        let rows = stmt.query_map(rusqlite::params_from_iter(self.args), |r| {
            Ok(Stored {
                number: r.get::<_, i64>(0)? as u64,
                time_ns: r.get(1)?,
                json: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
}

/// Changes matching the selection, oldest first.
pub fn select_changes(conn: &Connection, s: &Selection) -> Result<Vec<Stored>, StoreError> {
    use rusqlite::types::Value as V;
    let mut w = Where::default();
    w.common(s, "seq");
    if let Some(g) = &s.chain_glob {
        w.cond("chain GLOB", V::Text(g.clone()));
    }
    if let Some(a) = &s.actor {
        // The actor, or the command itself (as `tail --actor`).
        let mark = w.arg(V::Text(a.clone()));
        w.sql
            .push_str(&format!(" AND (actor = {mark} OR comm = {mark})"));
    }
    if let Some(b) = &s.backend {
        w.cond("backend =", V::Text(b.clone()));
    }
    if let Some(t) = &s.table {
        w.cond("tbl =", V::Text(t.clone()));
    }
    w.any_of("op", &s.ops);
    w.run(
        conn,
        "SELECT seq, time_ns, json FROM changes",
        "seq",
        s.limit,
    )
}

/// Incidents in the time and number range and of the types asked for, oldest first. Chain,
/// actor and backend filters are applied by the caller on the JSON (an incident names several
/// chains and actors).
pub fn select_incidents(conn: &Connection, s: &Selection) -> Result<Vec<Stored>, StoreError> {
    let mut w = Where::default();
    w.common(s, "no");
    w.any_of("type", &s.types);
    w.run(
        conn,
        "SELECT no, time_ns, json FROM incidents",
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

    fn writer(path: &Path, limits: Limits) -> Writer {
        Writer::new(
            open_rw(path).unwrap(),
            path.into(),
            limits,
            Arc::new(StoreStats::default()),
        )
    }

    const WIDE: Limits = Limits {
        retain: Duration::from_secs(3600 * 24 * 365 * 100),
        max_bytes: u64::MAX,
    };

    #[test]
    fn rows_survive_reopening_and_numbers_continue() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.db");
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
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.db");
        let now = now_ns();
        let hour = 3_600_000_000_000;
        let mut w = writer(
            &path,
            Limits {
                retain: Duration::from_secs(3600),
                max_bytes: u64::MAX,
            },
        );
        w.write_batch(&[change(1, now - 2 * hour, "A"), change(2, now, "B")]);
        w.enforce_limits();
        let ro = open_ro(&path).unwrap();
        let all = select_changes(&ro, &Selection::default()).unwrap();
        assert_eq!(all.iter().map(|r| r.number).collect::<Vec<_>>(), vec![2]);
    }

    #[test]
    fn the_record_id_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.db");
        let first = record_id(&open_rw(&path).unwrap()).unwrap();
        assert!(first.len() >= 16, "{first}");
        assert_eq!(record_id(&open_rw(&path).unwrap()).unwrap(), first);
        let other = dir.path().join("other.db");
        assert_ne!(record_id(&open_rw(&other).unwrap()).unwrap(), first);
    }

    #[test]
    fn the_oldest_rows_go_when_the_file_is_too_big() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.db");
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
    fn a_full_queue_drops_and_counts_instead_of_blocking() {
        let (tx, _rx) = sync_channel(2);
        let stats = Arc::new(StoreStats::default());
        let s = StoreSender {
            tx,
            stats: stats.clone(),
        };
        let sent: Vec<bool> = (1..=5).map(|i| s.send(change(i, 0, "C"))).collect();
        assert_eq!(sent, vec![true, true, false, false, false]);
        assert_eq!(stats.count("dropped", 0), 3);
    }

    #[test]
    fn a_file_that_is_not_a_record_is_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.db");
        let junk = vec![0x5au8; 8192];
        std::fs::write(&path, &junk).unwrap();
        let err = open_rw(&path).expect_err("junk must be refused");
        assert!(matches!(err, StoreError::NotARecord { .. }), "{err}");
        assert!(err.to_string().contains("left untouched"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), junk);
        assert!(open_ro(&path).is_err());
    }
}
