//! Read one rule's expressions back into the parts of an iptables command, as iptables-nft's
//! own parser does (`nft_rule_to_iptables_command_state`): the loads and compares it writes
//! for `-s`/`-d`/`-i`/`-o`/`-p`/`-f`, the native forms of `-m tcp`/`-m udp` ports and flags,
//! `-m mark` and `-m limit`, the native `log` of `-j NFLOG` and `meta nftrace set` of `-j TRACE`,
//! the `match`/`target` compat expressions, the verdict. Any other
//! expression, or a load/compare pair it does not build, makes the rule one iptables-nft
//! cannot read back ([`Unreadable`]).
//!
//! Layering: called by [`super`] (which prints the parts); imports the decoder's types and the
//! attribute reader, the legacy extension printers through `xtables::ext_text`, and the
//! namespace's ipset names through the renderer's `ifnames` scope.

use std::collections::HashMap;

use crate::nftables::netlink::decode::{self, Data, Expr};
use crate::nftables::netlink::expr::{Attrs, REG_VERDICT};
use crate::nftables::render::ifnames;
use crate::xtables::{ext_text, ext_text_named, XtProto};

/// Why iptables-nft cannot read a rule back: the expression (or pair) it does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unreadable(pub String);

/// An address match: the bytes compared, the mask, `!`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Addr {
    pub value: Vec<u8>,
    pub mask: Vec<u8>,
    pub invert: bool,
}

/// A match in the rule's match list, in the order iptables-nft keeps them.
#[derive(Debug, Clone)]
pub(crate) enum Match {
    /// Already printed `NAME options` (compat expressions, and native ones rebuilt as their
    /// x_tables payload and printed by the legacy printers).
    Text(String),
    /// Native tcp/udp ports and flags, gathered into one `-m tcp` / `-m udp` as iptables-nft does.
    L4(L4),
}

#[derive(Debug, Clone)]
pub(crate) struct L4 {
    pub proto: u8,
    pub sport: (u16, u16),
    pub dport: (u16, u16),
    pub flags: (u8, u8),
    /// xt_tcp / xt_udp invflags: 1 sport, 2 dport, 4 flags.
    pub invflags: u8,
}

/// What a rule says, in iptables' terms.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    pub src: Option<Addr>,
    pub dst: Option<Addr>,
    pub iif: Option<(String, bool)>,
    pub oif: Option<(String, bool)>,
    pub proto: Option<(u8, bool)>,
    /// `-f` (true) or `! -f` (false).
    pub frag: Option<bool>,
    pub matches: Vec<Match>,
    /// `ACCEPT`, `CHAIN`, `DNAT --to-destination ...`; `goto` for `-g`.
    pub target: Option<(String, bool)>,
}

/// What a register holds.
#[derive(Debug, Clone)]
enum Load {
    Payload {
        base: u32,
        offset: u32,
        len: u32,
    },
    Meta(u32),
    Masked {
        base: Box<Load>,
        mask: Vec<u8>,
    },
    /// A constant an `immediate` put there (the source of `meta nftrace set 1`).
    Imm(Vec<u8>),
}

const META_MARK: u32 = 3;
const META_NFTRACE: u32 = 12;
const META_IIFNAME: u32 = 6;
const META_OIFNAME: u32 = 7;
const META_L4PROTO: u32 = 16;
const CMP_EQ: u32 = 0;
const CMP_NEQ: u32 = 1;
const CMP_LT: u32 = 2;
const CMP_LTE: u32 = 3;
const CMP_GT: u32 = 4;
const CMP_GTE: u32 = 5;

fn unreadable(what: impl Into<String>) -> Unreadable {
    Unreadable(what.into())
}

