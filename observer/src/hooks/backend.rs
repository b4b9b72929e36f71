//! Hook backends: which kernel mechanism carries each hook, chosen best first.
//!
//! - **fentry** (BTF trampolines): the cheapest; needs the function in the kernel's BTF and a
//!   kernel whose policy allows tracing programs.
//! - **kprobe** (kprobe/kretprobe): any kernel with CONFIG_KPROBES.
//! - **tracepoint** (syscall tracepoints): every kernel with BPF and tracepoints.
//!
//! The x_tables replace hook is placed on the first backend that attaches (`--hooks auto`), or on
//! the one asked for, failing with the kernel's own error when it cannot attach. The namespace
//! hooks (unshare, setns, clone, umount) are syscall tracepoints on every backend. What was
//! refused, and why, is kept for the ready line and `observer doctor`.

use aya::programs::{FEntry, FExit, KProbe, TracePoint};
use aya::{Btf, Ebpf};
use observer_common::hook::{HOOK_FENTRY, HOOK_KPROBE, HOOK_TRACEPOINT};

use super::{error_chain, HookError};
use crate::output::record::Source;

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

/// The kernel function the kprobe and fentry x_tables hooks attach to (see observer-ebpf's
/// xt_hook module for why this one).
pub const XT_FUNCTION: &str = "nf_setsockopt";

/// Present when the kernel can create kprobes through perf events.
const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe/type";

/// (program, tracepoint category, tracepoint name): the x_tables hook on the tracepoint backend.
const XT_TRACEPOINTS: &[(&str, &str, &str)] = &[
    ("setsockopt_enter", "syscalls", "sys_enter_setsockopt"),
    ("setsockopt_exit", "syscalls", "sys_exit_setsockopt"),
];

/// The namespace hooks: syscall tracepoints whatever the backend.
pub const NS_TRACEPOINTS: &[(&str, &str, &str)] = &[
    ("unshare_exit", "syscalls", "sys_exit_unshare"),
    ("setns_exit", "syscalls", "sys_exit_setns"),
    ("clone_exit", "syscalls", "sys_exit_clone"),
    ("clone_exit", "syscalls", "sys_exit_clone3"),
    ("umount_enter", "syscalls", "sys_enter_umount"),
    ("umount_exit", "syscalls", "sys_exit_umount"),
];

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
    /// Better backends that were tried and refused, with the kernel's error.
    pub refused: Vec<Refusal>,
    /// The nfnetlink writer hooks (sendmsg/sendto tracepoints) are attached: nftables and ipset
    /// writers are named by the kernel.
    pub nfnl_writers: bool,
    /// The backend of the hook that sees refused nftables writes.
    pub refusals: Option<HookBackend>,
}

impl Placement {
    /// One line for the ready status and `doctor`, e.g.
    /// `x_tables=kprobe namespaces=tracepoint nf_tables=netlink nf_writers=tracepoint
    /// (x_tables: fentry refused: ...)`.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "x_tables={} namespaces=tracepoint nf_tables=netlink nf_writers={}",
            self.x_tables.map_or("none", HookBackend::as_str),
            if self.nfnl_writers {
                "tracepoint"
            } else {
                "proc"
            }
        );
        s.push_str(&format!(
            " nf_refusals={}",
            self.refusals.map_or("none", HookBackend::as_str)
        ));
        for r in &self.refused {
            s.push_str(&format!(
                " ({}: {} refused: {})",
                r.hook,
                r.backend.as_str(),
                r.reason
            ));
        }
        s
    }

    /// The sources that feed the stream: the x_tables backend, the namespace tracepoints, netlink.
    pub fn sources(&self) -> Vec<Source> {
        let mut v: Vec<Source> = self.x_tables.map(Source::from).into_iter().collect();
        if !v.contains(&Source::Tracepoint) {
            v.push(Source::Tracepoint);
        }
        v.push(Source::Netlink);
        v
    }
}

