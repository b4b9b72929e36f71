//! The record as the publisher's spool: the rows after the cursor, changes and incident lines
//! in one order, read a batch at a time, and the backlog (what JetStream has not acknowledged
//! yet) counted apart from the publisher.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::{Cursor, NatsStats, PublishError};
use crate::sinks::nats::Kind;
use crate::store::{self, Selection, Stored};

/// Rows read from the record at a time.
const BATCH: usize = 512;

/// The record the publisher reads: its path, its id and its writer's signals.
pub struct Spool {
    pub path: PathBuf,
    pub id: String,
    pub stats: Arc<crate::sinks::record_writer::StoreStats>,
}

/// The record, read-only, with the dictionaries of the rows read so far.
pub(super) struct RecordReader {
    conn: rusqlite::Connection,
    frames: store::DictFrames,
}

impl RecordReader {
    pub(super) fn conn(&self) -> &rusqlite::Connection {
        &self.conn
    }
}

/// The record, read-only, for the publisher or the backlog count.
pub(super) async fn open_record(
    path: &std::path::Path,
) -> Result<Arc<Mutex<RecordReader>>, PublishError> {
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
pub(super) fn oldest_kept(now_ns: i64, max_age: Duration) -> i64 {
    now_ns.saturating_sub(i64::try_from(max_age.as_nanos()).unwrap_or(i64::MAX))
}

/// How often the backlog gauges are counted.
const BACKLOG_EVERY: Duration = Duration::from_secs(1);

/// Count, once a second until `shutdown`, the rows of the record after the last acknowledged
/// ones (within the stream's max age), and the rows held for the publisher that the record
/// could not take, into the backlog gauges: apart from the publisher, so that they still move
/// while it waits on a server that does not answer.
pub(super) async fn count_backlog(
    record: PathBuf,
    max_age: Duration,
    stats: Arc<NatsStats>,
    store: Arc<crate::sinks::record_writer::StoreStats>,
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
                    let rows = p.rows.saturating_add(store.held.len() as u64);
                    stats.backlog.set(i64::try_from(rows).unwrap_or(i64::MAX));
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
/// The rows the record could not take, held in memory (`held`), come in their places.
pub(super) async fn read_after(
    conn: &Arc<Mutex<RecordReader>>,
    held: &Arc<crate::sinks::record_writer::StoreStats>,
    cursor: Cursor,
    since_ns: i64,
) -> Result<Vec<(Kind, Stored)>, PublishError> {
    let conn = conn.clone();
    let stats = held.clone();
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
        // The held rows are read after the record's: a row the writer failed to write before
        // a row just read was held before that row was committed.
        let held = |kind, after| stats.held.after(kind, after, since_ns, BATCH);
        let changes = Part::union(changes, held(Kind::Change.held(), cursor.change));
        let incidents = Part::union(incidents, held(Kind::Incident.held(), cursor.incident));
        Ok(merge(changes, incidents))
    })
    .await
    .map_err(PublishError::Reader)?
}

/// Rows of one kind in their numbers' order, and whether more may follow the last (a read cut
/// at [`BATCH`]).
struct Part {
    rows: Vec<Stored>,
    cut: bool,
}

impl Part {
    /// A read of at most [`BATCH`] rows.
    fn read(rows: Vec<Stored>) -> Part {
        let cut = rows.len() >= BATCH;
        Part { rows, cut }
    }

    /// The record's rows and the held ones, after the same number, in one order. A list cut
    /// at [`BATCH`] may have more rows after its last, which may come before the other's next:
    /// the union stops at the lowest such end.
    fn union(record: Vec<Stored>, held: Vec<Stored>) -> Part {
        let (record, held) = (Part::read(record), Part::read(held));
        if held.rows.is_empty() {
            return record;
        }
        let end_of = |p: &Part| p.cut.then(|| p.rows.last().map(|r| r.number)).flatten();
        let end = [end_of(&record), end_of(&held)].into_iter().flatten().min();
        let mut rows: Vec<Stored> = record.rows.into_iter().chain(held.rows).collect();
        rows.sort_by_key(|r| r.number);
        rows.dedup_by_key(|r| r.number);
        if let Some(end) = end {
            rows.retain(|r| r.number <= end);
        }
        Part {
            rows,
            cut: end.is_some(),
        }
    }
}

/// Merge the two lists, each in its numbers' order, by time. A list that may have more rows
/// (cut) has nothing more before the other's rows only as far as it goes, so the merge stops
/// where such a list ends.
fn merge(changes: Part, incidents: Part) -> Vec<(Kind, Stored)> {
    let (c_cut, i_cut) = (changes.cut, incidents.cut);
    let mut c = changes.rows.into_iter().peekable();
    let mut i = incidents.rows.into_iter().peekable();
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
        let out = merge(
            Part::read(vec![row(1, 10), row(2, 5), row(3, 30)]),
            Part::read(vec![row(7, 20)]),
        );
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
    fn a_list_cut_short_stops_the_merge_where_it_ends() {
        let changes: Vec<Stored> = (1..=BATCH as u64).map(|n| row(n, n as i64)).collect();
        let out = merge(
            Part::read(changes),
            Part::read(vec![row(1, BATCH as i64 + 100)]),
        );
        assert_eq!(out.len(), BATCH);
        assert!(out.iter().all(|(k, _)| *k == Kind::Change));
    }

    fn numbers(p: &Part) -> Vec<u64> {
        p.rows.iter().map(|r| r.number).collect()
    }

    #[test]
    fn held_rows_come_in_their_places_among_the_records() {
        let p = Part::union(
            vec![row(1, 1), row(5, 5)],
            vec![row(2, 2), row(3, 3), row(9, 9)],
        );
        assert_eq!(numbers(&p), [1, 2, 3, 5, 9]);
        assert!(!p.cut);
        // Nothing held: the record's read as it is.
        let p = Part::union(vec![row(4, 4)], Vec::new());
        assert_eq!(numbers(&p), [4]);
    }

    #[test]
    fn a_cut_read_ends_the_union_where_it_ends() {
        // The record's read is cut at BATCH rows (2..=BATCH+1): a held row after its last may
        // have record rows before it that were not read yet.
        let record: Vec<Stored> = (2..=BATCH as u64 + 1).map(|n| row(n, n as i64)).collect();
        let held = vec![row(1, 1), row(BATCH as u64 + 5, 0)];
        let p = Part::union(record, held);
        assert!(p.cut);
        assert_eq!(p.rows.len(), BATCH + 1);
        assert_eq!(p.rows.first().map(|r| r.number), Some(1));
        assert_eq!(p.rows.last().map(|r| r.number), Some(BATCH as u64 + 1));
        // The held rows' read is cut: the record's rows after its last wait.
        let held: Vec<Stored> = (1..=BATCH as u64).map(|n| row(n * 2, 0)).collect();
        let p = Part::union(vec![row(3, 0), row(BATCH as u64 * 2 + 1, 0)], held);
        assert!(p.cut);
        assert_eq!(p.rows.last().map(|r| r.number), Some(BATCH as u64 * 2));
        assert_eq!(p.rows.len(), BATCH + 1);
    }
}
