//! The core on plain data: transactions in, lines out, no kernel.

use std::time::Duration;

use super::*;
use crate::incidents::owners::Owners;
use crate::incidents::Config;
use crate::output::line::{IncidentKind, IncidentState};
use crate::ruleset::{Family, Op};

const NETNS: u32 = 4026532177;
const T0: i64 = 1_780_000_000_000_000_000;

fn at(s: u64) -> Timestamp {
    Timestamp::from_unix_nanos(T0).saturating_add(Duration::from_secs(s))
}

fn core(last_seq: u64) -> Core {
    let cfg = Config {
        repair_within: Duration::from_secs(30),
        ..Config::default()
    };
    let mut core = Core::new(last_seq, Correlator::new(cfg, Owners::catalog()));
    let chain = |name: &str, rules: usize| InventoryChain {
        backend: Backend::Legacy,
        family: Family::Ip,
        table: "nat".into(),
        chain: name.into(),
        rules,
        jumps: Vec::new(),
        is_set: false,
    };
    core.baseline(
        NETNS,
        Some("blue".into()),
        vec![chain("KUBE-SERVICES", 3), chain("KUBE-POSTROUTING", 1)],
    );
    core
}

/// A legacy transaction by `actor`, `s` seconds in.
fn ctx(s: u64, txn: &str, actor: &str) -> ChangeCtx {
    ChangeCtx {
        inode: NETNS,
        name: Some("blue".into()),
        backend: Backend::Legacy,
        time: at(s),
        txn: txn.into(),
        source: Source::Tracepoint,
        process: ProcessInfo::named(4242, "iptables", Some((4200, actor)), actor),
        replayed: false,
        recovered: false,
    }
}

fn change(op: Op, chain: &str, rule: Option<&str>) -> Change {
    Change {
        chain: Some(chain.into()),
        rule: rule.map(str::to_string),
        forms: Default::default(),
        ..Change::new(op, Family::Ip, "nat")
    }
}

#[test]
fn changes_are_numbered_after_the_last_recorded_one_and_carry_their_transaction() {
    let mut core = core(41);
    let a = core.applied(
        &ctx(1, "xt-a", "kube-proxy"),
        vec![
            change(Op::RuleAdd, "KUBE-SERVICES", Some("-j KUBE-SVC-A")),
            change(Op::RuleAdd, "KUBE-SERVICES", Some("-j KUBE-SVC-B")),
        ],
    );
    let b = core.applied(
        &ctx(2, "xt-b", "kube-proxy"),
        vec![change(
            Op::RuleDelete,
            "KUBE-SERVICES",
            Some("-j KUBE-SVC-A"),
        )],
    );
    let seqs: Vec<u64> = a.changes.iter().chain(&b.changes).map(|c| c.seq).collect();
    assert_eq!(seqs, [42, 43, 44]);
    assert_eq!(core.seq(), 44);
    for c in &a.changes {
        assert_eq!((c.txn.as_str(), c.time, c.netns), ("xt-a", at(1), NETNS));
        assert_eq!(c.netns_name.as_deref(), Some("blue"));
        assert_eq!(c.process.actor, "kube-proxy");
        assert_eq!(c.result, "ok");
    }
    assert_eq!(b.changes[0].op, Op::RuleDelete);
    assert!(
        a.incidents.is_empty() && b.incidents.is_empty(),
        "an owner's own churn"
    );
}

#[test]
fn a_one_rule_flush_without_evidence_is_settled_as_a_delete_that_says_why() {
    let mut core = core(0);
    let lines = core.applied(
        &ctx(1, "nft-1", "kube-proxy"),
        vec![change(
            Op::ChainFlush,
            "KUBE-POSTROUTING",
            Some("-j MASQUERADE"),
        )],
    );
    let c = &lines.changes[0];
    assert_eq!(c.op, Op::RuleDelete);
    assert!(
        c.detail
            .as_deref()
            .is_some_and(|d| d.contains("request was not seen")),
        "{:?}",
        c.detail
    );
    // With results given, nothing is settled: the source knew.
    let lines = core.transaction(
        &ctx(2, "nft-2", "kube-proxy"),
        vec![(
            change(Op::ChainFlush, "KUBE-SERVICES", Some("-j KUBE-SVC-A")),
            "ok".into(),
        )],
    );
    assert_eq!(lines.changes[0].op, Op::ChainFlush);
}

#[test]
fn a_foreign_delete_raises_an_incident_after_its_changes_and_expires_on_the_tick() {
    let mut core = core(0);
    let lines = core.applied(
        &ctx(5, "xt-9", "firewalld"),
        vec![
            change(Op::RuleDelete, "KUBE-POSTROUTING", Some("-j MASQUERADE")),
            change(Op::ChainDelete, "KUBE-SERVICES", None),
        ],
    );
    assert_eq!(lines.changes.len(), 2);
    let [open] = lines.incidents.as_slice() else {
        panic!("one incident: {:?}", lines.incidents);
    };
    assert_eq!(open.kind, IncidentKind::ForeignDelete);
    assert_eq!(open.state, IncidentState::Open);
    assert_eq!((open.time, open.since), (at(5), at(5)));
    assert_eq!(open.events, [2], "the line it is made of");
    assert_eq!(open.owner, "kube-proxy");

    // Nothing closes before its window; the deadline says when to look again: first when one
    // writer's wipe of several owners could still grow into a mass flush (5 s), then the
    // owner's repair window (30 s).
    assert_eq!(core.next_deadline(), Some(at(10)));
    assert!(core.tick(at(11)).is_empty());
    assert_eq!(core.next_deadline(), Some(at(35)));
    assert!(core.tick(at(20)).is_empty());
    let closed = core.tick(at(36));
    let [expired] = closed.as_slice() else {
        panic!("the incident expires: {closed:?}");
    };
    assert_eq!(
        (expired.id.as_str(), expired.state),
        (open.id.as_str(), IncidentState::Expired)
    );
    assert_eq!(expired.time, at(36));
}

