//! Command scripts whose notifications are captured as fixtures (`testdata/*.hex`) and replayed
//! by the tests, and run live by the root integration test. Each step is one shell command run
//! in the namespace; `H(pattern)` expands to the handle of the rule of chain `ip t c` matching
//! the pattern.

use super::line;
use crate::nftables::generation::Transaction;

macro_rules! full_restore {
    () => {
        "printf '*filter\\n:INPUT DROP [0:0]\\n:KUBE-FIREWALL - [0:0]\\n-A INPUT -j KUBE-FIREWALL\\n-A KUBE-FIREWALL -j DROP\\nCOMMIT\\n' | iptables-nft-restore"
    };
}

pub struct Scenario {
    pub name: &'static str,
    /// Commands run before the dump (their notifications precede the dump's generation).
    pub setup: &'static [&'static str],
    pub steps: &'static [&'static str],
}

/// `nft` operations on a small ruleset.
pub const NFT_OPS: Scenario = Scenario {
    name: "nft_ops",
    setup: &[
        "nft add table ip t",
        "nft add chain ip t c '{ type filter hook input priority 0; policy accept; }'",
        "nft add chain ip t other",
        "nft add set ip t blocked '{ type ipv4_addr; }'",
        "nft add element ip t blocked '{ 10.0.0.1, 10.0.0.2 }'",
        "nft add rule ip t c ip saddr @blocked drop",
        "nft add rule ip t c tcp dport '{ 22, 80 }' accept",
        "nft add rule ip t c ct state established,related accept",
    ],
    steps: &[
        "nft add rule ip t c iifname lo accept",
        "nft insert rule ip t c ip saddr 192.168.0.0/16 drop",
        "nft add rule ip t c position $(H 'tcp dport') meta mark 0x1 drop",
        "nft replace rule ip t c handle $(H 'ct state') ct state established accept",
        "nft delete rule ip t c handle $(H iifname)",
        "nft add element ip t blocked '{ 10.0.0.3, 10.0.0.4 }'",
        "nft delete element ip t blocked '{ 10.0.0.1 }'",
        "nft flush set ip t blocked",
        "nft add chain ip t c '{ type filter hook input priority 0; policy drop; }'",
        "nft rename chain ip t other renamed",
        "nft add rule ip t renamed counter",
        "nft flush chain ip t c",
        "printf 'add rule ip t c tcp dport 22 accept\\nadd rule ip t c udp dport 53 accept\\n' | nft -f -",
        "nft flush table ip t",
        "nft add rule ip t c accept",
        "nft delete table ip t",
        "printf 'table inet web {\\n chain input {\\n type filter hook input priority 0; policy drop;\\n tcp dport { 80, 443 } accept\\n ct state established accept\\n }\\n}\\n' | nft -f -",
        "printf 'flush chain inet web input\\nadd rule inet web input tcp dport { 80, 443 } accept\\nadd rule inet web input ct state established accept\\n' | nft -f -",
        // The whole ruleset flushed and loaded again: the new table reuses the old handles.
        "printf 'flush ruleset\\ntable inet web {\\n chain input {\\n type filter hook input priority 0; policy drop;\\n tcp dport { 80, 443 } accept\\n ct state established accept\\n }\\n}\\n' | nft -f -",
    ],
};

const KUBE_FW_RESTORE_SAME: &str = "printf '*filter\\n:KUBE-FIREWALL - [0:0]\\n-A KUBE-FIREWALL -s 10.0.0.0/8 -j ACCEPT\\n-A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -m comment --comment \"kubernetes firewall for dropping marked packets\" -j DROP\\n-A KUBE-FIREWALL -m conntrack --ctstate INVALID -j DROP\\nCOMMIT\\n' | iptables-nft-restore --noflush";

