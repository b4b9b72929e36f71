//! nfnetlink writers: nftables batches and ipset commands, on the `sendmsg`/`sendto` tracepoints.
//!
//! The nftables monitor names a writer only by thread id and comm, and a short-lived
//! `iptables-nft-restore` has exited by the time userspace looks. Here the writer is captured
//! inside the syscall that carries the batch: the tracepoint checks the first netlink message
//! (cheap, rejects almost every sendmsg on the machine), then that the descriptor is a
//! `NETLINK_NETFILTER` socket (task->files->fdt->fd[fd]->private_data->sk), and reports the
//! writer with the start of the request.
//!
//! - nftables batches are reported at syscall entry: the kernel applies the batch inside the
//!   syscall and multicasts its notifications, so an entry record is normally in userspace before
//!   the batch's NEWGEN.
//! - ipset commands are reported at syscall exit, once applied, so that userspace reads the sets
//!   after the change.
//!
//! - replies: nftables tells only the writer that it refused a batch, in the error messages it
//!   sends back on the writer's socket. A task that has just sent a ruleset-changing request is
//!   remembered; its next `recvmsg` on that socket is read at exit, and when it starts with an
//!   error message (`NLMSG_ERROR`) the start of what it received is reported, for userspace to
//!   decode (which message failed, on which table and chain, with which errno).
//!
//! Offsets come from userspace in `NL_OFFSETS`; userspace attaches these programs only when every
//! one of them is known.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task, generated as gen},
    macros::{map, tracepoint},
    maps::{HashMap, LruHashMap, PerCpuArray},
    programs::TracePointContext,
};
use observer_common::{
    nfnl::{
        ipset_cmd_writes, NfnlAck, NfnlSend, NlOffsets, AF_NETLINK, NETLINK_NETFILTER,
        NFNL_ACK_LEN, NFNL_HEAD_LEN, NFNL_MSG_BATCH_BEGIN, NFNL_SUBSYS_IPSET, NFNL_SUBSYS_NFTABLES,
        PHASE_ENTER, PHASE_EXIT,
    },
    process::Process,
    Event, DROP_MAP, DROP_PENDING, DROP_READ, KIND_NFNL_ACK, KIND_NFNL_SEND,
};

use crate::{
    count_drop, fill_process, header, offsets, output, read_at, verifier_bound, ARG0, ARG1, ARG2,
    ARG4, ARG5, RET,
};

/// Filled in by userspace from the running kernel's BTF before load.
#[no_mangle]
static NL_OFFSETS: NlOffsets = NlOffsets::unset();

/// ipset commands in flight, by pid_tgid, reported when the syscall returns.
#[map]
static PENDING_NFNL: HashMap<u64, Event<NfnlSend>> = HashMap::with_max_entries(1024, 0);

/// Room to build a record (too large for the 512-byte eBPF stack).
#[map]
static NFNL_SCRATCH: PerCpuArray<Event<NfnlSend>> = PerCpuArray::with_max_entries(1, 0);

/// Tasks that sent a ruleset-changing request (by pid_tgid), until their replies are read.
#[map]
static AWAIT_ACK: LruHashMap<u64, u32> = LruHashMap::with_max_entries(4096, 0);

/// A `recvmsg` of such a task on its netfilter socket, until it returns.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PendingRecv {
    buf: u64,
    len: u64,
    netns: u32,
    _pad: u32,
}

#[map]
static PENDING_RECV: HashMap<u64, PendingRecv> = HashMap::with_max_entries(1024, 0);

/// Room to build a reply record.
#[map]
static ACK_SCRATCH: PerCpuArray<Event<NfnlAck>> = PerCpuArray::with_max_entries(1, 0);

/// `NLMSG_ERROR`: an error (or an acknowledgement, with error 0).
const NLMSG_ERROR: u16 = 2;

const S_IFMT: u16 = 0o170000;
const S_IFSOCK: u16 = 0o140000;

