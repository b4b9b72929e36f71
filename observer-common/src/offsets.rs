//! Kernel struct field offsets the eBPF programs need, resolved by userspace from the running
//! kernel's BTF and written into the programs' read-only data before load (Rust eBPF gets no CO-RE
//! relocations, and these offsets differ between kernels).

/// Offsets in bytes. A value of [`Offsets::MISSING`] means the field does not exist on this
/// kernel; the programs then leave the dependent fields empty rather than read garbage.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offsets {
    /// `task_struct.real_parent` (a pointer).
    pub task_real_parent: u32,
    /// `task_struct.tgid` (pid_t).
    pub task_tgid: u32,
    /// `task_struct.comm` (char[16]).
    pub task_comm: u32,
    /// `task_struct.nsproxy` (a pointer).
    pub task_nsproxy: u32,
    /// `nsproxy.net_ns` (a pointer).
    pub nsproxy_net_ns: u32,
    /// `net.ns.inum`: offset of `ns` in `struct net` plus `inum` in `struct ns_common`.
    pub net_ns_inum: u32,
    /// Set to 1 by userspace once the values above are filled in.
    pub valid: u32,
    /// `sock.__sk_common.skc_net` (a pointer to the socket's `struct net`); the kprobe and fentry
    /// hooks take the namespace of a change from the socket it was made on. Not covered by `valid`.
    pub sock_net: u32,
    /// `task_struct.mm` (a pointer). The next two give the writer's command line (the
    /// `argv` strings in its own memory); not covered by `valid`.
    pub task_mm: u32,
    /// `mm_struct.arg_start` (unsigned long, a user address).
    pub mm_arg_start: u32,
    /// `mm_struct.arg_end`.
    pub mm_arg_end: u32,
    /// `task_struct.group_leader` (a pointer): an ancestor is named by its process's comm, not
    /// by the thread that forked (fail2ban's action threads are called `f2b/a.sshd`). Not
    /// covered by `valid`: without it, the thread's comm is used.
    pub task_group_leader: u32,
}

impl Offsets {
    pub const MISSING: u32 = u32::MAX;

    pub const fn unset() -> Offsets {
        Offsets {
            task_real_parent: Offsets::MISSING,
            task_tgid: Offsets::MISSING,
            task_comm: Offsets::MISSING,
            task_nsproxy: Offsets::MISSING,
            nsproxy_net_ns: Offsets::MISSING,
            net_ns_inum: Offsets::MISSING,
            valid: 0,
            sock_net: Offsets::MISSING,
            task_mm: Offsets::MISSING,
            mm_arg_start: Offsets::MISSING,
            mm_arg_end: Offsets::MISSING,
            task_group_leader: Offsets::MISSING,
        }
    }
}
