//! The nfnetlink and namespace hooks of the kprobe and fentry backends: kernel functions that run
//! only when a netlink message is sent, a notification multicast, a network namespace created or
//! a file system unmounted, so that unrelated work on the node (a UDP send, a fork, a `recvmsg`)
//! runs no program at all. The tracepoint backend does the same jobs on syscall tracepoints
//! (module `netlink` and the crate root).
//!
//! - `netlink_unicast` (every netlink request a task sends to the kernel, in the sender's
//!   context, before the kernel handles it): nftables batches and ipset commands on a
//!   `NETLINK_NETFILTER` socket, read from the socket buffer. nftables batches are reported at
//!   once; ipset commands when the call returns (applied).
//! - `nlmsg_notify` (every netlink notification): the `NFT_MSG_NEWGEN` that ends a committed
//!   nftables batch, inside the commit and so in the writer's context. The record carries the
//!   generation id, which userspace matches with the notification it reads: an exact join.
//! - `copy_net_ns` (a network namespace made by clone, unshare or `ip netns add`): the new
//!   namespace and its creator.
//! - `path_umount` (every unmount): only those of namespace files (nsfs), so that userspace lets
//!   go of a namespace whose bind mount went (`ip netns del`).
//!
//! Every function is built into the kernel (vmlinux BTF, kallsyms) on the kernels observer runs
//! on, whether or not nf_tables and nfnetlink are loaded yet.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{fentry, fexit, kprobe, kretprobe, map},
    maps::HashMap,
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use observer_common::{
    nfnl::{
        NftGen, NETLINK_NETFILTER, NFNLGRP_NFTABLES, NFNL_SUBSYS_NFTABLES, NFTA_GEN_ID,
        NFT_MSG_NEWGEN, NSFS_MAGIC,
    },
    ns::{Umount, VIA_CREATE},
    process::Process,
    Event, DROP_PENDING, DROP_READ, KIND_NFT_GEN, KIND_UMOUNT,
};

use crate::{
    count_drop, fill_process, header, netlink, netns_report, offsets, output, read_at,
    UMOUNT_SCRATCH,
};

/// Unmounts of namespace files in flight (kprobe backend), by pid_tgid.
#[map]
static PENDING_NSFS_UMOUNT: HashMap<u64, u8> = HashMap::with_max_entries(1024, 0);

/// `CLONE_NEWNET`.
const CLONE_NEWNET: u64 = 0x4000_0000;

/// The traced function's result in an fexit program: the slot after its `nargs` argument slots
/// (a 16-byte struct argument takes two). Read from the context, as every kernel with
/// trampolines (5.5+) allows, rather than with `bpf_get_func_ret` (`FExitContext::ret`), which
/// kernels before 5.17 do not have: 5.10's verifier refuses a program that calls it.
pub(crate) fn fexit_ret<T: aya_ebpf::Argument>(ctx: &FExitContext, nargs: usize) -> T {
    ctx.arg(nargs)
}

/// The kernel's error pointers (`IS_ERR`): the last page of the address space.
fn is_err_or_null(ptr: u64) -> bool {
    ptr == 0 || ptr >= (-4095i64) as u64
}

/// The namespace inode of a socket.
fn sock_netns(sk: u64) -> u32 {
    let off = netlink::nl_offsets();
    let net: u64 = read_at(sk, off.sk_net).unwrap_or(0);
    read_at(net, offsets().net_ns_inum).unwrap_or(0)
}

/// True when `sk` is a netfilter netlink socket. The first check of every hooked call.
fn is_netfilter(sk: u64) -> bool {
    let off = netlink::nl_offsets();
    read_at::<u16>(sk, off.sk_protocol) == Some(NETLINK_NETFILTER)
}

/// `(data, len)` of a socket buffer.
fn skb_bytes(skb: u64) -> Option<(u64, u32)> {
    let off = netlink::nl_offsets();
    let data: u64 = read_at(skb, off.skb_data)?;
    let len: u32 = read_at(skb, off.skb_len)?;
    Some((data, len))
}