pub(crate) fn nl_offsets() -> &'static NlOffsets {
    crate::opaque(&NL_OFFSETS)
}

/// The subsystem of a ruleset-changing request, from its first netlink message, or `None`.
pub(crate) fn subsystem(first: &[u8; 20]) -> Option<u16> {
    // struct nlmsghdr { u32 len; u16 type; u16 flags; u32 seq; u32 pid } then
    // struct nfgenmsg { u8 family; u8 version; __be16 res_id }.
    let ty = u16::from_ne_bytes([first[4], first[5]]);
    if ty == NFNL_MSG_BATCH_BEGIN {
        let res_id = u16::from_be_bytes([first[18], first[19]]);
        return (res_id == NFNL_SUBSYS_NFTABLES).then_some(NFNL_SUBSYS_NFTABLES);
    }
    if ty >> 8 == NFNL_SUBSYS_IPSET && ipset_cmd_writes(ty as u8) {
        return Some(NFNL_SUBSYS_IPSET);
    }
    None
}

/// The network namespace inode of `fd` when it is a `NETLINK_NETFILTER` socket of the current
/// task (0 when the namespace cannot be read), or `None` when it is something else.
fn netfilter_socket(fd: i64, off: &NlOffsets) -> Option<u32> {
    if fd < 0 {
        return None;
    }
    // SAFETY: no preconditions; the pointer is only used through probe reads.
    let task = unsafe { bpf_get_current_task() };
    let files: u64 = read_at(task, off.task_files)?;
    let fdt: u64 = read_at(files, off.files_fdt)?;
    let max: u32 = read_at(fdt, off.fdt_max_fds)?;
    if fd as u64 >= max as u64 {
        return None;
    }
    let fds: u64 = read_at(fdt, off.fdt_fd)?;
    let file: u64 = read_at(fds, (fd as u32).wrapping_mul(8))?;
    let inode: u64 = read_at(file, off.file_inode)?;
    let mode: u16 = read_at(inode, off.inode_mode)?;
    if mode & S_IFMT != S_IFSOCK {
        return None;
    }
    let sock: u64 = read_at(file, off.file_private)?;
    let sk: u64 = read_at(sock, off.socket_sk)?;
    let family: u16 = read_at(sk, off.sk_family)?;
    let protocol: u16 = read_at(sk, off.sk_protocol)?;
    if family != AF_NETLINK || protocol != NETLINK_NETFILTER {
        return None;
    }
    let net: u64 = read_at(sk, off.sk_net).unwrap_or(0);
    Some(read_at(net, offsets().net_ns_inum).unwrap_or(0))
}

/// Look at one request (`buf`, `len` bytes of user memory) sent on `fd`.
fn on_send(fd: i64, buf: u64, len: u64) -> Result<(), i32> {
    let off = nl_offsets();
    if off.valid == 0 || buf == 0 || len < 20 {
        return Ok(());
    }
    // SAFETY: a user pointer read through the checked helper.
    let first: [u8; 20] =
        unsafe { aya_ebpf::helpers::bpf_probe_read_user(buf as *const [u8; 20]) }?;
    let Some(subsys) = subsystem(&first) else {
        return Ok(());
    };
    let Some(sock_netns) = netfilter_socket(fd, off) else {
        return Ok(());
    };
    // Its replies are worth reading: they say whether the kernel took the request. A writer
    // that sends batch after batch on one socket is marked once: an update of an LRU map's entry
    // takes a fresh node from the map's free lists each time, an order dearer than a lookup.
    let key = bpf_get_current_pid_tgid();
    // SAFETY: a plain lookup; the value is copied.
    if unsafe { AWAIT_ACK.get(key) }.copied() != Some(sock_netns)
        && AWAIT_ACK.insert(key, sock_netns, 0).is_err()
    {
        count_drop(DROP_MAP);
    }
    report_request(subsys, sock_netns, len, buf, Memory::User);
    Ok(())
}

