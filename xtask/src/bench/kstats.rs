//! What observer's eBPF programs cost in the kernel, from the kernel's own BPF statistics.
//!
//! With `kernel.bpf_stats_enabled=1` the kernel counts, per loaded program, how many times it
//! ran (`run_cnt`) and the nanoseconds it spent (`run_time_ns`). Both show in the fdinfo of a
//! program's file descriptor, so the programs of one observer process are exactly those whose
//! descriptors it holds (`/proc/PID/fdinfo/*` with a `prog_id`). Their names come from
//! `/proc/kallsyms` (`bpf_prog_<tag>_<name>`, 15 characters at most), completed with the
//! program names declared in observer-ebpf's sources. A measurement is the difference of two
//! snapshots taken around a load.
//!
//! The same parser reads a guest's snapshots: the guest writes each fdinfo file after a line
//! `fdinfo <path>`, which is what [`dump_pid`] produces on the host.

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
    fs,
    path::Path,
};

use anyhow::{Context as _, Result};

const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// Keeps `kernel.bpf_stats_enabled` at 1 while it lives; puts the previous value back when
/// dropped (also when the measurement fails or panics).
pub struct StatsGuard {
    previous: String,
}

impl StatsGuard {
    pub fn enable() -> Result<StatsGuard> {
        let previous = fs::read_to_string(SYSCTL)
            .with_context(|| {
                format!("reading {SYSCTL} (the kernel's BPF statistics need Linux 5.1 or later)")
            })?
            .trim()
            .to_owned();
        fs::write(SYSCTL, "1").with_context(|| format!("writing 1 to {SYSCTL} (needs root)"))?;
        Ok(StatsGuard { previous })
    }
}

impl Drop for StatsGuard {
    fn drop(&mut self) {
        if let Err(e) = fs::write(SYSCTL, &self.previous) {
            eprintln!(
                "xtask: warning: could not put {SYSCTL} back to {}: {e}; run `sysctl -w \
                 kernel.bpf_stats_enabled={}`",
                self.previous, self.previous
            );
        }
    }
}

/// One program's counters at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgStats {
    pub id: u32,
    pub tag: String,
    pub run_cnt: u64,
    pub run_time_ns: u64,
}

/// The fdinfo files of `pid`, each after a line `fdinfo <path>` (the format [`parse_dump`]
/// reads, and the guest's shell writes).
pub fn dump_pid(pid: u32) -> Result<String> {
    let dir = format!("/proc/{pid}/fdinfo");
    let mut out = String::new();
    for e in fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let path = e?.path();
        // A descriptor closed in between is not an error.
        if let Ok(text) = fs::read_to_string(&path) {
            let _ = writeln!(out, "fdinfo {}", path.display());
            out.push_str(&text);
        }
    }
    Ok(out)
}

/// The programs in a dump of fdinfo files, once each (a program may have several descriptors).
/// Files without `prog_id` and `run_cnt` (links, maps, sockets...) are skipped.
pub fn parse_dump(text: &str) -> Vec<ProgStats> {
    let mut found: BTreeMap<u32, ProgStats> = BTreeMap::new();
    let mut flush = |fields: &HashMap<&str, &str>| {
        let num = |k: &str| fields.get(k).and_then(|v| v.parse::<u64>().ok());
        if let (Some(id), Some(run_cnt), Some(run_time_ns)) =
            (num("prog_id"), num("run_cnt"), num("run_time_ns"))
        {
            let Ok(id) = u32::try_from(id) else { return };
            found.insert(
                id,
                ProgStats {
                    id,
                    tag: fields.get("prog_tag").unwrap_or(&"").to_string(),
                    run_cnt,
                    run_time_ns,
                },
            );
        }
    };
    let mut fields = HashMap::new();
    for line in text.lines() {
        if line.starts_with("fdinfo ") {
            flush(&fields);
            fields.clear();
        } else if let Some((k, v)) = line.split_once(':') {
            fields.insert(k.trim(), v.trim());
        }
    }
    flush(&fields);
    found.into_values().collect()
}

