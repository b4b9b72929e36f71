//! Carrying a table's unchanged chains over from its last copy: a chain's key ([`chain_key`],
//! a hash of its entries as they define its rules) and the previous copy's chains by name
//! ([`Earlier`]), whose rules are taken as they are when the key did not change.
//!
//! Below the table walk in [`decode`](super), which computes every chain's key and asks
//! [`Earlier::carry_over`] before decoding a chain; it imports `bytes`, `packed`, the entry
//! layout and the `xtables` types.

use std::sync::Arc;

use super::entry::{Layout, EXT_HEADER, EXT_NAME_LEN};
use crate::xtables::bytes::{i32_at, u16_at};
use crate::xtables::packed::Packed;
use crate::xtables::{Verdict, XtChain, XtRule, XtTable};

/// Where jumps land: entry offset -> chain index, for the offsets where a chain starts (its
/// head, its first entry). Kept as a list sorted by offset (the chains come in table order, so
/// it is built sorted) and searched: a 160,004-chain table's map took 10 MB more.
#[derive(Debug, Default)]
pub(super) struct Landing {
    at: Vec<(u32, u32)>,
}

impl Landing {
    pub(super) fn with_capacity(n: usize) -> Self {
        Landing {
            at: Vec::with_capacity(n),
        }
    }

    /// Chain `chain` starts at `offset`; a second chain said to start at the same offset is
    /// not kept (the first one is where a jump there lands).
    pub(super) fn insert(&mut self, offset: u32, chain: u32) {
        match self.at.last() {
            Some(&(last, _)) if last >= offset => {
                if self.get(&offset).is_none() {
                    let at = self.at.partition_point(|&(o, _)| o < offset);
                    self.at.insert(at, (offset, chain));
                }
            }
            _ => self.at.push((offset, chain)),
        }
    }

    /// The chain that starts at `offset`.
    pub(super) fn get(&self, offset: &u32) -> Option<&u32> {
        let at = self.at.partition_point(|&(o, _)| o < *offset);
        match self.at.get(at) {
            Some((o, c)) if o == offset => Some(c),
            _ => None,
        }
    }
}

/// The chains of the previous copy of a table, to carry the unchanged ones over.
pub(super) struct Earlier<'p> {
    table: &'p XtTable,
    /// The new copy has the previous copy's chains, by name, in the same order (a replace that
    /// rewrote rules, not chains): a chain is found at its own index and its jumps keep theirs,
    /// and the maps below stay empty.
    same_order: bool,
    /// The new copy's store shares the previous copy's segments: a chain carried over keeps its
    /// entries where they are (else they are copied).
    shared: bool,
    /// Previous chains by name; `None` for a name held by more than one chain (such chains
    /// are decoded).
    by_name: foldhash::HashMap<&'p str, Option<&'p Arc<XtChain>>>,
    /// The new copy's chains by name (the first of a name), where jumps are pointed again.
    index: foldhash::HashMap<&'p str, u32>,
}

impl<'p> Earlier<'p> {
    /// `names`: the new copy's chains, in order; `shared`: see [`Earlier::shared`].
    pub(super) fn new(table: &'p XtTable, names: &[&'p str], shared: bool) -> Self {
        let same_order = table.has_chains_named(names.iter().copied());
        if same_order {
            return Earlier {
                table,
                same_order,
                shared,
                by_name: Default::default(),
                index: Default::default(),
            };
        }
        let mut by_name: foldhash::HashMap<&str, Option<&Arc<XtChain>>> =
            foldhash::HashMap::with_capacity_and_hasher(table.chains.len(), Default::default());
        for c in &table.chains {
            by_name
                .entry(c.name.as_str())
                .and_modify(|twice| *twice = None)
                .or_insert(Some(c));
        }
        let mut index: foldhash::HashMap<&str, u32> =
            foldhash::HashMap::with_capacity_and_hasher(names.len(), Default::default());
        for (i, name) in names.iter().enumerate() {
            index.entry(*name).or_insert(i as u32);
        }
        Earlier {
            table,
            same_order,
            shared,
            by_name,
            index,
        }
    }

    /// The previous copy of chain `at` (named `name`) of the new copy when its key is `key`
    /// and its policy `policy` there too, its entries kept where they are (or copied into `packed`, when it shares
    /// nothing) and its jumps pointed at the new copy's chains; `None` to decode it. With the
    /// same chains in the same order and the entries shared, it is the previous copy's chain
    /// itself.
    pub(super) fn carry_over(
        &self,
        at: usize,
        name: &str,
        builtin: bool,
        key: u64,
        policy: &Option<String>,
        packed: &mut Packed,
    ) -> Option<Arc<XtChain>> {
        let old = if self.same_order {
            self.table.chains.get(at)?
        } else {
            (*self.by_name.get(name)?)?
        };
        if old.key != key
            || old.builtin != builtin
            || old.policy != *policy
            || self.table.chain_level
        {
            return None;
        }
        if self.same_order && self.shared {
            return Some(Arc::clone(old));
        }
        let mut rules = Vec::with_capacity(old.rules.len());
        for r in &old.rules {
            let verdict = match r.verdict {
                // The same chains at the same places: the index is right as it is.
                Verdict::Jump { .. } if self.same_order => r.verdict,
                Verdict::Jump { chain, goto } => {
                    let name = self.table.chains.get(chain as usize)?.name.as_str();
                    Verdict::Jump {
                        chain: *self.index.get(name)?,
                        goto,
                    }
                }
                v => v,
            };
            let packed_at = if self.shared {
                r.packed_at
            } else {
                packed.copy_from(&self.table.entries, r.packed_at)?.0
            };
            rules.push(XtRule {
                fingerprint: r.fingerprint,
                packed_at,
                verdict,
            });
        }
        Some(Arc::new(XtChain {
            name: name.to_string(),
            builtin,
            policy: old.policy.clone(),
            count: rules.len(),
            rules,
            key,
            sets: old.sets.clone(),
            kept: old.kept,
        }))
    }
}

