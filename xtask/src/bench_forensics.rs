//! `cargo xtask bench-forensics`: snapshots in the record and `observer query --at`.
//!
//! A week of kube-proxy-like churn (`observer bench-record --snapshots`), generated against a
//! 21,000-rule nat table so that every change applies to it and the table keeps its size, is
//! written twice through the record's own writer: once with the snapshots the daemon's default
//! policy takes, once without (the same changes). The growth is the difference of the two
//! files. `query --at` is timed in process at the end of the week and at its worst moment (just
//! before a snapshot: a whole interval of changes to replay), and as a user runs it (process
//! start to exit).

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::Value;

use crate::bench_daemon::TempDir;
use crate::cmd;

#[derive(Args)]
pub struct BenchForensicsArgs {
    /// Changes in the week (fewer: quicker, and each snapshot interval holds fewer)
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Print the figures only; leave BENCHMARKS.md as it is
    #[arg(long)]
    no_write: bool,
}

const START: &str = "<!-- bench-forensics:start -->";
const END: &str = "<!-- bench-forensics:end -->";

pub fn run(args: &BenchForensicsArgs) -> Result<i32> {
    super::build()?;
    let bin = super::target_dir()?.join("release").join("observer");
    let dir = TempDir::new()?;
    let fill = |name: &str, extra: &[&str]| -> Result<Value> {
        let out = cmd::output(
            Command::new(&bin)
                .arg("bench-record")
                .arg("--out")
                .arg(dir.path().join(name))
                .args([
                    "--rows",
                    &args.rows.to_string(),
                    "--days",
                    "7",
                    "--snapshots",
                ])
                .args(extra),
        )?;
        serde_json::from_str(out.trim()).context("bench-record output")
    };
    let without = cmd::phase("bench-forensics: the week without snapshots", || {
        fill("without.db", &["--no-snapshot-rows"])
    })?;
    let with = cmd::phase("bench-forensics: the week with snapshots", || {
        fill("with.db", &[])
    })?;
    let user_ms = cmd::phase("bench-forensics: observer query --at now", || {
        let mut times = Vec::new();
        for _ in 0..5 {
            let t0 = Instant::now();
            cmd::output(
                Command::new(&bin)
                    .args(["query", "--json", "--at", "now", "--record"])
                    .arg(dir.path().join("with.db")),
            )?;
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    })?;
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let mb = |b: f64| b / 1e6;
    let (a, b) = (f(&without, "bytes"), f(&with, "bytes"));
    let growth = (b - a) / a.max(1.0) * 100.0;
    let at = &with["at"];
    let md = format!(
        "`cargo xtask bench-forensics`: {rows} changes over a week, kube-proxy-like churn \
generated against a nat table of {start} rules (endpoints' addresses and services' balancing \
rewritten, endpoints replaced: a chain deleted and a new one made, services' chains rewritten \
whole), every change applying to it, written through the record's writer with the snapshots of \
the daemon's default policy (10,000 changes or an hour) and without them (the same changes). \
`query --at` in process is the median of 5.\n\n\
| | figure |\n| --- | --- |\n\
| snapshots in the week | {snaps} |\n\
| rules in the table at the end of the week | {rules} |\n\
| record size without / with snapshots | {a:.1} MB / {b:.1} MB (**+{growth:.1} %**; aim: under 10 %) |\n\
| snapshot bytes (chains, tables, dictionary) / change bytes | {sb:.1} MB / {cb:.1} MB |\n\
| `query --at` the end of the week, in process | {now:.0} ms ({now_n} changes replayed) |\n\
| `query --at` just before a snapshot (the most to replay), in process | **{worst:.0} ms** ({worst_n} changes replayed; aim: under 200 ms) |\n\
| `observer query --at now --json` as a user runs it (process start to exit, median of 5) | {user_ms:.0} ms |\n",
        rows = args.rows,
        start = with["start_rules"],
        snaps = with["snapshots"],
        rules = with["model_rules"],
        a = mb(a),
        b = mb(b),
        sb = mb(f(at, "snapshot_bytes")),
        cb = mb(f(at, "change_bytes")),
        now = f(at, "at_ms"),
        now_n = at["at_replayed"],
        worst = f(at, "worst_ms"),
        worst_n = at["worst_replayed"],
    );
    println!("{md}");
    if !args.no_write {
        crate::bench::write_marked(&crate::root().join("BENCHMARKS.md"), START, END, &md)?;
        println!("bench-forensics: BENCHMARKS.md updated");
    }
    Ok(0)
}
