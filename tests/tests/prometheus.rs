//! A real Prometheus (Debian's) scrapes `observer run` with the bearer token, loads the alert
//! rules of deploy/prometheus, and the test reads the series back through Prometheus' own query
//! API: the change counters equal the changes observer printed, `observer_ready` is 1, a
//! critical incident raises `ObserverCriticalIncident`, and every rule evaluates without error.
//! Needs root (the daemon loads its hooks) and prometheus.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use test_support::{free_port, get, skip_unless, Daemon, Netns, Writer};

const TOKEN: &str = "prometheus-test-token";

struct Prometheus {
    child: Child,
    port: u16,
}

impl Prometheus {
    fn start(dir: &Path, observer_port: u16) -> Prometheus {
        let token = dir.join("token");
        std::fs::write(&token, TOKEN).expect("write token");
        let rules = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/prometheus/observer.rules.yml")
            .canonicalize()
            .expect("deploy/prometheus/observer.rules.yml");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {rules}\n\
                 scrape_configs:\n  - job_name: observer\n    authorization:\n      \
                 credentials_file: {token}\n    static_configs:\n      - targets: \
                 ['127.0.0.1:{observer_port}']\n",
                rules = rules.display(),
                token = token.display(),
            ),
        )
        .expect("write prometheus.yml");
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        let p = Prometheus { child, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        while get_ok(port, "/-/ready").is_none() {
            assert!(
                Instant::now() < deadline,
                "prometheus did not become ready within 30 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    /// `/api/v1/<path>`'s `data`.
    fn api(&self, path: &str) -> Value {
        let body = get_ok(self.port, &format!("/api/v1/{path}"))
            .unwrap_or_else(|| panic!("prometheus refused /api/v1/{path}"));
        let v: Value = serde_json::from_str(&body).expect("prometheus API JSON");
        assert_eq!(v["status"], "success", "{v}");
        v["data"].clone()
    }

    /// The value of an instant query that returns one sample, if it returns one.
    fn scalar(&self, promql: &str) -> Option<f64> {
        let q: String = form_urlencoded::byte_serialize(promql.as_bytes()).collect();
        let data = self.api(&format!("query?query={q}"));
        let result = data["result"].as_array()?;
        if result.len() != 1 {
            return None;
        }
        result[0]["value"][1].as_str()?.parse().ok()
    }

    /// Wait until `promql` returns one sample for which `pred` holds; returns it.
    fn wait(&self, promql: &str, pred: impl Fn(f64) -> bool) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v = self.scalar(promql);
            if let Some(v) = v.filter(|v| pred(*v)) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "`{promql}` did not reach the expected value within 30 s (last: {v:?})"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn get_ok(port: u16, path: &str) -> Option<String> {
    std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let (status, body) = get(port, path, &[]);
    (status == 200).then_some(body)
}

#[test]
fn prometheus_scrapes_the_daemon_and_fires_the_critical_incident_alert() {
    skip_unless!("prometheus", "ip", "nft", "iptables-legacy");
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("observer-token");
    std::fs::write(&token, TOKEN).expect("write token");
    let port = free_port();
    let mut d = Daemon::start(
        port,
        &[
            "--no-record",
            "--token-file",
            token.to_str().expect("utf-8"),
        ],
    );
    let prom = Prometheus::start(dir.path(), port);

    // The scrape works (with the token) and the daemon says it is ready.
    prom.wait("up{job=\"observer\"}", |v| v == 1.0);
    prom.wait("observer_ready{job=\"observer\"}", |v| v == 1.0);

    // Changes: the counter Prometheus stores equals the number of change lines observer printed.
    let ns = Netns::new("prom");
    let inode = ns.ino();
    let writer = Writer::new("promwriter");
    for i in 0..5 {
        ns.write(
            &writer,
            &["nft", "add", "table", "inet", &format!("prom{i}")],
        );
    }
    for i in 0..5 {
        d.expect("an nft table", |v| {
            v["netns"].as_u64() == Some(inode) && v["table"] == format!("prom{i}").as_str()
        });
    }
    let printed = |d: &Daemon| {
        d.seen
            .iter()
            .filter(|v| v["kind"] == "change" && v["backend"] == "nft" && v["op"] == "table_create")
            .count() as f64
    };
    // The daemon sees every namespace of the machine: other tests' tables may be counted after
    // the ones read here, so the stored counter must cover the lines read so far, and not pass
    // what the daemon printed by the time it was read.
    let want = printed(&d);
    assert!(want >= 5.0);
    let stored = prom.wait(
        "sum(observer_changes_total{job=\"observer\",backend=\"nft\",op=\"table_create\"})",
        |v| v >= want,
    );
    while let Ok(v) = d.lines.recv_timeout(Duration::from_millis(500)) {
        d.seen.push(v);
    }
    assert!(
        stored <= printed(&d),
        "Prometheus stored {stored} nft table_create changes, observer printed {}",
        printed(&d)
    );

    // A critical incident: kube-proxy's hook into PREROUTING removed by another component.
    let owner = Writer::new("kube-proxy");
    let intruder = Writer::new("calico-node");

    ns.write(
        &owner,
        &["iptables-legacy", "-t", "nat", "-N", "KUBE-SERVICES"],
    );
    ns.write(
        &owner,
        &[
            "iptables-legacy",
            "-t",
            "nat",
            "-A",
            "PREROUTING",
            "-j",
            "KUBE-SERVICES",
        ],
    );
    d.expect("the owner's jump", |v| {
        v["netns"].as_u64() == Some(inode) && v["chain"] == "PREROUTING"
    });
    ns.write(
        &intruder,
        &[
            "iptables-legacy",
            "-t",
            "nat",
            "-D",
            "PREROUTING",
            "-j",
            "KUBE-SERVICES",
        ],
    );
    let inc = test_support::wait_for(&d.lines, &mut d.seen, "an unhooked incident", |v| {
        v["kind"] == "incident" && v["netns"].as_u64() == Some(inode)
    });
    assert_eq!(inc["type"], "unhooked", "{inc}");
    assert_eq!(inc["severity"], "critical", "{inc}");
    let ty = inc["type"].as_str().expect("type").to_string();
    prom.wait(
        &format!(
            "sum(observer_incidents_open{{job=\"observer\",type=\"{ty}\",severity=\"critical\"}})"
        ),
        |v| v >= 1.0,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let alerts = prom.api("alerts");
        let firing = alerts["alerts"].as_array().into_iter().flatten().find(|a| {
            a["labels"]["alertname"] == "ObserverCriticalIncident"
                && a["labels"]["type"] == ty.as_str()
                && a["state"] == "firing"
        });
        if let Some(a) = firing {
            assert_eq!(a["labels"]["severity"], "critical", "{a}");
            assert_eq!(
                a["labels"]["instance"],
                format!("127.0.0.1:{port}").as_str(),
                "{a}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "ObserverCriticalIncident did not fire within 30 s: {alerts}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    // Every rule loaded, and evaluated against the real series without an error; the alerts of a
    // healthy node stay quiet.
    let groups = prom.api("rules");
    let rules: Vec<&Value> = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(rules.len(), 6, "{groups}");
    for r in &rules {
        assert_eq!(r["health"], "ok", "rule evaluated with an error: {r}");
        if r["name"] != "ObserverCriticalIncident" {
            assert_ne!(r["state"], "firing", "a healthy node fires {r}");
        }
    }
    d.stop();
}
