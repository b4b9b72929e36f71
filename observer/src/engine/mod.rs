//! The engine: puts the sources, the namespaces, the decoders and the output together.
//!
//! - Kernel records (ring buffer) arrive on one channel: a table replace triggers one read of
//!   that table inside its namespace and a structural diff against the last copy; a namespace the
//!   kernel reports as new is opened and subscribed at once; an unmount of a namespace's bind
//!   mount lets it go.
//! - Each namespace has a netlink reader task that turns nftables notifications into
//!   transactions and attributes them while the writer may still be alive.
//! - Everything is numbered (`seq`), filtered and printed here, in arrival order.
//!
//! There is no timer anywhere: every read is triggered by a kernel record or a notification.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context as _;
use netlink_sys::Socket;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::attribution::KernelProcess;
use crate::attribution::{self, ProcessInfo};
use crate::forensics::model::Tables;
use crate::hooks::decode::{KernelEvent, XtKind, XtReplaceEvent};
use crate::hooks::nlattr::{self, WriterCache};
use crate::hooks::{HookOptions, KernelHooks, ReaderStats};
use crate::incidents::{self, owners::Owners, Correlator, InventoryChain};
use crate::netns::{self, NetnsHandle};
use crate::nftables::{self, state::GenerationBuilder, state::NftState};
use crate::output::record::{now, rfc3339};
use crate::output::{ChangeRecord, IncidentRecord, Record, Source, StatusRecord};
use crate::ruleset::{self, Backend, Change};
use crate::xtables::{self, XtError, XtProto, XtTable};

/// A transaction from a namespace's netlink reader.
enum NsMsg {
    Nft {
        inode: u32,
        gen: u32,
        /// Boxed: the writer's attribution is by far the largest part of a message.
        process: Box<ProcessInfo>,
        changes: Vec<Change>,
        time: String,
        replayed: bool,
        /// Found by re-reading the namespace after notifications were lost.
        recovered: bool,
        /// The namespace's nft tables after this transaction, when a snapshot was asked for.
        snapshot: Option<Box<Tables>>,
    },
    /// The reader stopped or lost notifications.
    Trouble { inode: u32, message: String },
    /// A namespace made a moment ago, found after its creator entered it (or handed it on).
    Found(NetnsHandle),
    /// A namespace made a moment ago that nothing held any more when it was looked for.
    Unfound(u32),
}

/// One watched namespace.
struct Watched {
    handle: Arc<NetnsHandle>,
    legacy: HashMap<(XtProto, String), XtTable>,
    nft_reader: Option<JoinHandle<()>>,
    /// Set to ask the nft reader for a snapshot with its next transaction.
    nft_snapshot: Option<Arc<AtomicBool>>,
    /// Sockets of the namespace for reading its legacy tables without entering it, opened at
    /// its first legacy replace (they keep it alive: dropped with this entry).
    xt_socks: Option<Arc<xtables::XtSockets>>,
    /// When (boot clock) each legacy table in `legacy` was last read back from the kernel
    /// rather than taken from a writer's copy. A read holds every replace made before it
    /// began: the copy of such a replace, still queued, must not be diffed against it (the
    /// read may also hold later replaces, which the diff would show undone).
    read_at: HashMap<(XtProto, String), u64>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(task) = self.nft_reader.take() {
            task.abort();
        }
    }
}

struct Engine {
    output: Box<dyn Output>,
    seq: u64,
    watched: HashMap<u32, Watched>,
    /// nsfs bind mounts (path → namespace), to notice `ip netns del`.
    mounts: HashMap<PathBuf, u32>,
    hooks: Option<KernelHooks>,
    ns_tx: mpsc::Sender<NsMsg>,
    reader_stats: Arc<ReaderStats>,
    /// Losses already reported: (ring buffer full, pending map full, malformed records).
    losses: (crate::hooks::KernelErrors, u64),
    /// Turns the changes into incidents.
    correlator: Correlator,
    /// The last ipset listing of each namespace (see `ipset`).
    ipsets: HashMap<u32, crate::ipset::Sets>,
    /// Receive buffer of the notification sockets (`--netlink-rcvbuf`).
    netlink_rcvbuf: usize,
    /// Transactions recovered by re-reads so far (numbers their `txn`).
    recovered_txns: u64,
    /// When the output keeps snapshots (the record): which are due.
    snapshots: Option<crate::forensics::Due>,
}

/// What the engine is asked to do: built by the command line (`tail`) or the daemon's settings
/// (`run`).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Which kernel hooks to attach.
    pub hooks: HookChoice,
    /// Size of the kernel ring buffer in bytes.
    pub ringbuf_size: u32,
    /// Receive buffer of each namespace's nftables notification socket.
    pub netlink_rcvbuf: usize,
    /// The chain ownership file; the built-in catalog when none.
    pub owners: Option<PathBuf>,
    /// The incident windows.
    pub incidents: incidents::Config,
    /// Where writers' pods and containers are named from.
    pub pods: crate::pods::PodDirs,
    /// The `seq` of the last change already recorded: numbering goes on after it.
    pub first_seq: u64,
}

/// Which kernel hooks the engine attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookChoice {
    /// The best this kernel allows (fentry, kprobe, tracepoint), or netlink only when none
    /// attaches (said as a loss).
    Best,
    /// This backend, or fail with the kernel's error.
    Only(crate::hooks::backend::HookBackend),
    /// No BPF: nftables changes only, from netlink.
    NetlinkOnly,
}

/// Where the engine's records go: every record, in order, unfiltered. `tail` filters and prints;
/// other consumers (a daemon's stream, a record) may keep everything.
pub trait Output: Send {
    /// Take one record. An error of kind `BrokenPipe` ends the run quietly (the reader went away);
    /// other errors are logged and the run goes on.
    fn emit(&mut self, record: &Record) -> std::io::Result<()>;

