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
//! The workloads themselves are this binary's hidden `overhead-workload` verb, so the host and
//! the guests run the same code.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    fs,
    io::Write as _,
    net::UdpSocket,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{bail, Context as _, Result};
use clap::Args;

use crate::{
    bench::{kstats, median_opt, procfs::rusage_cpu_ms},
    cmd, vm,
};

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

#[derive(Args)]
pub struct WorkloadArgs {
    /// udp, fork, unshare, mount, netlink, nft, iptables.
    name: String,
    iterations: u64,
}

/// Run one workload and print its nanoseconds per operation: the wall time, then the CPU time
/// (user and system) of this process and the children it waited for (for the writers: the
/// writer's own CPU, which includes the eBPF programs that run in its syscalls, and not
/// observer's work on the other CPUs).
pub fn workload(args: &WorkloadArgs) -> Result<i32> {
    let n = args.iterations.max(1);
    let cpu_before = cpu_ms()?;
    let start = Instant::now();
    match args.name.as_str() {
        "udp" => udp(n)?,
        "fork" => forks(n, false)?,
        "unshare" => forks(n, true)?,
        "mount" => mounts(n)?,
        "netlink" => link_dumps(n)?,
        "nft" => nft_transactions(n)?,
        "iptables" => {
            for i in 0..n {
                let dport = (1000 + i % 60_000).to_string();
                cmd::run(Command::new("iptables-legacy").args([
                    "-A", "OBSOV", "-p", "tcp", "--dport", &dport, "-j", "ACCEPT",
                ]))?;
            }
        }
        other => bail!("no workload {other}"),
    }
    let wall = start.elapsed().as_nanos() as f64 / n as f64;
    let cpu = (cpu_ms()? - cpu_before) * 1e6 / n as f64;
    println!("{wall:.0} {cpu:.0}");
    Ok(0)
}

/// User and system time of this process and of its children waited for, in ms.
fn cpu_ms() -> Result<f64> {
    Ok(rusage_cpu_ms(libc::RUSAGE_SELF)? + rusage_cpu_ms(libc::RUSAGE_CHILDREN)?)
}

fn udp(n: u64) -> Result<()> {
    let a = UdpSocket::bind("127.0.0.1:0")?;
    let b = UdpSocket::bind("127.0.0.1:0")?;
    let (aa, ba) = (a.local_addr()?, b.local_addr()?);
    let mut buf = [0u8; 64];
    for _ in 0..n {
        a.send_to(&buf[..32], ba)?;
        b.recv_from(&mut buf)?;
        b.send_to(&buf[..32], aa)?;
        a.recv_from(&mut buf)?;
    }
    Ok(())
}

fn forks(n: u64, new_netns: bool) -> Result<()> {
    for _ in 0..n {
        // SAFETY: the child only calls async-signal-safe functions (unshare, _exit).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            bail!("fork: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: as above.
            unsafe {
                let ok = !new_netns || libc::unshare(libc::CLONE_NEWNET) == 0;
                libc::_exit(if ok { 0 } else { 1 });
            }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if status != 0 {
            bail!("the child failed (status {status})");
        }
    }
    Ok(())
}

fn c_string(s: &str) -> std::ffi::CString {
    std::ffi::CString::new(s).unwrap_or_default()
}

