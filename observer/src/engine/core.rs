//! The engine's pure core: what becomes of a transaction once a source has decoded it.
//!
//! It numbers the changes (`seq`), settles what the source could not (a flush whose request was
//! not seen), builds the change lines, and hands them to the correlator, which returns the
//! incident lines; windows that close with no further event close on [`Core::tick`]. It takes
//! plain data and returns records: no kernel, no namespace, no socket, no output, no clock (every
//! time comes in with its transaction or its tick). The loop around it (`mod.rs` and its
//! jobs) does the I/O: it reads the sources, keeps the namespaces, and writes what the core
//! returns.
//!
//! The shell's other decisions are here too, each a function of plain data that returns what
//! to do: `replace` (an x_tables replace: trust the writer's copy, read the table back, or
//! report a gap), `lifecycle` (when a namespace is looked for, opened, kept and let go) and
//! `losses` (lost records: gap lines, re-reads, counters).

use std::collections::HashMap;
use std::time::Duration;

use crate::attribution::ProcessInfo;
use crate::incidents::{Correlator, InventoryChain};
use crate::output::{ChangeLine, IncidentLine, Source};
use crate::ruleset::{self, Backend, Change, ChangeResult};
use crate::timestamp::Timestamp;

/// What the changes of one transaction share: where, when, which backend, and who made them.
#[derive(Debug, Clone)]
pub struct ChangeCtx {
    pub inode: u32,
    pub name: Option<String>,
    pub backend: Backend,
    pub time: Timestamp,
    pub txn: String,
    pub source: Source,
    pub process: ProcessInfo,
    pub replayed: bool,
    pub recovered: bool,
}

/// The lines one transaction makes: its changes, in order, then the incidents they raise.
#[derive(Debug)]
pub struct TxnLines {
    pub changes: Vec<ChangeLine>,
    pub incidents: Vec<IncidentLine>,
}

/// Numbering and correlation.
pub struct Core {
    seq: u64,
    correlator: Correlator,
    /// observer's own writers (`--restore`): pid → the incident they restore, and since when.
    own: HashMap<u32, Own>,
    /// The calls to a D-Bus firewall manager: who asked for the changes it makes.
    requests: requests::Requests,
}

/// A restore's writer: the incident it restores, the owner it writes for, since when.
#[derive(Debug, Clone)]
struct Own {
    incident: String,
    owner: String,
    since: Timestamp,
}

/// How long a restore's writer is known by its pid (its changes may be read a while after it
/// exited).
const OWN_WRITER_KEPT: Duration = Duration::from_secs(60);

impl Core {
    /// Numbering goes on after `last_seq` (the last change already recorded, or 0).
    pub fn new(last_seq: u64, correlator: Correlator) -> Core {
        Core {
            seq: last_seq,
            correlator,
            own: HashMap::new(),
            requests: requests::Requests::default(),
        }
    }

    /// `pid` is observer's own writer, restoring what `incident` took: its changes are tagged
    /// with it, count as the owner's, and raise no incident.
    pub fn own_write(&mut self, pid: u32, incident: String, owner: String, now: Timestamp) {
        self.own
            .retain(|_, o| now.elapsed_since(o.since) < OWN_WRITER_KEPT);
        self.own.insert(
            pid,
            Own {
                incident,
                owner,
                since: now,
            },
        );
    }

    /// A method call to a D-Bus firewall manager was seen: its changes until the reply are the
    /// caller's request.
    pub fn bus_call(&mut self, call: requests::Call) {
        self.requests.call(call);
    }

    /// The manager replied to a call.
    pub fn bus_reply(&mut self, reply: &requests::Reply) {
        self.requests.reply(reply);
    }

    /// Does this process write as `owner`? (See [`Correlator::writes_as`].)
    pub fn writes_as(&self, process: &crate::attribution::ProcessInfo, owner: &str) -> bool {
        self.correlator.writes_as(process, owner)
    }

    /// The `seq` of the last change numbered.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// A transaction whose changes were all applied, its flushes settled: those the source
    /// could not settle (an nft writer whose request was not captured, changes found by a
    /// re-read) are settled as having no evidence.
    pub fn settle(mut changes: Vec<Change>) -> Vec<Change> {
        ruleset::settle_flushes(&mut changes, &ruleset::FlushEvidence::Unknown);
        ruleset::settle_set_flushes(&mut changes, &ruleset::FlushEvidence::Unknown);
        changes
    }

