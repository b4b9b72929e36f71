//! Pods by name, from the node alone: no API server, so names still come when the control plane
//! is down.
//!
//! The cgroup path gives a writer's pod uid and container id ([`crate::cgroup`]). kubelet keeps
//! each pod's logs in `/var/log/pods/<namespace>_<name>_<uid>/<container>/`, and the runtimes
//! (containerd, CRI-O) link each container's log as
//! `/var/log/containers/<pod>_<namespace>_<container>-<container id>.log`. Kubernetes names are
//! DNS labels and subdomains (no `_`), so both split cleanly. Found names are cached; a miss
//! re-reads the directory at most once per [`RESCAN`], so a pod that is not there (or a node that
//! is not a Kubernetes node) costs nothing per change.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::cgroup::Workload;

/// kubelet's pod log directory.
pub const POD_LOGS: &str = "/var/log/pods";
/// The runtimes' container log links.
pub const CONTAINER_LOGS: &str = "/var/log/containers";
/// A miss re-reads a directory at most this often.
const RESCAN: Duration = Duration::from_secs(1);
/// Names kept; beyond this the cache is rebuilt from the directories.
const KEPT: usize = 16_384;

/// Where the names are read from.
#[derive(Debug, Clone)]
pub struct PodDirs {
    pub pods: PathBuf,
    pub containers: PathBuf,
}

impl Default for PodDirs {
    fn default() -> PodDirs {
        PodDirs {
            pods: PathBuf::from(POD_LOGS),
            containers: PathBuf::from(CONTAINER_LOGS),
        }
    }
}

/// The process-wide names, read from `dirs` (the first call decides; later ones are ignored).
pub fn configure(dirs: PodDirs) {
    let _ = NAMES.set(Names::new(dirs));
}

static NAMES: OnceLock<Names> = OnceLock::new();

fn names() -> &'static Names {
    NAMES.get_or_init(|| Names::new(PodDirs::default()))
}

/// Fill in the pod's namespace, name and container name where the node's logs say them.
pub fn complete(w: &mut Workload) {
    let Some(pod) = w.pod.as_mut() else {
        return;
    };
    let n = names();
    if pod.name.is_none() {
        if let Some((ns, name)) = n.pod(&pod.uid) {
            pod.namespace = Some(ns);
            pod.name = Some(name);
        }
    }
    if pod.container.is_none() {
        if let Some(id) = &w.container_id {
            pod.container = n.container(id);
        }
    }
}

/// The caches and when each directory was last read.
struct Names {
    dirs: PodDirs,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// uid → (namespace, name).
    pods: HashMap<String, (String, String)>,
    /// container id → container name.
    containers: HashMap<String, String>,
    pods_read: Option<Instant>,
    containers_read: Option<Instant>,
}

