//! `cargo xtask bench-neighbour`: a noisy neighbour. How late observer reports one namespace's
//! small changes while another namespace loads and rewrites a kube-proxy-sized legacy nat table.
//!
//! Two network namespaces of the bench's own (made and deleted here; the host's ruleset is never
//! touched), watched by one `observer tail --json` (no `--netns`: every namespace):
//! - the "node" adds one nft rule every `--interval-ms` (`nft add rule inet t c counter comment
//!   nbmarkK`, the table and chain made before observer starts), from [`LEAD_IN`] before the
//!   pod's load until [`TAIL`] after observer reported the pod's last rewrite;
//! - the "pod" loads the nat table of bench-bignode (kube-proxy's iptables mode, N services:
//!   11 rules per service) with one `iptables-legacy-restore`, then rewrites the whole table
//!   `--rewrites` times, each an `iptables-legacy-restore` of the whole table without
//!   `--noflush`, as kube-proxy's full sync does: one more service's endpoint moved each time, so
//!   the diff is small but the kernel replaces the whole table. Each restore starts once observer
//!   printed no line for the one before for [`POD_QUIET`].
//!
//! Measured, from the instants observer's lines arrive on our pipe (stamped by the thread that
//! reads them): each node change's latency, from its `nft`'s exit to its change line (negative
//! when the line came first; nothing is clamped), split into the changes whose wait overlapped
//! a restore being handled and the rest; every node change must be reported (the missing ones
//! are listed, and fail the run). A restore is being handled from the table's replace in the
//! kernel (the `time` observer gives its lines, on this process's clock; the restore's start
//! when that cannot be read) until observer's last line for it. Per restore, its wall time, the
//! time from its exit to observer's first and last line for it, from the replace to the last
//! line, those lines by op, and the node's changes in flight meanwhile. The pod's table is
//! checked with `iptables-legacy-save` at the end.
//!
//! With `--against PATH`, the same plan runs twice in one invocation: first with that binary
//! (an earlier build, say), then with `--bin`'s (or the release build), each in fresh namespaces
//! with its own observer; the section shows the two side by side, with the ratio of the headline
//! figure (the node's p95 latency while the pod's restores were handled).
//!
//! The markdown section is printed and written into BENCHMARKS.md between its markers, unless
//! `--no-write`. No pass/fail thresholds on the figures: the machines are shared and noisy.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fmt::Write as _,
    fs,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process,
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::Args;
use serde_json::Value;
use time::{format_description::well_known::Rfc3339, OffsetDateTime};

use crate::{
    bench::{
        bignode::{
            legacy::{expected_rules, nat_table_moving},
            ENDPOINTS,
        },
        netns::Netns,
        remove_stale_namespaces,
        spawn::{run_bounded, run_timed, Observer},
        stats::{percentile, signed_ms, thousands},
        write_benchmarks, Environment,
    },
    cmd,
};

/// The options of `cargo xtask bench-neighbour`.
#[derive(Args)]
pub struct BenchNeighbourArgs {
    /// Services in the pod's nat table (11 rules each, plus 8)
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=200_000))]
    services: u32,
    /// Whole-table rewrites after the load (one `iptables-legacy-restore` of the whole table
    /// each, one more service's endpoint moved)
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=100))]
    rewrites: u32,
    /// The node adds one nft rule every this many milliseconds
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(10..=60_000))]
    interval_ms: u32,
    /// observer's binary [default: the release build, built first as `cargo xtask build` does]
    #[arg(long, value_name = "PATH")]
    bin: Option<PathBuf>,
    /// A second observer binary (an earlier build, say): the plan runs with it first, then with
    /// --bin's, and the figures are shown side by side
    #[arg(long, value_name = "PATH")]
    against: Option<PathBuf>,
    /// Print the figures only; leave BENCHMARKS.md as it is
    #[arg(long)]
    no_write: bool,
}

/// The namespaces: `obs-neighbour-PID-pod` and `obs-neighbour-PID-node` (with `--against`,
/// `obs-neighbour-PID-against-pod` and so on, then `obs-neighbour-PID-bin-pod`).
const NS_PREFIX: &str = "obs-neighbour-";

const START: &str = "<!-- bench-neighbour:start -->";
const END: &str = "<!-- bench-neighbour:end -->";

/// The node's table and chain, made before observer starts.
const NODE_TABLE: &str = "inet t";
const NODE_CHAIN: &str = "c";
/// The comment of the node's rules: this, then the change's number.
const MARK: &str = "nbmark";

/// The node's changes begin this long before the pod's load.
const LEAD_IN: Duration = Duration::from_secs(1);
/// The node's changes end this long after observer reported the pod's last restore.
const TAIL: Duration = Duration::from_secs(3);
/// No line of the pod's for this long: observer has reported the restore.
const POD_QUIET: Duration = Duration::from_secs(2);
/// From a restore's exit until observer has reported it (its first line, then quiet).
const REPORT_TIMEOUT: Duration = Duration::from_secs(600);
/// After the node's last change: how long its missing lines are waited for.
const NODE_TIMEOUT: Duration = Duration::from_secs(60);
/// `iptables-legacy-save` of the pod's table, at the end.
const SAVE_TIMEOUT: Duration = Duration::from_secs(300);
/// `BIN --version`, for a binary's label.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How often observer's lines are taken from the reader thread (they carry their own arrival
/// instants, so this only bounds how late the bench notices them).
const POLL: Duration = Duration::from_millis(20);

