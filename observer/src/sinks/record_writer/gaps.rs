//! The writer's bookkeeping of what did not reach the record: rows lost for one reason in a row
//! make one gap, kept until a transaction that writes it commits. Pure: a sequence of outcomes
//! in, the gap rows out; the writer puts them in the record with its next batch.

use super::Row;
use crate::store::RecordGap;
use crate::timestamp::Timestamp;

/// `reason` of rows dropped because the writer's queue was full.
pub const BEHIND: &str = "writer fell behind";

/// One row that did not reach the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost {
    pub time_ns: i64,
    /// The change's `seq`, for a change.
    pub change: Option<u64>,
    pub incident: bool,
}

impl Lost {
    pub fn of(row: &Row) -> Lost {
        match row {
            Row::Change(c) => Lost {
                time_ns: c.time_ns,
                change: Some(c.seq),
                incident: false,
            },
            Row::Incident { time_ns, .. } => Lost {
                time_ns: *time_ns,
                change: None,
                incident: true,
            },
            Row::Snapshot(s) => Lost {
                time_ns: s.time_ns,
                change: None,
                incident: false,
            },
        }
    }
}

/// The short reason a write failed: `disk full`, `i/o error: ...` or `write failed: ...`.
pub fn reason_of(e: &rusqlite::Error) -> String {
    use rusqlite::ErrorCode as C;
    match e.sqlite_error_code() {
        Some(C::DiskFull) => "disk full".into(),
        Some(C::SystemIoFailure) => format!("i/o error: {e}"),
        _ => format!("write failed: {e}"),
    }
}

/// The gaps not yet in the record.
#[derive(Debug, Default)]
pub struct GapBook {
    /// Gaps ended (a different reason followed) but not yet written.
    closed: Vec<RecordGap>,
    /// The gap rows are still being lost into.
    open: Option<RecordGap>,
    /// When rows began to be lost for the open gap's reason (wall clock).
    since: Option<Timestamp>,
}

impl GapBook {
    /// `rows` did not reach the record, for `reason`. Rows lost for the reason of the open gap
    /// extend it; another reason ends it and opens a new one.
    pub fn lost(&mut self, rows: impl IntoIterator<Item = Lost>, reason: &str) {
        for l in rows {
            let one = RecordGap {
                first_seq: l.change,
                last_seq: l.change,
                first_time: Timestamp::from_unix_nanos(l.time_ns),
                last_time: Timestamp::from_unix_nanos(l.time_ns),
                changes: u64::from(l.change.is_some()),
                incidents: u64::from(l.incident),
                reason: reason.to_string(),
            };
            match &mut self.open {
                Some(g) if g.reason == reason => g.extend(&one),
                open => {
                    self.closed.extend(open.take());
                    *open = Some(one);
                    self.since = Some(Timestamp::now());
                }
            }
        }
    }

    /// The gap rows to write with the next batch: the open gap too, which a batch that commits
    /// ends.
    pub fn due(&self) -> Vec<RecordGap> {
        self.closed.iter().chain(&self.open).cloned().collect()
    }

    /// The rows of [`GapBook::due`] were committed: nothing is owed any more.
    pub fn written(&mut self) {
        self.closed.clear();
        self.open = None;
        self.since = None;
    }

    /// The gap rows are being lost into, and since when (wall clock), while writes fail.
    pub fn failing(&self) -> Option<(&RecordGap, Timestamp)> {
        self.open.as_ref().zip(self.since)
    }

    pub fn is_empty(&self) -> bool {
        self.closed.is_empty() && self.open.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(seq: u64) -> Lost {
        Lost {
            time_ns: seq as i64 * 1_000,
            change: Some(seq),
            incident: false,
        }
    }

    /// One write's outcome: rows `a..=b` written, or lost for a reason.
    enum Step {
        Written,
        Lost(u64, u64, &'static str),
        Incident(i64, &'static str),
    }

    /// The gap rows a sequence of outcomes leaves, in the order they are written.
    fn run(steps: &[Step]) -> (Vec<RecordGap>, GapBook) {
        let mut book = GapBook::default();
        let mut written = Vec::new();
        for s in steps {
            match s {
                Step::Written => {
                    written.extend(book.due());
                    book.written();
                }
                Step::Lost(a, b, why) => book.lost((*a..=*b).map(change), why),
                Step::Incident(t, why) => book.lost(
                    [Lost {
                        time_ns: *t,
                        change: None,
                        incident: true,
                    }],
                    why,
                ),
            }
        }
        (written, book)
    }

    #[test]
    fn failed_writes_in_a_row_make_one_gap_written_with_the_next_batch() {
        let (gaps, book) = run(&[
            Step::Written,
            Step::Lost(3, 5, "disk full"),
            Step::Lost(6, 9, "disk full"),
            Step::Incident(7_500, "disk full"),
            Step::Written,
            Step::Written,
        ]);
        assert!(book.is_empty());
        assert_eq!(gaps.len(), 1, "{gaps:?}");
        let g = &gaps[0];
        assert_eq!((g.first_seq, g.last_seq), (Some(3), Some(9)));
        assert_eq!((g.first_ns(), g.last_ns()), (3_000, 9_000));
        assert_eq!((g.changes, g.incidents), (7, 1));
        assert_eq!(g.reason, "disk full");
        assert_eq!(
            g.message(),
            "7 changes and 1 incident line between 1970-01-01T00:00:00.000003000Z and \
             1970-01-01T00:00:00.000009000Z (seq 3..9) were not recorded: disk full"
        );
    }

    #[test]
    fn another_reason_starts_another_gap_and_nothing_is_owed_while_writes_go_through() {
        let (gaps, book) = run(&[
            Step::Lost(1, 2, BEHIND),
            Step::Lost(3, 3, "disk full"),
            Step::Lost(4, 4, "i/o error: disk I/O error"),
        ]);
        assert!(gaps.is_empty(), "nothing commits while writes fail");
        let due = book.due();
        let why: Vec<_> = due.iter().map(|g| (g.reason.as_str(), g.changes)).collect();
        assert_eq!(
            why,
            [
                (BEHIND, 2),
                ("disk full", 1),
                ("i/o error: disk I/O error", 1)
            ]
        );
        let (failing, _) = book.failing().unwrap();
        assert_eq!(failing.reason, "i/o error: disk I/O error");
        assert_eq!(run(&[Step::Written, Step::Written]).0, Vec::new());
    }

    #[test]
    fn a_gap_of_one_change_names_its_seq() {
        let (gaps, _) = run(&[Step::Lost(42, 42, BEHIND), Step::Written]);
        assert!(gaps[0].message().starts_with("1 change between"));
        assert!(gaps[0]
            .message()
            .ends_with("(seq 42) were not recorded: writer fell behind"));
    }

    #[test]
    fn sqlite_errors_get_short_reasons() {
        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            None,
        );
        assert_eq!(reason_of(&full), "disk full");
        let io = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR_WRITE),
            Some("disk I/O error".into()),
        );
        assert_eq!(reason_of(&io), "i/o error: disk I/O error");
    }
}
