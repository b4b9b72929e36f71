//! The engine: puts the sources, the namespaces, the decoders and the output together.
//!
//! - Kernel records (ring buffer) arrive on one channel: a table replace triggers one read of
//!   that table inside its namespace and a structural diff against the last copy; a namespace the
//!   kernel reports as new is opened and subscribed at once; an unmount of a namespace's bind
//!   mount lets it go.
//! - Each namespace has a netlink reader task that turns nftables notifications into
//!   transactions and attributes them while the writer may still be alive.
//! - Everything is numbered (`seq`), correlated and written here, in arrival order.
//!
//! There is no polling timer: every read is triggered by a kernel record or a notification
//! (incident windows end on their own deadline).
//!
//! The engine is a pure core and an I/O shell. `core` takes a decoded transaction (or the
//! passing of time) and returns its lines: numbered changes and the incidents they raise; it
//! is tested without a kernel. This file holds the shell's loop and its state; the loop's jobs
//! are in `kernel` (records from the hooks), `legacy` (x_tables replaces), `namespaces` (which
//! namespaces are watched), `nft` (each namespace's nftables reader), `emit` (what goes to the
//! [`Output`]) and `baseline` (what a namespace holds when it is first watched). The engine is
//! started with an [`EngineConfig`], which the command line or the daemon's settings build.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::attribution::ProcessInfo;
use crate::forensics::model::Tables;
use crate::hooks::decode::KernelEvent;
use crate::hooks::{HookOptions, KernelHooks, ReaderStats};
use crate::incidents::owners::{Owners, OwnersError};
use crate::incidents::{self, Correlator};
use crate::netns::{self, NetnsHandle};
use crate::output::{Line, Source, StatusLine};
use crate::ruleset::Change;
use crate::timestamp::Timestamp;
use crate::xtables::{self, XtProto, XtTable};

mod baseline;
mod core;
mod emit;
mod kernel;
mod legacy;
mod namespaces;
mod nft;
mod restore;

use self::core::lifecycle::Sweep;
pub use self::core::requests;
use self::core::{ChangeCtx, Core};
pub(crate) use baseline::{inventory, read_baseline};
use nft::{sleep_until_some, until_notified};

/// A transaction from a namespace's netlink reader.
enum NsMsg {
    Nft {
        inode: u32,
        gen: u32,
        /// Boxed: the writer's attribution is by far the largest part of a message.
        process: Box<ProcessInfo>,
        changes: Vec<Change>,
        time: Timestamp,
        replayed: bool,
        /// Found by re-reading the namespace after notifications were lost.
        recovered: bool,
        /// The namespace's nft tables after this transaction, when a snapshot was asked for.
        snapshot: Option<Box<Tables>>,
    },
    /// The namespace's nft tables now, asked for at once (after a gap in the record).
    NftSnapshot { inode: u32, tables: Box<Tables> },
    /// The reader stopped or lost notifications.
    Trouble { inode: u32, message: String },
    /// The namespace's nftables ruleset passed what it may hold, with this many rules: it is
    /// held at chain level from now on.
    NftChainLevel { inode: u32, rules: usize },
    /// A legacy replace learned off the loop, or why it could not be.
    Learned {
        inode: u32,
        learned: Result<Box<legacy::Learned>, String>,
    },
    /// An ebtables replace read back off the loop.
    BridgeRead {
        inode: u32,
        read: Box<legacy::BridgeRead>,
    },
    /// A namespace's legacy tables re-read off the loop after a loss of kernel records.
    Reread { inode: u32, reread: legacy::Reread },
    /// A namespace made a moment ago, found after its creator entered it (or handed it on).
    Found(NetnsHandle),
    /// A namespace made a moment ago that nothing held any more when it was looked for.
    Unfound(u32),
}

