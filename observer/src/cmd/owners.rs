//! `observer owners`: who owns every chain and set of every namespace, read once from the
//! rulesets (no watching): the built-in catalog, the `--owners` file, or unknown. A running
//! observer also learns owners from who creates chains; this command, which sees no history,
//! cannot.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use anyhow::Context as _;
use serde::Serialize;

use crate::cli::OwnersArgs;
use crate::engine::{inventory, load_owners, read_baseline};
use crate::incidents::{Config, Correlator, OwnerRow};
use crate::netns;
use crate::shown::Shown;

/// Per owner: where its chains live.
#[derive(Debug, Serialize)]
struct OwnerSummary {
    owner: String,
    netns: u32,
    chains: usize,
    backends: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    chains: Vec<OwnerRow>,
    owners: Vec<OwnerSummary>,
    problems: Vec<String>,
}

pub fn run(args: OwnersArgs) -> anyhow::Result<()> {
    let only = match args.netns.as_str() {
        "all" => None,
        other => Some(netns::resolve_arg(other).map_err(anyhow::Error::msg)?),
    };
    let owners = load_owners(args.owners.as_deref())?;
    let mut correlator = Correlator::new(Config::default(), owners);
    let mut problems = Vec::new();
    let mut read = 0;
    for (inode, path) in netns::scan() {
        if only.is_some_and(|n| n != inode) {
            continue;
        }
        let handle = match netns::open(&path, Some(inode)) {
            Ok(h) => h,
            Err(e) => {
                problems.push(format!("namespace {inode} at {}: {e}", path.display()));
                continue;
            }
        };
        let baseline = match netns::run_in(&handle.file, || {
            let limit = crate::engine::DEFAULT_RULE_LEVEL_LIMIT;
            read_baseline(Some(limit), None, limit)
        }) {
            Ok(b) => b,
            Err(e) => {
                problems.push(format!("cannot enter namespace {inode}: {e}"));
                continue;
            }
        };
        problems.extend(
            baseline
                .problems
                .iter()
                .map(|p| format!("namespace {inode}: {p}")),
        );
        correlator.baseline(
            inode,
            handle.name.clone(),
            inventory(&baseline.legacy, baseline.nft.as_ref().map(|(s, _)| s)),
        );
        read += 1;
    }
    if read == 0 {
        anyhow::bail!(if let Some(n) = only {
            format!("namespace {n} could not be read{}", needs_root())
        } else {
            format!("no network namespace could be read{}", needs_root())
        });
    }
    let rows = correlator.owner_rows(only);
    let mut per: BTreeMap<(u32, String), (usize, BTreeSet<String>)> = BTreeMap::new();
    for r in &rows {
        if matches!(r.owner.as_str(), "unknown" | "built-in" | "shared") {
            continue;
        }
        let e = per.entry((r.netns, r.owner.clone())).or_default();
        e.0 += 1;
        e.1.insert(r.backend.to_string());
    }
    let summaries: Vec<OwnerSummary> = per
        .into_iter()
        .map(|((netns, owner), (chains, backends))| OwnerSummary {
            owner,
            netns,
            chains,
            backends: backends.into_iter().collect(),
        })
        .collect();
    let report = Report {
        chains: rows,
        owners: summaries,
        problems,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &report).context("writing the report")?;
        writeln!(out)?;
    } else {
        write_human(&mut out, &report)?;
    }
    Ok(())
}

fn needs_root() -> &'static str {
    if nix::unistd::geteuid().is_root() {
        ""
    } else {
        ": observer owners reads every namespace's ruleset and needs root (run it with sudo)"
    }
}

/// The report for people: every name shown escaped ([`Shown`]).
fn write_human(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    let mut netns: Option<u32> = None;
    for row in &r.chains {
        if netns != Some(row.netns) {
            netns = Some(row.netns);
            let name = row
                .netns_name
                .as_deref()
                .map(|n| format!(" ({})", Shown(n)))
                .unwrap_or_default();
            writeln!(out, "netns {}{name}", row.netns)?;
            writeln!(
                out,
                "  {:<6} {:<6} {:<10} {:<28} {:<14} {:<8} {:>5}",
                "BACKEND", "FAMILY", "TABLE", "CHAIN", "OWNER", "HOW", "RULES"
            )?;
        }
        let how = row.how.map(|h| h.as_str()).unwrap_or("-");
        let chain = if row.set {
            format!("{} (set)", Shown(&row.chain))
        } else {
            Shown(&row.chain).to_string()
        };
        let owner = if row.writers.is_empty() {
            Shown(&row.owner).to_string()
        } else {
            format!("{} ({})", Shown(&row.owner), Shown(&row.writers.join(", ")))
        };
        writeln!(
            out,
            "  {:<6} {:<6} {:<10} {:<28} {:<14} {:<8} {:>5}",
            row.backend.as_str(),
            row.family.as_str(),
            Shown(&row.table),
            chain,
            owner,
            how,
            row.rules
        )?;
    }
    if !r.owners.is_empty() {
        writeln!(out, "\nowners")?;
        for o in &r.owners {
            let warn = if o.backends.len() > 1 {
                "  <- chains in both backends (split brain)"
            } else {
                ""
            };
            writeln!(
                out,
                "  netns {:<11} {:<14} {:>4} chains  {}{warn}",
                o.netns,
                Shown(&o.owner),
                o.chains,
                o.backends.join(", ")
            )?;
        }
    }
    for p in &r.problems {
        writeln!(out, "problem: {}", Shown(p))?;
    }
    Ok(())
}
