//! `cargo xtask fuzz`: the cargo-fuzz targets of fuzz/ (libFuzzer on observer's decoders), one
//! at a time, with a summary per target; and the short run `cargo xtask test` makes of them.
//!
//! Each target starts from its committed seeds (fuzz/seeds/TARGET, made from the tests'
//! fixtures) and its working corpus (fuzz/corpus/TARGET, git-ignored, grown by every run). The
//! build is `cargo +nightly fuzz build` into fuzz/target with AYA_BUILD_SKIP=1 (the decoders need
//! no eBPF object). A crash, a timeout or an out-of-memory leaves its input in
//! fuzz/artifacts/TARGET/ and makes the run fail; libFuzzer's output is kept in
//! fuzz/target/logs/TARGET.log.

use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};
use clap::Args;

use crate::cmd;

const START: &str = "<!-- fuzz:start -->";
const END: &str = "<!-- fuzz:end -->";

/// The fuzz targets (fuzz/fuzz_targets/NAME.rs) and what each drives.
pub const TARGETS: &[(&str, &str)] = &[
    (
        "nft_netlink",
        "nfnetlink datagrams: `decode`, `GenerationBuilder::feed` on a dumped state, `resync`",
    ),
    (
        "nft_expr",
        "rule expressions: decode, `render::rule` against the corpus' sets, `NftState` fingerprint",
    ),
    (
        "xt_blob",
        "`GET_INFO` + ipt/ip6t/arpt entries: decode, `rule_text`, `diff` (a table vs itself: none)",
    ),
    (
        "kernel_event",
        "ring-buffer records of every kind: `KernelEvent::parse`, batch heads, ipset, refusals",
    ),
    (
        "sse",
        "`/events` stream: `SseParser::feed` whole vs in chunks (same events), `Record` JSON",
    ),
    (
        "owners",
        "`--owners` file, TOML and YAML: `parse_file`, applied to the catalog, claims",
    ),
    (
        "config",
        "`observer run --config` TOML file: `RunArgs::resolve`",
    ),
    (
        "record",
        "the record file: `store::open_ro`, `select_changes`, `select_incidents`",
    ),
];

/// Seconds each target runs inside `cargo xtask test`: with the cold build (about 140 s on 2
/// CPUs), the step takes under 5 minutes.
pub const TEST_SECONDS: u64 = 18;

/// cargo-fuzz build options, the same for `build` and `run` (any difference rebuilds).
/// No sanitizer: the decoders are safe Rust, and without ASan the build is shorter and the runs
/// faster; 16 codegen units instead of cargo-fuzz's 1 let the cold build (inside
/// `cargo xtask test` in CI) use both CPUs on observer's crate.
const BUILD_OPTS: &[&str] = &["--sanitizer", "none", "--codegen-units", "16"];

/// libFuzzer's limits: memory per process, and the longest one input may take.
const RSS_LIMIT_MB: u64 = 2048;
const UNIT_TIMEOUT_S: u64 = 10;

#[derive(Args)]
pub struct FuzzArgs {
    /// Seconds each target runs (libFuzzer's -max_total_time)
    #[arg(long, default_value_t = 60, value_name = "N")]
    seconds: u64,
    /// Also write the figures into BENCHMARKS.md, between its fuzz markers
    #[arg(long)]
    bench: bool,
    /// Targets to run (default: all of them)
    #[arg(value_name = "TARGET", value_parser = clap::builder::PossibleValuesParser::new(TARGETS.iter().map(|t| t.0)))]
    targets: Vec<String>,
}

/// How a target's run ended badly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// `crash`, `timeout`, `oom`, `leak`, or what libFuzzer's error line says.
    kind: String,
    /// The input libFuzzer wrote, when it wrote one.
    artifact: Option<String>,
    /// The panic message, when there is one.
    panic: Option<String>,
}

