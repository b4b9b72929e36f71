//! Network namespaces: find them, hold them, run code inside them.
//!
//! Netfilter state is per network namespace, so observer needs a handle on every namespace of the
//! host: the ones processes live in (`/proc/PID/ns/net`) and the ones only a bind mount keeps
//! alive (`ip netns add` under `/run/netns`, CNI and docker under `/var/run/...`), found as nsfs
//! mounts in mountinfo. New namespaces are reported by the kernel hooks (unshare, setns, clone);
//! this module turns an inode into a handle. Nothing here runs on a timer.
//!
//! Code that must act inside a namespace (open a netlink socket, read an x_tables table) runs on a
//! short-lived thread that `setns()`es into it: the thread's namespace changes, nobody else's.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::sched::{setns, CloneFlags};

/// A namespace observer holds open.
#[derive(Debug)]
pub struct NetnsHandle {
    /// The nsfs inode, as `stat -L -c %i /run/netns/NAME` prints it.
    pub inode: u32,
    /// An open nsfs file: keeps the namespace reachable while observer watches it.
    pub file: File,
    /// The `ip netns` name, when it has one.
    pub name: Option<String>,
    /// Where it was found (for messages).
    pub origin: PathBuf,
}

/// The inode of an nsfs path (or of `/proc/PID/ns/net`).
pub fn inode_of(path: &Path) -> io::Result<u32> {
    let ino = fs::metadata(path)?.ino();
    u32::try_from(ino).map_err(|_| io::Error::other(format!("inode {ino} does not fit in 32 bits")))
}

/// Parse `net:[4026531840]` (the target of a `/proc/PID/ns/net` link).
fn parse_ns_link(target: &str) -> Option<u32> {
    target
        .strip_prefix("net:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Open a namespace from a path, checking that it is the expected one.
pub fn open(path: &Path, expect: Option<u32>) -> io::Result<NetnsHandle> {
    let file = File::open(path)?;
    let inode = u32::try_from(file.metadata()?.ino())
        .map_err(|_| io::Error::other("inode does not fit in 32 bits"))?;
    if let Some(want) = expect {
        if want != inode {
            return Err(io::Error::other(format!(
                "{} is namespace {inode}, not {want}",
                path.display()
            )));
        }
    }
    let name = path
        .strip_prefix("/run/netns")
        .or_else(|_| path.strip_prefix("/var/run/netns"))
        .ok()
        .map(|p| p.display().to_string());
    Ok(NetnsHandle {
        inode,
        file,
        name,
        origin: path.to_path_buf(),
    })
}

/// Every place a network namespace can be opened from, by inode (first place found wins; named
/// `ip netns` mounts are preferred so that names are known).
pub fn scan() -> HashMap<u32, PathBuf> {
    let mut found: HashMap<u32, PathBuf> = HashMap::new();
    for (inode, path) in nsfs_mounts() {
        found.entry(inode).or_insert(path);
    }
    for (pid, inode) in process_namespaces() {
        found
            .entry(inode)
            .or_insert_with(|| PathBuf::from(format!("/proc/{pid}/ns/net")));
    }
    found
}

/// `(pid, netns inode)` of every process visible in /proc.
fn process_namespaces() -> impl Iterator<Item = (u32, u32)> {
    fs::read_dir("/proc")
        .into_iter()
        .flat_map(|dir| dir.flatten())
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let target = fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
            Some((pid, parse_ns_link(target.to_str()?)?))
        })
}

/// Network namespace bind mounts (nsfs mounts whose root is `net:[N]`) in our mount namespace.
pub fn nsfs_mounts() -> Vec<(u32, PathBuf)> {
    let Ok(text) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    parse_mountinfo(&text)
}

