//! The writer and the file together: rows written, read back, kept within limits.

use super::*;
use crate::store::*;

fn change(seq: u64, time_ns: i64, chain: &str) -> Row {
    Row::Change(ChangeRow {
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
    })
}

fn tmp_record() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    (dir, path)
}

fn writer(path: &Path, limits: Limits) -> Writer {
    Writer::new(
        open_rw(path).unwrap(),
        path.into(),
        limits,
        Arc::new(StoreStats::default()),
    )
}

/// Rows older than an hour go.
const HOURLY: Limits = Limits {
    retain: Duration::from_secs(3600),
    max_bytes: u64::MAX,
};

const WIDE: Limits = Limits {
    retain: Duration::from_secs(3600 * 24 * 365 * 100),
    max_bytes: u64::MAX,
};

#[test]
fn rows_survive_reopening_and_numbers_continue() {
    let (_dir, path) = tmp_record();
    let now = crate::timestamp::Timestamp::now().unix_nanos();
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
    let (_dir, path) = tmp_record();
    let now = crate::timestamp::Timestamp::now().unix_nanos();
    let hour = HOURLY.retain.as_nanos() as i64;
    let mut w = writer(&path, HOURLY);
    w.write_batch(&[change(1, now - 2 * hour, "A"), change(2, now, "B")]);
    w.enforce_limits();
    let ro = open_ro(&path).unwrap();
    let all = select_changes(&ro, &Selection::default()).unwrap();
    assert_eq!(all.iter().map(|r| r.number).collect::<Vec<_>>(), vec![2]);
}

#[test]
fn the_record_id_is_made_once_and_kept() {
    let (dir, path) = tmp_record();
    let first = record_id(&open_rw(&path).unwrap()).unwrap();
    assert!(first.len() >= 16, "{first}");
    assert_eq!(record_id(&open_rw(&path).unwrap()).unwrap(), first);
    let other = dir.path().join("other.db");
    assert_ne!(record_id(&open_rw(&other).unwrap()).unwrap(), first);
}

#[test]
fn the_oldest_rows_go_when_the_file_is_too_big() {
    let (_dir, path) = tmp_record();
    let now = crate::timestamp::Timestamp::now().unix_nanos();
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
fn a_full_queue_drops_from_the_record_and_still_streams_in_order() {
    let (tx, rx) = channel();
    let stats = Arc::new(StoreStats::default());
    let s = StoreSender {
        tx,
        pending: Arc::new(AtomicUsize::new(0)),
        capacity: 2,
        stats: stats.clone(),
    };
    let streamed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sent: Vec<bool> = (1..=5)
        .map(|i| {
            let streamed = streamed.clone();
            s.send_then(
                Some(change(i, 0, "C")),
                Some(Box::new(move || streamed.lock().unwrap().push(i))),
            )
        })
        .collect();
    assert_eq!(sent, vec![true, true, false, false, false]);
    assert_eq!(stats.count("dropped", 0), 3);
    // Every item is queued, rows only for the first two; nothing streamed before the writer.
    let items: Vec<Item> = rx.try_iter().collect();
    assert_eq!(items.len(), 5);
    assert_eq!(
        items
            .iter()
            .filter(|(r, _)| matches!(r, Some(Entry::Row(_))))
            .count(),
        2
    );
    assert!(streamed.lock().unwrap().is_empty());
    // The writer gone: the stream goes on at once.
    drop(rx);
    let streamed2 = streamed.clone();
    assert!(!s.send_then(
        Some(change(6, 0, "C")),
        Some(Box::new(move || streamed2.lock().unwrap().push(6)))
    ));
    assert_eq!(*streamed.lock().unwrap(), vec![6]);
    assert_eq!(stats.count("dropped", 0), 4);
}

#[test]
fn rows_are_streamed_after_their_commit_in_order() {
    let (_dir, path) = tmp_record();
    let stats = Arc::new(StoreStats::default());
    let (s, join) =
        spawn_writer(open_rw(&path).unwrap(), path.clone(), WIDE, 1 << 16, stats).unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let now = crate::timestamp::Timestamp::now().unix_nanos();
    for i in 1..=500u64 {
        let (seen, path) = (seen.clone(), path.clone());
        // Each row, when streamed, is already in the record (read by another connection).
        s.send_then(
            Some(realistic(i, now + i as i64)),
            Some(Box::new(move || {
                let ro = open_ro(&path).unwrap();
                let last = last_numbers(&ro).unwrap().0;
                seen.lock().unwrap().push((i, last >= i));
            })),
        );
    }
    drop(s);
    join.join().unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.iter().map(|x| x.0).collect::<Vec<_>>(),
        (1..=500).collect::<Vec<_>>()
    );
    assert!(
        seen.iter().all(|x| x.1),
        "a row streamed before it was committed"
    );
}

