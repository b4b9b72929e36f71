//! Rules written with the real iptables-nft / ip6tables-nft in a namespace, read back through
//! observer's nft path (dump → state → [`crate::nftables::xt_syntax::rule_text`]), compared with `iptables-nft-save`
//! rule by rule.

use std::collections::BTreeMap;

use super::netns::{iptables_skip_reason, root_skip_reason, Netns};
use crate::nftables::socket;
use crate::nftables::state::NftState;
use crate::nftables::xt_syntax::XtText;

/// Istio's `tproxy.golden` (IPv4), as istio-iptables feeds it to the restore tool.
const ISTIO: &str = include_str!("../../xtables/testdata/rulesets/istio-tproxy.rules");

/// A kube-proxy-shaped restore (iptables mode, 1.28), as `iptables-nft-restore` is fed it.
const KUBE_PROXY: &str = r#"*filter
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A INPUT -j KUBE-FIREWALL
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
*nat
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SEP-ABCDEFGHIJKLMNOP - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SEP-ABCDEFGHIJKLMNOP -s 10.244.0.5/32 -m comment --comment "default/kubernetes:https" -j KUBE-MARK-MASQ
-A KUBE-SEP-ABCDEFGHIJKLMNOP -p tcp -m comment --comment "default/kubernetes:https" -m tcp -j DNAT --to-destination 10.244.0.5:6443
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-SVC-NPX46M4PTMTKRN6Y ! -s 10.244.0.0/16 -d 10.96.0.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -m tcp --dport 443 -j KUBE-MARK-MASQ
-A KUBE-SVC-NPX46M4PTMTKRN6Y -m comment --comment "default/kubernetes:https -> 10.244.0.5:6443" -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-ABCDEFGHIJKLMNOP
-A KUBE-SVC-NPX46M4PTMTKRN6Y -m comment --comment "default/kubernetes:https -> 10.244.0.6:6443" -j KUBE-SEP-ABCDEFGHIJKLMNOP
COMMIT
"#;

