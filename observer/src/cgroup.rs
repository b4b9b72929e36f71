//! cgroup id → cgroup path → systemd unit, container and pod.
//!
//! The kernel hooks capture the writer's cgroup v2 id (`bpf_get_current_cgroup_id`), which is the
//! inode number of the writer's cgroup directory in the v2 hierarchy. Turning it into a path needs
//! no process: the id stays valid as long as the cgroup exists, so a short-lived `iptables` that
//! has long exited is still placed in its unit, container and pod. This module
//!
//! - finds the cgroup2 mount from `/proc/self/mountinfo` (`/sys/fs/cgroup` on pure v2 hosts,
//!   `/sys/fs/cgroup/unified` on hybrid ones; never assumed),
//! - resolves an id with `open_by_handle_at` (a kernfs file handle is the 64-bit id itself; needs
//!   CAP_DAC_READ_SEARCH), falling back to a walk of the hierarchy comparing inode numbers,
//! - caches the answer per id (bounded LRU; ids are never reused, so a miss is cached too),
//! - parses the path into what people call things: the systemd unit, the container id of
//!   containerd, CRI-O, docker and podman, and the Kubernetes pod uid and QoS class of kubelet's
//!   systemd and cgroupfs drivers ([`parse_path`]).
//!
//! Any kernel with cgroup v2 (4.5+) works; the file-handle path needs 5.7+ kernfs ids (older
//! kernels fall back to the walk). On a hybrid host, processes that container runtimes place only
//! in v1 hierarchies sit in their parent's v2 cgroup: the v2 id then names that parent (often the
//! runtime's unit), and the container and pod stay unknown unless the writer is still alive for
//! `/proc/<pid>/cgroup` to be read ([`from_proc`]).

use std::fs;
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use lru::LruCache;
use serde::{Deserialize, Serialize};

/// Kubernetes pod QoS class, as kubelet names its cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Qos {
    Guaranteed,
    Burstable,
    Besteffort,
}

/// The pod a writer runs in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pod {
    /// The pod's metadata.uid (dashes restored from the systemd driver's underscores).
    pub uid: String,
    pub qos: Qos,
    /// The pod's namespace and name, from kubelet's pod log directories on the node
    /// ([`crate::pods`]); absent when the node has no such directory for the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The name of the writer's container in the pod, from the runtime's container log links.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}

/// What a cgroup path says about the processes in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workload {
    /// The innermost systemd unit (`kubelet.service`, `cri-containerd-<id>.scope`).
    pub unit: Option<String>,
    /// The innermost container's id (full, as the runtime names it).
    pub container_id: Option<String>,
    pub pod: Option<Pod>,
}

impl Workload {
    fn is_empty(&self) -> bool {
        self.unit.is_none() && self.container_id.is_none() && self.pod.is_none()
    }
}

