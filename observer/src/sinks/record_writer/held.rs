//! Rows the record could not take, held in memory for the NATS publisher until JetStream has
//! them.
//!
//! The publisher reads the record as its spool, so what the record lacks (a write that failed:
//! disk full, I/O error; rows dropped while the writer was behind) the stream would lack too.
//! While a publisher is attached ([`Held::want`]), such rows are kept here instead, and the
//! publisher reads them beside the record's, in number order; they go once acknowledged
//! ([`Held::sent`]). What is held is bounded ([`HELD_BYTES`] of JSON): past it, rows are not
//! held, they are counted ([`Held::not_held`]), and the stream lacks them as the record does
//! (whose gap row says so).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::{counter::Counter, gauge::Gauge};

use super::Row;
use crate::store::Stored;

/// The most JSON held for the publisher, in bytes (about 60,000 changes).
pub const HELD_BYTES: usize = 32 << 20;

/// What the publisher has yet to get of the rows the record could not take.
#[derive(Debug, Default)]
pub struct Held {
    /// A publisher reads the record: rows are held only then.
    wanted: AtomicBool,
    rows: Mutex<Rows>,
    /// Rows held now.
    pub rows_held: Gauge,
    /// Rows the record could not take that were not held either (past [`HELD_BYTES`]).
    pub not_held: Counter,
}

/// One row held: its time and its JSON line.
#[derive(Debug, Clone)]
struct One {
    time_ns: i64,
    json: Arc<str>,
}

#[derive(Debug, Default)]
struct Rows {
    /// By `seq`.
    changes: BTreeMap<u64, One>,
    /// By incident record number.
    incidents: BTreeMap<u64, One>,
    bytes: usize,
}

impl Rows {
    fn len(&self) -> usize {
        self.changes.len() + self.incidents.len()
    }
}

/// Which rows: changes (by `seq`) or incident lines (by record number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldKind {
    Change,
    Incident,
}

impl Held {
    /// A publisher reads the record from now on: hold what it cannot take.
    pub fn want(&self) {
        self.wanted.store(true, Ordering::Relaxed);
    }

    /// Hold `rows` (changes and incident lines; snapshots are not published) if a publisher
    /// wants them and they fit.
    pub fn hold<'a>(&self, rows: impl IntoIterator<Item = &'a Row>) {
        if !self.wanted.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut guard) = self.rows.lock() else {
            return;
        };
        let held = &mut *guard;
        for row in rows {
            let (map, number, time_ns, json) = match row {
                Row::Change(c) => (&mut held.changes, c.seq, c.time_ns, &c.json),
                Row::Incident {
                    no, time_ns, json, ..
                } => (&mut held.incidents, *no, *time_ns, json),
                Row::Snapshot(_) => continue,
            };
            if held.bytes + json.len() > HELD_BYTES {
                self.not_held.inc();
                continue;
            }
            let one = One {
                time_ns,
                json: json.clone(),
            };
            held.bytes += json.len();
            if let Some(old) = map.insert(number, one) {
                held.bytes -= old.json.len();
            }
        }
        self.rows_held.set(held.len() as i64);
    }

    /// Up to `limit` held rows of `kind` numbered after `after` and not older than `since_ns`,
    /// in number order.
    pub fn after(&self, kind: HeldKind, after: u64, since_ns: i64, limit: usize) -> Vec<Stored> {
        let Ok(held) = self.rows.lock() else {
            return Vec::new();
        };
        let map = match kind {
            HeldKind::Change => &held.changes,
            HeldKind::Incident => &held.incidents,
        };
        map.range(after.saturating_add(1)..)
            .filter(|(_, one)| one.time_ns >= since_ns)
            .take(limit)
            .map(|(&number, one)| Stored {
                number,
                time_ns: one.time_ns,
                json: one.json.to_string(),
            })
            .collect()
    }

    /// JetStream holds every row of `kind` up to `number`: let them go.
    pub fn sent(&self, kind: HeldKind, number: u64) {
        let Ok(mut held) = self.rows.lock() else {
            return;
        };
        let rows = &mut *held;
        let map = match kind {
            HeldKind::Change => &mut rows.changes,
            HeldKind::Incident => &mut rows.incidents,
        };
        if map.first_key_value().is_none_or(|(&n, _)| n > number) {
            return;
        }
        let kept = map.split_off(&number.saturating_add(1));
        let gone = std::mem::replace(map, kept);
        rows.bytes -= gone.values().map(|o| o.json.len()).sum::<usize>();
        self.rows_held.set(rows.len() as i64);
    }

    /// Rows held now (the publisher's backlog counts them beside the record's).
    pub fn len(&self) -> usize {
        self.rows.lock().map_or(0, |h| h.len())
    }

    /// No row is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(seq: u64, json: &str) -> Row {
        Row::bare_change(seq, seq as i64 * 10, None, json)
    }

    fn incident(no: u64) -> Row {
        Row::Incident {
            no,
            time_ns: 5,
            kind: None,
            netns: None,
            json: "{}".into(),
        }
    }

    fn numbers(rows: &[Stored]) -> Vec<u64> {
        rows.iter().map(|r| r.number).collect()
    }

    #[test]
    fn nothing_is_held_without_a_publisher() {
        let h = Held::default();
        h.hold(&[change(1, "{}")]);
        assert!(h.is_empty());
        assert_eq!(h.not_held.get(), 0);
    }

    #[test]
    fn rows_are_read_after_a_number_in_order_and_go_once_sent() {
        let h = Held::default();
        h.want();
        h.hold(&[change(7, "{\"seq\":7}"), change(3, "{}"), change(5, "{}")]);
        h.hold(&[incident(2)]);
        assert_eq!(numbers(&h.after(HeldKind::Change, 0, 0, 10)), [3, 5, 7]);
        assert_eq!(numbers(&h.after(HeldKind::Change, 3, 0, 10)), [5, 7]);
        assert_eq!(numbers(&h.after(HeldKind::Change, 0, 0, 2)), [3, 5]);
        // Rows older than the stream keeps are not read.
        assert_eq!(numbers(&h.after(HeldKind::Change, 0, 50, 10)), [5, 7]);
        assert_eq!(h.after(HeldKind::Change, 5, 0, 1)[0].json, "{\"seq\":7}");
        assert_eq!(numbers(&h.after(HeldKind::Incident, 0, 0, 10)), [2]);
        assert_eq!(h.rows_held.get(), 4);
        h.sent(HeldKind::Change, 5);
        assert_eq!(numbers(&h.after(HeldKind::Change, 0, 0, 10)), [7]);
        assert_eq!(h.len(), 2);
        h.sent(HeldKind::Incident, 9);
        h.sent(HeldKind::Change, 7);
        assert!(h.is_empty());
        assert_eq!(h.rows_held.get(), 0);
        assert_eq!(h.rows.lock().unwrap().bytes, 0);
    }

    #[test]
    fn past_the_bound_rows_are_counted_not_held_and_room_comes_back_when_sent() {
        let h = Held::default();
        h.want();
        let big = "x".repeat(HELD_BYTES / 2);
        h.hold(&[change(1, &big), change(2, &big), change(3, &big)]);
        assert_eq!(numbers(&h.after(HeldKind::Change, 0, 0, 10)), [1, 2]);
        assert_eq!(h.not_held.get(), 1);
        h.sent(HeldKind::Change, 1);
        h.hold(&[change(4, &big)]);
        assert_eq!(numbers(&h.after(HeldKind::Change, 0, 0, 10)), [2, 4]);
        assert_eq!(h.not_held.get(), 1);
    }
}
