//! Builds the eBPF programs (observer-ebpf) with nightly through aya-build and puts the object in
//! OUT_DIR. With AYA_BUILD_SKIP=1 (clippy, unit tests of userspace only) an empty object is written
//! instead, and the loader says that this build carries no eBPF programs.

use std::{env, fs, path::PathBuf};

use anyhow::{anyhow, Context as _};

fn main() -> anyhow::Result<()> {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or_else(|| anyhow!("OUT_DIR not set"))?);
    let skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    if skip {
        fs::write(out_dir.join("observer"), b"").context("writing the empty eBPF placeholder")?;
        return Ok(());
    }
    let metadata = cargo_root()?;
    let ebpf = metadata.join("observer-ebpf");
    let ebpf = ebpf
        .to_str()
        .ok_or_else(|| anyhow!("non-UTF-8 path to observer-ebpf"))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "observer-ebpf",
            root_dir: ebpf,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
    .context(
        "building the eBPF programs failed; run `cargo xtask setup` (nightly rust-src and \
         bpf-linker), or set AYA_BUILD_SKIP=1 to build userspace only",
    )
}

fn cargo_root() -> anyhow::Result<PathBuf> {
    let manifest = PathBuf::from(
        env::var_os("CARGO_MANIFEST_DIR").ok_or_else(|| anyhow!("CARGO_MANIFEST_DIR not set"))?,
    );
    manifest
        .parent()
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("observer crate has no parent directory"))
}
