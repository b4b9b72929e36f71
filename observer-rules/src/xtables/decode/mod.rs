//! Decode the kernel's x_tables structures: the `GET_INFO` reply and the `GET_ENTRIES` blob.
//!
//! The blob is a packed sequence of `ipt_entry` / `ip6t_entry` / `arpt_entry` records, each
//! followed by its matches (`xt_entry_match`) and one target (`xt_entry_target`). Everything is
//! read from byte slices with explicit bounds checks, so any input (a truncated read, a layout
//! this build does not know) gives an error instead of a panic. Layouts are those of
//! `include/uapi/linux/netfilter_{ipv4,ipv6,arp}/*_tables.h` on 64-bit kernels (x86_64, arm64);
//! they have not changed since the x_tables ABI was frozen.
//!
//! - `entry.rs`: one family's entry layout and the validated view of an entry, its matches and
//!   its target;
//! - `hash.rs`: the structural hash and which bytes of a payload it covers;
//! - `carry.rs`: a chain's key, and carrying the chains whose key did not change over from the
//!   last copy of the table;
//! - this file: the `GET_INFO` reply, the walk of a whole blob into chains and rules, and the
//!   rules' verdicts and fingerprints.
//!
//! The agent's `sockopt`, `render` and `ext` sit above it; it imports `bytes`, `packed`,
//! its three files and the `xtables` types.

use std::borrow::Cow;
use std::collections::HashMap;

use super::bytes::{cstr, u16_at, u32_at};
use super::packed::Packed;
use super::{Against, Verdict, XtChain, XtError, XtProto, XtRule, XtTable};

mod carry;
mod entry;
mod hash;

use carry::{chain_key, Earlier, Landing};
#[cfg(any(test, feature = "test-utils"))]
pub(crate) use entry::EXT_HEADER;
pub use entry::{layout, Layout};
use entry::{malformed, VERDICT_RETURN};
pub(crate) use entry::{Entry, Ext};
use hash::{trim_zeros, user_size, Fp};

/// Length of a table name field (`XT_TABLE_MAXNAMELEN`).
pub const TABLE_NAME_LEN: usize = 32;
/// Size of the `ipt_get_entries` header before `entrytable` (name, size, padding to 8).
pub const GET_ENTRIES_HEADER: usize = 40;
/// `IPSET_INVALID_ID`: an unused set slot.
pub(crate) const IPSET_INVALID_ID: u16 = 0xffff;

/// The `GET_INFO` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableInfo {
    pub name: String,
    pub valid_hooks: u32,
    /// Offset of each hook's first entry (only the first `layout.hooks` are meaningful).
    pub hook_entry: [u32; 5],
    /// Offset of each hook's policy entry.
    pub underflow: [u32; 5],
    pub num_entries: u32,
    /// Size of the entries blob in bytes.
    pub size: u32,
}

/// Parse a `struct ipt_getinfo` (or `arpt_getinfo`).
pub fn parse_info(proto: XtProto, b: &[u8]) -> Result<TableInfo, XtError> {
    let l = layout(proto);
    if b.len() < l.info_size {
        return Err(malformed(b.len(), "GET_INFO reply is too short"));
    }
    let field = |at: usize| u32_at(b, at).ok_or_else(|| malformed(at, "GET_INFO field"));
    let name = String::from_utf8_lossy(cstr(&b[..TABLE_NAME_LEN])).into_owned();
    let mut info = TableInfo {
        name,
        valid_hooks: field(32)?,
        hook_entry: [0; 5],
        underflow: [0; 5],
        num_entries: 0,
        size: 0,
    };
    let hooks_at = 36;
    let under_at = hooks_at + 4 * l.hooks;
    for h in 0..l.hooks {
        info.hook_entry[h] = field(hooks_at + 4 * h)?;
        info.underflow[h] = field(under_at + 4 * h)?;
    }
    info.num_entries = field(under_at + 4 * l.hooks)?;
    info.size = field(under_at + 4 * l.hooks + 4)?;
    Ok(info)
}

