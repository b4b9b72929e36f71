//! Fleet streaming to a NATS server that asks for TLS and credentials, as production servers
//! do: Debian's nats-server, started by the test with a configuration file, requires mutual TLS
//! (a CA and client certificates made by the test) with a user and password, or a token, or an
//! nkey. For each, `observer run --nats tls://...` publishes a change made in a namespace of the
//! test's own and `observer tail --nats` with the same settings shows it; wrong credentials are
//! refused with the server's reason, and a client without the certificate gets nothing. Needs
//! root (the daemon loads its hooks) and nats-server.

mod certs;
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use certs::{write_pair, Ca};
use common::{free_port, get, json_lines, observer_bin, wait_for, Daemon, Netns, Writer};

/// nats-server with JetStream and TLS, from a configuration file; `auth` is its
/// `authorization { ... }` block.
struct SecureNats {
    child: Child,
    port: u16,
}

impl SecureNats {
    fn start(dir: &Path, tls: &Tls, auth: &str) -> SecureNats {
        let port = free_port();
        let monitor = free_port();
        let conf = dir.join(format!("nats-{port}.conf"));
        std::fs::write(
            &conf,
            format!(
                "listen: 127.0.0.1:{port}\n\
                 http: 127.0.0.1:{monitor}\n\
                 jetstream {{ store_dir: {store:?} }}\n\
                 tls {{ cert_file: {cert:?}, key_file: {key:?}, ca_file: {ca:?}, verify: true }}\n\
                 authorization {{ {auth} }}\n",
                store = dir.join(format!("js-{port}")),
                cert = tls.server.0,
                key = tls.server.1,
                ca = tls.ca,
            ),
        )
        .expect("write nats.conf");
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(std::net::TcpStream::connect(("127.0.0.1", monitor)).is_ok()
            && get(monitor, "/healthz?js-enabled-only=true", &[]).0 == 200)
        {
            assert!(
                Instant::now() < deadline,
                "nats-server did not become healthy within 30 s ({})",
                conf.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        SecureNats { child, port }
    }

    fn url(&self) -> String {
        format!("tls://127.0.0.1:{}", self.port)
    }
}

impl Drop for SecureNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The certificates of one test: the CA, the server's pair and a client's pair.
struct Tls {
    ca: PathBuf,
    server: (PathBuf, PathBuf),
    client: (PathBuf, PathBuf),
}

impl Tls {
    fn new(dir: &Path) -> Tls {
        let ca = Ca::new("observer-test-nats-ca");
        Tls {
            ca: ca.write(dir, "ca.pem"),
            server: write_pair(dir, "server", &ca.issue(false, false)),
            client: write_pair(dir, "client", &ca.issue(true, false)),
        }
    }

    /// The flags that present the client certificate and trust the CA.
    fn flags(&self) -> Vec<String> {
        let p = |p: &Path| p.to_str().expect("utf-8").to_string();
        vec![
            "--nats-ca".into(),
            p(&self.ca),
            "--nats-cert".into(),
            p(&self.client.0),
            "--nats-key".into(),
            p(&self.client.1),
        ]
    }
}

fn secret(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, format!("{text}\n")).expect("write secret");
    p.to_str().expect("utf-8").to_string()
}

/// `observer run --nats URL FLAGS` and `observer tail --nats URL FLAGS`: a change made in a
/// namespace reaches the stream and the fleet tail.
fn publishes_and_follows(dir: &Path, url: &str, flags: &[String], tag: &str) {
    let record = dir.join(format!("{tag}.db"));
    let mut args: Vec<&str> = vec![
        "--record",
        record.to_str().expect("utf-8"),
        "--nats",
        url,
        "--node",
        tag,
    ];
    args.extend(flags.iter().map(String::as_str));
    let port = free_port();
    let d = Daemon::start(port, &args);
    let ns = Netns::new(tag);
    let w = Writer::new(&format!("{tag}writer"));
    let table = format!("{tag}table");
    ns.write(&w, &["nft", "add", "table", "inet", &table]);

    let mut tail = Command::new(observer_bin())
        .args([
            "tail", "--json", "--nats", url, "--since", "1h", "--node", tag,
        ])
        .args(flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start observer tail --nats");
    let lines = json_lines(tail.stdout.take().expect("stdout"));
    let mut seen = Vec::new();
    let got = wait_for(
        &lines,
        &mut seen,
        &format!("{table} in the fleet tail"),
        |v| v["kind"] == "change" && v["table"] == table.as_str(),
    );
    assert_eq!(got["node"], tag, "{got}");
    assert_eq!(got["netns"].as_u64(), Some(ns.inode()), "{got}");
    assert_eq!(got["process"]["actor"], format!("{tag}writer"), "{got}");
    let (_, m) = get(port, "/metrics", &[]);
    assert_eq!(
        common::metric(&m, "observer_nats_connected", &[]),
        Some(1.0),
        "{m}"
    );
    let _ = tail.kill();
    let _ = tail.wait();
    d.stop();
}

/// `observer tail --nats` with these flags fails; its error output.
fn refused_tail(url: &str, flags: &[String]) -> String {
    let out = Command::new("timeout")
        .arg("30")
        .arg(observer_bin())
        .args(["tail", "--json", "--nats", url])
        .args(flags)
        .stdin(Stdio::null())
        .output()
        .expect("run observer tail --nats");
    assert!(
        !out.status.success(),
        "observer tail --nats {url} {flags:?} did not fail: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn mutual_tls_with_a_user_and_password() {
    skip_unless!("nats-server", "ip", "nft");
    let dir = tempfile::tempdir().expect("tempdir");
    let tls = Tls::new(dir.path());
    let nats = SecureNats::start(dir.path(), &tls, "user: observer, password: \"s3cret pw\"");
    let mut flags = tls.flags();
    flags.extend([
        "--nats-user".into(),
        "observer".into(),
        "--nats-password-file".into(),
        secret(dir.path(), "pw", "s3cret pw"),
    ]);
    publishes_and_follows(dir.path(), &nats.url(), &flags, "natsuser");

    // A wrong password: the server's reason.
    let mut wrong = tls.flags();
    wrong.extend([
        "--nats-user".into(),
        "observer".into(),
        "--nats-password-file".into(),
        secret(dir.path(), "wrong", "nope"),
    ]);
    let err = refused_tail(&nats.url(), &wrong);
    assert!(
        err.to_lowercase().contains("authorization"),
        "a wrong password: {err}"
    );
    // No client certificate: the server that verifies clients refuses the handshake.
    let no_cert = vec![
        "--nats-ca".into(),
        tls.ca.to_str().expect("utf-8").to_string(),
        "--nats-user".into(),
        "observer".into(),
        "--nats-password-file".into(),
        secret(dir.path(), "pw2", "s3cret pw"),
    ];
    refused_tail(&nats.url(), &no_cert);
}

#[test]
fn tls_with_a_token() {
    skip_unless!("nats-server", "ip", "nft");
    let dir = tempfile::tempdir().expect("tempdir");
    let tls = Tls::new(dir.path());
    let nats = SecureNats::start(dir.path(), &tls, "token: \"t0ken-for-observer\"");
    let mut flags = tls.flags();
    flags.extend([
        "--nats-token-file".into(),
        secret(dir.path(), "token", "t0ken-for-observer"),
    ]);
    publishes_and_follows(dir.path(), &nats.url(), &flags, "natstoken");
    let mut wrong = tls.flags();
    wrong.extend([
        "--nats-token-file".into(),
        secret(dir.path(), "wrong", "other"),
    ]);
    let err = refused_tail(&nats.url(), &wrong);
    assert!(
        err.to_lowercase().contains("authorization"),
        "a wrong token: {err}"
    );
}

#[test]
fn tls_with_an_nkey() {
    skip_unless!("nats-server", "ip", "nft");
    let dir = tempfile::tempdir().expect("tempdir");
    let tls = Tls::new(dir.path());
    let user = nkeys::KeyPair::new_user();
    let nats = SecureNats::start(
        dir.path(),
        &tls,
        &format!("users: [ {{ nkey: {} }} ]", user.public_key()),
    );
    let mut flags = tls.flags();
    flags.extend([
        "--nats-nkey".into(),
        secret(dir.path(), "user.nk", &user.seed().expect("seed")),
    ]);
    publishes_and_follows(dir.path(), &nats.url(), &flags, "natsnkey");
    let other = nkeys::KeyPair::new_user();
    let mut wrong = tls.flags();
    wrong.extend([
        "--nats-nkey".into(),
        secret(dir.path(), "other.nk", &other.seed().expect("seed")),
    ]);
    let err = refused_tail(&nats.url(), &wrong);
    assert!(
        err.to_lowercase().contains("authorization"),
        "an unknown nkey: {err}"
    );
}

#[test]
fn credentials_in_plain_text_beyond_loopback_are_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = secret(dir.path(), "token", "t");
    let record = dir.path().join("r.db");
    // Bounded: a daemon that started instead of refusing would run until killed.
    let out = Command::new("timeout")
        .arg("30")
        .arg(observer_bin())
        .args(["run", "--record"])
        .arg(&record)
        .args(["--nats", "nats://nats.observer.example:4222"])
        .args(["--nats-token-file", &token])
        .stdin(Stdio::null())
        .output()
        .expect("run observer run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("plain text to nats.observer.example") && err.contains("--nats-insecure"),
        "{err}"
    );
    // The fleet view says the same.
    let err = refused_tail(
        "nats://nats.observer.example:4222",
        &["--nats-token-file".into(), token],
    );
    assert!(err.contains("plain text"), "{err}");
}
