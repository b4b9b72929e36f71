//! iptables-nft's compat expressions (`match` / `target`: an x_tables extension run inside
//! nf_tables), printed as `nft list ruleset` prints them through libxtables' translations
//! (iptables 1.8.9 + nft 1.0.6 were used as the reference).
//!
//! Decoded here: comment, conntrack (state/status/direction), state, multiport, addrtype,
//! mark, connmark, statistic, icmp, icmp6, tcp, udp, sctp, iprange, pkttype, owner, length,
//! ttl, hl, mac, dscp, helper, cpu, devgroup, quota, ebtables' ip (addresses); targets REJECT,
//! LOG, NFLOG, MARK, CONNMARK, SNAT, DNAT, MASQUERADE, REDIRECT, TCPMSS, CLASSIFY,
//! CT (notrack), NOTRACK, TRACE. Everything else, and any option these decoders do not model, prints as
//! `xt match NAME` / `xt target NAME`, as nft does when there is no translation.
//! Layouts are the uapi structs of include/uapi/linux/netfilter*/xt_*.h (host byte order for
//! plain integers, network order for `__be` fields); a short info blob falls back, never panics.
//!
//! This file is the entry point ([`render`]); the matches are in `matches`, the targets in
//! `targets`, the blob reader both use in `info`. Layering: called by `render`'s dispatch;
//! imports those three files and the renderer's state (`renderer`). [`xt_syntax`] prints a
//! rule iptables-nft wrote in its writer's syntax.

mod info;
mod matches;
mod targets;
pub mod xt_syntax;

use crate::nftables::compat::info::Info;
use crate::nftables::compat::matches::match_text;
use crate::nftables::compat::targets::target_text;
use crate::nftables::netlink::expr::Attrs;
use crate::nftables::render::renderer::Renderer;

pub(crate) fn render(r: &mut Renderer<'_>, kind: &str, a: &Attrs<'_>) -> String {
    let name = a.string(1).unwrap_or_default();
    let rev = a.u32(2).unwrap_or(0);
    let info = Info(a.bytes(3).unwrap_or(&[]));
    let text = if kind == "match" {
        match_text(r, &name, rev, &info)
    } else {
        target_text(r, &name, rev, &info)
    };
    text.unwrap_or_else(|| format!("xt {kind} {name}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::compat::matches::{conntrack, ct_states, mark_cmp};
    use crate::nftables::compat::targets::{compat_range, mark_set};

    #[test]
    fn mark_translations_follow_iptables() {
        assert_eq!(mark_set("mark", 0x10, u32::MAX), "0x10");
        assert_eq!(mark_set("mark", 0x10, 0xff), "mark and 0xffffff00 xor 0x10");
        assert_eq!(mark_set("mark", 0, !0xff), "mark and 0xff");
        assert_eq!(mark_set("mark", 0x4000, 0x4000), "mark or 0x4000");
        assert_eq!(mark_set("mark", 1, 0), "mark xor 0x1");
        assert_eq!(mark_cmp(1, 1, false), " and 0x1 == 0x1");
        assert_eq!(ct_states(2 | 4), "related,established");
    }

    #[test]
    fn short_info_falls_back() {
        let i = Info(&[1, 2]);
        assert!(conntrack(&i, 3).is_none());
        assert!(compat_range(&i).is_none());
    }
}
