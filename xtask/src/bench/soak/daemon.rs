//! `observer run` under soak: the daemon started from the soak's copy of the binary (stopped
//! with SIGTERM when dropped, and by the kernel if xtask dies), and its stdout read and counted
//! into [`Shared`].

use std::fs;
use std::io::{BufRead, BufReader, ErrorKind};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::signals::{command, kill, prctl, PR_SET_PDEATHSIG, SIGTERM};
use super::Shared;
use crate::cmd;

/// The running daemon: SIGTERM when dropped, then SIGKILL after 10 s.
pub(super) struct Daemon {
    child: Option<Child>,
    pub(super) pid: u32,
    pub(super) stderr: PathBuf,
}

impl Daemon {
    pub(super) fn start(bin: &Path, dir: &Path, port: u16) -> Result<(Daemon, ChildStdout)> {
        let stderr = dir.join("observer.stderr");
        let mut c = command(bin);
        c.args(["run", "--listen", &format!("127.0.0.1:{port}"), "--record"])
            .arg(dir.join("record.db"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(&stderr)?);
        // SAFETY: prctl() is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            c.pre_exec(|| {
                // Stopped cleanly if xtask dies without running its clean-up (SIGKILL).
                prctl(PR_SET_PDEATHSIG, SIGTERM as std::ffi::c_ulong);
                Ok(())
            });
        }
        eprintln!("xtask: == {}", cmd::describe(&c));
        let mut child = c.spawn().context("starting observer run")?;
        let out = child.stdout.take().context("observer's stdout")?;
        let pid = child.id();
        Ok((
            Daemon {
                child: Some(child),
                pid,
                stderr,
            },
            out,
        ))
    }

    pub(super) fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGTERM (a clean stop: streams end, the record is written), then up to 10 s.
    pub(super) fn stop(&mut self) -> Result<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            bail!("observer was already stopped");
        };
        if child.try_wait()?.is_none() {
            // SAFETY: kill() of our own child, not yet reaped, so the pid is still its own.
            unsafe {
                kill(child.id() as i32, SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(s) = child.try_wait()? {
                return Ok(s);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("observer did not exit within 10 s of SIGTERM; killed it");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub(super) fn stderr_tail(&self, n: usize) -> Vec<String> {
        let text = fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        lines[lines.len().saturating_sub(n)..].to_vec()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.stop();
        }
    }
}

/// The number after `"key":` in a JSON line (no full parse: 1,000 lines a second).
pub(super) fn number_after(line: &str, key: &str) -> Option<u64> {
    let at = line.find(key)? + key.len();
    let digits: &str = &line[at..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

pub(super) fn read_stdout(out: ChildStdout, sh: &Shared) {
    let mut r = BufReader::with_capacity(1 << 16, out);
    let mut line = Vec::new();
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        let l = String::from_utf8_lossy(&line);
        if l.starts_with(r#"{"kind":"change""#) {
            sh.changes.fetch_add(1, Ordering::Relaxed);
            if let Some(seq) = number_after(&l, r#""seq":"#) {
                let last = sh.last_seq.swap(seq, Ordering::Relaxed);
                if seq != last + 1 {
                    sh.stdout_seq_jumps.fetch_add(1, Ordering::Relaxed);
                }
            }
            let netns = number_after(&l, r#""netns":"#);
            let ino = sh.churn_ino.load(Ordering::Relaxed);
            if ino != 0 && netns == Some(ino) {
                if l.contains(r#""backend":"legacy""#) {
                    sh.churn_legacy.fetch_add(1, Ordering::Relaxed);
                } else if l.contains(r#""backend":"nft""#) {
                    sh.churn_nft.fetch_add(1, Ordering::Relaxed);
                }
            } else if !sh
                .load_inos
                .iter()
                .any(|i| netns == Some(i.load(Ordering::Relaxed)))
            {
                sh.other_changes.fetch_add(1, Ordering::Relaxed);
            }
        } else if l.starts_with(r#"{"kind":"status","state":"ready""#) {
            sh.ready.store(true, Ordering::SeqCst);
        } else if l.starts_with(r#"{"kind":"status","state":"gap""#) {
            sh.gap_lines.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_numbers() {
        let l = r#"{"kind":"change","seq":42,"netns":4026532314,"backend":"nft"}"#;
        assert_eq!(number_after(l, r#""seq":"#), Some(42));
        assert_eq!(number_after(l, r#""netns":"#), Some(4026532314));
        assert_eq!(number_after(l, r#""pid":"#), None);
    }
}
