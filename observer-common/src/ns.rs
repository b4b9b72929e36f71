//! Network namespace discovery: the kernel side reports a task found in a namespace it has not
//! seen before, so userspace can subscribe to that namespace before (or right as) it is written.

use crate::process::Process;

/// A task is in a network namespace the kernel side had not reported before.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetnsSeen {
    /// The task (its `netns` field is the namespace).
    pub process: Process,
    /// Which syscall brought it there: one of the `VIA_*` constants.
    pub via: u32,
    pub _pad: u32,
}

pub const VIA_UNSHARE: u32 = 1;
pub const VIA_SETNS: u32 = 2;
pub const VIA_CLONE: u32 = 3;
pub const VIA_WRITE: u32 = 4;
/// Created (`copy_net_ns`, kprobe and fentry backends): the record's task is the creator, which
/// may not be in the namespace yet; its `netns` field is the new namespace.
pub const VIA_CREATE: u32 = 5;

/// Bytes of the unmounted path that are copied.
pub const UMOUNT_PATH_LEN: usize = 128;

/// A successful umount2(); userspace checks whether a namespace bind mount went with it. The
/// kprobe and fentry hook reports only namespace (nsfs) mounts, with an empty path.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Umount {
    pub process: Process,
    /// The path given to umount2(), NUL-padded (cut at [`UMOUNT_PATH_LEN`]).
    pub path: [u8; UMOUNT_PATH_LEN],
}

/// Pending umount2() path, kept between entry and exit.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingUmount {
    pub path: [u8; UMOUNT_PATH_LEN],
}