/// What one target's run gave.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    target: String,
    seconds: f64,
    /// Inputs run.
    runs: Option<u64>,
    /// Edges covered (`cov:`) and features (`ft:`) at the end.
    cov: Option<u64>,
    ft: Option<u64>,
    /// libFuzzer's corpus at the end: units and their size (`corp: N/SIZE`).
    corpus_units: Option<u64>,
    corpus_size: Option<String>,
    failure: Option<Failure>,
    log: PathBuf,
}

impl Outcome {
    fn runs_per_second(&self) -> Option<u64> {
        let runs = self.runs?;
        (self.seconds > 0.0).then(|| (runs as f64 / self.seconds).round() as u64)
    }

    fn result(&self) -> String {
        match &self.failure {
            None => "no crash".into(),
            Some(f) => match &f.artifact {
                Some(a) => format!("{}: {a}", f.kind.to_uppercase()),
                None => f.kind.to_uppercase(),
            },
        }
    }

    fn line(&self) -> String {
        let opt = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
        format!(
            "fuzz: {}: {} runs in {:.0} s ({}/s), cov {}, ft {}, corpus {} units ({}), {}",
            self.target,
            opt(self.runs),
            self.seconds,
            opt(self.runs_per_second()),
            opt(self.cov),
            opt(self.ft),
            opt(self.corpus_units),
            self.corpus_size.as_deref().unwrap_or("?"),
            self.result()
        )
    }
}

fn fuzz_dir(root: &Path) -> PathBuf {
    root.join("fuzz")
}

/// `rustup run nightly cargo fuzz SUBCOMMAND` in the workspace root, with the environment a
/// fuzz build needs and none of the outer cargo's (which would pick stable, or another target
/// directory, or add flags).
fn cargo_fuzz(root: &Path, subcommand: &str) -> Result<Command> {
    let rustup = cmd::which_in_path("rustup")
        .context("rustup not found in PATH; the fuzz targets build with its nightly toolchain")?;
    let mut c = Command::new(rustup);
    c.current_dir(root)
        .args(["run", "nightly", "cargo", "fuzz", subcommand, "--fuzz-dir"])
        .arg(fuzz_dir(root))
        .args(BUILD_OPTS)
        .env("AYA_BUILD_SKIP", "1");
    for var in [
        "CARGO",
        "RUSTC",
        "RUSTUP_TOOLCHAIN",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "CARGO_ENCODED_RUSTFLAGS",
    ] {
        c.env_remove(var);
    }
    Ok(c)
}

/// `cargo +nightly fuzz build` of every target; returns how long it took.
pub fn build(root: &Path) -> Result<Duration> {
    let start = Instant::now();
    let mut c = cargo_fuzz(root, "build")?;
    eprintln!("xtask: == {}", cmd::describe(&c));
    cmd::run(&mut c).context(
        "building the fuzz targets failed (see above); `cargo xtask setup` installs cargo-fuzz \
         and the nightly toolchain",
    )?;
    Ok(start.elapsed())
}

