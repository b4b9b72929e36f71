//! Hook backends: which kernel mechanism carries each hook, chosen best first.
//!
//! - **fentry** (BTF trampolines): the cheapest; needs the function in the kernel's BTF and a
//!   kernel whose policy allows tracing programs.
//! - **kprobe** (kprobe/kretprobe): any kernel with CONFIG_KPROBES.
//! - **tracepoint** (syscall tracepoints): every kernel with BPF and tracepoints.
//!
//! Each hook ([`Hook`]) has programs for every backend. The x_tables replace hook is placed on
//! the first backend that attaches (`--hooks auto`), or on the one asked for, failing with the
//! kernel's own error when it cannot attach; unless that backend carries every other hook and
//! the kernel refuses only the x_tables function on it (fentry on 5.10: its trampolines take no
//! struct argument, and `nf_setsockopt` takes one), when the hook goes on the next backend with
//! the reason kept. The others (nftables and ipset writers, nftables
//! generations, namespaces, unmounts, refused batches) follow the same order and fall back to the
//! syscall tracepoints when a better backend is refused, since losing them is worse than paying
//! for them. On a kprobe or fentry kernel no syscall tracepoint is attached at all: the hooks sit
//! on kernel functions that run only for netfilter and namespace work. What was refused, and why,
//! is kept for the ready line and `observer doctor`.

use observer_common::hook::{HOOK_FENTRY, HOOK_KPROBE, HOOK_TRACEPOINT};

use crate::output::line::Source;

/// A kernel hook mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HookBackend {
    Fentry,
    Kprobe,
    Tracepoint,
}

impl HookBackend {
    /// Best first: what `--hooks auto` tries, in order.
    pub const BEST_FIRST: [HookBackend; 3] = [
        HookBackend::Fentry,
        HookBackend::Kprobe,
        HookBackend::Tracepoint,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HookBackend::Fentry => "fentry",
            HookBackend::Kprobe => "kprobe",
            HookBackend::Tracepoint => "tracepoint",
        }
    }

    /// The backend a record says wrote it (`hook::HOOK_*`).
    pub fn from_raw(v: u32) -> Option<HookBackend> {
        match v {
            HOOK_FENTRY => Some(HookBackend::Fentry),
            HOOK_KPROBE => Some(HookBackend::Kprobe),
            HOOK_TRACEPOINT => Some(HookBackend::Tracepoint),
            _ => None,
        }
    }
}

impl From<HookBackend> for Source {
    fn from(b: HookBackend) -> Source {
        match b {
            HookBackend::Fentry => Source::Fentry,
            HookBackend::Kprobe => Source::Kprobe,
            HookBackend::Tracepoint => Source::Tracepoint,
        }
    }
}

/// One program of a hook, and where it attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attach {
    Fentry(&'static str, &'static str),
    Fexit(&'static str, &'static str),
    Kprobe(&'static str, &'static str),
    Kretprobe(&'static str, &'static str),
    /// (program, category, name)
    Tracepoint(&'static str, &'static str, &'static str),
}

impl Attach {
    pub(super) fn program(self) -> &'static str {
        match self {
            Attach::Fentry(p, _)
            | Attach::Fexit(p, _)
            | Attach::Kprobe(p, _)
            | Attach::Kretprobe(p, _)
            | Attach::Tracepoint(p, _, _) => p,
        }
    }

    /// How `doctor` and the ready status name it: `fexit:nf_setsockopt`,
    /// `syscalls:sys_enter_sendmsg`.
    pub fn name(self) -> String {
        match self {
            Attach::Fentry(_, f) => format!("fentry:{f}"),
            Attach::Fexit(_, f) => format!("fexit:{f}"),
            Attach::Kprobe(_, f) => format!("kprobe:{f}"),
            Attach::Kretprobe(_, f) => format!("kretprobe:{f}"),
            Attach::Tracepoint(_, c, n) => format!("{c}:{n}"),
        }
    }
}

/// A job of the kernel side, with its programs on each backend (best first).
#[derive(Debug)]
pub struct Hook {
    /// The name in the ready status and `doctor` (`x_tables=kprobe`).
    pub name: &'static str,
    pub fentry: &'static [Attach],
    pub kprobe: &'static [Attach],
    /// Empty when the tracepoint backend does this job another way.
    pub tracepoint: &'static [Attach],
}

