use super::*;
use crate::sinks::record_writer::Row;

/// A record holding changes 1..=`n` (an earlier run's).
fn record_with(n: u64) -> (tempfile::TempDir, std::path::PathBuf) {
    record_of(&(1..=n).collect::<Vec<_>>())
}

/// A record holding the changes `seqs`.
fn record_of(seqs: &[u64]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let mut w = crate::sinks::record_writer::Writer::new(
        store::open_rw(&path).unwrap(),
        path.clone(),
        crate::sinks::record_writer::Limits {
            retain: std::time::Duration::from_secs(86400),
            max_bytes: u64::MAX,
        },
        Arc::new(crate::sinks::record_writer::StoreStats::default()),
    );
    let rows: Vec<Row> = seqs
        .iter()
        .map(|&seq| {
            Row::bare_change(
                seq,
                crate::timestamp::Timestamp::now().unix_nanos(),
                Some(1),
                &format!(r#"{{"kind":"change","seq":{seq}}}"#),
            )
        })
        .collect();
    w.write_batch(&rows);
    (dir, path)
}

fn ev(id: u64) -> Event {
    Event {
        id: Some(id),
        json: format!(r#"{{"kind":"change","seq":{id}}}"#).into(),
        meta: Meta::default(),
    }
}

#[tokio::test]
async fn a_client_resumes_from_memory_and_from_the_record() {
    // Changes 1..=3 are in the record only (an earlier run).
    let (_dir, path) = record_with(3);
    let hub = Arc::new(Hub::new(Metrics::new(None, None), Some(path)));
    for id in 4..=6 {
        hub.publish(Stream::Changes, ev(id));
    }
    let (backlog, mut rx) = hub.attach(Stream::Changes, Some(1)).await;
    assert!(!backlog.more);
    let ids: Vec<u64> = backlog.events.iter().filter_map(|e| e.id).collect();
    assert_eq!(
        ids,
        vec![2, 3, 4, 5, 6],
        "record, then memory, nothing twice"
    );
    hub.publish(Stream::Changes, ev(7));
    assert_eq!(rx.recv().await.unwrap().id, Some(7), "then live");
    // Without a Last-Event-ID: live only.
    let (backlog, _) = hub.attach(Stream::Changes, None).await;
    assert!(backlog.events.is_empty());
    // A client that fell behind catches up.
    let ids: Vec<u64> = hub
        .since(Stream::Changes, 5)
        .await
        .events
        .iter()
        .filter_map(|e| e.id)
        .collect();
    assert_eq!(ids, vec![6, 7]);
}

#[tokio::test]
async fn without_a_record_a_client_is_told_what_it_missed() {
    let hub = Arc::new(Hub::new(Metrics::new(None, None), None));
    let last = RING as u64 + 100;
    for id in 1..=last {
        hub.publish(Stream::Changes, ev(id));
    }
    let back = hub.since(Stream::Changes, 40).await;
    assert!(!back.more);
    let first = &back.events[0];
    assert_eq!(first.id, None);
    let v: Value = serde_json::from_str(&first.json).unwrap();
    assert_eq!(v["state"], "gap", "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("60 changes were not sent"),
        "{v}"
    );
    let ids: Vec<u64> = back.events.iter().filter_map(|e| e.id).collect();
    assert_eq!(ids, (101..=last).collect::<Vec<_>>());
    // Nothing missed, nothing said.
    let back = hub.since(Stream::Changes, last - 5).await;
    assert!(back.events.iter().all(|e| e.id.is_some()));
}

#[tokio::test]
async fn a_client_far_behind_is_caught_up_page_by_page() {
    let total = 3 * PAGE as u64 + 10;
    let (_dir, path) = record_with(total);
    let hub = Arc::new(Hub::new(Metrics::new(None, None), Some(path)));
    let live = total + 1;
    hub.publish(Stream::Changes, ev(live));
    // From the start of a long record: never more than a page at a time, all in order.
    let (mut page, _rx) = hub.attach(Stream::Changes, Some(0)).await;
    let mut seen = Vec::new();
    loop {
        assert!(page.events.len() <= PAGE + 1, "{}", page.events.len());
        seen.extend(page.events.iter().filter_map(|e| e.id));
        if !page.more {
            break;
        }
        page = hub.since(Stream::Changes, *seen.last().unwrap()).await;
    }
    assert_eq!(seen, (1..=live).collect::<Vec<u64>>());
}

#[test]
fn incident_json_gives_the_filter_fields() {
    let v: Value = serde_json::from_str(
        r#"{"kind":"incident","id":3,"time":"2026-11-21T03:12:00.000000000Z",
            "type":"foreign_delete","severity":"high","netns":42,"backend":"legacy",
            "table":"nat","chains":["KUBE-SVC-A","KUBE-SVC-B"],"owner":"kube-proxy",
            "actors":["calico-node"],"events":[1,2],"summary":"x"}"#,
    )
    .unwrap();
    let m = Meta::from_json(&v);
    let mut f = StreamFilter::default();
    f.filter.chain = Some(Filter::chain_glob("KUBE-SVC-B").unwrap());
    f.filter.actor = Some("calico-node".into());
    f.filter.netns = Some(42);
    f.types = vec!["foreign_delete".into()];
    assert!(f.matches(&m, Stream::Incidents));
    f.filter.actor = Some("kubelet".into());
    assert!(!f.matches(&m, Stream::Incidents));
}

#[tokio::test]
async fn incidents_that_cannot_be_read_say_why_in_the_words_they_had() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gone.db");
    let hub = Arc::new(Hub::new(Metrics::new(None, None), Some(path.clone())));
    let e = hub.incidents_since(None).await.unwrap_err();
    assert!(matches!(e, IncidentsError::Store(_)), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "no record at {} (observer run writes it; pass --record PATH)",
            path.display()
        )
    );
    let task = tokio::spawn(std::future::pending::<()>());
    task.abort();
    let join = task.await.unwrap_err();
    let text = join.to_string();
    assert!(text.ends_with("was cancelled"), "{text}");
    assert_eq!(IncidentsError::from(join).to_string(), text);
}

