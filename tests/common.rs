//! Shared pieces of the integration tests: a namespace that removes itself, a writer script with
//! a distinctive name, and the observer binary started as a user would start it.
//!
//! These tests need root and the real tools (nft, iptables-legacy, iptables-nft, ip). Without
//! them each test prints `skipping: <reason>` and passes, so `cargo test` works anywhere (under
//! `CI=true` it fails instead); the CI
//! script runs them as root.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

#[allow(unused_imports)] // each test file uses some of them
pub use test_support::{free_port, json_lines, skip_reason, wait_for};

#[macro_export]
macro_rules! skip_unless {
    ($($tool:expr),*) => {
        if let Some(reason) = test_support::skip_reason(&[$($tool),*]) {
            test_support::skip(format_args!("{reason}"));
            return;
        }
    };
}

/// A network namespace created for one test, deleted when dropped (also on failure).
pub struct Netns {
    pub name: String,
    _ns: test_support::Netns,
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        let ns = test_support::Netns::add(format!("obs-{tag}-{}", std::process::id()))
            .unwrap_or_else(|e| panic!("{e}"));
        Netns {
            name: ns.name().to_string(),
            _ns: ns,
        }
    }

    pub fn inode(&self) -> u64 {
        self._ns.inode().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Run a command inside the namespace through the writer script (so the writer's parent is
    /// the script), failing the test if it fails.
    pub fn write(&self, writer: &Writer, args: &[&str]) {
        let mut full = vec!["netns", "exec", &self.name];
        let script = writer.path.to_str().expect("utf-8 path");
        full.push(script);
        full.extend_from_slice(args);
        run("ip", &full);
    }

    /// Run a command inside the namespace (not through a writer) that must succeed; returns
    /// its stdout.
    pub fn read(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("spawn ip netns exec");
        assert!(
            out.status.success(),
            "{args:?} in {} failed: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run a command that must fail inside the namespace through the writer script; returns
    /// its stderr.
    pub fn write_refused(&self, writer: &Writer, args: &[&str]) -> String {
        let script = writer.path.to_str().expect("utf-8 path");
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, script])
            .args(args)
            .output()
            .expect("spawn");
        assert!(!out.status.success(), "{args:?} should have failed");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Run the writer script inside the namespace from the cgroup `cg`: the process moves itself
    /// there before `ip netns exec` (which remounts /sys, hiding the cgroup tree) runs the script.
    pub fn write_in_cgroup(&self, writer: &Writer, cg: &Cgroup, args: &[&str]) {
        let procs = cg.procs_file();
        let script = writer.path.to_str().expect("utf-8 path");
        let mut full = vec![
            "-c",
            "echo $$ > \"$0\" && exec ip netns exec \"$@\"",
            procs.to_str().expect("utf-8 path"),
            &self.name,
            script,
        ];
        full.extend_from_slice(args);
        run("sh", &full);
    }

    /// Same, with a stdin (for `*-restore`).
    pub fn write_stdin(&self, writer: &Writer, args: &[&str], input: &str) {
        use std::io::Write;
        let script = writer.path.to_str().expect("utf-8 path");
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.name, script])
            .args(args)
            .stdin(Stdio::piped())
            .spawn()
            .expect("spawn");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        let status = child.wait().expect("wait");
        assert!(status.success(), "{args:?} failed");
    }
}

pub fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A shell script with a distinctive name that runs its arguments as a child, standing for a
/// component such as kube-proxy.
pub struct Writer {
    pub path: PathBuf,
    pub name: String,
    _dir: tempfile::TempDir,
}

impl Writer {
    pub fn new(name: &str) -> Writer {
        // Not `exec`: the tool must be a child of the script.
        Writer::script(name, "\"$@\"")
    }

    /// A script named `name` whose body is `body` (sh syntax; `"$@"` are its arguments). Every
    /// command it runs is its child, so the script is the actor of the changes they make.
    pub fn script(name: &str, body: &str) -> Writer {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\nset -e\n{body}\n")).expect("write script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Writer {
            path,
            name: name.to_string(),
            _dir: dir,
        }
    }
}

/// The observer binary under test, printing JSON lines.
pub struct Observer {
    child: Child,
    lines: mpsc::Receiver<Value>,
    pub seen: Vec<Value>,
}

/// The hook backend the tests force with `--hooks`, from OBSERVER_TEST_HOOKS (`fentry`, `kprobe`,
/// `tracepoint`); unset: observer chooses (`auto`) and the host's kernel gives tracepoints.
pub fn forced_hooks() -> Option<String> {
    std::env::var("OBSERVER_TEST_HOOKS")
        .ok()
        .filter(|v| !v.is_empty() && v != "auto")
}

