//! Which of the record's gaps ([`crate::store::gaps`]) an answer spans, and how it says so:
//! `status` lines of state `gap` (with `record_gap`) before the JSON answer, `#` lines before
//! the text one.

use rusqlite::Connection;

use super::snapshots::State;
use super::ForensicsError;
use crate::output::StatusLine;
use crate::store::gaps::RETENTION;
use crate::store::{self, RecordGap};

/// Whether the ruleset at `at_ns`, rebuilt from the snapshot after change `snapshot_seq` (none:
/// from the changes alone), may lack changes of `g`.
pub fn spans_at(g: &RecordGap, at_ns: i64, snapshot_seq: Option<u64>) -> bool {
    if g.reason == RETENTION {
        // Before the record's start nothing is known for sure.
        return at_ns < g.last_ns();
    }
    // A snapshot after the gap was taken from the daemon's full view: it holds the lost changes.
    let after_snapshot = match (snapshot_seq, g.last_seq) {
        (Some(s), Some(last)) => last > s,
        _ => true,
    };
    g.changes > 0 && g.first_ns() <= at_ns && after_snapshot
}

/// The gaps that may make the rulesets at `at_ns` (`states`) incomplete.
pub fn at(gaps: &[RecordGap], at_ns: i64, states: &[State]) -> Vec<RecordGap> {
    gaps.iter()
        .filter(|g| {
            if states.is_empty() {
                spans_at(g, at_ns, None)
            } else {
                states.iter().any(|st| spans_at(g, at_ns, st.snapshot_seq))
            }
        })
        .cloned()
        .collect()
}

/// The gaps a diff between `from_ns` and `to_ns` spans: those that make either end
/// incomplete, and any whose changes fell between the two (the "by" of a difference may then
/// not be the last writer).
pub fn between(
    gaps: &[RecordGap],
    from_ns: i64,
    to_ns: i64,
    from: &[State],
    to: &[State],
) -> Vec<RecordGap> {
    let ends = [at(gaps, from_ns, from), at(gaps, to_ns, to)].concat();
    gaps.iter()
        .filter(|g| {
            ends.contains(g)
                || (g.reason != RETENTION && g.overlaps(Some(from_ns.min(to_ns)), Some(to_ns)))
        })
        .cloned()
        .collect()
}

/// Every gap the record knows of (none in a record of an earlier layout).
pub fn all(conn: &Connection) -> Result<Vec<RecordGap>, ForensicsError> {
    Ok(store::select_gaps(conn, None, None)?)
}

/// The sentence for one gap an answer spans.
pub fn message(g: &RecordGap) -> String {
    format!("{}; this answer may be incomplete", g.message())
}

/// The `status` lines (state `gap`) that go before a JSON answer.
pub fn lines(gaps: &[RecordGap]) -> Vec<StatusLine> {
    gaps.iter()
        .map(|g| StatusLine::record_gap(g, message(g)))
        .collect()
}

/// The `#` lines that go before a text answer.
pub fn text(gaps: &[RecordGap]) -> String {
    gaps.iter().map(|g| format!("# {}\n", message(g))).collect()
}

