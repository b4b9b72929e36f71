//! Fleet streaming to a JetStream cluster, as production runs NATS: three Debian nats-servers on
//! loopback, joined by routes, each with its own storage, and `observer run --nats` given all
//! three with `--nats-replicas 3`. A burst of changes (one nft transaction of a few thousand
//! rules, then single changes) is made in a namespace of the test's own; in the middle of
//! publishing it, the server that leads the stream is killed (SIGKILL) and later started again
//! on its storage. Then every change the node printed is in the stream exactly once and in the
//! node's order, and a fleet tail (`observer tail --nats`, started before the burst) showed each
//! once (a repaired row late, as it arrives). Needs root (the daemon loads its hooks) and
//! nats-server.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use test_support::{
    free_port, get, json_lines, observer_bin, skip_unless, wait_within, Daemon, Netns, Writer,
};

const STREAM: &str = "OBSERVER";
const NODE: &str = "cluster-node.fleet.test";
/// Rules of the burst's transaction.
const BURST: usize = 3000;
/// Single changes made while the killed server is down, then after it is back.
const DURING: usize = 100;
const AFTER: usize = 20;

/// One server of the cluster.
struct Server {
    name: String,
    port: u16,
    monitor: u16,
    conf: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Server {
    /// Start (again) from its configuration file, on the same ports and storage.
    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the server's log");
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(&self.conf)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
    }

    /// Healthy: JetStream up, in contact with the meta leader, and its streams current.
    fn healthy(&self) -> bool {
        std::net::TcpStream::connect(("127.0.0.1", self.monitor)).is_ok()
            && get(self.monitor, "/healthz", &[]).0 == 200
    }

    /// SIGKILL: no goodbye to the clients or to the other servers.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three nats-servers with JetStream, joined by routes.
struct Cluster {
    servers: Vec<Server>,
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        let ports: Vec<(u16, u16, u16)> = (0..3)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let servers = ports
            .iter()
            .enumerate()
            .map(|(i, &(port, monitor, route))| {
                let name = format!("obs-n{i}");
                let routes: Vec<String> = ports
                    .iter()
                    .filter(|p| p.2 != route)
                    .map(|p| format!("nats-route://127.0.0.1:{}", p.2))
                    .collect();
                let conf = dir.join(format!("{name}.conf"));
                std::fs::write(
                    &conf,
                    format!(
                        "server_name: {name}\n\
                         listen: 127.0.0.1:{port}\n\
                         http: 127.0.0.1:{monitor}\n\
                         jetstream {{ store_dir: {store:?} }}\n\
                         cluster {{ name: observer-test, listen: 127.0.0.1:{route}, \
                         routes: [ {routes} ] }}\n",
                        store = dir.join(&name),
                        routes = routes.join(", "),
                    ),
                )
                .expect("write the server's configuration");
                Server {
                    log: dir.join(format!("{name}.log")),
                    name,
                    port,
                    monitor,
                    conf,
                    child: None,
                }
            })
            .collect();
        let mut c = Cluster { servers };
        for s in &mut c.servers {
            s.start();
        }
        for i in 0..3 {
            c.wait_healthy(i);
        }
        c
    }