/// What the kprobe and fentry hooks need beyond the programs themselves.
pub struct Needs<'a> {
    /// Why the socket's namespace offset is unknown, if it is.
    pub sock_net_missing: Option<&'a str>,
}

/// Attach one tracepoint program (loading it first if needed).
pub fn attach_tracepoint(
    ebpf: &mut Ebpf,
    prog: &str,
    category: &str,
    name: &str,
) -> Result<(), HookError> {
    let program: &mut TracePoint = ebpf
        .program_mut(prog)
        .ok_or_else(|| HookError::Load(format!("program {prog} missing from the object")))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| HookError::Load(error_chain(&e)))?;
    if program.fd().is_err() {
        program
            .load()
            .map_err(|e| HookError::Load(format!("{prog}: {}", error_chain(&e))))?;
    }
    program
        .attach(category, name)
        .map_err(|e| HookError::Attach {
            category: category.to_string(),
            name: name.to_string(),
            reason: error_chain(&e),
        })?;
    Ok(())
}

/// Put the x_tables hook on `backend`. On failure returns the kernel's (or the loader's) reason.
fn attach_xt_on(
    ebpf: &mut Ebpf,
    backend: HookBackend,
    needs: &Needs,
    attached: &mut Vec<String>,
) -> Result<(), String> {
    if backend != HookBackend::Tracepoint {
        if let Some(why) = needs.sock_net_missing {
            return Err(format!("the socket's namespace cannot be read ({why})"));
        }
    }
    match backend {
        HookBackend::Fentry => {
            let btf = Btf::from_sys_fs()
                .map_err(|e| format!("kernel BTF unavailable: {}", error_chain(&e)))?;
            let program: &mut FExit = ebpf
                .program_mut("xt_fexit")
                .ok_or("program xt_fexit missing from the object")?
                .try_into()
                .map_err(|e: aya::programs::ProgramError| error_chain(&e))?;
            program
                .load(XT_FUNCTION, &btf)
                .map_err(|e| format!("loading fexit on {XT_FUNCTION}: {}", error_chain(&e)))?;
            program
                .attach()
                .map_err(|e| format!("attaching fexit to {XT_FUNCTION}: {}", error_chain(&e)))?;
            attached.push(format!("fexit:{XT_FUNCTION}"));
        }
        HookBackend::Kprobe => {
            for (prog, kind) in [("xt_kprobe", "kprobe"), ("xt_kretprobe", "kretprobe")] {
                attach_kprobe(ebpf, prog, kind, XT_FUNCTION)?;
                attached.push(format!("{kind}:{XT_FUNCTION}"));
            }
        }
        HookBackend::Tracepoint => {
            for (prog, category, name) in XT_TRACEPOINTS {
                attach_tracepoint(ebpf, prog, category, name).map_err(|e| e.to_string())?;
                attached.push(format!("{category}:{name}"));
            }
        }
    }
    Ok(())
}

/// Place the x_tables hook: on `only` when given (its error is returned as is), else on the best
/// backend that attaches. A backend that fails part way leaves nothing attached: its programs are
/// unloaded before the next one is tried, so no replace is reported twice.
pub fn place_xt(
    ebpf: &mut Ebpf,
    only: Option<HookBackend>,
    needs: &Needs,
    placement: &mut Placement,
    attached: &mut Vec<String>,
) -> Result<(), HookError> {
    let candidates: &[HookBackend] = match &only {
        Some(b) => std::slice::from_ref(b),
        None => &HookBackend::BEST_FIRST,
    };
    for &backend in candidates {
        let mut mine = Vec::new();
        match attach_xt_on(ebpf, backend, needs, &mut mine) {
            Ok(()) => {
                placement.x_tables = Some(backend);
                attached.extend(mine);
                return Ok(());
            }
            Err(reason) => {
                unload(ebpf, backend);
                if only.is_some() {
                    return Err(HookError::Backend {
                        backend: backend.as_str(),
                        reason,
                    });
                }
                tracing::info!("x_tables hook: {} refused: {reason}", backend.as_str());
                placement.refused.push(Refusal {
                    hook: "x_tables",
                    backend,
                    reason,
                });
            }
        }
    }
    let last = placement
        .refused
        .last()
        .map(|r| r.reason.clone())
        .unwrap_or_default();
    Err(HookError::Backend {
        backend: "any",
        reason: last,
    })
}