/// One watched namespace.
struct Watched {
    handle: Arc<NetnsHandle>,
    /// The legacy tables as last decoded, shared with the read of the next copy, which takes
    /// the chains that did not change from it.
    legacy: HashMap<(XtProto, String), Arc<XtTable>>,
    nft_reader: Option<JoinHandle<()>>,
    /// Set to ask the nft reader for a snapshot with its next transaction.
    nft_snapshot: Option<Arc<self::nft::SnapAsk>>,
    /// Its nftables ruleset is held at chain level (see [`Engine::nft_chain_level`]).
    nft_chain_level: bool,
    /// Sockets of the namespace for reading its legacy tables without entering it, opened at
    /// its first legacy replace (they keep it alive: dropped with this entry).
    xt_socks: Option<Arc<xtables::XtSockets>>,
    /// When (boot clock) each legacy table in `legacy` was last read back from the kernel
    /// rather than taken from a writer's copy. A read holds every replace made before it
    /// began: the copy of such a replace, still queued, must not be diffed against it (the
    /// read may also hold later replaces, which the diff would show undone).
    read_at: HashMap<(XtProto, String), u64>,
    /// The ebtables tables as last read back after a replace, by name.
    bridge: HashMap<String, xtables::ebt::EbTable>,
    /// What waits behind a legacy replace not learned yet, in the order it came: the replaces
    /// the kernel took, refused replaces and nftables transactions.
    waiting: std::collections::VecDeque<legacy::Waiting>,
    /// A replace is being learned, off the loop.
    learning: bool,
}

impl Watched {
    /// What it has not reported yet behind its legacy replaces: what waits, and the replace
    /// being learned.
    fn unlearned(&self) -> usize {
        self.waiting.len() + usize::from(self.learning)
    }

    /// Whether what it reports now must wait behind a replace not learned yet.
    fn behind_a_replace(&self) -> bool {
        self.learning || !self.waiting.is_empty()
    }

    /// How many rules table `key`'s next copy may have to be held at rule level: what `limit`
    /// leaves beside the namespace's other tables held at rule level.
    fn rule_room(&self, key: &(XtProto, String), limit: usize) -> usize {
        let own = self
            .legacy
            .get(key)
            .filter(|t| !t.chain_level())
            .map_or(0, |t| t.rule_count());
        limit.saturating_sub(self.rule_level_rules() - own)
    }

    /// The rules of its legacy tables held at rule level.
    fn rule_level_rules(&self) -> usize {
        self.legacy
            .values()
            .filter(|t| !t.chain_level())
            .map(|t| t.rule_count())
            .sum()
    }
}

/// The most rules one namespace's legacy tables may hold at rule level: its own `limit`, and
/// what the `budget` leaves after the rules held at rule level `elsewhere` (in every other
/// namespace but the node's).
fn namespace_rule_limit(limit: usize, budget: usize, elsewhere: usize) -> usize {
    limit.min(budget.saturating_sub(elsewhere))
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
    /// Set when the output's reader went away (`observer tail | head`): the run ends quietly.
    output_closed: bool,
    /// Numbering and correlation (pure: what it returns is written here).
    core: Core,
    watched: HashMap<u32, Watched>,
    /// nsfs bind mounts (path → namespace), to notice `ip netns del`.
    mounts: HashMap<PathBuf, u32>,
    hooks: Option<KernelHooks>,
    ns_tx: mpsc::Sender<NsMsg>,
    reader_stats: Arc<ReaderStats>,
    /// Losses already reported.
    losses: self::core::losses::Losses,
    /// The last ipset listing of each namespace (see `ipset`).
    ipsets: HashMap<u32, crate::ipset::Sets>,
    /// Receive buffer of the notification sockets (`--netlink-rcvbuf`).
    netlink_rcvbuf: usize,
    /// The most rules a namespace's legacy tables are held at rule level.
    rule_level_limit: usize,
    /// The most rules the legacy tables of every namespace but the node's together are held at
    /// rule level.
    rule_level_budget: usize,
    /// The node's own network namespace (`--node-netns`): no other namespace's tables take its
    /// room. None when it could not be read.
    node_netns: Option<u32>,
    /// Transactions recovered by re-reads so far (numbers their `txn`).
    recovered_txns: u64,
    /// When the output keeps snapshots (the record): which are due.
    snapshots: Option<crate::forensics::Due>,
    /// `--restore`: what was lost, and the restores due.
    restorer: Option<crate::restore::Restorer>,
    /// Lines waiting to be written, per namespace: a large load's pieces, and what its
    /// namespace reported after it.
    backlog: self::core::backlog::Backlog<emit::Queued>,
}

