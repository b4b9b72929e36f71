//! ebtables (ebtables-legacy): decode a bridge table as the kernel returns it
//! (`EBT_SO_GET_ENTRIES`, the same blob `EBT_SO_SET_REPLACE` takes and an `--atomic-file`
//! holds after its `struct ebt_replace`), render each rule as `ebtables-legacy-save` prints it,
//! and diff two copies into chain and rule changes. The agent reads the table from the kernel
//! (`EBT_SO_GET_INFO`, `EBT_SO_GET_ENTRIES`) and hands its bytes to [`decode_table`].
//!
//! The layout (`include/uapi/linux/netfilter_bridge/ebtables.h`): the entries are a sequence of
//! chains, each a `struct ebt_entries` (48 bytes: distinguisher 0, name, counter offset,
//! policy, rule count) followed by its rules, each a `struct ebt_entry` (112 bytes: bitmask
//! with bit 0 set, inverse flags, ethertype, four interface names, source and destination MAC
//! with masks, then the offsets of its watchers, target and next entry, all from the entry's
//! start). Between the header and the watchers sit the matches, then the watchers, then one
//! target; each extension is a 32-byte name, a 4-byte size and its data 8-byte aligned at 40.
//! Built-in chains come first, in hook order; user chains follow. A standard target's verdict
//! is -1 ACCEPT, -2 DROP, -3 CONTINUE, -4 RETURN, or the byte offset of the chain jumped to.
//!
//! Rendering follows ebtables 2.0.11's listing (`ebtables -L`, which `ebtables-legacy-save`
//! copies with `-A CHAIN` before it and the trailing blank removed): the header fields, the
//! matches, the watchers, then `-j TARGET` and the target's options. Extensions it does not
//! know print as `-m NAME [data 0x...]` (`-j NAME [data 0x...]` for a target), so nothing in a
//! rule is dropped. Decoding never panics: a short or inconsistent blob is an
//! [`XtError::Malformed`].

use std::hash::BuildHasher as _;

use super::XtError;

mod diff;
mod render;

pub use diff::diff;
use render::{render_entry, verdict_name};

const ENTRIES_LEN: usize = 48;
const ENTRY_LEN: usize = 112;
const EXT_HEAD: usize = 40;
/// `struct ebt_replace` on 64-bit (the info `EBT_SO_GET_INFO` returns, the atomic file's head).
pub const REPLACE_LEN: usize = 120;

/// The hooks of a bridge table, in `valid_hooks` bit order (`NF_BR_*`).
const HOOKS: [&str; 6] = [
    "PREROUTING",
    "INPUT",
    "FORWARD",
    "OUTPUT",
    "POSTROUTING",
    "BROUTING",
];

/// One ebtables table as decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EbTable {
    pub name: String,
    /// Built-in chains in hook order, then user chains.
    pub chains: Vec<EbChain>,
}

/// One chain of an [`EbTable`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EbChain {
    pub name: String,
    pub builtin: bool,
    /// ebtables gives every chain a policy (user chains too: RETURN unless set).
    pub policy: String,
    pub rules: Vec<EbRule>,
}

/// One rule, rendered at decode time (ebtables tables are small).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EbRule {
    /// The rule as `ebtables-legacy-save` prints it, without `-A CHAIN `.
    pub text: String,
    /// A hash of the text: what the diff compares.
    pub fingerprint: u64,
}

/// The parts of `struct ebt_replace` decoding needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EbInfo {
    pub valid_hooks: u32,
    pub nentries: u32,
    pub entries_size: u32,
}

