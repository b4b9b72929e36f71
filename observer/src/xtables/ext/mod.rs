//! The `iptables-save` options of match and target extensions (`-m tcp --dport 80`,
//! `-j DNAT --to-destination ...`), one function per extension, from their uapi structs
//! (`include/uapi/linux/netfilter/xt_*.h`). Each returns `None` when the payload is shorter
//! than its layout or holds a value it does not know; the caller then renders the extension
//! generically. Formats follow iptables 1.8's `*_save` functions.
//!
//! - [`matches`](mod@matches): `-m NAME ...`, dispatched by [`match_options`];
//! - [`conntrack`]: the connection-tracking matches (`-m conntrack`, `-m state`), which
//!   [`matches`](mod@matches) calls;
//! - [`targets`]: `-j NAME ...`, dispatched by [`target_options`].
//!
//! [`render`](super::render) calls the two dispatchers; these files import only what sits below
//! them ([`bytes`](super::bytes), [`decode`](super::decode)'s `Ext`, [`text`](super::text)),
//! never the renderer.

mod conntrack;
mod matches;
mod targets;

pub(super) use matches::match_options;
pub(super) use targets::target_options;
