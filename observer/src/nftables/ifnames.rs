//! Interface names for `iif`, `oif`, `meta sdif` and `fwd`/`dup` devices.
//!
//! The kernel keeps an interface index in the rule; `nft list ruleset` prints the name the index
//! has at listing time, in the lister's namespace. Indices are per namespace, so observer asks
//! the namespace itself: [`IfNames::open`] (on a thread inside the namespace) opens a
//! `NETLINK_ROUTE` socket there, which keeps that namespace for its whole life, and each index is
//! looked up once with `RTM_GETLINK` and cached.
//!
//! Rule text is rendered deep inside the decoder crate, so the names are handed down through a
//! scope: [`scope`] lends an [`IfNames`] to the current thread while a closure decodes, and the
//! renderer asks [`lookup`] (both the crate's, [`observer_rules::nftables::render::ifnames`]).
//! Outside a scope (or when an index is unknown) the index is printed as a number, as `nft`
//! does for an interface that is gone; index 1 is always `lo`.

use std::num::NonZeroUsize;

use lru::LruCache;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

pub use observer_rules::nftables::render::ifnames::{lookup, scope, InterfaceNames};

use crate::netlink::{self, NLMSG_ERROR, NLMSG_HDRLEN, NLM_F_REQUEST};

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const IFLA_IFNAME: u16 = 3;
/// `struct ifinfomsg`: family, pad, type, index, flags, change.
const IFINFOMSG_LEN: usize = 16;
/// Names kept per namespace; a node with more interfaces only looks some up again.
const CACHE: usize = 1024;

/// The interface names of one namespace, looked up on demand; and its ipsets' names.
pub struct IfNames {
    sock: Socket,
    cache: LruCache<u32, Option<String>>,
    seq: u32,
    /// An AF_INET socket of the namespace, for `SO_IP_SET` (none without CAP_NET_RAW: set
    /// references then print as `#<index>`). Not cached: an index is reused once its set is
    /// destroyed, which the kernel allows only when no rule refers to it any more.
    ipset: Option<crate::xtables::sockopt::IpsetSocket>,
}

impl std::fmt::Debug for IfNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IfNames")
            .field("cached", &self.cache.len())
            .finish()
    }
}

impl IfNames {
    /// Open the look-up socket in the calling thread's namespace.
    pub fn open() -> std::io::Result<IfNames> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        let ipset = crate::xtables::sockopt::IpsetSocket::open()
            .map_err(|e| tracing::debug!("no ipset names in this namespace: {e}"))
            .ok();
        Ok(IfNames {
            sock,
            cache: LruCache::new(NonZeroUsize::new(CACHE).expect("non-zero")),
            seq: 0,
            ipset,
        })
    }

    /// Forget every cached name (after a re-read: interfaces may have been renamed).
    pub fn clear(&mut self) {
        self.cache.clear();
    }

    /// The name of interface `index`, if it exists.
    pub fn name(&mut self, index: u32) -> Option<String> {
        if let Some(hit) = self.cache.get(&index) {
            return hit.clone();
        }
        let name = match self.query(index) {
            Ok(n) => n,
            Err(e) => {
                // Not cached: a transient failure should not pin a number in the rule text.
                tracing::debug!("interface {index}: {e}");
                return None;
            }
        };
        self.cache.put(index, name.clone());
        name
    }

    fn query(&mut self, index: u32) -> std::io::Result<Option<String>> {
        self.seq = self.seq.wrapping_add(1);
        let mut req = Vec::with_capacity(NLMSG_HDRLEN + IFINFOMSG_LEN);
        req.extend_from_slice(&((NLMSG_HDRLEN + IFINFOMSG_LEN) as u32).to_ne_bytes());
        req.extend_from_slice(&RTM_GETLINK.to_ne_bytes());
        req.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        req.extend_from_slice(&self.seq.to_ne_bytes());
        req.extend_from_slice(&0u32.to_ne_bytes());
        req.extend_from_slice(&[0u8; 4]); // family, pad, type
        req.extend_from_slice(&(index as i32).to_ne_bytes());
        req.extend_from_slice(&[0u8; 8]); // flags, change
        self.sock.send(&req, 0)?;
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = self.sock.recv(&mut &mut buf[..], 0)?;
            if let Some(answer) = parse_reply(&buf[..n], self.seq) {
                return Ok(answer);
            }
        }
    }
}

/// The answer in one reply datagram to request `seq`: `Some(Some(name))`, `Some(None)` when the
/// kernel says there is no such interface, `None` when the datagram is about something else.
fn parse_reply(datagram: &[u8], seq: u32) -> Option<Option<String>> {
    for msg in netlink::messages(datagram) {
        let Ok(msg) = msg else { return Some(None) };
        if msg.seq != seq {
            continue;
        }
        return match msg.msg_type {
            RTM_NEWLINK => Some(
                msg.payload
                    .get(IFINFOMSG_LEN..)
                    .and_then(|a| netlink::attrs(a).ok())
                    .and_then(|list| netlink::find(&list, IFLA_IFNAME))
                    .map(|a| netlink::string(a.value))
                    .filter(|n| !n.is_empty()),
            ),
            NLMSG_ERROR => Some(None),
            _ => continue,
        };
    }
    None
}

impl InterfaceNames for IfNames {
    fn name(&mut self, index: u32) -> Option<String> {
        IfNames::name(self, index)
    }

    fn clear(&mut self) {
        IfNames::clear(self)
    }

    fn ipset(&mut self, index: u16) -> Option<String> {
        self.ipset.as_mut()?.name(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn newlink(seq: u32, name: &[u8]) -> Vec<u8> {
        let mut attrs = Vec::new();
        netlink::push_attr(&mut attrs, IFLA_IFNAME, name);
        let len = NLMSG_HDRLEN + IFINFOMSG_LEN + attrs.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&[0u8; IFINFOMSG_LEN]);
        m.extend_from_slice(&attrs);
        m
    }

    #[test]
    fn replies_are_matched_by_sequence_and_cut_ones_give_no_name() {
        let m = newlink(7, b"eth0\0");
        assert_eq!(parse_reply(&m, 7), Some(Some("eth0".into())));
        assert_eq!(parse_reply(&m, 8), None);
        for cut in 0..m.len() {
            // Never a panic; a cut message is no name, never a wrong one.
            let got = parse_reply(&m[..cut], 7);
            assert!(matches!(got, None | Some(None)), "cut at {cut}: {got:?}");
        }
    }

    #[test]
    fn loopback_and_the_calling_namespace_resolve() {
        assert_eq!(lookup(1).as_deref(), Some("lo"));
        // Outside a scope an unknown index stays a number.
        assert_eq!(lookup(4_000_000), None);
        let mut names = IfNames::open().ok();
        if names.is_none() {
            test_support::skip("no NETLINK_ROUTE socket here");
            return;
        }
        // Index 1 asked of the kernel (lookup() answers it without asking).
        assert_eq!(
            names.as_mut().and_then(|n| n.name(1)).as_deref(),
            Some("lo")
        );
        let got = scope(&mut names, || lookup(4_000_000));
        assert_eq!(got, None);
        assert!(names.is_some(), "the scope hands the names back");
    }
}
