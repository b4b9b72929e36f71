//! observer's eBPF programs.
//!
//! The tracepoint backend: syscall tracepoints exist on every kernel with tracepoints (including
//! kernels without kprobes, and those whose policy refuses fentry), so this is the path that works
//! everywhere BPF does.
//!
//! - `sys_enter/exit_setsockopt`: x_tables table replaces (`IPT_SO_SET_REPLACE` for IPv4 and IPv6,
//!   `ARPT_SO_SET_REPLACE`, `EBT_SO_SET_ENTRIES`), reported at exit with the result and the
//!   writer's attribution, captured while the writer still exists.
//! - `sys_exit_{unshare,setns,clone,clone3}`: a task in a network namespace not reported before,
//!   so userspace can subscribe to the namespace at once.
//! - `sys_enter/exit_umount`: a successful unmount, so userspace notices `ip netns del`.
//! - `sys_enter/exit_{sendmsg,sendto}` (module `netlink`): nftables batches and ipset commands on
//!   a `NETLINK_NETFILTER` socket, with their writer.
//!
//! On kernels with kprobes or fentry none of these syscall tracepoints is used: the x_tables hook
//! is on `nf_setsockopt` (modules `kprobe`, `fentry`), and the nfnetlink and namespace hooks on
//! kernel functions that run only for that work (module `kfunc`).
//!
//! Kernel struct offsets come from userspace (see `observer_common::offsets`); with none, the
//! parent chain and the namespace are left empty rather than guessed.
#![no_std]
#![no_main]

mod fentry;
mod kfunc;
mod kprobe;
mod xt_hook;

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_current_task, bpf_get_current_uid_gid, bpf_ktime_get_boot_ns, bpf_ktime_get_ns,
        bpf_probe_read_kernel, bpf_probe_read_user, bpf_probe_read_user_buf,
        bpf_probe_read_user_str_bytes,
    },
    macros::{map, tracepoint},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::TracePointContext,
};
use observer_common::{
    hook::HOOK_TRACEPOINT,
    ns::{NetnsSeen, PendingUmount, Umount, UMOUNT_PATH_LEN, VIA_CLONE, VIA_SETNS, VIA_UNSHARE},
    offsets::Offsets,
    process::{Process, ANCESTORS, COMM_LEN, WALK_DISPATCHER, WALK_PAST_LEN},
    xt::{is_replace, Pending, ARGS_LEN, TABLE_NAME_LEN},
    Event, Header, DROP_COUNTERS, DROP_MAP, DROP_PENDING, DROP_RINGBUF, KIND_NETNS_SEEN,
    KIND_UMOUNT, WAKE_LINGER_NS,
};

mod netlink;
mod nl_ack;

/// Filled in by userspace from the running kernel's BTF before load.
#[no_mangle]
static OFFSETS: Offsets = Offsets::unset();

/// Comms the ancestry walk goes on past (see `WALK_PAST_LEN`); filled by userspace.
#[map]
static WALK_PAST: HashMap<[u8; COMM_LEN], u8> = HashMap::with_max_entries(WALK_PAST_LEN, 0);

/// Every record for userspace. Userspace sets the size (`--ringbuf-size`).
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// The largest replace struct copied into the ring buffer for userspace (`XtBlob` records),
/// in bytes; 0 copies none. Set by userspace before load from the ring buffer's size.
#[no_mangle]
static XT_BLOB_MAX: u32 = 0;

/// setsockopt calls in flight that are table replaces, by pid_tgid.
#[map]
static PENDING_XT: HashMap<u64, Pending> = HashMap::with_max_entries(4096, 0);

/// umount2 calls in flight, by pid_tgid.
#[map]
static PENDING_UMOUNT: HashMap<u64, PendingUmount> = HashMap::with_max_entries(1024, 0);

/// Where umount_exit builds its record (one slot per CPU).
#[map]
static UMOUNT_SCRATCH: PerCpuArray<Event<Umount>> = PerCpuArray::with_max_entries(1, 0);

/// Network namespaces already reported (by inode). Userspace removes a namespace that goes away.
#[map]
static SEEN_NETNS: LruHashMap<u32, u8> = LruHashMap::with_max_entries(65536, 0);

