//! `observer query --incident ID --restore-script`: the script that puts back what an incident
//! in the record took, for a person to read and apply. Built by the same [`plan`] as a live
//! restore, from the incident's story: each chain before the incident (what was lost, and the
//! jumps into it), against the chains at its end (now, while it is open).

use crate::forensics::model::{Chain, Set};
use crate::forensics::story::{ChainStory, Story};
use crate::ruleset::{Backend, Family};

use super::plan::{self, jump_target, set_refs, Decision, Jump, Lost, Now};

/// What a restore script is made from: the chains ([`ChainStory`]: before the wipe and at the
/// incident's end), and the named sets of their nftables tables.
#[derive(Debug, Clone, Default)]
pub struct FromRecord {
    pub chains: Vec<ChainStory>,
    pub sets: Vec<SetStory>,
}

/// A named set (or map) of an nftables table, before the wipe, and whether it is there at the
/// incident's end.
#[derive(Debug, Clone)]
pub struct SetStory {
    pub backend: Backend,
    pub family: Family,
    pub table: String,
    pub before: Set,
    pub there_at_end: bool,
}

/// The chains and sets at the incident's end.
struct End<'s>(&'s FromRecord);

impl Now for End<'_> {
    fn chain(&self, family: Family, table: &str, name: &str) -> Option<&Chain> {
        self.0
            .chains
            .iter()
            .find(|c| c.family == family && c.table == table && c.chain == name)?
            .end
            .as_ref()
    }
    fn has_set(&self, family: Family, table: &str, name: &str) -> bool {
        self.0.sets.iter().any(|s| {
            s.there_at_end && s.family == family && s.table == table && s.before.name == name
        })
    }
}

/// What the incident took from each owner, per table; in nftables tables, with the named sets
/// its rules use as they were before the wipe.
fn lost_of(story: &Story, sets: &[SetStory]) -> Vec<(String, Lost)> {
    let mut out: Vec<(String, Lost)> = Vec::new();
    for (owner, names) in super::owners_hit(&story.incident) {
        for c in &story.chains {
            let Some(before) = &c.before else { continue };
            let at = match out.iter().position(|(o, l)| {
                *o == owner && l.backend == c.backend && l.family == c.family && l.table == c.table
            }) {
                Some(i) => i,
                None => {
                    out.push((owner.to_string(), empty(c.backend, c.family, &c.table)));
                    out.len() - 1
                }
            };
            let lost = &mut out[at].1;
            if names.contains(&c.chain.as_str()) {
                lost.chains.push(before.clone());
                continue;
            }
            for (position, rule) in before.rules.iter().enumerate() {
                if jump_target(rule).is_some_and(|t| names.contains(&t)) {
                    lost.jumps.push(Jump {
                        chain: c.chain.clone(),
                        position,
                        rule: rule.clone(),
                    });
                }
            }
        }
    }
    out.retain(|(_, l)| !l.chains.is_empty() || !l.jumps.is_empty());
    for (_, l) in &mut out {
        let rules = l
            .chains
            .iter()
            .flat_map(|c| c.rules.iter())
            .chain(l.jumps.iter().map(|j| &j.rule));
        let mut names: Vec<&str> = rules.flat_map(|r| set_refs(r)).collect();
        names.sort_unstable();
        names.dedup();
        l.sets = sets
            .iter()
            .filter(|s| {
                s.backend == l.backend
                    && s.family == l.family
                    && s.table == l.table
                    && names.contains(&s.before.name.as_str())
            })
            .map(|s| s.before.clone())
            .collect();
    }
    out
}

fn empty(backend: Backend, family: Family, table: &str) -> Lost {
    Lost {
        backend,
        family,
        table: table.to_string(),
        chains: Vec::new(),
        jumps: Vec::new(),
        sets: Vec::new(),
    }
}

/// How far back a wipe's other incidents are looked for (a flush, then a delete, of one reload
/// are two incidents a moment apart).
const RELATED_WITHIN_NS: i64 = 60_000_000_000;