/// A container id: hexadecimal, at least docker's short form long.
fn is_container_id(s: &str) -> bool {
    (12..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A pod uid: a UUID, or the 32-hex config hash of a static pod.
fn is_pod_uid(s: &str) -> bool {
    (32..=36).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// Runtime prefixes of container cgroups (`<prefix><id>.scope` under systemd, `<prefix><id>`
/// under cgroupfs). Conmon scopes (`crio-conmon-`, `libpod-conmon-`) hold the monitor, not the
/// container, and do not match because `conmon-...` is not hexadecimal.
const RUNTIME_PREFIXES: [&str; 5] = [
    "cri-containerd-",
    "crio-",
    "docker-",
    "libpod-",
    "containerd-",
];

/// The container id a single path segment names, if it names one.
fn container_in_segment(seg: &str) -> Option<&str> {
    let base = seg.strip_suffix(".scope").unwrap_or(seg);
    RUNTIME_PREFIXES
        .iter()
        .find_map(|p| base.strip_prefix(p))
        .filter(|id| is_container_id(id))
}

/// `kubepods-burstable-pod<uid_with_underscores>.slice` (also behind a `kubelet-` prefix, as
/// in kind nodes) or `kubepods-pod<uid>.slice` for guaranteed pods.
fn pod_in_systemd_segment(seg: &str) -> Option<Pod> {
    let base = seg.strip_suffix(".slice")?;
    let at = base.find("kubepods")?;
    let rest = &base[at + "kubepods".len()..];
    let (qos, uid) = if let Some(u) = rest.strip_prefix("-burstable-pod") {
        (Qos::Burstable, u)
    } else if let Some(u) = rest.strip_prefix("-besteffort-pod") {
        (Qos::Besteffort, u)
    } else if let Some(u) = rest.strip_prefix("-pod") {
        (Qos::Guaranteed, u)
    } else {
        return None;
    };
    let uid = uid.replace('_', "-");
    is_pod_uid(&uid).then_some(Pod {
        uid,
        qos,
        namespace: None,
        name: None,
        container: None,
    })
}

/// Parse a cgroup path (`/kubepods.slice/.../cri-containerd-<id>.scope`) into unit, container
/// and pod. Unknown layouts give an empty [`Workload`]; nothing here can panic on odd input.
pub fn parse_path(path: &str) -> Workload {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let mut w = Workload {
        unit: segs
            .iter()
            .rev()
            .find(|s| s.ends_with(".service") || s.ends_with(".scope"))
            .map(|s| s.to_string()),
        ..Workload::default()
    };
    // Index of the segment that named the pod (cgroupfs: container ids sit right below it).
    let mut pod_at = None;
    for (i, seg) in segs.iter().enumerate() {
        if let Some(pod) = pod_in_systemd_segment(seg) {
            w.pod = Some(pod);
            pod_at = Some(i);
            continue;
        }
        // cgroupfs driver: /kubepods/[burstable|besteffort/]pod<uid>
        if let Some(uid) = seg.strip_prefix("pod").filter(|u| is_pod_uid(u)) {
            let parent = i.checked_sub(1).map(|p| segs[p]);
            let grand = i.checked_sub(2).map(|p| segs[p]);
            let qos = match (grand, parent) {
                (Some(g), Some("burstable")) if g.ends_with("kubepods") => Some(Qos::Burstable),
                (Some(g), Some("besteffort")) if g.ends_with("kubepods") => Some(Qos::Besteffort),
                (_, Some(p)) if p.ends_with("kubepods") => Some(Qos::Guaranteed),
                _ => None,
            };
            if let Some(qos) = qos {
                w.pod = Some(Pod {
                    uid: uid.to_string(),
                    qos,
                    namespace: None,
                    name: None,
                    container: None,
                });
                pod_at = Some(i);
                continue;
            }
        }
        let parent = i.checked_sub(1).map(|p| segs[p]);
        let id = container_in_segment(seg).or_else(|| {
            // Plain ids: right below a cgroupfs pod, or docker's cgroupfs `/docker/<id>`.
            let below_pod = pod_at == Some(i.wrapping_sub(1)) && !seg.ends_with(".slice");
            (below_pod || parent == Some("docker"))
                .then_some(*seg)
                .filter(|s| is_container_id(s))
        });
        if let Some(id) = id {
            w.container_id = Some(id.to_string());
        }
    }
    w
}

/// What observer knows of one cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Path relative to the cgroup2 mount, starting with `/`.
    pub path: String,
    pub workload: Workload,
}

/// Lookups cached per cgroup id. Bounded: a node rarely has more live cgroups than this, and an
/// evicted entry is only looked up again.
const CACHE_ENTRIES: usize = 4096;
/// The fallback walk gives up after this many directories (a hierarchy this large is unusual;
/// the id is still printed).
const WALK_LIMIT: usize = 200_000;
/// `FILEID_KERNFS` from include/linux/exportfs.h: a kernfs handle is its 64-bit node id.
const FILEID_KERNFS: i32 = 0xfe;

/// Resolves cgroup v2 ids to paths. One per process ([`resolver`]).
pub struct Resolver {
    /// The cgroup2 mount point, if this system has one.
    mount: Option<PathBuf>,
    /// An fd of the mount's root for `open_by_handle_at`.
    mount_fd: Option<OwnedFd>,
    cache: Mutex<LruCache<u64, Option<Arc<Resolved>>>>,
}

/// The process-wide resolver, created on first use.
pub fn resolver() -> &'static Resolver {
    static R: OnceLock<Resolver> = OnceLock::new();
    R.get_or_init(|| {
        let r = Resolver::new(cgroup2_mount(
            &fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(),
        ));
        if r.mount.is_none() {
            tracing::warn!(
                "no cgroup2 file system is mounted: writers' units, containers and pods stay \
                 unknown (mount it with `mount -t cgroup2 none /sys/fs/cgroup`, or in a \
                 container mount the host's /sys/fs/cgroup)"
            );
        }
        r
    })
}

/// Decode mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> PathBuf {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = u32::from(b[i + 1] - b'0') * 64
                + u32::from(b[i + 2] - b'0') * 8
                + u32::from(b[i + 3] - b'0');
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsStr::from_bytes(&out))
}

