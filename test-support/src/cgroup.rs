//! A cgroup v2 directory of the test's own, for writers placed in a unit or a pod.

use std::path::PathBuf;

/// A cgroup v2 directory owned by one test (`obs-test-<pid>-<tag>/REL` under the cgroup2 mount),
/// removed with its parents when dropped. Processes moved into it must have exited by then.
pub struct Cgroup {
    top: PathBuf,
    pub path: PathBuf,
}

impl Cgroup {
    /// Create `REL` (e.g. `system.slice/iptables.service`) under a fresh test-owned parent, or
    /// say why it cannot be done here.
    pub fn new(tag: &str, rel: &str) -> Result<Cgroup, String> {
        let mount = cgroup2_mount().ok_or("no cgroup2 hierarchy is mounted")?;
        let top = mount.join(format!("obs-test-{}-{tag}", std::process::id()));
        let path = top.join(rel);
        let cg = Cgroup { top, path };
        std::fs::create_dir_all(&cg.path)
            .map_err(|e| format!("cannot create {}: {e}", cg.path.display()))?;
        Ok(cg)
    }

    /// Writing a pid here moves that process into the cgroup.
    pub fn procs_file(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let mut dir = self.path.clone();
        loop {
            let _ = std::fs::remove_dir(&dir);
            if dir == self.top || !dir.pop() {
                break;
            }
        }
    }
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a
/// hybrid system), from /proc/self/mountinfo: the mount of the hierarchy's root, not of a subtree.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let f: Vec<&str> = left.split(' ').collect();
        if right.split(' ').next()? != "cgroup2" || f.get(3) != Some(&"/") {
            return None;
        }
        f.get(4).map(PathBuf::from)
    })
}
