//! TLS on `observer run`'s endpoint, end to end through `observer tail --remote https://`:
//! a good certificate carries the events; a wrong CA, an expired certificate and (under mutual
//! TLS) a client without a certificate are refused with a reason; a certificate replaced on disk
//! is served to new connections without a restart; plain HTTP beyond loopback is refused unless
//! asked for. Certificates are made by the test (rcgen). Needs root (the daemon loads its hooks).

use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use test_support::{
    free_port, json_lines, observer_bin, skip_unless, write_pair, Ca, Netns, Writer,
};

const WAIT: Duration = Duration::from_secs(30);

/// Waits up to the TLS tests' own time for a line, keeping nothing else.
fn wait_for(rx: &mpsc::Receiver<Value>, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    test_support::wait_within(WAIT, rx, &mut Vec::new(), what, pred)
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `observer run` on `port` with `args`, once it is ready.
fn daemon(port: u16, args: &[&str]) -> Proc {
    let mut child = Command::new(observer_bin())
        .args([
            "run",
            "--no-record",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .args(args)
        .env_remove("OBSERVER_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start observer run");
    let rx = json_lines(child.stdout.take().expect("stdout"));
    let first = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("no ready line");
    assert_eq!(first["state"], "ready", "{first}");
    Proc(child)
}

/// `observer tail --json --remote https://127.0.0.1:PORT ARGS`: its lines, and the process.
fn tail(port: u16, args: &[&str]) -> (Proc, mpsc::Receiver<Value>) {
    let mut child = Command::new(observer_bin())
        .args([
            "tail",
            "--json",
            "--remote",
            &format!("https://127.0.0.1:{port}"),
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tail --remote");
    let rx = json_lines(child.stdout.take().expect("stdout"));
    (Proc(child), rx)
}

/// `observer tail --remote https://...` that must fail: its stderr.
fn refused_tail(port: u16, args: &[&str]) -> String {
    let mut c = Command::new(observer_bin());
    c.args([
        "tail",
        "--json",
        "--remote",
        &format!("https://127.0.0.1:{port}"),
    ])
    .args(args)
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    let child = c.spawn().expect("start tail --remote");
    let deadline = Instant::now() + WAIT;
    let mut child = Proc(child);
    loop {
        if let Some(status) = child.0.try_wait().expect("wait") {
            assert!(!status.success(), "tail --remote was expected to fail");
            let mut err = String::new();
            use std::io::Read;
            child
                .0
                .stderr
                .take()
                .expect("stderr")
                .read_to_string(&mut err)
                .expect("read stderr");
            return err;
        }
        assert!(
            Instant::now() < deadline,
            "tail --remote neither failed nor ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn https_end_to_end_with_renewal_wrong_ca_and_expiry() {
    skip_unless!("ip", "iptables-legacy");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new("observer test CA");
    let other = Ca::new("someone else's CA");
    let ca_pem = ca.write(dir.path(), "ca.pem");
    let other_pem = other.write(dir.path(), "other.pem");
    let (cert, key) = write_pair(dir.path(), "server", &ca.issue(false, false));
    let port = free_port();
    let _d = daemon(
        port,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );

    // A good certificate: the events arrive.
    let ns = Netns::new("tls");
    let inode = ns.ino().to_string();
    let (_t, rx) = tail(port, &["--ca", ca_pem.to_str().unwrap(), "--netns", &inode]);
    wait_for(&rx, "the ready line over TLS", |v| v["kind"] == "status");
    let w = Writer::new("obs-tlsw");
    ns.write(&w, &["iptables-legacy", "-N", "OBS-TLS"]);
    let v = wait_for(&rx, "the change over TLS", |v| v["chain"] == "OBS-TLS");
    assert_eq!(v["process"]["actor"], "obs-tlsw", "{v}");

    // A CA that did not issue the server's certificate.
    let err = refused_tail(port, &["--ca", other_pem.to_str().unwrap()]);
    assert!(err.contains("TLS with 127.0.0.1"), "{err}");
    assert!(err.to_lowercase().contains("certificate"), "{err}");

    // Renewed on disk with an expired certificate: new connections get it, and refuse it.
    write_pair(dir.path(), "server", &ca.issue(false, true));
    let err = refused_tail(port, &["--ca", ca_pem.to_str().unwrap()]);
    assert!(err.to_lowercase().contains("expired"), "{err}");
    // Renewed again with a good one: served without a restart.
    write_pair(dir.path(), "server", &ca.issue(false, false));
    let (_t2, rx2) = tail(port, &["--ca", ca_pem.to_str().unwrap()]);
    wait_for(&rx2, "the ready line after renewal", |v| {
        v["kind"] == "status"
    });
    // A half-written renewal (garbage) keeps the last good certificate.
    std::fs::write(&cert, "not a certificate").expect("write");
    let (_t3, rx3) = tail(port, &["--ca", ca_pem.to_str().unwrap()]);
    wait_for(&rx3, "the ready line after a bad renewal", |v| {
        v["kind"] == "status"
    });
}

#[test]
fn mutual_tls_refuses_a_client_without_a_certificate() {
    skip_unless!("ip", "iptables-legacy");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new("observer test CA");
    let clients = Ca::new("observer clients CA");
    let ca_pem = ca.write(dir.path(), "ca.pem");
    let clients_pem = clients.write(dir.path(), "clients.pem");
    let (cert, key) = write_pair(dir.path(), "server", &ca.issue(false, false));
    let (ccert, ckey) = write_pair(dir.path(), "client", &clients.issue(true, false));
    let (bad_cert, bad_key) = write_pair(dir.path(), "stranger", &ca.issue(true, false));
    let port = free_port();
    let _d = daemon(
        port,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--tls-client-ca",
            clients_pem.to_str().unwrap(),
        ],
    );
    let ca_arg = ca_pem.to_str().unwrap();
    let err = refused_tail(port, &["--ca", ca_arg]);
    assert!(
        err.contains("TLS with 127.0.0.1") || err.contains("cannot follow"),
        "{err}"
    );
    let err = refused_tail(
        port,
        &[
            "--ca",
            ca_arg,
            "--client-cert",
            bad_cert.to_str().unwrap(),
            "--client-key",
            bad_key.to_str().unwrap(),
        ],
    );
    assert!(!err.is_empty(), "a certificate from another CA is refused");
    let (_t, rx) = tail(
        port,
        &[
            "--ca",
            ca_arg,
            "--client-cert",
            ccert.to_str().unwrap(),
            "--client-key",
            ckey.to_str().unwrap(),
        ],
    );
    wait_for(&rx, "the ready line under mutual TLS", |v| {
        v["kind"] == "status"
    });
}

#[test]
fn plain_http_beyond_loopback_needs_to_be_asked_for() {
    skip_unless!("ip");
    let out = Command::new(observer_bin())
        .args(["run", "--no-record", "--listen", "0.0.0.0:1"])
        .env_remove("OBSERVER_CONFIG")
        .output()
        .expect("run observer");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to serve plain HTTP") && err.contains("--tls-cert"),
        "{err}"
    );
    // Asked for: the refusal is then about the token, the next rule.
    let out = Command::new(observer_bin())
        .args([
            "run",
            "--no-record",
            "--listen",
            "0.0.0.0:1",
            "--insecure-plaintext",
        ])
        .env_remove("OBSERVER_CONFIG")
        .output()
        .expect("run observer");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without a token"), "{err}");
}
