//! The live tail for a person at a terminal: fixed columns that fit its width, the changes of
//! one transaction under one header, incidents as blocks that say what happened and how it
//! ended, and a one-line status footer.
//!
//! JSON output never comes here (it is the stable contract, always whole). When stdout is not
//! a terminal the lines are whole too (nothing to fit), without colour and without footer.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{self, Write};
use std::time::Duration;

use super::terminal::{cut, strip_escapes};
use crate::output::line::{
    node_label, ChangeLine, IncidentLine, IncidentState, Line, Severity, StatusLine, StatusState,
};
use crate::output::people::for_people;
use crate::ruleset::{Backend, Op};
use crate::timestamp::Timestamp;

mod lines;

const RESET: &str = "\x1b[0m";
const DIM: &str = "\x1b[2m";
const BOLD: &str = "\x1b[1m";
const REVERSE: &str = "\x1b[7m";
const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const BLUE: &str = "\x1b[34m";
const MAGENTA: &str = "\x1b[35m";
const CYAN: &str = "\x1b[36m";

/// Below this width the rule text goes on a line of its own under the columns.
const NARROW: usize = 120;
/// Change lines shown under a transaction's header before the rest is summed up.
pub const DEFAULT_GROUP_LINES: usize = 5;

/// How the screen is drawn.
#[derive(Debug, Clone)]
pub struct ScreenOptions {
    pub colour: bool,
    /// The terminal's width, if output is cut to fit; `None`: lines are whole (`--wide`, or
    /// not a terminal).
    pub width: Option<usize>,
    /// Seconds east of UTC for the times shown (0 with `--utc`).
    pub utc_offset_s: i32,
    /// Changes of one transaction under one header (`--no-group` turns it off).
    pub group: bool,
    /// Change lines shown per transaction (`-v`: all of them).
    pub group_lines: usize,
    /// The status footer (only on a terminal).
    pub footer: bool,
    /// `--incidents-only`: one compact line per incident line.
    pub incidents_only: bool,
}

/// The terminal's width in columns, when stdout is a terminal.
pub fn terminal_width() -> Option<usize> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct we own; a descriptor that is no
    // terminal makes it fail without writing.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_col > 0).then_some(usize::from(ws.ws_col))
}

/// This machine's offset from UTC now, in seconds (for local times).
pub fn local_offset_s() -> i32 {
    // SAFETY: `localtime_r` only writes into the `tm` we own; `time` with a null pointer only
    // returns the time.
    unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&now, &mut tm).is_null() {
            0
        } else {
            i32::try_from(tm.tm_gmtoff).unwrap_or(0)
        }
    }
}

/// The live tail's renderer.
pub struct Screen<W: Write> {
    out: W,
    opt: ScreenOptions,
    /// The changes of the transaction being received.
    pending: Vec<ChangeLine>,
    footer_drawn: bool,
    /// The footer is published to the terminal's shared state, for the log to keep
    /// ([`Screen::sharing_the_terminal`]).
    shared: bool,
    /// Incidents whose last line left them open: id → severity.
    open: BTreeMap<String, Severity>,
    /// Event times (ns) of the changes of the last 10 s, for the rate in the footer.
    recent: VecDeque<Timestamp>,
    /// Lost records reported by gap lines.
    gaps: u64,
    /// The writer of each recent change, by `seq`, for the incidents that name them.
    writers: VecDeque<(u64, String)>,
    /// The longest node label seen ([`node_label`]), so that the where column shows every
    /// node's name whole (the fleet view; 0 on one node).
    node_width: usize,
}

/// A node label longer than this is cut in the where column.
const NODE_WIDTH_MAX: usize = 40;

/// Changes whose writer an incident block can still name.
const WRITERS_KEPT: usize = 4096;

/// A writer as the screen names it, with its ancestry up to the actor (not above it):
/// `iptables-legacy 4121 < sh < kube-proxy · kubelet.service`.
fn writer_chain(p: &crate::attribution::ProcessInfo) -> String {
    let mut s = format!("{} {}", p.comm, p.pid);
    let is_actor = |comm: &str| p.actor == comm || (comm.len() >= 15 && p.actor.starts_with(comm));
    if !p.ancestry.is_empty() && !is_actor(&p.comm) {
        // The way to the actor, not past it: `iptables 812 < timeout < sh < fail2ban-server`.
        for a in &p.ancestry {
            s.push_str(&format!(" < {}", a.comm));
            if is_actor(&a.comm) {
                break;
            }
        }
    } else if let Some(parent) = &p.parent_comm {
        s.push_str(&format!(" < {parent}"));
    }
    if let Some(u) = &p.unit {
        s.push_str(&format!(" · {u}"));
    }
    if let Some(pod) = &p.pod {
        s.push_str(&format!(" · pod {}", pod.uid));
    } else if let Some(c) = &p.container_id {
        s.push_str(&format!(" · container {}", &c[..c.len().min(12)]));
    }
    s
}

