//! Raw nfnetlink bytes → typed nf_tables objects.
//!
//! A datagram from the `NFNLGRP_NFTABLES` group (or a dump reply) holds one or more netlink
//! messages. Each becomes one [`Notification`]; anything this build does not understand (another
//! subsystem, object or flowtable messages, a message too short or with bad attribute lengths)
//! becomes [`Notification::Skipped`] with the reason, so the caller can count it. Nothing here
//! panics on input. Expressions are kept as raw attribute bytes ([`Expr`]); `render` and
//! `expr` interpret them. Any kernel with nf_tables (3.13+); attributes added later are optional.

use observer_common::nfnl::NFNL_SUBSYS_NFTABLES;

use crate::netlink::{self, Attr, Malformed, NlMsg, NFGENMSG_LEN};

// enum nf_tables_msg_types (include/uapi/linux/netfilter/nf_tables.h).
pub const NFT_MSG_NEWTABLE: u8 = 0;
pub const NFT_MSG_GETTABLE: u8 = 1;
pub const NFT_MSG_DELTABLE: u8 = 2;
pub const NFT_MSG_NEWCHAIN: u8 = 3;
pub const NFT_MSG_GETCHAIN: u8 = 4;
pub const NFT_MSG_DELCHAIN: u8 = 5;
pub const NFT_MSG_NEWRULE: u8 = 6;
pub const NFT_MSG_GETRULE: u8 = 7;
pub const NFT_MSG_DELRULE: u8 = 8;
pub const NFT_MSG_NEWSET: u8 = 9;
pub const NFT_MSG_GETSET: u8 = 10;
pub const NFT_MSG_DELSET: u8 = 11;
pub const NFT_MSG_NEWSETELEM: u8 = 12;
pub const NFT_MSG_GETSETELEM: u8 = 13;
pub const NFT_MSG_DELSETELEM: u8 = 14;
pub const NFT_MSG_NEWGEN: u8 = 15;
pub const NFT_MSG_GETGEN: u8 = 16;
// Kernel 6.3+ `destroy` commands are notified as deletes; accept their numbers too.
const NFT_MSG_DESTROYTABLE: u8 = 26;
const NFT_MSG_DESTROYCHAIN: u8 = 27;
const NFT_MSG_DESTROYRULE: u8 = 28;
const NFT_MSG_DESTROYSET: u8 = 29;
const NFT_MSG_DESTROYSETELEM: u8 = 30;

// Verdict codes: NF_DROP/NF_ACCEPT/NF_QUEUE and enum nft_verdicts.
pub(crate) const NF_DROP: i32 = 0;
pub(crate) const NF_ACCEPT: i32 = 1;
pub(crate) const NF_QUEUE: i32 = 3;
pub(crate) const NFT_CONTINUE: i32 = -1;
pub(crate) const NFT_BREAK: i32 = -2;
pub(crate) const NFT_JUMP: i32 = -3;
pub(crate) const NFT_GOTO: i32 = -4;
pub(crate) const NFT_RETURN: i32 = -5;

/// Whether the object was created/updated or deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    New,
    Del,
}

/// One decoded netlink message.
#[derive(Debug, Clone, PartialEq)]
pub enum Notification {
    Table(Verb, Table),
    Chain(Verb, Chain),
    Rule(Verb, Rule),
    Set(Verb, Set),
    Elements(Verb, SetElems),
    /// `NFT_MSG_NEWGEN`: closes a transaction (or answers `NFT_MSG_GETGEN`).
    Gen(Gen),
    /// Not understood or not tracked; counted by the caller, never fatal.
    Skipped(Skipped),
}

/// Why a message was not turned into an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The netlink message type, when the header could be read.
    pub msg_type: Option<u16>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// `nfgen_family` (NFPROTO_*).
    pub family: u8,
    pub name: String,
    /// NFT_TABLE_F_* (dormant, owner).
    pub flags: u32,
    pub handle: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// NF_INET_* (or NF_NETDEV_INGRESS...) hook number.
    pub num: u32,
    pub priority: i32,
    /// The device(s) of a netdev/ingress chain.
    pub devices: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub family: u8,
    pub table: String,
    pub name: String,
    pub handle: Option<u64>,
    /// Present for base chains.
    pub hook: Option<Hook>,
    /// NF_ACCEPT or NF_DROP, base chains only.
    pub policy: Option<u32>,
    /// `filter`, `nat`, `route`.
    pub kind: Option<String>,
    pub flags: u32,
    pub comment: Option<String>,
}

