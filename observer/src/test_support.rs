//! What the tests share: how a test that cannot run here says so.
//!
//! Outside CI a test that lacks root, a program or a kernel feature prints `skipping: <reason>`
//! and returns, so `cargo test` works on a developer's laptop. Under CI (`CI=true`) the same test
//! fails instead: a CI run that silently skipped its root tests would report a pass it never
//! earned.

use std::fmt::Display;

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