/// Lines the engine has handed its output so far: after a signal, the exit watchdog's sign
/// that the output still takes them (`cmd::exit_after_signal`).
pub static LINES_OUT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

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
    /// The most rules a namespace's legacy tables are held at rule level (the rest at chain
    /// level).
    pub rule_level_limit: usize,
    /// The most rules the legacy tables of every namespace but the node's together are held at
    /// rule level.
    pub rule_level_budget: usize,
    /// The node's own network namespace, held within `rule_level_limit` whatever the others
    /// hold.
    pub node_netns: PathBuf,
    /// The most bytes of entries read out of the kernel for one legacy table.
    pub max_table_read: usize,
    /// The chain ownership file; the built-in catalog when none.
    pub owners: Option<PathBuf>,
    /// The incident windows.
    pub incidents: incidents::Config,
    /// Where writers' pods and containers are named from.
    pub pods: crate::pods::PodDirs,
    /// The `seq` of the last change already recorded: numbering goes on after it.
    pub first_seq: u64,
    /// `--restore`: put back what foreign wipes take from these owners. None: never write.
    pub restore: Option<crate::restore::RestoreConfig>,
    /// The system bus watched for firewalld's callers; None: not watched.
    pub system_bus: Option<String>,
}

/// Why the engine could not start (once started, it reports trouble as status lines and goes
/// on).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A signal handler could not be installed.
    #[error("installing the {signal} handler")]
    Signal {
        signal: &'static str,
        #[source]
        cause: std::io::Error,
    },
    /// The ownership file (`--owners`) cannot be used.
    #[error(transparent)]
    Owners(#[from] OwnersError),
    /// `--restore` names owners that neither the catalog nor the owners file knows.
    #[error(
        "--restore: unknown owner {}; known owners: {} (name another in an [[owner]] entry \
         of the --owners file)",
        unknown.join(", "),
        known.join(", ")
    )]
    RestoreOwners {
        unknown: Vec<String>,
        known: Vec<String>,
    },
    /// The kernel hooks asked for (`--hooks` other than `auto`) could not be attached.
    #[error("attaching the kernel hooks")]
    Hooks(#[source] crate::hooks::HookError),
    /// The task that reads the ring buffer could not be started.
    #[error("starting the ring buffer reader")]
    Reader(#[source] std::io::Error),
    /// No network namespace could be opened (no `/proc`, or not enough privilege).
    #[error("{0}")]
    NoNamespace(String),
    /// `--node-netns` names no network namespace observer can read.
    #[error(
        "--node-netns {}: {cause} (name the node's network namespace: a /proc/PID/ns/net or \
         /run/netns/NAME path)",
        path.display()
    )]
    NodeNetns {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    /// The engine's task was cancelled (the runtime shut down under it).
    #[error("the engine stopped: {0}")]
    Stopped(String),
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
    fn emit(&mut self, record: &Line) -> std::io::Result<()>;

    /// The records of one transaction have all been given (so a view may draw them together).
    fn end_txn(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    /// The kernel side's error counters moved (for a sink that exports them, such as metrics).
    fn kernel_errors(&mut self, _errors: &crate::hooks::KernelErrors) {}

    /// A legacy table was learned after a replace: `read_back` from the kernel (the fallback),
    /// or else decoded from its writer's copy (for a sink that counts them, such as metrics).
    fn table_learned(&mut self, _read_back: bool) {}

    /// How many legacy tables are held at chain level now (`--rule-level-limit`), for a sink
    /// that exports it.
    fn chain_level_tables(&mut self, _tables: usize) {}

    /// How many namespaces' nftables rulesets are held at chain level now, for a sink that
    /// exports it.
    fn nft_chain_level(&mut self, _namespaces: usize) {}

    /// When this output keeps snapshots of the rulesets (the daemon's record), how often.
    fn snapshot_policy(&self) -> Option<crate::forensics::SnapshotPolicy> {
        None
    }

    /// Take a snapshot, after the changes given so far.
    fn snapshot(&mut self, _snapshot: crate::forensics::Snapshot) {}

    /// For an output that keeps snapshots: signalled when it is written again after a stretch
    /// it could not take, so that a snapshot of every namespace makes what it holds whole again.
    fn resumed(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }
}

/// Watch every namespace and send every record to `output` until SIGINT or SIGTERM.
///
/// The engine runs as a task of the runtime's workers, not on the thread that called: a
/// namespace's reader task hands it each transaction over a channel, and the worker that sent
/// it runs the engine next (tokio's LIFO slot) instead of waking another thread to do it, which
/// on a busy 2-CPU node costs a fifth of a millisecond or more per change.
pub async fn run(config: &EngineConfig, output: Box<dyn Output>) -> Result<(), EngineError> {
    let config = config.clone();
    match tokio::spawn(async move { run_here(&config, output).await }).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(EngineError::Stopped(e.to_string())),
    }
}

