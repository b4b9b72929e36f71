//! The measuring tools `cargo xtask` drives, kept out of the shipped `observer` binary:
//!
//! - `bench xt`: time what observer does after an x_tables replace (read the table inside the
//!   namespace, decode it, diff it against the last copy), for `cargo xtask bench`;
//! - `bench record`: fill a new record with synthetic kube-proxy-like churn and time a query, for
//!   `cargo xtask bench-daemon` and `bench-forensics`;
//! - `bench incidents`: time the incident engine on synthetic kube-proxy churn, for
//!   `cargo xtask bench-incidents`.
//!
//! Each prints one JSON line of figures.

use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use observer::netns;
use observer::xtables::{self, XtProto};

mod forensics;
mod incidents;

#[derive(Debug, Parser)]
#[command(name = "bench", about = "observer's measuring tools (for cargo xtask)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Time the read and diff of a legacy table inside a namespace.
    Xt(BenchXtArgs),
    /// Fill a new record with synthetic kube-proxy-like churn and time a query.
    Record(BenchRecordArgs),
    /// Time the incident engine on synthetic kube-proxy churn.
    Incidents(BenchIncidentsArgs),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Xt(a) => run(a),
        Command::Record(a) => record(a),
        Command::Incidents(a) => incidents::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Debug, Args)]
pub struct BenchRecordArgs {
    /// The record to create (must not exist).
    #[arg(long)]
    pub out: std::path::PathBuf,
    /// How many changes.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: u64,
    /// Spread over this many days, ending now.
    #[arg(long, default_value_t = 7)]
    pub days: u64,
    /// Give every endpoint change a chain name never seen before (the record's worst case),
    /// instead of names from a set of endpoints that churns.
    #[arg(long)]
    pub unique_chains: bool,
    /// Generate the churn against a 21,000-rule nat table (every change applies to it), snapshot
    /// it at the daemon's default policy, and time `query --at` at the end.
    #[arg(long)]
    pub snapshots: bool,
    /// With --snapshots: the same churn, but write no snapshot (the record's size without them).
    #[arg(long, requires = "snapshots")]
    pub no_snapshot_rows: bool,
}

#[derive(Debug, Args)]
pub struct BenchIncidentsArgs {
    /// kube-proxy restores to replay.
    #[arg(long, default_value_t = 20_000)]
    pub txns: usize,
    /// calico-node/kube-proxy conflict rounds.
    #[arg(long, default_value_t = 2_000)]
    pub rounds: usize,
}

#[derive(Debug, Args)]
pub struct BenchXtArgs {
    /// The namespace (inode, /run/netns/NAME path or `ip netns` name).
    #[arg(long)]
    pub netns: String,
    /// The IPv4 table.
    #[arg(long, default_value = "filter")]
    pub table: String,
    /// How many read+diff rounds (the median is printed).
    #[arg(long, default_value_t = 20)]
    pub rounds: usize,
}

