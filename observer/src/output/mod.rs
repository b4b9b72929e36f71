//! What observer says: the event model of the output contract (`line`: each line's JSON fields and
//! their names), the `tail` filters over it, and the copy of a line people are shown (`people`:
//! its untrusted text escaped). The renderings are sinks (`crate::sinks::tail`).

pub mod filter;
pub mod line;
pub mod people;

pub mod restore;
pub use line::{ChangeLine, IncidentLine, Line, Source, StatusLine};