/// A request sent on `ssk`: report it when it changes a ruleset.
fn on_unicast(ssk: u64, skb: u64) {
    if !is_netfilter(ssk) {
        return;
    }
    let Some((data, len)) = skb_bytes(skb) else {
        count_drop(DROP_READ);
        return;
    };
    if len < 20 {
        return;
    }
    let Some(first) = read_at::<[u8; 20]>(data, 0) else {
        count_drop(DROP_READ);
        return;
    };
    let Some(subsys) = netlink::subsystem(&first) else {
        return;
    };
    netlink::report_request(
        subsys,
        sock_netns(ssk),
        len as u64,
        data,
        netlink::Memory::Kernel,
    );
}

// match-proto: int netlink_unicast(struct sock *ssk, struct sk_buff *skb, u32 portid,
//   int nonblock), net/netlink/af_netlink.c
#[fentry(function = "netlink_unicast")]
pub fn nl_unicast_fentry(ctx: FEntryContext) -> u32 {
    on_unicast(ctx.arg(0), ctx.arg(1));
    0
}

// match-proto: as above; fexit slots 0 ssk, 1 skb, 2 portid, 3 nonblock, then the result.
#[fexit(function = "netlink_unicast")]
pub fn nl_unicast_fexit(ctx: FExitContext) -> u32 {
    let ret: i64 = fexit_ret(&ctx, 4);
    netlink::finish_request(ret as i32 as i64);
    0
}

#[kprobe]
pub fn nl_unicast_kprobe(ctx: ProbeContext) -> u32 {
    if let (Some(ssk), Some(skb)) = (ctx.arg::<u64>(0), ctx.arg::<u64>(1)) {
        on_unicast(ssk, skb);
    }
    0
}

#[kretprobe]
pub fn nl_unicast_kretprobe(ctx: RetProbeContext) -> u32 {
    let ret: u64 = ctx.ret();
    netlink::finish_request(ret as i32 as i64);
    0
}