async fn run_here(config: &EngineConfig, output: Box<dyn Output>) -> Result<(), EngineError> {
    // Streams created first, before anything can print `ready`: a signal that arrives during
    // start-up, or while the engine is busy, is kept until the loop comes back to it (and the
    // exit stays clean) instead of killing the process.
    use tokio::signal::unix::SignalKind;
    let handler = |kind: SignalKind, signal: &'static str| {
        tokio::signal::unix::signal(kind).map_err(|cause| EngineError::Signal { signal, cause })
    };
    let mut signals = Signals {
        sigint: handler(SignalKind::interrupt(), "SIGINT")?,
        sigterm: handler(SignalKind::terminate(), "SIGTERM")?,
    };
    let (mut engine, mut channels) = start(config, output).await?;
    run_loop(&mut engine, &mut signals, &mut channels).await;
    // What the kernel reported and is not written yet goes out before the end.
    finish(&mut engine, &mut channels).await;
    // The queues go last, after the readers and the programs.
    engine.stop();
    drop(channels);
    Ok(())
}

/// SIGINT and SIGTERM, which end the run.
struct Signals {
    sigint: tokio::signal::unix::Signal,
    sigterm: tokio::signal::unix::Signal,
}

/// What the loop reads: the kernel hooks' records and the namespaces' messages.
struct Channels {
    kernel_rx: mpsc::Receiver<KernelEvent>,
    ns_rx: mpsc::Receiver<NsMsg>,
    /// firewalld's calls and replies (see [`crate::bus`]); a channel nobody sends on when the
    /// bus is not watched.
    bus_rx: mpsc::Receiver<crate::bus::BusMsg>,
    bus_task: Option<JoinHandle<()>>,
}

impl Drop for Channels {
    fn drop(&mut self) {
        if let Some(t) = self.bus_task.take() {
            t.abort();
        }
    }
}

