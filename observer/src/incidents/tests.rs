//! The incident engine on event streams: small streams built here for each edge case, and
//! streams recorded from real runs (`fixtures/*.jsonl`, the `--json` output of `observer tail`).

use super::*;
use crate::output::line::Source;

const S: i64 = 1_000_000_000;
const T0: i64 = 1_780_000_000 * S;

/// `t` seconds into a test's stream.
fn at(t: i64) -> Timestamp {
    Timestamp::from_unix_nanos(T0 + t * S)
}

/// Builds one namespace's change stream, transaction by transaction.
struct Stream {
    c: Correlator,
    seq: u64,
    netns: u32,
    backend: Backend,
    table: String,
    /// Every incident line produced so far.
    out: Vec<IncidentLine>,
    /// Who asked the writer (a D-Bus firewall manager) for the next transactions.
    requested_by: Option<Box<crate::attribution::Requester>>,
}

fn cfg() -> Config {
    Config {
        flap_cycles: 3,
        flap_window: Duration::from_secs(60),
        mass_window: Duration::from_secs(5),
        repair_within: Duration::from_secs(30),
    }
}

fn chain(table: &str, name: &str, rules: usize, jumps: &[&str]) -> InventoryChain {
    InventoryChain {
        backend: Backend::Legacy,
        family: Family::Ip,
        table: table.into(),
        chain: name.into(),
        rules,
        jumps: jumps.iter().map(|j| j.to_string()).collect(),
        is_set: false,
    }
}

impl Stream {
    fn new(inventory: Vec<InventoryChain>) -> Stream {
        Stream::with(cfg(), Owners::catalog(), inventory)
    }

    fn with(cfg: Config, owners: Owners, inventory: Vec<InventoryChain>) -> Stream {
        let mut c = Correlator::new(cfg, owners);
        c.baseline(7, Some("blue".into()), inventory);
        Stream {
            c,
            seq: 0,
            netns: 7,
            backend: Backend::Legacy,
            table: "filter".into(),
            out: Vec::new(),
            requested_by: None,
        }
    }

    /// One transaction by `actor` at `t` seconds: each op is (op, chain, rule, detail).
    fn txn(&mut self, t: i64, actor: &str, ops: &[(Op, &str, &str, &str)]) -> Vec<IncidentLine> {
        let time = at(t);
        let records: Vec<ChangeLine> = ops
            .iter()
            .map(|(op, chain, rule, detail)| {
                self.seq += 1;
                ChangeLine {
                    seq: self.seq,
                    time,
                    netns: self.netns,
                    netns_name: Some("blue".into()),
                    node: None,
                    backend: self.backend,
                    family: Family::Ip,
                    table: self.table.clone(),
                    chain: (!chain.is_empty()).then(|| chain.to_string()),
                    op: *op,
                    rule: (!rule.is_empty()).then(|| rule.to_string()),
                    forms: Default::default(),
                    position: None,
                    detail: (!detail.is_empty()).then(|| detail.to_string()),
                    txn: format!("t{t}"),
                    result: "ok".into(),
                    source: Source::Tracepoint,
                    process: ProcessInfo {
                        cgroup: Some(1),
                        requested_by: self.requested_by.clone(),
                        ..ProcessInfo::named(100, "iptables", Some((99, actor)), actor)
                    }
                    .into(),
                    replayed: false,
                    recovered: false,
                    restore: None,
                }
            })
            .collect();
        let got = self.c.observe(&records);
        self.out.extend(got.iter().cloned());
        got
    }

    fn tick(&mut self, t: i64) -> Vec<IncidentLine> {
        let got = self.c.tick(at(t));
        self.out.extend(got.iter().cloned());
        got
    }

    fn kinds(&self) -> BTreeSet<IncidentKind> {
        self.out.iter().map(|i| i.kind).collect()
    }

    fn ids(&self, kind: IncidentKind) -> BTreeSet<String> {
        self.out
            .iter()
            .filter(|i| i.kind == kind)
            .map(|i| i.id.clone())
            .collect()
    }
}

/// kube-proxy's nat chains with the jumps from PREROUTING and OUTPUT.
fn kube_proxy_nat() -> Vec<InventoryChain> {
    vec![
        chain("nat", "PREROUTING", 1, &["KUBE-SERVICES"]),
        chain("nat", "OUTPUT", 1, &["KUBE-SERVICES"]),
        chain("nat", "KUBE-SERVICES", 1, &["KUBE-SVC-A"]),
        chain("nat", "KUBE-SVC-A", 1, &["KUBE-SEP-A"]),
        chain("nat", "KUBE-SEP-A", 1, &[]),
    ]
}

const JUMP: &str = "-j KUBE-SERVICES";

/// calico-node unhooks, then deletes; kube-proxy restores.
fn calico_round(s: &mut Stream, t: i64) {
    s.txn(
        t,
        "calico-node",
        &[
            (Op::RuleDelete, "PREROUTING", JUMP, ""),
            (Op::RuleDelete, "OUTPUT", JUMP, ""),
        ],
    );
    s.txn(
        t + 1,
        "calico-node",
        &[
            (Op::ChainDelete, "KUBE-SERVICES", "", ""),
            (Op::ChainDelete, "KUBE-SVC-A", "", ""),
            (Op::ChainDelete, "KUBE-SEP-A", "", ""),
        ],
    );
    s.txn(
        t + 2,
        "kube-proxy",
        &[
            (Op::ChainCreate, "KUBE-SERVICES", "", ""),
            (Op::ChainCreate, "KUBE-SVC-A", "", ""),
            (Op::ChainCreate, "KUBE-SEP-A", "", ""),
            (Op::RuleAdd, "KUBE-SERVICES", "-j KUBE-SVC-A", ""),
            (Op::RuleAdd, "KUBE-SVC-A", "-j KUBE-SEP-A", ""),
            (Op::RuleAdd, "PREROUTING", JUMP, ""),
            (Op::RuleAdd, "OUTPUT", JUMP, ""),
        ],
    );
}

