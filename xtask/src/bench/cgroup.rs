//! A memory cgroup of the bench's own, to run observer under a DaemonSet's memory limit and see
//! whether it survives: its limit, the peak usage charged to it and how many processes its OOM
//! killer killed. cgroup v2 (`memory.max`, `memory.peak`, `memory.events`) or, where the
//! memory controller is still on v1, `memory.limit_in_bytes`, `memory.max_usage_in_bytes` and
//! `memory.oom_control`. Removed on drop (once the processes in it have ended).

use std::{
    fs,
    path::{Path, PathBuf},
    process,
};

use anyhow::{bail, Context as _, Result};

const ROOT: &str = "/sys/fs/cgroup";

pub(crate) struct MemCgroup {
    dir: PathBuf,
    v2: bool,
    limit: u64,
}

/// What the cgroup saw.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MemFigures {
    pub(crate) limit: u64,
    /// The peak usage charged to it (`None` where the kernel does not keep it: v2 before 5.19).
    pub(crate) peak: Option<u64>,
    pub(crate) oom_kills: u64,
}

impl MemCgroup {
    /// A new cgroup named `obs-bench-PID-TAG` with a memory limit of `limit` bytes (swap too,
    /// where swap is accounted, so that the limit is not dodged by swapping).
    pub(crate) fn create(tag: &str, limit: u64) -> Result<MemCgroup> {
        let name = format!("obs-bench-{}-{tag}", process::id());
        let v2 = Path::new(ROOT).join("cgroup.controllers").exists();
        let dir = if v2 {
            let controllers = fs::read_to_string(Path::new(ROOT).join("cgroup.subtree_control"))
                .unwrap_or_default();
            if !controllers.split_whitespace().any(|c| c == "memory") {
                bail!(
                    "the memory controller is not enabled for {ROOT}'s children \
                     (cgroup.subtree_control: {:?}); enable it with `echo +memory > \
                     {ROOT}/cgroup.subtree_control`",
                    controllers.trim()
                );
            }
            Path::new(ROOT).join(name)
        } else {
            own_v1_memory_dir()?.join(name)
        };
        fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let cg = MemCgroup { dir, v2, limit };
        if v2 {
            cg.write("memory.max", &limit.to_string())?;
            if cg.dir.join("memory.swap.max").exists() {
                cg.write("memory.swap.max", "0")?;
            }
        } else {
            cg.write("memory.limit_in_bytes", &limit.to_string())?;
            if cg.dir.join("memory.memsw.limit_in_bytes").exists() {
                cg.write("memory.memsw.limit_in_bytes", &limit.to_string())?;
            }
        }
        Ok(cg)
    }

    /// The file a process writes its pid into to join it (before it starts what is measured:
    /// memory charged before it joined stays with its old cgroup).
    pub(crate) fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        let path = self.dir.join(file);
        fs::write(&path, value).with_context(|| format!("writing {value} to {}", path.display()))
    }

    fn read(&self, file: &str) -> Option<String> {
        fs::read_to_string(self.dir.join(file)).ok()
    }

    pub(crate) fn figures(&self) -> MemFigures {
        let (peak, events) = if self.v2 {
            ("memory.peak", "memory.events")
        } else {
            ("memory.max_usage_in_bytes", "memory.oom_control")
        };
        MemFigures {
            limit: self.limit,
            peak: self.read(peak).and_then(|s| s.trim().parse().ok()),
            oom_kills: self
                .read(events)
                .as_deref()
                .and_then(|s| keyed(s, "oom_kill"))
                .unwrap_or(0),
        }
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // Fails while a process is still in it; it is then left behind, and said so.
        if let Err(e) = fs::remove_dir(&self.dir) {
            eprintln!("xtask: could not remove {}: {e}", self.dir.display());
        }
    }
}

/// The value of `key` in a flat-keyed cgroup file (`oom_kill 3`).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// This process's cgroup of the v1 memory hierarchy, where a child can be made.
fn own_v1_memory_dir() -> Result<PathBuf> {
    let text = fs::read_to_string("/proc/self/cgroup").context("reading /proc/self/cgroup")?;
    let path = text
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| path.to_string())
        })
        .context("this system has no cgroup memory controller (neither v2 nor v1)")?;
    Ok(Path::new(ROOT)
        .join("memory")
        .join(path.trim_start_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_keyed_files_are_read_by_key() {
        let v2 = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed(v2, "oom_kill"), Some(1));
        assert_eq!(keyed(v2, "oom"), Some(2));
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(keyed(v1, "oom_kill"), Some(3));
        assert_eq!(keyed("under_oom 0\n", "oom_kill"), None);
    }
}
