//! nfnetlink writers captured in the kernel, and their use for nftables attribution.
//!
//! The `sendmsg`/`sendto` programs report every nftables batch with its writer at syscall entry.
//! The batch's notifications arrive on another channel (the namespace's netlink subscription) and
//! end with NEWGEN, which names the writer's thread. [`WriterCache`] joins the two: the ring-buffer
//! reader inserts `(socket netns, tid) → writer`, and the netlink reader looks the generation's
//! thread up there instead of in `/proc`, where a short-lived `iptables-nft-restore` is usually
//! gone. A NEWGEN that overtakes its record waits for it, a few milliseconds at most; after that
//! the reader falls back to `/proc`.
//!
//! On kprobe and fentry kernels the join is exact: the kernel also reports each committed
//! generation (`(netns, generation id) → writer`, from inside the commit), and the netlink reader
//! looks the NEWGEN's own generation id up first. The thread id join stays for the tracepoint
//! backend and for a generation whose record was lost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use observer_common::nfnl::{NfnlSend, NFNL_SUBSYS_IPSET, NFNL_SUBSYS_NFTABLES, PHASE_EXIT};
use tokio::sync::Notify;

use crate::attribution::KernelProcess;
use crate::attribution::{self, ProcessInfo};
use crate::nftables::nla;
use crate::ruleset::FlushEvidence;

/// The longest a NEWGEN waits for its writer's record when it arrives first. The wait
/// normally ends much sooner, exactly: the writer's record enters the ring buffer before the
/// kernel sends the NEWGEN, so once the ring buffer's reader has found the ring empty after the
/// NEWGEN came, a record not found does not exist. This bound only matters while that reader
/// cannot run (it waits for room in a busy engine's queue).
pub const NEWGEN_WAIT: Duration = Duration::from_secs(1);
/// Writers remembered (per thread and namespace); the oldest go first.
pub const CACHE_ENTRIES: usize = 4096;

/// A ruleset-changing nfnetlink request, as the kernel saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfnlSendEvent {
    pub process: KernelProcess,
    /// Namespace of the socket (where the change lands); 0 when unknown.
    pub sock_netns: u32,
    pub subsys: u16,
    /// True when reported at syscall exit (the request has been applied).
    pub at_exit: bool,
    /// The syscall's return at exit (bytes sent or a negative errno).
    pub ret: i64,
    /// Length of the request.
    pub len: u32,
    /// The start of the request.
    pub head: Vec<u8>,
    pub ktime_ns: u64,
}

impl NfnlSendEvent {
    pub(crate) fn from_raw(raw: &NfnlSend, process: KernelProcess, ktime_ns: u64) -> Self {
        let captured = (raw.captured as usize).min(raw.head.len());
        NfnlSendEvent {
            process,
            sock_netns: raw.sock_netns,
            subsys: raw.subsys as u16,
            at_exit: raw.phase == PHASE_EXIT,
            ret: raw.ret,
            len: raw.len,
            head: raw.head[..captured].to_vec(),
            ktime_ns,
        }
    }

    pub fn is_nftables(&self) -> bool {
        self.subsys == NFNL_SUBSYS_NFTABLES
    }

    pub fn is_ipset(&self) -> bool {
        self.subsys == NFNL_SUBSYS_IPSET
    }

    /// The namespace the request changed: the socket's, else the writer's.
    pub fn netns(&self) -> u32 {
        if self.sock_netns != 0 {
            self.sock_netns
        } else {
            self.process.netns
        }
    }
}

/// `NFT_MSG_DELRULE` in the nftables subsystem.
const NFT_DELRULE: u16 = (NFNL_SUBSYS_NFTABLES << 8) | 8;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_HANDLE: u16 = 3;
/// `NFT_MSG_DELSETELEM` in the nftables subsystem.
const NFT_DELSETELEM: u16 = (NFNL_SUBSYS_NFTABLES << 8) | 14;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;

/// What the rule deletes of an nftables batch asked for, from the start of the request: a
/// `DELRULE` without a handle flushes its chain (`nft flush chain`), or every chain of its table
/// without a chain (`nft flush table`); with a handle it deletes that one rule. `Unknown` when the
/// captured start holds no `DELRULE` (a large batch's deletes may lie beyond it).
pub fn flush_evidence(head: &[u8]) -> FlushEvidence {
    delete_evidence(head, NFT_DELRULE, NFTA_RULE_CHAIN, NFTA_RULE_HANDLE)
}

