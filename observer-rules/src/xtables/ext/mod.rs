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
mod exthdr;
mod header;
mod mangle;
mod matches;
mod meter;
mod misc;
mod targets;
mod transport;

use super::decode::Ext;
use super::text::Cx;
use header::Row;

/// The tables of extensions printed by a row's printer, tried after [`matches`](mod@matches)'
/// own dispatch.
const MATCH_TABLES: &[&[Row]] = &[
    header::MATCHES,
    meter::MATCHES,
    exthdr::MATCHES,
    misc::MATCHES,
    transport::MATCHES,
];
const TARGET_TABLES: &[&[Row]] = &[
    header::TARGETS,
    meter::TARGETS,
    misc::TARGETS,
    mangle::TARGETS,
];

/// Write `NAME options` of a match after " -m "; `None` means "render it generically" (what
/// was written is then to be dropped by the caller).
pub(crate) fn match_options(out: &mut String, cx: &Cx<'_>, m: &Ext<'_>) -> Option<()> {
    let start = out.len();
    if matches::match_options(out, cx, m).is_some() {
        return Some(());
    }
    out.truncate(start);
    tabled(out, cx, m, MATCH_TABLES)
}

/// Write `NAME options` of a target after " -j "; `None` means "render it generically".
pub(crate) fn target_options(out: &mut String, cx: &Cx<'_>, t: &Ext<'_>) -> Option<()> {
    let start = out.len();
    if targets::target_options(out, cx, t).is_some() {
        return Some(());
    }
    out.truncate(start);
    tabled(out, cx, t, TARGET_TABLES)
}

fn tabled(out: &mut String, cx: &Cx<'_>, e: &Ext<'_>, tables: &[&[Row]]) -> Option<()> {
    let print = tables
        .iter()
        .find_map(|t| header::find(t, e.name, e.revision))?;
    out.push_str(std::str::from_utf8(e.name).ok()?);
    print(out, cx, e.data, e.revision)
}
