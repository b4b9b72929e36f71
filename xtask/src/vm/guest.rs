//! The QEMU guest of vm-test, vm-bench and bench-overhead: what it needs from the host (qemu,
//! Debian's 5.10, 6.1 and 6.12 kernels, busybox, virtme-ng), installed when missing, and its boot
//! with `vng --disable-kvm`, a directory shared read-write with it.
//!
//! Debian 12 has no 5.10 kernel: it comes from Debian 11 (`bullseye`), through a sources file of
//! the set-up's own ([`BULLSEYE_SOURCES`], the mirror the machine's own Debian sources name) and a
//! pin ([`BULLSEYE_PIN`]) that lets apt take nothing else from that suite. virtme-ng boots the
//! guest on the host's root file system, so the modules the package puts in /lib/modules are the
//! ones the guest loads.

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

/// The kernel series every vm-test runs on, oldest first.
const KERNEL_SERIES: &[&str] = &["5.10", "6.1", "6.12"];

/// The series vm-bench runs on.
pub(super) const BENCH_SERIES: &str = "6.1";

/// The sources file of the set-up's own that adds Debian 11 (for its 5.10 kernel only).
const BULLSEYE_SOURCES: &str = "/etc/apt/sources.list.d/observer-bullseye.sources";

/// Its pin: from bullseye, apt may take the 5.10 kernel image and nothing else.
const BULLSEYE_PIN: &str = "/etc/apt/preferences.d/observer-bullseye";

/// The Debian key ring every Debian machine has, which signs bullseye too.
const DEBIAN_KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// The guest's boot and tests may not take longer than this (software emulation on 2 cores).
/// Two guests and the fuzz build share those cores: one guest's three runs have taken 1,782 s
/// that way, and a 6.1 guest once ran past 2,700 s, so the bound leaves room above that while
/// the whole CI run stays under its 90 minutes.
const VM_TIMEOUT_SECS: u64 = 3600;

/// What the VM test needs from the host, or why it cannot run here.
pub struct VmTools {
    /// One kernel per series, oldest first.
    pub kernels: Vec<PathBuf>,
    pub vng: PathBuf,
}

impl VmTools {
    /// The kernel vm-bench runs on: 6.1, as its earlier figures did, else the oldest.
    pub fn bench_kernel(&self) -> &Path {
        self.kernels
            .iter()
            .find(|k| series(k).as_deref() == Some(BENCH_SERIES))
            .or(self.kernels.first())
            .map(PathBuf::as_path)
            .unwrap_or(Path::new(""))
    }
}

