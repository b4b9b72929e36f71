//! ipset changes. The kernel sends no notifications for ipset, so the `sendto`/`sendmsg` hook
//! reports each ruleset-changing ipset command (with its writer) once the kernel has applied it;
//! observer then lists the set headers of that namespace once (names, types, element counts,
//! references: no members) and compares them with the last listing. The command says what was
//! asked, the listing says what happened: a `destroy` of a set still in use is reported with
//! `result` saying it failed. The listing is triggered by the command, never by a timer.
//! Any kernel with ipset (`ip_set`, protocol 6 or 7).

use std::collections::BTreeMap;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};
use observer_common::nfnl::{
    IPSET_CMD_ADD, IPSET_CMD_CREATE, IPSET_CMD_DEL, IPSET_CMD_DESTROY, IPSET_CMD_FLUSH,
    IPSET_CMD_LIST, IPSET_CMD_RENAME, IPSET_CMD_SWAP, NFNL_SUBSYS_IPSET,
};

use crate::netlink;
use crate::ruleset::{Change, ChangeResult, Family, Op};

/// `IPSET_PROTOCOL`.
const PROTOCOL: u8 = 7;
const ATTR_PROTOCOL: u16 = 1;
const ATTR_SETNAME: u16 = 2;
/// `IPSET_ATTR_TYPENAME`, also `IPSET_ATTR_SETNAME2` in rename and swap.
const ATTR_TYPENAME: u16 = 3;
const ATTR_FAMILY: u16 = 5;
const ATTR_FLAGS: u16 = 6;
const ATTR_DATA: u16 = 7;
const ATTR_ADT: u16 = 8;
/// Inside `IPSET_ATTR_DATA` of a listed set.
const ATTR_ELEMENTS: u16 = 24;
const ATTR_REFERENCES: u16 = 25;
/// `IPSET_FLAG_LIST_HEADER`: list names and headers only, no members.
const FLAG_LIST_HEADER: u32 = 1 << 2;

/// The `table` of every ipset line (sets belong to no table).
pub const TABLE: &str = "ipset";

/// One set as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetHeader {
    pub typename: String,
    /// NFPROTO_* of the set.
    pub family: u8,
    pub elements: Option<u32>,
    pub references: Option<u32>,
}

/// The sets of one namespace, by name.
pub type Sets = BTreeMap<String, SetHeader>;

/// One ipset command as the writer sent it (the start of it: a large `restore` batch is cut).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub cmd: u8,
    pub flags: u16,
    pub set: Option<String>,
    /// The second name of `rename` and `swap`.
    pub set2: Option<String>,
    /// Elements in an `add`/`del` request, when the request was captured whole.
    pub elements: Option<usize>,
}

/// Why the sets could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum IpsetError {
    /// The netlink socket could not be opened or used.
    #[error("ipset netlink socket: {0}")]
    Socket(#[from] std::io::Error),
    /// The kernel answered with an error (no ipset support: `modprobe ip_set`).
    #[error("the kernel refused to list ipsets: {0}")]
    Kernel(std::io::Error),
    /// The reply could not be decoded.
    #[error("malformed ipset reply: {0}")]
    Malformed(String),
}

impl Command {
    /// Decode the first message of a captured request; `None` when it is not an ipset command.
    pub fn parse(head: &[u8]) -> Option<Command> {
        if head.len() < netlink::NLMSG_HDRLEN + netlink::NFGENMSG_LEN {
            return None;
        }
        let netlink::Header {
            len,
            msg_type: ty,
            flags,
        } = netlink::header(head)?;
        if ty >> 8 != NFNL_SUBSYS_IPSET {
            return None;
        }
        let whole = len <= head.len();
        let end = len.min(head.len());
        let attrs =
            netlink::lenient_attrs(head.get(netlink::NLMSG_HDRLEN + netlink::NFGENMSG_LEN..end)?);
        let text = |kind| {
            attrs
                .iter()
                .find(|a| a.0 == kind)
                .map(|a| netlink::string(a.2))
        };
        let cmd = ty as u8;
        let elements = if !matches!(cmd, IPSET_CMD_ADD | IPSET_CMD_DEL) || !whole {
            None
        } else if let Some(adt) = attrs.iter().find(|a| a.0 == ATTR_ADT) {
            Some(
                netlink::lenient_attrs(adt.2)
                    .iter()
                    .filter(|a| a.0 == ATTR_DATA)
                    .count(),
            )
        } else {
            Some(usize::from(attrs.iter().any(|a| a.0 == ATTR_DATA)))
        };
        Some(Command {
            cmd,
            flags,
            set: text(ATTR_SETNAME).filter(|s| !s.is_empty()),
            set2: if matches!(cmd, IPSET_CMD_RENAME | IPSET_CMD_SWAP) {
                text(ATTR_TYPENAME)
            } else {
                None
            },
            elements,
        })
    }