/// Where a request's bytes are: in the writer's memory (syscall tracepoints) or in a kernel
/// socket buffer (kprobe and fentry hooks).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Memory {
    User,
    Kernel,
}

/// Report a ruleset-changing request of subsystem `subsys` (`len` bytes at `src`) on a socket of
/// namespace `sock_netns`, with its writer: nftables batches now, ipset commands when the call
/// returns (kept in `PENDING_NFNL` until then).
pub(crate) fn report_request(subsys: u16, sock_netns: u32, len: u64, src: u64, memory: Memory) {
    let Some(ev) = NFNL_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    let captured = if len < NFNL_HEAD_LEN as u64 {
        len as u32
    } else {
        NFNL_HEAD_LEN as u32
    };
    // SAFETY: `ev` points at this CPU's scratch slot, used only while this program runs.
    unsafe {
        (*ev).header = header(KIND_NFNL_SEND, core::mem::size_of::<Event<NfnlSend>>());
        let d = &mut (*ev).data;
        d.process = Process::zeroed();
        d.ret = 0;
        d.sock_netns = sock_netns;
        d.subsys = subsys as u32;
        d.len = len as u32;
        d._pad = 0;
        let n = verifier_bound(captured, NFNL_HEAD_LEN as u32);
        let rc = match memory {
            Memory::User => {
                gen::bpf_probe_read_user(d.head.as_mut_ptr().cast(), n, src as *const _)
            }
            Memory::Kernel => {
                gen::bpf_probe_read_kernel(d.head.as_mut_ptr().cast(), n, src as *const _)
            }
        };
        d.captured = if rc == 0 {
            n
        } else {
            count_drop(DROP_READ);
            0
        };
        if subsys == NFNL_SUBSYS_NFTABLES {
            d.phase = PHASE_ENTER;
            fill_process(&mut d.process);
            output(&*ev);
        } else {
            d.phase = PHASE_EXIT;
            // By reference: the record is too large to copy onto the BPF stack.
            #[expect(
                clippy::needless_borrows_for_generic_args,
                reason = "a value would be copied onto the 512-byte BPF stack"
            )]
            let inserted = PENDING_NFNL.insert(&bpf_get_current_pid_tgid(), &*ev, 0);
            if inserted.is_err() {
                count_drop(DROP_PENDING);
            }
        }
    }
}

/// The request of the current task that waits for its call to return (ipset), if any: fill in
/// the call's result and the writer, and report it.
pub(crate) fn finish_request(ret: i64) {
    let key = bpf_get_current_pid_tgid();
    let Some(ev) = PENDING_NFNL.get_ptr_mut(key) else {
        return;
    };
    // SAFETY: `ev` is this task's own entry (keyed by its pid_tgid), written only by it.
    unsafe {
        (*ev).data.ret = ret;
        fill_process(&mut (*ev).data.process);
        output(&*ev);
    }
    let _ = PENDING_NFNL.remove(key);
}

// match-proto: syscall tracepoint `syscalls:sys_enter_sendmsg`
//   (int fd, struct user_msghdr __user *msg, unsigned int flags), net/socket.c
#[tracepoint]
pub fn sendmsg_enter(ctx: TracePointContext) -> u32 {
    let _ = try_sendmsg_enter(&ctx);
    0
}