/// One expression of a rule: its name and the raw bytes of its `NFTA_EXPR_DATA`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expr {
    pub name: String,
    pub data: Vec<u8>,
}

impl Expr {
    /// The attributes of the expression's data; empty when they do not parse.
    pub(crate) fn attrs(&self) -> Vec<Attr<'_>> {
        netlink::attrs(&self.data).unwrap_or_default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub family: u8,
    pub table: String,
    pub chain: String,
    pub handle: u64,
    /// `NFTA_RULE_POSITION`: in a notification, the handle of the rule this one follows, sent
    /// only when the rule is neither first nor last in its chain.
    pub position: Option<u64>,
    pub exprs: Vec<Expr>,
    /// The rule's comment (libnftnl userdata), as `nft ... comment "x"` sets it.
    pub comment: Option<String>,
    /// `NLM_F_APPEND` on the notification: the writer appended (or replaced) rather than
    /// inserted.
    pub append: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    pub family: u8,
    pub table: String,
    pub name: String,
    pub handle: Option<u64>,
    /// NFT_SET_* flags (anonymous, constant, interval, map, timeout...).
    pub flags: u32,
    /// nft's datatype id of the key (concatenations pack 6 bits per field).
    pub key_type: u32,
    pub key_len: u32,
    /// For maps: the datatype of the values (`0xffffff00` is a verdict).
    pub data_type: Option<u32>,
    pub data_len: Option<u32>,
    /// From the set's userdata: the key is in host byte order.
    pub key_host_order: Option<bool>,
    /// From the set's userdata: a map's data is in host byte order.
    pub data_host_order: Option<bool>,
    /// From the set's userdata: each of a map's values is an interval, its low ends then its
    /// high ends (`192.168.2.2-192.168.2.4`, nat to a range by map).
    pub data_interval: bool,
    /// The size the set was declared with (`NFTA_SET_DESC_SIZE`), if any.
    pub size: Option<u32>,
    /// For object maps: the type of the objects (NFT_OBJECT_COUNTER...).
    pub obj_type: Option<u32>,
}

/// Set flags (enum nft_set_flags).
pub(crate) const NFT_SET_ANONYMOUS: u32 = 0x1;
pub(crate) const NFT_SET_INTERVAL: u32 = 0x4;
pub(crate) const NFT_SET_MAP: u32 = 0x8;
pub(crate) const NFT_SET_OBJECT: u32 = 0x40;
/// `NFT_DATA_VERDICT`: the data type of a verdict map.
pub(crate) const NFT_DATA_VERDICT: u32 = 0xffff_ff00;
/// `NFT_SET_ELEM_INTERVAL_END`: the element closes an interval.
pub(crate) const NFT_SET_ELEM_INTERVAL_END: u32 = 0x1;
/// `NFT_SET_ELEM_CATCHALL`: the `*` element.
pub(crate) const NFT_SET_ELEM_CATCHALL: u32 = 0x2;

impl Set {
    pub fn is_anonymous(&self) -> bool {
        self.flags & NFT_SET_ANONYMOUS != 0
    }
}

/// A value or a verdict (`NFTA_DATA_*`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Data {
    Value(Vec<u8>),
    Verdict(Verdict),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Verdict {
    pub code: i32,
    pub chain: Option<String>,
}

/// One element of a set. Equal, ordered and hashed by what it says, whether its rarer parts
/// are boxed or not.
#[derive(Debug, Clone)]
pub struct Element {
    pub key: Vec<u8>,
    pub data: Option<Data>,
    /// NFT_SET_ELEM_INTERVAL_END / NFT_SET_ELEM_CATCHALL.
    pub flags: u32,
    /// What few elements have, boxed: a state keeps every element of every set of the
    /// namespace, and most are a key and perhaps a verdict (72 bytes instead of 152).
    pub more: Option<Box<ElementMore>>,
}

