//! `observer run` against real nft and iptables-legacy runs in namespaces these tests create:
//! the same changes on stdout, on the `/events` stream (read by `observer tail --remote` and by a
//! plain HTTP client that drops and resumes with `Last-Event-ID`), in `observer query`, and in
//! `/metrics`; a restart that keeps the record and the numbering; the token; bad input.
//! Needs root; skips otherwise.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use test_support::{
    fill, free_port, get, json_lines, legacy_rules, metric, observer_bin, query, skip_unless,
    wait_for, Daemon, Netns, SmallFs, Writer,
};

const WAIT: Duration = Duration::from_secs(20);

/// The daemon tests run one at a time: each daemon watches every namespace and a stopped
/// daemon's port can be handed to the next test's daemon, so concurrent tests would see each
/// other's changes and ports.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A Server-Sent Events client over a plain socket: `(id, data)` pairs on a channel. Dropping it
/// closes the connection.
struct SseClient {
    socket: TcpStream,
    events: mpsc::Receiver<(Option<u64>, Value)>,
}

impl SseClient {
    fn connect(port: u16, path: &str, last_id: Option<u64>) -> SseClient {
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let mut req =
            format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n");
        if let Some(id) = last_id {
            req.push_str(&format!("Last-Event-ID: {id}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).expect("send");
        let reader = s.try_clone().expect("clone");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(reader).lines();
            // Headers.
            let status = lines.next().and_then(|l| l.ok()).unwrap_or_default();
            assert!(status.contains(" 200"), "stream refused: {status}");
            for l in lines.by_ref() {
                if l.map(|l| l.is_empty()).unwrap_or(true) {
                    break;
                }
            }
            let (mut id, mut data) = (None, String::new());
            for l in lines {
                let Ok(l) = l else { break };
                if let Some(v) = l.strip_prefix("id:") {
                    id = v.trim().parse().ok();
                } else if let Some(v) = l.strip_prefix("data:") {
                    data.push_str(v.strip_prefix(' ').unwrap_or(v));
                } else if l.is_empty() && !data.is_empty() {
                    let v: Value = serde_json::from_str(&data).expect("event data is JSON");
                    if tx.send((id.take(), v)).is_err() {
                        break;
                    }
                    data.clear();
                }
            }
        });
        SseClient {
            socket: s,
            events: rx,
        }
    }

    /// The next event with an id (changes), skipping status lines.
    fn next_change(&self, timeout: Duration) -> Option<(u64, Value)> {
        let deadline = Instant::now() + timeout;
        loop {
            match self
                .events
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok((Some(id), v)) => return Some((id, v)),
                Ok((None, _)) => continue,
                Err(_) => return None,
            }
        }
    }
}

impl Drop for SseClient {
    fn drop(&mut self) {
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
    }
}

