//! x_tables (iptables-legacy, ip6tables, arptables, ebtables): a replace read and diffed
//! against the last copy of the table, refused replaces, and the tables read again after a loss.

use std::sync::Arc;

use crate::attribution::{self, KernelProcess, ProcessInfo};
use crate::forensics::model::Tables;
use crate::hooks::decode::{XtKind, XtReplaceEvent};
use crate::netns;
use crate::output::record::Gap;
use crate::output::{Source, StatusRecord};
use crate::ruleset::{self, Backend, Change, ChangeResult};
use crate::timestamp::{boot_now_ns, Timestamp};
use crate::xtables::{self, XtError, XtProto};

use super::baseline::read_legacy_tables;
use super::core::losses;
use super::{ChangeCtx, Engine};

pub(super) fn xt_proto(kind: XtKind) -> Option<XtProto> {
    match kind {
        XtKind::Ipv4 => Some(XtProto::Ipv4),
        XtKind::Ipv6 => Some(XtProto::Ipv6),
        XtKind::Arp => Some(XtProto::Arp),
        XtKind::Bridge => None,
    }
}

/// The table a writer installed, decoded from the copy the kernel side made of its replace
/// struct; None (and the table is read back) when the copy does not decode as table `name`.
pub(super) fn installed_table(
    proto: XtProto,
    name: &str,
    blob: Vec<u8>,
    prev: Option<&xtables::XtTable>,
) -> Option<xtables::XtTable> {
    let bytes = blob.len();
    match xtables::decode_replace(proto, blob, prev) {
        Ok(t) if t.name == name => {
            tracing::debug!(
                "table {name} decoded from the writer's copy ({bytes} bytes; {} of {} chains \
                 carried over)",
                t.carried_chains(),
                t.chains.len()
            );
            Some(t)
        }
        Ok(t) => {
            tracing::debug!("the copy of table {name} names {}: reading it back", t.name);
            None
        }
        Err(e) => {
            tracing::debug!("the copy of table {name} does not decode ({e}): reading it back");
            None
        }
    }
}

/// Why the changes of a table read back after a replace may not all be the writer's: the table
/// the read found is not the one the writer installed (`entries` against its `num_entries`).
pub(super) fn replaced_before_read(x: &XtReplaceEvent, inode: u32, entries: usize) -> String {
    format!(
        "legacy table {} in namespace {inode} was replaced again before it could be read back \
         after {} {}'s change ({} entries installed, {entries} read): the changes reported for \
         it may include the next writer's. Tables up to half of --ringbuf-size (16 MiB at most) \
         are copied as each writer installs them and never mixed up this way",
        x.table, x.process.comm, x.process.tgid, x.num_entries
    )
}

