//! Who made a change.
//!
//! The kernel hooks capture the writer and its ancestors at the moment of the write: that is the
//! source of truth, because the writer is usually a short-lived `iptables-restore` that has exited
//! before userspace looks. nftables notifications carry only the writer's thread id and comm
//! (NEWGEN), so for them this module reads `/proc` while the process lives, and says `unknown`
//! where it cannot know.
//!
//! The *actor* is the nearest process in the chain that is neither a netfilter front end nor a
//! shell, interpreter or wrapper: the component that ran `sh -c "iptables ..."`, not `iptables`
//! and not `sh`; a script a dispatcher (`run-parts`) runs is named after the tool that ran the
//! dispatcher, and so is a plugin a tool runs straight from its plugin directory. The chain walked to find it, and on above it, is `ancestry`.

use std::fs;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::cgroup::{self, Pod, Workload};

/// One ancestor of the writer, as the kernel hook saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelAncestor {
    pub tgid: u32,
    pub comm: String,
}

/// The writer as the kernel saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelProcess {
    pub tgid: u32,
    pub tid: u32,
    pub uid: u32,
    pub comm: String,
    /// Parent first; stops at the first unknown one.
    pub ancestors: Vec<KernelAncestor>,
    /// 0 when unknown.
    pub netns: u32,
    pub cgroup_id: u64,
    /// The kernel's walk reached the top of the process tree: `ancestors` is the whole chain.
    /// Otherwise it stopped at its depth, or after the first ancestor that is no wrapper.
    pub top_reached: bool,
}

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
    /// The writer's ancestors, nearest first: through the one `actor` names and on, up to the
    /// unit, container or init, as far as the kernel captured them and `/proc` still shows
    /// them (empty when nothing is known of its parents).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ancestry: Vec<Ancestor>,
    /// For a change a D-Bus firewall manager (firewalld) made while it served a caller's
    /// request: that caller, and the method it called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<Box<Requester>>,
}

/// The process that asked a D-Bus firewall manager for a change (`firewall-cmd --reload`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requester {
    pub pid: u32,
    pub comm: String,
    /// Who asked: the caller, or for a firewall manager's own client (`firewall-cmd`) the
    /// nearest process above it that is no shell or wrapper (the job or person that ran it),
    /// or `unknown`.
    pub actor: String,
    /// The D-Bus method called (`org.fedoraproject.FirewallD1.reload`).
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Pod>,
    /// The caller's ancestors, nearest first, while they lived to be read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ancestry: Vec<Ancestor>,
}

/// The clients of the D-Bus firewall managers: they carry a person's or a job's request to the
/// manager, so the requester's `actor` is found above them.
const BUS_CLIENTS: &[&str] = &["firewall-cmd", "firewall-config", "firewall-applet"];

impl Requester {
    /// The caller `pid` of `method`, read from `/proc` while it lives (a caller waits for its
    /// reply, so it does while its request is served). None when it is gone already.
    pub fn of_caller(pid: u32, method: String) -> Option<Requester> {
        let comm = read_comm(pid)?;
        let p = from_tid(pid, &comm);
        let name = long_name(pid, &comm);
        let actor = if BUS_CLIENTS.contains(&name.as_str()) {
            let names: Vec<&str> = p.ancestry.iter().map(|a| a.comm.as_str()).collect();
            actor_index(names.into_iter().chain(std::iter::once("")))
                .and_then(|i| p.ancestry.get(i))
                .map_or_else(|| "unknown".to_string(), |a| long_name(a.pid, &a.comm))
        } else {
            p.actor.clone()
        };
        Some(Requester {
            pid,
            comm: name,
            actor,
            method,
            unit: p.unit,
            container_id: p.container_id,
            pod: p.pod,
            ancestry: p.ancestry,
        })
    }

    /// The method without the manager's interface prefix (`reload`, `direct.addRule`).
    pub fn short_method(&self) -> &str {
        self.method
            .strip_prefix("org.fedoraproject.FirewallD1.")
            .unwrap_or(&self.method)
    }

    /// How a person is told who asked: `firewall-cmd 4242 (run by compliance-job, unit
    /// cron.service) over D-Bus: reload`.
    pub fn describe(&self) -> String {
        let mut by = Vec::new();
        if self.actor != self.comm && self.actor != "unknown" {
            by.push(format!("run by {}", self.actor));
        }
        if let Some(u) = &self.unit {
            by.push(format!("unit {u}"));
        }
        if let Some(p) = &self.pod {
            match (&p.namespace, &p.name) {
                (Some(ns), Some(n)) => by.push(format!("pod {ns}/{n}")),
                _ => by.push(format!("pod {}", p.uid)),
            }
        }
        let by = if by.is_empty() {
            String::new()
        } else {
            format!(" ({})", by.join(", "))
        };
        format!(
            "{} {}{by} over D-Bus: {}",
            self.comm,
            self.pid,
            self.short_method()
        )
    }
}

