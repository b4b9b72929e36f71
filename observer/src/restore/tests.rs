//! The restorer with the correlator, on plain data: a wipe, the incident it raises, the restore
//! that is due, and what becomes of the incident when the restore's own writes come back.

use std::time::Duration;

use super::*;
use crate::attribution::ProcessInfo;
use crate::forensics::model::{Table, Tables};
use crate::incidents::owners::Owners;
use crate::incidents::{Config, Correlator, InventoryChain};
use crate::output::line::Source;
use crate::ruleset::{Backend, Family, Op};

const NS: u32 = 7;

fn at(ms: i64) -> Timestamp {
    Timestamp::from_unix_nanos(1_700_000_000_000_000_000 + ms * 1_000_000)
}

use super::plan::tests::chain;

struct World {
    c: Correlator,
    r: Restorer,
    seq: u64,
    /// KUBE-FIREWALL's one rule.
    rule: &'static str,
}

impl World {
    /// kubelet's KUBE-FIREWALL in filter, jumped to from INPUT, in a legacy namespace.
    fn new(max: u32) -> World {
        World::with_rule(max, DROP)
    }

    /// The same, KUBE-FIREWALL's rule being `rule`.
    fn with_rule(max: u32, rule: &'static str) -> World {
        let mut c = Correlator::new(
            Config {
                flap_cycles: 3,
                flap_window: Duration::from_secs(60),
                mass_window: Duration::from_secs(5),
                repair_within: Duration::from_secs(60),
            },
            Owners::catalog(),
        );
        let inv = |name: &str, rules: usize, jumps: &[&str]| InventoryChain {
            backend: Backend::Legacy,
            family: Family::Ip,
            table: "filter".into(),
            chain: name.into(),
            rules,
            jumps: jumps.iter().map(|j| j.to_string()).collect(),
            is_set: false,
        };
        c.baseline(
            NS,
            None,
            vec![
                inv("INPUT", 1, &["KUBE-FIREWALL"]),
                inv("KUBE-FIREWALL", 1, &[]),
            ],
        );
        let mut cfg = RestoreConfig::new(
            Which::Only(vec!["kubelet".into()]),
            Duration::from_secs(1),
            false,
        );
        cfg.max = max;
        let mut r = Restorer::new(cfg);
        let mut t = Table::new(Family::Ip, "filter");
        t.chains = vec![
            chain("INPUT", Some("ACCEPT"), &["-j KUBE-FIREWALL"]),
            chain("KUBE-FIREWALL", None, &[rule]),
        ];
        r.seed(NS, Backend::Legacy, Tables { tables: vec![t] });
        World { c, r, seq: 0, rule }
    }

    /// One transaction by `actor` (`pid`), at `ms`: each op (op, chain, rule, position).
    fn txn(
        &mut self,
        ms: i64,
        actor: &str,
        restore: Option<&str>,
        ops: &[(Op, &str, &str, Option<usize>)],
    ) -> Vec<IncidentLine> {
        let lines: Vec<ChangeLine> = ops
            .iter()
            .map(|(op, ch, rule, position)| {
                self.seq += 1;
                ChangeLine {
                    seq: self.seq,
                    time: at(ms),
                    netns: NS,
                    netns_name: None,
                    node: None,
                    backend: Backend::Legacy,
                    family: Family::Ip,
                    table: "filter".into(),
                    chain: Some(ch.to_string()),
                    op: *op,
                    rule: (!rule.is_empty()).then(|| rule.to_string()),
                    forms: Default::default(),
                    position: *position,
                    detail: None,
                    txn: format!("t{ms}"),
                    result: "ok".into(),
                    source: Source::Tracepoint,
                    process: ProcessInfo::named(100, "iptables-restor", Some((99, actor)), actor)
                        .into(),
                    replayed: false,
                    recovered: false,
                    restore: restore.map(str::to_string),
                }
            })
            .collect();
        let incidents = match restore {
            Some(_) => self.c.observe_restore(&lines, "kubelet"),
            None => self.c.observe(&lines),
        };
        let c = &self.c;
        self.r.txn(&lines, &|p, o| c.writes_as(p, o));
        for i in &incidents {
            self.r.incident(i);
        }
        incidents
    }

    /// `iptables-restore` of a rules file without kubelet's chain (seed 002).
    fn wipe(&mut self, ms: i64) -> Vec<IncidentLine> {
        self.txn(
            ms,
            "netfilter-persistent",
            None,
            &[
                (Op::RuleDelete, "INPUT", "-j KUBE-FIREWALL", Some(0)),
                (Op::ChainDelete, "KUBE-FIREWALL", "", None),
            ],
        )
    }

