//! `cargo xtask vm-test`: the integration tests on kernels that have kprobes and fentry.
//!
//! The CI host's kernel has no kprobes and refuses fentry, so those backends are proven in a
//! QEMU guest running Debian's kernels, 5.10, 6.1 and 6.12 (KPROBES=y, BTF, netfilter as
//! modules), one guest per kernel. On 5.10 the fentry run has the x_tables hook on kprobe (5.10's
//! trampolines take no struct argument, and `nf_setsockopt` takes one): the tests read where it
//! went from the ready line, which must give fentry's refusal. virtme-ng boots it
//! with the host's root filesystem (read-only), so the binaries built here run there unchanged;
//! a directory shared read-write with the guest carries the script in and the results out.
//! The integration tests run once per forced backend (`OBSERVER_TEST_HOOKS`): each run's ready
//! line must name that backend, and every legacy change must carry it as its `source`. A test
//! that skips in a guest leaves its line in the shared directory (`OBSERVER_SKIPS_FILE`), which
//! `cargo xtask test` counts with the host's.
//!
//! The guest itself (its kernels and tools, and the boot) is in [`guest`], which vm-bench and
//! bench-overhead use too; this file runs the tests in it.

use std::{
    fs,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{bail, Context as _, Result};

use crate::cmd;

mod guest;

pub use guest::{boot_labelled, boot_niced, ensure_tools, VmTools};

/// The integration tests' package (the workspace's `tests/`).
const TESTS_PACKAGE: &str = "observer-tests";

/// The backends proven in the guest.
const BACKENDS: &[&str] = &["kprobe", "fentry"];

/// Netfilter modules loaded in the guest before observer starts (kprobes on module functions
/// need the module; the tests also expect the legacy tables and nf_tables to be there).
const MODULES: &[&str] = &[
    "nf_tables",
    "nft_compat",
    "nft_chain_nat",
    "x_tables",
    "ip_tables",
    "ip6_tables",
    "arp_tables",
    "iptable_filter",
    "iptable_nat",
    "ip6table_filter",
    "ip6table_nat",
    "arptable_filter",
    "xt_tcpudp",
    "xt_mark",
    "xt_comment",
    "xt_conntrack",
    "xt_nat",
    "ipt_REJECT",
    "ip6t_REJECT",
    "ebtables",
    "ebtable_filter",
    "ebtable_nat",
    "ebtable_broute",
];

/// Tests for kernel features the host's kernel lacks (legacy ebtables), marked `#[ignore]` on
/// the host and run in the guests, where they fail rather than skip when they cannot run.
const GUEST_ONLY_TAIL_TESTS: &str = "ebtables_legacy";
const GUEST_ONLY_UNIT_TESTS: &str = "xtables::tests::ebt_atomic::live_";

/// The restore tests the guests run: the legacy path, the nft path (a table with its set and
/// map) and the guard against a wiper in a loop. (The tests of netfilter-persistent's reload
/// need its unpacked package, which the guest's /var does not hold.)
const GUEST_RESTORE_TESTS: &str = "legacy_chains_come_back an_nft_table_wiped a_wiper_flushing_nat";

/// The backend whose run in a guest holds the restore tests: one per kernel, as what they test
/// (the kernel's notifications, observer's own writes told apart) runs once per kernel, and
/// each backend's run of them costs a guest two to three minutes. kprobe on 6.1, fentry on the
/// others (on 5.10, fentry's x_tables hook falls back to the next backend, a mix worth a run).
fn restore_backend(series: &str) -> &'static str {
    if series == guest::BENCH_SERIES {
        "kprobe"
    } else {
        "fentry"
    }
}

/// The bound of one test inside the guest. Each test runs as a process of its own, so that a
/// slow machine makes the run longer without failing it: a whole run of the 10 tests of `tail`
/// took 340 s in a 6.1 guest alone and ran past a 600 s bound for the run while the host was
/// busy building, its tests still passing one after another (the slowest, 212 s). A test that
/// does not end within this is a hang: what was running and the kernel's last words are kept,
/// and it is run once more, so that one hang of the emulated guest does not hide the others.
const TEST_TIMEOUT_SECS: u64 = 480;

