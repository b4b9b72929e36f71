//! `observer query --incident ID` and `GET /incidents/ID`: one incident's story, from the record
//! alone. Its lines (open, update, resolved or expired), every change its lines name with the
//! writer's ancestry, unit, pod or container, the owners' repairs and the change that made each,
//! and each affected chain before the incident, after its actors' changes and at its end.

use std::collections::BTreeSet;

use rusqlite::Connection;
use serde::Serialize;

use super::model::{self, Chain, Table};
use super::snapshots::{self, State};
use super::ForensicsError;
use crate::attribution::ProcessInfo;
use crate::output::line::{ChangeLine, IncidentLine};
use crate::ruleset::{Backend, Family};
use crate::store::{self, Selection};
use crate::timestamp::Timestamp;

/// One incident, told from the record.
#[derive(Debug, Clone, Serialize)]
pub struct Story {
    /// `incident_story`.
    pub kind: &'static str,
    pub id: String,
    /// The incident's latest line: its type, owner, actors, chains and summary as they stand.
    pub incident: IncidentLine,
    /// Every line of the incident, oldest first.
    pub states: Vec<StateLine>,
    /// Every change the lines name, in order (`seq`), with the writer as it was recorded.
    pub changes: Vec<ChangeLine>,
    /// Changes the lines name that the record no longer holds (retention trimmed them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<u64>,
    /// Each owner hit and, when it was repaired, when, by whom and by which change.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repairs: Vec<Repair>,
    /// Each chain the incident touched: before it, after its actors' changes, and at its end.
    pub chains: Vec<ChainStory>,
}

/// One line of the incident.
#[derive(Debug, Clone, Serialize)]
pub struct StateLine {
    pub time: Timestamp,
    pub state: crate::output::line::IncidentState,
    pub summary: String,
    /// The changes this line added to the incident.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub new_events: Vec<u64>,
}