impl ProcessInfo {
    /// The actor as a person reads it: `firewall-cmd (via firewalld)` for a change a D-Bus
    /// firewall manager made on a caller's request, else `actor`.
    pub fn shown_actor(&self) -> std::borrow::Cow<'_, str> {
        match &self.requested_by {
            Some(r) => format!("{} (via {})", r.comm, self.actor).into(),
            None => self.actor.as_str().into(),
        }
    }
}

/// The caller and the manager of an actor as shown (`firewall-cmd (via firewalld)`), when it
/// is one.
pub fn split_via(shown: &str) -> Option<(&str, &str)> {
    shown.strip_suffix(')')?.split_once(" (via ")
}

/// Whether an actor as shown names `who`: the whole, or either side of a `via`.
pub fn actor_names(shown: &str, who: &str) -> bool {
    shown == who
        || split_via(shown).is_some_and(|(caller, manager)| caller == who || manager == who)
}

/// One process of a writer's ancestry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ancestor {
    pub comm: String,
    pub pid: u32,
}

/// Commands that run another on someone's behalf: shells, interpreters, and the small tools
/// that set up how a command runs. The actor is found above them. Extend with `wrappers = [...]`
/// in the owners file.
pub const WRAPPERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ash", "ksh", "busybox", "env", "timeout", "flock", "xargs",
    "nice", "ionice", "setsid", "nsenter", "unshare", "chroot", "stdbuf", "ip", "runuser", "sudo",
    "su", "doas", "perl", "python", "python2", "python3", "ruby", "node",
];

/// Where a chain of wrappers ends: a session, init or a container's supervisor. A wrapper right
/// below one of these (an admin's shell under `sshd`) is the actor itself.
const BOUNDARIES: &[&str] = &[
    "systemd",
    "init",
    "sshd",
    "login",
    "agetty",
    "tmux: server",
    "screen",
    "cron",
    "crond",
    "containerd-shim",
    "conmon",
    "runc",
    "crun",
    "kthreadd",
];

/// Commands that run the scripts of a directory (a tool's plugins, `cron.daily`): the script is
/// no component of its own, the one that ran the dispatcher is (`netfilter-persistent` running
/// `run-parts` on its `plugins.d`). When nothing above the dispatcher is an actor (`cron`
/// runs it), the script is.
pub const DISPATCHERS: &[&str] = &["run-parts"];

fn is_dispatcher(comm: &str) -> bool {
    DISPATCHERS.contains(&comm)
}

static EXTRA_WRAPPERS: OnceLock<Vec<String>> = OnceLock::new();

/// Wrappers named in the owners file, on top of [`WRAPPERS`] (the first call decides).
pub fn add_wrappers(names: Vec<String>) {
    let _ = EXTRA_WRAPPERS.set(names);
}

/// The comms the kernel's ancestry walk goes on past, as `task_struct.comm` holds them (at most
/// 15 bytes), each with its kind: the wrappers (with the owners file's) and the front ends
/// under their usual names ([`WALK_WRAPPER`](observer_common::process::WALK_WRAPPER)), and the
/// [`DISPATCHERS`] ([`WALK_DISPATCHER`](observer_common::process::WALK_DISPATCHER)). The walk
/// stops one level after the first other ancestor, which [`actor_index`] takes for the actor
/// or a boundary, unless that level is a dispatcher. A wrapper only [`is_wrapper`] knows
/// (`python3.11`) also stops it: the chain is then completed from `/proc`, as one longer than
/// the walk is.
pub fn walk_past() -> Vec<([u8; observer_common::process::COMM_LEN], u8)> {
    use observer_common::process::{WALK_DISPATCHER, WALK_WRAPPER};
    let mut out: Vec<_> = DISPATCHERS
        .iter()
        .map(|d| (comm_key(d), WALK_DISPATCHER))
        .collect();
    for k in walk_past_wrappers() {
        if !out.iter().any(|(d, _)| *d == k) {
            out.push((k, WALK_WRAPPER));
        }
    }
    out
}

