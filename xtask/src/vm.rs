//! `cargo xtask vm-test`: the integration tests on kernels that have kprobes and fentry.
//!
//! The CI host's kernel has no kprobes and refuses fentry, so those backends are proven in a
//! QEMU guest running Debian's kernels, 6.1 and 6.12 (KPROBES=y, BTF, netfilter as modules), one
//! guest per kernel. virtme-ng boots it
//! with the host's root filesystem (read-only), so the binaries built here run there unchanged;
//! a directory shared read-write with the guest carries the script in and the results out.
//! The integration tests run once per forced backend (`OBSERVER_TEST_HOOKS`): each run's ready
//! line must name that backend, and every legacy change must carry it as its `source`.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{bail, Context as _, Result};

use crate::cmd;

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
];

/// Debian packages that give the guest: the emulator, a 6.1 kernel with kprobes, a static
/// busybox. The 6.12 kernel's package name carries its version: see [`kernel_612_package`].
const VM_PACKAGES: &[&str] = &["qemu-system-x86", "linux-image-amd64", "busybox-static"];

/// The kernel series every vm-test runs on.
const KERNEL_SERIES: &[&str] = &["6.1", "6.12"];

/// The guest's boot and tests may not take longer than this (software emulation on 2 cores).
const VM_TIMEOUT_SECS: u64 = 1500;
/// The bound of one run of the tests on one backend inside the guest (a run takes about a
/// minute).
const RUN_TIMEOUT_SECS: u64 = 300;

/// What the VM test needs from the host, or why it cannot run here.
pub struct VmTools {
    /// One kernel per series, oldest first.
    pub kernels: Vec<PathBuf>,
    pub vng: PathBuf,
}

impl VmTools {
    /// The oldest kernel (the benchmarks run on one: 6.1, as their earlier figures did).
    pub fn oldest(&self) -> &Path {
        self.kernels
            .first()
            .map(PathBuf::as_path)
            .unwrap_or(Path::new(""))
    }
}

/// The series of a `vmlinuz-6.12.107+deb12-amd64` or `vmlinuz-6.1.0-56-amd64` file: `6.12`.
fn series(kernel: &Path) -> Option<String> {
    let v = kernel.file_name()?.to_str()?.strip_prefix("vmlinuz-")?;
    let mut parts = v.split(['.', '-', '+']);
    Some(format!("{}.{}", parts.next()?, parts.next()?))
}

/// Guest kernels: OBSERVER_VM_KERNEL (paths separated by `:`), else the newest /boot/vmlinuz-*
/// of each series in [`KERNEL_SERIES`].
fn find_kernels() -> Vec<PathBuf> {
    if let Some(k) = std::env::var_os("OBSERVER_VM_KERNEL") {
        return std::env::split_paths(&k).collect();
    }
    let mut found: Vec<PathBuf> = fs::read_dir("/boot")
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    found.sort();
    KERNEL_SERIES
        .iter()
        .filter_map(|want| {
            found
                .iter()
                .rfind(|p| series(p).as_deref() == Some(*want))
                .cloned()
        })
        .collect()
}

/// The newest Debian 6.12 kernel package with 9p (virtme-ng's root filesystem), as apt knows
/// it today (`linux-image-6.12.107+deb12-amd64-unsigned`): its name carries the version.
fn kernel_612_package() -> Option<String> {
    let out = Command::new("apt-cache")
        .args([
            "search",
            "--names-only",
            r"^linux-image-6\.12\..*-amd64-unsigned$",
        ])
        .output()
        .ok()?;
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        // The cloud flavour has no 9p and the realtime one is another kernel.
        .filter(|n| !n.contains("-cloud-") && !n.contains("-rt-"))
        .collect();
    names.sort();
    names.pop()
}

fn find_vng() -> Option<PathBuf> {
    cmd::which("vng")
}

fn apt_install(packages: &[String]) -> bool {
    println!("installing {} (apt-get)", packages.join(" "));
    Command::new("sh")
        .args([
            "-c",
            &format!(
                "apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get \
                 install -y -q --no-install-recommends {} >/dev/null",
                packages.join(" ")
            ),
        ])
        .status()
        .is_ok_and(|s| s.success())
}

