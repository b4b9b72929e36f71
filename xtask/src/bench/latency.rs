//! Part 1 of `cargo xtask bench`: event latency, from the writer's exit to observer's JSON line
//! arriving on our pipe, for every op a writer makes on a chain (create it, add a rule, delete
//! a rule, flush it, delete it) with iptables-legacy and with nft, beside empty tables and
//! beside the 20,003-rule table (the legacy filter table, and the same in nftables' words); and
//! [`measure_ops`], the loop of changes made one at a time and waited for, which part 5 runs too.

use std::{fmt::Write as _, path::Path, process::Command, time::Duration};

use anyhow::{bail, Context as _, Result};

use super::{
    memory::COPYING_RING,
    netns::Netns,
    not_measured, row,
    spawn::{is_change, run_bounded, run_timed, Observer},
    stats::{median, ms, signed_ms, Dist},
    table::kube_like_nft,
    Row, BIG_EVENT_TIMEOUT, EVENT_TIMEOUT, MAX_MISSES, SLOW_COMMAND_TIMEOUT,
};
use crate::cmd;

pub(super) struct OpLatency {
    backend: &'static str,
    op: &'static str,
    pub(super) dist: Option<Dist>,
    pub(super) missed: Vec<String>,
    /// Median wall time of the command itself (`ip netns exec NS iptables-legacy ...`).
    command_ms: f64,
}

/// Where part 1 makes its changes, and how observer runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Setting {
    /// A namespace with no rules but the chains the bench makes.
    Empty,
    /// The namespace of the 20,003-rule filter table, with the same table in nftables' words
    /// loaded for the part (and deleted after it).
    Big,
    /// [`Setting::Big`], legacy only, with a ring buffer large enough for the eBPF side to copy
    /// the writer's table ([`COPYING_RING`]) instead of observer reading it back.
    BigCopied,
}

impl Setting {
    pub(super) fn label(self) -> &'static str {
        match self {
            Setting::Empty => "empty tables",
            Setting::Big => "20,003-rule table",
            Setting::BigCopied => "20,003-rule table, --ringbuf-size 16 MiB",
        }
    }
}

/// Part 1's figures in one setting.
pub(super) struct Latency {
    pub(super) setting: Setting,
    pub(super) ops: Result<Vec<OpLatency>, String>,
}

/// The steps made on each chain, in this order; all but one are measured.
#[derive(Clone, Copy)]
enum Step {
    Create,
    /// `-s 10.0.0.1`.
    AddRule,
    /// Two more rules (`-s 10.0.0.2`, `-s 10.0.0.3`) in one command, so that the flush below
    /// empties a chain of two rules (the delete of a chain's only rule looks like a flush): waited
    /// for, not measured.
    AddTwoMore,
    /// `-s 10.0.0.3`.
    DeleteRule,
    Flush,
    Delete,
}

const STEPS: [Step; 6] = [
    Step::Create,
    Step::AddRule,
    Step::AddTwoMore,
    Step::DeleteRule,
    Step::Flush,
    Step::Delete,
];

impl Step {
    /// The op of observer's line for it.
    fn op(self) -> &'static str {
        match self {
            Step::Create => "chain_create",
            Step::AddRule | Step::AddTwoMore => "rule_add",
            Step::DeleteRule => "rule_delete",
            Step::Flush => "chain_flush",
            Step::Delete => "chain_delete",
        }
    }
}

/// A writer of one backend in one namespace: iptables-legacy in its filter table, or nft in
/// an `ip` table of the bench's.
enum Writer<'a> {
    Legacy(&'a Netns),
    Nft(&'a Netns, &'a str),
}

impl Writer<'_> {
    fn backend(&self) -> &'static str {
        match self {
            Writer::Legacy(_) => "legacy",
            Writer::Nft(..) => "nft",
        }
    }

    /// The command for `step` on chain `c` (for nft's rule delete, the rule's handle is looked
    /// up first, before the command is timed).
    fn command(&self, step: Step, c: &str) -> Result<Command> {
        Ok(match *self {
            Writer::Legacy(ns) => {
                let rule = |verb, src| ns.legacy(&[verb, c, "-s", src, "-j", "ACCEPT"]);
                match step {
                    Step::Create => ns.legacy(&["-N", c]),
                    Step::AddRule => rule("-A", "10.0.0.1"),
                    Step::AddTwoMore => rule("-A", "10.0.0.2,10.0.0.3"),
                    Step::DeleteRule => rule("-D", "10.0.0.3"),
                    Step::Flush => ns.legacy(&["-F", c]),
                    Step::Delete => ns.legacy(&["-X", c]),
                }
            }
            Writer::Nft(ns, t) => ns.nft(&match step {
                Step::Create => format!("add chain ip {t} {c}"),
                Step::AddRule => format!("add rule ip {t} {c} ip saddr 10.0.0.1 accept"),
                Step::AddTwoMore => format!(
                    "add rule ip {t} {c} ip saddr 10.0.0.2 accept ; \
                     add rule ip {t} {c} ip saddr 10.0.0.3 accept"
                ),
                Step::DeleteRule => {
                    let h = nft_handle(ns, t, c, "10.0.0.3")?;
                    format!("delete rule ip {t} {c} handle {h}")
                }
                Step::Flush => format!("flush chain ip {t} {c}"),
                Step::Delete => format!("delete chain ip {t} {c}"),
            }),
        })
    }
}

