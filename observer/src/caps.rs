//! The capabilities observer needs: each one once, with what it is for and what is lost
//! without it.
//!
//! observer runs as uid 0. Root with every capability is enough; so is a container that drops
//! every capability but the ones marked [`Need::Needed`] and [`Need::Optional`] here, which is
//! what `deploy/observer.yaml` grants (a test below holds the manifest to this table, and
//! `tests/tests/image.rs` runs the image under the manifest's capabilities). `observer doctor` prints
//! the table against the capabilities the process holds.
//!
//! CAP_BPF and CAP_PERFMON (Linux 5.8+) split the eBPF part of CAP_SYS_ADMIN off, but observer
//! needs CAP_SYS_ADMIN anyway (setns() into other namespaces, mounting tracefs), and the kernel
//! accepts CAP_SYS_ADMIN wherever it asks for either: they are not granted beside it. Before 5.8
//! the kernel has neither, and CAP_SYS_ADMIN is the only way.
//!
//! Not in the table: CAP_NET_BIND_SERVICE, which only a `--listen` port below 1024 would need
//! (the manifest listens on 9820), and CAP_DAC_OVERRIDE, not needed because the files observer
//! reads (`/proc`, `/sys`, `/run/netns`, the pod logs' directories) belong to root.

/// How much observer depends on a capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Changes are missed without it.
    Needed,
    /// Nothing is missed without it; something costs more.
    Optional,
    /// Held through CAP_SYS_ADMIN: the kernel accepts that capability in its place.
    OrSysAdmin,
}

/// One capability observer uses.
#[derive(Debug)]
pub struct Capability {
    /// As the kernel names it; Kubernetes and podman name it without `CAP_`.
    pub name: &'static str,
    /// Its bit in `CapEff` (`linux/capability.h`).
    pub bit: u32,
    pub need: Need,
    /// What observer does with it.
    pub used_for: &'static str,
    /// What is lost without it.
    pub without: &'static str,
}

pub const SYS_ADMIN: Capability = Capability {
    name: "CAP_SYS_ADMIN",
    bit: 21,
    need: Need::Needed,
    used_for: "setns() into every network namespace but observer's own (the netlink sockets and \
               x_tables reads are made inside it); bpf() and perf_event_open() for the eBPF \
               programs, in place of CAP_BPF and CAP_PERFMON; mounting tracefs when the node has \
               not; listing the kernel's BPF maps (doctor's running observers)",
    without: "no namespace but observer's own can be entered: the changes in every other one are \
              missed; without CAP_BPF and CAP_PERFMON either, the eBPF programs do not load \
              (iptables-legacy changes are missed) and tracefs cannot be mounted",
};

pub const NET_ADMIN: Capability = Capability {
    name: "CAP_NET_ADMIN",
    bit: 12,
    need: Need::Needed,
    used_for: "joining nfnetlink's NFNLGRP_NFTABLES group and dumping nftables rulesets; reading \
               x_tables with getsockopt (IPT_SO_GET_ENTRIES and its ip6, arp and ebtables \
               kin); SO_RCVBUFFORCE for the notification socket's buffer",
    without: "the nftables group cannot be joined and x_tables cannot be read: every change is \
              missed",
};

pub const NET_RAW: Capability = Capability {
    name: "CAP_NET_RAW",
    bit: 13,
    need: Need::Needed,
    used_for: "the raw sockets (AF_INET, AF_INET6) that x_tables' getsockopt is made on",
    without: "x_tables cannot be read: every iptables-legacy (and ebtables, arptables) change is \
              missed",
};

pub const SYS_PTRACE: Capability = Capability {
    name: "CAP_SYS_PTRACE",
    bit: 19,
    need: Need::Needed,
    used_for: "opening /proc/PID/ns/net of processes holding capabilities observer lacks \
               (kube-proxy, CNI agents, pod sandboxes): the kernel's ptrace access check",
    without: "namespaces that only such processes hold (pods) cannot be opened: their changes are \
              missed",
};

pub const DAC_READ_SEARCH: Capability = Capability {
    name: "CAP_DAC_READ_SEARCH",
    bit: 2,
    need: Need::Optional,
    used_for: "open_by_handle_at(): a writer's cgroup id to its path in one call",
    without: "nothing is missed; cgroup ids resolve by walking /sys/fs/cgroup once per new id \
              instead",
};

pub const SYS_CHROOT: Capability = Capability {
    name: "CAP_SYS_CHROOT",
    bit: 18,
    need: Need::Optional,
    used_for: "--restore in a container: setns() into the node's mount namespace, to write \
               through the node's own iptables-restore or nft (the image holds neither)",
    without: "nothing is missed; --restore in a container without the tools fails, and says so \
              in the incident",
};

