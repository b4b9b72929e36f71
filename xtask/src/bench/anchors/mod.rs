//! Part 6 of `cargo xtask bench`: observer beside the tools already on a node, on the same
//! changes, in one run.
//!
//! - nftables: `nft monitor` (nftables' own notification tool) and `xtables-monitor --event`
//!   (iptables-nft's) run in the same namespace as `observer tail --json`, each read through a
//!   pipe by a thread that stamps every line as it arrives. Changes are made one at a time with
//!   `nft` and `iptables-nft`; for each, every tool's line is awaited before the next change, so
//!   each line belongs to the change just made.
//! - x_tables: nothing notifies, so the alternative is a poller. A shell runs
//!   `iptables-legacy-save -t filter` back to back on the 20,000-rule table (as often as it can,
//!   one save at a time) and prints, after each save, the names of the chains this part adds;
//!   `iptables-legacy -N` adds them, one at a time, while observer tails the same namespace. Each
//!   side's detection delay, and the CPU each side burns over the window, are compared.
//!
//! The reference instant of a change is its writer's exit (the process reaped), as in part 1:
//! no tool sees the change before the kernel makes it, which is before the writer exits, so a
//! line can arrive "before" it (negative delay). The per-change difference (observer's line
//! minus the other tool's line, same change) needs no reference at all; it is the fair
//! comparison.
//!
//! The nftables side is in [`monitors`], the x_tables side in [`poller`]; this file runs both
//! and writes their table.

