//! Where a session resumes on a subject, and the check that nothing of an earlier session was
//! stored among its rows: the subject's last messages read back by their headers ([`plan`]
//! decides what to delete), and what the session stored checked as it goes
//! ([`Publisher::verify`]). See the module above for why a hole can only be among the last
//! `window` rows, or after the last row a session checked.

use std::time::Duration;

use async_nats::jetstream::{self, stream::LastRawMessageErrorKind};

use super::{Cursor, Kinds, PublishError, Publisher};
use crate::sinks::nats::{subject, Kind, HEADER_RECORD, HEADER_SEQ};

impl Publisher {
    /// Reconcile `kind`'s subject with the record (see [`plan`]) and return where publishing
    /// resumes.
    pub(super) async fn reconcile(
        &self,
        stream: &jetstream::stream::Stream,
        kind: Kind,
    ) -> Result<Resume, PublishError> {
        // Where a session found rows stored late, or deleted some, the next reads the subject
        // back from the last row it knew in order.
        let floor = *self
            .rescan
            .lock()
            .map_err(|_| PublishError::Poisoned)?
            .get_mut(kind);
        let held = self.last_held(stream, kind).await?;
        let (last, outside) = match (held, floor) {
            (Held::Ours(last), _) => (last.stream_seq, Resume::from(last)),
            // A subject whose last messages were deleted can be answered as empty (or as ending
            // in an older message) until a message is stored on it again: nats-server 2.9 keeps
            // a stale per-subject index meanwhile. Read it back from the floor instead.
            (Held::Nothing, Some(_)) => (u64::MAX, Resume::default()),
            (Held::Other { stream_seq }, Some(_)) => (
                u64::MAX,
                Resume {
                    after: 0,
                    stream_seq,
                },
            ),
            (Held::Nothing, None) => return Ok(Resume::default()),
            (Held::Other { stream_seq }, None) => {
                return Ok(Resume {
                    after: 0,
                    stream_seq,
                })
            }
        };
        let window = self.settings.window.max(1) as u64;
        let scanned = self.scan(stream, kind, last, window, floor).await?;
        if !scanned.iter().any(|m| m.ours) {
            return Ok(outside);
        }
        let rowless = self.rowless_jumps(kind, &scanned).await?;
        let p = plan(&scanned, |after, next| rowless.contains(&(after, next)));
        if !p.delete.is_empty() {
            tracing::warn!(
                "NATS {}: {} {} message(s) of this node were stored out of order after row {}: \
                 deleting them and publishing again from row {}",
                self.settings.url,
                p.delete.len(),
                kind.suffix(),
                p.resume_after,
                p.resume_after + 1
            );
        }
        if p.fresh_ids {
            self.need_fresh_ids();
        }
        if !p.delete.is_empty() {
            // Until a row is stored after them, the subject's last message may not be found.
            self.rescan_from(kind, p.resume_seq);
        }
        for &seq in &p.delete {
            stream
                .delete_message(seq)
                .await
                .map_err(|cause| PublishError::Delete { seq, cause })?;
        }
        Ok(Resume {
            after: p.resume_after,
            stream_seq: p.resume_seq,
        })
    }

