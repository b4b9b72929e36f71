//! `cargo xtask bench-nats`: what fleet streaming costs, against Debian's nats-server started by
//! the bench in a directory of its own.
//!
//! 1. Latency: 100 single nft changes, 50 ms apart, in a namespace of the bench's own. For each,
//!    the time from the change (its `time`, the kernel's moment) to its line on the daemon's
//!    stdout and to its line in `observer tail --nats` (the fleet view), side by side.
//! 2. Rate and cost: 1,000 changes per second for the load's duration (one `nft -f` of 100
//!    changes every 100 ms), once with `observer run` alone and once with `--nats`: the
//!    daemon's CPU in both, the publish cost per change (the difference), how many changes
//!    reached the fleet tail and how far behind it fell.
//! 3. Burst: one `nft -f` transaction of 20,000 changes (a kube-proxy restore on a big node),
//!    and the time from its start until JetStream has acknowledged all 20,000 (the daemon's
//!    `observer_nats_published_total`), on loopback and behind a delaying TCP proxy of 5 and
//!    20 ms round trip (this kernel has no netem), with `--nats-window 1` (one message per
//!    round trip) and the default window, side by side.

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::Value;

use crate::bench::harness::{
    clock_ticks, cpu_ticks, free_port, http_get, load_batches, Kill, Netns, TempDir,
};
use crate::cmd;

#[derive(Args)]
pub struct BenchNatsArgs {
    /// A 10 s load instead of 30 s: quicker, noisier
    #[arg(long)]
    quick: bool,
    /// Print the figures only; leave BENCHMARKS.md as it is
    #[arg(long)]
    no_write: bool,
}

const START: &str = "<!-- bench-nats:start -->";
const END: &str = "<!-- bench-nats:end -->";

/// The change lines of a process's stdout: how many, and each one's lag behind its `time`.
#[derive(Default)]
struct Lines {
    lags_ms: Vec<f64>,
    ready: bool,
}

fn read_lines(child: &mut Child) -> Result<Arc<Mutex<Lines>>> {
    let out = child.stdout.take().context("stdout")?;
    let lines = Arc::new(Mutex::new(Lines::default()));
    let shared = lines.clone();
    thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let now = time::OffsetDateTime::now_utc();
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let Ok(mut l) = shared.lock() else { break };
            match v["kind"].as_str() {
                Some("status") if v["state"] == "ready" => l.ready = true,
                Some("change") => {
                    let at = v["time"].as_str().and_then(|t| {
                        time::OffsetDateTime::parse(
                            t,
                            &time::format_description::well_known::Rfc3339,
                        )
                        .ok()
                    });
                    if let Some(at) = at {
                        l.lags_ms.push((now - at).as_seconds_f64() * 1e3);
                    }
                }
                _ => {}
            }
        }
    });
    Ok(lines)
}

fn wait_ready(lines: &Arc<Mutex<Lines>>, what: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !lines.lock().map(|l| l.ready).unwrap_or(false) {
        if Instant::now() > deadline {
            bail!("{what} printed no ready line within 60 s");
        }
        thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn count(lines: &Arc<Mutex<Lines>>) -> usize {
    lines.lock().map(|l| l.lags_ms.len()).unwrap_or(0)
}

/// Wait until `fleet` has as many change lines as `daemon` (or 30 s pass).
fn wait_caught_up(daemon: &Arc<Mutex<Lines>>, fleet: &Arc<Mutex<Lines>>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(fleet) < count(daemon) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(100));
    }
}

fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() - 1) as f64 * p).round() as usize]
}

/// One `observer run` (with `--nats URL` when given) and, with NATS, a fleet tail.
struct Session {
    daemon: Kill,
    daemon_lines: Arc<Mutex<Lines>>,
    _fleet: Option<Kill>,
    fleet_lines: Option<Arc<Mutex<Lines>>>,
}

