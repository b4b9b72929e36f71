//! The soak's report: the aims judged at the end (flat memory, nothing dropped or lost, no
//! descriptor growth, every `seq` exactly once over SSE), the summary printed, and with
//! `--bench` the section written into BENCHMARKS.md between its soak markers.

use std::fmt::Write as _;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::thread;

use anyhow::Result;

use super::sample::Row;
use super::signals::interrupted;
use super::{Outcome, Shared, SoakArgs, BIG_RULES};
use crate::cmd;

const START: &str = "<!-- soak:start -->";
const END: &str = "<!-- soak:end -->";

fn mean(rows: &[Row], from: u64, to: u64) -> f64 {
    let v: Vec<f64> = rows
        .iter()
        .filter(|r| (from..=to).contains(&r.minute))
        .map(|r| r.rss_mib)
        .collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// One aim: what, the figure, held or not (`None`: too few minutes to judge).
struct Aim {
    name: &'static str,
    figure: String,
    aim: &'static str,
    held: Option<bool>,
}

pub(super) fn report(args: &SoakArgs, sh: &Shared, o: &Outcome) -> Result<i32> {
    let done = o.rows.len() as u64;
    let cut_short = interrupted() || done < args.minutes;
    let aims = aims(sh, o);
    let info = info(sh, o);
    print_summary(args, cut_short, &aims, &info, o);
    let all_held = aims.iter().all(|a| a.held == Some(true));

    if cut_short {
        eprintln!("xtask: soak: cut short, so BENCHMARKS.md is left as it is");
        return Ok(130);
    }
    if args.bench {
        let section = section(args, &aims, &info, &o.rows);
        let path = crate::bench::write_benchmarks(START, END, &section)?;
        eprintln!("xtask: wrote the figures into {}", path.display());
    }
    if !all_held {
        eprintln!("xtask: soak: an aim was missed (above)");
        return Ok(1);
    }
    Ok(0)
}

/// Flat memory: minutes 10-20 against the last 10 for 30 minutes or more; else the middle
/// third against the last. The figure, and whether it held (`None` under 3 minutes).
fn memory_aim(rows: &[Row]) -> (String, Option<bool>) {
    let n = rows.len() as u64;
    if n >= 3 {
        let (a, b, c, d, how) = if n >= 30 {
            (10, 20, n - 9, n, "")
        } else {
            let t = n / 3;
            (
                t + 1,
                2 * t,
                2 * t + 1,
                n,
                " (a run under 30 minutes: the middle third against the last)",
            )
        };
        let (base, tail) = (mean(rows, a, b), mean(rows, c, d));
        let growth = (tail / base - 1.0) * 100.0;
        let span = |a: u64, b: u64| {
            if a == b {
                format!("minute {a}")
            } else {
                format!("minutes {a}–{b}")
            }
        };
        let (late, early) = (span(c, d), span(a, b));
        (
            format!(
                "mean RSS of {late} {tail:.1} MiB against {early} {base:.1} MiB: \
                 {growth:+.1} %{how}"
            ),
            Some(growth <= 5.0),
        )
    } else {
        ("fewer than 3 minutes".to_owned(), None)
    }
}

/// The aims, judged on what the run saw.
fn aims(sh: &Shared, o: &Outcome) -> [Aim; 4] {
    let done = o.rows.len() as u64;
    let (memory_aim, memory_held) = memory_aim(&o.rows);
    let e = o.end;
    let drops = e.dropped + e.failed + e.gaps + e.lost;
    let fds1 = o.rows.first().map_or(0, |r| r.fds);
    let sse = &sh.sse;
    let sse_last = sse.last.load(Ordering::SeqCst);
    // Changes the client never got by the end count as gaps too.
    let sse_gaps = sse.gaps.load(Ordering::Relaxed) + o.stdout_last.saturating_sub(sse_last);
    let sse_dups = sse.duplicates.load(Ordering::Relaxed);
    let sse_mismatched = sse.mismatched.load(Ordering::Relaxed);
    [
        Aim {
            name: "flat memory",
            figure: memory_aim,
            aim: "no more than 5 % growth",
            held: memory_held,
        },
        Aim {
            name: "nothing dropped or lost",
            figure: format!(
                "record rows dropped {}, failed {}; gaps {}; kernel records lost {}",
                e.dropped, e.failed, e.gaps, e.lost
            ),
            aim: "0",
            held: Some(drops == 0),
        },
        Aim {
            name: "no descriptor growth",
            figure: format!("{} open at the end, {fds1} after minute 1", o.end_fds),
            aim: "no more at the end",
            held: (done >= 1).then_some(o.end_fds <= fds1),
        },
        Aim {
            name: "SSE: every seq exactly once",
            figure: format!(
                "{} events (seq 1–{sse_last}) over {} connections: {sse_gaps} missing, \
                 {sse_dups} twice{}",
                sse.events.load(Ordering::Relaxed),
                sse.connections.load(Ordering::Relaxed),
                if sse_mismatched > 0 {
                    format!(", {sse_mismatched} with an id other than their seq")
                } else {
                    String::new()
                }
            ),
            aim: "0 missing, 0 twice",
            held: Some(sse_gaps == 0 && sse_dups == 0 && sse_mismatched == 0 && sse_last > 0),
        },
    ]
}

/// The run's other figures, for the summary: the load, observer's cost, the churn, stdout and
/// observer's exit, and the descriptors that grew.
fn info(sh: &Shared, o: &Outcome) -> Vec<String> {
    let done = o.rows.len() as u64;
    let e = o.end;
    let fds1 = o.rows.first().map_or(0, |r| r.fds);
    let sse = &sh.sse;
    let mut info = vec![
        format!(
            "load: {:.1} min, {} changes streamed on stdout ({:.0} per second; {} of them from \
             namespaces not the soak's; observer counted {} nft, {} legacy); {} nft and {} legacy \
             batches, {} failed{}",
            o.load_s / 60.0,
            o.changes,
            o.changes as f64 / o.load_s,
            sh.other_changes.load(Ordering::Relaxed),
            e.nft,
            e.legacy,
            sh.nft_batches.load(Ordering::Relaxed),
            sh.legacy_batches.load(Ordering::Relaxed),
            sh.load_failures.load(Ordering::Relaxed),
            sh.first_failure
                .lock()
                .ok()
                .and_then(|f| f.clone())
                .map_or(String::new(), |f| format!(" (first: {f})"))
        ),
        format!(
            "observer: {:.1} % of one core on average, peak RSS {:.1} MiB; record {:.1} MiB \
             (file + WAL) at the end, rows written {}, expired {}",
            o.cpu_pct, o.rss_peak_mib, o.record_mib, e.written, e.expired
        ),
        format!(
            "namespace churn: {} namespaces made, written and deleted; all their changes \
             streamed for {}",
            sh.churn_made.load(Ordering::Relaxed),
            sh.churn_complete.load(Ordering::Relaxed)
        ),
        format!(
            "stdout: last seq {}, {} numbering jumps, {} gap lines; SSE connection errors {}",
            o.stdout_last,
            sh.stdout_seq_jumps.load(Ordering::Relaxed),
            sh.gap_lines.load(Ordering::Relaxed),
            sse.errors.load(Ordering::Relaxed)
        ),
        format!(
            "observer exited with status {}; {} lines on its stderr",
            o.exit, o.stderr_lines
        ),
    ];
    if done >= 1 && o.end_fds > fds1 {
        let mut diff = Vec::new();
        for (k, &v) in &o.fds_end {
            let before = o.fds_minute1.get(k).copied().unwrap_or(0);
            if v > before {
                diff.push(format!("{k} {before} -> {v}"));
            }
        }
        info.push(format!("descriptors that grew: {}", diff.join(", ")));
    }
    info
}

/// Prints the summary: the aims, then the other figures and the end of observer's stderr.
fn print_summary(args: &SoakArgs, cut_short: bool, aims: &[Aim], info: &[String], o: &Outcome) {
    let done = o.rows.len() as u64;
    println!(
        "soak: summary after {done} of {} minutes{}",
        args.minutes,
        if cut_short { " (cut short)" } else { "" }
    );
    for a in aims {
        println!(
            "soak: aim {}: {} (aim: {}): {}",
            a.name,
            a.figure,
            a.aim,
            match a.held {
                Some(true) => "held",
                Some(false) => "MISSED",
                None => "not judged",
            }
        );
    }
    for i in info {
        println!("soak: {i}");
    }
    for l in &o.stderr_tail {
        println!("soak: observer stderr: {l}");
    }
}

fn section(args: &SoakArgs, aims: &[Aim], info: &[String], rows: &[Row]) -> String {
    let date =
        cmd::output(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"])).unwrap_or_default();
    let kernel = cmd::output(Command::new("uname").arg("-r")).unwrap_or_default();
    let cpus = thread::available_parallelism().map_or(0, |n| n.get());
    let mut s = format!(
        "{START}\n<!-- Generated by `cargo xtask soak --bench`: edits between these markers are overwritten. -->\n\
        ## Soak: `observer run` for {m} minutes\n\n\
        Run {date}, kernel {kernel}, {cpus} CPUs, `cargo xtask soak --minutes {m} --bench`.\n\n\
        | what | figure | aim | held |\n| --- | --- | --- | --- |\n",
        m = args.minutes,
        date = date.trim(),
        kernel = kernel.trim(),
    );
    for a in aims {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            a.name,
            a.figure,
            a.aim,
            match a.held {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "not judged",
            }
        );
    }
    s.push('\n');
    for i in info {
        let _ = writeln!(s, "- {i}");
    }
    minutes_table(&mut s, rows);
    let every = every(rows);
    let _ = write!(
        s,
        "\nEvery minute is one sample: RSS (`VmRSS`) and open descriptors (the least of 3 reads, \
        taken when no churn namespace exists) at that moment, CPU (user + system) over the minute, \
        the record's file and write-ahead log, the counters of `/metrics` \
        (`observer_record_rows_total{{outcome=\"dropped\"|\"failed\"}}`, `observer_gaps_total`, \
        `observer_kernel_records_lost_total`), change lines read from stdout (and of those, the \
        lines of namespaces not the soak's: observer watches every namespace of the machine, so \
        other work on it shows here, and in RSS and CPU), and the SSE client's count so far.{thin} The load, for the whole run, in namespaces of the soak's own: every \
        100 ms, alternately, one `nft -f` (a chain flush and 99 rule adds, two versions in turn: 99 `rule_replace`) \
        and one `iptables-legacy-restore --noflush` rewriting a 99-rule chain of a filter table of \
        {BIG_RULES} rules more (99 `rule_replace`), about 1,000 changes per second; every 5 s a \
        namespace is made, given an nft table, chain and 2 rules and one `iptables-legacy -A`, and \
        deleted. An SSE client follows `/events` from the start and drops its connection every \
        20 to 30 s, resuming alternately with `Last-Event-ID` and `?after=`. observer runs as a \
        copy of the release binary, with its defaults (`--max-record 512MiB`, `--retain 7d`), \
        stdout read through a pipe; the machine is shared, so CPU figures carry some noise.\n\
        {END}\n",
        thin = if every > 1 {
            " The table shows minute 1, every 5th minute and the last, then the least and the \
              most over all minutes."
        } else {
            ""
        },
    );
    s
}

/// Minutes shown in the minutes table: every one up to 20 minutes, else every 5th (with the
/// first and the last).
fn every(rows: &[Row]) -> usize {
    if rows.len() > 20 {
        5
    } else {
        1
    }
}

/// The minutes table: one line per minute shown, then the least and the most when not every
/// minute is.
fn minutes_table(s: &mut String, rows: &[Row]) {
    let every = every(rows);
    let _ = write!(
        s,
        "\n| minute | RSS MiB | open fds | CPU % of one core | record MiB (file + WAL) | record rows dropped / failed | gaps | kernel records lost | changes/s streamed | of which other namespaces | SSE seq missing / twice |\n\
        | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    );
    for r in rows {
        if every == 1
            || r.minute == 1
            || r.minute.is_multiple_of(every as u64)
            || r.minute == rows.len() as u64
        {
            minute_line(s, r.minute.to_string(), r);
        }
    }
    if every > 1 {
        let (min, max) = extremes(rows);
        minute_line(s, "min".into(), &min);
        minute_line(s, "max".into(), &max);
    }
}

/// One line of the minutes table: `label` (the minute, or min or max) and the row's figures.
fn minute_line(s: &mut String, label: String, r: &Row) {
    let _ = writeln!(
        s,
        "| {label} | {:.1} | {} | {:.1} | {:.1} | {} / {} | {} | {} | {:.0} | {:.0} | {} / {} |",
        r.rss_mib,
        r.fds,
        r.cpu_pct,
        r.record_mib,
        r.dropped,
        r.failed,
        r.gaps,
        r.lost,
        r.rate,
        r.other_rate,
        r.sse_gaps,
        r.sse_dups
    );
}

/// The least and the most of each figure over all minutes.
fn extremes(rows: &[Row]) -> (Row, Row) {
    let pick = |f: fn(f64, f64) -> f64, g: fn(usize, usize) -> usize| Row {
        minute: 0,
        rss_mib: rows.iter().map(|r| r.rss_mib).fold(rows[0].rss_mib, f),
        fds: rows.iter().map(|r| r.fds).fold(rows[0].fds, g),
        cpu_pct: rows.iter().map(|r| r.cpu_pct).fold(rows[0].cpu_pct, f),
        record_mib: rows
            .iter()
            .map(|r| r.record_mib)
            .fold(rows[0].record_mib, f),
        rate: rows.iter().map(|r| r.rate).fold(rows[0].rate, f),
        other_rate: rows
            .iter()
            .map(|r| r.other_rate)
            .fold(rows[0].other_rate, f),
        ..rows[rows.len() - 1].clone()
    };
    let last = &rows[rows.len() - 1];
    let mut min = pick(f64::min, usize::min);
    let mut max = pick(f64::max, usize::max);
    // The counters only grow: their minimum is minute 1's, their maximum the last's.
    (
        min.dropped,
        min.failed,
        min.gaps,
        min.lost,
        min.sse_gaps,
        min.sse_dups,
    ) = (
        rows[0].dropped,
        rows[0].failed,
        rows[0].gaps,
        rows[0].lost,
        rows[0].sse_gaps,
        rows[0].sse_dups,
    );
    (max.dropped, max.failed, max.gaps, max.lost) =
        (last.dropped, last.failed, last.gaps, last.lost);
    (min, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(m: u64) -> Row {
        Row {
            minute: m,
            rss_mib: 10.0 + m as f64 * 0.37,
            fds: 20 + (m as usize % 3),
            cpu_pct: 5.0 + (m % 7) as f64,
            record_mib: m as f64 * 1.5,
            dropped: m / 10,
            failed: m / 20,
            gaps: m / 30,
            lost: m / 40,
            rate: 1000.0 - m as f64,
            other_rate: (m % 5) as f64,
            sse_gaps: m / 11,
            sse_dups: m / 13,
        }
    }

    #[test]
    fn a_long_run_shows_every_fifth_minute_and_the_extremes() {
        let aims = [Aim {
            name: "flat memory",
            figure: "f".into(),
            aim: "x",
            held: Some(false),
        }];
        let info = ["i".to_owned()];
        for (minutes, shown) in [
            (7, vec!["1", "2", "3", "4", "5", "6", "7"]),
            (
                43,
                vec![
                    "1", "5", "10", "15", "20", "25", "30", "35", "40", "43", "min", "max",
                ],
            ),
        ] {
            let rows: Vec<Row> = (1..=minutes).map(row).collect();
            let args = SoakArgs {
                minutes,
                bench: true,
            };
            let s = section(&args, &aims, &info, &rows);
            assert!(s.starts_with(&format!("{START}\n")), "{s}");
            assert!(s.ends_with(&format!("{END}\n")), "{s}");
            assert!(s.contains("| flat memory | f | x | **no** |"), "{s}");
            let labels: Vec<&str> = s
                .lines()
                .filter(|l| l.starts_with("| ") && !l.starts_with("| ---"))
                .filter_map(|l| l.split(" | ").next()?.strip_prefix("| "))
                .filter(|l| l.parse::<u64>().is_ok() || *l == "min" || *l == "max")
                .collect();
            assert_eq!(labels, shown, "{s}");
        }
        // The counters' least is minute 1's, their most the last minute's.
        let rows: Vec<Row> = (1..=43).map(row).collect();
        let (min, max) = extremes(&rows);
        assert_eq!((min.dropped, max.dropped), (0, 4));
        assert_eq!((min.fds, max.fds), (20, 22));
        assert!((min.rss_mib - 10.37).abs() < 1e-9);
    }
}
