//! The namespace life cycle: when a namespace is looked for and opened, what its first read
//! holds, and when it is let go.
//!
//! A namespace is opened when a record names one not watched yet: the kernel's report of a
//! task seen in it (just made, or entered) or a write in it. It is looked for among the
//! processes of the record's writer; one just made is looked for again a few times, since its
//! creator enters it a moment after the kernel reports it. It is kept while a bind mount or a
//! process holds it (observer's own namespace always), and let go when an unmount or the
//! sweep finds that nothing does any more. Here are the decisions; the engine's `namespaces`
//! and `kernel` do the I/O.

use std::collections::HashSet;
use std::ops::Add;
use std::time::Duration;

use crate::attribution::KernelProcess;

/// How often the kernel maps are swept of tasks that exited (and namespaces that nothing holds
/// are looked for).
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// When a namespace just made is not found at once, it is looked for again after each of these
/// delays (about 100 ms in all); not found by then, it is gone or found when it is written.
pub const CREATED_RETRIES_MS: [u64; 6] = [1, 2, 5, 10, 20, 60];

/// What a record says of the namespace it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NsEvent {
    /// The kernel saw a task in a namespace it had not reported; `created`: the namespace was
    /// just made (kprobe, fentry), otherwise the task entered it.
    Reported { created: bool },
    /// A writer changed something there: it must be watched before its change is read.
    Written,
}

/// What to do about the namespace a record names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// The record names no namespace (the kernel could not read it): nothing to watch.
    Nothing,
    /// It is watched already.
    Watched,
    /// Look for it now among the writer's processes; `warn` when it cannot be opened (a
    /// change there goes unread), otherwise say so only in the debug log (a task that entered
    /// a namespace and left it leaves nothing to watch).
    Find { warn: bool },
    /// Look for it now, and when it is not there yet, again after each of
    /// [`CREATED_RETRIES_MS`] while the engine goes on.
    FindWithRetries,
}

/// What to do when a record names namespace `inode` (0: unknown), `watched` or not.
pub fn look(inode: u32, watched: bool, event: NsEvent) -> Look {
    if inode == 0 {
        return Look::Nothing;
    }
    if watched {
        return Look::Watched;
    }
    match event {
        NsEvent::Reported { created: true } => Look::FindWithRetries,
        NsEvent::Reported { created: false } => Look::Find { warn: false },
        NsEvent::Written => Look::Find { warn: true },
    }
}

/// The processes that may hold the writer's namespace, nearest first: the writer, then its
/// ancestors (a creator may hand a namespace to a child, or exit after its child entered it).
pub fn holders(p: &KernelProcess) -> Vec<u32> {
    std::iter::once(p.tgid)
        .chain(p.ancestors.iter().map(|a| a.tgid))
        .collect()
}

/// A namespace looked for was not found: unless it is watched by now, the kernel side is to
/// report it again when a task is seen in it (the kernel gives a freed namespace's inode number
/// to the next one made, which must not pass as already reported).
pub fn report_again(watched: bool) -> bool {
    !watched
}

/// How a namespace found is first read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstRead {
    /// Its legacy tables are read as its baseline. Not for a namespace that appeared while
    /// observer ran: its tables appear as created on their first replace.
    pub legacy_baseline: bool,
}

/// How namespace found is read; `new`: it appeared while observer ran. `None` when it is
/// watched already.
pub fn first_read(watched: bool, new: bool) -> Option<FirstRead> {
    (!watched).then_some(FirstRead {
        legacy_baseline: !new,
    })
}

/// Whether what a namespace's first nftables read holds is reported, as changes found
/// (`replayed`): only for a namespace that appeared while observer ran (its ruleset was written
/// after start, before its subscription opened), and only when it holds tables.
pub fn report_established(new: bool, holds_tables: bool) -> bool {
    new && holds_tables
}

/// Whether an unmount at `path` may have let go of a watched namespace (`known`: `path` is a
/// namespace's bind mount observer knows), and if so the reason the namespaces gone are
/// forgotten for. Namespaces found after their mount was made may not be known yet: the places
/// where `ip netns` and CNI plugins put them count too. The kprobe and fentry hooks report only
/// namespace mounts, without a path.
pub fn umount_lets_go(path: &str, known: bool) -> Option<String> {
    if path.is_empty() {
        return Some("a namespace file unmounted".into());
    }
    (known || path.starts_with("/run/netns/") || path.starts_with("/var/run/netns/"))
        .then(|| format!("{path} unmounted"))
}

/// The watched namespaces that no bind mount holds, observer's own (`own`) aside: only
/// processes may keep them, and a process's exit is not reported. In the order of `watched`.
pub fn unmounted(
    watched: impl IntoIterator<Item = u32>,
    mounted: &HashSet<u32>,
    own: Option<u32>,
) -> Vec<u32> {
    watched
        .into_iter()
        .filter(|i| !mounted.contains(i) && Some(*i) != own)
        .collect()
}

/// Of the namespaces no mount holds, those no process holds either: they are let go (their
/// descriptor would keep them alive). Processes are listed (`held`, a read of all of `/proc`)
/// only when there is a candidate.
pub fn gone(candidates: Vec<u32>, held: impl FnOnce() -> HashSet<u32>) -> Vec<u32> {
    if candidates.is_empty() {
        return candidates;
    }
    let held = held();
    candidates
        .into_iter()
        .filter(|i| !held.contains(i))
        .collect()
}

/// When the next sweep is due: kernel entries of exited tasks, namespaces nothing holds any
/// more, and losses no later record brought to light. Due [`SWEEP_EVERY`] after something
/// happened, and after a sweep only while a watched namespace is held by processes only (their
/// exit sends nothing): an idle node whose namespaces are all mounted is not woken for nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sweep<I> {
    pub at: Option<I>,
}

impl<I: Copy + Add<Duration, Output = I>> Sweep<I> {
    /// The first sweep, [`SWEEP_EVERY`] after start.
    pub fn new(now: I) -> Sweep<I> {
        Sweep {
            at: Some(now + SWEEP_EVERY),
        }
    }

    /// Something happened at `now`: a sweep is due after it, unless one is due already.
    pub fn activity(&mut self, now: I) {
        self.at.get_or_insert(now + SWEEP_EVERY);
    }

    /// A sweep ran at `now`: the next is due only while some watched namespace is held by
    /// processes only.
    pub fn swept(&mut self, now: I, held_by_processes_only: bool) {
        self.at = held_by_processes_only.then(|| now + SWEEP_EVERY);
    }
}

#[cfg(test)]
mod tests;