#[test]
fn calico_against_kube_proxy_is_unhooked_then_deleted_then_one_flapping_incident() {
    let mut s = Stream::new(kube_proxy_nat());
    s.table = "nat".into();
    calico_round(&mut s, 0);
    let kinds = s.kinds();
    assert_eq!(
        kinds,
        BTreeSet::from([IncidentKind::Unhooked, IncidentKind::ForeignDelete]),
        "{:#?}",
        s.out
    );
    let del = s
        .out
        .iter()
        .find(|i| i.kind == IncidentKind::ForeignDelete)
        .unwrap();
    assert_eq!(del.owner, "kube-proxy");
    assert_eq!(del.actors, vec!["calico-node"]);
    assert_eq!(
        del.chains,
        vec!["KUBE-SEP-A", "KUBE-SERVICES", "KUBE-SVC-A"]
    );
    let unhooked = s
        .out
        .iter()
        .find(|i| i.kind == IncidentKind::Unhooked)
        .unwrap();
    assert_eq!(unhooked.chains, vec!["KUBE-SERVICES"]);
    assert_eq!(unhooked.severity, Severity::Critical);
    assert!(
        unhooked.summary.contains("no packet reaches them"),
        "{}",
        unhooked.summary
    );
    for round in 1..6 {
        calico_round(&mut s, round * 5);
    }
    // Repeats updated the first incidents, then one flapping incident took over.
    assert_eq!(s.ids(IncidentKind::Unhooked).len(), 1);
    assert_eq!(s.ids(IncidentKind::ForeignDelete).len(), 1);
    assert_eq!(s.ids(IncidentKind::Flapping).len(), 1, "{:#?}", s.out);
    let cycles: Vec<u32> = s
        .out
        .iter()
        .filter(|i| i.kind == IncidentKind::Flapping)
        .map(|i| i.cycles.unwrap())
        .collect();
    assert_eq!(
        cycles,
        vec![3, 4, 5, 6],
        "one line per cycle, the count grows"
    );
    let flap = s
        .out
        .iter()
        .rfind(|i| i.kind == IncidentKind::Flapping)
        .unwrap()
        .clone();
    assert_eq!(flap.owner, "kube-proxy");
    assert!(flap.actors.contains(&"calico-node".to_string()));
    assert!(flap.chains.contains(&"KUBE-SVC-A".to_string()));
    assert_eq!(s.kinds().len(), 3, "nothing else: {:?}", s.kinds());
    // No other incident once flapping is open.
    let after_flap = s
        .out
        .iter()
        .skip_while(|i| i.kind != IncidentKind::Flapping)
        .filter(|i| i.kind != IncidentKind::Flapping)
        .count();
    assert_eq!(after_flap, 0);
    // The loop stops: the incident closes after a window, once.
    assert!(s.tick(40).is_empty(), "still inside the window");
    let closed = s.tick(30 + 61);
    assert_eq!(closed.len(), 1, "{closed:#?}");
    assert_eq!(closed[0].state, IncidentState::Resolved);
    assert_eq!(closed[0].id, flap.id);
    assert!(s.tick(500).is_empty());
}

#[test]
fn cycles_spread_wider_than_the_window_are_not_flapping() {
    let mut s = Stream::new(kube_proxy_nat());
    s.table = "nat".into();
    for round in 0..4 {
        calico_round(&mut s, round * 100);
        s.tick(round * 100 + 99);
    }
    assert!(s.ids(IncidentKind::Flapping).is_empty(), "{:#?}", s.out);
    // Each round, past the window, is a new incident.
    assert_eq!(s.ids(IncidentKind::ForeignDelete).len(), 4);
}

#[test]
fn an_owner_changing_its_own_chains_is_never_an_incident() {
    let mut s = Stream::new(kube_proxy_nat());
    s.table = "nat".into();
    for t in 0..50 {
        s.txn(
            t,
            "kube-proxy",
            &[
                (Op::ChainCreate, "KUBE-SVC-B", "", ""),
                (Op::RuleAdd, "KUBE-SERVICES", "-j KUBE-SVC-B", ""),
            ],
        );
        s.txn(
            t,
            "kube-proxy",
            &[
                (Op::RuleDelete, "KUBE-SERVICES", "-j KUBE-SVC-B", ""),
                (Op::ChainDelete, "KUBE-SVC-B", "", ""),
                (Op::ChainFlush, "KUBE-SEP-A", "", ""),
                (Op::RuleDelete, "PREROUTING", JUMP, ""),
            ],
        );
        s.txn(t, "kube-proxy", &[(Op::RuleAdd, "PREROUTING", JUMP, "")]);
    }
    // Shared chains: both writers allowed.
    s.txn(
        60,
        "kubelet",
        &[(Op::ChainCreate, "KUBE-MARK-MASQ", "", "")],
    );
    s.txn(
        61,
        "kube-proxy",
        &[(Op::ChainFlush, "KUBE-MARK-MASQ", "", "")],
    );
    s.txn(
        62,
        "kube-proxy",
        &[(Op::ChainDelete, "KUBE-MARK-MASQ", "", "")],
    );
    // An admin adds a rule to a built-in chain and to a chain it created.
    s.txn(63, "admin", &[(Op::RuleAdd, "INPUT", "-j ACCEPT", "")]);
    s.txn(
        64,
        "admin",
        &[
            (Op::ChainCreate, "MINE", "", ""),
            (Op::RuleAdd, "MINE", "-j DROP", ""),
        ],
    );
    s.txn(65, "admin", &[(Op::ChainFlush, "MINE", "", "")]);
    s.tick(1000);
    assert!(s.out.is_empty(), "{:#?}", s.out);
}

