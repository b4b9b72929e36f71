//! Fleet streaming through Debian's nats-server with JetStream, started by the test in a
//! temporary directory: two `observer run --nats` (two nodes, each with its own record and
//! node name, each writing in a namespace of its own) publish while `observer tail --nats
//! --durable` follows the fleet. The server is killed (SIGKILL) in the middle and started again
//! on the same storage while changes go on. Then, read straight from the stream with a JetStream
//! client: every change each node printed is in the stream exactly once, in that node's order,
//! with the message id and headers of the contract; and the fleet tail showed each of them, in
//! order, with its node. A tail started later from history says how much it has to print and
//! when it caught up. A second test puts a proxy between a node and the server that loses one
//! publish and one acknowledgement: the stream still holds every change once, in order. A third
//! fills the record's file system: the stream still holds what the record could not take. Needs
//! root (the daemons load their hooks) and nats-server.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use test_support::{
    fill, free_port, get, json_lines, legacy_rules, metric, observer_bin, query, skip_unless,
    wait_for, Daemon, Netns, SmallFs, Writer,
};

struct NatsServer {
    child: Option<Child>,
    port: u16,
    monitor: u16,
    dir: PathBuf,
}

impl NatsServer {
    fn start(dir: &Path) -> NatsServer {
        let mut s = NatsServer {
            child: None,
            port: free_port(),
            monitor: free_port(),
            dir: dir.to_path_buf(),
        };
        s.restart();
        s
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Start (again) on the same port and storage; wait until JetStream is healthy.
    fn restart(&mut self) {
        let child = Command::new("nats-server")
            .args(["--jetstream", "--addr", "127.0.0.1"])
            .args(["--port", &self.port.to_string()])
            .args(["--http_port", &self.monitor.to_string()])
            .arg("--store_dir")
            .arg(self.dir.join("jetstream"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let healthy = std::net::TcpStream::connect(("127.0.0.1", self.monitor)).is_ok()
                && get(self.monitor, "/healthz?js-enabled-only=true", &[]).0 == 200;
            if healthy {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nats-server did not become healthy within 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILL: no goodbye to the clients, messages in flight are lost.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `observer tail --nats URL --json ARGS`, its lines on a channel.
struct FleetTail {
    child: Child,
    lines: mpsc::Receiver<Value>,
    seen: Vec<Value>,
}

impl FleetTail {
    fn start(url: &str, args: &[&str]) -> FleetTail {
        let mut child = Command::new(observer_bin())
            .args(["tail", "--nats", url, "--json"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start observer tail --nats");
        let lines = json_lines(child.stdout.take().expect("stdout"));
        let mut t = FleetTail {
            child,
            lines,
            seen: Vec::new(),
        };
        let first = wait_for(&t.lines, &mut t.seen, "the fleet tail's ready line", |v| {
            v["kind"] == "status"
        });
        assert_eq!(first["state"], "ready", "{first}");
        t
    }
}

impl Drop for FleetTail {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Make `n` changes (tables `<prefix>0..`) in `ns`, each one nft transaction.
fn changes(ns: &Netns, writer: &Writer, prefix: &str, n: usize) {
    for i in 0..n {
        ns.write(
            writer,
            &["nft", "add", "table", "inet", &format!("{prefix}{i}")],
        );
    }
}

/// Every change line a daemon printed, in order, once its last expected table is there.
fn printed_changes(d: &mut Daemon, last_table: &str) -> Vec<Value> {
    d.expect(last_table, |v| v["table"] == last_table);
    d.seen
        .iter()
        .filter(|v| v["kind"] == "change")
        .cloned()
        .collect()
}

/// A message of the stream: its headers and its payload.
type Message = (HashMap<String, String>, Value);

/// Every message in the stream: (subject, headers, payload), read with a JetStream client.
fn read_stream(url: &str) -> Vec<test_support::StreamMessage> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = async_nats::connect(url).await.expect("connect to nats");
        let js = async_nats::jetstream::new(client);
        test_support::stream_messages(&js, "OBSERVER").await
    })
}

/// The tests of this file run one at a time: each picks free ports for its servers and
/// proxies, and one test's new listener must not take a port another has picked but not yet
/// bound (a server restarted after its crash binds its ports again).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn two_nodes_publish_every_change_once_in_order_across_a_server_crash() {
    skip_unless!("nats-server", "ip", "nft");
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let mut nats = NatsServer::start(dir.path());
    let url = nats.url();
    let nodes = ["node-a.fleet.test", "node-b.fleet.test"];
    let ports: Vec<u16> = nodes.iter().map(|_| free_port()).collect();
    let mut daemons: Vec<Daemon> = nodes
        .iter()
        .zip(&ports)
        .map(|(node, &port)| {
            let record = dir.path().join(format!("{node}.db"));
            Daemon::publishing(port, &record, &url, node, &[])
        })
        .collect();
    let namespaces: Vec<Netns> = ["fleet-a", "fleet-b"]
        .iter()
        .map(|t| Netns::new(t))
        .collect();
    let writers: Vec<Writer> = ["fleetwriter-a", "fleetwriter-b"]
        .iter()
        .map(|w| Writer::new(w))
        .collect();
    let mut tail = FleetTail::start(&url, &["--durable", "fleet-test", "--since", "1h"]);

    // Before, during and after the server's crash: 15 changes per node each time.
    let round = |r: &str| {
        for (i, ns) in namespaces.iter().enumerate() {
            changes(ns, &writers[i], &format!("n{i}{r}"), 15);
        }
    };
    // Killed while the publishers are busy with this round: some publishes are in flight.
    round("before");
    nats.kill();
    round("during");
    // The daemons keep running, and keep recording, without the server; the outage outlasts
    // the publishers' 5 s acknowledgement timeout, so they reconnect and ask the stream where to
    // resume.
    for d in &mut daemons {
        d.expect("a change made while the server is down", |v| {
            v["table"] == "n1during14"
        });
    }
    std::thread::sleep(Duration::from_secs(7));
    // What waits is in sight: at least the round made during the outage, its oldest row
    // recorded seconds ago.
    for (node, &port) in nodes.iter().zip(&ports) {
        let (_, m) = get(port, "/metrics", &[]);
        let rows = test_support::metric(&m, "observer_nats_backlog_rows", &[]).unwrap_or(0.0);
        let age =
            test_support::metric(&m, "observer_nats_backlog_oldest_seconds", &[]).unwrap_or(0.0);
        assert!(
            rows >= 30.0 && age >= 4.0,
            "{node}'s backlog during the outage: {rows} rows, the oldest {age} s old:\n{m}"
        );
    }
    nats.restart();
    round("after");

    // What each node printed: each saw both namespaces (one kernel), in its own numbering.
    let printed: Vec<Vec<Value>> = daemons
        .iter_mut()
        .map(|d| printed_changes(d, "n1after14"))
        .collect();
    for (node, p) in nodes.iter().zip(&printed) {
        assert!(
            p.len() >= 90,
            "{node} printed {} changes, expected at least the 90 made",
            p.len()
        );
    }

    // The stream: every printed change of each node, once, in its order. A daemon watches
    // every namespace of the machine, so the stream may already hold rows past the last one read
    // here (other tests' changes, recorded and published before their stdout lines are read):
    // what is compared is the stream up to the last printed seq, and the rest must follow it in
    // order.
    let last_printed: Vec<u64> = printed
        .iter()
        .map(|p| p.last().and_then(|v| v["seq"].as_u64()).expect("a change"))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let by_node = loop {
        let msgs = read_stream(&url);
        let mut by_node: HashMap<String, Vec<Message>> = HashMap::new();
        for (subject, headers, payload) in msgs {
            if subject.ends_with(".change") {
                let node = headers.get("Observer-Node").cloned().unwrap_or_default();
                by_node.entry(node).or_default().push((headers, payload));
            }
        }
        let complete = nodes.iter().zip(&last_printed).all(|(node, last)| {
            by_node
                .get(*node)
                .is_some_and(|m| m.iter().any(|(_, v)| v["seq"].as_u64() >= Some(*last)))
        });
        if complete || Instant::now() > deadline {
            break by_node;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    for ((node, p), last) in nodes.iter().zip(&printed).zip(&last_printed) {
        let all = by_node.get(*node).map(Vec::as_slice).unwrap_or_default();
        let all_seqs: Vec<u64> = all.iter().filter_map(|(_, v)| v["seq"].as_u64()).collect();
        assert!(
            all_seqs.windows(2).all(|w| w[0] < w[1]),
            "{node}: the stream's seqs are not each once and increasing: {all_seqs:?}"
        );
        let got: Vec<&Message> = all
            .iter()
            .filter(|(_, v)| v["seq"].as_u64().is_some_and(|s| s <= *last))
            .collect();
        let want_seqs: Vec<u64> = p.iter().filter_map(|v| v["seq"].as_u64()).collect();
        let got_seqs: Vec<u64> = got.iter().filter_map(|(_, v)| v["seq"].as_u64()).collect();
        assert_eq!(
            got_seqs, want_seqs,
            "{node}: the stream does not hold each printed change exactly once, in order"
        );
        for ((headers, payload), printed) in got.into_iter().zip(p) {
            assert_eq!(
                payload, printed,
                "{node}: the message is not the printed line"
            );
            let seq = payload["seq"].as_u64().expect("seq");
            assert_eq!(headers.get("Observer-Seq"), Some(&seq.to_string()));
            let record = headers.get("Observer-Record").expect("Observer-Record");
            assert_eq!(
                headers.get("Nats-Msg-Id"),
                Some(&format!("{node}.{record}.c{seq}")),
                "{node}: message id"
            );
        }
        let subject_token = node.replace('.', "_");
        assert!(!subject_token.contains('.'));
    }

    // The fleet tail: each node's changes, named, in order, across the crash (up to the last
    // one printed here; later ones may be other tests').
    for (node, last) in nodes.iter().zip(&last_printed) {
        wait_for(
            &tail.lines,
            &mut tail.seen,
            &format!("{node}'s last change in the fleet tail"),
            |v| v["kind"] == "change" && v["node"] == *node && v["seq"].as_u64() == Some(*last),
        );
    }
    for ((node, p), last) in nodes.iter().zip(&printed).zip(&last_printed) {
        let shown: Vec<u64> = tail
            .seen
            .iter()
            .filter(|v| v["kind"] == "change" && v["node"] == *node)
            .filter_map(|v| v["seq"].as_u64())
            .filter(|s| s <= last)
            .collect();
        let want: Vec<u64> = p.iter().filter_map(|v| v["seq"].as_u64()).collect();
        assert_eq!(shown, want, "{node}: the fleet tail's changes");
    }

    // A node restarted on its record resumes after the last row the stream holds: it publishes
    // only the changes made since (a publisher starting over would publish the whole record
    // again, which the server's duplicate window would hide from the stream but not from this
    // count).
    let node_a = daemons.remove(0);
    node_a.stop();
    let record = dir.path().join(format!("{}.db", nodes[0]));
    let port = free_port();
    let mut node_a = Daemon::publishing(port, &record, &url, nodes[0], &[]);
    changes(&namespaces[0], &writers[0], "restarted", 5);
    let last = node_a.expect("the last change after the restart", |v| {
        v["table"] == "restarted4"
    });
    let changes_printed = |d: &Daemon| d.seen.iter().filter(|v| v["kind"] == "change").count();
    let new_rows = changes_printed(&node_a);
    assert!(new_rows >= 5, "{new_rows}");
    let last_seq = last["seq"].as_u64().expect("seq");
    assert!(
        last_seq > printed[0].len() as u64,
        "the numbering goes on after a restart"
    );
    wait_for(
        &tail.lines,
        &mut tail.seen,
        "the restarted node's last change",
        |v| v["node"] == nodes[0] && v["seq"].as_u64() == Some(last_seq),
    );
    // The counter moves when the acknowledgement is handled, which may come just after the fleet
    // tail got the message: it is read until it covers the new rows. Other tests' changes may go
    // on meanwhile, so the lines printed by then (recorded, so published or about to be) are
    // collected after it. Published again from the start, the record would add every one of the
    // changes printed before the restart.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (published, m) = loop {
        let (_, m) = get(port, "/metrics", &[]);
        let published =
            test_support::metric(&m, "observer_nats_published_total", &[("kind", "change")])
                .unwrap_or(0.0) as usize;
        if published >= new_rows || Instant::now() > deadline {
            break (published, m);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    while node_a
        .lines
        .recv_timeout(Duration::from_millis(500))
        .map(|v| node_a.seen.push(v))
        .is_ok()
    {}
    let printed_since = changes_printed(&node_a);
    assert!(
        (new_rows..=printed_since).contains(&published),
        "after a restart the node published {published} changes, not its new ones \
         ({new_rows} to {printed_since} printed):\n{m}"
    );
    // Everything acknowledged: the backlog comes back to nothing.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, m) = get(port, "/metrics", &[]);
        let rows = test_support::metric(&m, "observer_nats_backlog_rows", &[]);
        let age = test_support::metric(&m, "observer_nats_backlog_oldest_seconds", &[]);
        if rows == Some(0.0) && age == Some(0.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the backlog stays at {rows:?} rows ({age:?} s) once everything is published:\n{m}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    node_a.stop();
    for d in daemons {
        d.stop();
    }

    // A tail started from history says how much there is, prints it, then says it caught up.
    let held = read_stream(&url).len();
    assert!(held >= 95, "the stream holds {held} messages");
    let mut late = FleetTail::start(&url, &["--since", "1h"]);
    let first = &late.seen[0];
    let said = first["message"].as_str().unwrap_or_default();
    assert!(
        said.contains(&format!(
            ": {held} messages of history to print before the live ones"
        )),
        "the first line of a tail from history: {first}"
    );
    let caught = wait_for(
        &late.lines,
        &mut late.seen,
        "the tail from history's line saying it caught up",
        |v| {
            v["kind"] == "status"
                && v["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("caught up"))
        },
    );
    assert!(
        caught["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("caught up: {held} messages of history printed"))),
        "{caught}"
    );
    let before = late
        .seen
        .iter()
        .take_while(|v| {
            v["kind"] != "status"
                || !v["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("caught up"))
        })
        .filter(|v| v["kind"] == "change" || v["kind"] == "incident")
        .count();
    assert_eq!(
        before, held,
        "lines printed before the tail said it caught up"
    );
}

/// What the lossy proxy loses: the `pub_at`-th publish of a change (counted from 1) and the
/// `ack_at`-th JetStream acknowledgement, each once; and what it lost. It holds the
/// `hold_at`-th publish of a change back, keeps its connection to the server open when the
/// client closes its side, and sends it there, late, when the next connection publishes its
/// first change (before passing that on).
#[derive(Default)]
struct Losses {
    pub_at: usize,
    ack_at: usize,
    hold_at: usize,
    pubs: usize,
    acks: usize,
    lost_seq: Option<String>,
    lost_ack: Option<String>,
    held: Option<Held>,
    /// The row of the publish held back, once it was sent late.
    late_seq: Option<String>,
    /// Cut the connection at its first publish of a change after a message delete (that
    /// publish lost with it): the session ends right after its repair deleted the subject's
    /// last messages, before it stored anything after them.
    cut_after_delete: bool,
    /// The connection that asked for a delete, and the row whose publish the cut lost.
    deleted_on: Option<usize>,
    cut_seq: Option<String>,
}

/// A publish held back: from which connection, the frame, and that connection's server side.
struct Held {
    conn: usize,
    frame: Vec<u8>,
    server: std::net::TcpStream,
}

/// A row number the proxy noted (`field` of its record), once it has.
fn recorded_seq(
    losses: &std::sync::Mutex<Losses>,
    field: impl Fn(&Losses) -> &Option<String>,
    what: &str,
) -> u64 {
    let l = losses.lock().expect("losses");
    field(&l)
        .as_deref()
        .unwrap_or_else(|| panic!("{what}: no row noted"))
        .parse()
        .expect("Observer-Seq is a number")
}

/// The `Observer-Seq` header's value in a publish's payload.
fn observer_seq(payload: &[u8]) -> Option<String> {
    String::from_utf8_lossy(payload)
        .lines()
        .find_map(|h| h.strip_prefix("Observer-Seq: "))
        .map(|s| s.trim().to_string())
}

/// A TCP proxy to the NATS server at `upstream` that speaks enough of the protocol to lose or
/// delay whole messages: publishes from the client (`HPUB`) and acknowledgements from the server
/// (`MSG`/`HMSG` whose payload is a JetStream ack), as `losses` says. Returns its port.
fn lossy_proxy(upstream: u16, losses: std::sync::Arc<std::sync::Mutex<Losses>>) -> u16 {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
    let port = listener.local_addr().expect("proxy address").port();
    // One direction, until either side closes: frames (a protocol line, and its payload when it
    // has one) passed on whole, or left out when `lose` says so.
    fn pump(mut from: TcpStream, mut to: TcpStream, lose: impl Fn(&[u8], &[u8]) -> bool) {
        let mut buf: Vec<u8> = Vec::new();
        let mut chunk = [0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            while let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") {
                let line = &buf[..eol];
                let with_payload = [&b"PUB "[..], b"HPUB ", b"MSG ", b"HMSG "]
                    .iter()
                    .any(|p| line.starts_with(p));
                let size = if with_payload {
                    let last = line.rsplit(|b| *b == b' ').next().unwrap_or_default();
                    std::str::from_utf8(last)
                        .ok()
                        .and_then(|s| s.parse::<usize>().ok())
                        .map(|n| n + 2)
                        .unwrap_or(0)
                } else {
                    0
                };
                let frame = eol + 2 + size;
                if buf.len() < frame {
                    break;
                }
                if !lose(line, &buf[eol + 2..frame]) && to.write_all(&buf[..frame]).is_err() {
                    return;
                }
                buf.drain(..frame);
            }
        }
    }
    let shut = |s: &TcpStream| {
        let _ = s.shutdown(std::net::Shutdown::Both);
    };
    std::thread::spawn(move || {
        for (conn, client) in listener.incoming().enumerate() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let clone = |s: &TcpStream| s.try_clone().expect("clone");
            let (c2, s2, s3) = (clone(&client), clone(&server), clone(&server));
            let up = losses.clone();
            std::thread::spawn(move || {
                let frame_of =
                    |line: &[u8], payload: &[u8]| [line, b"\r\n", payload, b"\r\n"].concat();
                let (cut_c, cut_s) = (clone(&client), clone(&server));
                pump(client, clone(&server), |line, payload| {
                    if line.starts_with(b"PUB $JS.API.STREAM.MSG.DELETE.") {
                        up.lock().expect("losses").deleted_on = Some(conn);
                        return false;
                    }
                    if !(line.starts_with(b"HPUB observer.")
                        && line
                            .split(|b| *b == b' ')
                            .nth(1)
                            .is_some_and(|s| s.ends_with(b".change")))
                    {
                        return false;
                    }
                    let mut l = up.lock().expect("losses");
                    if l.cut_after_delete && l.deleted_on == Some(conn) && l.cut_seq.is_none() {
                        l.cut_seq = observer_seq(payload);
                        shut(&cut_s);
                        shut(&cut_c);
                        return true;
                    }
                    if l.held.as_ref().is_some_and(|h| h.conn != conn) {
                        // The next connection's first change: the held one goes first, on
                        // its own connection, and is stored before this one is passed on.
                        let mut h = l.held.take().expect("held");
                        h.server.write_all(&h.frame).expect("send the held publish");
                        std::thread::sleep(Duration::from_millis(500));
                        shut(&h.server);
                        l.late_seq = observer_seq(&h.frame);
                    }
                    l.pubs += 1;
                    if l.pubs == l.hold_at && l.held.is_none() && l.late_seq.is_none() {
                        l.held = Some(Held {
                            conn,
                            frame: frame_of(line, payload),
                            server: clone(&server),
                        });
                        return true;
                    }
                    if l.pubs != l.pub_at || l.lost_seq.is_some() {
                        return false;
                    }
                    l.lost_seq = observer_seq(payload);
                    true
                });
                // The client closed its side: so does the proxy, unless a publish of this
                // connection is held back, to be sent on it later.
                if up
                    .lock()
                    .expect("losses")
                    .held
                    .as_ref()
                    .is_none_or(|h| h.conn != conn)
                {
                    shut(&s3);
                }
            });
            let down = losses.clone();
            std::thread::spawn(move || {
                let to = c2.try_clone().expect("clone");
                pump(s2, to, |line, payload| {
                    let is_ack = (line.starts_with(b"MSG ") || line.starts_with(b"HMSG "))
                        && payload.starts_with(b"{\"stream\":")
                        && payload.windows(6).any(|w| w == b"\"seq\":");
                    if !is_ack {
                        return false;
                    }
                    let mut l = down.lock().expect("losses");
                    l.acks += 1;
                    if l.acks != l.ack_at || l.lost_ack.is_some() {
                        return false;
                    }
                    l.lost_ack = Some(String::from_utf8_lossy(payload).trim().to_string());
                    true
                });
                shut(&c2);
            });
        }
    });
    port
}

/// `n` changes (tables `<prefix>0..`) in `ns` in one nft transaction: one commit of the
/// record, read and published together.
fn changes_at_once(ns: &Netns, writer: &Writer, dir: &Path, prefix: &str, n: usize) {
    let file = dir.join(format!("{prefix}.nft"));
    let text: String = (0..n)
        .map(|i| format!("add table inet {prefix}{i}\n"))
        .collect();
    std::fs::write(&file, text).expect("write the nft file");
    ns.write(writer, &["nft", "-f", file.to_str().expect("utf-8")]);
}

/// The seqs of the changes `d` printed, once its table `last_table` is there.
fn printed_seqs(d: &mut Daemon, last_table: &str) -> Vec<u64> {
    printed_changes(d, last_table)
        .iter()
        .filter_map(|v| v["seq"].as_u64())
        .collect()
}

/// The change messages of `node` in the stream, in stream order, once it holds every row of
/// `want` and its rows only go up (a repair is done), or after 60 s.
fn node_changes(url: &str, node: &str, want: &[u64]) -> Vec<test_support::StreamMessage> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mine: Vec<test_support::StreamMessage> = read_stream(url)
            .into_iter()
            .filter(|(s, h, _)| {
                s.ends_with(".change") && h.get("Observer-Node").is_some_and(|n| n == node)
            })
            .collect();
        let seqs: Vec<u64> = mine
            .iter()
            .filter_map(|(_, _, v)| v["seq"].as_u64())
            .collect();
        let held: std::collections::HashSet<u64> = seqs.iter().copied().collect();
        let settled = want.iter().all(|s| held.contains(s)) && seqs.windows(2).all(|w| w[0] < w[1]);
        if settled || Instant::now() > deadline {
            return mine;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `mine` holds the rows of `want` once each, in order, and nothing in it repeats or goes back.
fn assert_once_in_order(want: &[u64], mine: &[test_support::StreamMessage]) {
    let seqs: Vec<u64> = mine
        .iter()
        .filter_map(|(_, _, v)| v["seq"].as_u64())
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "the stream's seqs are not each once and increasing: {seqs:?}"
    );
    let last = want.last().copied().unwrap_or(0);
    let got: Vec<u64> = seqs.iter().copied().filter(|s| *s <= last).collect();
    if got != want {
        let held: std::collections::HashSet<u64> = got.iter().copied().collect();
        let printed: std::collections::HashSet<u64> = want.iter().copied().collect();
        let missing: Vec<u64> = want.iter().copied().filter(|s| !held.contains(s)).collect();
        let extra: Vec<u64> = got
            .iter()
            .copied()
            .filter(|s| !printed.contains(s))
            .collect();
        panic!(
            "the stream does not hold each printed change once, in order: {} of {} printed \
             missing (first {:?}, last {:?}), {} not printed ({:?}...)",
            missing.len(),
            want.len(),
            missing.first(),
            missing.last(),
            extra.len(),
            &extra[..extra.len().min(5)]
        );
    }
}

/// A publish the server never got while later ones were stored (a hole), then an
/// acknowledgement the publisher never got (the row is stored; the publisher does not know):
/// after each, the session ends on the acknowledgement's timeout and the next one reconciles
/// the stream with the record. Every change the node printed is then in the stream exactly
/// once, in order: the rows stored after the hole were deleted and the lost row and those after
/// it published again, with fresh message ids (the server's duplicate window remembers the
/// deleted ones); the row whose acknowledgement was lost was not published twice. Then a
/// publish of an earlier session stored late, and a repair whose session dies right after its
/// deletes: the same holds after each.
#[test]
fn a_lost_publish_and_a_lost_ack_neither_drop_nor_duplicate_nor_reorder() {
    skip_unless!("nats-server", "ip", "nft");
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let nats = NatsServer::start(dir.path());
    let losses = std::sync::Arc::new(std::sync::Mutex::new(Losses {
        pub_at: 10,
        ..Default::default()
    }));
    let proxy = lossy_proxy(nats.port, losses.clone());
    let node = "lossy.fleet.test";
    let record = dir.path().join("lossy.db");
    let port = free_port();
    let mut daemon = Daemon::publishing(
        port,
        &record,
        &format!("nats://127.0.0.1:{proxy}"),
        node,
        &[],
    );
    let ns = Netns::new("lossy");
    let writer = Writer::new("lossywriter");
    let url = nats.url();

    // 1. A hole: the 10th row's publish is lost, the 30 after it (same commit, same window)
    // are stored.
    changes_at_once(&ns, &writer, dir.path(), "hole", 40);
    let want = printed_seqs(&mut daemon, "hole39");
    let mine = node_changes(&url, node, &want);
    let lost_seq = recorded_seq(&losses, |l| &l.lost_seq, "the proxy lost a publish");
    assert_once_in_order(&want, &mine);
    let id = |seq: u64| {
        mine.iter()
            .find(|(_, _, v)| v["seq"].as_u64() == Some(seq))
            .and_then(|(_, h, _)| h.get("Nats-Msg-Id").cloned())
            .unwrap_or_default()
    };
    let record_id = mine[0]
        .1
        .get("Observer-Record")
        .cloned()
        .unwrap_or_default();
    for seq in [lost_seq, want.last().copied().unwrap_or(0)] {
        assert!(
            id(seq).starts_with(&format!("{node}.{record_id}.c{seq}.r")),
            "row {seq}, from the lost one on, was published again with a fresh id: {}",
            id(seq)
        );
    }

    // 2. A lost acknowledgement: the fifth from now.
    {
        let mut l = losses.lock().expect("losses");
        l.ack_at = l.acks + 5;
    }
    changes_at_once(&ns, &writer, dir.path(), "ack", 40);
    let want = printed_seqs(&mut daemon, "ack39");
    let mine = node_changes(&url, node, &want);
    assert!(
        losses.lock().expect("losses").lost_ack.is_some(),
        "the proxy lost an acknowledgement"
    );
    assert_once_in_order(&want, &mine);
    // The publisher gives up waiting for it, reconciles, and goes on without publishing the
    // stored row again.
    changes_at_once(&ns, &writer, dir.path(), "after", 10);
    let want = printed_seqs(&mut daemon, "after9");
    let mine = node_changes(&url, node, &want);
    assert_once_in_order(&want, &mine);

    // 3. A publish stored late: the proxy holds the 10th change of this commit back; the session
    // ends on its acknowledgement's timeout, and the next one reconciles the stream (deleting the
    // 30 stored after it) before the held publish reaches the server on the old connection, just
    // ahead of the new session's first. That session's check of what it stored finds the late
    // row among its own, and the session after deletes the late copy and what followed it, and
    // publishes again from there.
    {
        let mut l = losses.lock().expect("losses");
        l.hold_at = l.pubs + 10;
    }
    changes_at_once(&ns, &writer, dir.path(), "late", 40);
    let want = printed_seqs(&mut daemon, "late39");
    let mine = node_changes(&url, node, &want);
    let late = recorded_seq(
        &losses,
        |l| &l.late_seq,
        "the proxy sent a held publish late",
    );
    assert!(
        want.contains(&late),
        "the late row {late} is one of {want:?}"
    );
    assert_once_in_order(&want, &mine);

    // 4. A repair cut short: another lost publish, and the session that deletes the rows stored
    // after it loses its connection at its first publish after the deletes. The subject's last
    // messages are then deleted and nothing follows them; the next session must still resume
    // after the run stored in order, not from the start.
    {
        let mut l = losses.lock().expect("losses");
        l.lost_seq = None;
        l.pub_at = l.pubs + 10;
        l.deleted_on = None;
        l.cut_after_delete = true;
    }
    let published = || {
        let (_, m) = get(port, "/metrics", &[]);
        metric(&m, "observer_nats_published_total", &[("kind", "change")]).unwrap_or(0.0)
    };
    let before = published();
    changes_at_once(&ns, &writer, dir.path(), "cut", 40);
    let want = printed_seqs(&mut daemon, "cut39");
    let mine = node_changes(&url, node, &want);
    let cut = recorded_seq(
        &losses,
        |l| &l.cut_seq,
        "the proxy cut a session after its deletes",
    );
    assert!(want.contains(&cut), "the cut row {cut} is one of {want:?}");
    assert_once_in_order(&want, &mine);
    // Each of the 40 rows stored at most twice (before the repair and after): none of the rows
    // before them was published again, as it would be by a session resuming from the start.
    let again = published() - before;
    assert!(
        again <= 80.0,
        "{again} changes were acknowledged for 40 new rows: the session after the cut published \
         older rows again"
    );
    daemon.stop();
}

/// The record on an 8 MiB file system filled to 1 MiB free, then a burst of 5,000 changes: the
/// record cannot take most of them (its failures are counted, a gap row says so once space is
/// back), but the stream holds every change the node printed, once, in order, with the line it
/// printed: the rows the record could not take were held in memory for the publisher and let
/// go once JetStream acknowledged them.
#[test]
fn a_full_record_still_publishes_every_change() {
    skip_unless!(
        "nats-server",
        "ip",
        "nft",
        "mount",
        "iptables-legacy-restore"
    );
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let nats = NatsServer::start(dir.path());
    let url = nats.url();
    let small = SmallFs::mount("8m");
    let record = small.path().join("record.db");
    let node = "full.fleet.test";
    let port = free_port();
    let mut daemon = Daemon::publishing(port, &record, &url, node, &["--stdout-queue", "65536"]);
    let ns = Netns::new("natsfull");
    let writer = Writer::new("natsfullw");
    changes(&ns, &writer, "early", 1);
    let early = printed_seqs(&mut daemon, "early0");
    assert_once_in_order(&early, &node_changes(&url, node, &early));

    let filler = small.path().join("filler");
    fill(&filler, 1 << 20);
    ns.write_stdin(
        &writer,
        &["iptables-legacy-restore", "--noflush"],
        &legacy_rules("OBS-NATS", 5_000),
    );
    changes(&ns, &writer, "burstend", 1);
    printed_changes(&mut daemon, "burstend0");
    let metric_of = |name: &str, labels: &[(&str, &str)]| {
        let (_, m) = get(port, "/metrics", &[]);
        metric(&m, name, labels).unwrap_or(0.0)
    };
    let failed = metric_of("observer_record_rows_total", &[("outcome", "failed")]);
    assert!(
        failed > 0.0,
        "the record took the whole burst: nothing to test"
    );

    std::fs::remove_file(&filler).expect("remove the filler");
    changes(&ns, &writer, "later", 50);
    // Every change the node printed, from the first.
    let printed = printed_changes(&mut daemon, "later49");
    let want: Vec<u64> = printed.iter().filter_map(|v| v["seq"].as_u64()).collect();
    let mine = node_changes(&url, node, &want);
    assert_once_in_order(&want, &mine);
    // The rows the record lacks were published with the line the node printed.
    let recorded: std::collections::HashSet<u64> = query(&record, &[])
        .iter()
        .filter(|v| v["kind"] == "change")
        .filter_map(|v| v["seq"].as_u64())
        .collect();
    let unrecorded: Vec<&Value> = printed
        .iter()
        .filter(|v| v["seq"].as_u64().is_some_and(|s| !recorded.contains(&s)))
        .collect();
    assert!(
        !unrecorded.is_empty(),
        "every printed change is in the record, though {failed} rows failed"
    );
    for line in &unrecorded {
        let in_stream = mine.iter().find(|(_, _, v)| v["seq"] == line["seq"]);
        assert_eq!(
            in_stream.map(|(_, _, v)| v),
            Some(*line),
            "change {} not in the record is published as printed",
            line["seq"]
        );
    }
    // Acknowledged, they are let go; none was too many to hold.
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric_of("observer_nats_unrecorded_held_rows", &[]) > 0.0 {
        assert!(Instant::now() < deadline, "held rows were not let go");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(metric_of("observer_nats_unrecorded_lost_total", &[]), 0.0);
    eprintln!(
        "{} changes printed, {} of them not in the record ({failed} rows failed), all in the \
         stream",
        want.len(),
        unrecorded.len()
    );
    daemon.stop();
}
