//! `cargo xtask soak --minutes N`: `observer run` for N minutes under mixed churn, sampled every
//! minute, with aims checked at the end.
//!
//! - A copy of the release binary runs (so a rebuild during a long run cannot touch it), with a
//!   fresh record in a directory of the soak's own, the HTTP endpoint on a free loopback port and
//!   its stdout read through a pipe and counted.
//! - Load, all in network namespaces the soak makes and deletes (`obs-soak-PID-*`; the host's
//!   ruleset is never touched), about 1,000 changes per second: every 100 ms, alternately, one
//!   `nft -f` transaction (the load batches of `bench-daemon`: a chain flush and 99 rule adds,
//!   which observer reports as 99 `rule_replace`) and one `iptables-legacy-restore --noflush`
//!   that rewrites a 99-rule chain of a filter table holding 3,000 rules more (99
//!   `rule_replace`). Every 5 s a namespace is made, written (an nft table, chain and 2 rules;
//!   one `iptables-legacy -A`) and deleted.
//! - An SSE client on `/events` that drops its connection every 20 to 30 s and resumes, alternately
//!   with `Last-Event-ID` and `?after=`, checking that it sees every `seq` exactly once.
//! - Once a minute one line: RSS, open descriptors, CPU, record size (file + WAL), what was
//!   dropped or lost, the rate streamed, the SSE client's gaps and duplicates.
//! - At the end the aims: flat memory, nothing dropped or lost, no descriptor growth, every `seq`
//!   exactly once over SSE. Exit status 1 when one is missed.
//!
//! The run and what its threads share are here; [`load`](mod@load) makes the load, [`daemon`]
//! runs observer and reads its stdout, [`sse`](mod@sse) is the SSE client, [`sample`] takes the
//! minute's figures, [`report`](mod@report) judges the aims and writes the summary; [`signals`]
//! catches Ctrl-C.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::bench::harness::{clock_ticks, cpu_ticks, free_port, load_batches, rss, TempDir};
use crate::cmd;

mod daemon;
mod load;
mod report;
mod sample;
mod signals;
mod sse;

use daemon::{read_stdout, Daemon};
use load::{churn, legacy_setup, load, Ns, NS_PREFIX};
use report::report;
use sample::{print_header, print_row, quiet_fds, record_mib, scrape, Row, Scrape, MIB};
use signals::{catch_signals, interrupted, quiet};
use sse::sse;

#[derive(Args)]
pub struct SoakArgs {
    /// Minutes of load (at least 3)
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(3..))]
    minutes: u64,
    /// Also write the per-minute table and the summary into BENCHMARKS.md between its soak
    /// markers (also when an aim is missed; not after Ctrl-C). Without it they are only printed.
    #[arg(long)]
    bench: bool,
}

/// The load's period: an nft batch, then a legacy batch, each this far apart.
const TICK: Duration = Duration::from_millis(100);
/// A namespace is made, written and deleted this often.
const CHURN_EVERY: Duration = Duration::from_secs(5);
/// Rules of the legacy table besides the churned chain.
const BIG_RULES: usize = 3000;
/// The SSE client holds each connection this long, plus up to 10 s more.
const SSE_HOLD_S: u64 = 20;

// ---------------------------------------------------------------------------------------------
// What the threads see, shared with the sampler.

#[derive(Default)]
struct Shared {
    /// Stops the load and the namespace churn.
    stop_load: AtomicBool,
    /// Stops the SSE client (after the load, once it has caught up).
    stop_sse: AtomicBool,
    ready: AtomicBool,
    /// Change lines on stdout, and the last one's `seq`.
    changes: AtomicU64,
    last_seq: AtomicU64,
    /// Change lines on stdout whose `seq` was not the one after the last (numbering broken).
    stdout_seq_jumps: AtomicU64,
    /// `gap` status lines on stdout.
    gap_lines: AtomicU64,
    /// The load's two namespaces.
    load_inos: [AtomicU64; 2],
    /// Change lines of namespaces not the soak's: other work on the machine, which observer
    /// watches too.
    other_changes: AtomicU64,
    /// The churn namespace being written, and its change lines by backend.
    churn_ino: AtomicU64,
    churn_nft: AtomicU64,
    churn_legacy: AtomicU64,
    /// Churn namespaces made, and those whose writes of both backends were all streamed.
    churn_made: AtomicU64,
    churn_complete: AtomicU64,
    /// Held by the churn thread while its namespace exists: the descriptor count is read when
    /// none does.
    churn_quiet: Mutex<()>,
    /// Load batches run, and those that failed (with the first failure's message).
    nft_batches: AtomicU64,
    legacy_batches: AtomicU64,
    load_failures: AtomicU64,
    first_failure: Mutex<Option<String>>,
    sse: SseStats,
}

