//! Netlink framing with length checks, for every netlink message observer reads (nftables and
//! ipset notifications and dumps, requests and acks a writer sent or received, captured by the
//! kernel hooks): message headers, attributes (NLAs) and the scalar encodings nf_tables uses
//! (big-endian integers, NUL-terminated strings).
//!
//! Everything here works on borrowed bytes and returns a [`Malformed`] reason or `None` instead
//! of panicking, so that a truncated or hostile datagram is skipped, never trusted. Whole
//! datagrams are read strictly ([`messages`], [`attrs`]); the start of a writer's buffer, which
//! the hooks capture cut short, is read leniently ([`lenient_messages`], [`lenient_attrs`]).

use std::fmt;

/// `struct nlmsghdr` is 16 bytes: len, type, flags, seq, pid.
pub const NLMSG_HDRLEN: usize = 16;
/// `struct nfgenmsg` is 4 bytes: family, version, res_id (big endian).
pub const NFGENMSG_LEN: usize = 4;
/// `struct nlattr` is 4 bytes: len, type.
const NLA_HDRLEN: usize = 4;
/// The type bits of `nla_type`; the top two bits are NLA_F_NESTED and NLA_F_NET_BYTEORDER.
const NLA_TYPE_MASK: u16 = 0x3fff;
const NLA_F_NESTED: u16 = 0x8000;
/// The attribute's value is in network byte order.
pub const NLA_F_NET_BYTEORDER: u16 = 0x4000;

// Control message types (`NLMSG_*`) and header flags (`NLM_F_*`), as in `linux/netlink.h`.
pub const NLMSG_NOOP: u16 = 1;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const NLMSG_OVERRUN: u16 = 4;

pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_ACK: u16 = 0x4;
/// On a request: replace the object (a rule) rather than add one.
pub const NLM_F_REPLACE: u16 = 0x100;
/// On an error message: the request's payload is not echoed (the socket asked for that).
pub const NLM_F_CAPPED: u16 = 0x100;
/// On a request: the command must change something (ipset without `-exist`).
pub const NLM_F_EXCL: u16 = 0x200;
pub const NLM_F_DUMP_INTR: u16 = 0x10;
pub const NLM_F_DUMP: u16 = 0x300;
pub const NLM_F_APPEND: u16 = 0x800;

/// Why some bytes could not be decoded. Carried up as a skip reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A [`Malformed`] saying what was wrong.
pub fn malformed(what: impl Into<String>) -> Malformed {
    Malformed(what.into())
}

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// One netlink message inside a datagram.
#[derive(Debug, Clone, Copy)]
pub struct NlMsg<'a> {
    pub msg_type: u16,
    pub flags: u16,
    pub seq: u32,
    pub payload: &'a [u8],
}

/// Split a datagram into netlink messages. A header that does not fit ends the walk with an
/// error item: after a bad length there is no way to find the next message.
pub fn messages(buf: &[u8]) -> impl Iterator<Item = Result<NlMsg<'_>, Malformed>> {
    let mut rest = buf;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || rest.is_empty() {
            return None;
        }
        if rest.len() < NLMSG_HDRLEN {
            failed = true;
            return Some(Err(malformed(format!(
                "{} trailing bytes, shorter than a netlink header",
                rest.len()
            ))));
        }
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            failed = true;
            return Some(Err(malformed(format!(
                "netlink message length {len} with {} bytes left",
                rest.len()
            ))));
        }
        let msg = NlMsg {
            msg_type: u16::from_ne_bytes([rest[4], rest[5]]),
            flags: u16::from_ne_bytes([rest[6], rest[7]]),
            seq: u32::from_ne_bytes([rest[8], rest[9], rest[10], rest[11]]),
            payload: &rest[NLMSG_HDRLEN..len],
        };
        rest = rest.get(align4(len)..).unwrap_or(&[]);
        Some(Ok(msg))
    })
}

/// The fixed part of a message header, read from a buffer that may end right after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The message's length as the header says (the buffer may hold less).
    pub len: usize,
    pub msg_type: u16,
    pub flags: u16,
}

