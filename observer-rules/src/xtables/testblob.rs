//! Test-only encoder of x_tables tables: builds `GET_INFO` + `GET_ENTRIES` bytes (and the
//! `SET_REPLACE` payload, which has the same entries) from a small description. Used for tables
//! that cannot be produced with the installed tools (arp_tables), for malformed-input tests and
//! for large synthetic tables.

use super::decode::{layout, Layout, EXT_HEADER, TABLE_NAME_LEN};
use super::XtProto;

/// What a rule's target is.
#[derive(Debug, Clone)]
pub enum T {
    Verdict(i32),
    Jump(String),
    Goto(String),
    Fallthrough,
    Ext(String, u8, Vec<u8>),
}

/// One rule: raw header bytes (the `ipt_ip` part; the rest of the entry header is filled in),
/// matches as (name, revision, data), and the target.
#[derive(Debug, Clone)]
pub struct R {
    pub header: Vec<u8>,
    pub matches: Vec<(String, u8, Vec<u8>)>,
    pub target: T,
}

impl R {
    pub fn new(target: T) -> R {
        R {
            header: Vec::new(),
            matches: Vec::new(),
            target,
        }
    }

    pub fn with_match(mut self, name: &str, rev: u8, data: Vec<u8>) -> R {
        self.matches.push((name.to_string(), rev, data));
        self
    }

    pub fn with_header(mut self, header: Vec<u8>) -> R {
        self.header = header;
        self
    }
}

/// One chain: `hook` is `Some(hook number)` for a built-in chain.
#[derive(Debug, Clone)]
pub struct C {
    pub name: String,
    pub hook: Option<usize>,
    pub policy: i32,
    pub rules: Vec<R>,
}

impl C {
    pub fn builtin(name: &str, hook: usize, policy: i32, rules: Vec<R>) -> C {
        C {
            name: name.to_string(),
            hook: Some(hook),
            policy,
            rules,
        }
    }

    pub fn user(name: &str, rules: Vec<R>) -> C {
        C {
            name: name.to_string(),
            hook: None,
            policy: 0,
            rules,
        }
    }
}

fn align8(n: usize) -> usize {
    (n + 7) & !7
}

fn ext(name: &str, rev: u8, data: &[u8]) -> Vec<u8> {
    let size = EXT_HEADER + align8(data.len());
    let mut v = vec![0u8; size];
    v[0..2].copy_from_slice(&(size as u16).to_ne_bytes());
    let n = name.len().min(28);
    v[2..2 + n].copy_from_slice(&name.as_bytes()[..n]);
    v[EXT_HEADER - 1] = rev;
    v[EXT_HEADER..EXT_HEADER + data.len()].copy_from_slice(data);
    v
}

/// The encoded table.
pub struct Built {
    pub info: Vec<u8>,
    pub entries: Vec<u8>,
    pub valid_hooks: u32,
    pub hook_entry: Vec<u32>,
    pub underflow: Vec<u32>,
    pub num_entries: u32,
}

enum Tgt {
    Std(i32),
    Chain(String, bool),
    Fallthrough,
    Error(String),
    Ext(String, u8, Vec<u8>),
}

struct E {
    header: Vec<u8>,
    matches: Vec<u8>,
    target: Tgt,
}

/// The entries of `chains` in the order iptables lays them out: built-ins (rules, then the
/// policy), then each user chain (ERROR head, rules, RETURN), then the final ERROR entry; with
/// where a jump to each chain lands and where each hook's chain starts and ends.
struct Laid {
    entries: Vec<E>,
    /// (entry index where a jump to the chain lands, chain name)
    landing: Vec<(usize, String)>,
    /// (hook, first entry, policy entry)
    hook_idx: Vec<(usize, usize, usize)>,
}

fn lay_out(chains: &[C]) -> Laid {
    let mut entries: Vec<E> = Vec::new();
    let mut landing: Vec<(usize, String)> = Vec::new();
    let mut hook_idx: Vec<(usize, usize, usize)> = Vec::new();
    let mk = |r: &R| {
        let mut m = Vec::new();
        for (n, rev, d) in &r.matches {
            m.extend(ext(n, *rev, d));
        }
        let target = match &r.target {
            T::Verdict(v) => Tgt::Std(*v),
            T::Jump(c) => Tgt::Chain(c.clone(), false),
            T::Goto(c) => Tgt::Chain(c.clone(), true),
            T::Fallthrough => Tgt::Fallthrough,
            T::Ext(n, rev, d) => Tgt::Ext(n.clone(), *rev, d.clone()),
        };
        E {
            header: r.header.clone(),
            matches: m,
            target,
        }
    };
    let bare = |target| E {
        header: Vec::new(),
        matches: Vec::new(),
        target,
    };
    for c in chains.iter().filter(|c| c.hook.is_some()) {
        let first = entries.len();
        landing.push((first, c.name.clone()));
        entries.extend(c.rules.iter().map(mk));
        let policy = entries.len();
        entries.push(bare(Tgt::Std(c.policy)));
        hook_idx.push((c.hook.unwrap_or(0), first, policy));
    }
    for c in chains.iter().filter(|c| c.hook.is_none()) {
        entries.push(bare(Tgt::Error(c.name.clone())));
        landing.push((entries.len(), c.name.clone()));
        entries.extend(c.rules.iter().map(mk));
        entries.push(bare(Tgt::Std(-5)));
    }
    entries.push(bare(Tgt::Error("ERROR".into())));
    Laid {
        entries,
        landing,
        hook_idx,
    }
}

