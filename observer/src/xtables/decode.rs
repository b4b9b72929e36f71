//! Decode the kernel's x_tables structures: the `GET_INFO` reply and the `GET_ENTRIES` blob.
//!
//! The blob is a packed sequence of `ipt_entry` / `ip6t_entry` / `arpt_entry` records, each
//! followed by its matches (`xt_entry_match`) and one target (`xt_entry_target`). Everything is
//! read from byte slices with explicit bounds checks, so any input (a truncated read, a layout
//! this build does not know) gives an error instead of a panic. Layouts are those of
//! `include/uapi/linux/netfilter_{ipv4,ipv6,arp}/*_tables.h` on 64-bit kernels (x86_64, arm64);
//! they have not changed since the x_tables ABI was frozen.

use std::collections::HashMap;

use super::bytes::{cstr, i32_at, u16_at, u32_at};
use super::packed::Packed;
use super::{Verdict, XtChain, XtError, XtProto, XtRule, XtTable};

/// Size of the `xt_entry_match` / `xt_entry_target` header (`u16 size; char name[29]; u8 rev`).
pub(crate) const EXT_HEADER: usize = 32;
/// Length of an extension name field (`XT_EXTENSION_MAXNAMELEN`).
const EXT_NAME_LEN: usize = 29;
/// Length of a table name field (`XT_TABLE_MAXNAMELEN`).
pub(crate) const TABLE_NAME_LEN: usize = 32;
/// Size of the `ipt_get_entries` header before `entrytable` (name, size, padding to 8).
pub(crate) const GET_ENTRIES_HEADER: usize = 40;
/// `IPSET_INVALID_ID`: an unused set slot.
pub(crate) const IPSET_INVALID_ID: u16 = 0xffff;
/// `XT_RETURN`: the verdict of a user chain's final entry.
pub(crate) const VERDICT_RETURN: i32 = -5;

/// Where the fields of one family's entry live.
#[derive(Debug)]
pub(crate) struct Layout {
    /// `sizeof(struct ipt_entry)` etc.: where the first match starts.
    pub entry_size: usize,
    pub target_offset_at: usize,
    pub next_offset_at: usize,
    /// `sizeof(struct ipt_getinfo)` etc.
    pub info_size: usize,
    /// Number of `hook_entry`/`underflow` slots.
    pub hooks: usize,
    /// Byte ranges of the entry header that define the rule (the `ipt_ip` part without its
    /// padding); `nfcache`, `comefrom` and the counters are left out.
    pub identity: &'static [(usize, usize)],
    /// (byte, bit) of the "this jump is a goto" flag.
    pub goto_flag: Option<(usize, u8)>,
}

static IPV4: Layout = Layout {
    entry_size: 112,
    target_offset_at: 88,
    next_offset_at: 90,
    info_size: 84,
    hooks: 5,
    identity: &[(0, 84)],
    goto_flag: Some((82, 0x02)),
};

static IPV6: Layout = Layout {
    entry_size: 168,
    target_offset_at: 140,
    next_offset_at: 142,
    info_size: 84,
    hooks: 5,
    identity: &[(0, 133)],
    goto_flag: Some((131, 0x04)),
};

static ARP: Layout = Layout {
    entry_size: 192,
    target_offset_at: 164,
    next_offset_at: 166,
    info_size: 68,
    hooks: 3,
    identity: &[(0, 159), (160, 162)],
    goto_flag: None,
};

pub(crate) fn layout(proto: XtProto) -> &'static Layout {
    match proto {
        XtProto::Ipv4 => &IPV4,
        XtProto::Ipv6 => &IPV6,
        XtProto::Arp => &ARP,
    }
}

fn malformed(offset: usize, reason: &'static str) -> XtError {
    XtError::Malformed { offset, reason }
}

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

/// One extension (match or target) inside an entry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ext<'a> {
    pub name: &'a [u8],
    pub revision: u8,
    /// The payload after the 32-byte header, `size - 32` bytes.
    pub data: &'a [u8],
}

