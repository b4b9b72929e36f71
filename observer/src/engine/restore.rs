//! The restores (`--restore`) carried out: the restorer says what is due and what to write;
//! here it is written in its namespace, and what came of it is written out.

use std::os::fd::AsFd;

use crate::output::Line;
use crate::restore::{Pending, Step};
use crate::timestamp::Timestamp;

use super::Engine;

impl Engine {
    /// When the next restore is due.
    pub(super) fn next_restore(&self) -> Option<Timestamp> {
        self.restorer.as_ref().and_then(|r| r.next_due())
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
            let (id, owner) = (p.incident_id().to_string(), p.owner.clone());
            let core = &mut self.core;
            let r = crate::restore::apply::write(ns.as_fd(), s.tool, &s.text, |pid| {
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
            results.push(r);
        }
        let Some(r) = self.restorer.as_mut() else {
            return;
        };
        let lines = r.written(p, results, Timestamp::now());
        for l in lines {
            self.write(&Line::Incident(l));
        }
    }
}
