//! `observer run`'s HTTP endpoint under abuse, bounded in memory and time: an `/events` client
//! that stops reading while 20,000 changes stream (the engine does not slow down, the daemon's
//! memory stays bounded, and the client, reading again, gets every change once and in order,
//! caught up from the record a page at a time); a request with a 1 MiB header; 2,000 idle
//! connections. Needs root (the daemon loads its hooks).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use test_support::{free_port, get, skip_unless, Daemon, Netns, Writer};

/// The daemon's resident memory, in MiB.
fn rss_mib(d: &Daemon) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.child.id())).unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    kb / 1024.0
}

/// `count` rules added to `ip abuse c` in one `nft -f` per 1,000.
fn many_changes(ns: &Netns, writer: &Writer, count: usize) {
    ns.write(writer, &["nft", "add table ip abuse; add chain ip abuse c"]);
    for start in (0..count).step_by(1000) {
        let batch: String = (start..(start + 1000).min(count))
            .map(|i| format!("add rule ip abuse c tcp dport {} accept\n", 1 + i % 60000))
            .collect();
        ns.write_stdin(writer, &["nft", "-f", "-"], &batch);
    }
}

#[test]
fn a_client_that_stops_reading_slows_nothing_and_misses_nothing() {
    skip_unless!("ip", "nft");
    let dir = tempfile::tempdir().expect("tempdir");
    let record = dir.path().join("record.db");
    let port = free_port();
    // Stdout is this test's reference for what the client must get: it gets a queue that holds
    // the whole burst, so that this test's own reader falling behind cannot drop lines from it
    // (a stalled stdout is `tests/tests/readers.rs`'s subject).
    let mut d = Daemon::start(
        port,
        &[
            "--record",
            record.to_str().expect("utf-8"),
            "--stdout-queue",
            "65536",
        ],
    );
    let rss_before = rss_mib(&d);

    // A client reading nothing after the headers (the stream is far larger than the sockets'
    // buffers).
    let socket = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut w = socket.try_clone().expect("clone");
    write!(
        w,
        "GET /events HTTP/1.0\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
    )
    .expect("request");
    let mut reader = BufReader::new(socket);
    let mut line = String::new();
    reader.read_line(&mut line).expect("status line");
    assert!(line.contains(" 200"), "{line}");
    std::thread::sleep(Duration::from_millis(300));

    let ns = Netns::new("abuse");
    let inode = ns.ino();
    let writer = Writer::new("abusewriter");
    let t0 = Instant::now();
    many_changes(&ns, &writer, 20_000);
    // The engine keeps up: every change reaches stdout while the client reads nothing.
    let last = d.expect("the 20,000th rule", |v| {
        v["netns"].as_u64() == Some(inode)
            && v["op"] == "rule_add"
            && v["rule"]
                .as_str()
                .is_some_and(|r| r.contains("dport 20000 "))
    });
    let took = t0.elapsed();
    let rss_during = rss_mib(&d);
    assert!(
        rss_during - rss_before < 64.0,
        "the daemon grew from {rss_before:.1} to {rss_during:.1} MiB with a client that does not read"
    );
    let wanted: Vec<u64> = d
        .seen
        .iter()
        .filter(|v| v["kind"] == "change")
        .filter_map(|v| v["seq"].as_u64())
        .collect();
    let last_seq = last["seq"].as_u64().expect("seq");

    // The client reads again: every change, once, in order, then the live stream.
    reader
        .get_mut()
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut ids = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ids.last() != Some(&last_seq) {
        assert!(
            Instant::now() < deadline,
            "the client got {} of {} changes within 60 s (last {:?})",
            ids.len(),
            wanted.len(),
            ids.last()
        );
        line.clear();
        if reader.read_line(&mut line).expect("read") == 0 {
            panic!("the daemon closed the stream after {} changes", ids.len());
        }
        if let Some(id) = line.trim_end().strip_prefix("id: ") {
            ids.push(id.parse::<u64>().expect("numeric id"));
        }
    }
    assert_eq!(
        ids, wanted,
        "the slow client's changes differ from stdout's (missing, doubled or out of order)"
    );
    eprintln!(
        "20,000 changes in {took:?} with a stalled client; RSS {rss_before:.1} -> {rss_during:.1} MiB"
    );
    d.stop();
}

#[test]
fn a_huge_header_is_refused_and_the_daemon_goes_on() {
    skip_unless!("ip");
    let port = free_port();
    let d = Daemon::start(port, &["--no-record"]);
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let huge = "x".repeat(1 << 20);
    // The daemon may close before the whole header is sent: a write error is fine.
    let _ = write!(
        s,
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {huge}\r\n\r\n"
    );
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let resp = String::from_utf8_lossy(&resp);
    assert!(
        resp.is_empty() || resp.starts_with("HTTP/1.1 431") || resp.starts_with("HTTP/1.1 400"),
        "a 1 MiB header was answered: {}",
        resp.lines().next().unwrap_or_default()
    );
    assert_eq!(get(port, "/healthz", &[]).0, 200);
    d.stop();
}

#[test]
fn two_thousand_idle_connections_leave_it_serving() {
    skip_unless!("ip", "nft");
    let port = free_port();
    // Above the cap of open connections (past it, a connection is answered 503).
    let mut d = Daemon::start(port, &["--no-record", "--http-max-connections", "4096"]);
    let rss_before = rss_mib(&d);
    let idle: Vec<TcpStream> = (0..2000)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).expect("connect"))
        .collect();
    // Still serving, quickly, and still streaming changes.
    let t0 = Instant::now();
    assert_eq!(get(port, "/healthz", &[]).0, 200);
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "/healthz took {:?} beside 2,000 idle connections",
        t0.elapsed()
    );
    let ns = Netns::new("idle");
    let inode = ns.ino();
    ns.write(
        &Writer::new("idlewriter"),
        &["nft", "add", "table", "inet", "idle"],
    );
    d.expect("a change beside 2,000 idle connections", |v| {
        v["netns"].as_u64() == Some(inode) && v["table"] == "idle"
    });
    let rss = rss_mib(&d);
    assert!(
        rss - rss_before < 64.0,
        "2,000 idle connections took the daemon from {rss_before:.1} to {rss:.1} MiB"
    );
    drop(idle);
    d.stop();
}