/// One owner's repair (or its absence).
#[derive(Debug, Clone, Serialize)]
pub struct Repair {
    pub owner: String,
    pub chains: Vec<String>,
    pub repaired: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repaired_by: Option<String>,
    /// The first change by the repairer to one of the owner's chains after the incident began.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<ChangeLine>,
    /// A write by the owner that the kernel refused meanwhile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// One chain: `None` where it did not exist.
#[derive(Debug, Clone, Serialize)]
pub struct ChainStory {
    pub netns: u32,
    pub backend: Backend,
    pub family: Family,
    pub table: String,
    pub chain: String,
    /// Just before the incident's first change.
    pub before: Option<Chain>,
    /// Just after the last change of the incident's actors (before the owners' repairs).
    pub after: Option<Chain>,
    /// At the incident's last line (now, while it is open).
    pub end: Option<Chain>,
}

crate::output::people::texts!(Story: id, incident, states, changes, repairs, chains);
crate::output::people::texts!(StateLine: summary);
crate::output::people::texts!(Repair: owner, chains, repaired_by, change, failed);
crate::output::people::texts!(ChainStory: table, chain, before, after, end);

type ChainKey = (u32, Backend, Family, String, String);

/// The story of incident `id`.
pub fn story(conn: &Connection, id: &str) -> Result<Story, ForensicsError> {
    let lines = lines_of(conn, id)?;
    let Some(latest) = lines.last().map(|(_, r)| r.clone()) else {
        return Err(ForensicsError::UnknownIncident(id.to_string()));
    };
    let netns = latest.netns;

    let mut seen = BTreeSet::new();
    let mut states = Vec::new();
    for (_, r) in &lines {
        let new_events = r
            .events
            .iter()
            .copied()
            .filter(|s| seen.insert(*s))
            .collect();
        states.push(StateLine {
            time: r.time,
            state: r.state,
            summary: r.summary.clone(),
            new_events,
        });
    }

    let changes = changes_of(conn, netns, &seen)?;
    let found: BTreeSet<u64> = changes.iter().map(|c| c.seq).collect();
    let missing = seen.difference(&found).copied().collect();

    let first = changes.first();
    let start_ns = first.map_or(latest.since, |c| c.time).unix_nanos();
    let end_ns = if latest.state.is_final() {
        lines.last().map_or(start_ns, |(t, _)| *t)
    } else {
        Timestamp::now().unix_nanos()
    };
    let repairs = repairs_of(conn, &latest, start_ns, end_ns, first.map(|c| c.seq))?;

    // The chains: those the changes touched, and those the incident names in its own table.
    let mut keys: BTreeSet<ChainKey> = changes
        .iter()
        .filter_map(|c| {
            let chain = c.chain.clone()?;
            Some((c.netns, c.backend, c.family, c.table.clone(), chain))
        })
        .collect();
    for chain in &latest.chains {
        if !keys.iter().any(|k| &k.4 == chain) {
            keys.insert((
                netns,
                latest.backend,
                latest.family,
                latest.table.clone(),
                chain.clone(),
            ));
        }
    }
    let before = match first {
        Some(c) => snapshots::states(conn, c.seq.saturating_sub(1), start_ns, Some(netns))?,
        None => Vec::new(),
    };
    // The damage: the ruleset after the last change of the incident's actors (the changes that
    // follow are the owners' repairs, which the incident's lines also name).
    let damage = changes
        .iter()
        .rev()
        .find(|c| latest.actors.contains(&c.process.actor))
        .or(changes.last());
    let after = match damage {
        Some(c) => snapshots::states(conn, c.seq, c.time.unix_nanos(), Some(netns))?,
        None => Vec::new(),
    };
    let end = snapshots::states(conn, snapshots::seq_at(conn, end_ns)?, end_ns, Some(netns))?;
    let chains = keys
        .into_iter()
        .map(|k| ChainStory {
            before: chain_in(&before, &k),
            after: chain_in(&after, &k),
            end: chain_in(&end, &k),
            netns: k.0,
            backend: k.1,
            family: k.2,
            table: k.3,
            chain: k.4,
        })
        .collect();

    Ok(Story {
        kind: "incident_story",
        id: id.to_string(),
        incident: latest,
        states,
        changes,
        missing,
        repairs,
        chains,
    })
}

/// Every stored line of incident `id`, oldest first, with its time.
fn lines_of(conn: &Connection, id: &str) -> Result<Vec<(i64, IncidentLine)>, ForensicsError> {
    // The id as it appears in the stored JSON: a cheap pre-filter, checked exactly below.
    let needle = format!(
        "\"id\":{}",
        serde_json::to_string(id).unwrap_or_else(|_| id.to_string())
    );
    let mut stmt =
        conn.prepare("SELECT time_ns, json FROM incidents WHERE instr(json, ?1) > 0 ORDER BY no")?;
    let rows = stmt.query_map([needle], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (time_ns, json) = row?;
        match serde_json::from_str::<IncidentLine>(&json) {
            Ok(r) if r.id == id => out.push((time_ns, r)),
            Ok(_) => {}
            Err(e) => {
                return Err(ForensicsError::Damaged {
                    what: format!("a line of incident {id}"),
                    cause: e.to_string(),
                });
            }
        }
    }
    Ok(out)
}

/// The stored changes among `seqs`, in order.
fn changes_of(
    conn: &Connection,
    netns: u32,
    seqs: &BTreeSet<u64>,
) -> Result<Vec<ChangeLine>, ForensicsError> {
    let (Some(&lo), Some(&hi)) = (seqs.first(), seqs.last()) else {
        return Ok(Vec::new());
    };
    // A mass flush spans namespaces' tables but not namespaces: one namespace, one range.
    let sel = Selection {
        netns: Some(netns),
        after: Some(lo.saturating_sub(1)),
        before: Some(hi.saturating_add(1)),
        ..Selection::default()
    };
    let mut out = Vec::new();
    for row in store::select_changes(conn, &sel)? {
        if !seqs.contains(&row.number) {
            continue;
        }
        let c =
            serde_json::from_str::<ChangeLine>(&row.json).map_err(|e| ForensicsError::Damaged {
                what: format!("change {}", row.number),
                cause: e.to_string(),
            })?;
        out.push(c);
    }
    out.sort_by_key(|c| c.seq);
    Ok(out)
}

/// The owners' hits of the latest line, each with the change that repaired it.
fn repairs_of(
    conn: &Connection,
    latest: &IncidentLine,
    start_ns: i64,
    end_ns: i64,
    first_seq: Option<u64>,
) -> Result<Vec<Repair>, ForensicsError> {
    let mut out = Vec::new();
    for hit in &latest.owners {
        let mut change = None;
        if let (true, Some(by)) = (hit.repaired, &hit.repaired_by) {
            let sel = Selection {
                netns: Some(latest.netns),
                since_ns: Some(start_ns),
                until_ns: Some(end_ns.saturating_add(1)),
                after: first_seq,
                actor: Some(by.clone()),
                ..Selection::default()
            };
            for row in store::select_changes(conn, &sel)? {
                let Ok(c) = serde_json::from_str::<ChangeLine>(&row.json) else {
                    continue;
                };
                let on_owned = c.chain.as_ref().is_some_and(|ch| hit.chains.contains(ch));
                if on_owned && c.result.is_applied() && c.process.actor == *by {
                    change = Some(c);
                    break;
                }
            }
        }
        out.push(Repair {
            owner: hit.owner.clone(),
            chains: hit.chains.clone(),
            repaired: hit.repaired,
            repair_ms: hit.repair_ms,
            repaired_by: hit.repaired_by.clone(),
            change,
            failed: hit.failed.clone(),
        });
    }
    Ok(out)
}

fn chain_in(states: &[State], k: &ChainKey) -> Option<Chain> {
    states
        .iter()
        .filter(|st| st.netns == k.0 && st.backend == k.1)
        .flat_map(|st| &st.tables.tables)
        .find(|t| t.family == k.2 && t.name == k.3)
        .and_then(|t| t.chains.iter().find(|c| c.name == k.4))
        .cloned()
}

/// Who wrote a change: the actor, the writer and its ancestors, and its unit, pod or container.
pub fn writer(p: &ProcessInfo) -> String {
    let mut s = format!("{} ({} {}", p.actor, p.comm, p.pid);
    for a in &p.ancestry {
        s.push_str(&format!(" < {} {}", a.comm, a.pid));
    }
    s.push(')');
    if let Some(pod) = &p.pod {
        match (&pod.namespace, &pod.name) {
            (Some(ns), Some(n)) => s.push_str(&format!(", pod {ns}/{n}")),
            _ => s.push_str(&format!(", pod uid {}", pod.uid)),
        }
        if let Some(c) = &pod.container {
            s.push_str(&format!(", container {c}"));
        }
    } else if let Some(c) = &p.container_id {
        let short: String = c.chars().take(12).collect();
        s.push_str(&format!(", container {short}"));
    }
    if let Some(u) = &p.unit {
        s.push_str(&format!(", unit {u}"));
    }
    s
}

/// `YYYY-MM-DD HH:MM:SS.nanos`, in UTC.
fn clock(time: Timestamp) -> String {
    time.to_string()
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_string()
}

fn change_line(c: &ChangeLine) -> String {
    let mut what = format!("{} {} {} {}", c.op.as_str(), c.backend, c.family, c.table);
    if let Some(ch) = &c.chain {
        what.push(' ');
        what.push_str(ch);
    }
    if let Some(r) = &c.rule {
        what.push_str(&format!(": {r}"));
    }
    let result = if c.result.is_applied() {
        String::new()
    } else {
        format!(" [{}]", c.result)
    };
    format!("{what}{result} by {}", writer(&c.process))
}

/// The story for people: a timeline, then the chains before and after.
///
/// Its text is shown escaped (`crate::output::people`).
pub fn story_text(s: &Story) -> String {
    let s = &crate::output::people::for_people(s);
    let mut out = header(s);
    out.push_str("timeline\n");
    for (time, _, _, text) in &timeline(s) {
        out.push_str(&format!("  {}  {text}\n", clock(*time)));
    }
    for r in &s.repairs {
        if r.repaired && r.change.is_none() {
            out.push_str(&format!(
                "  {}'s {} repaired by {} after {} ms (the change is no longer in the record)\n",
                r.owner,
                r.chains.join(", "),
                r.repaired_by.as_deref().unwrap_or("unknown"),
                r.repair_ms.unwrap_or_default()
            ));
        } else if !r.repaired {
            out.push_str(&format!(
                "  {}'s {} not repaired{}\n",
                r.owner,
                r.chains.join(", "),
                r.failed
                    .as_ref()
                    .map(|f| format!(" (its write was refused: {f})"))
                    .unwrap_or_default()
            ));
        }
    }
    if !s.missing.is_empty() {
        out.push_str(&format!(
            "  (changes {:?} are no longer in the record)\n",
            s.missing
        ));
    }
    out.push_str("\nchains\n");
    for c in &s.chains {
        chain_text(c, &mut out);
    }
    out
}

/// The incident's first lines: what, where, whose, by whom, and its summary.
fn header(s: &Story) -> String {
    let i = &s.incident;
    let place = match &i.netns_name {
        Some(n) => format!("namespace {n} ({})", i.netns),
        None => format!("namespace {}", i.netns),
    };
    format!(
        "# incident {}: {} ({}), {}\n# {place}, {} {} {}; owner {}; actors {}\n# {}\n\n",
        s.id,
        i.kind.as_str(),
        i.severity.as_str(),
        i.state.as_str(),
        i.backend,
        i.family,
        i.table,
        i.owner,
        i.actors.join(", "),
        i.summary
    )
}

/// The timeline: changes, lines and repairs by time; at one time, changes first.
fn timeline(s: &Story) -> Vec<(Timestamp, u8, u64, String)> {
    let mut events: Vec<(Timestamp, u8, u64, String)> = Vec::new();
    let repair_seqs: BTreeSet<u64> = s
        .repairs
        .iter()
        .filter_map(|r| r.change.as_ref().map(|c| c.seq))
        .collect();
    for c in s.changes.iter().filter(|c| !repair_seqs.contains(&c.seq)) {
        events.push((
            c.time,
            0,
            c.seq,
            format!("change {:<6} {}", c.seq, change_line(c)),
        ));
    }
    for r in &s.repairs {
        if let Some(c) = &r.change {
            let after = r
                .repair_ms
                .map(|ms| format!(" {ms} ms after it began"))
                .unwrap_or_default();
            events.push((
                c.time,
                1,
                c.seq,
                format!(
                    "repair {:<6} {}'s {} put back{after}: {}",
                    c.seq,
                    r.owner,
                    r.chains.join(", "),
                    change_line(c)
                ),
            ));
        }
    }
    for (n, l) in s.states.iter().enumerate() {
        events.push((
            l.time,
            2,
            n as u64,
            format!("{:<13} {}", l.state.as_str(), l.summary),
        ));
    }
    events.sort();
    events
}

/// One chain before the actors' changes, after them, and at the incident's end.
fn chain_text(c: &ChainStory, out: &mut String) {
    out.push_str(&format!(
        "{} {} {} {}\n",
        c.backend, c.family, c.table, c.chain
    ));
    let phases = [
        ("before", &c.before),
        ("after the actors' changes", &c.after),
        ("at its end", &c.end),
    ];
    for (label, chain) in phases {
        out.push_str(&format!("  {label}:"));
        match chain {
            None => out.push_str(" (absent)\n"),
            Some(ch) => {
                out.push('\n');
                let t = Table {
                    family: c.family,
                    name: c.table.clone(),
                    sets: Vec::new(),
                    chains: vec![ch.clone()],
                };
                for l in model::render(c.backend, &t, false).lines() {
                    out.push_str(&format!("    {l}\n"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