    /// [`Core::settle`], with each change's result (applied).
    #[cfg(test)]
    pub fn settled(changes: Vec<Change>) -> Vec<(Change, ChangeResult)> {
        Core::settle(changes)
            .into_iter()
            .map(|c| (c, ChangeResult::Applied))
            .collect()
    }

    /// A transaction whose changes were all applied (see [`Core::settled`]), whole: the
    /// tests' short form of what the engine does in [`pieces`].
    #[cfg(test)]
    pub fn applied(&mut self, ctx: &ChangeCtx, changes: Vec<Change>) -> TxnLines {
        self.transaction(ctx, Core::settled(changes))
    }

    /// A transaction whose changes each have their `result`: `ok`, or what went wrong
    /// (`EBUSY: Device or resource busy`).
    pub fn transaction(
        &mut self,
        ctx: &ChangeCtx,
        changes: Vec<(Change, ChangeResult)>,
    ) -> TxnLines {
        let own = self.own.get(&ctx.process.pid).cloned();
        let restore = own.as_ref().map(|o| o.incident.clone());
        let requested = self.requests.attribute(&ctx.process, ctx.time);
        // One copy of the writer for all the transaction's lines.
        let process = std::sync::Arc::new(requested.as_ref().unwrap_or(&ctx.process).clone());
        let changes: Vec<ChangeLine> = changes
            .into_iter()
            .map(|(c, result)| {
                self.seq += 1;
                ChangeLine {
                    seq: self.seq,
                    time: ctx.time,
                    netns: ctx.inode,
                    netns_name: ctx.name.clone(),
                    node: None,
                    backend: ctx.backend,
                    family: c.family,
                    table: c.table,
                    chain: c.chain,
                    op: c.op,
                    rule: c.rule,
                    forms: c.forms,
                    position: c.position,
                    detail: c.detail,
                    txn: ctx.txn.clone(),
                    result,
                    source: ctx.source,
                    process: process.clone(),
                    replayed: ctx.replayed,
                    recovered: ctx.recovered,
                    restore: restore.clone(),
                }
            })
            .collect();
        let incidents = match &own {
            Some(o) => self.correlator.observe_restore(&changes, &o.owner),
            None => self.correlator.observe(&changes),
        };
        TxnLines { changes, incidents }
    }

    /// What a namespace holds when it is first watched (no lines: only what follows is news).
    pub fn baseline(&mut self, netns: u32, name: Option<String>, chains: Vec<InventoryChain>) {
        self.correlator.baseline(netns, name, chains);
    }

    /// A namespace is gone: its model and open incidents go with it.
    pub fn forget_netns(&mut self, netns: u32) {
        self.correlator.forget_netns(netns);
    }

    /// Incidents the rulesets show with no change at all (split brain), at `now`.
    pub fn check_all(&mut self, now: Timestamp) -> Vec<IncidentLine> {
        self.correlator.check_all(now)
    }

    /// When a window ends, if one is open: [`Core::tick`] is due then.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.correlator.next_deadline()
    }

    /// The incidents whose windows ended by `now`.
    pub fn tick(&mut self, now: Timestamp) -> Vec<IncidentLine> {
        self.correlator.tick(now)
    }
}

pub mod backlog;
pub mod lifecycle;
pub mod losses;
pub mod pieces;
pub mod replace;
pub mod requests;

/// How long the loop may sleep before the next window ends (`deadline`, from `now`): a
/// millisecond past it, so that the tick finds it ended; at most `u32::MAX` microseconds (about
/// 71 minutes) ahead, and an hour when no window is open (the loop then does not wait on time).
pub fn wake_in(deadline: Option<Timestamp>, now: Timestamp) -> Duration {
    deadline.map_or(Duration::from_secs(3600), |d| {
        d.elapsed_since(now)
            .min(Duration::from_micros(u64::from(u32::MAX)))
            + Duration::from_millis(1)
    })
}

#[cfg(test)]
mod tests;