#[test]
fn a_learned_owner_is_defended_and_unknown_chains_are_learned_by_their_first_writer() {
    let mut s = Stream::new(vec![chain("filter", "LEGACY-THING", 2, &[])]);
    s.txn(
        0,
        "admin",
        &[
            (Op::ChainCreate, "MINE", "", ""),
            (Op::RuleAdd, "MINE", "-j DROP", ""),
        ],
    );
    let got = s.txn(1, "other-tool", &[(Op::ChainDelete, "MINE", "", "")]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].kind, IncidentKind::ForeignDelete);
    assert_eq!(got[0].owner, "admin");
    // Present at start, owner unknown: the first writer learns it, without an incident.
    assert!(s
        .txn(
            2,
            "tool-a",
            &[(Op::RuleAdd, "LEGACY-THING", "-j ACCEPT", "")]
        )
        .is_empty());
    let got = s.txn(3, "tool-b", &[(Op::ChainFlush, "LEGACY-THING", "", "")]);
    assert_eq!(got[0].kind, IncidentKind::ForeignFlush);
    assert_eq!(got[0].owner, "tool-a");
    let rows = s.c.owner_rows(None);
    let row = rows.iter().find(|r| r.chain == "LEGACY-THING").unwrap();
    assert_eq!(
        (row.owner.as_str(), row.how),
        ("tool-a", Some(How::Learned))
    );
    assert_eq!(&*row.last.as_ref().unwrap().actor, "tool-b");
}

#[test]
fn a_wipe_firewalld_made_on_request_names_who_asked() {
    let mut s = Stream::new(kube_proxy_nat());
    s.table = "nat".into();
    s.requested_by = Some(Box::new(crate::attribution::Requester {
        pid: 4242,
        comm: "firewall-cmd".into(),
        actor: "compliance-job".into(),
        method: "org.fedoraproject.FirewallD1.reload".into(),
        unit: Some("compliance.service".into()),
        container_id: None,
        pod: None,
        ancestry: Vec::new(),
    }));
    let got = s.txn(
        0,
        "firewalld",
        &[
            (Op::ChainDelete, "KUBE-SEP-A", "", ""),
            (Op::ChainDelete, "KUBE-SVC-A", "", ""),
        ],
    );
    let i = got
        .iter()
        .find(|i| i.kind == IncidentKind::ForeignDelete)
        .expect("a foreign delete");
    assert_eq!(i.owner, "kube-proxy");
    // Counted against firewalld, shown with who asked it.
    assert_eq!(i.actors[0], "firewall-cmd (via firewalld)", "{i:?}");
    assert_eq!(
        i.requested_by.as_ref().map(|r| r.actor.as_str()),
        Some("compliance-job")
    );
    assert!(
        i.summary
            .starts_with("firewall-cmd (via firewalld) deleted kube-proxy's")
            && i.summary.ends_with(
                " Asked by firewall-cmd 4242 (run by compliance-job, unit compliance.service) \
                 over D-Bus: reload."
            ),
        "{}",
        i.summary
    );
    // The tail's --actor finds it by the manager, the client and the job.
    for who in ["firewalld", "firewall-cmd", "compliance-job", "kube-proxy"] {
        let f = crate::output::filter::Filter {
            actor: Some(who.into()),
            ..Default::default()
        };
        assert!(f.matches_incident(i), "--actor {who}");
    }
    let f = crate::output::filter::Filter {
        actor: Some("someone-else".into()),
        ..Default::default()
    };
    assert!(!f.matches_incident(i));
}

#[test]
fn unknown_writers_make_no_incident() {
    let mut s = Stream::new(kube_proxy_nat());
    s.table = "nat".into();
    assert!(s
        .txn(0, "unknown", &[(Op::ChainFlush, "KUBE-SERVICES", "", "")])
        .is_empty());
}

