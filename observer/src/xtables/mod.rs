//! x_tables (iptables-legacy, ip6tables-legacy, arptables-legacy, ebtables-legacy) in the agent:
//! read a table through getsockopt in the netns where it changed, and report a replace the
//! kernel refused. Decoding, rendering and the diff are the decoder crate's
//! ([`observer_rules::xtables`]); its items are re-exported here under the paths the agent uses.
//!
//! x_tables sends no notifications: the eBPF hooks see that a table was replaced, and the agent
//! then reads the whole table once and compares it with the copy it read last time. The pieces:
//! - [`sockopt`]: `/proc/thread-self/net/*_tables_names` and `IPT_SO_GET_INFO`/`GET_ENTRIES`
//!   (works on any kernel with x_tables; needs CAP_NET_ADMIN in the netns);
//! - [`ebt`]: the same for bridge tables (`EBT_SO_GET_INFO`/`GET_ENTRIES`);
//! - [`attempt`]: a replace reported as one line (refused, or a bridge table not read back);
//! - from the decoder crate: [`decode`] (the `GET_ENTRIES` blob into chains and rules with
//!   structural fingerprints), [`diff`] (two copies of a table into changes, summarized).

pub(crate) mod attempt;
pub mod ebt;
pub mod sockopt;

#[cfg(test)]
pub(crate) mod tests;

pub use attempt::replace_attempt;
pub use observer_rules::xtables::{
    decode, decode_replace, diff, Against, XtChain, XtError, XtProto, XtRule, XtTable,
};
pub use sockopt::{
    name_sets, read_existing_table, read_table, read_table_against, table_names, XtSockets,
};
