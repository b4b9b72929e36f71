//! What every bench's report shares: the run's environment (date, kernel, CPUs, the command,
//! observer's revision, the tools' versions) for a section's header, and the one writer of a
//! marker-delimited section of BENCHMARKS.md, which each bench replaces with its own figures
//! ([`write_benchmarks`]; fuzz and image write their sections with [`write_marked`] too).

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
    thread,
};

use anyhow::{Context as _, Result};

use crate::cmd;

pub(crate) struct Environment {
    pub(crate) date: String,
    pub(crate) kernel: String,
    pub(crate) cpus: String,
    pub(crate) command: String,
    pub(crate) revision: String,
    pub(crate) tools: String,
}

impl Environment {
    pub(crate) fn collect() -> Environment {
        let first_line = |c: &mut Command| {
            cmd::output(c)
                .ok()
                .and_then(|o| o.lines().next().map(str::to_owned))
                .unwrap_or_else(|| "unknown".into())
        };
        let cpus = thread::available_parallelism().map_or(0, |n| n.get());
        let model = fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find_map(|l| l.strip_prefix("model name"))
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).trim().to_owned())
            })
            .unwrap_or_else(|| "unknown model".into());
        let mut command = String::new();
        // Not CARGO_TARGET_DIR: where the build lands does not change the figures.
        command.push_str("cargo xtask");
        for a in env::args().skip(1) {
            command.push(' ');
            command.push_str(&a);
        }
        let revision = first_line(Command::new("git").arg("-C").arg(crate::root()).args([
            "describe",
            "--always",
            "--dirty",
            "--abbrev=12",
        ]));
        let revision = match revision.strip_suffix("-dirty") {
            Some(r) => format!("{r} with uncommitted changes"),
            None => revision,
        };
        Environment {
            date: first_line(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"])),
            kernel: first_line(Command::new("uname").arg("-r")),
            cpus: format!("{cpus} ({model})"),
            command,
            revision,
            tools: format!(
                "{}, {}",
                first_line(Command::new("iptables-legacy").arg("--version")),
                first_line(Command::new("nft").arg("--version"))
            ),
        }
    }
}

/// Writes `section` into the workspace's BENCHMARKS.md between `start` and `end`, as
/// [`write_marked`] does; returns the file's path (for the line that says so).
pub(crate) fn write_benchmarks(start: &str, end: &str, section: &str) -> Result<PathBuf> {
    let path = crate::root().join("BENCHMARKS.md");
    write_marked(&path, start, end, section)?;
    Ok(path)
}

/// Replace what lies between the `start` and `end` markers of the file (markers included) with
/// `section`, or append `section` when the markers are missing.
pub(crate) fn write_marked(path: &Path, start: &str, end: &str, section: &str) -> Result<()> {
    let old = fs::read_to_string(path).unwrap_or_default();
    let new = match (old.find(start), old.find(end)) {
        (Some(s), Some(e)) if s < e => {
            let rest = &old[e + end.len()..];
            let rest = rest.strip_prefix('\n').unwrap_or(rest);
            format!("{}{section}{rest}", &old[..s])
        }
        _ => {
            let mut o = if old.trim().is_empty() {
                "# Benchmarks\n".to_owned()
            } else {
                old
            };
            if !o.ends_with('\n') {
                o.push('\n');
            }
            o.push('\n');
            o + section
        }
    };
    fs::write(path, new).with_context(|| format!("writing {}", path.display()))
}
