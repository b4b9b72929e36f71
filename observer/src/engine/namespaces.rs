//! The namespaces the engine watches: opened and subscribed when found, let go when nothing
//! holds them, and the nftables transactions their readers send.

use super::nft::SnapAsk;
use std::sync::Arc;

use crate::attribution::ProcessInfo;
use crate::forensics::model::Tables;
use crate::hooks::writers::{attribute_recovered, WriterCache};
use crate::netns::{self, NetnsHandle};
use crate::nftables::generation::GenerationBuilder;
use crate::output::line::Gap;
use crate::output::{Source, StatusLine};
use crate::ruleset::Backend;
use crate::timestamp::{boot_now_ns, Timestamp};

use super::baseline::{inventory, read_baseline};
use super::core::{lifecycle, losses};
use super::nft::{established, spawn_nft_reader};
use super::{ChangeCtx, Engine, NsMsg, Watched};

/// How long the engine waits for the ring buffer's reader to read up to a found namespace's
/// ruleset read, to name its writers. Short: the engine itself waits, and a reader held up by a
/// full engine queue cannot finish its read until the engine goes on (then the writers whose
/// records were still queued are `unknown`).
const FOUND_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

impl Engine {
    /// Start watching a namespace. `new` means it appeared while observer ran: whatever it
    /// already holds was made after start and is reported (as found, not seen live).
    pub(super) async fn watch(&mut self, handle: NetnsHandle, new: bool) {
        let inode = handle.inode;
        let Some(plan) = lifecycle::first_read(self.watched.contains_key(&inode), new) else {
            return;
        };
        let handle = Arc::new(handle);
        let file = match handle.file.try_clone() {
            Ok(f) => f,
            Err(e) => return self.warn(format!("namespace {inode}: {e}")),
        };
        let rcvbuf = self.netlink_rcvbuf;
        let legacy = plan.legacy_baseline.then_some(self.rule_limit(inode));
        let nft_cap = self.nft_rule_cap(inode);
        let began = boot_now_ns();
        let read_from = std::time::Instant::now();
        let baseline = tokio::task::spawn_blocking(move || {
            netns::run_in(&file, move || read_baseline(legacy, Some(rcvbuf), nft_cap))
        })
        .await;
        let baseline = match baseline {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => return self.warn(format!("cannot enter namespace {inode}: {e}")),
            Err(e) => return self.warn(format!("namespace {inode}: {e}")),
        };
        for p in &baseline.problems {
            tracing::warn!("namespace {inode}: {}", crate::shown::Shown(p));
        }
        let nft_counts = baseline.nft_counts;
        if let Some(h) = self.hooks.as_mut() {
            h.mark_netns_seen(inode);
        }
        self.core.baseline(
            inode,
            handle.name.clone(),
            inventory(&baseline.legacy, baseline.nft.as_ref().map(|(s, _)| s)),
        );
        if let Some(sets) = baseline.ipsets {
            self.ipsets.insert(inode, sets);
        }
        // The tables as text, rendered once for the record's first snapshot and the
        // restorer's first model, whichever want them.
        let wants = self.snapshots.is_some();
        let nft_wanted = wants && baseline.socket.is_some();
        let restoring = self.restorer.is_some();
        let mut legacy_snapshot =
            (wants || restoring).then(|| Tables::from_legacy(baseline.legacy.values()));
        let mut nft_snapshot = baseline
            .nft
            .as_ref()
            .filter(|_| nft_wanted || restoring)
            .map(|(state, _)| Tables::from_nft(state));
        if let Some(r) = self.restorer.as_mut() {
            let give = |t: &mut Option<Tables>, keep: bool| match keep {
                true => t.clone(),
                false => t.take(),
            };
            if let Some(t) = give(&mut legacy_snapshot, wants) {
                r.seed(inode, Backend::Legacy, t);
            }
            if let Some(t) = give(&mut nft_snapshot, nft_wanted) {
                r.seed(inode, Backend::Nft, t);
            }
        }
        let mut watched = Watched {
            handle: handle.clone(),
            read_at: baseline.legacy.keys().map(|k| (k.clone(), began)).collect(),
            legacy: baseline
                .legacy
                .into_iter()
                .map(|(k, t)| (k, Arc::new(t)))
                .collect(),
            nft_reader: None,
            nft_snapshot: wants.then(|| Arc::new(SnapAsk::default())),
            nft_chain_level: false,
            xt_socks: None,
            bridge: Default::default(),
            waiting: Default::default(),
            learning: false,
        };
        let mut nft_went = None;
        if let (Some(sock), Some((state, gen))) = (baseline.socket, baseline.nft) {
            if lifecycle::report_established(new, !state.tables.is_empty()) {
                // Written before the subscription opened: report what was established.
                let name = handle.name.clone();
                self.emit_found(inode, name, gen, established(&state), read_from)
                    .await;
            }
            let reader = handle.file.try_clone().and_then(|ns| {
                let writers = self.nft_writers();
                let mut builder = GenerationBuilder::new(state)
                    .with_ifnames(baseline.ifnames)
                    .with_rule_cap(nft_cap);
                if let Some(counts) = nft_counts {
                    builder = builder.at_chain_level(counts);
                }
                nft_went = builder.take_chain_level();
                let snap = watched.nft_snapshot.clone();
                let tx = self.ns_tx.clone();
                spawn_nft_reader(inode, ns, sock, builder, tx, writers, snap)
            });
            match reader {
                Ok(task) => watched.nft_reader = Some(task),
                Err(e) => tracing::warn!(
                    "namespace {inode}: nftables reader: {}",
                    crate::shown::Shown(&e.to_string())
                ),
            }
        }
        tracing::debug!(
            "watching namespace {inode} ({})",
            handle
                .name
                .as_deref()
                .unwrap_or(&handle.origin.display().to_string())
        );
        let chain_level: Vec<_> = watched
            .legacy
            .iter()
            .filter(|(_, t)| t.chain_level())
            .map(|(k, t)| (k.clone(), t.rule_count()))
            .collect();
        self.watched.insert(inode, watched);
        for (key, rules) in chain_level {
            self.note_level(inode, &key, false, Some(rules));
        }
        if let Some(rules) = nft_went {
            self.nft_chain_level(inode, rules);
        }
        self.save_ipsets(inode).await;
        if let Some(t) = legacy_snapshot {
            self.emit_snapshot(inode, Backend::Legacy, t);
        }
        if let Some(t) = nft_snapshot {
            self.emit_snapshot(inode, Backend::Nft, t);
        }
    }

