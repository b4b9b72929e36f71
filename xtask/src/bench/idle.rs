//! Part 3 of `cargo xtask bench`: `observer tail` while nothing happens in its namespace, its
//! CPU time and the context switches of each of its threads (from `/proc/PID/task`) over a
//! window.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    fs,
    path::Path,
    thread,
    time::{Duration, Instant},
};

use anyhow::Result;

use super::{
    netns::Netns,
    not_measured,
    procfs::{stat_ticks, USER_HZ},
    row,
    spawn::Observer,
    Row,
};

/// One thread of observer, from /proc/PID/task/TID.
#[derive(Clone)]
struct ThreadSample {
    name: String,
    voluntary: u64,
    involuntary: u64,
    /// On-CPU time from schedstat, when the kernel has it.
    run_ns: Option<u64>,
}

struct Sample {
    /// utime + stime of the whole process (exited threads included), in clock ticks.
    ticks: u64,
    threads: BTreeMap<u32, ThreadSample>,
}
fn sample(pid: u32) -> Result<Sample> {
    let ticks = stat_ticks(pid, [14, 15])?;
    let mut threads = BTreeMap::new();
    for task in fs::read_dir(format!("/proc/{pid}/task"))? {
        let task = task?;
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = task.path();
        // A thread may exit between read_dir and reading it.
        let Ok(status) = fs::read_to_string(dir.join("status")) else {
            continue;
        };
        let count = |prefix: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(prefix))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        let name = status
            .lines()
            .find_map(|l| l.strip_prefix("Name:"))
            .map_or_else(|| tid.to_string(), |n| n.trim().to_owned());
        let run_ns = fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|t| t.split_whitespace().next().and_then(|f| f.parse().ok()));
        threads.insert(
            tid,
            ThreadSample {
                name,
                voluntary: count("voluntary_ctxt_switches:"),
                involuntary: count("nonvoluntary_ctxt_switches:"),
                run_ns,
            },
        );
    }
    Ok(Sample { ticks, threads })
}

pub(super) struct Idle {
    window_s: f64,
    threads: (usize, usize),
    voluntary: u64,
    involuntary: u64,
    cpu_ms: f64,
    run_ms: Option<f64>,
    /// Threads that switched during the window: "name×count".
    woke: Vec<String>,
    /// Threads that exited during the window (their switches after the first sample are lost:
    /// the counts are then lower bounds).
    exited: Vec<String>,
    /// Lines observer printed during the window (nothing changed in its namespace: 0 expected).
    lines: usize,
}

pub(super) fn idle(
    bin: &Path,
    ns: &Netns,
    window: Duration,
    notes: &mut Vec<String>,
) -> Result<Idle> {
    let obs = Observer::start(bin, &["tail", "--json", "--netns", &ns.name], "idle")?;
    // Let whatever follows the ready line settle before the window opens.
    thread::sleep(Duration::from_millis(500));
    obs.drain();
    let a = sample(obs.pid)?;
    let start = Instant::now();
    thread::sleep(window);
    let b = sample(obs.pid)?;
    let window_s = start.elapsed().as_secs_f64();
    let lines = obs.drain().len();
    obs.finish("idle", notes);

    // Per thread: a thread born in the window counts from zero.
    let (mut voluntary, mut involuntary, mut run_ns, mut woke) = (0, 0, Some(0u64), Vec::new());
    for (tid, t) in &b.threads {
        let before = a.threads.get(tid);
        let v = t.voluntary - before.map_or(0, |x| x.voluntary.min(t.voluntary));
        let i = t.involuntary - before.map_or(0, |x| x.involuntary.min(t.involuntary));
        voluntary += v;
        involuntary += i;
        if v + i > 0 {
            woke.push(format!("{}×{}", t.name, v + i));
        }
        let was = before.map_or(Some(0), |x| x.run_ns);
        run_ns = match (run_ns, t.run_ns, was) {
            (Some(sum), Some(now), Some(was)) => Some(sum + now.saturating_sub(was)),
            _ => None,
        };
    }
    let exited = a
        .threads
        .iter()
        .filter(|(tid, _)| !b.threads.contains_key(tid))
        .map(|(tid, t)| format!("{} ({tid})", t.name))
        .collect();
    Ok(Idle {
        window_s,
        threads: (a.threads.len(), b.threads.len()),
        voluntary,
        involuntary,
        cpu_ms: (b.ticks.saturating_sub(a.ticks) * 1000 / USER_HZ) as f64,
        run_ms: run_ns.map(|n| n as f64 / 1e6),
        woke,
        exited,
        lines,
    })
}

/// Part 3's lines of the report.
pub(super) fn rows(idle: &Result<Idle, String>, rows: &mut Vec<Row>) {
    match idle {
        Ok(i) => {
            let mut f = format!(
                "{} voluntary + {} involuntary in {:.1} s = {:.2}/s ({} lines printed; \
                 threads {}→{})",
                i.voluntary,
                i.involuntary,
                i.window_s,
                (i.voluntary + i.involuntary) as f64 / i.window_s,
                i.lines,
                i.threads.0,
                i.threads.1,
            );
            if !i.woke.is_empty() {
                let _ = write!(f, "; woke: {}", i.woke.join(", "));
            }
            if !i.exited.is_empty() {
                let _ = write!(
                    f,
                    "; exited during the window (so a wake-up at least, not counted): {}",
                    i.exited.join(", ")
                );
            }
            rows.push(row("3. idle context switches", f, "0 timer wake-ups"));
            let mut f = format!(
                "{:.2} ms/s (utime+stime, {} ms resolution)",
                i.cpu_ms / i.window_s,
                1000 / USER_HZ
            );
            if let Some(r) = i.run_ms {
                let _ = write!(f, "; {:.3} ms/s on CPU (schedstat)", r / i.window_s);
            }
            rows.push(row("3. idle CPU", f, ""));
        }
        Err(e) => rows.push(row(
            "3. idle CPU and wake-ups",
            not_measured(e),
            "0 timer wake-ups",
        )),
    }
}
