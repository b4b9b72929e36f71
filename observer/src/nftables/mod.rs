//! nf_tables in the agent: subscribe to nfnetlink notifications and dump a ruleset
//! ([`socket`]), and name interfaces from the namespace's link table ([`ifnames`]). Decoding,
//! the model and rendering are the decoder crate's ([`observer_rules::nftables`]); its modules
//! are re-exported here under the paths the agent uses ([`decode`], [`state`], [`generation`],
//! [`render`], [`xt_syntax`]).
//!
//! The way through, per network namespace:
//! 1. [`socket::subscribe`] (notifications) then [`socket::dump`] (the ruleset now), both
//!    called by a thread that entered the namespace (a socket stays in the namespace it was
//!    opened in, whoever uses it later);
//! 2. [`state::NftState::from_dump`] builds the model (tables → chains → ordered rules, sets);
//! 3. each datagram read with [`socket::recv`] goes to [`generation::GenerationBuilder::feed`],
//!    which decodes it ([`decode::decode`]), buffers objects until the `NFT_MSG_NEWGEN` that
//!    closes their transaction, applies them to the state and returns
//!    [`generation::Transaction`]s (gen id, writer tid and comm, changes already through
//!    [`crate::ruleset::summarize`]); generations already in the dump are dropped;
//! 4. on [`NftError::Overrun`] (the kernel dropped notifications: ENOBUFS) or
//!    [`NftError::Truncated`] ([`NftError::needs_resync`] says which), the caller dumps again
//!    and starts a new builder from that dump.
//!
//! Rules are rendered in `nft list ruleset` syntax ([`render`]); counters print as `counter`
//! without their values, which are runtime state. Notifications exist on every kernel with
//! nf_tables (3.13+); the writer's pid and comm in `NFT_MSG_NEWGEN` need 5.x+.

use std::io;

pub mod ifnames;
pub mod socket;

#[cfg(test)]
mod tests;

pub use observer_rules::nftables::{decode, generation, render, state, xt_syntax, Dump};
pub use socket::{discard_queued, dump, dump_counting, dump_within, recv, subscribe};

/// What can go wrong talking to nf_tables.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    /// Opening, binding or configuring a netlink socket failed (`op` says which step).
    #[error("netlink socket: {op}: {source}")]
    Socket {
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// The kernel dropped notifications because our receive buffer was full (ENOBUFS).
    /// The state no longer matches the kernel: dump again and start a new builder.
    #[error("notifications lost: receive buffer overrun (ENOBUFS); re-dump needed")]
    Overrun,
    /// A datagram was larger than the buffer given to [`socket::recv`]; its tail is lost.
    /// Handle like [`NftError::Overrun`].
    #[error("datagram of {len} bytes truncated to a {buf}-byte buffer; re-dump needed")]
    Truncated { len: usize, buf: usize },
    /// Receiving from the socket failed for another reason.
    #[error("netlink receive: {0}")]
    Recv(#[source] io::Error),
    /// Sending a request failed.
    #[error("netlink send: {0}")]
    Send(#[source] io::Error),
    /// The kernel answered a request with an error (errno, positive).
    #[error("{request}: kernel answered {}", io::Error::from_raw_os_error(*errno))]
    Kernel { request: &'static str, errno: i32 },
    /// No answer to a request within the socket's receive timeout.
    #[error("{request}: no answer from the kernel")]
    Timeout { request: &'static str },
    /// The ruleset changed during every dump attempt.
    #[error("ruleset kept changing during {attempts} dump attempts")]
    Inconsistent { attempts: usize },
    /// The ruleset holds more rules than the dump was asked to take (`--rule-level-limit`):
    /// the dump stopped there rather than hold them all.
    #[error("the ruleset holds more than {cap} rules")]
    TooManyRules { cap: usize },
    /// A reply to a request could not be decoded.
    #[error("{request}: malformed reply: {reason}")]
    Malformed {
        request: &'static str,
        reason: String,
    },
}

impl NftError {
    fn socket(op: &'static str, source: io::Error) -> NftError {
        NftError::Socket { op, source }
    }

    /// True when notifications were lost and the caller must re-dump the namespace.
    pub fn needs_resync(&self) -> bool {
        matches!(self, NftError::Overrun | NftError::Truncated { .. })
    }
}