/// A change line like kube-proxy's, different per row.
fn realistic(seq: u64, time_ns: i64) -> Row {
    let chain = format!("KUBE-SEP-{:016X}", seq.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let json = format!(
        r#"{{"kind":"change","seq":{seq},"time":"t{time_ns}","netns":4026531840,"backend":"legacy","family":"ip","table":"nat","chain":"{chain}","op":"rule_add","rule":"-p tcp -m comment --comment \"default/svc-{}:http\" -j DNAT --to-destination 10.1.{}.{}:8080","process":{{"pid":{},"comm":"iptables-restor","actor":"kube-proxy"}}}}"#,
        seq % 97,
        seq % 251,
        seq % 13,
        1000 + seq % 7
    );
    Row::Change(ChangeRow {
        seq,
        time_ns,
        netns: Some(4026531840),
        backend: Some("legacy".into()),
        table: Some("nat".into()),
        chain: Some(chain),
        op: Some(
            if seq.is_multiple_of(5) {
                "chain_flush"
            } else {
                "rule_add"
            }
            .into(),
        ),
        actor: Some("kube-proxy".into()),
        comm: Some("iptables-restor".into()),
        json: json.into(),
    })
}

fn json_of(rows: &[Row]) -> Vec<(u64, String)> {
    rows.iter()
        .filter_map(|r| match r {
            Row::Change(c) => Some((c.seq, c.json.to_string())),
            Row::Incident { .. } | Row::Snapshot(_) => None,
        })
        .collect()
}

fn read_all(conn: &Connection, sel: &Selection) -> Vec<(u64, String)> {
    select_changes(conn, sel)
        .unwrap()
        .into_iter()
        .map(|r| (r.number, r.json))
        .collect()
}

#[test]
fn rows_are_compressed_after_the_dictionary_and_read_back_exactly() {
    let (_dir, path) = tmp_record();
    let now = crate::timestamp::Timestamp::now().unix_nanos();
    let rows: Vec<Row> = (1..=3000).map(|i| realistic(i, now + i as i64)).collect();
    let mut w = writer(&path, WIDE);
    for batch in rows.chunks(700) {
        w.write_batch(batch);
    }
    drop(w);
    let ro = open_ro(&path).unwrap();
    assert_eq!(read_all(&ro, &Selection::default()), json_of(&rows));
    let (plain, packed, packed_bytes): (i64, i64, i64) = ro
        .query_row(
            "SELECT SUM(dict IS NULL), SUM(dict IS NOT NULL), \
             SUM(CASE WHEN dict IS NULL THEN 0 ELSE length(body) END) FROM changes",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((plain, packed), (DICT_SAMPLES as i64, 2000));
    let plain_bytes: usize = rows[DICT_SAMPLES..]
        .iter()
        .map(|r| match r {
            Row::Change(c) => c.json.len(),
            Row::Incident { .. } | Row::Snapshot(_) => 0,
        })
        .sum();
    assert!(
        packed_bytes * 3 < plain_bytes as i64,
        "{packed_bytes} compressed bytes for {plain_bytes}"
    );
    // Each string is kept once.
    let strs: i64 = ro
        .query_row("SELECT COUNT(*) FROM strs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        strs,
        3000 + 6,
        "3000 chains, legacy, nat, 2 ops, actor, comm"
    );
    // Every filter works on numbered strings.
    let one = |sel: Selection| -> Vec<u64> {
        select_changes(&ro, &sel)
            .unwrap()
            .iter()
            .map(|r| r.number)
            .collect()
    };
    let chain_of_7 = format!("KUBE-SEP-{:016X}", 7u64.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    assert_eq!(
        one(Selection {
            chain_glob: Some(chain_of_7),
            ..Default::default()
        }),
        [7]
    );
    let flushes = one(Selection {
        ops: vec!["chain_flush".into()],
        actor: Some("iptables-restor".into()),
        backend: Some("legacy".into()),
        table: Some("nat".into()),
        after: Some(2990),
        ..Default::default()
    });
    assert_eq!(flushes, [2995, 3000]);
    assert!(one(Selection {
        table: Some("filter".into()),
        ..Default::default()
    })
    .is_empty());
    assert_eq!(
        one(Selection {
            actor: Some("kube-proxy".into()),
            limit: Some(2),
            ..Default::default()
        }),
        [1, 2]
    );
}

#[test]
fn a_layout_1_record_is_read_then_converted_unchanged() {
    let (_dir, path) = tmp_record();
    let now = crate::timestamp::Timestamp::now().unix_nanos();
    let rows: Vec<Row> = (1..=1500).map(|i| realistic(i, now + i as i64)).collect();
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE changes (seq INTEGER PRIMARY KEY, time_ns INTEGER NOT NULL, netns INTEGER,
               backend TEXT, tbl TEXT, chain TEXT, op TEXT, actor TEXT, comm TEXT, json TEXT NOT NULL);
             CREATE INDEX changes_time ON changes(time_ns);
             CREATE INDEX changes_chain ON changes(chain, time_ns);
             CREATE TABLE incidents (no INTEGER PRIMARY KEY, time_ns INTEGER NOT NULL, type TEXT,
               netns INTEGER, json TEXT NOT NULL);
             INSERT INTO incidents VALUES (1, 5, 'foreign_delete', 7, '{\"kind\":\"incident\"}');
             PRAGMA user_version = 1;",
        )
        .unwrap();
        for r in &rows {
            if let Row::Change(ChangeRow {
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
            }) = r
            {
                c.execute(
                    "INSERT INTO changes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    params![
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
                    ],
                )
                .unwrap();
            }
        }
    }
    let flushes = Selection {
        ops: vec!["chain_flush".into()],
        chain_glob: Some("KUBE-SEP-*".into()),
        ..Default::default()
    };
    let want_flushes: Vec<(u64, String)> = json_of(&rows)
        .into_iter()
        .filter(|(seq, _)| seq.is_multiple_of(5))
        .collect();
    // Read as it is.
    let ro = open_ro(&path).unwrap();
    assert_eq!(read_all(&ro, &Selection::default()), json_of(&rows));
    assert_eq!(read_all(&ro, &flushes), want_flushes);
    drop(ro);
    // Converted by the writer, then written to.
    let mut w = writer(&path, WIDE);
    w.write_batch(&[realistic(1501, now + 1501)]);
    drop(w);
    let ro = open_ro(&path).unwrap();
    let version: i64 = ro
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let mut want = json_of(&rows);
    want.extend(json_of(&[realistic(1501, now + 1501)]));
    assert_eq!(read_all(&ro, &Selection::default()), want);
    assert_eq!(read_all(&ro, &flushes), want_flushes);
    assert_eq!(last_numbers(&ro).unwrap(), (1501, 1));
    let packed: i64 = ro
        .query_row(
            "SELECT COUNT(*) FROM changes WHERE dict IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        packed, 501,
        "rows after the first {DICT_SAMPLES} are compressed"
    );
}

