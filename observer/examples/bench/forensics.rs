//! Snapshots in `observer bench-record --snapshots`: a kube-proxy-like nat table of about 21,000
//! rules, the churn that kube-proxy makes on it (endpoints' addresses rewritten, services'
//! balancing rewritten, endpoints replaced: a chain deleted and a new one made, services'
//! chains rewritten whole), generated against the table itself so that every change applies and
//! the table keeps its size, snapshotted at the daemon's default policy (10,000 changes or an
//! hour of the synthetic clock), and `query --at` timed on the result.

use std::sync::Arc;
use std::time::Instant;

use observer::forensics::model::{Chain, Table, Tables};
use observer::forensics::replay::{Recorded, Replay};
use observer::forensics::{Snapshot, SnapshotPolicy};
use observer::ruleset::{Backend, Family, Op};
use observer::sinks::record_writer::Row;

/// Endpoints per service.
const ENDPOINTS: usize = 4;

/// The churn's model and when its next snapshot is due.
pub struct Sim {
    tables: Replay,
    policy: SnapshotPolicy,
    since: (u64, i64),
    pub snapshots: u64,
    /// Each service's chain, and each endpoint slot's current chain.
    svcs: Vec<String>,
    seps: Vec<String>,
    /// Endpoint chains made so far (their names).
    made: u64,
}

/// One change line of a generated transaction.
pub struct Line {
    pub chain: String,
    pub op: Op,
    pub rule: Option<String>,
    pub position: Option<usize>,
    pub detail: Option<String>,
}

impl Line {
    fn new(chain: &str, op: Op, rule: Option<String>, position: Option<usize>) -> Line {
        Line {
            chain: chain.to_string(),
            op,
            rule,
            position,
            detail: None,
        }
    }
}

fn sep_name(n: u64) -> String {
    format!("KUBE-SEP-{:016X}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

fn sep_rule(s: usize, ip: &str) -> String {
    format!("-s {ip}/32 -m comment --comment \"default/svc-{s}:http\" -j KUBE-MARK-MASQ")
}

fn svc_rule(s: usize, sep: &str, probability: f64) -> String {
    format!(
        "-m comment --comment \"default/svc-{s}:http\" -m statistic --mode random --probability {probability:.11} -j {sep}"
    )
}

impl Sim {
    /// A nat table with `services` services: KUBE-SERVICES (one rule each), each service's chain
    /// (4 rules) and 4 endpoint chains of 4 rules.
    pub fn new(services: u64, svc: impl Fn(u64) -> String, start_ns: i64) -> Sim {
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
        let (mut svcs, mut seps) = (Vec::new(), Vec::new());
        for s in 0..services as usize {
            let name = svc(s as u64);
            services_rules.push(format!(
                "-d 10.96.{}.{}/32 -p tcp -m comment --comment \"default/svc-{s}:http cluster IP\" -m tcp --dport 80 -j {name}",
                s / 256,
                s % 256,
            ));
            let mine: Vec<String> = (0..ENDPOINTS)
                .map(|e| sep_name((s * ENDPOINTS + e) as u64))
                .collect();
            t.chains.push(chain(
                name.clone(),
                mine.iter().map(|c| svc_rule(s, c, 0.25)).collect(),
            ));
            for c in &mine {
                t.chains.push(chain(
                    c.clone(),
                    (0..4)
                        .map(|i| sep_rule(s, &format!("10.244.{}.{i}", s % 256)))
                        .collect(),
                ));
            }
            svcs.push(name);
            seps.extend(mine);
        }
        t.chains.push(chain("KUBE-SERVICES".into(), services_rules));
        t.chains[4..].sort_by(|a, b| a.name.cmp(&b.name));
        let made = seps.len() as u64;
        Sim {
            tables: Replay::new(Tables { tables: vec![t] }),
            policy: SnapshotPolicy::default(),
            since: (0, start_ns),
            snapshots: 0,
            svcs,
            seps,
            made,
        }
    }

    /// How many rules the model holds.
    pub fn rules(&self) -> usize {
        self.tables.rule_count()
    }

    fn chain_rules(&self, name: &str) -> &[String] {
        self.tables
            .chain(Family::Ip, "nat", name)
            .map_or(&[], |c| &c.rules)
    }

    /// A rule replaced at its position (`was` in `detail`, as the readers write it).
    fn replace(&self, chain: &str, at: usize, rule: String) -> Option<Line> {
        let was = self.chain_rules(chain).get(at)?.clone();
        let mut l = Line::new(chain, Op::RuleReplace, Some(rule), Some(at));
        l.detail = Some(format!("was: {was}"));
        Some(l)
    }

    /// The next transaction of kube-proxy-like churn, from the random `r`, against the table
    /// as it is (apply it with [`Sim::change`], line by line).
    pub fn next_txn(&mut self, r: u64) -> Vec<Line> {
        let s = (r % self.svcs.len() as u64) as usize;
        let e = ((r >> 20) % ENDPOINTS as u64) as usize;
        let slot = s * ENDPOINTS + e;
        let ip = |k: u64| {
            let x = r.rotate_left(k as u32 * 8);
            format!(
                "10.{}.{}.{}",
                (x >> 16) & 255,
                (x >> 24) & 255,
                (x >> 32) & 255
            )
        };
        let (svc, sep) = (self.svcs[s].clone(), self.seps[slot].clone());
        let out: Option<Vec<Line>> = match r >> 60 {
            // An endpoint's address: one rule of its chain rewritten.
            0..=9 => {
                let at = ((r >> 40) % 4) as usize;
                self.replace(&sep, at, sep_rule(s, &ip(0))).map(|l| vec![l])
            }
            // The service's balancing rewritten.
            10..=12 => {
                let p = 0.1 + ((r >> 44) % 80) as f64 / 100.0;
                self.replace(&svc, e, svc_rule(s, &sep, p)).map(|l| vec![l])
            }
            // The endpoint's pod replaced: its chain emptied and deleted, a new one made and
            // filled, the service's jump pointed at it.
            13 | 14 => {
                let new = sep_name(self.made);
                self.made += 1;
                let old = self.chain_rules(&sep).to_vec();
                let mut out = Vec::new();
                for (at, rule) in old.into_iter().enumerate().rev() {
                    out.push(Line::new(&sep, Op::RuleDelete, Some(rule), Some(at)));
                }
                out.push(Line::new(&sep, Op::ChainDelete, None, None));
                out.push(Line::new(&new, Op::ChainCreate, None, None));
                for at in 0..4 {
                    out.push(Line::new(
                        &new,
                        Op::RuleAdd,
                        Some(sep_rule(s, &ip(at as u64))),
                        Some(at),
                    ));
                }
                out.extend(self.replace(&svc, e, svc_rule(s, &new, 0.25)));
                self.seps[slot] = new;
                Some(out)
            }
            // The service's chain rewritten whole: flushed, then filled again.
            _ => {
                let n = self.chain_rules(&svc).len();
                let mut flush = Line::new(&svc, Op::ChainFlush, None, None);
                flush.detail = Some(format!("{n} rules"));
                let mut out = vec![flush];
                for (at, c) in self.seps[s * ENDPOINTS..(s + 1) * ENDPOINTS]
                    .iter()
                    .enumerate()
                {
                    let p = 1.0 / (ENDPOINTS - at) as f64;
                    out.push(Line::new(
                        &svc,
                        Op::RuleAdd,
                        Some(svc_rule(s, c, p)),
                        Some(at),
                    ));
                }
                Some(out)
            }
        };
        out.unwrap_or_default()
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
            tables: Arc::new(self.tables.snapshot(true)),
        })
    }

    /// Replay one change line; a snapshot row when one is due after it.
    pub fn change(&mut self, seq: u64, time_ns: i64, json: &str) -> Option<Row> {
        if let Ok(c) = serde_json::from_str::<Recorded>(json) {
            self.tables.apply_txn(&[c]);
        }
        self.since.0 += 1;
        let due = self.since.0 >= self.policy.changes
            || time_ns - self.since.1 >= self.policy.every.as_nanos() as i64;
        due.then(|| self.snapshot(seq, time_ns))
    }
}

