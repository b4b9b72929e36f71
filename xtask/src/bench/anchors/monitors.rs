//! Part 6 on nftables: observer, `nft monitor` and `xtables-monitor --event` in one namespace,
//! on the same changes made with `nft` and `iptables-nft`, one at a time, every tool's line
//! awaited before the next change.

use std::{path::Path, process::Command, time::Duration};

use anyhow::{bail, Result};
use serde_json::Value;

use super::Monitor;
use crate::bench::{
    netns::Netns,
    spawn::{is_change, run_timed, Observer},
    stats::{median, ms, signed_ms},
    MAX_MISSES,
};

/// One kind of change of the nftables comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    NftChainAdd,
    NftChainDelete,
    IptChainAdd,
    IptChainDelete,
    IptRuleAdd,
    IptRuleDelete,
}

/// The nft table the `nft` changes go to.
const TABLE: &str = "obsa";
/// The iptables-nft chain that the rule changes go to.
const RULE_CHAIN: &str = "OBSA-R";
/// How long one tool may take to print a change's line before it counts as missed.
const TOOL_TIMEOUT: Duration = Duration::from_secs(3);

impl Kind {
    pub(super) const ALL: [Kind; 6] = [
        Kind::NftChainAdd,
        Kind::NftChainDelete,
        Kind::IptChainAdd,
        Kind::IptChainDelete,
        Kind::IptRuleAdd,
        Kind::IptRuleDelete,
    ];

    pub(super) fn label(self) -> &'static str {
        match self {
            Kind::NftChainAdd => "nft add chain",
            Kind::NftChainDelete => "nft delete chain",
            Kind::IptChainAdd => "iptables-nft -N",
            Kind::IptChainDelete => "iptables-nft -X",
            Kind::IptRuleAdd => "iptables-nft -A",
            Kind::IptRuleDelete => "iptables-nft -D",
        }
    }

    /// observer's `op` for it.
    fn op(self) -> &'static str {
        match self {
            Kind::NftChainAdd | Kind::IptChainAdd => "chain_create",
            Kind::NftChainDelete | Kind::IptChainDelete => "chain_delete",
            Kind::IptRuleAdd => "rule_add",
            Kind::IptRuleDelete => "rule_delete",
        }
    }

    /// The chain the `i`-th change of this kind touches.
    fn chain(self, i: usize) -> String {
        match self {
            Kind::NftChainAdd | Kind::NftChainDelete => format!("c{i}"),
            Kind::IptChainAdd | Kind::IptChainDelete => format!("OBSA-{i}"),
            Kind::IptRuleAdd | Kind::IptRuleDelete => RULE_CHAIN.to_owned(),
        }
    }

    /// The nft table it is made in.
    fn table(self) -> &'static str {
        match self {
            Kind::NftChainAdd | Kind::NftChainDelete => TABLE,
            _ => "filter",
        }
    }

    fn port(i: usize) -> String {
        (10_000 + i).to_string()
    }

    fn command(self, ns: &Netns, i: usize) -> Command {
        let chain = self.chain(i);
        match self {
            Kind::NftChainAdd => ns.nft(&format!("add chain ip {TABLE} {chain}")),
            Kind::NftChainDelete => ns.nft(&format!("delete chain ip {TABLE} {chain}")),
            _ => {
                let mut c = ns.cmd("iptables-nft");
                c.args(["-w", "5"]);
                let port = Kind::port(i);
                match self {
                    Kind::IptChainAdd => c.args(["-N", &chain]),
                    Kind::IptChainDelete => c.args(["-X", &chain]),
                    Kind::IptRuleAdd | Kind::IptRuleDelete => {
                        let flag = if self == Kind::IptRuleAdd { "-A" } else { "-D" };
                        c.args([flag, &chain, "-p", "tcp", "--dport", &port, "-j", "ACCEPT"])
                    }
                    Kind::NftChainAdd | Kind::NftChainDelete => unreachable!("handled above"),
                };
                c
            }
        }
    }

    /// observer's line for the `i`-th change of this kind.
    fn observer_saw(self, v: &Value, i: usize) -> bool {
        let rule_ok = match self {
            Kind::IptRuleAdd => v["rule"]
                .as_str()
                .is_some_and(|r| mentions(r, &Kind::port(i))),
            _ => true,
        };
        is_change(v, "nft", self.op(), &self.chain(i)) && v["table"] == self.table() && rule_ok
    }

    /// `nft monitor`'s line for it (its plain output: `add chain ip obsa c1`, `create chain ...`
    /// for iptables-nft's chains, `delete rule ip filter OBSA-R handle 5`).
    pub(super) fn nft_monitor_saw(self, line: &str, i: usize) -> bool {
        let (table, chain) = (self.table(), self.chain(i));
        match self {
            Kind::NftChainAdd | Kind::IptChainAdd => {
                line == format!("add chain ip {table} {chain}")
                    || line == format!("create chain ip {table} {chain}")
            }
            Kind::NftChainDelete | Kind::IptChainDelete => {
                line == format!("delete chain ip {table} {chain}")
            }
            Kind::IptRuleAdd => {
                line.starts_with(&format!("add rule ip {table} {chain} "))
                    && mentions(line, &Kind::port(i))
            }
            // The delete names the rule by its handle only.
            Kind::IptRuleDelete => line.starts_with(&format!("delete rule ip {table} {chain} ")),
        }
    }

    /// `xtables-monitor --event`'s line for it (` EVENT: -4 -t filter -N OBSA-1`).
    pub(super) fn xtables_monitor_saw(self, line: &str, i: usize) -> bool {
        let Some(event) = line.trim_start().strip_prefix("EVENT: ") else {
            return false;
        };
        let (table, chain) = (self.table(), self.chain(i));
        let flag = match self {
            Kind::NftChainAdd | Kind::IptChainAdd => "-N",
            Kind::NftChainDelete | Kind::IptChainDelete => "-X",
            Kind::IptRuleAdd => "-A",
            Kind::IptRuleDelete => "-D",
        };
        let head = format!("-4 -t {table} {flag} {chain}");
        match self {
            Kind::IptRuleAdd | Kind::IptRuleDelete => {
                event.starts_with(&format!("{head} ")) && mentions(event, &Kind::port(i))
            }
            _ => event == head,
        }
    }
}

