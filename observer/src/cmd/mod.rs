//! The commands, one module each: what `main` dispatches to, at the top of the layers. Each
//! takes its flags from `cli` and puts the library together: `tail` (this node; `follow` for
//! `tail --record`, `remote` for `tail --remote`, `fleet` for `tail --nats`), `query`, `owners`,
//! `doctor` and `run` (the node agent, from the parts in `daemon`). The measuring tools that
//! `cargo xtask` drives are the `bench` example, outside the shipped binary.

pub mod doctor;
pub mod fleet;
pub mod follow;
pub mod owners;
pub mod query;
pub mod remote;
pub mod run;
pub mod tail;

/// The output's reader went away (`observer tail ... | head`): the command stops there, and
/// `main` ends quietly and with success.
#[derive(Debug, thiserror::Error)]
#[error("the output's reader went away")]
pub struct ReaderGone;

/// After SIGTERM or SIGINT, end the process once its output stops taking lines for `stall`, or
/// `cap` after the signal at the latest, whatever holds it: a stdout that nobody reads (a
/// stalled log pipe, a paused terminal) can block a write forever, and the kubelet kills what
/// does not exit in time. An output that still takes lines (a long backlog written to a slow
/// reader) is given until `cap`. The normal stop, when it comes first, is not changed. Exits
/// with `code`, without a word (stderr may be stalled too).
///
/// The watch needs neither the async runtime nor its signal driver: a write blocked on stdout
/// can hold every worker, and then a task waiting for the signal would never run. The signal
/// handler writes a byte to a pipe (all a handler may safely do), and a thread of its own reads
/// it, then watches the count of lines the engine handed its output
/// ([`crate::engine::LINES_OUT`]).
pub fn exit_after_signal(
    stall: std::time::Duration,
    cap: std::time::Duration,
    code: i32,
) -> std::io::Result<()> {
    use std::io::Read as _;
    use std::os::fd::{BorrowedFd, IntoRawFd as _};
    let (read, write) = nix::unistd::pipe().map_err(std::io::Error::from)?;
    // Kept open for the life of the process: the handler may run at any time.
    let write = write.into_raw_fd();
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the action only calls write(2) on a descriptor that is never closed, which is
        // async-signal-safe; it neither allocates nor takes a lock.
        unsafe {
            signal_hook_registry::register(signal, move || {
                let _ = nix::unistd::write(BorrowedFd::borrow_raw(write), &[1]);
            })
        }?;
    }
    let mut read = std::fs::File::from(read);
    std::thread::Builder::new()
        .name("exit-watchdog".into())
        .spawn(move || {
            let mut byte = [0u8; 1];
            if read.read(&mut byte).is_ok_and(|n| n == 1) {
                let lines = || crate::engine::LINES_OUT.load(std::sync::atomic::Ordering::Relaxed);
                watch_exit(stall, cap, lines, std::thread::sleep);
                std::process::exit(code);
            }
        })?;
    Ok(())
}

/// Wait until `lines()` stays the same for `stall`, or `cap` in all (with `sleep`).
fn watch_exit(
    stall: std::time::Duration,
    cap: std::time::Duration,
    lines: impl Fn() -> u64,
    mut sleep: impl FnMut(std::time::Duration),
) {
    let mut waited = std::time::Duration::ZERO;
    let mut last = lines();
    while waited < cap {
        let nap = stall.min(cap - waited);
        sleep(nap);
        waited += nap;
        let now = lines();
        if now == last {
            return;
        }
        last = now;
    }
}

/// A write to the output that failed: [`ReaderGone`] when its reader went away, else the error.
pub fn output_error(e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        ReaderGone.into()
    } else {
        e.into()
    }
}

/// Whether a command ended because its output's reader went away.
pub fn reader_gone(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<ReaderGone>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::time::Duration;

    /// `watch_exit` on a clock of its own: how long it waited, for lines that grow by `step`
    /// per second until `until` seconds.
    fn waited(stall: u64, cap: u64, step: u64, until: u64) -> Duration {
        let clock = Cell::new(Duration::ZERO);
        let lines = || clock.get().as_secs().min(until) * step;
        watch_exit(
            Duration::from_secs(stall),
            Duration::from_secs(cap),
            lines,
            |d| clock.set(clock.get() + d),
        );
        clock.get()
    }

    #[test]
    fn the_exit_waits_while_the_output_takes_lines_and_no_longer() {
        // Nothing written after the signal: one stall.
        assert_eq!(waited(5, 25, 0, 0), Duration::from_secs(5));
        // Lines written for 12 s: the stall after them, checked every 5 s.
        assert_eq!(waited(5, 25, 10, 12), Duration::from_secs(20));
        // Lines written all along: the cap.
        assert_eq!(waited(5, 25, 10, 1000), Duration::from_secs(25));
        // The stall and the cap alike: the grace as before.
        assert_eq!(waited(9, 9, 10, 1000), Duration::from_secs(9));
    }

    #[test]
    fn a_broken_pipe_is_the_reader_gone_through_any_context() {
        let gone = output_error(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(reader_gone(&gone.context("the record follower stopped")));
        let full = output_error(std::io::Error::from(std::io::ErrorKind::StorageFull));
        assert!(!reader_gone(&full));
        assert!(!reader_gone(&anyhow::anyhow!("the reader went away")));
    }
}