impl Engine {
    /// Re-read the legacy tables of every watched namespace and report how they differ from
    /// what observer holds, as `recovered` changes of an unknown writer.
    pub(super) async fn resync_legacy(&mut self) {
        let source = self
            .hooks
            .as_ref()
            .and_then(|h| h.report.placement.x_tables)
            .map_or(Source::Tracepoint, Source::from);
        let inodes: Vec<u32> = self.watched.keys().copied().collect();
        for inode in inodes {
            let Some(file) = self
                .watched
                .get(&inode)
                .and_then(|w| w.handle.file.try_clone().ok())
            else {
                continue;
            };
            let began = boot_now_ns();
            let read = tokio::task::spawn_blocking(move || {
                netns::run_in(&file, || {
                    let mut problems = Vec::new();
                    let tables = read_legacy_tables(&mut problems);
                    (tables, problems)
                })
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
            let (tables, problems) = match read {
                Ok(r) => r,
                Err(e) => {
                    self.warn(format!("re-reading namespace {inode}: {e}"));
                    continue;
                }
            };
            for p in problems {
                tracing::warn!("namespace {inode}: {p}");
            }
            let Some(w) = self.watched.get_mut(&inode) else {
                continue;
            };
            // What was read becomes what observer holds; each table is diffed against its old
            // self, and the tables gone are diffed against nothing.
            let tables = tables.into_iter().map(|(k, t)| (k, Arc::new(t))).collect();
            let old = std::mem::replace(&mut w.legacy, tables);
            w.read_at = w.legacy.keys().map(|k| (k.clone(), began)).collect();
            let changes: Vec<Change> = losses::reread_pairs(&old, &w.legacy)
                .into_iter()
                .flat_map(|(old, new)| xtables::diff(old.map(|t| &**t), new.map(|t| &**t)))
                .collect();
            if changes.is_empty() {
                continue;
            }
            let name = w.handle.name.clone();
            let time = Timestamp::now();
            let txn = format!("xt-{inode}-resync-{}", time.unix_nanos());
            self.emit_txn(
                ChangeCtx {
                    inode,
                    name,
                    backend: Backend::Legacy,
                    time,
                    txn,
                    source,
                    process: ProcessInfo::unknown(),
                    replayed: false,
                    recovered: true,
                },
                changes,
            );
            self.legacy_snapshot(inode);
        }
    }

    pub(super) fn legacy_snapshot(&mut self, inode: u32) {
        if self.snapshots.is_none() {
            return;
        }
        if let Some(w) = self.watched.get(&inode) {
            let tables = Tables::from_legacy(w.legacy.values().map(|t| &**t));
            self.emit_snapshot(inode, Backend::Legacy, tables);
        }
    }

    pub(super) async fn on_replace(&mut self, mut x: XtReplaceEvent) {
        let process = attribution::from_kernel(&x.process);
        let proto = xt_proto(x.kind);
        if x.ret == 0 && proto.is_none() {
            return self.on_bridge_replace(x, process).await;
        }
        if x.ret != 0 || proto.is_none() {
            // Refused by the kernel (nothing changed: no read, no diff): one line for the
            // attempt.
            let c = crate::xtables::replace_attempt(x.kind, &x.table, x.num_entries, x.ret);
            return self.emit_attempt(&x, process, c);
        }
        let Some(proto) = proto else { return };
        if !self.ensure_namespace(&x.process).await {
            return;
        }
        let inode = x.process.netns;
        let Some(w) = self.watched.get(&inode) else {
            return;
        };
        let table = x.table.clone();
        let key = (proto, x.table.clone());
        if w.read_at.get(&key).is_some_and(|&at| x.ktime_ns < at) {
            // Replaced before the table was last read back (a re-read after lost records, the
            // namespace's first read): what observer holds already has this change.
            return;
        }
        // The copy held now: the decode (or the read) takes the chains that did not change
        // from it.
        let prev = w.legacy.get(&key).cloned();
        // The table the writer installed, as the kernel side copied it: exactly this writer's
        // change, whatever was installed after it.
        let installed = x
            .blob
            .take()
            .and_then(|b| installed_table(proto, &table, b, prev.as_deref()))
            .and_then(|mut t| {
                // `-m set` refers to its sets by index: they are named through the namespace's
                // sockets; before those are open, the table is read back, which opens them.
                if !t.set_indices().is_empty() {
                    xtables::name_sets(&mut t, w.xt_socks.as_deref()?);
                }
                Some(t)
            });
        let read_back = installed.is_none();
        let began = boot_now_ns();
        let read = if let Some(t) = installed {
            Ok((None, Ok(t)))
        } else {
            match w.xt_socks.clone() {
                // The table was just replaced, so it exists: read it through the namespace's
                // sockets, from a pooled thread.
                Some(socks) => tokio::task::spawn_blocking(move || {
                    let prev = prev.as_deref();
                    (
                        None,
                        xtables::read_existing_table(&socks, proto, &table, prev),
                    )
                })
                .await
                .map_err(|e| e.to_string()),
                // The first time: enter the namespace, open its sockets there, and read.
                None => {
                    let file = match w.handle.file.try_clone() {
                        Ok(f) => f,
                        Err(e) => return self.warn(format!("namespace {inode}: {e}")),
                    };
                    tokio::task::spawn_blocking(move || {
                        netns::run_in(&file, move || {
                            let socks = xtables::XtSockets::open().ok();
                            (
                                socks,
                                xtables::read_table_against(proto, &table, prev.as_deref()),
                            )
                        })
                    })
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| format!("entering the namespace: {e}")))
                }
            }
        };
        let (socks, read) = match read {
            Ok(r) => r,
            Err(e) => return self.warn(format!("namespace {inode}: {e}")),
        };
        let new = match read {
            Ok(t) => Some(t),
            Err(XtError::NoSuchTable { .. }) => None,
            Err(e) => {
                return self.warn(format!(
                    "reading legacy table {} in namespace {inode}: {e}",
                    x.table
                ))
            }
        };
        if read_back {
            if let Some(t) = new
                .as_ref()
                .filter(|t| t.entry_count() != x.num_entries as usize)
            {
                let message = replaced_before_read(&x, inode, t.entry_count());
                tracing::warn!("{message}");
                self.emit_status(StatusRecord::gap(Gap::Other, message));
            }
        }
        let Some(w) = self.watched.get_mut(&inode) else {
            return;
        };
        if let Some(s) = socks {
            w.xt_socks = Some(Arc::new(s));
        }
        if read_back {
            w.read_at.insert(key.clone(), began);
        }
        let old = w.legacy.remove(&key);
        let mut changes = xtables::diff(old.as_deref(), new.as_ref());
        // The command line the kernel hook captured tells `-F` from `-D` of a one-rule chain.
        ruleset::settle_flushes(&mut changes, &ruleset::FlushEvidence::from_args(&x.args));
        if let Some(t) = new {
            w.legacy.insert(key, Arc::new(t));
        }
        let name = w.handle.name.clone();
        self.emit_replace(&x, name, process, changes);
    }

