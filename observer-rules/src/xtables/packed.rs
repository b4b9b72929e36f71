//! The entries of a table kept between two reads, packed.
//!
//! A legacy table is kept until the next replace of it, to be diffed against; its rules' text is
//! rendered from the kernel's entries only when a change needs it. The entries are mostly zeros
//! (a 256-byte comment field holding 30 characters, unused interface names and masks, counters
//! of rules that matched nothing), so each is kept as groups of literal bytes followed by a run
//! of zeros, in 8-byte words (entries are 8-byte aligned), and unpacked to render it. On the
//! benchmark's 20,000-rule table that keeps 2.2 MB instead of the 7.5 MB the kernel returns.
//!
//! One packed entry: `u16` length, then groups of `u16` literal length, `u16` zero count and the
//! literal bytes, until the lengths add up.

//! The store is a list of segments of about 1 MiB, each shared (`Arc`) between the copies of a
//! table that hold entries in it. The next copy of a table starts with the last copy's
//! segments ([`Packed::sharing`]): a chain that did not change keeps its entries where they are
//! (nothing is copied), and only the chains decoded again are packed, into segments of their
//! own. A segment no chain of the new copy refers to any more is let go
//! ([`Packed::release_unused`]); when the partly used ones hold more than the entries in use
//! (or there are many small ones), the next copy packs afresh ([`Packed::worth_sharing`]). So
//! what a replace adds to memory follows what it changed, not the table's size.
//!
//! An entry's address is its segment's index (the high bits) and its offset there (the low
//! [`OFFSET_BITS`] bits).

use std::sync::Arc;

/// Runs of zeros shorter than this many bytes stay in the literal (a group costs 4 bytes).
const MIN_ZEROS: usize = 16;

/// Bits of an address that are the offset in its segment.
const OFFSET_BITS: u32 = 20;
/// A segment is not started past this many bytes (an entry started below it may end a little
/// beyond, within the offset's range).
const SEGMENT: usize = (1 << OFFSET_BITS) - (1 << 17);
/// Segments a store can address.
const MAX_SEGMENTS: usize = 1 << (32 - OFFSET_BITS);
/// Small segments (one per replace that changed a few chains) allowed beyond what the entries in
/// use fill, before the next copy packs afresh.
const SPARE_SEGMENTS: usize = 128;

/// Packed entries, each found by the address [`Packed::push`] returned.
#[derive(Clone, Default)]
pub(crate) struct Packed {
    segs: Vec<Arc<Vec<u8>>>,
    /// The segments before this index came from another copy: never written to.
    sealed: usize,
}

impl Packed {
    /// Bytes held, in all segments (shared ones included).
    pub fn len(&self) -> usize {
        self.segs.iter().map(|s| s.len()).sum()
    }

    /// Segments held (let-go ones included: their index stays taken).
    #[cfg(test)]
    pub fn segments(&self) -> usize {
        self.segs.len()
    }

    /// A store for the next copy of the table: this one's segments, shared and sealed; new
    /// entries go into segments of their own.
    pub fn sharing(&self) -> Packed {
        Packed {
            segs: self.segs.clone(),
            sealed: self.segs.len(),
        }
    }

    /// Whether the next copy should share this store's segments (see [`Packed::sharing`]) when
    /// the copy holding them refers to `live` bytes of them; otherwise it packs afresh.
    pub fn worth_sharing(&self, live: usize) -> bool {
        self.len() <= 2 * live + SEGMENT
            && self.segs.len() <= live / SEGMENT + SPARE_SEGMENTS
            && self.segs.len() < MAX_SEGMENTS / 2
    }

