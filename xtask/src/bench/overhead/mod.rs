//! `cargo xtask bench-overhead`: what observer's hooks cost the rest of the node.
//!
//! observer runs on every node, so every process there pays for its hooks. This measures it,
//! side by side in one run: workloads that have nothing to do with netfilter (a UDP loopback
//! ping-pong, fork and exit, a network namespace made and dropped, a mount and unmount, a
//! netlink link dump) and two netfilter writers (single-rule nft transactions, and
//! `iptables-legacy -A` on a 2,000-rule table), each with no observer and with
//! `observer tail --hooks B` for every backend the kernel has, interleaved over several rounds
//! (medians). The kprobe and fentry backends run in QEMU guests of each VM kernel (software
//! emulation: compare within a kernel, not with the host), the tracepoint backend on the host
//! too. The kernel's BPF statistics give each program's runs and nanoseconds per run.
//!
//! The workloads themselves are this binary's hidden `overhead-workload` verb
//! ([`workload`](mod@workload)), so the host and the guests run the same code. This file holds
//! the entry point and the script each machine runs; [`report`](mod@report) makes the tables and
//! the section of BENCHMARKS.md.

use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{bail, Context as _, Result};
use clap::Args;

use crate::{cmd, vm};

mod report;
mod workload;

use report::{guest_sections, report, section};
pub use workload::{workload, WorkloadArgs};

const START: &str = "<!-- bench-overhead:start -->";
const END: &str = "<!-- bench-overhead:end -->";

/// (name, iterations on the host, iterations in a guest): work with no netfilter in it.
const UNRELATED: &[(&str, u64, u64)] = &[
    ("udp", 100_000, 4_000),
    ("fork", 2_000, 100),
    ("unshare", 300, 30),
    ("mount", 10_000, 400),
    ("netlink", 10_000, 400),
];

/// Netfilter writers, run in the benchmark's namespace.
const WRITERS: &[(&str, u64, u64)] = &[("nft", 1_000, 200), ("iptables", 300, 40)];

/// What each workload's figure is, for the table.
fn what(name: &str) -> &'static str {
    match name {
        "udp" => "UDP loopback send + receive, both ways",
        "fork" => "fork, child exits, wait",
        "unshare" => "fork, child unshare(CLONE_NEWNET) and exits, wait",
        "mount" => "mount tmpfs + umount",
        "netlink" => "RTM_GETLINK dump on a NETLINK_ROUTE socket (`ip -o link`)",
        "nft" => "one single-rule nft transaction (`nft -i`, one line each)",
        "iptables" => "`iptables-legacy -A` on a 2,000-rule filter table (one process each)",
        _ => "",
    }
}

#[derive(Args)]
pub struct OverheadArgs {
    /// Rounds; each runs every workload once per configuration, the configurations interleaved.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Only the host (tracepoint backend); no guest.
    #[arg(long)]
    host_only: bool,
}

/// The script one machine (the host or a guest) runs: set up the writers' namespace, then
/// `rounds` rounds of every configuration, each running every workload once.
fn script(
    dir: &Path,
    xtask: &Path,
    observer: &Path,
    configs: &[&str],
    guest: bool,
    rounds: usize,
) -> String {
    let (d, x, o) = (dir.display(), xtask.display(), observer.display());
    let mut s = String::from("#!/bin/sh\n");
    if guest {
        s.push_str(
            "for m in ip_tables iptable_filter x_tables xt_tcpudp nf_tables; do \
             modprobe $m 2>/dev/null; done\nmkdir -p /run/netns\n",
        );
    }
    let _ = write!(
        s,
        "uname -r > {d}/kernel\n\
         stats=$(cat /proc/sys/kernel/bpf_stats_enabled)\n\
         echo 1 > /proc/sys/kernel/bpf_stats_enabled || echo 'no BPF statistics'\n\
         ip netns del obsov 2>/dev/null\n\
         ip netns add obsov\n\
         ip netns exec obsov nft add table ip obsov\n\
         ip netns exec obsov nft add chain ip obsov c\n\
         ip netns exec obsov iptables-legacy-restore < {d}/base.rules || echo 'restore failed'\n\
         snap() {{ for f in /proc/$P/fdinfo/*; do echo \"fdinfo $f\"; cat $f 2>/dev/null; \
         done > $1; }}\n\
         settle() {{ sleep 2; a=-1; for i in $(seq 100); do b=$(wc -c < $1); \
         [ \"$b\" = \"$a\" ] && return; a=$b; sleep 2; done; }}\n\
         for r in $(seq {rounds}); do\n"
    );
    for c in configs {
        let hooked = *c != "off";
        s.push_str(&format!("# {c}\n"));
        if hooked {
            let _ = write!(
                s,
                "{o} tail --json --hooks {c} > {d}/{c}.$r.json 2> {d}/{c}.$r.err &\n\
                 P=$!\n\
                 for i in $(seq 900); do grep -q '\"ready\"' {d}/{c}.$r.json 2>/dev/null && break; \
                 kill -0 $P 2>/dev/null || break; sleep 0.2; done\n\
                 snap {d}/{c}.$r.s0\n"
            );
        }
        for (w, host, vm) in UNRELATED {
            let n = if guest { vm } else { host };
            let _ = writeln!(
                s,
                "{x} overhead-workload {w} {n} >> {d}/{c}.{w} || echo 'workload {w} failed'"
            );
        }
        if hooked {
            let _ = writeln!(s, "snap {d}/{c}.$r.s1");
        }
        for (w, host, vm) in WRITERS {
            let n = if guest { vm } else { host };
            let _ = writeln!(
                s,
                "ip netns exec obsov {x} overhead-workload {w} {n} >> {d}/{c}.{w} || echo 'workload {w} failed'"
            );
        }
        if hooked {
            let _ = writeln!(
                s,
                "settle {d}/{c}.$r.json; snap {d}/{c}.$r.s2\n\
                 grep '\\[bpf\\]' /proc/kallsyms > {d}/{c}.ksyms\n\
                 kill -INT $P; wait $P"
            );
        }
        s.push_str(
            "ip netns exec obsov nft flush chain ip obsov c\n\
             ip netns exec obsov iptables-legacy -F OBSOV\n",
        );
    }
    let _ = write!(
        s,
        "done\nip netns del obsov\necho $stats > /proc/sys/kernel/bpf_stats_enabled\n\
         echo overhead-done > {d}/done\n"
    );
    s
}

