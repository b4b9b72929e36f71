//! `cargo xtask deploy-check`: validates the Kubernetes manifests in `deploy/` against the API
//! schemas, offline, checks the Containerfile, and checks the Prometheus alert rules with
//! `promtool`.
//!
//! The validator is the `kubernetes-validate` Python package (it bundles the schemas of every
//! Kubernetes release, so no cluster and no network beyond the package install is needed). It is
//! installed into a virtual environment in cargo's target directory the first time.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

use crate::cmd;

/// The validator's virtual environment, below cargo's target directory.
fn venv(target: &Path) -> PathBuf {
    target.join("deploy-check").join("venv")
}

/// Install kubernetes-validate when it is missing; returns its executable.
pub fn ensure_validator(target: &Path) -> Result<PathBuf> {
    let venv = venv(target);
    let exe = venv.join("bin").join("kubernetes-validate");
    if cmd::is_executable(&exe) {
        println!("ok kubernetes-validate ({})", venv.display());
        return Ok(exe);
    }
    let python = cmd::which("python3").context(
        "python3 is not installed; the manifest validator needs it: `apt-get install -y python3 \
         python3-venv`",
    )?;
    println!("installing kubernetes-validate into {}", venv.display());
    let _ = fs::remove_dir_all(&venv);
    let made = Command::new(&python)
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        if !cmd::is_root() {
            bail!(
                "`python3 -m venv` failed; install python3-venv as root \
                 (`apt-get install -y python3-venv`) and run again"
            );
        }
        cmd::run(Command::new("apt-get").args([
            "install",
            "-y",
            "--no-install-recommends",
            "python3-venv",
        ]))
        .context("installing python3-venv (try `apt-get update` first)")?;
        cmd::run(Command::new(&python).args(["-m", "venv"]).arg(&venv))?;
    }
    cmd::run(Command::new(venv.join("bin").join("pip")).args([
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "kubernetes-validate",
    ]))
    .context("installing kubernetes-validate with pip")?;
    if !cmd::is_executable(&exe) {
        bail!(
            "pip installed kubernetes-validate but {} is missing",
            exe.display()
        );
    }
    Ok(exe)
}

/// The manifests to validate.
fn manifests(root: &Path) -> Result<Vec<PathBuf>> {
    let dir = root.join("deploy");
    let mut out: Vec<PathBuf> = fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    out.sort();
    if out.is_empty() {
        bail!("no manifests (*.yaml) in {}", dir.display());
    }
    Ok(out)
}

/// A manifest the validator must reject (a string where a boolean belongs, an unknown field):
/// proves that the validator validates rather than passing everything.
const BROKEN: &str =
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  hostPID: \"yes\"\n  \
                      containers:\n    - name: x\n      image: x\n      bogusField: 1\n";

pub fn check(root: &Path, target: &Path) -> Result<()> {
    let exe = ensure_validator(target)?;
    let files = manifests(root)?;
    cmd::run(
        Command::new(&exe)
            .args(["--strict", "--quiet"])
            .args(&files),
    )
    .context("a manifest in deploy/ does not match the Kubernetes API schema (see above)")?;
    let broken = target.join("deploy-check").join("broken.yaml");
    fs::write(&broken, BROKEN).with_context(|| format!("writing {}", broken.display()))?;
    let rejected = !Command::new(&exe)
        .args(["--strict", "--quiet"])
        .arg(&broken)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .context("running kubernetes-validate")?
        .success();
    if !rejected {
        bail!("kubernetes-validate accepted a broken manifest: the check would prove nothing");
    }
    containerfile(root)?;
    alert_rules(root)?;
    println!(
        "ok deploy/: {} manifest file(s) valid; Containerfile from scratch; alert rules pass \
         `promtool check rules` and their unit tests",
        files.len()
    );
    Ok(())
}

/// `promtool check rules` on the alert rules, then their unit tests (`promtool test rules`).
fn alert_rules(root: &Path) -> Result<()> {
    let promtool = cmd::which("promtool").context(
        "promtool is not installed; `cargo xtask setup` installs it (Debian package prometheus)",
    )?;
    let dir = root.join("deploy").join("prometheus");
    cmd::run(Command::new(&promtool).current_dir(&dir).args([
        "check",
        "rules",
        "observer.rules.yml",
    ]))
    .context("deploy/prometheus/observer.rules.yml is not a valid Prometheus rule file")?;
    cmd::run(Command::new(&promtool).current_dir(&dir).args([
        "test",
        "rules",
        "observer.rules.test.yml",
    ]))
    .context("the alert rules' unit tests failed (deploy/prometheus/observer.rules.test.yml)")
}

/// The Containerfile starts from nothing (no registry) and copies the root filesystem that
/// `cargo xtask image` makes from the binary `cargo xtask build` writes.
fn containerfile(root: &Path) -> Result<()> {
    let path = root.join("deploy").join("Containerfile");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    for needed in [
        "cargo xtask build",
        "target/release/observer",
        "FROM scratch",
        "COPY rootfs/ /",
    ] {
        if !text.contains(needed) {
            bail!("{} does not contain `{needed}`", path.display());
        }
    }
    Ok(())
}
