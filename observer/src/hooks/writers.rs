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

use tokio::sync::Notify;

use crate::attribution::KernelProcess;
use crate::attribution::{self, ProcessInfo};
use crate::ruleset::FlushEvidence;

use super::nlattr::{batch_table, flush_evidence, set_flush_evidence, NfnlSendEvent};

/// The longest a NEWGEN waits for its writer's record when it arrives first. The wait
/// normally ends much sooner, exactly: the writer's record enters the ring buffer before the
/// kernel sends the NEWGEN, so once the ring buffer's reader has found the ring empty after the
/// NEWGEN came, a record not found does not exist. This bound only matters while that reader
/// cannot run (it waits for room in a busy engine's queue).
pub const NEWGEN_WAIT: Duration = Duration::from_secs(1);
/// Writers remembered (per thread and namespace); the oldest go first.
pub const CACHE_ENTRIES: usize = 4096;

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

    /// Wait until every record the kernel wrote before `since` is in this cache (the ring
    /// buffer's reader read the ring empty after it), for at most `wait`; returns whether it is.
    pub async fn caught_up(&self, since: Instant, wait: Duration) -> bool {
        self.wait_for(since, wait, |_| None::<()>).await;
        self.drained_since(since)
    }

    /// Try `look` (told whether a wait came before) until it finds something, waking the ring
    /// buffer's reader between tries; give up when a read of the ring that began after `since`
    /// found it empty and `look` still finds nothing (what it looks for is not coming), or
    /// after `wait`.
    async fn wait_for<T>(
        &self,
        since: Instant,
        wait: Duration,
        mut look: impl FnMut(bool) -> Option<T>,
    ) -> Option<T> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut waited = false;
        loop {
            let notified = self.arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // Checked before looking: a drain that began after `since` and found nothing means
            // the record, if it exists, is already in the cache.
            let drained = self.drained_since(since);
            if let Some(found) = look(waited) {
                return Some(found);
            }
            if drained {
                return None;
            }
            self.drain_wanted.notify_one();
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
            waited = true;
        }
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
        let exact = self.gens_hooked.load(Ordering::Relaxed);
        let own = self
            .wait_for(Instant::now(), wait, |waited| {
                if exact {
                    let p = self.take_gen(netns, genid)?;
                    self.stats.exact.fetch_add(1, Ordering::Relaxed);
                    return Some(p);
                }
                let Some((p, true)) = self.take(netns, tid, comm) else {
                    return None;
                };
                let counter = if waited {
                    &self.stats.waited
                } else {
                    &self.stats.hits
                };
                counter.fetch_add(1, Ordering::Relaxed);
                Some(p)
            })
            .await;
        if own.is_some() {
            return own;
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
    // One writer (or none): all the changes are its, where they are (a re-read of a 110,000
    // chain ruleset is 40 MB of changes, not to be copied).
    if distinct.len() <= 1 {
        let owner = distinct.first().map(|w| w.process.clone());
        return vec![(owner, changes)];
    }
    let mut groups: Vec<(Option<KernelProcess>, Vec<crate::ruleset::Change>)> = Vec::new();
    for c in changes {
        let in_table: Vec<&Unmatched> = writers
            .iter()
            .filter(|w| {
                w.table.as_ref().is_some_and(|(f, t)| {
                    crate::ruleset::Family::from_nfproto(*f) == c.family && *t == c.table
                })
            })
            .collect();
        let owner = match in_table.first() {
            Some(first) if in_table.iter().all(|w| same(&w.process, &first.process)) => {
                Some(&first.process)
            }
            _ => None,
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
mod tests;