/// The test executables the guest runs, and the library's unit tests (run on the host against
/// the guest kernel's BTF), built (release) on the host.
struct TestBinaries {
    tail: PathBuf,
    attribution: Option<PathBuf>,
    restore: Option<PathBuf>,
    unit: Option<PathBuf>,
}

/// Builds (`--no-run`) and finds the test executables: `tail`, `attribution` and `restore` of the
/// integration tests' package ([`TESTS_PACKAGE`]), observer's own unit tests. They run
/// the observer binary the host build made (`OBSERVER_BIN` in [`guest_script`]).
fn build_test_binary(ready: &crate::setup::Ready) -> Result<TestBinaries> {
    let mut c = crate::cargo();
    // The same packages and flags as `cargo xtask test`'s host run, so nothing is rebuilt.
    c.args([
        "test",
        "--release",
        "--workspace",
        "--exclude",
        crate::EBPF_CRATE,
        "--no-run",
        "--message-format=json",
    ]);
    ready.apply(&mut c);
    let out = cmd::output(&mut c).context("building the integration test binary")?;
    let artifacts: Vec<serde_json::Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact")
        .collect();
    let executable = |package: &str, name: &str, kind: &str| {
        artifacts
            .iter()
            .filter(|v| package_name(&v["package_id"]) == Some(package))
            .filter(|v| v["target"]["name"] == name)
            .filter(|v| {
                v["target"]["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == kind))
            })
            .find_map(|v| v["executable"].as_str().map(PathBuf::from))
    };
    let tests = TESTS_PACKAGE;
    Ok(TestBinaries {
        tail: executable(tests, "tail", "test")
            .with_context(|| format!("cargo built no `tail` test executable of {tests}"))?,
        attribution: executable(tests, "attribution", "test"),
        restore: executable(tests, "restore", "test"),
        unit: executable("observer", "observer", "lib"),
    })
}

/// The package name in a `package_id` of cargo's messages: `path+file:///w/tests#observer-tests@0.1.0`
/// (a package whose directory is not its name), `path+file:///w/observer#0.1.0`, or the older
/// `observer 0.1.0 (path+file:///w/observer)`.
fn package_name(id: &serde_json::Value) -> Option<&str> {
    let id = id.as_str()?;
    if let Some((url, fragment)) = id.split_once('#') {
        return match fragment.split_once('@') {
            Some((name, _)) => Some(name),
            None => url.rsplit('/').next(),
        };
    }
    id.split(' ').next()
}

/// Tests of the `tail` executable left to the host: they test observer's userspace, not a hook.
/// The Ctrl-C-under-load test tests the engine (and its 40 replaces of a 4,000-rule table take
/// minutes under emulation); the closed-reader test tests the output's end.
const HOST_ONLY_TESTS: &[&str] = &[
    "ctrl_c_while_busy",
    "a_reader_that_goes_away_ends_the_tail_quietly",
];

/// The test harness's arguments in the guest: one test at a time, each with its time (the
/// log then shows where a guest's minutes go; `--report-time` is one of libtest's unstable
/// options, which [`TEST_ENV`] lets a stable build's harness take).
const TEST_ARGS: &str = "--test-threads=1 -Z unstable-options --report-time";
const TEST_ENV: &str = "RUSTC_BOOTSTRAP=1";

/// The script the guest runs: load the modules, run the tests once per backend, and leave each
/// run's output and exit status in `dir`. Waits are 5 times longer (software emulation); the
/// [`HOST_ONLY_TESTS`] are skipped.
fn guest_script(bins: &TestBinaries, observer: &Path, dir: &Path, series: &str) -> String {
    let mut s = String::from("#!/bin/sh\n");
    // The tests run the binary that the tracepoint check below runs.
    s.push_str(&format!("export OBSERVER_BIN={}\n", observer.display()));
    s.push_str(&format!(
        "for m in {}; do modprobe $m 2>/dev/null || echo \"vm: note: module $m not loaded\"; \
         done\n",
        MODULES.join(" ")
    ));
    s.push_str("echo \"vm: kernel $(uname -r)\"\n");
    s.push_str("mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing\n");
    s.push_str("mkdir -p /run/netns\n");
    s.push_str(&format!(
        "cp /sys/kernel/btf/vmlinux {dir}/vmlinux.btf\n",
        dir = dir.display()
    ));
    // `one BIN NAME [--ignored]`: one test, bounded; run once more when it did not end.
    s.push_str(&format!(
        "one() {{ bin=$1; name=$2; shift 2; n=0\n\
         while :; do\n\
         env $ci {TEST_ENV} OBSERVER_TEST_HOOKS=$b OBSERVER_TEST_SLOWDOWN=5 timeout -k 10 \
         {TEST_TIMEOUT_SECS} $bin --exact $name \"$@\" {TEST_ARGS} >> $out 2>&1\n\
         r=$?\n\
         case $r in 124|137) ;; *) return $r ;; esac\n\
         echo \"vm: $b: $name: no end after {TEST_TIMEOUT_SECS}s; still running:\" >> $out\n\
         ps -eo pid,stat,wchan:24,etime,args | grep -E 'observer|iptables|nft|ip netns|tail-' >> $out\n\
         dmesg | tail -n 30 >> $out\n\
         n=$((n+1)); [ $n -ge 2 ] && return $r\n\
         echo \"vm: $b: $name: the test did not end; it was run once more\" >> $out\n\
         done\n\
         }}\n"
    ));
    // `each BIN [--ignored] [FILTER | --skip NAME]...`: every test the filters list, one at a
    // time (without --ignored, the ignored ones are left out). Listing none fails the run: a
    // test executable that cannot run must not pass.
    s.push_str(
        "each() { bin=$1; shift; ign=''; left=''\n\
         if [ \"$1\" = --ignored ]; then ign=--ignored\n\
         else left=$($bin --list --format terse --ignored \"$@\" 2>/dev/null | sed -n 's/: test$//p'); fi\n\
         names=$($bin --list --format terse \"$@\" 2>>$out | sed -n 's/: test$//p')\n\
         if [ -z \"$names\" ]; then echo \"vm: $b: $bin $*: no test listed\" >> $out; rc=1; return; fi\n\
         for t in $names; do\n\
         case \" $(echo $left) \" in *\" $t \"*) continue ;; esac\n\
         one $bin $t $ign || rc=1\n\
         done\n\
         }\n",
    );
    // One run on the backend `$b`: the tail tests, the ipset writers' tests (an ipset command
    // is seen only through the writer hook), on one backend per kernel the restores on the
    // legacy and nft paths, and what only the guests' kernels have, under CI=true so that those
    // fail when they cannot run.
    // A run that is not whole (`$3` = part) runs the backend's smoke tests only.
    let mut run = format!(
        "run() {{ b=$1; out=$2; whole=$3; rc=0; ci=''\n\
         : > $out; rm -f $out.skips; export {skips_env}=$out.skips\n\
         if [ $whole = part ]; then each {tail} {SMOKE_TESTS}; return $rc; fi\n\
         each {tail} {skips}\n",
        skips_env = test_support::SKIPS_FILE,
        tail = bins.tail.display(),
        skips = HOST_ONLY_TESTS
            .iter()
            .map(|t| format!("--skip {t}"))
            .collect::<Vec<_>>()
            .join(" "),
    );
    if let Some(a) = &bins.attribution {
        run.push_str(&format!("each {} ipset\n", a.display()));
    }
    if let Some(r) = &bins.restore {
        run.push_str(&format!(
            "[ $b = {} ] && each {} {GUEST_RESTORE_TESTS}\n",
            restore_backend(series),
            r.display()
        ));
    }
    run.push_str(&format!(
        "ci=CI=true\neach {} --ignored {GUEST_ONLY_TAIL_TESTS}\n",
        bins.tail.display()
    ));
    if let Some(u) = &bins.unit {
        run.push_str(&format!(
            "each {} --ignored {GUEST_ONLY_UNIT_TESTS}\n",
            u.display()
        ));
    }
    run.push_str("return $rc\n}\n");
    s.push_str(&run);
    // The fallback backend must load on these kernels too (their verifiers are older than the
    // host's): its ready line names where each hook went and why a backend was refused. Its end
    // is waited for 60 s at most: a process that does not end is shown with the kernel's last
    // lines, killed, and left behind, so that it cannot hold up the guest's tests.
    s.push_str(&format!(
        "timeout -k 5 180 {obs} tail --json --hooks tracepoint > {dir}/{TRACEPOINT_OUT} 2>&1 &\n\
         tp=$!; i=0\n\
         while [ $i -lt 1200 ] && ! grep -q '\"state\"' {dir}/{TRACEPOINT_OUT}; do sleep 0.1; i=$((i+1)); done\n\
         kill $tp 2>/dev/null; i=0\n\
         while kill -0 $tp 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n\
         if kill -0 $tp 2>/dev/null; then\n\
         echo \"vm: the tracepoint check's observer did not end within 60 s of SIGTERM:\"\n\
         ps -eo pid,stat,wchan:24,etime,args | grep -E 'observer|timeout'; dmesg | tail -n 30\n\
         pkill -9 -f 'observer tail --json --hooks tracepoint'; kill -9 $tp 2>/dev/null\n\
         else wait $tp; fi\n",
        obs = observer.display(),
        dir = dir.display(),
    ));
    for b in BACKENDS {
        let whole = if whole_run(series, b) {
            "whole"
        } else {
            "part"
        };
        s.push_str(&format!(
            "start=$(date +%s)\n\
             run {b} {dir}/{b}.out {whole}\n\
             echo $? > {dir}/{b}.rc\n\
             echo \"vm: {b}: exit $(cat {dir}/{b}.rc) in $(( $(date +%s) - start ))s\"\n",
            dir = dir.display(),
        ));
    }
    s
}

/// The older kernels, slowest under emulation (each test takes 3 times as long there as on
/// 6.12), whose second backend runs the smoke tests only: every backend still runs every test on
/// two kernels (kprobe on 6.1 and 6.12, fentry on 5.10 and 6.12) and its smoke tests on the
/// third, and a guest's part of the CI run is cut by about a fifth.
const SMOKE_ONLY_SECOND_BACKEND: &[&str] = &["5.10", "6.1"];

/// What a backend must show on every kernel: where each hook went and that `doctor` agrees,
/// a legacy replace and a namespace found after start, an nft generation joined to its writer
/// and a refused batch.
const SMOKE_TESTS: &str = "a_forced_backend_attaches_or_fails_with_the_kernels_error \
    legacy_changes_in_a_namespace_created_after_start nft_generations_are_joined_to_their_writer \
    a_refused_nft_batch_is_a_failed_attempt_not_a_change";

/// Whether backend `b` runs every test on kernel `series` (else its smoke tests): on the
/// restore's backend always, and on both backends but for [`SMOKE_ONLY_SECOND_BACKEND`].
fn whole_run(series: &str, b: &str) -> bool {
    b == restore_backend(series) || !SMOKE_ONLY_SECOND_BACKEND.contains(&series)
}

/// How many guests run at once: OBSERVER_VM_PARALLEL, default 2. A guest under software
/// emulation keeps about one core busy (its tests wait on the emulated machine more than they
/// compute), so two share these 2-core machines; more would only slow each down.
fn guests_side_by_side() -> usize {
    std::env::var("OBSERVER_VM_PARALLEL")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n >= 1)
        .unwrap_or(2)
}

