//! The answers the CLI (`observer query --at`, `--diff`) and the HTTP endpoints (`/ruleset`,
//! `/diff`) give: JSON values and the text a person reads, from the record alone.

use std::collections::{BTreeMap, HashMap};

use rusqlite::Connection;

use super::model::{self, Last, Table};
use super::replay::Recorded;
use super::snapshots::{self, State};
use super::{gaps, ForensicsError};
use crate::store::{self, RecordGap, Selection};
use crate::timestamp::Timestamp;

/// What to rebuild: all namespaces or one, all tables or one.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    pub netns: Option<u32>,
    pub table: Option<String>,
    pub backend: Option<crate::ruleset::Backend>,
}

impl Scope {
    fn keep(&self, st: &State, t: &Table) -> bool {
        self.table.as_ref().is_none_or(|n| *n == t.name)
            && self.backend.is_none_or(|b| b == st.backend)
    }
}

/// A time argument: relative (`2h`: that long ago), RFC 3339, or `now`.
pub fn parse_time(flag: &'static str, s: &str) -> Result<i64, ForensicsError> {
    Timestamp::parse_arg(s)
        .map(Timestamp::unix_nanos)
        .map_err(|cause| ForensicsError::BadTime { flag, cause })
}

/// The rulesets at `at_ns`, one entry per namespace and backend, tables filtered by `scope`.
pub fn at(
    conn: &Connection,
    at_ns: i64,
    scope: &Scope,
) -> Result<(u64, Vec<State>), ForensicsError> {
    // One read transaction: the snapshot and the changes after it come from one state of a
    // record the daemon may be writing, and thousands of reads take the file's lock once.
    let read = conn.unchecked_transaction()?;
    let seq = snapshots::seq_at(&read, at_ns)?;
    let mut states = snapshots::states(&read, seq, at_ns, scope.netns)?;
    drop(read);
    for st in &mut states {
        let keep: Vec<Table> = std::mem::take(&mut st.tables.tables)
            .into_iter()
            .filter(|t| scope.keep(st, t))
            .collect();
        st.tables.tables = keep;
    }
    states.retain(|st| !st.tables.tables.is_empty());
    Ok((seq, states))
}

fn rfc3339(ns: i64) -> String {
    Timestamp::from_unix_nanos(ns).to_string()
}

fn where_(st: &State) -> String {
    match &st.netns_name {
        Some(n) => format!("namespace {n} ({})", st.netns),
        None => format!("namespace {}", st.netns),
    }
}

fn provenance(st: &State) -> String {
    match st.snapshot_seq {
        Some(s) => format!(
            "the snapshot after change {s} and {} changes after it",
            st.replayed
        ),
        None => format!(
            "{} recorded changes (the record holds no snapshot of it)",
            st.replayed
        ),
    }
}

/// The rulesets at `at_ns` and the record's gaps that may make them incomplete.
pub fn at_with_gaps(
    conn: &Connection,
    at_ns: i64,
    scope: &Scope,
) -> Result<(u64, Vec<State>, Vec<RecordGap>), ForensicsError> {
    let (seq, states) = at(conn, at_ns, scope)?;
    let holes = gaps::at(&gaps::all(conn)?, at_ns, &states);
    Ok((seq, states, holes))
}

fn incomplete(gaps: &[RecordGap], at_ns: i64, st: &State) -> bool {
    gaps.iter()
        .any(|g| gaps::spans_at(g, at_ns, st.snapshot_seq))
}

/// `observer query --at` for people: each namespace's tables in their tools' syntax, chains'
/// last writers in `#` comments; first, the record's gaps that the answer spans.
pub fn at_text(at_ns: i64, seq: u64, states: &[State], holes: &[RecordGap]) -> String {
    let mut out = format!("# the ruleset at {} (after change {seq})\n", rfc3339(at_ns));
    out.push_str(&gaps::text(holes));
    for st in states {
        let maybe = if incomplete(holes, at_ns, st) {
            "; may be incomplete: the record has a gap before it"
        } else {
            ""
        };
        // The ruleset as people read it: its names and rules shown escaped.
        let st = &crate::output::people::for_people(st);
        out.push_str(&format!(
            "\n# {}, {} (from {}{maybe})\n",
            where_(st),
            st.backend,
            provenance(st)
        ));
        for t in &st.tables.tables {
            out.push_str(&model::render(st.backend, t, true));
        }
    }
    out
}

