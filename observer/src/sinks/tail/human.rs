//! Aligned, coloured lines for a person watching a terminal.

use crate::output::line::{ChangeLine, IncidentLine, IncidentState, Line, Severity, StatusLine};
use crate::output::people::for_people;
use crate::ruleset::Op;
use crate::timestamp::Timestamp;

const RESET: &str = "\x1b[0m";
const DIM: &str = "\x1b[2m";
const BOLD: &str = "\x1b[1m";
const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const CYAN: &str = "\x1b[36m";
const MAGENTA: &str = "\x1b[35m";

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

fn paint(s: &str, colour: &str, on: bool) -> String {
    if on {
        format!("{colour}{s}{RESET}")
    } else {
        s.to_string()
    }
}

/// One line for a person: its text shown escaped (`crate::output::people`), then coloured.
pub fn render(record: &Line, colour: bool) -> String {
    match &for_people(record) {
        Line::Status(s) => status(s, colour),
        Line::Change(c) => change(c, colour),
        Line::Incident(i) => incident(i, colour),
    }
}

/// Incidents stand apart from changes: a `!!` marker, the severity in colour, the summary on a
/// line of its own.
fn incident(i: &IncidentLine, colour: bool) -> String {
    let sev_colour = match i.severity {
        Severity::Critical => RED,
        Severity::Warning => YELLOW,
    };
    let state = match i.state {
        IncidentState::Open => "INCIDENT",
        IncidentState::Update => "incident update",
        IncidentState::Resolved => "incident RESOLVED",
        IncidentState::Expired => "incident EXPIRED",
    };
    let mut extra = String::new();
    if i.state == IncidentState::Resolved {
        let repairs: Vec<String> = i
            .owners
            .iter()
            .filter_map(|o| {
                let ms = o.repair_ms?;
                let by = o.repaired_by.as_deref().unwrap_or(&o.owner);
                Some(format!(
                    "{} after {:.1} s by {by}",
                    o.owner,
                    ms as f64 / 1000.0
                ))
            })
            .collect();
        if !repairs.is_empty() {
            extra.push_str(&format!("  repaired: {}", repairs.join(", ")));
        }
    }
    if let Some(m) = &i.merged_into {
        extra.push_str(&format!("  merged into {m}"));
    }
    if let Some(c) = i.cycles {
        extra.push_str(&format!("  cycles={c}"));
    }
    if !i.lost.is_empty() {
        extra.push_str(&format!("  lost: {}", i.lost.join(" ")));
    }
    let head = format!(
        "!! {} {} {} [{}] owner {} by {}{}  ({})",
        clock(i.time),
        state,
        i.kind.as_str(),
        i.severity.as_str(),
        i.owner,
        i.actors.join(", "),
        extra,
        i.id
    );
    format!(
        "{}\n   {}",
        paint(&head, &format!("{BOLD}{sev_colour}"), colour),
        i.summary
    )
}

fn status(s: &StatusLine, colour: bool) -> String {
    let mut line = format!("-- {}: {}", s.state, s.message);
    for lost in &s.lost {
        line.push_str(&format!("\n-- not seen: {lost}"));
    }
    paint(&line, MAGENTA, colour)
}

/// `HH:MM:SS.micro`, in UTC.
fn clock(time: Timestamp) -> String {
    let (h, m, s, ns) = time.time_of_day(0);
    format!("{h:02}:{m:02}:{s:02}.{:06}", ns / 1000)
}

