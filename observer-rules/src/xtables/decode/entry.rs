//! One entry of a `GET_ENTRIES` blob: where one family's entry fields live ([`Layout`]), the
//! validated view of an entry ([`Entry`]) and of its matches and target ([`Ext`]).
//!
//! Below the table walk in [`decode`](super), which reads every entry through it; it imports
//! only [`bytes`](crate::xtables::bytes) and the `xtables` types.

use crate::xtables::bytes::{cstr, i32_at, u16_at};
use crate::xtables::{XtError, XtProto};

/// Size of the `xt_entry_match` / `xt_entry_target` header (`u16 size; char name[29]; u8 rev`).
pub(crate) const EXT_HEADER: usize = 32;
/// Length of an extension name field (`XT_EXTENSION_MAXNAMELEN`).
pub(super) const EXT_NAME_LEN: usize = 29;
/// `XT_RETURN`: the verdict of a user chain's final entry.
pub(crate) const VERDICT_RETURN: i32 = -5;

/// Where the fields of one family's entry live.
#[derive(Debug)]
pub struct Layout {
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

/// Where the entry fields of `proto`'s tables live (and the size of its `GET_INFO` reply).
pub fn layout(proto: XtProto) -> &'static Layout {
    match proto {
        XtProto::Ipv4 => &IPV4,
        XtProto::Ipv6 => &IPV6,
        XtProto::Arp => &ARP,
    }
}

pub(super) fn malformed(offset: usize, reason: &'static str) -> XtError {
    XtError::Malformed { offset, reason }
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

    /// The declared size of the extension at the start of `b` when it fits in `b`: what
    /// [`Ext::parse`] checks, without reading the name.
    fn size_in(b: &[u8]) -> Option<usize> {
        let size = usize::from(u16_at(b, 0)?);
        (EXT_HEADER..=b.len()).contains(&size).then_some(size)
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
            match Ext::size_in(&bytes[pos..target_offset]) {
                Some(size) => pos += size,
                None => return Err(malformed(off + pos, "match size out of range")),
            }
        }
        if Ext::size_in(&bytes[target_offset..]).is_none() {
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
    pub(super) fn is_unconditional_return(&self) -> bool {
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
