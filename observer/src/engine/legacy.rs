//! x_tables (iptables-legacy, ip6tables, arptables, ebtables): a replace read and diffed
//! against the last copy of the table, refused replaces, and the tables read again after a loss.

use std::sync::Arc;

use crate::attribution::{self, KernelProcess, ProcessInfo};
use crate::forensics::model::Tables;
use crate::hooks::decode::{XtKind, XtReplaceEvent};
use crate::netns;
use crate::output::line::Gap;
use crate::output::{Source, StatusLine};
use crate::ruleset::{self, Backend, Change, ChangeResult};
use crate::timestamp::{boot_now_ns, Timestamp};
use crate::xtables::{self, XtError, XtProto};

use super::baseline::read_legacy_tables;
use super::core::losses;
use super::core::replace::{self, Route, TableFrom, WriterCopy};
use super::{ChangeCtx, Engine, NsMsg};

pub(super) fn xt_proto(kind: XtKind) -> Option<XtProto> {
    match kind {
        XtKind::Ipv4 => Some(XtProto::Ipv4),
        XtKind::Ipv6 => Some(XtProto::Ipv6),
        XtKind::Arp => Some(XtProto::Arp),
        XtKind::Bridge => None,
    }
}

/// The table a writer installed, decoded from the copy the kernel side made of its replace
/// struct; what was wrong with the copy (and the table is read back) when it does not decode
/// as table `name`.
pub(super) fn installed_table(
    proto: XtProto,
    name: &str,
    blob: Vec<u8>,
    against: xtables::Against<'_>,
) -> Result<xtables::XtTable, WriterCopy> {
    let bytes = blob.len();
    match xtables::decode_replace(proto, blob, against) {
        Ok(t) if t.name == name => {
            tracing::debug!(
                "table {name} decoded from the writer's copy ({bytes} bytes; {} of {} chains \
                 carried over)",
                t.carried_chains(),
                t.chains.len()
            );
            Ok(t)
        }
        Ok(t) => {
            tracing::debug!("the copy of table {name} names {}: reading it back", t.name);
            Err(WriterCopy::OtherTable)
        }
        Err(e) => {
            tracing::debug!("the copy of table {name} does not decode ({e}): reading it back");
            Err(WriterCopy::Undecodable)
        }
    }
}

/// A replace the kernel took, waiting for its namespace's replaces before it to be learned.
pub(super) struct Pending {
    x: XtReplaceEvent,
    proto: XtProto,
    process: ProcessInfo,
}

/// What a namespace reports after a legacy replace not learned yet, in its turn.
pub(super) enum Waiting {
    /// A replace the kernel took: learned in its turn (boxed: a record with its writer's
    /// attribution is the largest of the three).
    Replace(Box<Pending>),
    /// An ebtables replace the kernel took: its table is read back in its turn.
    Bridge(Box<(XtReplaceEvent, ProcessInfo)>),
    /// A replace the kernel refused: its one line.
    Refused(Box<(XtReplaceEvent, ProcessInfo, (Change, ChangeResult))>),
    /// A message of the namespace's nftables reader.
    Said(super::NsMsg),
    /// Every legacy table of the namespace, to read again after a loss of kernel records.
    Reread,
}

/// A replace learned off the loop: the table it installed, what it changed, and how it was
/// learned.
pub(super) struct Learned {
    x: XtReplaceEvent,
    proto: XtProto,
    process: ProcessInfo,
    from: TableFrom,
    /// When (boot clock) the read began, if the table was read back.
    began: u64,
    /// The namespace's sockets, when the read opened them.
    socks: Option<xtables::XtSockets>,
    /// The copy of the table the changes were found against.
    prev: Option<Arc<xtables::XtTable>>,
    /// The table installed (`None`: gone).
    table: Option<Arc<xtables::XtTable>>,
    /// What changed from `prev` to `table`.
    changes: Found,
}

/// What a replace changed.
pub(super) enum Found {
    /// These changes, their flushes settled.
    Changes(Vec<Change>),
    /// A large table that did not exist was created: its changes are made a chain at a time
    /// as they are written ([`xtables::diff::created`]).
    Created(Arc<xtables::XtTable>),
}