    /// Let go of the shared segments that none of the addresses `used` is in (the index stays,
    /// empty), and give back the unused room of the last segment.
    pub fn release_unused(&mut self, used: impl Iterator<Item = u32>) {
        let mut keep = vec![false; self.sealed];
        for at in used {
            if let Some(k) = keep.get_mut((at >> OFFSET_BITS) as usize) {
                *k = true;
            }
        }
        for (seg, keep) in self.segs.iter_mut().zip(keep) {
            if !keep && !seg.is_empty() {
                *seg = Arc::default();
            }
        }
        let own = self.sealed.min(self.segs.len());
        if let Some(last) = self.segs[own..].last_mut().and_then(Arc::get_mut) {
            last.shrink_to_fit();
        }
    }

    /// The open segment, with room for `bytes` more; a new one when the last is sealed, shared
    /// or full. `None` when the store can address no more segments.
    fn room(&mut self, bytes: usize) -> Option<(u32, &mut Vec<u8>)> {
        let open = self.segs.len() > self.sealed
            && self
                .segs
                .last_mut()
                .and_then(Arc::get_mut)
                .is_some_and(|s| s.len() < SEGMENT && s.len() + bytes < 1 << OFFSET_BITS);
        if !open {
            if self.segs.len() >= MAX_SEGMENTS {
                return None;
            }
            self.segs.push(Arc::default());
        }
        let index = u32::try_from(self.segs.len() - 1).ok()?;
        let seg = Arc::get_mut(self.segs.last_mut()?)?;
        let at = (index << OFFSET_BITS) | u32::try_from(seg.len()).ok()?;
        Some((at, seg))
    }

    /// Pack one entry (at most 65,535 bytes: x_tables sizes entries with a `u16`); returns its
    /// address and the bytes it took, `None` when the store or the entry is too large.
    pub fn push(&mut self, entry: &[u8]) -> Option<(u32, usize)> {
        let total = u16::try_from(entry.len()).ok()?;
        // At most: the length, then per 8-byte word a 4-byte group header.
        let (at, seg) = self.room(2 + entry.len() + 4 * (entry.len() / 8 + 1))?;
        let start = seg.len();
        seg.extend_from_slice(&total.to_ne_bytes());
        let mut i = 0;
        while i < entry.len() {
            let (zeros_at, zeros_end) = next_zeros(entry, i);
            let literal = &entry[i..zeros_at];
            // Both fit: they are parts of an entry of at most u16::MAX bytes.
            seg.extend_from_slice(&(literal.len() as u16).to_ne_bytes());
            seg.extend_from_slice(&((zeros_end - zeros_at) as u16).to_ne_bytes());
            seg.extend_from_slice(literal);
            i = zeros_end;
        }
        Some((at, seg.len() - start))
    }

    /// Copy the entry packed at `at` in `other` to this store, as it is (an unchanged chain
    /// carried over from a copy of the table that is not shared, without unpacking it); returns
    /// its address here and its size, `None` when `at` is not an entry of `other` or this store
    /// is full.
    pub fn copy_from(&mut self, other: &Packed, at: u32) -> Option<(u32, usize)> {
        let (seg, start) = other.locate(at)?;
        let end = other.entry_end(at)?;
        let bytes = other.segs[seg].get(start..end)?;
        let (here, to) = self.room(bytes.len())?;
        to.extend_from_slice(bytes);
        Some((here, bytes.len()))
    }

    /// The segment and offset of address `at`.
    fn locate(&self, at: u32) -> Option<(usize, usize)> {
        let seg = (at >> OFFSET_BITS) as usize;
        let off = (at & ((1 << OFFSET_BITS) - 1)) as usize;
        (seg < self.segs.len()).then_some((seg, off))
    }

    /// Where (in its segment) the entry packed at `at` ends, checked the way
    /// [`Packed::unpack`] checks it.
    fn entry_end(&self, at: u32) -> Option<usize> {
        self.walk(at, |_, _| {})
    }