#[test]
fn unused_strings_go_with_their_rows() {
    let (_dir, path) = tmp_record();
    let now = crate::timestamp::Timestamp::now().unix_nanos();
    let hour = HOURLY.retain.as_nanos() as i64;
    let mut w = writer(&path, HOURLY);
    let old: Vec<Row> = (1..=STRS_SWEPT_FROM as u64)
        .map(|i| realistic(i, now - 2 * hour))
        .collect();
    w.write_batch(&old);
    w.write_batch(&[realistic(100_000, now)]);
    w.enforce_limits();
    // The expired rows' chain names are gone; the new row still has its strings.
    w.write_batch(&[realistic(100_001, now)]);
    drop(w);
    let ro = open_ro(&path).unwrap();
    let strs: i64 = ro
        .query_row("SELECT COUNT(*) FROM strs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        strs,
        2 + 6,
        "two chains, legacy, nat, rule_add, actor, comm"
    );
    assert_eq!(
        read_all(&ro, &Selection::default()),
        json_of(&[realistic(100_000, now), realistic(100_001, now)])
    );
}

#[test]
fn a_damaged_row_is_an_error_naming_it() {
    let (_dir, path) = tmp_record();
    let now = crate::timestamp::Timestamp::now().unix_nanos();
    let rows: Vec<Row> = (1..=1200).map(|i| realistic(i, now + i as i64)).collect();
    let mut w = writer(&path, WIDE);
    w.write_batch(&rows);
    drop(w);
    let c = Connection::open(&path).unwrap();
    c.execute(
        "UPDATE changes SET body = substr(body, 1, 5) || x'00ff00ff' WHERE seq = 1100",
        [],
    )
    .unwrap();
    drop(c);
    let ro = open_ro(&path).unwrap();
    let err = select_changes(&ro, &Selection::default()).unwrap_err();
    assert!(
        matches!(err, StoreError::Damaged { seq: 1100, .. }),
        "{err}"
    );
    let before = Selection {
        before: Some(1100),
        ..Default::default()
    };
    assert_eq!(read_all(&ro, &before).len(), 1099);
}

