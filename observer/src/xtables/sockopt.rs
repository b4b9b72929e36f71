//! Read an x_tables table from the kernel with `getsockopt`, in the calling thread's netns.
//!
//! This is the only way to see a legacy table: `IPT_SO_GET_INFO` gives its size and hook
//! offsets, `IPT_SO_GET_ENTRIES` the entries (ip6 uses the same numbers at level `SOL_IPV6`,
//! arp `ARPT_SO_GET_*` 96/97). Both need CAP_NET_ADMIN in the namespace. Works on every kernel
//! with x_tables (built in or as modules; without them the `*_tables_names` file is absent).
//!
//! Caution: on current kernels `GET_INFO` for a built-in table name that is not instantiated yet
//! creates it in that namespace (registering its hooks). Reading must not change what it
//! observes, so [`read_table`] only asks for tables that `*_tables_names` lists.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use observer_rules::xtables::bytes::cstr;

use super::decode::{self, RawTable, TableInfo, GET_ENTRIES_HEADER, TABLE_NAME_LEN};
use super::{Against, XtError, XtProto, XtTable};

/// How often to retry when the table is replaced between `GET_INFO` and `GET_ENTRIES`.
const MAX_ATTEMPTS: u32 = 8;

const SOL_IP: libc::c_int = 0;
const SOL_IPV6: libc::c_int = 41;
/// `IPT_SO_GET_INFO` / `IP6T_SO_GET_INFO`.
const IPT_SO_GET_INFO: libc::c_int = 64;
/// `IPT_SO_GET_ENTRIES` / `IP6T_SO_GET_ENTRIES`.
const IPT_SO_GET_ENTRIES: libc::c_int = 65;
const ARPT_SO_GET_INFO: libc::c_int = 96;
const ARPT_SO_GET_ENTRIES: libc::c_int = 97;
/// `SO_IP_SET`, the ipset control socket option (on an AF_INET socket).
const SO_IP_SET: libc::c_int = 83;
const IP_SET_OP_GET_BYINDEX: u32 = 0x7;
const IP_SET_OP_VERSION: u32 = 0x100;
/// `IPSET_MAXNAMELEN`.
const IPSET_MAXNAMELEN: usize = 32;

fn names_path(proto: XtProto) -> &'static str {
    match proto {
        XtProto::Ipv4 => "/proc/thread-self/net/ip_tables_names",
        XtProto::Ipv6 => "/proc/thread-self/net/ip6_tables_names",
        XtProto::Arp => "/proc/thread-self/net/arp_tables_names",
    }
}

/// The tables of this family that exist in the calling thread's network namespace.
///
/// An absent names file (x_tables not loaded for this family) is an empty list.
pub fn table_names(proto: XtProto) -> Result<Vec<String>, XtError> {
    match std::fs::read_to_string(names_path(proto)) {
        Ok(s) => Ok(s
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Err(XtError::PermissionDenied {
            op: "reading the x_tables names",
        }),
        Err(source) => Err(XtError::Io {
            op: "reading the x_tables names",
            source,
        }),
    }
}

/// Read and decode one table of the calling thread's network namespace.
///
/// Returns [`XtError::NoSuchTable`] when the table is not instantiated there (it is never
/// created by this call). Names of ipsets that `-m set` refers to are resolved here, in the
/// same namespace, so that the table can be rendered later from any thread.
pub fn read_table(proto: XtProto, name: &str) -> Result<XtTable, XtError> {
    read_table_against(proto, name, None)
}

/// [`read_table`], taking the chains that did not change since `prev` (the copy read last
/// time) from it.
pub fn read_table_against<'p>(
    proto: XtProto,
    name: &str,
    against: impl Into<Against<'p>>,
) -> Result<XtTable, XtError> {
    let raw = read_raw(proto, name)?;
    finish(proto, name, raw, None, against.into())
}

/// Sockets opened in one network namespace, through which its tables are read from any thread:
/// the kernel answers a socket option in the namespace of the socket, not of the caller. Entering
/// the namespace for every read costs a thread and a `setns` (0.1 to 5 ms here); this costs two
/// descriptors, and keeps the namespace alive while it is held (drop it with the namespace).
#[derive(Debug)]
pub struct XtSockets {
    inet: OwnedFd,
    /// `None` where the kernel has no IPv6.
    inet6: Option<OwnedFd>,
}

