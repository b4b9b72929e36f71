//! Each namespace's nftables reader: notifications read on a thread inside the namespace,
//! grouped into transactions (generations), attributed while their writer may still be alive, and
//! the namespace read again when notifications were lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use netlink_sys::Socket;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::attribution::ProcessInfo;
use crate::forensics::model::Tables;
use crate::hooks::writers::{attribute_recovered, nft_writer, WriterCache};
use crate::netns;
use crate::nftables::{self, generation::GenerationBuilder, state::NftState};
use crate::ruleset::{self, Change};
use crate::timestamp::Timestamp;

use super::core::losses;
use super::NsMsg;

/// What a namespace's ruleset holds, as the changes that made it (for a namespace found after its
/// first write).
pub(super) fn established(state: &NftState) -> Vec<Change> {
    use crate::ruleset::{Family, Op};
    let mut out = Vec::new();
    for ((family, name), t) in &state.tables {
        let family = Family::from_nfproto(*family);
        out.push(Change::new(Op::TableCreate, family, name.clone()));
        for (set_name, set) in &t.sets {
            if !set.set.is_anonymous() {
                out.push(Change::new(Op::SetCreate, family, name.clone()).chain(set_name.clone()));
            }
        }
        for (chain_name, chain) in &t.chains {
            out.push(Change::new(Op::ChainCreate, family, name.clone()).chain(chain_name.clone()));
            for (pos, rule) in chain.rules.iter().enumerate() {
                out.push(
                    Change::new(Op::RuleAdd, family, name.clone())
                        .chain(chain_name.clone())
                        .nft_rule(rule.forms(), Some(pos), rule.fingerprint),
                );
            }
        }
    }
    out
}

/// Read a namespace's nftables notifications until the task is aborted.
pub(super) fn spawn_nft_reader(
    inode: u32,
    ns: std::fs::File,
    sock: Socket,
    builder: GenerationBuilder,
    tx: mpsc::Sender<NsMsg>,
    writers: Option<Arc<WriterCache>>,
    snap: Option<Arc<SnapAsk>>,
) -> std::io::Result<JoinHandle<()>> {
    // SAFETY: the socket owns its fd and is moved into the AsyncFd, which keeps it open until the
    // task ends.
    let fd = unsafe { AsyncFd::register(sock) }.map_err(std::io::Error::from)?;
    Ok(tokio::spawn(nft_reader(
        inode, ns, fd, builder, tx, writers, snap,
    )))
}

pub(super) async fn nft_reader(
    inode: u32,
    ns: std::fs::File,
    fd: AsyncFd<Socket>,
    builder: GenerationBuilder,
    tx: mpsc::Sender<NsMsg>,
    writers: Option<Arc<WriterCache>>,
    snap: Option<Arc<SnapAsk>>,
) {
    let why = read_notifications(inode, &ns, fd, builder, &tx, writers.as_deref(), snap).await;
    let _ = tx
        .send(NsMsg::Trouble {
            inode,
            message: why,
        })
        .await;
}

impl super::Engine {
    /// Namespace `inode`'s nftables ruleset went to chain level with `rules` rules: say so (a
    /// warning line and the log), count such namespaces for the metrics, and keep `--restore`
    /// from writing it.
    pub(super) fn nft_chain_level(&mut self, inode: u32, rules: usize) {
        let cap = self.nft_rule_cap(inode);
        let (limit, budget) = (self.rule_level_limit, self.rule_level_budget);
        let bound = if cap < limit {
            format!("--rule-level-budget {budget} (for a namespace other than the node's)")
        } else {
            format!("--rule-level-limit {limit} (per namespace)")
        };
        let message = format!(
            "the nftables ruleset of namespace {inode} has more than the {cap} rules that \
             {bound} allows ({rules} when observer saw it pass): it is held at chain level, and \
             its changes are told a chain at a time (created, deleted, flushed, rules changed; \
             no rule text, no rule-level incidents, no restore) until observer restarts"
        );
        tracing::warn!("{}", crate::shown::Shown(&message));
        self.emit_status(crate::output::StatusLine::warning(message));
        if let Some(w) = self.watched.get_mut(&inode) {
            w.nft_chain_level = true;
        }
        if let Some(r) = self.restorer.as_mut() {
            r.nft_held_at_chain_level(inode);
        }
        self.count_nft_chain_level();
        // What the reader held of its rules is free now: give it back.
        super::release_free_heap();
    }

