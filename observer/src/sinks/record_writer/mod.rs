//! The record's writer: every change, incident and snapshot `observer run` streams, written to
//! the record ([`crate::store`]) on one dedicated thread fed by a channel, so that the engine
//! never waits for the disk.
//!
//! Each row comes with what streams it (stdout, the HTTP clients), run by that thread once the
//! row's batch is committed: whatever was streamed is in the record, even after a `kill -9`.
//! When more than the queue's capacity of rows wait for the disk, further rows are counted as
//! dropped from the record and the loss is reported (log line and metric), never silently; they
//! are still streamed, in order. Whatever the record could not take (rows dropped, a write that
//! failed: disk full, I/O error) is kept in it as a gap row ([`gaps`]) with the first batch that
//! commits after it, so that readers can say what the record lacks; with a NATS publisher
//! attached, those rows themselves are held for it in memory ([`held`]). Rows are written in
//! batches, one transaction each, in WAL mode. The file is kept within an age (`--retain`) and a
//! size (`--max-record`) by deleting the oldest rows (the ruleset's state before them kept as a
//! snapshot, and what went as one `retention` gap row); it is checked after writes, so an idle
//! daemon does no work.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, OptionalExtension};

use crate::forensics::snapshots::{self, LastWriters};
use crate::forensics::{frames, ForensicsError, Snapshot};
use crate::store::{self, ChangeRow, RecordGap};

pub mod gaps;
pub mod held;
mod stats;
use gaps::{GapBook, Lost};
pub use stats::{Outcome, Reason, StoreStats};

/// One row to write.
#[derive(Debug, Clone)]
pub enum Row {
    Change(ChangeRow),
    Incident {
        no: u64,
        time_ns: i64,
        kind: Option<String>,
        netns: Option<u32>,
        json: Arc<str>,
    },
    /// A namespace's tables of one backend after change `seq` (see `crate::forensics`).
    Snapshot(Snapshot),
}

#[cfg(test)]
impl Row {
    /// A change row with only its number, time, namespace and line (for tests of what reads
    /// rows back).
    pub(crate) fn bare_change(seq: u64, time_ns: i64, netns: Option<u32>, json: &str) -> Row {
        Row::Change(ChangeRow {
            seq,
            time_ns,
            netns,
            backend: None,
            table: None,
            chain: None,
            op: None,
            actor: None,
            comm: None,
            json: json.into(),
        })
    }
}

/// Limits on the record's size.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub retain: Duration,
    pub max_bytes: u64,
}

/// What streams a row, run once the row is committed (or known not to be recorded).
pub type Then = Box<dyn FnOnce() + Send>;

/// What the writer gets: a row to write, or one dropped on the way (for its gap row).
#[derive(Debug)]
enum Entry {
    Row(Row),
    Dropped(Lost),
}