/// The backend the x_tables hook went on when the forced one refused that hook alone (fentry
/// on 5.10), as the first ready line that said so named it.
static XT_FALLBACK: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The `source` every legacy change must carry in this run.
pub fn legacy_source() -> String {
    XT_FALLBACK
        .get()
        .cloned()
        .or_else(forced_hooks)
        .unwrap_or_else(|| "tracepoint".into())
}

/// The backend of the hooks other than x_tables in this run (refusals, generations): the forced
/// one, else the host kernel's tracepoints.
pub fn hooks_source() -> String {
    forced_hooks().unwrap_or_else(|| "tracepoint".into())
}

/// Where the x_tables hook went when `forced` refused it alone: the ready line's `hooks` puts it
/// on another backend with `(x_tables: FORCED refused: REASON)`, and every other hook on
/// `forced`. `None` when it is on `forced`, or when the line says anything else.
pub fn xt_fallback(hooks: &str, forced: &str) -> Option<String> {
    let on = hooks.strip_prefix("x_tables=")?.split(' ').next()?;
    let others_on_forced = [
        "namespaces",
        "umount",
        "nf_writers",
        "nft_gens",
        "nf_refusals",
    ]
    .iter()
    .all(|h| hooks.contains(&format!(" {h}={forced}")));
    (on != forced && others_on_forced && hooks.contains(&format!("(x_tables: {forced} refused: ")))
        .then(|| on.to_string())
}

/// How many times longer than on real hardware to wait for a change: OBSERVER_TEST_SLOWDOWN
/// (a guest under software emulation is much slower), default 1.
pub fn slowdown() -> u64 {
    std::env::var("OBSERVER_TEST_SLOWDOWN")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1)
}

/// A change line of the legacy backend must name the backend that is expected to see it.
fn check_legacy_source(v: &Value) {
    if is_change(v) && v["backend"] == "legacy" {
        assert_eq!(
            v["source"].as_str(),
            Some(legacy_source().as_str()),
            "legacy change from the wrong hook backend: {v}"
        );
    }
}

pub fn observer_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_observer"))
}

/// The observer crate's `bench` example (the measuring tools, outside the shipped binary),
/// which `cargo test` builds beside the binary unless it was asked for single test targets.
pub fn bench_bin() -> std::path::PathBuf {
    let bin = observer_bin()
        .parent()
        .expect("the binary's directory")
        .join("examples")
        .join("bench");
    assert!(
        bin.is_file(),
        "{} is missing: `cargo test` builds it with the workspace's other targets; after \
         `cargo test --test NAME` build it with `cargo build --release -p observer --example bench`",
        bin.display()
    );
    bin
}

impl Observer {
    /// Start `observer tail --json ARGS` and wait for its ready line.
    pub fn start(args: &[&str]) -> Observer {
        let forced = forced_hooks();
        let mut child = Command::new(observer_bin())
            .args(["tail", "--json"])
            .args(forced.iter().flat_map(|h| ["--hooks", h.as_str()]))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start observer");
        let rx = json_lines(child.stdout.take().expect("stdout"));
        let mut obs = Observer {
            child,
            lines: rx,
            seen: Vec::new(),
        };
        let first = obs
            .lines
            .recv_timeout(Duration::from_secs(60 * slowdown()))
            .expect("observer printed no ready line in time");
        assert_eq!(first["kind"], "status", "first line: {first}");
        assert_eq!(first["state"], "ready", "first line: {first}");
        let hooks = first["hooks"].as_str().unwrap_or("");
        if let Some(on) = forced.as_deref().and_then(|f| xt_fallback(hooks, f)) {
            if XT_FALLBACK.set(on.clone()).is_ok() {
                println!(
                    "the x_tables hook is on {on}: this kernel refuses it alone on the forced \
                     backend: {hooks}"
                );
            }
        }
        let want = format!("x_tables={}", legacy_source());
        assert!(
            hooks.starts_with(&want) || args.windows(2).any(|a| a == ["--hooks", "netlink"]),
            "the x_tables hook is not on the expected backend ({want}): {first}"
        );
        obs.seen.push(first);
        obs
    }

    /// The observer process's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stop (`true`) or continue (`false`) the observer process, as CPU starvation would: while
    /// it is stopped the kernel queues its notifications and drops what does not fit.
    pub fn freeze(&self, stopped: bool) {
        let sig = if stopped { "-STOP" } else { "-CONT" };
        run("kill", &[sig, &self.child.id().to_string()]);
    }

