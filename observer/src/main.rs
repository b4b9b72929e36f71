//! observer: see every netfilter ruleset change the moment the kernel applies it, and who made it.

mod nftables;
mod ruleset;
mod xtables;

fn main() {}