/// Per-CPU counters of what could not be reported (indexed by `DROP_*`).
#[map]
static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(DROP_COUNTERS, 0);

// Syscall tracepoint layout (include/trace/events/syscalls.h, `format` files): 8 bytes of common
// fields, the syscall number, then each argument as 8 bytes from offset 16; `ret` at 16 on exit.
const ARG0: usize = 16;
const ARG1: usize = 24;
const ARG2: usize = 32;
const ARG3: usize = 40;
const ARG4: usize = 48;
const ARG5: usize = 56;
const RET: usize = 16;

fn count_drop(index: u32) {
    if let Some(counter) = DROPS.get_ptr_mut(index) {
        // SAFETY: a per-CPU slot, only this CPU writes it while this program runs.
        unsafe { *counter += 1 };
    }
}

fn offsets() -> &'static Offsets {
    opaque(&OFFSETS)
}

/// A global that userspace writes before load, by reference: its address goes through a
/// volatile read, so the compiler neither folds the initial value into the code nor copies the
/// whole struct onto the 512-byte stack (each field is loaded where it is used).
fn opaque<T>(global: &'static T) -> &'static T {
    let p: *const T = global;
    // SAFETY: `p` is a local, read back as the same valid pointer to a `'static` global.
    unsafe { &*core::ptr::read_volatile(&p) }
}

/// Read a kernel value at `base + off`, or `None` when the offset is unknown or the read fails.
fn read_at<T>(base: u64, off: u32) -> Option<T> {
    if base == 0 || off == Offsets::MISSING {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one returns an error.
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T) }.ok()
}

/// The current task's network namespace inode, or 0 when the offsets are unknown.
fn current_netns(off: &Offsets) -> u32 {
    // SAFETY: the helper has no preconditions; the pointer is only used through probe reads.
    let task = unsafe { bpf_get_current_task() };
    let nsproxy: u64 = read_at(task, off.task_nsproxy).unwrap_or(0);
    let net: u64 = read_at(nsproxy, off.nsproxy_net_ns).unwrap_or(0);
    read_at(net, off.net_ns_inum).unwrap_or(0)
}

/// Fill in who is running: the task, its ancestors, its namespace and cgroup.
#[inline(always)]
fn fill_process(p: &mut Process) {
    let off = offsets();
    let pid_tgid = bpf_get_current_pid_tgid();
    p.tgid = (pid_tgid >> 32) as u32;
    p.tid = pid_tgid as u32;
    p.uid = bpf_get_current_uid_gid() as u32;
    // SAFETY: no preconditions.
    p.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    p.comm = bpf_get_current_comm().unwrap_or([0; COMM_LEN]);
    if off.valid == 0 {
        return;
    }
    p.netns = current_netns(off);
    // SAFETY: as above.
    let mut task = unsafe { bpf_get_current_task() };
    // The previous ancestor was the first other one (the actor, or a boundary): this one, its
    // parent, is read too, and the walk goes on only past a dispatcher (`run-parts`), whose
    // child is a plugin and not the actor.
    let mut past_actor = false;
    for i in 0..ANCESTORS {
        let parent: u64 = read_at(task, off.task_real_parent).unwrap_or(0);
        if parent == 0 || parent == task {
            p.top = 1;
            break;
        }
        p.ancestor_tgid[i] = read_at(parent, off.task_tgid).unwrap_or(0);
        // The process's name (its leader's comm), not the forking thread's.
        let leader: u64 = if off.task_group_leader == Offsets::MISSING {
            parent
        } else {
            read_at(parent, off.task_group_leader).unwrap_or(parent)
        };
        p.ancestor_comm[i] = read_at(leader, off.task_comm).unwrap_or([0; COMM_LEN]);
        // Past a shell or a wrapper only: the first other ancestor is the actor, and its
        // parent is read to see whether it is a dispatcher.
        // SAFETY: a plain lookup of a copied value.
        let kind = unsafe { WALK_PAST.get(p.ancestor_comm[i]) }.copied();
        if past_actor {
            if kind != Some(WALK_DISPATCHER) {
                break;
            }
            past_actor = false;
        } else if kind.is_none() {
            past_actor = true;
        }
        task = parent;
    }
}