    /// Wait until a change line matches `pred`; returns it. Fails after `secs`.
    pub fn expect(&mut self, what: &str, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_line(&format!("change line for {what}"), secs, |v| {
            is_change(v) && pred(v)
        })
    }

    /// Wait until an incident line of type `ty` matches `pred` (already seen or arriving within
    /// `secs`); returns it.
    pub fn expect_incident(&mut self, ty: &str, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_line(&format!("{ty} incident line"), secs, |v| {
            is_incident(v) && v["type"] == ty && pred(v)
        })
    }

    /// Wait until any line matches `pred`; fails after `secs` showing every line seen.
    pub fn wait_line(&mut self, what: &str, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_line_since(0, what, secs, pred)
    }

    /// How many lines have been seen: lines after this mark are newer than anything done before.
    pub fn mark(&self) -> usize {
        self.seen.len()
    }

    /// Like `expect`, among the lines after `mark` only.
    pub fn expect_since(
        &mut self,
        mark: usize,
        what: &str,
        secs: u64,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        self.wait_line_since(mark, &format!("change line for {what}"), secs, |v| {
            is_change(v) && pred(v)
        })
    }

    /// Wait until a line after `mark` matches `pred`; fails after `secs` showing every line seen.
    pub fn wait_line_since(
        &mut self,
        mark: usize,
        what: &str,
        secs: u64,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        if let Some(v) = self.seen.iter().skip(mark).find(|v| pred(v)) {
            return v.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(secs * slowdown());
        loop {
            match self.next_line(deadline) {
                Some(v) if pred(v) => return v.clone(),
                Some(_) => {}
                None => panic!("no {what} within {secs} s; saw:\n{}", self.dump()),
            }
        }
    }

    /// The next line, if one arrives before `deadline`: checked and kept in `seen`.
    fn next_line(&mut self, deadline: Instant) -> Option<&Value> {
        let left = deadline.saturating_duration_since(Instant::now());
        let v = self.lines.recv_timeout(left).ok()?;
        check_legacy_source(&v);
        self.seen.push(v);
        self.seen.last()
    }

    /// Wait until `n` lines seen match `pred` (counting those already seen); fails after `secs`
    /// with the count reached. Returns the count, which may pass `n` if more arrive at once.
    pub fn wait_count(
        &mut self,
        what: &str,
        secs: u64,
        n: usize,
        pred: impl Fn(&Value) -> bool,
    ) -> usize {
        let mut count = self.seen.iter().filter(|v| pred(v)).count();
        let deadline = Instant::now() + Duration::from_secs(secs * slowdown());
        while count < n {
            match self.next_line(deadline) {
                Some(v) => count += usize::from(pred(v)),
                None => panic!("{count} of the {n} lines for {what} within {secs} s"),
            }
        }
        count
    }

    /// Every incident line seen so far.
    pub fn incidents(&self) -> Vec<&Value> {
        self.seen.iter().filter(|v| is_incident(v)).collect()
    }

    /// Every line seen so far, one per line (for failure messages).
    pub fn dump(&self) -> String {
        self.seen
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Collect whatever arrives within `ms` milliseconds.
    pub fn drain(&mut self, ms: u64) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_millis(ms);
        let mut got = Vec::new();
        while let Some(v) = self.next_line(deadline) {
            got.push(v.clone());
        }
        got
    }

    /// Every change line seen so far.
    pub fn changes(&self) -> Vec<&Value> {
        self.seen.iter().filter(|v| is_change(v)).collect()
    }

    /// Stop with Ctrl-C, as a person would, and check that it exits cleanly.
    pub fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let deadline = Instant::now() + Duration::from_secs(10 * slowdown());
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                assert!(
                    status.success(),
                    "observer exited with {status} after SIGINT"
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "observer did not exit in time after SIGINT"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn is_change(v: &Value) -> bool {
    v["kind"] == "change"
}

pub fn is_incident(v: &Value) -> bool {
    v["kind"] == "incident"
}

/// A cgroup v2 directory owned by one test (`obs-test-<pid>-<tag>/REL` under the cgroup2 mount),
/// removed with its parents when dropped. Processes moved into it must have exited by then.
pub struct Cgroup {
    top: PathBuf,
    pub path: PathBuf,
}

impl Cgroup {
    /// Create `REL` (e.g. `system.slice/iptables.service`) under a fresh test-owned parent, or
    /// say why it cannot be done here.
    pub fn new(tag: &str, rel: &str) -> Result<Cgroup, String> {
        let mount = cgroup2_mount().ok_or("no cgroup2 hierarchy is mounted")?;
        let top = mount.join(format!("obs-test-{}-{tag}", std::process::id()));
        let path = top.join(rel);
        let cg = Cgroup { top, path };
        std::fs::create_dir_all(&cg.path)
            .map_err(|e| format!("cannot create {}: {e}", cg.path.display()))?;
        Ok(cg)
    }

    /// Writing a pid here moves that process into the cgroup.
    pub fn procs_file(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let mut dir = self.path.clone();
        loop {
            let _ = std::fs::remove_dir(&dir);
            if dir == self.top || !dir.pop() {
                break;
            }
        }
    }
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a
/// hybrid system), from /proc/self/mountinfo: the mount of the hierarchy's root, not of a subtree.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let f: Vec<&str> = left.split(' ').collect();
        if right.split(' ').next()? != "cgroup2" || f.get(3) != Some(&"/") {
            return None;
        }
        f.get(4).map(PathBuf::from)
    })
}

/// A predicate on the common fields.
pub fn change<'a>(op: &'a str, chain: Option<&'a str>) -> impl Fn(&Value) -> bool + 'a {
    move |v: &Value| {
        v["op"] == op
            && match chain {
                Some(c) => v["chain"] == c,
                None => true,
            }
    }
}

/// `observer run` as a DaemonSet would start it.
pub struct Daemon {
    pub child: Child,
    pub lines: mpsc::Receiver<Value>,
    pub seen: Vec<Value>,
}

impl Daemon {
    pub fn start(port: u16, args: &[&str]) -> Daemon {
        let listen = format!("127.0.0.1:{port}");
        let mut child = Command::new(observer_bin())
            .args(["run", "--listen", &listen])
            .args(args)
            .env_remove("OBSERVER_CONFIG")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start observer run");
        let lines = json_lines(child.stdout.take().expect("stdout"));
        let mut d = Daemon {
            child,
            lines,
            seen: Vec::new(),
        };
        let first = d
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("observer run printed no ready line within 60 s");
        assert_eq!(first["kind"], "status", "{first}");
        assert_eq!(first["state"], "ready", "{first}");
        d.seen.push(first);
        d
    }