/// The handle of the rule of chain `c` that matches source `addr` (`nft -a list chain`).
fn nft_handle(ns: &Netns, table: &str, c: &str, addr: &str) -> Result<u64> {
    let listed = cmd::output(&mut ns.nft(&format!("-a list chain ip {table} {c}")))?;
    listed
        .lines()
        .filter(|l| l.contains(&format!("saddr {addr} ")))
        .find_map(|l| l.rsplit_once("# handle ")?.1.trim().parse().ok())
        .with_context(|| format!("no rule with saddr {addr} in nft's listing of {c}: {listed}"))
}

/// For each name: run `command(name)`, take the instant its process was reaped, and wait for
/// observer's line of that change. Changes run one at a time: none queues behind another.
pub(super) fn measure_ops(
    obs: &mut Observer,
    backend: &'static str,
    op: &'static str,
    names: &[String],
    command: impl Fn(&str) -> Result<Command>,
) -> Result<OpLatency> {
    let (mut lat, mut took, mut missed) = (Vec::new(), Vec::new(), Vec::new());
    for name in names {
        let (done, t) = run_timed(&mut command(name)?)?;
        took.push(ms(t));
        let what = format!("{backend} {op} line for {name}");
        match obs.wait_opt(EVENT_TIMEOUT, &what, |v| is_change(v, backend, op, name))? {
            Some((at, _)) => lat.push(signed_ms(at, done)),
            None => {
                missed.push(name.clone());
                if missed.len() >= MAX_MISSES {
                    bail!(
                        "observer printed no {what} within {EVENT_TIMEOUT:?}; {} {backend} {op} \
                         changes missed ({}), giving up after {} of {}{}",
                        missed.len(),
                        missed.join(", "),
                        lat.len() + missed.len(),
                        names.len(),
                        obs.stderr_tail()
                    );
                }
            }
        }
    }
    Ok(OpLatency {
        backend,
        op,
        dist: Dist::of(&lat),
        missed,
        command_ms: median(&took),
    })
}

/// Every step of [`STEPS`] on each of `names`, step after step (all chains created, then a
/// rule added to each, ...): the measured ones' latencies.
fn steps(obs: &mut Observer, w: &Writer, names: &[String]) -> Result<Vec<OpLatency>> {
    let backend = w.backend();
    let mut out = Vec::new();
    for step in STEPS {
        if let Step::AddTwoMore = step {
            for c in names {
                run_timed(&mut w.command(step, c)?)?;
                obs.wait(
                    BIG_EVENT_TIMEOUT,
                    &format!("{backend} rule_add line for {c}"),
                    |v| is_change(v, backend, "rule_add", c),
                )?;
            }
            continue;
        }
        out.push(measure_ops(obs, backend, step.op(), names, |c| {
            w.command(step, c)
        })?);
    }
    Ok(out)
}