#[test]
fn a_file_that_is_not_a_record_is_refused_and_kept() {
    let (_dir, path) = tmp_record();
    let junk = vec![0x5au8; 8192];
    std::fs::write(&path, &junk).unwrap();
    let err = open_rw(&path).expect_err("junk must be refused");
    assert!(matches!(err, StoreError::NotARecord { .. }), "{err}");
    assert!(err.to_string().contains("left untouched"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), junk);
    assert!(open_ro(&path).is_err());
}

#[test]
fn a_full_file_keeps_its_hole_as_a_gap_row_once_space_is_back() {
    let (_dir, path) = tmp_record();
    let now = crate::timestamp::Timestamp::now().unix_nanos();
    let stats = Arc::new(StoreStats::default());
    let mut w = Writer::new(open_rw(&path).unwrap(), path.clone(), WIDE, stats.clone());
    w.write_batch(&[realistic(1, now + 1), realistic(2, now + 2)]);
    // The file may not grow: every write fails with SQLITE_FULL, as on a full disk.
    let pages: i64 = w
        .conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    w.conn.pragma_update(None, "max_page_count", pages).unwrap();
    let burst: Vec<Row> = (3..=3002).map(|i| realistic(i, now + i as i64)).collect();
    for b in burst.chunks(500) {
        w.write_batch(b);
    }
    assert_eq!(stats.count("failed", 0), 3000);
    assert!(stats.failing_since.get() > 0);
    assert_eq!(
        stats
            .failing
            .get_or_create(&Reason {
                reason: "disk full".into()
            })
            .get(),
        1
    );
    // Space is back: the next batch commits, with the gap row.
    w.conn
        .pragma_update(None, "max_page_count", 1_000_000)
        .unwrap();
    w.write_batch(&[realistic(3003, now + 3003)]);
    assert_eq!(stats.gaps.get(), 1);
    assert_eq!(stats.failing_since.get(), 0);
    drop(w);
    let ro = open_ro(&path).unwrap();
    let gaps = select_gaps(&ro, None, None).unwrap();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    let g = &gaps[0];
    assert_eq!(
        (g.first_seq, g.last_seq, g.changes),
        (Some(3), Some(3002), 3000)
    );
    assert_eq!((g.first_ns(), g.last_ns()), (now + 3, now + 3002));
    assert_eq!(g.reason, "disk full");
    let kept: Vec<u64> = select_changes(&ro, &Selection::default())
        .unwrap()
        .iter()
        .map(|r| r.number)
        .collect();
    assert_eq!(kept, [1, 2, 3003]);
    // Only the gap's time range finds it.
    assert!(select_gaps(&ro, Some(now + 3003), None).unwrap().is_empty());
    assert_eq!(select_gaps(&ro, None, Some(now + 3)).unwrap().len(), 1);
    // A reader catching up over seqs finds it where its seqs lie, and only there.
    use crate::store::gaps::{gaps_after, gaps_in_seqs, last_gap_id};
    assert_eq!(gaps_in_seqs(&ro, 0, 2).unwrap(), []);
    assert_eq!(gaps_in_seqs(&ro, 2, 3).unwrap(), gaps);
    assert_eq!(gaps_in_seqs(&ro, 2000, 3003).unwrap(), gaps);
    assert_eq!(gaps_in_seqs(&ro, 3002, 5000).unwrap(), []);
    assert_eq!(gaps_in_seqs(&ro, 5, 5).unwrap(), []);
    // A follower learns of it once, by its id.
    let found = gaps_after(&ro, 0).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].1, gaps[0]);
    assert_eq!(last_gap_id(&ro).unwrap(), found[0].0);
    assert_eq!(gaps_after(&ro, found[0].0).unwrap(), []);
}

