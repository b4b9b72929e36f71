//! `cargo xtask vm-bench`: what the hooks cost a writer, on a kernel with every backend.
//!
//! In the QEMU guest of `vm-test` (Debian's kernel: fentry, kprobes, tracepoints), one namespace
//! gets the 20,000-rule kube-proxy-like filter table of `cargo xtask bench`, then
//! `iptables-legacy-restore` rewrites it, alternating between two versions (the second has one
//! chain and rule more, so every restore is a change observer reports). The restores are timed
//! with no observer, then with `observer tail --hooks B` for each backend, then with none again,
//! all in one boot. The figures come from software emulation: compare them with each other, not
//! with the host's.

use std::{fmt::Write as _, fs, path::Path, time::Instant};

use anyhow::{bail, Result};
use clap::Args;
use serde_json::Value;

use crate::{
    bench::{kstats, median},
    cmd, vm,
};

/// The start of the guest's script; `{d}` stands for the directory shared with the host.
const GUEST_PRELUDE: &str = include_str!("vm-guest.sh");

/// The nftables table the guest loads (in the benchmark's own namespace).
const NFT_TABLE: &str = "obsbench";

/// The guest's boot and run may not take longer than this.
const VM_BENCH_TIMEOUT_SECS: u64 = 2400;

/// The configurations timed, in order (`none` twice: before and after).
const CONFIGS: &[&str] = &["none", "fentry", "kprobe", "tracepoint", "none2"];

const START: &str = "<!-- vm-bench:start -->";
const END: &str = "<!-- vm-bench:end -->";

#[derive(Args)]
pub struct VmBenchArgs {
    /// Rounds per configuration; each round is two restores and two `nft -f` runs (one of each
    /// version). The default keeps the whole run near 20 minutes under software emulation.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// The guest's script: [`GUEST_PRELUDE`] (the modules, the namespace and its tables, the
/// timing and snapshot helpers), then each configuration's restores and `nft -f` runs, with
/// observer started before them and the kernel's BPF statistics read around them when hooked.
fn guest_script(dir: &Path, observer: &Path, rounds: usize) -> String {
    let d = dir.display();
    let bin = observer.display();
    let mut s = GUEST_PRELUDE.replace("{d}", &d.to_string());
    for c in CONFIGS {
        let hooks = c.trim_end_matches('2');
        let hooked = hooks != "none";
        if hooked {
            let _ = write!(
                s,
                "{bin} tail --json --hooks {hooks} --netns obsvb > {d}/{c}.json 2> {d}/{c}.err &\n\
                 P=$!\n\
                 for i in $(seq 600); do grep -q '\"ready\"' {d}/{c}.json 2>/dev/null && break; \
                 kill -0 $P 2>/dev/null || break; sleep 0.2; done\n\
                 snap {d}/{c}.s0\n"
            );
        }
        let _ = writeln!(
            s,
            "for r in $(seq {rounds}); do restore {d}/b.rules {d}/{c}.us; \
             restore {d}/a.rules {d}/{c}.us; done"
        );
        if hooked {
            let _ = writeln!(s, "settle {d}/{c}.json; snap {d}/{c}.s1");
        }
        let _ = writeln!(
            s,
            "for r in $(seq {rounds}); do nftf {d}/b.nft {d}/{c}.nft.us; \
             nftf {d}/a.nft {d}/{c}.nft.us; done"
        );
        if hooked {
            let _ = writeln!(
                s,
                "settle {d}/{c}.json; snap {d}/{c}.s2\n\
                 grep '\\[bpf\\]' /proc/kallsyms > {d}/{c}.ksyms\n\
                 kill -INT $P; wait $P"
            );
        }
    }
    s.push_str(
        "echo $stats > /proc/sys/kernel/bpf_stats_enabled\nip netns del obsvb\necho vm-bench-done\n",
    );
    s
}

/// A legacy change line with everything a person needs to name the writer.
fn fully_attributed(v: &Value) -> bool {
    let p = &v["process"];
    p["pid"].as_u64().unwrap_or(0) > 0
        && p["tid"].as_u64().unwrap_or(0) > 0
        && p["comm"].as_str().is_some_and(|s| !s.is_empty())
        && p["ppid"].as_u64().unwrap_or(0) > 0
        && p["parent_comm"].as_str().is_some_and(|s| !s.is_empty())
        && p["cgroup"].as_u64().is_some()
        && v["netns"].as_u64().unwrap_or(0) > 0
}

/// Median (ms) and count of the microsecond timings the guest wrote into `path`.
fn timings(path: &Path) -> Option<(f64, usize)> {
    let us: Vec<f64> = fs::read_to_string(path)
        .ok()?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if us.is_empty() {
        return None;
    }
    let n = us.len();
    Some((median(&us) / 1000.0, n))
}

/// What one observer printed: its hook placement (ready line), and per backend the change
/// lines and how many of them carry full attribution.
#[derive(Default, Debug, PartialEq)]
struct Printed {
    hooks: String,
    legacy: (u64, u64),
    nft: (u64, u64),
}

fn printed(json: &str) -> Printed {
    let mut p = Printed::default();
    for v in json
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        if v["kind"] == "status" && v["state"] == "ready" {
            p.hooks = v["hooks"].as_str().unwrap_or("").to_string();
        }
        if v["kind"] != "change" {
            continue;
        }
        let slot = match v["backend"].as_str() {
            Some("legacy") => &mut p.legacy,
            Some("nft") => &mut p.nft,
            _ => continue,
        };
        slot.0 += 1;
        slot.1 += u64::from(fully_attributed(&v));
    }
    p
}

