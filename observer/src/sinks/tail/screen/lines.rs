//! The lines of the tail: a change's columns and rule text, a transaction under its header, an
//! incident's block and its one-line form, a status line; and the column and text helpers they
//! share.

use super::*;
use crate::output::line::{node_label, where_label};

impl<W: Write> Screen<W> {
    pub(super) fn narrow(&self) -> bool {
        self.opt.width.is_some_and(|w| w < NARROW)
    }

    pub(super) fn cols(&self) -> Cols {
        let mut k = self.base_cols();
        if self.node_width > 0 {
            // `node/` and a few columns of the namespace.
            k.netns = k.netns.max(self.node_width + 5);
        }
        k
    }

    /// Where a line happened, `width` columns at most: the node's label is kept whole (up to
    /// [`NODE_WIDTH_MAX`]) and the namespace's name is cut instead.
    pub(super) fn where_col(
        &self,
        node: Option<&str>,
        netns_name: Option<&str>,
        netns: u32,
        width: usize,
    ) -> String {
        let whole = where_label(node, netns_name, netns);
        let Some(n) = node else {
            return cut(&whole, width);
        };
        let n = cut(node_label(n), NODE_WIDTH_MAX);
        let ns_room = width.saturating_sub(n.chars().count() + 1);
        let ns = netns_name.map_or_else(|| netns.to_string(), str::to_string);
        cut(
            &format!("{n}/{}", cut(&ns, ns_room.max(1))),
            width.max(n.chars().count() + 2),
        )
    }

    fn base_cols(&self) -> Cols {
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
    pub(super) fn change_lines(&self, c: &ChangeLine, indent: &str) -> Vec<String> {
        let k = self.cols();
        let netns = self.where_col(c.node.as_deref(), c.netns_name.as_deref(), c.netns, k.netns);
        let where_ = format!(
            "{} {}",
            backend_short(c.backend, self.narrow()),
            c.family.as_str()
        );
        let chain = c.chain.clone().unwrap_or_default();
        let columns = format!(
            "{indent}{} {} {} {} {} {} {}",
            self.paint(&self.clock(c.time), DIM),
            pad(&netns, k.netns),
            pad(&where_, k.family),
            pad(&c.table, k.table),
            self.paint(&pad(c.op.as_str(), k.op), op_colour(c.op)),
            self.paint(&pad(&chain, k.chain), BOLD),
            self.paint(&pad(&c.process.shown_actor(), k.actor), CYAN),
        );
        let mut text = String::new();
        if !c.result.is_applied() {
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
        let visible = visible_len(indent) + self.clock(c.time).len() + k.sum() + 6;
        let painted = |t: &str| {
            if !c.result.is_applied() {
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
    pub(super) fn txn_lines(&self, mut txn: Vec<ChangeLine>) -> Vec<String> {
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
        let failed = txn.iter().filter(|c| !c.result.is_applied()).count();
        let netns = where_label(
            first.node.as_deref(),
            first.netns_name.as_deref(),
            first.netns,
        );
        let mut head = format!(
            "{} ── {} [{}] {} changes in {} {} (netns {}): {}",
            self.clock(first.time),
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
        if let Some(r) = &p.requested_by {
            head.push_str(&format!("; asked by {}", r.describe()));
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

    pub(super) fn status_line(&self, s: &StatusLine) -> String {
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
    pub(super) fn outcome(i: &IncidentLine, compact: bool) -> String {
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
    pub(super) fn incident_block(&self, i: &IncidentLine) -> Vec<String> {
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
            self.clock(i.time),
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
            self.clock(i.since),
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
    pub(super) fn incident_line(&self, i: &IncidentLine) -> String {
        let width = 10.max(self.cols().netns);
        let netns = self.where_col(i.node.as_deref(), i.netns_name.as_deref(), i.netns, width);
        // The same columns for every state; the last one says how it ended, or what happened.
        let outcome = Self::outcome(i, true);
        let text = match outcome.trim() {
            "" => i.summary.as_str(),
            o => o,
        };
        let line = format!(
            "{} {:<8} {:<8} {:<14} {:<width$}  {} ← {}  {}",
            self.clock(i.time),
            i.state.as_str(),
            i.severity.as_str(),
            i.kind.as_str(),
            netns,
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
pub(super) struct Cols {
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

pub(super) fn backend_short(b: Backend, narrow: bool) -> &'static str {
    match (b, narrow) {
        (Backend::Legacy, false) => "legacy",
        (Backend::Legacy, true) => "leg",
        (Backend::Nft, _) => "nft",
        (Backend::Ipset, false) => "ipset",
        (Backend::Ipset, true) => "ips",
    }
}

pub(super) fn op_colour(op: Op) -> &'static str {
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
pub(super) fn fold_builtin_chains(txn: &mut Vec<ChangeLine>) {
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
                        .is_some_and(crate::ruleset::is_builtin_chain)
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
pub(super) fn visible_len(s: &str) -> usize {
    strip_escapes(s).chars().count()
}

/// `s` in exactly `width` columns: cut with `…` or padded with spaces.
pub(super) fn pad(s: &str, width: usize) -> String {
    let cut = cut(s, width);
    let n = cut.chars().count();
    format!("{cut}{}", " ".repeat(width.saturating_sub(n)))
}

/// Words of `s` in lines of at most `width` columns (a longer word is cut).
pub(super) fn wrap(s: &str, width: usize) -> Vec<String> {
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
