//! nfnetlink sockets: subscribe to `NFNLGRP_NFTABLES` and dump a namespace's ruleset.
//!
//! A netlink socket belongs to the network namespace of the thread that creates it, for its
//! whole life. So the caller enters the namespace (`setns` on one thread), calls [`subscribe`]
//! and [`request_socket`] there, and may then use both sockets from any thread. The dump runs
//! on its own socket so that its replies never interleave with notifications.
//!
//! Needs CAP_NET_ADMIN in the namespace's owning user namespace for the dump (reading the
//! ruleset), and a kernel with nf_tables (3.13+). Generation ids in `NFT_MSG_NEWGEN` need 3.16+,
//! the writer's pid and comm in it 5.x+.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket};

pub use observer_rules::nftables::Dump;

use super::decode::{self, Notification, Verb};
use super::NftError;
use crate::netlink::{self, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLMSG_OVERRUN};

/// The nfnetlink multicast group of nf_tables notifications.
pub const NFNLGRP_NFTABLES: u32 = 7;
/// Receive buffer asked for on the notification socket. The kernel sends all notifications of
/// a generation in one burst when it commits: measured here, an `iptables-nft-restore` of
/// 20,000 rules in 2,000 chains overflows 8 and 16 MiB (ENOBUFS), and re-running it (the
/// table deleted and recreated: 44,000 notifications) fits in 32 MiB. Memory is only used
/// while notifications wait to be read.
pub const RCVBUF_BYTES: usize = 32 << 20;
/// Large enough for any notification datagram (the kernel packs them up to NLMSG_GOODSIZE)
/// and any dump datagram (at most 32 KiB plus overhead).
pub const RECV_BUF_BYTES: usize = 256 << 10;

const NFPROTO_UNSPEC: u8 = 0;
const DUMP_ATTEMPTS: usize = 5;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

static SEQ: AtomicU32 = AtomicU32::new(1);

/// Open a NETLINK_NETFILTER socket in the calling thread's network namespace, joined to
/// `NFNLGRP_NFTABLES`, non-blocking and close-on-exec, with a large receive buffer.
///
/// NETLINK_NO_ENOBUFS stays off: when the kernel drops notifications, the next read fails with
/// [`NftError::Overrun`] and the caller must re-dump.
pub fn subscribe() -> Result<Socket, NftError> {
    subscribe_with(RCVBUF_BYTES)
}

/// [`subscribe`] with another receive buffer size.
pub fn subscribe_with(rcvbuf_bytes: usize) -> Result<Socket, NftError> {
    let mut sock = open()?;
    set_rcvbuf(&sock, rcvbuf_bytes)?;
    sock.bind_auto().map_err(|e| NftError::socket("bind", e))?;
    sock.add_membership(NFNLGRP_NFTABLES)
        .map_err(|e| NftError::socket("join NFNLGRP_NFTABLES", e))?;
    sock.set_non_blocking(true)
        .map_err(|e| NftError::socket("set non-blocking", e))?;
    Ok(sock)
}

/// Read one datagram. `Ok(None)` when nothing is queued (the socket is non-blocking).
///
/// ENOBUFS becomes [`NftError::Overrun`]; a datagram larger than `buf` becomes
/// [`NftError::Truncated`]. Both mean notifications were lost: re-dump.
pub fn recv(sock: &Socket, buf: &mut [u8]) -> Result<Option<usize>, NftError> {
    loop {
        let cap = buf.len();
        let mut slice: &mut [u8] = buf;
        match sock.recv(&mut slice, libc::MSG_TRUNC) {
            Ok(n) if n > cap => return Err(NftError::Truncated { len: n, buf: cap }),
            Ok(n) => return Ok(Some(n)),
            Err(e) => match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(None),
                Some(libc::ENOBUFS) => return Err(NftError::Overrun),
                _ => return Err(NftError::Recv(e)),
            },
        }
    }
}

