//! Refused nftables batches, from the replies the kernel sent their writer.
//!
//! nf_tables applies a batch whole or not at all, and tells only the writer why it refused one:
//! one `NLMSG_ERROR` per failing message, each carrying the errno and (unless the socket asked
//! for capped acks) the message it refers to. The `recvmsg` hook captures the start of what the
//! writer read; this module turns each error into the change that was attempted (op, table,
//! chain) and its errno, to be reported with `result` set to the error instead of `ok`.

use observer_common::nfnl::{NfnlAck, NfnlRefused, NFNL_MSG_BATCH_BEGIN, NFNL_SUBSYS_NFTABLES};

use super::backend::HookBackend;
use super::error::DecodeError;
use crate::attribution::KernelProcess;
use crate::netlink::{self, NFGENMSG_LEN, NLMSG_ERROR, NLMSG_HDRLEN, NLM_F_CAPPED, NLM_F_REPLACE};
use crate::ruleset::{Change, Family, Op};

// NFT_MSG_* (include/uapi/linux/netfilter/nf_tables.h).
const NEWTABLE: u8 = 0;
const DELTABLE: u8 = 2;
const NEWCHAIN: u8 = 3;
const DELCHAIN: u8 = 5;
const NEWRULE: u8 = 6;
const DELRULE: u8 = 8;
const NEWSET: u8 = 9;
const DELSET: u8 = 11;
const NEWSETELEM: u8 = 12;
const DELSETELEM: u8 = 14;
const DESTROYTABLE: u8 = 26;
const DESTROYCHAIN: u8 = 27;
const DESTROYRULE: u8 = 28;
const DESTROYSET: u8 = 29;
const DESTROYSETELEM: u8 = 30;

/// What a writer read back after a request, as the kernel hook captured it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfnlAckEvent {
    pub process: KernelProcess,
    /// Namespace of the socket; 0 when unknown.
    pub sock_netns: u32,
    pub data: Vec<u8>,
    pub ktime_ns: u64,
}

impl NfnlAckEvent {
    pub(crate) fn from_raw(raw: &NfnlAck, process: KernelProcess, ktime_ns: u64) -> Self {
        let captured = (raw.captured as usize).min(raw.data.len());
        NfnlAckEvent {
            process,
            sock_netns: raw.sock_netns,
            data: raw.data[..captured].to_vec(),
            ktime_ns,
        }
    }

    /// The namespace the request was for: the socket's, else the writer's.
    pub fn netns(&self) -> u32 {
        if self.sock_netns != 0 {
            self.sock_netns
        } else {
            self.process.netns
        }
    }
}

/// A request the kernel refused, caught where it sent the error (kprobe, fentry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedEvent {
    pub process: KernelProcess,
    /// Namespace of the socket; 0 when unknown.
    pub sock_netns: u32,
    pub errno: i32,
    /// The start of the request.
    pub request: Vec<u8>,
    pub source: HookBackend,
    pub ktime_ns: u64,
}

impl RefusedEvent {
    pub(crate) fn from_raw(
        raw: &NfnlRefused,
        process: KernelProcess,
        ktime_ns: u64,
    ) -> Result<Self, DecodeError> {
        let captured = (raw.captured as usize).min(raw.request.len());
        Ok(RefusedEvent {
            process,
            sock_netns: raw.sock_netns,
            errno: raw.errno,
            request: raw.request[..captured].to_vec(),
            source: HookBackend::from_raw(raw.source)
                .ok_or(DecodeError::UnknownHook(raw.source))?,
            ktime_ns,
        })
    }

    /// The refusal, when the request was an nftables write.
    pub fn refusal(&self) -> Option<Refusal> {
        if self.errno >= 0 {
            return None;
        }
        request_refusal(self.errno, &self.request, false)
    }
}

/// One refused nftables request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What was attempted (op, family, table and chain or set, as far as the echo tells).
    pub change: Change,
    /// The negative errno.
    pub errno: i32,
}

/// The refused nftables writes in `data` (the start of what a writer received). Acknowledgements
/// (error 0), refused reads (`GET*`), other subsystems, and errors about the batch as a whole
/// (a stale generation the writer will retry) are left out; so is anything cut short.
pub fn refusals(data: &[u8]) -> Vec<Refusal> {
    netlink::lenient_messages(data)
        .filter_map(refusal)
        .collect()
}

/// One `NLMSG_ERROR` message (possibly cut short), if it refuses an nftables write.
fn refusal(msg: &[u8]) -> Option<Refusal> {
    let h = netlink::header(msg)?;
    if h.msg_type != NLMSG_ERROR {
        return None;
    }
    // struct nlmsgerr { int error; struct nlmsghdr msg; } then the echoed payload.
    let errno = i32::from_ne_bytes(msg.get(16..20)?.try_into().ok()?);
    if errno >= 0 {
        return None;
    }
    request_refusal(errno, msg.get(20..)?, h.flags & NLM_F_CAPPED != 0)
}

