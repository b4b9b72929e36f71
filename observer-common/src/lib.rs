//! Types shared across the kernel/user boundary of observer.
//!
//! Every record the eBPF programs write into the ring buffer starts with a [`Header`] whose `kind`
//! says which body follows. Kinds are plain `u32` constants, never Rust enums: userspace turns them
//! into [`EventKind`] with a checked conversion, so an unknown value is an error, not undefined
//! behaviour. All structs are `#[repr(C)]`, have no implicit padding, and are defined once here.
#![no_std]

pub mod hook;
pub mod nfnl;
pub mod ns;
pub mod offsets;
pub mod process;
pub mod xt;

/// The first bytes of every ring-buffer record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// One of the `KIND_*` constants.
    pub kind: u32,
    /// Size in bytes of the whole record, header included (a sanity check for userspace).
    pub len: u32,
    /// `bpf_ktime_get_boot_ns()` when the record was written.
    pub ktime_ns: u64,
}

/// An x_tables table replace (setsockopt on an iptables/ip6tables/arptables/ebtables socket).
pub const KIND_XT_REPLACE: u32 = 1;
/// A task ended up in a network namespace the kernel side had not seen (unshare, setns, clone).
pub const KIND_NETNS_SEEN: u32 = 2;
/// An unmount: a namespace bind mount (`ip netns del`) may have gone.
pub const KIND_UMOUNT: u32 = 3;
/// A ruleset-changing nfnetlink request (nftables batch or ipset command) and its writer.
pub const KIND_NFNL_SEND: u32 = 4;
/// Errors the kernel sent back to an nfnetlink writer (a refused batch or command).
pub const KIND_NFNL_ACK: u32 = 5;
/// An nfnetlink request the kernel refused, seen in the kernel (kprobe, fentry).
pub const KIND_NFNL_REFUSED: u32 = 6;
/// An nftables generation committed, with its writer (kprobe, fentry).
pub const KIND_NFT_GEN: u32 = 7;
/// A piece of the table an x_tables writer installed (before its replace record).
pub const KIND_XT_BLOB: u32 = 8;

/// The record kinds, for userspace. Built only through [`EventKind::try_from`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    XtReplace,
    NetnsSeen,
    Umount,
    NfnlSend,
    NfnlAck,
    NfnlRefused,
    NftGen,
    XtBlob,
}

impl TryFrom<u32> for EventKind {
    type Error = u32;

    fn try_from(v: u32) -> Result<Self, u32> {
        match v {
            KIND_XT_REPLACE => Ok(EventKind::XtReplace),
            KIND_NETNS_SEEN => Ok(EventKind::NetnsSeen),
            KIND_UMOUNT => Ok(EventKind::Umount),
            KIND_NFNL_SEND => Ok(EventKind::NfnlSend),
            KIND_NFNL_ACK => Ok(EventKind::NfnlAck),
            KIND_NFNL_REFUSED => Ok(EventKind::NfnlRefused),
            KIND_NFT_GEN => Ok(EventKind::NftGen),
            KIND_XT_BLOB => Ok(EventKind::XtBlob),
            other => Err(other),
        }
    }
}

/// A record: header then body.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Event<T> {
    pub header: Header,
    pub data: T,
}

/// How long after a record woke the ring buffer's reader the next records do not wake it again
/// (nanoseconds). A wakeup costs the writer more than the rest of its record (an interrupt and
/// a task woken: 4 µs of a 4.7 µs `sendmsg` record on a virtual machine), so the programs wake
/// the reader at most once per this time, and the reader, once woken, reads the ring again
/// this long after each read that found records: no record waits longer than that.
pub const WAKE_LINGER_NS: u64 = 4_000_000;

/// Index of the per-CPU counter of ring-buffer reservations that failed (events lost).
pub const DROP_RINGBUF: u32 = 0;
/// Index of the per-CPU counter of pending-call map insertions that failed.
pub const DROP_PENDING: u32 = 1;
/// Index of the per-CPU counter of kernel or user memory reads that failed where a record needed
/// them (the record is then not written, or written without that part).
pub const DROP_READ: u32 = 2;
/// Index of the per-CPU counter of other map updates that failed (a namespace not marked as
/// seen, a writer not remembered for its replies).
pub const DROP_MAP: u32 = 3;
/// Number of per-CPU drop counters.
pub const DROP_COUNTERS: u32 = 4;

#[cfg(feature = "user")]
mod user {
    // SAFETY: all of these are #[repr(C)], Copy, made of integers and byte arrays only, with no
    // implicit padding (checked by the size assertions in the tests below).
    unsafe impl aya::Pod for super::offsets::Offsets {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::nfnl::NlOffsets {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_checked() {
        assert_eq!(
            EventKind::try_from(KIND_XT_REPLACE),
            Ok(EventKind::XtReplace)
        );
        assert_eq!(
            EventKind::try_from(KIND_NETNS_SEEN),
            Ok(EventKind::NetnsSeen)
        );
        assert_eq!(EventKind::try_from(KIND_UMOUNT), Ok(EventKind::Umount));
        assert_eq!(EventKind::try_from(KIND_NFNL_SEND), Ok(EventKind::NfnlSend));
        assert_eq!(EventKind::try_from(KIND_NFNL_ACK), Ok(EventKind::NfnlAck));
        assert_eq!(
            EventKind::try_from(KIND_NFNL_REFUSED),
            Ok(EventKind::NfnlRefused)
        );
        assert_eq!(EventKind::try_from(KIND_NFT_GEN), Ok(EventKind::NftGen));
        assert_eq!(EventKind::try_from(KIND_XT_BLOB), Ok(EventKind::XtBlob));
        assert_eq!(EventKind::try_from(99), Err(99));
    }

    #[test]
    fn no_implicit_padding() {
        use core::mem::size_of;
        assert_eq!(size_of::<Header>(), 16);
        assert_eq!(
            size_of::<process::Process>(),
            4 * (5 + process::ANCESTORS) + 8 + 16 * (1 + process::ANCESTORS)
        );
        assert_eq!(
            size_of::<xt::XtReplace>(),
            size_of::<process::Process>() + 16 + 32 + 16 + 8 + 8 + xt::ARGS_LEN + 16
        );
        assert_eq!(size_of::<xt::XtBlob>(), 8 + 4 * 6 + xt::BLOB_CHUNK);
        assert_eq!(size_of::<xt::Pending>(), 4 * 4 + xt::TABLE_NAME_LEN + 8);
        assert_eq!(
            size_of::<ns::NetnsSeen>(),
            size_of::<process::Process>() + 8
        );
        assert_eq!(
            size_of::<ns::Umount>(),
            size_of::<process::Process>() + ns::UMOUNT_PATH_LEN
        );
        assert_eq!(size_of::<offsets::Offsets>(), 4 * 12);
        assert_eq!(size_of::<nfnl::NlOffsets>(), 4 * 19);
        assert_eq!(
            size_of::<nfnl::NftGen>(),
            size_of::<process::Process>() + 4 * 2
        );
        assert_eq!(
            size_of::<nfnl::NfnlRefused>(),
            size_of::<process::Process>() + 4 * 4 + nfnl::NFNL_REFUSED_LEN
        );
        assert_eq!(
            size_of::<nfnl::NfnlSend>(),
            size_of::<process::Process>() + 8 + 4 * 6 + nfnl::NFNL_HEAD_LEN
        );
        assert_eq!(
            size_of::<nfnl::NfnlAck>(),
            size_of::<process::Process>() + 4 * 4 + nfnl::NFNL_ACK_LEN
        );
    }
}
