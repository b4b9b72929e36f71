//! `observer bench-incidents`: the incident engine's cost, for `cargo xtask bench-incidents`.
//! Hidden from `--help`: a measuring tool, not a feature.
//!
//! The model holds a kube-proxy-like nat table of 20,000 rules in 2,000 chains. Then:
//! 1. churn: kube-proxy restores that delete and add services (its own chains: no incident),
//!    timing each transaction through [`Correlator::observe`] and sampling the process RSS, to
//!    show that memory does not grow with the number of transactions;
//! 2. conflicts: calico-node deleting kube-proxy's chains and kube-proxy restoring them, timing
//!    the transactions that produce an incident line (the incident is written right after the
//!    change lines of the transaction that completes it, so this is its latency in the engine).

use std::time::Instant;

use serde::Serialize;

use crate::BenchIncidentsArgs;
use observer::attribution::ProcessInfo;
use observer::incidents::owners::Owners;
use observer::incidents::{Config, Correlator, InventoryChain};
use observer::output::line::{ChangeLine, Source};
use observer::ruleset::{Backend, Family, Op};
use observer::timestamp::Timestamp;

#[derive(Serialize)]
struct Figures {
    rules: usize,
    chains: usize,
    churn_txns: usize,
    churn_changes_per_txn: usize,
    churn_us_p50: f64,
    churn_us_p99: f64,
    /// Engine CPU per change during churn, µs.
    churn_us_per_change: f64,
    /// RSS after the model is built, and after each quarter of the churn (KiB).
    rss_kib: Vec<u64>,
    incidents: usize,
    incident_us_p50: f64,
    incident_us_p99: f64,
    incident_us_max: f64,
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4)
}

struct Gen {
    seq: u64,
    t_ns: i64,
}

impl Gen {
    fn txn(&mut self, actor: &str, ops: Vec<(Op, String, Option<String>)>) -> Vec<ChangeLine> {
        self.t_ns += 50_000_000;
        let time = Timestamp::from_unix_nanos(self.t_ns);
        let txn = format!("xt-1-{}", self.t_ns);
        ops.into_iter()
            .map(|(op, chain, rule)| {
                self.seq += 1;
                ChangeLine {
                    seq: self.seq,
                    time,
                    netns: 1,
                    netns_name: None,
                    node: None,
                    backend: Backend::Legacy,
                    family: Family::Ip,
                    table: "nat".into(),
                    chain: Some(chain),
                    op,
                    rule,
                    forms: Default::default(),
                    position: None,
                    detail: None,
                    txn: txn.clone(),
                    result: "ok".into(),
                    source: Source::Tracepoint,
                    process: ProcessInfo {
                        cgroup: Some(1),
                        ..ProcessInfo::named(10, "iptables-restor", Some((9, actor)), actor)
                    }
                    .into(),
                    replayed: false,
                    recovered: false,
                    restore: None,
                }
            })
            .collect()
    }
}

const SERVICES: usize = 666;
const RULES_PER_CHAIN: usize = 10;

fn svc(i: usize) -> String {
    format!("KUBE-SVC-{i:012}")
}

fn sep(i: usize, j: usize) -> String {
    format!("KUBE-SEP-{i:010}{j:02}")
}

