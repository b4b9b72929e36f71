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

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{self, Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};
use std::{fmt::Write as _, fs};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::bench_daemon::{
    clock_ticks, cpu_ticks, free_port, http_get, load_batches, rss, TempDir,
};
use crate::cmd;

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

const START: &str = "<!-- soak:start -->";
const END: &str = "<!-- soak:end -->";
/// The load's period: an nft batch, then a legacy batch, each this far apart.
const TICK: Duration = Duration::from_millis(100);
/// A namespace is made, written and deleted this often.
const CHURN_EVERY: Duration = Duration::from_secs(5);
/// Rules of the legacy table besides the churned chain.
const BIG_RULES: usize = 3000;
/// The SSE client holds each connection this long, plus up to 10 s more.
const SSE_HOLD_S: u64 = 20;

// ---------------------------------------------------------------------------------------------
// Signals: Ctrl-C (or SIGTERM, SIGHUP) stops the soak, which then cleans up and says what it saw.

/// Set by SIGINT, SIGTERM or SIGHUP.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

// The C library std already links; no crate needed for three calls.
extern "C" {
    fn signal(signum: i32, handler: usize) -> usize;
    fn kill(pid: i32, sig: i32) -> i32;
    fn prctl(option: i32, ...) -> i32;
}

const SIGHUP: i32 = 1;
const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;
const SIG_DFL: usize = 0;
const PR_SET_PDEATHSIG: i32 = 1;

extern "C" fn on_signal(sig: i32) {
    INTERRUPTED.store(true, Ordering::SeqCst);
    // A second one ends xtask at once (the default action).
    // SAFETY: signal() is async-signal-safe.
    unsafe {
        signal(sig, SIG_DFL);
    }
}

fn catch_signals() {
    for sig in [SIGHUP, SIGINT, SIGTERM] {
        // SAFETY: the handler only stores an atomic and calls signal().
        unsafe {
            signal(sig, on_signal as extern "C" fn(i32) as usize);
        }
    }
}

fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// A command in a process group of its own: a Ctrl-C at the terminal reaches xtask only, which
/// then stops the load and observer in order.
fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.process_group(0);
    c
}

