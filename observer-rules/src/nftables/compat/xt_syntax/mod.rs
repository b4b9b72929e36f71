//! Rules that iptables-nft manages, in the syntax their writer used: `iptables-nft-save`'s.
//!
//! A rule is judged iptables-nft's the way `iptables-nft-save` judges it:
//! - its table is one iptables-nft manages: family `ip` (iptables) or `ip6` (ip6tables), named
//!   `filter`, `nat`, `mangle`, `raw` or `security` ([`TABLES`]);
//! - its chain is a user chain (no hook) or one of that table's built-in chains on its own hook
//!   and priority ([`builtin`]);
//! - every expression of the rule is one iptables-nft writes and reads back ([`parse`]).
//!
//! Such a rule prints as `iptables-nft-save` prints it after `-A CHAIN ` ([`XtText::Saved`]).
//! When the table and chain are iptables-nft's but a rule is not (written by `nft` into an
//! iptables-nft table), the rule keeps its nft text and says why ([`XtText::Unreadable`]), where
//! `iptables-nft-save` gives up on the table ("Table `filter' is incompatible, use 'nft' tool").
//! Other tables and chains are nft's own: [`rule_text`] returns `None`.
//!
//! Layering: called by the state (`state`) for each rule it renders; imports `parse` and the
//! decoder's types; prints matches and targets through the legacy printers (`xtables`).

mod parse;

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::nftables::netlink::decode::{Chain, Rule};
use crate::nftables::render::fields::{NFPROTO_IPV4, NFPROTO_IPV6};
use crate::xtables::{ext_text, proto_name, XtProto};
use parse::{Addr, Match, Parsed};

/// A built-in chain: name, hook number, priority.
type Builtin = (&'static str, u32, i32);

/// The tables iptables-nft manages, with their built-in chains.
pub(crate) const TABLES: &[(&str, &[Builtin])] = &[
    (
        "filter",
        &[("INPUT", 1, 0), ("FORWARD", 2, 0), ("OUTPUT", 3, 0)],
    ),
    (
        "nat",
        &[
            ("PREROUTING", 0, -100),
            ("INPUT", 1, 100),
            ("OUTPUT", 3, -100),
            ("POSTROUTING", 4, 100),
        ],
    ),
    (
        "mangle",
        &[
            ("PREROUTING", 0, -150),
            ("INPUT", 1, -150),
            ("FORWARD", 2, -150),
            ("OUTPUT", 3, -150),
            ("POSTROUTING", 4, -150),
        ],
    ),
    ("raw", &[("PREROUTING", 0, -300), ("OUTPUT", 3, -300)]),
    // 150, as iptables-nft 1.8.9 makes them (the kernel's x_tables security table is at 50).
    (
        "security",
        &[("INPUT", 1, 150), ("FORWARD", 2, 150), ("OUTPUT", 3, 150)],
    ),
];

/// A rule of an iptables-nft table, as its writer's tool prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XtText {
    /// `iptables-nft-save`'s text after `-A CHAIN `.
    Saved(String),
    /// iptables-nft cannot read this rule back: what it does not know.
    Unreadable(String),
}

/// The x_tables protocol of a table iptables-nft would manage, `None` for nft's own tables.
pub(crate) fn managed(family: u8, table: &str) -> Option<XtProto> {
    let proto = match family {
        NFPROTO_IPV4 => XtProto::Ipv4,
        NFPROTO_IPV6 => XtProto::Ipv6,
        _ => return None,
    };
    TABLES.iter().any(|(t, _)| *t == table).then_some(proto)
}

/// Whether a chain of a managed table has iptables-nft's layout: a user chain, or a built-in
/// chain on its hook and priority.
pub(crate) fn builtin(table: &str, chain: &Chain) -> bool {
    let Some(hook) = &chain.hook else {
        return true;
    };
    TABLES
        .iter()
        .filter(|(t, _)| *t == table)
        .flat_map(|(_, chains)| chains.iter())
        .any(|&(name, num, prio)| name == chain.name && num == hook.num && prio == hook.priority)
}

