//! Part 5 of `cargo xtask bench`: the kernel's own count of runs and nanoseconds of each of
//! observer's eBPF programs (`kernel.bpf_stats_enabled`) while iptables-legacy and nft changes
//! are made, and its per-program table.

use std::{
    fs,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{bail, Result};

use super::{
    kstats,
    latency::measure_ops,
    netns::Netns,
    not_measured, row,
    spawn::{is_change, run_timed, Observer},
    Row,
};

pub(super) struct KernelCost {
    /// The iptables-legacy window, then the nft one.
    windows: Vec<kstats::Window>,
    /// Each window's length.
    secs: Vec<f64>,
    missed: Vec<String>,
}

/// With the kernel's BPF statistics on (put back as they were on the way out), `events` chains
/// are created and deleted with iptables-legacy, then with nft, one at a time, each waited for;
/// the programs observer holds are read before, between and after.
pub(super) fn kernel_cost(
    bin: &Path,
    ns: &Netns,
    events: usize,
    notes: &mut Vec<String>,
) -> Result<KernelCost> {
    let _stats = kstats::StatsGuard::enable()?;
    let mut obs = Observer::start(bin, &["tail", "--json", "--netns", &ns.name], "kcost")?;
    // Warm-ups, outside the windows: the namespace's filter table and the nft table.
    run_timed(&mut ns.legacy(&["-N", "OBSK-warm"]))?;
    obs.wait(
        Duration::from_secs(10),
        "legacy chain_create line for OBSK-warm",
        |v| is_change(v, "legacy", "chain_create", "OBSK-warm"),
    )?;
    run_timed(&mut ns.nft("add table ip obsk"))?;
    obs.wait(
        Duration::from_secs(10),
        "nft table_create line for table obsk",
        |v| v["kind"] == "change" && v["op"] == "table_create" && v["table"] == "obsk",
    )?;
    let snap = |pid: u32| -> Result<(Vec<kstats::ProgStats>, Instant)> {
        let progs = kstats::parse_dump(&kstats::dump_pid(pid)?);
        if progs.is_empty() {
            bail!("observer (pid {pid}) holds no eBPF program; were its hooks loaded?");
        }
        Ok((progs, Instant::now()))
    };
    let mut missed = Vec::new();
    let mut ops = |obs: &mut Observer,
                   backend: &'static str,
                   names: &[String],
                   f: &dyn Fn(&str, &str) -> Command|
     -> Result<u64> {
        let mut reported = 0;
        for (op, verb) in [("chain_create", "add"), ("chain_delete", "delete")] {
            let o = measure_ops(obs, backend, op, names, |c| Ok(f(verb, c)))?;
            reported += o.dist.map_or(0, |d| d.n) as u64;
            missed.extend(o.missed.into_iter().map(|m| format!("{backend} {op} {m}")));
        }
        Ok(reported)
    };
    let (s0, t0) = snap(obs.pid)?;
    let names: Vec<String> = (0..events).map(|i| format!("OBSK-{i}")).collect();
    let legacy = ops(&mut obs, "legacy", &names, &|verb, c| {
        ns.legacy(&[if verb == "add" { "-N" } else { "-X" }, c])
    })?;
    let (s1, t1) = snap(obs.pid)?;
    let names: Vec<String> = (0..events).map(|i| format!("k{i}")).collect();
    let nft = ops(&mut obs, "nft", &names, &|verb, c| {
        ns.nft(&format!("{verb} chain ip obsk {c}"))
    })?;
    let (s2, t2) = snap(obs.pid)?;
    // Names while observer still holds its programs.
    let syms = fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    run_timed(&mut ns.legacy(&["-X", "OBSK-warm"]))?;
    run_timed(&mut ns.nft("delete table ip obsk"))?;
    obs.finish("kernel cost", notes);
    let names = kstats::names_from_kallsyms(&syms);
    let known = kstats::source_program_names(&crate::root().join("observer-ebpf").join("src"));
    Ok(KernelCost {
        windows: vec![
            kstats::Window {
                load: format!("{events} iptables-legacy -N, {events} -X"),
                costs: kstats::diff(&s0, &s1, &names, &known),
                changes: legacy,
            },
            kstats::Window {
                load: format!("{events} nft add chain, {events} delete chain"),
                costs: kstats::diff(&s1, &s2, &names, &known),
                changes: nft,
            },
        ],
        secs: vec![(t1 - t0).as_secs_f64(), (t2 - t1).as_secs_f64()],
        missed,
    })
}

/// Part 5's lines of the report (the per-program figures are in [`table`]).
pub(super) fn rows(kcost: &Result<KernelCost, String>, rows: &mut Vec<Row>) {
    match kcost {
        Ok(k) => {
            for (w, secs) in k.windows.iter().zip(&k.secs) {
                let (runs, ns) = w
                    .costs
                    .iter()
                    .fold((0, 0), |(r, n), c| (r + c.runs, n + c.ns));
                rows.push(row(
                    format!("5. kernel cost, {}", w.load),
                    format!(
                        "{} per reported change ({} changes; {} runs of {} programs, {} in all, in \
                         {secs:.1} s; per program below)",
                        kstats::per(ns, w.changes),
                        w.changes,
                        runs,
                        w.costs.len(),
                        kstats::total(ns),
                    ),
                    "",
                ));
            }
            if !k.missed.is_empty() {
                rows.push(row("5. changes not reported", k.missed.join(", "), ""));
            }
        }
        Err(e) => rows.push(row("5. kernel cost per eBPF program", not_measured(e), "")),
    }
}

/// The per-program table of part 5 (markdown), when it was measured.
pub(super) fn table(kcost: &Result<KernelCost, String>) -> Option<String> {
    let k = kcost.as_ref().ok()?;
    Some(format!(
        "Kernel cost per eBPF program (`kernel.bpf_stats_enabled=1` during the part; runs = \
         `run_cnt`, total = `run_time_ns` of each program observer holds):\n\n{}",
        kstats::table(&k.windows)
    ))
}