/// The refusal of `request` (a request message, possibly cut short; only its header when
/// `capped`) with `errno`, if it is an nftables write.
fn request_refusal(errno: i32, request: &[u8], capped: bool) -> Option<Refusal> {
    let netlink::Header {
        len: orig_len,
        msg_type: orig_type,
        flags: orig_flags,
    } = netlink::header(request)?;
    if orig_type == NFNL_MSG_BATCH_BEGIN || orig_type >> 8 != NFNL_SUBSYS_NFTABLES {
        return None;
    }
    let payload = if capped {
        &[][..]
    } else {
        request
            .get(NLMSG_HDRLEN..orig_len.min(request.len()))
            .unwrap_or(&[])
    };
    let change = attempted(orig_type as u8, orig_flags, payload)?;
    Some(Refusal { change, errno })
}

/// The change an nftables request asked for, from its type, flags and payload (nfgenmsg then
/// attributes; empty when not echoed, leaving the names unknown).
fn attempted(cmd: u8, flags: u16, payload: &[u8]) -> Option<Change> {
    let family = payload
        .first()
        .map_or(Family::Unknown, |&f| Family::from_nfproto(f));
    let attrs = netlink::lenient_attrs(payload.get(NFGENMSG_LEN..).unwrap_or(&[]));
    let text = |kind: u16| {
        attrs
            .iter()
            .find(|a| a.0 == kind)
            .map(|a| netlink::string(a.2))
    };
    let has = |kind: u16| attrs.iter().any(|a| a.0 == kind);
    // Attribute 1 is the table for every object kind.
    let table = text(1).unwrap_or_default();
    let with = |op: Op, name: Option<String>| {
        let c = Change::new(op, family, table.clone());
        match name {
            Some(n) => c.chain(n),
            None => c,
        }
    };
    Some(match cmd {
        NEWTABLE => with(Op::TableCreate, None),
        DELTABLE | DESTROYTABLE => with(Op::TableDelete, None),
        // NFTA_CHAIN_NAME = 3.
        NEWCHAIN => with(Op::ChainCreate, text(3)),
        DELCHAIN | DESTROYCHAIN => with(Op::ChainDelete, text(3)),
        // NFTA_RULE_CHAIN = 2, NFTA_RULE_HANDLE = 3.
        NEWRULE if flags & NLM_F_REPLACE != 0 => with(Op::RuleReplace, text(2)),
        NEWRULE => with(Op::RuleAdd, text(2)),
        DELRULE | DESTROYRULE => match (text(2), has(3)) {
            (None, _) if !payload.is_empty() => with(Op::TableFlush, None),
            (chain, true) => with(Op::RuleDelete, chain),
            (Some(chain), false) => with(Op::ChainFlush, Some(chain)),
            (None, false) => with(Op::RuleDelete, None),
        },
        // NFTA_SET_NAME = 2; NFTA_SET_ELEM_LIST_SET = 2, NFTA_SET_ELEM_LIST_ELEMENTS = 3.
        NEWSET => with(Op::SetCreate, text(2)),
        DELSET | DESTROYSET => with(Op::SetDelete, text(2)),
        NEWSETELEM => with(Op::ElementAdd, text(2)),
        DELSETELEM | DESTROYSETELEM if !payload.is_empty() && !has(3) => {
            with(Op::SetFlush, text(2))
        }
        DELSETELEM | DESTROYSETELEM => with(Op::ElementDelete, text(2)),
        // Reads, objects and flowtables are not ruleset changes observer reports.
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut a = ((4 + value.len()) as u16).to_ne_bytes().to_vec();
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(value);
        while !a.len().is_multiple_of(4) {
            a.push(0);
        }
        a
    }

    fn name(s: &str) -> Vec<u8> {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        v
    }

    /// A request message: header, nfgenmsg (family ip), attributes.
    fn request(cmd: u8, flags: u16, attrs: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = attrs.concat();
        let mut m = ((16 + 4 + body.len()) as u32).to_ne_bytes().to_vec();
        m.extend_from_slice(&((10u16 << 8) | cmd as u16).to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(&[2, 0, 0, 0]);
        m.extend_from_slice(&body);
        m
    }

    /// The error message the kernel sends back for `req`.
    fn error(errno: i32, req: &[u8], capped: bool) -> Vec<u8> {
        let echoed = if capped { &req[..16] } else { req };
        let mut m = ((16 + 4 + echoed.len()) as u32).to_ne_bytes().to_vec();
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&(if capped { NLM_F_CAPPED } else { 0 }).to_ne_bytes());
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(&errno.to_ne_bytes());
        m.extend_from_slice(echoed);
        while !m.len().is_multiple_of(4) {
            m.push(0);
        }
        m
    }

    #[test]
    fn each_refused_write_becomes_its_attempted_change() {
        let delchain = request(DELCHAIN, 0, &[attr(1, &name("t")), attr(3, &name("busy"))]);
        let flush = request(DELRULE, 0, &[attr(1, &name("t")), attr(2, &name("c"))]);
        let ack_ok = error(0, &request(NEWTABLE, 0, &[attr(1, &name("t"))]), false);
        let data = [
            ack_ok,
            error(-16, &delchain, false),
            error(-2, &flush, false),
        ]
        .concat();
        let r = refusals(&data);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].errno, -16);
        assert_eq!(r[0].change.op, Op::ChainDelete);
        assert_eq!(r[0].change.family, Family::Ip);
        assert_eq!(r[0].change.table, "t");
        assert_eq!(r[0].change.chain.as_deref(), Some("busy"));
        assert_eq!(r[1].change.op, Op::ChainFlush);
        assert_eq!(r[1].change.chain.as_deref(), Some("c"));
    }

    #[test]
    fn rule_ops_follow_flags_and_attributes() {
        let t = attr(1, &name("t"));
        let c = attr(2, &name("c"));
        let h = attr(3, &7u64.to_be_bytes());
        let op = |cmd, flags, attrs: &[Vec<u8>]| {
            refusals(&error(-22, &request(cmd, flags, attrs), false))[0]
                .change
                .op
        };
        assert_eq!(op(NEWRULE, 0, &[t.clone(), c.clone()]), Op::RuleAdd);
        assert_eq!(
            op(NEWRULE, NLM_F_REPLACE, &[t.clone(), c.clone(), h.clone()]),
            Op::RuleReplace
        );
        assert_eq!(op(DELRULE, 0, &[t.clone(), c.clone(), h]), Op::RuleDelete);
        assert_eq!(op(DELRULE, 0, std::slice::from_ref(&t)), Op::TableFlush);
        assert_eq!(op(DELSETELEM, 0, &[t.clone(), c.clone()]), Op::SetFlush);
        assert_eq!(
            op(DELSETELEM, 0, &[t, c, attr(3, &[0; 4])]),
            Op::ElementDelete
        );
    }

    #[test]
    fn reads_batch_errors_and_other_subsystems_are_not_changes() {
        // GETTABLE (1): a writer probing for a table that is not there.
        let get = request(1, 0, &[attr(1, &name("t"))]);
        assert!(refusals(&error(-2, &get, false)).is_empty());
        // The batch begin refused (a stale generation: the writer retries).
        let mut begin = request(0, 0, &[]);
        begin[4..6].copy_from_slice(&NFNL_MSG_BATCH_BEGIN.to_ne_bytes());
        assert!(refusals(&error(-85, &begin, false)).is_empty());
        // ipset (subsystem 6).
        let mut ipset = request(3, 0, &[]);
        ipset[4..6].copy_from_slice(&((6u16 << 8) | 3).to_ne_bytes());
        assert!(refusals(&error(-16, &ipset, false)).is_empty());
    }

    #[test]
    fn a_request_seen_in_the_kernel_is_read_like_its_echo() {
        let del = request(DELCHAIN, 0, &[attr(1, &name("t")), attr(3, &name("c"))]);
        let from_echo = refusals(&error(-16, &del, false));
        let from_kernel = request_refusal(-16, &del, false);
        assert_eq!(from_kernel.as_ref(), from_echo.first());
        assert_eq!(
            from_kernel.map(|r| r.change.chain),
            Some(Some("c".to_string()))
        );
        for n in 0..del.len() {
            let _ = request_refusal(-16, &del[..n], false);
        }
    }

    #[test]
    fn capped_echoes_give_the_op_without_names() {
        let del = request(DELCHAIN, 0, &[attr(1, &name("t")), attr(3, &name("c"))]);
        let r = refusals(&error(-16, &del, true));
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].change.op, Op::ChainDelete);
        assert_eq!(r[0].change.table, "");
        assert_eq!(r[0].change.chain, None);
    }

    #[test]
    fn cut_or_garbled_replies_never_panic() {
        let del = request(DELCHAIN, 0, &[attr(1, &name("t")), attr(3, &name("c"))]);
        let data = [error(-16, &del, false), error(-2, &del, false)].concat();
        for n in 0..data.len() {
            let _ = refusals(&data[..n]);
        }
        let mut x: u32 = 7;
        let mut junk = vec![0u8; 512];
        for _ in 0..200 {
            for b in junk.iter_mut() {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                *b = (x >> 16) as u8;
            }
            let _ = refusals(&junk);
        }
    }
}