#[test]
fn a_firewall_restart_is_one_mass_flush_with_repair_times() {
    let mut s = Stream::new(vec![
        chain("filter", "INPUT", 1, &["KUBE-FIREWALL"]),
        chain("filter", "FORWARD", 1, &["KUBE-FORWARD"]),
        chain("filter", "KUBE-FIREWALL", 1, &[]),
        chain("filter", "KUBE-KUBELET-CANARY", 0, &[]),
        chain("filter", "KUBE-FORWARD", 2, &[]),
        chain("filter", "KUBE-SERVICES", 0, &[]),
    ]);
    // iptables -F, then iptables -X, by the firewall's init script.
    let first = s.txn(0, "iptables.init", &[(Op::TableFlush, "", "", "")]);
    assert_eq!(first.len(), 1, "{first:#?}");
    assert_eq!(first[0].kind, IncidentKind::MassFlush);
    assert_eq!(first[0].severity, Severity::Critical);
    let owners: Vec<&str> = first[0].owners.iter().map(|o| o.owner.as_str()).collect();
    assert_eq!(owners, vec!["kube-proxy", "kubelet"]);
    s.txn(
        1,
        "iptables.init",
        &[
            (Op::ChainDelete, "KUBE-FIREWALL", "", ""),
            (Op::ChainDelete, "KUBE-KUBELET-CANARY", "", ""),
            (Op::ChainDelete, "KUBE-FORWARD", "", ""),
            (Op::ChainDelete, "KUBE-SERVICES", "", ""),
        ],
    );
    // kube-proxy repairs 3 s after the flush; kubelet never does.
    s.txn(
        3,
        "kube-proxy",
        &[
            (Op::ChainCreate, "KUBE-FORWARD", "", ""),
            (Op::ChainCreate, "KUBE-SERVICES", "", ""),
        ],
    );
    assert_eq!(s.ids(IncidentKind::MassFlush).len(), 1);
    assert_eq!(
        s.kinds(),
        BTreeSet::from([IncidentKind::MassFlush]),
        "no separate foreign_* or unhooked: {:#?}",
        s.out
    );
    let last = s.out.last().unwrap();
    let kp = last
        .owners
        .iter()
        .find(|o| o.owner == "kube-proxy")
        .unwrap();
    assert!(kp.repaired);
    assert_eq!(kp.repair_ms, Some(3000));
    assert!(s.tick(20).is_empty());
    let closed = s.tick(31);
    assert_eq!(closed.len(), 1);
    assert_eq!(closed[0].state, IncidentState::Expired);
    let kubelet = closed[0]
        .owners
        .iter()
        .find(|o| o.owner == "kubelet")
        .unwrap();
    assert!(!kubelet.repaired && kubelet.repair_ms.is_none());
    assert_eq!(
        kubelet.chains,
        vec!["KUBE-FIREWALL", "KUBE-KUBELET-CANARY"],
        "the chains the init script flushed and deleted"
    );
    assert!(
        closed[0].summary.contains("kubelet"),
        "{}",
        closed[0].summary
    );
    assert!(
        closed[0].summary.contains("NEVER repaired"),
        "{}",
        closed[0].summary
    );
}

#[test]
fn a_wipe_spread_over_transactions_counts_repairs_from_its_first_change() {
    let mut s = Stream::new(vec![
        chain("filter", "KUBE-FIREWALL", 1, &[]),
        chain("filter", "KUBE-SERVICES", 2, &[]),
    ]);
    s.table = "filter".into();
    // firewalld's reload flushes kube-proxy's chain first, kubelet's a second later: only the
    // second transaction makes it a mass flush.
    let one = s.txn(0, "firewalld", &[(Op::ChainFlush, "KUBE-SERVICES", "", "")]);
    assert!(
        one.iter().all(|r| r.kind != IncidentKind::MassFlush),
        "{one:#?}"
    );
    let two = s.txn(1, "firewalld", &[(Op::ChainFlush, "KUBE-FIREWALL", "", "")]);
    assert!(
        two.iter().any(|r| r.kind == IncidentKind::MassFlush),
        "{two:#?}"
    );
    s.txn(
        4,
        "kube-proxy",
        &[(Op::RuleAdd, "KUBE-SERVICES", "-j ACCEPT", "")],
    );
    let kp = s
        .out
        .iter()
        .rev()
        .filter(|r| r.kind == IncidentKind::MassFlush)
        .find_map(|r| {
            r.owners
                .iter()
                .find(|o| o.owner == "kube-proxy" && o.repaired)
        })
        .unwrap_or_else(|| panic!("kube-proxy's repair: {:#?}", s.out));
    assert_eq!(
        kp.repair_ms,
        Some(4000),
        "from the wipe at 0 s to the repair at 4 s"
    );
}

#[test]
fn a_refused_recreation_during_a_mass_flush_is_named() {
    let mut s = Stream::new(vec![
        chain("filter", "KUBE-FIREWALL", 1, &[]),
        chain("filter", "KUBE-FORWARD", 1, &[]),
    ]);
    s.txn(0, "iptables.init", &[(Op::TableFlush, "", "", "")]);
    let mut failed = ChangeLine {
        seq: 99,
        time: at(1),
        netns: 7,
        netns_name: None,
        node: None,
        backend: Backend::Legacy,
        family: Family::Ip,
        table: "filter".into(),
        chain: Some("KUBE-FIREWALL".into()),
        op: Op::ChainCreate,
        rule: None,
        forms: Default::default(),
        position: None,
        detail: None,
        txn: "x".into(),
        result: "EBUSY: Device or resource busy".into(),
        source: Source::Tracepoint,
        process: ProcessInfo::named(1, "iptables", None, "kubelet").into(),
        replayed: false,
        recovered: false,
        restore: None,
    };
    let got = s.c.observe(std::slice::from_ref(&failed));
    assert_eq!(got.len(), 1);
    let k = got[0].owners.iter().find(|o| o.owner == "kubelet").unwrap();
    assert!(k.failed.as_deref().unwrap().contains("EBUSY"), "{k:?}");
    assert!(got[0].events.contains(&99));
    // A refused write by someone else changes nothing.
    std::sync::Arc::make_mut(&mut failed.process).actor = "bystander".into();
    assert!(s.c.observe(&[failed]).is_empty());
}

#[test]
fn one_owner_flushed_is_a_foreign_flush_not_a_mass_flush() {
    let mut s = Stream::new(vec![chain("filter", "KUBE-FIREWALL", 3, &[])]);
    let got = s.txn(0, "iptables.init", &[(Op::TableFlush, "", "", "")]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].kind, IncidentKind::ForeignFlush);
    assert_eq!(got[0].owner, "kubelet");
}