use std::{
    fmt::Write as _,
    path::Path,
    process::{self, Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use super::{
    netns::Netns,
    not_measured, part, row,
    spawn::timed_lines,
    stats::{thousands, Dist},
    table::BigTable,
    Row,
};
use crate::cmd;

mod monitors;
mod poller;

use monitors::KindRun;
use poller::Poller;

/// A tool that prints a line per event, run beside observer; killed when dropped.
struct Monitor {
    child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
    desc: String,
}

impl Monitor {
    fn start(mut c: Command) -> Result<Monitor> {
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let desc = cmd::describe(&c);
        eprintln!("xtask: == {desc}");
        let mut child = c
            .spawn()
            .with_context(|| format!("could not start `{desc}`"))?;
        let out = child.stdout.take().context("no stdout")?;
        Ok(Monitor {
            child,
            lines: timed_lines(out),
            desc,
        })
    }

    /// When the first line for which `want` is true arrived; `None` after `timeout`, or when
    /// the tool closed its output.
    fn wait(&self, timeout: Duration, mut want: impl FnMut(&str) -> bool) -> Option<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((at, line)) if want(&line) => return Some(at),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// Fails, naming the tool, unless it is still running.
    fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("`{}` exited ({status})", self.desc);
        }
        Ok(())
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(super) struct Anchors {
    kinds: Vec<KindRun>,
    pub(super) poller: Result<Poller, String>,
    versions: String,
}

pub(super) fn run(
    bin: &Path,
    big: Option<(&Netns, &BigTable)>,
    events: usize,
    notes: &mut Vec<String>,
) -> Result<Anchors> {
    for tool in [
        "nft",
        "iptables-nft",
        "xtables-monitor",
        "stdbuf",
        "sh",
        "grep",
    ] {
        if cmd::which(tool).is_none() {
            bail!("`{tool}` was not found; `cargo xtask setup` installs it");
        }
    }
    let versions = [("nft", "--version"), ("xtables-monitor", "--version")]
        .iter()
        .filter_map(|(t, a)| cmd::output(Command::new(t).arg(a)).ok())
        .map(|s| s.trim().to_owned())
        .collect::<Vec<_>>()
        .join("; ");
    let ns = Netns::add(format!("obs-bench-{}-anchors", process::id()))?;
    let kinds = monitors::nft_side(bin, &ns, events, notes)?;
    drop(ns);
    let poller = match big {
        Some((ns, table)) => part(
            "bench: 6. observer vs an iptables-legacy-save poller",
            || poller::poller(bin, ns, table, events.min(20), notes),
        ),
        None => Err("the big table could not be built".to_owned()),
    };
    Ok(Anchors {
        kinds,
        poller,
        versions,
    })
}

impl Anchors {
    /// The side-by-side table (markdown).
    pub(super) fn table(&self) -> String {
        let d = |v: &[f64]| match Dist::of(v) {
            Some(d) => format!("{:.2} / {:.2}", d.median, d.p99),
            None => "none".to_owned(),
        };
        let mut t = String::from(
            "Side by side (part 6), the same changes seen by each tool, in ms: p50 / p99 from \
             the writer's exit to the tool's line; `observer − tool` is observer's line minus \
             the other tool's line for the same change (negative: observer first).\n\n\
             | change | n | writer | observer | nft monitor | xtables-monitor | observer − nft monitor | observer − xtables-monitor |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for k in &self.kinds {
            let missed = |i: usize| {
                if k.missed[i] == 0 {
                    String::new()
                } else {
                    format!(" ({} missed)", k.missed[i])
                }
            };
            let _ = writeln!(
                t,
                "| {} | {} | {:.1} | {}{} | {}{} | {}{} | {} | {} |",
                k.kind.label(),
                k.delays[0].len() + k.missed[0],
                k.command_ms,
                d(&k.delays[0]),
                missed(0),
                d(&k.delays[1]),
                missed(1),
                d(&k.delays[2]),
                missed(2),
                d(&k.lead[0]),
                d(&k.lead[1]),
            );
        }
        match &self.poller {
            Ok(p) => {
                let _ = write!(
                    t,
                    "\nLegacy, {} `iptables-legacy -N` on the {}-rule filter table (the writer: {:.0} ms \
                     median), observer against a shell running `iptables-legacy-save -t filter | grep` \
                     back to back ({} saves in {:.1} s):\n\n\
                     | | detection p50 / p99 from the writer's exit, ms | missed | CPU over the window | CPU per change |\n\
                     | --- | ---: | ---: | ---: | ---: |\n\
                     | observer tail | {} | {} | {:.0} ms ({:.1} % of a CPU) | {:.1} ms |\n\
                     | save poller | {} | {} | {:.0} ms ({:.1} % of a CPU) | {:.1} ms |\n\
                     | poller / observer | {} | | {:.1}× | |\n",
                    p.changes,
                    thousands(p.rules as u64),
                    p.command_ms,
                    p.saves,
                    p.window_s,
                    d(&p.observer),
                    p.missed[0],
                    p.observer_cpu_ms,
                    p.observer_cpu_ms / p.window_s / 10.0,
                    p.observer_cpu_ms / p.changes.max(1) as f64,
                    d(&p.poller),
                    p.missed[1],
                    p.poller_cpu_ms,
                    p.poller_cpu_ms / p.window_s / 10.0,
                    p.poller_cpu_ms / p.changes.max(1) as f64,
                    ratio_pair(&p.poller, &p.observer),
                    p.poller_cpu_ms / p.observer_cpu_ms.max(1.0),
                );
            }
            Err(e) => {
                let _ = writeln!(t, "\nLegacy poller comparison: NOT MEASURED: {e}");
            }
        }
        t
    }
}

/// `a / b` at p50 and p99, as `x.x× / y.y×`.
fn ratio_pair(a: &[f64], b: &[f64]) -> String {
    match (Dist::of(a), Dist::of(b)) {
        (Some(a), Some(b)) => format!("{:.1}× / {:.1}×", a.median / b.median, a.p99 / b.p99),
        _ => "none".to_owned(),
    }
}

/// Part 6's line of the report (its figures are in [`Anchors::table`]).
pub(super) fn rows(anchors: &Result<Anchors, String>, rows: &mut Vec<Row>) {
    match anchors {
        Ok(a) => rows.push(row(
            "6. side by side",
            format!("see the table below ({})", a.versions),
            "observer − nft monitor ≤ 0 at p50 and p99",
        )),
        Err(e) => rows.push(row("6. side by side", not_measured(e), "")),
    }
}
