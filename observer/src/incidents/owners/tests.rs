use super::*;

fn proc_(actor: &str, unit: Option<&str>) -> ProcessInfo {
    ProcessInfo {
        unit: unit.map(str::to_string),
        ..ProcessInfo::named(1, "iptables", None, actor)
    }
}

fn owned(o: &Owners, chain: &str) -> Option<(String, How)> {
    match &**o.claim(chain)? {
        Claim::Owned { owner, how } => Some((owner.clone(), *how)),
        Claim::Shared { .. } => None,
    }
}

#[test]
fn catalog_knows_kep_3178_and_the_cnis() {
    let o = Owners::catalog();
    assert_eq!(
        owned(&o, "KUBE-SVC-ABCDEF"),
        Some(("kube-proxy".into(), How::Catalog))
    );
    assert_eq!(owned(&o, "KUBE-FIREWALL").unwrap().0, "kubelet");
    assert_eq!(owned(&o, "cali-FORWARD").unwrap().0, "calico-node");
    assert_eq!(owned(&o, "AZURE-NPM-INGRESS").unwrap().0, "azure-npm");
    assert_eq!(owned(&o, "CILIUM_OUTPUT").unwrap().0, "cilium-agent");
    assert!(matches!(
        o.claim("KUBE-MARK-MASQ").map(|c| &**c),
        Some(Claim::Shared { writers, .. }) if writers.contains(&"kubelet".to_string())
    ));
    assert_eq!(o.claim("MY-CHAIN").map(|c| &**c), None);
    assert_eq!(o.claim("INPUT").map(|c| &**c), None);
}

#[test]
fn every_catalog_owner_claims_the_names_its_component_really_uses() {
    let o = Owners::catalog();
    // Real chain names, from the components' own rulesets (see the rendering corpus).
    for (chain, owner) in [
        ("KUBE-SVC-ERIFXISQEP7F7OF4", "kube-proxy"),
        ("KUBE-FIREWALL", "kubelet"),
        ("cali-FORWARD", "calico-node"),
        ("CILIUM_PRE_mangle", "cilium-agent"),
        ("AZURE-NPM-INGRESS", "azure-npm"),
        ("KUBE-ROUTER-INPUT", "kube-router"),
        ("FLANNEL-POSTRTG", "flanneld"),
        ("ANTREA-POSTROUTING", "antrea-agent"),
        ("AWS-SNAT-CHAIN-0", "aws-node"),
        ("ISTIO_REDIRECT", "istio"),
        ("CNI-HOSTPORT-DNAT", "cni-plugins"),
        ("WEAVE", "weave"),
        ("WEAVE-NPC-INGRESS", "weave"),
        ("ts-input", "tailscaled"),
        ("DOCKER-ISOLATION-STAGE-1", "dockerd"),
        ("NETAVARK_FORWARD", "netavark"),
        ("LIBVIRT_FWO", "libvirtd"),
        ("ufw-before-input", "ufw"),
        ("ufw6-user-input", "ufw"),
        ("f2b-sshd", "fail2ban"),
        ("INPUT_direct", "firewalld"),
        ("INPUT_ZONES", "firewalld"),
        ("IN_public_allow", "firewalld"),
        ("FWD_public", "firewalld"),
        ("PRE_public_pre", "firewalld"),
        ("POSTROUTING_ZONES", "firewalld"),
    ] {
        assert_eq!(
            owned(&o, chain).map(|(w, _)| w).as_deref(),
            Some(owner),
            "{chain}"
        );
    }
    // Whole nftables tables, whatever the chain is called; only in that family and only
    // for nftables (a legacy table of the same name is not one).
    for (family, table, owner) in [
        (Family::Ip, "kube-proxy", "kube-proxy"),
        (Family::Ip6, "kube-proxy", "kube-proxy"),
        (Family::Inet, "firewalld", "firewalld"),
        (Family::Inet, "f2b-table", "fail2ban"),
        (Family::Inet, "netavark", "netavark"),
    ] {
        assert!(
            matches!(
                o.claim_in(Backend::Nft, family, table, "service-XYZ-default/web/tcp/http").map(|c| &**c),
                Some(Claim::Owned { owner: w, .. }) if w == owner
            ),
            "{family:?} {table}"
        );
    }
    assert_eq!(
        o.claim_in(Backend::Nft, Family::Inet, "kube-proxy", "x")
            .map(|c| &**c),
        None
    );
    assert_eq!(
        o.claim_in(Backend::Legacy, Family::Ip, "kube-proxy", "x")
            .map(|c| &**c),
        None
    );
    // The firewall managers' helpers act for them.
    assert_eq!(o.identity(&proc_("ufw-init", None)), "ufw");
    assert_eq!(o.identity(&proc_("fail2ban-server", None)), "fail2ban");
}