impl Ext<'_> {
    /// Parse the extension at the start of `b`; `b` must hold at least its declared size.
    fn parse(b: &[u8]) -> Option<(Ext<'_>, usize)> {
        let size = usize::from(u16_at(b, 0)?);
        if size < EXT_HEADER || size > b.len() {
            return None;
        }
        let ext = Ext {
            name: cstr(&b[2..2 + EXT_NAME_LEN]),
            revision: b[EXT_HEADER - 1],
            data: &b[EXT_HEADER..size],
        };
        Some((ext, size))
    }

    pub fn is(&self, name: &str) -> bool {
        self.name == name.as_bytes()
    }
}

/// One validated entry of the blob.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'a> {
    /// The whole entry (`next_offset` bytes).
    pub bytes: &'a [u8],
    pub target_offset: usize,
    layout: &'static Layout,
}

impl<'a> Entry<'a> {
    /// Validate the entry at `off`: header, match chain and target must all fit.
    pub fn at(layout: &'static Layout, blob: &'a [u8], off: usize) -> Result<Entry<'a>, XtError> {
        let rest = blob
            .get(off..)
            .filter(|r| r.len() >= layout.entry_size)
            .ok_or_else(|| malformed(off, "entry header runs past the end"))?;
        let target_offset = usize::from(u16_at(rest, layout.target_offset_at).unwrap_or(0));
        let next_offset = usize::from(u16_at(rest, layout.next_offset_at).unwrap_or(0));
        if target_offset < layout.entry_size {
            return Err(malformed(off, "target_offset inside the entry header"));
        }
        if next_offset < target_offset + EXT_HEADER || next_offset > rest.len() {
            return Err(malformed(off, "next_offset out of range"));
        }
        let bytes = &rest[..next_offset];
        let mut pos = layout.entry_size;
        while pos < target_offset {
            match Ext::parse(&bytes[pos..target_offset]) {
                Some((_, size)) => pos += size,
                None => return Err(malformed(off + pos, "match size out of range")),
            }
        }
        if Ext::parse(&bytes[target_offset..]).is_none() {
            return Err(malformed(off + target_offset, "target size out of range"));
        }
        Ok(Entry {
            bytes,
            target_offset,
            layout,
        })
    }

    /// The header bytes up to the first match (`ipt_ip` etc.).
    pub fn header(&self) -> &'a [u8] {
        &self.bytes[..self.layout.entry_size]
    }

    pub fn next_offset(&self) -> usize {
        self.bytes.len()
    }

    pub fn matches(&self) -> Matches<'a> {
        Matches {
            rest: self
                .bytes
                .get(self.layout.entry_size..self.target_offset)
                .unwrap_or(&[]),
        }
    }

    pub fn target(&self) -> Ext<'a> {
        match self.bytes.get(self.target_offset..).and_then(Ext::parse) {
            Some((t, _)) => t,
            // Unreachable for an entry built by `at`, which checked the target.
            None => Ext {
                name: b"",
                revision: 0,
                data: &[],
            },
        }
    }

    /// The standard target's verdict, if the target is the standard one with its `int`.
    pub fn standard_verdict(&self) -> Option<i32> {
        let t = self.target();
        if t.name.is_empty() {
            i32_at(t.data, 0)
        } else {
            None
        }
    }

    /// The user-chain name of an `ERROR` target entry.
    pub fn error_name(&self) -> Option<&'a [u8]> {
        let t = self.target();
        t.is("ERROR").then(|| cstr(t.data))
    }

    /// True for the `-j RETURN` without any condition that ends every user chain.
    fn is_unconditional_return(&self) -> bool {
        self.target_offset == self.layout.entry_size
            && self.standard_verdict() == Some(VERDICT_RETURN)
            && self
                .layout
                .identity
                .iter()
                .all(|&(a, b)| self.bytes[a..b].iter().all(|&x| x == 0))
    }

    pub fn is_goto(&self) -> bool {
        self.layout
            .goto_flag
            .is_some_and(|(at, bit)| self.bytes.get(at).is_some_and(|f| f & bit != 0))
    }
}

