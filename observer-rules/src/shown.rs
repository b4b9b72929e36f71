//! Untrusted text as a person's terminal shows it. Every name, comment, comm and rule text comes
//! from a writer observer does not trust (a pod's namespace is watched like the host's): shown
//! raw, its control characters would set the window's title, clear the screen, recolour or
//! overwrite lines, and bidirectional overrides would make a rule read other than it is.
//!
//! Here, and only here, such characters become visible escapes, in the syntax `nft` and
//! `iptables-save` read back: `\x1b` for C0 (0x00–0x1f, `\t`, `\n` and `\r` included) and DEL
//! (0x7f), `\u202e` for C1 (U+0080–U+009F) and the bidi embeddings, overrides and isolates
//! (U+202A–U+202E, U+2066–U+2069); an invalid UTF-8 byte, where text arrives as bytes, is
//! `\xNN`. Everything else, valid UTF-8 of any script included, is kept as it is.
//!
//! A backslash is not escaped: the escaped text holds no character this module escapes, so
//! escaping it again changes nothing, and a renderer that escapes a field and a sink that
//! escapes the line around it cannot double an escape. The price is that a name written with
//! the four characters `\x1b` looks like one holding ESC; the JSON forms, which keep the exact
//! text, tell them apart.
//!
//! [`escape`] is zero-copy when nothing needs escaping; [`Shown`] writes the escaped text
//! straight into a formatter (and honours width and precision: `{:<12}`).

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// Whether `c` is shown escaped.
pub fn is_escaped(c: char) -> bool {
    matches!(
        c,
        '\0'..='\x1f' | '\x7f' | '\u{80}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// `s` with every character [`is_escaped`] names written as an escape; `s` itself (borrowed)
/// when it holds none.
pub fn escape(s: &str) -> Cow<'_, str> {
    match s.find(is_escaped) {
        None => Cow::Borrowed(s),
        Some(at) => {
            let mut out = String::with_capacity(s.len() + 8);
            out.push_str(&s[..at]);
            // Writing into a String cannot fail.
            let _ = write_escaped(&mut out, &s[at..]);
            Cow::Owned(out)
        }
    }
}

/// Bytes that should be UTF-8 text (a comm, a name from the kernel), shown: valid UTF-8 as
/// [`escape`] shows it, each byte that is not part of valid UTF-8 as `\xNN`. Borrowed when the
/// bytes are clean UTF-8.
pub fn escape_bytes(b: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(b) {
        return escape(s);
    }
    let mut out = String::with_capacity(b.len() + 8);
    for chunk in b.utf8_chunks() {
        let _ = write_escaped(&mut out, chunk.valid());
        for byte in chunk.invalid() {
            let _ = write!(out, "\\x{byte:02x}");
        }
    }
    Cow::Owned(out)
}

/// Write `s` escaped into `w`.
fn write_escaped(w: &mut impl fmt::Write, s: &str) -> fmt::Result {
    let mut rest = s;
    while let Some(at) = rest.find(is_escaped) {
        w.write_str(&rest[..at])?;
        let c = rest[at..].chars().next().unwrap_or_default();
        if (c as u32) < 0x80 {
            write!(w, "\\x{:02x}", c as u32)?;
        } else {
            write!(w, "\\u{:04x}", c as u32)?;
        }
        rest = &rest[at + c.len_utf8()..];
    }
    w.write_str(rest)
}

/// Untrusted text in a `format!` for people: `format!("chain {}", Shown(&name))`.
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a>(pub &'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.width().is_none() && f.precision().is_none() {
            write_escaped(f, self.0)
        } else {
            // Padding counts the escapes' characters, as the terminal shows them.
            f.pad(&escape(self.0))
        }
    }
}

#[cfg(test)]
mod tests;