#[derive(Default)]
struct SseStats {
    last: AtomicU64,
    events: AtomicU64,
    gaps: AtomicU64,
    duplicates: AtomicU64,
    /// `id:` and the `seq` in `data:` differ.
    mismatched: AtomicU64,
    connections: AtomicU64,
    /// Connections refused, answered with something else than 200, or ended by the server.
    errors: AtomicU64,
}

impl Shared {
    fn fail(&self, what: String) {
        self.load_failures.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut f) = self.first_failure.lock() {
            if f.is_none() {
                eprintln!("xtask: soak: {what}");
                *f = Some(what);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The run

/// What the run saw, for the summary.
struct Outcome {
    rows: Vec<Row>,
    /// Minutes of load done (less than asked after Ctrl-C).
    load_s: f64,
    changes: u64,
    cpu_pct: f64,
    rss_peak_mib: f64,
    end_fds: usize,
    fds_minute1: BTreeMap<String, usize>,
    fds_end: BTreeMap<String, usize>,
    end: Scrape,
    record_mib: f64,
    stdout_last: u64,
    exit: String,
    stderr_lines: usize,
    stderr_tail: Vec<String>,
}

pub fn run(args: &SoakArgs) -> Result<i32> {
    if !cmd::is_root() {
        bail!(
            "soak needs root: observer run loads eBPF programs, and the load makes network \
             namespaces and writes nft and iptables-legacy rules in them"
        );
    }
    for tool in ["ip", "nft", "iptables-legacy", "iptables-legacy-restore"] {
        if cmd::which(tool).is_none() {
            bail!("`{tool}` was not found; `cargo xtask setup` installs it");
        }
    }
    catch_signals();
    crate::bench::remove_stale_namespaces(NS_PREFIX);
    crate::build()?;
    if interrupted() {
        bail!("interrupted");
    }
    let dir = TempDir::new()?;
    // A copy: a rebuild of target/release/observer during a long run cannot touch it.
    let built = crate::target_dir()?.join("release").join("observer");
    let bin = dir.path().join("observer");
    fs::copy(&built, &bin).with_context(|| format!("copying {}", built.display()))?;
    let port = free_port()?;

    let nft_ns = Ns::new("nft")?;
    quiet(
        nft_ns
            .exec("nft")
            .args(["add table ip obsload; add chain ip obsload c"]),
    )?;
    let nft_batches = load_batches(dir.path())?;
    let legacy_ns = Ns::new("legacy")?;
    let legacy_batches = legacy_setup(&legacy_ns, dir.path())?;

    let sh = Shared::default();
    sh.load_inos[0].store(nft_ns.inode()?, Ordering::Relaxed);
    sh.load_inos[1].store(legacy_ns.inode()?, Ordering::Relaxed);
    let minutes = args.minutes;
    let outcome = thread::scope(|s| -> Result<Outcome> {
        let (mut daemon, stdout) = Daemon::start(&bin, dir.path(), port)?;
        // Dropped before `daemon` on the way out of this scope (error or not): the threads stop,
        // then observer does (its stdout reader ends with it), then the scope joins them.
        struct StopAll<'a>(&'a Shared);
        impl Drop for StopAll<'_> {
            fn drop(&mut self) {
                self.0.stop_load.store(true, Ordering::SeqCst);
                self.0.stop_sse.store(true, Ordering::SeqCst);
            }
        }
        let _stop_all = StopAll(&sh);
        let ctx = Ctx {
            sh: &sh,
            dir: dir.path(),
            port,
        };
        let sh = &sh;
        s.spawn(move || read_stdout(stdout, sh));
        wait_ready(&mut daemon, sh)?;
        s.spawn(move || sse(sh, port));
        thread::sleep(Duration::from_secs(2));

        let clk = clock_ticks();
        let start = Mark::now(sh, daemon.pid);
        let (nft, legacy, nft_b, legacy_b) = (&nft_ns, &legacy_ns, &nft_batches, &legacy_batches);
        let load_thread = s.spawn(move || load(sh, nft, nft_b, legacy, legacy_b));
        let dir_path = dir.path();
        let churn_thread = s.spawn(move || churn(sh, dir_path));
        eprintln!(
            "xtask: == soak: {minutes} minutes of load (nft and iptables-legacy, namespace churn, \
             an SSE client); one line a minute. Ctrl-C stops it early and cleans up."
        );
        print_header();
        let sampled = sample_minutes(&ctx, &mut daemon, minutes, start, clk)?;
        sh.stop_load.store(true, Ordering::SeqCst);
        let load_s = start.at.elapsed().as_secs_f64();
        let cpu_pct = (cpu_ticks(daemon.pid) - start.cpu) as f64 / clk / load_s * 100.0;
        let _ = load_thread.join();
        let _ = churn_thread.join();
        Ok(finish(&ctx, &mut daemon, start, sampled, load_s, cpu_pct))
    })?;
    drop(legacy_ns);
    drop(nft_ns);
    report(args, &sh, &outcome)
}

/// What the run's steps share: the threads' state, the soak's directory, observer's port.
struct Ctx<'a> {
    sh: &'a Shared,
    dir: &'a Path,
    port: u16,
}

