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

use std::{
    fmt::Write as _,
    fs,
    net::Ipv4Addr,
    path::Path,
    process, thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use serde_json::Value;

mod nft;

use crate::{
    bench::{
        netns::Netns,
        procfs::{stat_ticks, status_kib, USER_HZ},
        remove_stale_namespaces,
        spawn::{run_bounded, run_timed, Observer},
        stats::{median, mib, ms, percentile, signed_ms, thousands},
        table::chain_hash,
        write_marked, Environment,
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
}

const START: &str = "<!-- bench-bignode:start -->";
const END: &str = "<!-- bench-bignode:end -->";
/// The namespaces: `obs-bignode-PID-SERVICES`.
const NS_PREFIX: &str = "obs-bignode-";

/// Endpoint chains per service (kube-proxy's probabilities 1/3, 1/2, the rest).
const ENDPOINTS: usize = 3;
/// User chains of one service: its KUBE-SVC- and its KUBE-SEP- chains.
pub(crate) const CHAINS_PER_SERVICE: usize = 1 + ENDPOINTS;
/// Rules of one service: one in KUBE-SERVICES, 1 + ENDPOINTS in its KUBE-SVC-, 2 per KUBE-SEP-.
pub(crate) const RULES_PER_SERVICE: usize = 1 + (1 + ENDPOINTS) + 2 * ENDPOINTS;
/// User chains outside the services: KUBE-SERVICES, KUBE-POSTROUTING, KUBE-MARK-MASQ,
/// KUBE-NODEPORTS.
const FIXED_CHAINS: usize = 4;
/// Rules outside the services: the jumps from PREROUTING, OUTPUT and POSTROUTING, three in
/// KUBE-POSTROUTING, one in KUBE-MARK-MASQ, and KUBE-SERVICES' last rule (to KUBE-NODEPORTS).
const FIXED_RULES: usize = 3 + 3 + 1 + 1;

const SAVE_RUNS: usize = 3;
const SYNC_INTERVAL: Duration = Duration::from_secs(1);
/// Loading the whole table (iptables-legacy-restore of up to a few hundred thousand rules).
const LOAD_TIMEOUT: Duration = Duration::from_secs(600);
/// observer reporting the loaded table, from the restore's exit until it is quiet.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(900);
/// No line and no CPU tick for this long: observer has reported the load.
const SETTLE_QUIET: Duration = Duration::from_secs(2);
/// One sync's first line.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);
/// After a sync's first line: no further line for this long ends the sync's lines.
const SYNC_QUIET: Duration = Duration::from_millis(300);
/// One save, or one restore --noflush.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(300);

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
    let env = Environment::collect();
    remove_stale_namespaces(NS_PREFIX);
    let mut notes = Vec::new();
    let mut results = Vec::new();
    for &services in &sizes {
        let name = format!(
            "bench-bignode: {} services ({} rules), {syncs} syncs",
            thousands(services as u64),
            thousands(expected_rules(services) as u64)
        );
        let r = cmd::phase(&name, || {
            measure(&bin, services, syncs, args.ringbuf_size, &mut notes)
        })
        .map_err(|e| {
            eprintln!("xtask: {name}: {e:#}");
            format!("{e:#}")
        });
        results.push((services, r));
    }
    let md = markdown(&env, syncs, &results, &notes);
    print!("{md}");
    if args.no_write {
        eprintln!("xtask: --no-write: BENCHMARKS.md left as it is");
    } else {
        let path = crate::root().join("BENCHMARKS.md");
        write_marked(&path, START, END, &md)?;
        eprintln!("xtask: wrote the figures into {}", path.display());
    }
    let nft_ok = !args.nft || nft::run(&bin, &sizes, syncs, args.no_write)?;
    Ok(if nft_ok && results.iter().all(|(_, r)| r.is_ok()) {
        0
    } else {
        1
    })
}

// ---------------------------------------------------------------------------------------------
// The table and the syncs

/// `base` + `offset` as a dotted quad.
pub(crate) fn ipv4(base: [u8; 4], offset: usize) -> String {
    Ipv4Addr::from(u32::from_be_bytes(base).wrapping_add(offset as u32)).to_string()
}

fn svc_chain(s: usize) -> String {
    format!("KUBE-SVC-{}", chain_hash(s as u64 * 4))
}

fn sep_chain(s: usize, e: usize) -> String {
    format!("KUBE-SEP-{}", chain_hash(s as u64 * 4 + 1 + e as u64))
}

pub(crate) fn cluster_ip(s: usize) -> String {
    ipv4([10, 96, 0, 0], s + 1)
}

pub(crate) fn endpoint_ip(s: usize, e: usize) -> String {
    ipv4([10, 128, 0, 0], ENDPOINTS * s + e + 1)
}

/// `namespace/service:port`, as kube-proxy writes it in comments.
fn port_name(s: usize) -> String {
    format!("ns-{}/svc-{s}:http", s % 40)
}

/// An endpoint chain's two rules, as kube-proxy writes them.
fn sep_rules(out: &mut String, chain: &str, port: &str, ip: &str) {
    let _ = writeln!(
        out,
        "-A {chain} -s {ip}/32 -m comment --comment \"{port}\" -j KUBE-MARK-MASQ\n\
         -A {chain} -p tcp -m comment --comment \"{port}\" -m tcp -j DNAT --to-destination {ip}:8080"
    );
}

fn expected_rules(services: usize) -> usize {
    FIXED_RULES + RULES_PER_SERVICE * services
}

fn expected_chains(services: usize) -> usize {
    FIXED_CHAINS + CHAINS_PER_SERVICE * services
}

/// An `iptables-legacy-restore` input: a nat table shaped like kube-proxy's iptables mode with
/// `services` services of [`ENDPOINTS`] endpoints each ([`CHAINS_PER_SERVICE`] chains and
/// [`RULES_PER_SERVICE`] rules per service), plus KUBE-MARK-MASQ, KUBE-POSTROUTING,
/// KUBE-NODEPORTS and the jumps from the built-in chains.
pub(crate) fn nat_table(services: usize) -> String {
    let mut t = String::with_capacity(services * 1_400 + 4_096);
    t.push_str(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
         :POSTROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-POSTROUTING - [0:0]\n\
         :KUBE-MARK-MASQ - [0:0]\n:KUBE-NODEPORTS - [0:0]\n",
    );
    for s in 0..services {
        let _ = writeln!(t, ":{} - [0:0]", svc_chain(s));
        for e in 0..ENDPOINTS {
            let _ = writeln!(t, ":{} - [0:0]", sep_chain(s, e));
        }
    }
    t.push_str(
        "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n\
         -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n\
         -A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0\n\
         -A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" \
         -j MASQUERADE --random-fully\n\
         -A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n",
    );
    for s in 0..services {
        let (svc, ip, port) = (svc_chain(s), cluster_ip(s), port_name(s));
        let _ = writeln!(
            t,
            "-A KUBE-SERVICES -d {ip}/32 -p tcp -m comment --comment \"{port} cluster IP\" \
             -m tcp --dport 80 -j {svc}\n\
             -A {svc} ! -s 10.128.0.0/9 -d {ip}/32 -p tcp -m comment --comment \"{port} cluster IP\" \
             -m tcp --dport 80 -j KUBE-MARK-MASQ"
        );
        for e in 0..ENDPOINTS {
            let statistic = match ENDPOINTS - e {
                1 => String::new(),
                left => format!(
                    " -m statistic --mode random --probability {:.11}",
                    1.0 / left as f64
                ),
            };
            let _ = writeln!(
                t,
                "-A {svc} -m comment --comment \"{port} -> {}:8080\"{statistic} -j {}",
                endpoint_ip(s, e),
                sep_chain(s, e)
            );
        }
        for e in 0..ENDPOINTS {
            sep_rules(&mut t, &sep_chain(s, e), &port, &endpoint_ip(s, e));
        }
    }
    t.push_str(
        "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must \
         be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\nCOMMIT\n",
    );
    t
}

/// One partial sync: the chain it rewrites and its `iptables-legacy-restore --noflush` input.
pub(crate) struct Sync {
    pub(crate) chain: String,
    pub(crate) text: String,
}

/// Sync `k` of a table of `services` services: one endpoint chain declared (which flushes it)
/// and written again with a new endpoint IP, as kube-proxy's partial sync does. Successive
/// syncs touch services spread over the table.
pub(crate) fn sync_block(services: usize, k: usize) -> Sync {
    let s = (k * 7_919 + services / 2) % services;
    let e = k % ENDPOINTS;
    let chain = sep_chain(s, e);
    let mut text = format!("*nat\n:{chain} - [0:0]\n");
    sep_rules(
        &mut text,
        &chain,
        &port_name(s),
        &ipv4([10, 64, 0, 0], k + 1),
    );
    text.push_str("COMMIT\n");
    Sync { chain, text }
}

// ---------------------------------------------------------------------------------------------
// The measurement

struct Size {
    rules: usize,
    chains: usize,
    save_bytes: usize,
    /// The table's load: restore's wall time, observer's lines for it and its CPU until quiet.
    load_ms: f64,
    load_lines: usize,
    load_cpu_ms: f64,
    load_settle_ms: f64,
    /// Per sync.
    /// The syncs (the writer's figures are its restore's or its `nft -f`'s).
    syncs: SyncFigures,
    rss_kib: u64,
    hwm_kib: u64,
    save_ms: Vec<f64>,
    save_cpu_ms: Vec<f64>,
}

impl Size {
    fn cpu_median(&self) -> f64 {
        median(&self.syncs.cpu_ms)
    }

    /// The mean per sync: the total over all syncs, finer than one sync's 10 ms ticks.
    fn cpu_mean(&self) -> f64 {
        self.syncs.cpu_ms.iter().sum::<f64>() / self.syncs.cpu_ms.len().max(1) as f64
    }

    fn save_cpu(&self) -> f64 {
        median(&self.save_cpu_ms)
    }
}

/// observer's CPU time (utime + stime of every thread, alive or gone), in ms.
pub(crate) fn cpu_ms(pid: u32) -> Result<f64> {
    Ok(stat_ticks(pid, [14, 15])? as f64 * 1e3 / USER_HZ as f64)
}

/// The user + system CPU time of this process's children that were reaped, in ms
/// (`getrusage(RUSAGE_CHILDREN)`; a reaped child's own reaped children are in it too).
pub(crate) fn children_cpu_ms() -> Result<f64> {
    rusage_cpu_ms(libc::RUSAGE_CHILDREN)
}

/// The user + system CPU time `getrusage(who)` gives (`RUSAGE_SELF`, `RUSAGE_CHILDREN`), in ms.
pub(crate) fn rusage_cpu_ms(who: libc::c_int) -> Result<f64> {
    // SAFETY: rusage is plain data; zero is a valid value of each field.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct it is given and nothing else.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        bail!("getrusage({who}): {}", std::io::Error::last_os_error());
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    Ok(tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// Runs `c` (stdin and stdout to /dev/null) and returns its wall time and CPU time in ms.
pub(crate) fn run_cpu(c: &mut process::Command) -> Result<(Instant, f64, f64)> {
    let before = children_cpu_ms()?;
    let (done, took) = run_timed(c)?;
    Ok((done, ms(took), children_cpu_ms()? - before))
}

pub(crate) fn count_changes(lines: &[(Instant, String)]) -> usize {
    lines
        .iter()
        .filter(|(_, l)| l.contains(r#""kind":"change""#))
        .count()
}

/// Reads observer's lines until none came and its CPU time stood still for `quiet`; returns
/// the change lines read. Fails after `limit`.
pub(crate) fn settle(obs: &Observer, quiet: Duration, limit: Duration) -> Result<usize> {
    let start = Instant::now();
    let mut changes = 0;
    let mut last_activity = Instant::now();
    let mut ticks = cpu_ms(obs.pid)?;
    loop {
        thread::sleep(Duration::from_millis(100));
        let lines = obs.drain();
        let now_ticks = cpu_ms(obs.pid)?;
        changes += count_changes(&lines);
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
pub(crate) struct SyncFigures {
    /// The writer's wall and CPU time, every sync.
    pub writer_ms: Vec<f64>,
    pub writer_cpu_ms: Vec<f64>,
    /// observer's CPU, the latency of the line naming the sync's chain and the change lines of
    /// the sync, for the syncs whose line came.
    pub cpu_ms: Vec<f64>,
    pub latency_ms: Vec<f64>,
    pub lines: Vec<usize>,
    /// Syncs whose line did not come within [`SYNC_TIMEOUT`].
    pub missed: usize,
}

/// Make `syncs` syncs one a second, as kube-proxy does, and measure each: `sync(k)` gives the
/// chain whose line ends the wait, the input written to `file`, and the writer's command that
/// reads it.
pub(crate) fn run_syncs(
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

fn measure(
    bin: &Path,
    services: usize,
    syncs: usize,
    ringbuf: Option<u32>,
    notes: &mut Vec<String>,
) -> Result<Size> {
    let ns = Netns::add(format!("{NS_PREFIX}{}-{services}", process::id()))?;
    let tag = format!("bignode-{services}");
    let ring = ringbuf.map(|b| b.to_string());
    let mut args = vec!["tail", "--json", "--netns", &ns.name];
    if let Some(ring) = &ring {
        args.extend(["--ringbuf-size", ring.as_str()]);
    }
    let mut obs = Observer::start(bin, &args, &tag)?;

    // The table, loaded while observer watches.
    let table = nat_table(services);
    let cpu0 = cpu_ms(obs.pid)?;
    let t0 = Instant::now();
    let mut restore = ns.cmd("iptables-legacy-restore");
    restore.args(["-w", "30"]);
    run_bounded(&mut restore, Some(table.as_bytes()), LOAD_TIMEOUT)
        .context("loading the nat table")?;
    let load_ms = ms(t0.elapsed());
    let t1 = Instant::now();
    let load_lines = settle(&obs, SETTLE_QUIET, SETTLE_TIMEOUT)?;
    // The quiet window is not observer's work.
    let load_settle_ms = ms(t1.elapsed()) - ms(SETTLE_QUIET);
    let load_cpu_ms = cpu_ms(obs.pid)? - cpu0;
    if load_lines == 0 {
        notes.push(format!(
            "{services} services: observer printed no change line for the table's load"
        ));
    }

    // The partial syncs, one a second.
    let file = std::env::temp_dir().join(format!("obs-bignode-{}-sync.txt", process::id()));
    let mut size = Size {
        rules: 0,
        chains: 0,
        save_bytes: 0,
        load_ms,
        load_lines,
        load_cpu_ms,
        load_settle_ms,
        syncs: SyncFigures::default(),
        rss_kib: 0,
        hwm_kib: 0,
        save_ms: Vec::new(),
        save_cpu_ms: Vec::new(),
    };
    size.syncs = run_syncs(&mut obs, services, syncs, &file, notes, |k| {
        let sync = sync_block(services, k);
        let mut c = ns.cmd("iptables-legacy-restore");
        c.args(["-w", "5", "--noflush"]).arg(&file);
        (sync.chain, sync.text, c)
    })?;
    let _ = fs::remove_file(&file);
    size.rss_kib = status_kib(obs.pid, "VmRSS:")?;
    size.hwm_kib = status_kib(obs.pid, "VmHWM:")?;
    obs.finish(&format!("{services} services"), notes);

    // iptables-legacy-save of the same table: one untimed run that checks its shape, then timed.
    let save = || {
        let mut c = ns.cmd("iptables-legacy-save");
        c.args(["-t", "nat"]);
        c
    };
    let saved = run_bounded(&mut save(), None, COMMAND_TIMEOUT)?;
    size.rules = saved.lines().filter(|l| l.starts_with("-A ")).count();
    size.chains = saved
        .lines()
        .filter(|l| l.starts_with(':') && l.contains(" - "))
        .count();
    size.save_bytes = saved.len();
    if size.rules != expected_rules(services) || size.chains != expected_chains(services) {
        bail!(
            "iptables-legacy-save shows {} rules in {} user chains; expected {} in {}",
            size.rules,
            size.chains,
            expected_rules(services),
            expected_chains(services)
        );
    }
    for _ in 0..SAVE_RUNS {
        let (_, wall, cpu) = run_cpu(&mut save())?;
        size.save_ms.push(wall);
        size.save_cpu_ms.push(cpu);
    }
    drop(ns);
    Ok(size)
}

// ---------------------------------------------------------------------------------------------
// The report

/// The exponent `b` of `y ∝ x^b` between two sizes: about 1 when `y` grows as `x` does (the
/// table), about 0 when it stays flat (the change). `None` unless every figure is positive and
/// the sizes differ.
pub(crate) fn growth_exponent(x0: f64, x1: f64, y0: f64, y1: f64) -> Option<f64> {
    let ok = |v: f64| v.is_finite() && v > 0.0;
    if !(ok(x0) && ok(x1) && ok(y0) && ok(y1)) || x0 == x1 {
        return None;
    }
    Some((y1 / y0).ln() / (x1 / x0).ln())
}

/// What a growth exponent says the cost follows.
pub(crate) fn follows(exponent: Option<f64>) -> &'static str {
    match exponent {
        None => "not known (a figure is zero or missing)",
        Some(b) if b >= 0.7 => "the table",
        Some(b) if b <= 0.3 => "the change",
        Some(_) => "partly the table",
    }
}

fn markdown(
    env: &Environment,
    syncs: usize,
    results: &[(usize, Result<Size, String>)],
    notes: &[String],
) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "{START}");
    md.push_str(
        "<!-- Generated by `cargo xtask bench-bignode`: edits between these markers are overwritten. -->\n\n",
    );
    let _ = writeln!(md, "- date: {}", env.date);
    let _ = writeln!(md, "- kernel: {}", env.kernel);
    let _ = writeln!(
        md,
        "- CPUs: {}; a shared machine, other builds and tests ran beside the bench",
        env.cpus
    );
    let _ = writeln!(md, "- command: `{}`", env.command);
    let _ = writeln!(md, "- observer: {}", env.revision);
    let _ = writeln!(md, "- tools: {}", env.tools);
    let _ = writeln!(
        md,
        "- plan: {syncs} partial syncs per size, one a second; {SAVE_RUNS} timed saves per size\n"
    );
    let head: Vec<String> = results
        .iter()
        .map(|(n, _)| format!("{} services", thousands(*n as u64)))
        .collect();
    let _ = writeln!(md, "| figure | {} | aim |", head.join(" | "));
    let _ = writeln!(md, "| --- |{} --- |", " --- |".repeat(results.len()));
    let mut line = |what: &str, f: &dyn Fn(&Size) -> String, aim: &str| {
        let cells: Vec<String> = results
            .iter()
            .map(|(_, r)| match r {
                Ok(s) => f(s),
                Err(_) => "NOT MEASURED".to_owned(),
            })
            .collect();
        let _ = writeln!(md, "| {what} | {} | {aim} |", cells.join(" | "));
    };
    line(
        "nat table: rules / user chains (saved size)",
        &|s| {
            format!(
                "{} / {} ({:.1} MiB)",
                thousands(s.rules as u64),
                thousands(s.chains as u64),
                s.save_bytes as f64 / (1 << 20) as f64
            )
        },
        "",
    );
    line(
        "the load: iptables-legacy-restore wall; observer's change lines, CPU, time to quiet",
        &|s| {
            format!(
                "{:.0} ms; {} lines, {:.0} ms CPU, {:.1} s",
                s.load_ms,
                thousands(s.load_lines as u64),
                s.load_cpu_ms,
                s.load_settle_ms / 1e3
            )
        },
        "",
    );
    line(
        "one sync: `iptables-legacy-restore --noflush` wall / CPU (median)",
        &|s| {
            format!(
                "{:.1} / {:.1} ms",
                median(&s.syncs.writer_ms),
                median(&s.syncs.writer_cpu_ms)
            )
        },
        "",
    );
    line(
        "observer CPU per sync: median (mean)",
        &|s| format!("{:.0} ms ({:.1} ms)", s.cpu_median(), s.cpu_mean()),
        "",
    );
    line(
        "observer lines per sync (median); syncs missed",
        &|s| {
            let l: Vec<f64> = s.syncs.lines.iter().map(|&n| n as f64).collect();
            format!("{:.0}; {}", median(&l), s.syncs.missed)
        },
        "",
    );
    line(
        "latency, restore exit → first line naming the chain: p50 / p95",
        &|s| match (
            percentile(&s.syncs.latency_ms, 50.0),
            percentile(&s.syncs.latency_ms, 95.0),
        ) {
            (Some(a), Some(b)) => format!("{a:.1} / {b:.1} ms"),
            _ => "no line".to_owned(),
        },
        "p95 ≤ 50 ms",
    );
    line(
        "observer VmRSS after the syncs / VmHWM (peak)",
        &|s| format!("{} / {}", mib(s.rss_kib), mib(s.hwm_kib)),
        "< 128 MiB",
    );
    line(
        "`iptables-legacy-save -t nat`: wall / CPU (median of 3)",
        &|s| format!("{:.0} / {:.0} ms", median(&s.save_ms), s.save_cpu()),
        "",
    );
    line(
        "ratio observer CPU per sync (median) / save CPU",
        &|s| format!("{:.2}", s.cpu_median() / s.save_cpu()),
        "≤ 0.1",
    );
    md.push('\n');
    // The curve: how each figure grows from one size to the next.
    let ok: Vec<(usize, &Size)> = results
        .iter()
        .filter_map(|(n, r)| r.as_ref().ok().map(|s| (*n, s)))
        .collect();
    for pair in ok.windows(2) {
        let ((n0, a), (n1, b)) = (pair[0], pair[1]);
        let (x0, x1) = (a.rules as f64, b.rules as f64);
        let obs = growth_exponent(x0, x1, a.cpu_mean(), b.cpu_mean());
        let save = growth_exponent(x0, x1, a.save_cpu(), b.save_cpu());
        let lat = growth_exponent(
            x0,
            x1,
            median(&a.syncs.latency_ms).max(0.0),
            median(&b.syncs.latency_ms).max(0.0),
        );
        let factor = |y0: f64, y1: f64| {
            if y0 > 0.0 && y1.is_finite() {
                format!("×{:.2}", y1 / y0)
            } else {
                "×?".to_owned()
            }
        };
        let exp = |e: Option<f64>| e.map_or_else(|| "?".to_owned(), |e| format!("{e:.2}"));
        let _ = writeln!(
            md,
            "Curve, {} → {} services (rules {}): observer CPU per sync (mean) {} (exponent {}: \
             follows {}), save CPU {} (exponent {}: follows {}), latency p50 {} (exponent {}). \
             Exponent b of cost ∝ rules^b: 1 grows with the table, 0 with the change.\n",
            thousands(n0 as u64),
            thousands(n1 as u64),
            factor(x0, x1),
            factor(a.cpu_mean(), b.cpu_mean()),
            exp(obs),
            follows(obs),
            factor(a.save_cpu(), b.save_cpu()),
            exp(save),
            follows(save),
            factor(median(&a.syncs.latency_ms), median(&b.syncs.latency_ms)),
            exp(lat),
        );
    }
    for (n, r) in results {
        if let Err(e) = r {
            let _ = writeln!(md, "- {n} services: not measured: {}", e.replace('\n', " "));
        }
    }
    for n in notes {
        let _ = writeln!(md, "- note: {}", n.replace('\n', " "));
    }
    let _ = writeln!(md, "{END}");
    md
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    #[test]
    fn table_has_kube_proxys_shape() {
        let n = 57;
        let t = nat_table(n);
        assert!(t.starts_with("*nat\n") && t.ends_with("COMMIT\n"));
        let chains: Vec<&str> = t
            .lines()
            .filter(|l| l.starts_with(':') && l.ends_with(" - [0:0]"))
            .map(|l| &l[1..l.len() - " - [0:0]".len()])
            .collect();
        assert_eq!(chains.len(), expected_chains(n));
        assert_eq!(chains.len(), 4 + 4 * n);
        assert_eq!(
            chains.iter().collect::<HashSet<_>>().len(),
            chains.len(),
            "chain names collide"
        );
        let rules: Vec<&str> = t.lines().filter(|l| l.starts_with("-A ")).collect();
        assert_eq!(rules.len(), expected_rules(n));
        assert_eq!(rules.len(), 8 + 11 * n);
        // Rules per chain: 1 + 3 per KUBE-SVC-, 2 per KUBE-SEP-, one per service in
        // KUBE-SERVICES (+ the nodeports rule); every jump's target is declared.
        let mut per_chain: HashMap<&str, usize> = HashMap::new();
        for r in &rules {
            let chain = r.split(' ').nth(1).unwrap();
            *per_chain.entry(chain).or_default() += 1;
            let target = r.rsplit_once(" -j ").unwrap().1.split(' ').next().unwrap();
            assert!(
                target
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '-'),
                "{r}"
            );
            if target.starts_with("KUBE-") {
                assert!(chains.contains(&target), "{r}: no chain {target}");
            }
        }
        for c in &chains {
            let want = match c {
                c if c.starts_with("KUBE-SVC-") => 4,
                c if c.starts_with("KUBE-SEP-") => 2,
                &"KUBE-SERVICES" => n + 1,
                &"KUBE-POSTROUTING" => 3,
                &"KUBE-MARK-MASQ" => 1,
                &"KUBE-NODEPORTS" => 0,
                other => panic!("unexpected chain {other}"),
            };
            assert_eq!(per_chain.get(c).copied().unwrap_or(0), want, "{c}");
        }
        assert_eq!(
            chains.iter().filter(|c| c.starts_with("KUBE-SVC-")).count(),
            n
        );
        // kube-proxy's probabilities: 1/3 then 1/2, the last endpoint without statistic.
        let svc = svc_chain(5);
        let jumps: Vec<&&str> = rules
            .iter()
            .filter(|r| r.starts_with(&format!("-A {svc} ")) && r.contains("KUBE-SEP-"))
            .collect();
        assert_eq!(jumps.len(), 3);
        assert!(jumps[0].contains("--probability 0.33333333333"));
        assert!(jumps[1].contains("--probability 0.50000000000"));
        assert!(!jumps[2].contains("statistic"));
        let dnat = rules
            .iter()
            .filter(|r| r.contains("-j DNAT --to-destination"))
            .count();
        assert_eq!(dnat, 3 * n);
        assert!(t.contains(&format!(
            "-A KUBE-SERVICES -d {}/32 -p tcp -m comment --comment \"ns-5/svc-5:http cluster IP\" \
             -m tcp --dport 80 -j {svc}\n",
            cluster_ip(5)
        )));
    }

    #[test]
    fn addresses_stay_in_their_ranges() {
        assert_eq!(cluster_ip(0), "10.96.0.1");
        assert_eq!(cluster_ip(9_999), "10.96.39.16");
        assert_eq!(endpoint_ip(0, 0), "10.128.0.1");
        assert_eq!(endpoint_ip(9_999, 2), "10.128.117.48");
        assert_eq!(ipv4([10, 64, 0, 0], 256), "10.64.1.0");
    }

    #[test]
    fn a_sync_rewrites_one_endpoint_chain() {
        let n = 2_500;
        let table = nat_table(n);
        let mut seen = HashSet::new();
        for k in 0..10 {
            let sync = sync_block(n, k);
            let lines: Vec<&str> = sync.text.lines().collect();
            assert_eq!(lines.len(), 5, "{}", sync.text);
            assert_eq!(lines[0], "*nat");
            assert_eq!(lines[1], format!(":{} - [0:0]", sync.chain));
            assert!(lines[2].starts_with(&format!("-A {} -s 10.64.", sync.chain)));
            assert!(lines[2].ends_with("-j KUBE-MARK-MASQ"));
            assert!(lines[3].starts_with(&format!("-A {} -p tcp ", sync.chain)));
            assert!(lines[3].contains(&format!(
                "-j DNAT --to-destination {}:8080",
                ipv4([10, 64, 0, 0], k + 1)
            )));
            assert_eq!(lines[4], "COMMIT");
            assert!(sync.chain.starts_with("KUBE-SEP-"));
            // A chain of the table, with rules other than the table's.
            assert!(table.contains(&format!(":{} - [0:0]\n", sync.chain)));
            assert!(!table.contains(lines[3]));
            seen.insert(sync.chain);
        }
        assert_eq!(seen.len(), 10, "each sync rewrites another chain");
        assert_eq!(sync_block(1, 4).chain, sep_chain(0, 1));
    }

    #[test]
    fn growth_exponent_tells_table_from_change() {
        let e = growth_exponent(1_000.0, 4_000.0, 10.0, 40.0).unwrap();
        assert!((e - 1.0).abs() < 1e-9);
        assert_eq!(follows(Some(e)), "the table");
        let e = growth_exponent(1_000.0, 4_000.0, 10.0, 10.0).unwrap();
        assert!(e.abs() < 1e-9);
        assert_eq!(follows(Some(e)), "the change");
        let e = growth_exponent(1_000.0, 4_000.0, 10.0, 20.0).unwrap();
        assert!((e - 0.5).abs() < 1e-9);
        assert_eq!(follows(Some(e)), "partly the table");
        assert_eq!(growth_exponent(1_000.0, 4_000.0, 0.0, 20.0), None);
        assert_eq!(growth_exponent(1_000.0, 1_000.0, 1.0, 2.0), None);
        assert_eq!(growth_exponent(1_000.0, 4_000.0, f64::NAN, 2.0), None);
        assert_eq!(follows(None), "not known (a figure is zero or missing)");
    }
}