/// Attach the hooks, watch every namespace that exists now, and say `ready`.
async fn start(
    config: &EngineConfig,
    output: Box<dyn Output>,
) -> Result<(Engine, Channels), EngineError> {
    let owners = load_owners(config.owners.as_deref())?;
    if let Some(r) = &config.restore {
        let known = owners.names();
        let unknown: Vec<String> = r
            .owners
            .unknown(&known)
            .into_iter()
            .map(str::to_string)
            .collect();
        if !unknown.is_empty() {
            return Err(EngineError::RestoreOwners { unknown, known });
        }
    }
    let correlator = Correlator::new(config.incidents.clone(), owners);
    crate::pods::configure(config.pods.clone());
    crate::xtables::sockopt::set_read_cap(config.max_table_read);
    if !nix::unistd::geteuid().is_root() {
        tracing::warn!(
            "not running as root: loading BPF programs and joining namespaces will likely fail"
        );
    }

    let (kernel_tx, kernel_rx) = mpsc::channel::<KernelEvent>(8192);
    let (ns_tx, ns_rx) = mpsc::channel::<NsMsg>(8192);
    let mut lost = Vec::new();
    let hooks = attach_hooks(config, &mut lost)?;
    let snapshots = output.snapshot_policy().map(crate::forensics::Due::new);
    let mut engine = Engine {
        snapshots,
        output,
        output_closed: false,
        core: Core::new(config.first_seq, correlator),
        watched: HashMap::new(),
        mounts: HashMap::new(),
        hooks,
        ns_tx,
        reader_stats: Arc::new(ReaderStats::default()),
        losses: Default::default(),
        ipsets: HashMap::new(),
        netlink_rcvbuf: config.netlink_rcvbuf,
        rule_level_limit: config.rule_level_limit,
        rule_level_budget: config.rule_level_budget,
        node_netns: node_netns(&config.node_netns)?,
        recovered_txns: 0,
        restorer: config.restore.clone().map(crate::restore::Restorer::new),
        backlog: Default::default(),
    };
    let reader_stats = engine.reader_stats.clone();
    if let Some(h) = engine.hooks.as_mut() {
        h.spawn_reader(kernel_tx, reader_stats)
            .map_err(EngineError::Reader)?;
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
    release_free_heap();
    if engine.watched.is_empty() {
        return Err(EngineError::NoNamespace(
            if nix::unistd::geteuid().is_root() {
                "no network namespace could be opened (is /proc mounted?)".to_string()
            } else {
                // Each capability, what it is for and what is lost without it: crate::caps.
                format!(
                    "no network namespace could be opened: observer tail needs root (or {}); \
                     run it with sudo",
                    crate::caps::NEEDED
                )
            },
        ));
    }

    let ready = engine.ready(lost);
    engine.emit_status(ready);
    // What the rulesets already show (split brain), once everything is read.
    let found = engine.core.check_all(Timestamp::now());
    engine.emit_incidents(found);
    let (bus_tx, bus_rx) = mpsc::channel(BUS_QUEUE);
    let bus_task = config
        .system_bus
        .clone()
        .map(|address| tokio::spawn(crate::bus::watch(address, bus_tx)));
    Ok((
        engine,
        Channels {
            kernel_rx,
            ns_rx,
            bus_rx,
            bus_task,
        },
    ))
}

/// Read the sources and write what they show until a signal, or until the output's reader
/// goes away.
async fn run_loop(engine: &mut Engine, signals: &mut Signals, channels: &mut Channels) {
    let Channels {
        kernel_rx,
        ns_rx,
        bus_rx,
        ..
    } = channels;
    // Kernel map entries of tasks that exited, namespaces nothing holds any more and losses no
    // later record brought to light are looked for after something happened (see `Sweep`), and
    // the heap's free pages are given back then.
    let mut sweep = Sweep::new(tokio::time::Instant::now());
    let resumed = engine.output.resumed();
    while !engine.output_closed {
        // Incident windows (flapping, mass flush repair) end on a timer of their own, and
        // restores are due on one.
        let deadline = earliest(engine.core.next_deadline(), engine.next_restore());
        let wake = tokio::time::Instant::now() + self::core::wake_in(deadline, Timestamp::now());
        tokio::select! {
            biased;
            _ = signals.sigint.recv() => break,
            _ = signals.sigterm.recv() => break,
            _ = tokio::time::sleep_until(wake), if deadline.is_some() => {
                let closed = engine.core.tick(Timestamp::now());
                engine.emit_incidents(closed);
                engine.run_restores(Timestamp::now()).await;
            }
            // Before the changes: a call to firewalld is seen before firewalld acts on it, and
            // the change it makes must find it.
            Some(msg) = bus_rx.recv() => engine.on_bus(msg),
            // The record is written again after a gap: what it holds is made whole again.
            () = until_notified(resumed.as_deref()) => engine.snapshot_everything(),
            Some(ev) = kernel_rx.recv() => {
                // Records lost before this one are re-read first: the re-read holds what they
                // did (as recovered changes of an unknown writer), and the changes still queued
                // that it holds are not passed off as this writer's.
                engine.handle_losses();
                engine.on_kernel(ev).await;
                sweep.activity(tokio::time::Instant::now());
            }
            Some(msg) = ns_rx.recv() => {
                match msg {
                    NsMsg::Found(handle) => {
                        engine.watch(handle, true).await;
                        engine.refresh_mounts();
                    }
                    msg => engine.on_ns(msg),
                }
                sweep.activity(tokio::time::Instant::now());
            }
            () = sleep_until_some(sweep.at), if sweep.at.is_some() => {
                // Losses that no later record brought to light (the ring buffer filled, then
                // all went quiet) are reported here at the latest.
                engine.handle_losses();
                engine.refresh_mounts();
                engine.forget_gone("nothing holds it any more");
                // What was freed since (a re-read's states and dump, a large transaction's
                // lines, a legacy read) goes back to the kernel: the allocator keeps freed
                // pages between live blocks otherwise. Under 1.1 ms for a 180 MiB heap.
                release_free_heap();
                if let Some(h) = engine.hooks.as_mut() {
                    let n = h.sweep_exited();
                    if n > 0 {
                        tracing::debug!("{n} kernel entries of exited tasks removed");
                    }
                }
                let held_by_processes_only = engine.held_by_processes_only();
                sweep.swept(tokio::time::Instant::now(), held_by_processes_only);
            }
            // Last: a piece of the lines waiting, when no other event is ready.
            () = std::future::ready(()), if !engine.backlog.is_empty() => engine.work_backlog(),
            else => break,
        }
    }
}

/// How long the end waits for legacy replaces still being learned: within `tail`'s 5 s after a
/// signal (`cmd::exit_after_signal`), so that what is left can still be said in the log.
const FINISH_WAIT: std::time::Duration = std::time::Duration::from_secs(4);
/// At the end, the kernel records already on their way are taken until none came for this
/// long, or for [`RECORDS_WAIT`] at most.
const RECORDS_QUIET: std::time::Duration = std::time::Duration::from_millis(50);
const RECORDS_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The run ends: the kernel records already on their way are handled, the lines waiting in
/// the backlog are written, and the legacy replaces taken and not yet learned are learned and
/// written too (for at most [`FINISH_WAIT`]; those left are said in the log), so that a change
/// the kernel reported before the signal is not lost.
async fn finish(engine: &mut Engine, channels: &mut Channels) {
    let records_until = tokio::time::Instant::now() + RECORDS_WAIT;
    while !engine.output_closed && tokio::time::Instant::now() < records_until {
        match tokio::time::timeout(RECORDS_QUIET, channels.kernel_rx.recv()).await {
            Ok(Some(ev)) => {
                engine.handle_losses();
                engine.on_kernel(ev).await;
            }
            Ok(None) | Err(_) => break,
        }
    }
    let ns_rx = &mut channels.ns_rx;
    let until = tokio::time::Instant::now() + FINISH_WAIT;
    loop {
        engine.flush_backlog();
        if engine.output_closed {
            return;
        }
        let waiting: Vec<u32> = engine
            .watched
            .iter()
            .filter(|(_, w)| w.unlearned() > 0)
            .map(|(inode, _)| *inode)
            .collect();
        if waiting.is_empty() {
            return;
        }
        let before: usize = engine.watched.values().map(Watched::unlearned).sum();
        for inode in waiting {
            engine.learn_next(inode);
        }
        let learning = engine.watched.values().any(|w| w.learning);
        let after: usize = engine.watched.values().map(Watched::unlearned).sum();
        if !learning && after < before {
            // What waited was reported here and now: nothing to wait for.
            continue;
        }
        match tokio::time::timeout_at(until, ns_rx.recv()).await {
            Ok(Some(NsMsg::Found(_))) => {}
            Ok(Some(msg)) => engine.on_ns(msg),
            Ok(None) | Err(_) => {
                let left: usize = engine.watched.values().map(Watched::unlearned).sum();
                tracing::warn!(
                    "{left} legacy table replaces (and what their namespaces reported after them) were not reported before the end (after {} s)",
                    FINISH_WAIT.as_secs()
                );
                return;
            }
        }
    }
}

/// firewalld's calls queued for the engine at most; more are dropped (their changes stay
/// firewalld's alone).
const BUS_QUEUE: usize = 1024;

impl Engine {
    fn on_bus(&mut self, msg: crate::bus::BusMsg) {
        match msg {
            crate::bus::BusMsg::Call(c) => self.core.bus_call(*c),
            crate::bus::BusMsg::Reply(r) => self.core.bus_reply(&r),
        }
    }
}

fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The kernel hooks `config` asks for, or none (netlink only), with the losses that makes.
fn attach_hooks(
    config: &EngineConfig,
    lost: &mut Vec<String>,
) -> Result<Option<KernelHooks>, EngineError> {
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
            Err(e) => return Err(EngineError::Hooks(e)),
        },
    };
    Ok(hooks)
}