impl Hook {
    pub(super) fn on(&self, backend: HookBackend) -> &'static [Attach] {
        match backend {
            HookBackend::Fentry => self.fentry,
            HookBackend::Kprobe => self.kprobe,
            HookBackend::Tracepoint => self.tracepoint,
        }
    }
}

/// The kernel function the kprobe and fentry x_tables hooks attach to (see observer-ebpf's
/// xt_hook module for why this one).
pub const XT_FUNCTION: &str = "nf_setsockopt";

/// x_tables table replaces (iptables-legacy, ip6tables-legacy, arptables-legacy, ebtables).
pub const X_TABLES: Hook = Hook {
    name: "x_tables",
    fentry: &[Attach::Fexit("xt_fexit", XT_FUNCTION)],
    kprobe: &[
        Attach::Kprobe("xt_kprobe", XT_FUNCTION),
        Attach::Kretprobe("xt_kretprobe", XT_FUNCTION),
    ],
    tracepoint: &[
        Attach::Tracepoint("setsockopt_enter", "syscalls", "sys_enter_setsockopt"),
        Attach::Tracepoint("setsockopt_exit", "syscalls", "sys_exit_setsockopt"),
    ],
};

/// New network namespaces: their creation on kprobe and fentry kernels, the syscalls that enter
/// one on the tracepoint backend.
pub const NAMESPACES: Hook = Hook {
    name: "namespaces",
    fentry: &[Attach::Fexit("netns_new_fexit", "copy_net_ns")],
    kprobe: &[Attach::Kretprobe("netns_new_kretprobe", "copy_net_ns")],
    tracepoint: &[
        Attach::Tracepoint("unshare_exit", "syscalls", "sys_exit_unshare"),
        Attach::Tracepoint("setns_exit", "syscalls", "sys_exit_setns"),
        Attach::Tracepoint("clone_exit", "syscalls", "sys_exit_clone"),
        Attach::Tracepoint("clone_exit", "syscalls", "sys_exit_clone3"),
    ],
};

/// Unmounts (a namespace's bind mount going: `ip netns del`).
pub const UNMOUNTS: Hook = Hook {
    name: "umount",
    fentry: &[Attach::Fexit("umount_fexit", "path_umount")],
    kprobe: &[
        Attach::Kprobe("umount_kprobe", "path_umount"),
        Attach::Kretprobe("umount_kretprobe", "path_umount"),
    ],
    tracepoint: &[
        Attach::Tracepoint("umount_enter", "syscalls", "sys_enter_umount"),
        Attach::Tracepoint("umount_exit", "syscalls", "sys_exit_umount"),
    ],
};

/// The kernel function the kprobe and fentry writer hooks attach to: every netlink request a
/// task sends to the kernel goes through it, in the sender's context.
pub const WRITER_FUNCTION: &str = "netlink_unicast";

/// nftables batches and ipset commands with their writer.
pub const NF_WRITERS: Hook = Hook {
    name: "nf_writers",
    fentry: &[
        Attach::Fentry("nl_unicast_fentry", WRITER_FUNCTION),
        Attach::Fexit("nl_unicast_fexit", WRITER_FUNCTION),
    ],
    kprobe: &[
        Attach::Kprobe("nl_unicast_kprobe", WRITER_FUNCTION),
        Attach::Kretprobe("nl_unicast_kretprobe", WRITER_FUNCTION),
    ],
    tracepoint: &[
        Attach::Tracepoint("sendmsg_enter", "syscalls", "sys_enter_sendmsg"),
        Attach::Tracepoint("sendto_enter", "syscalls", "sys_enter_sendto"),
        Attach::Tracepoint("send_exit", "syscalls", "sys_exit_sendmsg"),
        Attach::Tracepoint("send_exit", "syscalls", "sys_exit_sendto"),
    ],
};

/// The kernel function that multicasts a committed batch's `NFT_MSG_NEWGEN`.
pub const GEN_FUNCTION: &str = "nlmsg_notify";