/// A moment of the run and observer's counters then: the start of the load, or of a minute.
#[derive(Clone, Copy)]
struct Mark {
    at: Instant,
    cpu: u64,
    changes: u64,
    other: u64,
}

impl Mark {
    fn now(sh: &Shared, pid: u32) -> Mark {
        Mark {
            at: Instant::now(),
            cpu: cpu_ticks(pid),
            changes: sh.changes.load(Ordering::Relaxed),
            other: sh.other_changes.load(Ordering::Relaxed),
        }
    }
}

/// Waits for observer's ready line; fails when observer exits first, after 60 s, or on Ctrl-C.
fn wait_ready(daemon: &mut Daemon, sh: &Shared) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !sh.ready.load(Ordering::SeqCst) {
        if let Some(st) = daemon.exited() {
            bail!(
                "observer run exited ({st}) before its ready line; its stderr ends with:\n{}",
                daemon.stderr_tail(15).join("\n")
            );
        }
        if Instant::now() > deadline {
            bail!("observer run printed no ready line within 60 s");
        }
        if interrupted() {
            bail!("interrupted");
        }
        thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// What the minutes sampled: a row each, the peak RSS, the descriptors after minute 1 and the
/// last figures of `/metrics`.
struct Sampled {
    rows: Vec<Row>,
    rss_peak: u64,
    fds_minute1: BTreeMap<String, usize>,
    last: Scrape,
}

/// One row a minute for `minutes` minutes from `start` (fewer after Ctrl-C), printed as it is
/// taken; fails when observer exits. `clk`: the clock ticks per second.
fn sample_minutes(
    ctx: &Ctx,
    daemon: &mut Daemon,
    minutes: u64,
    start: Mark,
    clk: f64,
) -> Result<Sampled> {
    let (sh, pid) = (ctx.sh, daemon.pid);
    let mut out = Sampled {
        rows: Vec::new(),
        rss_peak: rss(pid),
        fds_minute1: BTreeMap::new(),
        last: Scrape::default(),
    };
    let mut prev = start;
    for minute in 1..=minutes {
        let at = start.at + Duration::from_secs(60 * minute);
        if !wait_minute(daemon, minute, at, &mut out.rss_peak)? {
            break;
        }
        let (fds, kinds) = quiet_fds(sh, pid, 3);
        let now = Mark::now(sh, pid);
        let wall = (now.at - prev.at).as_secs_f64();
        let rss_now = rss(pid);
        out.rss_peak = out.rss_peak.max(rss_now);
        out.last = scrape(ctx.port).unwrap_or(out.last);
        if minute == 1 {
            out.fds_minute1 = kinds;
        }
        let last = out.last;
        let row = Row {
            minute,
            rss_mib: rss_now as f64 / MIB,
            fds,
            cpu_pct: (now.cpu - prev.cpu) as f64 / clk / wall * 100.0,
            record_mib: record_mib(ctx.dir),
            dropped: last.dropped,
            failed: last.failed,
            gaps: last.gaps,
            lost: last.lost,
            rate: (now.changes - prev.changes) as f64 / wall,
            other_rate: (now.other - prev.other) as f64 / wall,
            sse_gaps: sh.sse.gaps.load(Ordering::Relaxed),
            sse_dups: sh.sse.duplicates.load(Ordering::Relaxed),
        };
        print_row(&row);
        out.rows.push(row);
        prev = now;
    }
    Ok(out)
}

/// Waits until `at`, the end of minute `minute`, reading observer's RSS once a second into
/// `rss_peak`; false when Ctrl-C came first. Fails when observer exits.
fn wait_minute(daemon: &mut Daemon, minute: u64, at: Instant, rss_peak: &mut u64) -> Result<bool> {
    let mut next_rss = Instant::now();
    while Instant::now() < at {
        if interrupted() {
            eprintln!(
                "xtask: soak: interrupted: stopping the load and observer, deleting the \
                 namespaces (Ctrl-C again quits at once and leaves them)"
            );
            return Ok(false);
        }
        if let Some(st) = daemon.exited() {
            bail!(
                "observer run exited ({st}) in minute {minute}; its stderr ends with:\n{}",
                daemon.stderr_tail(15).join("\n")
            );
        }
        if Instant::now() >= next_rss {
            *rss_peak = (*rss_peak).max(rss(daemon.pid));
            next_rss += Duration::from_secs(1);
        }
        thread::sleep(Duration::from_millis(200));
    }
    Ok(true)
}

/// After the load: lets everything stream and the SSE client catch up with stdout, takes the
/// end's figures, and stops observer.
fn finish(
    ctx: &Ctx,
    daemon: &mut Daemon,
    start: Mark,
    sampled: Sampled,
    load_s: f64,
    cpu_pct: f64,
) -> Outcome {
    let (sh, pid) = (ctx.sh, daemon.pid);
    thread::sleep(Duration::from_secs(2));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !interrupted()
        && sh.sse.last.load(Ordering::SeqCst) < sh.last_seq.load(Ordering::SeqCst)
        && Instant::now() < deadline
    {
        thread::sleep(Duration::from_millis(100));
    }
    let (end_fds, fds_end) = quiet_fds(sh, pid, 5);
    let end = scrape(ctx.port).unwrap_or(sampled.last);
    let record = record_mib(ctx.dir);
    let rss_peak = sampled.rss_peak.max(rss(pid));
    sh.stop_sse.store(true, Ordering::SeqCst);
    let exit = match daemon.stop() {
        Ok(st) if st.success() => "0 after SIGTERM".to_owned(),
        Ok(st) => format!("{st} after SIGTERM"),
        Err(e) => format!("{e:#}"),
    };
    let stderr_lines = fs::read_to_string(&daemon.stderr)
        .map(|t| t.lines().count())
        .unwrap_or(0);
    Outcome {
        rows: sampled.rows,
        load_s,
        changes: sh.changes.load(Ordering::Relaxed) - start.changes,
        cpu_pct,
        rss_peak_mib: rss_peak as f64 / MIB,
        end_fds,
        fds_minute1: sampled.fds_minute1,
        fds_end,
        end,
        record_mib: record,
        stdout_last: sh.last_seq.load(Ordering::SeqCst),
        exit,
        stderr_lines,
        stderr_tail: daemon.stderr_tail(5),
    }
}
