//! `cargo xtask bench-bignode`: what observer costs per kube-proxy sync on a node with a
//! kube-proxy-sized legacy nat table, against one `iptables-legacy-save` of the same table,
//! side by side in one run, for several table sizes; and whether that cost follows the change
//! or the table.
//!
//! Per size, in a network namespace of its own (made and deleted here; the host's ruleset is
//! never touched):
//! 1. `observer tail --json --netns NS` is started and its ready line awaited;
//! 2. the nat table of N services (kube-proxy's iptables mode: 4 chains and 11 rules per
//!    service) is loaded with one `iptables-legacy-restore`, and observer's lines for it are
//!    let through until observer is quiet;
//! 3. S partial syncs, one a second, each an `iptables-legacy-restore --noflush` of one
//!    endpoint chain rewritten with a new endpoint IP (kube-proxy's partial sync): observer's CPU
//!    time (utime + stime of /proc/PID/stat) before the restore and once the sync's lines are
//!    in, and the time from the restore's exit to the first line naming that chain;
//! 4. observer's VmRSS and VmHWM after the syncs; observer is stopped;
//! 5. `iptables-legacy-save -t nat` three times (after one untimed run that checks the table's
//!    shape): wall time and CPU (this process's reaped children's rusage).
//!
//! Then the ratio of observer's CPU per sync to one save's CPU, and how each grows from one size
//! to the next. No pass/fail thresholds: the machines are shared and noisy.
//!
//! `--nft` asks the same of kube-proxy's nftables mode. This file holds the entry point and
//! what both shapes share (the addresses, the syncs one a second and observer's CPU around
//! them, the figures of one size); [`legacy`] and [`nft`] make each shape's table and syncs and
//! measure one size, [`report`] writes the one section per shape.

pub(crate) mod legacy;
mod nft;
mod report;

use std::{
    fs,
    net::Ipv4Addr,
    path::Path,
    process, thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use serde_json::Value;

use crate::{
    bench::{
        procfs::{rusage_cpu_ms, stat_ticks, USER_HZ},
        spawn::{run_timed, Observer},
        stats::{median, ms, signed_ms},
    },
    cmd,
};

#[derive(Args)]
pub struct BenchBignodeArgs {
    /// Table sizes in services, comma-separated [default: 2500,10000; 500,2000 with --quick]
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=200_000))]
    services: Vec<u32>,
    /// Partial syncs per size, one a second [default: 10; 3 with --quick]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    syncs: Option<u32>,
    /// A small run: 500 and 2,000 services, 3 syncs each
    #[arg(long)]
    quick: bool,
    /// Print the figures only; leave BENCHMARKS.md as it is
    #[arg(long)]
    no_write: bool,
    /// Also measure kube-proxy's nftables mode (table ip kube-proxy, one `nft -f` per sync)
    /// at the same sizes, after the legacy table; its figures go between their own markers
    #[arg(long)]
    nft: bool,
    /// Measure the nftables shape only
    #[arg(long)]
    nft_only: bool,
    /// observer's `--ringbuf-size` for the legacy part: a ring of more than twice the table's
    /// size in the kernel (at most 16 MiB of table) has each writer's copy decoded instead of
    /// the table read back
    #[arg(long, value_name = "BYTES")]
    ringbuf_size: Option<u32>,
    /// observer's `--rule-level-limit` for the legacy part: a table of more rules is held at
    /// chain level (its changes told a chain at a time)
    #[arg(long, value_name = "RULES")]
    rule_level_limit: Option<u32>,
    /// Run observer in a memory cgroup of its own with this limit, in MiB, for the legacy part
    /// (a DaemonSet's limit is 512): whether it survives, its peak usage and the OOM kills are
    /// reported
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u32).range(16..=1_048_576))]
    memory_limit: Option<u32>,
}

/// Timed runs of `iptables-legacy-save -t nat` per size (their median is reported).
const SAVE_RUNS: usize = 3;
/// Timed runs of `nft list table` per size, up to [`ONE_LIST_ABOVE`] services.
const LIST_RUNS: usize = 3;
/// Above this size one `nft list table` takes seconds: one timed run only.
const ONE_LIST_ABOVE: usize = 20_000;

/// Endpoint chains per service (kube-proxy's probabilities 1/3, 1/2, the rest), in both shapes.
pub(crate) const ENDPOINTS: usize = 3;

const SYNC_INTERVAL: Duration = Duration::from_secs(1);
/// One sync's first line.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);
/// After a sync's first line: no further line for this long ends the sync's lines.
const SYNC_QUIET: Duration = Duration::from_millis(300);