/// A chain while the blob is being walked: entries are indices into the offset list. Its name
/// is borrowed from the blob (or the hook names), and copied only for a chain decoded again.
struct ChainBuild<'b> {
    name: Cow<'b, str>,
    builtin: bool,
    /// The hook's underflow offset (builtin chains).
    underflow: Option<u32>,
    /// Offset where a jump into this chain lands.
    entry_offset: u32,
    /// Offset of the `ERROR` head of a user chain.
    head_offset: Option<u32>,
    first: usize,
    end: usize,
}

/// Decode a `GET_ENTRIES` blob (the entries only, without the `ipt_get_entries` header) with the
/// hook offsets of its `GET_INFO`.
#[cfg(test)]
pub fn decode_table(proto: XtProto, info: &TableInfo, blob: Vec<u8>) -> Result<XtTable, XtError> {
    decode_table_at(proto, info, blob, 0)
}

/// A table as the kernel returned it, before decoding.
#[derive(Debug, Clone)]
pub struct RawTable {
    /// The `GET_INFO` reply as bytes.
    pub info_bytes: Vec<u8>,
    pub info: TableInfo,
    /// The `GET_ENTRIES` answer: the `ipt_get_entries` header, then the entries.
    pub buf: Vec<u8>,
}

impl RawTable {
    /// The entries without the `ipt_get_entries` header.
    pub fn entries(&self) -> &[u8] {
        self.buf.get(GET_ENTRIES_HEADER..).unwrap_or(&[])
    }
}

/// Decode a table as the kernel's `GET_INFO` and `GET_ENTRIES` returned it, taking the chains
/// that did not change since the last copy of the same table from it.
pub fn decode_raw<'p>(
    proto: XtProto,
    raw: RawTable,
    against: impl Into<Against<'p>>,
) -> Result<XtTable, XtError> {
    decode_table_against(
        proto,
        &raw.info,
        raw.buf,
        GET_ENTRIES_HEADER,
        against.into(),
    )
}

/// Decode the table a writer handed to the kernel: a whole `ipt_replace` (`ip6t_replace`,
/// `arpt_replace`) with its entries, as `setsockopt(..._SO_SET_REPLACE)` got it. The header
/// gives what `GET_INFO` would (name, hooks, entry count, size) in another order: name, valid
/// hooks, entry count, size, hook entries, underflows, then the counter count and a pointer.
///
/// The chains that did not change since the last copy of the same table are taken from it
/// instead of being decoded again.
pub fn decode_replace<'p>(
    proto: XtProto,
    buf: Vec<u8>,
    against: impl Into<Against<'p>>,
) -> Result<XtTable, XtError> {
    let l = layout(proto);
    let field = |at: usize| u32_at(&buf, at).ok_or_else(|| malformed(at, "replace header"));
    let hooks_at = TABLE_NAME_LEN + 12;
    let under_at = hooks_at + 4 * l.hooks;
    // The counter count, then the counters pointer 8-byte aligned.
    let head = (under_at + 4 * l.hooks + 4).next_multiple_of(8) + 8;
    if buf.len() < head {
        return Err(malformed(
            buf.len(),
            "replace struct is shorter than its header",
        ));
    }
    let mut info = TableInfo {
        name: String::from_utf8_lossy(cstr(&buf[..TABLE_NAME_LEN])).into_owned(),
        valid_hooks: field(TABLE_NAME_LEN)?,
        hook_entry: [0; 5],
        underflow: [0; 5],
        num_entries: field(TABLE_NAME_LEN + 4)?,
        size: field(TABLE_NAME_LEN + 8)?,
    };
    for h in 0..l.hooks {
        info.hook_entry[h] = field(hooks_at + 4 * h)?;
        info.underflow[h] = field(under_at + 4 * h)?;
    }
    decode_table_against(proto, &info, buf, head, against.into())
}