/// Measures one run per binary (`--against`'s first, when given), prints the section and writes
/// it into BENCHMARKS.md unless `--no-write`; exits with 1 when, in either run, a node change or
/// a restore went unreported or the pod's table is not as loaded.
pub fn run(args: &BenchNeighbourArgs) -> Result<i32> {
    if !cmd::is_root() {
        bail!(
            "bench-neighbour needs root: it creates network namespaces, runs \
             iptables-legacy-restore and nft inside them, and observer loads eBPF programs"
        );
    }
    for tool in [
        "ip",
        "iptables-legacy-restore",
        "iptables-legacy-save",
        "nft",
        "kill",
    ] {
        if cmd::which(tool).is_none() {
            bail!(
                "`{tool}` was not found; `cargo xtask setup` installs it (Debian packages \
                 iptables, nftables, iproute2, procps)"
            );
        }
    }
    let mut binaries = Vec::new();
    if let Some(against) = &args.against {
        binaries.push(Binary::named(Role::Against, against)?);
    }
    binaries.push(match &args.bin {
        Some(bin) => Binary::named(Role::Bin, bin)?,
        None => Binary::built()?,
    });
    let plan = Plan {
        services: args.services as usize,
        rewrites: args.rewrites as usize,
        interval: Duration::from_millis(args.interval_ms.into()),
    };
    let mut env = Environment::collect();
    env.command = shown_command(std::env::args().skip(1));
    remove_stale_namespaces(NS_PREFIX);
    let name = format!(
        "bench-neighbour: {} services ({} rules), {} rewrites, a node change every {} ms",
        thousands(plan.services as u64),
        thousands(expected_rules(plan.services) as u64),
        plan.rewrites,
        plan.interval.as_millis()
    );
    let side_by_side = binaries.len() > 1;
    let mut runs = Vec::new();
    for binary in binaries {
        let (phase, tag) = if side_by_side {
            (
                format!("{name}, {}: {}", binary.role.name(), binary.label),
                format!("{}-", binary.role.name()),
            )
        } else {
            (name.clone(), String::new())
        };
        let figures = cmd::phase(&phase, || measure(&binary.path, &plan, &tag))?;
        runs.push(Run { binary, figures });
    }
    let md = markdown(&env, &plan, &runs);
    print!("{md}");
    if args.no_write {
        eprintln!("xtask: --no-write: BENCHMARKS.md left as it is");
    } else {
        let path = write_benchmarks(START, END, &md)?;
        eprintln!("xtask: wrote the figures into {}", path.display());
    }
    Ok(if runs.iter().all(|r| r.figures.complete()) {
        0
    } else {
        1
    })
}

/// The command line as the section shows it: `cargo xtask`, then this run's arguments, the
/// binaries named by their file names only (where they lie says nothing of the figures).
fn shown_command(args: impl Iterator<Item = String>) -> String {
    let mut command = "cargo xtask".to_owned();
    let mut path_next = false;
    for a in args {
        let shown = if path_next {
            file_name(Path::new(&a))
        } else if let Some((option, path)) = a.split_once('=').filter(|(o, _)| is_bin_option(o)) {
            format!("{option}={}", file_name(Path::new(path)))
        } else {
            a.clone()
        };
        path_next = is_bin_option(&a);
        command.push(' ');
        command.push_str(&shown);
    }
    command
}

/// `--bin` or `--against`: the options that name a binary.
fn is_bin_option(arg: &str) -> bool {
    arg == "--bin" || arg == "--against"
}

/// The last part of `path` (all of it, when it has none).
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Which of the (up to) two binaries: the one named with `--against`, or `--bin`'s.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Role {
    Against,
    Bin,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Against => "against",
            Role::Bin => "bin",
        }
    }
}

/// One observer binary measured.
struct Binary {
    role: Role,
    path: PathBuf,
    /// Its file name, then the first line of its `--version` when that works.
    label: String,
    /// Named on the command line (`--bin` or `--against`), not built by this run.
    given: bool,
}

impl Binary {
    /// The binary named with `--bin` or `--against`.
    fn named(role: Role, path: &Path) -> Result<Binary> {
        if !cmd::is_executable(path) {
            bail!(
                "{} (--{}) is not an executable file",
                path.display(),
                role.name()
            );
        }
        Ok(Binary {
            role,
            path: path.to_path_buf(),
            label: label(path),
            given: true,
        })
    }

    /// The release build, built first.
    fn built() -> Result<Binary> {
        crate::build()?;
        let path = crate::target_dir()?.join("release").join("observer");
        if !cmd::is_executable(&path) {
            bail!(
                "{} is not an executable file; run `cargo xtask build` and look at its output, \
                 or name observer's binary with --bin",
                path.display()
            );
        }
        Ok(Binary {
            role: Role::Bin,
            label: label(&path),
            path,
            given: false,
        })
    }
}

/// A binary's label: its file name, and the first line of `BIN --version` when it prints one.
fn label(path: &Path) -> String {
    let version = run_bounded(
        process::Command::new(path).arg("--version"),
        None,
        VERSION_TIMEOUT,
    )
    .ok()
    .and_then(|out| {
        out.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_owned)
    });
    binary_label(&file_name(path), version.as_deref())
}

/// `` `NAME`, VERSION `` (or `` `NAME` `` without a version).
fn binary_label(name: &str, version: Option<&str>) -> String {
    match version {
        Some(v) => format!("`{name}`, {v}"),
        None => format!("`{name}`"),
    }
}

/// One binary's run: the binary and what was measured with it.
struct Run {
    binary: Binary,
    figures: Figures,
}

/// What one run does.
struct Plan {
    services: usize,
    rewrites: usize,
    /// Between two of the node's changes.
    interval: Duration,
}

// ---------------------------------------------------------------------------------------------
// The pod's tables

/// The endpoint rewrite `j` (from 1) moves: service `(j * 7919 + services / 2) % services`
/// (successive rewrites touch services spread over the table), endpoint `j % ENDPOINTS`.
fn moved_endpoint(services: usize, j: usize) -> (usize, usize) {
    ((j * 7_919 + services / 2) % services, j % ENDPOINTS)
}

/// The address rewrite `j` moves its endpoint to: 10.64.0.0 + `j`, outside the table's own.
fn moved_ip(j: usize) -> String {
    Ipv4Addr::from(u32::from_be_bytes([10, 64, 0, 0]).wrapping_add(j as u32)).to_string()
}

/// The pod's whole nat table after `k` rewrites (0: the load): bench-bignode's table with the
/// endpoints of rewrites 1 to `k` moved, each to its rewrite's address (the latest rewrite's,
/// when two picked the same one). Rewrite `k`'s table differs from rewrite `k - 1`'s in one
/// service's endpoint only.
fn pod_table(services: usize, k: usize) -> String {
    let mut moved: HashMap<(usize, usize), usize> = HashMap::new();
    for j in 1..=k {
        moved.insert(moved_endpoint(services, j), j);
    }
    nat_table_moving(services, |s, e| moved.get(&(s, e)).map(|&j| moved_ip(j)))
}

/// The restores' inputs, one file each (the load's first), written before observer starts;
/// removed when dropped.
struct Inputs(Vec<PathBuf>);

impl Inputs {
    fn write(plan: &Plan) -> Result<Inputs> {
        let mut inputs = Inputs(Vec::new());
        for k in 0..=plan.rewrites {
            let path = std::env::temp_dir().join(format!("{NS_PREFIX}{}-{k}.rules", process::id()));
            fs::write(&path, pod_table(plan.services, k))
                .with_context(|| format!("writing {}", path.display()))?;
            inputs.0.push(path);
        }
        Ok(inputs)
    }
}