    /// Check what the session stored on `kind`'s subject since the last check: this record's
    /// messages after the row checked last must be exactly the rows acknowledged since, in order
    /// (read back only where their stream sequences leave room for another message), and, when
    /// the session is `idle`, the row acknowledged last must still be the subject's last. A
    /// message of an earlier session stored among them or after them ends the session; the next
    /// one reads the subject back from the row checked last, and reconciles it.
    pub(super) async fn verify(
        &self,
        stream: &jetstream::stream::Stream,
        kind: Kind,
        p: &mut Published,
        idle: bool,
    ) -> Result<(), PublishError> {
        let Some(&last) = p.since.last() else {
            return Ok(());
        };
        let subj = subject(&self.settings.node, kind);
        if !dense(p.checked.stream_seq, &p.since) {
            let (scanned, _) = self
                .scan_from(stream, &subj, p.checked.stream_seq + 1, last.stream_seq)
                .await
                .map_err(|cause| PublishError::Scan {
                    subject: subj.clone(),
                    cause,
                })?;
            let found: Vec<Resume> = scanned
                .iter()
                .filter(|m| m.ours && m.stream_seq > p.checked.stream_seq)
                .map(|m| Resume {
                    after: m.number,
                    stream_seq: m.stream_seq,
                })
                .collect();
            if let Some(i) = first_difference(&found, &p.since) {
                let before = i.checked_sub(1).map_or(p.checked, |j| p.since[j]);
                self.need_fresh_ids();
                self.rescan_from(kind, before.stream_seq);
                return Err(PublishError::StoredLate {
                    subject: subj,
                    after: before.after,
                    found: rows_of(&found[i.min(found.len())..]),
                    acked: rows_of(&p.since[i.min(p.since.len())..]),
                });
            }
        }
        if idle {
            if let Held::Ours(now) = self.last_held(stream, kind).await? {
                if now.stream_seq > last.stream_seq {
                    self.need_fresh_ids();
                    self.rescan_from(kind, p.checked.stream_seq);
                    return Err(PublishError::NotLast {
                        subject: subj,
                        row: last.after,
                        seq: last.stream_seq,
                        found: format!("row {} (stream sequence {})", now.number, now.stream_seq),
                    });
                }
            }
            // Emptied, or another record's message last: not this record's order to keep.
        }
        p.checked = last;
        p.since.clear();
        // Rows stored after any late or deleted message, and checked: no floor needed anymore.
        if let Ok(mut r) = self.rescan.lock() {
            *r.get_mut(kind) = None;
        }
        Ok(())
    }

    fn rescan_from(&self, kind: Kind, stream_seq: u64) {
        if let Ok(mut r) = self.rescan.lock() {
            let at = r.get_mut(kind);
            *at = Some(at.map_or(stream_seq, |s| s.min(stream_seq)));
        }
    }