/// The stories of the incidents one wipe raised with `story`'s: same namespace, a chain in
/// common, raised within a minute before it. A chain flushed, then deleted, is taken as the
/// first of them found it.
fn related(
    conn: &rusqlite::Connection,
    story: &Story,
) -> Result<Vec<Story>, crate::forensics::ForensicsError> {
    let i = &story.incident;
    let sel = crate::store::Selection {
        netns: Some(i.netns),
        since_ns: Some(i.since.unix_nanos() - RELATED_WITHIN_NS),
        until_ns: Some(i.time.unix_nanos()),
        ..Default::default()
    };
    let rows = crate::store::select_incidents(conn, &sel)?;
    let mut ids: Vec<String> = Vec::new();
    for r in rows {
        let Ok(other) = serde_json::from_str::<crate::output::IncidentLine>(&r.json) else {
            continue;
        };
        if other.id != i.id
            && super::restorable(other.kind)
            && other.chains.iter().any(|c| i.chains.contains(c))
            && !ids.contains(&other.id)
        {
            ids.push(other.id);
        }
    }
    ids.iter()
        .map(|id| crate::forensics::story::story(conn, id))
        .collect()
}

/// The chains of `story`, each as it was before the first of `related` (or `story`) that took
/// it, and as it is at `story`'s end.
fn merged(story: &Story, related: &[Story]) -> Vec<ChainStory> {
    let first_seq = |s: &Story| s.changes.first().map_or(u64::MAX, |c| c.seq);
    let mut all: Vec<&Story> = related.iter().chain(std::iter::once(story)).collect();
    all.sort_by_key(|s| first_seq(s));
    let mut out: Vec<ChainStory> = Vec::new();
    for s in all {
        for c in &s.chains {
            let same = |k: &ChainStory| {
                k.backend == c.backend
                    && k.family == c.family
                    && k.table == c.table
                    && k.chain == c.chain
            };
            match out.iter_mut().find(|k| same(k)) {
                Some(k) => {
                    if k.before.is_none() {
                        k.before.clone_from(&c.before);
                    }
                }
                None => out.push(c.clone()),
            }
        }
    }
    // Now: as at the asked incident's end, where it names the chain.
    for k in &mut out {
        if let Some(c) = story.chains.iter().find(|c| {
            c.backend == k.backend
                && c.family == k.family
                && c.table == k.table
                && c.chain == k.chain
        }) {
            k.end.clone_from(&c.end);
        }
    }
    out
}

/// The chains a restore script is made from: those of `story` and the incidents of the same
/// wipe ([`merged`]), and every other chain of their tables whose rules jumped into them before
/// the wipe (a table flush names no chain), each before the wipe and at `story`'s end.
pub fn chains_from_record(
    conn: &rusqlite::Connection,
    story: &Story,
) -> Result<FromRecord, crate::forensics::ForensicsError> {
    use crate::forensics::snapshots;
    let related = related(conn, story)?;
    let mut chains = merged(story, &related);
    let i = &story.incident;
    let Some(first) = related
        .iter()
        .chain(std::iter::once(story))
        .filter_map(|s| s.changes.first())
        .min_by_key(|c| c.seq)
    else {
        return Ok(FromRecord {
            chains,
            sets: Vec::new(),
        });
    };
    let before = snapshots::states(
        conn,
        first.seq.saturating_sub(1),
        first.time.unix_nanos(),
        Some(i.netns),
    )?;
    let end_ns = if i.state.is_final() {
        i.time.unix_nanos()
    } else {
        crate::timestamp::Timestamp::now().unix_nanos()
    };
    let end = snapshots::states(
        conn,
        snapshots::seq_at(conn, end_ns)?,
        end_ns,
        Some(i.netns),
    )?;
    let lost: Vec<String> = chains.iter().map(|c| c.chain.clone()).collect();
    for st in before.iter().filter(|st| st.backend == i.backend) {
        for t in &st.tables.tables {
            for c in &t.chains {
                let jumps = c
                    .rules
                    .iter()
                    .any(|r| jump_target(r).is_some_and(|j| lost.iter().any(|l| l == j)));
                let known = chains
                    .iter()
                    .any(|k| k.family == t.family && k.table == t.name && k.chain == c.name);
                if !jumps || known {
                    continue;
                }
                let now = end
                    .iter()
                    .filter(|e| e.backend == st.backend)
                    .flat_map(|e| &e.tables.tables)
                    .find(|e| e.family == t.family && e.name == t.name)
                    .and_then(|e| e.chains.iter().find(|x| x.name == c.name))
                    .cloned();
                chains.push(ChainStory {
                    netns: i.netns,
                    backend: st.backend,
                    family: t.family,
                    table: t.name.clone(),
                    chain: c.name.clone(),
                    before: Some(c.clone()),
                    after: None,
                    end: now,
                });
            }
        }
    }
    // The named sets of the nftables tables the chains are in.
    let mut sets = Vec::new();
    for st in before.iter().filter(|st| st.backend == i.backend) {
        for t in &st.tables.tables {
            if !chains
                .iter()
                .any(|k| k.family == t.family && k.table == t.name)
            {
                continue;
            }
            for set in &t.sets {
                let there_at_end = end
                    .iter()
                    .filter(|e| e.backend == st.backend)
                    .flat_map(|e| &e.tables.tables)
                    .filter(|e| e.family == t.family && e.name == t.name)
                    .any(|e| e.sets.iter().any(|x| x.name == set.name));
                sets.push(SetStory {
                    backend: st.backend,
                    family: t.family,
                    table: t.name.clone(),
                    before: set.clone(),
                    there_at_end,
                });
            }
        }
    }
    Ok(FromRecord { chains, sets })
}