    /// The records of one transaction have all been given (so a view may draw them together).
    fn end_txn(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    /// The kernel side's error counters moved (for a sink that exports them, such as metrics).
    fn kernel_errors(&mut self, _errors: &crate::hooks::KernelErrors) {}

    /// When this output keeps snapshots of the rulesets (the daemon's record), how often.
    fn snapshot_policy(&self) -> Option<crate::forensics::SnapshotPolicy> {
        None
    }

    /// Take a snapshot, after the changes given so far.
    fn snapshot(&mut self, _snapshot: crate::forensics::Snapshot) {}
}

/// Watch every namespace and send every record to `output` until SIGINT or SIGTERM.
pub async fn run(config: &EngineConfig, output: Box<dyn Output>) -> anyhow::Result<()> {
    // Streams created first, before anything can print `ready`: a signal that arrives during
    // start-up, or while the engine is busy, is kept until the loop comes back to it (and the
    // exit stays clean) instead of killing the process.
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let correlator = Correlator::new(
        config.incidents.clone(),
        load_owners(config.owners.as_deref())?,
    );
    crate::pods::configure(config.pods.clone());
    if !nix::unistd::geteuid().is_root() {
        tracing::warn!(
            "not running as root: loading BPF programs and joining namespaces will likely fail"
        );
    }

    let (kernel_tx, mut kernel_rx) = mpsc::channel::<KernelEvent>(8192);
    let (ns_tx, mut ns_rx) = mpsc::channel::<NsMsg>(8192);
    let mut lost = Vec::new();
    let hooks = match config.hooks {
        HookChoice::NetlinkOnly => {
            lost.push(netlink_only_loss("--hooks netlink"));
            None
        }
        choice => match KernelHooks::load(&HookOptions {
            ringbuf_bytes: config.ringbuf_size,
            backend: match choice {
                HookChoice::Only(b) => Some(b),
                HookChoice::Best | HookChoice::NetlinkOnly => None,
            },
        }) {
            Ok(h) => Some(h),
            Err(e) if choice == HookChoice::Best => {
                tracing::warn!("kernel hooks unavailable, running netlink-only: {e}");
                lost.push(netlink_only_loss(&e.to_string()));
                None
            }
            Err(e) => return Err(e).context("attaching the kernel hooks"),
        },
    };
    let snapshots = output.snapshot_policy().map(crate::forensics::Due::new);
    let mut engine = Engine {
        snapshots,
        output,
        seq: config.first_seq,
        watched: HashMap::new(),
        mounts: HashMap::new(),
        hooks,
        ns_tx,
        reader_stats: Arc::new(ReaderStats::default()),
        losses: (crate::hooks::KernelErrors::default(), 0),
        correlator,
        ipsets: HashMap::new(),
        netlink_rcvbuf: config.netlink_rcvbuf,
        recovered_txns: 0,
    };
    let reader_stats = engine.reader_stats.clone();
    if let Some(h) = engine.hooks.as_mut() {
        h.spawn_reader(kernel_tx, reader_stats)
            .context("starting the ring buffer reader")?;
        if let Some(m) = h.report.missing_fields.first() {
            lost.push(format!("the parent and namespace of legacy writers ({m})"));
        }
        if let Some(m) = &h.report.netlink_lost {
            lost.push(m.clone());
        }
    }

    // Every namespace that exists now: subscribe and read what it holds (silently: only changes
    // from now on are reported).
    for (inode, path) in netns::scan() {
        match netns::open(&path, Some(inode)) {
            Ok(h) => engine.watch(h, false).await,
            Err(e) => tracing::debug!("namespace {inode} at {}: {e}", path.display()),
        }
    }
    engine.refresh_mounts();
    // Start-up parses the kernel's BTF and reads every table once; give that memory back rather
    // than keep it as free heap for the life of the process.
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free heap pages; no pointer is invalidated.
    unsafe {
        libc::malloc_trim(0);
    }
    if engine.watched.is_empty() {
        anyhow::bail!(if nix::unistd::geteuid().is_root() {
            "no network namespace could be opened (is /proc mounted?)"
        } else {
            "no network namespace could be opened: observer tail needs root (or CAP_SYS_ADMIN, \
             CAP_NET_ADMIN, CAP_BPF and CAP_PERFMON); run it with sudo"
        });
    }

    let mut sources = vec![Source::Netlink];
    if let Some(h) = &engine.hooks {
        sources = h.report.placement.sources();
    }
    let ready = StatusRecord {
        state: "ready".into(),
        time: now(),
        message: format!(
            "watching {} network namespaces; every hook attached and every subscription open",
            engine.watched.len()
        ),
        hooks: Some(engine.hooks.as_ref().map_or_else(
            || "x_tables=none namespaces=none nf_tables=netlink nf_writers=proc".into(),
            |h| h.report.placement.summary(),
        )),
        sources,
        netns_watched: Some(engine.watched.len()),
        lost,
    };
    engine.emit_status(ready);
    // What the rulesets already show (split brain), once everything is read.
    let found = engine.correlator.check_all(wall_ns());
    engine.emit_incidents(found);

    // Kernel map entries of tasks that exited, namespaces nothing holds any more and losses no
    // later record brought to light are looked for SWEEP_EVERY after something happened, and
    // then only while a namespace that no mount holds is watched (a process exit sends
    // nothing): an idle node with mounted namespaces wakes observer for nothing.
    let mut sweep_at = Some(tokio::time::Instant::now() + SWEEP_EVERY);
    loop {
        // Incident windows (flapping, mass flush repair) end on a timer of their own.
        let deadline = engine.correlator.next_deadline();
        let wake = tokio::time::Instant::now()
            + deadline.map_or(std::time::Duration::from_secs(3600), |d| {
                std::time::Duration::from_nanos(
                    (d - wall_ns()).clamp(0, i128::from(u32::MAX) * 1000) as u64,
                ) + std::time::Duration::from_millis(1)
            });
        tokio::select! {
            biased;
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            _ = tokio::time::sleep_until(wake), if deadline.is_some() => {
                let closed = engine.correlator.tick(wall_ns());
                engine.emit_incidents(closed);
            }
            Some(ev) = kernel_rx.recv() => {
                // Records lost before this one are re-read first: the re-read holds what they
                // did (as recovered changes of an unknown writer), and the changes still queued
                // that it holds are not passed off as this writer's.
                engine.handle_losses().await;
                engine.on_kernel(ev).await;
                sweep_at.get_or_insert_with(|| tokio::time::Instant::now() + SWEEP_EVERY);
            }
            Some(msg) = ns_rx.recv() => {
                match msg {
                    NsMsg::Found(handle) => {
                        engine.watch(handle, true).await;
                        engine.refresh_mounts();
                    }
                    msg => engine.on_ns(msg),
                }
                sweep_at.get_or_insert_with(|| tokio::time::Instant::now() + SWEEP_EVERY);
            }
            () = sleep_until_some(sweep_at), if sweep_at.is_some() => {
                // Losses that no later record brought to light (the ring buffer filled, then
                // all went quiet) are reported here at the latest.
                engine.handle_losses().await;
                engine.refresh_mounts();
                engine.forget_gone("nothing holds it any more");
                if let Some(h) = engine.hooks.as_mut() {
                    let n = h.sweep_exited();
                    if n > 0 {
                        tracing::debug!("{n} kernel entries of exited tasks removed");
                    }
                }
                sweep_at = engine
                    .held_by_processes_only()
                    .then(|| tokio::time::Instant::now() + SWEEP_EVERY);
            }
            else => break,
        }
    }
    if let Some(h) = engine.hooks.as_ref() {
        use std::sync::atomic::Ordering::Relaxed;
        let st = &h.writers.stats;
        tracing::info!(
            "nftables generations: {} joined to their writer by generation id, {} by thread id, \
             {} named from /proc",
            st.exact.load(Relaxed),
            st.hits.load(Relaxed) + st.waited.load(Relaxed),
            st.misses.load(Relaxed)
        );
    }
    // Dropping the engine aborts the readers and detaches the programs.
    engine.watched.clear();
    engine.hooks = None;
    Ok(())
}

/// Wall-clock time in nanoseconds since the epoch.
fn wall_ns() -> i128 {
    time::OffsetDateTime::now_utc().unix_timestamp_nanos()
}

/// The chains and sets a namespace holds, for the incident engine's model.
pub(crate) fn inventory(
    legacy: &HashMap<(XtProto, String), XtTable>,
    nft: Option<&NftState>,
) -> Vec<InventoryChain> {
    let mut out = Vec::new();
    for t in legacy.values() {
        for c in &t.chains {
            out.push(InventoryChain {
                backend: Backend::Legacy,
                family: t.proto.family(),
                table: t.name.clone(),
                chain: c.name.clone(),
                rules: c.rules.len(),
                jumps: t.jump_targets(c),
                is_set: false,
            });
        }
    }
    for ((family, name), t) in nft.map(|s| &s.tables).into_iter().flatten() {
        let family = crate::ruleset::Family::from_nfproto(*family);
        for (chain, c) in &t.chains {
            out.push(InventoryChain {
                backend: Backend::Nft,
                family,
                table: name.clone(),
                chain: chain.clone(),
                rules: c.rules.len(),
                jumps: c
                    .rules
                    .iter()
                    .flat_map(|r| incidents::drift::jump_targets(Backend::Nft, &r.text))
                    .collect(),
                is_set: false,
            });
        }
        for (set, st) in &t.sets {
            if !st.set.is_anonymous() {
                out.push(InventoryChain {
                    backend: Backend::Nft,
                    family,
                    table: name.clone(),
                    chain: set.clone(),
                    rules: 0,
                    jumps: Vec::new(),
                    is_set: true,
                });
            }
        }
    }
    out
}

fn netlink_only_loss(why: &str) -> String {
    format!(
        "iptables-legacy/ip6tables-legacy/arptables-legacy changes, and namespaces created while \
         running ({why})"
    )
}

pub(crate) fn load_owners(path: Option<&std::path::Path>) -> anyhow::Result<Owners> {
    match path {
        Some(p) => Owners::with_file(p).map_err(anyhow::Error::msg),
        None => Ok(Owners::catalog()),
    }
}

fn xt_proto(kind: XtKind) -> Option<XtProto> {
    match kind {
        XtKind::Ipv4 => Some(XtProto::Ipv4),
        XtKind::Ipv6 => Some(XtProto::Ipv6),
        XtKind::Arp => Some(XtProto::Arp),
        XtKind::Bridge => None,
    }
}

/// The table a writer installed, decoded from the copy the kernel side made of its replace
/// struct; None (and the table is read back) when the copy does not decode as table `name`.
fn installed_table(proto: XtProto, name: &str, blob: Vec<u8>) -> Option<xtables::XtTable> {
    match xtables::decode_replace(proto, blob) {
        Ok(t) if t.name == name => Some(t),
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
fn replaced_before_read(x: &XtReplaceEvent, inode: u32, entries: usize) -> String {
    format!(
        "legacy table {} in namespace {inode} was replaced again before it could be read back \
         after {} {}'s change ({} entries installed, {entries} read): the changes reported for \
         it may include the next writer's. Tables up to a quarter of --ringbuf-size (1 MiB at \
         most) are copied as each writer installs them and never mixed up this way",
        x.table, x.process.comm, x.process.tgid, x.num_entries
    )
}

/// Now on the boot clock, the clock of the kernel records' times.
fn boot_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// Wall-clock time of a `bpf_ktime_get_boot_ns()` stamp.
fn boot_ns_to_time(ktime_ns: u64) -> String {
    use nix::time::{clock_gettime, ClockId};
    let (Ok(boot), Ok(real)) = (
        clock_gettime(ClockId::CLOCK_BOOTTIME),
        clock_gettime(ClockId::CLOCK_REALTIME),
    ) else {
        return now();
    };
    let ns = |t: nix::sys::time::TimeSpec| t.tv_sec() as i128 * 1_000_000_000 + t.tv_nsec() as i128;
    let wall = ns(real) - ns(boot) + ktime_ns as i128;
    time::OffsetDateTime::from_unix_timestamp_nanos(wall)
        .map(rfc3339)
        .unwrap_or_else(|_| now())
}

/// What a namespace holds when observer starts watching it.
pub(crate) struct Baseline {
    socket: Option<Socket>,
    pub nft: Option<(NftState, u32)>,
    pub legacy: HashMap<(XtProto, String), XtTable>,
    ipsets: Option<crate::ipset::Sets>,
    /// The namespace's interface names, for rule text (a socket opened inside it).
    ifnames: Option<nftables::ifnames::IfNames>,
    pub problems: Vec<String>,
}

/// Runs inside the namespace: subscribe first (when `subscribe`), then read, so nothing falls
/// between the two.
pub(crate) fn read_baseline(read_legacy: bool, subscribe: Option<usize>) -> Baseline {
    let mut b = Baseline {
        socket: None,
        nft: None,
        legacy: HashMap::new(),
        // A namespace found late already holds the change that revealed it: no baseline.
        ipsets: read_legacy.then(|| crate::ipset::list().ok()).flatten(),
        ifnames: nftables::ifnames::IfNames::open()
            .map_err(|e| tracing::debug!("interface names: {e}"))
            .ok(),
        problems: Vec::new(),
    };
    if let Some(rcvbuf) = subscribe {
        match nftables::socket::subscribe_with(rcvbuf) {
            Ok(s) => b.socket = Some(s),
            Err(e) => b.problems.push(format!("nftables subscription: {e}")),
        }
    }
    if b.socket.is_some() || subscribe.is_none() {
        match nftables::dump() {
            Ok(d) => {
                let gen = d.gen_id;
                let state = nftables::ifnames::scope(&mut b.ifnames, || NftState::from_dump(&d));
                b.nft = Some((state, gen));
            }
            Err(e) => b.problems.push(format!("nftables dump: {e}")),
        }
    }
    if read_legacy {
        b.legacy = read_legacy_tables(&mut b.problems);
    }
    b
}

/// Every x_tables table of the current namespace (runs inside it).
fn read_legacy_tables(problems: &mut Vec<String>) -> HashMap<(XtProto, String), XtTable> {
    let mut tables = HashMap::new();
    for proto in [XtProto::Ipv4, XtProto::Ipv6, XtProto::Arp] {
        let names = match xtables::table_names(proto) {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!("{proto:?} table names: {e}");
                continue;
            }
        };
        for name in names {
            match xtables::read_table(proto, &name) {
                Ok(t) => {
                    tables.insert((proto, name), t);
                }
                Err(e) => problems.push(format!("reading legacy table {name}: {e}")),
            }
        }
    }
    tables
}

impl Engine {
    fn emit_status(&mut self, s: StatusRecord) {
        self.write(&Record::Status(s));
    }

    fn write(&mut self, r: &Record) {
        if let Err(e) = self.output.emit(r) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                // The reader went away (`observer tail | head`): stop quietly.
                std::process::exit(0);
            }
            tracing::error!("cannot write output: {e}");
        }
    }

