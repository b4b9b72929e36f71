//! The live tail for a person at a terminal: fixed columns that fit its width, the changes of
//! one transaction under one header, incidents as blocks that say what happened and how it
//! ended, and a one-line status footer.
//!
//! JSON output never comes here (it is the stable contract, always whole). When stdout is not
//! a terminal the lines are whole too (nothing to fit), without colour and without footer.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{self, Write};

use super::record::{
    parse_rfc3339_ns, ChangeRecord, IncidentRecord, IncidentState, Record, Severity, StatusRecord,
};
use super::terminal::{cut, strip_escapes};
use crate::ruleset::{Backend, Op};

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
    pending: Vec<ChangeRecord>,
    footer_drawn: bool,
    /// The footer is published to the terminal's shared state, for the log to keep
    /// ([`Screen::sharing_the_terminal`]).
    shared: bool,
    /// Incidents whose last line left them open: id → severity.
    open: BTreeMap<String, Severity>,
    /// Event times (ns) of the changes of the last 10 s, for the rate in the footer.
    recent: VecDeque<i128>,
    /// Lost records reported by gap lines.
    gaps: u64,
    /// The writer of each recent change, by `seq`, for the incidents that name them.
    writers: VecDeque<(u64, String)>,
}

/// Changes whose writer an incident block can still name.
const WRITERS_KEPT: usize = 4096;

