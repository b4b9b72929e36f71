//! Small helpers around `std::process::Command`: run a command with its output shown, or capture
//! its stdout, and always say which command failed.

use std::{
    env,
    ffi::OsStr,
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{bail, Context as _, Result};

/// The command line as a user could type it, with the variables it sets in front.
pub fn describe(cmd: &Command) -> String {
    let mut parts: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| v.map(|v| format!("{}={}", k.to_string_lossy(), v.to_string_lossy())))
        .collect();
    parts.push(cmd.get_program().to_string_lossy().into_owned());
    parts.extend(cmd.get_args().map(quote));
    parts.join(" ")
}

fn quote(arg: &OsStr) -> String {
    let s = arg.to_string_lossy();
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=+./:,@".contains(c))
    {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Runs the command with inherited stdio; fails unless it exits with status 0.
pub fn run(cmd: &mut Command) -> Result<()> {
    let desc = describe(cmd);
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{desc}`"))?;
    if !status.success() {
        bail!("`{desc}` failed ({status})");
    }
    Ok(())
}

/// Runs the command and returns its exit code (inherited stdio). A death by signal counts as 128+N.
pub fn run_status(cmd: &mut Command) -> Result<i32> {
    use std::os::unix::process::ExitStatusExt as _;
    let desc = describe(cmd);
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{desc}`"))?;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// Runs the command, captures stdout and stderr; fails (showing stderr) unless it exits with 0.
pub fn output(cmd: &mut Command) -> Result<String> {
    let desc = describe(cmd);
    let out = cmd
        .output()
        .with_context(|| format!("could not start `{desc}`"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        bail!("`{desc}` failed ({}): {}", out.status, stderr.trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Like `which`: the first executable file called `name` in PATH, then in the sbin directories
/// (a non-root PATH often lacks them, yet nft and ip live there).
pub fn which(name: &str) -> Option<PathBuf> {
    // A program outside PATH (the CNI plugins' /usr/lib/cni) is named by its path.
    if name.starts_with('/') {
        let p = PathBuf::from(name);
        return is_executable(&p).then_some(p);
    }
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

/// Like `which`, but only in PATH (what a child process such as rustc will find).
pub fn which_in_path(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

pub fn is_executable(p: &Path) -> bool {
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether this process runs with effective uid 0 (read from /proc/self/status, no libc needed).
pub fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// Runs `f`, then prints how long it took (to stderr, so stdout stays the tools' own).
pub fn phase<T>(name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    eprintln!("xtask: == {name}");
    let start = Instant::now();
    let r = f();
    let took = start.elapsed().as_secs_f64();
    match &r {
        Ok(_) => eprintln!("xtask: == {name}: done in {took:.1}s"),
        Err(_) => eprintln!("xtask: == {name}: FAILED after {took:.1}s"),
    }
    r
}
