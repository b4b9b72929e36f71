//! `observer tail --json` started as a user would start it, its lines waited for and checked.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::hooks::{
    check_legacy_source, forced_hooks, legacy_source, record_xt_fallback, slowdown, xt_fallback,
};
use crate::{json_lines_paced, observer_bin, run};

/// The observer binary under test, printing JSON lines.
pub struct Observer {
    child: Child,
    lines: mpsc::Receiver<Value>,
    /// Lines a second its stdout is read at (0: as fast as it comes).
    pace: Arc<AtomicU64>,
    pub seen: Vec<Value>,
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
        let pace = Arc::new(AtomicU64::new(0));
        let rx = json_lines_paced(child.stdout.take().expect("stdout"), pace.clone());
        let mut obs = Observer {
            child,
            lines: rx,
            pace,
            seen: Vec::new(),
        };
        // What the first reads of the namespaces found to warn of (a table of another test's
        // namespace held at chain level) may come before the ready line; nothing else does.
        let deadline = std::time::Instant::now() + Duration::from_secs(60 * slowdown());
        let first = loop {
            let line = obs
                .lines
                .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
                .expect("observer printed no ready line in time");
            assert_eq!(
                line["kind"], "status",
                "a line before the ready line: {line}"
            );
            if line["state"] == "ready" {
                break line;
            }
            assert!(
                line["state"] == "warning" || line["state"] == "gap",
                "a line before the ready line: {line}"
            );
            obs.seen.push(line);
        };
        let hooks = first["hooks"].as_str().unwrap_or("");
        if let Some(on) = forced.as_deref().and_then(|f| xt_fallback(hooks, f)) {
            if record_xt_fallback(on.clone()) {
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

    /// Read its stdout at most `lines_per_second` from now on (0: as fast as it comes), as a
    /// slow terminal or log shipper would.
    pub fn pace(&self, lines_per_second: u64) {
        self.pace.store(lines_per_second, Ordering::Relaxed);
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

    /// The next line, if one arrives within `within`: checked like every line, but not kept in
    /// `seen`, for a stream too long to keep (the hundred thousand lines of a big table's load).
    pub fn take_line(&mut self, within: Duration) -> Option<Value> {
        let v = self.lines.recv_timeout(within).ok()?;
        check_legacy_source(&v);
        Some(v)
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

    /// Send SIGTERM, as a DaemonSet's end does, hand `each` every line written after it until
    /// stdout closes (within `secs`), and check that it exits cleanly then.
    pub fn terminate_reading(mut self, secs: u64, mut each: impl FnMut(&Value)) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(secs * slowdown());
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(v) => each(&v),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("observer's stdout was still open {secs} s after SIGTERM")
                }
            }
        }
        let status = self.child.wait().expect("observer's exit status");
        assert!(
            status.success(),
            "observer exited with {status} after SIGTERM"
        );
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
