//! The restores (`--restore`) carried out: the restorer says what is due and what to write;
//! here it is written in its namespace, and what came of it is written out.

use std::os::fd::AsFd;

use crate::output::Line;
use crate::restore::ipsets::TooBig;
use crate::restore::plan::Tool;
use crate::restore::{Pending, Step};
use crate::timestamp::Timestamp;

use super::Engine;

impl Engine {
    /// When the next restore is due.
    pub(super) fn next_restore(&self) -> Option<Timestamp> {
        self.restorer.as_ref().and_then(|r| r.next_due())
    }

    /// With `--restore`: the ipsets of namespace `inode` with their members (`ipset save`), for
    /// the restores of rules that name a set a wipe destroyed. Run after every ipset command
    /// there and when the namespace starts being watched; never without `--restore`.
    pub(super) async fn save_ipsets(&mut self, inode: u32) {
        if self.restorer.is_none() {
            return;
        }
        let Some(ns) = self
            .watched
            .get(&inode)
            .and_then(|w| w.handle.file.try_clone().ok())
        else {
            return;
        };
        let saved = crate::restore::apply::save_ipsets(ns.as_fd()).await;
        let Some(r) = self.restorer.as_mut() else {
            return;
        };
        match saved {
            Ok(text) => {
                if let Err(TooBig(n)) = r.ipsets_saved(inode, &text, Timestamp::now()) {
                    self.warn(format!(
                        "namespace {inode}: its ipsets take {n} bytes as `ipset save` prints \
                         them, more than the {} kept for restores: a set a wipe destroys there \
                         is not created again",
                        crate::restore::ipsets::MAX_TEXT_PER_NAMESPACE
                    ));
                }
            }
            Err(e) => {
                // Said once: every ipset command would say it again.
                static SAID: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    self.warn(format!(
                        "restore: cannot save the ipsets of namespace {inode}, so a set a wipe \
                         destroys is not created again: {}",
                        crate::shown::Shown(&e)
                    ));
                }
            }
        }
    }

    /// Every restore due by `now`.
    pub(super) async fn run_restores(&mut self, now: Timestamp) {
        let Some(r) = self.restorer.as_mut() else {
            return;
        };
        for step in r.due(now) {
            match step {
                Step::Say(lines) => self.emit_incidents(lines),
                Step::Write(p) => self.write_restore(p).await,
            }
        }
    }

    async fn write_restore(&mut self, mut p: Pending) {
        let said = std::mem::take(&mut p.said);
        self.emit_incidents(said);
        let dry_run = self.restorer.as_ref().is_some_and(|r| r.dry_run());
        let mut results = Vec::new();
        let ns = self
            .watched
            .get(&p.netns)
            .and_then(|w| w.handle.file.try_clone().ok());
        for s in &p.scripts {
            if dry_run {
                results.push(Ok(()));
                continue;
            }
            let Some(ns) = ns.as_ref() else {
                results.push(Err(format!(
                    "namespace {} is not watched any more",
                    p.netns
                )));
                continue;
            };
            results.push(self.restore_write(ns.as_fd(), s.tool, &s.text, &p).await);
        }
        // A write refused after one that can be taken back (the ipsets created for the
        // rules): taken back, so that nothing of the restore is left half-written.
        if let (Some(failed), Some(ns)) = (results.iter().position(Result::is_err), ns.as_ref()) {
            let undos: Vec<(Tool, String)> = p.scripts[..failed]
                .iter()
                .filter_map(|s| Some((s.tool, s.undo.clone()?)))
                .collect();
            for (tool, undo) in undos {
                if let Err(e) = self.restore_write(ns.as_fd(), tool, &undo, &p).await {
                    results.push(Err(format!(
                        "taking back what {} wrote: {e}",
                        tool.command()
                    )));
                }
            }
        }
        let Some(r) = self.restorer.as_mut() else {
            return;
        };
        let lines = r.written(p, results, Timestamp::now());
        for l in lines {
            self.write(&Line::Incident(Box::new(l)));
        }
    }

    /// One write of a restore, its writer's changes tagged with the restore's incident.
    async fn restore_write(
        &mut self,
        ns: std::os::fd::BorrowedFd<'_>,
        tool: Tool,
        text: &str,
        p: &Pending,
    ) -> Result<(), String> {
        let (id, owner) = (p.incident_id().to_string(), p.owner.clone());
        let core = &mut self.core;
        let r = crate::restore::apply::write(ns, tool, text, |pid| {
            core.own_write(pid, id, owner, Timestamp::now());
        })
        .await;
        if let Err(e) = &r {
            tracing::warn!(
                "restore in namespace {}: {}",
                p.netns,
                crate::shown::Shown(e)
            );
        }
        r
    }
}