/// A hash of a chain's entries (`idx`, the policy's included) as they define its rules: every
/// byte of each entry but `comefrom` and the counters (which the kernel and the writer fill as
/// they like), with a jump's target (an offset, which moves when an earlier chain grows)
/// replaced by the name of the chain it lands in. Reads each entry's bytes once, decoding
/// nothing: entries that pass 1 walked, so their sizes are known to fit.
pub(super) fn chain_key(
    l: &Layout,
    blob: &[u8],
    idx: &[u32],
    landing: &Landing,
    names: &[&str],
) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = foldhash::fast::FixedState::with_seed(0x6b65_7973).build_hasher();
    h.write_usize(idx.len());
    // The entry header up to `next_offset`; what follows it up to the first match is
    // `comefrom` and the counters.
    let header = l.next_offset_at + 2;
    for &off in idx {
        let at = off as usize;
        let (Some(next), Some(target)) = (
            u16_at(blob, at + l.next_offset_at),
            u16_at(blob, at + l.target_offset_at),
        ) else {
            h.write_u8(0xff);
            continue;
        };
        let e = blob.get(at..at + usize::from(next)).unwrap_or(&[]);
        let target = usize::from(target);
        let (Some(head), Some(matches), Some(t)) = (
            e.get(..header),
            e.get(l.entry_size..target),
            e.get(target..),
        ) else {
            h.write(e);
            continue;
        };
        h.write(head);
        h.write(matches);
        // A standard target: no name, then the verdict.
        let standard = t.len() >= EXT_HEADER + 4 && t[2..2 + EXT_NAME_LEN].iter().all(|&c| c == 0);
        match standard.then(|| i32_at(t, EXT_HEADER)).flatten() {
            Some(v) if v >= 0 => {
                h.write(&t[..EXT_HEADER]);
                if v as u64 == u64::from(off) + u64::from(next) {
                    h.write_u8(1);
                } else if let Some(&c) = landing.get(&(v as u32)) {
                    h.write_u8(2);
                    h.write(names.get(c as usize).map_or(&b""[..], |n| n.as_bytes()));
                    h.write_u8(0);
                } else {
                    h.write_u8(3);
                    h.write_i32(v);
                }
            }
            _ => h.write(t),
        }
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::Landing;

    #[test]
    fn landing_finds_where_each_chain_starts_and_the_first_chain_of_an_offset_wins() {
        let mut l = Landing::with_capacity(8);
        for (offset, chain) in [(0, 0), (152, 1), (304, 1), (456, 2), (304, 7), (100, 9)] {
            l.insert(offset, chain);
        }
        assert_eq!(l.get(&0), Some(&0));
        assert_eq!(l.get(&304), Some(&1), "the first chain said to start there");
        assert_eq!(l.get(&100), Some(&9), "out of order, still found");
        assert_eq!(l.get(&456), Some(&2));
        for missing in [1, 99, 153, 500, u32::MAX] {
            assert_eq!(l.get(&missing), None);
        }
    }
}