fn share((changes, full): (u64, u64)) -> String {
    if changes == 0 {
        "no change lines".to_string()
    } else {
        format!(
            "{full}/{changes} = {:.0}%",
            100.0 * full as f64 / changes as f64
        )
    }
}

fn versus(med: f64, base: f64) -> String {
    format!("{:+.1}%", 100.0 * (med - base) / base)
}

/// The kernel cost tables of one hooked configuration, from its three snapshots (before the
/// restores, between the restores and the nft runs, after the nft runs).
fn kernel_cost(dir: &Path, c: &str, p: &Printed, known: &[String]) -> String {
    let read = |ext: &str| fs::read_to_string(dir.join(format!("{c}.{ext}"))).unwrap_or_default();
    let snaps: Vec<_> = ["s0", "s1", "s2"]
        .iter()
        .map(|s| kstats::parse_dump(&read(s)))
        .collect();
    if snaps.iter().all(Vec::is_empty) {
        return format!("no BPF statistics were read for `--hooks {c}`\n");
    }
    let names = kstats::names_from_kallsyms(&read("ksyms"));
    kstats::table(&[
        kstats::Window {
            load: "restores".into(),
            costs: kstats::diff(&snaps[0], &snaps[1], &names, known),
            changes: p.legacy.0,
        },
        kstats::Window {
            load: "nft -f".into(),
            costs: kstats::diff(&snaps[1], &snaps[2], &names, known),
            changes: p.nft.0,
        },
    ])
}

pub fn run(args: &VmBenchArgs) -> Result<i32> {
    if !cmd::is_root() {
        bail!("vm-bench needs root (it boots a guest and installs what that needs)");
    }
    crate::build()?;
    let tools = match vm::ensure_tools()? {
        Ok(t) => t,
        Err(reason) => bail!("no guest can be had here: {reason}"),
    };
    let observer = crate::target_dir()?.join("release").join("observer");
    let dir = std::env::temp_dir().join(format!("observer-vm-bench-{}", std::process::id()));
    prepare(&dir, &observer, args.rounds)?;
    let start = Instant::now();
    let status = vm::boot_niced(
        &tools,
        tools.bench_kernel(),
        &dir,
        "sh run.sh",
        VM_BENCH_TIMEOUT_SECS,
        10,
        None,
    )?;
    let took = start.elapsed().as_secs_f64();
    let kernel = fs::read_to_string(dir.join("kernel")).unwrap_or_default();
    let (rows, costs) = figures(&dir, status)?;
    let _ = fs::remove_dir_all(&dir);
    let md = section(kernel.trim(), took, args.rounds, &rows, &costs);
    print!("{md}");
    crate::bench::write_benchmarks(START, END, &md)?;
    Ok(0)
}

