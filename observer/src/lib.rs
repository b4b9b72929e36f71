//! observer: see every netfilter ruleset change the moment the kernel applies it, and who made it.
//!
//! Data flows through the modules in this order: `hooks` (eBPF, kernel records), `nftables`
//! (the netlink subscription) and `xtables` / `ipset` (tables and sets read back) in, `netns` to
//! reach every namespace; the decoding, diffing and rendering are the decoder crate's
//! (`observer_rules`, whose `netlink` and `ruleset` are re-exported here); `attribution`,
//! `cgroup` and `pods` name the writer (`bus`: who asked firewalld), `engine` puts it together, `incidents` correlates,
//! `output` is the line (the contract), `sinks` write it (tail, stdout, the record writer into
//! `store`, HTTP, metrics, NATS); `forensics` reads the record back. `cli`, `daemon` and `cmd`
//! are the commands; `caps` states the capabilities they need. ARCHITECTURE.md draws the layers.

pub mod attribution;
pub mod bus;
pub mod caps;
pub mod cgroup;
pub mod cli;
pub mod cmd;
pub mod daemon;
pub mod engine;
pub mod forensics;
#[doc(hidden)]
pub mod fuzzing;
pub mod hooks;
pub mod incidents;
pub mod ipset;
pub mod netns;
pub mod nftables;
pub mod output;
pub mod pods;
pub mod restore;
pub mod sinks;
pub mod store;
pub mod timestamp;
pub mod xtables;

// The decoder crate's netlink framing, change model and shown text, under the paths the agent
// uses.
pub use observer_rules::{netlink, ruleset, shown};