/// The same for set elements: a `DELSETELEM` without elements flushes its set (`nft flush
/// set`); with elements it deletes those (`nft delete element`), even when they were the last.
pub fn set_flush_evidence(head: &[u8]) -> FlushEvidence {
    delete_evidence(
        head,
        NFT_DELSETELEM,
        NFTA_SET_ELEM_LIST_SET,
        NFTA_SET_ELEM_LIST_ELEMENTS,
    )
}

/// Messages of `msg_type` naming their container (chain, set) in `name_attr`: with `one_attr`
/// (a rule handle, an element list) they delete single objects, without it they flush the
/// container, or every container of the table when it is not named either.
fn delete_evidence(head: &[u8], msg_type: u16, name_attr: u16, one_attr: u16) -> FlushEvidence {
    let mut flushed: Vec<String> = Vec::new();
    let (mut flush_all, mut deletes) = (false, false);
    for msg in nla::messages(head).map_while(Result::ok) {
        if msg.msg_type != msg_type {
            continue;
        }
        let Some(list) = msg
            .payload
            .get(nla::NFGENMSG_LEN..)
            .and_then(|a| nla::attrs(a).ok())
        else {
            continue;
        };
        if nla::find(&list, one_attr).is_some() {
            deletes = true;
        } else {
            match nla::find(&list, name_attr) {
                Some(c) => flushed.push(nla::string(c.value)),
                None => flush_all = true,
            }
        }
    }
    if flush_all {
        FlushEvidence::Flush(Vec::new())
    } else if !flushed.is_empty() {
        FlushEvidence::Flush(flushed)
    } else if deletes {
        FlushEvidence::Delete
    } else {
        FlushEvidence::Unknown
    }
}

/// The table of the first object of an nftables batch (family, name), from the start of the
/// request: the batch-begin message, then the first object's message, whose attribute 1 is the
/// table's name for tables, chains, rules, sets and set elements alike.
pub fn batch_table(head: &[u8]) -> Option<(u8, String)> {
    use crate::nftables::nla::{NFGENMSG_LEN, NLMSG_HDRLEN};
    let first = u32::from_ne_bytes(head.get(..4)?.try_into().ok()?) as usize;
    let msg = head.get((first + 3) & !3..)?;
    let len = u32::from_ne_bytes(msg.get(..4)?.try_into().ok()?) as usize;
    let ty = u16::from_ne_bytes(msg.get(4..6)?.try_into().ok()?);
    if ty >> 8 != NFNL_SUBSYS_NFTABLES || len < NLMSG_HDRLEN + NFGENMSG_LEN {
        return None;
    }
    let family = *msg.get(NLMSG_HDRLEN)?;
    let attrs = msg.get(NLMSG_HDRLEN + NFGENMSG_LEN..len.min(msg.len()))?;
    let name = crate::ipset::lenient_attrs(attrs)
        .into_iter()
        .find(|a| a.0 == 1)
        .map(|a| crate::nftables::nla::string(a.2))?;
    Some((family, name))
}

struct Entry {
    process: KernelProcess,
    /// The table the batch's first object is in.
    table: Option<(u8, String)>,
    /// Whether the batch asked for flushes or for deletes of single rules.
    evidence: FlushEvidence,
    /// The same for set elements.
    set_evidence: FlushEvidence,
    /// Not yet matched with a generation.
    fresh: bool,
    stamp: u64,
}

struct Inner {
    entries: HashMap<(u32, u32), Entry>,
    /// `(netns, generation id) → writer`, from the kernel's generation hook.
    gens: lru::LruCache<(u32, u32), KernelProcess>,
    next_stamp: u64,
    /// Per namespace, the stamp of the newest writer matched with a generation: writers older
    /// than it that never matched sent batches that changed nothing (or failed).
    matched: HashMap<u32, u64>,
    /// When the ring buffer's reader last began a read that found the ring empty.
    drained_at: Option<Instant>,
}