#[test]
fn an_owners_file_can_own_a_whole_table() {
    let file = parse_file(
        Path::new("o.toml"),
        "[[owner]]\nname = \"edge\"\ntables = [\"inet edge-*\"]\n",
    )
    .expect("parse");
    let mut o = Owners::catalog();
    o.apply(file).expect("apply");
    assert!(matches!(
        o.claim_in(Backend::Nft, Family::Inet, "edge-fw", "anything").map(|c| &**c),
        Some(Claim::Owned { owner, how: How::Config }) if owner == "edge"
    ));
    let bad = parse_file(
        Path::new("o.toml"),
        "[[owner]]\nname = \"edge\"\ntables = [\"edge\"]\n",
    )
    .expect("parse");
    let err = Owners::catalog()
        .apply(bad)
        .expect_err("no family")
        .to_string();
    assert!(err.contains("give the family and the name"), "{err}");
    let bad = parse_file(
        Path::new("o.toml"),
        "[[owner]]\nname = \"edge\"\ntables = [\"ipv4 edge\"]\n",
    )
    .expect("parse");
    let err = Owners::catalog()
        .apply(bad)
        .expect_err("bad family")
        .to_string();
    assert!(err.contains("not an nftables family"), "{err}");
}

#[test]
fn identity_uses_aliases_and_units() {
    let o = Owners::catalog();
    assert_eq!(o.identity(&proc_("calico-felix", None)), "calico-node");
    assert_eq!(
        o.identity(&proc_("bash", Some("kubelet.service"))),
        "kubelet"
    );
    assert_eq!(
        o.identity(&proc_("unknown", Some("iptables.service"))),
        "iptables.service"
    );
    assert_eq!(o.identity(&proc_("admin.sh", None)), "admin.sh");
}

#[test]
fn a_file_overrides_the_catalog_in_toml_and_yaml() {
    let toml_text = r#"
        [[owner]]
        name = "calico"
        actors = ["calico-node", "calico-felix"]
        chains = ["cali-*", "KUBE-SVC-SPECIAL"]

        [[shared]]
        chains = ["KUBE-FIREWALL"]
        writers = ["kubelet", "my-firewall"]
    "#;
    let yaml_text = "owner:\n  - name: calico\n    actors: [calico-node, calico-felix]\n    chains: ['cali-*', KUBE-SVC-SPECIAL]\nshared:\n  - chains: [KUBE-FIREWALL]\n    writers: [kubelet, my-firewall]\n";
    for (name, text) in [("o.toml", toml_text), ("o.yaml", yaml_text)] {
        let file = parse_file(Path::new(name), text).unwrap();
        let mut o = Owners::catalog();
        o.apply(file).unwrap();
        assert_eq!(
            owned(&o, "KUBE-SVC-SPECIAL"),
            Some(("calico".into(), How::Config)),
            "{name}"
        );
        assert_eq!(owned(&o, "KUBE-SVC-OTHER").unwrap().0, "kube-proxy");
        assert_eq!(o.identity(&proc_("calico-node", None)), "calico");
        assert!(matches!(
            o.claim("KUBE-FIREWALL").map(|c| &**c),
            Some(Claim::Shared {
                how: How::Config,
                ..
            })
        ));
    }
}

#[test]
fn bad_files_say_what_is_wrong() {
    let e = parse_file(Path::new("o.toml"), "[[owner]]\nname = \"x\"\ncolour = 1\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("colour"), "{e}");
    let e = parse_file(Path::new("o.yaml"), "owner: 3\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("o.yaml"), "{e}");
    let e = parse_file(Path::new("o.ini"), "").unwrap_err().to_string();
    assert!(e.contains("*.toml"), "{e}");
    let file = parse_file(
        Path::new("o.toml"),
        "[[owner]]\nname = \"x\"\nchains = [\"[\"]\n",
    )
    .unwrap();
    let e = Owners::catalog().apply(file).unwrap_err().to_string();
    assert!(e.contains("chain pattern"), "{e}");
}
