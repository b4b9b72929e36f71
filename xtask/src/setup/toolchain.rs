//! Setup's Rust side of the eBPF build: the nightly toolchain and its rust-src component
//! (rustup), bpf-linker built against nightly rustc's own libLLVM when the installed one does not
//! run or links another LLVM, and cargo-fuzz for the fuzz targets.

use std::{
    env, fs,
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

use super::Ready;
use crate::cmd::{self, describe};

/// The bpf-linker release that `setup` builds. Pinned (with `--locked`) so that a new release that
/// needs a newer rustc or another LLVM does not break a fresh machine.
const BPF_LINKER_VERSION: &str = "0.13.0";

/// The cargo-fuzz release that `setup` installs when none runs (`cargo xtask fuzz`), pinned the
/// same way.
const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// What the eBPF build needs to know about the nightly toolchain.
pub(super) struct Nightly {
    sysroot: PathBuf,
    /// File name of nightly rustc's own libLLVM in `sysroot/lib`, e.g. `libLLVM.so.22.1-rust-1.97.0-nightly`.
    llvm_lib: String,
    llvm_major: u32,
}

fn rustup() -> Result<PathBuf> {
    cmd::which_in_path("rustup").context(
        "rustup not found in PATH; the eBPF programs build with a nightly toolchain managed by \
         rustup: install rustup (https://rustup.rs) or add ~/.cargo/bin to PATH",
    )
}

pub(super) fn nightly_toolchain() -> Result<Nightly> {
    let rustup = rustup()?;
    let list = cmd::output(Command::new(&rustup).args(["toolchain", "list"]))
        .context("listing rustup toolchains")?;
    if list
        .lines()
        .any(|l| l.starts_with("nightly-") || l.trim() == "nightly")
    {
        println!("ok nightly toolchain");
    } else {
        println!("installing the nightly toolchain (rustup, minimal profile)");
        let mut c = Command::new(&rustup);
        c.args(["toolchain", "install", "nightly", "--profile", "minimal"]);
        cmd::run(&mut c).with_context(|| {
            format!(
                "`{}` failed; observer's eBPF programs need nightly. Install it by hand, or \
                 set AYA_BUILD_SKIP=1 to build userspace only",
                describe(&c)
            )
        })?;
    }

    let components = cmd::output(Command::new(&rustup).args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]))
    .context("listing the nightly toolchain's components")?;
    if components
        .lines()
        .any(|l| l.trim() == "rust-src" || l.starts_with("rust-src-"))
    {
        println!("ok rust-src (nightly)");
    } else {
        println!("installing rust-src for nightly (rustup)");
        let mut c = Command::new(&rustup);
        c.args(["component", "add", "rust-src", "--toolchain", "nightly"]);
        cmd::run(&mut c).with_context(|| {
            format!(
                "`{}` failed; building core for the BPF target needs it",
                describe(&c)
            )
        })?;
    }

    let sysroot =
        cmd::output(Command::new(&rustup).args(["run", "nightly", "rustc", "--print", "sysroot"]))
            .context("asking nightly rustc for its sysroot")?;
    let sysroot = PathBuf::from(sysroot.trim());
    let (llvm_lib, llvm_major) = find_nightly_llvm(&sysroot.join("lib"))?;
    Ok(Nightly {
        sysroot,
        llvm_lib,
        llvm_major,
    })
}