/// iptables-nft (and iptables-nft-restore) operations, from an empty namespace.
pub const IPTABLES_OPS: Scenario = Scenario {
    name: "iptables_ops",
    setup: &[],
    steps: &[
        "iptables-nft -N KUBE-FIREWALL",
        "iptables-nft -A INPUT -j KUBE-FIREWALL",
        "iptables-nft -A KUBE-FIREWALL -m comment --comment 'kubernetes firewall for dropping marked packets' -j DROP",
        "iptables-nft -A KUBE-FIREWALL -m conntrack --ctstate INVALID -j DROP",
        "iptables-nft -I KUBE-FIREWALL -s 10.0.0.0/8 -j ACCEPT",
        "iptables-nft -R KUBE-FIREWALL 2 -m mark --mark 0x8000/0x8000 -m comment --comment 'kubernetes firewall for dropping marked packets' -j DROP",
        KUBE_FW_RESTORE_SAME,
        "printf '*filter\\n:KUBE-FIREWALL - [0:0]\\n-A KUBE-FIREWALL -s 10.0.0.0/8 -j ACCEPT\\n-A KUBE-FIREWALL -m comment --comment \"kubernetes firewall for dropping marked packets\" -j DROP\\n-A KUBE-FIREWALL -m conntrack --ctstate INVALID -j DROP\\nCOMMIT\\n' | iptables-nft-restore --noflush",
        "iptables-nft -P INPUT DROP",
        "iptables-nft -N OTHER",
        "iptables-nft -A OTHER -j RETURN",
        "iptables-nft -F KUBE-FIREWALL",
        "iptables-nft -A KUBE-FIREWALL -j ACCEPT",
        "iptables-nft -F",
        "iptables-nft -X OTHER",
        full_restore!(),
        // The same again: the table is deleted and recreated as it was.
        concat!("true again; ", full_restore!()),
    ],
};

/// A dump of many kinds of rules (nft and iptables-nft), compared with nft's own listing.
pub const RENDER_CORPUS: Scenario = Scenario {
    name: "render_corpus",
    setup: &[
        "nft -f $FIXTURES/corpus.nft",
        "sh $FIXTURES/corpus.sh 2>/dev/null; true",
    ],
    steps: &[],
};

/// Shell prelude defining `H pattern`: the handle of the first rule of `ip t c` matching it.
pub const PRELUDE: &str =
    "H() { nft -a list chain ip t c | grep -- \"$1\" | head -n1 | sed 's/.*# handle //'; }; ";

/// Run before the final dump: traffic through the rules, so that dumped counters are not zero.
pub const TRAFFIC: &str = "ip link set lo up; bash -c 'echo x > /dev/udp/127.0.0.1/9'";

pub const KUBE_FW_COMMENT: &str = "comment \"kubernetes firewall for dropping marked packets\"";

/// The changes each step of `NFT_OPS` must produce.
pub fn nft_ops_expected() -> Vec<Vec<String>> {
    let v = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        v(&["rule_add ip t c @3: iifname \"lo\" accept"]),
        v(&["rule_add ip t c @0: ip saddr 192.168.0.0/16 drop"]),
        v(&["rule_add ip t c @3: meta mark 0x00000001 drop"]),
        v(&["rule_replace ip t c @4: ct state established accept \
             (was: ct state established,related accept)"]),
        v(&["rule_delete ip t c @5: iifname \"lo\" accept"]),
        v(&["element_add ip t blocked: { 10.0.0.3, 10.0.0.4 } (2 elements)"]),
        v(&["element_delete ip t blocked: { 10.0.0.1 } (1 element)"]),
        v(&["set_flush ip t blocked (3 elements deleted)"]),
        v(&[
            "chain_update ip t c (type filter hook input priority filter; policy drop \
             (was: type filter hook input priority filter; policy accept))",
        ]),
        v(&["chain_update ip t renamed (renamed from other)"]),
        v(&["rule_add ip t renamed @0: counter"]),
        v(&["chain_flush ip t c (5 rules deleted)"]),
        v(&[
            "rule_add ip t c @0: tcp dport 22 accept",
            "rule_add ip t c @1: udp dport 53 accept",
        ]),
        v(&["table_flush ip t (2 chains, 3 rules deleted)"]),
        v(&["rule_add ip t c @0: accept"]),
        v(&[
            "set_delete ip t blocked",
            "chain_delete ip t c (type filter hook input priority filter; policy drop)",
            "chain_delete ip t renamed",
            "table_delete ip t",
        ]),
        v(&[
            "table_create inet web",
            "chain_create inet web input (type filter hook input priority filter; policy drop)",
            "rule_add inet web input @0: tcp dport { 80, 443 } accept",
            "rule_add inet web input @1: ct state established accept",
        ]),
        // Flushing the chain and adding the same rules back (new anonymous sets) is no change.
        v(&[]),
        // So is flushing the whole ruleset and loading it again.
        v(&[]),
    ]
}