#[test]
fn rows_dropped_from_a_full_queue_leave_a_gap_row() {
    let (_dir, path) = tmp_record();
    let now = crate::timestamp::Timestamp::now().unix_nanos();
    let stats = Arc::new(StoreStats::default());
    let (tx, rx) = channel();
    let pending = Arc::new(AtomicUsize::new(0));
    let s = StoreSender {
        tx,
        pending: pending.clone(),
        capacity: 2,
        stats: stats.clone(),
    };
    for i in 1..=5 {
        s.send_then(Some(realistic(i, now + i as i64)), None);
    }
    drop(s);
    // The writer finds two rows and three dropped, in order.
    Writer::new(open_rw(&path).unwrap(), path.clone(), WIDE, stats.clone()).run(rx, &pending);
    let ro = open_ro(&path).unwrap();
    let gaps = select_gaps(&ro, None, None).unwrap();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert_eq!((gaps[0].first_seq, gaps[0].last_seq), (Some(3), Some(5)));
    assert_eq!(gaps[0].reason, "writer fell behind");
    assert_eq!(stats.count("dropped", 0), 3);
    assert_eq!(last_numbers(&ro).unwrap().0, 2);
}

#[test]
fn retention_keeps_one_row_saying_since_when_the_record_covers_all() {
    let (_dir, path) = tmp_record();
    let now = crate::timestamp::Timestamp::now().unix_nanos();
    let hour = HOURLY.retain.as_nanos() as i64;
    let mut w = writer(&path, HOURLY);
    w.write_batch(&[
        change(1, now - 3 * hour, "A"),
        change(2, now - 2 * hour, "B"),
    ]);
    w.enforce_limits();
    w.write_batch(&[change(3, now - 2 * hour, "C"), change(4, now, "D")]);
    w.enforce_limits();
    drop(w);
    let ro = open_ro(&path).unwrap();
    let gaps = select_gaps(&ro, None, None).unwrap();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    let g = &gaps[0];
    assert_eq!(g.reason, "retention");
    assert_eq!((g.first_seq, g.last_seq, g.changes), (Some(1), Some(3), 3));
    assert_eq!(g.last_ns(), now - 2 * hour);
    assert!(
        g.message().starts_with("the record covers only since "),
        "{}",
        g.message()
    );
    // Asked from after its start, the record is whole.
    assert!(select_gaps(&ro, Some(now - hour), None).unwrap().is_empty());
    // A reader catching up from seq 2 is told that what it asks for was deleted; from 3 on,
    // nothing is missing. A follower is not told of retention's row as it moves.
    use crate::store::gaps::{gaps_after, gaps_in_seqs};
    assert_eq!(gaps_in_seqs(&ro, 2, 4).unwrap(), gaps);
    assert_eq!(gaps_in_seqs(&ro, 3, 4).unwrap(), []);
    assert_eq!(gaps_after(&ro, 0).unwrap(), []);
}

#[test]
fn a_layout_3_record_gets_the_gaps_table_and_reads_without_it() {
    let (_dir, path) = tmp_record();
    drop(open_rw(&path).unwrap());
    let c = Connection::open(&path).unwrap();
    c.execute_batch("DROP TABLE gaps; PRAGMA user_version = 3;")
        .unwrap();
    drop(c);
    let ro = open_ro(&path).unwrap();
    assert!(select_gaps(&ro, None, None).unwrap().is_empty());
    assert_eq!(crate::store::gaps::gaps_in_seqs(&ro, 0, 10).unwrap(), []);
    assert_eq!(crate::store::gaps::gaps_after(&ro, 0).unwrap(), []);
    assert_eq!(crate::store::gaps::last_gap_id(&ro).unwrap(), 0);
    drop(ro);
    let rw = open_rw(&path).unwrap();
    let v: i64 = rw
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 4);
    assert!(select_gaps(&rw, None, None).unwrap().is_empty());
}
