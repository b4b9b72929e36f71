//! Who made a change, as the kernel saw it at that moment.
//!
//! The writer is usually a short-lived `iptables-restore` that has exited before userspace reads
//! anything, so the eBPF programs copy the task and its ancestors here while the syscall runs.

/// Length of `task_struct.comm`, NUL included.
pub const COMM_LEN: usize = 16;
/// How many ancestors (parent, grandparent, ...) are captured: enough to get from the
/// `iptables` a component runs, through its shells and wrappers (`sh -c`, `timeout`, `flock`,
/// `ip netns exec`, an interpreter), to the component itself. Odd, so that `Process` has no
/// padding before `cgroup_id`.
pub const ANCESTORS: usize = 7;
/// How many comms the walk goes on past (shells, interpreters, wrappers, the netfilter front
/// ends), in a map userspace fills before the programs are attached. The walk stops one level
/// after the first ancestor whose comm is not among them: that one is the actor (or a session,
/// init or a container's supervisor, where a chain of wrappers ends), and its parent is read to
/// see whether it is a dispatcher ([`WALK_DISPATCHER`]). On most writes (a component runs
/// `iptables-restore` or `nft` itself) that is the parent and grandparent, and the other five
/// levels of reads are saved.
pub const WALK_PAST_LEN: u32 = 256;
/// The map's value for a comm the walk goes on past: a shell, interpreter, wrapper or front end.
pub const WALK_WRAPPER: u8 = 1;
/// The map's value for a dispatcher (`run-parts`): the process below it is a plugin it ran, not
/// the actor, so the walk goes on past both, to the tool that ran the dispatcher.
pub const WALK_DISPATCHER: u8 = 2;

/// The writing task and up to [`ANCESTORS`] of its ancestors.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Process {
    /// Process id (tgid) of the writer.
    pub tgid: u32,
    /// Thread id of the writer.
    pub tid: u32,
    /// tgids of the parent, grandparent, ...; 0 where unknown.
    pub ancestor_tgid: [u32; ANCESTORS],
    /// Network namespace inode of the writer (as `stat -L -c %i /proc/PID/ns/net` prints).
    pub netns: u32,
    /// Real uid of the writer.
    pub uid: u32,
    /// 1 when the walk reached the top of the process tree: the ancestors captured are the
    /// whole chain. 0 when it stopped before (at [`ANCESTORS`], or at the parent of the first
    /// ancestor that is not a shell, wrapper or front end: see [`WALK_PAST_LEN`]).
    pub top: u32,
    /// cgroup v2 id of the writer (the cgroup directory's inode number).
    pub cgroup_id: u64,
    /// comm of the writer, NUL-padded.
    pub comm: [u8; COMM_LEN],
    /// comms of the ancestors, NUL-padded; empty where unknown.
    pub ancestor_comm: [[u8; COMM_LEN]; ANCESTORS],
}

impl Process {
    pub const fn zeroed() -> Process {
        Process {
            tgid: 0,
            tid: 0,
            ancestor_tgid: [0; ANCESTORS],
            netns: 0,
            uid: 0,
            top: 0,
            cgroup_id: 0,
            comm: [0; COMM_LEN],
            ancestor_comm: [[0; COMM_LEN]; ANCESTORS],
        }
    }
}