/// A notification about to be multicast: report the writer and the generation of an nftables
/// `NEWGEN`.
fn on_notify(sk: u64, skb: u64, group: u32) {
    if group != NFNLGRP_NFTABLES || !is_netfilter(sk) {
        return;
    }
    let Some((data, len)) = skb_bytes(skb) else {
        count_drop(DROP_READ);
        return;
    };
    // struct nlmsghdr (16), struct nfgenmsg (4), then NFTA_GEN_ID first: nla_len, nla_type and
    // the id (big endian).
    if len < 28 {
        return;
    }
    let Some(head) = read_at::<[u8; 28]>(data, 0) else {
        count_drop(DROP_READ);
        return;
    };
    let ty = u16::from_ne_bytes([head[4], head[5]]);
    if ty != (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN {
        return;
    }
    if u16::from_ne_bytes([head[22], head[23]]) & 0x3fff != NFTA_GEN_ID {
        return;
    }
    let mut event = Event {
        header: header(KIND_NFT_GEN, core::mem::size_of::<Event<NftGen>>()),
        data: NftGen {
            process: Process::zeroed(),
            netns: sock_netns(sk),
            genid: u32::from_be_bytes([head[24], head[25], head[26], head[27]]),
        },
    };
    fill_process(&mut event.data.process);
    output(&event);
}

// match-proto: int nlmsg_notify(struct sock *sk, struct sk_buff *skb, u32 portid,
//   unsigned int group, int report, gfp_t flags), net/netlink/af_netlink.c
#[fentry(function = "nlmsg_notify")]
pub fn nft_gen_fentry(ctx: FEntryContext) -> u32 {
    let group: u64 = ctx.arg(3);
    on_notify(ctx.arg(0), ctx.arg(1), group as u32);
    0
}

#[kprobe]
pub fn nft_gen_kprobe(ctx: ProbeContext) -> u32 {
    if let (Some(sk), Some(skb), Some(group)) =
        (ctx.arg::<u64>(0), ctx.arg::<u64>(1), ctx.arg::<u64>(3))
    {
        on_notify(sk, skb, group as u32);
    }
    0
}

/// A namespace was made: report it (its creator, and its inode).
fn on_new_net(net: u64) {
    if is_err_or_null(net) {
        return;
    }
    if let Some(inum) = read_at::<u32>(net, offsets().net_ns_inum) {
        netns_report(inum, VIA_CREATE);
    } else {
        count_drop(DROP_READ);
    }
}

// match-proto: struct net *copy_net_ns(unsigned long flags, struct user_namespace *user_ns,
//   struct net *old_net), net/core/net_namespace.c. Without CLONE_NEWNET it returns old_net.
#[fexit(function = "copy_net_ns")]
pub fn netns_new_fexit(ctx: FExitContext) -> u32 {
    let flags: u64 = ctx.arg(0);
    if flags & CLONE_NEWNET == 0 {
        return 0;
    }
    on_new_net(fexit_ret(&ctx, 3));
    0
}

// The return alone: old_net comes back when no namespace was made, and is found among those
// already seen.
#[kretprobe]
pub fn netns_new_kretprobe(ctx: RetProbeContext) -> u32 {
    on_new_net(ctx.ret());
    0
}

/// True when `path` (a `struct path *`) is the root of a namespace file mount.
fn is_nsfs(path: u64) -> bool {
    let off = netlink::nl_offsets();
    let Some(dentry) = read_at::<u64>(path, off.path_dentry) else {
        return false;
    };
    let Some(sb) = read_at::<u64>(dentry, off.dentry_sb) else {
        return false;
    };
    read_at::<u64>(sb, off.sb_magic) == Some(NSFS_MAGIC)
}

/// A namespace file was unmounted: tell userspace (no path: it re-reads its mounts).
fn report_nsfs_umount() {
    let Some(event) = UMOUNT_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: the per-CPU slot is used only by the program running on this CPU.
    let event = unsafe { &mut *event };
    event.header = header(KIND_UMOUNT, core::mem::size_of::<Event<Umount>>());
    event.data.path = [0; observer_common::ns::UMOUNT_PATH_LEN];
    event.data.process = Process::zeroed();
    fill_process(&mut event.data.process);
    output(event);
}

// match-proto: int path_umount(struct path *path, int flags), fs/namespace.c. fexit sees the
// path and the result at once; the mount's root dentry of a namespace file is still held by
// whoever opened the namespace, and a stale read elsewhere only costs a needless re-read.
#[fexit(function = "path_umount")]
pub fn umount_fexit(ctx: FExitContext) -> u32 {
    if fexit_ret::<i64>(&ctx, 2) as i32 != 0 {
        return 0;
    }
    if is_nsfs(ctx.arg(0)) {
        report_nsfs_umount();
    }
    0
}

#[kprobe]
pub fn umount_kprobe(ctx: ProbeContext) -> u32 {
    if let Some(path) = ctx.arg::<u64>(0) {
        if is_nsfs(path)
            && PENDING_NSFS_UMOUNT
                .insert(bpf_get_current_pid_tgid(), 1, 0)
                .is_err()
        {
            count_drop(DROP_PENDING);
        }
    }
    0
}

#[kretprobe]
pub fn umount_kretprobe(ctx: RetProbeContext) -> u32 {
    let key = bpf_get_current_pid_tgid();
    // SAFETY: a plain lookup; the value is not dereferenced.
    if unsafe { PENDING_NSFS_UMOUNT.get(key) }.is_none() {
        return 0;
    }
    let _ = PENDING_NSFS_UMOUNT.remove(key);
    let ret: u64 = ctx.ret();
    if ret as i32 == 0 {
        report_nsfs_umount();
    }
    0
}
