//! observer-rules: the pure half of observer's ruleset readers. It turns the bytes the kernel
//! hands out about netfilter rulesets into a model and into text, and says what changed:
//! nf_tables netlink messages (notifications and dumps) into tables, chains, rules and sets,
//! rendered in `nft list ruleset` syntax; x_tables, arp_tables and ebtables blobs (`GET_ENTRIES`,
//! a writer's replace, an `--atomic-file`) into chains and rules in `iptables-save` syntax; and
//! both into backend-neutral [`ruleset::Change`]s.
//!
//! It opens no socket, enters no namespace and needs no root and no kernel: the agent (the
//! `observer` crate) reads the bytes and calls in here, and the tests run on captured bytes with
//! a plain `cargo test -p observer-rules`. The modules, bottom up: [`netlink`] (framing and
//! attributes), [`shown`] (untrusted text as a person's terminal shows it), [`ruleset`] (the
//! change model and its summary), [`xtables`] (legacy tables), [`nftables`] (nf_tables, whose
//! iptables-nft rules print through `xtables`' printers).

pub mod netlink;
pub mod nftables;
pub mod ruleset;
pub mod shown;
pub mod xtables;

#[doc(hidden)]
pub mod fuzzing;
