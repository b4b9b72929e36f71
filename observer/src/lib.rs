//! observer: see every netfilter ruleset change the moment the kernel applies it, and who made it.
//!
//! Data flows through the modules in this order: `hooks` (eBPF, kernel records) and `nftables`
//! (netlink notifications, framed by `netlink`) in, `netns` to reach every namespace, `xtables`
//! / `nftables` to decode and diff, `ruleset` to summarise a transaction, `attribution` to name
//! the writer, `engine` to put it together, `output` to print it (`tail` on this node).
//! `daemon` is `observer run` (stdout, HTTP streams and metrics, and `recorder`, which writes
//! `store`, the forensic record that `query` and `forensics` search); `remote` follows a
//! daemon's stream. `doctor` says what this machine allows. ARCHITECTURE.md draws the layers.

pub mod attribution;
pub mod bench;
pub mod cgroup;
pub mod cli;
pub mod daemon;
pub mod doctor;
pub mod engine;
pub mod follow;
pub mod forensics;
#[doc(hidden)]
pub mod fuzzing;
pub mod hooks;
pub mod incidents;
pub mod ipset;
pub mod nats;
pub mod netlink;
pub mod netns;
pub mod nftables;
pub mod output;
pub mod ownership;
pub mod pods;
pub mod query;
pub mod recorder;
pub mod remote;
pub mod ruleset;
pub mod store;
pub mod tail;
pub mod xtables;
