//! What the benches of `observer run` share (bench-daemon, bench-nats, bench-forensics, soak):
//! the load's nft batches, a process's RSS and CPU ticks, an HTTP GET on loopback, a directory,
//! a namespace and a child of the bench's own, and a free loopback port.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use std::{fs, process};

use anyhow::{Context, Result};

use crate::cmd;

/// The load's two `nft -f` files, each a flush of chain `ip obsload c` and 99 rules, alternated:
/// rewriting a chain with the same rules is no change. 100 changes each.
pub(crate) fn load_batches(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut batches = Vec::new();
    for (k, base) in [(0, 1000), (1, 2000)] {
        let mut batch = String::from("flush chain ip obsload c\n");
        for i in 0..99 {
            batch.push_str(&format!(
                "add rule ip obsload c tcp dport {} accept\n",
                base + i
            ));
        }
        let file = dir.join(format!("batch{k}.nft"));
        fs::write(&file, batch)?;
        batches.push(file);
    }
    Ok(batches)
}

pub(crate) fn rss(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

pub(crate) fn cpu_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    t(11) + t(12)
}

pub(crate) fn clock_ticks() -> f64 {
    cmd::output(Command::new("getconf").arg("CLK_TCK"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

pub(crate) fn http_get(port: u16, path: &str) -> Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// A directory of the bench's own, removed at the end.
pub(crate) struct TempDir(std::path::PathBuf);

impl TempDir {
    pub(crate) fn new() -> Result<TempDir> {
        let p = std::env::temp_dir().join(format!("observer-bench-daemon-{}", process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(TempDir(p))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A child killed when dropped.
pub(crate) struct Kill(pub(crate) process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A namespace of the bench's own (`obs-TAG-PID`), deleted when dropped.
pub(crate) struct Netns(pub(crate) String, test_support::Netns);

impl Netns {
    pub(crate) fn new(tag: &str) -> Result<Netns> {
        let ns = test_support::Netns::add(format!("obs-{tag}-{}", process::id()))?;
        Ok(Netns(ns.name().to_string(), ns))
    }

    pub(crate) fn nft(&self, args: &[&str]) -> Result<()> {
        self.1
            .run("nft", args)
            .map(drop)
            .map_err(|e| anyhow::anyhow!("nft {args:?}: {e}"))
    }
}

/// A loopback port free a moment ago (the listener that found it is closed again).
pub(crate) fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