pub fn run(args: &BenchBignodeArgs) -> Result<i32> {
    if !cmd::is_root() {
        bail!(
            "bench-bignode needs root: it creates network namespaces, runs iptables-legacy-restore \
             and iptables-legacy-save inside them, and observer loads eBPF programs"
        );
    }
    for tool in [
        "ip",
        "iptables-legacy-restore",
        "iptables-legacy-save",
        "kill",
    ] {
        if cmd::which(tool).is_none() {
            bail!(
                "`{tool}` was not found; `cargo xtask setup` installs it (Debian packages \
                 iptables, iproute2, procps)"
            );
        }
    }
    let sizes: Vec<usize> = match (&args.services[..], args.quick) {
        ([], false) => vec![2_500, 10_000],
        ([], true) => vec![500, 2_000],
        (s, _) => s.iter().map(|&n| n as usize).collect(),
    };
    let syncs = args
        .syncs
        .map_or(if args.quick { 3 } else { 10 }, |s| s as usize);
    crate::build()?;
    let bin = crate::target_dir()?.join("release").join("observer");
    if !cmd::is_executable(&bin) {
        bail!(
            "{} was not built; run `cargo xtask build` and look at its output",
            bin.display()
        );
    }
    if args.nft_only {
        let ok = nft::run(&bin, &sizes, syncs, args.no_write)?;
        return Ok(if ok { 0 } else { 1 });
    }
    let legacy_ok = legacy::run(
        &bin,
        &sizes,
        syncs,
        legacy::Under {
            ringbuf: args.ringbuf_size,
            rule_level_limit: args.rule_level_limit,
            memory_limit: args.memory_limit.map(|m| u64::from(m) << 20),
        },
        args.no_write,
    )?;
    let nft_ok = !args.nft || nft::run(&bin, &sizes, syncs, args.no_write)?;
    Ok(if nft_ok && legacy_ok { 0 } else { 1 })
}

/// Measures each size as a phase named by `name`; a size that fails is kept (as text) for the
/// report, not propagated.
fn measure_sizes(
    sizes: &[usize],
    name: impl Fn(usize) -> String,
    mut measure: impl FnMut(usize) -> Result<Figures>,
) -> Vec<(usize, Result<Figures, String>)> {
    let mut results = Vec::new();
    for &services in sizes {
        let name = name(services);
        let r = cmd::phase(&name, || measure(services)).map_err(|e| {
            eprintln!("xtask: {name}: {e:#}");
            format!("{e:#}")
        });
        results.push((services, r));
    }
    results
}

// ---------------------------------------------------------------------------------------------
// The addresses, in both shapes

/// `base` + `offset` as a dotted quad.
fn ipv4(base: [u8; 4], offset: usize) -> String {
    Ipv4Addr::from(u32::from_be_bytes(base).wrapping_add(offset as u32)).to_string()
}

fn cluster_ip(s: usize) -> String {
    ipv4([10, 96, 0, 0], s + 1)
}

fn endpoint_ip(s: usize, e: usize) -> String {
    ipv4([10, 128, 0, 0], ENDPOINTS * s + e + 1)
}

// ---------------------------------------------------------------------------------------------
// The measurement

/// What one size measured, in either shape. The dump is `iptables-legacy-save -t nat` or `nft
/// list table`; the figures of observer's memory at ready and after the load, and the other
/// namespaces, are the nftables shape's only.
#[derive(Default)]
struct Figures {
    rules: usize,
    chains: usize,
    dump_bytes: usize,
    /// The table's load: the writer's wall time, observer's lines for it and its CPU until quiet.
    load_ms: f64,
    load_lines: usize,
    load_cpu_ms: f64,
    load_settle_ms: f64,
    /// observer's VmRSS at its ready line, before the table (other namespaces' tables in it).
    ready_rss_kib: u64,
    /// observer's VmRSS once the load is reported (before the syncs).
    loaded_rss_kib: u64,
    /// Other network namespaces with a name when observer started (observer reads them all).
    other_namespaces: usize,
    /// The syncs (the writer's figures are its restore's or its `nft -f`'s).
    syncs: SyncFigures,
    rss_kib: u64,
    hwm_kib: u64,
    /// The memory cgroup observer ran in (`--memory-limit`).
    cgroup: Option<crate::bench::cgroup::MemFigures>,
    dump_ms: Vec<f64>,
    dump_cpu_ms: Vec<f64>,
}

impl Figures {
    fn cpu_median(&self) -> f64 {
        median(&self.syncs.cpu_ms)
    }

    /// The mean per sync: the total over all syncs, finer than one sync's 10 ms ticks.
    fn cpu_mean(&self) -> f64 {
        self.syncs.cpu_ms.iter().sum::<f64>() / self.syncs.cpu_ms.len().max(1) as f64
    }

    fn dump_cpu(&self) -> f64 {
        median(&self.dump_cpu_ms)
    }

    /// Times `runs` dumps of the loaded table (`iptables-legacy-save`, `nft list table`), each
    /// one's wall and CPU time.
    fn time_dumps(&mut self, runs: usize, dump: impl Fn() -> process::Command) -> Result<()> {
        for _ in 0..runs {
            let (_, wall, cpu) = run_cpu(&mut dump())?;
            self.dump_ms.push(wall);
            self.dump_cpu_ms.push(cpu);
        }
        Ok(())
    }
}

/// observer's CPU time (utime + stime of every thread, alive or gone), in ms.
fn cpu_ms(pid: u32) -> Result<f64> {
    Ok(stat_ticks(pid, [14, 15])? as f64 * 1e3 / USER_HZ as f64)
}