/// The 2,000-rule filter table the iptables writer appends to (chain OBSOV starts empty).
fn base_rules() -> String {
    let mut s = String::from("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:OBSOV - [0:0]\n:OBSOV-BASE - [0:0]\n");
    for i in 0..2000 {
        let _ = writeln!(
            s,
            "-A OBSOV-BASE -s 10.{}.{}.0/24 -p tcp --dport {} -j ACCEPT",
            i / 256,
            i % 256,
            1000 + i
        );
    }
    s.push_str("COMMIT\n");
    s
}

pub fn run(args: &OverheadArgs) -> Result<i32> {
    if !cmd::is_root() {
        bail!("bench-overhead needs root (namespaces, mounts, BPF, guests)");
    }
    crate::build()?;
    let observer = crate::target_dir()?.join("release").join("observer");
    let xtask = std::env::current_exe().context("this program's path")?;
    let base = std::env::temp_dir().join(format!("observer-overhead-{}", std::process::id()));
    let _ = fs::remove_dir_all(&base);
    let mut sections = Vec::new();

    // The host: tracepoint (the only backend this kernel may have) against none.
    let host_dir = base.join("host");
    let configs = ["off", "tracepoint"];
    prepare(&host_dir, &xtask, &observer, &configs, false, args.rounds)?;
    let start = Instant::now();
    cmd::run(Command::new("sh").arg(host_dir.join("run.sh")))?;
    sections.push(report(
        &host_dir,
        "host",
        &configs,
        args.rounds,
        start.elapsed().as_secs_f64(),
    )?);

    let mut skipped = None;
    if !args.host_only {
        match vm::ensure_tools()? {
            Ok(tools) => {
                for kernel in &tools.kernels {
                    let name = kernel
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let dir: PathBuf = base.join(&name);
                    let configs = ["off", "fentry", "kprobe", "tracepoint"];
                    prepare(&dir, &xtask, &observer, &configs, true, args.rounds)?;
                    let start = Instant::now();
                    let status = vm::boot_niced(&tools, kernel, &dir, "sh run.sh", 3600, 0, None)?;
                    if !dir.join("done").exists() {
                        bail!("the guest of {name} did not finish (status {status})");
                    }
                    sections.push(report(
                        &dir,
                        "QEMU guest (software emulation, 2 vCPUs)",
                        &configs,
                        args.rounds,
                        start.elapsed().as_secs_f64(),
                    )?);
                }
            }
            Err(why) => skipped = Some(why),
        }
    }
    let _ = fs::remove_dir_all(&base);

    let bench_md = crate::root().join("BENCHMARKS.md");
    let kept = if args.host_only {
        guest_sections(&fs::read_to_string(&bench_md).unwrap_or_default())
    } else {
        None
    };
    let md = section(args.rounds, &sections, skipped, kept);
    println!("{md}");
    crate::bench::write_marked(&bench_md, START, END, &md)?;
    Ok(0)
}

/// Makes one machine's directory: the table the iptables writer appends to and the script
/// that runs `configs`.
fn prepare(
    dir: &Path,
    xtask: &Path,
    observer: &Path,
    configs: &[&str],
    guest: bool,
    rounds: usize,
) -> Result<()> {
    fs::create_dir_all(dir)?;
    fs::write(dir.join("base.rules"), base_rules())?;
    fs::write(
        dir.join("run.sh"),
        script(dir, xtask, observer, configs, guest, rounds),
    )?;
    Ok(())
}
