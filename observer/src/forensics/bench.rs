//! Snapshots in `observer bench-record --snapshots`: a kube-proxy-like nat table of about 21,000
//! rules that the synthetic churn is replayed onto, snapshotted at the daemon's default policy
//! (10,000 changes or an hour of the synthetic clock), and `query --at` timed on the result.

use std::sync::Arc;
use std::time::Instant;

use super::model::{Chain, Table, Tables};
use super::replay::{apply_txn, Recorded};
use super::{Snapshot, SnapshotPolicy};
use crate::ruleset::{Backend, Family};
use crate::store::Row;

/// The churn's model and when its next snapshot is due.
pub struct Sim {
    tables: Tables,
    policy: SnapshotPolicy,
    since: (u64, i64),
    pub snapshots: u64,
}

impl Sim {
    /// A nat table with `services` services: KUBE-SERVICES (one rule each), each service's chain
    /// (4 rules) and 4 endpoint chains of 4 rules, named by `svc` and `sep`.
    pub fn new(
        services: u64,
        svc: impl Fn(u64) -> String,
        sep: impl Fn(u64) -> String,
        start_ns: i64,
    ) -> Sim {
        let mut t = Table::new(Family::Ip, "nat");
        let chain = |name: String, rules: Vec<String>| Chain {
            name,
            head: None,
            rules,
            last: None,
        };
        for b in ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"] {
            t.chains.push(Chain {
                head: Some("ACCEPT".into()),
                ..chain(b.into(), vec!["-j KUBE-SERVICES".into()])
            });
        }
        let mut services_rules = Vec::new();
        for s in 0..services {
            services_rules.push(format!(
                "-d 10.96.{}.{}/32 -p tcp -m comment --comment \"default/svc-{s}:http cluster IP\" -m tcp --dport 80 -j {}",
                s / 256,
                s % 256,
                svc(s)
            ));
            let seps: Vec<String> = (0..4).map(|e| sep(s * 4 + e)).collect();
            t.chains.push(chain(
                svc(s),
                seps.iter()
                    .map(|c| format!("-m comment --comment \"default/svc-{s}:http\" -m statistic --mode random --probability 0.25000000000 -j {c}"))
                    .collect(),
            ));
            for c in seps {
                t.chains.push(chain(
                    c,
                    (0..4)
                        .map(|i| format!("-s 10.244.{}.{i}/32 -m comment --comment \"default/svc-{s}:http\" -j KUBE-MARK-MASQ", s % 256))
                        .collect(),
                ));
            }
        }
        t.chains.push(chain("KUBE-SERVICES".into(), services_rules));
        t.chains[4..].sort_by(|a, b| a.name.cmp(&b.name));
        Sim {
            tables: Tables { tables: vec![t] },
            policy: SnapshotPolicy::default(),
            since: (0, start_ns),
            snapshots: 0,
        }
    }

    /// How many rules the model holds.
    pub fn rules(&self) -> usize {
        self.tables.tables[0]
            .chains
            .iter()
            .map(|c| c.rules.len())
            .sum()
    }

    /// The snapshot row of the model after change `seq`.
    pub fn snapshot(&mut self, seq: u64, time_ns: i64) -> Row {
        self.since = (0, time_ns);
        self.snapshots += 1;
        Row::Snapshot(Snapshot {
            seq,
            time_ns,
            netns: 4026531840,
            netns_name: None,
            backend: Backend::Legacy,
            tables: Arc::new(self.tables.clone()),
        })
    }

    /// Replay one change line; a snapshot row when one is due after it.
    pub fn change(&mut self, seq: u64, time_ns: i64, json: &str) -> Option<Row> {
        if let Ok(c) = serde_json::from_str::<Recorded>(json) {
            apply_txn(&mut self.tables, &[c]);
        }
        self.since.0 += 1;
        let due = self.since.0 >= self.policy.changes
            || time_ns - self.since.1 >= self.policy.every.as_nanos() as i64;
        due.then(|| self.snapshot(seq, time_ns))
    }
}

/// `query --at` timed in process on a record (ms, median of 5), with the snapshots' share of
/// the file.
pub fn measure(path: &std::path::Path, at_ns: i64) -> anyhow::Result<serde_json::Value> {
    let ro = crate::store::open_ro(path)?;
    let mut times = Vec::new();
    let mut rules = 0;
    let mut replayed = 0;
    for _ in 0..5 {
        let t0 = Instant::now();
        let (_, states) = super::query::at(&ro, at_ns, &super::query::Scope::default())?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        rules = states
            .iter()
            .flat_map(|s| &s.tables.tables)
            .flat_map(|t| &t.chains)
            .map(|c| c.rules.len())
            .sum::<usize>();
        replayed = states.iter().map(|s| s.replayed).sum::<usize>();
    }
    times.sort_by(f64::total_cmp);
    let size = |sql: &str| -> rusqlite::Result<i64> { ro.query_row(sql, [], |r| r.get(0)) };
    let snap_bytes = size("SELECT COALESCE(SUM(length(body)), 0) FROM snapshots")?
        + size("SELECT COALESCE(SUM(length(body)), 0) FROM snap_chains")?;
    let change_bytes = size("SELECT COALESCE(SUM(length(body)), 0) FROM changes")?;
    Ok(serde_json::json!({
        "at_ms": times[times.len() / 2],
        "at_rules": rules,
        "at_replayed": replayed,
        "snapshot_bytes": snap_bytes,
        "change_bytes": change_bytes,
    }))
}