/// Find, or install, what the guest needs. `Ok(Err(reason))`: it cannot be had here (skip).
pub fn ensure_tools() -> Result<std::result::Result<VmTools, String>> {
    let have_qemu = cmd::which("qemu-system-x86_64").is_some();
    let kernels = find_kernels();
    let missing_series =
        std::env::var_os("OBSERVER_VM_KERNEL").is_none() && kernels.len() < KERNEL_SERIES.len();
    if !have_qemu || missing_series || cmd::which("busybox").is_none() {
        if cmd::which("apt-get").is_none() || !cmd::is_root() {
            return Ok(Err(format!(
                "qemu or a guest kernel ({}) is missing and cannot be installed here (needs \
                 apt-get and root): install {} and Debian's 6.12 kernel by hand",
                KERNEL_SERIES.join(", "),
                VM_PACKAGES.join(" ")
            )));
        }
        let mut packages: Vec<String> = VM_PACKAGES.iter().map(|p| p.to_string()).collect();
        if !apt_install(&packages) {
            return Ok(Err(format!(
                "installing {} with apt-get failed",
                VM_PACKAGES.join(" ")
            )));
        }
        match kernel_612_package() {
            Some(k) => {
                packages = vec![k];
                if !apt_install(&packages) {
                    return Ok(Err(format!(
                        "installing {} with apt-get failed",
                        packages[0]
                    )));
                }
            }
            None => return Ok(Err("apt knows no Debian 6.12 kernel package".into())),
        }
    }
    if find_vng().is_none() {
        println!("installing virtme-ng (pip)");
        let ok = ["pip", "pip3"].iter().any(|pip| {
            cmd::which(pip).is_some_and(|p| {
                Command::new(p)
                    .args(["install", "-q", "virtme-ng"])
                    .status()
                    .is_ok_and(|s| s.success())
            })
        });
        if !ok {
            return Ok(Err(
                "virtme-ng is missing and `pip install virtme-ng` failed".into(),
            ));
        }
    }
    let kernels = find_kernels();
    let Some(vng) = find_vng() else {
        return Ok(Err("no vng after installing it".into()));
    };
    if kernels.is_empty() {
        return Ok(Err("no guest kernel in /boot after installing them".into()));
    }
    Ok(Ok(VmTools { kernels, vng }))
}

/// The integration test binary, built (release) on the host.
fn build_test_binary(ready: &crate::setup::Ready) -> Result<(PathBuf, Option<PathBuf>)> {
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
    let executable = |name: &str| {
        out.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == name)
            .find_map(|v| v["executable"].as_str().map(PathBuf::from))
    };
    let tail = executable("tail").context("cargo built no `tail` test executable")?;
    Ok((tail, executable("attribution")))
}

/// The script the guest runs: load the modules, run the tests once per backend, and leave each
/// run's output and exit status in `dir`. Waits are 5 times longer (software emulation); the
/// Ctrl-C-under-load test is left to the host (it tests the engine, not a hook, and its 40
/// replaces of a 4,000-rule table take minutes under emulation).
fn guest_script(
    test_bin: &Path,
    attribution: Option<&Path>,
    observer: &Path,
    dir: &Path,
) -> String {
    // The ipset writers' tests too (an ipset command is seen only through the writer hook).
    let ipset = attribution.map_or(String::new(), |a| {
        format!(
            "[ $rc = 0 ] && {{ OBSERVER_TEST_HOOKS=$b OBSERVER_TEST_SLOWDOWN=5 timeout -k 10 \
             {RUN_TIMEOUT_SECS} {a} --test-threads=1 ipset >> $out 2>&1; rc=$?; }}\n",
            a = a.display()
        )
    });
    let mut s = String::from("#!/bin/sh\n");
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
    // One run of the tests on one backend, bounded: a run that does not end leaves what was
    // running and the kernel's last words in its output, and is run once more (its first
    // output is kept), so that one hang of the emulated guest does not hide the others.
    s.push_str(&format!(
        "run() {{ b=$1; out=$2\n\
         OBSERVER_TEST_HOOKS=$b OBSERVER_TEST_SLOWDOWN=5 timeout -k 10 {RUN_TIMEOUT_SECS} {bin} \
         --test-threads=1 --skip ctrl_c_while_busy > $out 2>&1\n\
         rc=$?\n\
         {ipset}\
         if [ $rc = 124 ] || [ $rc = 137 ]; then\n\
         echo \"vm: $b: no end after {RUN_TIMEOUT_SECS}s; still running:\" >> $out\n\
         ps -eo pid,stat,wchan:24,etime,args | grep -E 'observer|iptables|nft|ip netns|tail-' >> $out\n\
         dmesg | tail -n 30 >> $out\n\
         fi\n\
         return $rc\n\
         }}\n",
        bin = test_bin.display(),
    ));
    // The fallback backend must load on these kernels too (their verifiers are older than the
    // host's): its ready line names where each hook went and why a backend was refused.
    s.push_str(&format!(
        "timeout -k 5 180 {obs} tail --json --hooks tracepoint > {dir}/{TRACEPOINT_OUT} 2>&1 &\n\
         tp=$!; i=0\n\
         while [ $i -lt 1200 ] && ! grep -q '\"state\"' {dir}/{TRACEPOINT_OUT}; do sleep 0.1; i=$((i+1)); done\n\
         kill $tp 2>/dev/null; wait $tp\n",
        obs = observer.display(),
        dir = dir.display(),
    ));
    for b in BACKENDS {
        s.push_str(&format!(
            "start=$(date +%s)\n\
             run {b} {dir}/{b}.out\n\
             rc=$?\n\
             if [ $rc = 124 ] || [ $rc = 137 ]; then\n\
             mv {dir}/{b}.out {dir}/{b}.hung.out\n\
             run {b} {dir}/{b}.out\n\
             rc=$?\n\
             fi\n\
             echo $rc > {dir}/{b}.rc\n\
             echo \"vm: {b}: exit $(cat {dir}/{b}.rc) in $(( $(date +%s) - start ))s\"\n",
            dir = dir.display(),
        ));
    }
    s
}