fn parse_mountinfo(text: &str) -> Vec<(u32, PathBuf)> {
    let mut out = Vec::new();
    for line in text.lines() {
        // id parent major:minor root mountpoint options [optional...] - fstype source superopts
        let mut fields = line.split(' ');
        let (Some(_), Some(_), Some(_), Some(root), Some(mountpoint)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let Some((_, after)) = line.split_once(" - ") else {
            continue;
        };
        if after.split(' ').next() != Some("nsfs") {
            continue;
        }
        if let Some(inode) = parse_ns_link(root) {
            out.push((inode, PathBuf::from(unescape_mountinfo(mountpoint))));
        }
    }
    out
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mountinfo(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let oct = std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(oct, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Open the namespace with this inode: first through the given pids (the writer and its
/// ancestors, usually still alive or just gone), then by scanning the host.
pub fn find(inode: u32, pids: &[u32]) -> Option<NetnsHandle> {
    for pid in pids.iter().filter(|&&p| p != 0) {
        if let Ok(h) = open(Path::new(&format!("/proc/{pid}/ns/net")), Some(inode)) {
            // Prefer a name if the namespace has one.
            return Some(name_it(h));
        }
    }
    let path = scan().remove(&inode)?;
    open(&path, Some(inode)).ok().map(name_it)
}

/// Attach the `ip netns` name to a handle found through a process.
fn name_it(mut h: NetnsHandle) -> NetnsHandle {
    if h.name.is_none() {
        if let Some((_, path)) = nsfs_mounts().into_iter().find(|(i, _)| *i == h.inode) {
            if let Ok(named) = open(&path, Some(h.inode)) {
                h.name = named.name;
            }
        }
    }
    h
}
/// The network namespaces that some process other than observer is in (bind mounts are the
/// caller's to check: it holds the list from [`nsfs_mounts`]).
pub fn held_by_processes() -> std::collections::HashSet<u32> {
    let me = std::process::id();
    process_namespaces()
        .filter(|(pid, _)| *pid != me)
        .map(|(_, i)| i)
        .collect()
}

/// Run `f` on a new thread that has joined the namespace. The caller's thread is untouched.
pub fn run_in<T, F>(ns: &File, f: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let fd = ns.try_clone()?;
    std::thread::Builder::new()
        .name("observer-netns".into())
        .spawn(move || -> io::Result<T> {
            // Joining the namespace the thread is already in needs no privilege, and setns()
            // would ask for CAP_SYS_ADMIN: skip it.
            let here = inode_of(Path::new("/proc/thread-self/ns/net")).ok();
            if here.is_none() || here != u32::try_from(fd.metadata()?.ino()).ok() {
                setns(&fd, CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
            }
            Ok(f())
        })?
        .join()
        .map_err(|_| io::Error::other("a thread working inside a namespace panicked"))?
}

/// A `--netns` argument that is neither an inode number nor the path or `ip netns` name of a
/// namespace.
#[derive(Debug, thiserror::Error)]
#[error(
    "--netns {arg}: cannot stat {}: {cause} (give an inode number, a /run/netns/NAME path, an \
     `ip netns` name, or `all`)",
    path.display()
)]
pub struct NetnsArgError {
    arg: String,
    path: PathBuf,
    #[source]
    cause: io::Error,
}

/// Resolve a `--netns` argument: an inode number, or a path such as `/run/netns/NAME` or a bare
/// `ip netns` name.
pub fn resolve_arg(arg: &str) -> Result<u32, NetnsArgError> {
    if let Ok(n) = arg.parse::<u32>() {
        return Ok(n);
    }
    let path = if arg.contains('/') {
        PathBuf::from(arg)
    } else {
        Path::new("/run/netns").join(arg)
    };
    inode_of(&path).map_err(|cause| NetnsArgError {
        arg: arg.to_string(),
        path,
        cause,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ns_links() {
        assert_eq!(parse_ns_link("net:[4026531840]"), Some(4026531840));
        assert_eq!(parse_ns_link("mnt:[4026531840]"), None);
        assert_eq!(parse_ns_link("net:[x]"), None);
    }

    #[test]
    fn finds_nsfs_mounts_in_mountinfo() {
        let text = "\
36 25 0:4 net:[4026532317] /run/netns/blue rw shared:5 - nsfs nsfs rw
37 25 0:4 net:[4026532400] /var/run/docker/netns/with\\040space rw - nsfs nsfs rw
38 25 0:4 mnt:[4026532401] /run/mntns rw - nsfs nsfs rw
22 1 8:1 / / rw,relatime - ext4 /dev/vda rw
bad line";
        let m = parse_mountinfo(text);
        assert_eq!(
            m,
            vec![
                (4026532317, PathBuf::from("/run/netns/blue")),
                (
                    4026532400,
                    PathBuf::from("/var/run/docker/netns/with space")
                ),
            ]
        );
    }

    #[test]
    fn own_namespace_is_found_by_scan() {
        let own = inode_of(Path::new("/proc/self/ns/net")).unwrap();
        assert!(scan().contains_key(&own));
        let h = find(own, &[std::process::id()]).unwrap();
        assert_eq!(h.inode, own);
    }

    #[test]
    fn resolve_arg_accepts_numbers_and_explains_bad_names() {
        assert_eq!(resolve_arg("4026531840").ok(), Some(4026531840));
        let err = resolve_arg("no-such-ns-xyz").unwrap_err().to_string();
        assert!(err.contains("/run/netns/no-such-ns-xyz"), "{err}");
    }
}
