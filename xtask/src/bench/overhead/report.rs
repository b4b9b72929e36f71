//! bench-overhead's report: one machine's workloads table (wall time, then the writers' own
//! CPU time, off against each backend) and each backend's programs from the kernel's BPF
//! statistics; and the section of BENCHMARKS.md that holds every machine's, between the
//! bench-overhead markers.

use std::{collections::BTreeMap, fmt::Write as _, fs, path::Path};

use anyhow::{bail, Result};

use super::{what, END, START, UNRELATED, WRITERS};
use crate::bench::{kstats, median_opt};

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
pub(super) fn report(
    dir: &Path,
    label: &str,
    configs: &[&str],
    rounds: usize,
    took: f64,
) -> Result<String> {
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

/// The whole section: what the figures are, then each machine's report (`sections`), then the
/// guests' sections `kept` from an earlier run (`--host-only`); `skipped` says why no guest ran.
pub(super) fn section(
    rounds: usize,
    sections: &[String],
    skipped: Option<String>,
    kept: Option<String>,
) -> String {
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
        rounds
    );
    if let Some(why) = skipped {
        let _ = writeln!(md, "- the guests did not run here: {why}");
    }
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
    md
}

/// The guests' sections of the figures between the markers of `text` (from the first guest
/// heading to the end marker), for a `--host-only` run to keep.
pub(super) fn guest_sections(text: &str) -> Option<String> {
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