impl Drop for Inputs {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = fs::remove_file(path);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// observer's lines

/// observer's change lines for one of the pod's restores.
#[derive(Default)]
struct PodLines {
    lines: usize,
    /// The lines by their `op`.
    ops: BTreeMap<String, usize>,
    /// When the first and the last of them arrived.
    first: Option<Instant>,
    last: Option<Instant>,
    /// The change in the kernel: the `time` of the first of them, on this process's clock.
    changed: Option<Instant>,
}

/// What observer printed about the two namespaces, taken from its lines as they come.
struct Log {
    pod: String,
    node: String,
    /// The pod's lines per restore (the load's first); the last is the restore under way.
    restores: Vec<PodLines>,
    /// The restore each transaction (`txn`) of the pod's belongs to: the one under way when
    /// observer first named it.
    txns: HashMap<String, usize>,
    /// When the line of each node change arrived (the first, were there more), by its number.
    seen: HashMap<usize, Instant>,
    /// The pod's lines before its first restore, and the node's lines without a mark.
    stray: usize,
    /// Change lines of other namespaces (observer handled those too).
    others: usize,
    /// One instant on both clocks: the lines' `time` (UTC) and this process's [`Instant`].
    clock: (OffsetDateTime, Instant),
}

impl Log {
    fn new(pod: &str, node: &str) -> Log {
        Log {
            pod: pod.to_owned(),
            node: node.to_owned(),
            restores: Vec::new(),
            txns: HashMap::new(),
            seen: HashMap::new(),
            stray: 0,
            others: 0,
            clock: (OffsetDateTime::now_utc(), Instant::now()),
        }
    }

    /// A line's `time` on this process's clock.
    fn instant_of(&self, v: &Value) -> Option<Instant> {
        let t = OffsetDateTime::parse(v["time"].as_str()?, &Rfc3339).ok()?;
        let d = t - self.clock.0;
        if d.is_negative() {
            self.clock.1.checked_sub(d.unsigned_abs())
        } else {
            self.clock.1.checked_add(d.unsigned_abs())
        }
    }

    /// A restore of the pod's begins: the transactions named from now on are its.
    fn begin(&mut self) {
        self.restores.push(PodLines::default());
    }

    /// Takes the change lines of the two namespaces from `lines`; the rest are let through.
    fn take(&mut self, lines: Vec<(Instant, String)>) {
        for (at, line) in lines {
            // Most lines are neither's: only those naming one are parsed.
            if !line.contains(&self.pod) && !line.contains(&self.node) {
                if line.contains(r#""kind":"change""#) {
                    self.others += 1;
                }
                continue;
            }
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if v["kind"] != "change" {
                continue;
            }
            if v["netns_name"] == self.pod.as_str() {
                self.pod_line(at, &v);
            } else if v["netns_name"] == self.node.as_str() {
                match node_mark(&v) {
                    Some(mark) => {
                        self.seen.entry(mark).or_insert(at);
                    }
                    None => self.stray += 1,
                }
            }
        }
    }

    fn pod_line(&mut self, at: Instant, v: &Value) {
        let Some(current) = self.restores.len().checked_sub(1) else {
            self.stray += 1;
            return;
        };
        let k = match v["txn"].as_str() {
            Some(txn) => match self.txns.get(txn) {
                Some(&k) => k,
                None => {
                    self.txns.insert(txn.to_owned(), current);
                    current
                }
            },
            None => current,
        };
        if self.restores[k].changed.is_none() {
            self.restores[k].changed = self.instant_of(v);
        }
        let r = &mut self.restores[k];
        r.lines += 1;
        let op = v["op"].as_str().unwrap_or("(no op)");
        *r.ops.entry(op.to_owned()).or_default() += 1;
        r.first.get_or_insert(at);
        r.last = Some(at);
    }