fn mounts(n: u64) -> Result<()> {
    // A mount namespace of our own: the node's mount table never sees these mounts.
    // SAFETY: plain syscalls on our own process.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            bail!("unshare(CLONE_NEWNS): {}", std::io::Error::last_os_error());
        }
        let root = c_string("/");
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        );
    }
    let dir = std::env::temp_dir().join(format!("obs-overhead-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let target = c_string(&dir.display().to_string());
    let (src, fstype) = (c_string("none"), c_string("tmpfs"));
    for _ in 0..n {
        // SAFETY: C strings that outlive the calls.
        let rc = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            bail!("mount: {}", std::io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::umount2(target.as_ptr(), 0) } != 0 {
            bail!("umount: {}", std::io::Error::last_os_error());
        }
    }
    let _ = fs::remove_dir(&dir);
    Ok(())
}

fn link_dumps(n: u64) -> Result<()> {
    // SAFETY: a socket we own and close.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE) };
    if fd < 0 {
        bail!("netlink socket: {}", std::io::Error::last_os_error());
    }
    // struct nlmsghdr (16) + struct ifinfomsg (16): RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP.
    let mut req = [0u8; 32];
    req[..4].copy_from_slice(&32u32.to_ne_bytes());
    req[4..6].copy_from_slice(&(libc::RTM_GETLINK).to_ne_bytes());
    req[6..8].copy_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    req[16] = libc::AF_UNSPEC as u8;
    let mut buf = vec![0u8; 32 * 1024];
    let mut result = Ok(());
    'outer: for seq in 0..n {
        req[8..12].copy_from_slice(&(seq as u32).to_ne_bytes());
        // SAFETY: our buffer and socket.
        if unsafe { libc::send(fd, req.as_ptr().cast(), req.len(), 0) } < 0 {
            result = Err(anyhow::anyhow!("send: {}", std::io::Error::last_os_error()));
            break;
        }
        loop {
            // SAFETY: as above.
            let got = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if got <= 0 {
                result = Err(anyhow::anyhow!("recv: {}", std::io::Error::last_os_error()));
                break 'outer;
            }
            let mut off = 0usize;
            while off + 16 <= got as usize {
                let len = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap_or([0; 4]));
                let ty = u16::from_ne_bytes(buf[off + 4..off + 6].try_into().unwrap_or([0; 2]));
                if ty == libc::NLMSG_DONE as u16 || ty == libc::NLMSG_ERROR as u16 {
                    continue 'outer;
                }
                off += (len as usize + 3) & !3;
                if len == 0 {
                    break;
                }
            }
        }
    }
    // SAFETY: closing our own socket.
    unsafe { libc::close(fd) };
    result
}

fn nft_transactions(n: u64) -> Result<()> {
    let mut child = Command::new("nft")
        .arg("-i")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .context("starting nft -i")?;
    let mut stdin = child.stdin.take().context("nft's stdin")?;
    let mut script = String::new();
    for i in 0..n {
        let _ = writeln!(
            script,
            "add rule ip obsov c tcp dport {} accept",
            1000 + i % 60_000
        );
    }
    stdin.write_all(script.as_bytes())?;
    drop(stdin);
    let status = child.wait()?;
    if !status.success() {
        bail!("nft -i failed: {status}");
    }
    Ok(())
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

/// Field `field` of each line of a workload's figures (0: wall time, 1: CPU time, per
/// operation).
fn values(path: &Path, field: usize) -> Vec<f64> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(field)?.parse().ok())
        .collect()
}

/// One workload's cells: the median of figure `field` with no observer, then with each backend
/// and its change against none.
fn figure_row(dir: &Path, label: &str, w: &str, hooked: &[&str], field: usize) -> Result<String> {
    let Some(off) = median_opt(&values(&dir.join(format!("off.{w}")), field)) else {
        bail!("{label}: no figure for {w} without observer (see the guest's output)");
    };
    let mut row = format!(" {} |", human_ns(off));
    for c in hooked {
        match median_opt(&values(&dir.join(format!("{c}.{w}")), field)) {
            Some(v) => {
                let _ = write!(
                    row,
                    " {} | {:+.1} % |",
                    human_ns(v),
                    (v / off - 1.0) * 100.0
                );
            }
            None => row.push_str(" NOT MEASURED | |"),
        }
    }
    Ok(row)
}

/// A figures table's head: `first`, off, then each backend and its change against off.
fn table_head(first: &str, hooked: &[&str]) -> String {
    let mut md = format!("| {first} | off |");
    for c in hooked {
        let _ = write!(md, " `--hooks {c}` | vs off |");
    }
    md.push_str("\n| --- | ---: |");
    for _ in hooked {
        md.push_str(" ---: | ---: |");
    }
    md.push('\n');
    md
}