fn try_sendmsg_enter(ctx: &TracePointContext) -> Result<(), i32> {
    // SAFETY: offsets of the tracepoint's format.
    let fd: i64 = unsafe { ctx.read_at(ARG0)? };
    let msg: u64 = unsafe { ctx.read_at(ARG1)? };
    if msg == 0 {
        return Ok(());
    }
    // struct user_msghdr: msg_name (8), msg_namelen (4 + 4 padding), msg_iov (8) at 16,
    // msg_iovlen (8) at 24. One read for the address and the first iovec's pointer.
    // SAFETY: a user pointer read through the checked helper.
    let head: [u64; 3] = unsafe { aya_ebpf::helpers::bpf_probe_read_user(msg as *const [u64; 3]) }?;
    if !maybe_netlink(fd, head[0], head[1] as u32) {
        return Ok(());
    }
    if head[2] == 0 {
        return Ok(());
    }
    // struct iovec { void __user *iov_base; size_t iov_len }: the first holds the batch head.
    // SAFETY: as above.
    let iov: [u64; 2] =
        unsafe { aya_ebpf::helpers::bpf_probe_read_user(head[2] as *const [u64; 2]) }?;
    on_send(fd, iov[0], iov[1])
}

/// The first check of every send on the machine, before the message is read: whether the
/// destination address (`name`, `namelen` bytes of user memory) can be a netlink one. A send
/// with an address of another family (UDP, a Unix socket) stops here; one without an address (a
/// connected socket) is checked in the kernel (the descriptor's socket family), which costs no
/// copy of user memory.
fn maybe_netlink(fd: i64, name: u64, namelen: u32) -> bool {
    if namelen == 0 || name == 0 {
        let off = nl_offsets();
        return off.valid != 0 && netfilter_socket(fd, off).is_some();
    }
    // netlink_sendmsg refuses anything shorter than a struct sockaddr_nl (12 bytes); every
    // address starts with its family.
    if namelen < 12 {
        return false;
    }
    // SAFETY: a user pointer read through the checked helper.
    let family = unsafe { aya_ebpf::helpers::bpf_probe_read_user(name as *const u16) };
    family == Ok(AF_NETLINK)
}

/// `(iov_base, iov_len)` of the first iovec of a `struct user_msghdr` in user memory, or `None`
/// when it has none.
fn first_iovec(msg: u64) -> Result<Option<[u64; 2]>, i32> {
    // SAFETY: a user pointer read through the checked helper (msg_iov is at 16).
    let iov_ptr: u64 = unsafe { aya_ebpf::helpers::bpf_probe_read_user((msg + 16) as *const u64) }?;
    if iov_ptr == 0 {
        return Ok(None);
    }
    // SAFETY: as above.
    let iov: [u64; 2] =
        unsafe { aya_ebpf::helpers::bpf_probe_read_user(iov_ptr as *const [u64; 2]) }?;
    Ok(Some(iov))
}

// match-proto: syscall tracepoint `syscalls:sys_enter_sendto`
//   (int fd, void __user *buff, size_t len, unsigned int flags, struct sockaddr __user *addr,
//   int addr_len), net/socket.c
#[tracepoint]
pub fn sendto_enter(ctx: TracePointContext) -> u32 {
    let _ = try_sendto_enter(&ctx);
    0
}

fn try_sendto_enter(ctx: &TracePointContext) -> Result<(), i32> {
    // SAFETY: offsets of the tracepoint's format.
    let fd: i64 = unsafe { ctx.read_at(ARG0)? };
    let addr: u64 = unsafe { ctx.read_at(ARG4)? };
    let addr_len: u64 = unsafe { ctx.read_at(ARG5)? };
    if !maybe_netlink(fd, addr, addr_len as u32) {
        return Ok(());
    }
    // SAFETY: as above.
    let buf: u64 = unsafe { ctx.read_at(ARG1)? };
    let len: u64 = unsafe { ctx.read_at(ARG2)? };
    on_send(fd, buf, len)
}

// match-proto: syscall tracepoints `syscalls:sys_exit_sendmsg` and `sys_exit_sendto` (long ret),
// net/socket.c
#[tracepoint]
pub fn send_exit(ctx: TracePointContext) -> u32 {
    // SAFETY: offset of `ret` in the exit tracepoint's format.
    finish_request(unsafe { ctx.read_at::<i64>(RET) }.unwrap_or(0));
    0
}

