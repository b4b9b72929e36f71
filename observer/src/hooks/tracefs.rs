//! tracefs: syscall tracepoints are attached through it.
//!
//! A fresh machine may not have it mounted. Like other eBPF tools, observer mounts it at
//! `/sys/kernel/tracing` when it is missing and says so; the mount is left in place at exit
//! (other tools may be using it by then), which the README documents.

use std::path::Path;

/// Where tracefs is expected.
pub const TRACEFS: &str = "/sys/kernel/tracing";
const LEGACY_TRACEFS: &str = "/sys/kernel/debug/tracing";

/// What [`ensure`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tracefs {
    /// Already mounted at this path.
    Mounted(&'static str),
    /// Was missing; observer mounted it at [`TRACEFS`].
    MountedNow,
}

/// tracefs is missing and could not be mounted.
#[derive(Debug, thiserror::Error)]
#[error("tracefs is not reachable and mounting it failed ({0}); {fix}", fix = fix(.0))]
pub struct TracefsError(pub nix::Error);

fn has_events(dir: &str) -> bool {
    Path::new(dir).join("events").is_dir()
}

/// Where tracefs is mounted, if it is.
pub fn find() -> Option<&'static str> {
    [TRACEFS, LEGACY_TRACEFS]
        .into_iter()
        .find(|d| has_events(d))
}

/// Make sure tracefs is mounted, mounting it when it is not.
pub fn ensure() -> Result<Tracefs, TracefsError> {
    if let Some(dir) = find() {
        return Ok(Tracefs::Mounted(dir));
    }
    nix::mount::mount(
        Some("nodev"),
        TRACEFS,
        Some("tracefs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(TracefsError)?;
    Ok(Tracefs::MountedNow)
}

/// The fix to suggest for a mount failure.
fn fix(e: &nix::Error) -> &'static str {
    if *e == nix::Error::EPERM && !nix::unistd::geteuid().is_root() {
        "run observer as root"
    } else {
        "mount it with `mount -t tracefs nodev /sys/kernel/tracing` and run observer again"
    }
}
