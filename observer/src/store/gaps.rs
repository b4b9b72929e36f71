//! The record's holes (layout 4's `gaps` table): every stretch of rows the writer could not put
//! in the record (disk full, an I/O error, the writer behind its queue) is kept as one row as
//! soon as a write goes through again, and what retention deleted is kept as one `retention` row
//! that says since when the record covers everything. Readers (`observer query`, `--at`,
//! `--diff`, `--incident`) say so wherever their answer spans a gap.

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::ruleset::plural;
use crate::timestamp::Timestamp;

pub(crate) const GAPS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS gaps (
    id        INTEGER PRIMARY KEY,
    first_seq INTEGER,
    last_seq  INTEGER,
    first_ns  INTEGER NOT NULL,
    last_ns   INTEGER NOT NULL,
    changes   INTEGER NOT NULL,
    incidents INTEGER NOT NULL,
    reason    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS gaps_time ON gaps(last_ns);
";

/// The reason of the one row that stands for what retention deleted.
pub const RETENTION: &str = "retention";

/// One stretch the record does not hold. In JSON: the `record_gap` of a `status` line whose
/// state is `gap`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordGap {
    /// The first and last change `seq` not recorded (none when only incident lines were lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seq: Option<u64>,
    /// The times of the first and last row not recorded.
    pub first_time: Timestamp,
    pub last_time: Timestamp,
    /// How many changes, and incident lines, the record lacks there.
    pub changes: u64,
    #[serde(default)]
    pub incidents: u64,
    /// `disk full`, `i/o error: ...`, `writer fell behind`, `write failed: ...` or `retention`.
    pub reason: String,
}

impl RecordGap {
    pub fn first_ns(&self) -> i64 {
        self.first_time.unix_nanos()
    }

    pub fn last_ns(&self) -> i64 {
        self.last_time.unix_nanos()
    }

    /// Whether any of it falls within `from_ns..=to_ns` (either end open).
    pub fn overlaps(&self, from_ns: Option<i64>, to_ns: Option<i64>) -> bool {
        from_ns.is_none_or(|f| self.last_ns() >= f) && to_ns.is_none_or(|t| self.first_ns() <= t)
    }

    /// One sentence for a person: "N changes between T1 and T2 were not recorded: disk full".
    pub fn message(&self) -> String {
        let mut what = plural(self.changes, "change", "changes");
        if self.incidents > 0 {
            what.push_str(&format!(
                " and {}",
                plural(self.incidents, "incident line", "incident lines")
            ));
        }
        let seqs = match (self.first_seq, self.last_seq) {
            (Some(a), Some(b)) if a == b => format!(" (seq {a})"),
            (Some(a), Some(b)) => format!(" (seq {a}..{b})"),
            _ => String::new(),
        };
        if self.reason == RETENTION {
            return format!(
                "the record covers only since {}: {what} before it{seqs} were deleted: retention \
                 (--retain, --max-record)",
                self.last_time
            );
        }
        format!(
            "{what} between {} and {}{seqs} were not recorded: {}",
            self.first_time, self.last_time, self.reason
        )
    }

    /// Fold rows lost for the same reason into this gap.
    pub fn extend(&mut self, other: &RecordGap) {
        self.first_seq = min_opt(self.first_seq, other.first_seq);
        self.last_seq = self.last_seq.max(other.last_seq);
        self.first_time = self.first_time.min(other.first_time);
        self.last_time = self.last_time.max(other.last_time);
        self.changes += other.changes;
        self.incidents += other.incidents;
    }
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Add a gap row (in the caller's transaction).
pub fn insert_gap(conn: &Connection, g: &RecordGap) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO gaps (first_seq, last_seq, first_ns, last_ns, changes, incidents, reason) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        g.first_seq.map(|s| s as i64),
        g.last_seq.map(|s| s as i64),
        g.first_ns(),
        g.last_ns(),
        g.changes as i64,
        g.incidents as i64,
        g.reason
    ])?;
    Ok(())
}

/// Retention deleted `gone` (changes up to its `last_seq`): the `retention` row grows to cover
/// it, and the gap rows it swallows go.
pub fn note_expired(conn: &Connection, gone: &RecordGap) -> rusqlite::Result<()> {
    let old = select(conn, "WHERE reason = ?1", params![RETENTION])?;
    let mut row = gone.clone();
    for o in &old {
        row.extend(o);
    }
    row.reason = RETENTION.into();
    conn.execute(
        "DELETE FROM gaps WHERE reason = ?1 OR last_ns <= ?2",
        params![RETENTION, row.last_ns()],
    )?;
    insert_gap(conn, &row)
}