/// The matches of an entry, in order.
pub(crate) struct Matches<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Matches<'a> {
    type Item = Ext<'a>;

    fn next(&mut self) -> Option<Ext<'a>> {
        let (m, size) = Ext::parse(self.rest)?;
        self.rest = &self.rest[size..];
        Some(m)
    }
}

/// The bytes of a match's or target's payload that userspace set, without kernel-private state
/// (pointers, running counters) at the end. The kernel zeroes that state when it copies an
/// entry out (`xt_data_to_user`), but leaving it out keeps the fingerprint independent of that.
fn user_size(name: &[u8], revision: u8, target: bool) -> Option<usize> {
    Some(match (name, target) {
        (b"limit", false) => 8,
        (b"statistic", false) => 16,
        (b"quota", false) => 16,
        (b"connlimit", false) => 24,
        (b"hashlimit", false) => match revision {
            1 => 48,
            2 => 296,
            3 => 304,
            _ => return None,
        },
        (b"string", false) => 152,
        (b"cgroup", false) => match revision {
            1 => 4104,
            2 => 520,
            _ => return None,
        },
        (b"bpf", false) => 520,
        (b"nfacct", false) => 32,
        (b"rateest", false) => 56,
        (b"CT", true) => match revision {
            0 => 32,
            _ => 64,
        },
        (b"IDLETIMER", true) => match revision {
            0 => 32,
            _ => 40,
        },
        (b"LED", true) | (b"TEE", true) => 32,
        (b"RATEEST", true) => 24,
        _ => return None,
    })
}

/// `d` without its trailing zero bytes. A payload has a fixed size per extension and revision,
/// so trailing zeros (alignment padding, the unused end of a comment or a name) carry no
/// information; skipping them makes hashing a 256-byte `--comment` cheap.
fn trim_zeros(d: &[u8]) -> &[u8] {
    let mut end = d.len();
    while end >= 8 && d[end - 8..end] == [0u8; 8] {
        end -= 8;
    }
    while end > 0 && d[end - 1] == 0 {
        end -= 1;
    }
    &d[..end]
}

/// A fast structural hash: per 8-byte word `h = (rotl(h, 23) ^ w) * K`, which is a bijection of
/// both `h` and `w`, so two inputs of the same shape that differ in one word never collide.
struct Fp(u64);

impl Fp {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;

    fn word(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(23) ^ w).wrapping_mul(Self::K);
    }

    fn bytes(&mut self, b: &[u8]) {
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.word(u64::from_le_bytes(w));
        }
        let rem = chunks.remainder();
        let mut w = [0u8; 8];
        w[..rem.len()].copy_from_slice(rem);
        self.word(u64::from_le_bytes(w));
        self.word(b.len() as u64);
    }

    fn finish(self) -> u64 {
        // murmur3's fmix64, so that nearby inputs spread over the whole range.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// A chain while the blob is being walked: entries are indices into the offset list.
struct ChainBuild {
    name: String,
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
pub(crate) struct RawTable {
    /// The `GET_INFO` reply as bytes.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "only the fixture capture stores the raw reply")
    )]
    pub info_bytes: Vec<u8>,
    pub info: TableInfo,
    /// The `GET_ENTRIES` answer: the `ipt_get_entries` header, then the entries.
    pub buf: Vec<u8>,
}

impl RawTable {
    /// The entries without the `ipt_get_entries` header.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "only the fixture capture stores the raw entries")
    )]
    pub fn entries(&self) -> &[u8] {
        self.buf.get(GET_ENTRIES_HEADER..).unwrap_or(&[])
    }
}