    /// The jumps in this record's rows on the subject (row `a` followed by row `b > a + 1`)
    /// that no row to publish fills: the record lacks every row between (a full disk, a writer
    /// behind, retention) and none is held in memory for the publisher. Such a jump is not a
    /// hole: nothing can be published into it.
    async fn rowless_jumps(
        &self,
        kind: Kind,
        scanned: &[Scanned],
    ) -> Result<std::collections::HashSet<(u64, u64)>, PublishError> {
        let ours: Vec<u64> = scanned
            .iter()
            .filter(|m| m.ours)
            .map(|m| m.number)
            .collect();
        let jumps: Vec<(u64, u64)> = ours
            .windows(2)
            .filter(|w| w[1] > w[0].saturating_add(1))
            .map(|w| (w[0], w[1]))
            .collect();
        if jumps.is_empty() {
            return Ok(Default::default());
        }
        let since_ns = super::oldest_kept(
            crate::timestamp::Timestamp::now().unix_nanos(),
            self.settings.max_age,
        );
        let held_kind = kind.held();
        let conn = super::open_record(&self.record).await?;
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            let reader = conn.lock().map_err(|_| PublishError::Poisoned)?;
            let mut rowless = std::collections::HashSet::new();
            for (a, b) in jumps {
                let held = store.held.after(held_kind, a, since_ns, 1);
                let held_between = held.first().is_some_and(|r| r.number < b);
                let recorded =
                    crate::store::any_between(reader.conn(), kind == Kind::Change, a, b, since_ns)?;
                if !held_between && !recorded {
                    rowless.insert((a, b));
                }
            }
            Ok(rowless)
        })
        .await
        .map_err(PublishError::Reader)?
    }

    /// The headers of this record's messages on `kind`'s subject, from far enough back that the
    /// last `window` rows are all among them (and from `floor` at least), up to the stream
    /// sequence `last`.
    async fn scan(
        &self,
        stream: &jetstream::stream::Stream,
        kind: Kind,
        last: u64,
        window: u64,
        floor: Option<u64>,
    ) -> Result<Vec<Scanned>, PublishError> {
        let subj = subject(&self.settings.node, kind);
        let err = |cause: Box<dyn std::error::Error + Send + Sync>| PublishError::Scan {
            subject: subj.clone(),
            cause,
        };
        let mut back = window.saturating_mul(4);
        loop {
            let start = last.saturating_sub(back).max(1);
            let start = floor.map_or(start, |f| start.min(f.max(1)));
            let (ours, foreign_first) = self
                .scan_from(stream, &subj, start, last)
                .await
                .map_err(&err)?;
            let mine = || ours.iter().filter(|m| m.ours).map(|m| m.number);
            let max = mine().max().unwrap_or(0);
            let min = mine().min().unwrap_or(0);
            if start == 1
                || foreign_first
                || floor.is_some()
                || min <= (max + 1).saturating_sub(window).max(1)
            {
                return Ok(ours);
            }
            back = back.saturating_mul(4);
        }
    }

    /// This record's messages on `subj` from stream sequence `start` to `last`, and whether a
    /// message of another record came before the first of them.
    async fn scan_from(
        &self,
        stream: &jetstream::stream::Stream,
        subj: &str,
        start: u64,
        last: u64,
    ) -> Result<(Vec<Scanned>, bool), Box<dyn std::error::Error + Send + Sync>> {
        use futures_util::StreamExt as _;
        let consumer = stream
            .create_consumer(jetstream::consumer::pull::OrderedConfig {
                filter_subject: subj.to_string(),
                deliver_policy: jetstream::consumer::DeliverPolicy::ByStartSequence {
                    start_sequence: start,
                },
                headers_only: true,
                ..Default::default()
            })
            .await?;
        if consumer.cached_info().num_pending == 0 {
            // Nothing on the subject from `start` on.
            return Ok((Vec::new(), false));
        }
        let mut messages = consumer.messages().await?;
        let mut ours = Vec::new();
        let mut foreign_first = false;
        loop {
            let m = match tokio::time::timeout(Duration::from_secs(5), messages.next()).await {
                Ok(Some(m)) => m?,
                Ok(None) => return Err("the scan ended early".into()),
                Err(_) => return Err("no message within 5s".into()),
            };
            let info = m.info()?;
            let seq = info.stream_sequence;
            let header = |name: &str| {
                m.headers
                    .as_ref()
                    .and_then(|h| h.get(name))
                    .map(|v| v.as_str().to_string())
            };
            let mine = header(HEADER_RECORD).as_deref() == Some(self.record_id.as_str());
            match header(HEADER_SEQ).and_then(|v| v.parse().ok()) {
                Some(number) if mine => ours.push(Scanned {
                    stream_seq: seq,
                    ours: true,
                    number,
                }),
                _ if !ours.is_empty() => ours.push(Scanned {
                    stream_seq: seq,
                    ours: false,
                    number: 0,
                }),
                _ => foreign_first = true,
            }
            if seq >= last || info.pending == 0 {
                return Ok((ours, foreign_first));
            }
        }
    }

    /// The last message on `kind`'s subject: whether it is of this record, its row and its
    /// stream sequence.
    async fn last_held(
        &self,
        stream: &jetstream::stream::Stream,
        kind: Kind,
    ) -> Result<Held, PublishError> {
        let subj = subject(&self.settings.node, kind);
        match stream.get_last_raw_message_by_subject(&subj).await {
            Ok(m) => {
                let header = |name: &str| m.headers.get(name).map(|v| v.as_str().to_string());
                if header(HEADER_RECORD).as_deref() != Some(self.record_id.as_str()) {
                    // Another record (this node's record was replaced): all of ours is new.
                    return Ok(Held::Other {
                        stream_seq: m.sequence,
                    });
                }
                Ok(Held::Ours(Last {
                    number: header(HEADER_SEQ).and_then(|v| v.parse().ok()).unwrap_or(0),
                    stream_seq: m.sequence,
                }))
            }
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(Held::Nothing),
            Err(cause) => Err(PublishError::LastMessage {
                subject: subj,
                cause,
            }),
        }
    }
}

