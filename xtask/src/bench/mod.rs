//! `cargo xtask bench`: measure observer against the tools it replaces, side by side in one run,
//! inside network namespaces of its own, and write the figures into BENCHMARKS.md.
//!
//! Six parts (BENCHMARKS.md explains each figure and its aim), one module each:
//! 1. event latency of every op on a chain (create, rule add, rule delete, flush, delete) with
//!    iptables-legacy and with nft, from the writer's exit to observer's JSON line arriving on
//!    our pipe, beside empty tables and beside the 20,003-rule table ([`latency`]);
//! 2. x_tables read+diff cost (`bench xt`, the `bench` example) against `iptables-legacy-save` on a
//!    20,000-rule filter table ([`read`]; the table is built by [`table`]);
//! 3. idle CPU and context switches of `observer tail` while nothing happens ([`idle`]);
//! 4. RSS of `observer tail` tracking that 20,000-rule table after one change ([`memory`]);
//! 5. the kernel's own count of runs and nanoseconds of each of observer's eBPF programs
//!    while iptables-legacy and nft changes are made (`kernel.bpf_stats_enabled`,
//!    [`kernel_cost`]);
//! 6. side by side with the tools already on a node, on the same changes: `nft monitor` and
//!    `xtables-monitor` for nft and iptables-nft changes, a poller of `iptables-legacy-save` for
//!    legacy changes on the 20,000-rule table ([`anchors`]).
//!
//! This file holds the entry point, the plan and what every part shares (its time limits), and
//! the report: the table printed and written into BENCHMARKS.md between the bench markers. The
//! parts share [`netns`] (namespaces), [`spawn`] (the commands and `observer tail` they run),
//! [`stats`] (medians, distributions, number formats), [`procfs`] (CPU and memory of a
//! process) and [`kstats`] (the kernel's BPF statistics); [`report`] holds the run's
//! environment and the one writer of a marked section of BENCHMARKS.md, for every bench.
//!
//! The other bench verbs live beside it, one module each, and share those too:
//! [`bignode`] (`bench-bignode`: cost per kube-proxy sync on a big node), [`neighbour`]
//! (`bench-neighbour`: one namespace's changes while another rewrites a big table), [`overhead`]
//! (`bench-overhead`: what the hooks cost the rest of the node), [`vm`] (`vm-bench`: the hook
//! backends' cost to a writer, in a QEMU guest), [`daemon`] (`bench-daemon`: the record and
//! `observer run` under load), [`forensics`] (`bench-forensics`), [`incidents`]
//! (`bench-incidents`), [`nats`] (`bench-nats`: fleet streaming) and [`soak`] (`soak`: an hour of
//! `observer run` under mixed churn). The benches of `observer run` share [`harness`].
//!
//! There are no pass/fail thresholds: the machines are shared and noisy. Every namespace is
//! deleted on the way out (also when a part fails or panics); the host's own ruleset is never
//! touched: every iptables/nft command runs under `ip netns exec`.
use std::{fmt::Write as _, path::Path, process, time::Duration};

use anyhow::{bail, Result};
use clap::Args;

use crate::cmd;

// The parts of `cargo xtask bench`.
mod anchors;
mod idle;
mod kernel_cost;
mod latency;
mod memory;
mod read;

// What the benches share.
pub(crate) mod cgroup;
pub(crate) mod harness;
pub(crate) mod kstats;
pub(crate) mod netns;
pub(crate) mod procfs;
mod report;
pub(crate) mod spawn;
pub(crate) mod stats;
pub(crate) mod table;

// The other bench verbs, one module each.
pub(crate) mod bignode;
pub(crate) mod daemon;
pub(crate) mod forensics;
pub(crate) mod incidents;
pub(crate) mod nats;
pub(crate) mod neighbour;
pub(crate) mod overhead;
pub(crate) mod soak;
pub(crate) mod vm;

use idle::Idle;
use kernel_cost::KernelCost;
use latency::{Latency, Setting};
use memory::Rss;
pub(crate) use netns::remove_stale_namespaces;
use netns::Netns;
use read::XtCost;
pub(crate) use report::{write_benchmarks, write_marked, Environment};
pub(crate) use stats::{median, median_opt};
use table::{build_big_table, BigTable};
pub(crate) use table::{kube_like_nft, kube_like_table};

