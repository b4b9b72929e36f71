//! nfnetlink requests that change a ruleset, caught on the `sendmsg`/`sendto` syscalls.
//!
//! nftables (nft, iptables-nft, firewalld) and ipset write through a `NETLINK_NETFILTER` socket.
//! The kernel applies the request inside the syscall, so the writer is alive and can be
//! attributed there, even when it exits a millisecond later. nftables writes are batches
//! (`NFNL_MSG_BATCH_BEGIN` with the subsystem in `res_id`); ipset writes are single requests whose
//! message type carries the subsystem in its high byte.

use crate::process::Process;

/// `AF_NETLINK`.
pub const AF_NETLINK: u16 = 16;
/// `NETLINK_NETFILTER`.
pub const NETLINK_NETFILTER: u16 = 12;
/// `NFNL_MSG_BATCH_BEGIN` (`NLMSG_MIN_TYPE`).
pub const NFNL_MSG_BATCH_BEGIN: u16 = 16;
/// `NFNL_SUBSYS_IPSET`.
pub const NFNL_SUBSYS_IPSET: u16 = 6;
/// `NFNL_SUBSYS_NFTABLES`.
pub const NFNL_SUBSYS_NFTABLES: u16 = 10;

/// ipset commands (`enum ipset_cmd`, include/uapi/linux/netfilter/ipset/ip_set.h).
pub const IPSET_CMD_CREATE: u8 = 2;
pub const IPSET_CMD_DESTROY: u8 = 3;
pub const IPSET_CMD_FLUSH: u8 = 4;
pub const IPSET_CMD_RENAME: u8 = 5;
pub const IPSET_CMD_SWAP: u8 = 6;
pub const IPSET_CMD_LIST: u8 = 7;
pub const IPSET_CMD_ADD: u8 = 9;
pub const IPSET_CMD_DEL: u8 = 10;

/// True for the ipset commands that change something (reported); the others only read.
pub const fn ipset_cmd_writes(cmd: u8) -> bool {
    matches!(
        cmd,
        IPSET_CMD_CREATE
            | IPSET_CMD_DESTROY
            | IPSET_CMD_FLUSH
            | IPSET_CMD_RENAME
            | IPSET_CMD_SWAP
            | IPSET_CMD_ADD
            | IPSET_CMD_DEL
    )
}

/// Bytes of the request copied from user memory: the first netlink messages, enough for a batch
/// header and its first object, or an ipset command with its set names.
pub const NFNL_HEAD_LEN: usize = 256;

/// The record is written when the syscall starts (nftables: the kernel has not applied the batch
/// yet, so the record reaches userspace before the batch's notifications as a rule).
pub const PHASE_ENTER: u32 = 0;
/// The record is written when the syscall returns (ipset: the command has been applied, so what
/// userspace reads next includes it).
pub const PHASE_EXIT: u32 = 1;

/// One ruleset-changing nfnetlink request.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NfnlSend {
    pub process: Process,
    /// The syscall's return value at [`PHASE_EXIT`] (bytes sent or a negative errno); 0 at enter.
    pub ret: i64,
    /// Network namespace inode of the socket (where the change lands); 0 when unknown.
    pub sock_netns: u32,
    /// `NFNL_SUBSYS_*`.
    pub subsys: u32,
    /// [`PHASE_ENTER`] or [`PHASE_EXIT`].
    pub phase: u32,
    /// Length of the whole request (the first iovec for sendmsg).
    pub len: u32,
    /// How many bytes of `head` are valid.
    pub captured: u32,
    pub _pad: u32,
    /// The start of the request, as the writer sent it.
    pub head: [u8; NFNL_HEAD_LEN],
}

/// `NFNLGRP_NFTABLES`: the multicast group of nftables notifications.
pub const NFNLGRP_NFTABLES: u32 = 7;
/// `NFT_MSG_NEWGEN`: the notification that ends a committed nftables batch.
pub const NFT_MSG_NEWGEN: u16 = 15;
/// `NFTA_GEN_ID`: the generation id attribute of `NFT_MSG_NEWGEN`.
pub const NFTA_GEN_ID: u16 = 1;
/// `NSFS_MAGIC`: the file system of namespace files (what `ip netns add` bind-mounts).
pub const NSFS_MAGIC: u64 = 0x6e73_6673;

/// An nftables batch committed: the generation it made, and who made it. Written where the
/// kernel sends the batch's `NFT_MSG_NEWGEN` notification (`nlmsg_notify`), inside the commit, in
/// the writer's context: userspace joins it to that notification by `(netns, genid)`, exactly.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NftGen {
    pub process: Process,
    /// Network namespace inode of the ruleset; 0 when unknown.
    pub netns: u32,
    /// `NFTA_GEN_ID` of the notification (host order).
    pub genid: u32,
}

