//! `cargo xtask bench-incidents`: the incident engine's cost per transaction, its incident
//! latency and its memory under endless kube-proxy churn on a 20,000-rule table
//! (`bench incidents` of the `bench` example, synthetic transactions through the real engine; no root needed),
//! written into BENCHMARKS.md between its own markers.

use std::process::Command;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use serde_json::Value;

#[derive(Args)]
pub struct BenchIncidentsArgs {
    /// Fewer transactions (2,000 instead of 20,000)
    #[arg(long)]
    quick: bool,
    /// Print the figures only; leave BENCHMARKS.md as it is
    #[arg(long)]
    no_write: bool,
}

const START: &str = "<!-- bench-incidents:start -->";
const END: &str = "<!-- bench-incidents:end -->";

pub fn run(args: &BenchIncidentsArgs) -> Result<i32> {
    let bin = crate::build_bench_tools()?;
    let txns = if args.quick { 2_000 } else { 20_000 };
    let out = Command::new(&bin)
        .args(["incidents", "--txns", &txns.to_string(), "--rounds", "2000"])
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "bench incidents failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: Value = serde_json::from_slice(&out.stdout).context("reading the figures")?;
    let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let rss: Vec<String> = v["rss_kib"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| format!("{:.1}", x.as_f64().unwrap_or(0.0) / 1024.0))
                .collect()
        })
        .unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let section = format!(
        "{START}\n## Incident engine\n\n\
         Command: `cargo xtask bench-incidents` (runs `bench incidents --txns {txns} \
         --rounds 2000`): synthetic transactions through the real correlation engine, on a model \
         of a kube-proxy nat table of {rules} rules in {chains} chains. Load average at the time: \
         {load}.\n\n\
         | figure | value | aim |\n| --- | --- | --- |\n\
         | kube-proxy restores replayed ({per} changes each, its own chains: no incident) | {txns} | |\n\
         | engine time per restore, p50 / p99 | {c50:.0} µs / {c99:.0} µs | |\n\
         | engine CPU per change | {cpc:.1} µs | |\n\
         | incident latency (last event to incident line, in the engine), p50 / p99 / max \
         over {n} incident lines | {i50:.0} µs / {i99:.0} µs / {imax:.0} µs | p99 under 1 ms |\n\
         | RSS after the model is built, then after each quarter of the churn | {rss} MiB | \
         bounded, independent of run time |\n{END}\n",
        rules = v["rules"],
        chains = v["chains"],
        per = v["churn_changes_per_txn"],
        c50 = f("churn_us_p50"),
        c99 = f("churn_us_p99"),
        cpc = f("churn_us_per_change"),
        n = v["incidents"],
        i50 = f("incident_us_p50"),
        i99 = f("incident_us_p99"),
        imax = f("incident_us_max"),
        rss = rss.join(" → "),
        load = load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    );
    print!("{section}");
    if !args.no_write {
        let path = crate::bench::write_benchmarks(START, END, &section)?;
        eprintln!("xtask: wrote the figures into {}", path.display());
    }
    Ok(0)
}