#[test]
fn rule_drift_names_the_lost_match_and_is_critical_for_drop() {
    let mut s = Stream::new(vec![chain("filter", "KUBE-FIREWALL", 1, &[])]);
    let old = "-m comment --comment \"kubernetes firewall for dropping marked packets\" -m mark --mark 0x8000/0x8000 -j DROP";
    let new = "-m comment --comment \"kubernetes firewall for dropping marked packets\" -j DROP";
    let got = s.txn(
        0,
        "kube-router",
        &[(
            Op::RuleReplace,
            "KUBE-FIREWALL",
            new,
            &format!("was: {old}"),
        )],
    );
    assert_eq!(got.len(), 1, "{got:#?}");
    let d = &got[0];
    assert_eq!(d.kind, IncidentKind::RuleDrift);
    assert_eq!(d.severity, Severity::Critical);
    assert_eq!(d.lost, vec!["-m mark --mark 0x8000/0x8000"]);
    assert_eq!(d.owner, "kubelet");
    assert_eq!(d.actors, vec!["kube-router"]);
    assert!(
        d.summary.contains("-m mark --mark 0x8000/0x8000"),
        "{}",
        d.summary
    );
    // The owner rewriting its own rule is no drift: it resolves this one, by kubelet.
    let fixed = s.txn(
        1,
        "kubelet",
        &[(
            Op::RuleReplace,
            "KUBE-FIREWALL",
            old,
            &format!("was: {new}"),
        )],
    );
    assert_eq!(fixed.len(), 1, "{fixed:#?}");
    assert_eq!(fixed[0].id, d.id);
    assert_eq!(fixed[0].state, IncidentState::Resolved);
    assert_eq!(fixed[0].owners[0].repaired_by.as_deref(), Some("kubelet"));
    assert_eq!(fixed[0].owners[0].repair_ms, Some(1000));
    // A comment-only change is no drift.
    let c1 = "-m comment --comment a -j ACCEPT";
    let c2 = "-m comment --comment b -j ACCEPT";
    assert!(s
        .txn(
            2,
            "kube-router",
            &[(Op::RuleReplace, "KUBE-FIREWALL", c2, &format!("was: {c1}"))]
        )
        .is_empty());
}

#[test]
fn split_brain_at_start_and_when_created() {
    let mut inv = vec![chain("filter", "AZURE-NPM", 1, &[])];
    inv.push(InventoryChain {
        backend: Backend::Nft,
        ..chain("filter", "AZURE-NPM-INGRESS", 1, &[])
    });
    let mut s = Stream::new(inv);
    let found = s.c.check_all(at(0));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].kind, IncidentKind::SplitBrain);
    assert_eq!(found[0].owner, "azure-npm");
    let b = found[0].backends.as_ref().unwrap();
    assert_eq!(
        (b.legacy.clone(), b.nft.clone()),
        (
            vec!["AZURE-NPM".to_string()],
            vec!["AZURE-NPM-INGRESS".to_string()]
        )
    );
    // Asking again does not repeat it.
    assert!(s.c.check_all(at(0)).is_empty());

    // Created while running: nft chains first, then a legacy one.
    let mut s = Stream::new(vec![]);
    s.backend = Backend::Nft;
    assert!(s
        .txn(0, "azure-npm", &[(Op::ChainCreate, "AZURE-NPM", "", "")])
        .is_empty());
    s.backend = Backend::Legacy;
    let got = s.txn(
        1,
        "azure-npm",
        &[(Op::ChainCreate, "AZURE-NPM-EGRESS", "", "")],
    );
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].kind, IncidentKind::SplitBrain);
    assert_eq!(got[0].last_backend, Some(Backend::Legacy));
    assert!(got[0].events.contains(&2));
    // A native nft table of the same owner is another ruleset, not a split brain.
    let mut s2 = Stream::new(vec![]);
    s2.backend = Backend::Nft;
    s2.table = "admin".into();
    assert!(s2
        .txn(0, "admin", &[(Op::ChainCreate, "input", "", "")])
        .is_empty());
    s2.backend = Backend::Legacy;
    s2.table = "filter".into();
    assert!(s2
        .txn(1, "admin", &[(Op::ChainCreate, "ADMIN-SSH", "", "")])
        .is_empty());
    // The stale legacy chain goes away: the incident closes.
    let got = s.txn(
        2,
        "azure-npm",
        &[(Op::ChainDelete, "AZURE-NPM-EGRESS", "", "")],
    );
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].state, IncidentState::Resolved);
}

#[test]
fn an_owners_file_makes_allowed_writers_and_aliases() {
    let file = owners::parse_file(
        std::path::Path::new("o.toml"),
        "[[owner]]\nname = \"calico\"\nactors = [\"calico-node\", \"calico-felix\"]\nchains = [\"cali-*\"]\n\n[[shared]]\nchains = [\"KUBE-FIREWALL\"]\nwriters = [\"kubelet\", \"kube-router\"]\n",
    )
    .unwrap();
    let mut o = Owners::catalog();
    o.apply(file).unwrap();
    let mut s = Stream::with(
        cfg(),
        o,
        vec![
            chain("filter", "KUBE-FIREWALL", 1, &[]),
            chain("filter", "cali-INPUT", 1, &[]),
        ],
    );
    assert!(s
        .txn(
            0,
            "kube-router",
            &[(Op::ChainFlush, "KUBE-FIREWALL", "", "")]
        )
        .is_empty());
    // calico-felix is calico: its own chain.
    assert!(s
        .txn(1, "calico-felix", &[(Op::ChainFlush, "cali-INPUT", "", "")])
        .is_empty());
    let got = s.txn(2, "kube-proxy", &[(Op::ChainDelete, "cali-INPUT", "", "")]);
    assert_eq!(got[0].owner, "calico");
}