/// docker 20.10's rules for a bridge with a published port, and Debian's CNI plugins'
/// (bridge with ipMasq, portmap, firewall), as they write them one command at a time.
const COMMANDS: &[&str] = &[
    // dockerd
    "iptables-nft -t nat -N DOCKER",
    "iptables-nft -t nat -A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER",
    "iptables-nft -t nat -A OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j DOCKER",
    "iptables-nft -t nat -A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE",
    "iptables-nft -t nat -A POSTROUTING -s 172.17.0.2/32 -d 172.17.0.2/32 -p tcp -m tcp --dport 80 -j MASQUERADE",
    "iptables-nft -t nat -A DOCKER -i docker0 -j RETURN",
    "iptables-nft -t nat -A DOCKER ! -i docker0 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 172.17.0.2:80",
    "iptables-nft -N DOCKER",
    "iptables-nft -N DOCKER-ISOLATION-STAGE-1",
    "iptables-nft -N DOCKER-ISOLATION-STAGE-2",
    "iptables-nft -N DOCKER-USER",
    "iptables-nft -A FORWARD -j DOCKER-USER",
    "iptables-nft -A FORWARD -j DOCKER-ISOLATION-STAGE-1",
    "iptables-nft -A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
    "iptables-nft -A FORWARD -o docker0 -j DOCKER",
    "iptables-nft -A FORWARD -i docker0 ! -o docker0 -j ACCEPT",
    "iptables-nft -A FORWARD -i docker0 -o docker0 -j ACCEPT",
    "iptables-nft -A DOCKER -d 172.17.0.2/32 ! -i docker0 -o docker0 -p tcp -m tcp --dport 80 -j ACCEPT",
    "iptables-nft -A DOCKER-ISOLATION-STAGE-1 -i docker0 ! -o docker0 -j DOCKER-ISOLATION-STAGE-2",
    "iptables-nft -A DOCKER-ISOLATION-STAGE-1 -j RETURN",
    "iptables-nft -A DOCKER-ISOLATION-STAGE-2 -o docker0 -j DROP",
    "iptables-nft -A DOCKER-USER -j RETURN",
    // CNI bridge (ipMasq), portmap, firewall
    "iptables-nft -t nat -N CNI-c3650e9188d4f6be9764e",
    "iptables-nft -t nat -A CNI-c3650e9188d4f6be9764e -d 10.88.0.0/16 -m comment --comment 'name: \"k8s-pod-network\" id: \"c0ffee01\"' -j ACCEPT",
    "iptables-nft -t nat -A CNI-c3650e9188d4f6be9764e ! -d 224.0.0.0/4 -m comment --comment 'name: \"k8s-pod-network\" id: \"c0ffee01\"' -j MASQUERADE",
    "iptables-nft -t nat -A POSTROUTING -s 10.88.0.5/32 -m comment --comment 'name: \"k8s-pod-network\" id: \"c0ffee01\"' -j CNI-c3650e9188d4f6be9764e",
    "iptables-nft -t nat -N CNI-HOSTPORT-DNAT",
    "iptables-nft -t nat -N CNI-DN-c3650e9188d4f6be9764e",
    "iptables-nft -t nat -A CNI-HOSTPORT-DNAT -p tcp -m comment --comment 'dnat name: \"k8s-pod-network\" id: \"c0ffee01\"' -m multiport --dports 8081 -j CNI-DN-c3650e9188d4f6be9764e",
    "iptables-nft -t nat -A CNI-DN-c3650e9188d4f6be9764e -s 10.88.0.0/16 -p tcp --dport 8081 -j CNI-HOSTPORT-SETMARK",
    "iptables-nft -t nat -A CNI-DN-c3650e9188d4f6be9764e -s 127.0.0.1/32 -p tcp --dport 8081 -j CNI-HOSTPORT-SETMARK",
    "iptables-nft -t nat -A CNI-DN-c3650e9188d4f6be9764e -p tcp --dport 8081 -j DNAT --to-destination 10.88.0.5:80",
    "iptables-nft -N CNI-FORWARD",
    "iptables-nft -N CNI-ADMIN",
    "iptables-nft -I FORWARD -m comment --comment 'CNI firewall plugin rules' -j CNI-FORWARD",
    "iptables-nft -A CNI-FORWARD -m comment --comment 'CNI firewall plugin admin overrides' -j CNI-ADMIN",
    "iptables-nft -A CNI-FORWARD -d 10.88.0.5/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
    "iptables-nft -A CNI-FORWARD -s 10.88.0.5/32 -j ACCEPT",
    // the header fields and native matches, one at a time
    "iptables-nft -A INPUT -i eth+ -s 10.1.0.0/255.255.0.255 -j ACCEPT",
    "iptables-nft -A INPUT ! -p udp -f -j DROP",
    "iptables-nft -A INPUT -p tcp ! --sport 1:1023 --dport 22 -j ACCEPT",
    "iptables-nft -A INPUT -p tcp --syn -j ACCEPT",
    "iptables-nft -A INPUT -p tcp --tcp-flags SYN,RST SYN -j DROP",
    "iptables-nft -A INPUT -p udp --sport 53 -m udp ! --dport 1000:2000 -j ACCEPT",
    "iptables-nft -A INPUT -p gre -j ACCEPT",
    "iptables-nft -A INPUT -m mark --mark 0x1 -m limit --limit 5/min --limit-burst 7 -j LOG --log-prefix 'in: '",
    "iptables-nft -A INPUT -p icmp --icmp-type echo-request -j ACCEPT",
    "iptables-nft -A INPUT -p tcp -j REJECT --reject-with tcp-reset",
    "iptables-nft -A INPUT -g DOCKER",
    "iptables-nft -A INPUT -m comment --comment 'a \"quoted\" word'",
    "iptables-nft -t mangle -A OUTPUT -j MARK --set-mark 1",
    "iptables-nft -t raw -A OUTPUT -p udp --dport 53 -j CT --notrack",
    "iptables-nft -A INPUT -p tcp --sport 1 --dport 65535 ! --tcp-flags SYN,ACK SYN",
    "iptables-nft -A INPUT -j NFLOG --nflog-group 3 --nflog-prefix 'nf: ' --nflog-size 128 --nflog-threshold 2",
    "iptables-nft -t raw -A PREROUTING -j TRACE",
    // no interface at all, and port ranges with one open end (one compare, no range)
    "iptables-nft -A INPUT ! -i + -j DROP",
    "iptables-nft -A FORWARD ! -o + -j DROP",
    "iptables-nft -A INPUT -p tcp --sport :4 --dport :4",
    "iptables-nft -A INPUT -p udp --dport :4",
    "iptables-nft -A INPUT -p tcp ! --sport :4",
    "iptables-nft -A INPUT -p udp --sport 4: ! --dport 1024:",
    "iptables-nft -A INPUT -p tcp ! --dport 0",
    // firewalld's iptables backend hooks the security table (built-in chains at priority 150).
    "iptables-nft -t security -N INPUT_direct",
    "iptables-nft -t security -A INPUT -j INPUT_direct",
    "ip6tables-nft -t security -A OUTPUT -j ACCEPT",
    "ip6tables-nft -A INPUT -s 2001:db8::/32 -p tcp --dport 443 -j ACCEPT",
    "ip6tables-nft -A INPUT ! -d fe80::1/128 -p ipv6-icmp -j ACCEPT",
    "ip6tables-nft -A INPUT -i lo -m conntrack --ctstate INVALID -j DROP",
    "ip6tables-nft -t nat -A POSTROUTING -s fd00::/64 ! -o eth0 -j MASQUERADE",
    // ipsets, by name (the rules hold their index): kube-router's and Calico's shapes, and SET
    "ipset create KUBE-DST-2CHJBMQNDM5NR4JY hash:ip",
    "ipset create cali40s:9WMH5gUH2bC2CedLpt8V hash:net",
    "ipset create KUBE-SRC-OTHER hash:ip,port",
    "iptables-nft -A INPUT -m set --match-set KUBE-DST-2CHJBMQNDM5NR4JY dst -j ACCEPT",
    "iptables-nft -A INPUT -m set ! --match-set cali40s:9WMH5gUH2bC2CedLpt8V src -j DROP",
    "iptables-nft -A FORWARD -p tcp -m set --match-set KUBE-SRC-OTHER src,dst -j ACCEPT",
    "iptables-nft -A FORWARD -j SET --add-set KUBE-DST-2CHJBMQNDM5NR4JY src",
    "ipset create obs-timeout hash:ip timeout 0",
    "ipset create obs-map hash:ip skbinfo",
    "iptables-nft -A FORWARD -j SET --add-set obs-timeout src,dst --exist --timeout 60",
    "iptables-nft -A FORWARD -j SET --del-set obs-timeout dst",
    "iptables-nft -t mangle -A OUTPUT -j SET --map-set obs-map dst --map-mark --map-prio",
];

