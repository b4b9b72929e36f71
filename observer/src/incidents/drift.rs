//! What a rewritten rule lost: the rule split into its parts (matches, options, the verdict) in
//! the backend's own syntax, and the parts of the old rule the new one no longer has.

use crate::ruleset::{self, words, Backend, RuleSyntax};

/// How a rule changed, part by part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleDiff {
    /// Parts of the old rule missing from the new one (matches, addresses, ports...).
    pub lost: Vec<String>,
    /// Parts of the new rule the old one did not have.
    pub added: Vec<String>,
    /// The old and new verdicts, when they differ.
    pub verdict: Option<(String, String)>,
    /// The old rule's verdict drops or rejects packets.
    pub drops: bool,
}

impl RuleDiff {
    /// The rewrite narrowed or changed what the rule does (not just its counters or comment).
    pub fn is_drift(&self) -> bool {
        !self.lost.is_empty() || self.verdict.is_some()
    }
}

/// Compare an old and a new rule of one backend's syntax.
pub fn diff(backend: Backend, old: &str, new: &str) -> RuleDiff {
    let (old_parts, new_parts) = match backend {
        Backend::Legacy => (iptables_parts(old), iptables_parts(new)),
        _ => (nft_parts(old), nft_parts(new)),
    };
    let old_verdict = verdict(backend, &old_parts);
    let new_verdict = verdict(backend, &new_parts);
    let matches = |parts: &[String], v: &Option<String>| -> Vec<String> {
        parts
            .iter()
            .filter(|p| Some(*p) != v.as_ref() && !is_noise(p))
            .cloned()
            .collect()
    };
    let old_m = matches(&old_parts, &old_verdict);
    let new_m = matches(&new_parts, &new_verdict);
    let lost = minus(&old_m, &new_m);
    let added = minus(&new_m, &old_m);
    let drops = old_verdict.as_deref().is_some_and(|v| {
        let v = v.to_ascii_lowercase();
        v.contains("drop") || v.contains("reject")
    });
    RuleDiff {
        lost,
        added,
        verdict: (old_verdict != new_verdict).then(|| {
            (
                old_verdict.unwrap_or_else(|| "(none)".into()),
                new_verdict.unwrap_or_else(|| "(none)".into()),
            )
        }),
        drops,
    }
}

/// Parts of `a` not in `b`, as a multiset.
fn minus(a: &[String], b: &[String]) -> Vec<String> {
    let mut left: Vec<&String> = b.iter().collect();
    let mut out = Vec::new();
    for p in a {
        if let Some(i) = left.iter().position(|q| *q == p) {
            left.swap_remove(i);
        } else {
            out.push(p.clone());
        }
    }
    out
}

/// Counters and comments do not change what a rule does.
fn is_noise(part: &str) -> bool {
    part.starts_with("counter")
        || part.starts_with("-m comment")
        || part.starts_with("comment ")
        || part.starts_with("-c ")
}

/// `iptables-save` syntax: a part starts at each single-dash option (`-m mark`, `-s 10.0.0.0/8`,
/// `-j DROP`) or at a `!` before one, and takes the `--long` options that follow it.
fn iptables_parts(rule: &str) -> Vec<String> {
    let w = words(rule);
    let starts = |i: usize| -> bool {
        let t = w[i];
        let short = |t: &str| t.starts_with('-') && !t.starts_with("--") && t.len() > 1;
        short(t) && !(i > 0 && w[i - 1] == "!")
            || (t == "!" && w.get(i + 1).is_some_and(|n| short(n)))
    };
    let mut parts: Vec<String> = Vec::new();
    for (i, word) in w.iter().enumerate() {
        if starts(i) || parts.is_empty() {
            parts.push(word.to_string());
        } else if let Some(last) = parts.last_mut() {
            last.push(' ');
            last.push_str(word);
        }
    }
    parts
}

/// Words that begin an nft statement or match.
const NFT_STARTS: &[&str] = &[
    "ip",
    "ip6",
    "inet",
    "tcp",
    "udp",
    "udplite",
    "sctp",
    "dccp",
    "icmp",
    "icmpv6",
    "igmp",
    "ah",
    "esp",
    "comp",
    "th",
    "meta",
    "mark",
    "ct",
    "iif",
    "oif",
    "iifname",
    "oifname",
    "iiftype",
    "oiftype",
    "skuid",
    "skgid",
    "nfproto",
    "l4proto",
    "pkttype",
    "cpu",
    "cgroup",
    "fib",
    "rt",
    "socket",
    "osf",
    "ether",
    "vlan",
    "arp",
    "ipsec",
    "numgen",
    "jhash",
    "symhash",
    "counter",
    "log",
    "limit",
    "quota",
    "jump",
    "goto",
    "accept",
    "drop",
    "reject",
    "return",
    "queue",
    "continue",
    "masquerade",
    "snat",
    "dnat",
    "redirect",
    "notrack",
    "xt",
    "comment",
    "tproxy",
    "synproxy",
    "flow",
    "dup",
    "fwd",
    "set",
    "update",
    "add",
    "delete",
];

/// Words whose next word names a field (`meta mark`), not a new statement.
const NFT_SELECTORS: &[&str] = &[
    "ip", "ip6", "inet", "tcp", "udp", "udplite", "sctp", "dccp", "icmp", "icmpv6", "th", "meta",
    "ct", "ether", "vlan", "arp", "fib", "rt", "socket", "ipsec",
];