#[test]
fn a_restart_in_the_middle_of_a_conflict_starts_from_the_rulesets() {
    // observer restarts while calico and kube-proxy fight: the new process knows the chains from
    // its start-up read, not the earlier cycles, and needs the full count again.
    let mut s = Stream::new(kube_proxy_nat());
    s.table = "nat".into();
    calico_round(&mut s, 0);
    calico_round(&mut s, 5);
    let mut restarted = Stream::new(kube_proxy_nat());
    restarted.table = "nat".into();
    restarted.seq = s.seq;
    calico_round(&mut restarted, 10);
    assert!(restarted.ids(IncidentKind::Flapping).is_empty());
    assert_eq!(
        restarted.kinds(),
        BTreeSet::from([IncidentKind::Unhooked, IncidentKind::ForeignDelete])
    );
    calico_round(&mut restarted, 15);
    calico_round(&mut restarted, 20);
    assert_eq!(restarted.ids(IncidentKind::Flapping).len(), 1);
}

#[test]
fn memory_stays_bounded_under_endless_churn() {
    let mut s = Stream::new(kube_proxy_nat());
    s.table = "nat".into();
    for round in 0..2000 {
        calico_round(&mut s, round * 3);
        if round % 50 == 0 {
            s.tick(round * 3);
        }
    }
    assert_eq!(s.ids(IncidentKind::Flapping).len(), 1);
    let flap = s
        .out
        .iter()
        .rfind(|i| i.kind == IncidentKind::Flapping)
        .unwrap();
    assert!(flap.events.len() <= MAX_EVENTS);
    assert_eq!(flap.cycles, Some(2000));
    assert!(s.c.incidents.len() <= 3, "{}", s.c.incidents.len());
    assert!(s.c.conflicts.len() <= 1);
}

/// Replays a recorded `observer tail --json` stream: change lines grouped by `txn`, then a tick
/// far after the last event.
fn replay(jsonl: &str, owners: Owners) -> Vec<IncidentLine> {
    let mut c = Correlator::new(cfg(), owners);
    let mut out = Vec::new();
    let mut txn: Vec<ChangeLine> = Vec::new();
    let mut last = Timestamp::EPOCH;
    for line in jsonl.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).expect("fixture line is JSON");
        if v["kind"] != "change" {
            continue;
        }
        let rec: ChangeLine = serde_json::from_value(v).expect("fixture change line");
        last = rec.time;
        if txn.first().is_some_and(|f| f.txn != rec.txn) {
            out.extend(c.observe(&txn));
            txn.clear();
        }
        txn.push(rec);
    }
    out.extend(c.observe(&txn));
    out.extend(c.tick(last.saturating_add(Duration::from_secs(3600))));
    out
}

#[test]
fn recorded_streams_give_the_expected_incidents() {
    let cases: &[(&str, &str, &[IncidentKind])] = &[
        (
            "iptables-restore churn by kube-proxy",
            include_str!("fixtures/kube_proxy_churn.jsonl"),
            &[],
        ),
        (
            "calico-node against kube-proxy",
            include_str!("fixtures/calico_vs_kube_proxy.jsonl"),
            &[
                IncidentKind::ForeignDelete,
                IncidentKind::Unhooked,
                IncidentKind::Flapping,
            ],
        ),
    ];
    for (name, text, expected) in cases {
        let got = replay(text, Owners::catalog());
        let kinds: BTreeSet<IncidentKind> = got.iter().map(|i| i.kind).collect();
        let expected: BTreeSet<IncidentKind> = expected.iter().copied().collect();
        assert_eq!(kinds, expected, "{name}: {got:#?}");
    }
}

/// The incident life cycle: what was undone is watched until it is back (resolved, with who and
/// how long) or until the repair bound passes (expired).
#[test]
fn foreign_incidents_resolve_when_the_owner_repairs_and_expire_when_it_does_not() {
    let mut s = Stream::new(vec![
        chain("filter", "INPUT", 1, &["KUBE-FIREWALL"]),
        chain("filter", "KUBE-FIREWALL", 1, &[]),
        chain("filter", "KUBE-SERVICES", 2, &[]),
        chain("filter", "KUBE-FORWARD", 0, &[]),
    ]);
    // An admin flushes kube-proxy's chain; kube-proxy refills it 2 s later.
    let open = s.txn(0, "admin", &[(Op::ChainFlush, "KUBE-SERVICES", "", "")]);
    assert_eq!(open.len(), 1, "{open:#?}");
    assert_eq!(open[0].kind, IncidentKind::ForeignFlush);
    assert_eq!(open[0].state, IncidentState::Open);
    assert!(!open[0].owners[0].repaired);
    let fixed = s.txn(
        2,
        "kube-proxy",
        &[(Op::RuleAdd, "KUBE-SERVICES", "-j ACCEPT", "")],
    );
    assert_eq!(fixed.len(), 1, "{fixed:#?}");
    assert_eq!(fixed[0].id, open[0].id);
    assert_eq!(fixed[0].state, IncidentState::Resolved);
    let o = &fixed[0].owners[0];
    assert!(o.repaired);
    assert_eq!(o.repair_ms, Some(2000));
    assert_eq!(o.repaired_by.as_deref(), Some("kube-proxy"));
    assert!(
        fixed[0].summary.starts_with("Resolved"),
        "{}",
        fixed[0].summary
    );

    // The jump into kubelet's chain removed, then put back by kubelet: unhooked, resolved.
    let unhooked = s.txn(
        3,
        "admin",
        &[(Op::RuleDelete, "INPUT", "-j KUBE-FIREWALL", "")],
    );
    assert_eq!(unhooked.len(), 1, "{unhooked:#?}");
    assert_eq!(unhooked[0].kind, IncidentKind::Unhooked);
    let back = s.txn(
        4,
        "kubelet",
        &[(Op::RuleAdd, "INPUT", "-j KUBE-FIREWALL", "")],
    );
    assert_eq!(back.len(), 1, "{back:#?}");
    assert_eq!(back[0].id, unhooked[0].id);
    assert_eq!(back[0].state, IncidentState::Resolved);

    // A chain deleted and never re-created: expired after the repair bound (30 s), said plainly.
    let gone = s.txn(5, "admin", &[(Op::ChainDelete, "KUBE-FORWARD", "", "")]);
    assert_eq!(gone.len(), 1, "{gone:#?}");
    assert_eq!(gone[0].kind, IncidentKind::ForeignDelete);
    assert!(s.tick(30).is_empty(), "inside the bound");
    let expired: Vec<IncidentLine> = s
        .tick(36)
        .into_iter()
        .filter(|i| i.id == gone[0].id)
        .collect();
    assert_eq!(expired.len(), 1, "{:#?}", s.out);
    assert_eq!(expired[0].state, IncidentState::Expired);
    assert!(!expired[0].owners[0].repaired);
    assert!(
        expired[0].summary.contains("Not repaired within 30 s"),
        "{}",
        expired[0].summary
    );
    // Nothing more is said of any of them.
    assert!(s.tick(500).is_empty());
}