/// A row to write (if any) and what to do once it is written.
type Item = (Option<Entry>, Option<Then>);

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
    /// Signalled each time the record is written again after a stretch it could not take.
    pub fn resumed(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.stats.resumed.clone()
    }

    /// Queue a row (if any), then `then`, which the writer runs once the row is committed, in
    /// the order sent. When more than the capacity of rows are waiting for the disk, the row is
    /// dropped from the record (counted, reported) and `then` still runs in its turn; false is
    /// returned. When the writer is gone, `then` runs here and now.
    pub fn send_then(&self, row: Option<Row>, then: Option<Then>) -> bool {
        let mut recorded = true;
        let mut entry = row.map(Entry::Row);
        if entry.is_some() && self.pending.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            // Only what the gap row needs stays queued (and the row, for the NATS publisher).
            if let Some(Entry::Row(r)) = &entry {
                self.stats.held.hold([r]);
                entry = Some(Entry::Dropped(Lost::of(r)));
            }
            recorded = false;
            self.dropped();
        }
        if let Err(e) = self.tx.send((entry, then)) {
            let (entry, then) = e.0;
            if let Some(Entry::Row(_)) = entry {
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

/// How many records may wait for the record writer before new ones are dropped (and counted).
pub const QUEUE: usize = 65_536;

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
    enc: store::Encoder,
    /// Each chain's last writer, stamped on the snapshots.
    last: LastWriters,
    /// What did not reach the record yet, to write as gap rows.
    book: GapBook,
}

impl Writer {
    pub fn new(conn: Connection, path: PathBuf, limits: Limits, stats: Arc<StoreStats>) -> Writer {
        let enc = load_encoder(&conn, &path);
        let last = load_last_writers(&conn, &path);
        Writer {
            enc,
            last,
            ino: store::inode(&path),
            path_trouble: false,
            conn,
            path,
            limits,
            stats,
            last_check: None,
            since_check: 0,
            book: GapBook::default(),
        }
    }

    /// The record's file deleted or replaced under the daemon (removed by hand, a clean-up job):
    /// rows written to the old file would reach no reader. Make a new record at the path and go
    /// on there, saying so; when that fails, say why once and keep writing the old file.
    fn check_file(&mut self) {
        let now = store::inode(&self.path);
        if now.is_some() && now == self.ino {
            return;
        }
        let what = if now.is_none() {
            "was deleted"
        } else {
            "was replaced by another file"
        };
        match store::open_rw(&self.path) {
            Ok(conn) => {
                self.enc = load_encoder(&conn, &self.path);
                self.last = load_last_writers(&conn, &self.path);
                self.conn = conn;
                self.ino = store::inode(&self.path);
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
            let mut dropped = false;
            while let Some((entry, then)) = next.take() {
                match entry {
                    Some(Entry::Row(row)) => rows.push(row),
                    Some(Entry::Dropped(lost)) => {
                        self.book.lost([lost], gaps::BEHIND);
                        dropped = true;
                    }
                    None => {}
                }
                thens.extend(then);
                if rows.len() < BATCH {
                    next = rx.try_recv().ok();
                }
            }
            // Rows, or only a gap to write (rows dropped, none queued after them).
            if !rows.is_empty() || dropped {
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
        // Senders gone: everything queued has been written. A gap still owed gets one more try
        // (the last batch failed: the disk may still be full); then the process may end.
        if !self.book.is_empty() {
            self.write_batch(&[]);
            if let Some((g, _)) = self.book.failing() {
                tracing::error!(
                    "the record {} ends without saying that {} (its gap row could not be \
                     written either)",
                    self.path.display(),
                    g.message()
                );
            }
        }
        // Fold the log into the file.
        if let Err(e) = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);") {
            tracing::debug!("record checkpoint: {e}");
        }
        self.update_size();
    }

    /// Write rows in one transaction, with the gap rows owed. On failure (disk full...) the
    /// rows are counted as failed, reported, and kept as a gap; what was written before stays.
    pub fn write_batch(&mut self, rows: &[Row]) {
        let due = self.book.due();
        match self.try_write(rows, &due) {
            Ok(()) => {
                self.stats.count("written", rows.len() as u64);
                self.since_check += rows.len() as u64;
                if !due.is_empty() {
                    self.book.written();
                    self.stats.gaps.inc_by(due.len() as u64);
                    self.stats.recovered();
                    self.stats.resumed.notify_one();
                    for g in &due {
                        tracing::warn!(
                            "the record {} is written again; it says that {}",
                            self.path.display(),
                            g.message()
                        );
                    }
                }
            }
            Err(e) => {
                // Strings and a dictionary the rolled-back transaction added are not there.
                self.enc = load_encoder(&self.conn, &self.path);
                let reason = gaps::reason_of(&e);
                self.book.lost(rows.iter().map(Lost::of), &reason);
                self.stats.held.hold(rows);
                if let Some((g, since)) = self.book.failing() {
                    self.stats.failing_for(&g.reason, since);
                }
                if rows.is_empty() {
                    return;
                }
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

    fn try_write(&mut self, rows: &[Row], gaps: &[RecordGap]) -> rusqlite::Result<()> {
        let tx = self.conn.transaction()?;
        for g in gaps {
            store::gaps::insert_gap(&tx, g)?;
        }
        {
            let mut change = tx.prepare_cached(store::INSERT_CHANGE)?;
            let mut incident = tx.prepare_cached(
                "INSERT OR REPLACE INTO incidents (no, time_ns, type, netns, json) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for row in rows {
                match row {
                    Row::Change(c) => {
                        self.enc.insert_change(&tx, &mut change, c)?;
                        self.last.note(&c.json);
                    }
                    Row::Snapshot(s) => {
                        let mut tables = (*s.tables).clone();
                        self.last.stamp(s.netns, s.backend, &mut tables);
                        frames::insert(
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
        let cutoff = crate::timestamp::Timestamp::now().unix_nanos()
            - self.limits.retain.as_nanos().min(i64::MAX as u128) as i64;
        // The state after the last change to go becomes the snapshot the rest replays on.
        let last_gone: Option<i64> = self.conn.query_row(
            "SELECT MAX(seq) FROM changes WHERE time_ns < ?1",
            [cutoff],
            |r| r.get(0),
        )?;
        if let Some(k) = last_gone {
            self.roll_forward(k as u64);
        }
        let gone = store::gaps::expiring(&self.conn, "time_ns < ?1", cutoff)?;
        let mut deleted = self
            .conn
            .execute("DELETE FROM changes WHERE time_ns < ?1", [cutoff])?;
        self.note_expired(gone)?;
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
            let oldest_n = "seq IN (SELECT seq FROM changes ORDER BY seq LIMIT ?1)";
            let gone = store::gaps::expiring(&self.conn, oldest_n, n)?;
            deleted += self
                .conn
                .execute(&format!("DELETE FROM changes WHERE {oldest_n}"), [n])?;
            self.note_expired(gone)?;
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
            self.enc.sweep_strings(&self.conn)?;
            self.conn
                .execute_batch("PRAGMA incremental_vacuum; PRAGMA wal_checkpoint(TRUNCATE);")?;
            tracing::info!(
                "record {}: {deleted} old records deleted to stay within --retain and --max-record",
                self.path.display()
            );
        }
        Ok(())
    }

    /// Retention deleted `gone`: the record's `retention` gap row says since when it covers
    /// everything.
    fn note_expired(&mut self, gone: Option<RecordGap>) -> rusqlite::Result<()> {
        let Some(g) = gone else {
            return Ok(());
        };
        let tx = self.conn.transaction()?;
        store::gaps::note_expired(&tx, &g)?;
        tx.commit()
    }

    /// Make the state after change `seq` a snapshot before the changes up to it go. A failure
    /// is logged: the changes still go (the size limit wins), and `query --at` says what it lacks.
    fn roll_forward(&mut self, seq: u64) {
        let res = self
            .conn
            .execute_batch("BEGIN")
            .map_err(ForensicsError::from)
            .and_then(|_| snapshots::roll_forward(&self.conn, seq));
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

    fn update_size(&self) {
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        let bytes = size(&self.path) + size(Path::new(&wal));
        self.stats.bytes.set(bytes as i64);
    }
}

/// The encoder for a record's connection; a record whose tables cannot be read yet gets a fresh
/// one (its errors show at the first write).
fn load_encoder(conn: &Connection, path: &Path) -> store::Encoder {
    store::Encoder::load(conn).unwrap_or_else(|e| {
        tracing::debug!("record {}: {e}", path.display());
        store::Encoder::default()
    })
}

/// The last writers of a record's chains; a record whose snapshots cannot be read starts
/// without them (its chains then say they were not written since).
fn load_last_writers(conn: &Connection, path: &Path) -> LastWriters {
    LastWriters::load(conn).unwrap_or_else(|e| {
        tracing::warn!("record {}: last writers of chains: {e}", path.display());
        Default::default()
    })
}

#[cfg(test)]
mod tests;
