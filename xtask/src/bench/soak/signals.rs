//! Signals and the commands the soak runs: Ctrl-C (or SIGTERM, SIGHUP) stops the soak, which
//! then cleans up and says what it saw; every command runs in a process group of its own, so
//! that a Ctrl-C at the terminal reaches xtask only.

use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};

use crate::cmd;

/// Set by SIGINT, SIGTERM or SIGHUP.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

// The C library std already links; no crate needed for three calls.
extern "C" {
    fn signal(signum: i32, handler: usize) -> usize;
    pub(super) fn kill(pid: i32, sig: i32) -> i32;
    pub(super) fn prctl(option: i32, ...) -> i32;
}

const SIGHUP: i32 = 1;
const SIGINT: i32 = 2;
pub(super) const SIGTERM: i32 = 15;
const SIG_DFL: usize = 0;
pub(super) const PR_SET_PDEATHSIG: i32 = 1;

extern "C" fn on_signal(sig: i32) {
    INTERRUPTED.store(true, Ordering::SeqCst);
    // A second one ends xtask at once (the default action).
    // SAFETY: signal() is async-signal-safe.
    unsafe {
        signal(sig, SIG_DFL);
    }
}

pub(super) fn catch_signals() {
    for sig in [SIGHUP, SIGINT, SIGTERM] {
        // SAFETY: the handler only stores an atomic and calls signal().
        unsafe {
            signal(sig, on_signal as extern "C" fn(i32) as usize);
        }
    }
}

pub(super) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// A command in a process group of its own: a Ctrl-C at the terminal reaches xtask only, which
/// then stops the load and observer in order.
pub(super) fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.process_group(0);
    c
}

/// Runs it, quietly; fails with its stderr.
pub(super) fn quiet(c: &mut Command) -> Result<()> {
    let out = c
        .stdout(Stdio::null())
        .output()
        .with_context(|| format!("could not start `{}`", cmd::describe(c)))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            cmd::describe(c),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