/// The record lacks changes 3..=5 (the disk was full): a client caught up from it is told so
/// where they would have been, once, and gets every change the record and memory hold.
#[tokio::test]
async fn a_client_caught_up_from_the_record_is_told_of_its_holes() {
    let (_dir, path) = record_of(&[1, 2, 6, 7]);
    let now = crate::timestamp::Timestamp::now();
    let gap = store::RecordGap {
        first_seq: Some(3),
        last_seq: Some(5),
        first_time: now,
        last_time: now,
        changes: 3,
        incidents: 0,
        reason: "disk full".into(),
    };
    store::gaps::insert_gap(&store::open_rw(&path).unwrap(), &gap).unwrap();
    let hub = Arc::new(Hub::new(Metrics::new(None, None), Some(path)));
    hub.publish(Stream::Changes, ev(8));
    let shown = |events: &[Arc<Event>]| -> Vec<String> {
        events
            .iter()
            .map(|e| match e.id {
                Some(id) => id.to_string(),
                None => {
                    let v: Value = serde_json::from_str(&e.json).unwrap();
                    assert_eq!(v["state"], "gap", "{v}");
                    assert_eq!(v["record_gap"]["first_seq"], 3, "{v}");
                    assert!(
                        v["message"]
                            .as_str()
                            .unwrap()
                            .starts_with("3 changes between "),
                        "{v}"
                    );
                    "gap".into()
                }
            })
            .collect()
    };
    let (back, _rx) = hub.attach(Stream::Changes, Some(0)).await;
    assert_eq!(shown(&back.events), ["1", "2", "gap", "6", "7", "8"]);
    // Resumed before the hole, the client is told; after it, not again.
    assert_eq!(
        shown(&hub.since(Stream::Changes, 2).await.events),
        ["gap", "6", "7", "8"]
    );
    assert_eq!(
        shown(&hub.since(Stream::Changes, 6).await.events),
        ["7", "8"]
    );
}
