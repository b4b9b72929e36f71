//! x_tables table replaces, caught on the setsockopt syscall.

use crate::process::Process;

/// `SOL_IP`: IPv4 iptables, arptables and ebtables sockets.
pub const SOL_IP: u32 = 0;
/// `SOL_IPV6`: ip6tables sockets.
pub const SOL_IPV6: u32 = 41;
/// `IPT_SO_SET_REPLACE` / `IP6T_SO_SET_REPLACE`: replace a whole table.
pub const IPT_SO_SET_REPLACE: u32 = 64;
/// `ARPT_SO_SET_REPLACE`.
pub const ARPT_SO_SET_REPLACE: u32 = 96;
/// `EBT_SO_SET_ENTRIES`.
pub const EBT_SO_SET_ENTRIES: u32 = 128;
/// `XT_TABLE_MAXNAMELEN`: the table name at the start of every replace struct.
pub const TABLE_NAME_LEN: usize = 32;
/// How much of the writer's command line (its NUL-separated `argv`) a replace record carries.
pub const ARGS_LEN: usize = 128;

/// True when `(level, optname)` is a table replace that observer reports.
pub const fn is_replace(level: u32, optname: u32) -> bool {
    matches!(
        (level, optname),
        (SOL_IP, IPT_SO_SET_REPLACE)
            | (SOL_IPV6, IPT_SO_SET_REPLACE)
            | (SOL_IP, ARPT_SO_SET_REPLACE)
            | (SOL_IP, EBT_SO_SET_ENTRIES)
    )
}

/// What the entry hook keeps until the syscall returns.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    pub level: u32,
    pub optname: u32,
    /// `num_entries` of the replace struct (ebtables: `nentries`).
    pub num_entries: u32,
    /// `size` of the replace struct (ebtables: `entries_size`).
    pub size: u32,
    pub table: [u8; TABLE_NAME_LEN],
    /// The writer's replace struct: a user address (0 when it is a kernel one, or unknown).
    pub optval: u64,
}

/// `PF_INET`, as `nf_setsockopt` gets it for `SOL_IP` options.
pub const PF_INET: u32 = 2;
/// `PF_INET6`, as `nf_setsockopt` gets it for `SOL_IPV6` options.
pub const PF_INET6: u32 = 10;

/// The socket option level that goes with the protocol family `nf_setsockopt` is given.
pub const fn level_of_pf(pf: u32) -> Option<u32> {
    match pf {
        PF_INET => Some(SOL_IP),
        PF_INET6 => Some(SOL_IPV6),
        _ => None,
    }
}

/// One table replace, reported at syscall exit with its result.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XtReplace {
    pub process: Process,
    /// The setsockopt return value: 0, or a negative errno.
    pub ret: i64,
    /// `bpf_ktime_get_boot_ns()` at syscall entry.
    pub start_ns: u64,
    pub table: [u8; TABLE_NAME_LEN],
    pub level: u32,
    pub optname: u32,
    pub num_entries: u32,
    pub size: u32,
    /// Which hook wrote this record: one of the `hook::HOOK_*` constants.
    pub source: u32,
    pub _pad: u32,
    /// Length of the writer's whole command line (`arg_end - arg_start`); 0 when unknown.
    pub args_len: u32,
    pub _pad2: u32,
    /// The first [`ARGS_LEN`] bytes of the command line: `iptables-legacy\0-F\0KUBE-FW\0`.
    /// It tells a flush (`-F`) from the delete of a chain's only rule, which the kernel's
    /// table replace alone cannot.
    pub args: [u8; ARGS_LEN],
    /// Ties the [`XtBlob`] records of this replace to it (with the writer's pid and tid); 0
    /// when no blob was copied.
    pub blob_cookie: u64,
    /// Size of the writer's replace struct when it was copied into [`XtBlob`] records before
    /// this record, 0 when it was not (too large, a failed call, ebtables).
    pub blob_len: u32,
    /// One of the `BLOB_*` constants.
    pub blob_state: u32,
}

/// No blob was copied for this replace.
pub const BLOB_NONE: u32 = 0;
/// Every byte of the blob was written into the ring buffer, in order, before the replace.
pub const BLOB_WHOLE: u32 = 1;
/// A chunk could not be reserved or read: the blob is incomplete and must not be used.
pub const BLOB_LOST: u32 = 2;

/// Bytes of the writer's table one [`XtBlob`] record carries.
pub const BLOB_CHUNK: usize = 64 * 1024;
/// The most chunks one replace is copied in (the programs' loop bound): 16 MiB, about 40,000
/// iptables rules with comments. The verifier follows the loop round by round, and a path of
/// more than 8,192 jumps is refused: 2,048 rounds were, and cost 1.4 s of verification, so the
/// pieces grew instead of their count.
pub const BLOB_MAX_CHUNKS: u32 = 256;
/// The largest replace struct copied: [`BLOB_MAX_CHUNKS`] chunks of [`BLOB_CHUNK`] bytes.
pub const BLOB_MAX_BYTES: u32 = BLOB_MAX_CHUNKS * BLOB_CHUNK as u32;
/// The share of the ring buffer a table's pieces may take (1/2): userspace copies tables up to
/// that size, and the pieces of one table stop (the table is read back instead) when the ring
/// buffer is fuller than that, so that a table never takes the room other records need.
pub const BLOB_RING_SHARE_SHIFT: u32 = 1;

/// A piece of the replace struct a writer handed to the kernel (`struct ipt_replace` and its
/// entries, as `setsockopt` got them), copied once the kernel accepted it. A replace's pieces
/// come before its [`XtReplace`] record, in order; userspace decodes the table from them rather
/// than reading it back, so each writer's change is the table it installed, even when the next
/// writer replaced it before userspace could have read it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XtBlob {
    pub head: XtBlobHead,
    pub data: [u8; BLOB_CHUNK],
}

/// What an [`XtBlob`] says before its bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XtBlobHead {
    /// [`XtReplace::blob_cookie`] of the replace it belongs to.
    pub cookie: u64,
    pub tgid: u32,
    pub tid: u32,
    /// Where in the replace struct this piece starts.
    pub offset: u32,
    /// Bytes of `data` that are the blob's (the rest is undefined).
    pub len: u32,
    /// Size of the whole replace struct (every piece says it).
    pub total: u32,
    pub _pad: u32,
}

/// Size of the replace struct before its entries, or None for a replace whose table userspace
/// does not decode (ebtables): `ipt_replace` and `ip6t_replace` have five hooks, `arpt_replace`
/// three; then the counter count and a pointer, 8-byte aligned.
pub const fn replace_head_len(level: u32, optname: u32) -> Option<u32> {
    match (level, optname) {
        (SOL_IP, IPT_SO_SET_REPLACE) | (SOL_IPV6, IPT_SO_SET_REPLACE) => Some(96),
        (SOL_IP, ARPT_SO_SET_REPLACE) => Some(80),
        _ => None,
    }
}