impl<W: Write> Screen<W> {
    pub fn new(out: W, opt: ScreenOptions) -> Screen<W> {
        Screen {
            out,
            opt,
            pending: Vec::new(),
            footer_drawn: false,
            shared: false,
            open: BTreeMap::new(),
            recent: VecDeque::new(),
            gaps: 0,
            writers: VecDeque::new(),
            node_width: 0,
        }
    }

    /// This screen is the process's stdout: warnings logged while its footer is drawn go above
    /// the footer, cut to the width ([`super::terminal`]), not onto it.
    pub fn sharing_the_terminal(mut self) -> Self {
        self.shared = true;
        self
    }

    /// Take one record. Changes wait for the end of their transaction when grouping. Its text
    /// is shown escaped (`crate::output::people`), whatever the lines make of it below.
    pub fn record(&mut self, r: &Line) -> io::Result<()> {
        let shown = for_people(r);
        let node = match &shown {
            Line::Change(c) => c.node.as_deref(),
            Line::Incident(i) => i.node.as_deref(),
            Line::Status(_) => None,
        };
        if let Some(n) = node {
            let w = node_label(n).chars().count().min(NODE_WIDTH_MAX);
            self.node_width = self.node_width.max(w);
        }
        match &shown {
            Line::Change(c) => {
                self.count_change(c);
                if self.opt.incidents_only {
                    return Ok(());
                }
                if self.opt.group {
                    if self.pending.first().is_some_and(|p| p.txn != c.txn) {
                        self.end_txn()?;
                    }
                    self.pending.push(c.clone());
                    Ok(())
                } else {
                    let lines = self.change_lines(c, "");
                    self.put(&lines)
                }
            }
            Line::Incident(i) => {
                self.end_txn()?;
                if i.state.is_final() {
                    self.open.remove(&i.id);
                } else {
                    self.open.insert(i.id.clone(), i.severity);
                }
                let lines = if self.opt.incidents_only {
                    vec![self.incident_line(i)]
                } else {
                    self.incident_block(i)
                };
                self.put(&lines)
            }
            Line::Status(s) => {
                self.end_txn()?;
                if s.state == StatusState::Gap {
                    self.gaps += 1;
                }
                let lines = vec![self.status_line(s)];
                self.put(&lines)
            }
        }
    }

    /// The transaction is complete: draw it.
    pub fn end_txn(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let txn = std::mem::take(&mut self.pending);
        let lines = self.txn_lines(txn);
        self.put(&lines)
    }

    fn count_change(&mut self, c: &ChangeLine) {
        if self.writers.len() == WRITERS_KEPT {
            self.writers.pop_front();
        }
        self.writers.push_back((c.seq, writer_chain(&c.process)));
        let t = c.time;
        self.recent.push_back(t);
        while self
            .recent
            .front()
            .is_some_and(|&f| t.elapsed_since(f) > Duration::from_secs(10))
        {
            self.recent.pop_front();
        }
    }

    /// Write lines, keeping the footer under them.
    fn put(&mut self, lines: &[String]) -> io::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut shared = self.shared.then(super::terminal::lock);
        if self.footer_drawn {
            self.out.write_all(b"\r\x1b[2K")?;
        }
        for l in lines {
            self.out.write_all(l.as_bytes())?;
            self.out.write_all(b"\n")?;
        }
        if self.opt.footer {
            let f = self.footer();
            self.out.write_all(f.as_bytes())?;
            self.footer_drawn = true;
            if let Some(shared) = shared.as_mut() {
                shared.width = self.opt.width;
                shared.colour = self.opt.colour;
                shared.footer = Some(f);
            }
        }
        self.out.flush()
    }

    fn footer(&self) -> String {
        let critical = self
            .open
            .values()
            .filter(|s| **s == Severity::Critical)
            .count();
        let rate = self.recent.len() as f64 / 10.0;
        let text = format!(
            " open incidents: {} ({critical} critical) · {rate:.1} changes/s · gaps: {} ",
            self.open.len(),
            self.gaps
        );
        let text = cut(
            &text,
            self.opt.width.unwrap_or(usize::MAX).saturating_sub(1),
        );
        self.paint(&text, REVERSE)
    }

    fn paint(&self, s: &str, colour: &str) -> String {
        if self.opt.colour && !s.is_empty() {
            format!("{colour}{s}{RESET}")
        } else {
            s.to_string()
        }
    }

    fn clock(&self, time: Timestamp) -> String {
        let narrow = self.narrow();
        let (h, m, s, sub) = time.time_of_day(i64::from(self.opt.utc_offset_s));
        if narrow {
            format!("{h:02}:{m:02}:{s:02}.{:03}", sub / 1_000_000)
        } else {
            format!("{h:02}:{m:02}:{s:02}.{:06}", sub / 1_000)
        }
    }
}

#[cfg(test)]
mod tests;