    /// Walk the entry packed at `at`: `group(literal, zeros)` for each of its groups in order;
    /// returns where it ends in its segment, `None` when `at` is not an entry (a group past the
    /// segment, an empty group, lengths that do not add up to the entry's).
    fn walk(&self, at: u32, mut group: impl FnMut(&[u8], usize)) -> Option<usize> {
        let (seg, at) = self.locate(at)?;
        let b = &self.segs[seg];
        let read16 = |p: usize| -> Option<usize> {
            let s = b.get(p..p + 2)?;
            Some(usize::from(u16::from_ne_bytes([s[0], s[1]])))
        };
        let total = read16(at)?;
        let (mut pos, mut len) = (at + 2, 0);
        while len < total {
            let (literal, zeros) = (read16(pos)?, read16(pos + 2)?);
            if literal == 0 && zeros == 0 {
                return None; // not a packed entry: it would never end
            }
            pos += 4;
            group(b.get(pos..pos + literal)?, zeros);
            pos += literal;
            len += literal + zeros;
        }
        (len == total).then_some(pos)
    }

    /// The entry packed at `at`, as the kernel returned it; `None` when `at` is not one.
    pub fn unpack(&self, at: u32) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        self.walk(at, |literal, zeros| {
            out.extend_from_slice(literal);
            out.resize(out.len() + zeros, 0);
        })?;
        Some(out)
    }
}

