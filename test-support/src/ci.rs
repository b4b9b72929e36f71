//! Tests that cannot run here.
//!
//! Outside CI a test that lacks root, a program or a kernel feature prints `skipping: <reason>`
//! to stderr and returns, so `cargo test` works on a developer's laptop. libtest counts such a
//! test as passed, so each skip is also written to the file named by `OBSERVER_SKIPS_FILE` when
//! it is set (`cargo xtask test` sets it and prints what was skipped at the end of its run).
//! Under CI (`CI=true`) the same test fails instead: a CI run that silently skipped its root
//! tests would report a pass it never earned.

use std::fmt::Display;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;

/// The environment variable naming the file each skip is appended to, one line per skip:
/// `<test binary> <test name>\t<reason>`.
pub const SKIPS_FILE: &str = "OBSERVER_SKIPS_FILE";

/// True when the environment says this is a CI run (`CI=true` or `CI=1`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Reports that the calling test cannot run here: fails the test under CI, prints
/// `skipping: <reason>` to stderr otherwise (and appends it to [`SKIPS_FILE`]'s file when that
/// is set). The caller returns right after.
#[track_caller]
pub fn skip(reason: impl Display) {
    if in_ci() {
        panic!("cannot run under CI=true: {reason} (install it with `cargo xtask setup`, or run as root)");
    }
    eprintln!("skipping: {reason}");
    if let Some(file) = std::env::var_os(SKIPS_FILE) {
        let line = skip_line(&test_name(), &reason.to_string());
        if let Err(e) = append(Path::new(&file), &line) {
            // The run asked for every skip to be counted: one it cannot count must not pass.
            panic!(
                "skipping: {reason}; but the skip could not be written to {} ({SKIPS_FILE}): {e}",
                Path::new(&file).display()
            );
        }
    }
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

/// Skips the calling test (see [`skip`]) and returns from it unless it runs as root and every
/// program named is on the PATH: `skip_unless!("ip", "nft");`.
#[macro_export]
macro_rules! skip_unless {
    ($($tool:expr),*) => {
        if let Some(reason) = $crate::skip_reason(&[$($tool),*]) {
            $crate::skip(format_args!("{reason}"));
            return;
        }
    };
}

/// `program` is on the PATH.
fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The running test as `<binary> <test>`: the test executable's name without cargo's hash
/// (`tail-0123456789abcdef` is `tail`), and the test's own name, which libtest gives the thread
/// the test runs on.
fn test_name() -> String {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .map(|n| without_hash(&n).to_string())
        .unwrap_or_else(|| "?".into());
    match std::thread::current().name() {
        Some(test) if test != "main" => format!("{binary} {test}"),
        _ => binary,
    }
}

/// `name` without the `-<16 hex digits>` cargo appends to a test executable's name.
fn without_hash(name: &str) -> &str {
    match name.rsplit_once('-') {
        Some((stem, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            stem
        }
        _ => name,
    }
}

/// One line of the skips file: the test, a tab, the reason, on a single line.
fn skip_line(test: &str, reason: &str) -> String {
    let flat = |s: &str| s.replace(['\n', '\r', '\t'], " ");
    format!("{}\t{}\n", flat(test), flat(reason))
}

/// Appends `line` to `file` in one write (O_APPEND), so that lines of test binaries and threads
/// running side by side do not interleave.
fn append(file: &Path, line: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)?
        .write_all(line.as_bytes())
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

    #[test]
    fn a_skip_is_one_line_naming_the_binary_and_the_test() {
        assert_eq!(without_hash("tail-0123456789abcdef"), "tail");
        assert_eq!(without_hash("nats_secure-fedcba9876543210"), "nats_secure");
        assert_eq!(without_hash("observer"), "observer");
        assert_eq!(without_hash("bench-daemon"), "bench-daemon");
        assert_eq!(
            skip_line("tail a_test", "nft is not installed\n(run it)"),
            "tail a_test\tnft is not installed (run it)\n"
        );
        let name = test_name();
        assert!(
            name.ends_with(" ci::tests::a_skip_is_one_line_naming_the_binary_and_the_test"),
            "{name}"
        );
    }

    #[test]
    fn skips_are_appended_one_line_each() {
        let file = std::env::temp_dir().join(format!("skips-{}.tsv", std::process::id()));
        let _ = std::fs::remove_file(&file);
        append(&file, "a\tx\n").expect("append");
        append(&file, "b\ty\n").expect("append");
        let text = std::fs::read_to_string(&file).expect("read");
        let _ = std::fs::remove_file(&file);
        assert_eq!(text, "a\tx\nb\ty\n");
    }
}
