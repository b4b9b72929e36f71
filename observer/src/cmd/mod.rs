//! The commands, one module each: what `main` dispatches to, at the top of the layers. Each
//! takes its flags from `cli` and puts the library together: `tail` (this node; `follow` for
//! `tail --record`, `remote` for `tail --remote`, `fleet` for `tail --nats`), `query`, `owners`,
//! `doctor`, `run` (the node agent, from the parts in `daemon`), and the `bench` commands that
//! `cargo xtask` drives.

pub mod bench;
pub mod doctor;
pub mod fleet;
pub mod follow;
pub mod owners;
pub mod query;
pub mod remote;
pub mod run;
pub mod tail;