/// The replace struct a writer would hand the kernel to install the table `info` describes
/// with these `entries` (what [`decode_replace`] reads), with no counters. For measuring
/// the decode of a writer's copy on a table read from the kernel.
pub fn replace_of(proto: XtProto, info: &TableInfo, entries: &[u8]) -> Vec<u8> {
    let l = layout(proto);
    let mut name = [0u8; TABLE_NAME_LEN];
    let n = info.name.len().min(TABLE_NAME_LEN - 1);
    name[..n].copy_from_slice(&info.name.as_bytes()[..n]);
    let mut out = name.to_vec();
    for v in [info.valid_hooks, info.num_entries, info.size] {
        out.extend_from_slice(&v.to_ne_bytes());
    }
    for v in info.hook_entry[..l.hooks]
        .iter()
        .chain(&info.underflow[..l.hooks])
    {
        out.extend_from_slice(&v.to_ne_bytes());
    }
    out.extend_from_slice(&0u32.to_ne_bytes());
    // The counters pointer, 8-byte aligned.
    out.resize(out.len().next_multiple_of(8) + 8, 0);
    out.extend_from_slice(entries);
    out
}

/// Decode the entries that start at `base` in `buf` (after the `ipt_get_entries` header, which
/// is not moved away: the blob can be megabytes) with the hook offsets of their `GET_INFO`. The
/// rules' entries are kept packed ([`Packed`]); `buf` is freed on return.
pub fn decode_table_at(
    proto: XtProto,
    info: &TableInfo,
    buf: Vec<u8>,
    base: usize,
) -> Result<XtTable, XtError> {
    decode_table_against(proto, info, buf, base, None.into())
}

/// [`decode_table_at`], taking each chain whose [key](chain_key) is the same in `prev` (the
/// last copy of this table) from `prev`: its rules' fingerprints and packed entries are carried
/// over, so a replace that changed one chain of 2,000 decodes one. A table with more rules than
/// `against.room` is held at chain level ([`chain_level`]).
pub(crate) fn decode_table_against(
    proto: XtProto,
    info: &TableInfo,
    buf: Vec<u8>,
    base: usize,
    against: Against<'_>,
) -> Result<XtTable, XtError> {
    let blob = buf.get(base..).unwrap_or(&[]);
    let l = layout(proto);
    if blob.len() != info.size as usize {
        return Err(malformed(blob.len(), "entries size differs from GET_INFO"));
    }
    let hook_names = proto.hook_names();
    let (offsets, builds) = find_chains(l, info, blob, hook_names)?;
    let landing = landings(&builds);
    // Each chain has one entry that is not a rule at most (a policy, a closing RETURN): a table
    // with fewer entries than that beside its rules fits, whatever the exact count.
    if offsets.len().saturating_sub(builds.len()) > against.room {
        let walked = Walked {
            l,
            blob,
            offsets: &offsets,
            builds: &builds,
            landing: &landing,
        };
        return chain_level(proto, info, &walked, against.prev);
    }
    let prev = against.prev;

    // Pass 2: rules, policies, fingerprints; or the previous copy's, for a chain that did not
    // change. The new copy shares the previous copy's entries (unchanged chains keep theirs
    // where they are) unless those are mostly what the previous copy no longer used.
    let names: Vec<&str> = builds.iter().map(|b| &*b.name).collect();
    let shared = prev.filter(|p| p.entries.worth_sharing(p.live));
    let earlier = prev.map(|p| Earlier::new(p, &names, shared.is_some()));
    let mut set_refs = Vec::new();
    let mut packed = shared.map_or_else(Packed::default, |p| p.entries.sharing());
    let mut chains = Vec::with_capacity(builds.len());
    let mut carried = 0;
    for (at, b) in builds.iter().enumerate() {
        let idx = &offsets[b.first..b.end];
        let (rules_idx, policy) = policy_of(l, blob, b, idx)?;
        let key = chain_key(l, blob, rules_idx, &landing, &names);
        if let Some(c) = earlier
            .as_ref()
            .and_then(|e| e.carry_over(at, &b.name, b.builtin, key, &policy, &mut packed))
        {
            set_refs.extend_from_slice(&c.sets);
            chains.push(c);
            carried += 1;
            continue;
        }
        let c = decode_chain(l, blob, b, idx, &landing, &builds, key, &mut packed)?;
        set_refs.extend_from_slice(&c.sets);
        chains.push(std::sync::Arc::new(c));
    }
    set_refs.sort_unstable();
    set_refs.dedup();
    packed.release_unused(
        chains
            .iter()
            .flat_map(|c| c.rules.iter().map(|r| r.packed_at)),
    );
    Ok(XtTable {
        proto,
        name: info.name.clone(),
        live: chains.iter().map(|c| c.kept).sum(),
        chains,
        entries: packed,
        set_refs,
        set_names: HashMap::new(),
        carried,
        chain_level: false,
    })
}