/// The series of a `vmlinuz-6.12.107+deb12-amd64` or `vmlinuz-6.1.0-56-amd64` file: `6.12`.
pub(super) fn series(kernel: &Path) -> Option<String> {
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

/// The package of a guest kernel series, as apt knows it today: 6.1 is Debian 12's own
/// (`linux-image-amd64`); 6.12 (Debian 12's backports) and 5.10 (Debian 11) carry their version
/// in their name (`linux-image-6.12.117+deb12-amd64-unsigned`,
/// `linux-image-5.10.0-32-amd64-unsigned`), so the newest of them is searched for.
fn kernel_package(series: &str) -> Option<String> {
    if series == "6.1" {
        return Some("linux-image-amd64".into());
    }
    let pattern = format!(
        r"^linux-image-{}[.-].*-amd64-unsigned$",
        series.replace('.', r"\.")
    );
    let out = Command::new("apt-cache")
        .args(["search", "--names-only", &pattern])
        .output()
        .ok()?;
    newest_plain_kernel(&String::from_utf8_lossy(&out.stdout))
}

/// The newest plain-flavour kernel package of `apt-cache search` lines, by the numbers in its
/// name (5.10.0-32 after 5.10.0-9).
fn newest_plain_kernel(search: &str) -> Option<String> {
    search
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        // The cloud flavour has no 9p (virtme-ng's root file system); the realtime one is
        // another kernel.
        .filter(|n| !n.contains("-cloud-") && !n.contains("-rt-"))
        .max_by_key(|n| {
            n.split(|c: char| !c.is_ascii_digit())
                .filter_map(|d| d.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .map(str::to_string)
}

/// The Debian mirror the machine's own apt sources use for its main suite (not the security
/// one): the first `URIs:` of a deb822 `.sources` file or URI of a `deb` line naming one.
fn debian_mirror(files: &[(String, String)]) -> Option<String> {
    let is_main = |uri: &str| !uri.contains("security") && uri.contains("debian");
    for (name, text) in files {
        if name.ends_with(".sources") {
            for stanza in text.split("\n\n") {
                let field = |f: &str| {
                    stanza
                        .lines()
                        .find_map(|l| l.strip_prefix(f))
                        .map(str::trim)
                        .unwrap_or_default()
                        .to_string()
                };
                let types = field("Types:");
                let uri = field("URIs:");
                let uri = uri.split_whitespace().next().unwrap_or_default();
                if types.split_whitespace().any(|t| t == "deb") && is_main(uri) {
                    return Some(uri.to_string());
                }
            }
        } else {
            for l in text.lines().map(str::trim) {
                let Some(rest) = l.strip_prefix("deb ") else {
                    continue;
                };
                let mut words = rest.split_whitespace();
                let mut uri = words.next().unwrap_or_default();
                if uri.starts_with('[') {
                    // Options: `[signed-by=... arch=amd64]`.
                    uri = words
                        .by_ref()
                        .find(|w| w.ends_with(']'))
                        .and_then(|_| words.next())
                        .unwrap_or_default();
                }
                if is_main(uri) {
                    return Some(uri.to_string());
                }
            }
        }
    }
    None
}

/// The machine's apt sources (`sources.list` and `sources.list.d/*.list`, `*.sources`), but
/// ours, by name and text.
fn apt_sources() -> Vec<(String, String)> {
    let mut paths = vec![PathBuf::from("/etc/apt/sources.list")];
    let mut more: Vec<PathBuf> = fs::read_dir("/etc/apt/sources.list.d")
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    more.sort();
    paths.extend(more);
    paths
        .into_iter()
        .filter(|p| p.as_path() != Path::new(BULLSEYE_SOURCES))
        .filter(|p| p.extension().is_some_and(|e| e == "list" || e == "sources"))
        .filter_map(|p| Some((p.display().to_string(), fs::read_to_string(&p).ok()?)))
        .collect()
}

/// The bullseye sources file and its pin: the 5.10 kernel image may come from bullseye,
/// nothing else may.
fn bullseye_files(mirror: &str) -> (String, String) {
    let sources = format!(
        "# Written by `cargo xtask vm-test`: Debian 11 for its 5.10 kernel only (see {BULLSEYE_PIN}).\n\
         Types: deb\n\
         URIs: {mirror}\n\
         Suites: bullseye\n\
         Components: main\n\
         Signed-By: {DEBIAN_KEYRING}\n"
    );
    let pin = "# Written by `cargo xtask vm-test`: from bullseye, only the 5.10 kernel image.\n\
               Package: /^linux-image-5\\.10\\.0-[0-9]+-amd64-unsigned$/\n\
               Pin: release n=bullseye\n\
               Pin-Priority: 500\n\
               \n\
               Package: *\n\
               Pin: release n=bullseye\n\
               Pin-Priority: -1\n"
        .to_string();
    (sources, pin)
}

/// Add Debian 11 to apt, for its 5.10 kernel only (idempotent).
fn add_bullseye() -> std::result::Result<(), String> {
    let mirror = debian_mirror(&apt_sources()).ok_or_else(|| {
        "no Debian mirror in /etc/apt/sources.list* to take bullseye's 5.10 kernel from".to_string()
    })?;
    let (sources, pin) = bullseye_files(&mirror);
    for (path, text) in [(BULLSEYE_SOURCES, sources), (BULLSEYE_PIN, pin)] {
        if fs::read_to_string(path).ok().as_deref() != Some(text.as_str()) {
            println!("writing {path} (Debian 11's 5.10 kernel, from {mirror})");
            fs::write(path, text).map_err(|e| format!("writing {path}: {e}"))?;
        }
    }
    Ok(())
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

/// The series of [`KERNEL_SERIES`] no /boot/vmlinuz-* gives.
fn missing_series(kernels: &[PathBuf]) -> Vec<&'static str> {
    KERNEL_SERIES
        .iter()
        .copied()
        .filter(|s| !kernels.iter().any(|k| series(k).as_deref() == Some(*s)))
        .collect()
}

/// Find, or install, what the guest needs. `Ok(Err(reason))`: it cannot be had here (skip).
/// Only what is missing is installed: a kernel series already in /boot is left as it is.
pub fn ensure_tools() -> Result<std::result::Result<VmTools, String>> {
    let have_qemu = cmd::which("qemu-system-x86_64").is_some();
    let missing = if std::env::var_os("OBSERVER_VM_KERNEL").is_some() {
        Vec::new()
    } else {
        missing_series(&find_kernels())
    };
    if !have_qemu || !missing.is_empty() || cmd::which("busybox").is_none() {
        if cmd::which("apt-get").is_none() || !cmd::is_root() {
            return Ok(Err(format!(
                "qemu or a guest kernel ({}) is missing and cannot be installed here (needs \
                 apt-get and root): install {} and Debian's 5.10 and 6.12 kernels by hand",
                KERNEL_SERIES.join(", "),
                VM_PACKAGES.join(" ")
            )));
        }
        if missing.contains(&"5.10") {
            if let Err(why) = add_bullseye() {
                return Ok(Err(why));
            }
        }
        let packages: Vec<String> = VM_PACKAGES.iter().map(|p| p.to_string()).collect();
        if !apt_install(&packages) {
            return Ok(Err(format!(
                "installing {} with apt-get failed",
                VM_PACKAGES.join(" ")
            )));
        }
        // apt's lists are fresh now (apt_install updated them).
        for s in missing.iter().filter(|s| **s != "6.1") {
            let Some(k) = kernel_package(s) else {
                return Ok(Err(format!("apt knows no Debian {s} kernel package")));
            };
            if !apt_install(std::slice::from_ref(&k)) {
                return Ok(Err(format!("installing {k} with apt-get failed")));
            }
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
/// Each line of the guest's console is printed after `[label] `: guests that run side by side
/// keep their lines apart.
pub fn boot_labelled(
    tools: &VmTools,
    kernel: &Path,
    dir: &Path,
    exec: &str,
    label: &str,
) -> Result<i32> {
    boot_niced(tools, kernel, dir, exec, VM_TIMEOUT_SECS, 0, Some(label))
}

/// [`boot_labelled`] with its own time limit, and the emulator at niceness `nice` (0: as we
/// are) so that a long benchmark does not starve the rest of the machine; without a label the
/// console is copied as it is.
pub fn boot_niced(
    tools: &VmTools,
    kernel: &Path,
    dir: &Path,
    exec: &str,
    timeout_secs: u64,
    nice: u8,
    label: Option<&str>,
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
        // A closed stdout of ours ends the copy, not the guest.
        match label {
            None => {
                let _ = std::io::copy(&mut console, &mut std::io::stdout());
            }
            Some(label) => {
                use std::io::{BufRead as _, Write as _};
                for line in std::io::BufReader::new(console).split(b'\n') {
                    let Ok(line) = line else { break };
                    let mut out = std::io::stdout().lock();
                    let _ = write!(out, "[{label}] ");
                    let _ = out.write_all(&line);
                    if writeln!(out).is_err() {
                        break;
                    }
                }
            }
        }
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
        assert_eq!(s("/boot/vmlinuz-5.10.0-32-amd64").as_deref(), Some("5.10"));
    }

    #[test]
    fn the_newest_plain_kernel_is_chosen_by_its_numbers() {
        let search = "linux-image-5.10.0-9-amd64-unsigned - Linux 5.10 for 64-bit PCs\n\
                      linux-image-5.10.0-32-amd64-unsigned - Linux 5.10 for 64-bit PCs\n\
                      linux-image-5.10.0-33-cloud-amd64-unsigned - Linux 5.10 for x86-64 cloud\n\
                      linux-image-5.10.0-33-rt-amd64-unsigned - Linux 5.10 for 64-bit PCs, PREEMPT_RT\n";
        assert_eq!(
            newest_plain_kernel(search).as_deref(),
            Some("linux-image-5.10.0-32-amd64-unsigned")
        );
        let search = "linux-image-6.12.99+deb12-amd64-unsigned - x\n\
                      linux-image-6.12.117+deb12-amd64-unsigned - x\n";
        assert_eq!(
            newest_plain_kernel(search).as_deref(),
            Some("linux-image-6.12.117+deb12-amd64-unsigned")
        );
        assert_eq!(newest_plain_kernel(""), None);
    }

    #[test]
    fn the_mirror_is_the_machines_own_main_debian_source() {
        let deb822 = "Types: deb\n\
                      # a comment\n\
                      URIs: http://mirror.example/debian\n\
                      Suites: bookworm bookworm-updates\n\
                      Components: main\n\
                      \n\
                      Types: deb\n\
                      URIs: http://mirror.example/debian-security\n\
                      Suites: bookworm-security\n";
        let files = |name: &str, text: &str| vec![(name.to_string(), text.to_string())];
        assert_eq!(
            debian_mirror(&files("debian.sources", deb822)).as_deref(),
            Some("http://mirror.example/debian")
        );
        let list = "# deb http://old.example/debian bookworm main\n\
                    deb http://security.example/debian-security bookworm-security main\n\
                    deb [signed-by=/k.gpg arch=amd64] http://mirror.example/debian bookworm main\n";
        assert_eq!(
            debian_mirror(&files("sources.list", list)).as_deref(),
            Some("http://mirror.example/debian")
        );
        let other = "Types: deb\nURIs: https://vendor.example/apt\nSuites: stable\n";
        assert_eq!(debian_mirror(&files("vendor.sources", other)), None);
        let (sources, pin) = bullseye_files("http://mirror.example/debian");
        assert!(sources.contains("URIs: http://mirror.example/debian\nSuites: bullseye\n"));
        assert!(sources.contains(&format!("Signed-By: {DEBIAN_KEYRING}")));
        // The kernel image's stanza comes first; everything else from bullseye is refused.
        let kernel = pin
            .find("Package: /^linux-image-5\\.10\\.0-[0-9]+-amd64-unsigned$/\n")
            .unwrap();
        let rest = pin
            .find("Package: *\nPin: release n=bullseye\nPin-Priority: -1")
            .unwrap();
        assert!(kernel < rest, "{pin}");
    }
}
