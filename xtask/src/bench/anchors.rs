//! Part 6 of `cargo xtask bench`: observer beside the tools already on a node, on the same
//! changes, in one run.
//!
//! - nftables: `nft monitor` (nftables' own notification tool) and `xtables-monitor --event`
//!   (iptables-nft's) run in the same namespace as `observer tail --json`, each read through a
//!   pipe by a thread that stamps every line as it arrives. Changes are made one at a time with
//!   `nft` and `iptables-nft`; for each, every tool's line is awaited before the next change, so
//!   each line belongs to the change just made.
//! - x_tables: nothing notifies, so the alternative is a poller. A shell runs
//!   `iptables-legacy-save -t filter` back to back on the 20,000-rule table (as often as it can,
//!   one save at a time) and prints, after each save, the names of the chains this part adds;
//!   `iptables-legacy -N` adds them, one at a time, while observer tails the same namespace. Each
//!   side's detection delay, and the CPU each side burns over the window, are compared.
//!
//! The reference instant of a change is its writer's exit (the process reaped), as in part 1:
//! no tool sees the change before the kernel makes it, which is before the writer exits, so a
//! line can arrive "before" it (negative delay). The per-change difference (observer's line
//! minus the other tool's line, same change) needs no reference at all; it is the fair
//! comparison.

use super::spawn::timed_lines;
use super::*;

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

/// A tool that prints a line per event, run beside observer; killed when dropped.
struct Monitor {
    child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
    desc: String,
}

impl Monitor {
    fn start(mut c: Command) -> Result<Monitor> {
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let desc = cmd::describe(&c);
        eprintln!("xtask: == {desc}");
        let mut child = c
            .spawn()
            .with_context(|| format!("could not start `{desc}`"))?;
        let out = child.stdout.take().context("no stdout")?;
        Ok(Monitor {
            child,
            lines: timed_lines(out),
            desc,
        })
    }

    /// When the first line for which `want` is true arrived; `None` after `timeout`, or when
    /// the tool closed its output.
    fn wait(&self, timeout: Duration, mut want: impl FnMut(&str) -> bool) -> Option<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((at, line)) if want(&line) => return Some(at),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// Fails, naming the tool, unless it is still running.
    fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("`{}` exited ({status})", self.desc);
        }
        Ok(())
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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

/// The x_tables comparison: observer against a save poller on the 20,000-rule table.
pub(super) struct Poller {
    pub rules: usize,
    pub changes: usize,
    /// Detection delays from the writer's exit.
    pub observer: Vec<f64>,
    pub poller: Vec<f64>,
    pub missed: [usize; 2],
    /// CPU (user + system) over the window, ms, and the window, s.
    pub observer_cpu_ms: f64,
    pub poller_cpu_ms: f64,
    pub window_s: f64,
    /// Saves the poller completed in the window.
    pub saves: usize,
    pub command_ms: f64,
}

pub(super) struct Anchors {
    pub kinds: Vec<KindRun>,
    pub poller: Result<Poller, String>,
    pub versions: String,
}

pub(super) fn run(
    bin: &Path,
    big: Option<(&Netns, &BigTable)>,
    events: usize,
    notes: &mut Vec<String>,
) -> Result<Anchors> {
    for tool in [
        "nft",
        "iptables-nft",
        "xtables-monitor",
        "stdbuf",
        "sh",
        "grep",
    ] {
        if cmd::which(tool).is_none() {
            bail!("`{tool}` was not found; `cargo xtask setup` installs it");
        }
    }
    let versions = [("nft", "--version"), ("xtables-monitor", "--version")]
        .iter()
        .filter_map(|(t, a)| cmd::output(Command::new(t).arg(a)).ok())
        .map(|s| s.trim().to_owned())
        .collect::<Vec<_>>()
        .join("; ");
    let ns = Netns::add(format!("obs-bench-{}-anchors", process::id()))?;
    let kinds = nft_side(bin, &ns, events, notes)?;
    drop(ns);
    let poller = match big {
        Some((ns, table)) => part(
            "bench: 6. observer vs an iptables-legacy-save poller",
            || poller(bin, ns, table, events.min(20), notes),
        ),
        None => Err("the big table could not be built".to_owned()),
    };
    Ok(Anchors {
        kinds,
        poller,
        versions,
    })
}

