//! `observer bench-xt`: time what observer does after an x_tables replace (read the table inside
//! the namespace, decode it, diff it against the last copy), for `cargo xtask bench`. Hidden from
//! `--help`: a measuring tool, not a feature.

use std::time::Instant;

use serde::Serialize;

use crate::cli::BenchXtArgs;
use crate::netns;
use crate::xtables::{self, XtProto};

#[derive(Serialize)]
struct Timing {
    table: String,
    rules: usize,
    chains: usize,
    rounds: usize,
    /// Median wall time of one read (getsockopt + decode), ms.
    read_ms: f64,
    /// Median wall time of one structural diff against the previous copy, ms.
    diff_ms: f64,
    /// Changes the last diff found.
    changes: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

pub fn run(args: BenchXtArgs) -> anyhow::Result<()> {
    let inode = netns::resolve_arg(&args.netns).map_err(anyhow::Error::msg)?;
    let handle = netns::find(inode, &[])
        .ok_or_else(|| anyhow::anyhow!("namespace {} not found", args.netns))?;
    let table = args.table.clone();
    let rounds = args.rounds.max(1);
    let timing = netns::run_in(&handle.file, move || -> anyhow::Result<Timing> {
        let mut last = xtables::read_table(XtProto::Ipv4, &table)?;
        let (mut reads, mut diffs, mut changes) = (Vec::new(), Vec::new(), 0);
        for _ in 0..rounds {
            let t0 = Instant::now();
            let next = xtables::read_table(XtProto::Ipv4, &table)?;
            let t1 = Instant::now();
            changes = xtables::diff(Some(&last), Some(&next)).len();
            let t2 = Instant::now();
            reads.push((t1 - t0).as_secs_f64() * 1e3);
            diffs.push((t2 - t1).as_secs_f64() * 1e3);
            last = next;
        }
        Ok(Timing {
            rules: last.rule_count(),
            chains: last.chains.len(),
            table,
            rounds,
            read_ms: median(reads),
            diff_ms: median(diffs),
            changes,
        })
    })??;
    println!("{}", serde_json::to_string(&timing)?);
    Ok(())
}