/// Parse a rule's expressions; `proto` says which header layout the table uses.
pub(crate) fn parse(proto: XtProto, exprs: &[Expr]) -> Result<Parsed, Unreadable> {
    let mut p = Parsed::default();
    let mut regs: HashMap<u32, Load> = HashMap::new();
    // A `cmp gte` waiting for its `cmp lte` (a port range written as two compares).
    let mut pending_gte: Option<(Load, u16)> = None;
    for e in exprs {
        let a = Attrs::of(e);
        if p.target.is_some() && e.name != "counter" {
            return Err(unreadable(format!("{} after the verdict", e.name)));
        }
        match e.name.as_str() {
            "payload" if a.has(1) => {
                let load = Load::Payload {
                    base: a.u32(2).unwrap_or(u32::MAX),
                    offset: a.u32(3).unwrap_or(0),
                    len: a.u32(4).unwrap_or(0),
                };
                regs.insert(a.reg(1).unwrap_or(0), load);
            }
            "meta" if a.has(1) => {
                regs.insert(
                    a.reg(1).unwrap_or(0),
                    Load::Meta(a.u32(2).unwrap_or(u32::MAX)),
                );
            }
            // `-j TRACE`: iptables-nft writes `meta nftrace set 1` (an immediate, then a meta
            // set from its register); `meta nftrace set 0` it refuses ("trace is cleared").
            "meta" if a.has(3) => match (a.u32(2), regs.get(&a.reg(3).unwrap_or(0))) {
                (Some(META_NFTRACE), Some(Load::Imm(v))) if v.first().is_some_and(|&b| b != 0) => {
                    p.target = Some(("TRACE".to_string(), false));
                }
                (Some(META_NFTRACE), _) => return Err(unreadable("trace is cleared")),
                (key, _) => return Err(unreadable(format!("meta set {key:?}"))),
            },
            "bitwise" if a.u32(6).unwrap_or(0) == 0 => {
                let src = regs
                    .get(&a.reg(1).unwrap_or(0))
                    .cloned()
                    .ok_or_else(|| unreadable("bitwise on an empty register"))?;
                let xor = a.value(5).unwrap_or_default();
                if xor.iter().any(|&b| b != 0) {
                    return Err(unreadable("bitwise with xor"));
                }
                let mask = a.value(4).unwrap_or_default();
                regs.insert(
                    a.reg(2).unwrap_or(0),
                    Load::Masked {
                        base: Box::new(src),
                        mask,
                    },
                );
            }
            "cmp" => {
                let load = regs
                    .get(&a.reg(1).unwrap_or(0))
                    .cloned()
                    .ok_or_else(|| unreadable("cmp on an empty register"))?;
                let value = a.value(3).unwrap_or_default();
                let op = a.u32(2).unwrap_or(u32::MAX);
                let gte = pending_gte.take();
                match op {
                    CMP_EQ | CMP_NEQ => cmp(&mut p, proto, &load, &value, op == CMP_NEQ)?,
                    // One bound alone is a range to the other end (`--sport :4` is `cmp lte 4`,
                    // `--sport 5:` `cmp gte 5`); a `gte` followed by a `lte` on the same port
                    // is a range of both.
                    CMP_GTE => {
                        let from = be16(&value)?;
                        port(&mut p, &load, (from, u16::MAX), false)?;
                        pending_gte = Some((load, from));
                    }
                    CMP_LTE => {
                        let to = be16(&value)?;
                        let from = match gte {
                            Some((l, from)) if same_port(&l, &load) => from,
                            _ => 0,
                        };
                        port(&mut p, &load, (from, to), false)?;
                    }
                    CMP_GT => {
                        let from = be16(&value)?.checked_add(1);
                        let from = from.ok_or_else(|| unreadable("port > 65535"))?;
                        port(&mut p, &load, (from, u16::MAX), false)?;
                    }
                    CMP_LT => {
                        let to = be16(&value)?.checked_sub(1);
                        let to = to.ok_or_else(|| unreadable("port < 0"))?;
                        port(&mut p, &load, (0, to), false)?;
                    }
                    op => return Err(unreadable(format!("cmp op {op}"))),
                }
            }
            "range" => {
                let load = regs
                    .get(&a.reg(1).unwrap_or(0))
                    .cloned()
                    .ok_or_else(|| unreadable("range on an empty register"))?;
                let from = be16(&a.value(3).unwrap_or_default())?;
                let to = be16(&a.value(4).unwrap_or_default())?;
                port(&mut p, &load, (from, to), a.u32(2) == Some(1))?;
            }
            "counter" => {}
            "limit" => p.matches.push(Match::Text(limit(&a)?)),
            "log" => p.target = Some((nflog(proto, &a)?, false)),
            "immediate" => match (a.reg(1), a.data(2)) {
                (Some(REG_VERDICT), Some(Data::Verdict(v))) => {
                    p.target = Some(verdict(v.code, v.chain.as_deref())?);
                }
                (Some(reg), Some(Data::Value(v))) if reg != REG_VERDICT => {
                    regs.insert(reg, Load::Imm(v));
                }
                _ => return Err(unreadable("immediate")),
            },
            "match" | "target" => {
                let name = a.string(1).unwrap_or_default();
                let rev = u8::try_from(a.u32(2).unwrap_or(0)).unwrap_or(u8::MAX);
                let info = a.bytes(3).unwrap_or(&[]);
                let is_match = e.name == "match";
                // `-m set` and `-j SET` name their sets by index; the namespace's own
                // names, as iptables-nft-save asks the kernel for them.
                let sets: &dyn Fn(u16) -> Option<String> = &ifnames::ipset_lookup;
                let text = ext_text_named(proto, is_match, &name, rev, info, Some(sets));
                let text = text.ok_or_else(|| {
                    unreadable(format!("{} {name} rev {rev} (no printer here)", e.name))
                })?;
                if is_match {
                    p.matches.push(Match::Text(text));
                } else {
                    p.target = Some((text, false));
                }
            }
            other => return Err(unreadable(format!("expression {other}"))),
        }
    }
    Ok(p)
}