impl Engine {
    /// The `ready` line: what is watched and through which hooks, and what is `lost`.
    fn ready(&self, lost: Vec<String>) -> StatusLine {
        let mut sources = vec![Source::Netlink];
        if let Some(h) = &self.hooks {
            sources = h.report.placement.sources();
        }
        let ready = StatusLine {
            state: crate::output::line::StatusState::Ready,
            time: Timestamp::now(),
            message: format!(
                "watching {} network namespaces; every hook attached and every subscription open",
                self.watched.len()
            ),
            hooks: Some(self.hooks.as_ref().map_or_else(
                || "x_tables=none namespaces=none nf_tables=netlink nf_writers=proc".into(),
                |h| h.report.placement.summary(),
            )),
            sources,
            netns_watched: Some(self.watched.len()),
            lost,
            record_gap: None,
            gap: None,
            x_tables_hook: Some(self.hooks.as_ref().map_or("none", |h| {
                h.report
                    .placement
                    .x_tables
                    .map_or("none", crate::hooks::backend::HookBackend::as_str)
            })),
        };
        ready
    }

    /// The run ended: log how nftables writers were named, abort the readers and detach the
    /// programs.
    fn stop(mut self) {
        if let Some(h) = self.hooks.as_ref() {
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
        self.watched.clear();
        self.hooks = None;
    }
}

impl Engine {
    /// The most rules namespace `inode`'s legacy tables may hold at rule level now. The node's
    /// own namespace: its limit, whatever the others hold. Any other: its limit, within what
    /// the budget leaves beside the other namespaces but the node's.
    fn rule_limit(&self, inode: u32) -> usize {
        if self.is_node(inode) {
            return self.rule_level_limit;
        }
        let elsewhere = self.held_by_other_pods(inode);
        namespace_rule_limit(self.rule_level_limit, self.rule_level_budget, elsewhere)
    }