impl Default for Inner {
    fn default() -> Inner {
        Inner {
            entries: HashMap::new(),
            gens: lru::LruCache::new(
                std::num::NonZeroUsize::new(CACHE_ENTRIES).unwrap_or(std::num::NonZeroUsize::MIN),
            ),
            next_stamp: 0,
            matched: HashMap::new(),
            drained_at: None,
        }
    }
}

/// A writer whose generation's notifications were lost.
#[derive(Debug, Clone)]
pub struct Unmatched {
    pub process: KernelProcess,
    /// The table of its batch's first object.
    pub table: Option<(u8, String)>,
}

/// Counters of how nftables generations were attributed.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Joined by generation id (kprobe, fentry).
    pub exact: AtomicU64,
    /// The writer's record was there when NEWGEN was read.
    pub hits: AtomicU64,
    /// NEWGEN arrived first and its record came within the wait.
    pub waited: AtomicU64,
    /// No record within the wait: attributed from `/proc`.
    pub misses: AtomicU64,
}

/// `(socket netns, tid) → writer`, bounded, shared by the ring-buffer reader and every
/// namespace's netlink reader.
#[derive(Default)]
pub struct WriterCache {
    inner: Mutex<Inner>,
    arrived: Notify,
    /// A NEWGEN waits: the ring buffer's reader should read the ring now, even if the kernel
    /// has not woken it.
    drain_wanted: Notify,
    /// A ring buffer reader runs and says when it found the ring empty.
    reader_live: std::sync::atomic::AtomicBool,
    pub stats: CacheStats,
    /// The kernel reports generations: a NEWGEN waits for its own record.
    gens_hooked: std::sync::atomic::AtomicBool,
}

impl WriterCache {
    /// Say that the kernel reports each committed generation (the generation hook is attached).
    pub fn set_gens_hooked(&self, on: bool) {
        self.gens_hooked.store(on, Ordering::Relaxed);
    }

    /// Say whether a ring buffer reader runs (and reports [`WriterCache::drained`]).
    pub fn set_reader_live(&self, on: bool) {
        self.reader_live.store(on, Ordering::Relaxed);
        self.arrived.notify_waiters();
    }

    /// The ring buffer's reader found the ring empty in a read that began at `began`: every
    /// record the kernel wrote before then is in this cache.
    pub fn drained(&self, began: Instant) {
        {
            let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            if inner.drained_at.is_none_or(|d| d < began) {
                inner.drained_at = Some(began);
            }
        }
        self.arrived.notify_waiters();
    }

    /// Resolves when a NEWGEN waits for a record and the ring should be read now.
    pub async fn drain_wanted(&self) {
        self.drain_wanted.notified().await;
    }

    /// The ring buffer was read empty after `since`: nothing more is coming for what happened
    /// before it.
    fn drained_since(&self, since: Instant) -> bool {
        self.reader_live.load(Ordering::Relaxed)
            && self
                .inner
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drained_at
                .is_some_and(|d| d >= since)
    }

    /// Remember who committed generation `genid` in `netns`.
    pub fn insert_gen(&self, netns: u32, genid: u32, process: KernelProcess) {
        {
            let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            inner.gens.put((netns, genid), process);
        }
        self.arrived.notify_waiters();
    }