/// A kernel series ("5.10") as numbers, for ordering.
fn series_key(s: String) -> (u32, u32) {
    let mut p = s.split('.').map(|n| n.parse().unwrap_or(0));
    (p.next().unwrap_or(0), p.next().unwrap_or(0))
}

/// What the guest left behind.
pub struct GuestResult {
    /// Backends whose run failed.
    pub failed: usize,
    /// The guest kernel's BTF, copied out (for the offset resolver's unit tests).
    pub btf: Option<PathBuf>,
    /// The tests that skipped in the guest, as lines of a skips file (`<test>\t<reason>`),
    /// each test named with the guest's kernel and backend.
    pub skips: Vec<String>,
}

/// Boot the guest and run the tests in it.
fn run_in_vm(
    tools: &VmTools,
    kernel: &Path,
    observer_bin: &Path,
    bins: &TestBinaries,
    keep: &Path,
) -> Result<GuestResult> {
    let label = guest::series(kernel).unwrap_or_else(|| "guest".into());
    let dir = std::env::temp_dir().join(format!("observer-vm-{}-{label}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let script = dir.join("run.sh");
    fs::write(&script, guest_script(bins, observer_bin, &dir, &label))?;
    if !cmd::is_executable(observer_bin) {
        bail!(
            "{} is missing; the release build failed",
            observer_bin.display()
        );
    }
    let start = Instant::now();
    let status = boot_labelled(
        tools,
        kernel,
        &dir,
        &format!("sh {}", script.display()),
        &label,
    )?;
    let took = start.elapsed().as_secs_f64();
    let k = kernel.display();
    // One guest's report at a time, when guests run side by side.
    static REPORT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _report = REPORT.lock().unwrap_or_else(|e| e.into_inner());
    eprintln!("xtask: guest {k} exited with {status} after {took:.0}s (boot and both runs)");
    let mut failed = 0;
    let mut skips = Vec::new();
    for b in BACKENDS {
        let out = fs::read_to_string(dir.join(format!("{b}.out"))).unwrap_or_default();
        let rc = fs::read_to_string(dir.join(format!("{b}.rc")))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        println!("---- integration tests in the guest {k} with --hooks {b} ----");
        print!("{out}");
        let skipped = guest_skips(&dir.join(format!("{b}.out.skips")), &label, b);
        if !skipped.is_empty() {
            println!("vm-test: {k} --hooks {b}: {} skipped", skipped.len());
        }
        skips.extend(skipped);
        match rc {
            Some(0) => println!("vm-test: {k} --hooks {b}: ok"),
            Some(rc) => {
                println!("vm-test: {k} --hooks {b}: FAILED (exit {rc})");
                failed += 1;
            }
            None => {
                println!("vm-test: {k} --hooks {b}: did not finish (guest status {status})");
                failed += 1;
            }
        }
    }
    let tp = fs::read_to_string(dir.join(TRACEPOINT_OUT)).unwrap_or_default();
    println!("---- observer tail --hooks tracepoint in the guest {k} ----");
    print!("{tp}");
    match tracepoint_loads(&tp) {
        Ok(hooks) => println!("vm-test: {k} --hooks tracepoint loads: {hooks}"),
        Err(why) => {
            println!("vm-test: {k} --hooks tracepoint: FAILED: {why}");
            failed += 1;
        }
    }
    let btf = keep.join(format!(
        "{}.btf",
        kernel
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("guest")
    ));
    let btf = fs::create_dir_all(keep)
        .and_then(|()| fs::copy(dir.join("vmlinux.btf"), &btf))
        .ok()
        .map(|_| btf);
    let _ = fs::remove_dir_all(&dir);
    Ok(GuestResult { failed, btf, skips })
}

/// The lines a guest's run on backend `b` left in its skips file, each test named after the
/// guest (`[6.1 --hooks kprobe] tail some_test`).
fn guest_skips(file: &Path, label: &str, b: &str) -> Vec<String> {
    fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| format!("[{label} --hooks {b}] {l}"))
        .collect()
}

/// The offset resolver's unit tests on the guest kernel's BTF as well as the host's: the unit
/// test executable itself (through cargo, the new environment variable would make observer's
/// build script build the eBPF object again). How many failed (0 or 1).
fn btf_offset_tests(kernel: &Path, btf: Option<&Path>, unit: Option<&Path>) -> Result<usize> {
    match (btf, unit) {
        (Some(btf), Some(unit)) => {
            let mut c = std::process::Command::new(unit);
            c.args(["hooks::btf", "--nocapture"])
                .env("OBSERVER_KERNEL_BTF", btf)
                .current_dir(crate::root().join("observer"));
            eprintln!("xtask: == {}", cmd::describe(&c));
            if cmd::run_status(&mut c)? != 0 {
                println!("vm-test: the BTF offset tests failed on {}", btf.display());
                return Ok(1);
            }
        }
        (Some(_), None) => {
            println!("vm-test: cargo built no unit test executable for observer");
            return Ok(1);
        }
        (None, _) => println!(
            "vm-test: the guest {} left no BTF file; offset tests on it not run",
            kernel.display()
        ),
    }
    Ok(0)
}

/// Where the guest's `observer tail --hooks tracepoint` writes.
const TRACEPOINT_OUT: &str = "tracepoint.out";

/// Whether `observer tail --hooks tracepoint` put every hook on the tracepoints (its first line,
/// the ready line, says where each went); the hooks field, or what went wrong.
fn tracepoint_loads(out: &str) -> std::result::Result<String, String> {
    let ready = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["kind"] == "status")
        .ok_or_else(|| "no status line".to_string())?;
    let hooks = ready["hooks"].as_str().unwrap_or_default().to_string();
    let want = [
        "x_tables=tracepoint",
        "namespaces=tracepoint",
        "umount=tracepoint",
        "nf_writers=tracepoint",
        "nf_refusals=tracepoint",
    ];
    if hooks.contains("refused") || want.iter().any(|w| !hooks.contains(w)) {
        return Err(format!("not every hook on the tracepoints: {ready}"));
    }
    Ok(hooks)
}

