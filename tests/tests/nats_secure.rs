//! Fleet streaming to a NATS server that asks for TLS and credentials, as production servers
//! do: Debian's nats-server, started by the test with a configuration file, requires mutual TLS
//! (a CA and client certificates made by the test) with a user and password, or a token, or an
//! nkey, or, in operator mode, a `.creds` file (a user JWT signed by an account the operator
//! signed, all made by the test). For each, `observer run --nats tls://...` publishes a change
//! made in a namespace of the test's own and `observer tail --nats` with the same settings shows
//! it; wrong credentials are refused with the server's reason, and a client without the
//! certificate gets nothing. Needs root (the daemon loads its hooks) and nats-server.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use test_support::{
    free_port, get, json_lines, observer_bin, skip_unless, wait_for, write_pair, Ca, Daemon, Netns,
    Writer,
};

/// nats-server with JetStream and TLS, from a configuration file; `auth` is its
/// authentication: an `authorization { ... }` block, or an operator and its accounts.
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
                 {auth}\n",
                store = dir.join(format!("js-{port}")),
                cert = tls.server.0,
                key = tls.server.1,
                ca = tls.ca,
            ),
        )
        .expect("write nats.conf");
        let log = dir.join(format!("nats-{port}.log"));
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("create the server's log"))
            .spawn()
            .expect("start nats-server");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(std::net::TcpStream::connect(("127.0.0.1", monitor)).is_ok()
            && get(monitor, "/healthz?js-enabled-only=true", &[]).0 == 200)
        {
            assert!(
                Instant::now() < deadline,
                "nats-server did not become healthy within 30 s ({}):\n{}",
                conf.display(),
                std::fs::read_to_string(&log).unwrap_or_default()
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
    assert_eq!(got["netns"].as_u64(), Some(ns.ino()), "{got}");
    assert_eq!(got["process"]["actor"], format!("{tag}writer"), "{got}");
    let (_, m) = get(port, "/metrics", &[]);
    assert_eq!(
        test_support::metric(&m, "observer_nats_connected", &[]),
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
    let nats = SecureNats::start(
        dir.path(),
        &tls,
        "authorization { user: observer, password: \"s3cret pw\" }",
    );
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
    let nats = SecureNats::start(
        dir.path(),
        &tls,
        "authorization { token: \"t0ken-for-observer\" }",
    );
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
        &format!(
            "authorization {{ users: [ {{ nkey: {} }} ] }}",
            user.public_key()
        ),
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

/// base64url without padding, as JWTs encode their parts.
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
        }
    }
    out
}

/// A NATS JWT: `nats` claims about `subject`'s public key, named `name`, signed by `issuer`.
fn jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats: serde_json::Value) -> String {
    let iat = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let claims = serde_json::json!({
        // Unique per token; the server does not read it back.
        "jti": format!("{subject}{iat}"),
        "iat": iat,
        "iss": issuer.public_key(),
        "sub": subject,
        "name": name,
        "nats": nats,
    });
    let header = base64url(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let body = base64url(claims.to_string().as_bytes());
    let signing_input = format!("{header}.{body}");
    let signature = issuer.sign(signing_input.as_bytes()).expect("sign");
    format!("{signing_input}.{}", base64url(&signature))
}

/// An account's JWT signed by the operator, with no limits, and JetStream enabled unless it is
/// the system account (which the server does not allow to use JetStream).
fn account_jwt(
    operator: &nkeys::KeyPair,
    account: &nkeys::KeyPair,
    name: &str,
    jetstream: bool,
) -> String {
    let mut limits = serde_json::json!({
        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
        "wildcards": true, "conn": -1, "leaf": -1,
    });
    if jetstream {
        for k in ["mem_storage", "disk_storage", "streams", "consumer"] {
            limits[k] = (-1).into();
        }
    }
    jwt(
        operator,
        &account.public_key(),
        name,
        serde_json::json!({"type": "account", "version": 2, "limits": limits}),
    )
}

/// A `.creds` file for a user of `account`, as `nsc` writes it: the user's JWT and nkey seed.
fn creds(dir: &Path, file: &str, account: &nkeys::KeyPair) -> String {
    let user = nkeys::KeyPair::new_user();
    let token = jwt(
        account,
        &user.public_key(),
        "observer",
        serde_json::json!({
            "type": "user", "version": 2,
            "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
        }),
    );
    let seed = user.seed().expect("seed");
    secret(
        dir,
        file,
        &format!(
            "-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\
             NKEYs are sensitive and should be treated as secrets.\n\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
             *************************************************************"
        ),
    )
}

#[test]
fn tls_with_a_creds_file_of_an_operator_mode_server() {
    skip_unless!("nats-server", "ip", "nft");
    let dir = tempfile::tempdir().expect("tempdir");
    let tls = Tls::new(dir.path());
    // An operator, the system account and the account observer's user belongs to, their JWTs
    // given to the server in its configuration (the memory resolver).
    let operator = nkeys::KeyPair::new_operator();
    let system = nkeys::KeyPair::new_account();
    let account = nkeys::KeyPair::new_account();
    let operator_jwt = jwt(
        &operator,
        &operator.public_key(),
        "observer-test-operator",
        serde_json::json!({"type": "operator", "version": 2, "system_account": system.public_key()}),
    );
    let nats = SecureNats::start(
        dir.path(),
        &tls,
        &format!(
            "operator: {operator_jwt:?}\n\
             system_account: {sys}\n\
             resolver: MEMORY\n\
             resolver_preload: {{ {sys}: {sys_jwt:?}, {acc}: {acc_jwt:?} }}",
            sys = system.public_key(),
            sys_jwt = account_jwt(&operator, &system, "SYS", false),
            acc = account.public_key(),
            acc_jwt = account_jwt(&operator, &account, "fleet", true),
        ),
    );
    let mut flags = tls.flags();
    flags.extend([
        "--nats-creds".into(),
        creds(dir.path(), "observer.creds", &account),
    ]);
    publishes_and_follows(dir.path(), &nats.url(), &flags, "natscreds");

    // A user of an account the server does not know: refused with the server's reason.
    let stranger = nkeys::KeyPair::new_account();
    let mut wrong = tls.flags();
    wrong.extend([
        "--nats-creds".into(),
        creds(dir.path(), "stranger.creds", &stranger),
    ]);
    let err = refused_tail(&nats.url(), &wrong);
    assert!(
        err.to_lowercase().contains("authorization"),
        "a user of an unknown account: {err}"
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
