//! What every namespace holds at start (legacy tables, nft rulesets): the engine's first copies
//! and `observer owners`' inventory.

use std::collections::HashMap;

use netlink_sys::Socket;

use crate::incidents::{self, InventoryChain};
use crate::nftables::{self, state::NftState};
use crate::ruleset::Backend;
use crate::xtables::{self, XtProto, XtTable};

/// The chains and sets a namespace holds, for the incident engine's model.
pub(crate) fn inventory(
    legacy: &HashMap<(XtProto, String), XtTable>,
    nft: Option<&NftState>,
) -> Vec<InventoryChain> {
    let mut out = Vec::new();
    for t in legacy.values() {
        for c in &t.chains {
            out.push(InventoryChain {
                backend: Backend::Legacy,
                family: t.proto.family(),
                table: t.name.clone(),
                chain: c.name.clone(),
                rules: c.rules.len(),
                jumps: t.jump_targets(c),
                is_set: false,
            });
        }
    }
    for ((family, name), t) in nft.map(|s| &s.tables).into_iter().flatten() {
        let family = crate::ruleset::Family::from_nfproto(*family);
        for (chain, c) in &t.chains {
            out.push(InventoryChain {
                backend: Backend::Nft,
                family,
                table: name.clone(),
                chain: chain.clone(),
                rules: c.rules.len(),
                jumps: c
                    .rules
                    .iter()
                    .flat_map(|r| incidents::drift::jump_targets(Backend::Nft, &r.text))
                    .collect(),
                is_set: false,
            });
        }
        for (set, st) in &t.sets {
            if !st.set.is_anonymous() {
                out.push(InventoryChain {
                    backend: Backend::Nft,
                    family,
                    table: name.clone(),
                    chain: set.clone(),
                    rules: 0,
                    jumps: Vec::new(),
                    is_set: true,
                });
            }
        }
    }
    out
}

/// What a namespace holds when observer starts watching it.
pub(crate) struct Baseline {
    pub(super) socket: Option<Socket>,
    pub nft: Option<(NftState, u32)>,
    pub legacy: HashMap<(XtProto, String), XtTable>,
    pub(super) ipsets: Option<crate::ipset::Sets>,
    /// The namespace's interface names, for rule text (a socket opened inside it).
    pub(super) ifnames: Option<nftables::ifnames::IfNames>,
    pub problems: Vec<String>,
    /// For an nftables ruleset of more rules than it may hold rule by rule: each chain's rule
    /// count (the ruleset in `nft` then holds no rule, and is held at chain level).
    pub(super) nft_counts: Option<std::collections::HashMap<(u8, String, String), usize>>,
}

/// Runs inside the namespace: subscribe first (when `subscribe`), then read, so nothing falls
/// between the two. The legacy tables are read when `legacy` says how many of their rules may
/// be held at rule level. An nftables ruleset of more than `nft_cap` rules is read a chain at
/// a time (its rules counted, not kept), to be held at chain level.
pub(crate) fn read_baseline(
    legacy: Option<usize>,
    subscribe: Option<usize>,
    nft_cap: usize,
) -> Baseline {
    let read_legacy = legacy.is_some();
    let mut b = Baseline {
        socket: None,
        nft: None,
        legacy: HashMap::new(),
        // A namespace found late already holds the change that revealed it: no baseline.
        ipsets: read_legacy.then(|| crate::ipset::list().ok()).flatten(),
        ifnames: nftables::ifnames::IfNames::open()
            .map_err(|e| tracing::debug!("interface names: {e}"))
            .ok(),
        problems: Vec::new(),
        nft_counts: None,
    };
    if let Some(rcvbuf) = subscribe {
        match nftables::socket::subscribe_with(rcvbuf) {
            Ok(s) => b.socket = Some(s),
            Err(e) => b.problems.push(format!("nftables subscription: {e}")),
        }
    }
    if b.socket.is_some() || subscribe.is_none() {
        match super::nft::dump_held(Some(nft_cap), false) {
            Ok(mut d) => {
                let gen = d.gen_id;
                b.nft_counts = d.rule_counts.take();
                let state = nftables::ifnames::scope(&mut b.ifnames, || NftState::from_dump(&d));
                b.nft = Some((state, gen));
            }
            Err(e) => b.problems.push(format!("nftables dump: {e}")),
        }
    }
    if let Some(limit) = legacy {
        b.legacy = read_legacy_tables(&mut b.problems, limit);
    }
    b
}

/// Every x_tables table of the current namespace (runs inside it), held at rule level while
/// their rules fit in `limit`, at chain level past it.
pub(super) fn read_legacy_tables(
    problems: &mut Vec<String>,
    limit: usize,
) -> HashMap<(XtProto, String), XtTable> {
    let mut tables = HashMap::new();
    let mut room = limit;
    for proto in [XtProto::Ipv4, XtProto::Ipv6, XtProto::Arp] {
        let names = match xtables::table_names(proto) {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!("{proto:?} table names: {e}");
                continue;
            }
        };
        for name in names {
            let against = xtables::Against { prev: None, room };
            match xtables::read_table_against(proto, &name, against) {
                Ok(t) => {
                    if !t.chain_level() {
                        room = room.saturating_sub(t.rule_count());
                    }
                    tables.insert((proto, name), t);
                }
                Err(e) => problems.push(format!("reading legacy table {name}: {e}")),
            }
        }
    }
    tables
}