/// `query --at` timed in process on a record (ms, median of 5), at `at_ns` and just before its
/// newest snapshot (the most changes to replay), with the snapshots' share of the file.
pub fn measure(path: &std::path::Path, at_ns: i64) -> anyhow::Result<serde_json::Value> {
    let ro = observer::store::open_ro(path)?;
    let time = |at_ns: i64| -> anyhow::Result<(f64, usize, usize)> {
        let mut times = Vec::new();
        let (mut rules, mut replayed) = (0, 0);
        for _ in 0..5 {
            let t0 = Instant::now();
            let (_, states) = observer::forensics::query::at(
                &ro,
                at_ns,
                &observer::forensics::query::Scope::default(),
            )?;
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
        Ok((times[times.len() / 2], rules, replayed))
    };
    let size = |sql: &str| -> rusqlite::Result<i64> { ro.query_row(sql, [], |r| r.get(0)) };
    let has = observer::forensics::snapshots::has_snapshots(&ro)?;
    let (snap_bytes, newest) = if has {
        (
            size("SELECT COALESCE(SUM(length(body)), 0) FROM snapshots")?
                + size("SELECT COALESCE(SUM(length(body)), 0) FROM snap_chains")?
                + size("SELECT COALESCE(SUM(length(dict)), 0) FROM snap_dicts")?
                + size("SELECT COALESCE(SUM(length(body)), 0) FROM snap_frames")?,
            size("SELECT COALESCE(MAX(time_ns), 0) FROM snapshots")?,
        )
    } else {
        (0, 0)
    };
    let change_bytes = size("SELECT COALESCE(SUM(length(body)), 0) FROM changes")?;
    let (at_ms, at_rules, at_replayed) = time(at_ns)?;
    let (worst_ms, _, worst_replayed) = if newest > 0 {
        time(newest - 1)?
    } else {
        (at_ms, at_rules, at_replayed)
    };
    Ok(serde_json::json!({
        "at_ms": at_ms,
        "at_rules": at_rules,
        "at_replayed": at_replayed,
        "worst_ms": worst_ms,
        "worst_replayed": worst_replayed,
        "snapshot_bytes": snap_bytes,
        "change_bytes": change_bytes,
    }))
}