/// What the last message on a subject is.
enum Held {
    /// The subject is empty.
    Nothing,
    /// A message of another record, at this stream sequence.
    Other { stream_seq: u64 },
    /// A message of this record.
    Ours(Last),
}

/// Where a session resumes on a subject: after row `after`, stored at `stream_seq` (0, 0: the
/// subject was empty; row 0 at a stream sequence: another record's message was last).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Resume {
    pub(super) after: u64,
    pub(super) stream_seq: u64,
}

/// What a session stored on a subject: the row checked last (at first, where it resumed) and
/// the rows acknowledged since, with their stream sequences.
#[derive(Debug)]
pub(super) struct Published {
    checked: Resume,
    since: Vec<Resume>,
}

impl From<Resume> for Published {
    fn from(checked: Resume) -> Self {
        Published {
            checked,
            since: Vec::new(),
        }
    }
}

impl Published {
    pub(super) fn acked(&mut self, number: u64, stream_seq: u64) {
        self.since.push(Resume {
            after: number,
            stream_seq,
        });
    }

    /// Rows acknowledged since the last check.
    pub(super) fn unchecked(&self) -> usize {
        self.since.len()
    }

    /// The row acknowledged last (at first, where the session resumed).
    fn last(&self) -> u64 {
        self.since.last().unwrap_or(&self.checked).after
    }
}

impl Kinds<Published> {
    /// The last change and incident line acknowledged.
    pub(super) fn acked(&self) -> Cursor {
        Cursor {
            change: self.change.last(),
            incident: self.incident.last(),
        }
    }
}

/// Whether each row acknowledged was stored right after the one before (the first right after
/// the row checked last): then no other message can lie between them.
fn dense(checked_seq: u64, acked: &[Resume]) -> bool {
    let mut prev = checked_seq;
    acked.iter().all(|r| {
        let next = r.stream_seq == prev.saturating_add(1);
        prev = r.stream_seq;
        next
    })
}

/// Where this record's rows read back from the subject (`found`) first differ from the rows
/// acknowledged (`acked`), if anywhere.
fn first_difference(found: &[Resume], acked: &[Resume]) -> Option<usize> {
    let same = |a: &Resume, b: &Resume| a.after == b.after && a.stream_seq == b.stream_seq;
    match found.iter().zip(acked).position(|(f, a)| !same(f, a)) {
        Some(i) => Some(i),
        None if found.len() != acked.len() => Some(found.len().min(acked.len())),
        None => None,
    }
}

/// A list of rows as a log line shows it: the first few and how many.
fn rows_of(rows: &[Resume]) -> String {
    const SHOWN: usize = 8;
    let head: Vec<String> = rows
        .iter()
        .take(SHOWN)
        .map(|r| r.after.to_string())
        .collect();
    match rows.len() {
        n if n > SHOWN => format!("[{}, ...] ({n})", head.join(", ")),
        _ => format!("[{}]", head.join(", ")),
    }
}

/// The last message on a subject, of this record.
struct Last {
    number: u64,
    stream_seq: u64,
}

impl From<Last> for Resume {
    fn from(l: Last) -> Resume {
        Resume {
            after: l.number,
            stream_seq: l.stream_seq,
        }
    }
}

/// A message of this record found on a subject: its stream sequence and its row (`Observer-Seq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scanned {
    pub stream_seq: u64,
    /// Of this record (another record's messages on the subject are left alone).
    pub ours: bool,
    pub number: u64,
}

/// What a session does with a subject before publishing on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The last row of the clean run: publishing goes on after it.
    pub resume_after: u64,
    /// Its stream sequence.
    pub resume_seq: u64,
    /// The stream sequences of this record's messages stored after the clean run (a hole, a
    /// duplicate or a row out of order came first): deleted before publishing again.
    pub delete: Vec<u64>,
    /// Rows published again must carry fresh message ids (some ids were deleted).
    pub fresh_ids: bool,
}

