//! A namespace's ruleset as a dump returns it: the decoded replies sorted by kind, with the
//! generation they show. The agent's socket code requests and decodes the dump; the state is
//! built from it ([`crate::nftables::model::state::NftState::from_dump`]).

use crate::nftables::netlink::decode::{Chain, Notification, Rule, Set, SetElems, Table, Verb};

/// The ruleset of one namespace at one generation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dump {
    /// The generation the dump shows: notifications closed by a NEWGEN with a larger id are
    /// newer than the dump.
    pub gen_id: u32,
    pub tables: Vec<Table>,
    pub chains: Vec<Chain>,
    pub sets: Vec<Set>,
    /// One entry per set (anonymous sets included).
    pub elements: Vec<SetElems>,
    pub rules: Vec<Rule>,
    /// Messages of the dump that could not be decoded.
    pub skipped: usize,
    /// For a dump that counted the rules instead of keeping them (a ruleset held at chain
    /// level): each chain's rule count, by (family, table, chain). `rules` is then empty, and so
    /// are the anonymous sets and the elements.
    pub rule_counts: Option<std::collections::HashMap<(u8, String, String), usize>>,
}

impl Dump {
    /// Sort decoded dump replies into a [`Dump`] of generation `gen_id`.
    pub fn from_notifications(gen_id: u32, items: impl IntoIterator<Item = Notification>) -> Dump {
        let mut dump = Dump {
            gen_id,
            ..Dump::default()
        };
        for item in items {
            match item {
                Notification::Table(Verb::New, t) => dump.tables.push(t),
                Notification::Chain(Verb::New, c) => dump.chains.push(c),
                Notification::Set(Verb::New, s) => dump.sets.push(s),
                Notification::Rule(Verb::New, r) => dump.rules.push(r),
                Notification::Elements(Verb::New, e) => {
                    let same = |x: &&mut SetElems| {
                        x.family == e.family && x.table == e.table && x.set == e.set
                    };
                    match dump.elements.iter_mut().find(same) {
                        Some(x) => x.elements.extend(e.elements),
                        None => dump.elements.push(e),
                    }
                }
                _ => dump.skipped += 1,
            }
        }
        dump
    }
}