    /// Report what a replace changed as one transaction of its writer, dated by the kernel's
    /// clock at the replace.
    fn emit_replace(
        &mut self,
        x: &XtReplaceEvent,
        name: Option<String>,
        process: ProcessInfo,
        changes: Vec<Change>,
    ) {
        let inode = x.process.netns;
        self.emit_txn(
            ChangeCtx {
                inode,
                name,
                backend: Backend::Legacy,
                time: Timestamp::from_boot_ns(x.ktime_ns),
                txn: format!("xt-{inode}-{}", x.ktime_ns),
                source: x.source.into(),
                process,
                replayed: false,
                recovered: false,
            },
            changes,
        );
    }

    /// An ebtables replace the kernel took: the table is read back through the namespace's
    /// sockets (`EBT_SO_GET_ENTRIES`) and diffed with the copy held, into chain and rule
    /// changes. A table not held yet (its first replace since observer started) is reported
    /// whole. When it cannot be read, the replace is reported as one `table_replace` line.
    async fn on_bridge_replace(&mut self, x: XtReplaceEvent, process: ProcessInfo) {
        if !self.ensure_namespace(&x.process).await {
            return;
        }
        let inode = x.process.netns;
        let Some(w) = self.watched.get(&inode) else {
            return;
        };
        let table = x.table.clone();
        let read = match w.xt_socks.clone() {
            Some(socks) => tokio::task::spawn_blocking(move || {
                (None, xtables::ebt::read_table(socks.inet(), &table))
            })
            .await
            .map_err(|e| e.to_string()),
            None => {
                let file = match w.handle.file.try_clone() {
                    Ok(f) => f,
                    Err(e) => return self.warn(format!("namespace {inode}: {e}")),
                };
                tokio::task::spawn_blocking(move || {
                    netns::run_in(&file, move || match xtables::XtSockets::open() {
                        Ok(socks) => {
                            let t = xtables::ebt::read_table(socks.inet(), &table);
                            (Some(socks), t)
                        }
                        Err(e) => (None, Err(e)),
                    })
                })
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| format!("entering the namespace: {e}")))
            }
        };
        let (socks, new) = match read {
            Ok((socks, Ok(t))) => (socks, Some(t)),
            Ok((socks, Err(XtError::NoSuchTable { .. }))) => (socks, None),
            Ok((_, Err(e))) => {
                self.warn(format!(
                    "reading ebtables table {} in namespace {inode}: {e}",
                    x.table
                ));
                let c = crate::xtables::replace_attempt(x.kind, &x.table, x.num_entries, x.ret);
                return self.emit_attempt(&x, process, c);
            }
            Err(e) => return self.warn(format!("namespace {inode}: {e}")),
        };
        let Some(w) = self.watched.get_mut(&inode) else {
            return;
        };
        if let Some(s) = socks {
            w.xt_socks = Some(Arc::new(s));
        }
        let old = w.bridge.remove(&x.table);
        let mut changes = xtables::ebt::diff(old.as_ref(), new.as_ref());
        ruleset::settle_flushes(&mut changes, &ruleset::FlushEvidence::from_args(&x.args));
        if let Some(t) = new {
            w.bridge.insert(x.table.clone(), t);
        }
        let name = w.handle.name.clone();
        self.emit_replace(&x, name, process, changes);
    }

    /// Refused nftables writes (from the replies a writer read, or from the kernel's error path):
    /// each is reported as the change it attempted, with the kernel's error as its `result`.
    pub(super) fn on_refused(
        &mut self,
        inode: u32,
        process: &KernelProcess,
        ktime_ns: u64,
        source: Source,
        refused: Vec<crate::hooks::refused::Refusal>,
    ) {
        if refused.is_empty() {
            return;
        }
        // The batch changed nothing: its writer is not the author of anything found later.
        if let Some(h) = &self.hooks {
            h.writers.settle(inode, process.tid);
        }
        let name = self.watched.get(&inode).and_then(|w| w.handle.name.clone());
        let ctx = ChangeCtx {
            inode,
            name,
            backend: Backend::Nft,
            time: Timestamp::from_boot_ns(ktime_ns),
            txn: format!("nft-{inode}-refused-{}", process.tid),
            source,
            process: attribution::from_kernel(process),
            replayed: false,
            recovered: false,
        };
        let changes = refused
            .into_iter()
            .map(|r| {
                (
                    r.change,
                    ChangeResult::Refused(crate::xtables::attempt::errno_text(r.errno as i64)),
                )
            })
            .collect();
        self.emit_txn_results(ctx, changes);
    }

    /// A legacy replace reported as one `table_replace` line, with the kernel's result.
    pub(super) fn emit_attempt(
        &mut self,
        x: &XtReplaceEvent,
        process: ProcessInfo,
        c: (Change, ChangeResult),
    ) {
        let inode = x.process.netns;
        let name = self.watched.get(&inode).and_then(|w| w.handle.name.clone());
        let ctx = ChangeCtx {
            inode,
            name,
            backend: Backend::Legacy,
            time: Timestamp::from_boot_ns(x.ktime_ns),
            txn: format!("xt-{inode}-{}", x.ktime_ns),
            source: x.source.into(),
            process,
            replayed: false,
            recovered: false,
        };
        self.emit_txn_results(ctx, vec![c]);
    }
}