impl XtSockets {
    /// Open them in the calling thread's network namespace.
    pub fn open() -> Result<XtSockets, XtError> {
        Ok(XtSockets {
            inet: raw_socket(libc::AF_INET)?,
            inet6: raw_socket(libc::AF_INET6).ok(),
        })
    }

    /// The IPv4 raw socket, through which ebtables is read too.
    pub(crate) fn inet(&self) -> &OwnedFd {
        &self.inet
    }

    fn for_proto(&self, proto: XtProto) -> Result<&OwnedFd, XtError> {
        match proto {
            XtProto::Ipv4 | XtProto::Arp => Ok(&self.inet),
            XtProto::Ipv6 => self.inet6.as_ref().ok_or_else(|| XtError::Io {
                op: "opening an IPv6 raw socket",
                source: io::Error::from_raw_os_error(libc::EAFNOSUPPORT),
            }),
        }
    }
}

/// Read and decode a table that exists, through sockets of its namespace, from any thread.
///
/// Unlike [`read_table`], the table's existence is not checked against `*_tables_names` (that
/// file shows the reading thread's namespace): call it for a table the kernel has just replaced,
/// which therefore exists. Asked for a built-in table that a namespace does not have yet, the
/// kernel would create it.
///
/// The chains that did not change since `prev` (the copy read last time) are taken from it.
pub fn read_existing_table<'p>(
    socks: &XtSockets,
    proto: XtProto,
    name: &str,
    against: impl Into<Against<'p>>,
) -> Result<XtTable, XtError> {
    let raw = read_raw_on(socks.for_proto(proto)?, proto, name)?;
    finish(proto, name, raw, Some(&socks.inet), against.into())
}

/// Decode, name, and resolve the ipset names (through `sock`, or a socket of the calling
/// thread's namespace).
fn finish(
    proto: XtProto,
    name: &str,
    raw: RawTable,
    sock: Option<&OwnedFd>,
    against: Against<'_>,
) -> Result<XtTable, XtError> {
    let mut table = decode::decode_raw(proto, raw, against)?;
    table.name = name.to_string();
    name_sets_on(&mut table, sock);
    Ok(table)
}

/// Name the ipsets that the table's `-m set` matches and `-j SET` targets refer to by index,
/// through a socket of its namespace: for a table decoded from a writer's copy (a table read
/// back is named as it is read).
pub fn name_sets(table: &mut XtTable, socks: &XtSockets) {
    name_sets_on(table, Some(&socks.inet));
}

fn name_sets_on(table: &mut XtTable, sock: Option<&OwnedFd>) {
    if !table.set_indices().is_empty() {
        for (index, set) in ipset_names(sock, table.set_indices()) {
            table.set_name(index, set);
        }
    }
}

/// `GET_INFO` then `GET_ENTRIES` in the calling thread's namespace, for a table listed there.
pub fn read_raw(proto: XtProto, name: &str) -> Result<RawTable, XtError> {
    check_name(name)?;
    if !table_names(proto)?.iter().any(|n| n == name) {
        return Err(no_such(proto, name));
    }
    let family = match proto {
        XtProto::Ipv6 => libc::AF_INET6,
        XtProto::Ipv4 | XtProto::Arp => libc::AF_INET,
    };
    read_raw_on(&raw_socket(family)?, proto, name)
}

fn check_name(name: &str) -> Result<(), XtError> {
    if name.is_empty() || name.len() >= TABLE_NAME_LEN || name.contains('\0') {
        return Err(XtError::BadName(name.to_string()));
    }
    Ok(())
}

/// `GET_INFO` then `GET_ENTRIES` on `sock` (of the table's family and namespace), retried while
/// the table changes in between.
/// The most bytes of entries one read may copy out of the kernel ([`set_read_cap`]).
static READ_CAP: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

/// The most bytes of entries a read of one table may copy out of the kernel
/// (`--max-table-read`): the kernel hands them over in one call, so a larger table would take
/// that much memory at once. Reading a larger table fails with [`XtError::TooLarge`].
pub fn set_read_cap(bytes: usize) {
    READ_CAP.store(bytes, std::sync::atomic::Ordering::Relaxed);
}