#[derive(Args)]
pub struct BenchArgs {
    /// Fewer events (30 instead of 200), fewer save runs and a 3 s idle window (instead of 10 s)
    #[arg(long)]
    quick: bool,
    /// Print the figures only; leave BENCHMARKS.md as it is
    #[arg(long)]
    no_write: bool,
    /// Measure only these parts (1 to 6, repeatable; the 20,000-rule table is built when 1, 2, 4 or
    /// 6 is asked for). Implies --no-write: BENCHMARKS.md keeps one whole run
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=6))]
    part: Vec<u8>,
}

/// How much to measure.
struct Plan {
    quick: bool,
    /// Chains taken through every op per backend for the latency figures, beside empty tables.
    events: usize,
    /// The same beside the 20,003-rule table (each iptables-legacy command there rewrites it).
    big_events: usize,
    /// Runs of `iptables-legacy-save` and of `ip netns exec NS true` (medians).
    save_runs: usize,
    /// Rounds of `bench xt`.
    rounds: usize,
    idle: Duration,
    /// Chains created (then deleted) per backend while the kernel's BPF statistics are on.
    kcost_events: usize,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        Plan {
            quick,
            events: if quick { 30 } else { 200 },
            big_events: if quick { 10 } else { 50 },
            save_runs: if quick { 5 } else { 10 },
            rounds: 20,
            idle: Duration::from_secs(if quick { 3 } else { 10 }),
            kcost_events: if quick { 30 } else { 100 },
        }
    }
}

/// How long observer may take to print its ready line.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one change may take to be reported before it counts as missed.
const EVENT_TIMEOUT: Duration = Duration::from_secs(3);
/// A backend's latency run stops at this many missed changes.
const MAX_MISSES: usize = 3;
/// Reporting one change of the 20,000-rule table (read + diff of the whole table).
const BIG_EVENT_TIMEOUT: Duration = Duration::from_secs(60);
/// `bench xt` and building the big table.
const SLOW_COMMAND_TIMEOUT: Duration = Duration::from_secs(180);

const START: &str = "<!-- bench:start -->";
const END: &str = "<!-- bench:end -->";

pub fn run(args: &BenchArgs) -> Result<i32> {
    if !cmd::is_root() {
        bail!(
            "the benchmark needs root: it creates network namespaces, runs iptables-legacy and \
             nft inside them, and observer loads eBPF programs"
        );
    }
    for tool in [
        "ip",
        "iptables-legacy",
        "iptables-legacy-save",
        "iptables-legacy-restore",
        "nft",
        "kill",
    ] {
        if cmd::which(tool).is_none() {
            bail!("`{tool}` was not found; `cargo xtask setup` installs it");
        }
    }
    let tools = super::build_bench_tools()?;
    let bin = super::target_dir()?.join("release").join("observer");
    if !cmd::is_executable(&bin) {
        bail!(
            "{} was not built; run `cargo xtask build` and look at its output",
            bin.display()
        );
    }
    let plan = Plan::new(args.quick);
    let wanted = |n: u8| skipped::<()>(&args.part, n).is_none();
    let env = Environment::collect();
    remove_stale_namespaces("obs-bench-");

    let tag = process::id();
    let small = Netns::add(format!("obs-bench-{tag}-events"))?;
    let big = Netns::add(format!("obs-bench-{tag}-big"))?;
    let mut notes = Vec::new();

    let table = if wanted(1) || wanted(2) || wanted(4) || wanted(6) {
        part("bench: build the 20,000-rule table", || {
            build_big_table(&big)
        })
    } else {
        Err("not built in this run (--part)".to_owned())
    };
    let mut latency = Vec::new();
    for setting in [Setting::Empty, Setting::Big, Setting::BigCopied] {
        let (ns, events) = match setting {
            Setting::Empty => (&small, plan.events),
            Setting::Big | Setting::BigCopied => (&big, plan.big_events),
        };
        let ops = skipped(&args.part, 1).unwrap_or_else(|| match &table {
            Err(e) if setting != Setting::Empty => {
                Err(format!("the big table could not be built: {e}"))
            }
            _ => part(
                &format!("bench: 1. event latency, {}", setting.label()),
                || latency::latency(&bin, ns, setting, events, &mut notes),
            ),
        });
        latency.push(Latency { setting, ops });
    }
    let xt = skipped(&args.part, 2).unwrap_or_else(|| match &table {
        Ok(t) => part(
            "bench: 2. x_tables read+diff vs iptables-legacy-save",
            || read::xt_cost(&tools, &big, t, &plan),
        ),
        Err(e) => Err(format!("the big table could not be built: {e}")),
    });
    let idle = skipped(&args.part, 3).unwrap_or_else(|| {
        part("bench: 3. idle CPU and wake-ups", || {
            idle::idle(&bin, &small, plan.idle, &mut notes)
        })
    });
    let rss = skipped(&args.part, 4).unwrap_or_else(|| match &table {
        Ok(t) => part("bench: 4. RSS on the 20,000-rule table", || {
            memory::rss(&bin, &big, t, &mut notes)
        }),
        Err(e) => Err(format!("the big table could not be built: {e}")),
    });
    let kcost = skipped(&args.part, 5).unwrap_or_else(|| {
        part("bench: 5. kernel cost per eBPF program", || {
            kernel_cost::kernel_cost(&bin, &small, plan.kcost_events, &mut notes)
        })
    });
    let anchors = skipped(&args.part, 6).unwrap_or_else(|| {
        part(
            "bench: 6. side by side with nft monitor, xtables-monitor, a poller",
            || {
                let big = table.as_ref().ok().map(|t| (&big, t));
                anchors::run(&bin, big, plan.events, &mut notes)
            },
        )
    });
    drop(big);
    drop(small);

    let results = Results {
        env,
        plan,
        latency,
        table,
        xt,
        idle,
        rss,
        kcost,
        anchors,
        notes,
    };
    print!("{}", results.text());
    if args.no_write || !args.part.is_empty() {
        eprintln!("xtask: --no-write or --part: BENCHMARKS.md left as it is");
    } else {
        let path = super::root().join("BENCHMARKS.md");
        write_section(&path, &results.markdown())?;
        eprintln!("xtask: wrote the figures into {}", path.display());
    }
    Ok(if results.all_ok() { 0 } else { 1 })
}

