//! The processes the bench runs: a command timed from start to reaping, a slow one bounded by a
//! time limit, and `observer tail --json` with each line it prints stamped the moment it arrives.

use std::{
    env, fs,
    io::{self, ErrorKind, Write as _},
    path::{Path, PathBuf},
    process::{self, Child, Command, ExitStatus, Stdio},
    sync::mpsc::{self, RecvTimeoutError},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};
use serde_json::Value;

use super::READY_TIMEOUT;
use crate::cmd;

/// Runs the command (stdin and stdout to /dev/null) and returns when its process was reaped and
/// how long it ran. Fails, with its stderr, unless it exits with 0.
pub(crate) fn run_timed(c: &mut Command) -> Result<(Instant, Duration)> {
    let desc = cmd::describe(c);
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let out = c
        .output()
        .with_context(|| format!("could not start `{desc}`"))?;
    let done = Instant::now();
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        bail!("`{desc}` failed ({}): {}", out.status, stderr.trim());
    }
    Ok((done, done - start))
}

/// Runs a command that may be slow or hang, with stdin from `input`, its stdout and stderr in
/// temporary files; kills it after `limit`. Returns its stdout.
pub(crate) fn run_bounded(
    c: &mut Command,
    input: Option<&[u8]>,
    limit: Duration,
) -> Result<String> {
    let desc = cmd::describe(c);
    let dir = env::temp_dir();
    let out_path = dir.join(format!("obs-bench-{}-cmd.out", process::id()));
    let err_path = dir.join(format!("obs-bench-{}-cmd.err", process::id()));
    c.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(fs::File::create(&out_path)?)
    .stderr(fs::File::create(&err_path)?);
    let mut child = c
        .spawn()
        .with_context(|| format!("could not start `{desc}`"))?;
    if let Some(input) = input {
        let mut stdin = child.stdin.take().context("no stdin")?;
        let written = stdin.write_all(input);
        drop(stdin);
        if let Err(e) = written {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e).with_context(|| format!("writing to `{desc}`"));
        }
    }
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            // Not reaped yet, so the PID is still this child's.
            let _ = child.kill();
            let _ = child.wait();
            bail!("`{desc}` did not finish within {limit:?}; killed it");
        }
        thread::sleep(Duration::from_millis(10));
    };
    let stdout = fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = fs::read_to_string(&err_path).unwrap_or_default();
    let _ = fs::remove_file(&out_path);
    let _ = fs::remove_file(&err_path);
    if !status.success() {
        bail!("`{desc}` failed ({status}): {}", last_lines(&stderr, 20));
    }
    Ok(stdout)
}

fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.trim_end().lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A running `observer tail --json`, its stdout read on a thread that timestamps every line the
/// moment it arrives. Stopped with SIGINT when dropped (or by [`Observer::stop`]).
pub(crate) struct Observer {
    child: Option<Child>,
    pub(crate) pid: u32,
    lines: mpsc::Receiver<(Instant, String)>,
    /// JSON lines the last wait skipped.
    pub(crate) skipped: Vec<Value>,
    stderr: PathBuf,
    desc: String,
}

impl Observer {
    /// Starts it and waits for the `{"kind":"status","state":"ready"}` line.
    pub(crate) fn start(bin: &Path, args: &[&str], tag: &str) -> Result<Observer> {
        let stderr = env::temp_dir().join(format!("obs-bench-{}-{tag}.stderr", process::id()));
        let file =
            fs::File::create(&stderr).with_context(|| format!("creating {}", stderr.display()))?;
        let mut c = Command::new(bin);
        c.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(file);
        let desc = cmd::describe(&c);
        let mut child = c
            .spawn()
            .with_context(|| format!("could not start `{desc}`"))?;
        let pid = child.id();
        let out = child.stdout.take().context("observer has no stdout")?;
        let mut obs = Observer {
            child: Some(child),
            pid,
            lines: timed_lines(out),
            skipped: Vec::new(),
            stderr,
            desc,
        };
        eprintln!("xtask: == {}", obs.desc);
        obs.wait(READY_TIMEOUT, "ready line", |v| {
            v["kind"] == "status" && v["state"] == "ready"
        })?;
        Ok(obs)
    }