    /// The rules held at rule level by every namespace but `inode` and the node's: what the
    /// budget is shared with.
    fn held_by_other_pods(&self, inode: u32) -> usize {
        self.watched
            .iter()
            .filter(|(i, _)| **i != inode && !self.is_node(**i))
            .map(|(_, w)| w.rule_level_rules())
            .sum()
    }

    /// The most rules namespace `inode`'s nftables ruleset may hold rule by rule: past it, it
    /// is held at chain level. The node's: its limit; any other: its limit within the budget.
    fn nft_rule_cap(&self, inode: u32) -> usize {
        if self.is_node(inode) {
            self.rule_level_limit
        } else {
            self.rule_level_limit.min(self.rule_level_budget)
        }
    }

    /// Whether `inode` is the node's own namespace (`--node-netns`).
    fn is_node(&self, inode: u32) -> bool {
        self.node_netns == Some(inode)
    }
}

/// The inode of the node's namespace at `path`. The default path unreadable (a process 1 that
/// observer may not look into) stands for observer's own namespace, which the DaemonSet shares
/// with the node (`hostNetwork`); neither readable (not root, no `/proc`) is said and costs only
/// the node's precedence. A path the user named must be read.
fn node_netns(path: &Path) -> Result<Option<u32>, EngineError> {
    match netns::inode_of(path) {
        Ok(inode) => Ok(Some(inode)),
        Err(cause) if path == Path::new(DEFAULT_NODE_NETNS) => {
            match netns::inode_of(Path::new(OWN_NETNS)) {
                Ok(inode) => {
                    tracing::debug!(
                        "the node's network namespace: {OWN_NETNS} ({DEFAULT_NODE_NETNS}: {cause})"
                    );
                    Ok(Some(inode))
                }
                Err(own) => {
                    tracing::warn!(
                        "cannot read the node's network namespace at {DEFAULT_NODE_NETNS} \
                         ({cause}) nor observer's own ({own}): every namespace's legacy tables \
                         share --rule-level-budget"
                    );
                    Ok(None)
                }
            }
        }
        Err(cause) => Err(EngineError::NodeNetns {
            path: path.to_path_buf(),
            cause,
        }),
    }
}

/// `--node-netns`'s default: the namespace of the node's init process (the node's own, for a
/// DaemonSet with `hostPID`, and for observer run on the host).
pub const DEFAULT_NODE_NETNS: &str = "/proc/1/ns/net";

/// Observer's own network namespace: the node's where the default cannot be read.
const OWN_NETNS: &str = "/proc/self/ns/net";

/// `--rule-level-limit`'s default: the most rules a namespace's legacy tables are held at rule
/// level. A 40,000-service kube-proxy nat table (440,008 rules) fits, and is held within the
/// DaemonSet's 512 MiB; beyond it, a namespace's larger tables are held at chain level.
pub const DEFAULT_RULE_LEVEL_LIMIT: usize = 450_000;

/// `--rule-level-budget`'s default: the most rules the legacy tables of every namespace but the
/// node's together are held at rule level. Pods rarely hold more than a few dozen rules each
/// (istio-init, a CNI's sidecar); beside the node's own limit this keeps what observer holds
/// rule by rule within the DaemonSet's 512 MiB (about 0.5 KiB a rule), however many pods load
/// big tables.
pub const DEFAULT_RULE_LEVEL_BUDGET: usize = 50_000;

/// A transaction or replace of this many changes or more (a whole table loaded, a namespace read) leaves
/// its notifications, bookkeeping and lines freed behind it: the heap is trimmed after it.
pub(crate) const LARGE_TXN_CHANGES: usize = 1_000;

/// A legacy table whose last copy kept this many bytes of entries or more is large: once it is
/// replaced, the heap is trimmed too (a kube-proxy nat table of 2,500 services keeps about 4 MB).
pub(crate) const LARGE_TABLE_BYTES: usize = 4 << 20;

/// A legacy table of this many entries is large too, whatever it keeps (one held at chain level
/// keeps no entries, but its read and decode allocated in proportion to them).
pub(crate) const LARGE_TABLE_ENTRIES: usize = 25_000;

/// Gives the allocator's free pages back to the kernel (glibc keeps them otherwise: after a
/// kube-proxy table of 10,000 services was loaded in one transaction, over 100 MiB).
pub(crate) fn release_free_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free heap pages; no pointer is invalidated.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn netlink_only_loss(why: &str) -> String {
    format!(
        "iptables-legacy/ip6tables-legacy/arptables-legacy changes, and namespaces created while \
         running ({why})"
    )
}

pub(crate) fn load_owners(path: Option<&std::path::Path>) -> Result<Owners, OwnersError> {
    match path {
        Some(p) => Owners::with_file(p),
        None => Ok(Owners::catalog()),
    }
}

#[cfg(all(test, target_env = "gnu"))]
mod heap_tests {
    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// Small blocks freed around a few that stay (what a big transaction leaves beside the
    /// state it built) are given back only by the trim.
    #[test]
    fn release_free_heap_gives_back_freed_small_blocks() {
        // On a thread of its own: its heap is not shared with the other tests' allocations.
        std::thread::spawn(|| {
            const BLOCK: usize = 1024;
            const BLOCKS: usize = 128 * 1024; // 128 MiB
            let mut blocks: Vec<Option<Box<[u8]>>> = (0..BLOCKS)
                .map(|i| Some(vec![i as u8 | 1; BLOCK].into_boxed_slice()))
                .collect();
            // Keep one block in 64 (one per 64 KiB): no page run long enough to unmap is left
            // at the heap's top, so free() alone keeps the memory.
            for (i, b) in blocks.iter_mut().enumerate() {
                if i % 64 != 0 {
                    *b = None;
                }
            }
            let freed = rss_kib();
            super::release_free_heap();
            let trimmed = rss_kib();
            assert!(
                freed.saturating_sub(trimmed) >= 64 * 1024,
                "VmRSS {freed} kB before the trim, {trimmed} kB after"
            );
            drop(blocks);
        })
        .join()
        .unwrap();
    }
}

#[cfg(test)]
mod rule_limit_tests {
    use super::namespace_rule_limit;

    #[test]
    fn a_namespace_gets_its_limit_within_what_the_node_has_left() {
        // The node has room: the namespace's own limit binds.
        assert_eq!(namespace_rule_limit(1_000, 10_000, 2_000), 1_000);
        // Other namespaces hold most of the budget: what is left binds.
        assert_eq!(namespace_rule_limit(1_000, 10_000, 9_500), 500);
        // Past the budget already: nothing is left (never an underflow).
        assert_eq!(namespace_rule_limit(1_000, 10_000, 12_000), 0);
    }
}
