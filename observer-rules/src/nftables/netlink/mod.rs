//! nf_tables messages as the kernel sends them: [`decode`] turns a datagram's netlink messages
//! into typed objects ([`decode::Notification`]), keeping each rule's expressions as raw
//! attributes; `expr` gives typed access to those attributes and computes a rule's structural
//! fingerprint. Below the model and the renderer; uses only the crate's netlink framing.

pub mod decode;
pub(crate) mod expr;
