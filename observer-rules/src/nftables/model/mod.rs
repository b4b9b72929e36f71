//! The nf_tables ruleset of one namespace and how transactions change it: [`state`] (tables,
//! chains, rules, sets), [`Dump`] (a dump's objects), [`generation`] (notifications grouped by
//! the NEWGEN that closes them, applied and summarized). Inside: `txn` (one transaction's
//! book-keeping), `txn_apply` (each object applied to the state), `catch_up` (the
//! notifications that turn a state into a fresh dump's, after lost notifications) and
//! `chain_level` (a ruleset past its namespace's bound, held a chain at a time).

mod catch_up;
mod chain_level;
mod dump;
pub mod generation;
pub mod state;
mod txn;
mod txn_apply;

pub use dump::Dump;
pub use txn_apply::rule_positions_told;