/// nftables generations and who committed them, joined to `NEWGEN` by generation id. The
/// tracepoint backend has none: it joins by the writer's thread id.
pub const NFT_GENS: Hook = Hook {
    name: "nft_gens",
    fentry: &[Attach::Fentry("nft_gen_fentry", GEN_FUNCTION)],
    kprobe: &[Attach::Kprobe("nft_gen_kprobe", GEN_FUNCTION)],
    tracepoint: &[],
};

/// The kernel function the kprobe and fentry refusal hooks attach to (see observer-ebpf's
/// nl_ack module).
pub const REFUSAL_FUNCTION: &str = "netlink_ack";

/// Refused nftables batches: where the kernel acknowledges them with an error, or (tracepoint)
/// the writer's replies read at `recvmsg` exit.
pub const NF_REFUSALS: Hook = Hook {
    name: "nf_refusals",
    fentry: &[Attach::Fentry("nl_ack_fentry", REFUSAL_FUNCTION)],
    kprobe: &[Attach::Kprobe("nl_ack_kprobe", REFUSAL_FUNCTION)],
    tracepoint: &[
        Attach::Tracepoint("recvmsg_enter", "syscalls", "sys_enter_recvmsg"),
        Attach::Tracepoint("recvmsg_exit", "syscalls", "sys_exit_recvmsg"),
    ],
};

/// Present when the kernel can create kprobes through perf events.
pub(super) const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe/type";

/// A better backend that was not used for a hook, and the kernel's reason.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Refusal {
    pub hook: &'static str,
    pub backend: HookBackend,
    pub reason: String,
}

/// Where the hooks ended up.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Placement {
    /// The backend of the x_tables replace hook.
    pub x_tables: Option<HookBackend>,
    /// The backend of the namespace discovery hook.
    pub namespaces: Option<HookBackend>,
    /// The backend of the unmount hook.
    pub umount: Option<HookBackend>,
    /// The backend of the nftables and ipset writer hook; `None`: nftables writers are named
    /// from `/proc` and ipset changes are not seen.
    pub nf_writers: Option<HookBackend>,
    /// The backend of the nftables generation hook; `None`: generations are joined to their
    /// writer by thread id.
    pub nft_gens: Option<HookBackend>,
    /// The backend of the hook that sees refused nftables writes.
    pub refusals: Option<HookBackend>,
    /// Better backends that were tried and refused, with the kernel's error.
    pub refused: Vec<Refusal>,
}

impl Placement {
    /// One line for the ready status and `doctor`, e.g.
    /// `x_tables=kprobe namespaces=kprobe umount=kprobe nf_tables=netlink nf_writers=kprobe
    /// nft_gens=kprobe nf_refusals=kprobe (x_tables: fentry refused: ...)`.
    pub fn summary(&self) -> String {
        let name = |b: Option<HookBackend>, none: &'static str| b.map_or(none, HookBackend::as_str);
        let mut s = format!(
            "x_tables={} namespaces={} umount={} nf_tables=netlink nf_writers={} nft_gens={} \
             nf_refusals={}",
            name(self.x_tables, "none"),
            name(self.namespaces, "none"),
            name(self.umount, "none"),
            name(self.nf_writers, "proc"),
            name(self.nft_gens, "thread"),
            name(self.refusals, "none"),
        );
        // A backend the kernel refuses for x_tables and for every other hook it refuses for
        // the same reason (no kprobes, no trampolines): said once. One that carries other hooks
        // refused the x_tables function alone (5.10's fentry): each reason is its own.
        let kernel_wide: Vec<HookBackend> = self
            .refused
            .iter()
            .filter(|r| r.hook == "x_tables" && !self.carries(r.backend))
            .map(|r| r.backend)
            .collect();
        let mut others_too = false;
        for r in &self.refused {
            if r.hook != "x_tables" && kernel_wide.contains(&r.backend) {
                others_too = true;
                continue;
            }
            s.push_str(&format!(
                " ({}: {} refused: {})",
                r.hook,
                r.backend.as_str(),
                r.reason
            ));
        }
        if others_too {
            s.push_str(" (the other hooks: refused there for the same reason)");
        }
        s
    }

