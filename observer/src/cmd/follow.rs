//! `observer tail --record FILE`: the live view fed from the record that `observer run` writes,
//! instead of the local kernel. With `--since`, the record's history first, then what the daemon
//! records from then on: rows are taken in the order of their numbers (`seq` for changes, the
//! record number for incidents), so nothing is missed and nothing printed twice.
//!
//! The daemon commits its rows in small batches; the follower reads the rows after the last ones
//! it printed every [`POLL`] (a read-only query on an index, a few microseconds when nothing is
//! new). It needs read access to the file, not root.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::cli::TailArgs;
use crate::output::Line;
use crate::store::{self, Selection, Stored};
use crate::timestamp::Timestamp;

/// How often the record is read for new rows.
const POLL: Duration = Duration::from_millis(200);

/// The record file of a `--record` argument (a daemon's directory holds `record.db`).
fn record_path(arg: &Path) -> PathBuf {
    if arg.is_dir() {
        arg.join("record.db")
    } else {
        arg.to_path_buf()
    }
}

pub async fn tail(args: TailArgs) -> anyhow::Result<()> {
    let path = record_path(args.record.as_deref().unwrap_or(Path::new(".")));
    let since = match &args.since {
        Some(s) => Timestamp::parse_arg(s).context("--since")?,
        None => Timestamp::now(),
    }
    .unix_nanos();
    let conn = store::open_ro(&path)
        .with_context(|| format!("--record {}: cannot follow it", path.display()))?;
    let mut output = crate::cmd::tail::tail_output(&args)?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let follow = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let ready = crate::output::StatusLine::ready(format!(
            "following the record {} (what its daemon records, as it records it)",
            path.display()
        ));
        output.emit(&Line::Status(ready)).or_else(quiet_pipe)?;
        let mut cursor = Cursor::new(since);
        while !flag.load(Ordering::Relaxed) {
            let rows = cursor
                .next(&conn)
                .with_context(|| format!("reading {}", path.display()))?;
            for r in &rows {
                output.emit(r).or_else(quiet_pipe)?;
            }
            if !rows.is_empty() {
                output.end_txn().or_else(quiet_pipe)?;
            }
            std::thread::sleep(POLL);
        }
        Ok(())
    });
    tokio::pin!(follow);
    tokio::select! {
        r = &mut follow => r.context("the record follower stopped")?,
        _ = tokio::signal::ctrl_c() => {
            stop.store(true, Ordering::Relaxed);
            follow.await.context("the record follower stopped")?
        }
    }
}

/// A write that failed: the reader went away (`observer tail --record F | head`), which ends
/// the command, or something else, logged (the follower goes on).
fn quiet_pipe(e: std::io::Error) -> anyhow::Result<()> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return Err(super::ReaderGone.into());
    }
    tracing::error!("cannot write output: {e}");
    Ok(())
}

/// Where the follower is in the record's two streams.
struct Cursor {
    since_ns: i64,
    change: u64,
    incident: u64,
    /// The newest gap row told (None before the first read).
    gap: Option<i64>,
    /// The dictionaries of the rows read so far.
    frames: store::DictFrames,
}

impl Cursor {
    fn new(since_ns: i64) -> Cursor {
        Cursor {
            since_ns,
            change: 0,
            incident: 0,
            gap: None,
            frames: store::DictFrames::default(),
        }
    }

    /// The rows recorded since the last call, changes and incidents interleaved by time.
    fn next(&mut self, conn: &rusqlite::Connection) -> Result<Vec<Line>, store::StoreError> {
        let sel = |after: u64| Selection {
            since_ns: Some(self.since_ns),
            after: Some(after),
            ..Default::default()
        };
        let changes = store::select_changes_with(conn, &sel(self.change), &mut self.frames)?;
        let incidents = store::select_incidents(conn, &sel(self.incident))?;
        if let Some(last) = changes.last() {
            self.change = last.number;
        }
        if let Some(last) = incidents.last() {
            self.incident = last.number;
        }
        let mut rows: Vec<(i64, u8, u64, Line)> = Vec::new();
        // The record's holes, where they lie among the rows: the first read tells those since
        // `--since` (and what retention deleted of it); later reads, each new one once.
        let first = self.gap.is_none();
        let gaps = store::gaps::gaps_after(conn, self.gap.unwrap_or(0))?;
        if let Some(&(id, _)) = gaps.last() {
            self.gap = Some(id);
        }
        let mut told: Vec<store::RecordGap> = gaps
            .into_iter()
            .map(|(_, g)| g)
            .filter(|g| !first || g.last_ns() >= self.since_ns)
            .collect();
        if first {
            self.gap.get_or_insert(0);
            told.extend(
                store::select_gaps(conn, Some(self.since_ns), None)?
                    .into_iter()
                    .filter(|g| g.reason == store::gaps::RETENTION),
            );
        }
        // A gap goes among the changes by its seqs (a transaction's changes share one time),
        // so changes are ordered by twice their seq and a gap by the odd number before its first.
        for g in told {
            let order = g.first_seq.map_or(0, |f| (2 * f).saturating_sub(1));
            let line = crate::output::StatusLine::record_gap(&g, g.message());
            rows.push((g.first_ns(), 0, order, Line::Status(line)));
        }
        for (kind, list) in [(0u8, changes), (1, incidents)] {
            for Stored {
                number,
                time_ns,
                json,
            } in list
            {
                let order = if kind == 0 { 2 * number } else { number };
                match serde_json::from_str::<Line>(&json) {
                    Ok(r) => rows.push((time_ns, kind, order, r)),
                    Err(e) => tracing::warn!("record row {number} cannot be read ({e}): skipped"),
                }
            }
        }
        rows.sort_by_key(|(t, k, n, _)| (*t, *k, *n));
        Ok(rows.into_iter().map(|(_, _, _, r)| r).collect())
    }
}