    /// The committer of generation `genid` in `netns`, if the kernel reported it; its batch's
    /// record (same thread) counts as matched.
    fn take_gen(&self, netns: u32, genid: u32) -> Option<KernelProcess> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let p = inner.gens.pop(&(netns, genid))?;
        if let Some(e) = inner.entries.get_mut(&(netns, p.tid)) {
            if e.fresh && e.process.tgid == p.tgid {
                e.fresh = false;
                let stamp = e.stamp;
                let m = inner.matched.entry(netns).or_default();
                *m = (*m).max(stamp);
            }
        }
        Some(p)
    }

    /// Remember the writer of an nftables batch.
    pub fn insert(&self, send: &NfnlSendEvent) {
        let key = (send.netns(), send.process.tid);
        {
            let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            if inner.entries.len() >= CACHE_ENTRIES && !inner.entries.contains_key(&key) {
                let oldest = inner
                    .entries
                    .iter()
                    .min_by_key(|(_, e)| e.stamp)
                    .map(|(k, _)| *k);
                if let Some(k) = oldest {
                    inner.entries.remove(&k);
                }
            }
            inner.next_stamp += 1;
            let stamp = inner.next_stamp;
            inner.entries.insert(
                key,
                Entry {
                    process: send.process.clone(),
                    table: batch_table(&send.head),
                    evidence: flush_evidence(&send.head),
                    set_evidence: set_flush_evidence(&send.head),
                    fresh: true,
                    stamp,
                },
            );
        }
        self.arrived.notify_waiters();
    }

    /// Take the writer of a generation if its record is here. Returns (writer, was fresh).
    fn take(&self, netns: u32, tid: u32, comm: &str) -> Option<(KernelProcess, bool)> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let entry = inner.entries.get_mut(&(netns, tid))?;
        // A recycled thread id would carry another command.
        if !comm.is_empty() && entry.process.comm != comm {
            return None;
        }
        let fresh = entry.fresh;
        entry.fresh = false;
        let (process, stamp) = (entry.process.clone(), entry.stamp);
        if fresh {
            let m = inner.matched.entry(netns).or_default();
            *m = (*m).max(stamp);
        }
        Some((process, fresh))
    }

    /// What the batch of thread `tid` in `netns` asked for: flushes, or deletes of single rules
    /// (its record stays after [`WriterCache::writer`] took the writer).
    pub fn flush_evidence(&self, netns: u32, tid: u32, comm: &str) -> FlushEvidence {
        self.evidence_of(netns, tid, comm, |e| &e.evidence)
    }

    /// What the batch asked of set elements: set flushes, or deletes of elements.
    pub fn set_flush_evidence(&self, netns: u32, tid: u32, comm: &str) -> FlushEvidence {
        self.evidence_of(netns, tid, comm, |e| &e.set_evidence)
    }

    fn evidence_of(
        &self,
        netns: u32,
        tid: u32,
        comm: &str,
        which: impl Fn(&Entry) -> &FlushEvidence,
    ) -> FlushEvidence {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match inner.entries.get(&(netns, tid)) {
            Some(e) if comm.is_empty() || e.process.comm == comm => which(e).clone(),
            _ => FlushEvidence::Unknown,
        }
    }

    /// The batch of thread `tid` in `netns` was refused: it matches no generation, and is not
    /// the author of changes found later.
    pub fn settle(&self, netns: u32, tid: u32) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = inner.entries.get_mut(&(netns, tid)) {
            e.fresh = false;
        }
    }

    /// The writers of namespace `netns` whose batches no generation has matched since the last
    /// one that did, oldest first; they count as matched from now on. Called after notifications
    /// were lost: these are the writers of what the re-read finds changed.
    pub fn take_unmatched(&self, netns: u32) -> Vec<Unmatched> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let since = inner.matched.get(&netns).copied().unwrap_or(0);
        let mut found: Vec<(u64, Unmatched)> = Vec::new();
        let mut newest = since;
        for ((ns, _), e) in inner.entries.iter_mut() {
            if *ns != netns || !e.fresh || e.stamp <= since {
                continue;
            }
            e.fresh = false;
            newest = newest.max(e.stamp);
            found.push((
                e.stamp,
                Unmatched {
                    process: e.process.clone(),
                    table: e.table.clone(),
                },
            ));
        }
        inner.matched.insert(netns, newest);
        found.sort_by_key(|(stamp, _)| *stamp);
        found.into_iter().map(|(_, u)| u).collect()
    }

    /// After the wait: a batch record already used (counted as a hit), or none (a miss).
    fn last_resort(&self, found: Option<(KernelProcess, bool)>) -> Option<KernelProcess> {
        let counter = if found.is_some() {
            &self.stats.hits
        } else {
            &self.stats.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found.map(|(p, _)| p)
    }

    /// The writer of nftables generation `genid`, written by thread `tid` in namespace `netns`,
    /// waiting for a record that has not arrived yet: the generation's own record when the
    /// kernel reports generations, else the thread's batch. A batch record already matched
    /// with an earlier generation of the same thread is used only when no newer one comes.
    ///
    /// The wait ends when the record comes, when the ring buffer's reader has read the ring
    /// empty since this call began (the record does not exist: it was lost or never written),
    /// or after `wait`.
    pub async fn writer(
        &self,
        netns: u32,
        genid: u32,
        tid: u32,
        comm: &str,
        wait: Duration,
    ) -> Option<KernelProcess> {
        let since = Instant::now();
        let deadline = tokio::time::Instant::now() + wait;
        let mut waited = false;
        let exact = self.gens_hooked.load(Ordering::Relaxed);
        loop {
            let notified = self.arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // Checked before the record: a drain that began after `since` and found nothing
            // means the record, if it exists, is already in the cache.
            let drained = self.drained_since(since);
            if exact {
                if let Some(p) = self.take_gen(netns, genid) {
                    self.stats.exact.fetch_add(1, Ordering::Relaxed);
                    return Some(p);
                }
            } else if let Some((p, true)) = self.take(netns, tid, comm) {
                let counter = if waited {
                    &self.stats.waited
                } else {
                    &self.stats.hits
                };
                counter.fetch_add(1, Ordering::Relaxed);
                return Some(p);
            }
            if drained {
                break;
            }
            self.drain_wanted.notify_one();
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
            waited = true;
        }
        // No record of its own: for a generation, the thread's batch; for a batch, one already
        // matched with an earlier generation of the thread.
        self.last_resort(self.take(netns, tid, comm))
    }
}