    /// Tell the outputs how many watched namespaces' nftables rulesets are held at chain level.
    pub(super) fn count_nft_chain_level(&mut self) {
        let n = self.watched.values().filter(|w| w.nft_chain_level).count();
        self.output.nft_chain_level(n);
    }
}

/// Turn notifications into transactions until the socket fails; returns why it stopped.
pub(super) async fn read_notifications(
    inode: u32,
    ns: &std::fs::File,
    mut fd: AsyncFd<Socket>,
    mut builder: GenerationBuilder,
    tx: &mpsc::Sender<NsMsg>,
    writers: Option<&WriterCache>,
    snap: Option<Arc<SnapAsk>>,
) -> String {
    let mut buf = vec![0u8; nftables::socket::RECV_BUF_BYTES];
    loop {
        let mut guard = tokio::select! {
            g = fd.readable_mut() => match g {
                Ok(g) => g,
                Err(e) => return format!("nftables notifications stopped: {e}"),
            },
            // A snapshot asked for now: the state after every transaction sent so far.
            () = until_notified(snap.as_deref().map(|s| &s.now)) => {
                if let Some(f) = &snap {
                    f.due.store(false, Ordering::Relaxed);
                }
                let tables = Box::new(Tables::from_nft(builder.state()));
                if tx.send(NsMsg::NftSnapshot { inode, tables }).await.is_err() {
                    return "the engine stopped".into();
                }
                continue;
            }
        };
        loop {
            match nftables::recv(guard.get_inner(), &mut buf) {
                Ok(Some(n)) => {
                    let txns = builder.feed(&buf[..n]).transactions;
                    if !said_chain_level(&mut builder, inode, tx).await {
                        return "the engine stopped".into();
                    }
                    let count = txns.len();
                    for (i, mut t) in txns.into_iter().enumerate() {
                        let process = nft_writer(writers, inode, t.gen_id, t.pid, &t.comm).await;
                        // The writer's request tells a flush from the delete of an only rule.
                        // The same for a set's elements.
                        if let Some(w) = writers {
                            let evidence = w.flush_evidence(inode, t.pid, &t.comm);
                            ruleset::settle_flushes(&mut t.changes, &evidence);
                            let evidence = w.set_flush_evidence(inode, t.pid, &t.comm);
                            ruleset::settle_set_flushes(&mut t.changes, &evidence);
                        }
                        let msg = NsMsg::Nft {
                            inode,
                            gen: t.gen_id,
                            process: Box::new(process),
                            changes: t.changes,
                            time: Timestamp::now(),
                            replayed: false,
                            recovered: false,
                            // The state is the one after the last transaction of the datagram.
                            snapshot: nft_snapshot(&snap, i + 1 == count, &builder),
                        };
                        if tx.send(msg).await.is_err() {
                            return "the engine stopped".into();
                        }
                    }
                }
                Ok(None) => {
                    guard.clear_ready();
                    break;
                }
                Err(e) if e.needs_resync() => {
                    let gap = NsMsg::Trouble {
                        inode,
                        message: losses::notifications_lost(&e, Timestamp::now()),
                    };
                    if tx.send(gap).await.is_err() {
                        return "the engine stopped".into();
                    }
                    // What is still queued predates the loss: the dump holds it.
                    let stale =
                        nftables::discard_queued(guard.get_inner(), &mut buf, STALE_DATAGRAMS);
                    tracing::debug!(
                        "namespace {inode}: {stale} queued datagrams left for the dump"
                    );
                    // Re-read the ruleset: report the difference, then diff what follows
                    // against the truth.
                    let dump = match resync(ns, builder.rule_cap(), builder.chain_level()).await {
                        Ok(d) => d,
                        Err(e) => return format!("re-reading the ruleset failed: {e}"),
                    };
                    let t = builder.resync(dump);
                    if !said_chain_level(&mut builder, inode, tx).await {
                        return "the engine stopped".into();
                    }
                    if t.changes.is_empty() {
                        continue;
                    }
                    let lost = writers.map(|w| w.take_unmatched(inode)).unwrap_or_default();
                    let parts = attribute_recovered(t.changes, &lost);
                    let count = parts.len();
                    if let Some(f) = &snap {
                        f.due.store(true, Ordering::Relaxed);
                    }
                    for (i, (process, changes)) in parts.into_iter().enumerate() {
                        let process = process
                            .map(|p| crate::attribution::from_kernel(&p))
                            .unwrap_or_else(ProcessInfo::unknown);
                        let msg = NsMsg::Nft {
                            inode,
                            gen: t.gen_id,
                            process: Box::new(process),
                            changes,
                            time: Timestamp::now(),
                            replayed: false,
                            recovered: true,
                            snapshot: nft_snapshot(&snap, i + 1 == count, &builder),
                        };
                        if tx.send(msg).await.is_err() {
                            return "the engine stopped".into();
                        }
                    }
                }
                Err(e) => return format!("nftables notifications stopped: {e}"),
            }
        }
    }
}