fn malformed(offset: usize, reason: &'static str) -> XtError {
    XtError::Malformed { offset, reason }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn be16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// A NUL-terminated name in a fixed field.
fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The name, valid hooks, entry count and entries' size of a `struct ebt_replace`.
pub fn parse_info(b: &[u8]) -> Result<(String, EbInfo), XtError> {
    if b.len() < REPLACE_LEN {
        return Err(malformed(b.len(), "ebt_replace shorter than 120 bytes"));
    }
    let name = cstr(&b[..32]);
    let info = EbInfo {
        valid_hooks: u32_at(b, 32).unwrap_or(0),
        nentries: u32_at(b, 36).unwrap_or(0),
        entries_size: u32_at(b, 40).unwrap_or(0),
    };
    Ok((name, info))
}

/// Decode an atomic file (`ebtables --atomic-file`): the `struct ebt_replace`, the entries,
/// then the counters.
pub fn decode_atomic(b: &[u8]) -> Result<EbTable, XtError> {
    let (name, info) = parse_info(b)?;
    let end = REPLACE_LEN
        .checked_add(info.entries_size as usize)
        .filter(|&e| e <= b.len())
        .ok_or_else(|| malformed(b.len(), "entries_size runs past the end"))?;
    decode_table(&name, &info, &b[REPLACE_LEN..end])
}

/// Decode the entries of table `name`.
pub fn decode_table(name: &str, info: &EbInfo, entries: &[u8]) -> Result<EbTable, XtError> {
    if entries.len() != info.entries_size as usize {
        return Err(malformed(
            entries.len(),
            "entries_size does not match the data",
        ));
    }
    let hooks: Vec<&str> = (0..HOOKS.len())
        .filter(|h| info.valid_hooks & (1 << h) != 0)
        .map(|h| HOOKS[h])
        .collect();
    // First pass: where each chain starts, and its rules' offsets.
    struct Raw {
        at: usize,
        name: String,
        policy: i32,
        rules: Vec<usize>,
    }
    let mut raws: Vec<Raw> = Vec::new();
    let mut at = 0usize;
    let mut seen_entries = 0u32;
    while at < entries.len() {
        let bitmask = u32_at(entries, at).ok_or_else(|| malformed(at, "truncated entry"))?;
        if bitmask & 1 == 0 {
            if entries.len() - at < ENTRIES_LEN {
                return Err(malformed(at, "truncated ebt_entries"));
            }
            let name = cstr(&entries[at + 4..at + 36]);
            let policy = i32_at(entries, at + 40).unwrap_or(0);
            let n = u32_at(entries, at + 44).unwrap_or(0);
            raws.push(Raw {
                at,
                name,
                policy,
                rules: Vec::with_capacity(n.min(4096) as usize),
            });
            at += ENTRIES_LEN;
            continue;
        }
        let chain = raws
            .last_mut()
            .ok_or_else(|| malformed(at, "rule before any chain"))?;
        if entries.len() - at < ENTRY_LEN {
            return Err(malformed(at, "truncated ebt_entry"));
        }
        let next = u32_at(entries, at + 108).unwrap_or(0) as usize;
        if next < ENTRY_LEN || next > entries.len() - at {
            return Err(malformed(at + 108, "bad next_offset"));
        }
        chain.rules.push(at);
        seen_entries += 1;
        at += next;
    }
    if seen_entries != info.nentries {
        return Err(malformed(at, "rule count differs from nentries"));
    }
    if raws.len() < hooks.len() {
        return Err(malformed(at, "fewer chains than valid hooks"));
    }
    let names: Vec<(usize, String)> = raws.iter().map(|r| (r.at, r.name.clone())).collect();
    let mut chains = Vec::with_capacity(raws.len());
    for (i, r) in raws.iter().enumerate() {
        let declared = u32_at(entries, r.at + 44).unwrap_or(0) as usize;
        if declared != r.rules.len() {
            return Err(malformed(
                r.at + 44,
                "chain's nentries differs from its rules",
            ));
        }
        let mut rules = Vec::with_capacity(r.rules.len());
        for &e in &r.rules {
            let text = render_entry(entries, e, &names)?;
            let fingerprint = foldhash::fast::FixedState::with_seed(0).hash_one(&text);
            rules.push(EbRule { text, fingerprint });
        }
        let builtin = i < hooks.len();
        chains.push(EbChain {
            name: if r.name.is_empty() && builtin {
                hooks[i].to_string()
            } else {
                r.name.clone()
            },
            builtin,
            policy: verdict_name(r.policy).unwrap_or("?").to_string(),
            rules,
        });
    }
    Ok(EbTable {
        name: name.to_string(),
        chains,
    })
}

impl EbTable {
    /// The `:CHAIN POLICY` and `-A CHAIN rule` lines, as `ebtables-legacy-save` prints them.
    pub fn save_lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .chains
            .iter()
            .map(|c| format!(":{} {}", c.name, c.policy))
            .collect();
        for c in &self.chains {
            for r in &c.rules {
                out.push(format!("-A {} {}", c.name, r.text));
            }
        }
        out
    }
}
