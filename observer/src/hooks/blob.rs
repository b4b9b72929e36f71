//! The tables x_tables writers installed, as the kernel side copied them.
//!
//! x_tables replaces whole tables: the writer hands the kernel the complete new table
//! (`setsockopt(IPT_SO_SET_REPLACE)`). Once the kernel has accepted it, the programs copy that
//! struct from the writer's memory into the ring buffer in 64 KiB pieces (`XtBlob` records),
//! ahead of the replace record. Userspace then decodes the table each writer installed instead
//! of reading the table back from the kernel, which
//!
//! - attributes every change to the writer that made it, even when the next writer replaced the
//!   table before a read could have happened (a read would show both writers' changes as the
//!   first one's);
//! - costs no `getsockopt` copy of the whole table from the kernel (on a 20,000-rule table,
//!   two thirds of a read).
//!
//! Tables up to [`max_bytes`] are copied: half the ring buffer, at most 16 MiB (the default
//! 4 MiB ring buffer copies tables up to 2 MiB, about 5,000 rules with comments; 32 MiB copies
//! 16 MiB). The programs stop copying (the table is then read back) as soon as the ring buffer
//! is half full, so that a table never takes the room other records need, whatever userspace
//! has not consumed yet. Larger tables, a ring buffer under 256 KiB, a kernel caller's struct
//! and ebtables are read back as before.
//!
//! Copying more than fits (and counting on userspace to empty the ring buffer while the pieces
//! come) was tried: the programs write 64 KiB in a few microseconds, and on a busy machine
//! userspace is woken after megabytes, so a 7.5 MB table was cut at about 2 MiB every time and
//! read back anyway, after both sides had paid for the copy.

use std::collections::HashMap;

use observer_common::xt::{BLOB_CHUNK, BLOB_MAX_BYTES, BLOB_RING_SHARE_SHIFT};

use super::decode::{BlobChunk, XtReplaceEvent};

/// Below this ring buffer size nothing is copied: a piece would take a quarter of it.
const MIN_RING: u32 = 4 * BLOB_CHUNK as u32;
/// Blobs being assembled at once. Pieces of one blob come back to back from one CPU; a few
/// writers on other CPUs may interleave theirs. Beyond this the oldest is dropped (its replace
/// is then read back).
const IN_FLIGHT: usize = 64;

/// The largest replace struct the programs copy for a ring buffer of `ring_bytes`: half of it,
/// at most the programs' bound (16 MiB), none for a ring under 256 KiB.
pub fn max_bytes(ring_bytes: u32) -> u32 {
    if ring_bytes < MIN_RING {
        return 0;
    }
    (ring_bytes >> BLOB_RING_SHARE_SHIFT).min(BLOB_MAX_BYTES)
}

/// A blob being put together from its pieces.
#[derive(Debug)]
struct Partial {
    buf: Vec<u8>,
    /// A piece came out of order or too large: the blob is not used.
    broken: bool,
}

/// Blobs in flight, by the writer's thread and the replace's cookie.
#[derive(Debug, Default)]
pub struct Blobs {
    open: HashMap<(u32, u64), Partial>,
}

impl Blobs {
    /// Add a piece to its blob.
    pub fn add(&mut self, chunk: BlobChunk) {
        let key = (chunk.tid, chunk.cookie);
        if !self.open.contains_key(&key) && self.open.len() >= IN_FLIGHT {
            if let Some(oldest) = self.open.keys().min_by_key(|(_, cookie)| *cookie).copied() {
                tracing::debug!("dropping a table copy whose replace never came: {oldest:?}");
                self.open.remove(&oldest);
            }
        }
        let p = self.open.entry(key).or_insert_with(|| Partial {
            buf: Vec::new(),
            broken: false,
        });
        let fits = p.buf.len() + chunk.data.len() <= BLOB_MAX_BYTES as usize;
        if p.broken || chunk.offset as usize != p.buf.len() || !fits {
            p.broken = true;
            p.buf = Vec::new();
            return;
        }
        if p.buf.is_empty() {
            // Once, for the whole struct (bounded above): no copy as it grows.
            let total = (chunk.total as usize).min(BLOB_MAX_BYTES as usize);
            p.buf.reserve_exact(total.max(chunk.data.len()));
        }
        p.buf.extend_from_slice(&chunk.data);
    }