pub const BPF: Capability = Capability {
    name: "CAP_BPF",
    bit: 39,
    need: Need::OrSysAdmin,
    used_for: "bpf(): loading the eBPF programs and their maps (Linux 5.8+)",
    without: "nothing while CAP_SYS_ADMIN is held; without both, the eBPF programs do not load: \
              iptables-legacy changes are missed, nftables ones are seen through netlink",
};

pub const PERFMON: Capability = Capability {
    name: "CAP_PERFMON",
    bit: 38,
    need: Need::OrSysAdmin,
    used_for: "tracing programs: attaching kprobes, tracepoints and fentry/fexit, and reading \
               kernel memory from them (Linux 5.8+)",
    without: "nothing while CAP_SYS_ADMIN is held; without both, the eBPF programs do not load: \
              iptables-legacy changes are missed, nftables ones are seen through netlink",
};

/// Every capability observer uses: the needed ones, the optional ones, then the two that
/// CAP_SYS_ADMIN stands for.
pub const CAPABILITIES: [&Capability; 8] = [
    &SYS_ADMIN,
    &NET_ADMIN,
    &NET_RAW,
    &SYS_PTRACE,
    &DAC_READ_SEARCH,
    &SYS_CHROOT,
    &BPF,
    &PERFMON,
];

impl Capability {
    /// The name Kubernetes' `securityContext.capabilities` and `podman --cap-add` take.
    pub fn short_name(&self) -> &'static str {
        self.name.trim_start_matches("CAP_")
    }

    /// Whether `eff` (a `CapEff` mask) holds it.
    pub fn held(&self, eff: u64) -> bool {
        eff & (1u64 << self.bit) != 0
    }

    /// Whether `eff` holds it, or CAP_SYS_ADMIN where that stands for it.
    pub fn covered(&self, eff: u64) -> bool {
        self.held(eff) || (self.need == Need::OrSysAdmin && SYS_ADMIN.held(eff))
    }
}

/// The capabilities observer cannot do without (changes are missed without each).
pub fn needed() -> impl Iterator<Item = &'static Capability> {
    CAPABILITIES.into_iter().filter(|c| c.need == Need::Needed)
}

/// [`needed`] as one phrase, for the messages that say what to grant (a unit test holds it to
/// the table).
pub const NEEDED: &str = "CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_NET_RAW and CAP_SYS_PTRACE";

/// The capabilities a container running observer is granted (`capabilities.add`).
pub fn granted() -> impl Iterator<Item = &'static Capability> {
    CAPABILITIES
        .into_iter()
        .filter(|c| matches!(c.need, Need::Needed | Need::Optional))
}

/// This process's effective capabilities, from /proc/self/status (0 when unreadable).
pub fn effective() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// deploy/observer.yaml grants what this table says, in its order.
    #[test]
    fn the_manifest_grants_the_needed_and_optional_capabilities() {
        let text = include_str!("../../deploy/observer.yaml");
        let ds = serde_yaml_ng::Deserializer::from_str(text)
            .map(|doc| {
                <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc).expect("YAML")
            })
            .find(|v| v["kind"] == "DaemonSet")
            .expect("a DaemonSet in deploy/observer.yaml");
        let caps =
            &ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"];
        let added: Vec<&str> = caps["add"]
            .as_sequence()
            .expect("capabilities.add")
            .iter()
            .map(|c| c.as_str().expect("a capability name"))
            .collect();
        let table: Vec<&str> = granted().map(Capability::short_name).collect();
        assert_eq!(added, table);
        assert_eq!(caps["drop"][0], "ALL");
    }

    /// The phrase the error messages and doctor use names exactly the needed rows, in order.
    #[test]
    fn the_needed_phrase_is_the_tables() {
        let names: Vec<&str> = needed().map(|c| c.name).collect();
        let (last, rest) = names.split_last().expect("needed capabilities");
        assert_eq!(NEEDED, format!("{} and {last}", rest.join(", ")));
    }

    #[test]
    fn sys_admin_stands_for_bpf_and_perfmon() {
        let only_sys_admin = 1u64 << SYS_ADMIN.bit;
        assert!(BPF.covered(only_sys_admin) && PERFMON.covered(only_sys_admin));
        assert!(!BPF.held(only_sys_admin));
        assert!(!NET_ADMIN.covered(only_sys_admin));
        let bits: std::collections::BTreeSet<u32> = CAPABILITIES.iter().map(|c| c.bit).collect();
        assert_eq!(bits.len(), CAPABILITIES.len(), "one bit each");
    }
}
