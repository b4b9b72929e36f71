//! observer: see every netfilter ruleset change the moment the kernel applies it, and who made it.
//!
//! Data flows through the modules in this order: `hooks` (eBPF, kernel records) and `nftables`
//! (netlink notifications, framed by `netlink`) in, `netns` to reach every namespace, `xtables`
//! / `nftables` to decode and diff (through the decoder crate, `observer_rules`, which also
//! holds `netlink` and `ruleset`), `ruleset` to summarise a transaction, `attribution` to name
//! the writer, `engine` to put it together, `output` to print it; `cmd` holds the commands
//! (`cmd::tail` on this node). `daemon` is `observer run` (stdout, HTTP streams and metrics,
//! and `recorder`, which writes `store`, the forensic record that `cmd::query` and `forensics`
//! search); `cmd::remote` follows a daemon's stream. `cmd::doctor` says what this machine
//! allows. ARCHITECTURE.md draws the layers.

pub mod attribution;
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
pub mod sinks;
pub mod store;
pub mod timestamp;
pub mod xtables;

// The decoder crate's netlink framing and change model, under the paths the agent uses.
pub use observer_rules::{netlink, ruleset};