pub fn run(args: BenchIncidentsArgs) -> anyhow::Result<()> {
    let mut inv = vec![
        InventoryChain {
            backend: Backend::Legacy,
            family: Family::Ip,
            table: "nat".into(),
            chain: "PREROUTING".into(),
            rules: 1,
            jumps: vec!["KUBE-SERVICES".into()],
            is_set: false,
        },
        InventoryChain {
            backend: Backend::Legacy,
            family: Family::Ip,
            table: "nat".into(),
            chain: "KUBE-SERVICES".into(),
            rules: SERVICES,
            jumps: (0..SERVICES).map(svc).collect(),
            is_set: false,
        },
    ];
    for i in 0..SERVICES {
        inv.push(InventoryChain {
            backend: Backend::Legacy,
            family: Family::Ip,
            table: "nat".into(),
            chain: svc(i),
            rules: RULES_PER_CHAIN,
            jumps: vec![sep(i, 0), sep(i, 1)],
            is_set: false,
        });
        for j in 0..2 {
            inv.push(InventoryChain {
                backend: Backend::Legacy,
                family: Family::Ip,
                table: "nat".into(),
                chain: sep(i, j),
                rules: RULES_PER_CHAIN,
                jumps: Vec::new(),
                is_set: false,
            });
        }
    }
    let chains = inv.len();
    let rules: usize = inv.iter().map(|c| c.rules).sum();
    let mut c = Correlator::new(Config::default(), Owners::catalog());
    c.baseline(1, None, inv);
    let mut g = Gen {
        seq: 0,
        t_ns: 1_780_000_000_000_000_000,
    };
    let mut rss = vec![rss_kib()];

    // 1. kube-proxy churn: each restore removes 5 services and adds 5 new ones.
    let txns = args.txns.max(4);
    let mut churn = Vec::with_capacity(txns);
    let mut changes = 0;
    let mut next = SERVICES;
    let mut live: std::collections::VecDeque<usize> = (0..SERVICES).collect();
    for n in 0..txns {
        let mut ops = Vec::new();
        for _ in 0..5 {
            let old = live.pop_front().unwrap_or_default();
            ops.push((
                Op::RuleDelete,
                "KUBE-SERVICES".into(),
                Some(format!("-j {}", svc(old))),
            ));
            ops.push((Op::ChainDelete, svc(old), None));
            ops.push((Op::ChainDelete, sep(old, 0), None));
            ops.push((Op::ChainDelete, sep(old, 1), None));
            let new = next;
            next += 1;
            live.push_back(new);
            ops.push((Op::ChainCreate, svc(new), None));
            ops.push((Op::ChainCreate, sep(new, 0), None));
            ops.push((Op::ChainCreate, sep(new, 1), None));
            ops.push((Op::RuleAdd, svc(new), Some(format!("-j {}", sep(new, 0)))));
            ops.push((Op::RuleAdd, svc(new), Some(format!("-j {}", sep(new, 1)))));
            ops.push((
                Op::RuleAdd,
                "KUBE-SERVICES".into(),
                Some(format!(
                    "-d 10.96.{}.{}/32 -p tcp -m tcp --dport 80 -j {}",
                    new / 256 % 256,
                    new % 256,
                    svc(new)
                )),
            ));
        }
        let recs = g.txn("kube-proxy", ops);
        changes = recs.len();
        let t = Instant::now();
        let out = c.observe(&recs);
        churn.push(t.elapsed().as_secs_f64() * 1e6);
        anyhow::ensure!(
            out.is_empty(),
            "kube-proxy's own churn made incidents: {out:?}"
        );
        if (n + 1) % (txns / 4) == 0 {
            c.tick(Timestamp::from_unix_nanos(g.t_ns));
            rss.push(rss_kib());
        }
    }
    let per_change = churn.iter().sum::<f64>() / (churn.len() * changes.max(1)) as f64;

    // 2. calico-node against kube-proxy: unhook, delete, restore; every round makes an
    //    incident line (unhooked/foreign_delete updates, then flapping cycles).
    let mut lat = Vec::new();
    let mut incidents = 0;
    let victim = live.front().copied().unwrap_or_default();
    for _ in 0..args.rounds.max(1) {
        let rounds = [
            g.txn(
                "calico-node",
                vec![(
                    Op::RuleDelete,
                    "PREROUTING".into(),
                    Some("-j KUBE-SERVICES".into()),
                )],
            ),
            g.txn(
                "calico-node",
                vec![
                    (
                        Op::RuleDelete,
                        "KUBE-SERVICES".into(),
                        Some(format!("-j {}", svc(victim))),
                    ),
                    (Op::ChainDelete, svc(victim), None),
                ],
            ),
            g.txn(
                "kube-proxy",
                vec![
                    (Op::ChainCreate, svc(victim), None),
                    (
                        Op::RuleAdd,
                        "KUBE-SERVICES".into(),
                        Some(format!("-j {}", svc(victim))),
                    ),
                    (
                        Op::RuleAdd,
                        "PREROUTING".into(),
                        Some("-j KUBE-SERVICES".into()),
                    ),
                ],
            ),
        ];
        for recs in rounds {
            let t = Instant::now();
            let out = c.observe(&recs);
            let us = t.elapsed().as_secs_f64() * 1e6;
            if !out.is_empty() {
                incidents += out.len();
                lat.push(us);
            }
        }
    }
    let figures = Figures {
        rules,
        chains,
        churn_txns: txns,
        churn_changes_per_txn: changes,
        churn_us_p50: percentile(&mut churn.clone(), 0.5),
        churn_us_p99: percentile(&mut churn, 0.99),
        churn_us_per_change: per_change,
        rss_kib: rss,
        incidents,
        incident_us_p50: percentile(&mut lat.clone(), 0.5),
        incident_us_p99: percentile(&mut lat.clone(), 0.99),
        incident_us_max: lat.iter().copied().fold(0.0, f64::max),
    };
    println!("{}", serde_json::to_string(&figures)?);
    Ok(())
}