/// The script, with a comment before each part saying what it puts back, in which namespace
/// and with which command; or why there is nothing to put back. `chains`: the chains it is
/// made from ([`chains_from_record`]; the story's own, without a record).
pub fn restore_script(story: &Story, from: FromRecord) -> String {
    let i = &story.incident;
    let ns = match &i.netns_name {
        Some(n) => format!("ip netns exec {n} "),
        None => format!(
            "nsenter --net=/proc/<a pid in namespace {}>/ns/net ",
            i.netns
        ),
    };
    let mut out = format!(
        "# What incident {} took, as the record holds it, against the ruleset at its end.\n",
        i.id
    );
    let story = &Story {
        chains: from.chains.clone(),
        ..story.clone()
    };
    let lost = lost_of(story, &from.sets);
    if lost.is_empty() {
        out.push_str("# The record holds none of the chains it took: nothing to restore.\n");
    }
    for (owner, l) in &lost {
        let what = format!(
            "{owner}'s chains in {} {} ({})",
            l.family, l.table, l.backend
        );
        match plan::plan(l, &End(&from)) {
            Decision::Write(s) => {
                out.push_str(&format!(
                    "# {what}: apply with `{ns}{}` and this on stdin:\n{}",
                    s.tool.command(),
                    s.text
                ));
            }
            Decision::Repaired => out.push_str(&format!(
                "# {what}: back as they were, nothing to restore.\n"
            )),
            Decision::Conflict(why) | Decision::Unsupported(why) => {
                out.push_str(&format!("# {what}: not restored: {why}\n"))
            }
        }
    }
    out
}