    fn exclusive(&self) -> bool {
        self.flags & netlink::NLM_F_EXCL != 0
    }
}

/// The headers of every set in the calling thread's network namespace.
pub fn list() -> Result<Sets, IpsetError> {
    let mut sock = Socket::new(NETLINK_NETFILTER)?;
    sock.bind_auto()?;
    sock.connect(&SocketAddr::new(0, 0))?;
    let mut req = vec![0u8; netlink::NLMSG_HDRLEN];
    // nfgenmsg: family AF_INET (ipset's convention), version 0, res_id 0.
    req.extend_from_slice(&[libc::AF_INET as u8, 0, 0, 0]);
    netlink::push_attr(&mut req, ATTR_PROTOCOL, &[PROTOCOL]);
    netlink::push_attr(
        &mut req,
        ATTR_FLAGS | netlink::NLA_F_NET_BYTEORDER,
        &FLAG_LIST_HEADER.to_be_bytes(),
    );
    let len = req.len() as u32;
    req[0..4].copy_from_slice(&len.to_ne_bytes());
    let ty = (NFNL_SUBSYS_IPSET << 8) | u16::from(IPSET_CMD_LIST);
    req[4..6].copy_from_slice(&ty.to_ne_bytes());
    let flags = netlink::NLM_F_REQUEST | netlink::NLM_F_DUMP;
    req[6..8].copy_from_slice(&flags.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    sock.send(&req, 0)?;

    let mut sets = Sets::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = sock.recv(&mut &mut buf[..], 0)?;
        for msg in netlink::messages(&buf[..n]) {
            let msg = msg.map_err(|e| IpsetError::Malformed(e.0))?;
            match msg.msg_type {
                netlink::NLMSG_DONE => return Ok(sets),
                netlink::NLMSG_ERROR => {
                    let code = msg
                        .payload
                        .get(..4)
                        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                        .unwrap_or(0);
                    if code == 0 {
                        continue;
                    }
                    return Err(IpsetError::Kernel(std::io::Error::from_raw_os_error(-code)));
                }
                _ => {
                    if let Some((name, header)) = set_header(msg.payload) {
                        sets.insert(name, header);
                    }
                }
            }
        }
    }
}

fn set_header(payload: &[u8]) -> Option<(String, SetHeader)> {
    let attrs = netlink::lenient_attrs(payload.get(netlink::NFGENMSG_LEN..)?);
    let get = |kind| attrs.iter().find(|a| a.0 == kind).map(|a| a.2);
    let name = netlink::string(get(ATTR_SETNAME)?);
    let data = get(ATTR_DATA)
        .map(netlink::lenient_attrs)
        .unwrap_or_default();
    let num = |kind| {
        data.iter()
            .find(|a| a.0 == kind)
            .and_then(|a| netlink::be_u32(a.2).ok())
    };
    Some((
        name,
        SetHeader {
            typename: get(ATTR_TYPENAME).map(netlink::string).unwrap_or_default(),
            family: get(ATTR_FAMILY)
                .and_then(|v| v.first().copied())
                .unwrap_or(0),
            elements: num(ATTR_ELEMENTS),
            references: num(ATTR_REFERENCES),
        },
    ))
}

/// One ipset line: the change and its `result`.
pub type Outcome = (Change, ChangeResult);

fn line(op: Op, name: &str, header: Option<&SetHeader>) -> Change {
    let family = header.map_or(Family::Unknown, |h| Family::from_nfproto(h.family));
    Change::new(op, family, TABLE).chain(name)
}

fn count(n: Option<u32>) -> String {
    n.map_or_else(|| "an unknown number of".into(), |n| n.to_string())
}

