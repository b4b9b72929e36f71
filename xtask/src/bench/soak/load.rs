//! The soak's load: the namespaces it makes (`obs-soak-PID-*`), and in them, every [`TICK`],
//! alternately one `nft -f` batch and one `iptables-legacy-restore --noflush` into a table of
//! [`BIG_RULES`] rules more; and every [`CHURN_EVERY`] a namespace made, written and deleted.

use std::fmt::Write as _;
use std::fs;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{self, Command};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::signals::{interrupted, quiet};
use super::{Shared, BIG_RULES, CHURN_EVERY, TICK};

pub(super) const NS_PREFIX: &str = "obs-soak-";

/// A namespace of the soak's own, deleted when dropped.
pub(super) struct Ns(test_support::Netns);

impl Ns {
    pub(super) fn new(tag: &str) -> Result<Ns> {
        let name = format!("{NS_PREFIX}{}-{tag}", process::id());
        Ok(Ns(test_support::Netns::add(name)?))
    }

    /// `ip netns exec NAME PROGRAM`, in a process group of its own (see `command`).
    pub(super) fn exec(&self, program: &str) -> Command {
        let mut c = self.0.command(program);
        c.process_group(0);
        c
    }

    /// The namespace's inode: the `netns` of its change lines.
    pub(super) fn inode(&self) -> Result<u64> {
        Ok(self.0.inode()?)
    }
}

/// The legacy namespace's table: chain OBSBIG of [`BIG_RULES`] rules, and chain OBSCH rewritten
/// by the load. Returns the two restore files the load alternates.
pub(super) fn legacy_setup(ns: &Ns, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut big = String::from("*filter\n:OBSBIG - [0:0]\n:OBSCH - [0:0]\n");
    for i in 0..BIG_RULES {
        let _ = writeln!(
            big,
            "-A OBSBIG -s 10.{}.{}.1/32 -p tcp --dport {} -j ACCEPT",
            i / 250,
            i % 250,
            i + 1
        );
    }
    big.push_str("COMMIT\n");
    let file = dir.join("legacy-big.rules");
    fs::write(&file, big)?;
    quiet(
        ns.exec("iptables-legacy-restore")
            .args(["--noflush", "--wait=5"])
            .stdin(fs::File::open(&file)?),
    )?;
    let mut batches = Vec::new();
    for (k, base) in [(0, 1000), (1, 2000)] {
        // With --noflush, declaring an existing user chain flushes it.
        let mut b = String::from("*filter\n:OBSCH - [0:0]\n");
        for i in 0..99 {
            let _ = writeln!(b, "-A OBSCH -p tcp --dport {} -j ACCEPT", base + i);
        }
        b.push_str("COMMIT\n");
        let file = dir.join(format!("legacy{k}.rules"));
        fs::write(&file, b)?;
        batches.push(file);
    }
    Ok(batches)
}

/// Every [`TICK`], alternately, one nft batch and one legacy batch, until told to stop.
pub(super) fn load(sh: &Shared, nft_ns: &Ns, nft: &[PathBuf], legacy_ns: &Ns, legacy: &[PathBuf]) {
    let mut next = Instant::now();
    let mut round = 0usize;
    while !sh.stop_load.load(Ordering::Relaxed) && !interrupted() {
        let k = (round / 2) % 2;
        let r = if round.is_multiple_of(2) {
            sh.nft_batches.fetch_add(1, Ordering::Relaxed);
            quiet(nft_ns.exec("nft").arg("-f").arg(&nft[k]))
        } else {
            sh.legacy_batches.fetch_add(1, Ordering::Relaxed);
            fs::File::open(&legacy[k])
                .map_err(anyhow::Error::from)
                .and_then(|f| {
                    quiet(
                        legacy_ns
                            .exec("iptables-legacy-restore")
                            .args(["--noflush", "--wait=5"])
                            .stdin(f),
                    )
                })
        };
        if let Err(e) = r {
            sh.fail(format!("load batch failed: {e:#}"));
        }
        round += 1;
        next += TICK;
        let now = Instant::now();
        match next.checked_duration_since(now) {
            Some(wait) => thread::sleep(wait),
            // More than a second behind (the machine was busy): go on from now, no burst.
            None if now - next > Duration::from_secs(1) => next = now,
            None => {}
        }
    }
}

/// Every [`CHURN_EVERY`]: a namespace made, written (nft and legacy), and deleted once its
/// changes were streamed (or after 3 s).
pub(super) fn churn(sh: &Shared, dir: &Path) {
    let nft_file = dir.join("churn.nft");
    let body = "add table ip obschurn\nadd chain ip obschurn c\n\
                add rule ip obschurn c tcp dport 22 accept\nadd rule ip obschurn c tcp dport 23 accept\n";
    if let Err(e) = fs::write(&nft_file, body) {
        sh.fail(format!("writing {}: {e}", nft_file.display()));
        return;
    }
    // table_create, chain_create, 2 rule_add; and for the first legacy replace of a new
    // namespace the whole table: table_create, 3 builtin chain_create, 1 rule_add.
    let (want_nft, want_legacy) = (4, 5);
    let mut n = 0u64;
    let mut next = Instant::now() + CHURN_EVERY;
    while !sh.stop_load.load(Ordering::Relaxed) && !interrupted() {
        n += 1;
        {
            let _quiet = sh.churn_quiet.lock();
            let r = (|| -> Result<()> {
                let ns = Ns::new(&format!("c{n}"))?;
                sh.churn_nft.store(0, Ordering::SeqCst);
                sh.churn_legacy.store(0, Ordering::SeqCst);
                sh.churn_ino.store(ns.inode()?, Ordering::SeqCst);
                sh.churn_made.fetch_add(1, Ordering::Relaxed);
                quiet(ns.exec("nft").arg("-f").arg(&nft_file))?;
                quiet(ns.exec("iptables-legacy").args([
                    "-w",
                    "5",
                    "-A",
                    "INPUT",
                    "-s",
                    "10.9.9.9/32",
                    "-j",
                    "DROP",
                ]))?;
                let deadline = Instant::now() + Duration::from_secs(3);
                while Instant::now() < deadline
                    && (sh.churn_nft.load(Ordering::SeqCst) < want_nft
                        || sh.churn_legacy.load(Ordering::SeqCst) < want_legacy)
                {
                    thread::sleep(Duration::from_millis(20));
                }
                if sh.churn_nft.load(Ordering::SeqCst) >= want_nft
                    && sh.churn_legacy.load(Ordering::SeqCst) >= want_legacy
                {
                    sh.churn_complete.fetch_add(1, Ordering::Relaxed);
                }
                sh.churn_ino.store(0, Ordering::SeqCst);
                Ok(())
                // `ns` is deleted here.
            })();
            if let Err(e) = r {
                sh.churn_ino.store(0, Ordering::SeqCst);
                sh.fail(format!("namespace churn failed: {e:#}"));
            }
        }
        while Instant::now() < next {
            if sh.stop_load.load(Ordering::Relaxed) || interrupted() {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
        next += CHURN_EVERY;
    }
}