/// nft syntax: a part starts at each statement or match keyword (`meta mark & 0x8000 == 0x8000`,
/// `ip saddr 10.0.0.0/8`, `counter`, `drop`).
fn nft_parts(rule: &str) -> Vec<String> {
    let mut parts: Vec<String> = Vec::new();
    let mut after_selector = false;
    for word in words(rule) {
        let starts = NFT_STARTS.contains(&word) && !after_selector;
        // `meta mark`, `ct mark`, `ip protocol`: the word after a selector is its field.
        after_selector = starts && NFT_SELECTORS.contains(&word);
        if starts || parts.is_empty() {
            parts.push(word.to_string());
        } else if let Some(last) = parts.last_mut() {
            last.push(' ');
            last.push_str(word);
        }
    }
    parts
}

/// The part that decides a packet's fate: `-j X`/`-g X`, or the nft verdict statement.
fn verdict(backend: Backend, parts: &[String]) -> Option<String> {
    match backend {
        Backend::Legacy => parts
            .iter()
            .rev()
            .find(|p| p.starts_with("-j ") || p.starts_with("-g "))
            .cloned(),
        _ => parts
            .iter()
            .rev()
            .find(|p| {
                let first = p.split(' ').next().unwrap_or_default();
                matches!(
                    first,
                    "accept"
                        | "drop"
                        | "reject"
                        | "return"
                        | "jump"
                        | "goto"
                        | "queue"
                        | "continue"
                        | "masquerade"
                        | "snat"
                        | "dnat"
                        | "redirect"
                ) || p.starts_with("xt target")
            })
            .cloned(),
    }
}

/// The chains a rule of `backend`'s syntax jumps or goes to ([`ruleset::jump_targets`]).
pub fn jump_targets(backend: Backend, rule: &str) -> Vec<String> {
    let syntax = match backend {
        Backend::Legacy => RuleSyntax::Iptables,
        _ => RuleSyntax::Nft,
    };
    ruleset::jump_targets(Some(syntax), rule)
        .into_iter()
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kube_firewall_drop_rule_losing_its_mark_match() {
        // seeds/003: kube-router's save/restore dropped the mark match.
        let d = diff(
            Backend::Legacy,
            "-m comment --comment \"kubernetes firewall for dropping marked packets\" -m mark --mark 0x8000/0x8000 -j DROP",
            "-m comment --comment \"kubernetes firewall for dropping marked packets\" -j DROP",
        );
        assert_eq!(d.lost, vec!["-m mark --mark 0x8000/0x8000".to_string()]);
        assert!(d.added.is_empty());
        assert!(d.drops && d.is_drift() && d.verdict.is_none());
    }

    #[test]
    fn negations_addresses_ports_and_verdicts() {
        let d = diff(
            Backend::Legacy,
            "! -s 10.0.0.0/8 -p tcp -m tcp --dport 443 -j ACCEPT",
            "-p tcp -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable",
        );
        assert_eq!(d.lost, vec!["! -s 10.0.0.0/8", "-m tcp --dport 443"]);
        assert_eq!(d.added, vec!["-m tcp --dport 80"]);
        assert_eq!(
            d.verdict,
            Some((
                "-j ACCEPT".into(),
                "-j REJECT --reject-with icmp-port-unreachable".into()
            ))
        );
        assert!(!d.drops);
    }

    #[test]
    fn nft_rules_are_split_into_statements() {
        let d = diff(
            Backend::Nft,
            "meta mark & 0x00008000 == 0x00008000 counter packets 0 bytes 0 drop",
            "counter packets 12 bytes 900 drop",
        );
        assert_eq!(d.lost, vec!["meta mark & 0x00008000 == 0x00008000"]);
        assert!(d.drops && d.is_drift());
        let same = diff(
            Backend::Nft,
            "ip saddr 10.0.0.1 counter accept",
            "ip saddr 10.0.0.1 accept",
        );
        assert!(!same.is_drift(), "{same:?}");
    }

    #[test]
    fn only_the_comment_changed_is_no_drift() {
        let d = diff(
            Backend::Legacy,
            "-m comment --comment a -j ACCEPT",
            "-m comment --comment b -j ACCEPT",
        );
        assert!(!d.is_drift());
    }

    #[test]
    fn jumps_are_found_in_both_syntaxes() {
        assert_eq!(
            jump_targets(
                Backend::Legacy,
                "-m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
            ),
            vec!["KUBE-SERVICES"]
        );
        assert_eq!(
            jump_targets(Backend::Legacy, "-g KUBE-SEP-X"),
            vec!["KUBE-SEP-X"]
        );
        assert_eq!(
            jump_targets(Backend::Nft, "counter packets 0 bytes 0 jump KUBE-SERVICES"),
            vec!["KUBE-SERVICES"]
        );
        assert!(jump_targets(Backend::Legacy, "-j DROP").len() == 1);
        assert!(jump_targets(Backend::Nft, "drop").is_empty());
    }

    #[test]
    fn a_comment_holding_a_jump_is_no_jump() {
        assert_eq!(
            jump_targets(
                Backend::Legacy,
                "-m comment --comment \"x -j FOO\" -j KUBE-SVC-X"
            ),
            vec!["KUBE-SVC-X"]
        );
        // `iptables-save` leaves a one-word comment unquoted.
        assert_eq!(
            jump_targets(Backend::Legacy, "-m comment --comment -j -j KUBE-SVC-X"),
            vec!["KUBE-SVC-X"]
        );
        assert!(jump_targets(Backend::Legacy, "-m comment --comment --goto").is_empty());
        assert_eq!(
            jump_targets(Backend::Nft, "comment \"x jump FOO\" goto KUBE-SVC-X"),
            vec!["KUBE-SVC-X"]
        );
        assert!(jump_targets(Backend::Nft, "counter comment \"jump FOO\" accept").is_empty());
    }
}
