//! Who made a change.
//!
//! The kernel hooks capture the writer and its ancestors at the moment of the write: that is the
//! source of truth, because the writer is usually a short-lived `iptables-restore` that has exited
//! before userspace looks. nftables notifications carry only the writer's thread id and comm
//! (NEWGEN), so for them this module reads `/proc` while the process lives, and says `unknown`
//! where it cannot know.
//!
//! The *actor* is the nearest process in the chain that is not a netfilter front end: the
//! component that ran `iptables`, not `iptables` itself.

use std::fs;

use serde::{Deserialize, Serialize};

use crate::cgroup::{self, Pod, Workload};
use crate::hooks::decode::KernelProcess;

/// The process fields of an output line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Process id (tgid) of the writer; for nftables writers that exited before observer read
    /// `/proc`, the thread id from the notification.
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub ppid: Option<u32>,
    pub parent_comm: Option<String>,
    /// The nearest ancestor (or the writer itself) that is not a netfilter front end, or
    /// `unknown`.
    pub actor: String,
    /// cgroup v2 id of the writer.
    pub cgroup: Option<u64>,
    /// systemd unit of the writer, where its cgroup path names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Container id, where the cgroup path names a container runtime's cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// Kubernetes pod (uid, QoS class; namespace and name when known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Pod>,
}

impl ProcessInfo {
    /// A writer nobody could name.
    pub fn unknown() -> ProcessInfo {
        ProcessInfo {
            pid: 0,
            tid: 0,
            comm: String::new(),
            ppid: None,
            parent_comm: None,
            actor: "unknown".into(),
            cgroup: None,
            unit: None,
            container_id: None,
            pod: None,
        }
    }

    fn with_workload(mut self, w: Workload) -> ProcessInfo {
        self.unit = w.unit;
        self.container_id = w.container_id;
        self.pod = w.pod;
        self
    }
}

/// True for the commands that only carry a change to the kernel on someone else's behalf.
/// The front ends are the tools themselves and their `-` variants (`iptables-legacy-restore`,
/// `ip6tables-nft`, `xtables-nft-multi`); a component whose name merely starts like one
/// (`iptables.init`, a firewall's init script) is an actor.
pub fn is_front_end(comm: &str) -> bool {
    let tool = |name: &str| {
        comm == name
            || comm
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('-'))
    };
    tool("nft")
        || tool("ipset")
        || comm.starts_with("xtables-")
        || ["iptables", "ip6tables", "arptables", "ebtables"]
            .into_iter()
            .any(tool)
}

/// The first comm of the chain (writer first) that is not a front end.
pub fn pick_actor<'a>(chain: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    chain
        .into_iter()
        .find(|c| !c.is_empty() && !is_front_end(c))
}

/// Attribution from what the kernel captured, completed from `/proc` only where the captured
/// chain holds nothing but front ends.
pub fn from_kernel(p: &KernelProcess) -> ProcessInfo {
    let chain = std::iter::once(p.comm.as_str()).chain(p.ancestors.iter().map(|a| a.comm.as_str()));
    let mut actor = pick_actor(chain).map(str::to_string);
    if actor.is_none() {
        // Deeper than the kernel walked: ask /proc about the last captured ancestor.
        let last = p.ancestors.last().map_or(p.tgid, |a| a.tgid);
        actor = proc_chain(last).into_iter().find(|c| !is_front_end(c));
    }
    ProcessInfo {
        pid: p.tgid,
        tid: p.tid,
        comm: p.comm.clone(),
        ppid: p.ancestors.first().map(|a| a.tgid),
        parent_comm: p.ancestors.first().map(|a| a.comm.clone()),
        actor: actor.unwrap_or_else(|| "unknown".into()),
        cgroup: Some(p.cgroup_id),
        unit: None,
        container_id: None,
        pod: None,
    }
    // From the id the kernel captured: works after the writer exited.
    .with_workload(cgroup::from_kernel(p.cgroup_id, p.tgid, &p.comm))
}

/// Attribution from a thread id and comm (nftables NEWGEN), read from `/proc` if still there.
pub fn from_tid(tid: u32, comm: &str) -> ProcessInfo {
    let status = fs::read_to_string(format!("/proc/{tid}/status")).ok();
    let field = |name: &str| -> Option<u32> {
        status
            .as_deref()?
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    };
    let (tgid, ppid) = (field("Tgid:"), field("PPid:"));
    let live_comm = status
        .as_deref()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Name:")))
        .map(|s| s.trim().to_string());
    // A recycled tid would show another command: trust /proc only when the comm matches.
    let alive = live_comm.as_deref() == Some(comm) || comm.is_empty();
    let (tgid, ppid) = if alive { (tgid, ppid) } else { (None, None) };
    let parent_comm = ppid.and_then(read_comm);
    let mut actor = pick_actor([comm]).map(str::to_string);
    if actor.is_none() {
        if let Some(pp) = ppid {
            actor = proc_chain(pp).into_iter().find(|c| !is_front_end(c));
        }
    }
    let pid = tgid.unwrap_or(tid);
    ProcessInfo {
        pid,
        tid,
        comm: comm.to_string(),
        ppid,
        parent_comm,
        actor: actor.unwrap_or_else(|| "unknown".into()),
        cgroup: if alive { cgroup_id_of(pid) } else { None },
        unit: None,
        container_id: None,
        pod: None,
    }
    .with_workload(if alive {
        cgroup::from_proc(pid).unwrap_or_default()
    } else {
        Workload::default()
    })
}

