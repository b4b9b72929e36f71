//! The network namespaces the bench works in: each made with `ip netns add` and deleted when
//! dropped, every iptables and nft command run inside one (`ip netns exec`), and those left
//! behind by a bench or soak that was killed.

use std::{path::Path, process::Command};

use anyhow::Result;

use crate::cmd;

/// A network namespace made with `ip netns add`, deleted when dropped (test-support's).
pub(crate) struct Netns {
    pub(crate) name: String,
    ns: test_support::Netns,
}

impl Netns {
    pub(crate) fn add(name: String) -> Result<Netns> {
        let ns = test_support::Netns::add(name)?;
        Ok(Netns {
            name: ns.name().to_string(),
            ns,
        })
    }

    /// `ip netns exec NAME PROGRAM`.
    pub(crate) fn cmd(&self, program: &str) -> Command {
        self.ns.command(program)
    }

    pub(crate) fn legacy(&self, args: &[&str]) -> Command {
        // -w: /run/xtables.lock is shared by every namespace, and others may hold it briefly.
        let mut c = self.cmd("iptables-legacy");
        c.args(["-w", "5"]).args(args);
        c
    }

    pub(crate) fn nft(&self, args: &str) -> Command {
        let mut c = self.cmd("nft");
        c.args(args.split(' '));
        c
    }
}

/// Deletes `PREFIXPID-*` namespaces left by a bench or soak that was killed (SIGKILL leaves no
/// time to clean up): those named for a process that no longer exists.
pub(crate) fn remove_stale_namespaces(prefix: &str) {
    let Ok(list) = cmd::output(Command::new("ip").args(["netns", "list"])) else {
        return;
    };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(pid) = name
            .strip_prefix(prefix)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue; // a bench that is still running
        }
        eprintln!("xtask: deleting network namespace {name}, left by process {pid}, gone");
        if let Err(e) = cmd::output(Command::new("ip").args(["netns", "del", name])) {
            eprintln!("xtask: warning: {e:#}");
        }
    }
}