    /// Each hook's name and backend.
    fn hooks(&self) -> [(&'static str, Option<HookBackend>); 6] {
        [
            ("x_tables", self.x_tables),
            ("namespaces", self.namespaces),
            ("umount", self.umount),
            ("nf_writers", self.nf_writers),
            ("nft_gens", self.nft_gens),
            ("nf_refusals", self.refusals),
        ]
    }

    /// Whether some hook other than x_tables is on `backend`.
    pub fn carries(&self, backend: HookBackend) -> bool {
        self.hooks()
            .iter()
            .any(|(h, b)| *h != "x_tables" && *b == Some(backend))
    }

    /// The hooks this kernel put on a worse backend than the one it gives the others: each
    /// refusal of a backend that carries other hooks (it is the hook's function the kernel
    /// refuses there, not the backend), with where the hook went and what that costs. Empty
    /// when every refusal is the kernel's whole backend (no kprobes, no trampolines), which the
    /// summary already says.
    pub fn degraded(&self) -> Vec<String> {
        let hooks = self.hooks();
        self.refused
            .iter()
            .filter(|r| {
                hooks
                    .iter()
                    .any(|(h, b)| *h != r.hook && *b == Some(r.backend))
            })
            .filter_map(|r| {
                let on = hooks.iter().find(|(h, _)| *h == r.hook)?.1;
                let cost = match on {
                    Some(HookBackend::Kprobe) => {
                        "a kprobe and a kretprobe run per call instead of one trampoline \
                         program: more kernel time in the writer; nothing is missed"
                    }
                    Some(HookBackend::Tracepoint) => {
                        "syscall tracepoints: a program runs on every such syscall of every \
                         process; nothing is missed"
                    }
                    Some(HookBackend::Fentry) => "nothing is missed",
                    None => "its changes are not seen from the kernel",
                };
                Some(format!(
                    "{} on {}, not {} (refused: {}): {cost}",
                    r.hook,
                    on.map_or("nothing", HookBackend::as_str),
                    r.backend.as_str(),
                    r.reason
                ))
            })
            .collect()
    }

    /// Whether the nftables and ipset writers are captured in the kernel.
    pub fn nfnl_writers(&self) -> bool {
        self.nf_writers.is_some()
    }

    /// The sources that feed the stream: the hooks' backends, netlink.
    pub fn sources(&self) -> Vec<Source> {
        let mut v: Vec<Source> = Vec::new();
        for b in [self.x_tables, self.namespaces, self.nf_writers]
            .into_iter()
            .flatten()
        {
            if !v.contains(&b.into()) {
                v.push(b.into());
            }
        }
        v.push(Source::Netlink);
        v
    }

    pub(super) fn slot(&mut self, hook: &Hook) -> &mut Option<HookBackend> {
        match hook.name {
            "x_tables" => &mut self.x_tables,
            "namespaces" => &mut self.namespaces,
            "umount" => &mut self.umount,
            "nf_writers" => &mut self.nf_writers,
            "nft_gens" => &mut self.nft_gens,
            _ => &mut self.refusals,
        }
    }
}

/// What the hooks need beyond the programs themselves: why a backend cannot carry a hook on this
/// kernel before anything is tried (a struct field its programs read is not in the BTF).
pub struct Needs<'a> {
    /// Why the socket's namespace offset is unknown, if it is (x_tables on kprobe and fentry).
    pub sock_net_missing: Option<&'a str>,
    /// Why the socket buffer cannot be read, if it cannot (writers and generations on kprobe
    /// and fentry).
    pub skb_missing: Option<&'a str>,
    /// Why a mount's file system cannot be told, if it cannot (unmounts on kprobe and fentry).
    pub mount_missing: Option<&'a str>,
    /// Why `sk_buff.sk` is unknown (refusals on kprobe and fentry).
    pub skb_sk_missing: Option<&'a str>,
}

impl Needs<'_> {
    pub(super) fn blocker(&self, hook: &Hook) -> Option<&str> {
        match hook.name {
            "x_tables" => self.sock_net_missing,
            "nf_writers" | "nft_gens" => self.skb_missing.or(self.sock_net_missing),
            "umount" => self.mount_missing,
            "nf_refusals" => self.skb_sk_missing,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