/// What changed from `old` to `new`, read against each other, the flushes settled from the
/// writer's command line (`args`): it tells `-F` from `-D` of a one-rule chain. A large table
/// created is left to be made a chain at a time.
fn found(
    old: Option<&xtables::XtTable>,
    new: Option<&Arc<xtables::XtTable>>,
    args: &[String],
) -> Found {
    match (old, new) {
        (None, Some(t)) if xtables::diff::created_count(t) > super::core::pieces::PIECE => {
            Found::Created(t.clone())
        }
        _ => {
            let mut changes = xtables::diff(old, new.map(|t| &**t));
            ruleset::settle_flushes(&mut changes, &ruleset::FlushEvidence::from_args(args));
            Found::Changes(changes)
        }
    }
}

/// The way into a namespace for reading its legacy tables.
enum Way {
    /// Its sockets, open since its first legacy replace.
    Sockets(Arc<xtables::XtSockets>),
    /// The namespace itself, entered to open them (its first legacy replace).
    Enter(std::fs::File),
}

/// The sockets of a namespace and the result of a read.
type SocksAndRead<T> = (Option<xtables::XtSockets>, Result<T, XtError>);

/// The way into namespace `inode` for a read: its sockets, once open, else the namespace to
/// enter (`None`, said in the log, when its descriptor cannot be duplicated).
fn way_into(w: &super::Watched, inode: u32) -> Option<Way> {
    match &w.xt_socks {
        Some(socks) => Some(Way::Sockets(socks.clone())),
        None => match w.handle.file.try_clone() {
            Ok(file) => Some(Way::Enter(file)),
            Err(e) => {
                tracing::warn!("namespace {inode}: {e}");
                None
            }
        },
    }
}

/// An ebtables replace read back off the loop: the table (`None`: gone), with the namespace's
/// sockets when the read opened them; or why it could not be read.
pub(super) struct BridgeRead {
    x: XtReplaceEvent,
    process: ProcessInfo,
    read: Result<(Option<xtables::XtSockets>, Option<xtables::ebt::EbTable>), String>,
}

/// A namespace's legacy tables re-read off the loop after a loss: when the read began (boot
/// clock), and the tables with what could not be read of them, or why nothing could be.
pub(super) struct Reread {
    began: u64,
    read: Result<(LegacyTables, Vec<String>), String>,
}

/// A namespace's legacy tables, by family and name.
type LegacyTables = std::collections::HashMap<(XtProto, String), xtables::XtTable>;

/// Read every legacy table of the namespace `file` (at rule level up to `limit` rules), on a
/// thread of the blocking pool.
fn reread(file: std::fs::File, limit: usize) -> Reread {
    let began = boot_now_ns();
    let read = netns::run_in(&file, move || {
        let mut problems = Vec::new();
        let tables = read_legacy_tables(&mut problems, limit);
        (tables, problems)
    })
    .map_err(|e| e.to_string());
    Reread { began, read }
}

/// Read ebtables table `table` through `way`, on a thread of the blocking pool.
fn read_bridge(
    table: &str,
    way: Way,
) -> Result<(Option<xtables::XtSockets>, Option<xtables::ebt::EbTable>), String> {
    let (socks, read) = match way {
        Way::Sockets(socks) => (None, xtables::ebt::read_table(socks.inet(), table)),
        Way::Enter(file) => {
            let table = table.to_string();
            netns::run_in(&file, move || match xtables::XtSockets::open() {
                Ok(socks) => {
                    let t = xtables::ebt::read_table(socks.inet(), &table);
                    (Some(socks), t)
                }
                Err(e) => (None, Err(e)),
            })
            .map_err(|e| format!("entering the namespace: {e}"))?
        }
    };
    let table = replace::table_or_gone(read).map_err(|e| e.to_string())?;
    Ok((socks, table))
}