/// `iptables-nft-save`'s rules, by (table, chain), in order, without `-A CHAIN `.
fn saved(ns: &Netns, tool: &str) -> BTreeMap<(String, String), Vec<String>> {
    test_support::save_rules(&ns.sh(tool))
}

/// observer's reading of the same tables, from a dump of the namespace.
fn observed(ns: &Netns, family: u8) -> BTreeMap<(String, String), Vec<String>> {
    let (_notify, req) = ns.sockets().expect("sockets");
    // The namespace's names: its interfaces, and its ipsets for `-m set`.
    let mut names = Some(ns.ifnames());
    let dump = socket::dump_on(&req).expect("dump");
    let st = crate::nftables::ifnames::scope(&mut names, || NftState::from_dump(&dump));
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for ((fam, table), t) in &st.tables {
        if *fam != family {
            continue;
        }
        for (name, c) in &t.chains {
            if c.rules.is_empty() {
                continue;
            }
            let rules = c
                .rules
                .iter()
                .map(|r| match r.xt.as_deref() {
                    Some(XtText::Saved(s)) => s.clone(),
                    other => format!("{other:?} / nft: {}", r.text),
                })
                .collect();
            out.insert((table.clone(), name.clone()), rules);
        }
    }
    out
}

fn compare(
    want: &BTreeMap<(String, String), Vec<String>>,
    got: &BTreeMap<(String, String), Vec<String>>,
) -> (usize, Vec<String>) {
    let mut same = 0;
    let mut diffs = Vec::new();
    for (key, rules) in want {
        let empty = Vec::new();
        let ours = got.get(key).unwrap_or(&empty);
        for (i, w) in rules.iter().enumerate() {
            match ours.get(i) {
                Some(o) if o == w => same += 1,
                o => diffs.push(format!("{key:?}[{i}]\n  save: {w}\n  ours: {o:?}")),
            }
        }
        if ours.len() > rules.len() {
            diffs.push(format!("{key:?}: {} extra rules", ours.len() - rules.len()));
        }
    }
    (same, diffs)
}