/// The mount point of the cgroup2 file system in a mountinfo text. When there are several, the
/// one whose root is the hierarchy's root wins (a container's own cgroup namespace mount shows
/// only part of it).
pub fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    let mut best: Option<(bool, PathBuf)> = None;
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        if post.split(' ').next() != Some("cgroup2") {
            continue;
        }
        let f: Vec<&str> = pre.split(' ').collect();
        let (Some(root), Some(point)) = (f.get(3), f.get(4)) else {
            continue;
        };
        let whole = *root == "/";
        if best.as_ref().is_none_or(|(w, _)| !w && whole) {
            best = Some((whole, unescape(point)));
        }
    }
    best.map(|(_, p)| p)
}

impl Resolver {
    /// A resolver for the cgroup2 hierarchy mounted at `mount`.
    pub fn new(mount: Option<PathBuf>) -> Resolver {
        let mount_fd = mount.as_deref().and_then(|m| {
            let c = std::ffi::CString::new(m.as_os_str().as_bytes()).ok()?;
            // SAFETY: c is a valid NUL-terminated path; the returned fd is checked and owned.
            let fd = unsafe {
                libc::open(
                    c.as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            };
            // SAFETY: fd is a fresh descriptor returned by open, owned by no one else.
            (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
        });
        Resolver {
            mount,
            mount_fd,
            cache: Mutex::new(LruCache::new(
                NonZeroUsize::new(CACHE_ENTRIES).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }

    /// The cgroup2 mount point in use.
    pub fn mount(&self) -> Option<&Path> {
        self.mount.as_deref()
    }

    /// Path and workload of cgroup `id`, or None when the cgroup is gone (or no cgroup2 is
    /// mounted). Cached.
    pub fn resolve(&self, id: u64) -> Option<Arc<Resolved>> {
        if id == 0 {
            return None;
        }
        if let Some(hit) = self.cache.lock().ok()?.get(&id) {
            return hit.clone();
        }
        let path = self.path_by_handle(id).or_else(|| self.path_by_walk(id));
        let got = path.map(|path| {
            Arc::new(Resolved {
                workload: parse_path(&path),
                path,
            })
        });
        if let Ok(mut c) = self.cache.lock() {
            c.put(id, got.clone());
        }
        got
    }

    /// `open_by_handle_at` on a kernfs handle, then the path of the opened directory.
    fn path_by_handle(&self, id: u64) -> Option<String> {
        let mount = self.mount.as_deref()?;
        let mfd = self.mount_fd.as_ref()?;
        #[repr(C)]
        struct Handle {
            handle_bytes: u32,
            handle_type: i32,
            id: [u8; 8],
        }
        let mut h = Handle {
            handle_bytes: 8,
            handle_type: FILEID_KERNFS,
            id: id.to_ne_bytes(),
        };
        // SAFETY: h has the layout of struct file_handle followed by its 8 handle bytes; the
        // mount fd is open; the returned fd is checked and owned.
        let fd = unsafe {
            libc::open_by_handle_at(
                mfd.as_raw_fd(),
                (&raw mut h).cast::<libc::file_handle>(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: fd is a fresh descriptor from open_by_handle_at, owned by no one else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let full = fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
        relative(mount, &full)
    }

    /// Breadth-first walk of the hierarchy for a directory whose inode is `id`.
    fn path_by_walk(&self, id: u64) -> Option<String> {
        use std::os::unix::fs::DirEntryExt;
        let mount = self.mount.as_deref()?;
        if id == 1
            || fs::metadata(mount).is_ok_and(|m| std::os::unix::fs::MetadataExt::ino(&m) == id)
        {
            return Some("/".into());
        }
        let mut queue = std::collections::VecDeque::from([mount.to_path_buf()]);
        let mut seen = 0usize;
        while let Some(dir) = queue.pop_front() {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                seen += 1;
                if e.ino() == id {
                    return relative(mount, &e.path());
                }
                if seen >= WALK_LIMIT {
                    return None;
                }
                queue.push_back(e.path());
            }
        }
        None
    }
}

/// `full` below `mount`, as `/a/b` (`/` for the mount itself).
fn relative(mount: &Path, full: &Path) -> Option<String> {
    let rest = full.strip_prefix(mount).ok()?;
    Some(format!("/{}", rest.to_str()?))
}

/// The workload of a live process from `/proc/<pid>/cgroup`: the v2 line first, then any v1
/// line (hybrid hosts keep containers in v1 hierarchies). None when the process is gone.
pub fn from_proc(pid: u32) -> Option<Workload> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    Some(workload_of_proc_cgroup(&text))
}

/// [`from_proc`] on the file's text.
pub fn workload_of_proc_cgroup(text: &str) -> Workload {
    // Lines are `hierarchy-id:controllers:path`; the v2 one is `0::path`.
    let paths = text
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            Some((f.next()?, f.next()?, f.next()?))
        })
        .collect::<Vec<_>>();
    let v2 = paths
        .iter()
        .find(|(h, c, _)| *h == "0" && c.is_empty())
        .map(|(_, _, p)| parse_path(p))
        .unwrap_or_default();
    let mut w = v2;
    for (_, _, p) in paths.iter().filter(|(h, _, _)| *h != "0") {
        let v1 = parse_path(p);
        if w.container_id.is_none() {
            w.container_id = v1.container_id;
        }
        if w.pod.is_none() {
            w.pod = v1.pod;
        }
        if w.unit.is_none() {
            w.unit = v1.unit;
        }
        if w.container_id.is_some() && w.pod.is_some() && w.unit.is_some() {
            break;
        }
    }
    w
}

/// The workload of a writer from the cgroup id the kernel captured, completed from `/proc` when
/// the id says nothing (a v1-only container on a hybrid host) and the writer still lives as
/// `comm`.
pub fn from_kernel(cgroup_id: u64, tgid: u32, comm: &str) -> Workload {
    let resolved = resolver().resolve(cgroup_id);
    let from_id = resolved
        .as_ref()
        .map(|r| r.workload.clone())
        .unwrap_or_default();
    if !from_id.is_empty() {
        return from_id;
    }
    // The cgroup was found and its path names no unit, container or pod (the root cgroup, a
    // user session). Where cgroup2 is the only hierarchy, `/proc/PID/cgroup` holds that same
    // path: reading it would say the same, two file reads later, for every change.
    if resolved.is_some() && unified() {
        return from_id;
    }
    let live = fs::read_to_string(format!("/proc/{tgid}/comm")).is_ok_and(|c| c.trim_end() == comm);
    if live {
        from_proc(tgid).unwrap_or_default()
    } else {
        from_id
    }
}

/// True when this process sees cgroup2 only (`/proc/self/cgroup` is one `0::` line), read once.
fn unified() -> bool {
    static UNIFIED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *UNIFIED.get_or_init(|| fs::read_to_string("/proc/self/cgroup").is_ok_and(|t| only_cgroup2(&t)))
}

/// [`unified`] on the file's text.
fn only_cgroup2(proc_cgroup: &str) -> bool {
    let mut lines = proc_cgroup
        .lines()
        .filter(|l| !l.trim().is_empty())
        .peekable();
    lines.peek().is_some() && lines.all(|l| l.starts_with("0::"))
}

#[cfg(test)]
mod tests;
