//! `observer run` as a DaemonSet would start it, `observer query` on its record, and children
//! killed with the test.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{json_lines, observer_bin, wait_for};

/// `observer run` as a DaemonSet would start it.
pub struct Daemon {
    pub child: Child,
    pub lines: mpsc::Receiver<Value>,
    pub seen: Vec<Value>,
}

impl Daemon {
    /// `observer run --record RECORD --nats URL --node NODE EXTRA...`: a node publishing its
    /// record to NATS.
    pub fn publishing(port: u16, record: &Path, url: &str, node: &str, extra: &[&str]) -> Daemon {
        let record = record.to_str().expect("utf-8 path");
        let args = ["--record", record, "--nats", url, "--node", node];
        let args: Vec<&str> = args.iter().chain(extra).copied().collect();
        Daemon::start(port, &args)
    }

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