/// [`XtError::TooLarge`] when `size` bytes of table `name` may not be read.
pub(crate) fn check_read_cap(proto: XtProto, name: &str, size: u64) -> Result<(), XtError> {
    let cap = READ_CAP.load(std::sync::atomic::Ordering::Relaxed);
    if size > cap as u64 {
        return Err(XtError::TooLarge {
            proto,
            name: name.to_string(),
            size,
            cap,
        });
    }
    Ok(())
}

fn read_raw_on(sock: &OwnedFd, proto: XtProto, name: &str) -> Result<RawTable, XtError> {
    check_name(name)?;
    let (level, info_opt, entries_opt) = match proto {
        XtProto::Ipv4 => (SOL_IP, IPT_SO_GET_INFO, IPT_SO_GET_ENTRIES),
        XtProto::Ipv6 => (SOL_IPV6, IPT_SO_GET_INFO, IPT_SO_GET_ENTRIES),
        XtProto::Arp => (SOL_IP, ARPT_SO_GET_INFO, ARPT_SO_GET_ENTRIES),
    };
    let info_size = decode::layout(proto).info_size;
    let get_info = || -> Result<(Vec<u8>, TableInfo), XtError> {
        let mut buf = vec![0u8; info_size];
        buf[..name.len()].copy_from_slice(name.as_bytes());
        getsockopt(sock, level, info_opt, &mut buf)
            .map_err(|e| map_err(e, proto, name, "GET_INFO"))?;
        let info = decode::parse_info(proto, &buf)?;
        Ok((buf, info))
    };
    for _ in 0..MAX_ATTEMPTS {
        let (info_bytes, info) = get_info()?;
        check_read_cap(proto, name, u64::from(info.size))?;
        let mut buf = vec![0u8; GET_ENTRIES_HEADER + info.size as usize];
        advise_huge_pages(&buf);
        buf[..name.len()].copy_from_slice(name.as_bytes());
        buf[TABLE_NAME_LEN..TABLE_NAME_LEN + 4].copy_from_slice(&info.size.to_ne_bytes());
        match getsockopt(sock, level, entries_opt, &mut buf) {
            Ok(n) if n == buf.len() => {}
            // A short answer or EAGAIN: the table was replaced in between.
            Ok(_) => continue,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
            Err(e) => return Err(map_err(e, proto, name, "GET_ENTRIES")),
        }
        // GET_ENTRIES only checks the size: a replace of the same size in between would pair
        // these entries with stale hook offsets. Check that nothing moved.
        if get_info()?.1 != info {
            continue;
        }
        return Ok(RawTable {
            info_bytes,
            info,
            buf,
        });
    }
    Err(XtError::Unstable {
        proto,
        name: name.to_string(),
        attempts: MAX_ATTEMPTS,
    })
}

/// Below this size a read-back buffer is left to ordinary pages.
const HUGE_BUFFER: usize = 8 << 20;
/// The size of a transparent huge page on x86_64 and arm64 (4 KiB base pages).
const HUGE_PAGE: usize = 2 << 20;

/// Ask for transparent huge pages for a large read-back buffer that nothing has written yet: the
/// kernel's copy of a 66 MB table into fresh memory otherwise takes one page fault per 4 KiB
/// (16,000 of them, about a sixth of observer's CPU for the read on such a table). Advice only:
/// where THP is off, or the range is not backed by huge pages, nothing changes.
fn advise_huge_pages(buf: &[u8]) {
    if buf.len() < HUGE_BUFFER {
        return;
    }
    let start = (buf.as_ptr() as usize).next_multiple_of(HUGE_PAGE);
    let end = (buf.as_ptr() as usize + buf.len()) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: madvise only changes how the pages of this range, which `buf` owns, are
        // backed; it neither reads nor writes them, and MADV_HUGEPAGE keeps their contents.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

fn no_such(proto: XtProto, name: &str) -> XtError {
    XtError::NoSuchTable {
        proto,
        name: name.to_string(),
    }
}

fn map_err(e: io::Error, proto: XtProto, name: &str, op: &'static str) -> XtError {
    match e.raw_os_error() {
        Some(libc::ENOENT) => no_such(proto, name),
        Some(libc::EPERM) | Some(libc::EACCES) => XtError::PermissionDenied { op },
        _ => XtError::Io { op, source: e },
    }
}

fn raw_socket(family: libc::c_int) -> Result<OwnedFd, XtError> {
    // SAFETY: plain socket(2) call; the returned descriptor is checked and then owned.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_RAW,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => XtError::PermissionDenied {
                op: "opening a raw socket",
            },
            _ => XtError::Io {
                op: "opening a raw socket",
                source: e,
            },
        });
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `getsockopt` into `buf`; returns the length the kernel reported.
pub(crate) fn getsockopt(
    sock: &OwnedFd,
    level: libc::c_int,
    opt: libc::c_int,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut len = libc::socklen_t::try_from(buf.len())
        .map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
    // SAFETY: `buf` is valid for writes of `len` bytes and `len` points at a live socklen_t.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            buf.as_mut_ptr().cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(len as usize)
}