/// The netfilter tools' own commands, whole (`iptables-legacy-restore`): the tools and their
/// `-` variants, nft, ipset and the xtables multi-binaries.
fn front_end_names() -> impl Iterator<Item = String> {
    let tools = ["iptables", "ip6tables", "arptables", "ebtables"];
    let variants = [
        "",
        "-legacy",
        "-nft",
        "-restore",
        "-save",
        "-legacy-restore",
        "-nft-restore",
        "-legacy-save",
        "-nft-save",
        "-translate",
        "-restore-translate",
        "-apply",
        "-wrapper",
    ];
    tools
        .into_iter()
        .flat_map(move |t| variants.into_iter().map(move |v| format!("{t}{v}")))
        .chain(["nft", "ipset", "xtables-nft-multi", "xtables-legacy-multi"].map(String::from))
}

/// A name as the walk's map keys it: its first `COMM_LEN - 1` bytes, as the kernel cuts a
/// comm, NUL-padded.
fn comm_key(name: &str) -> [u8; observer_common::process::COMM_LEN] {
    let mut key = [0u8; observer_common::process::COMM_LEN];
    let n = name.len().min(key.len() - 1);
    key[..n].copy_from_slice(&name.as_bytes()[..n]);
    key
}

fn walk_past_wrappers() -> Vec<[u8; observer_common::process::COMM_LEN]> {
    let front_ends = front_end_names();
    let extra = EXTRA_WRAPPERS.get().into_iter().flatten().cloned();
    let mut keys: Vec<_> = WRAPPERS
        .iter()
        .map(|w| w.to_string())
        .chain(extra)
        .chain(front_ends)
        .map(|name| comm_key(&name))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// True for a shell, interpreter or wrapper (see [`WRAPPERS`]); `python3.11` counts as
/// `python3`.
pub fn is_wrapper(comm: &str) -> bool {
    let base = comm.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    WRAPPERS.contains(&comm)
        || WRAPPERS.contains(&base)
        || EXTRA_WRAPPERS
            .get()
            .is_some_and(|w| w.iter().any(|x| x == comm))
}

fn is_boundary(comm: &str) -> bool {
    BOUNDARIES
        .iter()
        .any(|b| comm == *b || (b.starts_with("containerd-shim") && comm.starts_with(b)))
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
            ancestry: Vec::new(),
            requested_by: None,
        }
    }

    /// A writer known by its pid, command, parent and actor only (no cgroup, unit, container,
    /// pod or ancestry): what benchmarks and fixtures write with.
    pub fn named(pid: u32, comm: &str, parent: Option<(u32, &str)>, actor: &str) -> ProcessInfo {
        ProcessInfo {
            pid,
            tid: pid,
            comm: comm.into(),
            ppid: parent.map(|p| p.0),
            parent_comm: parent.map(|p| p.1.to_string()),
            actor: actor.into(),
            ..ProcessInfo::unknown()
        }
    }

    /// The writer's unit, container and pod, the pod's names completed from the node's logs
    /// ([`crate::pods`]).
    fn with_workload(mut self, mut w: Workload) -> ProcessInfo {
        crate::pods::complete(&mut w);
        self.unit = w.unit;
        self.container_id = w.container_id;
        self.pod = w.pod;
        self
    }
}

/// True for the commands that only carry a change to the kernel on someone else's behalf.
/// The front ends are the tools themselves and their variants (`iptables-legacy-restore`,
/// `ip6tables-nft`, `xtables-nft-multi`), as a comm holds them (cut to 15 bytes); a component
/// whose name merely starts like one (`iptables.init`, a reset script `iptables-reset`) is an
/// actor.
pub fn is_front_end(comm: &str) -> bool {
    static NAMES: std::sync::OnceLock<
        std::collections::HashSet<[u8; observer_common::process::COMM_LEN]>,
    > = std::sync::OnceLock::new();
    NAMES
        .get_or_init(|| front_end_names().map(|n| comm_key(&n)).collect())
        .contains(&comm_key(comm))
        || comm.starts_with("xtables-")
}