/// True when `text` holds `number` as a whole number (not as part of a longer one).
pub(super) fn mentions(text: &str, number: &str) -> bool {
    text.match_indices(number).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + number.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit())
    })
}

/// The tools of the nftables comparison, in the order of the report.
pub(super) const TOOLS: [&str; 3] = ["observer", "nft monitor", "xtables-monitor"];

/// One kind of change, as each tool saw it.
pub(super) struct KindRun {
    pub kind: Kind,
    /// Per tool (as [`TOOLS`]), the delay of each change it reported, from the writer's exit.
    pub delays: [Vec<f64>; 3],
    /// Per other tool, observer's line minus that tool's line, for the changes both reported.
    pub lead: [Vec<f64>; 2],
    /// Per tool, the changes it did not report within [`TOOL_TIMEOUT`].
    pub missed: [usize; 3],
    /// Median wall time of the writer.
    pub command_ms: f64,
}

pub(super) fn nft_side(
    bin: &Path,
    ns: &Netns,
    events: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<KindRun>> {
    let mut obs = Observer::start(bin, &["tail", "--json", "--netns", &ns.name], "anchors")?;
    let mut nft_mon = Monitor::start({
        let mut c = ns.cmd("nft");
        c.arg("monitor");
        c
    })?;
    // xtables-monitor writes through stdio without flushing: line-buffer it, or a pipe would
    // hold its lines until 4 KiB pile up.
    let mut xt_mon = Monitor::start({
        let mut c = ns.cmd("stdbuf");
        c.args(["-oL", "xtables-monitor", "--event"]);
        c
    })?;
    // Warm-up, not counted: both tables exist, and every tool has printed a line, so each is
    // listening.
    run_timed(&mut ns.nft(&format!("add table ip {TABLE}")))?;
    run_timed(ns.cmd("iptables-nft").args(["-w", "5", "-N", RULE_CHAIN]))?;
    obs.wait(Duration::from_secs(10), "the warm-up chain's line", |v| {
        is_change(v, "nft", "chain_create", RULE_CHAIN)
    })?;
    let warm = Duration::from_secs(10);
    if nft_mon
        .wait(warm, |l| {
            l.ends_with(&format!(" chain ip filter {RULE_CHAIN}"))
        })
        .is_none()
    {
        nft_mon.check_alive()?;
        bail!("`{}` printed no line for the warm-up chain", nft_mon.desc);
    }
    if xt_mon
        .wait(warm, |l| l.ends_with(&format!("-N {RULE_CHAIN}")))
        .is_none()
    {
        xt_mon.check_alive()?;
        bail!("`{}` printed no line for the warm-up chain", xt_mon.desc);
    }
    let mut out = Vec::new();
    for kind in Kind::ALL {
        let mut run = KindRun {
            kind,
            delays: Default::default(),
            lead: Default::default(),
            missed: [0; 3],
            command_ms: 0.0,
        };
        let mut took = Vec::new();
        for i in 0..events {
            let (done, t) = run_timed(&mut kind.command(ns, i))?;
            took.push(ms(t));
            let what = format!("{} line for change {i}", kind.label());
            let seen = [
                obs.wait_opt(TOOL_TIMEOUT, &what, |v| kind.observer_saw(v, i))?
                    .map(|(at, _)| at),
                nft_mon.wait(TOOL_TIMEOUT, |l| kind.nft_monitor_saw(l, i)),
                xt_mon.wait(TOOL_TIMEOUT, |l| kind.xtables_monitor_saw(l, i)),
            ];
            for (t, at) in seen.iter().enumerate() {
                match at {
                    Some(at) => run.delays[t].push(signed_ms(*at, done)),
                    None => run.missed[t] += 1,
                }
            }
            if let Some(o) = seen[0] {
                for (k, other) in seen[1..].iter().enumerate() {
                    if let Some(other) = other {
                        run.lead[k].push(signed_ms(o, *other));
                    }
                }
            }
            if run.missed.iter().any(|&m| m >= MAX_MISSES) {
                nft_mon.check_alive()?;
                xt_mon.check_alive()?;
                bail!(
                    "{}: a tool missed {MAX_MISSES} changes (missed per tool, {}: {:?}){}",
                    kind.label(),
                    TOOLS.join(", "),
                    run.missed,
                    obs.stderr_tail()
                );
            }
        }
        run.command_ms = median(&took);
        out.push(run);
    }
    obs.finish("side by side (nft)", notes);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tool_line_is_matched_to_its_change_only() {
        assert!(Kind::NftChainAdd.nft_monitor_saw("add chain ip obsa c1", 1));
        assert!(!Kind::NftChainAdd.nft_monitor_saw("add chain ip obsa c11", 1));
        assert!(Kind::IptChainAdd.nft_monitor_saw("create chain ip filter OBSA-3", 3));
        assert!(Kind::IptRuleAdd.nft_monitor_saw(
            "add rule ip filter OBSA-R tcp dport 10001 counter packets 0 bytes 0 accept",
            1
        ));
        assert!(!Kind::IptRuleAdd.nft_monitor_saw(
            "add rule ip filter OBSA-R tcp dport 100010 counter packets 0 bytes 0 accept",
            1
        ));
        assert!(Kind::IptRuleDelete.nft_monitor_saw("delete rule ip filter OBSA-R handle 5", 7));
        assert!(!Kind::IptRuleDelete.nft_monitor_saw("delete chain ip filter OBSA-R", 7));

        assert!(Kind::IptChainAdd.xtables_monitor_saw(" EVENT: -4 -t filter -N OBSA-2", 2));
        assert!(!Kind::IptChainAdd.xtables_monitor_saw(" EVENT: -4 -t filter -N OBSA-22", 2));
        assert!(!Kind::IptChainAdd.xtables_monitor_saw("NEWGEN: GENID=9 PID=1 NAME=x", 2));
        assert!(Kind::NftChainDelete.xtables_monitor_saw(" EVENT: -4 -t obsa -X c4", 4));
        assert!(Kind::IptRuleDelete.xtables_monitor_saw(
            " EVENT: -4 -t filter -D OBSA-R -p tcp -m tcp --dport 10004 -j ACCEPT",
            4
        ));
        assert!(!Kind::IptRuleDelete.xtables_monitor_saw(
            " EVENT: -4 -t filter -A OBSA-R -p tcp -m tcp --dport 10004 -j ACCEPT",
            4
        ));
    }

    #[test]
    fn observer_lines_are_matched_by_op_chain_table_and_rule() {
        let v = serde_json::json!({"kind": "change", "backend": "nft", "op": "rule_add",
            "table": "filter", "chain": "OBSA-R", "rule": "tcp dport 10002 counter accept"});
        assert!(Kind::IptRuleAdd.observer_saw(&v, 2));
        assert!(!Kind::IptRuleAdd.observer_saw(&v, 20));
        assert!(!Kind::IptRuleDelete.observer_saw(&v, 2));
        let v = serde_json::json!({"kind": "change", "backend": "nft", "op": "chain_create",
            "table": "obsa", "chain": "c5"});
        assert!(Kind::NftChainAdd.observer_saw(&v, 5));
        assert!(!Kind::IptChainAdd.observer_saw(&v, 5));
    }
}
