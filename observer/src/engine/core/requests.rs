//! Who asked a D-Bus firewall manager (firewalld) for the changes it makes.
//!
//! Every change firewalld makes is firewalld's: the kernel sees its own process (or the
//! `iptables-restore` it runs) write. What a person wants to know is who asked it to:
//! `firewall-cmd --reload` run by a compliance job, a direct rule added by an admin. The bus
//! watcher ([`crate::bus`]) sees each method call to the manager and its reply; each call is a
//! window, from the call to its reply, and a change the manager (or a child of it) makes
//! inside one is the caller's request. The manager serves its calls one at a time, so when
//! windows overlap (calls queued behind a long reload) the oldest open one is being served.
//!
//! A change outside every window (firewalld's start-up, a reload on SIGHUP) has no requester.
//! The times compared are the change's (the kernel's, for x_tables writes; the notification's
//! arrival, for nftables) and the arrival of the call and of its reply at the watcher: the
//! call reaches the watcher before the manager acts on it, and the reply after its last write.

use std::collections::VecDeque;
use std::time::Duration;

use crate::attribution::{ProcessInfo, Requester};
use crate::timestamp::Timestamp;

/// A method call to the manager, as the bus watcher saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The manager's process id (who will make the changes).
    pub manager: u32,
    /// The caller's unique bus name and the call's serial: what its reply names.
    pub sender: String,
    pub serial: u32,
    /// When the call was seen.
    pub time: Timestamp,
    pub requester: Requester,
}

/// The manager's reply (or error) to a call.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The caller's unique bus name (the reply's destination) and the serial it answers.
    pub sender: String,
    pub serial: u32,
    pub time: Timestamp,
}

/// A change may be stamped a little before the call was seen (clocks read on different
/// paths): so much earlier still counts.
const BEFORE_CALL: Duration = Duration::from_millis(5);
/// And a little after its reply was seen.
const AFTER_REPLY: Duration = Duration::from_millis(50);
/// How long a window is kept after its reply, for changes read late (a big table).
const KEPT: Duration = Duration::from_secs(120);
/// A call with no reply for so long is given up (the manager or the caller went away, or the
/// reply was missed): a complete reload of a big ruleset takes seconds, and a window left open
/// would lend its caller to the manager's own changes.
const OPEN_AT_MOST: Duration = Duration::from_secs(120);
/// The windows kept at most: a caller flooding the manager cannot grow them.
const MAX_WINDOWS: usize = 1024;

#[derive(Debug)]
struct Window {
    call: Call,
    end: Option<Timestamp>,
}

/// The calls' windows, oldest first.
#[derive(Debug, Default)]
pub struct Requests {
    windows: VecDeque<Window>,
}

impl Requests {
    /// A call to the manager was seen.
    pub fn call(&mut self, call: Call) {
        self.prune(call.time);
        if self.windows.len() >= MAX_WINDOWS {
            self.windows.pop_front();
        }
        self.windows.push_back(Window { call, end: None });
    }

    /// Its reply was seen: the window ends.
    pub fn reply(&mut self, reply: &Reply) {
        if let Some(w) = self.windows.iter_mut().find(|w| {
            w.end.is_none() && w.call.serial == reply.serial && w.call.sender == reply.sender
        }) {
            w.end = Some(reply.time);
        }
        self.prune(reply.time);
    }

    /// The requester of a change `process` made at `time`, when that process is a manager (or
    /// runs under one) serving a call then.
    pub fn requester(&self, process: &ProcessInfo, time: Timestamp) -> Option<&Requester> {
        let is_manager = |m: u32| {
            process.pid == m
                || process.ppid == Some(m)
                || process.ancestry.iter().any(|a| a.pid == m)
        };
        self.windows
            .iter()
            .filter(|w| is_manager(w.call.manager))
            .filter(|w| w.call.time.saturating_sub(BEFORE_CALL) <= time)
            .filter(|w| w.end.is_none_or(|e| time <= e.saturating_add(AFTER_REPLY)))
            .min_by_key(|w| w.call.time)
            .map(|w| &w.call.requester)
    }

    /// The process with its requester set, when it has one.
    pub fn attribute(&self, process: &ProcessInfo, time: Timestamp) -> Option<ProcessInfo> {
        let r = self.requester(process, time)?;
        let mut p = process.clone();
        p.requested_by = Some(Box::new(r.clone()));
        Some(p)
    }

    fn prune(&mut self, now: Timestamp) {
        self.windows.retain(|w| match w.end {
            Some(e) => now.elapsed_since(e) < KEPT,
            None => now.elapsed_since(w.call.time) < OPEN_AT_MOST,
        });
    }