/// The kernel function the kprobe and fentry refusal hooks attach to (see observer-ebpf's
/// nl_ack module).
pub const REFUSAL_FUNCTION: &str = "netlink_ack";

/// The refusal hook on the tracepoint backend: the writer's replies, read at `recvmsg` exit.
pub const RECV_TRACEPOINTS: &[(&str, &str, &str)] = &[
    ("recvmsg_enter", "syscalls", "sys_enter_recvmsg"),
    ("recvmsg_exit", "syscalls", "sys_exit_recvmsg"),
];

fn attach_refusals_on(
    ebpf: &mut Ebpf,
    backend: HookBackend,
    skb_sk_known: bool,
    attached: &mut Vec<String>,
) -> Result<(), String> {
    if backend != HookBackend::Tracepoint && !skb_sk_known {
        return Err("sk_buff.sk is not in this kernel's BTF".into());
    }
    match backend {
        HookBackend::Fentry => {
            let btf = Btf::from_sys_fs()
                .map_err(|e| format!("kernel BTF unavailable: {}", error_chain(&e)))?;
            let program: &mut FEntry = ebpf
                .program_mut("nl_ack_fentry")
                .ok_or("program nl_ack_fentry missing from the object")?
                .try_into()
                .map_err(|e: aya::programs::ProgramError| error_chain(&e))?;
            program.load(REFUSAL_FUNCTION, &btf).map_err(|e| {
                format!("loading fentry on {REFUSAL_FUNCTION}: {}", error_chain(&e))
            })?;
            program.attach().map_err(|e| {
                format!(
                    "attaching fentry to {REFUSAL_FUNCTION}: {}",
                    error_chain(&e)
                )
            })?;
            attached.push(format!("fentry:{REFUSAL_FUNCTION}"));
        }
        HookBackend::Kprobe => {
            attach_kprobe(ebpf, "nl_ack_kprobe", "kprobe", REFUSAL_FUNCTION)?;
            attached.push(format!("kprobe:{REFUSAL_FUNCTION}"));
        }
        HookBackend::Tracepoint => {
            for (prog, category, name) in RECV_TRACEPOINTS {
                attach_tracepoint(ebpf, prog, category, name).map_err(|e| e.to_string())?;
                attached.push(format!("{category}:{name}"));
            }
        }
    }
    Ok(())
}

/// Place the hook that sees refused nftables writes: on `only` when given, else the best
/// backend that attaches; the tracepoint backend (the writer's replies) is the fallback either
/// way, since this hook is not worth failing the start for. Needs the writer hooks' offsets.
pub fn place_refusals(
    ebpf: &mut Ebpf,
    only: Option<HookBackend>,
    skb_sk_known: bool,
    placement: &mut Placement,
    attached: &mut Vec<String>,
) {
    let mut candidates: Vec<HookBackend> = match only {
        Some(b) => vec![b],
        None => HookBackend::BEST_FIRST.to_vec(),
    };
    if !candidates.contains(&HookBackend::Tracepoint) {
        candidates.push(HookBackend::Tracepoint);
    }
    for backend in candidates {
        let mut mine = Vec::new();
        match attach_refusals_on(ebpf, backend, skb_sk_known, &mut mine) {
            Ok(()) => {
                placement.refusals = Some(backend);
                attached.extend(mine);
                return;
            }
            Err(reason) => {
                unload_refusals(ebpf, backend);
                tracing::info!("refusal hook: {} refused: {reason}", backend.as_str());
                placement.refused.push(Refusal {
                    hook: "nf_refusals",
                    backend,
                    reason,
                });
            }
        }
    }
}