/// The gaps an incident's story spans: from its first change (or line) to its end (now, while
/// it is open).
pub fn of_story(gaps: &[RecordGap], s: &super::story::Story) -> Vec<RecordGap> {
    let times = s
        .changes
        .iter()
        .map(|c| c.time)
        .chain(s.states.iter().map(|l| l.time));
    let Some(start) = times.clone().min() else {
        return Vec::new();
    };
    let end = if s.incident.state.is_final() {
        times.max().unwrap_or(start)
    } else {
        crate::timestamp::Timestamp::now()
    };
    gaps.iter()
        .filter(|g| {
            if g.reason == RETENTION {
                start.unix_nanos() < g.last_ns()
            } else {
                g.overlaps(Some(start.unix_nanos()), Some(end.unix_nanos()))
            }
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timestamp::Timestamp;

    fn gap(first: u64, last: u64, reason: &str) -> RecordGap {
        RecordGap {
            first_seq: Some(first),
            last_seq: Some(last),
            first_time: Timestamp::from_unix_nanos(first as i64 * 10),
            last_time: Timestamp::from_unix_nanos(last as i64 * 10),
            changes: last - first + 1,
            incidents: 0,
            reason: reason.into(),
        }
    }

    fn state(snapshot_seq: Option<u64>) -> State {
        State {
            netns: 7,
            netns_name: None,
            backend: crate::ruleset::Backend::Legacy,
            snapshot_seq,
            replayed: 0,
            tables: Default::default(),
        }
    }

    #[test]
    fn a_ruleset_after_a_gap_may_be_incomplete_unless_a_snapshot_follows_it() {
        let g = gap(100, 200, "disk full");
        // Inside the gap and after it, rebuilt from before it: incomplete.
        assert!(spans_at(&g, 1_500, Some(50)));
        assert!(spans_at(&g, 9_000, None));
        // Before it: whole. From a snapshot taken after it: whole.
        assert!(!spans_at(&g, 999, Some(50)));
        assert!(!spans_at(&g, 9_000, Some(250)));
        // Only incident lines lost: the ruleset is whole.
        let lines_only = RecordGap {
            first_seq: None,
            last_seq: None,
            changes: 0,
            incidents: 3,
            ..g.clone()
        };
        assert!(!spans_at(&lines_only, 9_000, None));
        let gaps = [g.clone(), gap(300, 310, "writer fell behind")];
        assert_eq!(
            at(&gaps, 2_500, &[state(Some(50))]),
            std::slice::from_ref(&g)
        );
        assert_eq!(at(&gaps, 9_000, &[state(Some(250))]).len(), 1);
        assert!(at(&gaps, 9_000, &[state(Some(400))]).is_empty());
        assert_eq!(at(&gaps, 2_500, &[]), [g]);
    }

    #[test]
    fn before_the_records_start_retention_says_so() {
        let r = gap(1, 50, RETENTION);
        assert!(spans_at(&r, 100, Some(50)));
        assert!(!spans_at(&r, 600, None));
    }

    #[test]
    fn a_diff_spans_the_gaps_between_its_ends() {
        let inside = gap(100, 200, "disk full");
        let later = gap(500, 600, "disk full");
        let gaps = [inside.clone(), later];
        // Both ends rebuilt from snapshots after the gap: still, its changes fell in between.
        let snap = [state(Some(400))];
        assert_eq!(between(&gaps, 0, 4_000, &snap, &snap), [inside]);
        assert!(between(&gaps, 2_100, 4_000, &snap, &snap).is_empty());
    }

    #[test]
    fn answers_say_what_they_lack_in_text_and_as_status_lines() {
        let g = gap(100, 200, "disk full");
        let t = text(std::slice::from_ref(&g));
        assert!(t.starts_with("# 101 changes between "), "{t}");
        assert!(
            t.ends_with("were not recorded: disk full; this answer may be incomplete\n"),
            "{t}"
        );
        let l = serde_json::to_value(crate::output::Line::Status(lines(&[g])[0].clone())).unwrap();
        assert_eq!(l["kind"], "status");
        assert_eq!(l["state"], "gap");
        assert_eq!(l["record_gap"]["first_seq"], 100);
        assert_eq!(l["record_gap"]["last_seq"], 200);
        assert_eq!(l["record_gap"]["changes"], 101);
        assert_eq!(l["record_gap"]["reason"], "disk full");
        assert_eq!(l["time"], l["record_gap"]["first_time"]);
        let at = crate::forensics::query::at_text(
            5_000,
            90,
            &[state(Some(50))],
            &[gap(100, 200, "disk full")],
        );
        assert!(
            at.contains("may be incomplete: the record has a gap before it"),
            "{at}"
        );
    }
}
