//! nfnetlink writers captured in the kernel, and their use for nftables attribution.
//!
//! The `sendmsg`/`sendto` programs report every nftables batch with its writer at syscall entry.
//! The batch's notifications arrive on another channel (the namespace's netlink subscription) and
//! end with NEWGEN, which names the writer's thread. [`WriterCache`] joins the two: the ring-buffer
//! reader inserts `(socket netns, tid) → writer`, and the netlink reader looks the generation's
//! thread up there instead of in `/proc`, where a short-lived `iptables-nft-restore` is usually
//! gone. A NEWGEN that overtakes its record waits for it, a few milliseconds at most; after that
//! the reader falls back to `/proc`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use observer_common::nfnl::{NfnlSend, NFNL_SUBSYS_IPSET, NFNL_SUBSYS_NFTABLES, PHASE_EXIT};
use tokio::sync::Notify;

use super::decode::KernelProcess;
use crate::attribution::{self, ProcessInfo};

/// How long a NEWGEN waits for its writer's record when it arrives first.
pub const NEWGEN_WAIT: Duration = Duration::from_millis(10);
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

struct Entry {
    process: KernelProcess,
    /// Not yet matched with a generation.
    fresh: bool,
    stamp: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<(u32, u32), Entry>,
    next_stamp: u64,
}

/// Counters of how nftables generations were attributed.
#[derive(Debug, Default)]
pub struct CacheStats {
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
    pub stats: CacheStats,
}

impl WriterCache {
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
        Some((entry.process.clone(), fresh))
    }

    /// The writer of the nftables generation written by thread `tid` in namespace `netns`,
    /// waiting up to `wait` for a record that has not arrived yet. A record already matched with an
    /// earlier generation of the same thread is used only when no newer one comes.
    pub async fn writer(
        &self,
        netns: u32,
        tid: u32,
        comm: &str,
        wait: Duration,
    ) -> Option<KernelProcess> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut waited = false;
        loop {
            let notified = self.arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let found = self.take(netns, tid, comm);
            if let Some((p, true)) = found {
                let counter = if waited {
                    &self.stats.waited
                } else {
                    &self.stats.hits
                };
                counter.fetch_add(1, Ordering::Relaxed);
                return Some(p);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return match found {
                    Some((p, _)) => {
                        self.stats.hits.fetch_add(1, Ordering::Relaxed);
                        Some(p)
                    }
                    None => {
                        self.stats.misses.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                };
            }
            waited = true;
        }
    }
}

/// Attribution of an nftables generation: from the kernel's record when there is one, else from
/// `/proc` (which names only live writers).
pub async fn nft_writer(
    writers: Option<&WriterCache>,
    netns: u32,
    tid: u32,
    comm: &str,
) -> ProcessInfo {
    if let Some(w) = writers {
        if tid != 0 {
            if let Some(p) = w.writer(netns, tid, comm, NEWGEN_WAIT).await {
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
                ancestors: vec![super::super::decode::Ancestor {
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
        let p = c.writer(5, 100, "nft", NEWGEN_WAIT).await.unwrap();
        assert_eq!(p.ancestors[0].comm, "kube-proxy");
        assert_eq!(c.stats.hits.load(Ordering::Relaxed), 1);
        // Another namespace, another thread, another command: not this writer.
        assert!(c.writer(6, 100, "nft", Duration::ZERO).await.is_none());
        assert!(c.writer(5, 101, "nft", Duration::ZERO).await.is_none());
        assert!(c.writer(5, 100, "bash", Duration::ZERO).await.is_none());
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
            .writer(5, 100, "nft", Duration::from_secs(5))
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
            c.writer(5, 100, "nft", NEWGEN_WAIT)
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
            .writer(5, 100, "nft", Duration::from_secs(5))
            .await
            .unwrap();
        late.await.unwrap();
        assert_eq!(p.ancestors[0].comm, "second");
        // With no newer record, the used one is the best there is.
        let p = c.writer(5, 100, "nft", Duration::ZERO).await.unwrap();
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
        assert!(c.writer(1, 0, "nft", Duration::ZERO).await.is_none());
        assert!(c
            .writer(1, CACHE_ENTRIES as u32 + 9, "nft", Duration::ZERO)
            .await
            .is_some());
    }

    #[tokio::test]
    async fn without_a_record_the_wait_is_bounded() {
        let c = WriterCache::default();
        let start = std::time::Instant::now();
        assert!(c
            .writer(1, 1, "nft", Duration::from_millis(5))
            .await
            .is_none());
        assert!(start.elapsed() < Duration::from_secs(1));
        assert_eq!(c.stats.misses.load(Ordering::Relaxed), 1);
    }
}
