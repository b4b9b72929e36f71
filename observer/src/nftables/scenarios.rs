//! Command scripts whose notifications are captured as fixtures (`testdata/*.hex`) and replayed
//! by the tests, and run live by the root integration test. Each step is one shell command run
//! in the namespace; `H(pattern)` expands to the handle of the rule of chain `ip t c` matching
//! the pattern.

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