/// A firewall reloaded twice: the second wipe is a new incident whose owners are not repaired,
/// even though kube-proxy repaired after the first one (no false all-clear).
#[test]
fn a_second_wipe_after_a_repair_is_a_new_incident_that_inherits_no_repair() {
    let mut s = Stream::new(vec![
        chain("filter", "KUBE-FIREWALL", 1, &[]),
        chain("filter", "KUBE-SERVICES", 1, &[]),
    ]);
    let wipe = |s: &mut Stream, t| {
        s.txn(
            t,
            "iptables.init",
            &[
                (Op::ChainDelete, "KUBE-FIREWALL", "", ""),
                (Op::ChainDelete, "KUBE-SERVICES", "", ""),
            ],
        )
    };
    let first = wipe(&mut s, 0);
    assert_eq!(first.len(), 1, "{first:#?}");
    assert_eq!(first[0].kind, IncidentKind::MassFlush);
    // Both owners repair: the incident is resolved at once, with both repair times.
    s.txn(
        1,
        "kube-proxy",
        &[(Op::ChainCreate, "KUBE-SERVICES", "", "")],
    );
    let done = s.txn(2, "kubelet", &[(Op::ChainCreate, "KUBE-FIREWALL", "", "")]);
    assert_eq!(done.len(), 1, "{done:#?}");
    assert_eq!(done[0].id, first[0].id);
    assert_eq!(done[0].state, IncidentState::Resolved);
    assert!(done[0].owners.iter().all(|o| o.repaired));
    // Reloaded again within the repair window: a new incident, nobody repaired.
    let second = wipe(&mut s, 3);
    assert_eq!(second.len(), 1, "{second:#?}");
    assert_ne!(second[0].id, first[0].id);
    assert_eq!(second[0].state, IncidentState::Open);
    assert!(second[0]
        .owners
        .iter()
        .all(|o| !o.repaired && o.repair_ms.is_none()));
    // kube-proxy repairs, kubelet never does: expired, naming kubelet.
    s.txn(
        4,
        "kube-proxy",
        &[(Op::ChainCreate, "KUBE-SERVICES", "", "")],
    );
    let end: Vec<IncidentLine> = s
        .tick(40)
        .into_iter()
        .filter(|i| i.id == second[0].id)
        .collect();
    assert_eq!(end.len(), 1, "{:#?}", s.out);
    assert_eq!(end[0].state, IncidentState::Expired);
    let kubelet = end[0].owners.iter().find(|o| o.owner == "kubelet").unwrap();
    assert!(!kubelet.repaired);
    assert!(
        end[0].summary.contains("NEVER repaired"),
        "{}",
        end[0].summary
    );

    // A second wipe while an owner of the first has repaired and the other has not: the first
    // ends (expired: kubelet never came back), the second starts with nothing repaired.
    let mut s2 = Stream::new(vec![
        chain("filter", "KUBE-FIREWALL", 1, &[]),
        chain("filter", "KUBE-SERVICES", 1, &[]),
        chain("filter", "KUBE-MARK-DROP", 1, &[]),
    ]);
    let first = s2.txn(
        0,
        "iptables.init",
        &[
            (Op::ChainDelete, "KUBE-FIREWALL", "", ""),
            (Op::ChainDelete, "KUBE-SERVICES", "", ""),
        ],
    );
    s2.txn(
        1,
        "kube-proxy",
        &[(Op::ChainCreate, "KUBE-SERVICES", "", "")],
    );
    let again = s2.txn(
        2,
        "iptables.init",
        &[
            (Op::ChainDelete, "KUBE-SERVICES", "", ""),
            (Op::ChainDelete, "KUBE-MARK-DROP", "", ""),
        ],
    );
    let old_end = again
        .iter()
        .find(|i| i.id == first[0].id)
        .expect("the first ends");
    assert_eq!(old_end.state, IncidentState::Expired);
    let new = again
        .iter()
        .find(|i| i.id != first[0].id && i.kind == IncidentKind::MassFlush)
        .expect("a new mass flush");
    assert_eq!(new.state, IncidentState::Open);
    assert!(new.owners.iter().all(|o| !o.repaired), "{new:#?}");
}

