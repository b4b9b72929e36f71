//! What the engine gives its output: changes numbered and attributed, incidents, snapshots,
//! status lines, and the losses it must own up to.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::forensics::model::Tables;
use crate::output::{IncidentLine, Line, StatusLine};
use crate::ruleset::{Backend, Change, ChangeResult};
use crate::xtables;

use super::core::losses::{self, Losses};
use super::core::pieces;
use super::core::TxnLines;
use super::{ChangeCtx, Engine};

/// A transaction's pieces not written yet, in order.
type Pieces = dyn Iterator<Item = Vec<(Change, ChangeResult)>> + Send;

/// Work waiting in the [`Backlog`](super::core::backlog::Backlog) of a namespace.
pub(super) enum Queued {
    /// A transaction, in the pieces not written yet, of `n` changes in all.
    Txn {
        /// Boxed: the writer's attribution is by far the largest part of an item.
        ctx: Box<ChangeCtx>,
        pieces: Box<Pieces>,
        n: u64,
    },
    /// A snapshot taken after the transactions queued before it.
    Snapshot {
        backend: Backend,
        tables: Box<Tables>,
    },
}

impl Engine {
    pub(super) fn emit_status(&mut self, s: StatusLine) {
        self.write(&Line::Status(s));
    }

    pub(super) fn write(&mut self, r: &Line) {
        let written = self.output.emit(r);
        super::LINES_OUT.fetch_add(1, Ordering::Relaxed);
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
    /// then re-read every legacy table of every namespace (off the loop, each in its
    /// namespace's turn): what the lost records would have shown is reported as `recovered`
    /// changes. Checked whenever a record arrives: a loss is noticed with the next record, no
    /// timer.
    pub(super) fn handle_losses(&mut self) {
        if self.report_losses() {
            self.resync_legacy();
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
        let changes = super::core::Core::settle(changes);
        if !self.backlog.holds(ctx.inode) && !pieces::cut_applied(&changes, pieces::PIECE) {
            let results = changes
                .into_iter()
                .map(|c| (c, ChangeResult::Applied))
                .collect();
            return self.emit_txn_results(ctx, results);
        }
        // A large one gets its results a piece at a time (a chain-level re-read of 110,000
        // chains is 40 MB of changes: never twice).
        let n = changes.len() as u64;
        self.queue_txn(ctx, n, Box::new(pieces::applied(changes, pieces::PIECE)));
    }

    /// Number, print and correlate the changes of one transaction; each has its `result`: `ok`
    /// or what went wrong (`EBUSY: Device or resource busy`). A large load is handled in
    /// pieces ([`pieces`]): only one piece's lines are held at a time, and the pieces are
    /// written from the [`Backlog`](super::core::backlog::Backlog), between the other sources'
    /// events. A transaction of a namespace with work waiting queues behind it.
    pub(super) fn emit_txn_results(
        &mut self,
        ctx: ChangeCtx,
        changes: Vec<(Change, ChangeResult)>,
    ) {
        let n = changes.len() as u64;
        let inode = ctx.inode;
        if !self.backlog.holds(inode) && !pieces::cut(&changes, pieces::PIECE) {
            let lines = self.core.transaction(&ctx, changes);
            self.emit_lines(lines);
            return self.end_txn(&ctx, n);
        }
        self.queue_txn(ctx, n, Box::new(pieces::pieces(changes, pieces::PIECE)));
    }

    /// Queue a transaction of `n` changes in its `pieces`, behind its namespace's work.
    fn queue_txn(&mut self, ctx: ChangeCtx, n: u64, pieces: Box<Pieces>) {
        let inode = ctx.inode;
        let ctx = Box::new(ctx);
        self.backlog.push(inode, Queued::Txn { ctx, pieces, n });
    }

    /// A large table created (see [`xtables::diff::created`]): its changes are made and
    /// written a piece at a time from the backlog.
    pub(super) fn emit_created(&mut self, ctx: ChangeCtx, table: Arc<xtables::XtTable>) {
        let n = xtables::diff::created_count(&table) as u64;
        let changes = xtables::diff::created(table);
        self.queue_txn(ctx, n, Box::new(pieces::chunks(changes, pieces::PIECE)));
    }

    /// The transaction of `ctx`, of `n` changes, is all written: said to the output, then the
    /// snapshot it made due.
    fn end_txn(&mut self, ctx: &ChangeCtx, n: u64) {
        let ended = self.output.end_txn();
        self.check_written(ended);
        self.snapshot_if_due(ctx.inode, ctx.backend, n);
        // After a large transaction the heap is trimmed: its changes and lines are freed.
        if n >= super::LARGE_TXN_CHANGES as u64 {
            super::release_free_heap();
        }
    }

    /// Write one piece of the work waiting (the loop calls it when no other event is ready).
    pub(super) fn work_backlog(&mut self) {
        let Some((inode, item)) = self.backlog.take() else {
            return;
        };
        match item {
            Queued::Txn { ctx, mut pieces, n } => match pieces.next() {
                Some(piece) => {
                    let lines = self.core.transaction(&ctx, piece);
                    self.emit_lines(lines);
                    self.backlog.put_back(inode, Queued::Txn { ctx, pieces, n });
                }
                None => self.end_txn(&ctx, n),
            },
            Queued::Snapshot { backend, tables } => self.emit_snapshot(inode, backend, *tables),
        }
        // The namespace's lines are all out: its next legacy replace may be learned.
        self.learn_next(inode);
    }

    /// Write all the work waiting (the run ends): nothing reported is lost.
    pub(super) fn flush_backlog(&mut self) {
        while !self.backlog.is_empty() && !self.output_closed {
            self.work_backlog();
        }
    }

    /// A snapshot of what a namespace holds after the changes it reported so far: handed to
    /// the output after those changes, which may still wait in the backlog.
    pub(super) fn snapshot_in_turn(&mut self, inode: u32, backend: Backend, tables: Tables) {
        if self.backlog.holds(inode) {
            let tables = Box::new(tables);
            self.backlog
                .push(inode, Queued::Snapshot { backend, tables });
        } else {
            self.emit_snapshot(inode, backend, tables);
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

    /// Snapshot every namespace's tables (the record was written again after a gap: the
    /// rulesets rebuilt from it after the gap are whole again from these). A namespace whose
    /// legacy changes still wait to be written is snapshot with them, as [`Self::snapshot_if_due`]
    /// does; each nftables reader takes its own at once, after what it reported.
    pub(super) fn snapshot_everything(&mut self) {
        if self.snapshots.is_none() {
            return;
        }
        let inodes: Vec<u32> = self.watched.keys().copied().collect();
        for inode in inodes {
            if self.backlog.holds(inode) {
                if let Some(d) = self.snapshots.as_mut() {
                    d.make_due(inode, Backend::Legacy);
                }
            } else {
                self.legacy_snapshot(inode);
            }
            if let Some(ask) = self
                .watched
                .get(&inode)
                .and_then(|w| w.nft_snapshot.as_ref())
            {
                ask.now.notify_one();
            }
        }
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
            // The tables held now are those after this transaction only when nothing of the
            // namespace waits behind it (it stays due until then).
            Backend::Legacy if self.backlog.holds(inode) => {}
            Backend::Legacy => self.legacy_snapshot(inode),
            Backend::Nft => {
                // Taken by the reader with its next transaction.
                if let Some(f) = self
                    .watched
                    .get(&inode)
                    .and_then(|w| w.nft_snapshot.as_ref())
                {
                    f.due.store(true, Ordering::Relaxed);
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
            self.write(&Line::Incident(Box::new(i)));
        }
    }
}