/// The index of the actor in a chain of comms (writer first, then its ancestors; an empty comm
/// marks the top of the tree): the first that is neither a front end nor a wrapper. When a
/// boundary (`sshd`, `systemd`) or the top comes first, the nearest wrapper is the actor (an
/// admin's `bash`); `None` when the chain as given holds no actor yet, so that more of it must
/// be read.
///
/// A process right below a dispatcher (`15-ip4tables` under `run-parts`) is a plugin: the actor
/// is looked for above the dispatcher, and the plugin is the actor only when a boundary or the
/// top comes first (a shell there, an admin's, still wins over it).
pub fn actor_index<'a>(chain: impl IntoIterator<Item = &'a str>) -> Option<usize> {
    let chain: Vec<&str> = chain.into_iter().collect();
    let mut last_wrapper = None;
    let mut plugin = None;
    let mut complete = false;
    let mut i = 0;
    while let Some(&c) = chain.get(i) {
        i += 1;
        if c.is_empty() {
            complete = true;
            break;
        }
        if is_front_end(c) || is_dispatcher(c) {
            continue;
        }
        if is_boundary(c) {
            // The session or supervisor is no component: the wrapper it started is.
            return last_wrapper.or(plugin).or(Some(i - 1));
        }
        if is_wrapper(c) {
            last_wrapper = last_wrapper.or(Some(i - 1));
            continue;
        }
        if chain.get(i).is_some_and(|p| is_dispatcher(p)) {
            plugin = plugin.or(Some(i - 1));
            last_wrapper = None;
            i += 1;
            continue;
        }
        return Some(i - 1);
    }
    if complete {
        last_wrapper.or(plugin)
    } else {
        None
    }
}

/// The first comm of the chain (writer first) that is the actor (see [`actor_index`]), for a
/// chain known to be whole.
pub fn pick_actor<'a>(chain: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let chain: Vec<&str> = chain.into_iter().collect();
    let whole = chain.iter().copied().chain(std::iter::once(""));
    actor_index(whole).and_then(|i| chain.get(i).copied())
}

/// `(pid, comm)` of the writer's ancestors: what the kernel captured, then `/proc` above the
/// last one while it lives (up to init: the unit, container or session it runs under), and
/// the actor's index in the writer-first chain.
fn ancestry_of(p: &KernelProcess) -> (Vec<Ancestor>, Option<usize>) {
    let mut chain: Vec<Ancestor> = p
        .ancestors
        .iter()
        .map(|a| Ancestor {
            comm: a.comm.clone(),
            pid: a.tgid,
        })
        .collect();
    let whole = p.top_reached;
    let comms = |c: &[Ancestor]| -> Vec<String> {
        std::iter::once(p.comm.clone())
            .chain(c.iter().map(|a| a.comm.clone()))
            .collect()
    };
    let find = |c: &[Ancestor], whole: bool| {
        let names = comms(c);
        let it = names.iter().map(String::as_str);
        if whole {
            actor_index(it.chain(std::iter::once("")))
        } else {
            actor_index(it)
        }
    };
    if whole {
        let idx = find(&chain, true);
        return (chain, idx);
    }
    // Deeper than the kernel walked: ask /proc about the last captured ancestor's parents,
    // while it is the same process (its comm, not a recycled pid's).
    if let Some(last) = chain.last().cloned() {
        let above = proc_chain(last.pid);
        if above.first().is_some_and(|a| a.comm == last.comm) {
            chain.extend(above.into_iter().skip(1));
        }
    }
    // What could be read is all there is: the actor may be the chain's last.
    let idx = find(&chain, false).or_else(|| find(&chain, true));
    (chain, idx)
}

/// Whether an ancestor is a plugin its tool ran straight from its plugin directory (no
/// dispatcher between): a script whose path, in its command line while it lives, lies in a
/// directory named `*.d` or `plugins` (`/usr/share/fwtool/plugins.d/10-rules`). When its
/// command line no longer tells (it exited, or is exiting and its command line reads empty), a
/// name in run-parts' numbered style (`10-rules`) stands for that.
fn is_plugin(pid: u32, comm: &str) -> bool {
    let script_dir = || -> Option<bool> {
        if read_comm(pid).as_deref() != Some(comm) {
            return None;
        }
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let script = cmdline
            .split(|&b| b == 0)
            .take(3)
            .filter_map(|arg| std::str::from_utf8(arg).ok())
            .map(std::path::Path::new)
            .find(|path| {
                path.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(comm))
            })?;
        Some(
            script
                .parent()
                .and_then(|d| d.file_name())
                .and_then(|d| d.to_str())
                .is_some_and(|d| d.ends_with(".d") || d == "plugins"),
        )
    };
    script_dir().unwrap_or_else(|| numbered(comm))
}

/// `10-rules`: digits, a dash, then a name (the plugin naming run-parts runs).
fn numbered(comm: &str) -> bool {
    let digits = comm.bytes().take_while(u8::is_ascii_digit).count();
    digits > 0
        && comm[digits..]
            .strip_prefix('-')
            .is_some_and(|r| !r.is_empty())
}

