//! Part 6 on x_tables, where nothing notifies: observer against a shell that runs
//! `iptables-legacy-save -t filter` back to back on the 20,000-rule table, as changes are made
//! with `iptables-legacy -N`: each side's detection delay and the CPU it burns.

use std::{path::Path, time::Instant};

use anyhow::{bail, Result};

use super::Monitor;
use crate::bench::{
    netns::Netns,
    procfs::{stat_ticks, USER_HZ},
    spawn::{is_change, run_timed, Observer},
    stats::{median, ms, signed_ms},
    table::BigTable,
    BIG_EVENT_TIMEOUT,
};

/// The x_tables comparison: observer against a save poller on the 20,000-rule table.
pub(in crate::bench) struct Poller {
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

pub(super) fn poller(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::anchors::monitors::mentions;

    #[test]
    fn a_poller_line_shows_whole_chain_names() {
        assert!(poller_saw(":OBSP-0 :OBSP-1 ", "OBSP-1"));
        assert!(!poller_saw(":OBSP-10 ", "OBSP-1"));
        assert!(!poller_saw("", "OBSP-0"));
        assert!(mentions("dport 8080 accept", "8080"));
        assert!(!mentions("dport 18080", "8080"));
    }
}
