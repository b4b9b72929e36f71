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
/// ones (within the stream's max age) into the backlog gauges: apart from the publisher, so
/// that they still move while it waits on a server that does not answer.
pub(super) async fn count_backlog(
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
pub(super) async fn read_after(
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
    fn a_list_cut_short_stops_the_merge_where_it_ends() {
        let changes: Vec<Stored> = (1..=BATCH as u64).map(|n| row(n, n as i64)).collect();
        let out = merge(changes, vec![row(1, BATCH as i64 + 100)]);
        assert_eq!(out.len(), BATCH);
        assert!(out.iter().all(|(k, _)| *k == Kind::Change));
    }
}
