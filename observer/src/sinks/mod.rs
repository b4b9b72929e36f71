//! Where the engine's records go. Each sink is a module that owns its settings, its encoding
//! and its bound (what it does when its reader is slower than the engine):
//!
//! - `tail`: `observer tail`'s filtered output, the screen a person reads or JSON lines;
//! - `stdout`: `observer run`'s JSON lines, through a bounded queue that drops (and tells) what
//!   a stalled pipe cannot take;
//! - `record_writer`: the forensic record, one thread writing `store`'s SQLite file;
//! - `http`: the HTTP endpoint, its live streams (`hub`, with a ring to catch up from), the
//!   rulesets rebuilt from the record, TLS and the connection limits;
//! - `metrics`: the Prometheus counters, from the typed records;
//! - `nats`: JetStream, read back from the record (the spool), with its flags and defaults.
//!
//! `fanout` is `observer run`'s `engine::Output`: it serialises each record once and hands it to
//! every sink of the daemon.

pub(crate) mod fanout;
pub mod http;
pub(crate) mod metrics;
pub mod nats;
pub mod record_writer;
pub(crate) mod stdout;
pub mod tail;
