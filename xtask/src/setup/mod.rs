//! `cargo xtask setup`: checks what building and testing observer needs and installs what is
//! missing, nothing more. One line per check: `ok ...`, `installing ...`, `note ...`.
//!
//! Debian packages are in [`debian`]; the nightly toolchain, bpf-linker and cargo-fuzz in
//! [`toolchain`]; the kernel facilities, only reported, here.

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Result;

mod debian;
mod toolchain;

use debian::{debian_packages, unpacked_packages};
use toolchain::{bpf_linker, cargo_fuzz, nightly_toolchain};

#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Rebuild bpf-linker even when the installed one works.
    pub force_bpf_linker: bool,
    /// When not root and Debian packages are missing: warn and go on instead of failing.
    /// (`build` and `tail` do not need them to compile; `setup` itself is strict.)
    pub lenient_packages: bool,
}

/// What later cargo commands need to know after setup.
#[derive(Debug, Default)]
pub struct Ready {
    /// A directory to put in front of PATH for child processes, when the working bpf-linker is
    /// not the first one PATH finds (for example `$CARGO_HOME/bin` missing from PATH).
    pub path_prepend: Option<PathBuf>,
}

impl Ready {
    /// Applies what setup found to a command that will build eBPF code.
    pub fn apply(&self, cmd: &mut Command) {
        if let Some(dir) = &self.path_prepend {
            let old = env::var_os("PATH").unwrap_or_default();
            let paths = std::iter::once(dir.clone()).chain(env::split_paths(&old));
            if let Ok(joined) = env::join_paths(paths) {
                cmd.env("PATH", joined);
            }
        }
    }
}

pub fn run(opts: Options) -> Result<Ready> {
    debian_packages(opts)?;
    unpacked_packages(opts)?;
    let nightly = nightly_toolchain()?;
    let ready = bpf_linker(&nightly, opts.force_bpf_linker)?;
    cargo_fuzz()?;
    kernel_report();
    Ok(ready)
}

// ---------------------------------------------------------------------------------------------
// Kernel facilities: reported only

fn kernel_report() {
    if Path::new("/sys/kernel/tracing/events").is_dir() {
        println!("ok tracefs (/sys/kernel/tracing)");
    } else {
        println!(
            "note tracefs is not mounted at /sys/kernel/tracing; observer mounts it itself when run \
             as root (by hand: mount -t tracefs nodev /sys/kernel/tracing)"
        );
    }
    if Path::new("/sys/kernel/btf/vmlinux").exists() {
        println!("ok kernel BTF (/sys/kernel/btf/vmlinux)");
    } else {
        println!(
            "note no kernel BTF at /sys/kernel/btf/vmlinux; observer cannot resolve struct offsets"
        );
    }
}