/// The changes each step of `IPTABLES_OPS` must produce.
pub fn iptables_ops_expected() -> Vec<Vec<String>> {
    let marked = format!("meta mark & 0x00008000 == 0x00008000 counter drop {KUBE_FW_COMMENT}");
    let unmarked = format!("counter drop {KUBE_FW_COMMENT}");
    // The old rule of a replace is in its writer's syntax (iptables-nft-save's).
    let xt_comment = "-m comment --comment \"kubernetes firewall for dropping marked packets\"";
    let xt_marked = format!("-m mark --mark 0x8000/0x8000 {xt_comment} -j DROP");
    let xt_unmarked = format!("{xt_comment} -j DROP");
    vec![
        vec![
            "table_create ip filter".into(),
            "chain_create ip filter KUBE-FIREWALL".into(),
        ],
        vec![
            "chain_create ip filter INPUT (type filter hook input priority filter; policy accept)"
                .into(),
            "rule_add ip filter INPUT @0: counter jump KUBE-FIREWALL".into(),
        ],
        vec![format!("rule_add ip filter KUBE-FIREWALL @0: {unmarked}")],
        vec!["rule_add ip filter KUBE-FIREWALL @1: ct state invalid counter drop".into()],
        vec!["rule_add ip filter KUBE-FIREWALL @0: ip saddr 10.0.0.0/8 counter accept".into()],
        // iptables -R: the kernel deletes the old rule and adds the new one with its handle.
        vec![format!(
            "rule_replace ip filter KUBE-FIREWALL @1: {marked} (was: {xt_unmarked})"
        )],
        // iptables-nft-restore --noflush rewriting the chain as it was: no change.
        vec![],
        // ... and dropping `-m mark` from the DROP rule (seeds/003): a replace.
        vec![format!(
            "rule_replace ip filter KUBE-FIREWALL @1: {unmarked} (was: {xt_marked})"
        )],
        vec![
            "chain_update ip filter INPUT (type filter hook input priority filter; policy drop \
              (was: type filter hook input priority filter; policy accept))"
                .into(),
        ],
        vec!["chain_create ip filter OTHER".into()],
        vec!["rule_add ip filter OTHER @0: counter return".into()],
        vec!["chain_flush ip filter KUBE-FIREWALL (3 rules deleted)".into()],
        vec!["rule_add ip filter KUBE-FIREWALL @0: counter accept".into()],
        vec!["table_flush ip filter (3 chains, 3 rules deleted)".into()],
        vec!["chain_delete ip filter OTHER".into()],
        // A full restore deletes and recreates the table; net, two rules were added.
        vec![
            "rule_add ip filter INPUT @0: counter jump KUBE-FIREWALL".into(),
            "rule_add ip filter KUBE-FIREWALL @0: counter drop".into(),
        ],
        // The same restore again: no change.
        vec![],
    ]
}

/// The changes of a step's transactions, as lines.
pub fn step_lines(txns: &[Transaction]) -> Vec<String> {
    txns.iter()
        .flat_map(|t| t.changes.iter().map(line))
        .collect()
}