/// One line of `observer query --at --json`: a namespace's ruleset of one backend, as data and
/// as the text `--at` prints. Serialized straight from the rebuilt tables.
#[derive(Debug, serde::Serialize)]
pub struct RulesetLine<'a> {
    pub kind: &'static str,
    pub at: String,
    pub seq: u64,
    #[serde(flatten)]
    pub state: &'a State,
    pub text: String,
    /// The record has a gap that this ruleset may lack changes of (the `status` lines of state
    /// `gap` before it say which).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub incomplete: bool,
}

/// `observer query --at --json`: one object per namespace and backend.
pub fn at_json<'a>(
    at_ns: i64,
    seq: u64,
    states: &'a [State],
    holes: &[RecordGap],
) -> Vec<RulesetLine<'a>> {
    states
        .iter()
        .map(|st| RulesetLine {
            kind: "ruleset",
            at: rfc3339(at_ns),
            seq,
            incomplete: incomplete(holes, at_ns, st),
            state: st,
            text: st
                .tables
                .tables
                .iter()
                .map(|t| model::render(st.backend, t, false))
                .collect(),
        })
        .collect()
}

/// One difference between two moments.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Difference {
    pub netns: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netns_name: Option<String>,
    pub backend: crate::ruleset::Backend,
    pub family: crate::ruleset::Family,
    pub table: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain: Option<String>,
    /// `table_added`, `table_removed`, `chain_added`, `chain_removed`, `chain_changed`.
    pub change: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules_added: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules_removed: Vec<String>,
    /// The rules are the same but in another order.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reordered: bool,
    /// The header (policy, hook) before and after, when it changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<(Option<String>, Option<String>)>,
    /// The last change to it in the range: who and when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<Last>,
}

type Key = (u32, crate::ruleset::Backend, crate::ruleset::Family, String);

/// What differs between the rulesets at `from_ns` and at `to_ns`, chain by chain.
pub fn diff(
    conn: &Connection,
    from_ns: i64,
    to_ns: i64,
    scope: &Scope,
) -> Result<Vec<Difference>, ForensicsError> {
    Ok(diff_with_gaps(conn, from_ns, to_ns, scope)?.0)
}

