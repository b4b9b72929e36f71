//! The human sentence of each incident line.

use super::*;

/// `A, B, C and 4 more`.
pub(super) fn list(items: &[String]) -> String {
    const SHOWN: usize = 4;
    if items.len() <= SHOWN {
        items.join(", ")
    } else {
        format!(
            "{} and {} more",
            items[..SHOWN].join(", "),
            items.len() - SHOWN
        )
    }
}

pub(super) fn where_(r: &IncidentLine) -> String {
    let ns = r.netns_name.clone().unwrap_or_else(|| r.netns.to_string());
    if r.tables.len() > 1 {
        format!("{} tables {} (netns {ns})", r.backend, r.tables.join(", "))
    } else {
        format!("{} {} table {} (netns {ns})", r.backend, r.family, r.table)
    }
}

/// ` Asked by firewall-cmd 4242 (run by compliance-job) over D-Bus: reload.`, when a D-Bus
/// firewall manager made the changes on a caller's request; else nothing.
pub(super) fn asked_by(r: &IncidentLine) -> String {
    r.requested_by
        .as_ref()
        .map(|q| format!(" Asked by {}.", q.describe()))
        .unwrap_or_default()
}

/// The last line of a foreign_*, unhooked or rule_drift incident whose objects are back.
pub(super) fn resolved_summary(r: &IncidentLine, by: &str, ms: u64) -> String {
    let what = match r.kind {
        IncidentKind::ForeignDelete => "re-created",
        IncidentKind::ForeignFlush => "refilled",
        IncidentKind::Unhooked => "hooked in again",
        _ => "rewritten by their owner",
    };
    format!(
        "Resolved: {}'s {} {what} by {by} after {ms} ms, in the {}. {} did it: if it happens \
         again, make only one component manage these chains.",
        r.owner,
        list(&r.chains),
        where_(r),
        r.actors.join("/"),
    )
}

pub(super) fn summary(r: &IncidentLine, hits: &[Hit]) -> String {
    let mut s = what_happened(r, hits);
    if !s.is_empty() {
        s.push_str(&asked_by(r));
    }
    s
}

fn what_happened(r: &IncidentLine, hits: &[Hit]) -> String {
    let by = r.actors.join("/");
    let owner = &r.owner;
    let chains = list(&r.chains);
    let n = r.chains.len();
    let plural = if n == 1 { "chain" } else { "chains" };
    match r.kind {
        IncidentKind::ForeignDelete => format!(
            "{by} deleted {owner}'s {plural} {chains} in the {}; {owner} loses its rules until it \
             re-creates them, and will fight {by} if both keep running: make only one of them \
             manage these chains.",
            where_(r)
        ),
        IncidentKind::ForeignFlush => format!(
            "{by} flushed {owner}'s {plural} {chains} in the {}; {owner}'s rules are gone until \
             it resyncs: find why {by} flushes chains it does not own (a firewall reload or a \
             save/restore of the whole table) and exclude {owner}'s chains from it.",
            where_(r)
        ),
        IncidentKind::Unhooked => format!(
            "{by} removed the jump into {owner}'s {plural} {chains} in the {}: the chains still \
             exist but no packet reaches them; restore the jump (restart {owner}) and stop {by} \
             from rewriting the built-in chains.",
            where_(r)
        ),
        IncidentKind::RuleDrift => {
            let what = hits
                .iter()
                .filter_map(|h| h.drift.as_ref())
                .map(|d| d.what.clone())
                .next()
                .unwrap_or_default();
            let danger = if r.severity == Severity::Critical {
                " This DROP/REJECT rule now matches more than before and may drop all traffic."
            } else {
                ""
            };
            format!(
                "{by} rewrote {owner}'s rule in {chains} ({}): it {what}.{danger} Restore the rule \
                 (restart {owner}) and upgrade or reconfigure {by} so that its save/restore keeps \
                 every match.",
                where_(r)
            )
        }
        _ => String::new(),
    }
}

pub(super) fn flap_summary(r: &IncidentLine) -> String {
    format!(
        "{} and {} keep undoing each other on {} in the {}: {} cycles so far, last at {}; two \
         components manage the same chains: disable one of them (e.g. kube-proxy alongside a CNI \
         that replaces it).",
        r.actors.join("/"),
        r.owner,
        list(&r.chains),
        where_(r),
        r.cycles.unwrap_or_default(),
        r.last.unwrap_or(r.time)
    )
}

pub(super) fn mass_summary(r: &IncidentLine) -> String {
    let mut parts = Vec::new();
    for o in &r.owners {
        let state = match (o.repaired, o.repair_ms, &o.failed) {
            (true, Some(ms), _) => format!("repaired after {ms} ms"),
            (_, _, Some(f)) => format!("NOT repaired (its re-creation failed: {f})"),
            _ if r.state.is_final() => "NEVER repaired".to_string(),
            _ => "not repaired yet".to_string(),
        };
        parts.push(format!(
            "{} ({} {}: {state})",
            o.owner,
            o.chains.len(),
            if o.chains.len() == 1 {
                "chain"
            } else {
                "chains"
            }
        ));
    }
    let never = r.unrepaired_owners();
    let fix = if r.state.is_final() && !never.is_empty() {
        format!(
            " Restart {} to re-create its chains, and make {} keep other components' chains \
             (e.g. do not flush the whole ruleset on reload).",
            never.join(", "),
            r.actors.join("/")
        )
    } else {
        format!(
            " A reload that flushes everything (systemctl restart iptables, firewall reload) \
             wipes other components' chains: make {} leave them alone.",
            r.actors.join("/")
        )
    };
    format!(
        "{} flushed or deleted the chains of {} owners at once in the {}: {}.{}{fix}",
        r.actors.join("/"),
        r.owners.len(),
        where_(r),
        parts.join("; "),
        asked_by(r),
    )
}

pub(super) fn split_summary(r: &IncidentLine) -> String {
    let b = r.backends.as_ref();
    let legacy = b.map(|b| list(&b.legacy)).unwrap_or_default();
    let nft = b.map(|b| list(&b.nft)).unwrap_or_default();
    let last = r
        .last_backend
        .map(|b| format!("; it wrote {b} last"))
        .unwrap_or_default();
    format!(
        "{}'s chains live in both iptables backends of netns {} (legacy: {legacy}; nft: {nft}){last}: \
         tools that detect the backend from these chains may pick the wrong one; delete the stale \
         set (usually the legacy one) and run every component with the same iptables mode.",
        r.owner,
        r.netns_name.clone().unwrap_or_else(|| r.netns.to_string()),
    )
}
