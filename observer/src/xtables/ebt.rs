//! ebtables (ebtables-legacy) tables read from the kernel: `EBT_SO_GET_INFO` then
//! `EBT_SO_GET_ENTRIES` in the namespace that owns the table. Decoding, rendering and the diff
//! are the decoder crate's ([`observer_rules::xtables::ebt`]), re-exported here.

pub use observer_rules::xtables::ebt::*;

use super::{XtError, XtProto};

/// `EBT_SO_GET_INFO` and `EBT_SO_GET_ENTRIES` (`EBT_BASE_CTL` 128), at level `IPPROTO_IP`.
const EBT_SO_GET_INFO: libc::c_int = 128;
const EBT_SO_GET_ENTRIES: libc::c_int = 129;

/// Read bridge table `name` through `sock` (an IPv4 raw socket of the namespace that owns it):
/// its info, then its entries without counters; a table replaced in between is read again.
pub fn read_table(sock: &std::os::fd::OwnedFd, name: &str) -> Result<EbTable, XtError> {
    if name.is_empty() || name.len() >= 32 {
        return Err(XtError::BadName(name.to_string()));
    }
    let io = |op: &'static str, e: std::io::Error| match e.raw_os_error() {
        Some(libc::ENOENT) => XtError::NoSuchTable {
            proto: XtProto::Ipv4,
            name: name.to_string(),
        },
        Some(libc::EPERM) => XtError::PermissionDenied { op },
        _ => XtError::Io { op, source: e },
    };
    for _ in 0..8 {
        let mut rep = vec![0u8; REPLACE_LEN];
        rep[..name.len()].copy_from_slice(name.as_bytes());
        super::sockopt::getsockopt(sock, libc::IPPROTO_IP, EBT_SO_GET_INFO, &mut rep)
            .map_err(|e| io("EBT_SO_GET_INFO", e))?;
        let (_, info) = parse_info(&rep)?;
        let size = info.entries_size as usize;
        super::sockopt::check_read_cap(XtProto::Ipv4, name, size as u64)?;
        let mut entries = vec![0u8; size];
        // struct ebt_replace with num_counters 0 (no counters) and entries pointing at the
        // buffer; the kernel checks the length and the sizes against the table's own.
        rep[96..100].copy_from_slice(&0u32.to_ne_bytes());
        rep[104..112].copy_from_slice(&0u64.to_ne_bytes());
        rep[112..120].copy_from_slice(&(entries.as_mut_ptr() as u64).to_ne_bytes());
        let mut buf = rep.clone();
        buf.resize(REPLACE_LEN + size, 0);
        match super::sockopt::getsockopt(sock, libc::IPPROTO_IP, EBT_SO_GET_ENTRIES, &mut buf) {
            Ok(_) => return decode_table(name, &info, &entries),
            // The table changed size between the two calls: ask again.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => continue,
            Err(e) => return Err(io("EBT_SO_GET_ENTRIES", e)),
        }
    }
    Err(XtError::Unstable {
        proto: XtProto::Ipv4,
        name: name.to_string(),
        attempts: 8,
    })
}