/// A blob walked by pass 1: its entries' offsets, its chains and where jumps land.
struct Walked<'w, 'b> {
    l: &'static Layout,
    blob: &'b [u8],
    offsets: &'w [u32],
    builds: &'w [ChainBuild<'b>],
    landing: &'w Landing,
}

/// A table held at chain level: each chain's name, policy, key and rule count, no rules. Reads
/// each entry's bytes once (for the key) and keeps nothing of them. A chain that is the same in
/// `prev` (held at chain level too) is `prev`'s.
fn chain_level(
    proto: XtProto,
    info: &TableInfo,
    w: &Walked,
    prev: Option<&XtTable>,
) -> Result<XtTable, XtError> {
    let Walked {
        l,
        blob,
        offsets,
        builds,
        landing,
    } = *w;
    let names: Vec<&str> = builds.iter().map(|b| &*b.name).collect();
    let prev = prev.filter(|p| p.chain_level);
    let same_order = prev.is_some_and(|p| p.has_chains_named(names.iter().copied()));
    let by_name: foldhash::HashMap<&str, &std::sync::Arc<XtChain>> = match prev {
        Some(p) if !same_order => p.chains.iter().map(|c| (c.name.as_str(), c)).collect(),
        _ => Default::default(),
    };
    let mut chains = Vec::with_capacity(builds.len());
    let mut chains_carried = 0;
    for (at, b) in builds.iter().enumerate() {
        let idx = &offsets[b.first..b.end];
        let (rules_idx, policy) = policy_of(l, blob, b, idx)?;
        let key = chain_key(l, blob, rules_idx, landing, &names);
        let mut count = idx.len() - usize::from(policy.is_some());
        if let (false, Some(&last)) = (b.builtin, idx.last()) {
            if Entry::at(l, blob, last as usize)?.is_unconditional_return() {
                count -= 1;
            }
        }
        let old = match prev {
            Some(p) if same_order => p.chains.get(at),
            _ => by_name.get(&*b.name).copied(),
        };
        if let Some(old) = old.filter(|o| {
            (o.key, o.count, o.builtin, &o.policy) == (key, count, b.builtin, &policy)
                && o.name == b.name
        }) {
            chains.push(std::sync::Arc::clone(old));
            chains_carried += 1;
            continue;
        }
        chains.push(std::sync::Arc::new(XtChain {
            name: b.name.to_string(),
            builtin: b.builtin,
            policy,
            rules: Vec::new(),
            count,
            key,
            sets: Vec::new(),
            kept: 0,
        }));
    }
    Ok(XtTable {
        proto,
        name: info.name.clone(),
        chains,
        entries: Packed::default(),
        set_refs: Vec::new(),
        set_names: HashMap::new(),
        carried: chains_carried,
        live: 0,
        chain_level: true,
    })
}