    /// The whole blob of replace `x`, when the kernel side copied it whole and every piece
    /// arrived. Pieces the writer's thread left from earlier replaces (whose record was lost)
    /// are dropped.
    pub fn take(&mut self, x: &XtReplaceEvent) -> Option<Vec<u8>> {
        let tid = x.process.tid;
        let mine = self.open.remove(&(tid, x.blob_copy.cookie));
        self.open.retain(|(t, _), _| *t != tid);
        let p = mine?;
        let want = x.blob_copy.len as usize;
        if !x.blob_copy.whole || p.broken || want == 0 || p.buf.len() != want {
            tracing::debug!(
                "the copy of {}'s table {} is incomplete ({} of {want} bytes): reading it back",
                x.process.comm,
                x.table,
                p.buf.len()
            );
            return None;
        }
        Some(p.buf)
    }

    /// Blobs being assembled.
    #[cfg(test)]
    fn in_flight(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::KernelProcess;
    use crate::hooks::backend::HookBackend;
    use crate::hooks::decode::{BlobCopy, XtKind};

    fn chunk(tid: u32, cookie: u64, offset: u32, data: &[u8]) -> BlobChunk {
        BlobChunk {
            cookie,
            tgid: tid,
            tid,
            offset,
            total: offset + data.len() as u32,
            data: data.to_vec(),
        }
    }

    fn replace(tid: u32, cookie: u64, len: u32, whole: bool) -> XtReplaceEvent {
        XtReplaceEvent {
            process: KernelProcess {
                tgid: tid,
                tid,
                uid: 0,
                comm: "iptables".into(),
                ancestors: vec![],
                netns: 1,
                cgroup_id: 0,
                top_reached: true,
            },
            kind: XtKind::Ipv4,
            table: "filter".into(),
            ret: 0,
            num_entries: 0,
            ktime_ns: cookie,
            source: HookBackend::Tracepoint,
            args: vec![],
            blob_copy: BlobCopy { cookie, len, whole },
            blob: None,
        }
    }

    #[test]
    fn pieces_make_the_blob_of_their_own_replace() {
        let mut b = Blobs::default();
        b.add(chunk(7, 100, 0, &[1; 4096]));
        // Another writer's piece in between.
        b.add(chunk(8, 101, 0, &[9; 10]));
        b.add(chunk(7, 100, 4096, &[2; 4]));
        let got = b.take(&replace(7, 100, 4100, true)).expect("whole");
        assert_eq!(got.len(), 4100);
        assert_eq!(&got[4094..], &[1, 1, 2, 2, 2, 2]);
        assert_eq!(b.take(&replace(8, 101, 10, true)), Some(vec![9; 10]));
        assert_eq!(b.in_flight(), 0);
    }

    #[test]
    fn a_lost_or_misplaced_piece_means_no_blob() {
        let mut b = Blobs::default();
        // The kernel side says a piece was lost.
        b.add(chunk(7, 1, 0, &[1; 8]));
        assert_eq!(b.take(&replace(7, 1, 16, false)), None);
        // A piece missing in the middle.
        b.add(chunk(7, 2, 0, &[1; 8]));
        b.add(chunk(7, 2, 16, &[1; 8]));
        assert_eq!(b.take(&replace(7, 2, 24, true)), None);
        // Shorter than the replace says.
        b.add(chunk(7, 3, 0, &[1; 8]));
        assert_eq!(b.take(&replace(7, 3, 9, true)), None);
        // No pieces at all.
        assert_eq!(b.take(&replace(7, 4, 8, true)), None);
        assert_eq!(b.in_flight(), 0);
    }

    #[test]
    fn leftovers_of_a_thread_go_with_its_next_replace_and_the_rest_stay_bounded() {
        let mut b = Blobs::default();
        b.add(chunk(7, 1, 0, &[1; 8]));
        b.add(chunk(8, 2, 0, &[1; 8]));
        assert_eq!(b.take(&replace(7, 5, 0, false)), None);
        assert_eq!(b.in_flight(), 1, "thread 8's blob stays");
        for i in 0..(IN_FLIGHT as u64 * 2) {
            b.add(chunk(1000 + i as u32, 10 + i, 0, &[0; 1]));
        }
        assert_eq!(b.in_flight(), IN_FLIGHT);
    }

    #[test]
    fn the_copy_limit_is_half_the_ring_buffer_up_to_the_programs_bound() {
        assert_eq!(max_bytes(4096), 0);
        assert_eq!(max_bytes(1 << 17), 0);
        assert_eq!(max_bytes(1 << 18), 1 << 17);
        assert_eq!(max_bytes(1 << 22), 2 << 20);
        assert_eq!(max_bytes(1 << 25), 16 << 20);
        assert_eq!(max_bytes(1 << 26), 16 << 20);
    }
}