/// A wipe whose first transaction hits one owner and whose second hits another is one
/// `mass_flush`: the first foreign_flush is merged into it, not left open beside it; and the
/// summary names every table the wipe touched.
#[test]
fn a_foreign_flush_is_merged_into_the_mass_flush_of_the_same_wipe() {
    let mut s = Stream::new(vec![
        chain("filter", "KUBE-FIREWALL", 2, &[]),
        chain("nat", "KUBE-SERVICES", 2, &[]),
    ]);
    let one = s.txn(
        0,
        "iptables.init",
        &[(Op::ChainFlush, "KUBE-FIREWALL", "", "")],
    );
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].kind, IncidentKind::ForeignFlush);
    s.table = "nat".into();
    let two = s.txn(
        1,
        "iptables.init",
        &[(Op::ChainFlush, "KUBE-SERVICES", "", "")],
    );
    let mass = two
        .iter()
        .find(|i| i.kind == IncidentKind::MassFlush)
        .expect("a mass flush");
    let merged = two
        .iter()
        .find(|i| i.id == one[0].id)
        .expect("the foreign flush ends");
    assert_eq!(merged.state, IncidentState::Resolved);
    assert_eq!(merged.merged_into.as_deref(), Some(mass.id.as_str()));
    assert_eq!(mass.tables, vec!["ip filter", "ip nat"]);
    assert!(
        mass.summary.contains("ip filter, ip nat"),
        "{}",
        mass.summary
    );
    assert_eq!(two.len(), 2, "{two:#?}");
}

#[test]
fn a_whole_nft_table_has_one_owner_whatever_its_chain_names() {
    let nft = |table: &str, name: &str, rules: usize| InventoryChain {
        backend: Backend::Nft,
        family: Family::Ip,
        table: table.into(),
        chain: name.into(),
        rules,
        jumps: Vec::new(),
        is_set: false,
    };
    let svc = "service-2QRHZV4L-default/kubernetes/tcp/https";
    let mut s = Stream::new(vec![
        nft("kube-proxy", "services", 1),
        nft("kube-proxy", svc, 1),
        nft("admin", "my-chain", 1),
    ]);
    s.backend = Backend::Nft;
    s.table = "kube-proxy".into();
    // kube-proxy rewriting its own table is nothing.
    s.txn(1, "kube-proxy", &[(Op::ChainFlush, svc, "", "")]);
    assert!(s.out.is_empty(), "{:#?}", s.out);
    // Someone else deleting a chain of it is kube-proxy's problem, though no name says so.
    s.txn(2, "admin.sh", &[(Op::ChainDelete, svc, "", "")]);
    let del: Vec<&IncidentLine> = s
        .out
        .iter()
        .filter(|i| i.kind == IncidentKind::ForeignDelete)
        .collect();
    assert_eq!(del.len(), 1, "{:#?}", s.out);
    assert_eq!(del[0].owner, "kube-proxy");
    assert_eq!(del[0].chains, vec![svc.to_string()]);
    // A chain of the same name in a table nobody owns whole is not kube-proxy's.
    let before = s.out.len();
    s.table = "admin".into();
    s.txn(3, "kube-proxy", &[(Op::ChainDelete, "my-chain", "", "")]);
    assert_eq!(s.out.len(), before, "{:#?}", &s.out[before..]);
}

/// docker's chains with the jump from FORWARD, as dockerd makes them.
fn docker_filter() -> Vec<InventoryChain> {
    vec![
        chain("filter", "FORWARD", 1, &["DOCKER-USER"]),
        chain("filter", "DOCKER-USER", 1, &[]),
        chain("filter", "DOCKER", 1, &[]),
    ]
}

#[test]
fn firewalld_writing_dockers_chains_for_it_is_no_incident_anyone_else_is() {
    let mut s = Stream::new(docker_filter());
    // On a firewalld host docker's rules go in through firewalld: a reload rewrites them.
    s.txn(
        1,
        "firewalld",
        &[
            (Op::RuleDelete, "FORWARD", "-j DOCKER-USER", ""),
            (Op::ChainFlush, "DOCKER", "", ""),
            (Op::ChainDelete, "DOCKER", "", ""),
        ],
    );
    s.txn(
        2,
        "firewalld",
        &[
            (Op::ChainCreate, "DOCKER", "", ""),
            (Op::RuleAdd, "FORWARD", "-j DOCKER-USER", ""),
        ],
    );
    s.tick(1000);
    assert!(s.out.is_empty(), "{:#?}", s.out);
    // The same by a component that is not docker's delegate is docker's problem.
    s.txn(3, "iptables.init", &[(Op::ChainDelete, "DOCKER", "", "")]);
    assert!(s.out.iter().any(|i| i.owner == "dockerd"), "{:#?}", s.out);
}

#[test]
fn an_owners_file_names_who_writes_for_an_owner() {
    let file = owners::parse_file(
        std::path::Path::new("o.toml"),
        "[[owner]]\nname = \"edge\"\nchains = [\"EDGE-*\"]\nvia = [\"edge-sync\"]\n",
    )
    .unwrap();
    let mut o = Owners::catalog();
    o.apply(file).unwrap();
    let mut s = Stream::with(cfg(), o, vec![chain("filter", "EDGE-IN", 1, &[])]);
    assert!(s
        .txn(1, "edge-sync", &[(Op::ChainFlush, "EDGE-IN", "", "")])
        .is_empty());
    let got = s.txn(2, "admin.sh", &[(Op::ChainFlush, "EDGE-IN", "", "")]);
    assert_eq!(
        got.first().map(|i| i.owner.as_str()),
        Some("edge"),
        "{got:#?}"
    );
}