    /// What observer's write makes: the chain, its rule, the jump.
    fn restored(&mut self, ms: i64, id: &str) -> Vec<IncidentLine> {
        self.makes(ms, "observer", Some(id))
    }

    /// `actor` makes kubelet's chain, its rule and the jump (a restore of incident `restore`).
    fn makes(&mut self, ms: i64, actor: &str, restore: Option<&str>) -> Vec<IncidentLine> {
        self.txn(
            ms,
            actor,
            restore,
            &[
                (Op::ChainCreate, "KUBE-FIREWALL", "", None),
                (Op::RuleAdd, "KUBE-FIREWALL", self.rule, Some(0)),
                (Op::RuleAdd, "INPUT", "-j KUBE-FIREWALL", Some(0)),
            ],
        )
    }
}

const DROP: &str = "-m mark --mark 0x8000/0x8000 -j DROP";

const SCRIPT: &str = "*filter\n:KUBE-FIREWALL - [0:0]\n-A KUBE-FIREWALL -m mark --mark \
                      0x8000/0x8000 -j DROP\n-I INPUT 1 -j KUBE-FIREWALL\nCOMMIT\n";

fn write(steps: Vec<Step>) -> Pending {
    let mut writes: Vec<Pending> = steps
        .into_iter()
        .filter_map(|s| match s {
            Step::Write(p) => Some(p),
            Step::Say(_) => None,
        })
        .collect();
    assert_eq!(writes.len(), 1, "one write");
    writes.remove(0)
}

fn said(steps: Vec<Step>) -> Vec<IncidentLine> {
    steps
        .into_iter()
        .flat_map(|s| match s {
            Step::Say(l) => l,
            Step::Write(_) => panic!("nothing should be written"),
        })
        .collect()
}

#[test]
fn a_wipe_of_kubelets_chain_is_restored_after_the_delay_and_the_restore_resolves_it() {
    let mut w = World::new(3);
    let raised = w.wipe(0);
    assert!(!raised.is_empty(), "the wipe raises an incident");
    assert_eq!(w.r.next_due(), Some(at(1000)));
    assert!(w.r.due(at(999)).is_empty(), "not before --restore-after");
    let p = write(w.r.due(at(1000)));
    assert_eq!(p.scripts.len(), 1);
    assert_eq!(p.scripts[0].tool, Tool::IptablesLegacy(Family::Ip));
    assert_eq!(p.scripts[0].text, SCRIPT);
    let id = p.incident_id().to_string();
    let lines = w.r.written(p, vec![Ok(())], at(1010));
    let note = lines[0]
        .restore
        .as_ref()
        .expect("the line tells of the restore");
    assert_eq!(note.outcome, Outcome::Restored);
    assert_eq!(note.chains, vec!["KUBE-FIREWALL"]);
    assert_eq!(note.jumps, 1);
    assert_eq!(note.after_ms, Some(1010));
    // The restore's own writes: no new incident, and the one it restores is resolved by it.
    let after = w.restored(1020, &id);
    assert!(
        after.iter().all(|i| i.state == IncidentState::Resolved),
        "{after:?}"
    );
    assert!(after.iter().any(|i| i.id == id));
    for i in &after {
        assert!(
            i.owners
                .iter()
                .all(|o| o.repaired_by.as_deref() == Some("observer")),
            "{i:?}"
        );
    }
    assert_eq!(w.r.next_due(), None);
}

#[test]
fn the_owner_removing_what_observer_put_back_is_its_own_change_and_stays_removed() {
    let mut w = World::new(3);
    w.wipe(0);
    let p = write(w.r.due(at(1000)));
    let id = p.incident_id().to_string();
    w.r.written(p, vec![Ok(())], at(1010));
    w.restored(1020, &id);
    // kubelet deletes its chain itself (a CNI plugin's DEL, in the CNI's case).
    let raised = w.txn(
        5000,
        "kubelet",
        None,
        &[
            (Op::RuleDelete, "INPUT", "-j KUBE-FIREWALL", Some(0)),
            (Op::ChainDelete, "KUBE-FIREWALL", "", None),
        ],
    );
    assert!(raised.is_empty(), "{raised:?}");
    assert_eq!(w.r.next_due(), None, "nothing to put back");
    assert!(w.r.due(at(60_000)).is_empty());
    // A foreign wipe of the chains it makes again later is a new incident, restored again.
    w.makes(70_000, "kubelet", None);
    let raised = w.wipe(71_000);
    assert!(!raised.is_empty(), "the wipe raises an incident");
    write(w.r.due(at(72_000)));
}