/// Run one target for `seconds`, its output going to fuzz/target/logs/TARGET.log.
pub fn run_target(root: &Path, target: &str, seconds: u64) -> Result<Outcome> {
    let dir = fuzz_dir(root);
    let corpus = dir.join("corpus").join(target);
    let seeds = dir.join("seeds").join(target);
    fs::create_dir_all(&corpus).with_context(|| format!("creating {}", corpus.display()))?;
    let logs = dir.join("target").join("logs");
    fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let log = logs.join(format!("{target}.log"));
    let out = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    // The files the config and record targets write go there, removed after the run.
    let tmp = dir.join("target").join("tmp").join(target);
    fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;

    let mut c = cargo_fuzz(root, "run")?;
    // New inputs go to the first directory (the working corpus); the seeds are read only.
    c.arg(target).arg(&corpus).arg(&seeds).arg("--").args([
        format!("-max_total_time={seconds}"),
        format!("-rss_limit_mb={RSS_LIMIT_MB}"),
        format!("-timeout={UNIT_TIMEOUT_S}"),
        "-print_final_stats=1".into(),
    ]);
    c.env("TMPDIR", &tmp)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    // Its own process group, so that a hung run can be stopped whole (cargo, then the target).
    std::os::unix::process::CommandExt::process_group(&mut c, 0);
    eprintln!(
        "xtask: == fuzz {target} for {seconds} s: {} (log: {})",
        cmd::describe(&c),
        log.display()
    );
    let start = Instant::now();
    let mut child = c
        .spawn()
        .with_context(|| format!("could not start `{}`", cmd::describe(&c)))?;
    // libFuzzer stops itself after `seconds`; past this the run is hung.
    let deadline = Duration::from_secs(seconds + 120 + UNIT_TIMEOUT_S * 2);
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if start.elapsed() > deadline {
            kill_group(child.id());
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = fs::remove_dir_all(&tmp);
    let text = fs::read_to_string(&log).unwrap_or_default();
    let mut outcome = parse_log(target, &text);
    outcome.seconds = start.elapsed().as_secs_f64().min(seconds as f64);
    outcome.log = log;
    match status {
        None => {
            outcome.failure = Some(Failure {
                kind: format!("hang (stopped after {} s)", deadline.as_secs()),
                artifact: None,
                panic: None,
            })
        }
        Some(s) if !s.success() && outcome.failure.is_none() => {
            outcome.failure = Some(Failure {
                kind: format!("failed ({s})"),
                artifact: None,
                panic: None,
            })
        }
        Some(_) => {}
    }
    Ok(outcome)
}

/// Send SIGKILL to the process group `pgid` (one this process created for a child).
fn kill_group(pgid: u32) {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    const SIGKILL: i32 = 9;
    if let Ok(pgid) = i32::try_from(pgid) {
        // SAFETY: kill(2) takes two integers and touches no memory of this process.
        unsafe { kill(-pgid, SIGKILL) };
    }
}

/// The number after `key` in a libFuzzer status line (`cov: 123`).
fn field(line: &str, key: &str) -> Option<String> {
    let mut words = line.split_whitespace();
    words.find(|w| *w == key)?;
    words.next().map(String::from)
}

/// What libFuzzer's (and cargo-fuzz's) output says.
pub fn parse_log(target: &str, text: &str) -> Outcome {
    let mut o = Outcome {
        target: target.to_string(),
        ..Outcome::default()
    };
    let mut failure: Option<Failure> = None;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let line = line.trim();
        if line.starts_with('#') && line.contains(" cov: ") {
            o.cov = field(line, "cov:").and_then(|v| v.parse().ok());
            o.ft = field(line, "ft:").and_then(|v| v.parse().ok()).or(o.ft);
            if let Some((n, size)) = field(line, "corp:")
                .as_deref()
                .and_then(|c| c.split_once('/'))
            {
                o.corpus_units = n.parse().ok();
                o.corpus_size = Some(size.to_string());
            }
            if let Some(n) = line[1..]
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
            {
                o.runs = Some(n);
            }
        } else if let Some(n) = line.strip_prefix("stat::number_of_executed_units:") {
            o.runs = n.trim().parse().ok().or(o.runs);
        } else if let Some(rest) = line.strip_prefix("Done ") {
            if let Some(n) = rest.split_whitespace().next().and_then(|n| n.parse().ok()) {
                o.runs = Some(n);
            }
        } else if let Some((_, err)) = line.split_once("ERROR: libFuzzer: ") {
            let f = failure.get_or_insert_with(|| Failure {
                kind: String::new(),
                artifact: None,
                panic: None,
            });
            if f.kind.is_empty() {
                f.kind = err.split(" after").next().unwrap_or(err).trim().to_string();
            }
        } else if line.contains("panicked at") {
            let mut msg = line.to_string();
            if let Some(next) = lines.peek() {
                msg.push_str(": ");
                msg.push_str(next.trim());
            }
            let f = failure.get_or_insert_with(|| Failure {
                kind: String::new(),
                artifact: None,
                panic: None,
            });
            f.panic.get_or_insert(msg);
        } else if let Some((_, path)) = line.split_once("Test unit written to ") {
            let path = path.trim().to_string();
            let name = Path::new(&path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let kind = ["crash", "timeout", "oom", "leak", "slow-unit"]
                .into_iter()
                .find(|k| name.starts_with(&format!("{k}-")));
            let f = failure.get_or_insert_with(|| Failure {
                kind: String::new(),
                artifact: None,
                panic: None,
            });
            if let Some(k) = kind {
                f.kind = k.to_string();
            }
            f.artifact = Some(path);
        }
    }
    if let Some(mut f) = failure {
        if f.kind.is_empty() {
            f.kind = "crash".into();
        }
        // A slow unit alone (libFuzzer goes on after it) is not a failure.
        if f.kind != "slow-unit" || f.panic.is_some() {
            o.failure = Some(f);
        }
    }
    o
}

/// Print the summary of a failed target: the panic, the artifact, the end of the log.
fn report_failure(o: &Outcome) {
    let Some(f) = &o.failure else { return };
    eprintln!("fuzz: {}: {}", o.target, o.result());
    if let Some(p) = &f.panic {
        eprintln!("fuzz: {}: {p}", o.target);
    }
    if let Some(a) = &f.artifact {
        eprintln!(
            "fuzz: {}: reproduce with `AYA_BUILD_SKIP=1 cargo +nightly fuzz run {} {} {a}`",
            o.target,
            BUILD_OPTS.join(" "),
            o.target
        );
    }
    let text = fs::read_to_string(&o.log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(40).collect();
    eprintln!("fuzz: {}: the end of {}:", o.target, o.log.display());
    for l in tail.iter().rev() {
        eprintln!("  {l}");
    }
}

/// Run the targets one after the other (after one build); prints a line per target and
/// returns the outcomes.
pub fn run_all(root: &Path, targets: &[&str], seconds: u64) -> Result<(Duration, Vec<Outcome>)> {
    let built = cmd::phase("cargo +nightly fuzz build", || build(root))?;
    let mut outcomes = Vec::new();
    for t in targets {
        let o = run_target(root, t, seconds)?;
        println!("{}", o.line());
        report_failure(&o);
        outcomes.push(o);
    }
    Ok((built, outcomes))
}

/// The markdown table of the outcomes.
fn table(outcomes: &[Outcome]) -> String {
    let mut md = String::from(
        "| target | what it drives | runs | runs/s | cov | ft | corpus | result |\n\
         |---|---|---:|---:|---:|---:|---:|---|\n",
    );
    let opt = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
    for o in outcomes {
        let what = TARGETS.iter().find(|t| t.0 == o.target).map_or("", |t| t.1);
        let _ = writeln!(
            md,
            "| `{}` | {what} | {} | {} | {} | {} | {} ({}) | {} |",
            o.target,
            opt(o.runs),
            opt(o.runs_per_second()),
            opt(o.cov),
            opt(o.ft),
            opt(o.corpus_units),
            o.corpus_size.as_deref().unwrap_or("?"),
            o.result()
        );
    }
    md
}

fn first_line(c: &mut Command) -> String {
    cmd::output(c)
        .map(|s| s.lines().next().unwrap_or_default().trim().to_string())
        .unwrap_or_default()
}

/// The BENCHMARKS.md section.
fn section(args: &FuzzArgs, built: Duration, outcomes: &[Outcome]) -> String {
    let date = first_line(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]));
    let rustc = first_line(Command::new("rustup").args(["run", "nightly", "rustc", "--version"]));
    let fuzz = first_line(Command::new("cargo-fuzz").arg("--version"));
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let build = if built.as_secs() < 5 {
        "the targets already built".to_string()
    } else {
        format!("after a {:.0} s build", built.as_secs_f64())
    };
    format!(
        "{START}\n<!-- Generated by `cargo xtask fuzz --bench`: edits between these markers are overwritten. -->\n\n\
         ### Fuzzing\n\n\
         Run {date}, `cargo xtask fuzz --seconds {} --bench`, {fuzz}, {rustc}, {cpus} CPUs, one \
         target at a time from its seeds and the corpus earlier runs left, {build} (options \
         {}). `cov` is the edges libFuzzer saw covered, `ft` its features (edges with hit \
         counts and comparisons), `corpus` the inputs it keeps for them.\n\n{}\n{END}\n",
        args.seconds,
        BUILD_OPTS.join(" "),
        table(outcomes),
    )
}

