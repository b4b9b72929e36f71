//! Part 1 of `cargo xtask bench`: event latency, from the writer's exit to observer's JSON line
//! arriving on our pipe, for chains created and deleted with iptables-legacy and with nft; and
//! [`measure_ops`], the loop of changes made one at a time and waited for, which part 5 runs too.

use std::{fmt::Write as _, path::Path, process::Command, time::Duration};

use anyhow::{bail, Result};

use super::{
    netns::Netns,
    not_measured, row,
    spawn::{is_change, run_timed, Observer},
    stats::{median, ms, signed_ms, Dist},
    Row, EVENT_TIMEOUT, MAX_MISSES,
};

pub(super) struct OpLatency {
    backend: &'static str,
    op: &'static str,
    pub(super) dist: Option<Dist>,
    pub(super) missed: Vec<String>,
    /// Median wall time of the command itself (`ip netns exec NS iptables-legacy ...`).
    command_ms: f64,
}

/// For each name: run `command(name)`, take the instant its process was reaped, and wait for
/// observer's line of that change. Changes run one at a time: none queues behind another.
pub(super) fn measure_ops(
    obs: &mut Observer,
    backend: &'static str,
    op: &'static str,
    names: &[String],
    command: impl Fn(&str) -> Command,
) -> Result<OpLatency> {
    let (mut lat, mut took, mut missed) = (Vec::new(), Vec::new(), Vec::new());
    for name in names {
        let (done, t) = run_timed(&mut command(name))?;
        took.push(ms(t));
        let what = format!("{backend} {op} line for {name}");
        match obs.wait_opt(EVENT_TIMEOUT, &what, |v| is_change(v, backend, op, name))? {
            Some((at, _)) => lat.push(signed_ms(at, done)),
            None => {
                missed.push(name.clone());
                if missed.len() >= MAX_MISSES {
                    bail!(
                        "observer printed no {what} within {EVENT_TIMEOUT:?}; {} {backend} {op} \
                         changes missed ({}), giving up after {} of {}{}",
                        missed.len(),
                        missed.join(", "),
                        lat.len() + missed.len(),
                        names.len(),
                        obs.stderr_tail()
                    );
                }
            }
        }
    }
    Ok(OpLatency {
        backend,
        op,
        dist: Dist::of(&lat),
        missed,
        command_ms: median(&took),
    })
}

pub(super) fn latency(
    bin: &Path,
    ns: &Netns,
    events: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<OpLatency>> {
    let mut obs = Observer::start(bin, &["tail", "--json", "--netns", &ns.name], "latency")?;
    let mut out = Vec::new();

    // Warm-up, not counted: the first write instantiates the namespace's filter table.
    run_timed(&mut ns.legacy(&["-N", "OBSB-warm"]))?;
    obs.wait(
        Duration::from_secs(10),
        "legacy chain_create line for OBSB-warm",
        |v| is_change(v, "legacy", "chain_create", "OBSB-warm"),
    )?;
    let names: Vec<String> = (0..events).map(|i| format!("OBSB-{i}")).collect();
    out.push(measure_ops(
        &mut obs,
        "legacy",
        "chain_create",
        &names,
        |c| ns.legacy(&["-N", c]),
    )?);
    out.push(measure_ops(
        &mut obs,
        "legacy",
        "chain_delete",
        &names,
        |c| ns.legacy(&["-X", c]),
    )?);
    run_timed(&mut ns.legacy(&["-X", "OBSB-warm"]))?;

    // nft: the table is the warm-up.
    run_timed(&mut ns.nft("add table ip obsb"))?;
    obs.wait(
        Duration::from_secs(10),
        "nft table_create line for table obsb",
        |v| v["kind"] == "change" && v["op"] == "table_create" && v["table"] == "obsb",
    )?;
    let names: Vec<String> = (0..events).map(|i| format!("c{i}")).collect();
    out.push(measure_ops(&mut obs, "nft", "chain_create", &names, |c| {
        ns.nft(&format!("add chain ip obsb {c}"))
    })?);
    out.push(measure_ops(&mut obs, "nft", "chain_delete", &names, |c| {
        ns.nft(&format!("delete chain ip obsb {c}"))
    })?);
    run_timed(&mut ns.nft("delete table ip obsb"))?;
    obs.finish("event latency", notes);
    Ok(out)
}

/// Part 1's lines of the report.
pub(super) fn rows(latency: &Result<Vec<OpLatency>, String>, rows: &mut Vec<Row>) {
    match latency {
        Ok(ops) => {
            for o in ops {
                let what = format!("1. latency, {} {}", o.backend, o.op);
                let aim = "p99 ≤ 0.3 ms";
                let mut f = match &o.dist {
                    Some(d) => format!(
                        "n={} min {:.2} / median {:.2} / p99 {:.2} / max {:.2} ms",
                        d.n, d.min, d.median, d.p99, d.max
                    ),
                    None => "no change reported".into(),
                };
                let _ = write!(f, " (command itself: median {:.1} ms)", o.command_ms);
                if !o.missed.is_empty() {
                    let _ = write!(f, "; MISSED {}: {}", o.missed.len(), o.missed.join(", "));
                }
                rows.push(row(what, f, aim));
            }
        }
        Err(e) => rows.push(row("1. event latency", not_measured(e), "p99 ≤ 0.3 ms")),
    }
}