/// [`diff`], and the record's gaps the diff spans.
pub fn diff_with_gaps(
    conn: &Connection,
    from_ns: i64,
    to_ns: i64,
    scope: &Scope,
) -> Result<(Vec<Difference>, Vec<RecordGap>), ForensicsError> {
    let (s_from, before) = at(conn, from_ns, scope)?;
    let (s_to, after) = at(conn, to_ns, scope)?;
    let holes = gaps::between(&gaps::all(conn)?, from_ns, to_ns, &before, &after);
    // Who touched what in between: the last change of each chain (and each table).
    let mut last: HashMap<(Key, Option<String>), Last> = HashMap::new();
    if s_to > s_from {
        let sel = Selection {
            netns: scope.netns,
            after: Some(s_from),
            before: Some(s_to + 1),
            ..Selection::default()
        };
        for row in store::select_changes(conn, &sel)? {
            let Ok(c) = serde_json::from_str::<Recorded>(&row.json) else {
                continue;
            };
            if !c.applied() {
                continue;
            }
            let key = (c.netns, c.backend, c.family, c.table.clone());
            last.insert((key.clone(), None), c.last());
            last.insert((key, c.chain.clone()), c.last());
        }
    }
    let index = |states: &[State]| {
        let mut m: BTreeMap<Key, (Option<String>, Table)> = BTreeMap::new();
        for st in states {
            for t in &st.tables.tables {
                m.insert(
                    (st.netns, st.backend, t.family, t.name.clone()),
                    (st.netns_name.clone(), t.clone()),
                );
            }
        }
        m
    };
    let (old, new) = (index(&before), index(&after));
    let mut keys: Vec<&Key> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = Vec::new();
    for key in keys {
        let name = new.get(key).or(old.get(key)).and_then(|(n, _)| n.clone());
        let base = |chain: Option<&str>, change: &str| Difference {
            netns: key.0,
            netns_name: name.clone(),
            backend: key.1,
            family: key.2,
            table: key.3.clone(),
            chain: chain.map(str::to_string),
            change: change.to_string(),
            rules_added: Vec::new(),
            rules_removed: Vec::new(),
            reordered: false,
            head: None,
            by: last
                .get(&(key.clone(), chain.map(str::to_string)))
                .or_else(|| last.get(&(key.clone(), None)))
                .cloned(),
        };
        let empty = Table::new(key.2, &key.3);
        let (o, n) = match (old.get(key), new.get(key)) {
            (None, Some(_)) => {
                out.push(base(None, "table_added"));
                (&empty, &new[key].1)
            }
            (Some(_), None) => {
                out.push(base(None, "table_removed"));
                (&old[key].1, &empty)
            }
            (Some(a), Some(b)) => (&a.1, &b.1),
            (None, None) => continue,
        };
        for c in &o.chains {
            if !n.chains.iter().any(|x| x.name == c.name) {
                let mut d = base(Some(&c.name), "chain_removed");
                d.rules_removed = c.rules.clone();
                out.push(d);
            }
        }
        for c in &n.chains {
            let Some(was) = o.chains.iter().find(|x| x.name == c.name) else {
                let mut d = base(Some(&c.name), "chain_added");
                d.rules_added = c.rules.clone();
                if d.by.is_none() {
                    d.by = c.last.clone();
                }
                out.push(d);
                continue;
            };
            if was.rules == c.rules && was.head == c.head {
                continue;
            }
            let mut d = base(Some(&c.name), "chain_changed");
            (d.rules_added, d.rules_removed) = multiset_diff(&was.rules, &c.rules);
            d.reordered = d.rules_added.is_empty() && d.rules_removed.is_empty();
            if was.head != c.head {
                d.head = Some((was.head.clone(), c.head.clone()));
            }
            if d.by.is_none() {
                d.by = c.last.clone();
            }
            out.push(d);
        }
    }
    Ok((out, holes))
}

/// Rules in `b` and not in `a`, and in `a` and not in `b`, counting repeats.
fn multiset_diff(a: &[String], b: &[String]) -> (Vec<String>, Vec<String>) {
    let mut count: HashMap<&str, i64> = HashMap::new();
    for r in a {
        *count.entry(r).or_default() += 1;
    }
    let mut added = Vec::new();
    for r in b {
        match count.get_mut(r.as_str()) {
            Some(n) if *n > 0 => *n -= 1,
            _ => added.push(r.clone()),
        }
    }
    let mut removed = Vec::new();
    for r in a {
        if let Some(n) = count.get_mut(r.as_str()) {
            if *n > 0 {
                *n -= 1;
                removed.push(r.clone());
            }
        }
    }
    (added, removed)
}

/// `observer query --diff` for people; first, the record's gaps that the diff spans.
pub fn diff_text(from_ns: i64, to_ns: i64, diffs: &[Difference], holes: &[RecordGap]) -> String {
    let mut out = format!(
        "# what changed between {} and {}\n",
        rfc3339(from_ns),
        rfc3339(to_ns)
    );
    out.push_str(&gaps::text(holes));
    if diffs.is_empty() {
        out.push_str("# nothing\n");
    }
    for d in diffs {
        let d = &crate::output::people::for_people(d);
        let place = match &d.netns_name {
            Some(n) => n.clone(),
            None => d.netns.to_string(),
        };
        let what = match &d.chain {
            Some(c) => format!("{} {} {} {c}", d.backend, d.family, d.table),
            None => format!("{} {} {}", d.backend, d.family, d.table),
        };
        let by = match &d.by {
            Some(l) => format!(
                " by {} ({} {}) at {} (seq {})",
                l.actor, l.comm, l.pid, l.time, l.seq
            ),
            None => String::new(),
        };
        out.push_str(&format!("{place} {what}: {}{by}\n", d.change));
        if let Some((a, b)) = &d.head {
            out.push_str(&format!(
                "  ~ {} -> {}\n",
                a.as_deref().unwrap_or("-"),
                b.as_deref().unwrap_or("-")
            ));
        }
        if d.reordered {
            out.push_str("  ~ the same rules in another order\n");
        }
        for r in &d.rules_removed {
            out.push_str(&format!("  - {r}\n"));
        }
        for r in &d.rules_added {
            out.push_str(&format!("  + {r}\n"));
        }
    }
    out
}