/// `cargo xtask fuzz [--seconds N] [--bench] [TARGET...]` (setup has run).
pub fn run(args: &FuzzArgs, root: &Path) -> Result<i32> {
    let targets: Vec<&str> = if args.targets.is_empty() {
        TARGETS.iter().map(|t| t.0).collect()
    } else {
        args.targets.iter().map(String::as_str).collect()
    };
    let (built, outcomes) = run_all(root, &targets, args.seconds)?;
    println!("\n{}", table(&outcomes));
    if args.bench {
        let path = root.join("BENCHMARKS.md");
        crate::bench::write_marked(&path, START, END, &section(args, built, &outcomes))?;
        eprintln!("xtask: wrote the fuzz figures into {}", path.display());
    }
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| o.failure.is_some())
        .map(|o| format!("{} ({})", o.target, o.result()))
        .collect();
    if failed.is_empty() {
        Ok(0)
    } else {
        eprintln!("xtask: fuzzing failed: {}", failed.join("; "));
        Ok(1)
    }
}

/// The fuzz step of `cargo xtask test` running beside the guests: `cargo xtask fuzz --seconds
/// TEST_SECONDS` at niceness 10 (the emulated guests, whose tests wait on the clock, keep the
/// CPUs first; the build fills what they leave), its output in a file, printed at the end.
pub struct Background {
    child: std::process::Child,
    log: PathBuf,
    start: Instant,
}

