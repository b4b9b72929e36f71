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
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel, bpf_probe_read_user, generated},
    macros::map,
    maps::{HashMap, PerCpuArray},
};
use observer_common::{
    offsets::Offsets,
    process::Process,
    xt::{
        is_replace, level_of_pf, replace_head_len, Pending, XtBlob, XtReplace, ARGS_LEN,
        BLOB_CHUNK, BLOB_LOST, BLOB_MAX_BYTES, BLOB_MAX_CHUNKS, BLOB_NONE, BLOB_RING_SHARE_SHIFT,
        BLOB_WHOLE, TABLE_NAME_LEN,
    },
    Event, DROP_PENDING, DROP_READ, DROP_RINGBUF, KIND_XT_BLOB, KIND_XT_REPLACE,
};

use crate::{
    count_drop, fill_args, fill_process, header, offsets, opaque, output_change, read_at,
    verifier_bound, EVENTS, RB_NO_WAKEUP, SEEN_NETNS, XT_BLOB_MAX,
};

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
        // A kernel caller's struct is not copied (userspace reads the table back instead).
        optval: if args.is_kernel { 0 } else { args.optval },
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
        blob_cookie: 0,
        blob_len: 0,
        blob_state: BLOB_NONE,
    };
    fill_process(&mut event.data.process);
    event.data.args_len = fill_args(&mut event.data.args);
    if ret == 0 {
        // The blob goes first: userspace has it whole when the replace record arrives.
        let cookie = event.header.ktime_ns;
        let (len, state) = copy_blob(pending, cookie);
        event.data.blob_cookie = cookie;
        event.data.blob_len = len;
        event.data.blob_state = state;
    }
    // The table lives in the socket's namespace, which is the writer's own except when a
    // socket opened in one namespace is used from another.
    if sock_netns != 0 {
        event.data.process.netns = sock_netns;
    }
    if event.data.process.netns != 0 {
        let _ = SEEN_NETNS.insert(event.data.process.netns, 1, 0);
    }
    output_change(event);
}

/// Copy the replace struct the writer handed to the kernel into `XtBlob` records, in order,
/// when it is at most [`XT_BLOB_MAX`] bytes. Returns its size (0 when not copied) and a
/// `BLOB_*` state. Called once the kernel accepted the table: the writer's memory still holds
/// it (the syscall has not returned).
fn copy_blob(pending: &Pending, cookie: u64) -> (u32, u32) {
    let Some(head) = replace_head_len(pending.level, pending.optname) else {
        return (0, BLOB_NONE);
    };
    let max = *opaque(&XT_BLOB_MAX);
    let Some(total) = head.checked_add(pending.size) else {
        return (0, BLOB_NONE);
    };
    if pending.optval == 0 || total > max || total > BLOB_MAX_BYTES {
        return (0, BLOB_NONE);
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    // Every round ends at the same place, with nothing but `whole` to tell rounds apart: the
    // verifier follows the loop once per round and the way out once, on every kernel (older
    // verifiers otherwise walk the rest of the program from each round's exit).
    // Bounded where the verifier sees it (the compiler would drop a bound it can prove).
    let pieces = verifier_bound(total.div_ceil(BLOB_CHUNK as u32), BLOB_MAX_CHUNKS);
    let mut whole = true;
    for i in 0..BLOB_MAX_CHUNKS {
        // Read afresh each round: the compiler would otherwise turn this test into an equality
        // on the offset, past which the verifier goes on walking.
        // SAFETY: a read of a local.
        if i >= unsafe { core::ptr::read_volatile(&pieces) } {
            break;
        }
        if !copy_piece(
            pending.optval,
            cookie,
            pid_tgid,
            i * BLOB_CHUNK as u32,
            total,
        ) {
            whole = false;
            break;
        }
    }
    (total, if whole { BLOB_WHOLE } else { BLOB_LOST })
}

/// Write the piece of the writer's struct at `optval` that starts at `off` (at most
/// [`BLOB_CHUNK`] bytes, fewer at its end `total`) into one `XtBlob` record; false when the
/// ring buffer is fuller than its share for tables (userspace has not kept up: the table is
/// read back), is full, or the read fails.
#[inline(never)]
fn copy_piece(optval: u64, cookie: u64, pid_tgid: u64, off: u32, total: u32) -> bool {
    // BPF_RB_AVAIL_DATA (0): bytes written and not yet consumed; BPF_RB_RING_SIZE (1).
    let (waiting, size) = (EVENTS.query(0), EVENTS.query(1));
    if waiting + BLOB_CHUNK as u64 > size >> BLOB_RING_SHARE_SHIFT {
        return false;
    }
    let left = total.saturating_sub(off);
    let len = verifier_bound(
        if left > BLOB_CHUNK as u32 {
            BLOB_CHUNK as u32
        } else {
            left
        },
        BLOB_CHUNK as u32,
    );
    let Some(mut entry) = EVENTS.reserve::<Event<XtBlob>>(0) else {
        count_drop(DROP_RINGBUF);
        return false;
    };
    let rec = entry.as_mut_ptr();
    // SAFETY: `rec` points at the reserved record, which this program owns until it is
    // submitted or discarded; the fields are written in place (the record is 4 KiB, too large
    // for the stack), and the read is bounded by the piece's size.
    let read = unsafe {
        (*rec).header = header(KIND_XT_BLOB, core::mem::size_of::<Event<XtBlob>>());
        (*rec).data.head.cookie = cookie;
        (*rec).data.head.tgid = (pid_tgid >> 32) as u32;
        (*rec).data.head.tid = pid_tgid as u32;
        (*rec).data.head.offset = off;
        (*rec).data.head.len = len;
        (*rec).data.head.total = total;
        (*rec).data.head._pad = 0;
        generated::bpf_probe_read_user(
            (&raw mut (*rec).data.data).cast(),
            len,
            (optval + u64::from(off)) as *const core::ffi::c_void,
        )
    };
    if read != 0 {
        entry.discard(0);
        count_drop(DROP_READ);
        return false;
    }
    // The replace record that follows the pieces wakes the reader (or not, as every record).
    entry.submit(RB_NO_WAKEUP);
    true
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
