//! What observer says: the event model of the output contract (`record`: the JSON fields and
//! their names) and the `tail` filters over it. The renderings are sinks (`crate::sinks::tail`).

pub mod filter;
pub mod record;

pub use record::{ChangeRecord, IncidentRecord, Record, Source, StatusRecord};