/// Discard what is queued on a notification socket after ENOBUFS: those notifications
/// predate the loss, and the dump taken next holds what they described (fed after it, a
/// generation whose NEWGEN was lost would wait and be reported with the next one). Stops at
/// an empty queue, or after `max` datagrams under a writer that never pauses. Returns how many
/// were discarded.
pub fn discard_queued(sock: &Socket, buf: &mut [u8], max: usize) -> usize {
    let mut n = 0;
    while n < max {
        match recv(sock, buf) {
            Ok(Some(_)) | Err(NftError::Truncated { .. }) => n += 1,
            Err(NftError::Overrun) => continue,
            Ok(None) | Err(_) => break,
        }
    }
    n
}

/// A socket for requests (dump, generation id) in the calling thread's network namespace:
/// blocking, with a receive timeout so a silent kernel cannot hang the caller.
pub fn request_socket() -> Result<Socket, NftError> {
    let mut sock = open()?;
    sock.bind_auto().map_err(|e| NftError::socket("bind", e))?;
    let tv = libc::timeval {
        tv_sec: REQUEST_TIMEOUT.as_secs() as libc::time_t,
        tv_usec: 0,
    };
    // SAFETY: `tv` is a valid timeval that outlives the call; the length matches its type.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(NftError::socket(
            "set SO_RCVTIMEO",
            io::Error::last_os_error(),
        ));
    }
    Ok(sock)
}

/// Dump the ruleset of the calling thread's namespace on a fresh request socket.
pub fn dump() -> Result<Dump, NftError> {
    dump_on(&request_socket()?)
}

/// Like [`dump`], stopping with [`NftError::TooManyRules`] once the ruleset shows more than
/// `cap` rules: a namespace's ruleset is never held whole past what it may hold.
pub fn dump_within(cap: usize) -> Result<Dump, NftError> {
    dump_inner(&request_socket()?, None, Mode::UpTo(cap))
}

/// The ruleset as a chain-level hold needs it: tables, chains and named sets, and each chain's
/// rule count ([`Dump::rule_counts`]) instead of its rules; no anonymous set, no element.
pub fn dump_counting() -> Result<Dump, NftError> {
    dump_inner(&request_socket()?, None, Mode::Count)
}

/// What a dump does with the rules.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Keep them all.
    Whole,
    /// Keep them, failing with [`NftError::TooManyRules`] past this many.
    UpTo(usize),
    /// Count them per chain, keep none (and no anonymous set, no element).
    Count,
}

/// Each chain's rule count, by (family, table, chain).
type Counts = std::collections::HashMap<(u8, String, String), usize>;

/// What a request does with the rules of its answer.
enum Rules<'a> {
    Keep,
    UpTo(usize),
    Count(&'a mut Counts),
}

/// Dump tables, chains, sets, set elements and rules (all families), and the generation id.
///
/// The generation is read before and after; when it moved, or the kernel flagged a dump as
/// interrupted, the dump is retried (a few times, then [`NftError::Inconsistent`]).
pub fn dump_on(sock: &Socket) -> Result<Dump, NftError> {
    dump_inner(sock, None, Mode::Whole)
}

/// Like [`dump_on`], also handing back the raw reply datagrams (for test fixtures).
#[cfg(test)]
pub(crate) fn dump_raw(sock: &Socket) -> Result<(Dump, Vec<Vec<u8>>), NftError> {
    let mut raw = Vec::new();
    let dump = dump_inner(sock, Some(&mut raw), Mode::Whole)?;
    Ok((dump, raw))
}