    /// Skips lines until a JSON line for which `want` is true; fails after `timeout` or when
    /// observer exits.
    pub(crate) fn wait(
        &mut self,
        timeout: Duration,
        what: &str,
        want: impl Fn(&Value) -> bool,
    ) -> Result<(Instant, Value)> {
        match self.wait_opt(timeout, what, want)? {
            Some(hit) => Ok(hit),
            None => bail!(
                "observer printed no {what} within {timeout:?}{}",
                self.stderr_tail()
            ),
        }
    }

    /// Like [`Observer::wait`], but `None` after `timeout`. The JSON lines skipped on the way
    /// are kept in `self.skipped`.
    pub(crate) fn wait_opt(
        &mut self,
        timeout: Duration,
        what: &str,
        want: impl Fn(&Value) -> bool,
    ) -> Result<Option<(Instant, Value)>> {
        self.skipped.clear();
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((at, line)) => {
                    if let Ok(v) = serde_json::from_str::<Value>(&line) {
                        if want(&v) {
                            return Ok(Some((at, v)));
                        }
                        self.skipped.push(v);
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => {
                    // Its stdout closed: it exited, or is about to.
                    thread::sleep(Duration::from_millis(200));
                    let status = self
                        .exited()
                        .map_or_else(|| "still running".to_owned(), |s| s.to_string());
                    bail!(
                        "observer closed its stdout ({status}) before printing {what}{}",
                        self.stderr_tail()
                    )
                }
            }
        }
    }

    /// How it ended, once it has (`None` while it runs).
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Lines that arrived and were not read yet.
    pub(crate) fn drain(&self) -> Vec<(Instant, String)> {
        self.lines.try_iter().collect()
    }

    pub(crate) fn stderr_tail(&self) -> String {
        let text = fs::read_to_string(&self.stderr).unwrap_or_default();
        if text.trim().is_empty() {
            format!(" (`{}`; its stderr is empty)", self.desc)
        } else {
            format!(
                " (`{}`); its stderr ({}) ends with:\n{}",
                self.desc,
                self.stderr.display(),
                last_lines(&text, 15)
            )
        }
    }

    /// SIGINT, then up to 10 s for it to exit (SIGKILL after that).
    fn stop(&mut self) -> Result<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            bail!("observer was already stopped");
        };
        if child.try_wait()?.is_none() {
            // Not reaped yet, so the PID is still observer's.
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait()? {
                if status.success() {
                    let _ = fs::remove_file(&self.stderr);
                }
                return Ok(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "observer did not exit within 10 s of SIGINT; killed it{}",
                    self.stderr_tail()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops it and adds a note unless it exited with status 0.
    pub(crate) fn finish(mut self, part: &str, notes: &mut Vec<String>) {
        match self.stop() {
            Ok(s) if s.success() => {}
            Ok(s) => notes.push(format!(
                "{part}: observer exited with {s} after SIGINT (stderr kept in {})",
                self.stderr.display()
            )),
            Err(e) => notes.push(format!("{part}: {e:#}")),
        }
    }
}

/// Reads `out` on a thread of its own and sends each line (without its line end) with the
/// instant it arrived: one timestamp per read, so every line of one chunk arrived then.
pub(crate) fn timed_lines(
    mut out: impl io::Read + Send + 'static,
) -> mpsc::Receiver<(Instant, String)> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        let mut pending = Vec::new();
        loop {
            let n = match out.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            let at = Instant::now();
            pending.extend_from_slice(&buf[..n]);
            while let Some(nl) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=nl).collect();
                let line = String::from_utf8_lossy(&line).trim_end().to_owned();
                if tx.send((at, line)).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

impl Drop for Observer {
    fn drop(&mut self) {
        if self.child.is_some() {
            if let Err(e) = self.stop() {
                eprintln!("xtask: warning: {e:#}");
            }
        }
    }
}

pub(crate) fn is_change(v: &Value, backend: &str, op: &str, chain: &str) -> bool {
    v["kind"] == "change" && v["backend"] == backend && v["op"] == op && v["chain"] == chain
}