fn target_size(t: &Tgt) -> usize {
    match t {
        Tgt::Std(_) | Tgt::Chain(..) | Tgt::Fallthrough => 40,
        Tgt::Error(_) => 64,
        Tgt::Ext(_, _, d) => EXT_HEADER + align8(d.len()),
    }
}

/// The entries as bytes, at `offsets`; jumps resolved through `landing`.
fn encode(
    l: &Layout,
    entries: &[E],
    offsets: &[usize],
    landing: &[(usize, String)],
    total: usize,
) -> Vec<u8> {
    let land = |name: &str| -> i32 {
        landing
            .iter()
            .find(|(_, n)| n == name)
            .map_or(0x7fff_0000, |(i, _)| offsets[*i] as i32)
    };
    let mut blob = Vec::with_capacity(total);
    for (i, e) in entries.iter().enumerate() {
        let mut h = vec![0u8; l.entry_size];
        let n = e.header.len().min(l.entry_size);
        h[..n].copy_from_slice(&e.header[..n]);
        let target_offset = l.entry_size + e.matches.len();
        let next = target_offset + target_size(&e.target);
        h[l.target_offset_at..l.target_offset_at + 2]
            .copy_from_slice(&(target_offset as u16).to_ne_bytes());
        h[l.next_offset_at..l.next_offset_at + 2].copy_from_slice(&(next as u16).to_ne_bytes());
        let t = match &e.target {
            Tgt::Std(v) => ext("", 0, &v.to_ne_bytes()),
            Tgt::Chain(c, g) => {
                if *g {
                    if let Some((at, bit)) = l.goto_flag {
                        h[at] |= bit;
                    }
                }
                ext("", 0, &land(c).to_ne_bytes())
            }
            Tgt::Fallthrough => ext("", 0, &((offsets[i] + next) as i32).to_ne_bytes()),
            Tgt::Error(name) => {
                let mut d = [0u8; 30];
                let n = name.len().min(29);
                d[..n].copy_from_slice(&name.as_bytes()[..n]);
                ext("ERROR", 0, &d)
            }
            Tgt::Ext(n, rev, d) => ext(n, *rev, d),
        };
        blob.extend(h);
        blob.extend(&e.matches);
        blob.extend(t);
    }
    blob
}

/// Lay out chains the way iptables does: built-ins (rules, then the policy), then each user
/// chain (ERROR head, rules, RETURN), then the final ERROR entry.
pub fn build(proto: XtProto, table: &str, chains: &[C]) -> Built {
    let l = layout(proto);
    let mut hook_entry = vec![0u32; l.hooks];
    let mut underflow = vec![0u32; l.hooks];
    let mut valid_hooks = 0u32;
    let Laid {
        entries,
        landing,
        hook_idx,
    } = lay_out(chains);
    let mut offsets = Vec::with_capacity(entries.len());
    let mut off = 0usize;
    for e in &entries {
        offsets.push(off);
        off += l.entry_size + e.matches.len() + target_size(&e.target);
    }
    let total = off;
    for &(h, first, policy) in &hook_idx {
        valid_hooks |= 1 << h;
        hook_entry[h] = offsets[first] as u32;
        underflow[h] = offsets[policy] as u32;
    }
    let blob = encode(l, &entries, &offsets, &landing, total);
    let mut info = vec![0u8; l.info_size];
    info[..table.len().min(TABLE_NAME_LEN - 1)]
        .copy_from_slice(&table.as_bytes()[..table.len().min(TABLE_NAME_LEN - 1)]);
    info[32..36].copy_from_slice(&valid_hooks.to_ne_bytes());
    for hk in 0..l.hooks {
        info[36 + 4 * hk..40 + 4 * hk].copy_from_slice(&hook_entry[hk].to_ne_bytes());
        let u = 36 + 4 * l.hooks + 4 * hk;
        info[u..u + 4].copy_from_slice(&underflow[hk].to_ne_bytes());
    }
    let n_at = 36 + 8 * l.hooks;
    info[n_at..n_at + 4].copy_from_slice(&(entries.len() as u32).to_ne_bytes());
    info[n_at + 4..n_at + 8].copy_from_slice(&(total as u32).to_ne_bytes());
    Built {
        info,
        entries: blob,
        valid_hooks,
        hook_entry,
        underflow,
        num_entries: offsets.len() as u32,
    }
}

/// An `ipt_ip` header: source/destination with prefix lengths, protocol.
pub fn ip4(src: [u8; 4], slen: u32, dst: [u8; 4], dlen: u32, proto: u16) -> Vec<u8> {
    let mut h = vec![0u8; 84];
    let mask = |len: u32| {
        if len == 0 {
            0u32
        } else {
            u32::MAX << (32 - len)
        }
    };
    h[0..4].copy_from_slice(&src);
    h[4..8].copy_from_slice(&dst);
    h[8..12].copy_from_slice(&mask(slen).to_be_bytes());
    h[12..16].copy_from_slice(&mask(dlen).to_be_bytes());
    h[80..82].copy_from_slice(&proto.to_ne_bytes());
    h
}
