use observer_common::nfnl::NFNL_SUBSYS_NFTABLES;

use super::*;

fn send(netns: u32, tid: u32, comm: &str, parent: &str) -> NfnlSendEvent {
    NfnlSendEvent {
        process: KernelProcess {
            tgid: tid,
            tid,
            uid: 0,
            comm: comm.into(),
            ancestors: vec![crate::attribution::KernelAncestor {
                tgid: 1,
                comm: parent.into(),
            }],
            netns,
            cgroup_id: 9,
            top_reached: true,
        },
        sock_netns: netns,
        subsys: NFNL_SUBSYS_NFTABLES,
        at_exit: false,
        ret: 0,
        len: 76,
        head: vec![],
        ktime_ns: 1,
    }
}

#[tokio::test]
async fn a_record_that_came_first_is_used() {
    let c = WriterCache::default();
    c.insert(&send(5, 100, "nft", "kube-proxy"));
    let p = c.writer(5, 1, 100, "nft", NEWGEN_WAIT).await.unwrap();
    assert_eq!(p.ancestors[0].comm, "kube-proxy");
    assert_eq!(c.stats.hits.load(Ordering::Relaxed), 1);
    // Another namespace, another thread, another command: not this writer.
    assert!(c.writer(6, 1, 100, "nft", Duration::ZERO).await.is_none());
    assert!(c.writer(5, 1, 101, "nft", Duration::ZERO).await.is_none());
    assert!(c.writer(5, 1, 100, "bash", Duration::ZERO).await.is_none());
}

#[tokio::test]
async fn a_generation_that_came_first_waits_for_its_record() {
    let c = std::sync::Arc::new(WriterCache::default());
    let c2 = c.clone();
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2)).await;
        c2.insert(&send(5, 100, "nft", "kube-proxy"));
    });
    let p = c
        .writer(5, 1, 100, "nft", Duration::from_secs(5))
        .await
        .unwrap();
    late.await.unwrap();
    assert_eq!(p.ancestors[0].comm, "kube-proxy");
    assert_eq!(c.stats.waited.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn a_newer_record_wins_over_a_used_one() {
    let c = std::sync::Arc::new(WriterCache::default());
    c.insert(&send(5, 100, "nft", "first"));
    assert_eq!(
        c.writer(5, 1, 100, "nft", NEWGEN_WAIT)
            .await
            .unwrap()
            .ancestors[0]
            .comm,
        "first"
    );
    // The second generation of the same thread: its record comes a moment later.
    let c2 = c.clone();
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2)).await;
        c2.insert(&send(5, 100, "nft", "second"));
    });
    let p = c
        .writer(5, 1, 100, "nft", Duration::from_secs(5))
        .await
        .unwrap();
    late.await.unwrap();
    assert_eq!(p.ancestors[0].comm, "second");
    // With no newer record, the used one is the best there is.
    let p = c.writer(5, 1, 100, "nft", Duration::ZERO).await.unwrap();
    assert_eq!(p.ancestors[0].comm, "second");
}

#[tokio::test]
async fn the_cache_is_bounded() {
    let c = WriterCache::default();
    for tid in 0..(CACHE_ENTRIES as u32 + 10) {
        c.insert(&send(1, tid, "nft", "x"));
    }
    assert_eq!(c.inner.lock().unwrap().entries.len(), CACHE_ENTRIES);
    // The oldest went first.
    assert!(c.writer(1, 1, 0, "nft", Duration::ZERO).await.is_none());
    assert!(c
        .writer(1, 1, CACHE_ENTRIES as u32 + 9, "nft", Duration::ZERO)
        .await
        .is_some());
}

