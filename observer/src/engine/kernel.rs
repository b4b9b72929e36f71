//! Records from the kernel hooks: who did what, in which namespace, at what boot time; the
//! namespace a record names found (or opened) before its change is read.

use std::path::PathBuf;

use crate::attribution::{self, KernelProcess};
use crate::hooks::decode::KernelEvent;
use crate::hooks::nlattr;
use crate::netns;
use crate::output::Source;
use crate::ruleset::Backend;
use crate::timestamp::Timestamp;

use super::core::lifecycle::{self, Look, NsEvent};
use super::{ChangeCtx, Engine, NsMsg};

impl Engine {
    pub(super) async fn on_kernel(&mut self, ev: KernelEvent) {
        match ev {
            KernelEvent::NetnsSeen { process, created } => {
                self.look_for(&process, NsEvent::Reported { created }).await;
            }
            // Both go to the ring reader's caches (a piece of a table is joined to its replace
            // there).
            KernelEvent::NftGen { .. } | KernelEvent::XtBlob(_) => {}
            KernelEvent::Umount { path, .. } => {
                let known = self.mounts.contains_key(&PathBuf::from(&path));
                if let Some(why) = lifecycle::umount_lets_go(&path, known) {
                    self.refresh_mounts();
                    self.forget_gone(&why);
                }
            }
            KernelEvent::XtReplace(x) => self.on_replace(x).await,
            KernelEvent::NfnlSend(s) if s.is_ipset() => self.on_ipset(s).await,
            KernelEvent::NfnlSend(_) => {}
            KernelEvent::NfnlAck(a) => {
                let refused = crate::hooks::refused::refusals(&a.data);
                self.on_refused(
                    a.netns(),
                    &a.process,
                    a.ktime_ns,
                    Source::Tracepoint,
                    refused,
                );
            }
            KernelEvent::NfnlRefused(r) => {
                let netns = if r.sock_netns != 0 {
                    r.sock_netns
                } else {
                    r.process.netns
                };
                let refused: Vec<_> = r.refusal().into_iter().collect();
                self.on_refused(netns, &r.process, r.ktime_ns, r.source.into(), refused);
            }
        }
    }

    /// Watch the namespace a record of `p` names (`p.netns`) if it is not watched yet, as
    /// [`lifecycle::look`] says; returns whether it is watched.
    pub(super) async fn look_for(&mut self, p: &KernelProcess, event: NsEvent) -> bool {
        match lifecycle::look(p.netns, self.watched.contains_key(&p.netns), event) {
            Look::Nothing => false,
            Look::Watched => true,
            Look::Find { warn } => self.find_namespace(p, warn).await,
            Look::FindWithRetries => {
                self.find_created(p).await;
                self.watched.contains_key(&p.netns)
            }
        }
    }

    /// A namespace just made (kprobe, fentry): its creator enters it (unshare) or hands it to a
    /// child (clone) a moment after the kernel reports it. Looked for at once; when it is not
    /// found yet, a task looks again a few times over about 100 ms (the engine goes on) and
    /// hands it back. A namespace nothing holds by then is gone, or is found when it is first
    /// written.
    async fn find_created(&mut self, p: &KernelProcess) {
        let pids = lifecycle::holders(p);
        let inode = p.netns;
        let look = {
            let pids = pids.clone();
            move || netns::find(inode, &pids)
        };
        if let Ok(Some(h)) = tokio::task::spawn_blocking(look).await {
            self.watch(h, true).await;
            self.refresh_mounts();
            return;
        }
        let tx = self.ns_tx.clone();
        let creator = format!("{} {}", p.comm, p.tgid);
        tokio::spawn(async move {
            for delay_ms in lifecycle::CREATED_RETRIES_MS {
                tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
                let pids = pids.clone();
                let found = tokio::task::spawn_blocking(move || netns::find(inode, &pids)).await;
                if let Ok(Some(h)) = found {
                    let _ = tx.send(NsMsg::Found(h)).await;
                    return;
                }
            }
            tracing::debug!(
                "namespace {inode} (made by {creator}) was not found: it is gone, or will be \
                 found when it is written"
            );
            let _ = tx.send(NsMsg::Unfound(inode)).await;
        });
    }

    /// Namespace `inode` could not be opened (it is gone): the kernel side reports it again
    /// when a task is seen in it, since the kernel reuses a freed namespace's inode number for
    /// the next one made, which must not pass as already reported.
    pub(super) fn unseen(&mut self, inode: u32) {
        if !lifecycle::report_again(self.watched.contains_key(&inode)) {
            return;
        }
        if let Some(h) = self.hooks.as_mut() {
            h.forget_netns(inode);
        }
    }

    /// Make sure the writer's namespace is watched; returns false when it cannot be opened.
    pub(super) async fn ensure_namespace(&mut self, p: &KernelProcess) -> bool {
        self.look_for(p, NsEvent::Written).await
    }

    /// Open and watch the namespace of `p` (`p.netns`, not watched yet); `warn` when it cannot
    /// be opened any more. Returns whether it is watched.
    async fn find_namespace(&mut self, p: &KernelProcess, warn: bool) -> bool {
        let pids = lifecycle::holders(p);
        let inode = p.netns;
        let found = tokio::task::spawn_blocking(move || netns::find(inode, &pids))
            .await
            .ok()
            .flatten();
        match found {
            Some(h) => {
                self.watch(h, true).await;
                self.refresh_mounts();
                self.watched.contains_key(&inode)
            }
            None => {
                self.unseen(inode);
                let message = format!(
                    "namespace {inode} (written by {} {}) could not be opened: nothing holds it any \
                     more",
                    p.comm, p.tgid
                );
                if warn {
                    self.warn(message);
                } else {
                    tracing::debug!("{message}");
                }
                false
            }
        }
    }

    /// An ipset command, applied: list the namespace's sets once and report what changed.
    pub(super) async fn on_ipset(&mut self, s: nlattr::NfnlSendEvent) {
        let Some(cmd) = crate::ipset::Command::parse(&s.head) else {
            return;
        };
        if s.ret < 0 || !self.ensure_namespace(&s.process).await {
            return;
        }
        let inode = s.netns();
        let Some(w) = self.watched.get(&inode) else {
            return;
        };
        let file = match w.handle.file.try_clone() {
            Ok(f) => f,
            Err(e) => return self.warn(format!("namespace {inode}: {e}")),
        };
        let listed =
            tokio::task::spawn_blocking(move || netns::run_in(&file, crate::ipset::list)).await;
        let after = match listed {
            Ok(Ok(Ok(sets))) => sets,
            Ok(Ok(Err(e))) => return self.warn(format!("namespace {inode}: {e}")),
            Ok(Err(e)) => return self.warn(format!("entering namespace {inode}: {e}")),
            Err(e) => return self.warn(format!("namespace {inode}: {e}")),
        };
        let outcomes = crate::ipset::outcome(&cmd, self.ipsets.get(&inode), &after);
        self.ipsets.insert(inode, after);
        self.save_ipsets(inode).await;
        let name = self.watched.get(&inode).and_then(|w| w.handle.name.clone());
        let ctx = ChangeCtx {
            inode,
            name,
            backend: Backend::Ipset,
            time: Timestamp::from_boot_ns(s.ktime_ns),
            txn: format!("ipset-{inode}-{}", s.ktime_ns),
            // The ipset capture is the sendto/sendmsg tracepoints on every backend.
            source: Source::Tracepoint,
            process: attribution::from_kernel(&s.process),
            replayed: false,
            recovered: false,
        };
        self.emit_txn_results(ctx, outcomes);
    }
}