/// The first run of at least [`MIN_ZEROS`] zero bytes, in whole 8-byte words from `from`, as
/// `(start, end)`; `(len, len)` when there is none. A tail shorter than a word is literal.
fn next_zeros(entry: &[u8], from: usize) -> (usize, usize) {
    let len = entry.len();
    let word_zero = |at: usize| entry[at..at + 8] == [0u8; 8];
    let mut at = from;
    while at + 8 <= len {
        if word_zero(at) {
            let mut end = at + 8;
            while end + 8 <= len && word_zero(end) {
                end += 8;
            }
            if end == len || end - at >= MIN_ZEROS {
                return (at, end);
            }
            at = end;
        } else {
            at += 8;
        }
    }
    (len, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(p: &mut Packed, entry: &[u8]) -> u32 {
        p.push(entry).unwrap().0
    }

    #[test]
    fn entries_come_back_as_they_went_in() {
        let mut p = Packed::default();
        let mut comment = vec![0u8; 40];
        comment[..8].copy_from_slice(b"\x01\x02\x03\x04\x05\x06\x07\x08");
        comment.extend_from_slice(b"ns/svc:http cluster IP\0\0");
        comment.resize(344, 0);
        comment[336] = 9;
        let cases: Vec<Vec<u8>> = vec![
            vec![],
            vec![0; 8],
            vec![0; 112],
            vec![7; 24],
            comment,
            // A tail shorter than a word, and lone zero words between literals.
            (0..77u8).map(|i| if i % 16 < 8 { 0 } else { i }).collect(),
        ];
        let ats: Vec<u32> = cases.iter().map(|c| at(&mut p, c)).collect();
        for (c, at) in cases.iter().zip(ats) {
            assert_eq!(p.unpack(at).as_ref(), Some(c));
        }
    }

    #[test]
    fn an_entry_copied_to_another_store_unpacks_the_same() {
        let (mut a, mut b) = (Packed::default(), Packed::default());
        let mut entry = vec![0u8; 344];
        entry[..24].copy_from_slice(&[3; 24]);
        entry[200] = 7;
        at(&mut a, &[9u8; 40]);
        let (there, size) = a.push(&entry).unwrap();
        let first = at(&mut b, &[1u8; 8]);
        assert_eq!(b.copy_from(&a, there), Some((first + 14, size)));
        assert_eq!(b.unpack(first + 14), Some(entry));
        assert_eq!(b.unpack(first), Some(vec![1u8; 8]));
        // Not an entry of `a`: nothing copied.
        let held = b.len();
        assert_eq!(b.copy_from(&a, 10_000), None);
        assert_eq!(b.copy_from(&a, 5 << OFFSET_BITS), None);
        assert_eq!(b.len(), held);
    }

    #[test]
    fn zeros_are_not_stored() {
        let mut p = Packed::default();
        let mut entry = vec![0u8; 600];
        entry[0] = 1;
        entry[300] = 2;
        let (first, size) = p.push(&entry).unwrap();
        // Length, two groups of one literal word each: 2 + 2 * (4 + 8).
        assert_eq!((p.len(), size), (26, 26));
        assert_eq!(p.unpack(first), Some(entry));
    }

    #[test]
    fn a_bad_offset_or_a_cut_store_is_none_not_a_panic() {
        let mut p = Packed::default();
        let first = at(&mut p, &[5u8; 64]);
        assert_eq!(p.unpack(1_000), None);
        assert_eq!(p.unpack(7 << OFFSET_BITS), None);
        // Inside an entry: garbage at worst, never the entry, a panic or a loop.
        assert_ne!(p.unpack(first + 1), Some(vec![5u8; 64]));
        Arc::get_mut(&mut p.segs[0])
            .unwrap()
            .extend_from_slice(&[8, 0, 0, 0, 0, 0]);
        assert_eq!(p.unpack(70), None);
        Arc::get_mut(&mut p.segs[0]).unwrap().truncate(10);
        assert_eq!(p.unpack(first), None);
    }

    #[test]
    fn a_shared_store_keeps_its_entries_where_they_are_and_adds_its_own_apart() {
        let mut old = Packed::default();
        let kept = at(&mut old, &[1u8; 64]);
        let dropped = at(&mut old, &[2u8; 64]);
        let mut new = old.sharing();
        let added = at(&mut new, &[3u8; 64]);
        // The old copy's entries answer at the same address in the new one; the new entry went
        // into a segment of its own, and the old copy does not see it.
        assert_eq!(new.unpack(kept), Some(vec![1u8; 64]));
        assert_eq!(new.unpack(dropped), Some(vec![2u8; 64]));
        assert_eq!(new.unpack(added), Some(vec![3u8; 64]));
        assert_ne!(added >> OFFSET_BITS, kept >> OFFSET_BITS);
        assert_eq!(old.unpack(added), None);
        assert_eq!(new.segments(), 2);
        // While the new copy still uses the shared segment, it is kept; once none of its
        // entries are used, it is let go (its index stays).
        new.release_unused([kept, added].into_iter());
        assert_eq!(new.unpack(kept), Some(vec![1u8; 64]));
        new.release_unused([added].into_iter());
        assert_eq!(new.unpack(kept), None);
        assert_eq!(new.unpack(added), Some(vec![3u8; 64]));
        assert_eq!(new.segments(), 2);
        assert_eq!(
            old.unpack(kept),
            Some(vec![1u8; 64]),
            "the old copy keeps its own"
        );
    }

    #[test]
    fn a_store_mostly_of_garbage_or_of_many_segments_is_not_worth_sharing() {
        let mut p = Packed::default();
        for _ in 0..100 {
            at(&mut p, &[9u8; 1000]);
        }
        let held = p.len();
        assert!(p.worth_sharing(held));
        assert!(p.worth_sharing(held / 4), "below a segment of garbage");
        let mut big = Packed::default();
        while big.segments() < 4 {
            at(&mut big, &[9u8; 60_000]);
        }
        assert!(big.worth_sharing(big.len() / 2));
        assert!(!big.worth_sharing(big.len() / 4));
        let mut many = Packed::default();
        for _ in 0..SPARE_SEGMENTS + 1 {
            many = many.sharing();
            at(&mut many, &[9u8; 8]);
        }
        assert!(!many.worth_sharing(many.len()));
    }

    #[test]
    fn segments_fill_up_to_their_size_and_addresses_stay_in_range() {
        let mut p = Packed::default();
        let entry = [7u8; 60_000];
        let ats: Vec<u32> = (0..40).map(|_| at(&mut p, &entry)).collect();
        assert!(p.segments() > 1);
        for a in ats {
            // Every entry starts below the segment's size, so it ends within the offset's range.
            assert!((a & ((1 << OFFSET_BITS) - 1)) < SEGMENT as u32);
            assert_eq!(p.unpack(a).as_deref(), Some(&entry[..]));
        }
    }
}