    /// Takes observer's lines until `done` says so (true) or `deadline` passes (false); fails
    /// when observer exits.
    fn pump(
        &mut self,
        obs: &mut Observer,
        deadline: Instant,
        done: impl Fn(&Log) -> bool,
    ) -> Result<bool> {
        loop {
            self.take(obs.drain());
            if done(self) {
                return Ok(true);
            }
            if let Some(status) = obs.exited() {
                bail!("observer ended ({status}){}", obs.stderr_tail());
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            thread::sleep(POLL);
        }
    }
}

/// The number of the node's change whose line `v` is: its rule's comment `nbmarkK`.
fn node_mark(v: &Value) -> Option<usize> {
    if v["op"] != "rule_add" {
        return None;
    }
    let rule = v["rule"].as_str()?;
    let rest = &rule[rule.find(MARK)? + MARK.len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

// ---------------------------------------------------------------------------------------------
// The measurement

/// One of the node's changes: its number and when its `nft` was reaped.
#[derive(Clone, Copy)]
struct Sent {
    mark: usize,
    done: Instant,
}

/// One of the pod's restores (the load, or a rewrite): when it started and was reaped, and
/// observer's lines for it.
struct Restore {
    start: Instant,
    done: Instant,
    lines: PodLines,
}

impl Restore {
    /// When observer had the pod's table to handle: from the replace in the kernel until
    /// observer's last line for it. Without a line, the restore's run; without a `time`, from
    /// the restore's start. Kept within the restore's start and the end.
    fn busy(&self) -> (Instant, Instant) {
        let end = self.lines.last.unwrap_or(self.done);
        let start = self
            .lines
            .changed
            .map_or(self.start, |c| c.clamp(self.start, end.max(self.start)));
        (start, end.max(start))
    }

    /// The node changes in flight while it was handled: their latencies in ms.
    fn in_flight(&self, sent: &[Sent], seen: &HashMap<usize, Instant>) -> Vec<f64> {
        latencies(sent, seen, &[self.busy()]).during
    }
}

/// What one run measured.
struct Figures {
    services: usize,
    /// The pod's nat table at the end, as `iptables-legacy-save -t nat` lists it.
    rules: usize,
    /// Other named network namespaces when observer started (it watches every one).
    other_namespaces: usize,
    /// The load, then the rewrites.
    restores: Vec<Restore>,
    sent: Vec<Sent>,
    seen: HashMap<usize, Instant>,
    /// Lines of the two namespaces that were not the bench's changes.
    stray: usize,
    /// Change lines of other namespaces while the bench ran.
    others: usize,
    /// The load average (1, 5, 15 minutes) when observer started.
    load_average: String,
    notes: Vec<String>,
}

impl Figures {
    fn latencies(&self) -> Latencies {
        let busy: Vec<_> = self.restores.iter().map(Restore::busy).collect();
        latencies(&self.sent, &self.seen, &busy)
    }

    /// Every node change and every restore reported, and the pod's table as it should be.
    fn complete(&self) -> bool {
        self.latencies().missing.is_empty()
            && self.restores.iter().all(|r| r.lines.lines > 0)
            && self.rules == expected_rules(self.services)
    }
}

/// One run: the namespaces made (`tag` in their names, after the PID), observer started, the
/// node's changes on a thread of their own while this one makes the pod's restores and takes
/// observer's lines.
fn measure(bin: &Path, plan: &Plan, tag: &str) -> Result<Figures> {
    let pod = Netns::add(format!("{NS_PREFIX}{}-{tag}pod", process::id()))?;
    let node = Netns::add(format!("{NS_PREFIX}{}-{tag}node", process::id()))?;
    run_timed(&mut node.nft(&format!("add table {NODE_TABLE}")))?;
    run_timed(&mut node.nft(&format!("add chain {NODE_TABLE} {NODE_CHAIN}")))?;
    let inputs = Inputs::write(plan)?;
    let other_namespaces = cmd::output(process::Command::new("ip").args(["netns", "list"]))
        .map(|l| {
            l.lines()
                .filter(|l| !l.starts_with(&pod.name) && !l.starts_with(&node.name))
                .count()
        })
        .unwrap_or(0);

    let load_average = fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned());
    let mut obs = Observer::start(
        bin,
        &["tail", "--json"],
        format!("neighbour-{tag}").trim_end_matches('-'),
    )?;
    let mut log = Log::new(&pod.name, &node.name);
    let mut notes = Vec::new();
    let stop = AtomicBool::new(false);
    let (times, sent) = thread::scope(|scope| {
        let writer = scope.spawn(|| node_changes(&node, plan.interval, &stop));
        let times = pod_restores(&pod, &mut obs, &mut log, &inputs.0, &mut notes);
        stop.store(true, Ordering::Relaxed);
        let sent = writer
            .join()
            .unwrap_or_else(|_| Err(anyhow!("the node's writer panicked")));
        (times, sent)
    });
    let times = times?;
    let sent = sent.context("the node's changes")?;
    drop(inputs);

    // The node's last lines, or those still missing.
    let want: HashSet<usize> = sent.iter().map(|s| s.mark).collect();
    log.pump(&mut obs, Instant::now() + NODE_TIMEOUT, |l| {
        want.iter().all(|m| l.seen.contains_key(m))
    })?;
    obs.finish("bench-neighbour", &mut notes);

    let mut save = pod.cmd("iptables-legacy-save");
    save.args(["-t", "nat"]);
    let saved = run_bounded(&mut save, None, SAVE_TIMEOUT)?;
    let rules = saved.lines().filter(|l| l.starts_with("-A ")).count();
    if rules != expected_rules(plan.services) {
        notes.push(format!(
            "the pod's nat table has {} rules at the end; expected {}",
            thousands(rules as u64),
            thousands(expected_rules(plan.services) as u64)
        ));
    }
    let restores = times
        .into_iter()
        .zip(log.restores)
        .map(|((start, done), lines)| Restore { start, done, lines })
        .collect();
    Ok(Figures {
        services: plan.services,
        rules,
        other_namespaces,
        restores,
        sent,
        seen: log.seen,
        stray: log.stray,
        others: log.others,
        load_average,
        notes,
    })
}

/// The node's changes, one every `interval` (a slot its `nft` overran is skipped) until `stop`;
/// fails at the first `nft` that fails.
fn node_changes(node: &Netns, interval: Duration, stop: &AtomicBool) -> Result<Vec<Sent>> {
    let mut sent = Vec::new();
    let start = Instant::now();
    let mut slot: u32 = 0;
    while !stop.load(Ordering::Relaxed) {
        let mark = sent.len();
        let mut c = node.nft(&format!(
            "add rule {NODE_TABLE} {NODE_CHAIN} counter comment {MARK}{mark}"
        ));
        let (done, _) = run_timed(&mut c)?;
        sent.push(Sent { mark, done });
        let now = start.elapsed();
        slot = (slot + 1).max(now.as_nanos().div_ceil(interval.as_nanos().max(1)) as u32);
        if let Some(wait) = (interval * slot).checked_sub(now) {
            thread::sleep(wait);
        }
    }
    Ok(sent)
}

/// The pod's side, after [`LEAD_IN`]: the load and the rewrites, each once observer reported
/// the one before, then [`TAIL`]. Returns each restore's start and exit.
fn pod_restores(
    pod: &Netns,
    obs: &mut Observer,
    log: &mut Log,
    inputs: &[PathBuf],
    notes: &mut Vec<String>,
) -> Result<Vec<(Instant, Instant)>> {
    let mut times = Vec::new();
    log.pump(obs, Instant::now() + LEAD_IN, |_| false)?;
    for (k, input) in inputs.iter().enumerate() {
        log.begin();
        let mut restore = pod.cmd("iptables-legacy-restore");
        restore.args(["-w", "30"]).arg(input);
        let start = Instant::now();
        let (done, _) = run_timed(&mut restore).with_context(|| restore_name(k))?;
        times.push((start, done));
        let reported = log.pump(obs, done + REPORT_TIMEOUT, |l| {
            l.restores[k].last.is_some_and(|t| t.elapsed() >= POD_QUIET)
        })?;
        if !reported {
            match log.restores[k].lines {
                0 => notes.push(format!(
                    "{}: observer printed no line for it within {REPORT_TIMEOUT:?}",
                    restore_name(k)
                )),
                n => bail!(
                    "{}: observer was still printing its lines {REPORT_TIMEOUT:?} after it \
                     ({n} so far)",
                    restore_name(k)
                ),
            }
        }
    }
    log.pump(obs, Instant::now() + TAIL, |_| false)?;
    Ok(times)
}

/// "the load" (restore 0) or "rewrite K".
fn restore_name(k: usize) -> String {
    match k {
        0 => "the load".to_owned(),
        k => format!("rewrite {k}"),
    }
}

/// The node changes' latencies in ms (line arrived − `nft` reaped), by whether the change was
/// in flight while observer had a restore of the pod's to handle, and the changes never reported.
#[derive(Default, Debug, PartialEq)]
struct Latencies {
    /// Changes whose span, from `nft`'s exit to their line, overlaps a restore's busy span.
    during: Vec<f64>,
    rest: Vec<f64>,
    /// Their numbers, in the order sent.
    missing: Vec<usize>,
}

impl Latencies {
    fn all(&self) -> Vec<f64> {
        self.during.iter().chain(&self.rest).copied().collect()
    }
}

fn latencies(
    sent: &[Sent],
    seen: &HashMap<usize, Instant>,
    busy: &[(Instant, Instant)],
) -> Latencies {
    let mut out = Latencies::default();
    for s in sent {
        let Some(&at) = seen.get(&s.mark) else {
            out.missing.push(s.mark);
            continue;
        };
        let span = (s.done.min(at), s.done.max(at));
        let latency = signed_ms(at, s.done);
        if busy.iter().any(|&(b0, b1)| span.0 <= b1 && b0 <= span.1) {
            out.during.push(latency);
        } else {
            out.rest.push(latency);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The report

/// Milliseconds, as seconds from 1 s on.
fn duration_text(ms: f64) -> String {
    if ms.abs() >= 1_000.0 {
        format!("{:.2} s", ms / 1e3)
    } else {
        format!("{ms:.1} ms")
    }
}

/// p50 / p95 / max (nearest rank) of `v`, and its count.
fn dist_cell(v: &[f64]) -> String {
    match (
        percentile(v, 50.0),
        percentile(v, 95.0),
        percentile(v, 100.0),
    ) {
        (Some(p50), Some(p95), Some(max)) => format!(
            "{} / {} / {} (n = {})",
            duration_text(p50),
            duration_text(p95),
            duration_text(max),
            v.len()
        ),
        _ => "none (n = 0)".to_owned(),
    }
}

/// A restore's row: its wall time; observer's first and last line after its exit; from the
/// replace to the last line; its lines by op; the node's changes in flight meanwhile.
fn restore_row(k: usize, r: &Restore, f: &Figures) -> String {
    let l = &r.lines;
    let after = |t: Option<Instant>, from: Instant| {
        t.map_or("none".to_owned(), |t| duration_text(signed_ms(t, from)))
    };
    let ops: Vec<String> = l
        .ops
        .iter()
        .map(|(op, n)| format!("{op} {}", thousands(*n as u64)))
        .collect();
    let in_flight = r.in_flight(&f.sent, &f.seen);
    let node = match (percentile(&in_flight, 50.0), percentile(&in_flight, 100.0)) {
        (Some(p50), Some(max)) => format!(
            "{}; {} / {}",
            in_flight.len(),
            duration_text(p50),
            duration_text(max)
        ),
        _ => "0".to_owned(),
    };
    format!(
        "| {} | {} | {} / {} | {} | {}{} | {node} |",
        restore_name(k),
        duration_text(signed_ms(r.done, r.start)),
        after(l.first, r.done),
        after(l.last, r.done),
        l.changed.map_or("no time".to_owned(), |c| after(l.last, c)),
        thousands(l.lines as u64),
        if ops.is_empty() {
            String::new()
        } else {
            format!(" ({})", ops.join(", "))
        }
    )
}

/// The figures' table: one row per figure, one column per run (`columns`: each column's head and
/// its run's figures).
fn figures_table(columns: &[(String, &Figures)]) -> String {
    /// A row's cell, from its run's figures.
    type Cell = fn(&Figures) -> String;
    let rows: [(&str, Cell); 5] = [
        ("node changes (`nft add rule`): sent / reported", |f| {
            format!(
                "{} / {}",
                f.sent.len(),
                f.sent.len() - f.latencies().missing.len()
            )
        }),
        (
            "node latency, `nft` exit → its line, while the pod's load or a rewrite was handled: \
             p50 / p95 / max",
            |f| dist_cell(&f.latencies().during),
        ),
        ("node latency, the other changes: p50 / p95 / max", |f| {
            dist_cell(&f.latencies().rest)
        }),
        ("node latency, all changes: p50 / p95 / max", |f| {
            dist_cell(&f.latencies().all())
        }),
        (
            "the pod's nat table at the end (`iptables-legacy-save -t nat`)",
            |f| format!("{} rules", thousands(f.rules as u64)),
        ),
    ];
    let mut md = String::from("| figure |");
    for (head, _) in columns {
        let _ = write!(md, " {head} |");
    }
    md.push_str("\n| --- |");
    md.push_str(&" --- |".repeat(columns.len()));
    md.push('\n');
    for (name, cell) in rows {
        let _ = write!(md, "| {name} |");
        for (_, f) in columns {
            let _ = write!(md, " {} |", cell(f));
        }
        md.push('\n');
    }
    md
}

/// The headline figure of two runs, side by side: the node's p95 latency while the pod's
/// restores were handled, with `against`'s binary and with `bin`'s, and their ratio.
fn headline(against: &Figures, bin: &Figures) -> String {
    let p95 = |f: &Figures| percentile(&f.latencies().during, 95.0);
    let (a, b) = (p95(against), p95(bin));
    let shown = |p: Option<f64>| p.map_or("none".to_owned(), duration_text);
    let ratio = match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a >= 0.0 => format!("{:.2}", a / b),
        _ => "not a ratio (a p95 missing, or not above zero)".to_owned(),
    };
    format!(
        "The headline, the node's p95 latency while the pod's restores were handled: {} with \
         against, {} with bin; against ÷ bin = {ratio}.\n",
        shown(a),
        shown(b)
    )
}

/// The plan's words on the other namespaces observer watched: nothing when there were none,
/// else how many (per run, when the runs saw different counts).
fn beside_text(runs: &[(Role, usize)]) -> String {
    let namespaces = |n: usize| match n {
        1 => "1 other named namespace".to_owned(),
        n => format!("{n} other named namespaces"),
    };
    match runs {
        [] => String::new(),
        [(_, n), rest @ ..] if rest.iter().all(|(_, m)| m == n) => match n {
            0 => String::new(),
            &n => format!(" ({} beside)", namespaces(n)),
        },
        [(role, n), rest @ ..] => {
            let mut text = format!(" ({} beside in {}'s run", namespaces(*n), role.name());
            for (role, m) in rest {
                let _ = write!(text, ", {m} in {}'s", role.name());
            }
            text.push(')');
            text
        }
    }
}

/// The section's observer line: the tree's revision when this run built observer alone; else
/// each binary measured and its label (and the tree's revision for the one built).
fn observer_line(revision: &str, binaries: &[&Binary]) -> String {
    if let [b] = binaries {
        if !b.given {
            return format!("- observer: {revision}");
        }
    }
    let each: Vec<String> = binaries
        .iter()
        .map(|b| {
            let role = if binaries.len() > 1 {
                format!("{}: ", b.role.name())
            } else {
                String::new()
            };
            if b.given {
                format!("{role}{} (named with --{})", b.label, b.role.name())
            } else {
                format!("{role}{}, the release build of {revision}", b.label)
            }
        })
        .collect();
    format!("- observer: {}", each.join("; "))
}

/// The section: the run's environment and plan, the node's latencies (side by side when two
/// binaries ran), the pod's restores per binary, the failures and notes.
fn markdown(env: &Environment, plan: &Plan, runs: &[Run]) -> String {
    let side_by_side = runs.len() > 1;
    // "(against) " before a run's failures and notes, when there are two.
    let whose = |r: &Run| {
        if side_by_side {
            format!("({}) ", r.binary.role.name())
        } else {
            String::new()
        }
    };
    let mut md = String::new();
    let _ = writeln!(md, "{START}");
    md.push_str(
        "<!-- Generated by `cargo xtask bench-neighbour`: edits between these markers are \
         overwritten. -->\n",
    );
    md.push_str("## A noisy neighbour\n\n");
    let _ = writeln!(md, "- date: {}", env.date);
    let _ = writeln!(md, "- kernel: {}", env.kernel);
    let load: Vec<String> = runs
        .iter()
        .map(|r| {
            if side_by_side {
                format!(
                    "{} at the start of {}'s run",
                    r.figures.load_average,
                    r.binary.role.name()
                )
            } else {
                format!("{} at the start", r.figures.load_average)
            }
        })
        .collect();
    let _ = writeln!(
        md,
        "- CPUs: {}; a shared machine, other builds and tests ran beside the bench (load \
         average {})",
        env.cpus,
        load.join(", ")
    );
    let _ = writeln!(md, "- command: `{}`", env.command);
    let binaries: Vec<&Binary> = runs.iter().map(|r| &r.binary).collect();
    let _ = writeln!(md, "{}", observer_line(&env.revision, &binaries));
    let _ = writeln!(md, "- tools: {}", env.tools);
    let beside: Vec<(Role, usize)> = runs
        .iter()
        .map(|r| (r.binary.role, r.figures.other_namespaces))
        .collect();
    let _ = writeln!(
        md,
        "- plan: `observer tail --json` watching every namespace{}; the pod loads a \
         kube-proxy-shaped legacy nat table of {} services ({} rules) with one \
         `iptables-legacy-restore`, then rewrites the whole table {} times (a restore without \
         --noflush, one more service's endpoint moved each time), each once observer has \
         reported the one before ({} s without a line of the pod's); the node adds one nft rule \
         every {} ms, from {} s before the load until {} s after the last restore was reported{}\n",
        beside_text(&beside),
        thousands(plan.services as u64),
        thousands(expected_rules(plan.services) as u64),
        plan.rewrites,
        POD_QUIET.as_secs(),
        plan.interval.as_millis(),
        LEAD_IN.as_secs(),
        TAIL.as_secs(),
        if side_by_side {
            "; the whole plan ran once per binary, against's first, each in fresh namespaces \
             with its own observer"
        } else {
            ""
        }
    );
    let columns: Vec<(String, &Figures)> = runs
        .iter()
        .map(|r| {
            let head = if side_by_side {
                format!("{} ({})", r.binary.role.name(), r.binary.label)
            } else {
                "measured".to_owned()
            };
            (head, &r.figures)
        })
        .collect();
    md.push_str(&figures_table(&columns));
    if let [against, bin] = runs {
        md.push('\n');
        md.push_str(&headline(&against.figures, &bin.figures));
    }
    for r in runs {
        if side_by_side {
            let _ = writeln!(
                md,
                "\nThe pod's restores with {} ({}):",
                r.binary.role.name(),
                r.binary.label
            );
        }
        md.push_str(
            "\n| the pod's restore | `iptables-legacy-restore` wall | its exit → observer's first \
             / last line of the pod's | the change's `time` → the last line | the pod's change \
             lines | node changes in flight meanwhile: n; latency p50 / max |\n\
             | --- | --- | --- | --- | --- | --- |\n",
        );
        for (k, restore) in r.figures.restores.iter().enumerate() {
            let _ = writeln!(md, "{}", restore_row(k, restore, &r.figures));
        }
    }
    md.push_str(
        "\nA restore is handled from its change in the kernel (the `time` of observer's first \
         line for it, the writer's call that replaces the table) until observer's last line for \
         it; a node change was in flight \
         meanwhile when its span, from its `nft`'s exit to its line, overlaps that. Latencies \
         are as measured: negative when the line arrived before `nft` was reaped.\n\n",
    );
    for r in runs {
        let (f, whose) = (&r.figures, whose(r));
        let missing = f.latencies().missing;
        if !missing.is_empty() {
            let marks: Vec<String> = missing.iter().map(|m| format!("{MARK}{m}")).collect();
            let _ = writeln!(
                md,
                "- FAILED: {whose}{} of {} node changes never reported (within {} s of the \
                 last): {}",
                missing.len(),
                f.sent.len(),
                NODE_TIMEOUT.as_secs(),
                marks.join(", ")
            );
        }
        if f.others > 0 {
            let _ = writeln!(
                md,
                "- note: {whose}observer also printed {} change lines of other namespaces \
                 meanwhile",
                thousands(f.others as u64)
            );
        }
        if f.stray > 0 {
            let _ = writeln!(
                md,
                "- note: {whose}{} change lines of the two namespaces were neither a restore's \
                 nor a node change's",
                f.stray
            );
        }
        for n in &f.notes {
            let _ = writeln!(md, "- note: {whose}{}", n.replace('\n', " "));
        }
    }
    let _ = writeln!(md, "{END}");
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of `a` and `b` that differ, side by side (both have as many lines).
    fn differing<'a>(a: &'a str, b: &'a str) -> Vec<(&'a str, &'a str)> {
        assert_eq!(a.lines().count(), b.lines().count());
        a.lines().zip(b.lines()).filter(|(x, y)| x != y).collect()
    }

    #[test]
    fn each_rewrite_moves_one_services_endpoint() {
        for services in [1, 7, 2_500] {
            let load = pod_table(services, 0);
            assert_eq!(load, crate::bench::bignode::legacy::nat_table(services));
            let mut before = load;
            for k in 1..=5 {
                let after = pod_table(services, k);
                let (s, e) = moved_endpoint(services, k);
                let ip = moved_ip(k);
                let diff = differing(&before, &after);
                // Its KUBE-SVC- rule's comment and its KUBE-SEP- chain's two rules.
                assert_eq!(diff.len(), 3, "{services} services, rewrite {k}: {diff:#?}");
                let port = format!("\"ns-{}/svc-{s}:http", s % 40);
                for (old, new) in &diff {
                    assert!(new.contains(&port), "{new}");
                    assert!(new.contains(&ip), "{new}");
                    assert!(!old.contains(&ip), "{old}");
                }
                assert!(diff[0].1.contains(&format!("-> {ip}:8080\"")));
                assert!(diff[1].1.contains(&format!("-s {ip}/32 ")));
                assert!(diff[2].1.ends_with(&format!("--to-destination {ip}:8080")));
                // The endpoint's own jump: the (e + 1)th of its service's three.
                let jumps: Vec<&str> = after
                    .lines()
                    .filter(|l| l.contains(&port) && l.contains(" -> "))
                    .collect();
                assert_eq!(jumps[e], diff[0].1);
                assert_eq!(
                    after.lines().filter(|l| l.starts_with("-A ")).count(),
                    expected_rules(services)
                );
                before = after;
            }
        }
    }

    #[test]
    fn rewrites_spread_over_the_table() {
        let picks: HashSet<(usize, usize)> = (1..=10).map(|j| moved_endpoint(10_000, j)).collect();
        assert_eq!(picks.len(), 10);
        assert_eq!(moved_ip(1), "10.64.0.1");
        assert_eq!(moved_ip(256), "10.64.1.0");
    }

    #[test]
    fn node_lines_are_recognised_by_their_mark() -> Result<()> {
        let line = r#"{"kind":"change","seq":3,"netns_name":"obs-neighbour-1-node","backend":"nft","family":"inet","table":"t","chain":"c","op":"rule_add","rule":"counter comment \"nbmark12\"","txn":"nft-1-4","result":"ok"}"#;
        let v: Value = serde_json::from_str(line)?;
        assert_eq!(node_mark(&v), Some(12));
        let mut other = v.clone();
        other["op"] = "rule_delete".into();
        assert_eq!(node_mark(&other), None);
        other = v.clone();
        other["rule"] = "counter".into();
        assert_eq!(node_mark(&other), None);

        let t0 = Instant::now();
        let mut log = Log::new("obs-neighbour-1-pod", "obs-neighbour-1-node");
        let pod = |txn: &str, op: &str| {
            format!(
                r#"{{"kind":"change","netns_name":"obs-neighbour-1-pod","backend":"legacy","op":"{op}","txn":"{txn}"}}"#
            )
        };
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        log.take(vec![(at(1), pod("x1", "rule_add"))]);
        assert_eq!(log.stray, 1, "a pod line before any restore");
        log.begin();
        log.take(vec![
            (at(2), line.to_owned()),
            (at(3), pod("x1", "rule_add")),
            (at(4), pod("x1", "chain_create")),
            (
                at(5),
                r#"{"kind":"change","netns_name":"elsewhere"}"#.to_owned(),
            ),
        ]);
        log.begin();
        // A late line of the load's transaction stays the load's.
        log.take(vec![
            (at(6), pod("x2", "rule_add")),
            (at(7), pod("x1", "rule_add")),
        ]);
        assert_eq!(log.seen.get(&12), Some(&at(2)));
        assert_eq!(log.restores[0].lines, 3);
        assert_eq!(log.restores[0].ops["rule_add"], 2);
        assert_eq!(
            (log.restores[0].first, log.restores[0].last),
            (Some(at(3)), Some(at(7)))
        );
        assert_eq!(log.restores[1].lines, 1);
        assert_eq!((log.stray, log.others), (1, 1));
        Ok(())
    }

    #[test]
    fn latencies_split_by_the_restores_being_handled() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let sent: Vec<Sent> = [0, 200, 400, 600, 800]
            .iter()
            .enumerate()
            .map(|(mark, &ms)| Sent { mark, done: at(ms) })
            .collect();
        // 0 before the window; 1 sent before it, reported inside it; 2 inside; 3 reported
        // before its nft was reaped, inside; 4 missing.
        let seen: HashMap<usize, Instant> =
            [(0, at(5)), (1, at(310)), (2, at(450)), (3, at(590))].into();
        let busy = [(at(300), at(595))];
        let l = latencies(&sent, &seen, &busy);
        assert_eq!(l.missing, vec![4]);
        assert_eq!(l.rest, vec![5.0]);
        assert_eq!(l.during.len(), 3);
        assert!((l.during[0] - 110.0).abs() < 1e-6);
        assert!((l.during[1] - 50.0).abs() < 1e-6);
        assert!((l.during[2] + 10.0).abs() < 1e-6, "negative, as measured");
        assert_eq!(l.all().len(), 4);
        // No restore: all are the rest.
        let l = latencies(&sent, &seen, &[]);
        assert_eq!((l.during.len(), l.rest.len()), (0, 4));
    }

    #[test]
    fn a_restore_is_handled_from_its_replace_to_its_last_line() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut r = Restore {
            start: at(100),
            done: at(200),
            lines: PodLines::default(),
        };
        assert_eq!(r.busy(), (at(100), at(200)), "no line: the restore's run");
        r.lines.last = Some(at(900));
        assert_eq!(r.busy(), (at(100), at(900)), "no time: from its start");
        r.lines.changed = Some(at(180));
        assert_eq!(r.busy(), (at(180), at(900)));
        r.lines.last = Some(at(190));
        assert_eq!(r.busy(), (at(180), at(190)), "reported before its exit");
        r.lines.changed = Some(at(50));
        assert_eq!(r.busy(), (at(100), at(190)), "a replace before the start");
        r.lines.changed = Some(at(300));
        assert_eq!(
            r.busy(),
            (at(190), at(190)),
            "a replace after the last line"
        );

        let sent = [
            Sent {
                mark: 0,
                done: at(150),
            },
            Sent {
                mark: 1,
                done: at(250),
            },
        ];
        let seen: HashMap<usize, Instant> = [(0, at(195)), (1, at(260))].into();
        r.lines.changed = Some(at(180));
        assert_eq!(r.in_flight(&sent, &seen).len(), 1);
    }

    #[test]
    fn a_lines_time_is_read_on_this_clock() {
        let log = Log::new("p", "n");
        let (wall, now) = log.clock;
        // As observer writes it: UTC, nanoseconds.
        let line = |t: OffsetDateTime| {
            let text = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                t.nanosecond()
            );
            serde_json::json!({ "time": text })
        };
        let later = log.instant_of(&line(wall + Duration::from_millis(1_500)));
        assert_eq!(later, Some(now + Duration::from_millis(1_500)));
        let earlier = log.instant_of(&line(wall - Duration::from_millis(20)));
        assert_eq!(earlier, now.checked_sub(Duration::from_millis(20)));
        assert_eq!(log.instant_of(&serde_json::json!({ "time": "soon" })), None);
    }

