//! `observer query`: search the forensic record that `observer run` keeps ("who deleted
//! KUBE-SVC-X at 03:12?"). Opens the file read-only, so a copy taken from a node works, and so
//! does the live file of a running daemon.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::Value;

use crate::cli::query::QueryArgs;
use crate::output::{ChangeLine, Line};
use crate::shown::escape;
use crate::sinks::tail::human;
use crate::store::{self, Selection, Stored};
use crate::timestamp::Timestamp;

pub fn run(a: QueryArgs) -> anyhow::Result<()> {
    if a.at.is_some() || a.diff.is_some() || a.incident.is_some() {
        return forensic(&a);
    }
    let since = a
        .since
        .as_deref()
        .map(Timestamp::parse_arg)
        .transpose()
        .context("--since")?
        .map(Timestamp::unix_nanos);
    let until = a
        .until
        .as_deref()
        .map(Timestamp::parse_arg)
        .transpose()
        .context("--until")?
        .map(Timestamp::unix_nanos);
    let netns = a
        .netns
        .as_deref()
        .map(crate::netns::resolve_arg)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--netns: {e}"))?;
    let chain_glob = a
        .chain
        .as_deref()
        .map(crate::output::filter::Filter::chain_glob)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let record = if a.record.is_dir() {
        a.record.join("record.db")
    } else {
        a.record.clone()
    };
    let conn = store::open_ro(&record)?;
    let sel = Selection {
        since_ns: since,
        until_ns: until,
        chain_glob: a.chain.clone(),
        actor: a.actor.clone(),
        ops: a.op.iter().map(|o| o.as_str().to_string()).collect(),
        netns,
        backend: a
            .backend
            .map(|b| crate::ruleset::Backend::from(b).as_str().to_string()),
        table: a.table.clone(),
        types: a.types.clone(),
        ..Default::default()
    };
    let want_changes = a.types.is_empty() && !a.incidents && !a.open;
    let want_incidents = a.op.is_empty();
    let mut rows: Vec<(i64, u8, u64, String)> = Vec::new();
    if want_changes {
        for r in store::select_changes(&conn, &sel).context("reading changes")? {
            rows.push((r.time_ns, 0, r.number, r.json));
        }
    }
    if want_incidents {
        let filter = crate::daemon::incident_filter(
            netns,
            a.backend.map(crate::ruleset::Backend::from),
            a.table.clone(),
            chain_glob,
            a.actor.clone(),
            a.types.clone(),
        );
        for Stored {
            number,
            time_ns,
            json,
        } in store::select_incidents(&conn, &sel).context("reading incidents")?
        {
            let keep = serde_json::from_str::<Value>(&json)
                .map(|v| filter(&v))
                .unwrap_or(false);
            if keep {
                rows.push((time_ns, 1, number, json));
            }
        }
    }
    if a.open {
        rows = still_open(rows);
    }
    // The stretches the record does not hold, where they fall among the rows; retention's
    // start of the record only when --since reaches before it.
    let gaps = store::select_gaps(&conn, since, until).context("reading the record's gaps")?;
    for g in gaps
        .into_iter()
        .filter(|g| since.is_some() || g.reason != store::gaps::RETENTION)
    {
        let line = Line::Status(crate::output::StatusLine::record_gap(&g, g.message()));
        // Among the changes of its time, where its first seq would be.
        let seq = g.first_seq.unwrap_or(0);
        rows.push((g.first_ns(), 0, seq, serde_json::to_string(&line)?));
    }
    rows.sort();
    if let Some(l) = a.limit {
        rows.truncate(l);
    }
    let colour =
        !a.no_color && std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal();
    let mut out = std::io::stdout().lock();
    for (_, _, _, json) in &rows {
        let line = if a.json {
            json.clone()
        } else {
            render(json, colour)
        };
        if let Err(e) = writeln!(out, "{line}") {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(e.into());
        }
    }
    if rows.is_empty() && !a.json {
        eprintln!("observer: nothing in {} matches", record.display());
    }
    Ok(())
}

fn record_path(a: &QueryArgs) -> PathBuf {
    if a.record.is_dir() {
        a.record.join("record.db")
    } else {
        a.record.clone()
    }
}