    pub fn expect(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        wait_for(&self.lines, &mut self.seen, what, |v| {
            v["kind"] == "change" && pred(v)
        })
    }

    /// SIGTERM, as the kubelet stops a pod; the exit must be clean.
    pub fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("kill");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                assert!(
                    status.success(),
                    "observer run exited with {status} after SIGTERM"
                );
                return;
            }
            assert!(Instant::now() < deadline, "no exit within 15 s of SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process (a daemon, a server, a tail) killed and reaped with the test, also when the
/// test fails.
pub struct KilledOnDrop(pub Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A plain HTTP/1.0 GET; returns the status and the body.
pub fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("send");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read");
    let status = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {resp}"));
    let body = resp.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    (status, body.to_string())
}

/// The value of one sample of `/metrics`.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        let (n, rest) = series.split_once('{').unwrap_or((series, ""));
        if n != name {
            return None;
        }
        let all = labels
            .iter()
            .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
        all.then(|| value.parse().ok()).flatten()
    })
}

/// `observer query --json --record RECORD ARGS`, as lines; fails the test when the query fails.
pub fn query(record: &Path, args: &[&str]) -> Vec<Value> {
    let out = Command::new(observer_bin())
        .args(["query", "--json", "--record"])
        .arg(record)
        .args(args)
        .output()
        .expect("run observer query");
    assert!(
        out.status.success(),
        "observer query {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("query line is JSON"))
        .collect()
}

/// A message of observer's stream: its subject, headers and JSON payload.
pub type StreamMessage = (String, std::collections::HashMap<String, String>, Value);

/// Every message on `observer.>` in the stream `name`, in stream order, read with an ordered
/// consumer of its own.
pub async fn stream_messages(
    js: &async_nats::jetstream::Context,
    name: &str,
) -> Vec<StreamMessage> {
    use futures_util::StreamExt as _;
    let mut stream = js.get_stream(name).await.expect("the stream");
    let total = stream.info().await.expect("stream info").state.messages;
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
            filter_subject: "observer.>".into(),
            deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("consumer");
    let mut messages = consumer.messages().await.expect("messages");
    let mut out = Vec::new();
    while (out.len() as u64) < total {
        let m = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .expect("the stream's messages within 10 s")
            .expect("a message")
            .expect("no error");
        let headers = m
            .headers
            .iter()
            .flat_map(|h| h.iter())
            .map(|(k, v)| {
                let v = v.first().map(|v| v.as_str().to_string());
                (k.to_string(), v.unwrap_or_default())
            })
            .collect();
        let payload: Value = serde_json::from_slice(&m.payload).expect("JSON payload");
        out.push((m.subject.to_string(), headers, payload));
    }
    out
}