    /// Report what a namespace found after its first write already holds, as changes read
    /// from its ruleset (`replayed`). Their writers are those the kernel hooks saw sending a
    /// batch there that no notification matched (none could: the namespace was not subscribed
    /// yet), split among them as a re-read after lost notifications is; `unknown` when the
    /// hooks saw none. `read_from` is when the ruleset's read began: the ring buffer is read up
    /// to it first, so the writers of what the read found are in the cache.
    async fn emit_found(
        &mut self,
        inode: u32,
        name: Option<String>,
        gen: u32,
        changes: Vec<crate::ruleset::Change>,
        read_from: std::time::Instant,
    ) {
        let writers = match self.nft_writers() {
            Some(w) => {
                if !w.caught_up(read_from, FOUND_WAIT).await {
                    tracing::debug!(
                        "namespace {inode}: the ring buffer was not read up to the ruleset's \
                         read in time; writers whose record is still queued are not named"
                    );
                }
                w.take_unmatched(inode)
            }
            None => Vec::new(),
        };
        let parts = attribute_recovered(changes, &writers);
        let several = parts.len() > 1;
        for (i, (process, changes)) in parts.into_iter().enumerate() {
            let process = process
                .map(|p| crate::attribution::from_kernel(&p))
                .unwrap_or_else(ProcessInfo::unknown);
            let txn = if several {
                format!("nft-{inode}-{gen}-found-{}", i + 1)
            } else {
                format!("nft-{inode}-{gen}")
            };
            self.emit_txn(
                ChangeCtx {
                    inode,
                    name: name.clone(),
                    backend: Backend::Nft,
                    time: Timestamp::now(),
                    txn,
                    source: Source::Netlink,
                    process,
                    replayed: true,
                    recovered: false,
                },
                changes,
            );
        }
    }

    /// The kernel's record of nftables writers, when the netlink hook is attached.
    pub(super) fn nft_writers(&self) -> Option<Arc<WriterCache>> {
        let h = self.hooks.as_ref()?;
        h.report.netlink_lost.is_none().then(|| h.writers.clone())
    }

    pub(super) fn refresh_mounts(&mut self) {
        self.mounts = netns::nsfs_mounts()
            .into_iter()
            .map(|(inode, path)| (path, inode))
            .collect();
    }