/// Tell the engine once the ruleset went to chain level; false when the engine is gone.
async fn said_chain_level(
    builder: &mut GenerationBuilder,
    inode: u32,
    tx: &mpsc::Sender<NsMsg>,
) -> bool {
    match builder.take_chain_level() {
        Some(rules) => tx.send(NsMsg::NftChainLevel { inode, rules }).await.is_ok(),
        None => true,
    }
}

/// Dump the current namespace's ruleset as its hold needs it: counted a chain at a time when
/// it is held at chain level, or when it holds more than `cap` rules (then it goes to chain
/// level); else whole.
pub(super) fn dump_held(
    cap: Option<usize>,
    chain_level: bool,
) -> Result<nftables::socket::Dump, nftables::NftError> {
    match cap {
        _ if chain_level => nftables::dump_counting(),
        Some(cap) => match nftables::dump_within(cap) {
            Err(nftables::NftError::TooManyRules { .. }) => nftables::dump_counting(),
            other => other,
        },
        None => nftables::dump(),
    }
}

/// The engine's asks for a snapshot of a namespace's nftables tables: with the reader's next
/// transaction (`due`, after that many changes), or at once (`now`, after a gap in the record).
#[derive(Debug, Default)]
pub(super) struct SnapAsk {
    pub(super) due: AtomicBool,
    pub(super) now: tokio::sync::Notify,
}

/// Until `n` is signalled (never without one).
pub(super) async fn until_notified(n: Option<&tokio::sync::Notify>) {
    match n {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

/// The reader's tables for a snapshot, when one was asked for and `last` is the transaction
/// the state is after.
pub(super) fn nft_snapshot(
    snap: &Option<Arc<SnapAsk>>,
    last: bool,
    builder: &GenerationBuilder,
) -> Option<Box<Tables>> {
    let asked = snap.as_ref()?;
    (last && asked.due.swap(false, Ordering::Relaxed))
        .then(|| Box::new(Tables::from_nft(builder.state())))
}

/// Sleep until `at` (never returns for `None`; the caller's `select!` guards on it).
pub(super) async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The most queued datagrams dropped before a re-read (a writer that never pauses keeps the
/// queue full; the rest are fed after the dump, their generations being older are ignored).
pub(super) const STALE_DATAGRAMS: usize = 65_536;

/// Why a namespace's ruleset could not be dumped again; each says what failed in its own words.
#[derive(Debug, thiserror::Error)]
pub(super) enum ResyncError {
    /// The namespace's handle could not be duplicated for the dumping thread.
    #[error(transparent)]
    Handle(std::io::Error),
    /// The task that dumps stopped before it answered.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    /// No thread could enter the namespace, or it panicked.
    #[error(transparent)]
    Thread(std::io::Error),
    /// The kernel's dump failed.
    #[error(transparent)]
    Dump(#[from] nftables::NftError),
}

/// Dump a namespace's ruleset again after lost notifications.
pub(super) async fn resync(
    ns: &std::fs::File,
    cap: Option<usize>,
    chain_level: bool,
) -> Result<nftables::socket::Dump, ResyncError> {
    let file = ns.try_clone().map_err(ResyncError::Handle)?;
    let dump = move || dump_held(cap, chain_level);
    let dumped = tokio::task::spawn_blocking(move || netns::run_in(&file, dump))
        .await?
        .map_err(ResyncError::Thread)??;
    Ok(dumped)
}
