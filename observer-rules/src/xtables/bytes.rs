//! Readers of the kernel's fixed-layout fields: integers, addresses and NUL-terminated names at
//! a byte offset, each `None` (never a panic) when the field runs past the slice.
//!
//! The bottom of the x_tables modules: it imports none of them. [`decode`](super::decode) reads
//! entries with it, [`render`](super::render) and [`ext`](super::ext) read headers and
//! extension payloads.

use std::net::{Ipv4Addr, Ipv6Addr};

pub(crate) fn u8_at(b: &[u8], at: usize) -> Option<u8> {
    b.get(at).copied()
}

pub(crate) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_ne_bytes([s[0], s[1]]))
}

pub(crate) fn be16_at(b: &[u8], at: usize) -> Option<u16> {
    u16_at(b, at).map(u16::from_be)
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

pub(crate) fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    u32_at(b, at).map(|v| v as i32)
}

pub(crate) fn ipv4_at(b: &[u8], at: usize) -> Option<Ipv4Addr> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(Ipv4Addr::new(s[0], s[1], s[2], s[3]))
}

pub(crate) fn ipv6_at(b: &[u8], at: usize) -> Option<Ipv6Addr> {
    let s: [u8; 16] = b.get(at..at.checked_add(16)?)?.try_into().ok()?;
    Some(Ipv6Addr::from(s))
}

/// A NUL-terminated string inside a fixed-size field (the whole field if it has no NUL).
pub fn cstr(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(n) => &b[..n],
        None => b,
    }
}

/// A fixed-size C string field.
pub(crate) fn str_at(b: &[u8], at: usize, len: usize) -> Option<String> {
    let s = b.get(at..at.checked_add(len)?)?;
    Some(String::from_utf8_lossy(cstr(s)).into_owned())
}