#[test]
fn iptables_nft_rules_read_as_iptables_nft_save_prints_them() {
    if let Some(reason) = root_skip_reason().or_else(iptables_skip_reason) {
        test_support::skip(format_args!("{reason}"));
        return;
    }
    let ns = Netns::new("xt");
    let file = std::env::temp_dir().join(format!("obs-xt-kube-{}.rules", std::process::id()));
    std::fs::write(&file, KUBE_PROXY).expect("write restore file");
    ns.sh(&format!("iptables-nft-restore < {}", file.display()));
    // Istio's sidecar capture (its own test data), mangle, nat and raw, through iptables-nft.
    std::fs::write(&file, ISTIO).expect("write restore file");
    ns.sh(&format!(
        "iptables-nft-restore --noflush < {}",
        file.display()
    ));
    let _ = std::fs::remove_file(&file);
    ns.sh("iptables-nft -t nat -N CNI-HOSTPORT-SETMARK");
    for cmd in COMMANDS {
        ns.sh(cmd);
    }
    let mut total = 0;
    let mut all = Vec::new();
    for (tool, family) in [("iptables-nft-save", 2), ("ip6tables-nft-save", 10)] {
        let want = saved(&ns, tool);
        let got = observed(&ns, family);
        total += want.values().map(Vec::len).sum::<usize>();
        let (same, diffs) = compare(&want, &got);
        eprintln!(
            "{tool}: {same} of {} rules identical",
            want.values().map(Vec::len).sum::<usize>()
        );
        all.extend(diffs);
    }
    assert!(total > 130, "the corpus was not loaded: {total} rules");
    assert!(
        all.is_empty(),
        "{} rules differ:\n{}",
        all.len(),
        all.join("\n")
    );
}

