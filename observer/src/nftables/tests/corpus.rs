//! The rendering corpus: real rulesets (firewalld, kube-proxy in nftables mode, fail2ban; the
//! test data of Moby, OpenWrt's firewall4, kube-proxy, Netavark, Incus and libvirt, their
//! sources in `testdata/rulesets/README.md`; and a hand-written one using maps, vmaps,
//! intervals, concatenations, named objects, `ct`, `meta`, `fib`, `socket`, `tproxy`,
//! `synproxy`, interface names, nat by map and meters) are loaded with
//! the real `nft` in a throw-away namespace, read back over netlink, and every rule observer
//! renders is compared with what `nft -a list ruleset` prints for the same handle (counters
//! aside).

use crate::nftables::ifnames;
use crate::nftables::socket;
use crate::nftables::state::NftState;
use observer_rules::nftables::testing::{nfproto, nft_rules, strip_counters};

use super::netns::{root_skip_reason, Netns};

/// Rules whose text differs from nft's, each with its reason. Keep this list in step with the
/// "Rule text" section of docs/tail.md.
const EXCEPTIONS: &[(&str, &str, &str)] = &[];

const CORPUS: &[(&str, &str)] = &[
    (
        "firewalld",
        include_str!("../testdata/rulesets/firewalld.nft"),
    ),
    (
        "kube-proxy",
        include_str!("../testdata/rulesets/kube-proxy.nft"),
    ),
    (
        "fail2ban",
        include_str!("../testdata/rulesets/fail2ban.nft"),
    ),
    (
        "handwritten",
        include_str!("../testdata/rulesets/handwritten.nft"),
    ),
    // Projects' own test data and templates, each file's header naming its source and license.
    (
        "moby",
        include_str!("../testdata/rulesets/moby-nftabler-bridge.nft"),
    ),
    (
        "openwrt-fw4",
        include_str!("../testdata/rulesets/openwrt-fw4-default.nft"),
    ),
    (
        "kube-proxy-overall",
        include_str!("../testdata/rulesets/kube-proxy-nftables-overall.nft"),
    ),
    (
        "netavark",
        include_str!("../testdata/rulesets/netavark-bridge-portfw.nft"),
    ),
    (
        "incus",
        include_str!("../testdata/rulesets/incus-bridge-network.nft"),
    ),
    (
        "libvirt",
        include_str!("../testdata/rulesets/libvirt-nat-default.nft"),
    ),
];

#[test]
fn every_corpus_rule_renders_as_nft_lists_it() {
    if let Some(reason) = root_skip_reason() {
        test_support::skip(format_args!("{reason}"));
        return;
    }
    let mut wrong = Vec::new();
    let (mut equal, mut excepted) = (0, 0);
    for (name, ruleset) in CORPUS {
        let ns = Netns::new(&format!("corpus-{name}"));
        // An interface besides lo, so that iif/oif names other than lo's are exercised.
        ns.sh("ip link add obs0 type veth peer name obs1");
        let path =
            std::env::temp_dir().join(format!("observer-corpus-{name}-{}.nft", std::process::id()));
        std::fs::write(&path, ruleset).expect("write ruleset");
        ns.sh(&format!("nft -f {}", path.display()));
        let _ = std::fs::remove_file(&path);
        let listing = ns.sh("nft -a list ruleset");
        let (_notify, req) = ns.sockets().expect("sockets");
        let mut names = Some(ns.ifnames());
        let dump = socket::dump_on(&req).expect("dump");
        let st = ifnames::scope(&mut names, || NftState::from_dump(&dump));
        let rules = nft_rules(&listing);
        assert!(!rules.is_empty(), "{name}: nft listed no rules");
        for ((fam, table, chain, handle), want) in rules {
            let got = st
                .chain(nfproto(&fam), &table, &chain)
                .and_then(|c| c.rules.iter().find(|r| r.handle == handle))
                .map(|r| r.text.to_string())
                .unwrap_or_else(|| "<missing>".into());
            let want = strip_counters(&want);
            if got == want {
                equal += 1;
            } else if EXCEPTIONS
                .iter()
                .any(|(w, g, _)| *w == want.as_str() && *g == got.as_str())
            {
                excepted += 1;
            } else {
                wrong.push(format!(
                    "{name}: {fam} {table} {chain} #{handle}\n  nft: {want}\n  got: {got}"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} rules differ:\n{}",
        wrong.len(),
        equal + excepted + wrong.len(),
        wrong.join("\n")
    );
    assert_eq!(excepted, EXCEPTIONS.len(), "an exception no longer occurs");
    eprintln!("{equal} corpus rules identical");
    assert!(equal >= 340, "only {equal} rules compared");
}