/// Learn the table replace `p` installed, on a thread of the blocking pool: decoded from its
/// writer's copy when that is trusted, else read back (see [`replace::table_from`]), then
/// diffed against `prev`, the copy held now (the decode, or the read, takes the chains that
/// did not change from it). The error says why it could not be read.
fn learn(
    mut p: Pending,
    prev: Option<Arc<xtables::XtTable>>,
    room: usize,
    way: Way,
) -> Result<Learned, String> {
    let inode = p.x.process.netns;
    let (proto, table) = (p.proto, p.x.table.clone());
    let against = xtables::Against {
        prev: prev.as_deref(),
        room,
    };
    // The table the writer installed, as the kernel side copied it: exactly this writer's
    // change, whatever was installed after it.
    let copy = match p.x.blob.take() {
        Some(b) => installed_table(proto, &table, b, against),
        None => Err(WriterCopy::Missing),
    };
    let seen = match &copy {
        Ok(t) => WriterCopy::Whole {
            refers_to_sets: !t.set_indices().is_empty(),
        },
        Err(c) => *c,
    };
    let from = replace::table_from(seen, matches!(way, Way::Sockets(_)));
    let began = boot_now_ns();
    let (socks, read): SocksAndRead<xtables::XtTable> = match (from, copy, way) {
        (TableFrom::Copy { name_sets }, Ok(mut t), way) => {
            // `-m set` refers to its sets by index: they are named through the namespace's
            // sockets (before those are open, the table is read back, which opens them).
            if let (true, Way::Sockets(socks)) = (name_sets, way) {
                xtables::name_sets(&mut t, &socks);
            }
            (None, Ok(t))
        }
        // The table was just replaced, so it exists: read it through the namespace's sockets.
        (_, _, Way::Sockets(socks)) => (
            None,
            xtables::read_existing_table(&socks, proto, &table, against),
        ),
        // The first time: enter the namespace, open its sockets there, and read.
        (_, _, Way::Enter(file)) => {
            let (table, prev) = (table.clone(), prev.clone());
            netns::run_in(&file, move || {
                let socks = xtables::XtSockets::open().ok();
                let against = xtables::Against {
                    prev: prev.as_deref(),
                    room,
                };
                (socks, xtables::read_table_against(proto, &table, against))
            })
            .map_err(|e| format!("namespace {inode}: entering the namespace: {e}"))?
        }
    };
    let table = replace::table_or_gone(read).map_err(|e| {
        let what = match e {
            XtError::TooLarge { .. } => {
                " (--max-table-read): what this replace changed is not reported; raise it, and \
                 the memory limit with it, to read such a table"
            }
            _ => "",
        };
        format!(
            "reading legacy table {} in namespace {inode}: {e}{what}",
            p.x.table
        )
    })?;
    let table = table.map(Arc::new);
    let changes = found(prev.as_deref(), table.as_ref(), &p.x.args);
    Ok(Learned {
        x: p.x,
        proto,
        process: p.process,
        from,
        began,
        socks,
        prev,
        table,
        changes,
    })
}

