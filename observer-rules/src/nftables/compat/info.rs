//! Bounds-checked reads from an x_tables extension's info blob (the uapi `xt_*` structs: host
//! byte order for plain integers, network order for `__be` fields). Every read of a blob too
//! short for it is `None`, so a short blob makes its decoder fall back, never panic.
//!
//! Layering: the bottom of the compat printers (`matches`, `targets`, `compat`);
//! imports only `crate::netlink`.

/// Bounds-checked reads from an extension's info blob.
pub(crate) struct Info<'a>(pub(crate) &'a [u8]);

impl Info<'_> {
    pub(crate) fn u8(&self, off: usize) -> Option<u8> {
        self.0.get(off).copied()
    }

    pub(crate) fn u16(&self, off: usize) -> Option<u16> {
        let b = self.0.get(off..off + 2)?;
        Some(u16::from_ne_bytes([b[0], b[1]]))
    }

    pub(crate) fn be16(&self, off: usize) -> Option<u16> {
        let b = self.0.get(off..off + 2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&self, off: usize) -> Option<u32> {
        let b = self.0.get(off..off + 4)?;
        Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn bytes(&self, off: usize, len: usize) -> Option<&[u8]> {
        self.0.get(off..off + len)
    }

    pub(crate) fn cstr(&self, off: usize, len: usize) -> Option<String> {
        let b = self.0.get(off..(off + len).min(self.0.len()))?;
        Some(crate::netlink::string(b))
    }
}