fn unload_refusals(ebpf: &mut Ebpf, backend: HookBackend) {
    match backend {
        HookBackend::Fentry => {
            if let Some(p) = typed::<FEntry>(ebpf, "nl_ack_fentry") {
                let _ = p.unload();
            }
        }
        HookBackend::Kprobe => {
            if let Some(p) = typed::<KProbe>(ebpf, "nl_ack_kprobe") {
                let _ = p.unload();
            }
        }
        HookBackend::Tracepoint => {
            for (prog, _, _) in RECV_TRACEPOINTS {
                if let Some(p) = typed::<TracePoint>(ebpf, prog) {
                    let _ = p.unload();
                }
            }
        }
    }
}

/// A program of the object as its type, if it is there and of that type.
fn typed<'a, T>(ebpf: &'a mut Ebpf, prog: &str) -> Option<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program>,
{
    ebpf.program_mut(prog).and_then(|p| p.try_into().ok())
}

/// Load the kprobe (or kretprobe) program `prog` and attach it to `function`; on failure the
/// loader's or kernel's reason, with a hint when the kernel has no kprobes at all.
fn attach_kprobe(ebpf: &mut Ebpf, prog: &str, kind: &str, function: &str) -> Result<(), String> {
    let program: &mut KProbe = ebpf
        .program_mut(prog)
        .ok_or_else(|| format!("program {prog} missing from the object"))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| error_chain(&e))?;
    program
        .load()
        .map_err(|e| format!("loading {kind} on {function}: {}", error_chain(&e)))?;
    program.attach(function, 0).map_err(|e| {
        let hint = if std::path::Path::new(KPROBE_PMU).exists() {
            ""
        } else {
            " (this kernel has no kprobe PMU: built without CONFIG_KPROBES)"
        };
        format!("attaching {kind} to {function}: {}{hint}", error_chain(&e))
    })?;
    Ok(())
}

/// Unload (and so detach) the programs of a backend that failed part way.
fn unload(ebpf: &mut Ebpf, backend: HookBackend) {
    match backend {
        HookBackend::Fentry => {
            if let Some(p) = typed::<FExit>(ebpf, "xt_fexit") {
                let _ = p.unload();
            }
        }
        HookBackend::Kprobe => {
            for prog in ["xt_kprobe", "xt_kretprobe"] {
                if let Some(p) = typed::<KProbe>(ebpf, prog) {
                    let _ = p.unload();
                }
            }
        }
        HookBackend::Tracepoint => {
            for (prog, _, _) in XT_TRACEPOINTS {
                if let Some(p) = typed::<TracePoint>(ebpf, prog) {
                    let _ = p.unload();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_each_hook_and_every_refusal() {
        let p = Placement {
            x_tables: Some(HookBackend::Kprobe),
            refused: vec![Refusal {
                hook: "x_tables",
                backend: HookBackend::Fentry,
                reason: "Operation not permitted (os error 1)".into(),
            }],
            nfnl_writers: true,
            refusals: Some(HookBackend::Kprobe),
        };
        assert_eq!(
            p.summary(),
            "x_tables=kprobe namespaces=tracepoint nf_tables=netlink nf_writers=tracepoint \
             nf_refusals=kprobe (x_tables: fentry refused: Operation not permitted (os error 1))"
        );
    }

    #[test]
    fn record_sources_map_to_backends() {
        assert_eq!(
            HookBackend::from_raw(HOOK_FENTRY),
            Some(HookBackend::Fentry)
        );
        assert_eq!(
            HookBackend::from_raw(HOOK_KPROBE),
            Some(HookBackend::Kprobe)
        );
        assert_eq!(
            HookBackend::from_raw(HOOK_TRACEPOINT),
            Some(HookBackend::Tracepoint)
        );
        assert_eq!(HookBackend::from_raw(0), None);
        assert_eq!(Source::from(HookBackend::Kprobe), Source::Kprobe);
    }
}