impl Session {
    fn start(bin: &Path, dir: &Path, name: &str, nats: Option<&str>) -> Result<Session> {
        let mut c = Command::new(bin);
        c.args(["run", "--listen", &format!("127.0.0.1:{}", free_port()?)])
            .arg("--record")
            .arg(dir.join(format!("{name}.db")));
        if let Some(url) = nats {
            c.args(["--nats", url, "--node", name]);
        }
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting observer run")?;
        let daemon_lines = read_lines(&mut child)?;
        let daemon = Kill(child);
        wait_ready(&daemon_lines, "observer run")?;
        let (fleet, fleet_lines) = match nats {
            Some(url) => {
                // The stream exists once the daemon has connected.
                thread::sleep(Duration::from_secs(1));
                let mut child = Command::new(bin)
                    .args(["tail", "--json", "--nats", url, "--node", name])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .context("starting observer tail --nats")?;
                let lines = read_lines(&mut child)?;
                let k = Kill(child);
                wait_ready(&lines, "observer tail --nats")?;
                (Some(k), Some(lines))
            }
            None => (None, None),
        };
        thread::sleep(Duration::from_secs(1));
        Ok(Session {
            daemon,
            daemon_lines,
            _fleet: fleet,
            fleet_lines,
        })
    }

    fn pid(&self) -> u32 {
        self.daemon.0.id()
    }
}

/// 1,000 changes per second for `secs`; returns (changes the daemon printed, its CPU seconds,
/// wall seconds).
fn load(ns: &Netns, dir: &Path, s: &Session, secs: u64) -> Result<(usize, f64, f64)> {
    ns.nft(&["add table ip obsload; add chain ip obsload c"])?;
    let batches = load_batches(dir)?;
    let c0 = count(&s.daemon_lines);
    let cpu0 = cpu_ticks(s.pid());
    let t0 = Instant::now();
    let mut next = t0;
    let mut round = 0;
    while t0.elapsed() < Duration::from_secs(secs) {
        ns.nft(&["-f", batches[round % 2].to_str().unwrap_or_default()])?;
        round += 1;
        next += Duration::from_millis(100);
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
    }
    thread::sleep(Duration::from_millis(500));
    let wall = t0.elapsed().as_secs_f64();
    let cpu = (cpu_ticks(s.pid()) - cpu0) as f64 / clock_ticks();
    ns.nft(&["delete table ip obsload"])?;
    Ok((count(&s.daemon_lines) - c0, cpu, wall))
}

/// Changes in the burst: one kube-proxy restore on a big node.
const BURST: u64 = 20_000;
/// The window `observer run` uses unless told otherwise.
const DEFAULT_WINDOW: u32 = 256;

/// A TCP proxy on loopback to `upstream` that holds every chunk `one_way` before passing it
/// on, in each direction (a link of twice that round trip, without a bandwidth limit); returns
/// its port. Its threads live until the bench exits.
fn delay_proxy(upstream: u16, one_way: Duration) -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            if let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) {
                delay_line(client, s2, one_way);
                delay_line(server, c2, one_way);
            }
        }
    });
    Ok(port)
}

