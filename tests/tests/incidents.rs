//! Ownership-conflict incidents from real writers: scripts named like the components that cause
//! them on Kubernetes nodes (kube-proxy, kubelet, calico-node, kube-router, azure-npm, a firewall
//! restart run from an `iptables.service` cgroup) run the real iptables-legacy, iptables-nft and
//! nft in namespaces these tests create, and `observer tail --json` must turn the change stream
//! into exactly the expected incident lines and nothing else. Needs root; skips otherwise.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use test_support::{skip_unless, Cgroup, Netns, Observer, Writer};

/// Seconds to wait for one change line.
const WAIT: u64 = 20;
/// Seconds to wait for an incident line once its cause has been seen.
const INCIDENT_WAIT: u64 = 10;

/// Short windows so that the tests are quick.
const WINDOWS: [&str; 6] = [
    "--flap-window",
    "20s",
    "--mass-window",
    "2s",
    "--repair-within",
    "4s",
];

fn start(ns: &Netns, windows: &[&str]) -> Observer {
    let mut args = vec!["--netns", ns.name()];
    args.extend_from_slice(windows);
    Observer::start(&args)
}

/// One change line a step must produce: op (alternatives separated by `|`), table and chain
/// (`None`: any chain, as for a `table_flush`).
type Want<'a> = (&'a str, &'a str, Option<&'a str>);

/// Run a step and wait for each change line it must produce in `ns`, checking that each names
/// `actor`. Returns those lines.
fn step(
    obs: &mut Observer,
    ns: &Netns,
    actor: &str,
    wants: &[Want],
    run: impl FnOnce(),
) -> Vec<Value> {
    step_by(obs, ns, actor, |p| p["actor"] == actor, wants, run)
}

/// Same, with the writer checked by `who` on the `process` object of each line.
fn step_by(
    obs: &mut Observer,
    ns: &Netns,
    writer: &str,
    who: impl Fn(&Value) -> bool,
    wants: &[Want],
    run: impl FnOnce(),
) -> Vec<Value> {
    let mark = obs.mark();
    run();
    let inode = ns.ino();
    let mut got = Vec::new();
    for &(op, table, chain) in wants {
        let what = format!("{op} {table} {} by {writer}", chain.unwrap_or("*"));
        let v = obs.expect_since(mark, &what, WAIT, |v| {
            v["netns"].as_u64() == Some(inode)
                && op.split('|').any(|o| v["op"] == o)
                && v["table"] == table
                && chain.is_none_or(|c| v["chain"] == c)
        });
        assert!(
            who(&v["process"]),
            "the change line for {what} names another writer: {v}"
        );
        got.push(v);
    }
    got
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn has(v: &Value, s: &str) -> bool {
    strs(v).contains(&s)
}

/// The incident lines of one namespace, in order.
fn incidents_in<'a>(obs: &'a Observer, ns: &Netns) -> Vec<&'a Value> {
    let inode = ns.ino();
    obs.incidents()
        .into_iter()
        .filter(|v| v["netns"].as_u64() == Some(inode))
        .collect()
}

/// Every incident line of `ns` is of one of `types`.
fn assert_only_types(obs: &Observer, ns: &Netns, types: &[&str]) {
    for v in incidents_in(obs, ns) {
        assert!(
            types.contains(&v["type"].as_str().unwrap_or("")),
            "an incident of another type than {types:?}: {v}\nall lines:\n{}",
            obs.dump()
        );
    }
}

/// The distinct ids of the incident lines of one type in `ns`.
fn ids_of(obs: &Observer, ns: &Netns, ty: &str) -> BTreeSet<String> {
    incidents_in(obs, ns)
        .into_iter()
        .filter(|v| v["type"] == ty)
        .filter_map(|v| v["id"].as_str().map(str::to_string))
        .collect()
}

/// The fields every incident line carries.
fn assert_common_fields(v: &Value) {
    for f in [
        "id", "time", "since", "state", "severity", "summary", "owner",
    ] {
        assert!(v[f].is_string(), "{f} missing in {v}");
    }
    for f in ["chains", "actors", "events"] {
        assert!(v[f].is_array(), "{f} missing in {v}");
    }
    assert!(
        ["open", "update", "resolved", "expired"].contains(&v["state"].as_str().unwrap_or("")),
        "state in {v}"
    );
    assert!(!strs(&v["chains"]).is_empty(), "no chains in {v}");
}