/// The header at the start of `buf`, if a whole header is there.
pub fn header(buf: &[u8]) -> Option<Header> {
    let h = buf.get(..NLMSG_HDRLEN)?;
    Some(Header {
        len: u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize,
        msg_type: u16::from_ne_bytes([h[4], h[5]]),
        flags: u16::from_ne_bytes([h[6], h[7]]),
    })
}

/// The messages of a buffer that may be cut short: each message whole, or as much of it as
/// the buffer holds (the last one may be cut); ends at a length that cannot be a message.
pub fn lenient_messages(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        let h = header(rest)?;
        if h.len < NLMSG_HDRLEN {
            return None;
        }
        let msg = &rest[..h.len.min(rest.len())];
        rest = rest.get(align4(h.len)..).unwrap_or(&[]);
        Some(msg)
    })
}

/// One attribute: its type without the flag bits, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    pub kind: u16,
    pub nested: bool,
    pub value: &'a [u8],
}

/// Parse a run of attributes, all or nothing.
pub fn attrs(mut buf: &[u8]) -> Result<Vec<Attr<'_>>, Malformed> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        if buf.len() < NLA_HDRLEN {
            return Err(malformed(format!(
                "{} stray bytes after attributes",
                buf.len()
            )));
        }
        let len = u16::from_ne_bytes([buf[0], buf[1]]) as usize;
        let raw_kind = u16::from_ne_bytes([buf[2], buf[3]]);
        if len < NLA_HDRLEN || len > buf.len() {
            return Err(malformed(format!(
                "attribute {} length {len} with {} bytes left",
                raw_kind & NLA_TYPE_MASK,
                buf.len()
            )));
        }
        out.push(Attr {
            kind: raw_kind & NLA_TYPE_MASK,
            nested: raw_kind & NLA_F_NESTED != 0,
            value: &buf[NLA_HDRLEN..len],
        });
        buf = buf.get(align4(len)..).unwrap_or(&[]);
    }
    Ok(out)
}

/// The attributes of a buffer that may be cut short: those that fit whole, as (type without
/// the flag bits, nested, value).
pub fn lenient_attrs(mut buf: &[u8]) -> Vec<(u16, bool, &[u8])> {
    let mut out = Vec::new();
    while buf.len() >= NLA_HDRLEN {
        let len = u16::from_ne_bytes([buf[0], buf[1]]) as usize;
        let kind = u16::from_ne_bytes([buf[2], buf[3]]);
        if len < NLA_HDRLEN || len > buf.len() {
            break;
        }
        out.push((
            kind & NLA_TYPE_MASK,
            kind & NLA_F_NESTED != 0,
            &buf[NLA_HDRLEN..len],
        ));
        buf = buf.get(align4(len)..).unwrap_or(&[]);
    }
    out
}

/// The first attribute of the given type.
pub fn find<'a>(list: &[Attr<'a>], kind: u16) -> Option<Attr<'a>> {
    list.iter().copied().find(|a| a.kind == kind)
}

/// A big-endian integer attribute value of exactly its size.
pub fn be_u16(v: &[u8]) -> Result<u16, Malformed> {
    match v {
        [a, b] => Ok(u16::from_be_bytes([*a, *b])),
        _ => Err(malformed(format!(
            "{}-byte value where a u16 was expected",
            v.len()
        ))),
    }
}

/// See [`be_u16`].
pub fn be_u32(v: &[u8]) -> Result<u32, Malformed> {
    <[u8; 4]>::try_from(v)
        .map(u32::from_be_bytes)
        .map_err(|_| malformed(format!("{}-byte value where a u32 was expected", v.len())))
}

/// See [`be_u16`].
pub fn be_u64(v: &[u8]) -> Result<u64, Malformed> {
    <[u8; 8]>::try_from(v)
        .map(u64::from_be_bytes)
        .map_err(|_| malformed(format!("{}-byte value where a u64 was expected", v.len())))
}