fn select(
    conn: &Connection,
    filter: &str,
    args: impl rusqlite::Params,
) -> rusqlite::Result<Vec<RecordGap>> {
    let sql = format!(
        "SELECT first_seq, last_seq, first_ns, last_ns, changes, incidents, reason FROM gaps \
         {filter} ORDER BY first_ns, id"
    );
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map(args, |r| gap_at(r, 0))?;
    rows.collect()
}

/// The gap in a row's columns from `at` on: first_seq, last_seq, first_ns, last_ns, changes,
/// incidents, reason.
fn gap_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<RecordGap> {
    Ok(RecordGap {
        first_seq: r.get::<_, Option<i64>>(at)?.map(|s| s as u64),
        last_seq: r.get::<_, Option<i64>>(at + 1)?.map(|s| s as u64),
        first_time: Timestamp::from_unix_nanos(r.get(at + 2)?),
        last_time: Timestamp::from_unix_nanos(r.get(at + 3)?),
        changes: r.get::<_, i64>(at + 4)?.max(0) as u64,
        incidents: r.get::<_, i64>(at + 5)?.max(0) as u64,
        reason: r.get(at + 6)?,
    })
}

/// The gaps that touch `from_ns..=to_ns` (either end open), oldest first. A record of an
/// earlier layout has no such table: no gap is known.
pub fn select_gaps(
    conn: &Connection,
    from_ns: Option<i64>,
    to_ns: Option<i64>,
) -> Result<Vec<RecordGap>, StoreError> {
    if !has_gaps(conn)? {
        return Ok(Vec::new());
    }
    let all = select(conn, "", [])?;
    Ok(all
        .into_iter()
        .filter(|g| {
            // Retention's row stands for everything before the record's start.
            if g.reason == RETENTION {
                from_ns.is_none_or(|f| f <= g.last_ns())
            } else {
                g.overlaps(from_ns, to_ns)
            }
        })
        .collect())
}

/// Whether the record has a `gaps` table (layout 4 on).
fn has_gaps(conn: &Connection) -> Result<bool, StoreError> {
    let has: Option<String> = conn
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'gaps'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    Ok(has.is_some())
}

/// The gaps that lack changes numbered after `after` and up to `upto` (retention's row among
/// them when it deleted some of those), oldest first: what a reader catching up over that span
/// of seqs must be told it will not get.
pub fn gaps_in_seqs(
    conn: &Connection,
    after: u64,
    upto: u64,
) -> Result<Vec<RecordGap>, StoreError> {
    if upto <= after || !has_gaps(conn)? {
        return Ok(Vec::new());
    }
    Ok(select(
        conn,
        "WHERE last_seq > ?1 AND first_seq <= ?2",
        params![after as i64, upto.min(i64::MAX as u64) as i64],
    )?)
}

/// The gap rows written after row `after_id` (retention's excepted: what it deletes was
/// recorded, and told once when a reader starts), with their ids, oldest first: what a reader
/// following the record learns of as the daemon writes them.
pub fn gaps_after(conn: &Connection, after_id: i64) -> Result<Vec<(i64, RecordGap)>, StoreError> {
    if !has_gaps(conn)? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(
        "SELECT id, first_seq, last_seq, first_ns, last_ns, changes, incidents, reason FROM gaps \
         WHERE id > ?1 AND reason != ?2 ORDER BY id",
    )?;
    let rows = stmt.query_map(params![after_id, RETENTION], |r| {
        Ok((r.get::<_, i64>(0)?, gap_at(r, 1)?))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The id of the newest gap row (0 when there is none).
pub fn last_gap_id(conn: &Connection) -> Result<i64, StoreError> {
    if !has_gaps(conn)? {
        return Ok(0);
    }
    Ok(conn.query_row("SELECT COALESCE(MAX(id), 0) FROM gaps", [], |r| r.get(0))?)
}

/// What deleting the changes `cond` (with `?1` = `arg`) selects takes from the record, as a
/// `retention` gap; none when it selects nothing.
pub fn expiring(conn: &Connection, cond: &str, arg: i64) -> rusqlite::Result<Option<RecordGap>> {
    let sql = format!(
        "SELECT MIN(seq), MAX(seq), MIN(time_ns), MAX(time_ns), COUNT(*) FROM changes WHERE {cond}"
    );
    conn.query_row(&sql, [arg], |r| {
        let n: i64 = r.get(4)?;
        if n == 0 {
            return Ok(None);
        }
        Ok(Some(RecordGap {
            first_seq: Some(r.get::<_, i64>(0)? as u64),
            last_seq: Some(r.get::<_, i64>(1)? as u64),
            first_time: Timestamp::from_unix_nanos(r.get(2)?),
            last_time: Timestamp::from_unix_nanos(r.get(3)?),
            changes: n as u64,
            incidents: 0,
            reason: RETENTION.into(),
        }))
    })
}
