//! What the kprobe and fentry backends share for x_tables replaces: both hook `nf_setsockopt`,
//! the one function every x_tables front end's replace goes through, and produce the same
//! `XtReplace` record as the syscall tracepoints, with the namespace taken from the socket.
//!
//! Why `nf_setsockopt` (net/netfilter/nf_sockopt.c) and not `do_ipt_set_ctl` and its siblings:
//! it is built into the kernel even where ip_tables, ip6_tables, arp_tables and ebtables are
//! modules (so it can be hooked at start, before any of them is loaded, and fentry finds it in
//! vmlinux BTF), it is exported (never inlined away), and it is reached with the protocol family
//! and option number of every replace: `PF_INET` for iptables, arptables and ebtables,
//! `PF_INET6` for ip6tables.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel, bpf_probe_read_user},
    macros::map,
    maps::{HashMap, PerCpuArray},
};
use observer_common::{
    offsets::Offsets,
    process::Process,
    xt::{is_replace, level_of_pf, Pending, XtReplace, ARGS_LEN, TABLE_NAME_LEN},
    Event, DROP_PENDING, KIND_XT_REPLACE,
};

use crate::{count_drop, fill_args, fill_process, header, offsets, output, read_at, SEEN_NETNS};

/// A replace seen at function entry (kprobe), until the function returns (kretprobe).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SockPending {
    pub pending: Pending,
    /// Namespace inode of the socket, 0 when unknown.
    pub netns: u32,
    pub _pad: u32,
}

/// kprobe'd `nf_setsockopt` calls in flight that are table replaces, by pid_tgid.
#[map]
static PENDING_XT_SOCK: HashMap<u64, SockPending> = HashMap::with_max_entries(4096, 0);

/// Where the record is built (one slot per CPU): the stack of a program and its calls is 512
/// bytes, and the record with the writer's attribution takes half of that.
#[map]
static XT_SCRATCH: PerCpuArray<Event<XtReplace>> = PerCpuArray::with_max_entries(1, 0);

/// The arguments of `nf_setsockopt` that matter, as either backend reads them.
pub struct SetsockoptArgs {
    pub sk: u64,
    pub pf: u32,
    pub optname: u32,
    /// `sockptr_t.user` / `.kernel` (a union).
    pub optval: u64,
    /// `sockptr_t.is_kernel`.
    pub is_kernel: bool,
}

/// The namespace inode of a socket's `struct net`, or 0.
fn sock_netns(off: &Offsets, sk: u64) -> u32 {
    let net: u64 = read_at(sk, off.sock_net).unwrap_or(0);
    read_at(net, off.net_ns_inum).unwrap_or(0)
}

/// The start of the replace struct: the table name, entry count and size.
fn read_head(args: &SetsockoptArgs) -> Option<Pending> {
    let level = level_of_pf(args.pf)?;
    if !is_replace(level, args.optname) {
        return None;
    }
    // ipt_replace, ip6t_replace, arpt_replace and ebt_replace all start with char name[32],
    // then valid_hooks, the entry count and the size (each u32).
    let ptr = args.optval as *const [u32; 11];
    // SAFETY: both helpers check the address; a bad one returns an error.
    let head = if args.is_kernel {
        unsafe { bpf_probe_read_kernel(ptr) }
    } else {
        unsafe { bpf_probe_read_user(ptr) }
    }
    .unwrap_or([0; 11]);
    let mut table = [0u8; TABLE_NAME_LEN];
    for (i, word) in head[..8].iter().enumerate() {
        table[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
    }
    Some(Pending {
        level,
        optname: args.optname,
        num_entries: head[9],
        size: head[10],
        table,
    })
}

pub fn report(pending: &Pending, sock_netns: u32, ret: i64, source: u32) {
    let Some(event) = XT_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: a per-CPU slot, only used by this program on this CPU while it runs.
    let event = unsafe { &mut *event };
    event.header = header(KIND_XT_REPLACE, core::mem::size_of::<Event<XtReplace>>());
    event.data = XtReplace {
        process: Process::zeroed(),
        ret,
        start_ns: 0,
        table: pending.table,
        level: pending.level,
        optname: pending.optname,
        num_entries: pending.num_entries,
        size: pending.size,
        source,
        _pad: 0,
        args_len: 0,
        _pad2: 0,
        args: [0; ARGS_LEN],
    };
    fill_process(&mut event.data.process);
    event.data.args_len = fill_args(&mut event.data.args);
    // The table lives in the socket's namespace, which is the writer's own except when a
    // socket opened in one namespace is used from another.
    if sock_netns != 0 {
        event.data.process.netns = sock_netns;
    }
    if event.data.process.netns != 0 {
        let _ = SEEN_NETNS.insert(event.data.process.netns, 1, 0);
    }
    output(event);
}

/// Entry of a kprobe'd call: remember a replace until the call returns.
pub fn remember(args: &SetsockoptArgs) {
    let Some(pending) = read_head(args) else {
        return;
    };
    let value = SockPending {
        pending,
        netns: sock_netns(offsets(), args.sk),
        _pad: 0,
    };
    if PENDING_XT_SOCK
        .insert(bpf_get_current_pid_tgid(), value, 0)
        .is_err()
    {
        count_drop(DROP_PENDING);
    }
}

/// Return of a kprobe'd call: report the replace remembered at entry, if any.
pub fn finish(ret: i64, source: u32) {
    let key = bpf_get_current_pid_tgid();
    // SAFETY: the value is copied out before the entry is removed.
    let Some(p) = (unsafe { PENDING_XT_SOCK.get(key) }).copied() else {
        return;
    };
    let _ = PENDING_XT_SOCK.remove(key);
    report(&p.pending, p.netns, ret, source);
}

/// One call seen whole (fexit: arguments and result at once).
pub fn report_call(args: &SetsockoptArgs, ret: i64, source: u32) {
    if let Some(pending) = read_head(args) {
        report(&pending, sock_netns(offsets(), args.sk), ret, source);
    }
}