/// Wait until `observer query` returns a line matching `pred` (the record is written in batches).
fn query_until(record: &Path, args: &[&str], pred: impl Fn(&Value) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let rows = query(record, args);
        if rows.iter().any(&pred) {
            return rows;
        }
        assert!(Instant::now() < deadline, "query never matched: {rows:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn tmp_record() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("record.db");
    (dir, path)
}

#[test]
fn one_change_stream_on_stdout_sse_query_and_metrics() {
    let _serial = serial();
    skip_unless!("ip", "nft", "iptables-legacy");
    let (_dir, record) = tmp_record();
    let port = free_port();
    let mut d = Daemon::start(port, &["--record", record.to_str().unwrap()]);
    assert_eq!(get(port, "/healthz", &[]).0, 200);
    assert_eq!(get(port, "/readyz", &[]).0, 200);

    let ns = Netns::new("daemon");
    let inode = ns.ino();
    let w = Writer::new("obs-daemonw");
    let here = move |v: &Value| v["netns"].as_u64() == Some(inode);

    // A live client through `observer tail --remote`, filtered to this namespace.
    let mut remote = Command::new(observer_bin())
        .args(["tail", "--json", "--remote"])
        .arg(format!("http://127.0.0.1:{port}"))
        .args(["--netns", &inode.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tail --remote");
    let remote_rx = json_lines(remote.stdout.take().expect("stdout"));
    let mut remote_seen = Vec::new();
    wait_for(
        &remote_rx,
        &mut remote_seen,
        "the daemon's ready line",
        |v| v["kind"] == "status" && v["state"] == "ready",
    );

    // A plain client that will drop mid-stream.
    let sse = SseClient::connect(port, &format!("/events?netns={inode}"), None);
    std::thread::sleep(Duration::from_millis(200));

    ns.write(&w, &["nft", "add", "table", "inet", "obsd"]);
    ns.write(&w, &["nft", "add", "chain", "inet", "obsd", "OBS-NFT"]);
    ns.write(&w, &["iptables-legacy", "-N", "OBS-LEG"]);
    ns.write(&w, &["iptables-legacy", "-X", "OBS-LEG"]);
    let pred = |op: &'static str, chain: &'static str| {
        move |v: &Value| here(v) && v["op"] == op && v["chain"] == chain
    };
    let a = d.expect("nft chain_create", pred("chain_create", "OBS-NFT"));
    let b = d.expect("legacy chain_create", pred("chain_create", "OBS-LEG"));
    let c = d.expect("legacy chain_delete", pred("chain_delete", "OBS-LEG"));
    assert_eq!(b["source"], "tracepoint");
    assert_eq!(c["process"]["actor"], "obs-daemonw");

    // The same lines (same seq, same content) through tail --remote.
    for want in [&a, &b, &c] {
        let got = wait_for(
            &remote_rx,
            &mut remote_seen,
            "the change on tail --remote",
            |v| v["seq"] == want["seq"],
        );
        assert_eq!(&got, want);
    }
    // Nothing from other namespaces (the filter went to the daemon).
    assert!(remote_seen
        .iter()
        .filter(|v| v["kind"] == "change")
        .all(&here));

    // The plain client read the first events, then drops.
    let mut got = Vec::new();
    while let Some((id, v)) = sse.next_change(WAIT) {
        assert_eq!(v["seq"].as_u64(), Some(id), "the SSE id is the seq");
        got.push(id);
        if v["op"] == "chain_create" && v["chain"] == "OBS-NFT" {
            break;
        }
    }
    let last = *got.last().expect("the SSE client got events");
    drop(sse);

    // Changes while it is away.
    ns.write(&w, &["nft", "add", "chain", "inet", "obsd", "OBS-AWAY"]);
    ns.write(&w, &["nft", "delete", "chain", "inet", "obsd", "OBS-AWAY"]);
    d.expect("chain_delete OBS-AWAY", pred("chain_delete", "OBS-AWAY"));
    std::thread::sleep(Duration::from_millis(300));

    // Reconnect: exactly the changes after `last`, each once, in order.
    let expected: Vec<u64> = d
        .seen
        .iter()
        .filter(|v| v["kind"] == "change" && here(v))
        .filter_map(|v| v["seq"].as_u64())
        .filter(|&s| s > last)
        .collect();
    let sse = SseClient::connect(port, &format!("/events?netns={inode}"), Some(last));
    let mut resumed = Vec::new();
    while resumed.len() < expected.len() {
        let (id, _) = sse
            .next_change(WAIT)
            .unwrap_or_else(|| panic!("resumed stream stopped at {resumed:?}, want {expected:?}"));
        resumed.push(id);
    }
    assert_eq!(resumed, expected, "nothing missed, nothing twice");
    assert!(
        sse.next_change(Duration::from_millis(500)).is_none(),
        "nothing more"
    );
    drop(sse);

    // The record answers for them.
    let rows = query_until(
        &record,
        &["--netns", &inode.to_string(), "--chain", "OBS-*"],
        pred("chain_delete", "OBS-AWAY"),
    );
    for want in [&a, &b, &c] {
        assert!(rows.contains(want), "{want} not in the record: {rows:?}");
    }
    let by_op = query(
        &record,
        &[
            "--netns",
            &inode.to_string(),
            "--op",
            "chain_delete",
            "--actor",
            "obs-daemonw",
        ],
    );
    assert!(by_op.iter().all(|v| v["op"] == "chain_delete"), "{by_op:?}");
    assert!(by_op.iter().any(pred("chain_delete", "OBS-LEG")));
    let human = Command::new(observer_bin())
        .args([
            "query",
            "--record",
            record.to_str().unwrap(),
            "--chain",
            "OBS-LEG",
        ])
        .output()
        .expect("query");
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("chain_delete") && text.contains("by obs-daemonw"),
        "{text}"
    );

    // The counters.
    let (status, m) = get(port, "/metrics", &[]);
    assert_eq!(status, 200);
    let legacy = metric(
        &m,
        "observer_changes_total",
        &[
            ("backend", "legacy"),
            ("op", "chain_create"),
            ("source", "tracepoint"),
        ],
    )
    .unwrap_or_else(|| panic!("no legacy chain_create counter in\n{m}"));
    assert!(legacy >= 1.0, "{m}");
    let nft = metric(
        &m,
        "observer_changes_total",
        &[
            ("backend", "nft"),
            ("op", "chain_delete"),
            ("source", "netlink"),
        ],
    )
    .unwrap_or(0.0);
    assert!(nft >= 1.0, "{m}");
    assert_eq!(
        metric(&m, "observer_hook_backend", &[("backend", "tracepoint")]),
        Some(1.0),
        "{m}"
    );
    assert!(metric(&m, "observer_netns_watched", &[]).unwrap_or(0.0) >= 1.0);
    // The two legacy replaces' tables were learned, each counted by where it came from (a table
    // this small comes from its writer's copy wherever the hooks copy it); both series exist.
    let learned = |from| metric(&m, "observer_legacy_tables_total", &[("from", from)]);
    let (copied, read_back) = (learned("writer_copy"), learned("read_back"));
    assert!(copied.is_some() && read_back.is_some(), "{m}");
    assert!(
        copied.unwrap_or(0.0) + read_back.unwrap_or(0.0) >= 2.0,
        "{copied:?} copied, {read_back:?} read back\n{m}"
    );
    assert!(
        metric(&m, "observer_record_size_bytes", &[]).unwrap_or(0.0) > 0.0,
        "{m}"
    );
    assert!(
        metric(&m, "observer_record_rows_total", &[("outcome", "written")]).unwrap_or(0.0) >= 3.0,
        "{m}"
    );

    let _ = remote.kill();
    let _ = remote.wait();
    d.stop();
}

#[test]
fn a_restart_keeps_the_record_and_the_numbering_and_remote_tails_resume() {
    let _serial = serial();
    skip_unless!("ip", "iptables-legacy");
    let (_dir, record) = tmp_record();
    let port = free_port();
    let rec = record.to_str().unwrap();
    let ns = Netns::new("restart");
    let inode = ns.ino();
    let here = move |v: &Value| v["netns"].as_u64() == Some(inode);
    let w = Writer::new("obs-restartw");

    let mut d = Daemon::start(port, &["--record", rec]);
    let mut remote = Command::new(observer_bin())
        .args(["tail", "--json", "--remote"])
        .arg(format!("http://127.0.0.1:{port}"))
        .args(["--netns", &inode.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tail --remote");
    let remote_rx = json_lines(remote.stdout.take().expect("stdout"));
    let mut remote_seen = Vec::new();
    wait_for(&remote_rx, &mut remote_seen, "ready", |v| {
        v["kind"] == "status"
    });

    ns.write(&w, &["iptables-legacy", "-N", "OBS-BEFORE"]);
    let before = d.expect("OBS-BEFORE", |v| here(v) && v["chain"] == "OBS-BEFORE");
    wait_for(&remote_rx, &mut remote_seen, "OBS-BEFORE remotely", |v| {
        v["chain"] == "OBS-BEFORE"
    });
    d.stop();

    // Flushed at SIGTERM: the record has it right away.
    let rows = query(&record, &["--chain", "OBS-BEFORE"]);
    assert_eq!(rows, vec![before.clone()]);

    let mut d = Daemon::start(port, &["--record", rec]);
    ns.write(&w, &["iptables-legacy", "-N", "OBS-AFTER"]);
    let after = d.expect("OBS-AFTER", |v| here(v) && v["chain"] == "OBS-AFTER");
    assert!(
        after["seq"].as_u64() > before["seq"].as_u64(),
        "seq goes on: {before} then {after}"
    );
    // A stream resumed across the restart gets the old change from the record.
    let sse = SseClient::connect(
        port,
        &format!("/events?netns={inode}"),
        Some(before["seq"].as_u64().unwrap() - 1),
    );
    let (id, v) = sse.next_change(WAIT).expect("the recorded change");
    assert_eq!(id, before["seq"].as_u64().unwrap());
    assert_eq!(v, before);
    drop(sse);

    // tail --remote reconnected by itself: it prints the new change once, and not the old again.
    wait_for(&remote_rx, &mut remote_seen, "OBS-AFTER remotely", |v| {
        v["chain"] == "OBS-AFTER"
    });
    std::thread::sleep(Duration::from_millis(300));
    while let Ok(v) = remote_rx.try_recv() {
        remote_seen.push(v);
    }
    let changes: Vec<&Value> = remote_seen
        .iter()
        .filter(|v| v["kind"] == "change")
        .filter(|v| v["chain"].as_str().is_some_and(|c| c.starts_with("OBS-")))
        .collect();
    assert_eq!(changes, vec![&before, &after], "each once");
    // The table's creation (seq before OBS-BEFORE) came once too.
    let all: Vec<u64> = remote_seen
        .iter()
        .filter_map(|v| v["seq"].as_u64())
        .collect();
    let mut unique = all.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(all, unique, "no seq twice, in order");
    let _ = remote.kill();
    let _ = remote.wait();

    // `tail --since`: history (the record for what the restarted daemon's memory lacks, then
    // memory), then live, each change once and in order.
    // `tail --record --since`: the same from the record file the daemon writes.
    let since_tail = |since: &str, from_record: bool| {
        let source = if from_record {
            ["--record".to_string(), rec.to_string()]
        } else {
            ["--remote".to_string(), format!("http://127.0.0.1:{port}")]
        };
        let mut child = Command::new(observer_bin())
            .args(["tail", "--json"])
            .args(source)
            .args(["--netns", &inode.to_string(), "--since", since])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tail --since");
        let rx = json_lines(child.stdout.take().expect("stdout"));
        (child, rx)
    };
    let (hist, hist_rx) = since_tail("1h", false);
    let (late, late_rx) = since_tail(after["time"].as_str().expect("time"), false);
    let (file, file_rx) = since_tail("1h", true);
    let mut hist_seen = Vec::new();
    let mut late_seen = Vec::new();
    let mut file_seen = Vec::new();
    wait_for(&file_rx, &mut file_seen, "OBS-AFTER from the record", |v| {
        v["chain"] == "OBS-AFTER"
    });
    wait_for(&hist_rx, &mut hist_seen, "OBS-AFTER from history", |v| {
        v["chain"] == "OBS-AFTER"
    });
    wait_for(&late_rx, &mut late_seen, "OBS-AFTER from history", |v| {
        v["chain"] == "OBS-AFTER"
    });
    ns.write(&w, &["iptables-legacy", "-N", "OBS-LIVE"]);
    let live = d.expect("OBS-LIVE", |v| here(v) && v["chain"] == "OBS-LIVE");
    wait_for(&hist_rx, &mut hist_seen, "OBS-LIVE", |v| {
        v["chain"] == "OBS-LIVE"
    });
    wait_for(&late_rx, &mut late_seen, "OBS-LIVE", |v| {
        v["chain"] == "OBS-LIVE"
    });
    wait_for(&file_rx, &mut file_seen, "OBS-LIVE from the record", |v| {
        v["chain"] == "OBS-LIVE"
    });
    std::thread::sleep(Duration::from_millis(300));
    hist_seen.extend(hist_rx.try_iter());
    late_seen.extend(late_rx.try_iter());
    file_seen.extend(file_rx.try_iter());
    let obs = |seen: &[Value]| -> Vec<Value> {
        seen.iter()
            .filter(|v| v["kind"] == "change")
            .filter(|v| v["chain"].as_str().is_some_and(|c| c.starts_with("OBS-")))
            .cloned()
            .collect()
    };
    assert_eq!(
        obs(&hist_seen),
        vec![before.clone(), after.clone(), live.clone()]
    );
    assert_eq!(
        obs(&late_seen),
        vec![after.clone(), live.clone()],
        "nothing before --since"
    );
    assert_eq!(
        obs(&file_seen),
        vec![before.clone(), after.clone(), live.clone()],
        "the record followed"
    );
    assert_eq!(file_seen[0]["kind"], "status", "a ready line first");
    for mut c in [hist, late, file] {
        let _ = c.kill();
        let _ = c.wait();
    }
    d.stop();

    let rows = query(&record, &["--chain", "OBS-*", "--since", "1h"]);
    assert_eq!(rows, vec![before, after, live]);
}

/// Run `observer run ARGS` expecting it to refuse to start; returns stderr.
fn refused(args: &[&str]) -> String {
    let mut child = Command::new(observer_bin())
        .arg("run")
        .args(args)
        .env_remove("OBSERVER_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            assert!(!status.success(), "started although it should not: {err}");
            assert!(!err.contains("panicked"), "{err}");
            return err;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("observer run {args:?} did not refuse to start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_token_guards_every_endpoint_but_healthz() {
    let _serial = serial();
    skip_unless!("ip");
    let port = free_port();
    // Beyond loopback, plain HTTP must be asked for (tests/tests/tls.rs); then a token is required.
    let err = refused(&[
        "--listen",
        &format!("0.0.0.0:{port}"),
        "--no-record",
        "--insecure-plaintext",
    ]);
    assert!(err.contains("--token-file"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let mut child = Command::new(observer_bin())
        .args(["run", "--no-record", "--insecure-plaintext"])
        .args(["--listen", &format!("0.0.0.0:{port}")])
        .arg("--token-file")
        .arg(&token)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start");
    let lines = json_lines(child.stdout.take().unwrap());
    let first = lines.recv_timeout(Duration::from_secs(60)).expect("ready");
    assert_eq!(first["state"], "ready");
    assert_eq!(get(port, "/healthz", &[]).0, 200);
    for path in ["/metrics", "/events", "/incidents?format=json", "/readyz"] {
        let (status, body) = get(port, path, &[]);
        assert_eq!(status, 401, "{path} without a token");
        assert!(!body.contains("observer_"), "no data without a token");
        let (status, _) = get(port, path, &[("Authorization", "Bearer wrong")]);
        assert_eq!(status, 401, "{path} with a wrong token");
    }
    let (status, body) = get(
        port,
        "/metrics",
        &[("Authorization", "Bearer s3cret-token")],
    );
    assert_eq!(status, 200);
    assert!(body.contains("observer_ready 1"), "{body}");
    let (status, body) = get(
        port,
        "/incidents?format=json",
        &[("Authorization", "Bearer s3cret-token")],
    );
    assert_eq!((status, body.trim()), (200, "[]"));

    // tail --remote with the wrong token says so and stops.
    let bad = dir.path().join("bad");
    std::fs::write(&bad, "nope").unwrap();
    let out = Command::new(observer_bin())
        .args([
            "tail",
            "--remote",
            &format!("http://127.0.0.1:{port}"),
            "--token-file",
        ])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("401"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success());
}

#[test]
fn bad_input_gets_clear_errors_and_keeps_data() {
    let _serial = serial();
    skip_unless!("ip");
    let dir = tempfile::tempdir().unwrap();

    // A record that is not one: refused, left untouched.
    let junk = dir.path().join("junk.db");
    let bytes: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&junk, &bytes).unwrap();
    let port = free_port();
    let err = refused(&[
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--record",
        junk.to_str().unwrap(),
    ]);
    assert!(err.contains("not a readable observer record"), "{err}");
    assert_eq!(std::fs::read(&junk).unwrap(), bytes, "the file was changed");
    let out = Command::new(observer_bin())
        .args(["query", "--record", junk.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a readable observer record"));

    // A real record, then a copy from a future layout and a truncated copy: each refused with
    // the cause and the fix, by `run` and by `query`, and left untouched.
    let good = dir.path().join("good.db");
    let made = Command::new(test_support::bench_bin())
        .args(["record", "--rows", "5000", "--days", "1", "--out"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let future = dir.path().join("future.db");
    std::fs::copy(&good, &future).unwrap();
    rusqlite::Connection::open(&future)
        .unwrap()
        .pragma_update(None, "user_version", 7)
        .unwrap();
    let truncated = dir.path().join("truncated.db");
    let bytes = std::fs::read(&good).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    for (file, says) in [
        (&future, "has record layout 7, this observer knows"),
        (&truncated, "not a readable observer record"),
    ] {
        let before = std::fs::read(file).unwrap();
        let port = free_port();
        let err = refused(&[
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--record",
            file.to_str().unwrap(),
        ]);
        assert!(
            err.contains(says) && err.contains(file.to_str().unwrap()),
            "{err}"
        );
        let out = Command::new(observer_bin())
            .args(["query", "--since", "2d", "--record"])
            .arg(file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(
            std::fs::read(file).unwrap(),
            before,
            "{} was changed",
            file.display()
        );
    }

    // Config files: an unknown key, a wrong type.
    let cfg = dir.path().join("observer.toml");
    std::fs::write(&cfg, "listen = \"127.0.0.1:9\"\nretain_days = 7\n").unwrap();
    let err = refused(&["--config", cfg.to_str().unwrap()]);
    assert!(err.contains("retain_days"), "{err}");
    std::fs::write(&cfg, "no_record = \"yes please\"\n").unwrap();
    let err = refused(&["--config", cfg.to_str().unwrap()]);
    assert!(err.contains("no_record"), "{err}");

    // A port in use.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let err = refused(&["--listen", &format!("127.0.0.1:{port}"), "--no-record"]);
    assert!(
        err.contains("cannot listen") && err.contains("--listen"),
        "{err}"
    );

    // A record in a directory that cannot be created.
    let err = refused(&["--record", "/proc/observer/record.db"]);
    assert!(err.contains("cannot open the record"), "{err}");
}

/// `observer doctor --remote`'s view of the daemon's record.
fn doctor_record(port: u16) -> Value {
    let out = Command::new(observer_bin())
        .args([
            "doctor",
            "--json",
            "--remote",
            &format!("http://127.0.0.1:{port}"),
        ])
        .output()
        .expect("run observer doctor");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    v["daemon"]["record"].clone()
}

fn rows_total(port: u16, outcome: &str) -> f64 {
    let (_, m) = get(port, "/metrics", &[]);
    metric(&m, "observer_record_rows_total", &[("outcome", outcome)]).unwrap_or(0.0)
}

/// How many changes are in the burst (the measure).
const BURST: usize = 30_000;

/// `observer tail --json ARGS` until it prints change `last`: every line it printed.
fn tail_until<'a>(how: &str, args: impl IntoIterator<Item = &'a str>, last: u64) -> Vec<Value> {
    let mut child = Command::new(observer_bin())
        .args(["tail", "--json"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start observer tail");
    let rx = json_lines(child.stdout.take().expect("stdout"));
    let mut seen = Vec::new();
    test_support::wait_within(
        Duration::from_secs(60),
        &rx,
        &mut seen,
        &format!("{how}: change {last}"),
        |v| v["seq"].as_u64() == Some(last),
    );
    let _ = child.kill();
    let _ = child.wait();
    seen
}

/// The record on an 8 MiB file system filled to 1 MiB free, then a burst of changes: stdout
/// carries all of it, the failures are counted and `doctor --remote` says the record is failing;
/// once space is back the record goes on by itself with a gap row for what it missed, which
/// `query` and `query --at` show; the file stays whole; SIGTERM on a full disk ends the daemon
/// within 10 s.
#[test]
fn a_full_disk_leaves_a_gap_that_queries_show_and_the_record_resumes() {
    let _serial = serial();
    skip_unless!("ip", "nft", "mount", "iptables-legacy-restore");
    let small = SmallFs::mount("8m");
    let mnt = small.path().to_path_buf();
    let record = mnt.join("record.db");
    let port = free_port();
    let ns = Netns::new("full");
    let inode = ns.ino();
    let here = move |v: &Value| v["netns"].as_u64() == Some(inode);
    let w = Writer::new("obs-fullw");

    // stdout, the test's reference, has room for the whole burst: with the default queue
    // (4096 lines) a reader slower than the burst drops lines from it by design (a gap line
    // says so), which is not what this test is about.
    let mut d = Daemon::start(
        port,
        &[
            "--record",
            record.to_str().unwrap(),
            "--stdout-queue",
            "65536",
        ],
    );
    ns.write(&w, &["nft", "add", "table", "inet", "obsf"]);
    ns.write(&w, &["nft", "add", "chain", "inet", "obsf", "OBS-EARLY"]);
    d.expect("OBS-EARLY", |v| here(v) && v["chain"] == "OBS-EARLY");
    query_until(&record, &["--chain", "OBS-EARLY"], |_| true);
    assert_eq!(doctor_record(port)["state"], "ok");

    let filler = mnt.join("filler");
    fill(&filler, 1 << 20);
    let began = Instant::now();
    ns.write_stdin(
        &w,
        &["iptables-legacy-restore", "--noflush"],
        &legacy_rules("OBS-BIG", BURST),
    );
    // Every change of the burst on stdout.
    let mut burst = Vec::new();
    while burst.len() < BURST {
        let v = d
            .lines
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("{} of {BURST} changes on stdout", burst.len()));
        if v["kind"] == "change" && here(&v) && v["chain"] == "OBS-BIG" && v["op"] == "rule_add" {
            burst.push(v["seq"].as_u64().unwrap());
        }
    }
    let streamed = began.elapsed();
    let deadline = Instant::now() + WAIT;
    while rows_total(port, "failed") == 0.0 {
        assert!(Instant::now() < deadline, "no failed writes counted");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(port, "/healthz", &[]).0, 200);

    // Space is back: later changes are recorded, with the gap row before them.
    std::fs::remove_file(&filler).unwrap();
    ns.write_stdin(
        &w,
        &["iptables-legacy-restore", "--noflush"],
        &legacy_rules("OBS-LATER", 50),
    );
    let deadline = Instant::now() + WAIT;
    let later = || {
        query(&record, &["--chain", "OBS-LATER", "--op", "rule_add"])
            .iter()
            .filter(|v| v["kind"] == "change")
            .count()
    };
    while later() < 50 {
        assert!(
            Instant::now() < deadline,
            "the later changes never reached the record"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let failed = rows_total(port, "failed");
    let all = query(&record, &[]);
    assert!(
        all.iter().any(|v| v["chain"] == "OBS-EARLY"),
        "the earlier record is kept"
    );
    let gaps: Vec<&Value> = all
        .iter()
        .filter(|v| v["kind"] == "status" && v["state"] == "gap")
        .collect();
    assert!(!gaps.is_empty(), "no gap line in the query");
    let g = &gaps[0]["record_gap"];
    assert_eq!(g["reason"], "disk full", "{g}");
    assert!(
        gaps[0]["message"]
            .as_str()
            .unwrap()
            .contains("were not recorded: disk full"),
        "{}",
        gaps[0]
    );
    // Each change of the burst is in the record or in a gap; no recorded change is in one; a
    // gap counts every seq of its range.
    let recorded: std::collections::BTreeSet<u64> = all
        .iter()
        .filter(|v| v["kind"] == "change")
        .filter_map(|v| v["seq"].as_u64())
        .collect();
    let ranges: Vec<(u64, u64, u64)> = gaps
        .iter()
        .map(|v| {
            let g = &v["record_gap"];
            let n = |k: &str| g[k].as_u64().unwrap();
            (n("first_seq"), n("last_seq"), n("changes"))
        })
        .collect();
    let in_gap = |s: u64| ranges.iter().any(|&(a, b, _)| (a..=b).contains(&s));
    for s in &burst {
        assert!(
            recorded.contains(s) || in_gap(*s),
            "change {s} is neither recorded nor in a gap"
        );
    }
    assert!(
        !recorded.iter().any(|&s| in_gap(s)),
        "a recorded change inside a gap"
    );
    for &(a, b, n) in &ranges {
        assert_eq!(b - a + 1, n, "gap {a}..{b} counts {n}");
    }
    let lost: u64 = ranges.iter().map(|r| r.2).sum();
    let recorded_burst = burst.iter().filter(|s| recorded.contains(s)).count();
    assert!(lost > 0);
    assert!(
        lost as f64 <= failed,
        "{lost} changes lost, {failed} rows failed"
    );
    // The gap's place among the rows: after the last change before it.
    let at = |i: usize| all[i]["seq"].as_u64();
    let pos = all.iter().position(|v| v["kind"] == "status").unwrap();
    assert!(
        pos > 0 && at(pos - 1) < g["first_seq"].as_u64(),
        "{:?}",
        at(pos - 1)
    );
    // Whoever follows the record from before the hole, or catches up from the daemon through
    // it, is told of the hole where it lies: before the first change after it.
    let since = all
        .iter()
        .find(|v| v["chain"] == "OBS-EARLY")
        .and_then(|v| v["time"].as_str())
        .unwrap()
        .to_string();
    let last_later = all
        .iter()
        .filter(|v| v["kind"] == "change" && v["chain"] == "OBS-LATER")
        .filter_map(|v| v["seq"].as_u64())
        .max()
        .unwrap();
    let listen = format!("127.0.0.1:{port}");
    for (how, args) in [
        ("tail --record", ["--record", record.to_str().unwrap()]),
        ("tail --remote", ["--remote", listen.as_str()]),
    ] {
        let lines = tail_until(
            how,
            args.iter().copied().chain(["--since", &since]),
            last_later,
        );
        let told: Vec<(u64, usize)> = lines
            .iter()
            .enumerate()
            .filter(|(_, v)| v["kind"] == "status" && v["state"] == "gap")
            .filter_map(|(i, v)| Some((v["record_gap"]["first_seq"].as_u64()?, i)))
            .collect();
        let first_gap = ranges[0].0;
        let at = told
            .iter()
            .find(|(f, _)| *f == first_gap)
            .map(|&(_, i)| i)
            .unwrap_or_else(|| panic!("{how}: no line for the gap from seq {first_gap}: {told:?}"));
        let seq = |v: &Value| v["seq"].as_u64();
        assert!(
            lines[..at].iter().filter_map(seq).all(|s| s < first_gap)
                && lines[at..].iter().filter_map(seq).all(|s| s > first_gap),
            "{how}: the gap line is not where the hole is"
        );
        if how == "tail --record" {
            // The follower tells every gap row, once.
            let mut firsts: Vec<u64> = told.iter().map(|t| t.0).collect();
            firsts.sort_unstable();
            let want: Vec<u64> = ranges.iter().map(|r| r.0).collect();
            assert_eq!(firsts, want, "{how}: the gap lines");
        }
    }
    let text = String::from_utf8(
        Command::new(observer_bin())
            .args(["query", "--record"])
            .arg(&record)
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(text.contains(" GAP "), "{text}");
    // The ruleset at the end of the gap may lack its changes, and says so.
    let end = g["last_time"].as_str().unwrap();
    let out = Command::new(observer_bin())
        .args(["query", "--record"])
        .arg(&record)
        .args(["--at", end])
        .output()
        .unwrap();
    let at_text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{at_text}");
    assert!(at_text.contains("were not recorded: disk full; this answer may be incomplete"));
    let at_json = query(&record, &["--at", end]);
    assert_eq!(at_json[0]["state"], "gap", "{}", at_json[0]);
    assert!(at_json
        .iter()
        .any(|v| v["kind"] == "ruleset" && v["incomplete"] == true));
    // Once the record is written again, each namespace is snapshot: its rulesets now are whole
    // again, and hold what the lost rows told (the whole burst, from the legacy snapshot).
    let ino = inode.to_string();
    let deadline = Instant::now() + WAIT;
    let now = loop {
        let now = query(&record, &["--at", "now", "--netns", &ino]);
        let gap = now
            .iter()
            .any(|v| v["kind"] == "status" && v["state"] == "gap");
        let rulesets: Vec<&Value> = now.iter().filter(|v| v["kind"] == "ruleset").collect();
        if !gap && rulesets.len() == 2 && rulesets.iter().all(|v| v["incomplete"] != true) {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "the rulesets after the record resumed still span its gap: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let text_of = |backend: &str| {
        now.iter()
            .find(|v| v["kind"] == "ruleset" && v["backend"] == backend)
            .and_then(|v| v["text"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let legacy = text_of("legacy");
    assert_eq!(
        legacy.matches("-A OBS-BIG ").count(),
        BURST,
        "the legacy ruleset after the gap holds the whole burst"
    );
    assert_eq!(legacy.matches("-A OBS-LATER ").count(), 50);
    assert!(text_of("nft").contains("OBS-EARLY"), "{now:?}");
    let ok = doctor_record(port);
    assert_eq!(ok["state"], "ok", "{ok}");
    assert!(ok["gaps"].as_u64().unwrap() >= 1, "{ok}");
    let check: String = rusqlite::Connection::open(&record)
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    eprintln!(
        "burst of {BURST} changes streamed in {streamed:?}: {lost} not recorded ({failed} rows \
         failed), {recorded_burst} recorded"
    );

    // A full disk again: the daemon's metrics say the record is failing, and why, while it
    // is; SIGTERM still ends the daemon within 10 s.
    fill(&filler, 0);
    let before = rows_total(port, "failed");
    let gaps_before = ok["gaps"].as_u64().unwrap();
    ns.write_stdin(
        &w,
        &["iptables-legacy-restore", "--noflush"],
        &legacy_rules("OBS-LAST", 10_000),
    );
    let deadline = Instant::now() + WAIT;
    let mut seen_failing = false;
    loop {
        let (_, m) = get(port, "/metrics", &[]);
        let since = metric(&m, "observer_record_failing_since_seconds", &[]).unwrap_or(0.0);
        let full = metric(&m, "observer_record_failing", &[("reason", "disk full")]);
        seen_failing |= since > 0.0 && full == Some(1.0);
        let failed = metric(&m, "observer_record_rows_total", &[("outcome", "failed")]);
        if seen_failing && failed.unwrap_or(0.0) > before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the full disk never showed:\n{m}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Still failing (the disk is full), or written again if the log had room for the last
    // batch: then with one more gap.
    let now = doctor_record(port);
    assert!(
        (now["state"] == "failing" && now["reason"] == "disk full" && now["since"].is_string())
            || now["gaps"].as_u64().unwrap() > gaps_before,
        "{now}"
    );
    let pid = nix::unistd::Pid::from_raw(d.child.id() as i32);
    let asked = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = loop {
        if let Some(s) = d.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "no exit within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!(
        "SIGTERM on a full disk: exit {status} after {:?}",
        asked.elapsed()
    );
    std::fs::remove_file(&filler).unwrap();
    let check: String = rusqlite::Connection::open(&record)
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

#[test]
fn incidents_reach_the_stream_the_record_and_the_metrics() {
    let _serial = serial();
    skip_unless!("ip", "iptables-legacy");
    let (_dir, record) = tmp_record();
    let port = free_port();
    let mut d = Daemon::start(port, &["--record", record.to_str().unwrap()]);
    let ns = Netns::new("incident");
    let inode = ns.ino();
    let owner = Writer::new("kube-proxy");
    let intruder = Writer::new("calico-node");
    let sse = SseClient::connect(port, &format!("/incidents?netns={inode}"), None);
    std::thread::sleep(Duration::from_millis(200));

    ns.write(
        &owner,
        &["iptables-legacy", "-t", "nat", "-N", "KUBE-SVC-OBSTEST"],
    );
    d.expect("the owner's chain", |v| {
        v["netns"].as_u64() == Some(inode) && v["chain"] == "KUBE-SVC-OBSTEST"
    });
    ns.write(
        &intruder,
        &["iptables-legacy", "-t", "nat", "-X", "KUBE-SVC-OBSTEST"],
    );
    let inc = wait_for(&d.lines, &mut d.seen, "a foreign_delete incident", |v| {
        v["kind"] == "incident"
            && v["type"] == "foreign_delete"
            && v["netns"].as_u64() == Some(inode)
    });
    assert_eq!(inc["owner"], "kube-proxy", "{inc}");

    // The stream: the same line, numbered.
    let (id, v) = sse.next_change(WAIT).expect("the incident on /incidents");
    assert!(id >= 1);
    assert_eq!(v, inc);
    drop(sse);
    // Resumed from before it: the same line again, with the same number.
    let again = SseClient::connect(port, &format!("/incidents?netns={inode}"), Some(id - 1));
    assert_eq!(again.next_change(WAIT), Some((id, inc.clone())));
    drop(again);

    // As a JSON list, the record, and the counters.
    let (status, body) = get(
        port,
        "/incidents?since=1h&type=foreign_delete",
        &[("Accept", "application/json")],
    );
    assert_eq!(status, 200);
    let list: Vec<Value> = serde_json::from_str(&body).expect("a JSON list");
    assert!(list.contains(&inc), "{body}");
    let rows = query_until(
        &record,
        &["--type", "foreign_delete", "--netns", &inode.to_string()],
        |v| *v == inc,
    );
    assert!(rows.iter().all(|v| v["kind"] == "incident"));
    let (_, m) = get(port, "/metrics", &[]);
    assert!(
        metric(
            &m,
            "observer_incidents_total",
            &[("type", "foreign_delete")]
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{m}"
    );

    assert!(
        metric(&m, "observer_incidents_open", &[("type", "foreign_delete")]).unwrap_or(0.0) >= 1.0,
        "{m}"
    );

    // Open now: `query --open` lists it.
    let ns_arg = inode.to_string();
    let open = query_until(&record, &["--open", "--netns", &ns_arg], |v| {
        v["id"] == inc["id"]
    });
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0]["state"], "open");
    // The owner re-creates its chain: the same incident, resolved, with the repair, on stdout,
    // on the stream and in the record; `query --open` no longer lists it.
    let sse = SseClient::connect(port, &format!("/incidents?netns={inode}"), Some(id));
    ns.write(
        &owner,
        &["iptables-legacy", "-t", "nat", "-N", "KUBE-SVC-OBSTEST"],
    );
    let resolved = wait_for(&d.lines, &mut d.seen, "the incident resolved", |v| {
        v["kind"] == "incident" && v["id"] == inc["id"] && v["state"] == "resolved"
    });
    assert_eq!(resolved["owners"][0]["repaired"], true, "{resolved}");
    assert_eq!(
        resolved["owners"][0]["repaired_by"], "kube-proxy",
        "{resolved}"
    );
    assert!(resolved["owners"][0]["repair_ms"].is_u64(), "{resolved}");
    let (_, on_stream) = sse
        .next_change(WAIT)
        .expect("the resolved line on /incidents");
    assert_eq!(on_stream, resolved);
    query_until(&record, &["--incidents", "--netns", &ns_arg], |v| {
        *v == resolved
    });
    let deadline = Instant::now() + WAIT;
    while !query(&record, &["--open", "--netns", &ns_arg]).is_empty() {
        assert!(Instant::now() < deadline, "still listed as open");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Resolved: no longer counted as open.
    let (_, m) = get(port, "/metrics", &[]);
    assert_eq!(
        metric(&m, "observer_incidents_open", &[("type", "foreign_delete")]),
        Some(0.0),
        "{m}"
    );
    d.stop();
}

#[test]
fn a_record_deleted_under_the_daemon_is_made_again_and_the_stream_goes_on() {
    let _serial = serial();
    skip_unless!("ip", "nft");
    let (dir, record) = tmp_record();
    let port = free_port();
    let mut d = Daemon::start(port, &["--record", record.to_str().unwrap()]);
    let ns = Netns::new("reopen");
    let inode = ns.ino();
    let w = Writer::new("reopenwriter");
    ns.write(&w, &["nft", "add", "table", "inet", "before_delete"]);
    d.expect("the first change", |v| {
        v["netns"].as_u64() == Some(inode) && v["table"] == "before_delete"
    });
    query_until(&record, &["--netns", &inode.to_string()], |v| {
        v["table"] == "before_delete"
    });
    // Removed by hand (with its write-ahead log), as a clean-up job might.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.path().join(format!("record.db{suffix}")));
    }
    ns.write(&w, &["nft", "add", "table", "inet", "after_delete"]);
    d.expect("a change after the delete: the stream goes on", |v| {
        v["netns"].as_u64() == Some(inode) && v["table"] == "after_delete"
    });
    // A new record at the path holds what came after, and the metric says it happened. (While
    // the writer makes it, a query may find no record or one without its tables yet: retried.)
    let deadline = Instant::now() + WAIT;
    let rows = loop {
        let out = Command::new(observer_bin())
            .args(["query", "--json", "--netns", &inode.to_string(), "--record"])
            .arg(&record)
            .output()
            .expect("run observer query");
        let rows: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("query line is JSON"))
            .collect();
        if out.status.success() && rows.iter().any(|v| v["table"] == "after_delete") {
            break rows;
        }
        assert!(
            Instant::now() < deadline,
            "the new record never held the change: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        rows.iter().all(|v| v["table"] != "before_delete"),
        "{rows:?}"
    );
    let (_, m) = get(port, "/metrics", &[]);
    assert_eq!(
        metric(&m, "observer_record_reopened_total", &[]),
        Some(1.0),
        "{m}"
    );
    d.stop();
}

/// A writer that never stops: nft transactions (a chain flushed, 20 rules added) and legacy
/// appends back to back in `ns`, until dropped.
struct Load(std::process::Child);

impl Load {
    fn start(ns: &Netns) -> Load {
        let script = "nft add table ip k9; nft add chain ip k9 c; iptables-legacy -N K9; i=0; \
            while :; do i=$((i+1)); \
              { echo 'flush chain ip k9 c'; for p in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do \
                echo \"add rule ip k9 c tcp dport $((i*20+p)) accept\"; done; } | nft -f -; \
              iptables-legacy -A K9 -p tcp --dport $i -j ACCEPT; \
              [ $((i % 20)) = 0 ] && iptables-legacy -F K9; \
            done";
        let child = Command::new("ip")
            .args(["netns", "exec", ns.name(), "sh", "-c", script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the load");
        Load(child)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every stored change of the record, by seq, after checking the file's integrity.
fn recorded(record: &Path) -> std::collections::BTreeMap<u64, Value> {
    let c = rusqlite::Connection::open(record).expect("open the record");
    let check: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check");
    assert_eq!(check, "ok", "the record is damaged after kill -9");
    drop(c);
    query(record, &[])
        .into_iter()
        .filter(|v| v["kind"] == "change")
        .map(|v| (v["seq"].as_u64().expect("seq"), v))
        .collect()
}

#[test]
fn kill_9_under_load_loses_nothing_that_was_streamed() {
    let _serial = serial();
    skip_unless!("ip", "nft", "iptables-legacy");
    let (_dir, record) = tmp_record();
    let rec = record.to_str().unwrap();
    let ns = Netns::new("kill9");
    let _load = Load::start(&ns);
    // A different moment every run (and every round), printed to replay a failure.
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("kill -9 moments from seed {x}");
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut sse_ids: Vec<u64> = Vec::new();
    let mut last_recorded = 0;
    let (mut streamed_total, mut sse_total) = (0, 0);
    for round in 1..=20 {
        let port = free_port();
        let mut d = Daemon::start(port, &["--record", rec]);
        let sse = SseClient::connect(port, "/events", sse_ids.last().copied());
        let until = Instant::now() + Duration::from_millis(300 + rand() % 1200);
        let mut streamed = Vec::new();
        while Instant::now() < until {
            if let Ok(v) = d.lines.recv_timeout(Duration::from_millis(20)) {
                streamed.push(v);
            }
        }
        d.child.kill().expect("kill -9");
        d.child.wait().expect("wait");
        // What reached the pipe before the kill was streamed too.
        while let Ok(v) = d.lines.recv_timeout(Duration::from_millis(300)) {
            streamed.push(v);
        }
        let mut sse_round = Vec::new();
        while let Some(e) = sse.next_change(Duration::from_millis(300)) {
            sse_round.push(e);
        }
        drop(sse);
        let rows = recorded(&record);
        let changes: Vec<&Value> = streamed.iter().filter(|v| v["kind"] == "change").collect();
        assert!(
            !changes.is_empty(),
            "round {round}: no change streamed under load"
        );
        // The numbering goes on after what the record held.
        assert_eq!(
            changes[0]["seq"].as_u64(),
            Some(last_recorded + 1),
            "round {round}: seq does not resume after the record's last ({last_recorded})"
        );
        for v in &changes {
            let seq = v["seq"].as_u64().unwrap();
            assert_eq!(
                rows.get(&seq),
                Some(*v),
                "round {round}: change {seq} was streamed on stdout but the record lacks it"
            );
        }
        for (id, v) in &sse_round {
            assert_eq!(
                rows.get(id),
                Some(v),
                "round {round}: /events sent {id}, the record lacks it"
            );
            if let Some(prev) = sse_ids.last() {
                assert_eq!(
                    *id,
                    prev + 1,
                    "round {round}: /events resumed with a gap or a repeat after {prev}"
                );
            }
            sse_ids.push(*id);
        }
        streamed_total += changes.len();
        sse_total += sse_round.len();
        last_recorded = *rows.keys().next_back().unwrap_or(&0);
    }
    eprintln!(
        "20 kills: {streamed_total} changes streamed on stdout and {sse_total} on /events, all \
         in the record; the record holds {last_recorded}"
    );
}
