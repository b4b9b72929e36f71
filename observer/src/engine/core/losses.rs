//! Loss accounting: what the engine owns up to when records were lost on the way, and what it
//! reads again to make up for them.
//!
//! The kernel side counts what it could not hand over (a full ring buffer, too many replaces in
//! flight, failed reads and map updates), the ring buffer's reader counts the records it could
//! not decode, and each namespace's netlink reader says when its socket overran (`ENOBUFS`).
//! Each becomes one gap line; lost replace records make every legacy table be read again, and a
//! lost notification the namespace's ruleset, whose changes follow as `recovered`.

use std::collections::HashMap;
use std::hash::Hash;

use crate::hooks::KernelErrors;
use crate::output::line::Gap;
use crate::timestamp::Timestamp;

/// The loss counters the engine has seen: the kernel side's, and the records the ring buffer's
/// reader could not decode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Losses {
    pub kernel: KernelErrors,
    pub malformed: u64,
}

/// What to say when the loss counters moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LossReport {
    /// What the gap line lost: kernel records (how many), or something else.
    pub gap: Gap,
    /// The gap line's message.
    pub message: String,
    /// Records of table replaces were lost: every legacy table of every namespace is read again
    /// (what they did follows as `recovered` changes of an unknown writer).
    pub reread_legacy: bool,
}

/// What moved between the counters already reported (`before`) and those read `now`; `None`
/// when nothing did. Once reported, `now` becomes what was reported.
pub fn account(before: &Losses, now: &Losses) -> Option<LossReport> {
    if now == before {
        return None;
    }
    let (e0, e) = (&before.kernel, &now.kernel);
    let (ring, pending, r0, p0) = (
        e.ringbuf_full,
        e.pending_full,
        e0.ringbuf_full,
        e0.pending_full,
    );
    let (malformed, m0) = (now.malformed, before.malformed);
    let mut parts = Vec::new();
    if ring > r0 {
        parts.push(format!(
            "{} kernel records lost because the ring buffer was full (raise --ringbuf-size)",
            ring - r0
        ));
    }
    if pending > p0 {
        parts.push(format!(
            "{} table replaces not tracked because too many were in flight",
            pending - p0
        ));
    }
    if malformed > m0 {
        parts.push(format!(
            "{} kernel records could not be decoded",
            malformed - m0
        ));
    }
    if e.read_failed > e0.read_failed {
        parts.push(format!(
            "{} kernel reads failed (a writer's record may be missing or incomplete)",
            e.read_failed - e0.read_failed
        ));
    }
    if e.map_full > e0.map_full {
        parts.push(format!(
            "{} kernel map updates failed (a namespace or a refused batch may go unseen)",
            e.map_full - e0.map_full
        ));
    }
    let reread_legacy = ring > r0 || pending > p0;
    let records =
        ring.saturating_sub(r0) + pending.saturating_sub(p0) + malformed.saturating_sub(m0);
    let gap = if records > 0 {
        Gap::Kernel { records }
    } else {
        Gap::Other
    };
    let message = format!(
        "{}; {}",
        parts.join("; "),
        if reread_legacy {
            "every legacy table is re-read: what changed meanwhile follows as changes \
                 marked `recovered`, of an unknown writer"
        } else {
            "legacy changes around this time may be missing"
        }
    );
    Some(LossReport {
        gap,
        message,
        reread_legacy,
    })
}

/// The tables to diff after a namespace's tables were read again: each table read against its
/// old copy (`None` for one that is new), then each old table no longer there against nothing.
pub fn reread_pairs<'a, K: Eq + Hash, T>(
    old: &'a HashMap<K, T>,
    read: &'a HashMap<K, T>,
) -> Vec<(Option<&'a T>, Option<&'a T>)> {
    let mut pairs: Vec<(Option<&T>, Option<&T>)> = read
        .iter()
        .map(|(k, new)| (old.get(k), Some(new)))
        .collect();
    pairs.extend(
        old.iter()
            .filter(|(k, _)| !read.contains_key(k))
            .map(|(_, gone)| (Some(gone), None)),
    );
    pairs
}

/// The gap line's message when a namespace's nftables notifications were lost (`error`, at
/// `at`): the namespace is read again.
pub fn notifications_lost(error: &dyn std::fmt::Display, at: Timestamp) -> String {
    format!(
        "{error} at {at}; re-reading the namespace: what changed meanwhile follows as changes \
         marked `recovered` (each generation's own grouping and intermediate states are lost)"
    )
}

/// The `txn` of an nftables transaction: its generation, and for one found by a re-read after
/// lost notifications, its number among those (`recovered`, counted from 1 over the run).
pub fn nft_txn(inode: u32, gen: u32, recovered: Option<u64>) -> String {
    match recovered {
        Some(n) => format!("nft-{inode}-{gen}-recovered-{n}"),
        None => format!("nft-{inode}-{gen}"),
    }
}

#[cfg(test)]
mod tests;