/// The rule in `iptables-nft-save` syntax, when its table and chain are iptables-nft's.
pub fn rule_text(rule: &Rule, chain: Option<&Chain>) -> Option<XtText> {
    let proto = managed(rule.family, &rule.table)?;
    if !chain.is_none_or(|c| builtin(&rule.table, c)) {
        return None;
    }
    Some(match parse::parse(proto, &rule.exprs) {
        Ok(p) => XtText::Saved(print(proto, &p, rule.comment.as_deref())),
        Err(why) => XtText::Unreadable(why.0),
    })
}

fn inv(out: &mut String, invert: bool) {
    if invert {
        out.push_str(" !");
    }
}

fn addr(out: &mut String, proto: XtProto, letter: char, a: &Addr) {
    inv(out, a.invert);
    let ones: u32 = a.mask.iter().map(|b| b.count_ones()).sum();
    let prefix = mask_is_prefix(&a.mask);
    let (text, mask) = match proto {
        XtProto::Ipv6 => {
            let v: [u8; 16] = a.value.as_slice().try_into().unwrap_or_default();
            let m: [u8; 16] = a.mask.as_slice().try_into().unwrap_or_default();
            (Ipv6Addr::from(v).to_string(), Ipv6Addr::from(m).to_string())
        }
        _ => {
            let v: [u8; 4] = a.value.as_slice().try_into().unwrap_or_default();
            let m: [u8; 4] = a.mask.as_slice().try_into().unwrap_or_default();
            (Ipv4Addr::from(v).to_string(), Ipv4Addr::from(m).to_string())
        }
    };
    if prefix {
        let _ = write!(out, " -{letter} {text}/{ones}");
    } else {
        let _ = write!(out, " -{letter} {text}/{mask}");
    }
}

fn mask_is_prefix(mask: &[u8]) -> bool {
    let mut ended = false;
    for b in mask {
        for i in (0..8).rev() {
            let set = b & (1 << i) != 0;
            if set && ended {
                return false;
            }
            ended |= !set;
        }
    }
    true
}

/// The parts in `iptables-save` order: `-s -d -i -o -p -f`, the matches, the comment from the
/// rule's userdata, the target.
fn print(proto: XtProto, p: &Parsed, comment: Option<&str>) -> String {
    let mut out = String::with_capacity(128);
    if let Some(a) = &p.src {
        addr(&mut out, proto, 's', a);
    }
    if let Some(a) = &p.dst {
        addr(&mut out, proto, 'd', a);
    }
    for (letter, dev) in [('i', &p.iif), ('o', &p.oif)] {
        if let Some((name, invert)) = dev {
            inv(&mut out, *invert);
            let _ = write!(out, " -{letter} {name}");
        }
    }
    if let Some((n, invert)) = p.proto {
        inv(&mut out, invert);
        match proto_name(u16::from(n)) {
            Some(name) => {
                let _ = write!(out, " -p {name}");
            }
            None => {
                let _ = write!(out, " -p {n}");
            }
        }
    }
    if let Some(frag) = p.frag {
        inv(&mut out, !frag);
        out.push_str(" -f");
    }
    for m in &p.matches {
        out.push_str(" -m ");
        match m {
            Match::Text(t) => out.push_str(t),
            Match::L4(l) => out.push_str(&l4_text(proto, l)),
        }
    }
    if let Some(c) = comment {
        let mut info = c.as_bytes().to_vec();
        info.resize(256, 0);
        if let Some(t) = ext_text(proto, true, "comment", 0, &info) {
            let _ = write!(out, " -m {t}");
        }
    }
    if let Some((t, goto)) = &p.target {
        let _ = write!(out, " -{} {t}", if *goto { 'g' } else { 'j' });
    }
    out.trim_start().to_string()
}

/// A native tcp/udp match printed through its x_tables payload (`xt_tcp`, `xt_udp`).
fn l4_text(proto: XtProto, l: &parse::L4) -> String {
    let mut info = Vec::with_capacity(12);
    for v in [l.sport.0, l.sport.1, l.dport.0, l.dport.1] {
        info.extend_from_slice(&v.to_ne_bytes());
    }
    let name = if l.proto == 6 {
        info.extend_from_slice(&[0, l.flags.0, l.flags.1, l.invflags]);
        "tcp"
    } else {
        info.extend_from_slice(&[l.invflags, 0]);
        "udp"
    };
    ext_text(proto, true, name, 0, &info).unwrap_or_else(|| name.to_string())
}
