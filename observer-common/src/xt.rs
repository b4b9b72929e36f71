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
}