impl Background {
    pub fn start(root: &Path) -> Result<Background> {
        let logs = fuzz_dir(root).join("target");
        fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        let log = logs.join("test-step.log");
        let out = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let xtask = std::env::current_exe().context("this program's path")?;
        let mut c = Command::new("nice");
        c.args(["-n", "10"])
            .arg(xtask)
            .args(["fuzz", "--seconds", &TEST_SECONDS.to_string()])
            .current_dir(root)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        eprintln!(
            "xtask: == fuzz, beside the guests: {} (output: {}, printed when it ends)",
            cmd::describe(&c),
            log.display()
        );
        let child = c
            .spawn()
            .with_context(|| format!("could not start `{}`", cmd::describe(&c)))?;
        Ok(Background {
            child,
            log,
            start: Instant::now(),
        })
    }

    /// Wait for it, print its output, and fail as [`test_step`] would.
    pub fn finish(mut self) -> Result<()> {
        let status = self.child.wait().context("waiting for the fuzz step")?;
        let took = self.start.elapsed().as_secs_f64();
        println!("---- fuzz (run beside the guests) ----");
        print!("{}", fs::read_to_string(&self.log).unwrap_or_default());
        eprintln!("xtask: == fuzz, beside the guests: ended with {status} after {took:.1}s");
        if !status.success() {
            bail!("fuzzing failed ({status}; see its output above)");
        }
        Ok(())
    }
}