impl Names {
    fn new(dirs: PodDirs) -> Names {
        Names {
            dirs,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn pod(&self, uid: &str) -> Option<(String, String)> {
        let mut g = self.inner.lock().ok()?;
        if let Some(hit) = g.pods.get(uid) {
            return Some(hit.clone());
        }
        if g.pods_read.is_some_and(|t| t.elapsed() < RESCAN) {
            return None;
        }
        g.pods_read = Some(Instant::now());
        g.pods = read_pods(&self.dirs.pods);
        g.pods.get(uid).cloned()
    }

    fn container(&self, id: &str) -> Option<String> {
        let mut g = self.inner.lock().ok()?;
        if let Some(hit) = g.containers.get(id) {
            return Some(hit.clone());
        }
        if g.containers_read.is_some_and(|t| t.elapsed() < RESCAN) {
            return None;
        }
        g.containers_read = Some(Instant::now());
        g.containers = read_containers(&self.dirs.containers);
        g.containers.get(id).cloned()
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
        .take(KEPT)
        .collect()
}

/// `<namespace>_<name>_<uid>` directories.
fn read_pods(dir: &Path) -> HashMap<String, (String, String)> {
    entries(dir)
        .iter()
        .filter_map(|e| parse_pod_dir(e))
        .map(|(ns, name, uid)| (uid.to_string(), (ns.to_string(), name.to_string())))
        .collect()
}

/// `<pod>_<namespace>_<container>-<container id>.log` links.
fn read_containers(dir: &Path) -> HashMap<String, String> {
    entries(dir)
        .iter()
        .filter_map(|e| parse_container_log(e))
        .map(|(_, _, container, id)| (id.to_string(), container.to_string()))
        .collect()
}

/// (namespace, name, uid) of a pod log directory's name.
pub fn parse_pod_dir(entry: &str) -> Option<(&str, &str, &str)> {
    let mut f = entry.splitn(3, '_');
    let (ns, name, uid) = (f.next()?, f.next()?, f.next()?);
    (!ns.is_empty() && !name.is_empty() && !uid.is_empty() && !uid.contains('_'))
        .then_some((ns, name, uid))
}

/// (pod, namespace, container, container id) of a container log link's name.
pub fn parse_container_log(entry: &str) -> Option<(&str, &str, &str, &str)> {
    let stem = entry.strip_suffix(".log")?;
    let (rest, id) = stem.rsplit_once('-')?;
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut f = rest.splitn(3, '_');
    let (pod, ns, container) = (f.next()?, f.next()?, f.next()?);
    (!pod.is_empty() && !ns.is_empty() && !container.is_empty() && !container.contains('_'))
        .then_some((pod, ns, container, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CID: &str = "4f6c2b5a8e1d0c9b7a6f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a09";

    #[test]
    fn kubelet_and_runtime_log_names_split_into_their_parts() {
        assert_eq!(
            parse_pod_dir("kube-system_kube-proxy-x7k2p_8d1c6f3e-2b7a-4c9d-9e1f-0a2b3c4d5e6f"),
            Some((
                "kube-system",
                "kube-proxy-x7k2p",
                "8d1c6f3e-2b7a-4c9d-9e1f-0a2b3c4d5e6f"
            ))
        );
        assert_eq!(parse_pod_dir("no-underscores"), None);
        assert_eq!(parse_pod_dir("a__b"), None);
        let link = format!("calico-node-8fz2q_kube-system_calico-node-{CID}.log");
        assert_eq!(
            parse_container_log(&link),
            Some(("calico-node-8fz2q", "kube-system", "calico-node", CID))
        );
        // Not a container log: no id, a short id, not .log, too few parts.
        for bad in [
            "x_y_z.log".to_string(),
            "p_n_c-abc.log".to_string(),
            format!("p_n_c-{CID}.txt"),
            format!("p_c-{CID}.log"),
        ] {
            assert_eq!(parse_container_log(&bad), None, "{bad}");
        }
    }

    #[test]
    fn names_come_from_the_directories_and_misses_are_not_rescanned_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pods = dir.path().join("pods");
        let containers = dir.path().join("containers");
        std::fs::create_dir_all(pods.join("default_web-0_u-1/nginx")).expect("mkdir");
        std::fs::create_dir_all(&containers).expect("mkdir");
        std::fs::write(
            containers.join(format!("web-0_default_nginx-{CID}.log")),
            "",
        )
        .expect("write");
        let n = Names::new(PodDirs {
            pods: pods.clone(),
            containers,
        });
        assert_eq!(n.pod("u-1"), Some(("default".into(), "web-0".into())));
        assert_eq!(n.container(CID).as_deref(), Some("nginx"));
        assert_eq!(n.pod("u-2"), None);
        // A pod that appears right after a miss is found after the rescan interval.
        std::fs::create_dir_all(pods.join("ns2_db-1_u-2")).expect("mkdir");
        assert_eq!(n.pod("u-2"), None, "no rescan within the interval");
        std::thread::sleep(RESCAN + Duration::from_millis(50));
        assert_eq!(n.pod("u-2"), Some(("ns2".into(), "db-1".into())));
    }
}