/// Pass 1 of decoding: every entry's offset and the chains' boundaries, checked against
/// `GET_INFO` (entry count, hook offsets) and for the final `ERROR` entry.
fn find_chains<'b>(
    l: &'static Layout,
    info: &TableInfo,
    blob: &'b [u8],
    hook_names: &[&'static str],
) -> Result<(Vec<u32>, Vec<ChainBuild<'b>>), XtError> {
    let mut offsets: Vec<u32> = Vec::with_capacity(info.num_entries.min(1 << 20) as usize);
    let mut builds: Vec<ChainBuild> = Vec::new();
    let mut ended = false;
    let mut off = 0usize;
    while off < blob.len() {
        let e = Entry::at(l, blob, off)?;
        let off32 = u32::try_from(off).map_err(|_| malformed(off, "blob too large"))?;
        let hook =
            (0..l.hooks).find(|&h| info.valid_hooks & (1 << h) != 0 && info.hook_entry[h] == off32);
        let next = off + e.next_offset();
        if let Some(h) = hook {
            if let Some(c) = builds.last_mut() {
                c.end = offsets.len();
            }
            builds.push(ChainBuild {
                name: Cow::Borrowed(hook_names.get(h).copied().unwrap_or("?")),
                builtin: true,
                underflow: Some(info.underflow[h]),
                entry_offset: off32,
                head_offset: None,
                first: offsets.len(),
                end: offsets.len(),
            });
        } else if let Some(name) = e.error_name() {
            if let Some(c) = builds.last_mut() {
                c.end = offsets.len();
            }
            if next >= blob.len() {
                // The final ERROR entry ends the table.
                ended = true;
                break;
            }
            let next32 = u32::try_from(next).map_err(|_| malformed(off, "blob too large"))?;
            builds.push(ChainBuild {
                name: String::from_utf8_lossy(name),
                builtin: false,
                underflow: None,
                entry_offset: next32,
                head_offset: Some(off32),
                first: offsets.len(),
                end: offsets.len(),
            });
            off = next;
            continue;
        } else if builds.is_empty() {
            // Entries before the first hook are unreachable; keep them visible anyway.
            builds.push(ChainBuild {
                name: Cow::Owned(format!("?unreachable@{off}")),
                builtin: false,
                underflow: None,
                entry_offset: off32,
                head_offset: None,
                first: offsets.len(),
                end: offsets.len(),
            });
        }
        offsets.push(off32);
        off = next;
    }
    if !ended {
        return Err(malformed(off, "table does not end with an ERROR entry"));
    }
    if offsets.len() + builds.iter().filter(|b| b.head_offset.is_some()).count() + 1
        != info.num_entries as usize
    {
        return Err(malformed(0, "entry count differs from GET_INFO"));
    }
    for h in (0..l.hooks).filter(|h| info.valid_hooks & (1 << h) != 0) {
        for at in [info.hook_entry[h], info.underflow[h]] {
            if offsets.binary_search(&at).is_err() {
                return Err(malformed(at as usize, "hook offset is not an entry"));
            }
        }
    }
    Ok((offsets, builds))
}

/// Where jumps land: a user chain's first entry (or its head), a builtin's first entry; the
/// chain's index for each.
fn landings(builds: &[ChainBuild]) -> Landing {
    let mut landing = Landing::with_capacity(builds.len() * 2);
    for (i, b) in builds.iter().enumerate() {
        if let Some(h) = b.head_offset {
            landing.insert(h, i as u32);
        }
        landing.insert(b.entry_offset, i as u32);
    }
    landing
}

/// A chain's entries but its policy (the entries its [key](chain_key) covers: a policy is
/// compared as it is), and its policy: a built-in chain's `underflow` entry. A chain whose
/// policy entry is not its last (never written by iptables) keeps it among the others.
fn policy_of<'i>(
    l: &'static Layout,
    blob: &[u8],
    b: &ChainBuild,
    idx: &'i [u32],
) -> Result<(&'i [u32], Option<String>), XtError> {
    let Some(under) = b.underflow.filter(|u| idx.contains(u)) else {
        if b.builtin {
            return Err(malformed(
                b.entry_offset as usize,
                "builtin chain has no policy",
            ));
        }
        return Ok((idx, None));
    };
    let policy = Some(policy_name(
        Entry::at(l, blob, under as usize)?.standard_verdict(),
    ));
    match idx.split_last() {
        Some((&last, rest)) if last == under => Ok((rest, policy)),
        _ => Ok((idx, policy)),
    }
}