/// Runs it, quietly; fails with its stderr.
fn quiet(c: &mut Command) -> Result<()> {
    let out = c
        .stdout(Stdio::null())
        .output()
        .with_context(|| format!("could not start `{}`", cmd::describe(c)))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            cmd::describe(c),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Namespaces

const NS_PREFIX: &str = "obs-soak-";

/// A namespace of the soak's own, deleted when dropped.
struct Ns(String);

impl Ns {
    fn new(tag: &str) -> Result<Ns> {
        let name = format!("{NS_PREFIX}{}-{tag}", process::id());
        let _ = command("ip").args(["netns", "del", &name]).output();
        quiet(command("ip").args(["netns", "add", &name]))?;
        Ok(Ns(name))
    }

    fn exec(&self, program: &str) -> Command {
        let mut c = command("ip");
        c.args(["netns", "exec", &self.0, program]);
        c
    }

    /// The namespace's inode: the `netns` of its change lines.
    fn inode(&self) -> Result<u64> {
        let p = format!("/run/netns/{}", self.0);
        Ok(fs::metadata(&p).with_context(|| p.clone())?.ino())
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = command("ip").args(["netns", "del", &self.0]).output();
    }
}

// ---------------------------------------------------------------------------------------------
// observer run

/// The running daemon: SIGTERM when dropped, then SIGKILL after 10 s.
struct Daemon {
    child: Option<Child>,
    pid: u32,
    stderr: PathBuf,
}

impl Daemon {
    fn start(bin: &Path, dir: &Path, port: u16) -> Result<(Daemon, ChildStdout)> {
        let stderr = dir.join("observer.stderr");
        let mut c = command(bin);
        c.args(["run", "--listen", &format!("127.0.0.1:{port}"), "--record"])
            .arg(dir.join("record.db"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(&stderr)?);
        // SAFETY: prctl() is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            c.pre_exec(|| {
                // Stopped cleanly if xtask dies without running its clean-up (SIGKILL).
                prctl(PR_SET_PDEATHSIG, SIGTERM as std::ffi::c_ulong);
                Ok(())
            });
        }
        eprintln!("xtask: == {}", cmd::describe(&c));
        let mut child = c.spawn().context("starting observer run")?;
        let out = child.stdout.take().context("observer's stdout")?;
        let pid = child.id();
        Ok((
            Daemon {
                child: Some(child),
                pid,
                stderr,
            },
            out,
        ))
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGTERM (a clean stop: streams end, the record is written), then up to 10 s.
    fn stop(&mut self) -> Result<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            bail!("observer was already stopped");
        };
        if child.try_wait()?.is_none() {
            // SAFETY: kill() of our own child, not yet reaped, so the pid is still its own.
            unsafe {
                kill(child.id() as i32, SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(s) = child.try_wait()? {
                return Ok(s);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("observer did not exit within 10 s of SIGTERM; killed it");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn stderr_tail(&self, n: usize) -> Vec<String> {
        let text = fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        lines[lines.len().saturating_sub(n)..].to_vec()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.stop();
        }
    }
}

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

/// The number after `"key":` in a JSON line (no full parse: 1,000 lines a second).
fn number_after(line: &str, key: &str) -> Option<u64> {
    let at = line.find(key)? + key.len();
    let digits: &str = &line[at..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

fn read_stdout(out: ChildStdout, sh: &Shared) {
    let mut r = BufReader::with_capacity(1 << 16, out);
    let mut line = Vec::new();
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        let l = String::from_utf8_lossy(&line);
        if l.starts_with(r#"{"kind":"change""#) {
            sh.changes.fetch_add(1, Ordering::Relaxed);
            if let Some(seq) = number_after(&l, r#""seq":"#) {
                let last = sh.last_seq.swap(seq, Ordering::Relaxed);
                if seq != last + 1 {
                    sh.stdout_seq_jumps.fetch_add(1, Ordering::Relaxed);
                }
            }
            let netns = number_after(&l, r#""netns":"#);
            let ino = sh.churn_ino.load(Ordering::Relaxed);
            if ino != 0 && netns == Some(ino) {
                if l.contains(r#""backend":"legacy""#) {
                    sh.churn_legacy.fetch_add(1, Ordering::Relaxed);
                } else if l.contains(r#""backend":"nft""#) {
                    sh.churn_nft.fetch_add(1, Ordering::Relaxed);
                }
            } else if !sh
                .load_inos
                .iter()
                .any(|i| netns == Some(i.load(Ordering::Relaxed)))
            {
                sh.other_changes.fetch_add(1, Ordering::Relaxed);
            }
        } else if l.starts_with(r#"{"kind":"status","state":"ready""#) {
            sh.ready.store(true, Ordering::SeqCst);
        } else if l.starts_with(r#"{"kind":"status","state":"gap""#) {
            sh.gap_lines.fetch_add(1, Ordering::Relaxed);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Load

/// The legacy namespace's table: chain OBSBIG of [`BIG_RULES`] rules, and chain OBSCH rewritten
/// by the load. Returns the two restore files the load alternates.
fn legacy_setup(ns: &Ns, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut big = String::from("*filter\n:OBSBIG - [0:0]\n:OBSCH - [0:0]\n");
    for i in 0..BIG_RULES {
        let _ = writeln!(
            big,
            "-A OBSBIG -s 10.{}.{}.1/32 -p tcp --dport {} -j ACCEPT",
            i / 250,
            i % 250,
            i + 1
        );
    }
    big.push_str("COMMIT\n");
    let file = dir.join("legacy-big.rules");
    fs::write(&file, big)?;
    quiet(
        ns.exec("iptables-legacy-restore")
            .args(["--noflush", "--wait=5"])
            .stdin(fs::File::open(&file)?),
    )?;
    let mut batches = Vec::new();
    for (k, base) in [(0, 1000), (1, 2000)] {
        // With --noflush, declaring an existing user chain flushes it.
        let mut b = String::from("*filter\n:OBSCH - [0:0]\n");
        for i in 0..99 {
            let _ = writeln!(b, "-A OBSCH -p tcp --dport {} -j ACCEPT", base + i);
        }
        b.push_str("COMMIT\n");
        let file = dir.join(format!("legacy{k}.rules"));
        fs::write(&file, b)?;
        batches.push(file);
    }
    Ok(batches)
}

/// Every [`TICK`], alternately, one nft batch and one legacy batch, until told to stop.
fn load(sh: &Shared, nft_ns: &Ns, nft: &[PathBuf], legacy_ns: &Ns, legacy: &[PathBuf]) {
    let mut next = Instant::now();
    let mut round = 0usize;
    while !sh.stop_load.load(Ordering::Relaxed) && !interrupted() {
        let k = (round / 2) % 2;
        let r = if round.is_multiple_of(2) {
            sh.nft_batches.fetch_add(1, Ordering::Relaxed);
            quiet(nft_ns.exec("nft").arg("-f").arg(&nft[k]))
        } else {
            sh.legacy_batches.fetch_add(1, Ordering::Relaxed);
            fs::File::open(&legacy[k])
                .map_err(anyhow::Error::from)
                .and_then(|f| {
                    quiet(
                        legacy_ns
                            .exec("iptables-legacy-restore")
                            .args(["--noflush", "--wait=5"])
                            .stdin(f),
                    )
                })
        };
        if let Err(e) = r {
            sh.fail(format!("load batch failed: {e:#}"));
        }
        round += 1;
        next += TICK;
        let now = Instant::now();
        match next.checked_duration_since(now) {
            Some(wait) => thread::sleep(wait),
            // More than a second behind (the machine was busy): go on from now, no burst.
            None if now - next > Duration::from_secs(1) => next = now,
            None => {}
        }
    }
}

/// Every [`CHURN_EVERY`]: a namespace made, written (nft and legacy), and deleted once its
/// changes were streamed (or after 3 s).
fn churn(sh: &Shared, dir: &Path) {
    let nft_file = dir.join("churn.nft");
    let body = "add table ip obschurn\nadd chain ip obschurn c\n\
                add rule ip obschurn c tcp dport 22 accept\nadd rule ip obschurn c tcp dport 23 accept\n";
    if let Err(e) = fs::write(&nft_file, body) {
        sh.fail(format!("writing {}: {e}", nft_file.display()));
        return;
    }
    // table_create, chain_create, 2 rule_add; and for the first legacy replace of a new
    // namespace the whole table: table_create, 3 builtin chain_create, 1 rule_add.
    let (want_nft, want_legacy) = (4, 5);
    let mut n = 0u64;
    let mut next = Instant::now() + CHURN_EVERY;
    while !sh.stop_load.load(Ordering::Relaxed) && !interrupted() {
        n += 1;
        {
            let _quiet = sh.churn_quiet.lock();
            let r = (|| -> Result<()> {
                let ns = Ns::new(&format!("c{n}"))?;
                sh.churn_nft.store(0, Ordering::SeqCst);
                sh.churn_legacy.store(0, Ordering::SeqCst);
                sh.churn_ino.store(ns.inode()?, Ordering::SeqCst);
                sh.churn_made.fetch_add(1, Ordering::Relaxed);
                quiet(ns.exec("nft").arg("-f").arg(&nft_file))?;
                quiet(ns.exec("iptables-legacy").args([
                    "-w",
                    "5",
                    "-A",
                    "INPUT",
                    "-s",
                    "10.9.9.9/32",
                    "-j",
                    "DROP",
                ]))?;
                let deadline = Instant::now() + Duration::from_secs(3);
                while Instant::now() < deadline
                    && (sh.churn_nft.load(Ordering::SeqCst) < want_nft
                        || sh.churn_legacy.load(Ordering::SeqCst) < want_legacy)
                {
                    thread::sleep(Duration::from_millis(20));
                }
                if sh.churn_nft.load(Ordering::SeqCst) >= want_nft
                    && sh.churn_legacy.load(Ordering::SeqCst) >= want_legacy
                {
                    sh.churn_complete.fetch_add(1, Ordering::Relaxed);
                }
                sh.churn_ino.store(0, Ordering::SeqCst);
                Ok(())
                // `ns` is deleted here.
            })();
            if let Err(e) = r {
                sh.churn_ino.store(0, Ordering::SeqCst);
                sh.fail(format!("namespace churn failed: {e:#}"));
            }
        }
        while Instant::now() < next {
            if sh.stop_load.load(Ordering::Relaxed) || interrupted() {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
        next += CHURN_EVERY;
    }
}

// ---------------------------------------------------------------------------------------------
// SSE client

/// Follows `/events` from the start (`?after=0`), drops the connection every 20 to 30 s and
/// resumes after the last `seq` it saw, alternately with `Last-Event-ID` and `?after=`.
fn sse(sh: &Shared, port: u16) {
    let st = &sh.sse;
    let mut rng = time::OffsetDateTime::now_utc().unix_timestamp_nanos() as u64 | 1;
    let mut by_header = false;
    while !sh.stop_sse.load(Ordering::Relaxed) {
        let last = st.last.load(Ordering::SeqCst);
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let hold = Duration::from_secs(SSE_HOLD_S) + Duration::from_millis(rng % 10_000);
        let request = if by_header {
            format!("GET /events HTTP/1.0\r\nHost: 127.0.0.1\r\nLast-Event-ID: {last}\r\n\r\n")
        } else {
            format!("GET /events?after={last} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        };
        by_header = !by_header;
        if let Err(e) = sse_connection(sh, port, &request, hold) {
            st.errors.fetch_add(1, Ordering::Relaxed);
            eprintln!("xtask: soak: SSE client: {e:#}; reconnecting in 1 s");
            thread::sleep(Duration::from_secs(1));
        }
    }
}

/// One connection, held for `hold` (or until told to stop). Errors when it could not be made or
/// the server ended it.
fn sse_connection(sh: &Shared, port: u16, request: &str, hold: Duration) -> Result<()> {
    let st = &sh.sse;
    let mut s = TcpStream::connect(("127.0.0.1", port)).context("connecting")?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    s.write_all(request.as_bytes())?;
    st.connections.fetch_add(1, Ordering::Relaxed);
    let until = Instant::now() + hold;
    let mut r = BufReader::with_capacity(1 << 16, s);
    let mut line = Vec::new();
    let mut in_headers = true;
    let mut id: Option<u64> = None;
    let mut data_seq: Option<u64> = None;
    loop {
        if Instant::now() >= until || sh.stop_sse.load(Ordering::Relaxed) {
            return Ok(());
        }
        // A read timeout leaves the part of a line read so far in `line`; the next read goes on.
        match r.read_until(b'\n', &mut line) {
            Ok(0) => bail!("the server ended the stream"),
            Ok(_) if !line.ends_with(b"\n") => bail!("the server ended the stream mid-line"),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return Err(e).context("reading the stream"),
        }
        let text = String::from_utf8_lossy(&line);
        let l = text.trim_end_matches(['\n', '\r']);
        if in_headers {
            if l.starts_with("HTTP/") && !l.contains(" 200 ") {
                bail!("/events answered `{l}`");
            }
            in_headers = !l.is_empty();
        } else if let Some(v) = l.strip_prefix("id:") {
            id = v.trim().parse().ok();
        } else if let Some(v) = l.strip_prefix("data:") {
            data_seq = number_after(v, r#""seq":"#);
        } else if l.is_empty() {
            // The end of an event; status lines come without an id.
            if let Some(seq) = id.take() {
                if data_seq != Some(seq) {
                    st.mismatched.fetch_add(1, Ordering::Relaxed);
                }
                st.events.fetch_add(1, Ordering::Relaxed);
                let last = st.last.load(Ordering::SeqCst);
                if seq <= last {
                    st.duplicates.fetch_add(1, Ordering::Relaxed);
                } else {
                    st.gaps.fetch_add(seq - last - 1, Ordering::Relaxed);
                    st.last.store(seq, Ordering::SeqCst);
                }
            }
            data_seq = None;
        }
        line.clear();
    }
}

// ---------------------------------------------------------------------------------------------
// Samples

/// One minute's line.
#[derive(Clone)]
struct Row {
    minute: u64,
    rss_mib: f64,
    fds: usize,
    cpu_pct: f64,
    record_mib: f64,
    dropped: u64,
    failed: u64,
    gaps: u64,
    lost: u64,
    rate: f64,
    /// Of `rate`, the changes of namespaces not the soak's.
    other_rate: f64,
    sse_gaps: u64,
    sse_dups: u64,
}

/// Counters of one scrape of `/metrics`.
#[derive(Default, Clone, Copy)]
struct Scrape {
    dropped: u64,
    failed: u64,
    expired: u64,
    written: u64,
    gaps: u64,
    lost: u64,
    /// `observer_changes_total` of each backend.
    nft: u64,
    legacy: u64,
}

/// The sum of every series of `name` (with its labels when given in `name`).
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The sum of the series whose name and first labels are `prefix`.
fn labelled(text: &str, prefix: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn scrape(port: u16) -> Option<Scrape> {
    let text = http_get(port, "/metrics").ok()?;
    if !text.contains("observer_ready") {
        return None;
    }
    let rows = |o: &str| {
        metric(
            &text,
            &format!("observer_record_rows_total{{outcome=\"{o}\"}}"),
        )
    };
    Some(Scrape {
        dropped: rows("dropped"),
        failed: rows("failed"),
        expired: rows("expired"),
        written: rows("written"),
        gaps: metric(&text, "observer_gaps_total"),
        lost: metric(&text, "observer_kernel_records_lost_total"),
        nft: labelled(&text, "observer_changes_total{backend=\"nft\""),
        legacy: labelled(&text, "observer_changes_total{backend=\"legacy\""),
    })
}

/// What each open descriptor is (digits of `socket:[123]` dropped), and how many of each.
fn fd_kinds(pid: u32) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for e in fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let target = fs::read_link(e.path())
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "?".into());
        let kind = match target.find('[') {
            Some(i) if target.ends_with(']') => format!("{}[]", &target[..i]),
            _ => target,
        };
        *kinds.entry(kind).or_insert(0) += 1;
    }
    kinds
}

/// Descriptors open at a quiet moment: no churn namespace alive (the lock), and the least of a
/// few reads (an SSE reconnection or a scrape holds one more for a moment).
fn quiet_fds(sh: &Shared, pid: u32, reads: usize) -> (usize, BTreeMap<String, usize>) {
    let _quiet = sh.churn_quiet.lock();
    thread::sleep(Duration::from_millis(300));
    let mut best = (usize::MAX, BTreeMap::new());
    for i in 0..reads {
        if i > 0 {
            thread::sleep(Duration::from_millis(100));
        }
        let k = fd_kinds(pid);
        let n = k.values().sum();
        if n < best.0 {
            best = (n, k);
        }
    }
    best
}

fn record_mib(dir: &Path) -> f64 {
    let size = |name: &str| fs::metadata(dir.join(name)).map_or(0, |m| m.len());
    (size("record.db") + size("record.db-wal")) as f64 / (1024.0 * 1024.0)
}

const MIB: f64 = 1024.0 * 1024.0;

fn print_header() {
    println!(
        "soak: {:>6} {:>8} {:>5} {:>6} {:>10} {:>14} {:>5} {:>5} {:>9} {:>8} {:>10}",
        "minute",
        "RSS MiB",
        "fds",
        "CPU %",
        "record MiB",
        "dropped/failed",
        "gaps",
        "lost",
        "changes/s",
        "other/s",
        "SSE gap/dup"
    );
}

fn print_row(r: &Row) {
    println!(
        "soak: {:>6} {:>8.1} {:>5} {:>6.1} {:>10.1} {:>14} {:>5} {:>5} {:>9.0} {:>8.0} {:>10}",
        r.minute,
        r.rss_mib,
        r.fds,
        r.cpu_pct,
        r.record_mib,
        format!("{}/{}", r.dropped, r.failed),
        r.gaps,
        r.lost,
        r.rate,
        r.other_rate,
        format!("{}/{}", r.sse_gaps, r.sse_dups),
    );
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
    super::build()?;
    if interrupted() {
        bail!("interrupted");
    }
    let dir = TempDir::new()?;
    // A copy: a rebuild of target/release/observer during a long run cannot touch it.
    let built = super::target_dir()?.join("release").join("observer");
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
        let sh = &sh;
        s.spawn(move || read_stdout(stdout, sh));
        let pid = daemon.pid;
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
        s.spawn(move || sse(sh, port));
        thread::sleep(Duration::from_secs(2));

        let clk = clock_ticks();
        let t0 = Instant::now();
        let (mut prev_t, mut prev_cpu, mut prev_changes, mut prev_other) = (
            t0,
            cpu_ticks(pid),
            sh.changes.load(Ordering::Relaxed),
            sh.other_changes.load(Ordering::Relaxed),
        );
        let (cpu_start, changes_start) = (prev_cpu, prev_changes);
        let (nft, legacy, nft_b, legacy_b) = (&nft_ns, &legacy_ns, &nft_batches, &legacy_batches);
        let load_thread = s.spawn(move || load(sh, nft, nft_b, legacy, legacy_b));
        let dir_path = dir.path();
        let churn_thread = s.spawn(move || churn(sh, dir_path));
        eprintln!(
            "xtask: == soak: {minutes} minutes of load (nft and iptables-legacy, namespace churn, \
             an SSE client); one line a minute. Ctrl-C stops it early and cleans up."
        );
        print_header();
        let mut rows: Vec<Row> = Vec::new();
        let mut rss_peak = rss(pid);
        let mut fds_minute1 = BTreeMap::new();
        let mut last = Scrape::default();
        'minutes: for minute in 1..=minutes {
            let at = t0 + Duration::from_secs(60 * minute);
            let mut next_rss = Instant::now();
            while Instant::now() < at {
                if interrupted() {
                    eprintln!(
                        "xtask: soak: interrupted: stopping the load and observer, deleting the \
                         namespaces (Ctrl-C again quits at once and leaves them)"
                    );
                    break 'minutes;
                }
                if let Some(st) = daemon.exited() {
                    bail!(
                        "observer run exited ({st}) in minute {minute}; its stderr ends with:\n{}",
                        daemon.stderr_tail(15).join("\n")
                    );
                }
                if Instant::now() >= next_rss {
                    rss_peak = rss_peak.max(rss(pid));
                    next_rss += Duration::from_secs(1);
                }
                thread::sleep(Duration::from_millis(200));
            }
            let (fds, kinds) = quiet_fds(sh, pid, 3);
            let now = Instant::now();
            let cpu = cpu_ticks(pid);
            let changes = sh.changes.load(Ordering::Relaxed);
            let other = sh.other_changes.load(Ordering::Relaxed);
            let wall = (now - prev_t).as_secs_f64();
            let rss_now = rss(pid);
            rss_peak = rss_peak.max(rss_now);
            last = scrape(port).unwrap_or(last);
            if minute == 1 {
                fds_minute1 = kinds;
            }
            let row = Row {
                minute,
                rss_mib: rss_now as f64 / MIB,
                fds,
                cpu_pct: (cpu - prev_cpu) as f64 / clk / wall * 100.0,
                record_mib: record_mib(dir.path()),
                dropped: last.dropped,
                failed: last.failed,
                gaps: last.gaps,
                lost: last.lost,
                rate: (changes - prev_changes) as f64 / wall,
                other_rate: (other - prev_other) as f64 / wall,
                sse_gaps: sh.sse.gaps.load(Ordering::Relaxed),
                sse_dups: sh.sse.duplicates.load(Ordering::Relaxed),
            };
            print_row(&row);
            rows.push(row);
            (prev_t, prev_cpu, prev_changes, prev_other) = (now, cpu, changes, other);
        }
        sh.stop_load.store(true, Ordering::SeqCst);
        let load_s = t0.elapsed().as_secs_f64();
        let cpu_pct = (cpu_ticks(pid) - cpu_start) as f64 / clk / load_s * 100.0;
        let _ = load_thread.join();
        let _ = churn_thread.join();
        // Everything streamed, and the SSE client caught up with stdout.
        thread::sleep(Duration::from_secs(2));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !interrupted()
            && sh.sse.last.load(Ordering::SeqCst) < sh.last_seq.load(Ordering::SeqCst)
            && Instant::now() < deadline
        {
            thread::sleep(Duration::from_millis(100));
        }
        let (end_fds, fds_end) = quiet_fds(sh, pid, 5);
        let end = scrape(port).unwrap_or(last);
        let record = record_mib(dir.path());
        rss_peak = rss_peak.max(rss(pid));
        sh.stop_sse.store(true, Ordering::SeqCst);
        let exit = match daemon.stop() {
            Ok(st) if st.success() => "0 after SIGTERM".to_owned(),
            Ok(st) => format!("{st} after SIGTERM"),
            Err(e) => format!("{e:#}"),
        };
        let stderr_lines = fs::read_to_string(&daemon.stderr)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        Ok(Outcome {
            rows,
            load_s,
            changes: sh.changes.load(Ordering::Relaxed) - changes_start,
            cpu_pct,
            rss_peak_mib: rss_peak as f64 / MIB,
            end_fds,
            fds_minute1,
            fds_end,
            end,
            record_mib: record,
            stdout_last: sh.last_seq.load(Ordering::SeqCst),
            exit,
            stderr_lines,
            stderr_tail: daemon.stderr_tail(5),
        })
    })?;
    drop(legacy_ns);
    drop(nft_ns);
    report(args, &sh, &outcome)
}

fn mean(rows: &[Row], from: u64, to: u64) -> f64 {
    let v: Vec<f64> = rows
        .iter()
        .filter(|r| (from..=to).contains(&r.minute))
        .map(|r| r.rss_mib)
        .collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// One aim: what, the figure, held or not (`None`: too few minutes to judge).
struct Aim {
    name: &'static str,
    figure: String,
    aim: &'static str,
    held: Option<bool>,
}

fn report(args: &SoakArgs, sh: &Shared, o: &Outcome) -> Result<i32> {
    let done = o.rows.len() as u64;
    let cut_short = interrupted() || done < args.minutes;
    let n = done;
    // Memory: minutes 10-20 against the last 10 for 30 minutes or more; else the middle third
    // against the last.
    let (memory_aim, memory_held) = if n >= 3 {
        let (a, b, c, d, how) = if n >= 30 {
            (10, 20, n - 9, n, "")
        } else {
            let t = n / 3;
            (
                t + 1,
                2 * t,
                2 * t + 1,
                n,
                " (a run under 30 minutes: the middle third against the last)",
            )
        };
        let (base, tail) = (mean(&o.rows, a, b), mean(&o.rows, c, d));
        let growth = (tail / base - 1.0) * 100.0;
        let span = |a: u64, b: u64| {
            if a == b {
                format!("minute {a}")
            } else {
                format!("minutes {a}–{b}")
            }
        };
        let (late, early) = (span(c, d), span(a, b));
        (
            format!(
                "mean RSS of {late} {tail:.1} MiB against {early} {base:.1} MiB: \
                 {growth:+.1} %{how}"
            ),
            Some(growth <= 5.0),
        )
    } else {
        ("fewer than 3 minutes".to_owned(), None)
    };
    let e = o.end;
    let drops = e.dropped + e.failed + e.gaps + e.lost;
    let fds1 = o.rows.first().map_or(0, |r| r.fds);
    let sse = &sh.sse;
    let sse_last = sse.last.load(Ordering::SeqCst);
    // Changes the client never got by the end count as gaps too.
    let sse_gaps = sse.gaps.load(Ordering::Relaxed) + o.stdout_last.saturating_sub(sse_last);
    let sse_dups = sse.duplicates.load(Ordering::Relaxed);
    let sse_mismatched = sse.mismatched.load(Ordering::Relaxed);
    let aims = [
        Aim {
            name: "flat memory",
            figure: memory_aim,
            aim: "no more than 5 % growth",
            held: memory_held,
        },
        Aim {
            name: "nothing dropped or lost",
            figure: format!(
                "record rows dropped {}, failed {}; gaps {}; kernel records lost {}",
                e.dropped, e.failed, e.gaps, e.lost
            ),
            aim: "0",
            held: Some(drops == 0),
        },
        Aim {
            name: "no descriptor growth",
            figure: format!("{} open at the end, {fds1} after minute 1", o.end_fds),
            aim: "no more at the end",
            held: (done >= 1).then_some(o.end_fds <= fds1),
        },
        Aim {
            name: "SSE: every seq exactly once",
            figure: format!(
                "{} events (seq 1–{sse_last}) over {} connections: {sse_gaps} missing, \
                 {sse_dups} twice{}",
                sse.events.load(Ordering::Relaxed),
                sse.connections.load(Ordering::Relaxed),
                if sse_mismatched > 0 {
                    format!(", {sse_mismatched} with an id other than their seq")
                } else {
                    String::new()
                }
            ),
            aim: "0 missing, 0 twice",
            held: Some(sse_gaps == 0 && sse_dups == 0 && sse_mismatched == 0 && sse_last > 0),
        },
    ];
    let mut info = vec![
        format!(
            "load: {:.1} min, {} changes streamed on stdout ({:.0} per second; {} of them from \
             namespaces not the soak's; observer counted {} nft, {} legacy); {} nft and {} legacy \
             batches, {} failed{}",
            o.load_s / 60.0,
            o.changes,
            o.changes as f64 / o.load_s,
            sh.other_changes.load(Ordering::Relaxed),
            e.nft,
            e.legacy,
            sh.nft_batches.load(Ordering::Relaxed),
            sh.legacy_batches.load(Ordering::Relaxed),
            sh.load_failures.load(Ordering::Relaxed),
            sh.first_failure
                .lock()
                .ok()
                .and_then(|f| f.clone())
                .map_or(String::new(), |f| format!(" (first: {f})"))
        ),
        format!(
            "observer: {:.1} % of one core on average, peak RSS {:.1} MiB; record {:.1} MiB \
             (file + WAL) at the end, rows written {}, expired {}",
            o.cpu_pct, o.rss_peak_mib, o.record_mib, e.written, e.expired
        ),
        format!(
            "namespace churn: {} namespaces made, written and deleted; all their changes \
             streamed for {}",
            sh.churn_made.load(Ordering::Relaxed),
            sh.churn_complete.load(Ordering::Relaxed)
        ),
        format!(
            "stdout: last seq {}, {} numbering jumps, {} gap lines; SSE connection errors {}",
            o.stdout_last,
            sh.stdout_seq_jumps.load(Ordering::Relaxed),
            sh.gap_lines.load(Ordering::Relaxed),
            sse.errors.load(Ordering::Relaxed)
        ),
        format!(
            "observer exited with status {}; {} lines on its stderr",
            o.exit, o.stderr_lines
        ),
    ];
    if done >= 1 && o.end_fds > fds1 {
        let mut diff = Vec::new();
        for (k, &v) in &o.fds_end {
            let before = o.fds_minute1.get(k).copied().unwrap_or(0);
            if v > before {
                diff.push(format!("{k} {before} -> {v}"));
            }
        }
        info.push(format!("descriptors that grew: {}", diff.join(", ")));
    }
    println!(
        "soak: summary after {done} of {} minutes{}",
        args.minutes,
        if cut_short { " (cut short)" } else { "" }
    );
    for a in &aims {
        println!(
            "soak: aim {}: {} (aim: {}): {}",
            a.name,
            a.figure,
            a.aim,
            match a.held {
                Some(true) => "held",
                Some(false) => "MISSED",
                None => "not judged",
            }
        );
    }
    for i in &info {
        println!("soak: {i}");
    }
    for l in &o.stderr_tail {
        println!("soak: observer stderr: {l}");
    }
    let all_held = aims.iter().all(|a| a.held == Some(true));

    if cut_short {
        eprintln!("xtask: soak: cut short, so BENCHMARKS.md is left as it is");
        return Ok(130);
    }
    if args.bench {
        let section = section(args, &aims, &info, &o.rows);
        let path = super::root().join("BENCHMARKS.md");
        crate::bench::write_marked(&path, START, END, &section)?;
        eprintln!("xtask: wrote the figures into {}", path.display());
    }
    if !all_held {
        eprintln!("xtask: soak: an aim was missed (above)");
        return Ok(1);
    }
    Ok(0)
}

fn section(args: &SoakArgs, aims: &[Aim], info: &[String], rows: &[Row]) -> String {
    let date =
        cmd::output(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"])).unwrap_or_default();
    let kernel = cmd::output(Command::new("uname").arg("-r")).unwrap_or_default();
    let cpus = thread::available_parallelism().map_or(0, |n| n.get());
    let mut s = format!(
        "{START}\n<!-- Generated by `cargo xtask soak --bench`: edits between these markers are overwritten. -->\n\
        ## Soak: `observer run` for {m} minutes\n\n\
        Run {date}, kernel {kernel}, {cpus} CPUs, `cargo xtask soak --minutes {m} --bench`.\n\n\
        | what | figure | aim | held |\n| --- | --- | --- | --- |\n",
        m = args.minutes,
        date = date.trim(),
        kernel = kernel.trim(),
    );
    for a in aims {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            a.name,
            a.figure,
            a.aim,
            match a.held {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "not judged",
            }
        );
    }
    s.push('\n');
    for i in info {
        let _ = writeln!(s, "- {i}");
    }
    let every = if rows.len() > 20 { 5 } else { 1 };
    let _ = write!(
        s,
        "\n| minute | RSS MiB | open fds | CPU % of one core | record MiB (file + WAL) | record rows dropped / failed | gaps | kernel records lost | changes/s streamed | of which other namespaces | SSE seq missing / twice |\n\
        | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    );
    let line = |s: &mut String, label: String, r: &Row| {
        let _ = writeln!(
            s,
            "| {label} | {:.1} | {} | {:.1} | {:.1} | {} / {} | {} | {} | {:.0} | {:.0} | {} / {} |",
            r.rss_mib,
            r.fds,
            r.cpu_pct,
            r.record_mib,
            r.dropped,
            r.failed,
            r.gaps,
            r.lost,
            r.rate,
            r.other_rate,
            r.sse_gaps,
            r.sse_dups
        );
    };
    for r in rows {
        if every == 1
            || r.minute == 1
            || r.minute.is_multiple_of(every as u64)
            || r.minute == rows.len() as u64
        {
            line(&mut s, r.minute.to_string(), r);
        }
    }
    if every > 1 {
        let pick = |f: fn(f64, f64) -> f64, g: fn(usize, usize) -> usize| Row {
            minute: 0,
            rss_mib: rows.iter().map(|r| r.rss_mib).fold(rows[0].rss_mib, f),
            fds: rows.iter().map(|r| r.fds).fold(rows[0].fds, g),
            cpu_pct: rows.iter().map(|r| r.cpu_pct).fold(rows[0].cpu_pct, f),
            record_mib: rows
                .iter()
                .map(|r| r.record_mib)
                .fold(rows[0].record_mib, f),
            rate: rows.iter().map(|r| r.rate).fold(rows[0].rate, f),
            other_rate: rows
                .iter()
                .map(|r| r.other_rate)
                .fold(rows[0].other_rate, f),
            ..rows[rows.len() - 1].clone()
        };
        let last = &rows[rows.len() - 1];
        let mut min = pick(f64::min, usize::min);
        let mut max = pick(f64::max, usize::max);
        // The counters only grow: their minimum is minute 1's, their maximum the last's.
        (
            min.dropped,
            min.failed,
            min.gaps,
            min.lost,
            min.sse_gaps,
            min.sse_dups,
        ) = (
            rows[0].dropped,
            rows[0].failed,
            rows[0].gaps,
            rows[0].lost,
            rows[0].sse_gaps,
            rows[0].sse_dups,
        );
        (max.dropped, max.failed, max.gaps, max.lost) =
            (last.dropped, last.failed, last.gaps, last.lost);
        line(&mut s, "min".into(), &min);
        line(&mut s, "max".into(), &max);
    }
    let _ = write!(
        s,
        "\nEvery minute is one sample: RSS (`VmRSS`) and open descriptors (the least of 3 reads, \
        taken when no churn namespace exists) at that moment, CPU (user + system) over the minute, \
        the record's file and write-ahead log, the counters of `/metrics` \
        (`observer_record_rows_total{{outcome=\"dropped\"|\"failed\"}}`, `observer_gaps_total`, \
        `observer_kernel_records_lost_total`), change lines read from stdout (and of those, the \
        lines of namespaces not the soak's: observer watches every namespace of the machine, so \
        other work on it shows here, and in RSS and CPU), and the SSE client's count so far.{thin} The load, for the whole run, in namespaces of the soak's own: every \
        100 ms, alternately, one `nft -f` (a chain flush and 99 rule adds, two versions in turn: 99 `rule_replace`) \
        and one `iptables-legacy-restore --noflush` rewriting a 99-rule chain of a filter table of \
        {BIG_RULES} rules more (99 `rule_replace`), about 1,000 changes per second; every 5 s a \
        namespace is made, given an nft table, chain and 2 rules and one `iptables-legacy -A`, and \
        deleted. An SSE client follows `/events` from the start and drops its connection every \
        20 to 30 s, resuming alternately with `Last-Event-ID` and `?after=`. observer runs as a \
        copy of the release binary, with its defaults (`--max-record 512MiB`, `--retain 7d`), \
        stdout read through a pipe; the machine is shared, so CPU figures carry some noise.\n\
        {END}\n",
        thin = if every > 1 {
            " The table shows minute 1, every 5th minute and the last, then the least and the \
              most over all minutes."
        } else {
            ""
        },
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_numbers_and_metrics() {
        let l = r#"{"kind":"change","seq":42,"netns":4026532314,"backend":"nft"}"#;
        assert_eq!(number_after(l, r#""seq":"#), Some(42));
        assert_eq!(number_after(l, r#""netns":"#), Some(4026532314));
        assert_eq!(number_after(l, r#""pid":"#), None);
        let m = "observer_gaps_total{cause=\"ringbuf\"} 1\nobserver_gaps_total{cause=\"netlink\"} 2\n\
                 observer_kernel_records_lost_total 3\nobserver_record_rows_total{outcome=\"dropped\"} 4\n";
        assert_eq!(metric(m, "observer_gaps_total"), 3);
        assert_eq!(metric(m, "observer_kernel_records_lost_total"), 3);
        assert_eq!(
            metric(m, "observer_record_rows_total{outcome=\"dropped\"}"),
            4
        );
        assert_eq!(metric(m, "observer_gaps"), 0);
    }
}