/// [`restore_script`] for a terminal: every line escaped as all untrusted text is (a hostile
/// pod's comment must not drive the terminal), with a warning when that changed a line, since
/// such a line no longer matches what the kernel held.
pub fn shown_script(story: &Story, from: FromRecord) -> String {
    let text = restore_script(story, from);
    let mut changed = false;
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let shown = crate::shown::escape(line);
        changed |= shown != line;
        out.push_str(&shown);
        out.push('\n');
    }
    if changed {
        out.insert_str(
            0,
            "# WARNING: some names or comments hold control characters, shown escaped: the \
             lines with them will not match what the kernel held.\n",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::IncidentLine;

    fn chain(name: &str, rules: &[&str]) -> Chain {
        crate::restore::plan::tests::chain(name, None, rules)
    }

    fn story_of(chains: Vec<ChainStory>) -> Story {
        let line = r#"{"kind":"incident","id":"foreign_delete-7-2","time":"2026-11-21T05:42:37.000000000Z","since":"2026-11-21T05:42:37.000000000Z","state":"expired","type":"foreign_delete","severity":"warning","netns":7,"netns_name":"node","backend":"legacy","family":"ip","table":"filter","chains":["KUBE-FIREWALL"],"owner":"kubelet","actors":["iptables.service"],"events":[2],"summary":"s"}"#;
        let incident: IncidentLine = serde_json::from_str(line).unwrap();
        Story {
            kind: "incident_story",
            id: incident.id.clone(),
            incident,
            states: Vec::new(),
            changes: Vec::new(),
            missing: Vec::new(),
            repairs: Vec::new(),
            chains,
        }
    }

    /// What a story without a record is made from: its own chains, no sets.
    fn from_story(s: &Story) -> FromRecord {
        FromRecord {
            chains: s.chains.clone(),
            sets: Vec::new(),
        }
    }

    fn cs(name: &str, before: Option<Chain>, end: Option<Chain>) -> ChainStory {
        ChainStory {
            netns: 7,
            backend: Backend::Legacy,
            family: Family::Ip,
            table: "filter".into(),
            chain: name.into(),
            before,
            after: None,
            end,
        }
    }

    #[test]
    fn the_script_puts_back_the_chain_and_its_jump_and_says_how_to_apply_it() {
        let s = story_of(vec![
            cs(
                "INPUT",
                Some(chain("INPUT", &["-j KUBE-FIREWALL"])),
                Some(chain("INPUT", &[])),
            ),
            cs(
                "KUBE-FIREWALL",
                Some(chain("KUBE-FIREWALL", &["-j DROP"])),
                None,
            ),
        ]);
        let text = restore_script(&s, from_story(&s));
        assert!(
            text.contains(
                "# kubelet's chains in ip filter (legacy): apply with `ip netns exec node \
                 iptables-legacy-restore --noflush` and this on stdin:\n*filter\n\
                 :KUBE-FIREWALL - [0:0]\n-A KUBE-FIREWALL -j DROP\n-I INPUT 1 -j KUBE-FIREWALL\nCOMMIT\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn control_characters_are_escaped_and_said_to_be() {
        let s = story_of(vec![cs(
            "KUBE-FIREWALL",
            Some(chain(
                "KUBE-FIREWALL",
                &["-m comment --comment \"\u{1b}[2J\" -j DROP"],
            )),
            None,
        )]);
        let text = shown_script(&s, from_story(&s));
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.contains("\\x1b[2J"), "{text}");
        assert!(
            text.starts_with("# WARNING: some names or comments hold control"),
            "{text}"
        );
    }

    #[test]
    fn chains_that_are_back_need_nothing() {
        let fw = chain("KUBE-FIREWALL", &["-j DROP"]);
        let s = story_of(vec![cs("KUBE-FIREWALL", Some(fw.clone()), Some(fw))]);
        assert!(
            restore_script(&s, from_story(&s)).contains("back as they were, nothing to restore")
        );
    }

    /// An nftables table's chain and the named set its rule uses, both gone: the script
    /// declares the set again with its elements; a set still there at the end is not declared,
    /// and one the rules do not use is left out.
    #[test]
    fn an_nft_script_declares_the_sets_its_rules_use_that_are_gone() {
        let nft = |name: &str, before: Option<Chain>| ChainStory {
            backend: Backend::Nft,
            family: Family::Inet,
            table: "podman".into(),
            ..cs(name, before, None)
        };
        let mut s = story_of(vec![nft(
            "input",
            Some(crate::restore::plan::tests::chain(
                "input",
                Some("type filter hook input priority filter; policy accept"),
                &["ip saddr @blocked drop", "ip daddr @kept accept"],
            )),
        )]);
        s.incident.owner = "podman".into();
        s.incident.chains = vec!["input".into()];
        s.incident.backend = Backend::Nft;
        s.incident.family = Family::Inet;
        s.incident.table = "podman".into();
        let set = |name: &str, there_at_end: bool| SetStory {
            backend: Backend::Nft,
            family: Family::Inet,
            table: "podman".into(),
            before: Set {
                name: name.into(),
                decl: "type ipv4_addr".into(),
                elements: vec!["10.0.0.1".into()],
                incomplete: false,
                last: None,
            },
            there_at_end,
        };
        let from = FromRecord {
            chains: s.chains.clone(),
            sets: vec![
                set("blocked", false),
                set("kept", true),
                set("unused", false),
            ],
        };
        let text = restore_script(&s, from);
        assert!(
            text.contains(
                "table inet podman {\n\tset blocked {\n\t\ttype ipv4_addr\n\t\telements = { 10.0.0.1 }\n\t}\n"
            ),
            "{text}"
        );
        assert!(!text.contains("set kept"), "{text}");
        assert!(!text.contains("set unused"), "{text}");
        assert!(text.contains("nft -f -"), "{text}");
    }
}