// match-proto: syscall tracepoint `syscalls:sys_enter_recvmsg`
//   (int fd, struct user_msghdr __user *msg, unsigned int flags), net/socket.c
#[tracepoint]
pub fn recvmsg_enter(ctx: TracePointContext) -> u32 {
    let _ = try_recvmsg_enter(&ctx);
    0
}

fn try_recvmsg_enter(ctx: &TracePointContext) -> Result<(), i32> {
    let key = bpf_get_current_pid_tgid();
    // Almost every recvmsg on the machine stops here: one lookup.
    // SAFETY: a plain lookup; the value is copied.
    if unsafe { AWAIT_ACK.get(key) }.is_none() {
        return Ok(());
    }
    let off = nl_offsets();
    if off.valid == 0 {
        return Ok(());
    }
    // SAFETY: offsets of the tracepoint's format.
    let fd: i64 = unsafe { ctx.read_at(ARG0)? };
    let msg: u64 = unsafe { ctx.read_at(ARG1)? };
    let Some(netns) = netfilter_socket(fd, off) else {
        return Ok(());
    };
    if msg == 0 {
        return Ok(());
    }
    let Some(iov) = first_iovec(msg)? else {
        return Ok(());
    };
    let pending = PendingRecv {
        buf: iov[0],
        len: iov[1],
        netns,
        _pad: 0,
    };
    if PENDING_RECV.insert(key, pending, 0).is_err() {
        count_drop(DROP_PENDING);
    }
    Ok(())
}

// match-proto: syscall tracepoint `syscalls:sys_exit_recvmsg` (long ret), net/socket.c
#[tracepoint]
pub fn recvmsg_exit(ctx: TracePointContext) -> u32 {
    let key = bpf_get_current_pid_tgid();
    // SAFETY: the value is copied out before the entry is removed.
    let Some(p) = (unsafe { PENDING_RECV.get(key) }).copied() else {
        return 0;
    };
    let _ = PENDING_RECV.remove(key);
    let _ = try_recvmsg_exit(&ctx, &p);
    0
}

fn try_recvmsg_exit(ctx: &TracePointContext, p: &PendingRecv) -> Result<(), i32> {
    // SAFETY: offset of `ret` in the exit tracepoint's format.
    let ret: i64 = unsafe { ctx.read_at(RET)? };
    if ret < 20 || p.buf == 0 {
        return Ok(());
    }
    // The first message must be an error or an acknowledgement: struct nlmsghdr, then int error.
    // SAFETY: a user pointer read through the checked helper.
    let first: [u8; 20] =
        unsafe { aya_ebpf::helpers::bpf_probe_read_user(p.buf as *const [u8; 20]) }?;
    if u16::from_ne_bytes([first[4], first[5]]) != NLMSG_ERROR {
        return Ok(());
    }
    let Some(ev) = ACK_SCRATCH.get_ptr_mut(0) else {
        return Ok(());
    };
    let got = if (ret as u64) < p.len {
        ret as u64
    } else {
        p.len
    };
    let want = if got < NFNL_ACK_LEN as u64 {
        got as u32
    } else {
        NFNL_ACK_LEN as u32
    };
    // SAFETY: `ev` points at this CPU's scratch slot, used only while this program runs.
    unsafe {
        (*ev).header = header(KIND_NFNL_ACK, core::mem::size_of::<Event<NfnlAck>>());
        let d = &mut (*ev).data;
        d.process = Process::zeroed();
        d.sock_netns = p.netns;
        d.ret = ret as u32;
        d._pad = 0;
        let n = verifier_bound(want, NFNL_ACK_LEN as u32);
        let ok = gen::bpf_probe_read_user(d.data.as_mut_ptr().cast(), n, p.buf as *const _) == 0;
        d.captured = if ok { n } else { 0 };
        fill_process(&mut d.process);
        output(&*ev);
    }
    Ok(())
}