/// A replace's changes are one transaction of its writer, dated by the kernel's clock at the
/// replace.
fn replace_ctx(x: &XtReplaceEvent, name: Option<String>, process: ProcessInfo) -> ChangeCtx {
    let inode = x.process.netns;
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
    /// what observer holds, as `recovered` changes of an unknown writer. Each namespace's read
    /// waits in its queue behind what it reported before, and runs off the loop: a namespace
    /// with big tables delays only itself.
    pub(super) fn resync_legacy(&mut self) {
        let inodes: Vec<u32> = self.watched.keys().copied().collect();
        for inode in inodes {
            // One re-read waiting at the end of the queue covers every loss until it runs.
            if let Some(w) = self.watched.get_mut(&inode) {
                if !matches!(w.waiting.back(), Some(Waiting::Reread)) {
                    w.waiting.push_back(Waiting::Reread);
                }
            }
            self.learn_next(inode);
        }
    }

    /// A namespace's legacy tables re-read after a loss (see [`Engine::resync_legacy`]): what
    /// was read becomes what observer holds, and the difference is reported as `recovered`
    /// changes. Then the namespace's next waiting item.
    pub(super) fn on_reread(&mut self, inode: u32, reread: Reread) {
        let Reread { began, read } = reread;
        if let Some(w) = self.watched.get_mut(&inode) {
            w.learning = false;
        }
        match read {
            Ok((tables, problems)) => {
                for p in problems {
                    tracing::warn!("namespace {inode}: {}", crate::shown::Shown(&p));
                }
                self.apply_reread(inode, began, tables);
            }
            Err(e) => self.warn(format!("re-reading namespace {inode}: {e}")),
        }
        self.learn_next(inode);
    }

    /// Hold `tables`, read at `began`, as namespace `inode`'s legacy tables; each is diffed
    /// against its old self, and the tables gone against nothing.
    fn apply_reread(&mut self, inode: u32, began: u64, tables: LegacyTables) {
        let source = self
            .hooks
            .as_ref()
            .and_then(|h| h.report.placement.x_tables)
            .map_or(Source::Tracepoint, Source::from);
        let Some(w) = self.watched.get_mut(&inode) else {
            return;
        };
        let tables: std::collections::HashMap<_, _> =
            tables.into_iter().map(|(k, t)| (k, Arc::new(t))).collect();
        let levels: Vec<_> = tables
            .iter()
            .map(|(k, t)| (k.clone(), t.chain_level().then(|| t.rule_count())))
            .chain(
                w.legacy
                    .keys()
                    .filter(|k| !tables.contains_key(*k))
                    .map(|k| (k.clone(), None)),
            )
            .map(|(k, now)| {
                let was = w.legacy.get(&k).is_some_and(|t| t.chain_level());
                (k, was, now)
            })
            .collect();
        let old = std::mem::replace(&mut w.legacy, tables);
        w.read_at = w.legacy.keys().map(|k| (k.clone(), began)).collect();
        let changes: Vec<Change> = losses::reread_pairs(&old, &w.legacy)
            .into_iter()
            .flat_map(|(old, new)| xtables::diff(old.map(|t| &**t), new.map(|t| &**t)))
            .collect();
        let name = w.handle.name.clone();
        for (key, was, now) in levels {
            self.note_level(inode, &key, was, now);
        }
        if changes.is_empty() {
            return;
        }
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

    /// Say when table `key` of a namespace starts being held at chain level (`now`: its rule
    /// count; `None` when it is held at rule level or gone) or stops, and count such tables.
    pub(super) fn note_level(
        &mut self,
        inode: u32,
        key: &(XtProto, String),
        was: bool,
        now: Option<usize>,
    ) {
        if was == now.is_some() {
            return;
        }
        let (proto, table) = key;
        let (limit, budget) = (self.rule_level_limit, self.rule_level_budget);
        let message = match now {
            Some(rules) => {
                let ns_limit = self.rule_limit(inode);
                let room = self
                    .watched
                    .get(&inode)
                    .map_or(ns_limit, |w| w.rule_room(key, ns_limit));
                let bound = if ns_limit < limit {
                    format!(
                        "--rule-level-budget {budget} (shared by every namespace but the \
                         node's) leaves for it beside the {} rules the others hold at rule level",
                        self.held_by_other_pods(inode)
                    )
                } else {
                    format!("--rule-level-limit {limit} (per namespace) leaves for it")
                };
                format!(
                    "legacy table {proto} {table} in namespace {inode} holds {rules} rules, \
                     more than the {room} that {bound}: it is held at chain level, and its \
                     changes are told a chain at a time (created, deleted, flushed, rules \
                     changed; no rule text, no rule-level incidents, no restore) until it fits \
                     again"
                )
            }
            None => format!(
                "legacy table {proto} {table} in namespace {inode} is held at rule level again"
            ),
        };
        tracing::warn!("{}", crate::shown::Shown(&message));
        self.emit_status(StatusLine::warning(message));
        if let Some(r) = self.restorer.as_mut() {
            r.held_at_chain_level(inode, proto.family(), table, now.is_some());
        }
        self.count_chain_level();
    }

    /// Tell the outputs how many legacy tables are held at chain level now.
    pub(super) fn count_chain_level(&mut self) {
        let n = self
            .watched
            .values()
            .flat_map(|w| w.legacy.values())
            .filter(|t| t.chain_level())
            .count();
        self.output.chain_level_tables(n);
    }

    pub(super) fn legacy_snapshot(&mut self, inode: u32) {
        if self.snapshots.is_none() {
            return;
        }
        if let Some(w) = self.watched.get(&inode) {
            let tables = Tables::from_legacy(w.legacy.values().map(|t| &**t));
            self.snapshot_in_turn(inode, Backend::Legacy, tables);
        }
    }

    /// An x_tables replace record, on the way [`replace::route`] says: an ebtables table read
    /// back, a refused replace's one line, or a table learned and diffed in its namespace.
    pub(super) async fn on_replace(&mut self, x: XtReplaceEvent) {
        let process = attribution::from_kernel(&x.process);
        let proto = match replace::route(x.ret, xt_proto(x.kind)) {
            Route::Bridge => {
                // Read back off the loop, in the namespace's turn.
                if !self.ensure_namespace(&x.process).await {
                    return;
                }
                let inode = x.process.netns;
                if let Some(w) = self.watched.get_mut(&inode) {
                    w.waiting.push_back(Waiting::Bridge(Box::new((x, process))));
                }
                return self.learn_next(inode);
            }
            Route::Attempt => {
                // Refused by the kernel (nothing changed: no read, no diff); after the
                // namespace's replaces not learned yet.
                let c = crate::xtables::replace_attempt(x.kind, &x.table, x.num_entries, x.ret);
                if let Some(w) = self
                    .watched
                    .get_mut(&x.process.netns)
                    .filter(|w| w.behind_a_replace())
                {
                    w.waiting
                        .push_back(Waiting::Refused(Box::new((x, process, c))));
                    return;
                }
                return self.emit_attempt(&x, process, c);
            }
            Route::Table(proto) => proto,
        };
        if !self.ensure_namespace(&x.process).await {
            return;
        }
        self.on_table_replace(x, proto, process);
    }

    /// An iptables, ip6tables or arptables replace the kernel took, in a watched namespace:
    /// queued behind the namespace's replaces not learned yet. Each is learned off the loop
    /// ([`learn`]), one at a time per namespace and in order, so that a large table in one
    /// namespace does not hold up the others' changes.
    fn on_table_replace(&mut self, x: XtReplaceEvent, proto: XtProto, process: ProcessInfo) {
        let inode = x.process.netns;
        let Some(w) = self.watched.get_mut(&inode) else {
            return;
        };
        w.waiting
            .push_back(Waiting::Replace(Box::new(Pending { x, proto, process })));
        self.learn_next(inode);
    }

    /// Start learning the namespace's next replace, if one waits, on the blocking pool; the
    /// result comes back to the loop as [`NsMsg::Learned`]. Not while another is learned, nor
    /// while the namespace's lines wait in the backlog (its next replace is reported after
    /// them anyway, and its table is not read while a large load's changes are still held).
    pub(super) fn learn_next(&mut self, inode: u32) {
        let tx = self.ns_tx.clone();
        loop {
            // What waits before the next replace is reported in its turn, as it came.
            if self.backlog.holds(inode) {
                return;
            }
            // What this namespace may hold at rule level, beside the others.
            let limit = self.rule_limit(inode);
            let Some(w) = self.watched.get_mut(&inode).filter(|w| !w.learning) else {
                return;
            };
            let p = match w.waiting.pop_front() {
                None => return,
                Some(Waiting::Replace(p)) => *p,
                Some(Waiting::Refused(r)) => {
                    let (x, process, c) = *r;
                    self.emit_attempt(&x, process, c);
                    continue;
                }
                Some(Waiting::Said(msg)) => {
                    self.handle_ns(msg);
                    continue;
                }
                Some(Waiting::Reread) => {
                    let file = match w.handle.file.try_clone() {
                        Ok(f) => f,
                        Err(e) => {
                            tracing::warn!("re-reading namespace {inode}: {e}");
                            continue;
                        }
                    };
                    w.learning = true;
                    tokio::spawn(async move {
                        let reread = tokio::task::spawn_blocking(move || reread(file, limit))
                            .await
                            .unwrap_or_else(|e| Reread {
                                began: boot_now_ns(),
                                read: Err(e.to_string()),
                            });
                        let _ = tx.send(NsMsg::Reread { inode, reread }).await;
                    });
                    return;
                }
                Some(Waiting::Bridge(b)) => {
                    let (x, process) = *b;
                    let Some(way) = way_into(w, inode) else {
                        continue;
                    };
                    w.learning = true;
                    tokio::spawn(async move {
                        let table = x.table.clone();
                        let read = tokio::task::spawn_blocking(move || read_bridge(&table, way))
                            .await
                            .unwrap_or_else(|e| Err(format!("namespace {inode}: {e}")));
                        let read = Box::new(BridgeRead { x, process, read });
                        let _ = tx.send(NsMsg::BridgeRead { inode, read }).await;
                    });
                    return;
                }
            };
            let key = (p.proto, p.x.table.clone());
            if replace::held_already(w.read_at.get(&key).copied(), p.x.ktime_ns) {
                // Replaced before the table was last read back (a re-read after lost records,
                // the namespace's first read): what observer holds already has this change.
                continue;
            }
            let Some(way) = way_into(w, inode) else {
                continue;
            };
            let prev = w.legacy.get(&key).cloned();
            let room = w.rule_room(&key, limit);
            w.learning = true;
            tokio::spawn(async move {
                let learned = tokio::task::spawn_blocking(move || learn(p, prev, room, way))
                    .await
                    .unwrap_or_else(|e| Err(format!("namespace {inode}: {e}")))
                    .map(Box::new);
                let _ = tx.send(NsMsg::Learned { inode, learned }).await;
            });
            return;
        }
    }

    /// A replace learned off the loop (or why it could not be): reported, then the
    /// namespace's next replace is learned.
    pub(super) fn on_learned(&mut self, inode: u32, learned: Result<Box<Learned>, String>) {
        // A namespace let go meanwhile took its replaces with it.
        let Some(w) = self.watched.get_mut(&inode) else {
            return;
        };
        w.learning = false;
        match learned {
            Ok(l) => self.took(*l),
            Err(message) => {
                // What the replace changed is not known: said as a gap.
                tracing::warn!("{}", crate::shown::Shown(&message));
                self.emit_status(StatusLine::gap(Gap::Other, message));
            }
        }
        self.learn_next(inode);
    }

    /// What a replace installed becomes the table held, and what it changed is reported.
    fn took(&mut self, l: Learned) {
        let Learned {
            x,
            proto,
            process,
            from,
            began,
            socks,
            prev,
            table: new,
            changes,
        } = l;
        self.output.table_learned(from.read_back());
        let inode = x.process.netns;
        let settled = replace::settle(from, x.num_entries, new.as_ref().map(|t| t.entry_count()));
        if let Some(entries) = settled.gap {
            let message = replaced_before_read(&x, inode, entries);
            tracing::warn!("{message}");
            self.emit_status(StatusLine::gap(Gap::Other, message));
        }
        let Some(w) = self.watched.get_mut(&inode) else {
            return;
        };
        let key = (proto, x.table.clone());
        if replace::held_already(w.read_at.get(&key).copied(), x.ktime_ns) {
            // Read again while this replace was learned (a re-read after lost records): what
            // observer holds has it already.
            return;
        }
        if let Some(s) = socks {
            w.xt_socks = Some(Arc::new(s));
        }
        if settled.mark_read {
            w.read_at.insert(key.clone(), began);
        }
        let old = w.legacy.remove(&key);
        let was = old.as_ref().is_some_and(|t| t.chain_level());
        let now = new
            .as_ref()
            .filter(|t| t.chain_level())
            .map(|t| t.rule_count());
        let same = match (&old, &prev) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        let changes = if same {
            changes
        } else {
            // What observer held changed while this replace was learned: diffed again.
            found(old.as_deref(), new.as_ref(), &x.args)
        };
        // The last copy's chains and entries that the new one does not share go now.
        let large = [old.as_ref(), new.as_ref()].into_iter().flatten().any(|t| {
            t.kept_bytes() >= super::LARGE_TABLE_BYTES
                || t.entry_count() >= super::LARGE_TABLE_ENTRIES
        });
        drop((old, prev));
        if let Some(t) = new {
            w.legacy.insert(key.clone(), t);
        }
        let name = w.handle.name.clone();
        self.note_level(inode, &key, was, now);
        let ctx = replace_ctx(&x, name, process);
        match changes {
            Found::Changes(changes) => self.emit_txn(ctx, changes),
            Found::Created(table) => self.emit_created(ctx, table),
        }
        if large {
            // What a large table's copy freed (its chains, the read's buffer) may sit in the
            // allocator's arena of another thread, which the next read would not reuse.
            super::release_free_heap();
        }
    }

    /// Report what a replace changed as one transaction of its writer.
    fn emit_replace(
        &mut self,
        x: &XtReplaceEvent,
        name: Option<String>,
        process: ProcessInfo,
        changes: Vec<Change>,
    ) {
        self.emit_txn(replace_ctx(x, name, process), changes);
    }

    /// An ebtables table read back off the loop after a replace (or why it could not be):
    /// diffed with the copy held, into chain and rule changes (a table not held yet, its first
    /// replace since observer started, is reported whole), or, when it could not be read,
    /// reported as one `table_replace` line. Then the namespace's next waiting item.
    pub(super) fn on_bridge_read(&mut self, inode: u32, read: Box<BridgeRead>) {
        let BridgeRead { x, process, read } = *read;
        let Some(w) = self.watched.get_mut(&inode) else {
            return;
        };
        w.learning = false;
        match read {
            Ok((socks, new)) => {
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
            Err(e) => {
                self.warn(format!(
                    "reading ebtables table {} in namespace {inode}: {e}",
                    x.table
                ));
                let c = crate::xtables::replace_attempt(x.kind, &x.table, x.num_entries, x.ret);
                self.emit_attempt(&x, process, c);
            }
        }
        self.learn_next(inode);
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
        let name = self
            .watched
            .get(&x.process.netns)
            .and_then(|w| w.handle.name.clone());
        let ctx = replace_ctx(x, name, process);
        self.emit_txn_results(ctx, vec![c]);
    }
}