/// What `cmd` did, from the listings before (`None`: not listed yet) and after it.
pub fn outcome(cmd: &Command, before: Option<&Sets>, after: &Sets) -> Vec<Outcome> {
    let empty = Sets::new();
    let before_known = before.is_some();
    let before = before.unwrap_or(&empty);
    let ok = || ChangeResult::Applied;
    let mut out = Vec::new();
    let named: Vec<String> = match &cmd.set {
        Some(s) => vec![s.clone()],
        // destroy and flush without a name apply to every set.
        None => before.keys().cloned().collect(),
    };
    match cmd.cmd {
        IPSET_CMD_CREATE => {
            let Some(name) = &cmd.set else { return out };
            let mut c = line(Op::SetCreate, name, after.get(name));
            match (before.get(name), after.get(name)) {
                (None, Some(h)) => {
                    c.detail = Some(format!("type {}", h.typename));
                    out.push((c, ok()));
                }
                (Some(_), Some(_)) if cmd.exclusive() => {
                    out.push((c, "failed: a set of that name already exists".into()));
                }
                (Some(_), Some(_)) => {}
                (_, None) => out.push((c, "failed: the set does not exist afterwards".into())),
            }
        }
        IPSET_CMD_DESTROY => {
            for name in named {
                let mut c = line(Op::SetDelete, &name, before.get(&name).or(after.get(&name)));
                match after.get(&name) {
                    None => {
                        if let Some(h) = before.get(&name) {
                            c.detail = Some(format!("held {} elements", count(h.elements)));
                        }
                        out.push((c, ok()));
                    }
                    Some(h) => {
                        let why = match h.references {
                            Some(r) if r > 0 => format!(
                                "failed: the set still exists, in use by a kernel component ({r} \
                                 references)"
                            ),
                            _ => "failed: the set still exists".into(),
                        };
                        out.push((c, ChangeResult::Refused(why)));
                    }
                }
            }
        }
        IPSET_CMD_FLUSH => {
            for name in named {
                let mut c = line(Op::SetFlush, &name, after.get(&name));
                match after.get(&name) {
                    Some(_) => {
                        let was = before.get(&name).and_then(|h| h.elements);
                        c.detail = Some(format!("{} elements removed", count(was)));
                        out.push((c, ok()));
                    }
                    None => out.push((c, "failed: no such set".into())),
                }
            }
        }
        IPSET_CMD_RENAME | IPSET_CMD_SWAP => {
            let (Some(a), Some(b)) = (&cmd.set, &cmd.set2) else {
                return out;
            };
            let rename = cmd.cmd == IPSET_CMD_RENAME;
            let op = if rename { Op::SetRename } else { Op::SetSwap };
            let mut c = line(op, a, after.get(b).or(after.get(a)));
            c.detail = Some(if rename {
                format!("renamed to {b}")
            } else {
                format!("contents exchanged with {b}")
            });
            let done = if rename {
                after.contains_key(b) && !after.contains_key(a)
            } else {
                after.contains_key(a) && after.contains_key(b)
            };
            out.push((c, if done { ok() } else { "failed".into() }));
        }
        IPSET_CMD_ADD | IPSET_CMD_DEL => {
            let Some(name) = &cmd.set else { return out };
            let add = cmd.cmd == IPSET_CMD_ADD;
            let op = if add {
                Op::ElementAdd
            } else {
                Op::ElementDelete
            };
            let mut c = line(op, name, after.get(name));
            let Some(h) = after.get(name) else {
                out.push((c, "failed: no such set".into()));
                return out;
            };
            let was = before.get(name).and_then(|b| b.elements);
            let asked = cmd
                .elements
                .map_or_else(|| "elements".to_string(), |n| format!("{n} elements"));
            c.detail = Some(match (was, h.elements) {
                (Some(w), Some(n)) => format!("{asked} requested; the set holds {n} (was {w})"),
                (_, n) => format!("{asked} requested; the set holds {}", count(n)),
            });
            let unchanged = before_known && was.is_some() && was == h.elements;
            let result = if unchanged && cmd.exclusive() {
                if add {
                    "failed: no element added (already in the set?)".into()
                } else {
                    "failed: no element removed (not in the set?)".into()
                }
            } else {
                ok()
            };
            out.push((c, result));
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests;