/// Makes the directory the guest shares: the two versions of the table in each tool's words,
/// and the script.
fn prepare(dir: &Path, observer: &Path, rounds: usize) -> Result<()> {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir)?;
    let a = crate::bench::kube_like_table();
    let b = a.replacen(
        "COMMIT",
        ":OBS-BENCH-EXTRA - [0:0]\n-A OBS-BENCH-EXTRA -p tcp --dport 9 -j DROP\nCOMMIT",
        1,
    );
    fs::write(dir.join("a.rules"), &a)?;
    fs::write(dir.join("b.rules"), &b)?;
    fs::write(
        dir.join("a.nft"),
        crate::bench::kube_like_nft(NFT_TABLE, false),
    )?;
    fs::write(
        dir.join("b.nft"),
        crate::bench::kube_like_nft(NFT_TABLE, true),
    )?;
    fs::write(dir.join("run.sh"), guest_script(dir, observer, rounds))?;
    Ok(())
}

/// What the guest left in `dir`: one table row per configuration, and the kernel cost tables
/// of the hooked ones. Fails when a configuration has no restore timings (`status`: the
/// guest's).
fn figures(dir: &Path, status: i32) -> Result<(Vec<String>, String)> {
    let known = kstats::source_program_names(&crate::root().join("observer-ebpf").join("src"));
    let mut rows = Vec::new();
    let mut costs = String::new();
    let (mut base, mut nft_base) = (f64::NAN, f64::NAN);
    for c in CONFIGS {
        let err = || {
            fs::read_to_string(dir.join(format!("{c}.err")))
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        let Some((med, n)) = timings(&dir.join(format!("{c}.us"))) else {
            bail!(
                "no restore timings for {c} (guest status {status}): {}",
                err()
            );
        };
        let nft = timings(&dir.join(format!("{c}.nft.us")));
        if *c == "none" {
            base = med;
            nft_base = nft.map_or(f64::NAN, |t| t.0);
        }
        let p = printed(&fs::read_to_string(dir.join(format!("{c}.json"))).unwrap_or_default());
        let hooked = !c.starts_with("none");
        let observer_col = if hooked {
            format!("`--hooks {c}` ({})", p.hooks)
        } else {
            "none".to_string()
        };
        let (legacy_share, nft_share) = if hooked {
            (share(p.legacy), share(p.nft))
        } else {
            (String::new(), String::new())
        };
        let nft_cols = match nft {
            Some((m, k)) => format!("{m:.0} ms (median of {k}) | {}", versus(m, nft_base)),
            None => format!("NOT MEASURED: {} | ", err()),
        };
        rows.push(format!(
            "| {observer_col} | {med:.0} ms (median of {n}) | {} | {legacy_share} | {nft_cols} | \
             {nft_share} |",
            versus(med, base)
        ));
        if hooked {
            let _ = write!(
                costs,
                "\n#### `--hooks {c}`\n\n{}",
                kernel_cost(dir, c, &p, &known)
            );
        }
    }
    Ok((rows, costs))
}

/// The section of BENCHMARKS.md: the guest, what was timed, the table of `rows`, then the
/// kernel cost tables `costs`.
fn section(kernel: &str, took: f64, rounds: usize, rows: &[String], costs: &str) -> String {
    let mut md = format!(
        "{START}\n<!-- Generated by `cargo xtask vm-bench`: edits between these markers are \
         overwritten. -->\n\n## Hook overhead on a writer (QEMU guest)\n\n\
         - kernel: {} (QEMU software emulation, 2 vCPUs, 2 GiB; guest boot and run {took:.0} s)\n\
         - command: `cargo xtask vm-bench --rounds {}`\n\
         - what: wall time of `ip netns exec NS iptables-legacy-restore` of the 20,000-rule \
         filter table, then of `ip netns exec NS nft -f` of the same table in nftables' words \
         (20,003 rules in 2,000 chains; the file flushes the table first, so every rule is \
         replaced), each alternating two versions (each run is a change), with no observer and \
         with `observer tail --json --hooks B --netns NS`; attribution = change lines of that \
         backend with pid, tid, comm, ppid, parent_comm, cgroup and netns all known\n\
         - note: the difference includes observer's own work after each change (the read and \
         diff of the 20,000-rule x_tables table, the 40,000 nftables notifications of a run) on \
         the same 2 vCPUs as the writer; it is an upper bound of the hooks' cost\n\n\
         | observer | restore wall time | vs first `none` | legacy attribution | `nft -f` wall \
         time | vs first `none` | nft attribution |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
        kernel, rounds
    );
    for r in rows {
        md.push_str(r);
        md.push('\n');
    }
    md.push_str(
        "\n### Kernel cost per eBPF program (QEMU guest)\n\n\
         The kernel's BPF statistics (`kernel.bpf_stats_enabled=1` for the whole guest run) of \
         the programs the observer process holds, read from `/proc/PID/fdinfo` before the \
         restores, between the restores and the `nft -f` runs, and after them (each time once \
         its output had stopped growing); names from the kernel's symbols. runs = `run_cnt`, \
         total = `run_time_ns`, per change = total over the change lines observer printed for \
         that load. Syscall tracepoint programs run on every such syscall in the guest and \
         return early for most; every run is counted. Under software emulation a nanosecond \
         is many times a real one: compare backends with each other.\n",
    );
    md.push_str(costs);
    md.push_str(END);
    md.push('\n');
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configuration_is_timed_and_each_backend_forced() {
        let s = guest_script(Path::new("/d"), Path::new("/o"), 3);
        for c in CONFIGS {
            assert!(s.contains(&format!("/d/{c}.us")), "{c}: {s}");
        }
        for b in ["fentry", "kprobe", "tracepoint"] {
            assert!(s.contains(&format!("--hooks {b} --netns obsvb")), "{b}");
        }
        assert!(!s.contains("--hooks none"));
        // nft -f is timed in every configuration too, and each hooked one is measured by the
        // kernel's statistics before, between and after the two loads.
        for c in CONFIGS {
            assert!(s.contains(&format!("nftf /d/b.nft /d/{c}.nft.us")), "{c}");
        }
        for b in ["fentry", "kprobe", "tracepoint"] {
            for snap in ["s0", "s1", "s2"] {
                assert!(s.contains(&format!("snap /d/{b}.{snap}")), "{b} {snap}");
            }
            assert!(s.contains(&format!("/proc/kallsyms > /d/{b}.ksyms")), "{b}");
        }
        assert!(s.contains("echo 1 > /proc/sys/kernel/bpf_stats_enabled"));
        assert!(s.contains("echo $stats > /proc/sys/kernel/bpf_stats_enabled"));
        // The script is valid sh.
        let path = std::env::temp_dir().join(format!("vm-bench-script-{}.sh", std::process::id()));
        fs::write(&path, &s).unwrap();
        let ok = std::process::Command::new("sh")
            .arg("-n")
            .arg(&path)
            .status()
            .unwrap();
        let _ = fs::remove_file(&path);
        assert!(ok.success(), "{s}");
    }

    #[test]
    fn change_lines_are_counted_per_backend() {
        let full = r#""netns":5,"process":{"pid":1,"tid":1,"comm":"x","ppid":2,"parent_comm":"y","cgroup":3}"#;
        let json = format!(
            "{{\"kind\":\"status\",\"state\":\"ready\",\"hooks\":\"x_tables=kprobe\"}}\n\
             {{\"kind\":\"change\",\"backend\":\"legacy\",{full}}}\n\
             {{\"kind\":\"change\",\"backend\":\"nft\",{full}}}\n\
             {{\"kind\":\"change\",\"backend\":\"nft\",\"netns\":5,\"process\":{{\"pid\":1}}}}\n\
             not json\n"
        );
        let p = printed(&json);
        assert_eq!(
            p,
            Printed {
                hooks: "x_tables=kprobe".into(),
                legacy: (1, 1),
                nft: (2, 1),
            }
        );
        assert_eq!(share(p.nft), "1/2 = 50%");
        assert_eq!(share((0, 0)), "no change lines");
        assert_eq!(versus(110.0, 100.0), "+10.0%");
    }

    #[test]
    fn attribution_needs_every_field() {
        let full: Value = serde_json::from_str(
            r#"{"netns":5,"process":{"pid":1,"tid":1,"comm":"x","ppid":2,"parent_comm":"y","cgroup":3}}"#,
        )
        .unwrap();
        assert!(fully_attributed(&full));
        let mut no_parent = full.clone();
        no_parent["process"]["ppid"] = Value::Null;
        assert!(!fully_attributed(&no_parent));
    }
}