/// Kernel struct offsets for finding the socket behind a file descriptor. Separate from
/// [`crate::offsets::Offsets`]: when one of these is missing only this hook is disabled.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NlOffsets {
    /// `task_struct.files`.
    pub task_files: u32,
    /// `files_struct.fdt`.
    pub files_fdt: u32,
    /// `fdtable.max_fds`.
    pub fdt_max_fds: u32,
    /// `fdtable.fd` (a `struct file **`).
    pub fdt_fd: u32,
    /// `file.f_inode`.
    pub file_inode: u32,
    /// `inode.i_mode`.
    pub inode_mode: u32,
    /// `file.private_data` (the `struct socket *` of a socket file).
    pub file_private: u32,
    /// `socket.sk`.
    pub socket_sk: u32,
    /// `sock.__sk_common.skc_family` (u16).
    pub sk_family: u32,
    /// `sock.sk_protocol` (u16).
    pub sk_protocol: u32,
    /// `sock.__sk_common.skc_net` (a `struct net *`).
    pub sk_net: u32,
    /// Set to 1 by userspace once every value above is known.
    pub valid: u32,
    /// `sk_buff.sk`: the refusal hook on `netlink_ack` checks the protocol of the socket a request
    /// came in on. Not covered by `valid` (only that hook needs it).
    pub skb_sk: u32,
    /// `sk_buff.data` (a pointer) and `sk_buff.len` (u32): the kprobe and fentry writer hooks read
    /// the request, and the generation hook the notification, from the socket buffer. Not
    /// covered by `valid`: without them those hooks stay on the tracepoint backend.
    pub skb_data: u32,
    pub skb_len: u32,
    /// `path.dentry`, `dentry.d_sb` and `super_block.s_magic` (unsigned long): the kprobe and
    /// fentry unmount hook keeps only namespace (nsfs) mounts. Not covered by `valid`.
    pub path_dentry: u32,
    pub dentry_sb: u32,
    pub sb_magic: u32,
    pub _pad: u32,
}

impl NlOffsets {
    pub const fn unset() -> NlOffsets {
        NlOffsets {
            task_files: u32::MAX,
            files_fdt: u32::MAX,
            fdt_max_fds: u32::MAX,
            fdt_fd: u32::MAX,
            file_inode: u32::MAX,
            inode_mode: u32::MAX,
            file_private: u32::MAX,
            socket_sk: u32::MAX,
            sk_family: u32::MAX,
            sk_protocol: u32::MAX,
            sk_net: u32::MAX,
            valid: 0,
            skb_sk: u32::MAX,
            skb_data: u32::MAX,
            skb_len: u32::MAX,
            path_dentry: u32::MAX,
            dentry_sb: u32::MAX,
            sb_magic: u32::MAX,
            _pad: 0,
        }
    }
}

/// Bytes of a reply copied from user memory: enough for a few error messages with the start of
/// the request each one refers to.
pub const NFNL_ACK_LEN: usize = 1024;

/// What a writer of nfnetlink requests read back on its socket right after a request: the
/// kernel's replies, which hold the error of every message of a batch it refused (nftables
/// reports a refused batch only there, to the writer).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NfnlAck {
    pub process: Process,
    /// Network namespace inode of the socket; 0 when unknown.
    pub sock_netns: u32,
    /// The syscall's return (bytes received).
    pub ret: u32,
    /// How many bytes of `data` are valid.
    pub captured: u32,
    pub _pad: u32,
    /// The start of what was received.
    pub data: [u8; NFNL_ACK_LEN],
}

/// Bytes of a refused request copied from kernel memory: its header, and attributes enough for
/// the table and chain names.
pub const NFNL_REFUSED_LEN: usize = 512;

/// One nfnetlink request the kernel refused, seen where it acknowledges it with an error
/// (`netlink_ack`, on the kprobe and fentry backends), in the writer's context.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NfnlRefused {
    pub process: Process,
    /// Network namespace inode of the socket the request came in on; 0 when unknown.
    pub sock_netns: u32,
    /// The negative errno.
    pub errno: i32,
    /// How many bytes of `request` are valid.
    pub captured: u32,
    /// `hook::HOOK_*`: which backend's hook saw it.
    pub source: u32,
    /// The start of the refused request (netlink header, nfgenmsg, attributes).
    pub request: [u8; NFNL_REFUSED_LEN],
}