fn change(c: &ChangeLine, colour: bool) -> String {
    let netns =
        crate::output::line::where_label(c.node.as_deref(), c.netns_name.as_deref(), c.netns);
    let what = match (&c.chain, &c.rule) {
        (Some(ch), Some(r)) => format!("{ch}  {r}"),
        (Some(ch), None) => ch.clone(),
        (None, Some(r)) => r.clone(),
        (None, None) => String::new(),
    };
    let detail = c
        .detail
        .as_ref()
        .map(|d| format!("  ({d})"))
        .unwrap_or_default();
    let detail = match &c.forms.iptables_unreadable {
        Some(why) => format!("{detail}  (iptables-nft cannot read this rule: {why})"),
        None => detail,
    };
    let who = format!(
        "by {} [{} {}{}]{}",
        c.process.actor,
        c.process.comm,
        c.process.pid,
        c.process
            .parent_comm
            .as_ref()
            .map(|p| format!(" < {p}"))
            .unwrap_or_default(),
        c.process
            .requested_by
            .as_ref()
            .map(|r| format!(" asked by {}", r.describe()))
            .unwrap_or_default()
    );
    let result = if c.result.is_applied() {
        String::new()
    } else {
        paint(&format!("  FAILED: {}", c.result), RED, colour)
    };
    let replayed = if c.replayed {
        "  (found, not seen live)"
    } else if c.recovered {
        "  (recovered after lost notifications)"
    } else {
        ""
    };
    format!(
        "{} {:<12} {:<6} {:<6} {:<8} {} {}{}{}  {}{}",
        paint(&clock(c.time), DIM, colour),
        netns,
        c.backend.as_str(),
        c.family.as_str(),
        c.table,
        paint(&format!("{:<14}", c.op.as_str()), op_colour(c.op), colour),
        paint(&what, BOLD, colour),
        detail,
        replayed,
        paint(&who, DIM, colour),
        result,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::ProcessInfo;
    use crate::output::line::Source;
    use crate::ruleset::{Backend, Family};

    fn rec() -> ChangeLine {
        ChangeLine {
            seq: 1,
            time: crate::timestamp::Timestamp::parse("2026-11-21T05:42:37.123456789Z").unwrap(),
            netns: 42,
            netns_name: Some("blue".into()),
            node: None,
            backend: Backend::Nft,
            family: Family::Inet,
            table: "t".into(),
            chain: Some("c".into()),
            op: Op::ChainFlush,
            rule: None,
            forms: Default::default(),
            position: None,
            detail: Some("3 rules deleted".into()),
            txn: "x".into(),
            result: "ok".into(),
            source: Source::Netlink,
            process: ProcessInfo::named(5, "nft", Some((4, "admin.sh")), "admin.sh").into(),
            replayed: false,
            recovered: false,
            restore: None,
        }
    }

    #[test]
    fn plain_lines_have_no_escape_codes_and_say_everything() {
        let line = render(&Line::Change(rec()), false);
        assert!(!line.contains('\x1b'));
        for part in [
            "05:42:37.123456",
            "blue",
            "nft",
            "inet",
            "chain_flush",
            "c",
            "3 rules deleted",
            "by admin.sh",
            "nft 5 < admin.sh",
        ] {
            assert!(line.contains(part), "{part} missing in {line}");
        }
    }

    #[test]
    fn hostile_text_is_shown_escaped_and_colour_is_only_ours() {
        let mut c = rec();
        c.op = Op::RuleAdd;
        c.rule = Some("-m comment --comment \"ok\x1b]0;t\x07\r\u{202e}\" -j ACCEPT".into());
        std::sync::Arc::make_mut(&mut c.process).comm = "e\x1b[31mvil".into();
        std::sync::Arc::make_mut(&mut c.process).actor = "e\x1b[31mvil".into();
        let plain = render(&Line::Change(c.clone()), false);
        assert!(!plain.chars().any(char::is_control), "{plain:?}");
        assert!(
            plain.contains("--comment \"ok\\x1b]0;t\\x07\\x0d\\u202e\""),
            "{plain}"
        );
        assert!(plain.contains("by e\\x1b[31mvil"), "{plain}");
        // In colour, every ESC left starts one of observer's own colours.
        let coloured = render(&Line::Change(c), true);
        for (i, _) in coloured.match_indices('\x1b') {
            let code = &coloured[i..];
            assert!(
                [RESET, DIM, BOLD, GREEN]
                    .iter()
                    .any(|k| code.starts_with(k)),
                "{coloured:?}"
            );
        }
    }

    #[test]
    fn colour_lines_are_coloured() {
        let line = render(&Line::Change(rec()), true);
        assert!(line.contains(YELLOW), "a flush is yellow: {line:?}");
    }
}