    #[test]
    fn figures_read_as_durations() {
        assert_eq!(duration_text(12.34), "12.3 ms");
        assert_eq!(duration_text(-3.0), "-3.0 ms");
        assert_eq!(duration_text(2_345.0), "2.35 s");
        assert_eq!(
            dist_cell(&[1.0, 2.0, 3.0, 1_500.0]),
            "2.0 ms / 1.50 s / 1.50 s (n = 4)"
        );
        assert_eq!(dist_cell(&[]), "none (n = 0)");
    }

    /// One run's figures: the node's changes sent every 100 ms from `t0`, each line arriving
    /// its latency in ms later (`None`: never); one restore handled from 150 ms to 350 ms.
    fn figures_of(t0: Instant, latencies: &[Option<u64>], rules: usize) -> Figures {
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let sent: Vec<Sent> = (0..latencies.len())
            .map(|mark| Sent {
                mark,
                done: at(100 * mark as u64),
            })
            .collect();
        let seen = latencies
            .iter()
            .enumerate()
            .filter_map(|(mark, l)| l.map(|l| (mark, at(100 * mark as u64 + l))))
            .collect();
        let lines = PodLines {
            lines: 1,
            first: Some(at(340)),
            last: Some(at(350)),
            changed: Some(at(150)),
            ..PodLines::default()
        };
        Figures {
            services: 1,
            rules,
            other_namespaces: 0,
            restores: vec![Restore {
                start: at(140),
                done: at(200),
                lines,
            }],
            sent,
            seen,
            stray: 0,
            others: 0,
            load_average: "0.50 0.40 0.30".to_owned(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn two_runs_side_by_side() {
        let t0 = Instant::now();
        // Changes 1 to 3 in flight while the restore was handled.
        let against = figures_of(
            t0,
            &[Some(10), Some(80), Some(40), Some(20), Some(5)],
            110_008,
        );
        // Change 2 only; change 3 never reported.
        let bin = figures_of(t0, &[Some(4), Some(10), Some(8), None, Some(3)], 19);
        let table = figures_table(&[
            ("against (`old`, observer 0.1.0)".to_owned(), &against),
            ("bin (`new`)".to_owned(), &bin),
        ]);
        assert_eq!(
            table,
            "| figure | against (`old`, observer 0.1.0) | bin (`new`) |\n\
             | --- | --- | --- |\n\
             | node changes (`nft add rule`): sent / reported | 5 / 5 | 5 / 4 |\n\
             | node latency, `nft` exit → its line, while the pod's load or a rewrite was \
             handled: p50 / p95 / max | 40.0 ms / 80.0 ms / 80.0 ms (n = 3) | 8.0 ms / 8.0 ms \
             / 8.0 ms (n = 1) |\n\
             | node latency, the other changes: p50 / p95 / max | 5.0 ms / 10.0 ms / 10.0 ms \
             (n = 2) | 4.0 ms / 10.0 ms / 10.0 ms (n = 3) |\n\
             | node latency, all changes: p50 / p95 / max | 20.0 ms / 80.0 ms / 80.0 ms (n = 5) \
             | 4.0 ms / 10.0 ms / 10.0 ms (n = 4) |\n\
             | the pod's nat table at the end (`iptables-legacy-save -t nat`) | 110,008 rules | \
             19 rules |\n"
        );
        // One run: one column, "measured".
        let one = figures_table(&[("measured".to_owned(), &bin)]);
        assert!(
            one.starts_with("| figure | measured |\n| --- | --- |\n"),
            "{one}"
        );
        assert_eq!(one.lines().count(), 7);

        assert_eq!(
            headline(&against, &bin),
            "The headline, the node's p95 latency while the pod's restores were handled: 80.0 ms \
             with against, 8.0 ms with bin; against ÷ bin = 10.00.\n"
        );
        let idle = figures_of(t0, &[Some(10)], 19);
        assert!(
            headline(&against, &idle).contains("none with bin; against ÷ bin = not a ratio"),
            "no change in flight: no p95"
        );
    }

    #[test]
    fn the_section_names_its_binaries() {
        let b = |role, name: &str, given| Binary {
            role,
            path: PathBuf::from(name),
            label: binary_label(name, Some("observer 0.1.0")),
            given,
        };
        let (old, new) = (b(Role::Against, "old", true), b(Role::Bin, "new", true));
        assert_eq!(
            observer_line("abc123", &[&old, &new]),
            "- observer: against: `old`, observer 0.1.0 (named with --against); bin: `new`, \
             observer 0.1.0 (named with --bin)"
        );
        assert_eq!(
            observer_line("abc123", &[&new]),
            "- observer: `new`, observer 0.1.0 (named with --bin)"
        );
        let built = b(Role::Bin, "observer", false);
        assert_eq!(observer_line("abc123", &[&built]), "- observer: abc123");
        assert_eq!(
            observer_line("abc123", &[&old, &built]),
            "- observer: against: `old`, observer 0.1.0 (named with --against); bin: \
             `observer`, observer 0.1.0, the release build of abc123"
        );
        assert_eq!(binary_label("old", None), "`old`");

        assert_eq!(
            shown_command(
                [
                    "bench-neighbour",
                    "--bin",
                    "/some/where/obs-new",
                    "--against=/else/obs-old",
                    "--no-write",
                ]
                .map(str::to_owned)
                .into_iter()
            ),
            "cargo xtask bench-neighbour --bin obs-new --against=obs-old --no-write"
        );

        assert_eq!(beside_text(&[(Role::Bin, 0)]), "");
        assert_eq!(
            beside_text(&[(Role::Bin, 1)]),
            " (1 other named namespace beside)"
        );
        assert_eq!(
            beside_text(&[(Role::Against, 3), (Role::Bin, 3)]),
            " (3 other named namespaces beside)"
        );
        assert_eq!(
            beside_text(&[(Role::Against, 0), (Role::Bin, 2)]),
            " (0 other named namespaces beside in against's run, 2 in bin's)"
        );
    }
}
