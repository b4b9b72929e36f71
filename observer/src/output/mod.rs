//! What observer says: the event model of the output contract (`line`: each line's JSON fields and
//! their names) and the `tail` filters over it. The renderings are sinks (`crate::sinks::tail`).

pub mod filter;
pub mod line;

pub use line::{ChangeLine, IncidentLine, Line, Source, StatusLine};