/// The user + system CPU time of this process's children that were reaped, in ms
/// (`getrusage(RUSAGE_CHILDREN)`; a reaped child's own reaped children are in it too).
fn children_cpu_ms() -> Result<f64> {
    rusage_cpu_ms(libc::RUSAGE_CHILDREN)
}

/// Runs `c` (stdin and stdout to /dev/null) and returns its wall time and CPU time in ms.
fn run_cpu(c: &mut process::Command) -> Result<(Instant, f64, f64)> {
    let before = children_cpu_ms()?;
    let (done, took) = run_timed(c)?;
    Ok((done, ms(took), children_cpu_ms()? - before))
}

fn count_changes(lines: &[(Instant, String)]) -> usize {
    lines
        .iter()
        .filter(|(_, l)| l.contains(r#""kind":"change""#))
        .count()
}

/// Reads observer's lines until none came and its CPU time stood still for `quiet`; returns
/// the change lines read. Fails after `limit`.
fn settle(obs: &mut Observer, quiet: Duration, limit: Duration) -> Result<usize> {
    let start = Instant::now();
    let mut changes = 0;
    let mut last_activity = Instant::now();
    let mut ticks = cpu_ms(obs.pid)?;
    loop {
        thread::sleep(Duration::from_millis(100));
        let lines = obs.drain();
        let now_ticks = cpu_ms(obs.pid)?;
        changes += count_changes(&lines);
        if let Some(status) = obs.exited() {
            bail!("observer ended during the load ({status}), after {changes} change lines");
        }
        if !lines.is_empty() || now_ticks != ticks {
            last_activity = Instant::now();
            ticks = now_ticks;
        }
        if last_activity.elapsed() >= quiet {
            return Ok(changes);
        }
        if start.elapsed() >= limit {
            bail!(
                "observer was still busy {limit:?} after the load ({changes} change lines so \
                 far){}",
                obs.stderr_tail()
            );
        }
    }
}

/// What the syncs of one size measured.
#[derive(Default)]
struct SyncFigures {
    /// The writer's wall and CPU time, every sync.
    writer_ms: Vec<f64>,
    writer_cpu_ms: Vec<f64>,
    /// observer's CPU, the latency of the line naming the sync's chain and the change lines of
    /// the sync, for the syncs whose line came.
    cpu_ms: Vec<f64>,
    latency_ms: Vec<f64>,
    lines: Vec<usize>,
    /// Syncs whose line did not come within [`SYNC_TIMEOUT`].
    missed: usize,
}

/// Make `syncs` syncs one a second, as kube-proxy does, and measure each: `sync(k)` gives the
/// chain whose line ends the wait, the input written to `file`, and the writer's command that
/// reads it.
fn run_syncs(
    obs: &mut Observer,
    services: usize,
    syncs: usize,
    file: &Path,
    notes: &mut Vec<String>,
    mut sync: impl FnMut(usize) -> (String, String, process::Command),
) -> Result<SyncFigures> {
    let mut out = SyncFigures::default();
    let mut next = Instant::now();
    for k in 0..syncs {
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        next = Instant::now() + SYNC_INTERVAL;
        let (chain, text, mut writer) = sync(k);
        fs::write(file, &text).with_context(|| format!("writing {}", file.display()))?;
        obs.drain();
        let before = cpu_ms(obs.pid)?;
        let (done, wall, cpu) = run_cpu(&mut writer)?;
        out.writer_ms.push(wall);
        out.writer_cpu_ms.push(cpu);
        let hit = obs.wait_opt(
            SYNC_TIMEOUT,
            &format!("change line for {chain}"),
            |v: &Value| v["kind"] == "change" && v["chain"] == chain.as_str(),
        )?;
        let Some((at, _)) = hit else {
            out.missed += 1;
            notes.push(format!(
                "{services} services, sync {k}: no line named {chain} within {SYNC_TIMEOUT:?}"
            ));
            continue;
        };
        out.latency_ms.push(signed_ms(at, done));
        let earlier = obs.skipped.iter().filter(|v| v["kind"] == "change").count();
        // The rest of this sync's lines, until observer is quiet.
        let mut later = 0;
        let mut last = Instant::now();
        while last.elapsed() < SYNC_QUIET {
            thread::sleep(Duration::from_millis(20));
            let got = obs.drain();
            if !got.is_empty() {
                later += count_changes(&got);
                last = Instant::now();
            }
        }
        out.cpu_ms.push(cpu_ms(obs.pid)? - before);
        out.lines.push(earlier + 1 + later);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_stay_in_their_ranges() {
        assert_eq!(cluster_ip(0), "10.96.0.1");
        assert_eq!(cluster_ip(9_999), "10.96.39.16");
        assert_eq!(endpoint_ip(0, 0), "10.128.0.1");
        assert_eq!(endpoint_ip(9_999, 2), "10.128.117.48");
        assert_eq!(ipv4([10, 64, 0, 0], 256), "10.64.1.0");
    }
}
