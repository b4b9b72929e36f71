//! The start of an nfnetlink request as the kernel hooks captured it, and what its netlink
//! attributes say: the table of a batch's first object, and whether its deletes flush a chain
//! (or a set) or remove single rules (or elements).

use observer_common::nfnl::{NfnlSend, NFNL_SUBSYS_IPSET, NFNL_SUBSYS_NFTABLES, PHASE_EXIT};

use crate::attribution::KernelProcess;
use crate::netlink;
use crate::ruleset::FlushEvidence;

/// A ruleset-changing nfnetlink request, as the kernel saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfnlSendEvent {
    pub process: KernelProcess,
    /// Namespace of the socket (where the change lands); 0 when unknown.
    pub sock_netns: u32,
    pub subsys: u16,
    /// True when reported at syscall exit (the request has been applied).
    pub at_exit: bool,
    /// The syscall's return at exit (bytes sent or a negative errno).
    pub ret: i64,
    /// Length of the request.
    pub len: u32,
    /// The start of the request.
    pub head: Vec<u8>,
    pub ktime_ns: u64,
}

impl NfnlSendEvent {
    pub(crate) fn from_raw(raw: &NfnlSend, process: KernelProcess, ktime_ns: u64) -> Self {
        let captured = (raw.captured as usize).min(raw.head.len());
        NfnlSendEvent {
            process,
            sock_netns: raw.sock_netns,
            subsys: raw.subsys as u16,
            at_exit: raw.phase == PHASE_EXIT,
            ret: raw.ret,
            len: raw.len,
            head: raw.head[..captured].to_vec(),
            ktime_ns,
        }
    }

    pub fn is_nftables(&self) -> bool {
        self.subsys == NFNL_SUBSYS_NFTABLES
    }

    pub fn is_ipset(&self) -> bool {
        self.subsys == NFNL_SUBSYS_IPSET
    }

    /// The namespace the request changed: the socket's, else the writer's.
    pub fn netns(&self) -> u32 {
        if self.sock_netns != 0 {
            self.sock_netns
        } else {
            self.process.netns
        }
    }
}

/// `NFT_MSG_DELRULE` in the nftables subsystem.
const NFT_DELRULE: u16 = (NFNL_SUBSYS_NFTABLES << 8) | 8;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_HANDLE: u16 = 3;
/// `NFT_MSG_DELSETELEM` in the nftables subsystem.
const NFT_DELSETELEM: u16 = (NFNL_SUBSYS_NFTABLES << 8) | 14;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;

/// What the rule deletes of an nftables batch asked for, from the start of the request: a
/// `DELRULE` without a handle flushes its chain (`nft flush chain`), or every chain of its table
/// without a chain (`nft flush table`); with a handle it deletes that one rule. `Unknown` when the
/// captured start holds no `DELRULE` (a large batch's deletes may lie beyond it).
pub fn flush_evidence(head: &[u8]) -> FlushEvidence {
    delete_evidence(head, NFT_DELRULE, NFTA_RULE_CHAIN, NFTA_RULE_HANDLE)
}

/// The same for set elements: a `DELSETELEM` without elements flushes its set (`nft flush
/// set`); with elements it deletes those (`nft delete element`), even when they were the last.
pub fn set_flush_evidence(head: &[u8]) -> FlushEvidence {
    delete_evidence(
        head,
        NFT_DELSETELEM,
        NFTA_SET_ELEM_LIST_SET,
        NFTA_SET_ELEM_LIST_ELEMENTS,
    )
}

/// Messages of `msg_type` naming their container (chain, set) in `name_attr`: with `one_attr`
/// (a rule handle, an element list) they delete single objects, without it they flush the
/// container, or every container of the table when it is not named either.
fn delete_evidence(head: &[u8], msg_type: u16, name_attr: u16, one_attr: u16) -> FlushEvidence {
    let mut flushed: Vec<String> = Vec::new();
    let (mut flush_all, mut deletes) = (false, false);
    for msg in netlink::messages(head).map_while(Result::ok) {
        if msg.msg_type != msg_type {
            continue;
        }
        let Some(list) = msg
            .payload
            .get(netlink::NFGENMSG_LEN..)
            .and_then(|a| netlink::attrs(a).ok())
        else {
            continue;
        };
        if netlink::find(&list, one_attr).is_some() {
            deletes = true;
        } else {
            match netlink::find(&list, name_attr) {
                Some(c) => flushed.push(netlink::string(c.value)),
                None => flush_all = true,
            }
        }
    }
    if flush_all {
        FlushEvidence::Flush(Vec::new())
    } else if !flushed.is_empty() {
        FlushEvidence::Flush(flushed)
    } else if deletes {
        FlushEvidence::Delete
    } else {
        FlushEvidence::Unknown
    }
}

/// The table of the first object of an nftables batch (family, name), from the start of the
/// request: the batch-begin message, then the first object's message, whose attribute 1 is the
/// table's name for tables, chains, rules, sets and set elements alike.
pub fn batch_table(head: &[u8]) -> Option<(u8, String)> {
    use crate::netlink::{NFGENMSG_LEN, NLMSG_HDRLEN};
    let msg = netlink::lenient_messages(head).nth(1)?;
    let h = netlink::header(msg)?;
    if h.msg_type >> 8 != NFNL_SUBSYS_NFTABLES || h.len < NLMSG_HDRLEN + NFGENMSG_LEN {
        return None;
    }
    let family = *msg.get(NLMSG_HDRLEN)?;
    let attrs = msg.get(NLMSG_HDRLEN + NFGENMSG_LEN..)?;
    let name = netlink::lenient_attrs(attrs)
        .into_iter()
        .find(|a| a.0 == 1)
        .map(|a| crate::netlink::string(a.2))?;
    Some((family, name))
}

#[cfg(test)]
mod tests;