/// Finds `libLLVM.so.<N>.<M>-rust-*` in nightly's lib dir; returns its file name and N.
fn find_nightly_llvm(lib_dir: &Path) -> Result<(String, u32)> {
    let entries = fs::read_dir(lib_dir)
        .with_context(|| format!("reading nightly's lib directory {}", lib_dir.display()))?;
    let mut found: Vec<(String, u32)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|name| llvm_major_of(&name).map(|n| (name, n)))
        .filter(|(name, _)| name.starts_with("libLLVM.so.") && name.contains("-rust-"))
        .collect();
    found.sort();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!(
            "no libLLVM.so.<N>.<M>-rust-* in {}; this nightly does not ship a shared libLLVM to \
             build bpf-linker against. Reinstall nightly (`rustup toolchain install nightly`)",
            lib_dir.display()
        ),
        many => bail!(
            "several nightly libLLVM files in {}: {}; cannot tell which rustc uses",
            lib_dir.display(),
            many.iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The LLVM major version in a libLLVM file name: `libLLVM.so.22.1-rust-...` or `libLLVM-22-rust-...so`.
fn llvm_major_of(name: &str) -> Option<u32> {
    let rest = name
        .strip_prefix("libLLVM.so.")
        .or_else(|| name.strip_prefix("libLLVM-"))?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

// ---------------------------------------------------------------------------------------------
// bpf-linker

/// Where `cargo install` puts binaries: CARGO_INSTALL_ROOT, else CARGO_HOME, else ~/.cargo.
fn install_root() -> Result<PathBuf> {
    if let Some(root) = env::var_os("CARGO_INSTALL_ROOT").filter(|r| !r.is_empty()) {
        return Ok(PathBuf::from(root));
    }
    if let Some(home) = env::var_os("CARGO_HOME").filter(|r| !r.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    let home = env::var_os("HOME").context("neither CARGO_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cargo"))
}

/// `bpf-linker --version`, run the way rustc will run it (no LD_LIBRARY_PATH help).
fn bpf_linker_version(bin: &Path) -> Result<String> {
    let out = cmd::output(
        Command::new(bin)
            .arg("--version")
            .env_remove("LD_LIBRARY_PATH"),
    )?;
    let line = out.lines().next().unwrap_or_default().trim().to_owned();
    if !line.starts_with("bpf-linker") {
        bail!(
            "`{} --version` printed {line:?}, not a bpf-linker version",
            bin.display()
        );
    }
    Ok(line)
}

/// The LLVM major version a dynamically linked bpf-linker was built against, from the
/// `libLLVM...` name it needs (its DT_NEEDED string). None when statically linked or not found.
fn linked_llvm_major(bin: &Path) -> Option<u32> {
    let bytes = fs::read(bin).ok()?;
    let needle = b"libLLVM";
    let mut i = 0;
    while let Some(pos) = bytes[i..].windows(needle.len()).position(|w| w == needle) {
        let start = i + pos;
        let end = bytes[start..]
            .iter()
            .position(|&b| b == 0)
            .map_or(bytes.len(), |n| start + n);
        if let Ok(name) = std::str::from_utf8(&bytes[start..end]) {
            if name.len() < 100 && (name.starts_with("libLLVM.so.") || name.starts_with("libLLVM-"))
            {
                if let Some(major) = llvm_major_of(name) {
                    return Some(major);
                }
            }
        }
        i = start + needle.len();
    }
    None
}

pub(super) fn bpf_linker(nightly: &Nightly, force: bool) -> Result<Ready> {
    let root = install_root()?;
    let installed = root.join("bin").join("bpf-linker");
    let in_path = cmd::which_in_path("bpf-linker");

    if !force {
        // The one rustc will find (PATH), else the one in the install root (put in PATH for builds).
        for candidate in in_path.iter().chain(std::iter::once(&installed)) {
            if !cmd::is_executable(candidate) {
                continue;
            }
            match bpf_linker_version(candidate) {
                Ok(version) => match linked_llvm_major(candidate) {
                    Some(major) if major != nightly.llvm_major => println!(
                        "note {} links LLVM {major} but nightly rustc has LLVM {}: not usable",
                        candidate.display(),
                        nightly.llvm_major
                    ),
                    _ => {
                        println!(
                            "ok {version} ({}, LLVM {})",
                            candidate.display(),
                            nightly.llvm_major
                        );
                        return Ok(ready_for(candidate, in_path.as_deref()));
                    }
                },
                Err(e) => println!("note {} does not run: {e:#}", candidate.display()),
            }
        }
    }

    // Build it against nightly rustc's own libLLVM: a prefix whose lib/ has libLLVM.so pointing there.
    let prefix = root.join("bpf-linker-llvm");
    let lib = prefix.join("lib");
    fs::create_dir_all(&lib).with_context(|| format!("creating {}", lib.display()))?;
    let target = nightly.sysroot.join("lib").join(&nightly.llvm_lib);
    for name in ["libLLVM.so", nightly.llvm_lib.as_str()] {
        let link = lib.join(name);
        if fs::symlink_metadata(&link).is_ok() {
            fs::remove_file(&link)
                .with_context(|| format!("removing the old {}", link.display()))?;
        }
        symlink(&target, &link)
            .with_context(|| format!("linking {} -> {}", link.display(), target.display()))?;
    }

    println!(
        "installing bpf-linker {BPF_LINKER_VERSION} against nightly's {} (LLVM {}; cargo install, about a minute)",
        nightly.llvm_lib, nightly.llvm_major
    );
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut c = Command::new(cargo);
    c.env("LLVM_PREFIX", &prefix)
        .args(["install", "bpf-linker", "--locked", "--force", "--version"])
        .arg(BPF_LINKER_VERSION)
        .args(["--no-default-features", "--features"])
        .arg(format!("llvm-{}", nightly.llvm_major))
        .arg("--root")
        .arg(&root)
        // Never build it into the project's (or a caller's) target dir.
        .env_remove("CARGO_TARGET_DIR");
    cmd::run(&mut c).with_context(|| {
        format!(
            "building bpf-linker failed; check that the crate registry is reachable and that bpf-linker \
             {BPF_LINKER_VERSION} has the feature llvm-{}; the command was `{}`",
            nightly.llvm_major,
            describe(&c)
        )
    })?;

    let version = bpf_linker_version(&installed).with_context(|| {
        format!(
            "the freshly built {} does not run on its own (its rpath should point to {}); \
             `LD_LIBRARY_PATH={} bpf-linker --version` may show more",
            installed.display(),
            lib.display(),
            lib.display()
        )
    })?;
    println!(
        "ok {version} ({}, LLVM {})",
        installed.display(),
        nightly.llvm_major
    );
    Ok(ready_for(&installed, in_path.as_deref()))
}

/// If PATH finds no bpf-linker or another one than the working `good` one, builds must put
/// `good`'s directory first in PATH.
fn ready_for(good: &Path, in_path: Option<&Path>) -> Ready {
    let same = in_path
        .is_some_and(|p| p == good || fs::canonicalize(p).ok() == fs::canonicalize(good).ok());
    if same {
        return Ready::default();
    }
    let dir = good.parent().map(Path::to_path_buf);
    if let Some(d) = &dir {
        println!("note {} is not first in PATH; xtask puts it first for its builds (add it to PATH for plain cargo)", d.display());
    }
    Ready { path_prepend: dir }
}

// ---------------------------------------------------------------------------------------------
// cargo-fuzz

/// cargo-fuzz (the fuzz targets of fuzz/, run by `cargo xtask fuzz` and `cargo xtask test`):
/// any one that runs will do; otherwise the pinned release is installed (about a minute).
pub(super) fn cargo_fuzz() -> Result<()> {
    let installed = install_root()?.join("bin").join("cargo-fuzz");
    for candidate in cmd::which_in_path("cargo-fuzz").iter().chain([&installed]) {
        if let Ok(v) = cmd::output(Command::new(candidate).arg("--version")) {
            println!("ok {} ({})", v.trim(), candidate.display());
            return Ok(());
        }
    }
    println!("installing cargo-fuzz {CARGO_FUZZ_VERSION} (cargo install, about a minute)");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut c = Command::new(cargo);
    c.args([
        "install",
        "cargo-fuzz",
        "--locked",
        "--version",
        CARGO_FUZZ_VERSION,
    ])
    .env_remove("CARGO_TARGET_DIR");
    cmd::run(&mut c).with_context(|| {
        format!(
            "installing cargo-fuzz failed; check that the crate registry is reachable; the command was `{}`",
            describe(&c)
        )
    })?;
    let v = cmd::output(Command::new(&installed).arg("--version"))
        .with_context(|| format!("the freshly installed {} does not run", installed.display()))?;
    println!("ok {} ({})", v.trim(), installed.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llvm_major_from_names() {
        assert_eq!(
            llvm_major_of("libLLVM.so.22.1-rust-1.97.0-nightly"),
            Some(22)
        );
        assert_eq!(llvm_major_of("libLLVM-22-rust-1.97.0-nightly.so"), Some(22));
        assert_eq!(llvm_major_of("libLLVM.so"), None);
        assert_eq!(llvm_major_of("librustc_driver-b5a965480ee51f9a.so"), None);
    }

    #[test]
    fn finds_the_nightly_libllvm() -> Result<()> {
        let dir = env::temp_dir().join(format!("xtask-llvm-test-{}", std::process::id()));
        fs::create_dir_all(&dir)?;
        for f in [
            "libLLVM-22-rust-1.97.0-nightly.so",
            "libLLVM.so.22.1-rust-1.97.0-nightly",
            "librustc_driver-x.so",
        ] {
            fs::write(dir.join(f), b"")?;
        }
        let r = find_nightly_llvm(&dir);
        fs::remove_dir_all(&dir)?;
        assert_eq!(r?, ("libLLVM.so.22.1-rust-1.97.0-nightly".to_owned(), 22));
        Ok(())
    }
}