/// A NUL-terminated (or unterminated) string attribute, cut at the first NUL.
pub fn string(v: &[u8]) -> String {
    let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

/// Append one attribute to a request being built.
pub fn push_attr(buf: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = (NLA_HDRLEN + value.len()) as u16;
    buf.extend_from_slice(&len.to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(value);
    buf.resize(align4(buf.len()), 0);
}

/// A string attribute value with its terminating NUL, as the kernel expects.
pub fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attrs_round_trip_and_reject_bad_lengths() {
        let mut buf = Vec::new();
        push_attr(&mut buf, 1, &cstr("filter"));
        push_attr(&mut buf, 3, &7u32.to_be_bytes());
        let list = attrs(&buf).expect("well formed");
        assert_eq!(list.len(), 2);
        assert_eq!(string(list[0].value), "filter");
        assert_eq!(be_u32(find(&list, 3).expect("present").value), Ok(7));
        // Claim more bytes than there are.
        let mut bad = buf.clone();
        bad[0] = 200;
        assert!(attrs(&bad).is_err());
        // A length below the header size would loop forever if accepted.
        bad[0] = 2;
        assert!(attrs(&bad).is_err());
        assert!(attrs(&buf[..3]).is_err());
    }

    #[test]
    fn scalars_check_their_width() {
        assert!(be_u16(&[1]).is_err());
        assert!(be_u32(&[0, 0, 1]).is_err());
        assert!(be_u64(&[0; 9]).is_err());
        assert_eq!(be_u64(&[0, 0, 0, 0, 0, 0, 1, 2]), Ok(258));
        assert_eq!(string(b"abc\0def"), "abc");
        assert_eq!(string(b"abc"), "abc");
    }

    #[test]
    fn messages_stop_at_a_bad_header() {
        let mut msg = vec![0u8; 20];
        msg[0..4].copy_from_slice(&20u32.to_ne_bytes());
        let mut two = msg.clone();
        two.extend_from_slice(&msg);
        assert_eq!(messages(&two).filter(|m| m.is_ok()).count(), 2);
        let mut bad = msg.clone();
        bad[0..4].copy_from_slice(&4000u32.to_ne_bytes());
        let items: Vec<_> = messages(&bad).collect();
        assert_eq!(items.len(), 1);
        assert!(items[0].is_err());
        assert!(messages(&msg[..10]).all(|m| m.is_err()));
    }

    /// A message of `len` bytes claimed, type `ty`, with `body` after the header.
    fn message(ty: u16, flags: u16, body: &[u8]) -> Vec<u8> {
        let len = (NLMSG_HDRLEN + body.len()) as u32;
        let mut m = len.to_ne_bytes().to_vec();
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(body);
        while !m.len().is_multiple_of(4) {
            m.push(0);
        }
        m
    }

    #[test]
    fn a_buffer_cut_short_is_read_leniently_and_refused_strictly() {
        let mut buf = message(NLMSG_ERROR, NLM_F_CAPPED, &[1, 2, 3, 4]);
        let mut attrs_body = Vec::new();
        push_attr(&mut attrs_body, 1, &cstr("nat"));
        push_attr(&mut attrs_body, 2, &cstr("KUBE-SERVICES"));
        buf.extend(message(NLMSG_DONE, 0, &attrs_body));
        let cut = &buf[..buf.len() - 6];
        let h = header(cut).expect("a whole header");
        assert_eq!(
            (h.len, h.msg_type, h.flags),
            (20, NLMSG_ERROR, NLM_F_CAPPED)
        );
        assert_eq!(header(&cut[..15]), None);
        let lenient: Vec<&[u8]> = lenient_messages(cut).collect();
        assert_eq!(
            lenient.len(),
            2,
            "the second message, cut short, is still given"
        );
        assert_eq!(lenient[1].len(), cut.len() - 20);
        // Its attributes that fit whole: the table's name, not the cut chain's.
        let got = lenient_attrs(&lenient[1][NLMSG_HDRLEN..]);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0, string(got[0].2)), (1, "nat".to_string()));
        // Read strictly, the cut message is an error.
        let strict: Vec<_> = messages(cut).collect();
        assert!(strict[0].is_ok() && strict[1].is_err());
        // A length below a header ends the lenient walk instead of looping.
        let mut bad = buf.clone();
        bad[20..24].copy_from_slice(&3u32.to_ne_bytes());
        assert_eq!(lenient_messages(&bad).count(), 1);
    }
}