fn human_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// One machine's results as markdown: the workloads table, then each backend's programs.
fn report(dir: &Path, label: &str, configs: &[&str], rounds: usize, took: f64) -> Result<String> {
    let kernel = fs::read_to_string(dir.join("kernel")).unwrap_or_default();
    let mut md = format!(
        "### {label}: kernel {} ({rounds} rounds, {took:.0} s)\n\n",
        kernel.trim()
    );
    let hooked: Vec<&str> = configs.iter().copied().filter(|c| *c != "off").collect();
    md.push_str(&table_head("workload", &hooked));
    for (w, _, _) in UNRELATED.iter().chain(WRITERS) {
        let row = figure_row(dir, label, w, &hooked, 0)?;
        let _ = writeln!(md, "| {w}: {} |{row}", what(w));
    }
    // The writers' own CPU: what the hooks cost them in their syscalls, apart from observer's
    // work on the other CPUs (which the wall time above includes).
    let _ = write!(
        md,
        "\nThe writers' own CPU time (user + system of the writer processes, per operation; the \
         eBPF programs run in their syscalls and count here, observer's decode on another CPU \
         does not):\n\n{}",
        table_head("writer", &hooked)
    );
    for (w, _, _) in WRITERS {
        let row = figure_row(dir, label, w, &hooked, 1)?;
        let _ = writeln!(md, "| {w} |{row}");
    }
    let known = kstats::source_program_names(&crate::root().join("observer-ebpf").join("src"));
    for c in &hooked {
        let read = |name: String| fs::read_to_string(dir.join(name)).unwrap_or_default();
        let names = kstats::names_from_kallsyms(&read(format!("{c}.ksyms")));
        let mut unrelated = BTreeMap::new();
        let mut writers = BTreeMap::new();
        let mut changes = 0u64;
        for r in 1..=rounds {
            let s: Vec<_> = (0..3)
                .map(|i| kstats::parse_dump(&read(format!("{c}.{r}.s{i}"))))
                .collect();
            for (into, (a, b)) in [(&mut unrelated, (0, 1)), (&mut writers, (1, 2))] {
                for cost in kstats::diff(&s[a], &s[b], &names, &known) {
                    let e: &mut kstats::Cost =
                        into.entry(cost.name.clone()).or_insert(kstats::Cost {
                            name: cost.name.clone(),
                            runs: 0,
                            ns: 0,
                        });
                    e.runs += cost.runs;
                    e.ns += cost.ns;
                }
            }
            changes += read(format!("{c}.{r}.json"))
                .lines()
                .filter(|l| l.contains("\"kind\":\"change\""))
                .count() as u64;
        }
        let hooks = read(format!("{c}.1.json"))
            .lines()
            .next()
            .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .and_then(|v| v["hooks"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = write!(
            md,
            "\n#### `--hooks {c}` ({hooks}): each program, all rounds\n\n{}",
            kstats::table(&[
                kstats::Window {
                    load: "unrelated workloads".into(),
                    costs: unrelated.into_values().collect(),
                    changes: 0,
                },
                kstats::Window {
                    load: "writers".into(),
                    costs: writers.into_values().collect(),
                    changes,
                },
            ])
        );
    }
    Ok(md)
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
    fs::create_dir_all(&host_dir)?;
    fs::write(host_dir.join("base.rules"), base_rules())?;
    let configs = ["off", "tracepoint"];
    fs::write(
        host_dir.join("run.sh"),
        script(&host_dir, &xtask, &observer, &configs, false, args.rounds),
    )?;
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
                    fs::create_dir_all(&dir)?;
                    fs::write(dir.join("base.rules"), base_rules())?;
                    let configs = ["off", "fentry", "kprobe", "tracepoint"];
                    fs::write(
                        dir.join("run.sh"),
                        script(&dir, &xtask, &observer, &configs, true, args.rounds),
                    )?;
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

    let mut md = format!(
        "{START}\n<!-- Generated by `cargo xtask bench-overhead`: edits between these markers are \
         overwritten. -->\n\n## What the hooks cost the rest of the node\n\n\
         - command: `cargo xtask bench-overhead --rounds {}`\n\
         - each figure: the median over the rounds of the time per operation, the \
         configurations interleaved (off, then each backend with `observer tail --json --hooks \
         B` running, every round); the writer workloads run in a namespace of their own and \
         include observer's own work on the same CPUs (reading and diffing the table, the \
         notifications); beside the wall time, the writers' own CPU time (user + system of the \
         writer processes), which counts the eBPF programs in their syscalls and not observer's \
         work\n\
         - per program: the kernel's BPF statistics (`kernel.bpf_stats_enabled`), summed over \
         the rounds; `per change` divides by the change lines observer printed\n",
        args.rounds
    );
    if let Some(why) = skipped {
        let _ = writeln!(md, "- the guests did not run here: {why}");
    }
    let bench_md = crate::root().join("BENCHMARKS.md");
    let kept = if args.host_only {
        guest_sections(&fs::read_to_string(&bench_md).unwrap_or_default())
    } else {
        None
    };
    if kept.is_some() {
        let _ = writeln!(
            md,
            "- `--host-only`: the host's section is this run's; the guests' sections are kept \
             from the last run that had them"
        );
    }
    for s in sections {
        let _ = write!(md, "\n{s}");
    }
    if let Some(kept) = kept {
        let _ = write!(md, "\n{kept}");
    }
    let _ = writeln!(md, "\n{END}");
    println!("{md}");
    crate::bench::write_marked(&bench_md, START, END, &md)?;
    Ok(0)
}

/// The guests' sections of the figures between the markers of `text` (from the first guest
/// heading to the end marker), for a `--host-only` run to keep.
fn guest_sections(text: &str) -> Option<String> {
    let start = text.find(START)?;
    let end = start + text[start..].find(END)?;
    let block = &text[start..end];
    let guests = block.find("\n### QEMU guest")?;
    Some(block[guests + 1..].trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workloads_lines_give_its_wall_and_cpu_figures() {
        let dir = std::env::temp_dir().join(format!("overhead-values-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("off.nft"), "1000 400\n1200 500\n1100 450\n").unwrap();
        fs::write(dir.join("tracepoint.nft"), "2000 440\nnot a figure\n").unwrap();
        assert_eq!(values(&dir.join("off.nft"), 0), [1000.0, 1200.0, 1100.0]);
        assert_eq!(values(&dir.join("off.nft"), 1), [400.0, 500.0, 450.0]);
        let wall = figure_row(&dir, "host", "nft", &["tracepoint"], 0).unwrap();
        assert_eq!(wall, " 1.1 µs | 2.0 µs | +81.8 % |");
        let cpu = figure_row(&dir, "host", "nft", &["tracepoint"], 1).unwrap();
        assert_eq!(cpu, " 450 ns | 440 ns | -2.2 % |");
        let missing = figure_row(&dir, "host", "nft", &["fentry"], 1).unwrap();
        assert!(missing.contains("NOT MEASURED"), "{missing}");
        assert!(figure_row(&dir, "host", "udp", &["tracepoint"], 0).is_err());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_host_only_run_keeps_the_guests_sections() {
        let text = format!(
            "intro\n{START}\n## What\n\n### host: kernel x\n\nhost table\n\n\
             ### QEMU guest (software emulation, 2 vCPUs): kernel 6.1\n\nguest table\n\n\
             ### Reading\n\nprose\n\n{END}\nafter\n"
        );
        let kept = guest_sections(&text).expect("the guests' sections");
        assert!(kept.starts_with("### QEMU guest"), "{kept}");
        assert!(kept.ends_with("prose"), "{kept}");
        assert!(
            !kept.contains("host table") && !kept.contains(END),
            "{kept}"
        );
        assert_eq!(guest_sections("no markers"), None);
    }
}