    /// Every server's URL, as `--nats` takes a cluster's.
    fn urls(&self) -> String {
        self.servers
            .iter()
            .map(|s| format!("nats://127.0.0.1:{}", s.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn wait_healthy(&self, i: usize) {
        let s = &self.servers[i];
        let deadline = Instant::now() + Duration::from_secs(30);
        while !s.healthy() {
            assert!(
                Instant::now() < deadline,
                "{} did not become healthy within 30 s:\n{}",
                s.name,
                std::fs::read_to_string(&s.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn index(&self, name: &str) -> usize {
        self.servers
            .iter()
            .position(|s| s.name == name)
            .unwrap_or_else(|| panic!("no server named {name}"))
    }
}

/// A JetStream client of the test's own, on a runtime of its own.
struct Client {
    rt: tokio::runtime::Runtime,
    js: async_nats::jetstream::Context,
}

impl Client {
    fn connect(urls: &str) -> Client {
        // A worker of its own: the connection is kept (and reconnects) between requests.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let list: Vec<&str> = urls.split(',').collect();
        let js = rt.block_on(async {
            let client = async_nats::connect(list)
                .await
                .expect("connect to the cluster");
            async_nats::jetstream::new(client)
        });
        Client { rt, js }
    }

    /// The stream's info, when the stream exists and its leader answers.
    fn info(&self) -> Option<async_nats::jetstream::stream::Info> {
        self.rt.block_on(async {
            let mut stream = self.js.get_stream(STREAM).await.ok()?;
            stream.info().await.ok().cloned()
        })
    }

    /// Every message of the stream on `observer.>`: its headers and payload, in stream order.
    fn read_all(&self) -> Vec<test_support::StreamMessage> {
        self.rt
            .block_on(test_support::stream_messages(&self.js, STREAM))
    }
}

/// Wait until `f` gives something, polling; fails after `secs` naming `what`.
fn poll<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "waited {secs} s for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The change lines in `seen`, numbered `seq`, up to `last`.
fn seqs_up_to(seen: &[Value], last: u64) -> Vec<u64> {
    seen.iter()
        .filter(|v| v["kind"] == "change")
        .filter_map(|v| v["seq"].as_u64())
        .filter(|&s| s <= last)
        .collect()
}

#[test]
fn a_burst_reaches_a_three_node_cluster_once_in_order_across_a_leader_kill() {
    skip_unless!("nats-server", "ip", "nft");
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = Cluster::start(dir.path());
    let urls = cluster.urls();
    let client = Client::connect(&urls);

    let record = dir.path().join("node.db");
    let port = free_port();
    let mut daemon = Daemon::publishing(port, &record, &urls, NODE, &["--nats-replicas", "3"]);
    // The stream, as the publisher created it: three replicas.
    let info = poll("stream created by the daemon", 30, || client.info());
    assert_eq!(info.config.num_replicas, 3, "{:?}", info.config);
    let mut tail = test_support::KilledOnDrop(
        Command::new(observer_bin())
            .args(["tail", "--json", "--nats", &urls, "--since", "1h"])
            .args(["--node", NODE])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start observer tail --nats"),
    );
    let tail_lines: mpsc::Receiver<Value> = json_lines(tail.0.stdout.take().expect("stdout"));
    let mut tail_seen = Vec::new();
    let first = wait_within(
        Duration::from_secs(30),
        &tail_lines,
        &mut tail_seen,
        "the fleet tail's ready line",
        |v| v["kind"] == "status",
    );
    assert_eq!(first["state"], "ready", "{first}");

    let ns = Netns::new("cluster");
    let w = Writer::new("clusterwriter");
    // The burst: one transaction, a table, a chain and BURST rules.
    let mut script = String::from("add table inet burst\nadd chain inet burst c\n");
    for i in 0..BURST {
        script.push_str(&format!(
            "add rule inet burst c tcp dport {} accept\n",
            i + 1
        ));
    }
    let held_before = client.info().map_or(0, |i| i.state.messages);
    ns.write_stdin(&w, &["nft", "-f", "-"], &script);

    // In the middle of publishing it: the stream's leader is killed.
    let (leader, held_at_kill) = poll("a third of the burst in the stream", 60, || {
        let i = client.info()?;
        let leader = i.cluster.as_ref()?.leader.clone()?;
        (i.state.messages >= held_before + BURST as u64 / 3).then_some((leader, i.state.messages))
    });
    let killed = cluster.index(&leader);
    cluster.servers[killed].kill();
    let killed_at = started.elapsed();
    assert!(
        held_at_kill < held_before + BURST as u64,
        "the burst was all published ({held_at_kill} messages) before the leader was killed"
    );
    // Changes go on while it is down; the two others elect a new leader.
    for i in 0..DURING {
        ns.write(&w, &["nft", "add", "table", "inet", &format!("during{i}")]);
    }
    let new_leader = poll("a new stream leader", 60, || {
        client.info()?.cluster?.leader.filter(|l| *l != leader)
    });
    // Back on its storage; it catches up with the others.
    let led_at = started.elapsed();
    cluster.servers[killed].start();
    cluster.wait_healthy(killed);
    let back_at = started.elapsed();
    for i in 0..AFTER {
        ns.write(&w, &["nft", "add", "table", "inet", &format!("after{i}")]);
    }

    // What the node printed, up to the last change made here: its stdout is read until that
    // line, so every change before it is in `seen` (lines are printed in seq order).
    let last_table = format!("after{}", AFTER - 1);
    let last = wait_within(
        Duration::from_secs(60),
        &daemon.lines,
        &mut daemon.seen,
        "the last change in the daemon's stdout",
        |v| v["kind"] == "change" && v["table"] == last_table.as_str(),
    );
    let last_seq = last["seq"].as_u64().expect("seq");
    let printed_at = started.elapsed();
    let printed: Vec<Value> = daemon
        .seen
        .iter()
        .filter(|v| v["kind"] == "change")
        .cloned()
        .collect();
    let want: Vec<u64> = printed.iter().filter_map(|v| v["seq"].as_u64()).collect();
    let rules = printed
        .iter()
        .filter(|v| v["netns"].as_u64() == Some(ns.ino()))
        .filter(|v| v["table"] == "burst" && v["op"] == "rule_add")
        .count();
    assert_eq!(
        rules, BURST,
        "the daemon printed {rules} rules of the burst"
    );

    // The stream: once everything up to the last printed change is in, each change exactly
    // once and in the node's order. (The daemon watches every namespace of the machine, so the
    // stream may hold later rows too; they must follow in order.)
    let deadline = Instant::now() + Duration::from_secs(60);
    let mine: Vec<(HashMap<String, String>, Value)> = loop {
        let mine: Vec<_> = client
            .read_all()
            .into_iter()
            .filter(|(subject, headers, _)| {
                subject.ends_with(".change")
                    && headers.get("Observer-Node").map(String::as_str) == Some(NODE)
            })
            .map(|(_, h, v)| (h, v))
            .collect();
        let done = mine
            .iter()
            .any(|(_, v)| v["seq"].as_u64() >= Some(last_seq));
        if done || Instant::now() > deadline {
            break mine;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let all_seqs: Vec<u64> = mine.iter().filter_map(|(_, v)| v["seq"].as_u64()).collect();
    let out_of_order: Vec<&[u64]> = all_seqs.windows(2).filter(|w| w[0] >= w[1]).collect();
    assert!(
        out_of_order.is_empty(),
        "the stream holds changes more than once or out of order ({} of {} messages): {:?}",
        out_of_order.len(),
        all_seqs.len(),
        &out_of_order[..out_of_order.len().min(20)]
    );
    let got: Vec<&(HashMap<String, String>, Value)> = mine
        .iter()
        .filter(|(_, v)| v["seq"].as_u64().is_some_and(|s| s <= last_seq))
        .collect();
    let got_seqs: Vec<u64> = got.iter().filter_map(|(_, v)| v["seq"].as_u64()).collect();
    if got_seqs != want {
        let missing: Vec<&u64> = want.iter().filter(|s| !got_seqs.contains(s)).collect();
        panic!(
            "the stream holds {} of the {} changes printed; missing {} (first: {:?})",
            got_seqs.len(),
            want.len(),
            missing.len(),
            &missing[..missing.len().min(20)]
        );
    }
    for ((headers, payload), printed) in got.iter().zip(&printed) {
        assert_eq!(payload, printed, "the message is not the printed line");
        let seq = payload["seq"].as_u64().expect("seq");
        assert_eq!(headers.get("Observer-Seq"), Some(&seq.to_string()));
    }

    // The fleet tail: each change once, in order, across the leader's death.
    wait_within(
        Duration::from_secs(60),
        &tail_lines,
        &mut tail_seen,
        "the last printed change in the fleet tail",
        |v| v["kind"] == "change" && v["seq"].as_u64() == Some(last_seq),
    );
    // Each once; a row the publisher repaired (lost while later ones were stored, which were
    // deleted and published again) is printed when it arrives, so possibly after rows that
    // follow it.
    let shown = seqs_up_to(&tail_seen, last_seq);
    let tail_at = started.elapsed();
    let mut sorted = shown.clone();
    sorted.sort_unstable();
    if sorted != want {
        let late = shown.windows(2).filter(|w| w[0] >= w[1]).count();
        let again = sorted.windows(2).filter(|w| w[0] == w[1]).count();
        panic!(
            "the fleet tail showed {} changes for the {} printed ({again} again, {late} late)",
            shown.len(),
            want.len()
        );
    }
    let (_, m) = get(port, "/metrics", &[]);
    assert_eq!(
        test_support::metric(&m, "observer_nats_connected", &[]),
        Some(1.0),
        "{m}"
    );
    eprintln!(
        "{} changes; leader {leader} killed at {held_at_kill} messages at {killed_at:.1?}, \
         {new_leader} led at {led_at:.1?}, {leader} healthy again at {back_at:.1?}; the last \
         change printed at {printed_at:.1?}, in the fleet tail at {tail_at:.1?}",
        want.len(),
    );
    drop(tail);
    daemon.stop();
}
