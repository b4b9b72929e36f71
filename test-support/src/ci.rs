//! Tests that cannot run here.
//!
//! Outside CI a test that lacks root, a program or a kernel feature prints `skipping: <reason>`
//! and returns, so `cargo test` works on a developer's laptop. Under CI (`CI=true`) the same test
//! fails instead: a CI run that silently skipped its root tests would report a pass it never
//! earned.

use std::fmt::Display;
use std::process::Command;

/// True when the environment says this is a CI run (`CI=true` or `CI=1`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Reports that the calling test cannot run here: fails the test under CI, prints
/// `skipping: <reason>` otherwise. The caller returns right after.
#[track_caller]
pub fn skip(reason: impl Display) {
    if in_ci() {
        panic!("cannot run under CI=true: {reason} (install it with `cargo xtask setup`, or run as root)");
    }
    println!("skipping: {reason}");
}

/// Why a test that needs root and `programs` cannot run here, if it cannot.
pub fn skip_reason(programs: &[&str]) -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root".into());
    }
    programs
        .iter()
        .find(|p| !installed(p))
        .map(|p| format!("{p} is not installed (run `cargo xtask setup`)"))
}

/// `program` is on the PATH.
fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_is_named() {
        let reason = skip_reason(&["sh", "no-such-program-here"]);
        if nix::unistd::geteuid().is_root() {
            assert_eq!(
                reason.as_deref(),
                Some("no-such-program-here is not installed (run `cargo xtask setup`)")
            );
            assert_eq!(skip_reason(&["sh"]), None);
        } else {
            assert_eq!(reason.as_deref(), Some("not root"));
        }
    }
}
