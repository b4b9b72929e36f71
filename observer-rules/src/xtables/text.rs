//! What the renderers of a rule's header ([`render`](super::render)) and of its extensions
//! ([`ext`](super::ext)) share: the rule's context ([`Cx`]) and the small pieces of
//! `iptables-save` text (`!`, quoted strings, IPv6 addresses, prefix lengths).
//!
//! Below both renderers: it imports neither, only the table types of `xtables`.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{XtProto, XtTable};

/// What the extension renderers need to know about the rule around them.
pub(super) struct Cx<'a> {
    pub table: &'a XtTable,
    pub proto: XtProto,
    /// Names of ipsets the table does not hold (a rule of iptables-nft's, printed alone).
    pub sets: Option<&'a dyn Fn(u16) -> Option<String>>,
}

/// `inet_ntop` for IPv6: like Rust's `Display`, except that glibc also writes an IPv4-compatible
/// address (`::a.b.c.d`) with a dotted quad.
pub(super) fn ip6_text(a: &Ipv6Addr) -> String {
    let s = a.segments();
    if s[..6] == [0; 6] && s[6] != 0 {
        let o = a.octets();
        return format!("::{}", Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    a.to_string()
}

/// Prefix length of a contiguous mask, `None` when the mask has holes.
pub(super) fn prefix_len(mask: &[u8]) -> Option<u32> {
    let mut len = 0;
    let mut ended = false;
    for &b in mask {
        if ended && b != 0 {
            return None;
        }
        if b == 0xff {
            len += 8;
        } else {
            if b.leading_ones() + b.trailing_zeros() != 8 {
                return None;
            }
            len += b.leading_ones();
            ended = true;
        }
    }
    Some(len)
}

pub(super) fn inv(out: &mut String, invert: bool) {
    if invert {
        out.push_str(" !");
    }
}

/// `xtables_save_string`: bare when only `[A-Za-z0-9_-]`, else double-quoted with `"`, `\` and
/// `'` escaped.
pub(super) fn save_string(out: &mut String, s: &str) {
    out.push(' ');
    if !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
    {
        out.push_str(s);
        return;
    }
    out.push('"');
    for c in s.chars() {
        if matches!(c, '"' | '\\' | '\'') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}