/// The step of `cargo xtask test`: every target for [`TEST_SECONDS`], after one build.
pub fn test_step(root: &Path) -> Result<()> {
    let targets: Vec<&str> = TARGETS.iter().map(|t| t.0).collect();
    let (_, outcomes) = run_all(root, &targets, TEST_SECONDS)?;
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| o.failure.is_some())
        .map(|o| format!("{} ({})", o.target, o.result()))
        .collect();
    if !failed.is_empty() {
        bail!("fuzzing found: {}", failed.join("; "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DONE: &str = "INFO: Running with entropic power schedule (0xFF, 100).\n\
        #2\tINITED cov: 1024 ft: 1500 corp: 30/12Kb exec/s: 0 rss: 40Mb\n\
        #524288\tpulse  cov: 1100 ft: 1700 corp: 41/15Kb lim: 4096 exec/s: 26214 rss: 60Mb\n\
        #1200345\tDONE   cov: 1102 ft: 1712 corp: 42/15Kb lim: 4096 exec/s: 19677 rss: 61Mb\n\
        Done 1200345 runs in 61 second(s)\n\
        stat::number_of_executed_units: 1200345\n\
        stat::average_exec_per_sec:     19677\n";

    #[test]
    fn a_clean_run_is_read() {
        let o = parse_log("sse", DONE);
        assert_eq!(o.runs, Some(1_200_345));
        assert_eq!((o.cov, o.ft), (Some(1102), Some(1712)));
        assert_eq!(o.corpus_units, Some(42));
        assert_eq!(o.corpus_size.as_deref(), Some("15Kb"));
        assert_eq!(o.failure, None);
    }

    #[test]
    fn a_crash_names_its_artifact_and_panic() {
        let log = "#100\tNEW    cov: 50 ft: 60 corp: 3/10b lim: 4 exec/s: 0 rss: 30Mb L: 3/3 MS: 1 \n\
            thread '<unnamed>' panicked at observer/src/x.rs:10:5:\n\
            index out of bounds: the len is 3 but the index is 7\n\
            ==123== ERROR: libFuzzer: deadly signal\n\
            artifact_prefix='/w/fuzz/artifacts/xt_blob/'; Test unit written to /w/fuzz/artifacts/xt_blob/crash-0123abcd\n";
        let o = parse_log("xt_blob", log);
        let f = o.failure.expect("a failure");
        assert_eq!(f.kind, "crash");
        assert_eq!(
            f.artifact.as_deref(),
            Some("/w/fuzz/artifacts/xt_blob/crash-0123abcd")
        );
        assert!(f.panic.unwrap().contains("index out of bounds"));
        assert_eq!(o.cov, Some(50));
    }

    #[test]
    fn timeouts_and_ooms_are_failures_slow_units_are_not() {
        let t = parse_log(
            "record",
            "==1== ERROR: libFuzzer: timeout after 10 seconds\nTest unit written to fuzz/artifacts/record/timeout-99\n",
        );
        assert_eq!(t.failure.map(|f| f.kind), Some("timeout".into()));
        let m = parse_log(
            "record",
            "==1== ERROR: libFuzzer: out-of-memory (used: 2100Mb; exceeds: 2048Mb)\nTest unit written to ./oom-1\n",
        );
        assert_eq!(m.failure.map(|f| f.kind), Some("oom".into()));
        let s = parse_log(
            "record",
            "Slowest unit: 3 s:\nTest unit written to ./slow-unit-7\n",
        );
        assert_eq!(s.failure, None);
    }

    #[test]
    fn every_target_has_a_source_and_seeds() {
        let root = crate::root();
        for (t, _) in TARGETS {
            let src = root.join("fuzz/fuzz_targets").join(format!("{t}.rs"));
            assert!(src.is_file(), "{} is missing", src.display());
            let seeds = root.join("fuzz/seeds").join(t);
            let n = fs::read_dir(&seeds).map_or(0, |d| d.count());
            assert!(n > 0, "no seeds in {}", seeds.display());
        }
    }
}