    /// Say so, once per change of the counters, when kernel records were lost or unreadable,
    /// then re-read every legacy table of every namespace: what the lost records would have
    /// shown is reported as `recovered` changes. Checked whenever a record arrives: a loss is
    /// noticed with the next record, no timer.
    async fn handle_losses(&mut self) {
        if self.report_losses() {
            self.resync_legacy().await;
        }
    }

    /// Re-read the legacy tables of every watched namespace and report how they differ from
    /// what observer holds, as `recovered` changes of an unknown writer.
    async fn resync_legacy(&mut self) {
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
            let began = boot_ns();
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
            let old = std::mem::replace(&mut w.legacy, tables);
            w.read_at = w.legacy.keys().map(|k| (k.clone(), began)).collect();
            let mut changes = Vec::new();
            for (key, new) in &w.legacy {
                changes.extend(xtables::diff(old.get(key), Some(new)));
            }
            for (key, gone) in &old {
                if !w.legacy.contains_key(key) {
                    changes.extend(xtables::diff(Some(gone), None));
                }
            }
            if changes.is_empty() {
                continue;
            }
            let name = w.handle.name.clone();
            let time = now();
            let txn = format!("xt-{inode}-resync-{}", wall_ns());
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

    /// Hand the output a snapshot of a namespace's tables, after the changes emitted so far.
    fn emit_snapshot(&mut self, inode: u32, backend: Backend, tables: Tables) {
        let Some(due) = self.snapshots.as_mut() else {
            return;
        };
        due.taken(inode, backend);
        let netns_name = self.watched.get(&inode).and_then(|w| w.handle.name.clone());
        self.output.snapshot(crate::forensics::Snapshot {
            seq: self.seq,
            time_ns: crate::store::now_ns(),
            netns: inode,
            netns_name,
            backend,
            tables: Arc::new(tables),
        });
    }

    fn legacy_snapshot(&mut self, inode: u32) {
        if self.snapshots.is_none() {
            return;
        }
        if let Some(w) = self.watched.get(&inode) {
            let tables = Tables::from_legacy(w.legacy.values());
            self.emit_snapshot(inode, Backend::Legacy, tables);
        }
    }

    /// Say so when the loss counters moved; true when kernel records of table replaces were
    /// lost (the legacy tables need a re-read).
    fn report_losses(&mut self) -> bool {
        let Some(h) = self.hooks.as_ref() else {
            return false;
        };
        let errors = h.errors();
        let malformed = self
            .reader_stats
            .malformed
            .load(std::sync::atomic::Ordering::Relaxed);
        let now_losses = (errors, malformed);
        if now_losses == self.losses {
            return false;
        }
        let (e0, m0) = self.losses;
        self.losses = now_losses;
        self.output.kernel_errors(&errors);
        let (ring, pending, r0, p0) = (
            errors.ringbuf_full,
            errors.pending_full,
            e0.ringbuf_full,
            e0.pending_full,
        );
        let mut parts = Vec::new();
        if ring > r0 {
            parts.push(format!(
                "{} kernel records lost because the ring buffer was full (raise --ringbuf-size)",
                ring - r0
            ));
        }
        if pending > p0 {
            parts.push(format!(
                "{} table replaces not tracked because too many were in flight",
                pending - p0
            ));
        }
        if malformed > m0 {
            parts.push(format!(
                "{} kernel records could not be decoded",
                malformed - m0
            ));
        }
        if errors.read_failed > e0.read_failed {
            parts.push(format!(
                "{} kernel reads failed (a writer's record may be missing or incomplete)",
                errors.read_failed - e0.read_failed
            ));
        }
        if errors.map_full > e0.map_full {
            parts.push(format!(
                "{} kernel map updates failed (a namespace or a refused batch may go unseen)",
                errors.map_full - e0.map_full
            ));
        }
        let resync = ring > r0 || pending > p0;
        self.emit_status(StatusRecord::gap(format!(
            "{}; {}",
            parts.join("; "),
            if resync {
                "every legacy table is re-read: what changed meanwhile follows as changes \
                 marked `recovered`, of an unknown writer"
            } else {
                "legacy changes around this time may be missing"
            }
        )));
        resync
    }

    fn warn(&mut self, message: String) {
        tracing::warn!("{message}");
    }

    /// Start watching a namespace. `new` means it appeared while observer ran: whatever it
    /// already holds was made after start and is reported (as found, not seen live).
    async fn watch(&mut self, handle: NetnsHandle, new: bool) {
        let inode = handle.inode;
        if self.watched.contains_key(&inode) {
            return;
        }
        let handle = Arc::new(handle);
        let file = match handle.file.try_clone() {
            Ok(f) => f,
            Err(e) => return self.warn(format!("namespace {inode}: {e}")),
        };
        // A namespace found late has no legacy baseline: its tables appear as created on their
        // first replace.
        let rcvbuf = self.netlink_rcvbuf;
        let began = boot_ns();
        let baseline = tokio::task::spawn_blocking(move || {
            netns::run_in(&file, move || read_baseline(!new, Some(rcvbuf)))
        })
        .await;
        let baseline = match baseline {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => return self.warn(format!("cannot enter namespace {inode}: {e}")),
            Err(e) => return self.warn(format!("namespace {inode}: {e}")),
        };
        for p in &baseline.problems {
            tracing::warn!("namespace {inode}: {p}");
        }
        if let Some(h) = self.hooks.as_mut() {
            h.mark_netns_seen(inode);
        }
        self.correlator.baseline(
            inode,
            handle.name.clone(),
            inventory(&baseline.legacy, baseline.nft.as_ref().map(|(s, _)| s)),
        );
        if let Some(sets) = baseline.ipsets {
            self.ipsets.insert(inode, sets);
        }
        let wants = self.snapshots.is_some();
        let legacy_snapshot = wants.then(|| Tables::from_legacy(baseline.legacy.values()));
        let nft_snapshot = baseline
            .nft
            .as_ref()
            .filter(|_| wants && baseline.socket.is_some())
            .map(|(state, _)| Tables::from_nft(state));
        let mut watched = Watched {
            handle: handle.clone(),
            read_at: baseline.legacy.keys().map(|k| (k.clone(), began)).collect(),
            legacy: baseline.legacy,
            nft_reader: None,
            nft_snapshot: wants.then(|| Arc::new(AtomicBool::new(false))),
            xt_socks: None,
        };
        if let (Some(sock), Some((state, gen))) = (baseline.socket, baseline.nft) {
            if new && !state.tables.is_empty() {
                // Written before the subscription opened: report what was established.
                let changes = established(&state);
                let msg = NsMsg::Nft {
                    inode,
                    gen,
                    process: Box::new(ProcessInfo::unknown()),
                    changes,
                    time: now(),
                    replayed: true,
                    recovered: false,
                    snapshot: None,
                };
                self.on_ns(msg);
            }
            let reader = handle.file.try_clone().and_then(|ns| {
                let writers = self.nft_writers();
                let builder = GenerationBuilder::new(state).with_ifnames(baseline.ifnames);
                let snap = watched.nft_snapshot.clone();
                let tx = self.ns_tx.clone();
                spawn_nft_reader(inode, ns, sock, builder, tx, writers, snap)
            });
            match reader {
                Ok(task) => watched.nft_reader = Some(task),
                Err(e) => tracing::warn!("namespace {inode}: nftables reader: {e}"),
            }
        }
        tracing::debug!(
            "watching namespace {inode} ({})",
            handle
                .name
                .as_deref()
                .unwrap_or(&handle.origin.display().to_string())
        );
        self.watched.insert(inode, watched);
        if let Some(t) = legacy_snapshot {
            self.emit_snapshot(inode, Backend::Legacy, t);
        }
        if let Some(t) = nft_snapshot {
            self.emit_snapshot(inode, Backend::Nft, t);
        }
    }

    /// The kernel's record of nftables writers, when the netlink hook is attached.
    fn nft_writers(&self) -> Option<Arc<WriterCache>> {
        let h = self.hooks.as_ref()?;
        h.report.netlink_lost.is_none().then(|| h.writers.clone())
    }

    fn refresh_mounts(&mut self) {
        self.mounts = netns::nsfs_mounts()
            .into_iter()
            .map(|(inode, path)| (path, inode))
            .collect();
    }

    /// Watched namespaces that no bind mount holds, observer's own aside (it lives as long as
    /// observer does): only processes keep them, and their exit is not reported.
    fn unmounted(&self) -> Vec<u32> {
        let mounted: std::collections::HashSet<u32> = self.mounts.values().copied().collect();
        let own = netns::inode_of(std::path::Path::new("/proc/self/ns/net")).ok();
        self.watched
            .keys()
            .filter(|i| !mounted.contains(i) && Some(**i) != own)
            .copied()
            .collect()
    }

    /// Whether some watched namespace is held only by processes, so that the sweep must look
    /// again later for it to go.
    fn held_by_processes_only(&self) -> bool {
        !self.unmounted().is_empty()
    }

    /// Let go of every watched namespace that nothing holds any more (no bind mount, no
    /// process): its descriptor would keep it alive. Each check reads /proc once, and runs only
    /// when some watched namespace is not mounted: when a namespace's mount goes, and every
    /// 10 s for namespaces that only processes held (an `unshare -n` whose last process
    /// exited).
    fn forget_gone(&mut self, why: &str) {
        let candidates = self.unmounted();
        if candidates.is_empty() {
            return;
        }
        let held = netns::held_by_processes();
        for inode in candidates.into_iter().filter(|i| !held.contains(i)) {
            tracing::debug!("namespace {inode} is gone ({why})");
            if self.snapshots.is_some() {
                // Gone: the record shows it empty from now on.
                self.emit_snapshot(inode, Backend::Legacy, Tables::default());
                self.emit_snapshot(inode, Backend::Nft, Tables::default());
                if let Some(d) = self.snapshots.as_mut() {
                    d.forget(inode);
                }
            }
            self.watched.remove(&inode);
            self.correlator.forget_netns(inode);
            self.ipsets.remove(&inode);
            if let Some(h) = self.hooks.as_mut() {
                h.forget_netns(inode);
            }
        }
    }

    async fn on_kernel(&mut self, ev: KernelEvent) {
        match ev {
            KernelEvent::NetnsSeen { process, created } => {
                if created {
                    self.ensure_created(&process).await;
                } else {
                    // A task that entered a namespace and left (or exited) before this was
                    // read leaves nothing to watch: not worth a warning.
                    self.find_namespace(&process, false).await;
                }
            }
            // Both go to the ring reader's caches (a piece of a table is joined to its replace
            // there).
            KernelEvent::NftGen { .. } | KernelEvent::XtBlob(_) => {}
            KernelEvent::Umount { path, .. } => {
                // A namespace's bind mount (known, or where `ip netns` and CNI plugins put them:
                // a namespace found after its mount was made may not be known yet). The kprobe
                // and fentry hook reports only namespace mounts, without a path.
                let known = self.mounts.contains_key(&PathBuf::from(&path));
                if path.is_empty()
                    || known
                    || path.starts_with("/run/netns/")
                    || path.starts_with("/var/run/netns/")
                {
                    self.refresh_mounts();
                    let what = if path.is_empty() {
                        "a namespace file"
                    } else {
                        &path
                    };
                    self.forget_gone(&format!("{what} unmounted"));
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

    /// A namespace just made (kprobe, fentry): its creator enters it (unshare) or hands it to a
    /// child (clone) a moment after the kernel reports it. Looked for at once; when it is not
    /// found yet, a task looks again a few times over about 100 ms (the engine goes on) and
    /// hands it back. A namespace nothing holds by then is gone, or is found when it is first
    /// written.
    async fn ensure_created(&mut self, p: &KernelProcess) {
        if p.netns == 0 || self.watched.contains_key(&p.netns) {
            return;
        }
        let pids: Vec<u32> = std::iter::once(p.tgid)
            .chain(p.ancestors.iter().map(|a| a.tgid))
            .collect();
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
            for delay_ms in [1u64, 2, 5, 10, 20, 60] {
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
    fn unseen(&mut self, inode: u32) {
        if self.watched.contains_key(&inode) {
            return;
        }
        if let Some(h) = self.hooks.as_mut() {
            h.forget_netns(inode);
        }
    }

    /// Make sure the writer's namespace is watched; returns false when it cannot be opened.
    async fn ensure_namespace(&mut self, p: &KernelProcess) -> bool {
        self.find_namespace(p, true).await
    }

    /// Watch the namespace of `p` (`p.netns`) if it is not watched yet; `warn` when it cannot be
    /// opened any more. Returns whether it is watched.
    async fn find_namespace(&mut self, p: &KernelProcess, warn: bool) -> bool {
        if p.netns == 0 {
            return false;
        }
        if self.watched.contains_key(&p.netns) {
            return true;
        }
        let pids: Vec<u32> = std::iter::once(p.tgid)
            .chain(p.ancestors.iter().map(|a| a.tgid))
            .collect();
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

    async fn on_replace(&mut self, mut x: XtReplaceEvent) {
        let process = attribution::from_kernel(&x.process);
        let proto = xt_proto(x.kind);
        if x.ret != 0 || proto.is_none() {
            // Refused by the kernel (nothing changed: no read, no diff), or an ebtables table,
            // which is not decoded: one line for the attempt.
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
        // The table the writer installed, as the kernel side copied it: exactly this writer's
        // change, whatever was installed after it.
        let installed = x
            .blob
            .take()
            .and_then(|b| installed_table(proto, &table, b));
        let read_back = installed.is_none();
        let began = boot_ns();
        let read = if let Some(t) = installed {
            Ok((None, Ok(t)))
        } else {
            match w.xt_socks.clone() {
                // The table was just replaced, so it exists: read it through the namespace's
                // sockets, from a pooled thread.
                Some(socks) => tokio::task::spawn_blocking(move || {
                    (None, xtables::read_existing_table(&socks, proto, &table))
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
                            (socks, xtables::read_table(proto, &table))
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
                self.emit_status(StatusRecord::gap(message));
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
        let mut changes = xtables::diff(old.as_ref(), new.as_ref());
        // The command line the kernel hook captured tells `-F` from `-D` of a one-rule chain.
        ruleset::settle_flushes(&mut changes, &ruleset::FlushEvidence::from_args(&x.args));
        if let Some(t) = new {
            w.legacy.insert(key, t);
        }
        let name = w.handle.name.clone();
        let time = boot_ns_to_time(x.ktime_ns);
        let txn = format!("xt-{inode}-{}", x.ktime_ns);
        self.emit_txn(
            ChangeCtx {
                inode,
                name,
                backend: Backend::Legacy,
                time,
                txn,
                source: x.source.into(),
                process,
                replayed: false,
                recovered: false,
            },
            changes,
        );
    }

    fn on_ns(&mut self, msg: NsMsg) {
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
                let txn = if recovered {
                    self.recovered_txns += 1;
                    format!("nft-{inode}-{gen}-recovered-{}", self.recovered_txns)
                } else {
                    format!("nft-{inode}-{gen}")
                };
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
                    self.emit_snapshot(inode, Backend::Nft, *t);
                }
            }
            NsMsg::Trouble { inode, message } => {
                self.emit_status(StatusRecord::gap(format!("namespace {inode}: {message}")));
            }
            NsMsg::Unfound(inode) => self.unseen(inode),
            // Handled by the run loop, which can wait for the namespace's first read.
            NsMsg::Found(_) => {}
        }
    }

    /// Number, print and correlate the changes of one transaction (all applied).
    fn emit_txn(&mut self, ctx: ChangeCtx, mut changes: Vec<Change>) {
        // Whatever the reader could not settle (nft writers whose request was not captured,
        // changes found by a re-read).
        ruleset::settle_flushes(&mut changes, &ruleset::FlushEvidence::Unknown);
        ruleset::settle_set_flushes(&mut changes, &ruleset::FlushEvidence::Unknown);
        let with_results = changes.into_iter().map(|c| (c, "ok".to_string())).collect();
        self.emit_txn_results(ctx, with_results);
    }

    /// Number, print and correlate the changes of one transaction; each has its `result`: `ok`
    /// or what went wrong (`EBUSY: Device or resource busy`).
    fn emit_txn_results(&mut self, ctx: ChangeCtx, changes: Vec<(Change, String)>) {
        let (inode, backend, n) = (ctx.inode, ctx.backend, changes.len() as u64);
        let mut records = Vec::with_capacity(changes.len());
        for (c, result) in changes {
            self.seq += 1;
            let record = Record::Change(ChangeRecord {
                seq: self.seq,
                time: ctx.time.clone(),
                netns: ctx.inode,
                netns_name: ctx.name.clone(),
                node: None,
                backend: ctx.backend,
                family: c.family,
                table: c.table,
                chain: c.chain,
                op: c.op,
                rule: c.rule,
                position: c.position,
                detail: c.detail,
                txn: ctx.txn.clone(),
                result,
                source: ctx.source,
                process: ctx.process.clone(),
                replayed: ctx.replayed,
                recovered: ctx.recovered,
            });
            self.write(&record);
            if let Record::Change(c) = record {
                records.push(c);
            }
        }
        if let Err(e) = self.output.end_txn() {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            tracing::error!("cannot write output: {e}");
        }
        let incidents = self.correlator.observe(&records);
        self.emit_incidents(incidents);
        if self
            .snapshots
            .as_mut()
            .is_some_and(|d| d.changed(inode, backend, n))
        {
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
    }

    fn emit_incidents(&mut self, incidents: Vec<IncidentRecord>) {
        for i in incidents {
            self.write(&Record::Incident(i));
        }
    }

    /// An ipset command, applied: list the namespace's sets once and report what changed.
    async fn on_ipset(&mut self, s: nlattr::NfnlSendEvent) {
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
        let name = self.watched.get(&inode).and_then(|w| w.handle.name.clone());
        let ctx = ChangeCtx {
            inode,
            name,
            backend: Backend::Ipset,
            time: boot_ns_to_time(s.ktime_ns),
            txn: format!("ipset-{inode}-{}", s.ktime_ns),
            // The ipset capture is the sendto/sendmsg tracepoints on every backend.
            source: Source::Tracepoint,
            process: attribution::from_kernel(&s.process),
            replayed: false,
            recovered: false,
        };
        self.emit_txn_results(ctx, outcomes);
    }

    /// Refused nftables writes (from the replies a writer read, or from the kernel's error path):
    /// each is reported as the change it attempted, with the kernel's error as its `result`.
    fn on_refused(
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
            time: boot_ns_to_time(ktime_ns),
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
                    crate::xtables::attempt::errno_text(r.errno as i64),
                )
            })
            .collect();
        self.emit_txn_results(ctx, changes);
    }

    /// A legacy replace reported as one `table_replace` line, with the kernel's result.
    fn emit_attempt(&mut self, x: &XtReplaceEvent, process: ProcessInfo, c: (Change, String)) {
        let inode = x.process.netns;
        let name = self.watched.get(&inode).and_then(|w| w.handle.name.clone());
        let ctx = ChangeCtx {
            inode,
            name,
            backend: Backend::Legacy,
            time: boot_ns_to_time(x.ktime_ns),
            txn: format!("xt-{inode}-{}", x.ktime_ns),
            source: x.source.into(),
            process,
            replayed: false,
            recovered: false,
        };
        self.emit_txn_results(ctx, vec![c]);
    }
}

struct ChangeCtx {
    inode: u32,
    name: Option<String>,
    backend: Backend,
    time: String,
    txn: String,
    source: Source,
    process: ProcessInfo,
    replayed: bool,
    recovered: bool,
}

/// What a namespace's ruleset holds, as the changes that made it (for a namespace found after its
/// first write).
fn established(state: &NftState) -> Vec<Change> {
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
                        .rule(rule.text.clone(), Some(pos), rule.fingerprint),
                );
            }
        }
    }
    out
}

/// Read a namespace's nftables notifications until the task is aborted.
fn spawn_nft_reader(
    inode: u32,
    ns: std::fs::File,
    sock: Socket,
    builder: GenerationBuilder,
    tx: mpsc::Sender<NsMsg>,
    writers: Option<Arc<WriterCache>>,
    snap: Option<Arc<AtomicBool>>,
) -> std::io::Result<JoinHandle<()>> {
    // SAFETY: the socket owns its fd and is moved into the AsyncFd, which keeps it open until the
    // task ends.
    let fd = unsafe { AsyncFd::register(sock) }.map_err(std::io::Error::from)?;
    Ok(tokio::spawn(nft_reader(
        inode, ns, fd, builder, tx, writers, snap,
    )))
}

async fn nft_reader(
    inode: u32,
    ns: std::fs::File,
    fd: AsyncFd<Socket>,
    builder: GenerationBuilder,
    tx: mpsc::Sender<NsMsg>,
    writers: Option<Arc<WriterCache>>,
    snap: Option<Arc<AtomicBool>>,
) {
    let why = read_notifications(inode, &ns, fd, builder, &tx, writers.as_deref(), snap).await;
    let _ = tx
        .send(NsMsg::Trouble {
            inode,
            message: why,
        })
        .await;
}

/// Turn notifications into transactions until the socket fails; returns why it stopped.
async fn read_notifications(
    inode: u32,
    ns: &std::fs::File,
    mut fd: AsyncFd<Socket>,
    mut builder: GenerationBuilder,
    tx: &mpsc::Sender<NsMsg>,
    writers: Option<&WriterCache>,
    snap: Option<Arc<AtomicBool>>,
) -> String {
    let mut buf = vec![0u8; nftables::socket::RECV_BUF_BYTES];
    loop {
        let mut guard = match fd.readable_mut().await {
            Ok(g) => g,
            Err(e) => return format!("nftables notifications stopped: {e}"),
        };
        loop {
            match nftables::recv(guard.get_inner(), &mut buf) {
                Ok(Some(n)) => {
                    let txns = builder.feed(&buf[..n]).transactions;
                    let count = txns.len();
                    for (i, mut t) in txns.into_iter().enumerate() {
                        let process =
                            nlattr::nft_writer(writers, inode, t.gen_id, t.pid, &t.comm).await;
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
                            time: now(),
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
                        message: format!(
                            "{e} at {}; re-reading the namespace: what changed meanwhile follows \
                             as changes marked `recovered` (each generation's own grouping and \
                             intermediate states are lost)",
                            now()
                        ),
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
                    let dump = match resync(ns).await {
                        Ok(d) => d,
                        Err(e) => return format!("re-reading the ruleset failed: {e}"),
                    };
                    let t = builder.resync(&dump);
                    if t.changes.is_empty() {
                        continue;
                    }
                    let lost = writers.map(|w| w.take_unmatched(inode)).unwrap_or_default();
                    let parts = nlattr::attribute_recovered(t.changes, &lost);
                    let count = parts.len();
                    if let Some(f) = &snap {
                        f.store(true, Ordering::Relaxed);
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
                            time: now(),
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

/// The reader's tables for a snapshot, when one was asked for and `last` is the transaction
/// the state is after.
fn nft_snapshot(
    snap: &Option<Arc<AtomicBool>>,
    last: bool,
    builder: &GenerationBuilder,
) -> Option<Box<Tables>> {
    let asked = snap.as_ref()?;
    (last && asked.swap(false, Ordering::Relaxed))
        .then(|| Box::new(Tables::from_nft(builder.state())))
}

/// How often the kernel maps are swept of tasks that exited.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Sleep until `at` (never returns for `None`; the caller's `select!` guards on it).
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The most queued datagrams dropped before a re-read (a writer that never pauses keeps the
/// queue full; the rest are fed after the dump, their generations being older are ignored).
const STALE_DATAGRAMS: usize = 65_536;

/// Dump a namespace's ruleset again after lost notifications.
async fn resync(ns: &std::fs::File) -> Result<nftables::socket::Dump, String> {
    let file = ns.try_clone().map_err(|e| e.to_string())?;
    let dumped = tokio::task::spawn_blocking(move || netns::run_in(&file, nftables::dump))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    Ok(dumped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_time_maps_to_now() {
        use nix::time::{clock_gettime, ClockId};
        let boot = clock_gettime(ClockId::CLOCK_BOOTTIME).unwrap();
        let ns = boot.tv_sec() as u64 * 1_000_000_000 + boot.tv_nsec() as u64;
        let t = boot_ns_to_time(ns);
        assert_eq!(&t[..16], &now()[..16], "{t}");
    }
}