#[test]
fn a_rule_nft_wrote_into_an_iptables_table_keeps_nft_syntax() {
    if let Some(reason) = root_skip_reason().or_else(iptables_skip_reason) {
        test_support::skip(format_args!("{reason}"));
        return;
    }
    let ns = Netns::new("xtnft");
    ns.sh("iptables-nft -A INPUT -s 10.0.0.0/8 -j ACCEPT");
    ns.sh("nft add rule ip filter INPUT ct mark 5 counter accept");
    ns.sh("nft add rule ip filter INPUT ip ttl != 5 counter accept");
    // What iptables-nft 1.8.9 reads as targets, and the forms it refuses.
    ns.sh(r#"nft add rule ip filter INPUT log group 2 prefix '"b"'"#);
    ns.sh(r#"nft add rule ip filter INPUT log prefix '"b"'"#);
    ns.sh("nft add rule ip filter INPUT meta nftrace set 1");
    ns.sh("nft add rule ip filter INPUT meta nftrace set 0");
    ns.sh(
        "nft add table ip own; nft add chain ip own c; nft add rule ip own c tcp dport 22 accept",
    );
    // iptables-nft-save gives up on the whole table (its message goes to stderr).
    assert!(!ns
        .sh("iptables-nft-save -t filter 2>/dev/null")
        .contains("-A INPUT"));
    let (_notify, req) = ns.sockets().expect("sockets");
    let st = NftState::from_dump(&socket::dump_on(&req).expect("dump"));
    let input = &st.tables[&(2, "filter".to_string())].chains["INPUT"].rules;
    assert_eq!(
        input[0].xt.as_deref(),
        Some(&XtText::Saved("-s 10.0.0.0/8 -j ACCEPT".into()))
    );
    assert_eq!(
        input[1].xt.as_deref(),
        Some(&XtText::Unreadable("expression ct".into()))
    );
    assert_eq!(&*input[1].text, "ct mark 0x00000005 counter accept");
    // A native match iptables-nft reads back as an extension.
    assert_eq!(
        input[2].xt.as_deref(),
        Some(&XtText::Saved("-m ttl ! --ttl-eq 5 -j ACCEPT".into()))
    );
    let xt: Vec<_> = input[3..]
        .iter()
        .map(|r| r.xt.as_deref().cloned())
        .collect();
    assert_eq!(
        xt,
        [
            Some(XtText::Saved(
                "-j NFLOG --nflog-prefix b --nflog-group 2".into()
            )),
            Some(XtText::Unreadable("log without a group".into())),
            Some(XtText::Saved("-j TRACE".into())),
            Some(XtText::Unreadable("trace is cleared".into())),
        ]
    );
    let own = &st.tables[&(2, "own".to_string())].chains["c"].rules;
    assert_eq!(own[0].xt, None, "a table iptables-nft does not manage");
}

#[test]
fn changes_carry_the_writers_syntax_and_the_nft_form() {
    use super::netns::drain;
    use crate::nftables::generation::GenerationBuilder;
    use crate::ruleset::{Op, RuleSyntax};
    if let Some(reason) = root_skip_reason().or_else(iptables_skip_reason) {
        test_support::skip(format_args!("{reason}"));
        return;
    }
    let ns = Netns::new("xtchg");
    ns.sh("iptables-nft -t nat -N CNI-HOSTPORT-DNAT && iptables-nft -t nat -N CNI-DN-1");
    let (sub, req) = ns.sockets().expect("sockets");
    let mut b = GenerationBuilder::new(NftState::from_dump(&socket::dump_on(&req).expect("dump")));
    drain(&sub).iter().for_each(|d| {
        b.feed(d);
    });
    let mut run = |cmd: &str| -> Vec<crate::ruleset::Change> {
        ns.sh(cmd);
        drain(&sub)
            .iter()
            .flat_map(|d| b.feed(d).transactions)
            .flat_map(|t| t.changes)
            .filter(|c| matches!(c.op, Op::RuleAdd | Op::RuleDelete))
            .collect()
    };
    let portmap = "-p tcp -m comment --comment \"dnat name: \\\"k8s-pod-network\\\" id: \\\"c0ffee01\\\"\" -m multiport --dports 8081 -j CNI-DN-1";
    let added = run(&format!(
        "iptables-nft -t nat -A CNI-HOSTPORT-DNAT {portmap}"
    ));
    assert_eq!(added.len(), 1, "{added:?}");
    assert_eq!(added[0].rule.as_deref(), Some(portmap));
    assert_eq!(added[0].forms.rule_syntax, Some(RuleSyntax::Iptables));
    // The nft form, with the comment's quotes escaped.
    assert_eq!(
        added[0].forms.rule_nft.as_deref(),
        Some("meta l4proto tcp tcp dport 8081 counter jump CNI-DN-1 comment \"dnat name: \\\"k8s-pod-network\\\" id: \\\"c0ffee01\\\"\"")
    );
    let nft = run("nft add rule ip nat CNI-HOSTPORT-DNAT ct mark 5 accept");
    assert_eq!(nft[0].rule.as_deref(), Some("ct mark 0x00000005 accept"));
    assert_eq!(nft[0].forms.rule_syntax, Some(RuleSyntax::Nft));
    assert!(nft[0].forms.iptables_unreadable.is_some());
    let deleted = run(&format!(
        "iptables-nft -t nat -D CNI-HOSTPORT-DNAT {portmap}"
    ));
    assert_eq!(deleted[0].op, Op::RuleDelete);
    assert_eq!(deleted[0].rule.as_deref(), Some(portmap));
}

/// Debian's containernetworking-plugins as containerd chains them for a pod: bridge (ipMasq,
/// host-local), portmap, firewall. `$1` ADD/DEL, `$2` container id, `$3` the pod's netns name,
/// `$4` the host port, `$5` a scratch directory.
const CNI_CHAIN: &str = r#"set -e
export CNI_COMMAND=$1 CNI_CONTAINERID=$2 CNI_NETNS=/run/netns/$3 CNI_IFNAME=eth0 CNI_PATH=/usr/lib/cni
base='{"cniVersion":"1.0.0","name":"k8s-pod-network"}'
bridge=$(echo "$base" | jq -c --arg d "$5" '. + {"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.88.0.0/16"}]],"dataDir":$d}}')
prev=$(echo "$bridge" | /usr/lib/cni/bridge)
[ "$1" = DEL ] && prev='{"cniVersion":"1.0.0"}'
echo "$base" | jq -c --argjson p "$prev" --argjson port "$4" '. + {"type":"portmap","capabilities":{"portMappings":true},"runtimeConfig":{"portMappings":[{"hostPort":$port,"containerPort":80,"protocol":"tcp"}]},"prevResult":$p}' | /usr/lib/cni/portmap >/dev/null
echo "$base" | jq -c --argjson p "$prev" '. + {"type":"firewall","backend":"iptables","prevResult":$p}' | /usr/lib/cni/firewall >/dev/null
"#;

#[test]
fn cni_plugins_rules_read_as_iptables_nft_save_prints_them() {
    if let Some(reason) = root_skip_reason()
        .or_else(iptables_skip_reason)
        .or_else(|| test_support::skip_reason(&["jq"]))
    {
        test_support::skip(format_args!("{reason}"));
        return;
    }
    if !std::path::Path::new("/usr/lib/cni/portmap").exists() {
        test_support::skip(format_args!(
            "/usr/lib/cni/portmap missing: apt-get install containernetworking-plugins"
        ));
        return;
    }
    // The plugins run `iptables`: it must be iptables-nft for this test to mean anything.
    let iptables = std::fs::canonicalize("/usr/sbin/iptables").unwrap_or_default();
    assert!(
        iptables.ends_with("xtables-nft-multi"),
        "iptables is {iptables:?}"
    );
    let node = Netns::new("cninode");
    let pods = [Netns::new("cnipod1"), Netns::new("cnipod2")];
    let dir = std::env::temp_dir().join(format!("obs-xt-cni-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let script = dir.join("chain.sh");
    std::fs::write(&script, CNI_CHAIN).expect("write script");
    let run = |op: &str, id: &str, pod: &Netns, port: u16| {
        node.sh(&format!(
            "sh {} {op} {id} {} {port} {}",
            script.display(),
            pod.name,
            dir.join("ipam").display()
        ));
    };
    let mut counts = Vec::new();
    for step in ["add 1", "add 2", "del 1"] {
        match step {
            "add 1" => run("ADD", "c0ffee01", &pods[0], 8081),
            "add 2" => run("ADD", "c0ffee02", &pods[1], 8082),
            _ => run("DEL", "c0ffee01", &pods[0], 8081),
        }
        let want = saved(&node, "iptables-nft-save");
        let got = observed(&node, 2);
        let (same, diffs) = compare(&want, &got);
        assert!(diffs.is_empty(), "after {step}:\n{}", diffs.join("\n"));
        counts.push(same);
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("CNI rules identical to iptables-nft-save after add, add, del: {counts:?}");
    assert!(counts[1] > counts[0] && counts[2] < counts[1], "{counts:?}");
    assert!(counts[0] >= 10, "{counts:?}");
}