/// In place of a part's figures, when `--part` left it out.
fn skipped<T>(parts: &[u8], n: u8) -> Option<Result<T, String>> {
    (!parts.is_empty() && !parts.contains(&n))
        .then(|| Err(format!("not measured in this run (--part {parts:?})")))
}

/// Runs one part as a phase; a failure is kept (as text) for the report, not propagated.
fn part<T>(name: &str, f: impl FnOnce() -> Result<T>) -> Result<T, String> {
    cmd::phase(name, f).map_err(|e| {
        eprintln!("xtask: {name}: {e:#}");
        format!("{e:#}")
    })
}

// ---------------------------------------------------------------------------------------------
// Report

struct Results {
    env: Environment,
    plan: Plan,
    latency: Vec<Latency>,
    table: Result<BigTable, String>,
    xt: Result<XtCost, String>,
    idle: Result<Idle, String>,
    rss: Result<Rss, String>,
    kcost: Result<KernelCost, String>,
    anchors: Result<anchors::Anchors, String>,
    notes: Vec<String>,
}

/// One line of the report: what, the figures, the aim.
struct Row {
    what: String,
    figures: String,
    aim: &'static str,
}

fn row(what: impl Into<String>, figures: impl Into<String>, aim: &'static str) -> Row {
    Row {
        what: what.into(),
        figures: figures.into(),
        aim,
    }
}

/// The figures of a part that failed, or that `--part` left out.
fn not_measured(e: &str) -> String {
    format!("NOT MEASURED: {e}")
}

impl Results {
    fn all_ok(&self) -> bool {
        self.latency.iter().all(|l| l.ops.is_ok())
            && self.table.is_ok()
            && self.xt.is_ok()
            && self.idle.is_ok()
            && self.rss.is_ok()
            && self.kcost.is_ok()
            && self.anchors.as_ref().is_ok_and(|a| a.poller.is_ok())
    }

    fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        latency::rows(&self.latency, &mut rows);
        read::rows(&self.table, &self.xt, &mut rows);
        idle::rows(&self.idle, &mut rows);
        memory::rows(&self.rss, &mut rows);
        kernel_cost::rows(&self.kcost, &mut rows);
        anchors::rows(&self.anchors, &mut rows);
        rows
    }

    fn header(&self) -> Vec<(&'static str, String)> {
        let e = &self.env;
        let mut h = vec![
            ("date", e.date.clone()),
            ("kernel", e.kernel.clone()),
            ("CPUs", e.cpus.clone()),
            ("command", e.command.clone()),
            ("observer", e.revision.clone()),
            ("tools", e.tools.clone()),
        ];
        h.push((
            "plan",
            format!(
                "{} changes per backend and op ({} beside the 20,003-rule table), {} save runs, {} bench-xt rounds, {} s idle{}",
                self.plan.events,
                self.plan.big_events,
                self.plan.save_runs,
                self.plan.rounds,
                self.plan.idle.as_secs(),
                if self.plan.quick { " (--quick)" } else { "" }
            ),
        ));
        h
    }

    fn text(&self) -> String {
        let mut out = String::from("\nobserver benchmark\n");
        for (k, v) in self.header() {
            let _ = writeln!(out, "  {k:<9} {v}");
        }
        let rows = self.rows();
        let w = rows.iter().map(|r| r.what.len()).max().unwrap_or(0);
        out.push('\n');
        for r in &rows {
            let aim = if r.aim.is_empty() {
                String::new()
            } else {
                format!("   [aim: {}]", r.aim)
            };
            let figures = r.figures.replace('\n', &format!("\n  {:w$}    ", ""));
            let _ = writeln!(out, "  {:<w$}  {figures}{aim}", r.what);
        }
        for n in &self.notes {
            let _ = writeln!(out, "  note: {n}");
        }
        if let Some(t) = latency::table(&self.latency) {
            let _ = write!(out, "\n{t}");
        }
        if let Some(t) = kernel_cost::table(&self.kcost) {
            let _ = write!(out, "\n{t}");
        }
        if let Ok(a) = &self.anchors {
            let _ = write!(out, "\n{}", a.table());
        }
        out
    }

    fn markdown(&self) -> String {
        let cell = |s: &str| {
            let one_line = s.split('\n').map(str::trim).collect::<Vec<_>>().join(" / ");
            let mut c = one_line.replace('|', "\\|");
            if c.chars().count() > 600 {
                c = c.chars().take(600).collect::<String>() + " ...";
            }
            c
        };
        let mut md = String::new();
        let _ = writeln!(md, "{START}");
        md.push_str("<!-- Generated by `cargo xtask bench`: edits between these markers are overwritten. -->\n\n");
        md.push_str("## Latest run\n\n");
        for (k, v) in self.header() {
            let v = if k == "command" { format!("`{v}`") } else { v };
            let _ = writeln!(md, "- {k}: {v}");
        }
        md.push_str("\n| figure | measured | aim |\n| --- | --- | --- |\n");
        for r in self.rows() {
            let _ = writeln!(
                md,
                "| {} | {} | {} |",
                cell(&r.what),
                cell(&r.figures),
                r.aim
            );
        }
        if !self.notes.is_empty() {
            md.push('\n');
            for n in &self.notes {
                let _ = writeln!(md, "- note: {}", cell(n));
            }
        }
        if let Some(t) = latency::table(&self.latency) {
            let _ = write!(md, "\n{t}");
        }
        if let Some(t) = kernel_cost::table(&self.kcost) {
            let _ = write!(md, "\n{t}");
        }
        if let Ok(a) = &self.anchors {
            let _ = write!(md, "\n{}", a.table());
        }
        let _ = writeln!(md, "{END}");
        md
    }
}

/// Replaces the text between the markers (inclusive) with `section`, or appends it.
fn write_section(path: &Path, section: &str) -> Result<()> {
    write_marked(path, START, END, section)
}

#[cfg(test)]
mod tests {
    use std::{env, fs};

    use super::*;

    #[test]
    fn section_is_replaced_between_markers() -> Result<()> {
        let dir = env::temp_dir().join(format!("obs-bench-test-{}", process::id()));
        fs::create_dir_all(&dir)?;
        let p = dir.join("B.md");
        fs::write(&p, format!("intro\n\n{START}\nold\n{END}\nafter\n"))?;
        write_section(&p, &format!("{START}\nnew\n{END}\n"))?;
        assert_eq!(
            fs::read_to_string(&p)?,
            format!("intro\n\n{START}\nnew\n{END}\nafter\n")
        );
        fs::write(&p, "intro\n")?;
        write_section(&p, &format!("{START}\nnew\n{END}\n"))?;
        assert_eq!(
            fs::read_to_string(&p)?,
            format!("intro\n\n{START}\nnew\n{END}\n")
        );
        fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