/// Part 1 in one setting: a fresh `observer tail --json --netns NS`, one untimed warm-up
/// change per backend, then `events` chains through every step, legacy first, then nft.
pub(super) fn latency(
    bin: &Path,
    ns: &Netns,
    setting: Setting,
    events: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<OpLatency>> {
    const NFT_TABLE: &str = "obsb";
    let big_nft = setting == Setting::Big;
    if big_nft {
        let mut load = ns.cmd("nft");
        load.args(["-f", "-"]);
        let input = kube_like_nft(NFT_TABLE, false);
        run_bounded(&mut load, Some(input.as_bytes()), SLOW_COMMAND_TIMEOUT)?;
    }
    let ring = COPYING_RING.to_string();
    let mut args = vec!["tail", "--json", "--netns", &ns.name];
    if setting == Setting::BigCopied {
        args.extend(["--ringbuf-size", &ring]);
    }
    let measured = (|| {
        let mut obs = Observer::start(bin, &args, "latency")?;
        let mut out = Vec::new();
        // Warm-up, not counted: in the empty namespace the first write instantiates its
        // filter table.
        run_timed(&mut ns.legacy(&["-N", "OBSB-warm"]))?;
        obs.wait(
            BIG_EVENT_TIMEOUT,
            "legacy chain_create line for OBSB-warm",
            |v| is_change(v, "legacy", "chain_create", "OBSB-warm"),
        )?;
        let names: Vec<String> = (0..events).map(|i| format!("OBSB-{i}")).collect();
        out.extend(steps(&mut obs, &Writer::Legacy(ns), &names)?);
        run_timed(&mut ns.legacy(&["-X", "OBSB-warm"]))?;
        if setting != Setting::BigCopied {
            // nft: the warm-up is a chain (and in the empty namespace the table itself).
            run_timed(&mut ns.nft(&format!("add table ip {NFT_TABLE}")))?;
            run_timed(&mut ns.nft(&format!("add chain ip {NFT_TABLE} warm")))?;
            obs.wait(
                Duration::from_secs(10),
                "nft chain_create line for chain warm",
                |v| is_change(v, "nft", "chain_create", "warm"),
            )?;
            let names: Vec<String> = (0..events).map(|i| format!("c{i}")).collect();
            out.extend(steps(&mut obs, &Writer::Nft(ns, NFT_TABLE), &names)?);
        }
        obs.finish(&format!("event latency, {}", setting.label()), notes);
        Ok(out)
    })();
    if setting != Setting::BigCopied {
        // Also after a failure: parts 2, 4 and 6 use this namespace.
        let _ = run_timed(&mut ns.nft(&format!("delete table ip {NFT_TABLE}")));
    }
    measured
}

/// Part 1's lines of the report: per setting and backend, each op's p99 (the distributions are
/// in [`table`]).
pub(super) fn rows(latency: &[Latency], rows: &mut Vec<Row>) {
    const AIM: &str = "p99 ≤ 0.3 ms";
    for l in latency {
        let ops = match &l.ops {
            Ok(ops) => ops,
            Err(e) => {
                let what = format!("1. latency, {}", l.setting.label());
                rows.push(row(what, not_measured(e), AIM));
                continue;
            }
        };
        for backend in ["legacy", "nft"] {
            let mine: Vec<&OpLatency> = ops.iter().filter(|o| o.backend == backend).collect();
            if mine.is_empty() {
                continue;
            }
            let mut f = String::from("p99:");
            let mut over = Vec::new();
            for o in &mine {
                match &o.dist {
                    Some(d) => {
                        let _ = write!(f, " {} {:.2},", o.op, d.p99);
                        if d.p99 > 0.3 {
                            over.push(o.op);
                        }
                    }
                    None => {
                        let _ = write!(f, " {} none reported,", o.op);
                        over.push(o.op);
                    }
                }
            }
            f.pop();
            f.push_str(" ms");
            let _ = write!(
                f,
                "; {}",
                if over.is_empty() {
                    "every op within the aim".to_owned()
                } else {
                    format!("over the aim: {}", over.join(", "))
                }
            );
            for o in mine.iter().filter(|o| !o.missed.is_empty()) {
                let _ = write!(
                    f,
                    "; {} MISSED {}: {}",
                    o.op,
                    o.missed.len(),
                    o.missed.join(", ")
                );
            }
            let what = format!("1. latency, {backend}, {}", l.setting.label());
            rows.push(row(what, f, AIM));
        }
    }
}

/// Part 1's table: each op's distribution, per setting and backend.
pub(super) fn table(latency: &[Latency]) -> Option<String> {
    let mut t = String::from(
        "Event latency per op (part 1), ms from the writer's exit to observer's line: \
         min / median / p99 / max over n changes, and the command's own median wall time.\n\n\
         | backend | beside | op | n | min | median | p99 | max | command |\n\
         | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let mut any = false;
    for l in latency {
        let Ok(ops) = &l.ops else { continue };
        for o in ops {
            any = true;
            let figures = match &o.dist {
                Some(d) => format!(
                    "{} | {:.2} | {:.2} | {:.2} | {:.2}",
                    d.n, d.min, d.median, d.p99, d.max
                ),
                None => "0 | - | - | - | -".to_owned(),
            };
            let _ = writeln!(
                t,
                "| {} | {} | {} | {figures} | {:.1} |",
                o.backend,
                l.setting.label(),
                o.op,
                o.command_ms
            );
        }
    }
    any.then_some(t)
}