/// Boot the guest with `dir` shared read-write (and as its working directory), run `exec` in
/// it, and return the exit status of the boot (the guest's own results are files in `dir`).
pub fn boot(tools: &VmTools, kernel: &Path, dir: &Path, exec: &str) -> Result<i32> {
    boot_niced(tools, kernel, dir, exec, VM_TIMEOUT_SECS, 0)
}

/// [`boot`] with its own time limit, and the emulator at niceness `nice` (0: as we are) so
/// that a long benchmark does not starve the rest of the machine.
pub fn boot_niced(
    tools: &VmTools,
    kernel: &Path,
    dir: &Path,
    exec: &str,
    timeout_secs: u64,
    nice: u8,
) -> Result<i32> {
    let mut c = Command::new("nice");
    c.arg("-n")
        .arg(nice.to_string())
        .arg("timeout")
        .arg(timeout_secs.to_string())
        .arg(&tools.vng)
        .arg("--disable-kvm")
        .arg("-r")
        .arg(kernel)
        .args(["--memory", "2G", "--cpus", "2"])
        .arg(format!("--rwdir={}", dir.display()))
        .arg("--exec")
        .arg(exec)
        .current_dir(dir);
    eprintln!("xtask: == {}", cmd::describe(&c));
    // KVM is present on these machines but the guest hangs with it; software emulation works.
    // The guest's console goes through a pipe, copied to our stdout: given our stdout itself
    // (a file, with `cargo xtask test > log`), the emulator reopens it with truncation and
    // everything written before the boot is lost.
    // Its stderr too: `cargo xtask test > log 2>&1` gives both the same file.
    c.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c
        .spawn()
        .with_context(|| format!("could not start `{}`", cmd::describe(&c)))?;
    let errors = child.stderr.take().map(|mut e| {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut e, &mut std::io::stderr());
        })
    });
    if let Some(mut console) = child.stdout.take() {
        let mut out = std::io::stdout();
        // A closed stdout of ours ends the copy, not the guest.
        let _ = std::io::copy(&mut console, &mut out);
    }
    let status = child.wait().context("waiting for the guest")?;
    if let Some(t) = errors {
        let _ = t.join();
    }
    use std::os::unix::process::ExitStatusExt as _;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// What the guest left behind.
pub struct GuestResult {
    /// Backends whose run failed.
    pub failed: usize,
    /// The guest kernel's BTF, copied out (for the offset resolver's unit tests).
    pub btf: Option<PathBuf>,
}