#[test]
fn a_restorer_for_one_namespace_writes_in_no_other() {
    let mut w = World::new(3);
    w.r.cfg.netns = Some(NS + 1);
    w.wipe(0);
    assert_eq!(w.r.next_due(), None);
    assert!(w.r.due(at(5000)).is_empty());
    let mut w = World::new(3);
    w.r.cfg.netns = Some(NS);
    w.wipe(0);
    write(w.r.due(at(1000)));
}

#[test]
fn an_owner_that_repairs_itself_within_the_delay_gets_no_restore() {
    let mut w = World::new(3);
    w.wipe(0);
    // kubelet puts its chain back itself at 500 ms.
    w.makes(500, "kubelet", None);
    let lines = said(w.r.due(at(1000)));
    assert!(!lines.is_empty());
    for l in &lines {
        let n = l.restore.as_ref().unwrap();
        assert_eq!(n.outcome, Outcome::SkippedOwnerRepaired, "{l:?}");
        assert!(n.script.is_none());
    }
}

#[test]
fn a_chain_made_again_with_other_content_is_left_alone() {
    let mut w = World::new(3);
    w.wipe(0);
    // Someone else makes a chain of that name, with other rules.
    w.txn(
        300,
        "admin-script",
        None,
        &[
            (Op::ChainCreate, "KUBE-FIREWALL", "", None),
            (Op::RuleAdd, "KUBE-FIREWALL", "-j ACCEPT", Some(0)),
        ],
    );
    let lines = said(w.r.due(at(1000)));
    let refused: Vec<_> = lines
        .iter()
        .filter_map(|l| l.restore.as_ref())
        .filter(|n| n.outcome == Outcome::RefusedConflict)
        .collect();
    assert!(!refused.is_empty(), "{lines:?}");
    assert!(refused[0]
        .reason
        .as_deref()
        .unwrap()
        .contains("KUBE-FIREWALL now holds 1 rule"));
}

#[test]
fn a_wiper_that_keeps_wiping_gets_the_bound_of_restores_then_observer_stops() {
    let mut w = World::new(3);
    let mut restores = 0;
    let mut gave_up = Vec::new();
    for round in 0..6 {
        let t = round * 2000;
        w.wipe(t);
        for step in w.r.due(at(t + 1000)) {
            match step {
                Step::Write(p) => {
                    let id = p.incident_id().to_string();
                    let lines = w.r.written(p, vec![Ok(())], at(t + 1000));
                    // Counted from this round's wipe, not from the first.
                    assert!(
                        lines
                            .iter()
                            .all(|l| l.restore.as_ref().is_some_and(|n| n.after_ms == Some(1000))),
                        "round {round}: {lines:?}"
                    );
                    w.restored(t + 1010, &id);
                    restores += 1;
                }
                Step::Say(l) => gave_up.extend(l),
            }
        }
    }
    assert_eq!(restores, 3, "at most 3 restores within the window");
    let n = gave_up
        .iter()
        .find(|l| {
            l.restore
                .as_ref()
                .is_some_and(|n| n.outcome == Outcome::GaveUp)
        })
        .expect("observer says it stopped");
    assert!(
        n.summary
            .contains("observer stopped restoring: netfilter-persistent keeps removing"),
        "{}",
        n.summary
    );
    assert_eq!(
        n.kind,
        IncidentKind::Flapping,
        "told on the loop's incident"
    );
    let stops = gave_up
        .iter()
        .filter(|l| {
            l.restore
                .as_ref()
                .is_some_and(|n| n.outcome == Outcome::GaveUp)
        })
        .count();
    assert_eq!(stops, 1, "said once");
}

#[test]
fn a_failed_write_is_counted_failed_with_the_tools_words() {
    let mut w = World::new(3);
    w.wipe(0);
    let p = write(w.r.due(at(1000)));
    let lines = w.r.written(
        p,
        vec![Err(
            "iptables-legacy-restore refused it: line 2 failed".into()
        )],
        at(1000),
    );
    let n = lines[0].restore.as_ref().unwrap();
    assert_eq!(n.outcome, Outcome::Failed);
    assert!(n.reason.as_deref().unwrap().contains("line 2 failed"));
    assert!(lines[0].summary.contains("could not restore kubelet's"));
}

