//! Where the binaries under test are.
//!
//! The integration tests are a package of their own, so cargo neither builds observer's binary
//! for them nor tells them where it is (`CARGO_BIN_EXE_*` is set for a binary's own package
//! only). They find it beside themselves instead: cargo puts a test executable in
//! `target/<profile>/deps/` and the binaries of the same build in `target/<profile>/`, which
//! also holds for a test executable run directly (as the VM tests run them in a guest).
//! `OBSERVER_BIN` names another binary.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable naming the observer binary to test, instead of the one beside the
/// test executable.
pub const OBSERVER_BIN: &str = "OBSERVER_BIN";

/// The observer binary under test: `$OBSERVER_BIN`, else `target/<profile>/observer` of the
/// test executable's own build. Fails the test, naming the command that builds it, when it is
/// missing.
pub fn observer_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os(OBSERVER_BIN) {
            let bin = PathBuf::from(bin);
            assert!(
                bin.is_file(),
                "{OBSERVER_BIN}={} is not a file",
                bin.display()
            );
            return bin;
        }
        let dir = profile_dir();
        let bin = dir.join("observer");
        assert!(
            bin.is_file(),
            "{} is missing: the integration tests run the observer binary of their own build; \
             build it first with `{}` (`cargo xtask test` does), or name one with {OBSERVER_BIN}",
            bin.display(),
            build_command(&dir, ""),
        );
        bin
    })
}

/// The observer crate's `bench` example (the measuring tools, outside the shipped binary),
/// beside the observer binary of the same build.
pub fn bench_bin() -> PathBuf {
    let dir = observer_bin().parent().expect("the binary's directory");
    let bin = dir.join("examples").join("bench");
    assert!(
        bin.is_file(),
        "{} is missing: build it with `{}` (`cargo xtask test` does)",
        bin.display(),
        build_command(dir, " --example bench"),
    );
    bin
}

/// `target/<profile>`: the directory above the running test executable's `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let deps = exe.parent().expect("the test executable's directory");
    let dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().unwrap_or(deps)
    } else {
        deps
    };
    dir.to_path_buf()
}

/// The cargo command that builds observer's binary (and `what`: ` --example bench`) into `dir`,
/// a `target/<profile>`.
fn build_command(dir: &Path, what: &str) -> String {
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => String::new(),
        Some("release") => " --release".into(),
        Some(other) => format!(" --profile {other}"),
        None => String::new(),
    };
    format!("cargo build{profile} -p observer{what}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_command_names_the_profile_of_the_directory() {
        assert_eq!(
            build_command(Path::new("/t/release"), ""),
            "cargo build --release -p observer"
        );
        assert_eq!(
            build_command(Path::new("/t/debug"), " --example bench"),
            "cargo build -p observer --example bench"
        );
        assert_eq!(
            build_command(Path::new("/t/profiling"), ""),
            "cargo build --profile profiling -p observer"
        );
    }

    #[test]
    fn the_binaries_are_looked_for_beside_deps() {
        let dir = profile_dir();
        let exe = std::env::current_exe().unwrap();
        assert_eq!(exe.parent().and_then(|d| d.parent()), Some(dir.as_path()));
    }
}