/// An AF_INET socket of one namespace, for name look-ups by index, and the kernel's ipset
/// protocol version once it has answered (it cannot before `ip_set` is loaded, which the first
/// `ipset` command does, so a failed ask is asked again).
pub(crate) struct IpsetSocket {
    fd: OwnedFd,
    version: Option<u32>,
}

impl IpsetSocket {
    /// Open it in the calling thread's namespace.
    pub(crate) fn open() -> Result<IpsetSocket, XtError> {
        Ok(IpsetSocket {
            fd: raw_socket(libc::AF_INET)?,
            version: None,
        })
    }

    /// The name of the ipset at `index`, if one is there.
    pub(crate) fn name(&mut self, index: u16) -> Option<String> {
        let version = match self.version {
            Some(v) => v,
            None => {
                let v = ipset_version(&self.fd)
                    .map_err(|e| tracing::debug!("ipset version query failed: {e}"))
                    .ok()?;
                *self.version.insert(v)
            }
        };
        ipset_by_index(&self.fd, version, index)
    }
}

/// The ipset protocol version of `sock`'s kernel.
fn ipset_version(sock: &OwnedFd) -> io::Result<u32> {
    let mut req = [0u8; 8];
    req[..4].copy_from_slice(&IP_SET_OP_VERSION.to_ne_bytes());
    getsockopt(sock, SOL_IP, SO_IP_SET, &mut req)?;
    Ok(u32::from_ne_bytes([req[4], req[5], req[6], req[7]]))
}

/// The name of the ipset at `index` in `sock`'s namespace, if one is there.
fn ipset_by_index(sock: &OwnedFd, version: u32, index: u16) -> Option<String> {
    let mut req = [0u8; 8 + IPSET_MAXNAMELEN];
    req[..4].copy_from_slice(&IP_SET_OP_GET_BYINDEX.to_ne_bytes());
    req[4..8].copy_from_slice(&version.to_ne_bytes());
    req[8..10].copy_from_slice(&index.to_ne_bytes());
    match getsockopt(sock, SOL_IP, SO_IP_SET, &mut req) {
        Ok(_) => {
            let name = cstr(&req[8..]);
            (!name.is_empty()).then(|| String::from_utf8_lossy(name).into_owned())
        }
        Err(e) => {
            tracing::debug!("ipset index {index}: {e}");
            None
        }
    }
}

/// Resolve ipset indices to names through `SO_IP_SET` (what `iptables-save` does) on `sock` (an
/// AF_INET socket of the table's namespace; one is opened in the calling thread's namespace
/// when `None`). Indices that cannot be resolved are left out; the renderer then prints
/// `#<index>`.
fn ipset_names(sock: Option<&OwnedFd>, indices: &[u16]) -> HashMap<u16, String> {
    let mut out = HashMap::new();
    let opened;
    let sock = match sock {
        Some(s) => s,
        None => match raw_socket(libc::AF_INET) {
            Ok(s) => {
                opened = s;
                &opened
            }
            Err(_) => return out,
        },
    };
    let version = match ipset_version(sock) {
        Ok(v) => v,
        Err(e) => {
            tracing::debug!("ipset version query failed: {e}");
            return out;
        }
    };
    for &index in indices {
        if let Some(name) = ipset_by_index(sock, version, index) {
            out.insert(index, name);
        }
    }
    out
}