/// Copy the start of the current task's command line (its `argv` strings, NUL-separated) into
/// `out`; returns the whole command line's length, 0 when it cannot be read.
fn fill_args(out: &mut [u8; ARGS_LEN]) -> u32 {
    let off = offsets();
    if off.task_mm == Offsets::MISSING || off.mm_arg_start == Offsets::MISSING {
        return 0;
    }
    // SAFETY: no preconditions; the pointer is only used through probe reads.
    let task = unsafe { bpf_get_current_task() };
    let mm: u64 = read_at(task, off.task_mm).unwrap_or(0);
    let start: u64 = read_at(mm, off.mm_arg_start).unwrap_or(0);
    let end: u64 = read_at(mm, off.mm_arg_end).unwrap_or(0);
    if mm == 0 || start == 0 || end <= start {
        return 0;
    }
    // The strings are followed by the environment's, so a fixed-size read stays in the
    // mapping; when it does not (a tiny stack top), the first half is tried.
    // SAFETY: a user address read through the checked helper into our own buffer.
    if unsafe { bpf_probe_read_user_buf(start as *const u8, &mut out[..]) }.is_err() {
        // SAFETY: as above.
        if unsafe { bpf_probe_read_user_buf(start as *const u8, &mut out[..ARGS_LEN / 2]) }.is_err()
        {
            return 0;
        }
    }
    (end - start) as u32
}

/// `n` (already at most `max`) bounded in a way the verifier of older kernels (6.1) can follow:
/// the volatile read hides `n`'s range from the compiler, which would otherwise drop the mask
/// and the clamp as redundant and leave that verifier with an unbounded size. `max` is a power
/// of two.
#[inline(always)]
fn verifier_bound(n: u32, max: u32) -> u32 {
    // SAFETY: a read of a local.
    let n = unsafe { core::ptr::read_volatile(&n) };
    let n = n & (max * 2 - 1);
    if n > max {
        max
    } else {
        n
    }
}

fn header(kind: u32, len: usize) -> Header {
    Header {
        kind,
        len: len as u32,
        // SAFETY: no preconditions.
        ktime_ns: unsafe { bpf_ktime_get_boot_ns() },
    }
}

/// When a record last woke the ring buffer's reader (`bpf_ktime_get_ns`).
#[map]
static LAST_WAKE: Array<u64> = Array::with_max_entries(1, 0);

/// `BPF_RB_NO_WAKEUP`: commit a record without waking the reader.
const RB_NO_WAKEUP: u64 = 1;
/// `BPF_RB_FORCE_WAKEUP`: wake the reader whatever it has left unread. Without it the kernel
/// wakes the reader only when it has read everything before the record, and records left
/// unannounced (the pieces of a table) would keep the next one from waking it.
const RB_FORCE_WAKEUP: u64 = 2;

/// The commit flags of a record: a wakeup of the reader, unless one was given within the
/// last [`WAKE_LINGER_NS`] (the reader then reads the ring again by itself before that time is
/// up). Two CPUs may both wake it at once: a wakeup too many, never one too few.
fn wake_flags() -> u64 {
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(last) = LAST_WAKE.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: the map's only slot; a torn race between CPUs costs one extra wakeup.
    unsafe {
        if now >= *last && now - *last < WAKE_LINGER_NS {
            return RB_NO_WAKEUP;
        }
        *last = now;
    }
    RB_FORCE_WAKEUP
}

/// The commit flags of a record whose line waits for nothing else (a table replace): the
/// reader is woken at once, unless a wakeup was given within the last
/// [`CHANGE_WAKE_GAP_NS`] (a burst: the reader is reading, and reads again within its linger).
fn change_wake_flags() -> u64 {
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(last) = LAST_WAKE.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: the map's only slot, as in `wake_flags`.
    unsafe {
        if now >= *last && now - *last < CHANGE_WAKE_GAP_NS {
            return RB_NO_WAKEUP;
        }
        *last = now;
    }
    RB_FORCE_WAKEUP
}

/// How close after a wakeup a change's record is taken to be part of the same burst.
const CHANGE_WAKE_GAP_NS: u64 = 250_000;

fn output<T: 'static>(event: &Event<T>) {
    if EVENTS.output::<Event<T>>(event, wake_flags()).is_err() {
        count_drop(DROP_RINGBUF);
    }
}

