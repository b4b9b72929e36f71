//! What the engine gives its output: changes numbered and attributed, incidents, snapshots,
//! status lines, and the losses it must own up to.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::forensics::model::Tables;
use crate::output::{IncidentLine, Line, StatusLine};
use crate::ruleset::{Backend, Change, ChangeResult};

use super::core::losses::{self, Losses};
use super::core::pieces;
use super::core::TxnLines;
use super::{ChangeCtx, Engine};

impl Engine {
    pub(super) fn emit_status(&mut self, s: StatusLine) {
        self.write(&Line::Status(s));
    }

    pub(super) fn write(&mut self, r: &Line) {
        let written = self.output.emit(r);
        self.check_written(written);
    }

    /// A write's error: the reader went away (`observer tail | head`), which ends the run
    /// quietly, or something else, logged (the run goes on).
    fn check_written(&mut self, written: std::io::Result<()>) {
        match written {
            Ok(()) => {}
            Err(_) if self.output_closed => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => self.output_closed = true,
            Err(e) => tracing::error!("cannot write output: {e}"),
        }
    }

    /// Say so, once per change of the counters, when kernel records were lost or unreadable,
    /// then re-read every legacy table of every namespace: what the lost records would have
    /// shown is reported as `recovered` changes. Checked whenever a record arrives: a loss is
    /// noticed with the next record, no timer.
    pub(super) async fn handle_losses(&mut self) {
        if self.report_losses() {
            self.resync_legacy().await;
        }
    }

    /// Hand the output a snapshot of a namespace's tables, after the changes emitted so far.
    pub(super) fn emit_snapshot(&mut self, inode: u32, backend: Backend, tables: Tables) {
        let Some(due) = self.snapshots.as_mut() else {
            return;
        };
        due.taken(inode, backend);
        let netns_name = self.watched.get(&inode).and_then(|w| w.handle.name.clone());
        self.output.snapshot(crate::forensics::Snapshot {
            seq: self.core.seq(),
            time_ns: crate::timestamp::Timestamp::now().unix_nanos(),
            netns: inode,
            netns_name,
            backend,
            tables: Arc::new(tables),
        });
    }

    /// Say so when the loss counters moved; true when kernel records of table replaces were
    /// lost (the legacy tables need a re-read).
    pub(super) fn report_losses(&mut self) -> bool {
        let Some(h) = self.hooks.as_ref() else {
            return false;
        };
        let now = Losses {
            kernel: h.errors(),
            malformed: self.reader_stats.malformed.load(Ordering::Relaxed),
        };
        let Some(report) = losses::account(&self.losses, &now) else {
            return false;
        };
        self.losses = now;
        self.output.kernel_errors(&now.kernel);
        self.emit_status(StatusLine::gap(report.gap, report.message));
        report.reread_legacy
    }

    pub(super) fn warn(&mut self, message: String) {
        tracing::warn!("{message}");
    }

    /// Number, print and correlate the changes of one transaction (all applied).
    pub(super) fn emit_txn(&mut self, ctx: ChangeCtx, changes: Vec<Change>) {
        self.emit_txn_results(ctx, super::core::Core::settled(changes));
    }

    /// Number, print and correlate the changes of one transaction; each has its `result`: `ok`
    /// or what went wrong (`EBUSY: Device or resource busy`). A large load is handled in
    /// pieces ([`pieces`]): only one piece's lines are held at a time.
    pub(super) fn emit_txn_results(
        &mut self,
        ctx: ChangeCtx,
        changes: Vec<(Change, ChangeResult)>,
    ) {
        let (inode, backend, n) = (ctx.inode, ctx.backend, changes.len() as u64);
        for piece in pieces::pieces(changes, pieces::PIECE) {
            let lines = self.core.transaction(&ctx, piece);
            self.emit_lines(lines);
        }
        let ended = self.output.end_txn();
        self.check_written(ended);
        self.snapshot_if_due(inode, backend, n);
        // After a large transaction the heap is trimmed: its changes and lines are freed.
        if n >= super::LARGE_TXN_CHANGES as u64 {
            super::release_free_heap();
        }
    }

    /// Write the lines of a transaction (or of a piece of one).
    fn emit_lines(&mut self, lines: TxnLines) {
        if let Some(r) = self.restorer.as_mut() {
            let core = &self.core;
            r.txn(&lines.changes, &|p, owner| core.writes_as(p, owner));
        }
        for c in lines.changes {
            self.write(&Line::Change(c));
        }
        self.emit_incidents(lines.incidents);
    }

    /// Take the snapshot that `n` more changes of a namespace made due.
    fn snapshot_if_due(&mut self, inode: u32, backend: Backend, n: u64) {
        if !self
            .snapshots
            .as_mut()
            .is_some_and(|d| d.changed(inode, backend, n))
        {
            return;
        }
        match backend {
            Backend::Legacy => self.legacy_snapshot(inode),
            Backend::Nft => {
                // Taken by the reader with its next transaction.
                if let Some(f) = self
                    .watched
                    .get(&inode)
                    .and_then(|w| w.nft_snapshot.as_ref())
                {
                    f.store(true, Ordering::Relaxed);
                }
            }
            Backend::Ipset => {}
        }
    }

    pub(super) fn emit_incidents(&mut self, incidents: Vec<IncidentLine>) {
        for i in incidents {
            if let Some(r) = self.restorer.as_mut() {
                r.incident(&i);
            }
            self.write(&Line::Incident(i));
        }
    }
}