fn dump_inner(
    sock: &Socket,
    mut raw: Option<&mut Vec<Vec<u8>>>,
    mode: Mode,
) -> Result<Dump, NftError> {
    'attempt: for _ in 0..DUMP_ATTEMPTS {
        if let Some(r) = raw.as_deref_mut() {
            r.clear();
        }
        let before = generation(sock)?;
        let mut items = Vec::new();
        let mut counts = Counts::new();
        for (kind, what) in [
            (decode::NFT_MSG_GETTABLE, "dump tables"),
            (decode::NFT_MSG_GETCHAIN, "dump chains"),
            (decode::NFT_MSG_GETSET, "dump sets"),
            (decode::NFT_MSG_GETRULE, "dump rules"),
        ] {
            let rules = match mode {
                Mode::Whole => Rules::Keep,
                Mode::UpTo(cap) => Rules::UpTo(cap),
                Mode::Count => Rules::Count(&mut counts),
            };
            let reply = request(
                sock,
                what,
                kind,
                netlink::NLM_F_DUMP,
                NFPROTO_UNSPEC,
                &[],
                &mut raw,
                rules,
            )?;
            if reply.interrupted {
                continue 'attempt;
            }
            items.extend(reply.items);
        }
        let counting = matches!(mode, Mode::Count);
        if counting {
            // A rule's own sets are not kept at chain level, nor is any set's content.
            items.retain(|n| !matches!(n, Notification::Set(_, s) if s.is_anonymous()));
        }
        let sets: Vec<(u8, String, String)> = items
            .iter()
            .filter_map(|n| match n {
                Notification::Set(Verb::New, s) if !counting => {
                    Some((s.family, s.table.clone(), s.name.clone()))
                }
                _ => None,
            })
            .collect();
        for (family, table, set) in sets {
            let attrs = [
                (1, netlink::cstr(&table)), // NFTA_SET_ELEM_LIST_TABLE
                (2, netlink::cstr(&set)),   // NFTA_SET_ELEM_LIST_SET
            ];
            let what = "dump set elements";
            let kind = decode::NFT_MSG_GETSETELEM;
            match request(
                sock,
                what,
                kind,
                netlink::NLM_F_DUMP,
                family,
                &attrs,
                &mut raw,
                Rules::Keep,
            ) {
                Ok(reply) if !reply.interrupted => items.extend(reply.items),
                // The set went away since the set dump: try again.
                Ok(_) => continue 'attempt,
                Err(NftError::Kernel { errno, .. }) if errno == libc::ENOENT => continue 'attempt,
                Err(e) => return Err(e),
            }
        }
        if generation(sock)? == before {
            let mut dump = Dump::from_notifications(before, items);
            if counting {
                dump.rule_counts = Some(counts);
            }
            return Ok(dump);
        }
    }
    Err(NftError::Inconsistent {
        attempts: DUMP_ATTEMPTS,
    })
}

/// The current generation id of the calling socket's namespace (`NFT_MSG_GETGEN`).
pub fn generation(sock: &Socket) -> Result<u32, NftError> {
    let reply = request(
        sock,
        "get generation",
        decode::NFT_MSG_GETGEN,
        netlink::NLM_F_ACK,
        NFPROTO_UNSPEC,
        &[],
        &mut None,
        Rules::Keep,
    )?;
    reply
        .items
        .into_iter()
        .find_map(|n| match n {
            Notification::Gen(g) => Some(g.id),
            _ => None,
        })
        .ok_or(NftError::Malformed {
            request: "get generation",
            reason: "no NEWGEN in the reply".into(),
        })
}

fn open() -> Result<Socket, NftError> {
    // netlink-sys opens with SOCK_CLOEXEC.
    Socket::new(NETLINK_NETFILTER).map_err(|e| NftError::socket("open NETLINK_NETFILTER", e))
}

/// SO_RCVBUFFORCE (needs CAP_NET_ADMIN, ignores rmem_max), else SO_RCVBUF (capped by rmem_max).
fn set_rcvbuf(sock: &Socket, bytes: usize) -> Result<(), NftError> {
    let val = bytes as libc::c_int;
    // SAFETY: `val` is a valid c_int that outlives the call; the length matches its type.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&val as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    tracing::debug!(
        error = %io::Error::last_os_error(),
        "SO_RCVBUFFORCE refused, falling back to SO_RCVBUF (capped by net.core.rmem_max)"
    );
    sock.set_rx_buf_sz(bytes)
        .map_err(|e| NftError::socket("set SO_RCVBUF", e))
}