/// The actor's index again when the one found (`idx`, in the writer-first chain of `writer`
/// and `chain`) is a plugin its tool ran straight from its plugin directory: then, as for a
/// script a dispatcher runs, the tool above it is the actor (see [`actor_index`]).
fn past_plugin(writer: &str, chain: &[Ancestor], idx: Option<usize>) -> Option<usize> {
    let Some((i, plugin)) = idx
        .filter(|&i| i > 0)
        .and_then(|i| Some((i, chain.get(i - 1)?)))
    else {
        return idx;
    };
    let dispatched = chain.get(i).is_some_and(|p| is_dispatcher(&p.comm));
    if dispatched || !is_plugin(plugin.pid, &plugin.comm) {
        return idx;
    }
    let mut names: Vec<&str> = std::iter::once(writer)
        .chain(chain.iter().map(|a| a.comm.as_str()))
        .collect();
    names.insert(i + 1, DISPATCHERS[0]);
    match actor_index(names.into_iter().chain(std::iter::once(""))) {
        Some(j) if j > i + 1 => Some(j - 1),
        Some(j) if j <= i => Some(j),
        _ => idx,
    }
}

/// Attribution from what the kernel captured, completed from `/proc` only where the captured
/// chain holds nothing but front ends and wrappers.
pub fn from_kernel(p: &KernelProcess) -> ProcessInfo {
    let (chain, idx) = ancestry_of(p);
    let idx = past_plugin(&p.comm, &chain, idx);
    let actor = match idx {
        Some(0) => Some(long_name(p.tgid, &p.comm)),
        Some(i) => chain.get(i - 1).map(|a| long_name(a.pid, &a.comm)),
        None => None,
    };
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
        ancestry: chain,
        requested_by: None,
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
    // The writer's parents from /proc, while they live.
    let chain = ppid.map(proc_chain).unwrap_or_default();
    let names: Vec<&str> = std::iter::once(comm)
        .chain(chain.iter().map(|a| a.comm.as_str()))
        .collect();
    let idx = if alive {
        actor_index(names.iter().copied().chain(std::iter::once("")))
    } else {
        // Only the comm is known: it is the actor unless it is a front end or a wrapper.
        actor_index([comm, ""])
    };
    let idx = if alive {
        past_plugin(comm, &chain, idx)
    } else {
        idx
    };
    let actor = match idx {
        Some(0) if alive => Some(long_name(tid, comm)),
        Some(0) => Some(comm.to_string()),
        Some(i) => chain.get(i - 1).map(|a| long_name(a.pid, &a.comm)),
        None => None,
    };
    let ancestry = chain;
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
        ancestry,
        requested_by: None,
    }
    .with_workload(if alive {
        cgroup::from_proc(pid).unwrap_or_default()
    } else {
        Workload::default()
    })
}

/// Components whose names are longer than the 15 bytes of `comm`, for when they have exited
/// before their command line could be read.
const LONG_NAMES: &[&str] = &[
    "netfilter-persistent",
    "kube-controller-manager",
    "amazon-ssm-agent",
    "google_guest_agent",
    "google_network_daemon",
];

/// A process's name beyond the 15 bytes `comm` keeps (`netfilter-persistent` for
/// `netfilter-persi`): from its command line while it lives (the base name of its program or,
/// for a script, of the script its interpreter runs, when it starts with the comm), else from
/// [`LONG_NAMES`]. Otherwise the comm.
fn long_name(pid: u32, comm: &str) -> String {
    const CUT: usize = observer_common::process::COMM_LEN - 1;
    if comm.len() < CUT {
        return comm.to_string();
    }
    let live = || -> Option<String> {
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        if read_comm(pid).as_deref() != Some(comm) {
            return None;
        }
        cmdline_name(&cmdline, comm)
    };
    live()
        .or_else(|| {
            let mut known = LONG_NAMES.iter().filter(|n| n.starts_with(comm));
            match (known.next(), known.next()) {
                (Some(n), None) => Some(n.to_string()),
                _ => None,
            }
        })
        .unwrap_or_else(|| comm.to_string())
}

/// The name in a command line (NUL-separated `argv`) that `comm` is the start of.
fn cmdline_name(cmdline: &[u8], comm: &str) -> Option<String> {
    cmdline
        .split(|&b| b == 0)
        .take(3)
        .filter_map(|arg| std::str::from_utf8(arg).ok())
        .map(|arg| arg.rsplit('/').next().unwrap_or(arg))
        .find(|name| name.len() > comm.len() && name.starts_with(comm))
        .map(str::to_string)
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

/// `pid` and its ancestors up to init (at most 16 steps), nearest first.
fn proc_chain(mut pid: u32) -> Vec<Ancestor> {
    let mut out = Vec::new();
    for _ in 0..16 {
        if pid == 0 {
            break;
        }
        let Some(comm) = read_comm(pid) else { break };
        out.push(Ancestor { comm, pid });
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
mod tests;