#[test]
fn a_refused_write_is_numbered_but_changes_nothing() {
    let mut core = core(0);
    let lines = core.transaction(
        &ctx(1, "xt-1", "firewalld"),
        vec![(
            change(Op::ChainDelete, "KUBE-SERVICES", None),
            "EBUSY: Device or resource busy".into(),
        )],
    );
    assert_eq!(lines.changes[0].seq, 1);
    assert_eq!(lines.changes[0].result, "EBUSY: Device or resource busy");
    assert!(lines.incidents.is_empty(), "{:?}", lines.incidents);
    // The chain is still there: deleting it now is the foreign delete.
    let lines = core.applied(
        &ctx(2, "xt-2", "firewalld"),
        vec![change(Op::ChainDelete, "KUBE-SERVICES", None)],
    );
    assert_eq!(lines.incidents.len(), 1, "{:?}", lines.incidents);
}

#[test]
fn a_forgotten_namespace_keeps_nothing_open() {
    let mut core = core(0);
    core.applied(
        &ctx(1, "xt-1", "firewalld"),
        vec![change(Op::ChainDelete, "KUBE-SERVICES", None)],
    );
    assert!(core.next_deadline().is_some());
    core.forget_netns(NETNS);
    assert_eq!(core.next_deadline(), None);
    assert!(core.tick(at(3600)).is_empty());
}

#[test]
fn the_loop_wakes_a_millisecond_after_the_next_window_ends_or_in_an_hour() {
    assert_eq!(wake_in(None, at(5)), Duration::from_secs(3600));
    assert_eq!(
        wake_in(Some(at(35)), at(5)),
        Duration::from_secs(30) + Duration::from_millis(1)
    );
    // A window that ended already: at once (after the millisecond).
    assert_eq!(wake_in(Some(at(5)), at(9)), Duration::from_millis(1));
    // Far ahead: no more than u32::MAX microseconds.
    assert_eq!(
        wake_in(Some(at(100_000)), at(0)),
        Duration::from_micros(u64::from(u32::MAX)) + Duration::from_millis(1)
    );
}
/// A load of 3,000 kube-proxy chains with two rules each, handled as the engine handles it
/// (cut into pieces of `piece`), then firewalld deleting the first; the lines of both.
fn load_then_foreign_delete(piece: usize) -> (Vec<ChangeLine>, Vec<IncidentLine>) {
    let mut core = core(0);
    let mut load = Vec::new();
    for i in 0..3000 {
        let chain = format!("KUBE-SEP-{i}");
        load.push(change(Op::ChainCreate, &chain, None));
        load.push(change(Op::RuleAdd, &chain, Some("-j KUBE-MARK-MASQ")));
        load.push(change(Op::RuleAdd, &chain, Some("-p tcp -j ACCEPT")));
    }
    let (mut lines, mut incidents) = (Vec::new(), Vec::new());
    let load_ctx = ctx(1, "xt-load", "kube-proxy");
    for p in pieces::pieces(Core::settled(load), piece) {
        let t = core.transaction(&load_ctx, p);
        lines.extend(t.changes);
        incidents.extend(t.incidents);
    }
    let wipe = core.applied(
        &ctx(2, "xt-wipe", "firewalld"),
        vec![change(Op::ChainDelete, "KUBE-SEP-0", None)],
    );
    lines.extend(wipe.changes);
    incidents.extend(wipe.incidents);
    (lines, incidents)
}

#[test]
fn a_load_handled_in_pieces_is_numbered_and_owned_as_it_would_be_whole() {
    let (whole, whole_incidents) = load_then_foreign_delete(usize::MAX);
    let (cut, cut_incidents) = load_then_foreign_delete(1000);
    assert_eq!(cut.len(), 9001);
    let seqs: Vec<u64> = cut.iter().map(|c| c.seq).collect();
    assert_eq!(
        seqs,
        (1..=9001).collect::<Vec<u64>>(),
        "numbered in order, none lost"
    );
    let key = |c: &ChangeLine| (c.seq, c.op, c.chain.clone(), c.rule.clone(), c.txn.clone());
    assert_eq!(
        cut.iter().map(key).collect::<Vec<_>>(),
        whole.iter().map(key).collect::<Vec<_>>()
    );
    // The chains the load's pieces created are kube-proxy's: firewalld's delete is an incident,
    // the same one as when the load was handled whole.
    let shape = |i: &IncidentLine| (i.kind, i.owner.clone(), i.chains.clone(), i.events.clone());
    assert_eq!(cut_incidents.len(), 1, "{cut_incidents:#?}");
    assert_eq!(cut_incidents[0].kind, IncidentKind::ForeignDelete);
    assert_eq!(cut_incidents[0].owner, "kube-proxy");
    assert_eq!(
        cut_incidents.iter().map(shape).collect::<Vec<_>>(),
        whole_incidents.iter().map(shape).collect::<Vec<_>>()
    );
}
