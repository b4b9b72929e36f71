//! `observer query`: search the forensic record that `observer run` keeps ("who deleted
//! KUBE-SVC-X at 03:12?"). Opens the file read-only, so a copy taken from a node works, and so
//! does the live file of a running daemon.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use serde_json::Value;

use crate::output::{human, ChangeRecord, Record};
use crate::ruleset::Op;
use crate::store::{self, Selection, Stored};

#[derive(Debug, Args)]
pub struct QueryArgs {
    /// From this time: relative (`2h`, `30m`, `7d`: that long ago) or RFC 3339
    /// (`2026-11-21T03:00:00Z`). Default: the start of the record.
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,

    /// Until this time (same forms). Default: now.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,

    /// Only chains (or sets) whose name matches this glob (e.g. `KUBE-SVC-*`).
    #[arg(long, value_name = "GLOB")]
    pub chain: Option<String>,

    /// Only changes made by this actor (or this command); incidents naming it.
    #[arg(long)]
    pub actor: Option<String>,

    /// Only these ops (repeat, or separate with commas); only changes are shown then.
    #[arg(long, value_name = "OP", value_delimiter = ',', value_parser = parse_op)]
    pub op: Vec<Op>,

    /// Only this network namespace: an inode number, a /run/netns/NAME path or an `ip netns` name.
    #[arg(long)]
    pub netns: Option<String>,

    /// Only this backend (`legacy` or `nft`).
    #[arg(long, value_enum)]
    pub backend: Option<crate::cli::BackendArg>,

    /// Only this table.
    #[arg(long)]
    pub table: Option<String>,

    /// Only incidents of these types (e.g. `foreign_delete,flapping`); only incidents are shown then.
    #[arg(long = "type", value_name = "TYPE", value_delimiter = ',')]
    pub types: Vec<String>,

    /// Only incidents (no change lines).
    #[arg(long)]
    pub incidents: bool,

    /// Only incidents still open: for each incident, its latest line, shown only when that line
    /// is `open` or `update` (not `resolved` or `expired`). Implies `--incidents`.
    #[arg(long)]
    pub open: bool,

    /// Print JSON lines (as `tail --json` and `run` print them) instead of human lines.
    #[arg(long)]
    pub json: bool,

    /// The record file.
    #[arg(long, env = "OBSERVER_RECORD", default_value = crate::daemon::config::DEFAULT_RECORD)]
    pub record: PathBuf,

    /// At most this many lines (the oldest first).
    #[arg(long)]
    pub limit: Option<usize>,

    /// No colour (also: NO_COLOR set, or output not a terminal).
    #[arg(long)]
    pub no_color: bool,

    /// Print the ruleset as it was at this time (relative like `2h`, or RFC 3339), rebuilt
    /// from the record's newest snapshot before it and the changes after that: legacy tables in
    /// `iptables-save` syntax, nft tables in `nft list ruleset` syntax, each chain's last writer
    /// and time in `#` comments. Narrow it with --netns, --table, --backend; --json gives one
    /// object per namespace and backend.
    #[arg(long, value_name = "TIME", conflicts_with_all = ["since", "until", "diff"])]
    pub at: Option<String>,

    /// Print what differs between the rulesets at two times, `FROM..TO` (e.g. `2h..1h`,
    /// `2026-11-21T03:00:00Z..now`; TO defaults to now): tables and chains added, removed or
    /// changed, the rules added and removed, and who changed each last and when. Narrow it with
    /// --netns, --table, --backend; --json gives one object per difference.
    #[arg(long, value_name = "FROM..TO", conflicts_with_all = ["since", "until"])]
    pub diff: Option<String>,

    /// Tell one incident's story (its id, e.g. `foreign_delete-4026532177-17`; `--incidents`
    /// lists them): a timeline of its lines, every change that made it with the writer's
    /// ancestry, unit or pod, the owners' repairs and when, and each affected chain before the
    /// incident, after its actors' changes and at its end. --json gives the same as one object.
    #[arg(long, value_name = "ID", conflicts_with_all = ["since", "until", "at", "diff"])]
    pub incident: Option<String>,
}

fn parse_op(s: &str) -> Result<Op, String> {
    Op::parse(s).ok_or_else(|| format!("unknown op `{s}`"))
}

/// A relative (`2h`: that long ago) or RFC 3339 time, as nanoseconds since the epoch.
pub fn parse_time(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if s == "now" {
        return Ok(store::now_ns());
    }
    if let Some(t) = store::parse_time_ns(s) {
        return Ok(t);
    }
    let ago = humantime::parse_duration(s.trim_end_matches(" ago")).map_err(|_| {
        format!("`{s}` is neither a duration like 2h or 7d nor an RFC 3339 time like 2026-11-21T03:12:00Z")
    })?;
    Ok(store::now_ns() - ago.as_nanos().min(i64::MAX as u128) as i64)
}

pub fn run(a: QueryArgs) -> anyhow::Result<()> {
    if a.at.is_some() || a.diff.is_some() || a.incident.is_some() {
        return forensic(&a);
    }
    let since = a
        .since
        .as_deref()
        .map(parse_time)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--since: {e}"))?;
    let until = a
        .until
        .as_deref()
        .map(parse_time)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--until: {e}"))?;
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
        let filter = super::daemon::incident_filter(
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
        let (seq, states) = fq::at(&conn, at_ns, &scope)?;
        if a.json {
            for v in fq::at_json(at_ns, seq, &states) {
                lines.push(serde_json::to_string(&v)?);
            }
        } else {
            lines.push(fq::at_text(at_ns, seq, &states));
            if states.is_empty() {
                eprintln!("observer: the record holds no ruleset at that time in that scope");
            }
        }
    } else if let Some(id) = &a.incident {
        let story = crate::forensics::story::story(&conn, id)?;
        if a.json {
            lines.push(serde_json::to_string(&story)?);
        } else {
            lines.push(crate::forensics::story::story_text(&story));
        }
    } else if let Some(r) = &a.diff {
        let (from, to) = fq::parse_range(r)?;
        let diffs = fq::diff(&conn, from, to, &scope)?;
        if a.json {
            for d in &diffs {
                lines.push(serde_json::to_string(d)?);
            }
        } else {
            lines.push(fq::diff_text(from, to, &diffs));
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
    if let Ok(c) = serde_json::from_str::<ChangeRecord>(json) {
        // Over days, the date matters: the line itself shows the time of day.
        let date = c.time.get(..10).unwrap_or("").to_string();
        return format!("{date} {}", human::render(&Record::Change(c), colour));
    }
    let Ok(v) = serde_json::from_str::<Value>(json) else {
        return json.to_string();
    };
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    if s("kind") == "incident" {
        let time = s("time");
        let clock = time.get(..26).unwrap_or(&time).replace('T', " ");
        return format!(
            "{clock} INCIDENT {} {} {} ({}): {}",
            s("id"),
            s("state"),
            s("type"),
            v.get("severity")
                .map(|x| x.as_str().map(str::to_string).unwrap_or(x.to_string()))
                .unwrap_or_default(),
            s("summary")
        );
    }
    json.to_string()
}