/// Reconcile a subject with the record. `scanned` is this record's messages on the subject in
/// stream order, from far enough back that it starts before the last `window` rows (every row
/// before those was acknowledged before a later one was sent, so it is stored, in order). The
/// clean run is the longest prefix where each row follows the one before, or jumps over rows
/// that do not exist to publish (`rowless(a, b)`: none between rows a and b); every message
/// after it is deleted, and publishing resumes after the run's last row.
pub(crate) fn plan(scanned: &[Scanned], rowless: impl Fn(u64, u64) -> bool) -> Plan {
    let scanned: Vec<Scanned> = scanned.iter().copied().filter(|m| m.ours).collect();
    let Some(first) = scanned.first() else {
        return Plan {
            resume_after: 0,
            resume_seq: 0,
            delete: Vec::new(),
            fresh_ids: false,
        };
    };
    let mut end = *first;
    let mut clean = 1;
    for m in &scanned[1..] {
        let follows = m.number == end.number + 1
            || (m.number > end.number + 1 && rowless(end.number, m.number));
        if !follows {
            break;
        }
        end = *m;
        clean += 1;
    }
    let delete: Vec<u64> = scanned[clean..].iter().map(|m| m.stream_seq).collect();
    Plan {
        resume_after: end.number,
        resume_seq: end.stream_seq,
        fresh_ids: !delete.is_empty(),
        delete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row between two rows exists (to publish).
    fn none(_: u64, _: u64) -> bool {
        false
    }

    /// Messages of this record as (stream sequence, row).
    fn scanned(list: &[(u64, u64)]) -> Vec<Scanned> {
        list.iter()
            .map(|&(stream_seq, number)| Scanned {
                stream_seq,
                ours: true,
                number,
            })
            .collect()
    }

    #[test]
    fn a_clean_run_resumes_after_its_last_row() {
        let p = plan(&scanned(&[(10, 5), (11, 6), (14, 7), (20, 8)]), none);
        assert_eq!(
            p,
            Plan {
                resume_after: 8,
                resume_seq: 20,
                delete: vec![],
                fresh_ids: false
            }
        );
    }

    #[test]
    fn a_row_stored_without_its_ack_is_not_sent_again() {
        // Row 4 was stored and its acknowledgement lost: the stream holds it.
        let p = plan(&scanned(&[(1, 1), (2, 2), (3, 3), (4, 4)]), none);
        assert_eq!(p.resume_after, 4);
        assert!(p.delete.is_empty() && !p.fresh_ids);
    }

    #[test]
    fn rows_lost_at_the_end_are_sent_again() {
        // Rows 4.. were sent and never stored: nothing to delete, resume after 3.
        let p = plan(&scanned(&[(1, 1), (2, 2), (3, 3)]), none);
        assert_eq!(p.resume_after, 3);
        assert!(p.delete.is_empty() && !p.fresh_ids);
    }

    #[test]
    fn a_hole_deletes_every_later_message_and_resumes_before_it() {
        // Row 4 lost, rows 5 and 6 stored after: delete them, resume after 3, fresh ids.
        let p = plan(&scanned(&[(1, 1), (2, 2), (3, 3), (7, 5), (8, 6)]), none);
        assert_eq!(
            p,
            Plan {
                resume_after: 3,
                resume_seq: 3,
                delete: vec![7, 8],
                fresh_ids: true
            }
        );
    }

    #[test]
    fn a_row_stored_twice_is_deleted_with_what_follows() {
        let p = plan(&scanned(&[(1, 1), (2, 2), (3, 2), (4, 3)]), none);
        assert_eq!(p.resume_after, 2);
        assert_eq!(p.delete, vec![3, 4]);
        assert!(p.fresh_ids);
        // A row stored late, before the rows it should follow.
        let p = plan(&scanned(&[(1, 1), (2, 3), (3, 2)]), none);
        assert_eq!(p.resume_after, 1);
        assert_eq!(p.delete, vec![2, 3]);
    }

    #[test]
    fn another_records_rows_are_not_ours() {
        // The scan keeps this record's messages only: another record's rows in between (stream
        // sequences 3 and 4) neither break the run nor get deleted.
        let mut list = scanned(&[(1, 7), (2, 8), (5, 9)]);
        let other = |stream_seq| Scanned {
            stream_seq,
            ours: false,
            number: 1,
        };
        list.insert(2, other(3));
        list.insert(3, other(4));
        let p = plan(&list, none);
        assert_eq!(p.resume_after, 9);
        assert!(p.delete.is_empty());
        // Nor are they deleted after a hole.
        list.push(other(6));
        list.push(Scanned {
            stream_seq: 7,
            ours: true,
            number: 11,
        });
        let p = plan(&list, none);
        assert_eq!(p.resume_after, 9);
        assert_eq!(p.delete, vec![7]);
    }

    #[test]
    fn an_empty_subject_publishes_from_the_start() {
        assert_eq!(
            plan(&[], none),
            Plan {
                resume_after: 0,
                resume_seq: 0,
                delete: vec![],
                fresh_ids: false
            }
        );
    }

    #[test]
    fn a_jump_over_rows_that_do_not_exist_is_not_a_hole() {
        // Rows 4..=9 are neither in the record nor held (a full disk, past what is held).
        let list = scanned(&[(1, 1), (2, 2), (3, 3), (4, 10), (5, 11)]);
        let p = plan(&list, |a, b| (a, b) == (3, 10));
        assert_eq!(p.resume_after, 11);
        assert!(p.delete.is_empty() && !p.fresh_ids);
        // Rows that do exist make it a hole, as before.
        let p = plan(&list, none);
        assert_eq!(p.resume_after, 3);
        assert_eq!(p.delete, vec![4, 5]);
        // A row going back is never a jump.
        let p = plan(&scanned(&[(1, 5), (2, 3)]), |_, _| true);
        assert_eq!(p.resume_after, 5);
        assert_eq!(p.delete, vec![2]);
    }

    fn acked(list: &[(u64, u64)]) -> Vec<Resume> {
        list.iter()
            .map(|&(after, stream_seq)| Resume { after, stream_seq })
            .collect()
    }

    #[test]
    fn rows_stored_one_after_another_need_no_reading_back() {
        assert!(dense(10, &acked(&[(4, 11), (5, 12), (6, 13)])));
        assert!(dense(0, &acked(&[(1, 1)])));
        assert!(dense(7, &[]));
        // Another message (another subject's, or one stored late) lies between 12 and 14.
        assert!(!dense(10, &acked(&[(4, 11), (5, 12), (6, 14)])));
        // Or between the row checked last and the first acknowledged.
        assert!(!dense(10, &acked(&[(4, 12)])));
    }

    #[test]
    fn a_row_stored_late_among_the_acknowledged_is_where_they_first_differ() {
        let mine = acked(&[(4, 11), (5, 13), (6, 14)]);
        assert_eq!(first_difference(&mine, &mine), None);
        // Row 2, of an earlier session, stored between rows 4 and 5.
        let found = acked(&[(4, 11), (2, 12), (5, 13), (6, 14)]);
        assert_eq!(first_difference(&found, &mine), Some(1));
        // Before the first.
        let found = acked(&[(9, 10), (4, 11), (5, 13), (6, 14)]);
        assert_eq!(first_difference(&found, &mine), Some(0));
        // The read back ended early: what it did not see differs.
        assert_eq!(first_difference(&mine[..2], &mine), Some(2));
        assert_eq!(rows_of(&found[1..]), "[4, 5, 6]");
        let many = acked(&(1..=20).map(|n| (n, n)).collect::<Vec<_>>());
        assert_eq!(rows_of(&many), "[1, 2, 3, 4, 5, 6, 7, 8, ...] (20)");
    }
}