#[tokio::test]
async fn a_generation_record_joins_exactly_by_its_id() {
    let c = std::sync::Arc::new(WriterCache::default());
    c.set_gens_hooked(true);
    // Two generations of the same thread: a thread id join would give both to the newest
    // batch record; the generation records say which writer made which.
    c.insert(&send(5, 100, "nft", "first"));
    c.insert_gen(5, 41, send(5, 100, "nft", "first").process);
    c.insert(&send(5, 100, "nft", "second"));
    c.insert_gen(5, 42, send(5, 100, "nft", "second").process);
    let p = c.writer(5, 41, 100, "nft", Duration::ZERO).await.unwrap();
    assert_eq!(p.ancestors[0].comm, "first");
    let p = c.writer(5, 42, 100, "nft", Duration::ZERO).await.unwrap();
    assert_eq!(p.ancestors[0].comm, "second");
    assert_eq!(c.stats.exact.load(Ordering::Relaxed), 2);
    // Another namespace's generation 42 is not this one.
    assert!(c.writer(6, 42, 100, "nft", Duration::ZERO).await.is_none());
    // Its batch counts as matched: nothing is left for a recovery to credit.
    assert!(c.take_unmatched(5).is_empty());
    // A generation record that comes late is waited for, and wins over the thread's batch.
    let c2 = c.clone();
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2)).await;
        c2.insert_gen(5, 43, send(5, 100, "nft", "third").process);
    });
    let p = c
        .writer(5, 43, 100, "nft", Duration::from_secs(5))
        .await
        .unwrap();
    late.await.unwrap();
    assert_eq!(p.ancestors[0].comm, "third");
    // A lost generation record: the thread's batch, after the wait.
    let p = c.writer(5, 44, 100, "nft", Duration::from_millis(2)).await;
    assert_eq!(p.unwrap().ancestors[0].comm, "second");
}

#[tokio::test]
async fn without_a_record_the_wait_is_bounded() {
    let c = WriterCache::default();
    let start = std::time::Instant::now();
    assert!(c
        .writer(1, 1, 1, "nft", Duration::from_millis(5))
        .await
        .is_none());
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(c.stats.misses.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn a_ring_read_empty_after_the_generation_ends_the_wait() {
    let c = std::sync::Arc::new(WriterCache::default());
    c.set_reader_live(true);
    // The reader, asked to read, finds the ring empty: the record does not exist.
    let c2 = c.clone();
    let reader = tokio::spawn(async move {
        c2.drain_wanted().await;
        c2.drained(Instant::now());
    });
    let start = Instant::now();
    assert!(c
        .writer(5, 1, 100, "nft", Duration::from_secs(60))
        .await
        .is_none());
    reader.await.unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "the wait ran to its bound: {:?}",
        start.elapsed()
    );
    assert_eq!(c.stats.misses.load(Ordering::Relaxed), 1);
    // A drain from before the generation came says nothing about its record: it is waited
    // for, and found when it comes.
    c.drained(Instant::now());
    let c3 = c.clone();
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(5)).await;
        c3.insert(&send(5, 101, "nft", "late"));
    });
    let p = c.writer(5, 2, 101, "nft", Duration::from_secs(60)).await;
    late.await.unwrap();
    assert_eq!(p.unwrap().ancestors[0].comm, "late");
}

#[test]
fn recovered_changes_go_to_the_writer_of_their_table() {
    use crate::ruleset::{Change, Family, Op};
    let writer = |tid: u32, comm: &str, table: &str| Unmatched {
        process: send(1, tid, comm, "sh").process,
        table: Some((2, table.into())),
    };
    let c = |table: &str| Change::new(Op::ChainCreate, Family::Ip, table).chain("x");
    // One writer: everything is its own, whatever the table.
    let g = attribute_recovered(vec![c("a"), c("b")], &[writer(7, "nft", "a")]);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].0.as_ref().map(|p| p.tid), Some(7));
    assert_eq!(g[0].1.len(), 2);
    // Several: by table; a table no single writer wrote goes to nobody.
    let writers = [
        writer(7, "nft", "a"),
        writer(8, "iptables-nft-re", "b"),
        writer(9, "nft", "b"),
    ];
    let g = attribute_recovered(vec![c("a"), c("b"), c("a"), c("z")], &writers);
    let tids: Vec<(Option<u32>, usize)> = g
        .iter()
        .map(|(p, l)| (p.as_ref().map(|p| p.tid), l.len()))
        .collect();
    assert_eq!(tids, [(Some(7), 2), (None, 2)]);
    // Nobody seen writing: nobody named.
    let g = attribute_recovered(vec![c("a")], &[]);
    assert!(g[0].0.is_none());
}

#[test]
fn only_writers_since_the_last_matched_generation_are_unmatched() {
    let cache = WriterCache::default();
    cache.insert(&send(5, 10, "nft", "a"));
    // A generation of thread 10 arrived: its writer is matched.
    assert!(cache.take(5, 10, "nft").is_some());
    cache.insert(&send(5, 11, "nft", "b"));
    cache.insert(&send(6, 12, "nft", "c"));
    let lost = cache.take_unmatched(5);
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].process.tid, 11);
    // Taken once.
    assert!(cache.take_unmatched(5).is_empty());
    assert_eq!(cache.take_unmatched(6).len(), 1);
}