/// Copy `from` to `to`, each chunk written `delay` after it was read, in order.
fn delay_line(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf) {
            if tx
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
            {
                break;
            }
        }
    });
    thread::spawn(move || {
        for (due, chunk) in rx {
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                thread::sleep(wait);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

/// `observer_nats_published_total{kind="change"}` of the daemon listening on `port`.
fn published_changes(port: u16) -> Option<u64> {
    let text = http_get(port, "/metrics").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("observer_nats_published_total{kind=\"change\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// One burst through `url`: the seconds until JetStream acknowledged all of it, or how many
/// it had acknowledged when `cap` ran out.
struct Burst {
    acked: u64,
    secs: f64,
}

fn burst(bin: &Path, dir: &Path, ns: &Netns, url: &str, window: u32, tag: &str) -> Result<Burst> {
    let port = free_port()?;
    let node = format!("burst-{tag}-w{window}");
    let mut child = Command::new(bin)
        .args(["run", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--record")
        .arg(dir.join(format!("{node}.db")))
        .args(["--nats", url, "--node", &node])
        .args(["--nats-window", &window.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting observer run")?;
    let lines = read_lines(&mut child)?;
    let _daemon = Kill(child);
    wait_ready(&lines, "observer run")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    // The counter has no line before the first publish: none counts as 0.
    let before = loop {
        if http_get(port, "/metrics")
            .is_ok_and(|t| t.lines().any(|l| l.trim() == "observer_nats_connected 1"))
        {
            break published_changes(port).unwrap_or(0);
        }
        if Instant::now() > deadline {
            bail!("observer run did not connect to NATS through {url} within 30 s");
        }
        thread::sleep(Duration::from_millis(100));
    };
    let table = format!("burst_{}", tag.replace('-', "_"));
    let mut batch = format!("add table ip {table}\nadd chain ip {table} c\n");
    for i in 0..BURST - 2 {
        batch.push_str(&format!(
            "add rule ip {table} c tcp dport {} accept\n",
            1 + i % 65_000
        ));
    }
    let file = dir.join(format!("{node}.nft"));
    std::fs::write(&file, batch)?;
    // One message per round trip would take minutes behind a slow link: stop at the cap and
    // report how many made it.
    let cap = if window == 1 {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(120)
    };
    let t0 = Instant::now();
    ns.nft(&["-f", file.to_str().unwrap_or_default()])?;
    let mut acked = 0;
    while t0.elapsed() < cap {
        acked = published_changes(port)
            .unwrap_or(before)
            .saturating_sub(before);
        if acked >= BURST {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let secs = t0.elapsed().as_secs_f64();
    ns.nft(&["delete", "table", "ip", &table])?;
    Ok(Burst { acked, secs })
}

/// How a burst went, for the table: the time, or how many of the burst were in after the cap.
fn burst_cell(b: &Burst) -> String {
    if b.acked >= BURST {
        format!("{:.1} s", b.secs)
    } else {
        format!(
            "{} of {} after {:.0} s ({:.0}/s)",
            b.acked,
            BURST,
            b.secs,
            b.acked as f64 / b.secs
        )
    }
}

pub fn run(args: &BenchNatsArgs) -> Result<i32> {
    if !cmd::is_root() {
        bail!("bench-nats needs root: observer run loads eBPF programs and the load runs nft in a network namespace");
    }
    for tool in ["ip", "nft", "nats-server"] {
        if cmd::which(tool).is_none() {
            bail!("`{tool}` was not found; `cargo xtask setup` installs it");
        }
    }
    crate::build()?;
    let bin = crate::target_dir()?.join("release").join("observer");
    let dir = TempDir::new()?;
    let secs: u64 = if args.quick { 10 } else { 30 };
    let (_server, port) = nats_server(dir.path())?;
    let url = format!("nats://127.0.0.1:{port}");
    let ns = Netns::new("benchnats")?;

    let latency = cmd::phase("bench-nats: 1. latency of 100 single changes", || {
        latency(&bin, dir.path(), &ns, &url)
    })?;
    let plain = cmd::phase(
        "bench-nats: 2a. observer run alone at 1,000 changes/s",
        || {
            let s = Session::start(&bin, dir.path(), "plain", None)?;
            load(&ns, dir.path(), &s, secs)
        },
    )?;
    let (published, (fleet, printed)) = cmd::phase(
        "bench-nats: 2b. observer run --nats at 1,000 changes/s",
        || {
            let s = Session::start(&bin, dir.path(), "published", Some(&url))?;
            let r = load(&ns, dir.path(), &s, secs)?;
            let fleet = s.fleet_lines.clone().context("fleet tail")?;
            wait_caught_up(&s.daemon_lines, &fleet);
            let lags = fleet.lock().map(|l| l.lags_ms.clone()).unwrap_or_default();
            Ok((r, (lags, count(&s.daemon_lines))))
        },
    )?;
    let bursts = bursts(&bin, dir.path(), &ns, &url, port)?;
    let figures = Figures {
        latency,
        plain,
        published,
        fleet,
        printed,
        bursts,
    };
    let section = section(args, secs, &figures);
    print!("{section}");
    if !args.no_write {
        let path = crate::bench::write_benchmarks(START, END, &section)?;
        eprintln!("xtask: wrote the figures into {}", path.display());
    }
    Ok(0)
}

/// Starts nats-server with JetStream (its store in `dir`) on a free loopback port and waits
/// until it listens; the server is stopped when the returned [`Kill`] is dropped.
fn nats_server(dir: &Path) -> Result<(Kill, u16)> {
    let port = free_port()?;
    let server = Kill(
        Command::new("nats-server")
            .args([
                "--jetstream",
                "--addr",
                "127.0.0.1",
                "--port",
                &port.to_string(),
            ])
            .arg("--store_dir")
            .arg(dir.join("jetstream"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting nats-server")?,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("nats-server did not listen within 30 s");
        }
        thread::sleep(Duration::from_millis(100));
    }
    Ok((server, port))
}

/// Part 1: 100 single nft changes, 50 ms apart; each one's lag behind its `time` on the
/// daemon's stdout and in the fleet tail.
fn latency(bin: &Path, dir: &Path, ns: &Netns, url: &str) -> Result<(Vec<f64>, Vec<f64>)> {
    let s = Session::start(bin, dir, "latency", Some(url))?;
    for i in 0..100 {
        ns.nft(&["add", "table", "inet", &format!("lat{i}")])?;
        thread::sleep(Duration::from_millis(50));
    }
    let fleet = s.fleet_lines.clone().context("fleet tail")?;
    wait_caught_up(&s.daemon_lines, &fleet);
    let d = s
        .daemon_lines
        .lock()
        .map(|l| l.lags_ms.clone())
        .unwrap_or_default();
    let f = fleet.lock().map(|l| l.lags_ms.clone()).unwrap_or_default();
    for i in 0..100 {
        ns.nft(&["delete", "table", "inet", &format!("lat{i}")])?;
    }
    Ok((d, f))
}

/// Part 3: a burst of [`BURST`] changes through each link (loopback, then behind a delaying
/// proxy to `port`) with `--nats-window` 1 and the default; one table row per link.
fn bursts(bin: &Path, dir: &Path, ns: &Netns, url: &str, port: u16) -> Result<Vec<String>> {
    let mut bursts = Vec::new();
    for (rtt_ms, tag) in [(0u64, "loopback"), (5, "rtt5"), (20, "rtt20")] {
        let via = if rtt_ms == 0 {
            url.to_owned()
        } else {
            let p = delay_proxy(port, Duration::from_micros(rtt_ms * 500))?;
            format!("nats://127.0.0.1:{p}")
        };
        let mut row = Vec::new();
        for window in [1, DEFAULT_WINDOW] {
            let b = cmd::phase(
                &format!(
                    "bench-nats: 3. a burst of {BURST} changes, {tag}, --nats-window {window}"
                ),
                || burst(bin, dir, ns, &via, window, tag),
            )?;
            row.push(burst_cell(&b));
        }
        let link = if rtt_ms == 0 {
            "loopback".to_string()
        } else {
            format!("{rtt_ms} ms round trip (delaying proxy)")
        };
        let aim = if rtt_ms == 20 { "≤ 4 s" } else { "≤ 2 s" };
        bursts.push(format!("| {link} | {} | {} | {aim} |", row[0], row[1]));
    }
    Ok(bursts)
}

/// What the parts measured, for the section.
struct Figures {
    /// Part 1: the lags on the daemon's stdout and in the fleet tail.
    latency: (Vec<f64>, Vec<f64>),
    /// Part 2, alone and with `--nats`: changes the daemon printed, its CPU seconds, wall
    /// seconds.
    plain: (usize, f64, f64),
    published: (usize, f64, f64),
    /// Part 2 with `--nats`: the fleet tail's lags, and the change lines the daemon printed.
    fleet: Vec<f64>,
    printed: usize,
    /// Part 3's table rows.
    bursts: Vec<String>,
}

/// The section of BENCHMARKS.md, between the bench-nats markers.
fn section(args: &BenchNatsArgs, secs: u64, f: &Figures) -> String {
    let Figures {
        latency,
        plain,
        published,
        fleet,
        printed,
        bursts,
    } = f;
    let date =
        cmd::output(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"])).unwrap_or_default();
    let server = cmd::output(Command::new("nats-server").arg("--version")).unwrap_or_default();
    let cpus = thread::available_parallelism().map_or(0, |n| n.get());
    let (n_plain, cpu_plain, wall_plain) = *plain;
    let (n_pub, cpu_pub, wall_pub) = *published;
    let alone_us = cpu_plain / n_plain.max(1) as f64 * 1e6;
    let cost_us = cpu_pub / n_pub.max(1) as f64 * 1e6 - alone_us;
    // The machine's speed, to compare runs on different machines: what one change costs the
    // daemon alone.
    let share = cost_us / alone_us.max(f64::MIN_POSITIVE);
    let ms = |v: &[f64], p: f64| percentile(v, p);
    format!(
        "{START}\n<!-- Generated by `cargo xtask bench-nats`: edits between these markers are overwritten. -->\n\
        Run {date}, {server}, {cpus} CPUs, `cargo xtask bench-nats{quick}`; the server, the daemon \
        and the fleet tail on the same machine.\n\n\
        | figure | observer run alone | observer run --nats | aim |\n| --- | --- | --- | --- |\n\
        | latency, change to line (p50 / p99 / max of {nd} single changes): daemon stdout vs fleet tail | {d50:.1} / {d99:.1} / {dmax:.1} ms | {f50:.1} / {f99:.1} / {fmax:.1} ms | |\n\
        | changes per second held for {secs} s | {r_plain:.0} | {r_pub:.0} | 1,000 |\n\
        | daemon CPU during the load (user + system) | {cpu_p:.1} % of one core | {cpu_n:.1} % of one core | |\n\
        | daemon CPU per change | {alone_us:.1} µs | {with_us:.1} µs | |\n\
        | publish cost (CPU per change, --nats minus alone; its share of the cost alone) | | {cost_us:.1} µs ({share:.2}×) | ≤ 20 µs |\n\
        | changes that reached the fleet tail (of those the daemon printed) | | {got} of {printed} | all |\n\
        | fleet tail behind the change during the load (p50 / p99 / max) | | {l50:.0} / {l99:.0} / {lmax:.0} ms | p99 ≤ 50 ms |\n\n\
        A burst of {BURST} changes in one nft transaction, from the transaction's start until \
        JetStream acknowledged the last of them (the record's write included):\n\n\
        | link to the server | --nats-window 1 (one message per round trip) | --nats-window {DEFAULT_WINDOW} (the default) | aim |\n| --- | --- | --- | --- |\n\
        {bursts}\n\n\
        The publisher keeps up to --nats-window messages in flight and moves on over those \
        acknowledged in order; each session starts by reconciling the stream's last messages of \
        this node with the record (see docs/fleet.md). Parts 1 and 2 run with the \
        default window. The fleet tail's latency includes the record (the publisher reads the \
        rows the record writer has just committed), the acknowledged publish and the server's \
        delivery to the tail.\n\
        {END}\n",
        date = date.trim(),
        server = server.trim(),
        quick = if args.quick { " --quick" } else { "" },
        nd = latency.0.len(),
        d50 = ms(&latency.0, 0.5),
        d99 = ms(&latency.0, 0.99),
        dmax = ms(&latency.0, 1.0),
        f50 = ms(&latency.1, 0.5),
        f99 = ms(&latency.1, 0.99),
        fmax = ms(&latency.1, 1.0),
        r_plain = n_plain as f64 / wall_plain,
        r_pub = n_pub as f64 / wall_pub,
        cpu_p = cpu_plain / wall_plain * 100.0,
        cpu_n = cpu_pub / wall_pub * 100.0,
        with_us = alone_us + cost_us,
        got = fleet.len(),
        l50 = ms(fleet, 0.5),
        l99 = ms(fleet, 0.99),
        lmax = ms(fleet, 1.0),
        bursts = bursts.join("\n"),
    )
}