/// [`output`] for a record whose line waits for nothing else: the reader reads it at once,
/// unless it came in a burst ([`change_wake_flags`]).
pub(crate) fn output_change<T: 'static>(event: &Event<T>) {
    if EVENTS
        .output::<Event<T>>(event, change_wake_flags())
        .is_err()
    {
        count_drop(DROP_RINGBUF);
    }
}

// match-proto: syscall tracepoint `syscalls:sys_enter_setsockopt`
//   (int fd, int level, int optname, char __user *optval, int optlen), net/socket.c
#[tracepoint]
pub fn setsockopt_enter(ctx: TracePointContext) -> u32 {
    let _ = try_setsockopt_enter(&ctx);
    0
}

fn try_setsockopt_enter(ctx: &TracePointContext) -> Result<(), i32> {
    // SAFETY: offsets are those of the tracepoint's format.
    let level: u64 = unsafe { ctx.read_at(ARG1)? };
    let optname: u64 = unsafe { ctx.read_at(ARG2)? };
    let (level, optname) = (level as u32, optname as u32);
    if !is_replace(level, optname) {
        return Ok(());
    }
    // SAFETY: as above.
    let optval: u64 = unsafe { ctx.read_at(ARG3)? };
    // The replace structs (ipt_replace, ip6t_replace, arpt_replace, ebt_replace) all start with
    // char name[32]; then valid_hooks, the entry count and the size (each u32).
    let head: [u32; 11] =
        // SAFETY: a user pointer read through the checked helper.
        unsafe { bpf_probe_read_user(optval as *const [u32; 11]) }.unwrap_or([0; 11]);
    let mut table = [0u8; TABLE_NAME_LEN];
    for (i, word) in head[..8].iter().enumerate() {
        table[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
    }
    let pending = Pending {
        level,
        optname,
        num_entries: head[9],
        size: head[10],
        table,
        optval,
    };
    if PENDING_XT
        .insert(bpf_get_current_pid_tgid(), pending, 0)
        .is_err()
    {
        count_drop(DROP_PENDING);
    }
    Ok(())
}

// match-proto: syscall tracepoint `syscalls:sys_exit_setsockopt` (long ret), net/socket.c
#[tracepoint]
pub fn setsockopt_exit(ctx: TracePointContext) -> u32 {
    let _ = try_setsockopt_exit(&ctx);
    0
}

fn try_setsockopt_exit(ctx: &TracePointContext) -> Result<(), i32> {
    let key = bpf_get_current_pid_tgid();
    // SAFETY: the value is copied out before the entry is removed.
    let Some(pending) = (unsafe { PENDING_XT.get(key) }).copied() else {
        return Ok(());
    };
    let _ = PENDING_XT.remove(key);
    // SAFETY: offset of `ret` in the exit tracepoint's format.
    let ret: i64 = unsafe { ctx.read_at(RET)? };
    // Built in the per-CPU slot the kprobe and fentry hooks use: the record (with the command
    // line) is too large for the BPF stack. The writer's namespace is the record's own.
    xt_hook::report(&pending, 0, ret, HOOK_TRACEPOINT);
    Ok(())
}

/// Report the current task's namespace if it has not been reported yet.
fn netns_seen(via: u32) {
    let off = offsets();
    if off.valid == 0 {
        return;
    }
    netns_report(current_netns(off), via);
}

/// Report namespace `netns` (with the current task, which is in it or made it) if it has not
/// been reported yet.
fn netns_report(netns: u32, via: u32) {
    if offsets().valid == 0 {
        return;
    }
    // SAFETY: a plain lookup; the value is not dereferenced.
    if netns == 0 || unsafe { SEEN_NETNS.get(netns) }.is_some() {
        return;
    }
    if SEEN_NETNS.insert(netns, 1, 0).is_err() {
        count_drop(DROP_MAP);
    }
    let mut event = Event {
        header: header(KIND_NETNS_SEEN, core::mem::size_of::<Event<NetnsSeen>>()),
        data: NetnsSeen {
            process: Process::zeroed(),
            via,
            _pad: 0,
        },
    };
    fill_process(&mut event.data.process);
    // The creator of a namespace is not in it yet.
    event.data.process.netns = netns;
    output(&event);
}

fn syscall_ok(ctx: &TracePointContext) -> bool {
    // SAFETY: offset of `ret` in the exit tracepoint's format.
    matches!(unsafe { ctx.read_at::<i64>(RET) }, Ok(0))
}

// match-proto: `syscalls:sys_exit_unshare` (long ret), kernel/fork.c
#[tracepoint]
pub fn unshare_exit(ctx: TracePointContext) -> u32 {
    if syscall_ok(&ctx) {
        netns_seen(VIA_UNSHARE);
    }
    0
}

// match-proto: `syscalls:sys_exit_setns` (long ret), kernel/nsproxy.c
#[tracepoint]
pub fn setns_exit(ctx: TracePointContext) -> u32 {
    if syscall_ok(&ctx) {
        netns_seen(VIA_SETNS);
    }
    0
}

// match-proto: `syscalls:sys_exit_clone` and `sys_exit_clone3` (long ret), kernel/fork.c.
// Returns 0 in the child, which is where a CLONE_NEWNET namespace is visible.
#[tracepoint]
pub fn clone_exit(ctx: TracePointContext) -> u32 {
    if syscall_ok(&ctx) {
        netns_seen(VIA_CLONE);
    }
    0
}

// match-proto: `syscalls:sys_enter_umount` (char __user *name, int flags), fs/namespace.c
#[tracepoint]
pub fn umount_enter(ctx: TracePointContext) -> u32 {
    let _ = try_umount_enter(&ctx);
    0
}

fn try_umount_enter(ctx: &TracePointContext) -> Result<(), i32> {
    // SAFETY: offset of the first argument in the tracepoint's format.
    let name: u64 = unsafe { ctx.read_at(ARG0)? };
    let mut pending = PendingUmount {
        path: [0; UMOUNT_PATH_LEN],
    };
    // SAFETY: a user pointer read through the checked helper.
    unsafe { bpf_probe_read_user_str_bytes(name as *const u8, &mut pending.path)? };
    // Only namespace mounts matter (`/run/netns/NAME`, docker's `/var/run/docker/netns/ID`):
    // other unmounts end here, with no record for userspace to wake up for. A namespace bind
    // mount elsewhere is let go by userspace's periodic check instead.
    if !mentions_netns(&pending.path) {
        return Ok(());
    }
    if PENDING_UMOUNT
        .insert(bpf_get_current_pid_tgid(), pending, 0)
        .is_err()
    {
        count_drop(DROP_PENDING);
    }
    Ok(())
}

/// True when `path` (NUL-terminated) contains `netns`.
fn mentions_netns(path: &[u8; UMOUNT_PATH_LEN]) -> bool {
    const WORD: &[u8; 5] = b"netns";
    for i in 0..UMOUNT_PATH_LEN - WORD.len() {
        if path[i] == 0 {
            return false;
        }
        if path[i] == WORD[0]
            && path[i + 1] == WORD[1]
            && path[i + 2] == WORD[2]
            && path[i + 3] == WORD[3]
            && path[i + 4] == WORD[4]
        {
            return true;
        }
    }
    false
}

// match-proto: `syscalls:sys_exit_umount` (long ret), fs/namespace.c
#[tracepoint]
pub fn umount_exit(ctx: TracePointContext) -> u32 {
    let key = bpf_get_current_pid_tgid();
    // The record is built in a per-CPU slot, not on the stack: with the path and the writer it
    // is too big for the 512-byte stack of a program and its calls (the 6.1 verifier refuses it).
    let (Some(pending), Some(event)) = (PENDING_UMOUNT.get_ptr(key), UMOUNT_SCRATCH.get_ptr_mut(0))
    else {
        return 0;
    };
    // SAFETY: both point into map values; the path is copied before the entry is removed, and
    // the per-CPU slot is only used by this program on this CPU while it runs.
    let event = unsafe {
        (*event).data.path = (*pending).path;
        &mut *event
    };
    let _ = PENDING_UMOUNT.remove(key);
    if !syscall_ok(&ctx) {
        return 0;
    }
    event.header = header(KIND_UMOUNT, core::mem::size_of::<Event<Umount>>());
    event.data.process = Process::zeroed();
    fill_process(&mut event.data.process);
    output(event);
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