/// A writer as the screen names it, with its ancestry up to the actor:
/// `iptables-legacy 4121 < sh < kube-proxy · kubelet.service`.
fn writer_chain(p: &crate::attribution::ProcessInfo) -> String {
    let mut s = format!("{} {}", p.comm, p.pid);
    if !p.ancestry.is_empty() {
        // The way to the actor: `iptables 812 < timeout < sh < fail2ban-server`.
        for a in &p.ancestry {
            s.push_str(&format!(" < {}", a.comm));
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
        }
    }

    /// This screen is the process's stdout: warnings logged while its footer is drawn go above
    /// the footer, cut to the width ([`super::terminal`]), not onto it.
    pub fn sharing_the_terminal(mut self) -> Self {
        self.shared = true;
        self
    }

    /// Take one record. Changes wait for the end of their transaction when grouping.
    pub fn record(&mut self, r: &Record) -> io::Result<()> {
        match r {
            Record::Change(c) => {
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
            Record::Incident(i) => {
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
            Record::Status(s) => {
                self.end_txn()?;
                if s.state == "gap" {
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

    fn count_change(&mut self, c: &ChangeRecord) {
        if self.writers.len() == WRITERS_KEPT {
            self.writers.pop_front();
        }
        self.writers.push_back((c.seq, writer_chain(&c.process)));
        let Some(t) = parse_rfc3339_ns(&c.time) else {
            return;
        };
        self.recent.push_back(t);
        while self.recent.front().is_some_and(|&f| t - f > 10_000_000_000) {
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

    fn clock(&self, time: &str) -> String {
        let narrow = self.narrow();
        let Some(ns) = parse_rfc3339_ns(time) else {
            return time.to_string();
        };
        let secs = ns.div_euclid(1_000_000_000) + i128::from(self.opt.utc_offset_s);
        let sub = ns.rem_euclid(1_000_000_000);
        let day = secs.rem_euclid(86_400);
        let (h, m, s) = (day / 3600, day / 60 % 60, day % 60);
        if narrow {
            format!("{h:02}:{m:02}:{s:02}.{:03}", sub / 1_000_000)
        } else {
            format!("{h:02}:{m:02}:{s:02}.{:06}", sub / 1_000)
        }
    }

    fn narrow(&self) -> bool {
        self.opt.width.is_some_and(|w| w < NARROW)
    }

    fn cols(&self) -> Cols {
        if self.narrow() {
            Cols {
                netns: 7,
                family: 8,
                table: 8,
                op: 13,
                chain: 16,
                actor: 10,
            }
        } else {
            Cols {
                netns: 12,
                family: 10,
                table: 12,
                op: 14,
                chain: 25,
                actor: 16,
            }
        }
    }

    /// One change: the columns, then the rule text (on a line of its own when narrow).
    fn change_lines(&self, c: &ChangeRecord, indent: &str) -> Vec<String> {
        let k = self.cols();
        let netns = super::record::where_label(c.node.as_deref(), c.netns_name.as_deref(), c.netns);
        let where_ = format!(
            "{} {}",
            backend_short(c.backend, self.narrow()),
            c.family.as_str()
        );
        let chain = c.chain.clone().unwrap_or_default();
        let columns = format!(
            "{indent}{} {} {} {} {} {} {}",
            self.paint(&self.clock(&c.time), DIM),
            pad(&netns, k.netns),
            pad(&where_, k.family),
            pad(&c.table, k.table),
            self.paint(&pad(c.op.as_str(), k.op), op_colour(c.op)),
            self.paint(&pad(&chain, k.chain), BOLD),
            self.paint(&pad(&c.process.actor, k.actor), CYAN),
        );
        let mut text = String::new();
        if c.result != "ok" {
            text.push_str(&format!("FAILED: {}  ", c.result));
        }
        if let Some(r) = &c.rule {
            text.push_str(r);
        }
        if let Some(d) = &c.detail {
            if !text.is_empty() {
                text.push_str("  ");
            }
            text.push_str(&format!("({d})"));
        }
        if c.replayed {
            text.push_str("  (found, not seen live)");
        } else if c.recovered {
            text.push_str("  (recovered after lost notifications)");
        }
        let text = text.trim_end().to_string();
        let visible = visible_len(indent) + self.clock(&c.time).len() + k.sum() + 6;
        let painted = |t: &str| {
            if c.result != "ok" {
                self.paint(t, RED)
            } else {
                t.to_string()
            }
        };
        match self.opt.width {
            None => vec![format!("{columns}  {}", painted(&text))
                .trim_end()
                .to_string()],
            Some(w) if self.narrow() => {
                let columns = if visible > w {
                    // Narrower than the columns themselves: cut them (colour is lost there).
                    cut(&strip_escapes(&columns), w)
                } else {
                    columns
                };
                let mut v = vec![columns.trim_end().to_string()];
                if !text.is_empty() {
                    let lead = format!("{indent}  ↳ ");
                    let room = w.saturating_sub(visible_len(&lead));
                    v.push(format!("{lead}{}", painted(&cut(&text, room))));
                }
                v
            }
            Some(w) => {
                let room = w.saturating_sub(visible + 2);
                vec![format!("{columns}  {}", painted(&cut(&text, room)))
                    .trim_end()
                    .to_string()]
            }
        }
    }

    /// One transaction: its lines alone, or under a header when it holds several changes.
    fn txn_lines(&self, mut txn: Vec<ChangeRecord>) -> Vec<String> {
        fold_builtin_chains(&mut txn);
        if txn.len() == 1 {
            return self.change_lines(&txn[0], "");
        }
        let first = &txn[0];
        let p = &first.process;
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        let mut tables: BTreeSet<String> = BTreeSet::new();
        for c in &txn {
            *counts.entry(c.op.as_str()).or_default() += 1;
            tables.insert(format!("{} {}", c.family.as_str(), c.table));
        }
        let mut by_count: Vec<(&str, usize)> = counts.into_iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let ops: Vec<String> = by_count.iter().map(|(o, n)| format!("{n} {o}")).collect();
        let failed = txn.iter().filter(|c| c.result != "ok").count();
        let netns = super::record::where_label(
            first.node.as_deref(),
            first.netns_name.as_deref(),
            first.netns,
        );
        let mut head = format!(
            "{} ── {} [{}] {} changes in {} {} (netns {}): {}",
            self.clock(&first.time),
            p.actor,
            writer_chain(p),
            txn.len(),
            first.backend.as_str(),
            tables.into_iter().collect::<Vec<_>>().join(", "),
            netns,
            ops.join(", ")
        );
        if failed > 0 {
            head.push_str(&format!("; {failed} FAILED"));
        }
        if let Some(w) = self.opt.width {
            head = cut(&head, w);
        }
        let mut lines = vec![self.paint(&head, BLUE)];
        let shown = txn.len().min(self.opt.group_lines);
        for c in &txn[..shown] {
            lines.extend(self.change_lines(c, "  "));
        }
        if shown < txn.len() {
            let more = format!(
                "  … {} more changes in this transaction (-v shows them all)",
                txn.len() - shown
            );
            lines.push(self.paint(&more, DIM));
        }
        lines
    }

    fn status_line(&self, s: &StatusRecord) -> String {
        let fit = |l: String| match self.opt.width {
            Some(w) => cut(&l, w),
            None => l,
        };
        let mut line = fit(format!("-- {}: {}", s.state, s.message));
        for lost in &s.lost {
            line.push('\n');
            line.push_str(&fit(format!("-- not seen: {lost}")));
        }
        self.paint(&line, MAGENTA)
    }

    /// How an incident line ended, in a few words; `compact` leaves out what the line's owner
    /// column already says (an owner that repaired its own objects).
    fn outcome(i: &IncidentRecord, compact: bool) -> String {
        match i.state {
            IncidentState::Resolved => {
                if let Some(m) = &i.merged_into {
                    return format!(" → part of {m}");
                }
                let repairs: Vec<String> = i
                    .owners
                    .iter()
                    .filter_map(|o| {
                        let ms = o.repair_ms?;
                        let by = o.repaired_by.as_deref().unwrap_or(&o.owner);
                        let after = format!("after {:.1} s", ms as f64 / 1000.0);
                        Some(match (compact, by == o.owner, i.owners.len()) {
                            (true, true, 1) => after,
                            (true, true, _) => format!("{} {after}", o.owner),
                            (true, false, 1) => format!("{after} by {by}"),
                            (true, false, _) => format!("{} {after} by {by}", o.owner),
                            (false, _, _) => format!("{after} by {by}"),
                        })
                    })
                    .collect();
                if repairs.is_empty() {
                    String::new()
                } else {
                    format!(" {}", repairs.join(", "))
                }
            }
            IncidentState::Expired => {
                let never = i.unrepaired_owners();
                if never.is_empty() {
                    String::new()
                } else {
                    format!(" NOT repaired: {}", never.join(", "))
                }
            }
            IncidentState::Open | IncidentState::Update => {
                let mut s = String::new();
                if let Some(c) = i.cycles {
                    s.push_str(&format!(" {c} cycles"));
                }
                if !i.lost.is_empty() {
                    s.push_str(&format!(" lost {}", i.lost.join(" ")));
                }
                s
            }
        }
    }

    /// An incident, as a block: what, where, by whom, how it stands, then the summary.
    fn incident_block(&self, i: &IncidentRecord) -> Vec<String> {
        let sev_colour = match i.severity {
            Severity::Critical => RED,
            Severity::Warning => YELLOW,
        };
        let state_colour = match i.state {
            IncidentState::Resolved => GREEN,
            IncidentState::Expired => RED,
            _ => sev_colour,
        };
        let where_ = if i.tables.is_empty() {
            format!("{} {} {}", i.backend.as_str(), i.family.as_str(), i.table)
        } else {
            format!("{} {}", i.backend.as_str(), i.tables.join(", "))
        };
        let head = format!(
            "!! {} {} {} {}{}",
            self.clock(&i.time),
            self.paint(
                &i.severity.as_str().to_uppercase(),
                &format!("{BOLD}{sev_colour}")
            ),
            self.paint(i.kind.as_str(), BOLD),
            self.paint(
                &i.state.as_str().to_uppercase(),
                &format!("{BOLD}{state_colour}")
            ),
            Self::outcome(i, false),
        );
        let mut lines = vec![head];
        let facts = format!(
            "   {} · owner {} · by {} · since {} · {}",
            where_,
            i.owner,
            i.actors.join(", "),
            self.clock(&i.since),
            i.id
        );
        let facts = match self.opt.width {
            Some(w) => cut(&facts, w),
            None => facts,
        };
        lines.push(self.paint(&facts, DIM));
        // Who wrote it, as the change lines named them (the first of its changes still known).
        let writer = i.events.iter().find_map(|seq| {
            self.writers
                .iter()
                .rev()
                .find(|(s, _)| s == seq)
                .map(|(_, w)| w.clone())
        });
        if let Some(w) = writer {
            let line = format!("   writer: {w}");
            let line = match self.opt.width {
                Some(width) => cut(&line, width),
                None => line,
            };
            lines.push(self.paint(&line, DIM));
        }
        if i.kind.as_str() == "mass_flush" && !i.owners.is_empty() {
            let owners: Vec<String> = i
                .owners
                .iter()
                .map(|o| {
                    let how = match (o.repaired, o.repair_ms) {
                        (true, Some(ms)) => format!("repaired after {:.1} s", ms as f64 / 1000.0),
                        _ if i.state.is_final() => "NEVER repaired".to_string(),
                        _ => "not repaired yet".to_string(),
                    };
                    format!("{} ({} chains: {how})", o.owner, o.chains.len())
                })
                .collect();
            lines.push(format!("   owners: {}", owners.join("; ")));
        }
        let width = self
            .opt
            .width
            .unwrap_or(usize::MAX)
            .saturating_sub(3)
            .max(20);
        for l in wrap(&i.summary, width) {
            lines.push(format!("   {l}"));
        }
        lines
    }

    /// `--incidents-only`: one line per incident line.
    fn incident_line(&self, i: &IncidentRecord) -> String {
        let netns = super::record::where_label(i.node.as_deref(), i.netns_name.as_deref(), i.netns);
        // The same columns for every state; the last one says how it ended, or what happened.
        let outcome = Self::outcome(i, true);
        let text = match outcome.trim() {
            "" => i.summary.as_str(),
            o => o,
        };
        let line = format!(
            "{} {:<8} {:<8} {:<14} {:<10}  {} ← {}  {}",
            self.clock(&i.time),
            i.state.as_str(),
            i.severity.as_str(),
            i.kind.as_str(),
            cut(&netns, 10),
            i.owner,
            i.actors.join(","),
            text
        );
        let line = match self.opt.width {
            Some(w) => cut(&line, w),
            None => line,
        };
        let colour = match (i.state, i.severity) {
            (IncidentState::Resolved, _) => GREEN,
            (_, Severity::Critical) => RED,
            _ => YELLOW,
        };
        self.paint(&line, colour)
    }
}

/// Column widths of a change line (the time comes first, the rule text last).
struct Cols {
    netns: usize,
    family: usize,
    table: usize,
    op: usize,
    chain: usize,
    actor: usize,
}

impl Cols {
    fn sum(&self) -> usize {
        self.netns + self.family + self.table + self.op + self.chain + self.actor
    }
}

fn backend_short(b: Backend, narrow: bool) -> &'static str {
    match (b, narrow) {
        (Backend::Legacy, false) => "legacy",
        (Backend::Legacy, true) => "leg",
        (Backend::Nft, _) => "nft",
        (Backend::Ipset, false) => "ipset",
        (Backend::Ipset, true) => "ips",
    }
}

fn op_colour(op: Op) -> &'static str {
    match op {
        Op::TableCreate | Op::ChainCreate | Op::RuleAdd | Op::SetCreate | Op::ElementAdd => GREEN,
        Op::TableDelete | Op::ChainDelete | Op::RuleDelete | Op::SetDelete | Op::ElementDelete => {
            RED
        }
        Op::TableFlush | Op::ChainFlush | Op::SetFlush => YELLOW,
        Op::ChainUpdate | Op::RuleReplace | Op::TableReplace | Op::SetRename | Op::SetSwap => CYAN,
    }
}

/// A legacy table's first appearance is one line: the built-in chains created with it are
/// named in the table's line instead of one line each.
fn fold_builtin_chains(txn: &mut Vec<ChangeRecord>) {
    let created: Vec<(String, usize)> = txn
        .iter()
        .enumerate()
        .filter(|(_, c)| c.op == Op::TableCreate)
        .map(|(i, c)| (c.table.clone(), i))
        .collect();
    for (table, at) in created {
        let builtin: Vec<String> = txn
            .iter()
            .filter(|c| {
                c.op == Op::ChainCreate
                    && c.table == table
                    && c.chain
                        .as_deref()
                        .is_some_and(crate::incidents::owners::is_builtin_chain)
            })
            .filter_map(|c| c.chain.clone())
            .collect();
        if builtin.is_empty() {
            continue;
        }
        let t = &mut txn[at];
        let extra = format!("built-in chains {}", builtin.join(", "));
        t.detail = Some(match t.detail.take() {
            Some(d) => format!("{d}; {extra}"),
            None => extra,
        });
        txn.retain(|c| {
            !(c.op == Op::ChainCreate
                && c.table == table
                && c.chain.as_ref().is_some_and(|ch| builtin.contains(ch)))
        });
    }
}

/// Printable width of a string (escape sequences do not count).
fn visible_len(s: &str) -> usize {
    strip_escapes(s).chars().count()
}

/// `s` in exactly `width` columns: cut with `…` or padded with spaces.
fn pad(s: &str, width: usize) -> String {
    let cut = cut(s, width);
    let n = cut.chars().count();
    format!("{cut}{}", " ".repeat(width.saturating_sub(n)))
}

/// Words of `s` in lines of at most `width` columns (a longer word is cut).
fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in s.split_whitespace() {
        let need = line.chars().count() + usize::from(!line.is_empty()) + word.chars().count();
        if !line.is_empty() && need > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&cut(word, width));
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests;