fn read_comm(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_string())
}

fn read_ppid(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The comm is in parentheses and may contain spaces: read after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

/// comms from `pid` up to init (at most 16 steps).
fn proc_chain(mut pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..16 {
        if pid == 0 {
            break;
        }
        let Some(c) = read_comm(pid) else { break };
        out.push(c);
        match read_ppid(pid) {
            Some(pp) if pp != pid => pid = pp,
            _ => break,
        }
    }
    out
}

/// The cgroup v2 path of a live process (`0::/system.slice/x.service`).
fn cgroup_path(pid: u32) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

/// The cgroup v2 id (the cgroup directory's inode) of a live process.
fn cgroup_id_of(pid: u32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let path = cgroup_path(pid)?;
    let mount = cgroup::resolver().mount()?;
    fs::metadata(mount.join(path.trim_start_matches('/')))
        .ok()
        .filter(|m| m.is_dir())
        .map(|m| m.ino())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::decode::Ancestor;

    #[test]
    fn front_ends_are_recognised() {
        for c in [
            "iptables",
            "iptables-legacy",
            "iptables-restor",
            "ip6tables-legac",
            "xtables-nft-mul",
            "nft",
            "arptables",
            "ebtables-legacy",
            "ipset",
        ] {
            assert!(is_front_end(c), "{c}");
        }
        for c in [
            "kube-proxy",
            "kubelet",
            "calico-node",
            "nftables-tool",
            "bash",
            "ip",
            "iptables.init",
            "ipsetd",
        ] {
            assert!(!is_front_end(c), "{c}");
        }
    }

    #[test]
    fn actor_is_the_nearest_non_front_end() {
        assert_eq!(
            pick_actor([
                "iptables-restor",
                "iptables",
                "kube-proxy",
                "containerd-shim"
            ]),
            Some("kube-proxy")
        );
        assert_eq!(pick_actor(["kubelet"]), Some("kubelet"));
        assert_eq!(pick_actor(["nft", ""]), None);
    }

    #[test]
    fn kernel_attribution_names_parent_and_actor() {
        let p = KernelProcess {
            tgid: 10,
            tid: 11,
            uid: 0,
            comm: "iptables-legacy".into(),
            ancestors: vec![
                Ancestor {
                    tgid: 9,
                    comm: "kube-proxy".into(),
                },
                Ancestor {
                    tgid: 1,
                    comm: "systemd".into(),
                },
            ],
            netns: 1,
            cgroup_id: 77,
        };
        let info = from_kernel(&p);
        assert_eq!(info.pid, 10);
        assert_eq!(info.ppid, Some(9));
        assert_eq!(info.parent_comm.as_deref(), Some("kube-proxy"));
        assert_eq!(info.actor, "kube-proxy");
        assert_eq!(info.cgroup, Some(77));
    }

    #[test]
    fn a_live_thread_is_resolved_from_proc() {
        let me = std::process::id();
        let comm = read_comm(me).unwrap();
        let info = from_tid(me, &comm);
        assert_eq!(info.pid, me);
        assert!(info.ppid.is_some());
        assert!(info.parent_comm.is_some());
    }

    #[test]
    fn a_gone_thread_is_honestly_unknown() {
        // pid_max is at most 2^22: this tid cannot exist.
        let info = from_tid(u32::MAX - 1, "nft");
        assert_eq!(info.ppid, None);
        assert_eq!(info.parent_comm, None);
        assert_eq!(info.actor, "unknown");
        let info = from_tid(u32::MAX - 1, "kube-proxy");
        assert_eq!(info.actor, "kube-proxy");
    }

    #[test]
    fn workload_fields_are_written_only_when_known() {
        let info = from_tid(u32::MAX - 1, "nft");
        let v = serde_json::to_value(&info).unwrap();
        for k in ["unit", "container_id", "pod"] {
            assert!(v.get(k).is_none(), "{k} in {v}");
        }
        let info = info.with_workload(cgroup::parse_path(
            "/kubepods/besteffort/pod0123456789abcdef0123456789abcdef/\
             0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ));
        let v = serde_json::to_value(&info).unwrap();
        assert_eq!(v["pod"]["qos"], "besteffort");
        assert_eq!(v["pod"]["uid"], "0123456789abcdef0123456789abcdef");
        assert!(v["pod"].get("name").is_none(), "{v}");
        assert_eq!(v["container_id"].as_str().map(str::len), Some(64));
        assert!(v.get("unit").is_none(), "{v}");
    }
}
