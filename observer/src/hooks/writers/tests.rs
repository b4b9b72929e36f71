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

/// A batch as nft sends it: batch begin, then one NEWCHAIN in `table` (family ip).
fn batch_head(table: &str) -> Vec<u8> {
    let mut v = Vec::new();
    let msg = |v: &mut Vec<u8>, ty: u16, family: u8, attrs: &[u8]| {
        let len = (16 + 4 + attrs.len()) as u32;
        v.extend_from_slice(&len.to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&[0; 10]);
        v.extend_from_slice(&[family, 0, 0, 10]);
        v.extend_from_slice(attrs);
    };
    msg(&mut v, 16, 0, &[]);
    let mut name = table.as_bytes().to_vec();
    name.push(0);
    let mut attr = ((4 + name.len()) as u16).to_ne_bytes().to_vec();
    attr.extend_from_slice(&1u16.to_ne_bytes());
    attr.extend_from_slice(&name);
    while !attr.len().is_multiple_of(4) {
        attr.push(0);
    }
    msg(&mut v, (10 << 8) | 3, 2, &attr);
    v
}

/// A batch of `DELRULE`s: each (chain, handle), either may be absent.
fn delrules(rules: &[(Option<&str>, Option<u64>)]) -> Vec<u8> {
    let mut v = Vec::new();
    let msg = |v: &mut Vec<u8>, ty: u16, attrs: &[u8]| {
        let len = (16 + 4 + attrs.len()) as u32;
        v.extend_from_slice(&len.to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&[0; 10]);
        v.extend_from_slice(&[1, 0, 0, 10]);
        v.extend_from_slice(attrs);
    };
    msg(&mut v, 16, &[]);
    for (chain, handle) in rules {
        let mut attrs = Vec::new();
        netlink::push_attr(&mut attrs, 1, b"filter\0");
        if let Some(c) = chain {
            netlink::push_attr(&mut attrs, NFTA_RULE_CHAIN, format!("{c}\0").as_bytes());
        }
        if let Some(h) = handle {
            netlink::push_attr(&mut attrs, NFTA_RULE_HANDLE, &h.to_be_bytes());
        }
        msg(&mut v, NFT_DELRULE, &attrs);
    }
    v
}

#[test]
fn a_batch_says_whether_it_flushes_or_deletes_single_rules() {
    use FlushEvidence::*;
    assert_eq!(
        flush_evidence(&delrules(&[(Some("input"), None)])),
        Flush(vec!["input".into()])
    );
    assert_eq!(flush_evidence(&delrules(&[(None, None)])), Flush(vec![]));
    assert_eq!(
        flush_evidence(&delrules(&[(Some("input"), Some(4))])),
        Delete
    );
    assert_eq!(
        flush_evidence(&delrules(&[(Some("a"), Some(4)), (Some("b"), None)])),
        Flush(vec!["b".into()])
    );
    assert_eq!(flush_evidence(&batch_head("filter")), Unknown);
    // A head cut anywhere says nothing it did not see, and never panics.
    let full = delrules(&[(Some("input"), Some(4))]);
    for n in 0..full.len() {
        assert!(
            matches!(flush_evidence(&full[..n]), Unknown | Delete),
            "cut at {n}"
        );
    }
}

#[test]
fn a_batch_says_whether_it_flushes_a_set_or_deletes_elements() {
    use FlushEvidence::*;
    let batch = |elements: bool| {
        let mut v = Vec::new();
        let mut attrs = Vec::new();
        netlink::push_attr(&mut attrs, 1, b"f2b-table\0");
        netlink::push_attr(&mut attrs, NFTA_SET_ELEM_LIST_SET, b"addr-set-sshd\0");
        if elements {
            let mut elem = Vec::new();
            netlink::push_attr(&mut elem, 1, &[192, 0, 2, 7]);
            netlink::push_attr(&mut attrs, NFTA_SET_ELEM_LIST_ELEMENTS, &elem);
        }
        let len = 16 + 4 + attrs.len();
        v.extend_from_slice(&(len as u32).to_ne_bytes());
        v.extend_from_slice(&NFT_DELSETELEM.to_ne_bytes());
        v.extend_from_slice(&[0; 10]);
        v.extend_from_slice(&[1, 0, 0, 10]);
        v.extend_from_slice(&attrs);
        v
    };
    assert_eq!(
        set_flush_evidence(&batch(false)),
        Flush(vec!["addr-set-sshd".into()])
    );
    assert_eq!(set_flush_evidence(&batch(true)), Delete);
    // Rule deletes say nothing about sets, and the other way round.
    assert_eq!(
        set_flush_evidence(&delrules(&[(Some("input"), None)])),
        Unknown
    );
    assert_eq!(flush_evidence(&batch(false)), Unknown);
}

#[test]
fn the_table_of_a_batch_is_read_from_its_head() {
    assert_eq!(
        batch_table(&batch_head("filter")),
        Some((2, "filter".into()))
    );
    // Cut anywhere: never a panic, and no name made up from half an attribute.
    let head = batch_head("filter");
    for n in 0..head.len() {
        let t = batch_table(&head[..n]);
        assert!(t.is_none() || t == Some((2, "filter".into())), "{n}: {t:?}");
    }
    assert_eq!(batch_table(&[0xff; 64]), None);
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