/// The rarer parts of a set element.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ElementMore {
    /// The end of a range, for sets that store ranges in one element (pipapo, kernel 5.6+).
    pub key_end: Option<Vec<u8>>,
    pub objref: Option<String>,
    pub timeout_ms: Option<u64>,
    pub comment: Option<String>,
}

/// An element's parts in the order it compares by.
type ElementOrder<'a> = (
    &'a [u8],
    Option<&'a [u8]>,
    Option<&'a Data>,
    Option<&'a str>,
    u32,
    Option<u64>,
    Option<&'a str>,
);

impl Element {
    /// An element of these parts; the rarer ones boxed only when there are any.
    pub fn new(key: Vec<u8>, data: Option<Data>, flags: u32, more: ElementMore) -> Element {
        let more = (more != ElementMore::default()).then(|| Box::new(more));
        Element {
            key,
            data,
            flags,
            more,
        }
    }

    /// The end of a range (pipapo sets, kernel 5.6+).
    pub fn key_end(&self) -> Option<&[u8]> {
        self.more.as_ref()?.key_end.as_deref()
    }

    /// The stateful object an object map's element names.
    pub fn objref(&self) -> Option<&str> {
        self.more.as_ref()?.objref.as_deref()
    }

    pub fn timeout_ms(&self) -> Option<u64> {
        self.more.as_ref()?.timeout_ms
    }

    pub fn comment(&self) -> Option<&str> {
        self.more.as_ref()?.comment.as_deref()
    }

    /// The rarer parts, to change them.
    pub fn more_mut(&mut self) -> &mut ElementMore {
        self.more.get_or_insert_with(Box::default)
    }

    fn order(&self) -> ElementOrder<'_> {
        (
            &self.key,
            self.key_end(),
            self.data.as_ref(),
            self.objref(),
            self.flags,
            self.timeout_ms(),
            self.comment(),
        )
    }
}

impl PartialEq for Element {
    fn eq(&self, other: &Element) -> bool {
        self.order() == other.order()
    }
}

impl Eq for Element {}

