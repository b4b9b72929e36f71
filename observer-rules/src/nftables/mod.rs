//! nf_tables: nfnetlink messages decoded into objects, the ruleset model they build, and rules
//! rendered in `nft list ruleset` syntax; each nft generation becomes backend-neutral
//! [`crate::ruleset::Change`]s.
//!
//! The way through this module, per network namespace (the agent opens the sockets, reads the
//! datagrams and hands them here):
//! 1. a dump's replies, decoded ([`decode::decode`]) and sorted into a [`Dump`], build the
//!    model with [`state::NftState::from_dump`] (tables → chains → ordered rules, sets);
//! 2. each notification datagram goes to [`generation::GenerationBuilder::feed`], which
//!    decodes it, buffers objects until the `NFT_MSG_NEWGEN` that closes their transaction,
//!    applies them to the state and returns [`generation::Transaction`]s (gen id, writer tid
//!    and comm, changes already through [`crate::ruleset::summarize`]); generations already in
//!    the dump are dropped;
//! 3. after lost notifications the agent dumps again and
//!    [`generation::GenerationBuilder::resync`] turns the difference into one transaction.
//!
//! The folders: [`netlink`] (messages → objects, expression attributes), [`model`] (the state
//! and how a transaction changes it), [`render`] (rule text), [`compat`] (iptables-nft's x_tables
//! extensions, and rules in their writer's `iptables-nft-save` syntax).
//!
//! Rules are rendered in `nft list ruleset` syntax ([`render`]); counters print as `counter`
//! without their values, which are runtime state. Interface indexes are named through
//! [`render::ifnames`], which the agent feeds from the namespace's link table.

pub mod compat;
pub mod model;
pub mod netlink;
pub mod render;

#[cfg(any(test, feature = "test-utils"))]
#[doc(hidden)]
pub mod testing;

#[cfg(test)]
mod tests;

pub use compat::xt_syntax;
pub use model::{generation, rule_positions_told, state, Dump};
pub use netlink::decode;