/// `--at`, `--diff` and `--incident`: the record's rulesets rebuilt (see `crate::forensics`).
fn forensic(a: &QueryArgs) -> anyhow::Result<()> {
    use crate::forensics::gaps as fg;
    use crate::forensics::query as fq;
    let scope = fq::Scope {
        netns: a
            .netns
            .as_deref()
            .map(crate::netns::resolve_arg)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--netns: {e}"))?,
        table: a.table.clone(),
        backend: a.backend.map(crate::ruleset::Backend::from),
    };
    let conn = store::open_ro(&record_path(a))?;
    let mut lines = Vec::new();
    if let Some(t) = &a.at {
        let at_ns = fq::parse_time("--at", t)?;
        let (seq, states, holes) = fq::at_with_gaps(&conn, at_ns, &scope)?;
        if a.json {
            gap_lines(&holes, &mut lines)?;
            for v in fq::at_json(at_ns, seq, &states, &holes) {
                lines.push(serde_json::to_string(&v)?);
            }
        } else {
            lines.push(fq::at_text(at_ns, seq, &states, &holes));
            if states.is_empty() {
                eprintln!("observer: the record holds no ruleset at that time in that scope");
            }
        }
    } else if let Some(id) = &a.incident {
        let story = crate::forensics::story::story(&conn, id)?;
        let holes = fg::of_story(&fg::all(&conn)?, &story);
        if a.restore_script {
            let chains = crate::restore::record::chains_from_record(&conn, &story)?;
            lines.push(fg::text(&holes) + &crate::restore::record::shown_script(&story, chains));
        } else if a.json {
            gap_lines(&holes, &mut lines)?;
            lines.push(serde_json::to_string(&story)?);
        } else {
            lines.push(fg::text(&holes) + &crate::forensics::story::story_text(&story));
        }
    } else if let Some(r) = &a.diff {
        let (from, to) = fq::parse_range(r)?;
        let (diffs, holes) = fq::diff_with_gaps(&conn, from, to, &scope)?;
        if a.json {
            gap_lines(&holes, &mut lines)?;
            for d in &diffs {
                lines.push(serde_json::to_string(d)?);
            }
        } else {
            lines.push(fq::diff_text(from, to, &diffs, &holes));
        }
    }
    let mut out = std::io::stdout().lock();
    for l in lines {
        let res = if a.json {
            writeln!(out, "{l}")
        } else {
            write!(out, "{l}")
        };
        if let Err(e) = res {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(e.into());
        }
    }
    Ok(())
}

/// The `status` lines (state `gap`) of the record's gaps an answer spans, before its JSON.
fn gap_lines(holes: &[crate::store::RecordGap], lines: &mut Vec<String>) -> anyhow::Result<()> {
    for l in crate::forensics::gaps::lines(holes) {
        lines.push(serde_json::to_string(&Line::Status(l))?);
    }
    Ok(())
}

/// The latest line of each incident, kept when that line leaves it open.
fn still_open(rows: Vec<(i64, u8, u64, String)>) -> Vec<(i64, u8, u64, String)> {
    let mut latest: std::collections::HashMap<String, (i64, u8, u64, String)> =
        std::collections::HashMap::new();
    for row in rows {
        let Ok(v) = serde_json::from_str::<Value>(&row.3) else {
            continue;
        };
        let Some(id) = v.get("id").and_then(Value::as_str) else {
            continue;
        };
        match latest.get(id) {
            Some(prev) if prev.2 > row.2 => {}
            _ => {
                latest.insert(id.to_string(), row);
            }
        }
    }
    latest
        .into_values()
        .filter(|row| {
            serde_json::from_str::<Value>(&row.3).is_ok_and(|v| {
                matches!(
                    v.get("state").and_then(Value::as_str),
                    Some("open" | "update")
                )
            })
        })
        .collect()
}

/// A human line for a stored record.
fn render(json: &str, colour: bool) -> String {
    if let Ok(c) = serde_json::from_str::<ChangeLine>(json) {
        // Over days, the date matters: the line itself shows the time of day.
        let date = c.time.date();
        return format!("{date} {}", human::render(&Line::Change(c), colour));
    }
    // Not a change: the fields people read, shown escaped (`crate::shown`).
    let Ok(v) = serde_json::from_str::<Value>(json) else {
        return escape(json).into_owned();
    };
    let s = |k: &str| escape(v.get(k).and_then(Value::as_str).unwrap_or("")).into_owned();
    if s("kind") == "status" {
        let time = s("time");
        let clock = time.get(..26).unwrap_or(&time).replace('T', " ");
        return format!("{clock} {} {}", s("state").to_uppercase(), s("message"));
    }
    if s("kind") == "incident" {
        let time = s("time");
        let clock = time.get(..26).unwrap_or(&time).replace('T', " ");
        return format!(
            "{clock} INCIDENT {} {} {} ({}): {}",
            s("id"),
            s("state"),
            s("type"),
            s("severity"),
            s("summary")
        );
    }
    escape(json).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_lines_are_shown_escaped() {
        let incident = r#"{"kind":"incident","id":"i\u001b[2J","time":"2026-11-21T05:42:37.000000000Z","state":"open","type":"foreign_flush","severity":"warning","summary":"e\u001b]0;t\u0007 flushed \u202eX"}"#;
        let line = render(incident, false);
        assert!(!line.contains(['\x1b', '\x07', '\u{202e}']), "{line:?}");
        assert!(line.contains("e\\x1b]0;t\\x07 flushed \\u202eX"), "{line}");
        assert!(line.contains("INCIDENT i\\x1b[2J open"), "{line}");
        // A row that is no line observer knows is shown escaped too.
        assert_eq!(render("{\"x\":\"\u{9b}\"}", false), "{\"x\":\"\\u009b\"}");
    }
}