#[test]
fn owners_not_on_the_list_are_never_restored() {
    let mut w = World::new(3);
    w.r.cfg.owners = Which::Only(vec!["cni-plugins".into()]);
    w.wipe(0);
    assert_eq!(w.r.next_due(), None);
}

#[test]
fn the_owner_list_reads_all_and_lists() {
    assert_eq!(Which::parse("all").unwrap(), Which::All);
    assert_eq!(
        Which::parse("kubelet, cni-plugins").unwrap(),
        Which::Only(vec!["kubelet".into(), "cni-plugins".into()])
    );
    assert!(Which::parse(" , ").is_err());
    let known = vec!["kubelet".to_string()];
    assert_eq!(
        Which::parse("kubelet,kubeletx").unwrap().unknown(&known),
        vec!["kubeletx"]
    );
}

/// A wipe that destroyed the ipset KUBE-FIREWALL's rule names as well (`netfilter-persistent
/// flush` with ipset-persistent): the set is created again first, with its members, through
/// `ipset restore`, with an undo for a refused rule write; the note names it. A set that is
/// still there, or that observer never saw, is not written.
#[test]
fn a_destroyed_ipset_the_rules_name_is_created_again_before_them() {
    const RULE: &str = "-m set --match-set kf-allow src -j ACCEPT";
    let mut w = World::with_rule(3, RULE);
    let save = "create kf-allow hash:ip family inet hashsize 1024 maxelem 65536\n\
                add kf-allow 10.0.0.1\nadd kf-allow 10.0.0.2\n\
                create unrelated hash:ip family inet hashsize 1024 maxelem 65536\n";
    w.r.ipsets_saved(NS, save, at(-100)).unwrap();
    w.wipe(0);
    // The set is still there: only the chain is written.
    let p = write(w.r.due(at(1000)));
    assert_eq!(p.scripts.len(), 1, "{:?}", p.scripts);
    // Again, with the set destroyed after the wipe.
    let mut w = World::with_rule(3, RULE);
    w.r.ipsets_saved(NS, save, at(-100)).unwrap();
    w.wipe(0);
    w.r.ipsets_saved(NS, "", at(10)).unwrap();
    let p = write(w.r.due(at(1000)));
    assert_eq!(p.scripts.len(), 2, "{:?}", p.scripts);
    let sets = &p.scripts[0];
    assert_eq!(sets.tool, Tool::Ipset);
    assert_eq!(
        sets.text,
        "create kf-allow hash:ip family inet hashsize 1024 maxelem 65536\n\
         add kf-allow 10.0.0.1\nadd kf-allow 10.0.0.2\n"
    );
    assert_eq!(sets.undo.as_deref(), Some("destroy kf-allow\n"));
    assert_eq!(p.scripts[1].tool, Tool::IptablesLegacy(Family::Ip));
    assert!(p.scripts[1].text.contains(RULE), "{}", p.scripts[1].text);
    let lines = w.r.written(p, vec![Ok(()), Ok(())], at(1010));
    let note = lines[0].restore.as_ref().expect("a restore note");
    assert_eq!(note.outcome, Outcome::Restored);
    assert_eq!(note.sets, ["kf-allow"]);
    assert_eq!(
        note.command.as_deref(),
        Some("ipset restore; iptables-legacy-restore --noflush")
    );
    assert!(
        lines[0].summary.contains("1 ipset (kf-allow)"),
        "{}",
        lines[0].summary
    );
}

#[test]
fn a_table_held_at_chain_level_is_never_written_and_the_incident_says_why() {
    let mut w = World::new(3);
    w.r.held_at_chain_level(NS, Family::Ip, "filter", true);
    assert!(!w.wipe(0).is_empty(), "the wipe raises an incident");
    let lines = said(w.r.due(at(1000)));
    let note = lines[0].restore.as_ref().expect("the line tells of it");
    assert_eq!(note.outcome, Outcome::RefusedConflict);
    let reason = note.reason.as_deref().unwrap_or_default();
    assert!(reason.contains("held at chain level"), "{reason}");
    // Held at rule level again: the next wipe is restored as usual.
    let mut w = World::new(3);
    w.r.held_at_chain_level(NS, Family::Ip, "filter", true);
    w.r.held_at_chain_level(NS, Family::Ip, "filter", false);
    w.wipe(0);
    assert_eq!(write(w.r.due(at(1000))).scripts[0].text, SCRIPT);
}
