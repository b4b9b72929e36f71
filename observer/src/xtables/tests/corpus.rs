//! The rendering corpus for legacy tables: real rulesets of docker, ufw, fail2ban, kube-proxy
//! (iptables mode), Calico- and Cilium-like chains, libvirt, firewalld (iptables backend) and
//! Istio's sidecar capture (its own test data) are
//! loaded with `iptables-legacy-restore` in a throw-away namespace, read back through the
//! kernel's x_tables interface, and every chain and rule observer renders is compared with what
//! `iptables-legacy-save` prints (counters and comment lines aside).

use super::live::{run_stdin, skip_reason, Netns};
use super::*;

const CORPUS: &[(&str, &str)] = &[
    ("docker", include_str!("../testdata/rulesets/docker.rules")),
    ("ufw", include_str!("../testdata/rulesets/ufw.rules")),
    (
        "fail2ban",
        include_str!("../testdata/rulesets/fail2ban.rules"),
    ),
    (
        "kube-proxy",
        include_str!("../testdata/rulesets/kube-proxy.rules"),
    ),
    ("calico", include_str!("../testdata/rulesets/calico.rules")),
    ("cilium", include_str!("../testdata/rulesets/cilium.rules")),
    (
        "libvirt",
        include_str!("../testdata/rulesets/libvirt.rules"),
    ),
    (
        "firewalld",
        include_str!("../testdata/rulesets/firewalld.rules"),
    ),
    (
        "istio",
        include_str!("../testdata/rulesets/istio-tproxy.rules"),
    ),
];

/// `iptables-save` output as observer renders it: chain lines without counters, rule lines, and
/// the table and COMMIT lines.
fn comparable(saved: &str) -> Vec<String> {
    saved
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| match l.strip_prefix(':') {
            // `:INPUT ACCEPT [0:0]` → `:INPUT ACCEPT`
            Some(chain) => format!(":{}", chain.split(" [").next().unwrap_or(chain)),
            None => l.to_string(),
        })
        .collect()
}

#[test]
fn every_corpus_rule_renders_as_iptables_save_prints_it() {
    if let Some(why) = skip_reason() {
        test_support::skip(format_args!("{why}"));
        return;
    }
    let (mut rules, mut wrong) = (0, Vec::new());
    for (name, ruleset) in CORPUS {
        let ns = Netns::add(format!("obs-xt-corpus-{}", std::process::id())).expect("netns");
        run_stdin(&ns, "iptables-legacy-restore", &[], ruleset)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let tables: Vec<&str> = ruleset
            .lines()
            .filter_map(|l| l.strip_prefix('*'))
            .collect();
        assert!(!tables.is_empty(), "{name}: no table in the ruleset");
        for table in tables {
            let t = table.to_string();
            let ours = ns
                .enter(move || sockopt::read_table(XtProto::Ipv4, &t))
                .expect("thread")
                .unwrap_or_else(|e| panic!("{name} {table}: {e}"));
            let want = comparable(
                &ns.run("iptables-legacy-save", &["-t", table])
                    .expect("save"),
            );
            let got: Vec<String> = ours.save_text().lines().map(str::to_string).collect();
            rules += want.iter().filter(|l| l.starts_with("-A ")).count();
            if got != want {
                for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                    if w != g {
                        wrong.push(format!("{name} {table} line {i}\n  save: {w}\n  got:  {g}"));
                    }
                }
                if want.len() != got.len() {
                    wrong.push(format!(
                        "{name} {table}: save has {} lines, observer {}",
                        want.len(),
                        got.len()
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    eprintln!("{rules} corpus rules compared");
    assert!(rules >= 170, "only {rules} rules compared");
}
