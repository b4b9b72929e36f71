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

/// After SIGTERM or SIGINT, end the process `grace` later whatever holds it: a stdout that
/// nobody reads (a stalled log pipe, a paused terminal) can block a write forever, and the
/// kubelet kills what does not exit in time. The normal stop, when it comes first, is not
/// changed. Exits with `code`, without a word (stderr may be stalled too).
///
/// The watch needs neither the async runtime nor its signal driver: a write blocked on stdout
/// can hold every worker, and then a task waiting for the signal would never run. The signal
/// handler writes a byte to a pipe (all a handler may safely do), and a thread of its own reads
/// it, waits `grace` and exits.
pub fn exit_after_signal(grace: std::time::Duration, code: i32) -> std::io::Result<()> {
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
                std::thread::sleep(grace);
                std::process::exit(code);
            }
        })?;
    Ok(())
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

    #[test]
    fn a_broken_pipe_is_the_reader_gone_through_any_context() {
        let gone = output_error(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(reader_gone(&gone.context("the record follower stopped")));
        let full = output_error(std::io::Error::from(std::io::ErrorKind::StorageFull));
        assert!(!reader_gone(&full));
        assert!(!reader_gone(&anyhow::anyhow!("the reader went away")));
    }
}
