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

use anyhow::{bail, Context as _, Result};
use clap::Args;
use serde_json::Value;

use crate::{cmd, vm};

/// The configurations timed, in order (`none` twice: before and after).
const CONFIGS: &[&str] = &["none", "fentry", "kprobe", "tracepoint", "none2"];

const START: &str = "<!-- vm-bench:start -->";
const END: &str = "<!-- vm-bench:end -->";

#[derive(Args)]
pub struct VmBenchArgs {
    /// Timed restores per configuration
    #[arg(long, default_value_t = 6)]
    rounds: usize,
}

fn guest_script(dir: &Path, observer: &Path, rounds: usize) -> String {
    let d = dir.display();
    let bin = observer.display();
    let mut s = format!(
        "#!/bin/sh\n\
         for m in ip_tables iptable_filter x_tables xt_comment xt_statistic xt_tcpudp \
         xt_multiport xt_mark ipt_REJECT nf_tables; do modprobe $m 2>/dev/null; done\n\
         uname -r > {d}/kernel\n\
         ip netns add obsvb\n\
         ip netns exec obsvb iptables-legacy-restore < {d}/a.rules || echo 'vm: restore failed'\n\
         restore() {{ f=$1; s=$(date +%s%N); ip netns exec obsvb iptables-legacy-restore < $f; \
         e=$(date +%s%N); echo $(( (e - s) / 1000 )) >> $2; }}\n"
    );
    for c in CONFIGS {
        let hooks = c.trim_end_matches('2');
        if hooks != "none" {
            let _ = write!(
                s,
                "{bin} tail --json --hooks {hooks} --netns obsvb > {d}/{c}.json 2> {d}/{c}.err &\n\
                 P=$!\n\
                 for i in $(seq 600); do grep -q '\"ready\"' {d}/{c}.json 2>/dev/null && break; \
                 kill -0 $P 2>/dev/null || break; sleep 0.2; done\n"
            );
        }
        let _ = writeln!(
            s,
            "for r in $(seq {rounds}); do restore {d}/b.rules {d}/{c}.us; \
             restore {d}/a.rules {d}/{c}.us; done"
        );
        if hooks != "none" {
            s.push_str("sleep 5; kill -INT $P; wait $P\n");
        }
    }
    s.push_str("ip netns del obsvb\necho vm-bench-done\n");
    s
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
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
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    let a = crate::bench::kube_like_table();
    let b = a.replacen(
        "COMMIT",
        ":OBS-BENCH-EXTRA - [0:0]\n-A OBS-BENCH-EXTRA -p tcp --dport 9 -j DROP\nCOMMIT",
        1,
    );
    fs::write(dir.join("a.rules"), &a)?;
    fs::write(dir.join("b.rules"), &b)?;
    fs::write(
        dir.join("run.sh"),
        guest_script(&dir, &observer, args.rounds),
    )?;
    let start = Instant::now();
    let status = vm::boot(&tools, &dir, "sh run.sh")?;
    let took = start.elapsed().as_secs_f64();
    let kernel = fs::read_to_string(dir.join("kernel")).unwrap_or_default();
    let mut rows = Vec::new();
    let mut base = f64::NAN;
    for c in CONFIGS {
        let mut us: Vec<f64> = fs::read_to_string(dir.join(format!("{c}.us")))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if us.is_empty() {
            let err = fs::read_to_string(dir.join(format!("{c}.err"))).unwrap_or_default();
            bail!("no timings for {c} (guest status {status}): {}", err.trim());
        }
        let n = us.len();
        let med = median(&mut us) / 1000.0;
        if *c == "none" {
            base = med;
        }
        let (mut changes, mut full, mut hooks) = (0usize, 0usize, String::new());
        if let Ok(json) = fs::read_to_string(dir.join(format!("{c}.json"))) {
            for v in json
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            {
                if v["kind"] == "status" && v["state"] == "ready" {
                    hooks = v["hooks"].as_str().unwrap_or("").to_string();
                }
                if v["kind"] == "change" && v["backend"] == "legacy" {
                    changes += 1;
                    full += usize::from(fully_attributed(&v));
                }
            }
        }
        let observer_col = if c.starts_with("none") {
            "none".to_string()
        } else {
            format!("`--hooks {c}` ({hooks})")
        };
        let attribution = if c.starts_with("none") {
            String::new()
        } else if changes == 0 {
            "no change lines".to_string()
        } else {
            format!(
                "{full}/{changes} = {:.0}%",
                100.0 * full as f64 / changes as f64
            )
        };
        rows.push(format!(
            "| {observer_col} | {med:.0} ms (median of {n}) | {:+.1}% | {attribution} |",
            100.0 * (med - base) / base
        ));
    }
    let _ = fs::remove_dir_all(&dir);
    let mut md = format!(
        "{START}\n<!-- Generated by `cargo xtask vm-bench`: edits between these markers are \
         overwritten. -->\n\n## Hook overhead on a writer (QEMU guest)\n\n\
         - kernel: {} (QEMU software emulation, 2 vCPUs, 2 GiB; guest boot and run {took:.0} s)\n\
         - command: `cargo xtask vm-bench --rounds {}`\n\
         - what: wall time of `ip netns exec NS iptables-legacy-restore` of the 20,000-rule \
         filter table, alternating two versions (each restore is a change), with no observer \
         and with `observer tail --json --hooks B --netns NS`; attribution = legacy change lines \
         with pid, tid, comm, ppid, parent_comm, cgroup and netns all known\n\
         - note: the difference includes observer's own read and diff of the 20,000-rule table \
         after each change, on the same 2 vCPUs as the writer; it is an upper bound of the \
         hooks' cost\n\n\
         | observer | restore wall time | vs first `none` | full attribution |\n\
         | --- | --- | --- | --- |\n",
        kernel.trim(),
        args.rounds
    );
    for r in &rows {
        md.push_str(r);
        md.push('\n');
    }
    md.push_str(END);
    md.push('\n');
    print!("{md}");
    let path = crate::root().join("BENCHMARKS.md");
    let old = fs::read_to_string(&path).unwrap_or_default();
    let new = match (old.find(START), old.find(END)) {
        (Some(s), Some(e)) if s < e => {
            let rest = &old[e + END.len()..];
            format!("{}{}{}", &old[..s], md.trim_end(), rest)
        }
        _ => format!("{}\n{md}", old.trim_end()),
    };
    fs::write(&path, new).with_context(|| format!("writing {}", path.display()))?;
    Ok(0)
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
