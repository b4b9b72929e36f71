//! Building and updating an incident's line: its owners, chains, tables and events.

use super::*;

/// In an open `mass_flush` of this namespace, the entry of `owner` while it has not repaired.
pub(super) fn unrepaired_owner<'a>(
    t: &'a mut Tracked,
    netns: u32,
    owner: &str,
) -> Option<&'a mut OwnerHit> {
    if t.record.kind != IncidentKind::MassFlush
        || t.record.netns != netns
        || t.record.state.is_final()
    {
        return None;
    }
    t.record
        .owners
        .iter_mut()
        .find(|o| o.owner == owner && !o.repaired)
}

pub(super) fn add_events(r: &mut IncidentLine, seqs: &[u64]) {
    for &s in seqs {
        if !r.events.contains(&s) {
            r.events.push(s);
        }
    }
    trim_events(r);
}

pub(super) fn trim_events(r: &mut IncidentLine) {
    if r.events.len() > MAX_EVENTS {
        let cut = r.events.len() - MAX_EVENTS;
        r.events.drain(..cut);
    }
}

/// The actors an incident names for a change: the one it is counted against, as a person reads
/// it (`firewall-cmd (via firewalld)` when a D-Bus firewall manager served a caller), the
/// writer's own actor when that differs, and its unit.
pub(super) fn actors_of(actor: &str, first: &ChangeLine) -> Vec<String> {
    let p: &ProcessInfo = &first.process;
    let shown = match &p.requested_by {
        Some(r) => format!("{} (via {actor})", r.comm),
        None => actor.to_string(),
    };
    let mut actors = vec![shown];
    if p.actor != actor && p.actor != "unknown" {
        actors.push(p.actor.clone());
    }
    if let Some(u) = &p.unit {
        if !actors.contains(u) {
            actors.push(u.clone());
        }
    }
    actors
}

pub(super) fn new_incident(
    kind: IncidentKind,
    netns: u32,
    hits: &[Hit],
    actor: &str,
    first: &ChangeLine,
) -> IncidentLine {
    let h = &hits[0];
    let mut chains: Vec<String> = hits.iter().map(|h| h.chain.clone()).collect();
    chains.sort();
    chains.dedup();
    let mut events: Vec<u64> = hits.iter().map(|h| h.seq).collect();
    events.sort_unstable();
    events.dedup();
    let severity = match kind {
        IncidentKind::Unhooked | IncidentKind::MassFlush | IncidentKind::Flapping => {
            Severity::Critical
        }
        _ => Severity::Warning,
    };
    let mut r = IncidentLine {
        id: format!(
            "{}-{}-{}",
            kind.as_str(),
            netns,
            events.first().copied().unwrap_or_default()
        ),
        severity,
        netns_name: first.netns_name.clone(),
        backend: h.backend,
        family: h.family,
        table: h.table.clone(),
        chains,
        owner: h.owner.clone(),
        actors: actors_of(actor, first),
        requested_by: first.process.requested_by.clone(),
        events,
        ..blank(kind, netns, first.time)
    };
    if kind != IncidentKind::MassFlush {
        r.owners = vec![unrepaired(h.owner.clone(), r.chains.clone())];
    }
    add_tables(&mut r, hits);
    trim_events(&mut r);
    r
}

/// Every `family table` the hits touched, listed when there is more than one.
pub(super) fn add_tables(r: &mut IncidentLine, hits: &[Hit]) {
    let mut all: BTreeSet<String> = r.tables.iter().cloned().collect();
    all.insert(format!("{} {}", r.family, r.table));
    for h in hits {
        all.insert(format!("{} {}", h.family, h.table));
    }
    r.tables = if all.len() > 1 {
        all.into_iter().collect()
    } else {
        Vec::new()
    };
}

pub(super) fn update_with_hits(
    r: &mut IncidentLine,
    hits: &[Hit],
    actor: &str,
    first: &ChangeLine,
) {
    r.state = IncidentState::Update;
    r.time = first.time;
    for h in hits {
        if !r.chains.contains(&h.chain) {
            r.chains.push(h.chain.clone());
        }
    }
    r.chains.sort();
    if let Some(o) = r.owners.first_mut() {
        o.chains.clone_from(&r.chains);
    }
    add_tables(r, hits);
    for a in actors_of(actor, first) {
        if !r.actors.contains(&a) {
            r.actors.push(a);
        }
    }
    if r.requested_by.is_none() {
        r.requested_by.clone_from(&first.process.requested_by);
    }
    add_events(r, &hits.iter().map(|h| h.seq).collect::<Vec<_>>());
}

pub(super) fn all_chains(owners: &[OwnerHit]) -> Vec<String> {
    let mut v: Vec<String> = owners.iter().flat_map(|o| o.chains.clone()).collect();
    v.sort();
    v.dedup();
    v
}

/// An owner's entry in an incident, nothing repaired yet.
pub(super) fn unrepaired(owner: String, chains: Vec<String>) -> OwnerHit {
    OwnerHit {
        owner,
        chains,
        repaired: false,
        repair_ms: None,
        repaired_by: None,
        failed: None,
    }
}

/// A new incident's line with only its kind, namespace and time (of its first event): open,
/// nothing else said yet (each kind fills in what it knows).
pub(super) fn blank(kind: IncidentKind, netns: u32, time: Timestamp) -> IncidentLine {
    IncidentLine {
        id: String::new(),
        time,
        since: time,
        state: IncidentState::Open,
        kind,
        severity: Severity::Warning,
        netns,
        netns_name: None,
        node: None,
        backend: Backend::Nft,
        family: Family::Ip,
        table: String::new(),
        chains: Vec::new(),
        owner: String::new(),
        actors: Vec::new(),
        events: Vec::new(),
        summary: String::new(),
        cycles: None,
        last: None,
        rule: None,
        was: None,
        lost: Vec::new(),
        owners: Vec::new(),
        tables: Vec::new(),
        merged_into: None,
        backends: None,
        last_backend: None,
        restore: None,
        requested_by: None,
    }
}