struct Reply {
    items: Vec<Notification>,
    interrupted: bool,
}

/// Send one request and collect its answer: until NLMSG_DONE for dumps, until the ACK
/// otherwise. Messages with another sequence number (late answers to an earlier, timed-out
/// request) are ignored. With `cap`, fail with [`NftError::TooManyRules`] once the answer holds
/// more than that many rules (the rest is left unread: the socket is not used again).
#[allow(
    clippy::too_many_arguments,
    reason = "a request's parts, where its answer goes, a cap"
)]
fn request(
    sock: &Socket,
    what: &'static str,
    msg: u8,
    flags: u16,
    family: u8,
    attrs: &[(u16, Vec<u8>)],
    raw: &mut Option<&mut Vec<Vec<u8>>>,
    mut rules: Rules<'_>,
) -> Result<Reply, NftError> {
    let mut kept = 0usize;
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let mut body = vec![family, 0, 0, 0]; // nfgenmsg: family, NFNETLINK_V0, res_id 0
    for (kind, value) in attrs {
        netlink::push_attr(&mut body, *kind, value);
    }
    let mut buf = Vec::with_capacity(netlink::NLMSG_HDRLEN + body.len());
    buf.extend_from_slice(&((netlink::NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes());
    buf.extend_from_slice(&((10u16 << 8) | u16::from(msg)).to_ne_bytes());
    buf.extend_from_slice(&(netlink::NLM_F_REQUEST | flags).to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&body);
    sock.send(&buf, 0).map_err(NftError::Send)?;

    let mut reply = Reply {
        items: Vec::new(),
        interrupted: false,
    };
    let mut rx = vec![0u8; RECV_BUF_BYTES];
    loop {
        let n = loop {
            let mut slice: &mut [u8] = &mut rx;
            match sock.recv(&mut slice, libc::MSG_TRUNC) {
                Ok(n) if n > RECV_BUF_BYTES => {
                    return Err(NftError::Truncated {
                        len: n,
                        buf: RECV_BUF_BYTES,
                    })
                }
                Ok(n) => break n,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                    return Err(NftError::Timeout { request: what })
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => return Err(NftError::Overrun),
                Err(e) => return Err(NftError::Recv(e)),
            }
        };
        if let Some(r) = raw.as_deref_mut() {
            r.push(rx[..n].to_vec());
        }
        for m in netlink::messages(&rx[..n]) {
            let m = m.map_err(|e| NftError::Malformed {
                request: what,
                reason: e.0,
            })?;
            if m.seq != seq {
                continue;
            }
            if m.flags & netlink::NLM_F_DUMP_INTR != 0 {
                reply.interrupted = true;
            }
            match m.msg_type {
                NLMSG_NOOP => {}
                NLMSG_DONE => return Ok(reply),
                NLMSG_OVERRUN => return Err(NftError::Overrun),
                NLMSG_ERROR => {
                    let code = m
                        .payload
                        .get(..4)
                        .and_then(|b| <[u8; 4]>::try_from(b).ok())
                        .map(i32::from_ne_bytes)
                        .ok_or(NftError::Malformed {
                            request: what,
                            reason: "short NLMSG_ERROR".into(),
                        })?;
                    if code == 0 {
                        return Ok(reply);
                    }
                    return Err(NftError::Kernel {
                        request: what,
                        errno: -code,
                    });
                }
                _ => {
                    let item = decode::decode_message(&m);
                    if let Notification::Rule(_, r) = &item {
                        match &mut rules {
                            Rules::Keep => {}
                            Rules::UpTo(cap) => {
                                kept += 1;
                                if kept > *cap {
                                    return Err(NftError::TooManyRules { cap: *cap });
                                }
                            }
                            Rules::Count(counts) => {
                                *counts
                                    .entry((r.family, r.table.clone(), r.chain.clone()))
                                    .or_default() += 1;
                                continue;
                            }
                        }
                    }
                    reply.items.push(item);
                }
            }
        }
    }
}