/// Tag -> name of the JIT-compiled programs in a kallsyms text (`bpf_prog_<tag>_<name>`).
pub fn names_from_kallsyms(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter_map(|sym| sym.strip_prefix("bpf_prog_"))
        .filter_map(|rest| rest.split_once('_'))
        .map(|(tag, name)| (tag.to_owned(), name.to_owned()))
        .collect()
}

/// The eBPF program names declared in observer-ebpf's sources: the function after each
/// program attribute (`#[tracepoint]`, `#[kprobe]`, `#[fexit(...)]`...).
pub fn source_program_names(ebpf_src: &Path) -> Vec<String> {
    const ATTRS: &[&str] = &[
        "#[tracepoint",
        "#[kprobe",
        "#[kretprobe",
        "#[fentry",
        "#[fexit",
        "#[raw_tracepoint",
        "#[btf_tracepoint",
        "#[lsm",
        "#[cgroup_sockopt",
    ];
    let mut names = Vec::new();
    let Ok(dir) = fs::read_dir(ebpf_src) else {
        return names;
    };
    for e in dir.flatten() {
        let Ok(text) = fs::read_to_string(e.path()) else {
            continue;
        };
        let mut after_attr = false;
        for line in text.lines().map(str::trim) {
            if ATTRS.iter().any(|a| line.starts_with(a)) {
                after_attr = true;
            } else if after_attr {
                if let Some(rest) = line.strip_prefix("pub fn ").or(line.strip_prefix("fn ")) {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    names.push(name);
                    after_attr = false;
                } else if !line.starts_with("#[") {
                    after_attr = false;
                }
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

/// The kernel keeps 15 characters of a program's name: give back the one source name it
/// stands for, when exactly one starts with it.
pub fn complete_name(short: &str, known: &[String]) -> String {
    let mut hits = known.iter().filter(|k| k.starts_with(short));
    match (hits.next(), hits.next()) {
        (Some(one), None) => one.clone(),
        _ => short.to_owned(),
    }
}

/// One program's share of a measured window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cost {
    pub name: String,
    pub runs: u64,
    pub ns: u64,
}

/// What each program did between two snapshots. A program that is only in `after` counts from
/// zero; one that is gone from `after` is left out (it cannot have run in the window's end).
pub fn diff(
    before: &[ProgStats],
    after: &[ProgStats],
    names: &HashMap<String, String>,
    known: &[String],
) -> Vec<Cost> {
    let old: HashMap<u32, &ProgStats> = before.iter().map(|p| (p.id, p)).collect();
    let mut out: Vec<Cost> = after
        .iter()
        .map(|p| {
            let (cnt0, ns0) = old
                .get(&p.id)
                .map_or((0, 0), |o| (o.run_cnt, o.run_time_ns));
            let name = match names.get(&p.tag) {
                Some(short) => complete_name(short, known),
                None => format!("prog {} (tag {})", p.id, p.tag),
            };
            Cost {
                name,
                runs: p.run_cnt.saturating_sub(cnt0),
                ns: p.run_time_ns.saturating_sub(ns0),
            }
        })
        .collect();
    out.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.name.cmp(&b.name)));
    out
}

/// `ns` over `per` as a short figure: `-` when there is nothing to divide by.
pub fn per(ns: u64, per: u64) -> String {
    if per == 0 {
        return "-".into();
    }
    let v = ns as f64 / per as f64;
    if v >= 1e9 {
        format!("{:.2} s", v / 1e9)
    } else if v >= 1_000_000.0 {
        format!("{:.2} ms", v / 1e6)
    } else if v >= 10_000.0 {
        format!("{:.1} µs", v / 1e3)
    } else if v >= 100.0 {
        format!("{v:.0} ns")
    } else {
        format!("{v:.1} ns")
    }
}

/// A total in nanoseconds, in the unit that reads best.
pub fn total(ns: u64) -> String {
    per(ns, 1)
}

/// One measured window: what each program did, and how many changes observer reported in it.
#[derive(Clone, Debug)]
pub struct Window {
    /// What ran in the window (a column heading).
    pub load: String,
    pub costs: Vec<Cost>,
    pub changes: u64,
}

/// A markdown table of the windows side by side: one row per program (in the order of the
/// first window, then programs only the later ones have), columns runs, total, per run and per
/// reported change for each window, and a last row for all programs together.
pub fn table(windows: &[Window]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for w in windows {
        for c in &w.costs {
            if !names.contains(&c.name.as_str()) {
                names.push(&c.name);
            }
        }
    }
    let mut md = String::from("| program |");
    let mut rule = String::from("| --- |");
    for w in windows {
        let _ = write!(
            md,
            " {0}: runs | total | per run | per change ({1} reported) |",
            w.load, w.changes
        );
        rule.push_str(" ---: | ---: | ---: | ---: |");
    }
    md.push('\n');
    md.push_str(&rule);
    md.push('\n');
    let cells = |c: Option<&Cost>, changes: u64| match c {
        Some(c) => format!(
            " {} | {} | {} | {} |",
            c.runs,
            total(c.ns),
            per(c.ns, c.runs),
            per(c.ns, changes)
        ),
        None => " - | - | - | - |".to_owned(),
    };
    for n in &names {
        let _ = write!(md, "| `{n}` |");
        for w in windows {
            md.push_str(&cells(w.costs.iter().find(|c| c.name == *n), w.changes));
        }
        md.push('\n');
    }
    let _ = write!(md, "| all {} programs |", names.len());
    for w in windows {
        let (runs, ns) = w
            .costs
            .iter()
            .fold((0, 0), |(r, n), c| (r + c.runs, n + c.ns));
        let all = Cost {
            name: String::new(),
            runs,
            ns,
        };
        md.push_str(&cells(Some(&all), w.changes));
    }
    md.push('\n');
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = "fdinfo /proc/7/fdinfo/0\npos:\t0\nflags:\t02\nmnt_id:\t15\n\
fdinfo /proc/7/fdinfo/9\npos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t2063\nprog_type:\t5\n\
prog_jited:\t1\nprog_tag:\t3b185187f1855c4c\nmemlock:\t4096\nprog_id:\t41\nrun_time_ns:\t5000\n\
run_cnt:\t20\nrecursion_misses:\t0\nverified_insns:\t300\n\
fdinfo /proc/7/fdinfo/10\nlink_type:\tperf\nlink_id:\t3\nprog_tag:\t3b185187f1855c4c\nprog_id:\t41\n\
fdinfo /proc/7/fdinfo/11\nprog_type:\t2\nprog_tag:\taaaa000000000001\nprog_id:\t42\n\
run_time_ns:\t0\nrun_cnt:\t0\n";

    #[test]
    fn programs_are_read_from_fdinfo_once_each() {
        let p = parse_dump(DUMP);
        assert_eq!(
            p,
            vec![
                ProgStats {
                    id: 41,
                    tag: "3b185187f1855c4c".into(),
                    run_cnt: 20,
                    run_time_ns: 5000
                },
                ProgStats {
                    id: 42,
                    tag: "aaaa000000000001".into(),
                    run_cnt: 0,
                    run_time_ns: 0
                },
            ]
        );
        assert!(parse_dump("fdinfo x\npos:\t0\n").is_empty());
    }

    #[test]
    fn a_window_is_the_difference_of_two_snapshots_named_from_kallsyms() {
        let before = parse_dump(DUMP);
        let after = parse_dump(
            &DUMP
                .replace("run_time_ns:\t5000", "run_time_ns:\t125000")
                .replace("run_cnt:\t20", "run_cnt:\t1020")
                .replace(
                    "run_time_ns:\t0\nrun_cnt:\t0",
                    "run_time_ns:\t900\nrun_cnt:\t3",
                ),
        );
        let syms = "ffffffffc0001000 t bpf_prog_3b185187f1855c4c_setsockopt_ente\t[bpf]\n\
                    ffffffffc0002000 t bpf_prog_aaaa000000000001_xt_kprobe\t[bpf]\n\
                    ffffffff81000000 T _stext\n";
        let names = names_from_kallsyms(syms);
        let known = vec![
            "setsockopt_enter".to_string(),
            "setsockopt_exit".to_string(),
        ];
        let c = diff(&before, &after, &names, &known);
        assert_eq!(
            c,
            vec![
                Cost {
                    name: "setsockopt_enter".into(),
                    runs: 1000,
                    ns: 120_000
                },
                Cost {
                    name: "xt_kprobe".into(),
                    runs: 3,
                    ns: 900
                },
            ]
        );
        // Unknown tag: named by id; a program new in `after` counts from zero.
        let c = diff(&[], &after, &HashMap::new(), &known);
        assert_eq!(c[0].name, "prog 41 (tag 3b185187f1855c4c)");
        assert_eq!(c[0].runs, 1020);
    }

    #[test]
    fn truncated_names_are_completed_only_when_unambiguous() {
        let known = vec![
            "setsockopt_enter".to_string(),
            "setsockopt_exit".to_string(),
            "send_exit".to_string(),
        ];
        assert_eq!(complete_name("setsockopt_ente", &known), "setsockopt_enter");
        assert_eq!(complete_name("setsockopt_", &known), "setsockopt_");
        assert_eq!(complete_name("send_exit", &known), "send_exit");
        assert_eq!(complete_name("other", &known), "other");
    }

    #[test]
    fn figures_pick_a_readable_unit() {
        assert_eq!(per(120_000, 1000), "120 ns");
        assert_eq!(per(905, 100), "9.1 ns");
        assert_eq!(per(5, 0), "-");
        assert_eq!(per(45_000, 1), "45.0 µs");
        assert_eq!(total(3_250_000), "3.25 ms");
        let a = Cost {
            name: "a".into(),
            runs: 10,
            ns: 2000,
        };
        let b = Cost {
            name: "b".into(),
            runs: 0,
            ns: 0,
        };
        let md = table(&[
            Window {
                load: "L".into(),
                costs: vec![a.clone(), b],
                changes: 4,
            },
            Window {
                load: "N".into(),
                costs: vec![a],
                changes: 0,
            },
        ]);
        assert_eq!(
            md,
            "| program | L: runs | total | per run | per change (4 reported) | N: runs | \
             total | per run | per change (0 reported) |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n\
             | `a` | 10 | 2000 ns | 200 ns | 500 ns | 10 | 2000 ns | 200 ns | - |\n\
             | `b` | 0 | 0.0 ns | - | 0.0 ns | - | - | - | - |\n\
             | all 2 programs | 10 | 2000 ns | 200 ns | 500 ns | 10 | 2000 ns | 200 ns | - |\n"
        );
    }

    #[test]
    fn program_names_come_from_the_ebpf_sources() {
        let dir = std::env::temp_dir().join(format!("kstats-src-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("a.rs"),
            "#[tracepoint]\npub fn setsockopt_enter(ctx: C) -> u32 {}\n\
             #[fexit(function = \"nf_setsockopt\")]\n#[allow(x)]\npub fn xt_fexit(c: C) {}\n\
             #[inline(always)]\nfn helper() {}\n#[map]\nstatic M: u8 = 0;\nfn not_a_program() {}\n",
        )
        .unwrap();
        let names = source_program_names(&dir);
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(names, ["setsockopt_enter", "xt_fexit"]);
        // The real sources declare programs too.
        let real = source_program_names(&crate::root().join("observer-ebpf").join("src"));
        assert!(!real.is_empty());
    }
}