/// The fields of an incident made of change lines: every line it lists was seen.
fn assert_incident(obs: &Observer, v: &Value) {
    assert_common_fields(v);
    let events: Vec<u64> = v["events"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    assert!(!events.is_empty(), "no events in {v}");
    let seen: BTreeSet<u64> = obs
        .changes()
        .iter()
        .filter_map(|c| c["seq"].as_u64())
        .collect();
    for e in events {
        assert!(seen.contains(&e), "event {e} of {v} is no change line seen");
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Calico (eBPF mode, kube-proxy clean-up on) against kube-proxy: chains deleted and restored
//    in a loop.

const SVCS: [&str; 2] = ["KUBE-SVC-TCOU7JCQXEZGVUNU", "KUBE-SVC-NPX46M4PTMTKRN6Y"];
const SEPS: [&str; 2] = ["KUBE-SEP-IT2ZTR26TO4XFPTO", "KUBE-SEP-YIL6JZP7A3QYXJU2"];

fn kube_proxy_nat() -> String {
    format!(
        "*nat\n\
         :KUBE-SERVICES - [0:0]\n\
         :{s0} - [0:0]\n\
         :{s1} - [0:0]\n\
         :{e0} - [0:0]\n\
         :{e1} - [0:0]\n\
         -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j {s0}\n\
         -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m comment --comment \"default/kubernetes:https cluster IP\" -m tcp --dport 443 -j {s1}\n\
         -A {s0} -j {e0}\n\
         -A {s1} -j {e1}\n\
         -A {e0} -p udp -m udp -j DNAT --to-destination 10.244.0.5:53\n\
         -A {e1} -p tcp -m tcp -j DNAT --to-destination 192.168.0.10:6443\n\
         COMMIT\n",
        s0 = SVCS[0],
        s1 = SVCS[1],
        e0 = SEPS[0],
        e1 = SEPS[1],
    )
}

const CALICO_UNHOOK: &str = "*nat\n\
    -D PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
    -D OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
    COMMIT\n";

fn calico_cleanup() -> String {
    let chains: Vec<&str> = ["KUBE-SERVICES"]
        .into_iter()
        .chain(SVCS)
        .chain(SEPS)
        .collect();
    let mut s = String::from("*nat\n");
    for c in &chains {
        s.push_str(&format!("-F {c}\n"));
    }
    for c in &chains {
        s.push_str(&format!("-X {c}\n"));
    }
    s.push_str("COMMIT\n");
    s
}

#[test]
fn calico_and_kube_proxy_flap() {
    skip_unless!("ip", "iptables-legacy-restore");
    const CYCLES: u64 = 5;
    let ns = Netns::new("calico");
    let kube_proxy = Writer::new("kube-proxy");
    let calico = Writer::new("calico-node");
    // A shorter flap window, so that the wait for the incident to close stays short.
    let mut windows = WINDOWS;
    windows[1] = "10s";
    let mut obs = start(&ns, &windows);
    let restore = ["iptables-legacy-restore", "--noflush"];
    let created: Vec<Want> = ["KUBE-SERVICES"]
        .into_iter()
        .chain(SVCS)
        .chain(SEPS)
        .map(|c| ("chain_create", "nat", Some(c)))
        .chain([
            ("rule_add", "nat", Some("PREROUTING")),
            ("rule_add", "nat", Some("OUTPUT")),
        ])
        .collect();
    // The jumps go (each the only rule of its chain, so observer may call it a chain flush),
    // not the whole of nat: the KUBE-* chains keep their rules.
    let unhooked: [Want; 2] = [
        ("rule_delete|chain_flush", "nat", Some("PREROUTING")),
        ("rule_delete|chain_flush", "nat", Some("OUTPUT")),
    ];
    let deleted: Vec<Want> = ["KUBE-SERVICES"]
        .into_iter()
        .chain(SVCS)
        .chain(SEPS)
        .map(|c| ("chain_delete", "nat", Some(c)))
        .collect();

    let here = ns.ino();
    step(&mut obs, &ns, "kube-proxy", &created, || {
        ns.write_stdin(&kube_proxy, &restore, &kube_proxy_nat())
    });
    let mut flapping_seen = false;
    for cycle in 1..=CYCLES {
        let lines = step(&mut obs, &ns, "calico-node", &unhooked, || {
            ns.write_stdin(&calico, &restore, CALICO_UNHOOK)
        });
        assert_eq!(lines[0]["txn"], lines[1]["txn"], "one restore, one txn");
        if cycle == 1 {
            let v = obs.expect_incident("unhooked", INCIDENT_WAIT, |v| {
                v["netns"].as_u64() == Some(here)
            });
            assert_incident(&obs, &v);
            assert_eq!(v["owner"], "kube-proxy", "{v}");
            assert!(has(&v["actors"], "calico-node"), "{v}");
            assert!(has(&v["chains"], "KUBE-SERVICES"), "{v}");
            assert_eq!(v["backend"], "legacy", "{v}");
            assert_eq!(v["table"], "nat", "{v}");
            assert_eq!(v["state"], "open", "{v}");
        }
        step(&mut obs, &ns, "calico-node", &deleted, || {
            ns.write_stdin(&calico, &restore, &calico_cleanup())
        });
        if cycle == 1 {
            let v = obs.expect_incident("foreign_delete", INCIDENT_WAIT, |v| {
                v["netns"].as_u64() == Some(here)
            });
            assert_incident(&obs, &v);
            assert_eq!(v["owner"], "kube-proxy", "{v}");
            assert!(has(&v["actors"], "calico-node"), "{v}");
            for c in ["KUBE-SERVICES"].into_iter().chain(SVCS).chain(SEPS) {
                assert!(has(&v["chains"], c), "{c} missing in {v}");
            }
            assert_eq!(v["table"], "nat", "{v}");
        }
        step(&mut obs, &ns, "kube-proxy", &created, || {
            ns.write_stdin(&kube_proxy, &restore, &kube_proxy_nat())
        });
        if cycle >= 3 {
            // The loop is a flapping incident from the third cycle on, with the cycles counted.
            let v = obs.expect_incident("flapping", INCIDENT_WAIT, |v| {
                v["netns"].as_u64() == Some(here) && v["cycles"].as_u64() == Some(cycle)
            });
            assert_incident(&obs, &v);
            assert_eq!(v["severity"], "critical", "{v}");
            assert_eq!(v["owner"], "kube-proxy", "{v}");
            assert!(has(&v["actors"], "calico-node"), "{v}");
            assert!(v["last"].is_string(), "last in {v}");
            assert_eq!(
                v["state"],
                if flapping_seen { "update" } else { "open" },
                "cycle {cycle}: {v}"
            );
            flapping_seen = true;
        }
    }
    // No more cycles: the incident ends after a window, resolved (kube-proxy restored last).
    let closed = obs.expect_incident("flapping", 20, |v| {
        v["netns"].as_u64() == Some(here) && v["state"] == "resolved"
    });
    assert_eq!(closed["cycles"].as_u64(), Some(CYCLES), "{closed}");
    obs.drain(300);

    assert_only_types(&obs, &ns, &["unhooked", "foreign_delete", "flapping"]);
    for ty in ["unhooked", "foreign_delete", "flapping"] {
        let ids = ids_of(&obs, &ns, ty);
        assert_eq!(
            ids.len(),
            1,
            "{ty}: one incident, got {ids:?}\n{}",
            obs.dump()
        );
    }
    // cycles only grows.
    let cycles: Vec<u64> = incidents_in(&obs, &ns)
        .into_iter()
        .filter(|v| v["type"] == "flapping")
        .map(|v| v["cycles"].as_u64().expect("cycles"))
        .collect();
    assert!(
        cycles.windows(2).all(|w| w[0] <= w[1]) && cycles.first() < cycles.last(),
        "cycles must grow: {cycles:?}"
    );
    // While the flapping incident is open, no new foreign_delete/unhooked incident opens.
    let lines = incidents_in(&obs, &ns);
    let open_at = lines
        .iter()
        .position(|v| v["type"] == "flapping")
        .expect("flapping line");
    for v in &lines[open_at..] {
        assert!(
            v["type"] == "flapping" || v["state"] != "open",
            "a new incident while flapping is open: {v}"
        );
    }
    obs.stop();
}

// ---------------------------------------------------------------------------------------------
// 2. `systemctl restart iptables` (iptables -F; iptables -X; restore a saved file) wipes kubelet's
//    and kube-proxy's chains; kube-proxy repairs, kubelet (one-shot initialisation) does not.

const KUBE_PROXY_FILTER_NAT: &str = "*filter\n\
    :KUBE-SERVICES - [0:0]\n\
    :KUBE-FORWARD - [0:0]\n\
    :KUBE-NODEPORTS - [0:0]\n\
    -A INPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
    -A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD\n\
    -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
    -A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT\n\
    -A KUBE-SERVICES -d 10.96.0.20/32 -p tcp -m comment --comment \"default/nginx has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable\n\
    COMMIT\n\
    *nat\n\
    :KUBE-SERVICES - [0:0]\n\
    :KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\n\
    :KUBE-SEP-YIL6JZP7A3QYXJU2 - [0:0]\n\
    -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
    -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
    -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y\n\
    -A KUBE-SVC-NPX46M4PTMTKRN6Y -j KUBE-SEP-YIL6JZP7A3QYXJU2\n\
    -A KUBE-SEP-YIL6JZP7A3QYXJU2 -p tcp -m tcp -j DNAT --to-destination 192.168.0.10:6443\n\
    COMMIT\n";

/// What the firewall's start script restores: the admin's own rules, no Kubernetes chain.
const SAVED_FIREWALL: &str = "*filter\n\
    :INPUT ACCEPT [0:0]\n\
    :FORWARD ACCEPT [0:0]\n\
    :OUTPUT ACCEPT [0:0]\n\
    -A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n\
    COMMIT\n";

fn firewall_restart(tag: &str, ipt: &str) {
    let cg = match Cgroup::new(tag, "system.slice/iptables.service") {
        Ok(cg) => cg,
        Err(e) => {
            test_support::skip(format_args!("{e}"));
            return;
        }
    };
    let ns = Netns::new(tag);
    let kubelet = Writer::new("kubelet");
    let kube_proxy = Writer::new("kube-proxy");
    let saved = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(saved.path(), SAVED_FIREWALL).expect("write saved rules");
    // The stop script then the start script, as one run of the unit (run inside its cgroup).
    let firewall = Writer::script(
        "iptables.init",
        &format!(
            "{ipt} -F\n\
             {ipt} -X\n\
             {ipt} -t nat -F\n\
             {ipt} -t nat -X\n\
             {ipt}-restore < {saved}",
            saved = saved.path().display(),
        ),
    );
    let mut obs = start(&ns, &WINDOWS);
    let here = ns.ino();

    let restore = format!("{ipt}-restore");
    step(
        &mut obs,
        &ns,
        "kubelet",
        &[("chain_create", "filter", Some("KUBE-FIREWALL"))],
        || ns.write(&kubelet, &[ipt, "-N", "KUBE-FIREWALL"]),
    );
    step(
        &mut obs,
        &ns,
        "kubelet",
        &[("rule_add", "filter", Some("KUBE-FIREWALL"))],
        || {
            ns.write(
                &kubelet,
                &[
                    ipt,
                    "-A",
                    "KUBE-FIREWALL",
                    "-m",
                    "comment",
                    "--comment",
                    "kubernetes firewall for dropping marked packets",
                    "-m",
                    "mark",
                    "--mark",
                    "0x8000/0x8000",
                    "-j",
                    "DROP",
                ],
            )
        },
    );
    for hook in ["INPUT", "OUTPUT"] {
        step(
            &mut obs,
            &ns,
            "kubelet",
            &[("rule_add", "filter", Some(hook))],
            || ns.write(&kubelet, &[ipt, "-I", hook, "-j", "KUBE-FIREWALL"]),
        );
    }
    for table in ["filter", "nat"] {
        step(
            &mut obs,
            &ns,
            "kubelet",
            &[("chain_create", table, Some("KUBE-KUBELET-CANARY"))],
            || ns.write(&kubelet, &[ipt, "-t", table, "-N", "KUBE-KUBELET-CANARY"]),
        );
    }
    let kube_proxy_chains: Vec<Want> = [
        ("filter", "KUBE-SERVICES"),
        ("filter", "KUBE-FORWARD"),
        ("filter", "KUBE-NODEPORTS"),
        ("nat", "KUBE-SERVICES"),
        ("nat", "KUBE-SVC-NPX46M4PTMTKRN6Y"),
        ("nat", "KUBE-SEP-YIL6JZP7A3QYXJU2"),
    ]
    .into_iter()
    .map(|(t, c)| ("chain_create", t, Some(c)))
    .collect();
    step(&mut obs, &ns, "kube-proxy", &kube_proxy_chains, || {
        ns.write_stdin(&kube_proxy, &[&restore, "--noflush"], KUBE_PROXY_FILTER_NAT)
    });
    assert!(
        incidents_in(&obs, &ns).is_empty(),
        "incidents before the restart:\n{}",
        obs.dump()
    );

    // The restart: every user chain of filter and nat flushed and deleted, then the saved rules.
    let mut wiped: Vec<Want> = [
        ("filter", "KUBE-FIREWALL"),
        ("filter", "KUBE-KUBELET-CANARY"),
        ("filter", "KUBE-SERVICES"),
        ("filter", "KUBE-FORWARD"),
        ("nat", "KUBE-KUBELET-CANARY"),
        ("nat", "KUBE-SERVICES"),
        ("nat", "KUBE-SVC-NPX46M4PTMTKRN6Y"),
    ]
    .into_iter()
    .map(|(t, c)| ("chain_delete", t, Some(c)))
    .collect();
    wiped.push(("rule_add", "filter", Some("INPUT")));
    // Who did it is checked last (below), after the incident itself.
    let restart = step_by(
        &mut obs,
        &ns,
        "iptables.init",
        |p| p["parent_comm"] == "iptables.init",
        &wiped,
        || ns.write_in_cgroup(&firewall, &cg, &[]),
    );
    let restart_at = std::time::Instant::now();

    let v = obs.expect_incident("mass_flush", INCIDENT_WAIT, |v| {
        v["netns"].as_u64() == Some(here)
    });
    assert_incident(&obs, &v);
    assert_eq!(v["severity"], "critical", "{v}");
    assert_eq!(v["state"], "open", "{v}");
    let opened = v.clone();
    let owners = |v: &Value| -> BTreeMap<String, Value> {
        v["owners"]
            .as_array()
            .unwrap_or_else(|| panic!("owners in {v}"))
            .iter()
            .map(|o| (o["owner"].as_str().unwrap_or("").to_string(), o.clone()))
            .collect()
    };
    let o = owners(&v);
    assert!(
        o.contains_key("kubelet") && o.contains_key("kube-proxy"),
        "both owners in {v}"
    );
    // The flushes and deletes that follow within the window join it: one line lists them all.
    let id = v["id"].clone();
    let hit = |v: &Value| {
        let o = owners(v);
        let of = |owner: &str, c: &str| o.get(owner).is_some_and(|x| has(&x["chains"], c));
        ["KUBE-FIREWALL", "KUBE-KUBELET-CANARY"]
            .iter()
            .all(|c| of("kubelet", c))
            && ["KUBE-SERVICES", "KUBE-FORWARD", "KUBE-SVC-NPX46M4PTMTKRN6Y"]
                .iter()
                .all(|c| of("kube-proxy", c))
    };
    let v = obs.expect_incident("mass_flush", INCIDENT_WAIT, |v| v["id"] == id && hit(v));
    assert_incident(&obs, &v);

    // kube-proxy's next sync re-creates its chains; kubelet's one-shot setup does not.
    step(&mut obs, &ns, "kube-proxy", &kube_proxy_chains, || {
        ns.write_stdin(&kube_proxy, &[&restore, "--noflush"], KUBE_PROXY_FILTER_NAT)
    });
    let v = obs.expect_incident("mass_flush", INCIDENT_WAIT, |v| {
        v["id"] == id && owners(v)["kube-proxy"]["repaired"] == true
    });
    let o = owners(&v);
    assert!(
        o["kube-proxy"]["repair_ms"].as_u64().is_some(),
        "repair_ms of kube-proxy in {v}"
    );
    assert!(
        o["kube-proxy"]["repair_ms"].as_u64()
            <= Some(restart_at.elapsed().as_millis() as u64 + 1000),
        "repair_ms longer than the test: {v}"
    );
    assert_eq!(o["kubelet"]["repaired"], false, "{v}");

    // The repair bound (4 s) passes: the incident expires with kubelet never repaired.
    let v = obs.expect_incident("mass_flush", 15, |v| {
        v["id"] == id && v["state"] == "expired"
    });
    let o = owners(&v);
    assert_eq!(o["kubelet"]["repaired"], false, "{v}");
    assert!(o["kubelet"]["repair_ms"].is_null(), "{v}");
    assert_eq!(o["kube-proxy"]["repaired"], true, "{v}");
    obs.drain(300);

    assert_only_types(&obs, &ns, &["mass_flush"]);
    let ids = ids_of(&obs, &ns, "mass_flush");
    assert_eq!(ids.len(), 1, "one mass_flush, got {ids:?}\n{}", obs.dump());

    // The restart is named: by the script that ran the tools, and by its systemd unit.
    for v in &restart {
        assert_eq!(v["process"]["actor"], "iptables.init", "actor of {v}");
        assert_eq!(v["process"]["unit"], "iptables.service", "unit of {v}");
    }
    assert!(
        has(&opened["actors"], "iptables.init") || has(&opened["actors"], "iptables.service"),
        "the firewall restart is not named in {opened}"
    );
    obs.stop();
}

#[test]
fn firewall_restart_wipes_kubelet_and_kube_proxy_legacy() {
    skip_unless!("ip", "iptables-legacy", "iptables-legacy-restore");
    firewall_restart("fw-legacy", "iptables-legacy");
}

#[test]
fn firewall_restart_wipes_kubelet_and_kube_proxy_nft() {
    skip_unless!("ip", "iptables-nft", "iptables-nft-restore");
    firewall_restart("fw-nft", "iptables-nft");
}

// ---------------------------------------------------------------------------------------------
// 3. kube-router's save/modify/restore with an older iptables drops the mark match from kubelet's
//    KUBE-FIREWALL DROP rule.

fn rule_drift(tag: &str, ipt: &str, backend: &str, mark_text: &str) {
    let ns = Netns::new(tag);
    let kubelet = Writer::new("kubelet");
    let kube_router = Writer::script(
        "kube-router",
        &format!(
            "{ipt}-save -t filter | sed -e 's# -m mark --mark 0x8000/0x8000##' | {ipt}-restore"
        ),
    );
    let mut obs = start(&ns, &WINDOWS);
    let here = ns.ino();

    step(
        &mut obs,
        &ns,
        "kubelet",
        &[("chain_create", "filter", Some("KUBE-FIREWALL"))],
        || ns.write(&kubelet, &[ipt, "-N", "KUBE-FIREWALL"]),
    );
    let added = step(
        &mut obs,
        &ns,
        "kubelet",
        &[("rule_add", "filter", Some("KUBE-FIREWALL"))],
        || {
            ns.write(
                &kubelet,
                &[
                    ipt,
                    "-A",
                    "KUBE-FIREWALL",
                    "-m",
                    "comment",
                    "--comment",
                    "kubernetes firewall for dropping marked packets",
                    "-m",
                    "mark",
                    "--mark",
                    "0x8000/0x8000",
                    "-j",
                    "DROP",
                ],
            )
        },
    );
    let rule = added[0]["rule"].as_str().unwrap_or_default().to_string();
    assert!(rule.contains(mark_text), "the mark match in {rule}");
    assert_eq!(added[0]["backend"], backend);
    step(
        &mut obs,
        &ns,
        "kubelet",
        &[("rule_add", "filter", Some("INPUT"))],
        || ns.write(&kubelet, &[ipt, "-I", "INPUT", "-j", "KUBE-FIREWALL"]),
    );

    // kube-router's round trip: the DROP rule comes back without its mark match.
    let mark = obs.mark();
    ns.write(&kube_router, &[]);
    let v = obs.expect_since(mark, "the rewritten DROP rule", WAIT, |v| {
        v["netns"].as_u64() == Some(here)
            && v["chain"] == "KUBE-FIREWALL"
            && (v["op"] == "rule_replace" || v["op"] == "rule_add")
    });
    assert_eq!(v["process"]["actor"], "kube-router", "{v}");
    assert!(
        !v["rule"].as_str().unwrap_or_default().contains(mark_text),
        "{v}"
    );

    let v = obs.expect_incident("rule_drift", INCIDENT_WAIT, |v| {
        v["netns"].as_u64() == Some(here)
    });
    assert_incident(&obs, &v);
    assert_eq!(v["severity"], "critical", "{v}");
    assert_eq!(v["owner"], "kubelet", "{v}");
    assert_eq!(strs(&v["actors"]), ["kube-router"], "{v}");
    assert_eq!(v["backend"], backend, "{v}");
    assert_eq!(v["table"], "filter", "{v}");
    assert!(has(&v["chains"], "KUBE-FIREWALL"), "{v}");
    assert!(
        strs(&v["lost"]).iter().any(|l| l.contains(mark_text)),
        "lost must hold the mark match `{mark_text}`: {v}"
    );
    assert!(
        v["was"].as_str().unwrap_or_default().contains(mark_text),
        "was: {v}"
    );
    let new_rule = v["rule"].as_str().unwrap_or_else(|| panic!("rule in {v}"));
    assert!(!new_rule.contains(mark_text), "rule: {v}");
    obs.drain(1500);
    assert_only_types(&obs, &ns, &["rule_drift"]);
    assert_eq!(ids_of(&obs, &ns, "rule_drift").len(), 1, "{}", obs.dump());
    obs.stop();
}

#[test]
fn kube_router_drops_the_mark_match_nft() {
    skip_unless!(
        "ip",
        "iptables-nft",
        "iptables-nft-save",
        "iptables-nft-restore"
    );
    rule_drift(
        "drift-nft",
        "iptables-nft",
        "nft",
        "-m mark --mark 0x8000/0x8000",
    );
}

#[test]
fn kube_router_drops_the_mark_match_legacy() {
    skip_unless!(
        "ip",
        "iptables-legacy",
        "iptables-legacy-save",
        "iptables-legacy-restore"
    );
    rule_drift(
        "drift-legacy",
        "iptables-legacy",
        "legacy",
        "-m mark --mark 0x8000/0x8000",
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Azure NPM writes iptables-nft while stale AZURE-NPM chains remain in iptables-legacy.

const NPM_NFT: &str = "*filter\n\
    :AZURE-NPM - [0:0]\n\
    :AZURE-NPM-INGRESS - [0:0]\n\
    :AZURE-NPM-EGRESS - [0:0]\n\
    -A FORWARD -j AZURE-NPM\n\
    -A AZURE-NPM -j AZURE-NPM-INGRESS\n\
    -A AZURE-NPM -j AZURE-NPM-EGRESS\n\
    COMMIT\n";

const NPM_LEGACY_STALE: &str = "*filter\n\
    :AZURE-NPM - [0:0]\n\
    :AZURE-NPM-INGRESS - [0:0]\n\
    -A FORWARD -j AZURE-NPM\n\
    -A AZURE-NPM -j AZURE-NPM-INGRESS\n\
    COMMIT\n";

fn assert_split_brain(v: &Value) {
    assert_common_fields(v);
    assert_eq!(v["owner"], "azure-npm", "{v}");
    for c in ["AZURE-NPM", "AZURE-NPM-INGRESS"] {
        assert!(has(&v["backends"]["legacy"], c), "legacy {c} in {v}");
        assert!(has(&v["backends"]["nft"], c), "nft {c} in {v}");
    }
    assert!(has(&v["backends"]["nft"], "AZURE-NPM-EGRESS"), "{v}");
    assert!(
        !has(&v["backends"]["legacy"], "AZURE-NPM-EGRESS"),
        "EGRESS exists in nft only: {v}"
    );
}

#[test]
fn azure_npm_split_brain_at_start() {
    skip_unless!("ip", "iptables-nft-restore", "iptables-legacy-restore");
    let ns = Netns::new("npm-start");
    let npm = Writer::new("azure-npm");
    ns.write_stdin(
        &npm,
        &["iptables-legacy-restore", "--noflush"],
        NPM_LEGACY_STALE,
    );
    ns.write_stdin(&npm, &["iptables-nft-restore", "--noflush"], NPM_NFT);
    let mut obs = start(&ns, &WINDOWS);
    let here = ns.ino();
    let v = obs.expect_incident("split_brain", INCIDENT_WAIT, |v| {
        v["netns"].as_u64() == Some(here)
    });
    assert_split_brain(&v);
    assert_eq!(v["state"], "open", "{v}");
    obs.drain(1000);
    assert_only_types(&obs, &ns, &["split_brain"]);
    assert_eq!(ids_of(&obs, &ns, "split_brain").len(), 1, "{}", obs.dump());
    obs.stop();
}

#[test]
fn azure_npm_split_brain_on_change() {
    skip_unless!("ip", "iptables-nft-restore", "iptables-legacy-restore");
    let ns = Netns::new("npm-change");
    let npm = Writer::new("azure-npm");
    ns.write_stdin(&npm, &["iptables-nft-restore", "--noflush"], NPM_NFT);
    let mut obs = start(&ns, &WINDOWS);
    let here = ns.ino();
    obs.drain(1000);
    assert!(
        incidents_in(&obs, &ns).is_empty(),
        "one backend only, yet:\n{}",
        obs.dump()
    );
    let lines = step(
        &mut obs,
        &ns,
        "azure-npm",
        &[
            ("chain_create", "filter", Some("AZURE-NPM")),
            ("chain_create", "filter", Some("AZURE-NPM-INGRESS")),
        ],
        || {
            ns.write_stdin(
                &npm,
                &["iptables-legacy-restore", "--noflush"],
                NPM_LEGACY_STALE,
            )
        },
    );
    assert_eq!(lines[0]["backend"], "legacy");
    let v = obs.expect_incident("split_brain", INCIDENT_WAIT, |v| {
        v["netns"].as_u64() == Some(here)
    });
    assert_split_brain(&v);
    assert_eq!(v["state"], "open", "{v}");
    assert_eq!(v["last_backend"], "legacy", "{v}");
    let seqs: Vec<u64> = lines.iter().filter_map(|l| l["seq"].as_u64()).collect();
    assert!(
        v["events"].as_array().is_some_and(|e| e
            .iter()
            .any(|s| s.as_u64().is_some_and(|s| seqs.contains(&s)))),
        "the events of {v} do not include the legacy chain_create lines {seqs:?}"
    );
    obs.drain(1000);
    assert_only_types(&obs, &ns, &["split_brain"]);
    assert_eq!(ids_of(&obs, &ns, "split_brain").len(), 1, "{}", obs.dump());
    obs.stop();
}

// ---------------------------------------------------------------------------------------------
// 5. A busy, healthy node: owners churning their own chains, shared chains written by both
//    allowed writers, an admin adding rules. Not one incident.

fn kube_proxy_sync(i: usize) -> String {
    // Services i..i+2 exist; service i-1 went away and its chains are deleted, as kube-proxy does.
    let mut s = String::from("*nat\n:KUBE-SERVICES - [0:0]\n");
    for k in i..i + 3 {
        s.push_str(&format!(
            ":KUBE-SVC-OBS{k} - [0:0]\n:KUBE-SEP-OBS{k} - [0:0]\n"
        ));
    }
    if i > 0 {
        let k = i - 1;
        s.push_str(&format!(
            ":KUBE-SVC-OBS{k} - [0:0]\n:KUBE-SEP-OBS{k} - [0:0]\n"
        ));
        s.push_str(&format!("-X KUBE-SVC-OBS{k}\n-X KUBE-SEP-OBS{k}\n"));
    }
    for k in i..i + 3 {
        s.push_str(&format!(
            "-A KUBE-SERVICES -d 10.96.{}.{}/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-OBS{k}\n\
             -A KUBE-SVC-OBS{k} -j KUBE-SEP-OBS{k}\n\
             -A KUBE-SEP-OBS{k} -p tcp -m tcp -j DNAT --to-destination 10.244.{}.{}:80\n",
            k / 256,
            k % 256,
            k / 256,
            k % 256,
        ));
    }
    s.push_str("COMMIT\n");
    s
}

#[test]
fn healthy_node_makes_no_incident() {
    skip_unless!("ip", "iptables-legacy", "iptables-legacy-restore", "nft");
    const SYNCS: usize = 110;
    let ns = Netns::new("healthy");
    let kube_proxy = Writer::new("kube-proxy");
    let kubelet = Writer::new("kubelet");
    let admin = Writer::new("admin");
    let mut obs = start(&ns, &WINDOWS);
    let ipt = "iptables-legacy";
    let restore = ["iptables-legacy-restore", "--noflush"];

    // kube-proxy hooks KUBE-SERVICES once, then syncs: services come and go, KUBE-SERVICES is
    // rewritten every time.
    step(
        &mut obs,
        &ns,
        "kube-proxy",
        &[("rule_add", "nat", Some("PREROUTING"))],
        || {
            ns.write_stdin(
                &kube_proxy,
                &restore,
                "*nat\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A OUTPUT -j KUBE-SERVICES\nCOMMIT\n",
            )
        },
    );
    for i in 0..SYNCS {
        let svc = format!("KUBE-SVC-OBS{}", i + 2);
        let mut wants: Vec<Want> = vec![("chain_create", "nat", Some(svc.as_str()))];
        let gone = format!("KUBE-SVC-OBS{}", i.wrapping_sub(1));
        if i > 0 {
            wants.push(("chain_delete", "nat", Some(gone.as_str())));
        }
        step(&mut obs, &ns, "kube-proxy", &wants, || {
            ns.write_stdin(&kube_proxy, &restore, &kube_proxy_sync(i))
        });
    }

    // kubelet's canary: deleted and re-created by kubelet itself in mangle, nat and filter.
    for round in 0..3 {
        for table in ["mangle", "nat", "filter"] {
            if round > 0 {
                step(
                    &mut obs,
                    &ns,
                    "kubelet",
                    &[("chain_delete", table, Some("KUBE-KUBELET-CANARY"))],
                    || ns.write(&kubelet, &[ipt, "-t", table, "-X", "KUBE-KUBELET-CANARY"]),
                );
            }
            step(
                &mut obs,
                &ns,
                "kubelet",
                &[("chain_create", table, Some("KUBE-KUBELET-CANARY"))],
                || ns.write(&kubelet, &[ipt, "-t", table, "-N", "KUBE-KUBELET-CANARY"]),
            );
        }
    }

    // The shared chains: kubelet creates them, kube-proxy rewrites them, kubelet again.
    for (chain, rule) in [
        ("KUBE-MARK-MASQ", ["-j", "MARK", "--or-mark", "0x4000"]),
        ("KUBE-POSTROUTING", ["-j", "MARK", "--xor-mark", "0x4000"]),
    ] {
        step(
            &mut obs,
            &ns,
            "kubelet",
            &[("chain_create", "nat", Some(chain))],
            || ns.write(&kubelet, &[ipt, "-t", "nat", "-N", chain]),
        );
        let mut args = vec![ipt, "-t", "nat", "-A", chain];
        args.extend_from_slice(&rule);
        step(
            &mut obs,
            &ns,
            "kubelet",
            &[("rule_add", "nat", Some(chain))],
            || ns.write(&kubelet, &args),
        );
    }
    step(
        &mut obs,
        &ns,
        "kube-proxy",
        &[
            ("rule_add", "nat", Some("KUBE-POSTROUTING")),
            ("rule_add", "nat", Some("POSTROUTING")),
        ],
        || {
            ns.write_stdin(
                &kube_proxy,
                &restore,
                "*nat\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-POSTROUTING - [0:0]\n\
                 -A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n\
                 -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\n\
                 -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n\
                 -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000\n\
                 COMMIT\n",
            )
        },
    );
    step(
        &mut obs,
        &ns,
        "kubelet",
        &[("chain_flush", "nat", Some("KUBE-POSTROUTING"))],
        || ns.write(&kubelet, &[ipt, "-t", "nat", "-F", "KUBE-POSTROUTING"]),
    );
    step(
        &mut obs,
        &ns,
        "kubelet",
        &[("rule_add", "nat", Some("KUBE-POSTROUTING"))],
        || {
            ns.write(
                &kubelet,
                &[
                    ipt,
                    "-t",
                    "nat",
                    "-A",
                    "KUBE-POSTROUTING",
                    "-j",
                    "MARK",
                    "--xor-mark",
                    "0x4000",
                ],
            )
        },
    );

    // An admin: a rule in a built-in chain, a chain of its own, and an nftables table.
    step(
        &mut obs,
        &ns,
        "admin",
        &[("rule_add", "filter", Some("INPUT"))],
        || {
            ns.write(
                &admin,
                &[
                    ipt, "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT",
                ],
            )
        },
    );
    step(
        &mut obs,
        &ns,
        "admin",
        &[("chain_create", "filter", Some("ADMIN-SSH"))],
        || ns.write(&admin, &[ipt, "-N", "ADMIN-SSH"]),
    );
    step(
        &mut obs,
        &ns,
        "admin",
        &[("rule_add", "filter", Some("ADMIN-SSH"))],
        || {
            ns.write(
                &admin,
                &[ipt, "-A", "ADMIN-SSH", "-s", "10.0.0.0/8", "-j", "ACCEPT"],
            )
        },
    );
    step(
        &mut obs,
        &ns,
        "admin",
        &[("rule_add", "filter", Some("INPUT"))],
        || ns.write(&admin, &[ipt, "-I", "INPUT", "-j", "ADMIN-SSH"]),
    );
    step(
        &mut obs,
        &ns,
        "admin",
        &[
            ("chain_create", "admin", Some("input")),
            ("rule_add", "admin", Some("input")),
        ],
        || {
            ns.write(
                &admin,
                &[
                    "nft",
                    "add table inet admin; \
                     add chain inet admin input { type filter hook input priority 0; }; \
                     add rule inet admin input tcp dport 22 accept",
                ],
            )
        },
    );

    // Longer than the mass window: nothing may come late either.
    obs.drain(3000);
    let found = incidents_in(&obs, &ns);
    assert!(
        found.is_empty(),
        "a healthy node produced incidents:\n{}",
        found
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
    obs.stop();
}