impl PartialOrd for Element {
    fn partial_cmp(&self, other: &Element) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Element {
    fn cmp(&self, other: &Element) -> std::cmp::Ordering {
        self.order().cmp(&other.order())
    }
}

impl std::hash::Hash for Element {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.order().hash(state);
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetElems {
    pub family: u8,
    pub table: String,
    pub set: String,
    pub elements: Vec<Element>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gen {
    pub id: u32,
    /// The writer's thread id (kernel 5.x+; absent on older kernels).
    pub pid: Option<u32>,
    /// The writer's comm, at most 15 characters.
    pub comm: Option<String>,
}

/// Decode every message of a datagram.
///
/// NLMSG_NOOP and NLMSG_DONE (which end dump replies) carry nothing and are left out.
pub fn decode(datagram: &[u8]) -> Vec<Notification> {
    messages(datagram)
        .map(|m| m.map_or_else(Notification::Skipped, |m| decode_message(&m)))
        .collect()
}

/// The messages of a datagram that carry something (not NLMSG_NOOP or NLMSG_DONE), each to be
/// decoded; where the walk broke off, why.
pub fn messages(datagram: &[u8]) -> impl Iterator<Item = Result<NlMsg<'_>, Skipped>> {
    netlink::messages(datagram).filter_map(|msg| match msg {
        Ok(m) if matches!(m.msg_type, netlink::NLMSG_NOOP | netlink::NLMSG_DONE) => None,
        Ok(m) => Some(Ok(m)),
        Err(e) => Some(Err(Skipped {
            msg_type: None,
            reason: e.0,
        })),
    })
}

/// Whether a message adds or deletes a rule (`Some(verb)`), read from its type alone.
pub fn rule_verb(msg: &NlMsg<'_>) -> Option<Verb> {
    if msg.msg_type >> 8 != NFNL_SUBSYS_NFTABLES {
        return None;
    }
    match (msg.msg_type & 0xff) as u8 {
        NFT_MSG_NEWRULE => Some(Verb::New),
        NFT_MSG_DELRULE | NFT_MSG_DESTROYRULE => Some(Verb::Del),
        _ => None,
    }
}

/// Decode one netlink message.
pub fn decode_message(msg: &NlMsg<'_>) -> Notification {
    match try_decode(msg) {
        Ok(n) => n,
        Err(e) => Notification::Skipped(Skipped {
            msg_type: Some(msg.msg_type),
            reason: e.0,
        }),
    }
}

fn try_decode(msg: &NlMsg<'_>) -> Result<Notification, Malformed> {
    if msg.msg_type >> 8 != NFNL_SUBSYS_NFTABLES {
        return Err(netlink::malformed(format!(
            "message type {:#06x} is not an nf_tables message",
            msg.msg_type
        )));
    }
    let Some((hdr, body)) = msg.payload.split_at_checked(NFGENMSG_LEN) else {
        return Err(netlink::malformed("message shorter than nfgenmsg"));
    };
    let family = hdr[0];
    let list = netlink::attrs(body)?;
    let subtype = (msg.msg_type & 0xff) as u8;
    let append = msg.flags & netlink::NLM_F_APPEND != 0;
    Ok(match subtype {
        NFT_MSG_NEWTABLE => Notification::Table(Verb::New, table(family, &list)?),
        NFT_MSG_DELTABLE | NFT_MSG_DESTROYTABLE => {
            Notification::Table(Verb::Del, table(family, &list)?)
        }
        NFT_MSG_NEWCHAIN => Notification::Chain(Verb::New, chain(family, &list)?),
        NFT_MSG_DELCHAIN | NFT_MSG_DESTROYCHAIN => {
            Notification::Chain(Verb::Del, chain(family, &list)?)
        }
        NFT_MSG_NEWRULE => Notification::Rule(Verb::New, rule(family, &list, append)?),
        NFT_MSG_DELRULE | NFT_MSG_DESTROYRULE => {
            Notification::Rule(Verb::Del, rule(family, &list, append)?)
        }
        NFT_MSG_NEWSET => Notification::Set(Verb::New, set(family, &list)?),
        NFT_MSG_DELSET | NFT_MSG_DESTROYSET => Notification::Set(Verb::Del, set(family, &list)?),
        NFT_MSG_NEWSETELEM => Notification::Elements(Verb::New, set_elems(family, &list)?),
        NFT_MSG_DELSETELEM | NFT_MSG_DESTROYSETELEM => {
            Notification::Elements(Verb::Del, set_elems(family, &list)?)
        }
        NFT_MSG_NEWGEN => Notification::Gen(gen(&list)?),
        other => {
            return Err(netlink::malformed(format!(
                "nf_tables message {other} is not tracked"
            )))
        }
    })
}

fn required_str(list: &[Attr<'_>], kind: u16, what: &str) -> Result<String, Malformed> {
    netlink::find(list, kind)
        .map(|a| netlink::string(a.value))
        .ok_or_else(|| netlink::malformed(format!("{what} missing")))
}

fn opt_u32(list: &[Attr<'_>], kind: u16) -> Result<Option<u32>, Malformed> {
    netlink::find(list, kind)
        .map(|a| netlink::be_u32(a.value))
        .transpose()
}

fn opt_u64(list: &[Attr<'_>], kind: u16) -> Result<Option<u64>, Malformed> {
    netlink::find(list, kind)
        .map(|a| netlink::be_u64(a.value))
        .transpose()
}

fn table(family: u8, list: &[Attr<'_>]) -> Result<Table, Malformed> {
    // enum nft_table_attributes
    Ok(Table {
        family,
        name: required_str(list, 1, "table name")?,
        flags: opt_u32(list, 2)?.unwrap_or(0),
        handle: opt_u64(list, 4)?,
    })
}

fn chain(family: u8, list: &[Attr<'_>]) -> Result<Chain, Malformed> {
    // enum nft_chain_attributes
    let hook = match netlink::find(list, 4) {
        None => None,
        Some(a) => {
            let h = netlink::attrs(a.value)?;
            let mut devices: Vec<String> = netlink::find(&h, 3)
                .map(|d| netlink::string(d.value))
                .into_iter()
                .collect();
            if let Some(devs) = netlink::find(&h, 4) {
                for d in netlink::attrs(devs.value)? {
                    devices.push(netlink::string(d.value));
                }
            }
            Some(Hook {
                num: opt_u32(&h, 1)?.ok_or_else(|| netlink::malformed("hook number missing"))?,
                priority: opt_u32(&h, 2)?.unwrap_or(0) as i32,
                devices,
            })
        }
    };
    Ok(Chain {
        family,
        table: required_str(list, 1, "chain table")?,
        name: required_str(list, 3, "chain name")?,
        handle: opt_u64(list, 2)?,
        hook,
        policy: opt_u32(list, 5)?,
        kind: netlink::find(list, 7).map(|a| netlink::string(a.value)),
        flags: opt_u32(list, 10)?.unwrap_or(0),
        comment: netlink::find(list, 12).and_then(|a| udata_string(a.value, 0)),
    })
}

fn rule(family: u8, list: &[Attr<'_>], append: bool) -> Result<Rule, Malformed> {
    // enum nft_rule_attributes
    let mut exprs = Vec::new();
    if let Some(a) = netlink::find(list, 4) {
        for elem in netlink::attrs(a.value)? {
            let parts = netlink::attrs(elem.value)?;
            exprs.push(Expr {
                name: required_str(&parts, 1, "expression name")?,
                data: netlink::find(&parts, 2)
                    .map(|d| d.value.to_vec())
                    .unwrap_or_default(),
            });
        }
    }
    Ok(Rule {
        family,
        table: required_str(list, 1, "rule table")?,
        chain: required_str(list, 2, "rule chain")?,
        handle: opt_u64(list, 3)?.ok_or_else(|| netlink::malformed("rule handle missing"))?,
        position: opt_u64(list, 6)?,
        exprs,
        comment: netlink::find(list, 7).and_then(|a| udata_string(a.value, 0)),
        append,
    })
}

fn set(family: u8, list: &[Attr<'_>]) -> Result<Set, Malformed> {
    // enum nft_set_attributes
    let udata = netlink::find(list, 13).map(|a| a.value).unwrap_or(&[]);
    // NFTNL_UDATA_SET_KEYBYTEORDER = 0: nft's enum byteorder as a host-order u32
    // (1 = host endian, 2 = big endian).
    // NFTNL_UDATA_SET_DATABYTEORDER = 1, the same for a map's data.
    let host_order = |ty| {
        udata_get(udata, ty).and_then(|v| {
            let raw = <[u8; 4]>::try_from(v).ok()?;
            Some(u32::from_ne_bytes(raw) == 1)
        })
    };
    let (key_host_order, data_host_order) = (host_order(0), host_order(1));
    // NFTNL_UDATA_SET_DATA_INTERVAL = 6: a host-order u32, non-zero when map data are ranges.
    let data_interval = udata_get(udata, 6).is_some_and(|v| v.iter().any(|b| *b != 0));
    // NFTA_SET_DESC = 9, holding NFTA_SET_DESC_SIZE = 1.
    let size = match netlink::find(list, 9) {
        Some(desc) => opt_u32(&netlink::attrs(desc.value)?, 1)?,
        None => None,
    };
    Ok(Set {
        family,
        table: required_str(list, 1, "set table")?,
        name: required_str(list, 2, "set name")?,
        handle: opt_u64(list, 16)?,
        flags: opt_u32(list, 3)?.unwrap_or(0),
        key_type: opt_u32(list, 4)?.unwrap_or(0),
        key_len: opt_u32(list, 5)?.unwrap_or(0),
        data_type: opt_u32(list, 6)?,
        data_len: opt_u32(list, 7)?,
        key_host_order,
        data_host_order,
        data_interval,
        size,
        obj_type: opt_u32(list, 15)?,
    })
}

fn set_elems(family: u8, list: &[Attr<'_>]) -> Result<SetElems, Malformed> {
    // enum nft_set_elem_list_attributes / nft_set_elem_attributes
    let mut elements = Vec::new();
    if let Some(a) = netlink::find(list, 3) {
        for item in netlink::attrs(a.value)? {
            let e = netlink::attrs(item.value)?;
            let key = match netlink::find(&e, 1) {
                Some(k) => match data(k.value)? {
                    Data::Value(v) => v,
                    Data::Verdict(_) => return Err(netlink::malformed("verdict as a set key")),
                },
                None => Vec::new(),
            };
            let key_end = match netlink::find(&e, 10) {
                Some(k) => match data(k.value)? {
                    Data::Value(v) => Some(v),
                    Data::Verdict(_) => None,
                },
                None => None,
            };
            elements.push(Element::new(
                key,
                netlink::find(&e, 2).map(|d| data(d.value)).transpose()?,
                opt_u32(&e, 3)?.unwrap_or(0),
                ElementMore {
                    key_end,
                    objref: netlink::find(&e, 9).map(|d| netlink::string(d.value)),
                    timeout_ms: opt_u64(&e, 4)?,
                    comment: netlink::find(&e, 6).and_then(|d| udata_string(d.value, 0)),
                },
            ));
        }
    }
    Ok(SetElems {
        family,
        table: required_str(list, 1, "element table")?,
        set: required_str(list, 2, "element set")?,
        elements,
    })
}

fn gen(list: &[Attr<'_>]) -> Result<Gen, Malformed> {
    // enum nft_gen_attributes
    Ok(Gen {
        id: opt_u32(list, 1)?.ok_or_else(|| netlink::malformed("generation id missing"))?,
        pid: opt_u32(list, 2)?,
        comm: netlink::find(list, 3).map(|a| netlink::string(a.value)),
    })
}

/// Decode a nested `NFTA_DATA_*` attribute.
pub(crate) fn data(buf: &[u8]) -> Result<Data, Malformed> {
    let list = netlink::attrs(buf)?;
    if let Some(v) = netlink::find(&list, 1) {
        return Ok(Data::Value(v.value.to_vec()));
    }
    if let Some(v) = netlink::find(&list, 2) {
        let parts = netlink::attrs(v.value)?;
        let code = opt_u32(&parts, 1)?.ok_or_else(|| netlink::malformed("verdict code missing"))?;
        return Ok(Data::Verdict(Verdict {
            code: code as i32,
            chain: netlink::find(&parts, 2).map(|c| netlink::string(c.value)),
        }));
    }
    Err(netlink::malformed(
        "data attribute without value or verdict",
    ))
}

/// Look up one TLV in libnftnl userdata (`u8 type, u8 len, value`).
fn udata_get(mut buf: &[u8], kind: u8) -> Option<&[u8]> {
    while let [t, len, rest @ ..] = buf {
        let len = *len as usize;
        let value = rest.get(..len)?;
        if *t == kind {
            return Some(value);
        }
        buf = &rest[len..];
    }
    None
}

/// A string TLV in libnftnl userdata (comments are type 0 for rules, chains and elements).
fn udata_string(buf: &[u8], kind: u8) -> Option<String> {
    udata_get(buf, kind).map(netlink::string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userdata_tlvs() {
        assert_eq!(udata_string(b"\x00\x04dns\x00", 0).as_deref(), Some("dns"));
        assert_eq!(
            udata_string(b"\x01\x01x\x00\x02ab", 0).as_deref(),
            Some("ab")
        );
        assert_eq!(udata_string(b"\x00\x09dns", 0), None);
        assert_eq!(udata_string(b"", 0), None);
    }

    fn message(msg_type: u16) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&20u32.to_ne_bytes());
        m.extend_from_slice(&msg_type.to_ne_bytes());
        m.extend_from_slice(&[0; 14]);
        m
    }

    #[test]
    fn other_subsystems_are_skipped() {
        // An nfnetlink message of the conntrack subsystem (1).
        let out = decode(&message(0x0100));
        assert_eq!(out.len(), 1);
        assert!(matches!(&out[0], Notification::Skipped(s) if s.msg_type == Some(0x0100)));
        // NLMSG_DONE ends dumps and is not worth a skip.
        assert!(decode(&message(3)).is_empty());
    }
}