/// Split changes found by a re-read among the writers whose notifications were lost: all to
/// the one writer when there was one; otherwise each change goes to the only writer whose batch
/// was in the change's table, and to nobody (`None`) when that is not one writer. Groups keep
/// the changes' order.
pub fn attribute_recovered(
    changes: Vec<crate::ruleset::Change>,
    writers: &[Unmatched],
) -> Vec<(Option<KernelProcess>, Vec<crate::ruleset::Change>)> {
    let same = |a: &KernelProcess, b: &KernelProcess| a.tgid == b.tgid && a.comm == b.comm;
    let mut distinct: Vec<&Unmatched> = Vec::new();
    for w in writers {
        if !distinct.iter().any(|d| same(&d.process, &w.process)) {
            distinct.push(w);
        }
    }
    let mut groups: Vec<(Option<KernelProcess>, Vec<crate::ruleset::Change>)> = Vec::new();
    for c in changes {
        let owner = if distinct.len() == 1 {
            Some(&distinct[0].process)
        } else {
            let in_table: Vec<&Unmatched> = writers
                .iter()
                .filter(|w| {
                    w.table.as_ref().is_some_and(|(f, t)| {
                        crate::ruleset::Family::from_nfproto(*f) == c.family && *t == c.table
                    })
                })
                .collect();
            match in_table.first() {
                Some(first) if in_table.iter().all(|w| same(&w.process, &first.process)) => {
                    Some(&first.process)
                }
                _ => None,
            }
        };
        match groups.iter_mut().find(|(p, _)| match (p, owner) {
            (Some(a), Some(b)) => same(a, b),
            (None, None) => true,
            _ => false,
        }) {
            Some((_, list)) => list.push(c),
            None => groups.push((owner.cloned(), vec![c])),
        }
    }
    groups
}

/// Attribution of an nftables generation: from the kernel's record when there is one, else from
/// `/proc` (which names only live writers).
pub async fn nft_writer(
    writers: Option<&WriterCache>,
    netns: u32,
    genid: u32,
    tid: u32,
    comm: &str,
) -> ProcessInfo {
    if let Some(w) = writers {
        if tid != 0 {
            if let Some(p) = w.writer(netns, genid, tid, comm, NEWGEN_WAIT).await {
                return attribution::from_kernel(&p);
            }
        }
    }
    attribution::from_tid(tid, comm)
}

#[cfg(test)]
mod tests {
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
            nla::push_attr(&mut attrs, 1, b"filter\0");
            if let Some(c) = chain {
                nla::push_attr(&mut attrs, NFTA_RULE_CHAIN, format!("{c}\0").as_bytes());
            }
            if let Some(h) = handle {
                nla::push_attr(&mut attrs, NFTA_RULE_HANDLE, &h.to_be_bytes());
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
            nla::push_attr(&mut attrs, 1, b"f2b-table\0");
            nla::push_attr(&mut attrs, NFTA_SET_ELEM_LIST_SET, b"addr-set-sshd\0");
            if elements {
                let mut elem = Vec::new();
                nla::push_attr(&mut elem, 1, &[192, 0, 2, 7]);
                nla::push_attr(&mut attrs, NFTA_SET_ELEM_LIST_ELEMENTS, &elem);
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
}