    /// Watched namespaces that no bind mount holds, observer's own aside (it lives as long as
    /// observer does): only processes keep them, and their exit is not reported.
    pub(super) fn unmounted(&self) -> Vec<u32> {
        let mounted: std::collections::HashSet<u32> = self.mounts.values().copied().collect();
        let own = netns::inode_of(std::path::Path::new("/proc/self/ns/net")).ok();
        lifecycle::unmounted(self.watched.keys().copied(), &mounted, own)
    }

    /// Whether some watched namespace is held only by processes, so that the sweep must look
    /// again later for it to go.
    pub(super) fn held_by_processes_only(&self) -> bool {
        !self.unmounted().is_empty()
    }

    /// Let go of every watched namespace that nothing holds any more (no bind mount, no
    /// process): its descriptor would keep it alive. Each check reads /proc once, and runs only
    /// when some watched namespace is not mounted: when a namespace's mount goes, and every
    /// 10 s for namespaces that only processes held (an `unshare -n` whose last process
    /// exited). A namespace whose changes are still being learned or written is let go at a
    /// later check, once they are out.
    pub(super) fn forget_gone(&mut self, why: &str) {
        for inode in lifecycle::gone(self.unmounted(), netns::held_by_processes) {
            let busy = self.watched.get(&inode).is_some_and(|w| w.unlearned() > 0);
            if busy || self.backlog.holds(inode) {
                tracing::debug!(
                    "namespace {inode} is gone ({why}); let go once its changes are out"
                );
                continue;
            }
            tracing::debug!("namespace {inode} is gone ({why})");
            if self.snapshots.is_some() {
                // Gone: the record shows it empty from now on.
                self.snapshot_in_turn(inode, Backend::Legacy, Tables::default());
                self.snapshot_in_turn(inode, Backend::Nft, Tables::default());
                if let Some(d) = self.snapshots.as_mut() {
                    d.forget(inode);
                }
            }
            self.watched.remove(&inode);
            self.count_chain_level();
            self.count_nft_chain_level();
            self.core.forget_netns(inode);
            if let Some(r) = self.restorer.as_mut() {
                r.forget(inode);
            }
            self.ipsets.remove(&inode);
            if let Some(h) = self.hooks.as_mut() {
                h.forget_netns(inode);
            }
        }
    }

    pub(super) fn on_ns(&mut self, msg: NsMsg) {
        if let NsMsg::Nft { inode, .. } | NsMsg::NftSnapshot { inode, .. } = &msg {
            if let Some(w) = self.watched.get_mut(inode).filter(|w| w.behind_a_replace()) {
                // Made after a legacy replace not learned yet: reported after it.
                w.waiting.push_back(super::legacy::Waiting::Said(msg));
                return;
            }
        }
        self.handle_ns(msg);
    }

    /// A namespace message, in its turn.
    pub(super) fn handle_ns(&mut self, msg: NsMsg) {
        match msg {
            NsMsg::Nft {
                inode,
                gen,
                process,
                changes,
                time,
                replayed,
                recovered,
                snapshot,
            } => {
                let name = self.watched.get(&inode).and_then(|w| w.handle.name.clone());
                let recovered_n = recovered.then(|| {
                    self.recovered_txns += 1;
                    self.recovered_txns
                });
                let txn = losses::nft_txn(inode, gen, recovered_n);
                self.emit_txn(
                    ChangeCtx {
                        inode,
                        name,
                        backend: Backend::Nft,
                        time,
                        txn,
                        source: Source::Netlink,
                        process: *process,
                        replayed,
                        recovered,
                    },
                    changes,
                );
                if let Some(t) = snapshot {
                    self.snapshot_in_turn(inode, Backend::Nft, *t);
                }
            }
            NsMsg::NftSnapshot { inode, tables } => {
                self.snapshot_in_turn(inode, Backend::Nft, *tables);
            }
            NsMsg::NftChainLevel { inode, rules } => self.nft_chain_level(inode, rules),
            NsMsg::Trouble { inode, message } => {
                self.emit_status(StatusLine::gap(
                    Gap::Netlink,
                    format!("namespace {inode}: {message}"),
                ));
            }
            NsMsg::Unfound(inode) => self.unseen(inode),
            NsMsg::Learned { inode, learned } => self.on_learned(inode, learned),
            NsMsg::BridgeRead { inode, read } => self.on_bridge_read(inode, read),
            NsMsg::Reread { inode, reread } => self.on_reread(inode, reread),
            // Handled by the run loop, which can wait for the namespace's first read.
            NsMsg::Found(_) => {}
        }
    }
}