fn nft_side(
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

/// utime + stime (`own`) or cutime + cstime (`children`, those reaped) of a process, in ms.
fn cpu_ms(pid: u32, children: bool) -> Result<f64> {
    let ticks = stat_ticks(pid, if children { [16, 17] } else { [14, 15] })?;
    Ok((ticks * 1000 / USER_HZ) as f64)
}

/// The poller's shell: saves back to back, and after each one a line with the names of this
/// part's chains that the save showed (`:OBSP-0 :OBSP-1 `), so one line = one completed save.
const POLLER: &str =
    "while :; do iptables-legacy-save -t filter | grep -o '^:OBSP-[0-9]*' | tr '\\n' ' '; echo; done";

/// The chain the `i`-th legacy change adds.
fn poll_chain(i: usize) -> String {
    format!("OBSP-{i}")
}

/// True when a line of the poller shows the chain.
pub(super) fn poller_saw(line: &str, chain: &str) -> bool {
    line.split_whitespace()
        .any(|w| w.strip_prefix(':') == Some(chain))
}

fn poller(
    bin: &Path,
    ns: &Netns,
    table: &BigTable,
    changes: usize,
    notes: &mut Vec<String>,
) -> Result<Poller> {
    let mut obs = Observer::start(bin, &["tail", "--json", "--netns", &ns.name], "poller")?;
    let mut poll = Monitor::start({
        let mut c = ns.cmd("sh");
        c.args(["-c", POLLER]);
        c
    })?;
    // Two saves completed: the poller is in its stride.
    for _ in 0..2 {
        if poll.wait(BIG_EVENT_TIMEOUT, |_| true).is_none() {
            poll.check_alive()?;
            bail!(
                "`{}` completed no save within {BIG_EVENT_TIMEOUT:?}",
                poll.desc
            );
        }
    }
    let start = Instant::now();
    let (obs_cpu0, poll_cpu0) = (
        cpu_ms(obs.pid, false)?,
        cpu_ms(poll.child.id(), false)? + cpu_ms(poll.child.id(), true)?,
    );
    let mut result = Poller {
        rules: table.rules,
        changes,
        observer: Vec::new(),
        poller: Vec::new(),
        missed: [0; 2],
        observer_cpu_ms: 0.0,
        poller_cpu_ms: 0.0,
        window_s: 0.0,
        saves: 0,
        command_ms: 0.0,
    };
    let mut took = Vec::new();
    for i in 0..changes {
        let chain = poll_chain(i);
        // Count the saves completed since the last change: none of them can show this chain.
        result.saves += poll.lines.try_iter().count();
        let (done, t) = run_timed(&mut ns.legacy(&["-N", &chain]))?;
        took.push(ms(t));
        match obs.wait_opt(BIG_EVENT_TIMEOUT, "legacy chain_create line", |v| {
            is_change(v, "legacy", "chain_create", &chain)
        })? {
            Some((at, _)) => result.observer.push(signed_ms(at, done)),
            None => result.missed[0] += 1,
        }
        let mut saves = 0;
        let seen = poll.wait(BIG_EVENT_TIMEOUT, |l| {
            saves += 1;
            poller_saw(l, &chain)
        });
        result.saves += saves;
        match seen {
            Some(at) => result.poller.push(signed_ms(at, done)),
            None => result.missed[1] += 1,
        }
    }
    result.window_s = start.elapsed().as_secs_f64();
    result.observer_cpu_ms = cpu_ms(obs.pid, false)? - obs_cpu0;
    result.poller_cpu_ms =
        cpu_ms(poll.child.id(), false)? + cpu_ms(poll.child.id(), true)? - poll_cpu0;
    result.command_ms = median(&took);
    drop(poll);
    obs.finish("side by side (legacy poller)", notes);
    Ok(result)
}

impl Anchors {
    /// The side-by-side table (markdown).
    pub(super) fn table(&self) -> String {
        let d = |v: &[f64]| match Dist::of(v) {
            Some(d) => format!("{:.2} / {:.2}", d.median, d.p99),
            None => "none".to_owned(),
        };
        let mut t = String::from(
            "Side by side (part 6), the same changes seen by each tool, in ms: p50 / p99 from \
             the writer's exit to the tool's line; `observer − tool` is observer's line minus \
             the other tool's line for the same change (negative: observer first).\n\n\
             | change | n | writer | observer | nft monitor | xtables-monitor | observer − nft monitor | observer − xtables-monitor |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for k in &self.kinds {
            let missed = |i: usize| {
                if k.missed[i] == 0 {
                    String::new()
                } else {
                    format!(" ({} missed)", k.missed[i])
                }
            };
            let _ = writeln!(
                t,
                "| {} | {} | {:.1} | {}{} | {}{} | {}{} | {} | {} |",
                k.kind.label(),
                k.delays[0].len() + k.missed[0],
                k.command_ms,
                d(&k.delays[0]),
                missed(0),
                d(&k.delays[1]),
                missed(1),
                d(&k.delays[2]),
                missed(2),
                d(&k.lead[0]),
                d(&k.lead[1]),
            );
        }
        match &self.poller {
            Ok(p) => {
                let _ = write!(
                    t,
                    "\nLegacy, {} `iptables-legacy -N` on the {}-rule filter table (the writer: {:.0} ms \
                     median), observer against a shell running `iptables-legacy-save -t filter | grep` \
                     back to back ({} saves in {:.1} s):\n\n\
                     | | detection p50 / p99 from the writer's exit, ms | missed | CPU over the window | CPU per change |\n\
                     | --- | ---: | ---: | ---: | ---: |\n\
                     | observer tail | {} | {} | {:.0} ms ({:.1} % of a CPU) | {:.1} ms |\n\
                     | save poller | {} | {} | {:.0} ms ({:.1} % of a CPU) | {:.1} ms |\n\
                     | poller / observer | {} | | {:.1}× | |\n",
                    p.changes,
                    thousands(p.rules as u64),
                    p.command_ms,
                    p.saves,
                    p.window_s,
                    d(&p.observer),
                    p.missed[0],
                    p.observer_cpu_ms,
                    p.observer_cpu_ms / p.window_s / 10.0,
                    p.observer_cpu_ms / p.changes.max(1) as f64,
                    d(&p.poller),
                    p.missed[1],
                    p.poller_cpu_ms,
                    p.poller_cpu_ms / p.window_s / 10.0,
                    p.poller_cpu_ms / p.changes.max(1) as f64,
                    ratio_pair(&p.poller, &p.observer),
                    p.poller_cpu_ms / p.observer_cpu_ms.max(1.0),
                );
            }
            Err(e) => {
                let _ = writeln!(t, "\nLegacy poller comparison: NOT MEASURED: {e}");
            }
        }
        t
    }
}

/// `a / b` at p50 and p99, as `x.x× / y.y×`.
fn ratio_pair(a: &[f64], b: &[f64]) -> String {
    match (Dist::of(a), Dist::of(b)) {
        (Some(a), Some(b)) => format!("{:.1}× / {:.1}×", a.median / b.median, a.p99 / b.p99),
        _ => "none".to_owned(),
    }
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

    #[test]
    fn a_poller_line_shows_whole_chain_names() {
        assert!(poller_saw(":OBSP-0 :OBSP-1 ", "OBSP-1"));
        assert!(!poller_saw(":OBSP-10 ", "OBSP-1"));
        assert!(!poller_saw("", "OBSP-0"));
        assert!(mentions("dport 8080 accept", "8080"));
        assert!(!mentions("dport 18080", "8080"));
    }
}
