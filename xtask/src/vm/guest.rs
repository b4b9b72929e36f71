//! The QEMU guest of vm-test, vm-bench and bench-overhead: what it needs from the host (qemu,
//! Debian's 6.1 and 6.12 kernels, busybox, virtme-ng), installed when missing, and its boot with
//! `vng --disable-kvm`, a directory shared read-write with it.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

use crate::cmd;

/// Debian packages that give the guest: the emulator, a 6.1 kernel with kprobes, a static
/// busybox. The 6.12 kernel's package name carries its version: see [`kernel_612_package`].
const VM_PACKAGES: &[&str] = &["qemu-system-x86", "linux-image-amd64", "busybox-static"];

/// The kernel series every vm-test runs on.
const KERNEL_SERIES: &[&str] = &["6.1", "6.12"];

/// The guest's boot and tests may not take longer than this (software emulation on 2 cores).
const VM_TIMEOUT_SECS: u64 = 1800;

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
}
