//! Part 2 of `cargo xtask bench`: what observer's read and diff of the 20,000-rule x_tables
//! table cost (`bench xt`, with the read in its halves), against
//! `iptables-legacy-save -t filter` of the same table and `ip netns exec NS true`.

use std::{path::Path, process::Command};

use anyhow::{bail, Context as _, Result};
use serde_json::Value;

use super::{
    netns::Netns,
    not_measured, row,
    spawn::{run_bounded, run_timed},
    stats::{median, ms, thousands},
    table::BigTable,
    Plan, Row, SLOW_COMMAND_TIMEOUT,
};
use crate::cmd;

pub(super) struct XtCost {
    save_ms: f64,
    save_min_ms: f64,
    true_ms: f64,
    runs: usize,
    /// `bench xt`'s own line.
    read_ms: f64,
    /// The read in its halves: the kernel's copy, then decoding and packing.
    kernel_ms: f64,
    decode_ms: f64,
    /// The entries as the kernel returns them, and as observer keeps them.
    entries_bytes: u64,
    kept_bytes: u64,
    diff_ms: f64,
    rounds: u64,
    rules: u64,
    chains: u64,
    changes: u64,
    /// Chains the last read took unchanged from the copy before it.
    carried: u64,
    /// Decoding the writer's copy of the same table against the previous copy, plus the diff.
    writer_copy_ms: f64,
}

impl XtCost {
    fn ratio(&self) -> f64 {
        (self.read_ms + self.diff_ms) / self.save_ms
    }

    fn strict_ratio(&self) -> f64 {
        (self.read_ms + self.diff_ms) / (self.save_ms - self.true_ms)
    }
}

pub(super) fn xt_cost(bin: &Path, ns: &Netns, table: &BigTable, plan: &Plan) -> Result<XtCost> {
    let save = || {
        let mut c = ns.cmd("iptables-legacy-save");
        c.args(["-t", "filter"]);
        c
    };
    // One untimed run of each first (page cache, binaries), then alternate them.
    run_timed(&mut save())?;
    run_timed(&mut ns.cmd("true"))?;
    let (mut saves, mut trues) = (Vec::new(), Vec::new());
    for _ in 0..plan.save_runs {
        saves.push(ms(run_timed(&mut save())?.1));
        trues.push(ms(run_timed(&mut ns.cmd("true"))?.1));
    }
    let rounds = plan.rounds.to_string();
    let mut c = Command::new(bin);
    c.args([
        "xt", "--netns", &ns.name, "--table", "filter", "--rounds", &rounds,
    ]);
    eprintln!("xtask: == {}", cmd::describe(&c));
    let out = run_bounded(&mut c, None, SLOW_COMMAND_TIMEOUT)?;
    let line = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .with_context(|| format!("bench xt printed no JSON line: {out:?}"))?;
    let v: Value =
        serde_json::from_str(line).with_context(|| format!("parsing bench xt's line {line:?}"))?;
    let num = |k: &str| {
        v[k].as_f64()
            .with_context(|| format!("bench xt's line has no number `{k}`: {line}"))
    };
    let int = |k: &str| {
        v[k].as_u64()
            .with_context(|| format!("bench xt's line has no integer `{k}`: {line}"))
    };
    let cost = XtCost {
        save_ms: median(&saves),
        save_min_ms: saves.iter().copied().fold(f64::INFINITY, f64::min),
        true_ms: median(&trues),
        runs: plan.save_runs,
        read_ms: num("read_ms")?,
        kernel_ms: num("kernel_ms")?,
        decode_ms: num("decode_ms")?,
        entries_bytes: int("entries_bytes")?,
        kept_bytes: int("kept_bytes")?,
        diff_ms: num("diff_ms")?,
        rounds: int("rounds")?,
        rules: int("rules")?,
        chains: int("chains")?,
        changes: int("changes")?,
        carried: int("carried_chains")?,
        writer_copy_ms: num("writer_copy_ms")?,
    };
    if cost.rules < table.rules as u64 {
        bail!(
            "bench xt read {} rules; iptables-legacy-save shows {}: {line}",
            cost.rules,
            table.rules
        );
    }
    Ok(cost)
}

/// Part 2's lines of the report: the table, then the figures.
pub(super) fn rows(
    table: &Result<BigTable, String>,
    xt: &Result<XtCost, String>,
    rows: &mut Vec<Row>,
) {
    match (table, xt) {
        (Ok(t), Ok(x)) => {
            rows.push(row(
                "2. table",
                format!(
                    "filter: {} rules, {} user chains ({} KiB saved; restore took {:.0} ms); \
                     bench-xt saw {} rules, {} chains",
                    thousands(t.rules as u64),
                    thousands(t.user_chains as u64),
                    t.save_bytes / 1024,
                    t.restore_ms,
                    thousands(x.rules),
                    thousands(x.chains)
                ),
                "",
            ));
            rows.push(row(
                "2. observer read + diff",
                format!(
                    "read {:.2} + diff {:.2} = {:.2} ms (median of {} rounds; last diff found {} \
                     changes; {} of {} chains carried over from the copy before, not decoded)",
                    x.read_ms,
                    x.diff_ms,
                    x.read_ms + x.diff_ms,
                    x.rounds,
                    x.changes,
                    thousands(x.carried),
                    thousands(x.chains)
                ),
                "",
            ));
            rows.push(row(
                "2. the read, apart",
                format!(
                    "kernel's copy (GET_INFO, GET_ENTRIES, GET_INFO) {:.2} ms + decode {:.2} ms \
                     (medians); entries {:.1} MB from the kernel, kept packed in {:.1} MB",
                    x.kernel_ms,
                    x.decode_ms,
                    x.entries_bytes as f64 / 1e6,
                    x.kept_bytes as f64 / 1e6
                ),
                "",
            ));
            rows.push(row(
                "2. iptables-legacy-save -t filter",
                format!(
                    "{:.2} ms (median of {}, min {:.2}); `ip netns exec NS true`: {:.2} ms",
                    x.save_ms, x.runs, x.save_min_ms, x.true_ms
                ),
                "",
            ));
            rows.push(row(
                "2. ratio (read+diff) / save",
                format!("{:.3}", x.ratio()),
                "≤ 0.1",
            ));
            rows.push(row(
                "2. ratio (read+diff) / (save - exec true)",
                format!("{:.3}", x.strict_ratio()),
                "≤ 0.1",
            ));
            rows.push(row(
                "2. the writer's copy instead of the read",
                format!(
                    "decode against the copy before + diff {:.2} ms (median), ratio to save {:.3}: \
                     what a replace of this {:.1} MB table costs when the eBPF side copied the \
                     writer's table (tables up to half of --ringbuf-size, 16 MiB at most)",
                    x.writer_copy_ms,
                    x.writer_copy_ms / x.save_ms,
                    x.entries_bytes as f64 / 1e6
                ),
                "",
            ));
        }
        (Ok(_), Err(e)) | (Err(e), _) => {
            rows.push(row(
                "2. x_tables read+diff vs save",
                not_measured(e),
                "ratio ≤ 0.1",
            ));
        }
    }
}