crate::output::people::texts!(
    Difference: netns_name,
    table,
    chain,
    change,
    rules_added,
    rules_removed,
    head,
    by
);

/// `FROM..TO` into two times.
pub fn parse_range(s: &str) -> Result<(i64, i64), ForensicsError> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| ForensicsError::BadRange(s.to_string()))?;
    let b = if b.trim().is_empty() { "now" } else { b };
    Ok((parse_time("--diff FROM", a)?, parse_time("--diff TO", b)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiset_diff_counts_repeats() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let (a, r) = multiset_diff(&s(&["x", "x", "y"]), &s(&["x", "z"]));
        assert_eq!(a, ["z"]);
        assert_eq!(r, ["x", "y"]);
    }

    #[test]
    fn rulesets_and_differences_for_people_show_names_and_rules_escaped() {
        use crate::forensics::model::{Chain, Last, Table, Tables};
        use crate::ruleset::{Backend, Family};
        let evil = "c\n\x1b[2J\u{202e}";
        let shown = "c\\x0a\\x1b[2J\\u202e";
        let last = Last {
            seq: 3,
            time: crate::timestamp::Timestamp::parse("2026-11-21T05:42:37.000000000Z").unwrap(),
            actor: evil.into(),
            comm: evil.into(),
            pid: 9,
            op: "rule_add".into(),
        };
        let mut table = Table::new(Family::Ip, evil);
        table.chains.push(Chain {
            name: evil.into(),
            head: None,
            rules: vec![format!("counter comment \"{evil}\"")],
            last: Some(last.clone()),
        });
        let st = State {
            netns: 7,
            netns_name: Some(evil.into()),
            backend: Backend::Nft,
            snapshot_seq: None,
            replayed: 1,
            tables: Tables {
                tables: vec![table],
            },
        };
        let text = at_text(0, 3, std::slice::from_ref(&st), &[]);
        // Only the renderer's own line ends and tabs are left.
        assert!(!text.contains(['\x1b', '\u{202e}']), "{text:?}");
        assert!(text.contains(&format!("\tchain {shown} {{\n")), "{text}");
        assert!(text.contains(&format!("comment \"{shown}\"")), "{text}");
        assert!(text.contains(&format!("namespace {shown} (7)")), "{text}");
        assert!(
            text.contains(&format!("last written by {shown} ({shown} 9)")),
            "{text}"
        );
        let d = Difference {
            netns: 7,
            netns_name: Some(evil.into()),
            backend: Backend::Nft,
            family: Family::Ip,
            table: evil.into(),
            chain: Some(evil.into()),
            change: "changed".into(),
            rules_added: vec![evil.into()],
            rules_removed: vec![],
            reordered: false,
            head: Some((None, Some(evil.into()))),
            by: Some(last),
        };
        let text = diff_text(0, 1, &[d], &[]);
        assert!(!text.contains(['\x1b', '\u{202e}', '\t']), "{text:?}");
        assert_eq!(
            text.lines().count(),
            4,
            "no line of its own from a name: {text}"
        );
        assert!(text.contains(&format!("  + {shown}\n")), "{text}");
    }

    #[test]
    fn bad_ranges_and_times_name_the_fix() {
        let e = parse_range("yesterday").unwrap_err().to_string();
        assert!(e.contains("FROM..TO"), "{e}");
        let e = parse_range("2h..soon").unwrap_err().to_string();
        assert!(e.contains("RFC 3339"), "{e}");
        assert!(parse_range("2h..").is_ok());
    }
}