#[derive(Serialize)]
struct Timing {
    table: String,
    rules: usize,
    chains: usize,
    rounds: usize,
    /// Median wall time of one read (getsockopt + decode), ms.
    read_ms: f64,
    /// Of which the kernel's copy (`GET_INFO`, `GET_ENTRIES`, `GET_INFO`), ms (median).
    kernel_ms: f64,
    /// Of which decoding, fingerprinting and packing the entries, ms (median).
    decode_ms: f64,
    /// The entries as the kernel returns them, and as observer keeps them, bytes.
    entries_bytes: usize,
    kept_bytes: usize,
    /// Median wall time of one structural diff against the previous copy, ms.
    diff_ms: f64,
    /// Changes the last diff found.
    changes: usize,
    /// Chains of the last read taken unchanged from the copy before it (not decoded again).
    carried_chains: usize,
    /// Median wall time of decoding the same table as a writer hands it to the kernel (the
    /// copy the eBPF side makes of a replace, used instead of a read for tables it can copy)
    /// against the previous copy, plus the diff, ms.
    writer_copy_ms: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn run(args: BenchXtArgs) -> anyhow::Result<()> {
    let inode = netns::resolve_arg(&args.netns).map_err(anyhow::Error::msg)?;
    let handle = netns::find(inode, &[])
        .ok_or_else(|| anyhow::anyhow!("namespace {} not found", args.netns))?;
    let table = args.table.clone();
    let rounds = args.rounds.max(1);
    let timing = netns::run_in(&handle.file, move || -> anyhow::Result<Timing> {
        let mut last = xtables::read_table(XtProto::Ipv4, &table)?;
        let (mut reads, mut diffs, mut changes) = (Vec::new(), Vec::new(), 0);
        let (mut kernel, mut decode, mut entries_bytes) = (Vec::new(), Vec::new(), 0);
        let mut copies = Vec::new();
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        for _ in 0..rounds {
            // One read in its two halves: the kernel's copy, then decoding.
            let t0 = Instant::now();
            let raw = xtables::sockopt::read_raw(XtProto::Ipv4, &table)?;
            let t1 = Instant::now();
            entries_bytes = raw.info.size as usize;
            // For the writer's copy's timing below; not part of the read.
            let copy = xtables::decode::replace_of(XtProto::Ipv4, &raw.info, raw.entries());
            let t1b = Instant::now();
            let next = xtables::decode::decode_raw(XtProto::Ipv4, raw, Some(&last))?;
            let t2 = Instant::now();
            changes = xtables::diff(Some(&last), Some(&next)).len();
            let t3 = Instant::now();
            kernel.push(ms(t1 - t0));
            decode.push(ms(t2 - t1b));
            reads.push(ms((t1 - t0) + (t2 - t1b)));
            diffs.push(ms(t3 - t2));
            // The writer's copy instead of the read: decode against the same previous copy.
            let t4 = Instant::now();
            let installed = xtables::decode_replace(XtProto::Ipv4, copy, Some(&last))?;
            let found = xtables::diff(Some(&last), Some(&installed)).len();
            copies.push(ms(t4.elapsed()));
            if found != changes {
                anyhow::bail!("the writer's copy differs from the read by {found} changes");
            }
            last = next;
        }
        Ok(Timing {
            rules: last.rule_count(),
            chains: last.chains.len(),
            table,
            rounds,
            read_ms: median(reads),
            kernel_ms: median(kernel),
            decode_ms: median(decode),
            entries_bytes,
            kept_bytes: last.kept_bytes(),
            diff_ms: median(diffs),
            changes,
            carried_chains: last.carried_chains(),
            writer_copy_ms: median(copies),
        })
    })??;
    println!("{}", serde_json::to_string(&timing)?);
    Ok(())
}

/// `observer bench-record`: fill a record with a week of synthetic kube-proxy-like churn through
/// the record's own writer, and report its size.
#[derive(Serialize)]
struct RecordFill {
    rows: u64,
    days: u64,
    /// Wall time of the writes, s.
    write_s: f64,
    /// CPU time (user + system) of the writes, s: on a busy machine, the better figure.
    write_cpu_s: f64,
    /// Rows per CPU second through the writer.
    rows_per_s: f64,
    /// File size (after checkpoint), bytes.
    bytes: u64,
    bytes_per_million: f64,
    /// A chain with a typical share of the churn, to query.
    chain: String,
    /// Rows of that chain.
    chain_rows: usize,
    /// In-process time of that query (SQL + rows), ms.
    query_ms: f64,
}

fn record(args: BenchRecordArgs) -> anyhow::Result<()> {
    use observer::attribution::ProcessInfo;
    use observer::output::{ChangeLine, Line, Source};
    use observer::ruleset::{Backend, Family, Op};
    use observer::sinks::record_writer::{self as recorder, Row};
    use observer::store::{self, ChangeRow};
    use std::sync::Arc;

    if args.out.exists() {
        anyhow::bail!("{} exists; give a new path", args.out.display());
    }
    let conn = store::open_rw(&args.out)?;
    let limits = recorder::Limits {
        retain: std::time::Duration::from_secs(3600 * 24 * 365),
        max_bytes: u64::MAX,
    };
    let mut w = recorder::Writer::new(
        conn,
        args.out.clone(),
        limits,
        Arc::new(recorder::StoreStats::default()),
    );
    let services = 1000u64;
    let span_ns = args.days as i64 * 86_400 * 1_000_000_000;
    let start_ns = observer::timestamp::Timestamp::now().unix_nanos() - span_ns;
    let step = span_ns / args.rows.max(1) as i64;
    // A small deterministic generator: the same rows every run.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let svc = |i: u64| format!("KUBE-SVC-{:016X}", i.wrapping_mul(0x2545_f491_4f6c_dd1d));
    // Endpoint chains: 4 endpoints per service; one rule_add in 20 is a new endpoint taking a
    // slot's place (a pod replaced), so names come and go as on a node. `--chains unique`
    // gives every such change a chain name never seen before (the worst case for the record).
    let mut generation = vec![0u64; services as usize * 4];
    let mut sep = |r: u64, s: u64, new_endpoint: bool| -> String {
        if args.unique_chains {
            return format!("KUBE-SEP-{:016X}", r >> 8);
        }
        let slot = (s * 4 + (r >> 20) % 4) as usize;
        if new_endpoint {
            generation[slot] += 1;
        }
        let id = (slot as u64) << 32 | generation[slot];
        format!("KUBE-SEP-{:016X}", id.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    };
    let mut sim = args
        .snapshots
        .then(|| forensics::Sim::new(services, svc, start_ns));
    let start_rules = sim.as_ref().map(|s| s.rules());
    let keep_snapshots = !args.no_snapshot_rows;
    let t0 = Instant::now();
    let cpu0 = cpu_seconds();
    let mut batch = Vec::with_capacity(2048);
    if let Some(sim) = sim.as_mut() {
        let row = sim.snapshot(0, start_ns);
        if keep_snapshots {
            batch.push(row);
        }
    }
    let mut seq = 0;
    while seq < args.rows {
        let r = next();
        let lines = if let Some(sim) = sim.as_mut() {
            // Churn generated against the snapshotted table: every change applies to it.
            sim.next_txn(r)
        } else {
            let s = r % services;
            let (chain, op, rule) = match r >> 60 {
                0..=5 => (
                    sep(r, s, r % 20 == 0),
                    Op::RuleAdd,
                    Some(format!(
                        "-p tcp -m comment --comment \"default/svc-{s}:http\" -m tcp -j DNAT --to-destination 10.{}.{}.{}:8080",
                        (r >> 16) & 255,
                        (r >> 24) & 255,
                        (r >> 32) & 255
                    )),
                ),
                6..=11 => (
                    sep(r, s, false),
                    Op::RuleDelete,
                    Some("-s 10.0.0.0/32 -m comment --comment \"default/svc:http\" -j KUBE-MARK-MASQ".into()),
                ),
                12 | 13 => (
                    svc(s),
                    Op::RuleReplace,
                    Some(format!(
                        "-m comment --comment \"default/svc-{s}:http -> 10.1.2.3:8080\" -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-{:016X}",
                        r >> 8
                    )),
                ),
                14 => (svc(s), Op::ChainFlush, None),
                _ => (sep(r, s, false), Op::ChainDelete, None),
            };
            vec![forensics::Line {
                chain,
                op,
                rule,
                position: None,
                detail: None,
            }]
        };
        // One transaction: one time, one txn.
        let time_ns = start_ns + (seq + 1) as i64 * step;
        for line in lines {
            if seq >= args.rows {
                break;
            }
            seq += 1;
            let c = ChangeLine {
                seq,
                time: observer::timestamp::Timestamp::from_unix_nanos(time_ns),
                netns: 4026531840,
                netns_name: None,
                node: None,
                backend: Backend::Legacy,
                family: Family::Ip,
                table: "nat".into(),
                chain: Some(line.chain),
                op: line.op,
                rule: line.rule,
                forms: Default::default(),
                position: line.position,
                detail: line.detail,
                txn: format!("xt-4026531840-{time_ns}"),
                result: "ok".into(),
                source: Source::Tracepoint,
                process: ProcessInfo {
                    pid: 1000 + (r % 30000) as u32,
                    tid: 1000 + (r % 30000) as u32,
                    comm: "iptables-restor".into(),
                    ppid: Some(812),
                    parent_comm: Some("kube-proxy".into()),
                    actor: "kube-proxy".into(),
                    cgroup: Some(7421),
                    unit: None,
                    container_id: Some(
                        "3f9c2a7d81e4b05c6d1f8e2a9b7c4d3e5f6a1b2c3d4e5f6a7b8c9d0e1f2a3b4c".into(),
                    ),
                    pod: None,
                    ancestry: Vec::new(),
                    requested_by: None,
                }
                .into(),
                replayed: false,
                recovered: false,
                restore: None,
            };
            let json: Arc<str> = serde_json::to_string(&Line::Change(c.clone()))?.into();
            batch.push(Row::Change(ChangeRow {
                seq,
                time_ns,
                netns: Some(c.netns),
                backend: Some("legacy".into()),
                table: Some(c.table),
                chain: c.chain,
                op: Some(c.op.as_str().into()),
                actor: Some(c.process.actor.clone()),
                comm: Some(c.process.comm.clone()),
                json: json.clone(),
            }));
            if let Some(row) = sim.as_mut().and_then(|s| s.change(seq, time_ns, &json)) {
                if keep_snapshots {
                    batch.push(row);
                }
            }
            if batch.len() >= 2048 {
                w.write_batch(&batch);
                batch.clear();
            }
        }
    }
    w.write_batch(&batch);
    drop(w);
    let write_s = t0.elapsed().as_secs_f64();
    let write_cpu_s = cpu_seconds() - cpu0;
    let conn = store::open_rw(&args.out)?;
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")?;
    let bytes = std::fs::metadata(&args.out)?.len();
    let chain = svc(17);
    let ro = store::open_ro(&args.out)?;
    let sel = store::Selection {
        chain_glob: Some(chain.clone()),
        since_ns: Some(start_ns),
        ..Default::default()
    };
    let q0 = Instant::now();
    let rows = store::select_changes(&ro, &sel)?;
    let query_ms = q0.elapsed().as_secs_f64() * 1e3;
    let fill = RecordFill {
        rows: args.rows,
        days: args.days,
        write_s,
        write_cpu_s,
        rows_per_s: args.rows as f64 / write_cpu_s.max(1e-9),
        bytes,
        bytes_per_million: bytes as f64 * 1e6 / args.rows as f64,
        chain,
        chain_rows: rows.len(),
        query_ms,
    };
    let mut out = serde_json::to_value(&fill)?;
    if let Some(sim) = &sim {
        out["snapshots"] = if keep_snapshots { sim.snapshots } else { 0 }.into();
        out["start_rules"] = start_rules.into();
        out["model_rules"] = sim.rules().into();
        if keep_snapshots {
            out["at"] = forensics::measure(
                &args.out,
                observer::timestamp::Timestamp::now().unix_nanos(),
            )?;
        }
    }
    println!("{out}");
    Ok(())
}

/// User + system CPU time of this process, in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime and stime are the 12th and
    // 13th, in clock ticks.
    let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / hz
}