/// Decode a table as the kernel's `GET_INFO` and `GET_ENTRIES` returned it.
pub(crate) fn decode_raw(proto: XtProto, raw: RawTable) -> Result<XtTable, XtError> {
    decode_table_at(proto, &raw.info, raw.buf, GET_ENTRIES_HEADER)
}

/// Decode the table a writer handed to the kernel: a whole `ipt_replace` (`ip6t_replace`,
/// `arpt_replace`) with its entries, as `setsockopt(..._SO_SET_REPLACE)` got it. The header
/// gives what `GET_INFO` would (name, hooks, entry count, size) in another order: name, valid
/// hooks, entry count, size, hook entries, underflows, then the counter count and a pointer.
pub fn decode_replace(proto: XtProto, buf: Vec<u8>) -> Result<XtTable, XtError> {
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
    decode_table_at(proto, &info, buf, head)
}

/// Decode the entries that start at `base` in `buf` (after the `ipt_get_entries` header, which
/// is not moved away: the blob can be megabytes) with the hook offsets of their `GET_INFO`. The
/// rules' entries are kept packed ([`Packed`]); `buf` is freed on return.
pub(crate) fn decode_table_at(
    proto: XtProto,
    info: &TableInfo,
    buf: Vec<u8>,
    base: usize,
) -> Result<XtTable, XtError> {
    let blob = buf.get(base..).unwrap_or(&[]);
    let l = layout(proto);
    if blob.len() != info.size as usize {
        return Err(malformed(blob.len(), "entries size differs from GET_INFO"));
    }
    let hook_names = proto.hook_names();

    // Pass 1: find every entry and the chain boundaries.
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
                name: hook_names.get(h).copied().unwrap_or("?").to_string(),
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
                name: String::from_utf8_lossy(name).into_owned(),
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
                name: format!("?unreachable@{off}"),
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

    // Where jumps land: a user chain's first entry (or its head), a builtin's first entry.
    let mut landing: HashMap<u32, u32> = HashMap::with_capacity(builds.len() * 2);
    for (i, b) in builds.iter().enumerate() {
        landing.entry(b.entry_offset).or_insert(i as u32);
        if let Some(h) = b.head_offset {
            landing.entry(h).or_insert(i as u32);
        }
    }

    // Pass 2: rules, policies, fingerprints.
    let mut set_refs = Vec::new();
    let mut packed = Packed::default();
    let mut chains = Vec::with_capacity(builds.len());
    for b in &builds {
        let mut policy = None;
        let mut rules = Vec::with_capacity(b.end - b.first);
        let idx = &offsets[b.first..b.end];
        for (k, &off) in idx.iter().enumerate() {
            let e = Entry::at(l, blob, off as usize)?;
            if b.underflow == Some(off) {
                policy = Some(policy_name(e.standard_verdict()));
                continue;
            }
            if !b.builtin && k + 1 == idx.len() && e.is_unconditional_return() {
                continue;
            }
            let verdict = classify(&e, off, &landing);
            let fingerprint = fingerprint(l, &e, verdict, &builds, &mut set_refs);
            let packed_at = packed
                .push(e.bytes)
                .ok_or_else(|| malformed(off as usize, "table too large to keep"))?;
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
        chains.push(XtChain {
            name: b.name.clone(),
            builtin: b.builtin,
            policy,
            rules,
        });
    }
    set_refs.sort_unstable();
    set_refs.dedup();
    packed.shrink_to_fit();
    Ok(XtTable {
        proto,
        name: info.name.clone(),
        chains,
        entries: packed,
        set_refs,
        set_names: HashMap::new(),
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

fn classify(e: &Entry<'_>, off: u32, landing: &HashMap<u32, u32>) -> Verdict {
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
                let slots: &[usize] = if t.revision == 3 {
                    &[0, 4, 8, 12]
                } else {
                    &[0, 4]
                };
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
            let name = builds.get(chain as usize).map_or("", |b| b.name.as_str());
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