fn be16(v: &[u8]) -> Result<u16, Unreadable> {
    match v {
        [a, b] => Ok(u16::from_be_bytes([*a, *b])),
        _ => Err(unreadable("a port that is not 2 bytes")),
    }
}

fn same_port(a: &Load, b: &Load) -> bool {
    matches!((a, b), (Load::Payload { base: 2, offset: x, len: 2 }, Load::Payload { base: 2, offset: y, len: 2 }) if x == y)
}

/// The interface name in a `meta iifname` compare: `eth0` (NUL-terminated) or `eth+` (a prefix).
fn ifname(value: &[u8]) -> String {
    match value.iter().position(|&b| b == 0) {
        Some(n) => String::from_utf8_lossy(&value[..n]).into_owned(),
        None => format!("{}+", String::from_utf8_lossy(value)),
    }
}

/// Where `-s`/`-d`/`-p`/`-f` live in the network header: (saddr, daddr, address length).
fn layout(proto: XtProto) -> (u32, u32, u32) {
    match proto {
        XtProto::Ipv6 => (8, 24, 16),
        _ => (12, 16, 4),
    }
}

/// Where the TTL (IPv4) or hop limit (IPv6) lives in the network header.
fn ttl_offset(proto: XtProto) -> u32 {
    if proto == XtProto::Ipv6 {
        7
    } else {
        8
    }
}

fn set_once<T>(slot: &mut Option<T>, v: T, what: &str) -> Result<(), Unreadable> {
    if slot.is_some() {
        return Err(unreadable(format!("{what} twice")));
    }
    *slot = Some(v);
    Ok(())
}

fn cmp(
    p: &mut Parsed,
    proto: XtProto,
    load: &Load,
    value: &[u8],
    neq: bool,
) -> Result<(), Unreadable> {
    let (base, mask) = match load {
        Load::Masked { base, mask } => (base.as_ref(), Some(mask.clone())),
        l => (l, None),
    };
    let (saddr, daddr, alen) = layout(proto);
    match (base, mask) {
        (Load::Meta(META_L4PROTO), None) if value.len() == 1 => {
            set_once(&mut p.proto, (value[0], neq), "-p")
        }
        (Load::Meta(k @ (META_IIFNAME | META_OIFNAME)), None) => {
            let slot = if *k == META_IIFNAME {
                &mut p.iif
            } else {
                &mut p.oif
            };
            // `! -i +` (no interface at all) is written as a compare with a name no
            // interface can have; iptables-nft reads it back as `! -i +`.
            let dev = match ifname(value) {
                n if n == "INVAL/D" => ("+".to_string(), !neq),
                n => (n, neq),
            };
            set_once(slot, dev, "an interface")
        }
        (Load::Meta(META_MARK), mask) if value.len() == 4 => mark_cmp(p, proto, value, mask, neq),
        (
            &Load::Payload {
                base: 1,
                offset,
                len,
            },
            mask,
        ) if (offset == saddr || offset == daddr) && len >= 1 && len <= alen => {
            addr_cmp(p, offset == saddr, (len, alen), value, mask, neq)
        }
        // `-f`: the fragment offset (IPv4 only), masked with 0x1fff, compared with 0.
        (
            Load::Payload {
                base: 1,
                offset: 6,
                len: 2,
            },
            Some(m),
        ) if proto == XtProto::Ipv4 && m == [0x1f, 0xff] && value == [0, 0] => {
            set_once(&mut p.frag, neq, "-f")
        }
        // `-m ttl --ttl-eq` / `-m hl --hl-eq`, which iptables-nft reads from `ip ttl` and
        // `ip6 hoplimit` compares.
        (
            &Load::Payload {
                base: 1,
                offset,
                len: 1,
            },
            None,
        ) if value.len() == 1 && offset == ttl_offset(proto) => {
            let name = if proto == XtProto::Ipv6 { "hl" } else { "ttl" };
            let not = if neq { " !" } else { "" };
            p.matches
                .push(Match::Text(format!("{name}{not} --{name}-eq {}", value[0])));
            Ok(())
        }
        (
            Load::Payload {
                base: 2,
                offset: 0 | 2,
                len: 2,
            },
            None,
        ) => {
            let v = be16(value)?;
            port(p, load, (v, v), neq)
        }
        // Both ports in one compare: iptables-nft's `--sport A --dport B`.
        (
            Load::Payload {
                base: 2,
                offset: 0,
                len: 4,
            },
            None,
        ) if value.len() == 4 && !neq => both_ports_cmp(p, value),
        (
            Load::Payload {
                base: 2,
                offset: 13,
                len: 1,
            },
            mask,
        ) if value.len() == 1 => tcp_flags_cmp(p, value[0], mask, neq),
        _ => Err(unreadable(format!("cmp on {base:?}"))),
    }
}