/// Pass 2 for one chain that must be decoded: its rules (verdicts, fingerprints, packed
/// entries), its policy and the ipsets it refers to.
#[allow(
    clippy::too_many_arguments,
    reason = "the decode's state, passed as it is"
)]
fn decode_chain(
    l: &'static Layout,
    blob: &[u8],
    b: &ChainBuild,
    idx: &[u32],
    landing: &Landing,
    builds: &[ChainBuild],
    key: u64,
    packed: &mut Packed,
) -> Result<XtChain, XtError> {
    let mut policy = None;
    let mut rules = Vec::with_capacity(b.end - b.first);
    let mut sets = Vec::new();
    let mut kept = 0;
    for (k, &off) in idx.iter().enumerate() {
        let e = Entry::at(l, blob, off as usize)?;
        if b.underflow == Some(off) {
            policy = Some(policy_name(e.standard_verdict()));
            continue;
        }
        if !b.builtin && k + 1 == idx.len() && e.is_unconditional_return() {
            continue;
        }
        let verdict = classify(&e, off, landing);
        let fingerprint = fingerprint(l, &e, verdict, builds, &mut sets);
        let (packed_at, size) = packed
            .push(e.bytes)
            .ok_or_else(|| malformed(off as usize, "table too large to keep"))?;
        kept += size;
        rules.push(XtRule {
            fingerprint,
            packed_at,
            verdict,
        });
    }
    if b.builtin && policy.is_none() {
        return Err(malformed(
            b.entry_offset as usize,
            "builtin chain has no policy",
        ));
    }
    sets.sort_unstable();
    sets.dedup();
    Ok(XtChain {
        name: b.name.to_string(),
        builtin: b.builtin,
        policy,
        count: rules.len(),
        rules,
        key,
        sets,
        kept,
    })
}

/// The name of a standard verdict (`-j ACCEPT`, a policy).
pub(crate) fn verdict_name(v: i32) -> Option<&'static str> {
    Some(match v {
        -1 => "DROP",
        -2 => "ACCEPT",
        -3 => "STOLEN",
        -4 => "QUEUE",
        VERDICT_RETURN => "RETURN",
        _ => return None,
    })
}

fn policy_name(v: Option<i32>) -> String {
    match v {
        Some(v) => match verdict_name(v) {
            Some(n) => n.to_string(),
            None => format!("verdict({v})"),
        },
        None => "?".to_string(),
    }
}

fn classify(e: &Entry<'_>, off: u32, landing: &Landing) -> Verdict {
    let Some(v) = e.standard_verdict() else {
        return Verdict::Extension;
    };
    if v < 0 {
        return Verdict::Standard(v);
    }
    if v as u64 == u64::from(off) + e.next_offset() as u64 {
        return Verdict::Fallthrough;
    }
    match landing.get(&(v as u32)) {
        Some(&chain) => Verdict::Jump {
            chain,
            goto: e.is_goto(),
        },
        None => Verdict::BadJump(v),
    }
}

fn fingerprint(
    l: &Layout,
    e: &Entry<'_>,
    verdict: Verdict,
    builds: &[ChainBuild],
    set_refs: &mut Vec<u16>,
) -> u64 {
    let mut h = Fp(0x6f62_7365_7276_6572);
    let header = e.header();
    for &(a, b) in l.identity {
        h.bytes(&header[a..b]);
    }
    for m in e.matches() {
        h.bytes(m.name);
        h.word(u64::from(m.revision));
        let n = user_size(m.name, m.revision, false).map_or(m.data.len(), |n| n.min(m.data.len()));
        h.bytes(trim_zeros(&m.data[..n]));
        if m.is("set") && (1..=4).contains(&m.revision) {
            set_refs.extend(u16_at(m.data, 0).filter(|&i| i != IPSET_INVALID_ID));
        }
    }
    let t = e.target();
    h.bytes(t.name);
    h.word(u64::from(t.revision));
    match verdict {
        Verdict::Extension => {
            let n =
                user_size(t.name, t.revision, true).map_or(t.data.len(), |n| n.min(t.data.len()));
            h.bytes(trim_zeros(&t.data[..n]));
            if t.is("SET") && (1..=3).contains(&t.revision) {
                // add, del and (revision 3) map set; then flags and timeout.
                let slots: &[usize] = if t.revision == 3 { &[0, 4, 8] } else { &[0, 4] };
                for &at in slots {
                    set_refs.extend(u16_at(t.data, at).filter(|&i| i != IPSET_INVALID_ID));
                }
            }
        }
        Verdict::Standard(v) => {
            h.word(1);
            h.word(v as u32 as u64);
        }
        Verdict::Jump { chain, goto } => {
            h.word(2);
            h.word(u64::from(goto));
            let name = builds.get(chain as usize).map_or("", |b| &*b.name);
            h.bytes(name.as_bytes());
        }
        Verdict::Fallthrough => h.word(3),
        Verdict::BadJump(v) => {
            h.word(4);
            h.word(v as u32 as u64);
        }
    }
    h.finish()
}