    /// How many windows are kept.
    pub fn windows(&self) -> usize {
        self.windows.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::Ancestor;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_unix_nanos(1_700_000_000_000_000_000 + ms as i64 * 1_000_000)
    }

    fn requester(comm: &str, method: &str) -> Requester {
        Requester {
            pid: 4242,
            comm: comm.into(),
            actor: "compliance-job".into(),
            method: format!("org.fedoraproject.FirewallD1.{method}"),
            unit: None,
            container_id: None,
            pod: None,
            ancestry: Vec::new(),
        }
    }

    fn call(serial: u32, ms: u64, method: &str) -> Call {
        Call {
            manager: 100,
            sender: ":1.7".into(),
            serial,
            time: at(ms),
            requester: requester("firewall-cmd", method),
        }
    }

    fn reply(serial: u32, ms: u64) -> Reply {
        Reply {
            sender: ":1.7".into(),
            serial,
            time: at(ms),
        }
    }

    fn firewalld() -> ProcessInfo {
        ProcessInfo::named(100, "firewalld", Some((1, "systemd")), "firewalld")
    }

    fn method_of(r: &Requests, p: &ProcessInfo, ms: u64) -> Option<String> {
        r.requester(p, at(ms)).map(|q| q.short_method().to_string())
    }

    #[test]
    fn a_change_inside_a_call_is_the_callers_and_outside_none_is() {
        let mut r = Requests::default();
        let fw = firewalld();
        // Start-up: no call.
        assert_eq!(method_of(&r, &fw, 0), None);
        r.call(call(5, 1000, "reload"));
        assert_eq!(method_of(&r, &fw, 1200).as_deref(), Some("reload"));
        r.reply(&reply(5, 1500));
        // Read after the reply, stamped before it: still the reload's.
        assert_eq!(method_of(&r, &fw, 1499).as_deref(), Some("reload"));
        assert_eq!(method_of(&r, &fw, 1540).as_deref(), Some("reload"));
        // Long after: firewalld's own.
        assert_eq!(method_of(&r, &fw, 3000), None);
        // Before the call: not its.
        assert_eq!(method_of(&r, &fw, 900), None);
    }

    #[test]
    fn the_managers_children_are_matched_and_other_writers_are_not() {
        let mut r = Requests::default();
        r.call(call(5, 1000, "reload"));
        let mut restore = ProcessInfo::named(
            300,
            "iptables-restor",
            Some((100, "firewalld")),
            "firewalld",
        );
        assert!(r.requester(&restore, at(1100)).is_some());
        restore.ppid = Some(200);
        restore.ancestry = vec![
            Ancestor {
                comm: "sh".into(),
                pid: 200,
            },
            Ancestor {
                comm: "firewalld".into(),
                pid: 100,
            },
        ];
        assert!(r.requester(&restore, at(1100)).is_some());
        let kp = ProcessInfo::named(
            500,
            "iptables-restor",
            Some((400, "kube-proxy")),
            "kube-proxy",
        );
        assert!(r.requester(&kp, at(1100)).is_none());
        let p = r.attribute(&firewalld(), at(1100)).expect("attributed");
        assert_eq!(p.shown_actor(), "firewall-cmd (via firewalld)");
        assert_eq!(p.actor, "firewalld", "the actor itself is unchanged");
    }

    #[test]
    fn queued_calls_are_served_oldest_first() {
        let mut r = Requests::default();
        let fw = firewalld();
        r.call(call(5, 1000, "reload"));
        r.call(call(6, 1100, "direct.addRule"));
        assert_eq!(method_of(&r, &fw, 1200).as_deref(), Some("reload"));
        r.reply(&reply(5, 1300));
        assert_eq!(method_of(&r, &fw, 1400).as_deref(), Some("direct.addRule"));
        // A reply to another caller's serial ends nothing.
        r.reply(&Reply {
            sender: ":1.9".into(),
            serial: 6,
            time: at(1450),
        });
        assert_eq!(method_of(&r, &fw, 1500).as_deref(), Some("direct.addRule"));
    }

    #[test]
    fn windows_are_bounded_and_forgotten() {
        let mut r = Requests::default();
        for i in 0..(MAX_WINDOWS as u32 + 10) {
            r.call(call(i, 1000 + u64::from(i), "reload"));
        }
        assert_eq!(r.windows(), MAX_WINDOWS);
        // Open for longer than OPEN_AT_MOST: given up at the next call.
        r.call(call(1, 700_000, "reload"));
        assert_eq!(r.windows(), 1);
        r.reply(&reply(1, 700_500));
        r.call(call(2, 700_500 + 121_000, "reload"));
        assert_eq!(r.windows(), 1, "an ended window is kept {KEPT:?}");
    }
}