/// `-m mark`: `meta mark` compared, maybe under a mask.
fn mark_cmp(
    p: &mut Parsed,
    proto: XtProto,
    value: &[u8],
    mask: Option<Vec<u8>>,
    neq: bool,
) -> Result<(), Unreadable> {
    let mark = u32::from_ne_bytes(value.try_into().unwrap_or_default());
    let mask = match mask {
        Some(m) => u32::from_ne_bytes(
            m.as_slice()
                .try_into()
                .map_err(|_| unreadable("mark mask"))?,
        ),
        None => u32::MAX,
    };
    let mut info = Vec::with_capacity(12);
    info.extend_from_slice(&mark.to_ne_bytes());
    info.extend_from_slice(&mask.to_ne_bytes());
    info.extend_from_slice(&[u8::from(neq), 0, 0, 0]);
    let text = ext_text(proto, true, "mark", 1, &info).ok_or_else(|| unreadable("mark"))?;
    p.matches.push(Match::Text(text));
    Ok(())
}

/// `-s`/`-d`: the first `len` bytes of a source (`source`) or destination address of `alen`
/// bytes compared, maybe under a mask (a prefix).
fn addr_cmp(
    p: &mut Parsed,
    source: bool,
    (len, alen): (u32, u32),
    value: &[u8],
    mask: Option<Vec<u8>>,
    neq: bool,
) -> Result<(), Unreadable> {
    let full = usize::try_from(alen).unwrap_or(4);
    let mut v = value.to_vec();
    let mut m = mask.unwrap_or_else(|| vec![0xff; value.len()]);
    if v.len() != usize::try_from(len).unwrap_or(0) || m.len() != v.len() {
        return Err(unreadable("an address compare of the wrong length"));
    }
    v.resize(full, 0);
    m.resize(full, 0);
    let addr = Addr {
        value: v,
        mask: m,
        invert: neq,
    };
    let slot = if source { &mut p.src } else { &mut p.dst };
    set_once(slot, addr, "an address")
}

/// `--sport A --dport B` compared as one 4-byte load.
fn both_ports_cmp(p: &mut Parsed, value: &[u8]) -> Result<(), Unreadable> {
    for (offset, v) in [(0, be16(&value[..2])?), (2, be16(&value[2..])?)] {
        let half = Load::Payload {
            base: 2,
            offset,
            len: 2,
        };
        port(p, &half, (v, v), false)?;
    }
    Ok(())
}

/// `--tcp-flags`: the flags byte compared, maybe under a mask.
fn tcp_flags_cmp(
    p: &mut Parsed,
    value: u8,
    mask: Option<Vec<u8>>,
    neq: bool,
) -> Result<(), Unreadable> {
    let mask = mask.and_then(|m| m.first().copied()).unwrap_or(0xff);
    let l4 = l4_match(p, 6)?;
    l4.flags = (mask, value);
    if neq {
        // XT_TCP_INV_FLAGS
        l4.invflags |= 4;
    }
    Ok(())
}