/// Boot the guest and run the tests in it.
pub fn run_in_vm(
    tools: &VmTools,
    kernel: &Path,
    observer_bin: &Path,
    test_bin: &Path,
    attribution: Option<&Path>,
    keep: &Path,
) -> Result<GuestResult> {
    let dir = std::env::temp_dir().join(format!("observer-vm-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let script = dir.join("run.sh");
    fs::write(
        &script,
        guest_script(test_bin, attribution, observer_bin, &dir),
    )?;
    if !cmd::is_executable(observer_bin) {
        bail!(
            "{} is missing; the release build failed",
            observer_bin.display()
        );
    }
    let start = Instant::now();
    let status = boot(tools, kernel, &dir, &format!("sh {}", script.display()))?;
    let took = start.elapsed().as_secs_f64();
    let k = kernel.display();
    eprintln!("xtask: guest {k} exited with {status} after {took:.0}s (boot and both runs)");
    let mut failed = 0;
    for b in BACKENDS {
        let out = fs::read_to_string(dir.join(format!("{b}.out"))).unwrap_or_default();
        let rc = fs::read_to_string(dir.join(format!("{b}.rc")))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        if let Ok(hung) = fs::read_to_string(dir.join(format!("{b}.hung.out"))) {
            println!(
                "---- integration tests in the guest {k} with --hooks {b}: first run, which hung ----"
            );
            print!("{hung}");
            println!("vm-test: {k} --hooks {b}: the first run did not end; it was run once more");
        }
        println!("---- integration tests in the guest {k} with --hooks {b} ----");
        print!("{out}");
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
    Ok(GuestResult { failed, btf })
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
    let (test_bin, attribution) =
        cmd::phase("build the integration tests", || build_test_binary(ready))?;
    let observer_bin = crate::target_dir()?.join("release").join("observer");
    let keep = crate::target_dir()?.join("vm");
    let mut failed = 0;
    let mut runs = 0;
    for kernel in &tools.kernels {
        let guest = cmd::phase(
            &format!("integration tests in the guest {}", kernel.display()),
            || {
                run_in_vm(
                    &tools,
                    kernel,
                    &observer_bin,
                    &test_bin,
                    attribution.as_deref(),
                    &keep,
                )
            },
        )?;
        failed += guest.failed;
        runs += BACKENDS.len() + 1;
        // The offset resolver's unit tests on the guest kernel's BTF as well as the host's.
        match &guest.btf {
            Some(btf) => {
                let mut c = crate::cargo();
                c.args([
                    "test",
                    "--release",
                    "--workspace",
                    "--exclude",
                    crate::EBPF_CRATE,
                    "hooks::btf",
                    "--",
                    "--nocapture",
                ])
                .env("OBSERVER_KERNEL_BTF", btf);
                ready.apply(&mut c);
                eprintln!("xtask: == {}", cmd::describe(&c));
                if cmd::run_status(&mut c)? != 0 {
                    println!("vm-test: the BTF offset tests failed on {}", btf.display());
                    failed += 1;
                }
            }
            None => println!(
                "vm-test: the guest {} left no BTF file; offset tests on it not run",
                kernel.display()
            ),
        }
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
    fn kernel_files_are_sorted_into_their_series() {
        let s = |f: &str| series(Path::new(f));
        assert_eq!(s("/boot/vmlinuz-6.1.0-56-amd64").as_deref(), Some("6.1"));
        assert_eq!(
            s("/boot/vmlinuz-6.12.107+deb12-amd64").as_deref(),
            Some("6.12")
        );
        assert_eq!(s("/boot/initrd.img-6.12.107+deb12-amd64"), None);
        assert_eq!(s("/boot/vmlinuz-6"), None);
    }

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
    fn the_guest_script_runs_every_backend_and_keeps_its_status() {
        let s = guest_script(
            Path::new("/t/tail-1"),
            Some(Path::new("/t/attribution-1")),
            Path::new("/o/observer"),
            Path::new("/r"),
        );
        assert!(
            s.contains("/o/observer tail --json --hooks tracepoint > /r/tracepoint.out"),
            "{s}"
        );
        assert!(
            s.contains("/t/attribution-1 --test-threads=1 ipset >> $out"),
            "{s}"
        );
        for b in BACKENDS {
            assert!(s.contains(&format!("run {b} /r/{b}.out")), "{s}");
            assert!(s.contains(&format!("echo $rc > /r/{b}.rc")), "{s}");
        }
        assert!(
            s.contains(&format!(
                "OBSERVER_TEST_HOOKS=$b OBSERVER_TEST_SLOWDOWN=5 timeout -k 10 {RUN_TIMEOUT_SECS} /t/tail-1 --test-threads=1"
            )),
            "{s}"
        );
        assert!(s.contains("modprobe $m"), "{s}");
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
