//! `observer query --incident ID --restore-script`: the script that puts back what an incident
//! in the record took, for a person to read and apply. Built by the same [`plan`] as a live
//! restore, from the incident's story: each chain before the incident (what was lost, and the
//! jumps into it), against the chains at its end (now, while it is open).

use crate::forensics::model::Chain;
use crate::forensics::story::{ChainStory, Story};
use crate::ruleset::{Backend, Family};

use super::plan::{self, jump_target, Decision, Jump, Lost, Now};

/// The chains at the incident's end.
struct End<'s>(&'s [ChainStory]);

impl Now for End<'_> {
    fn chain(&self, family: Family, table: &str, name: &str) -> Option<&Chain> {
        self.0
            .iter()
            .find(|c| c.family == family && c.table == table && c.chain == name)?
            .end
            .as_ref()
    }
    fn has_set(&self, _: Family, _: &str, _: &str) -> bool {
        false
    }
}

/// What the incident took from each owner, per table.
fn lost_of(story: &Story) -> Vec<(String, Lost)> {
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
) -> Result<Vec<ChainStory>, crate::forensics::ForensicsError> {
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
        return Ok(chains);
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
    Ok(chains)
}

/// The script, with a comment before each part saying what it puts back, in which namespace
/// and with which command; or why there is nothing to put back. `chains`: the chains it is
/// made from ([`chains_from_record`]; the story's own, without a record).
pub fn restore_script(story: &Story, chains: Vec<ChainStory>) -> String {
    let story = &Story {
        chains,
        ..story.clone()
    };
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
    let lost = lost_of(story);
    if lost.is_empty() {
        out.push_str("# The record holds none of the chains it took: nothing to restore.\n");
    }
    for (owner, l) in &lost {
        let what = format!(
            "{owner}'s chains in {} {} ({})",
            l.family, l.table, l.backend
        );
        match plan::plan(l, &End(&story.chains)) {
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
pub fn shown_script(story: &Story, chains: Vec<ChainStory>) -> String {
    let text = restore_script(story, chains);
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
        let text = restore_script(&s, s.chains.clone());
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
        let text = shown_script(&s, s.chains.clone());
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
            restore_script(&s, s.chains.clone()).contains("back as they were, nothing to restore")
        );
    }
}