/// The `-m tcp`/`-m udp` this rule's `-p` calls for, created at its place in the match list
/// the first time a port or flag needs it.
fn l4_match(p: &mut Parsed, want: u8) -> Result<&mut L4, Unreadable> {
    let proto = match p.proto {
        Some((n @ (6 | 17), false)) => n,
        _ => {
            return Err(unreadable(
                "a transport header match without -p tcp or -p udp",
            ))
        }
    };
    if proto != want {
        return Err(unreadable("tcp flags without -p tcp"));
    }
    let at = p
        .matches
        .iter()
        .position(|m| matches!(m, Match::L4(l) if l.proto == proto));
    let at = match at {
        Some(i) => i,
        None => {
            p.matches.push(Match::L4(L4 {
                proto,
                sport: (0, u16::MAX),
                dport: (0, u16::MAX),
                flags: (0, 0),
                invflags: 0,
            }));
            p.matches.len() - 1
        }
    };
    match &mut p.matches[at] {
        Match::L4(l) => Ok(l),
        Match::Text(_) => Err(unreadable("l4")),
    }
}

fn port(p: &mut Parsed, load: &Load, range: (u16, u16), invert: bool) -> Result<(), Unreadable> {
    let offset = match load {
        Load::Payload {
            base: 2,
            offset: o @ (0 | 2),
            len: 2,
        } => *o,
        other => return Err(unreadable(format!("range on {other:?}"))),
    };
    let want = match p.proto {
        Some((n, false)) => n,
        _ => 0,
    };
    let l4 = l4_match(p, want)?;
    let bit = if offset == 0 { 1 } else { 2 };
    if offset == 0 {
        l4.sport = range;
    } else {
        l4.dport = range;
    }
    if invert {
        l4.invflags |= bit;
    }
    Ok(())
}

/// Native `limit` → `-m limit`, through its x_tables payload (`avg` in 1/10000 s per packet).
fn limit(a: &Attrs<'_>) -> Result<String, Unreadable> {
    let (rate, unit) = (a.u64(1).unwrap_or(0), a.u64(2).unwrap_or(0));
    let burst = a.u32(3).unwrap_or(0);
    if a.u32(4).unwrap_or(0) != 0 || a.u32(5).unwrap_or(0) != 0 || rate == 0 {
        return Err(unreadable("limit in bytes or inverted"));
    }
    let avg = unit
        .checked_mul(10_000)
        .and_then(|per| u32::try_from(per / rate).ok())
        .ok_or_else(|| unreadable("limit rate"))?;
    let mut info = Vec::new();
    info.extend_from_slice(&avg.to_ne_bytes());
    info.extend_from_slice(&burst.to_ne_bytes());
    ext_text(XtProto::Ipv4, true, "limit", 0, &info).ok_or_else(|| unreadable("limit"))
}

/// Native `log group N` → `-j NFLOG`, through its x_tables payload (xt_nflog_info: len, group,
/// threshold, flags, pad, prefix), with room for nft's longer prefix as iptables-nft makes.
/// A log without a group is not one iptables-nft wrote.
fn nflog(proto: XtProto, a: &Attrs<'_>) -> Result<String, Unreadable> {
    let be16 = |kind| match a.bytes(kind) {
        Some([x, y]) => Some(u16::from_be_bytes([*x, *y])),
        _ => None,
    };
    let group = be16(1).ok_or_else(|| unreadable("log without a group"))?;
    let threshold = be16(4).unwrap_or(0);
    let snaplen = a.u32(3);
    let prefix = a.string(2).unwrap_or_default();
    let mut info = Vec::with_capacity(12 + 64.max(prefix.len() + 1));
    info.extend_from_slice(&snaplen.unwrap_or(0).to_ne_bytes());
    info.extend_from_slice(&group.to_ne_bytes());
    info.extend_from_slice(&threshold.to_ne_bytes());
    info.extend_from_slice(&u16::from(snaplen.is_some()).to_ne_bytes());
    info.extend_from_slice(&[0, 0]);
    info.extend_from_slice(prefix.as_bytes());
    info.resize(12 + 64.max(prefix.len() + 1), 0);
    ext_text(proto, false, "NFLOG", 0, &info).ok_or_else(|| unreadable("log"))
}

fn verdict(code: i32, chain: Option<&str>) -> Result<(String, bool), Unreadable> {
    let name = match code {
        decode::NF_ACCEPT => "ACCEPT",
        decode::NF_DROP => "DROP",
        decode::NFT_RETURN => "RETURN",
        decode::NFT_JUMP | decode::NFT_GOTO => {
            let c = chain.ok_or_else(|| unreadable("jump without a chain"))?;
            return Ok((c.to_string(), code == decode::NFT_GOTO));
        }
        other => return Err(unreadable(format!("verdict {other}"))),
    };
    Ok((name.to_string(), false))
}