/// `cargo xtask vm-test`. `Ok(None)`: skipped (the reason was printed).
pub fn vm_test(ready: &crate::setup::Ready) -> Result<Option<i32>> {
    vm_test_counting_skips(ready, None)
}

/// [`vm_test`], appending the tests that skipped in the guests to `skips` (a skips file, see
/// test-support's `skip`) when given.
pub fn vm_test_counting_skips(
    ready: &crate::setup::Ready,
    skips: Option<&crate::skips::Skips>,
) -> Result<Option<i32>> {
    let tools = match cmd::phase("vm tools", ensure_tools)? {
        Ok(t) => t,
        Err(reason) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
            bail!("vm-test cannot run under CI=true: {reason}");
        }
        Err(reason) => {
            println!("vm-test: skipped: {reason}");
            return Ok(None);
        }
    };
    for k in &tools.kernels {
        println!(
            "ok guest kernel {} (vng {})",
            k.display(),
            tools.vng.display()
        );
    }
    let bins = cmd::phase("build the integration tests", || build_test_binary(ready))?;
    let observer_bin = crate::target_dir()?.join("release").join("observer");
    let keep = crate::target_dir()?.join("vm");
    let mut failed = 0;
    let mut runs = 0;
    let side_by_side = guests_side_by_side();
    println!(
        "vm-test: {} guest(s), {side_by_side} at a time (OBSERVER_VM_PARALLEL)",
        tools.kernels.len()
    );
    // The oldest kernel first: its guest is the slowest.
    let mut kernels: Vec<&PathBuf> = tools.kernels.iter().collect();
    kernels.sort_by_key(|k| guest::series(k).map(series_key));
    let next = std::sync::Mutex::new(kernels.into_iter());
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..side_by_side {
            s.spawn(|| loop {
                let Some(kernel) = next.lock().unwrap_or_else(|e| e.into_inner()).next() else {
                    return;
                };
                let guest = cmd::phase(
                    &format!("integration tests in the guest {}", kernel.display()),
                    || run_in_vm(&tools, kernel, &observer_bin, &bins, &keep),
                );
                results
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((kernel, guest));
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|(k, _)| *k);
    for (kernel, guest) in results {
        let guest = guest.with_context(|| format!("the guest {}", kernel.display()))?;
        failed += guest.failed;
        runs += BACKENDS.len() + 1;
        if let Some(skips) = skips {
            skips.append(&guest.skips)?;
        }
        failed += btf_offset_tests(kernel, guest.btf.as_deref(), bins.unit.as_deref())?;
    }
    println!(
        "vm-test: {} passed, {} failed",
        runs.saturating_sub(failed),
        failed
    );
    Ok(Some(i32::from(failed > 0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_tracepoint_program_fails_the_guest_check() {
        let ok = r#"{"kind":"status","state":"ready","hooks":"x_tables=tracepoint namespaces=tracepoint umount=tracepoint nf_tables=netlink nf_writers=tracepoint nft_gens=thread nf_refusals=tracepoint"}"#;
        assert!(tracepoint_loads(ok).is_ok());
        let refused = r#"{"kind":"status","state":"warning","hooks":"x_tables=tracepoint namespaces=tracepoint umount=tracepoint nf_tables=netlink nf_writers=proc nft_gens=thread nf_refusals=tracepoint (nf_writers: tracepoint refused: combined stack size of 3 calls is 576. Too large)"}"#;
        let e = tracepoint_loads(refused).unwrap_err();
        assert!(e.contains("576"), "{e}");
        assert!(tracepoint_loads("observer: error").is_err());
    }

    #[test]
    fn test_executables_are_told_apart_by_package() {
        let name = |id: &str| package_name(&serde_json::Value::from(id)).map(str::to_string);
        assert_eq!(
            name("path+file:///w/tests#observer-tests@0.1.0").as_deref(),
            Some("observer-tests")
        );
        assert_eq!(
            name("path+file:///w/observer#0.1.0").as_deref(),
            Some("observer")
        );
        assert_eq!(
            name("observer 0.1.0 (path+file:///w/observer)").as_deref(),
            Some("observer")
        );
    }

    #[test]
    fn a_guests_skips_are_named_after_it() {
        let file = std::env::temp_dir().join(format!("guest-skips-{}", std::process::id()));
        fs::write(&file, "tail a\tnot root\n\nattribution b\tno ipset\n").unwrap();
        let skips = guest_skips(&file, "6.1", "kprobe");
        let _ = fs::remove_file(&file);
        assert_eq!(
            skips,
            [
                "[6.1 --hooks kprobe] tail a\tnot root",
                "[6.1 --hooks kprobe] attribution b\tno ipset"
            ]
        );
        assert!(guest_skips(Path::new("/nonexistent/x"), "6.1", "kprobe").is_empty());
    }

    #[test]
    fn the_guest_script_runs_every_backend_and_keeps_its_status() {
        let s = guest_script(
            &TestBinaries {
                tail: "/t/tail-1".into(),
                attribution: Some("/t/attribution-1".into()),
                restore: Some("/t/restore-1".into()),
                unit: Some("/t/observer-1".into()),
            },
            Path::new("/o/observer"),
            Path::new("/r"),
            "6.1",
        );
        assert!(
            s.contains("/o/observer tail --json --hooks tracepoint > /r/tracepoint.out"),
            "{s}"
        );
        // Each test is a process of its own, bounded, on the run's backend.
        assert!(
            s.contains(&format!(
                "env $ci {TEST_ENV} OBSERVER_TEST_HOOKS=$b OBSERVER_TEST_SLOWDOWN=5 timeout -k 10 \
                 {TEST_TIMEOUT_SECS} $bin --exact $name \"$@\" {TEST_ARGS} >> $out 2>&1"
            )),
            "{s}"
        );
        assert!(
            s.contains("each /t/tail-1 --skip ctrl_c_while_busy --skip a_reader_that_goes_away"),
            "{s}"
        );
        assert!(s.contains("each /t/attribution-1 ipset\n"), "{s}");
        // The restore tests run on one backend per kernel.
        assert!(
            s.contains(&format!(
                "[ $b = kprobe ] && each /t/restore-1 {GUEST_RESTORE_TESTS}\n"
            )),
            "{s}"
        );
        assert_eq!(restore_backend("5.10"), "fentry");
        assert_eq!(restore_backend("6.12"), "fentry");
        // On 6.1 kprobe runs every test, fentry its smoke tests; 6.12 runs every test twice.
        assert!(s.contains("run kprobe /r/kprobe.out whole\n"), "{s}");
        assert!(s.contains("run fentry /r/fentry.out part\n"), "{s}");
        assert!(
            s.contains(&format!(
                "if [ $whole = part ]; then each /t/tail-1 {SMOKE_TESTS}; return $rc; fi\n"
            )),
            "{s}"
        );
        for b in BACKENDS {
            assert!(s.contains(&format!("echo $? > /r/{b}.rc")), "{s}");
            assert!(whole_run("6.12", b));
            assert_eq!(whole_run("5.10", b), *b == "fentry");
        }
        assert!(s.contains("modprobe $m"), "{s}");
        // The tests run the binary checked here, and leave their skips beside each run's output.
        assert!(s.contains("export OBSERVER_BIN=/o/observer\n"), "{s}");
        assert!(s.contains("export OBSERVER_SKIPS_FILE=$out.skips\n"), "{s}");
        // What the host's kernel lacks runs here, failing rather than skipping.
        assert!(
            s.contains(&format!(
                "ci=CI=true\neach /t/tail-1 --ignored {GUEST_ONLY_TAIL_TESTS}\n\
                 each /t/observer-1 --ignored {GUEST_ONLY_UNIT_TESTS}\n"
            )),
            "{s}"
        );
        // The script is valid sh.
        let path = std::env::temp_dir().join(format!("guest-script-{}.sh", std::process::id()));
        std::fs::write(&path, &s).unwrap();
        let ok = std::process::Command::new("sh")
            .arg("-n")
            .arg(&path)
            .status()
            .unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(ok.success(), "{s}");
    }
}
