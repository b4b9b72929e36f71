//! The real firewall managers beside observer: Debian's firewalld, run inside a network namespace
//! and a mount namespace of the test's own, on a private D-Bus, with its configuration in a
//! temporary directory. Nothing reaches the host: the test checks the host's ruleset is the same
//! at the end. Each test asserts who observer names (firewalld, not `python3` or `sh`), and which
//! incidents a reload makes against a kube-proxy's chains, or does not make. Needs root.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use test_support::{
    ancestry_comms, copy_dir, in_private_mounts, private_mounts, skip_unless, Bus, Firewalld,
    KilledOnDrop, Netns, Observer, Writer,
};

const WAIT: u64 = 40;

/// The host's rulesets, to prove a test left them alone.
fn host_rulesets() -> String {
    let out = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    // Counters change all the time: keep the rules only.
    let rules = |s: String| {
        s.lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with(':'))
            .map(str::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    };
    format!(
        "{}\n{}\n{}",
        rules(out("iptables-legacy-save", &[])),
        rules(out("iptables-nft-save", &[])),
        out("nft", &["list", "ruleset"])
    )
}

/// Wait for an incident line (any type) matching `pred`.
fn incident(obs: &mut Observer, what: &str, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
    obs.wait_line(what, secs, |v| v["kind"] == "incident" && pred(v))
}

fn in_ns(ns: &Netns) -> impl Fn(&Value) -> bool + '_ {
    move |v: &Value| v["netns"].as_u64() == Some(ns.ino())
}

/// kube-proxy's nat chains, hooked from PREROUTING, through `iptables-legacy-restore`.
const KUBE_PROXY_NAT: &str = "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-WEB - [0:0]\n\
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-WEB\n\
-A KUBE-SVC-WEB -p tcp -j DNAT --to-destination 10.244.1.5:80\nCOMMIT\n";

/// Once firewalld's iptables-backend chains are seen in `ns`, kube-proxy's nat chains are
/// written beside them (legacy) and seen: kube-proxy's writer, to write them again.
fn kube_proxy_beside_firewalld(obs: &mut Observer, ns: &Netns) -> Writer {
    let here = in_ns(ns);
    obs.expect("firewalld's chains", WAIT, |v| {
        here(v) && v["chain"] == "INPUT_direct"
    });
    let kp = Writer::new("kube-proxy");
    ns.write_stdin(
        &kp,
        &["iptables-legacy-restore", "--noflush"],
        KUBE_PROXY_NAT,
    );
    obs.expect("kube-proxy's chain", WAIT, |v| {
        here(v) && v["chain"] == "KUBE-SVC-WEB" && v["op"] == "rule_add"
    });
    kp
}

/// No incident line in `ns`.
fn assert_no_incidents(obs: &Observer, ns: &Netns) {
    let here = in_ns(ns);
    let mine: Vec<&Value> = obs.incidents().into_iter().filter(|v| here(v)).collect();
    assert!(mine.is_empty(), "{mine:#?}");
}

/// Every change in the namespace is named after one of `actors`.
fn assert_actors(obs: &Observer, ns: &Netns, actors: &[&str]) {
    assert_actors_of(obs, &in_ns(ns), actors);
}

/// Every change `pick` takes is named after one of `actors`.
fn assert_actors_of(obs: &Observer, pick: &dyn Fn(&Value) -> bool, actors: &[&str]) {
    let changes = obs.changes();
    let mine: Vec<&Value> = changes.iter().copied().filter(|v| pick(v)).collect();
    assert!(!mine.is_empty(), "no change seen");
    for v in mine {
        let a = v["process"]["actor"].as_str().unwrap_or("");
        assert!(actors.contains(&a), "actor `{a}` of {v}");
    }
}

/// The incident lines in `ns` are exactly one incident of type `ty`, owned by kube-proxy,
/// written by firewalld, on `chains`, in these `states`.
fn assert_incident_lines(obs: &Observer, ns: &Netns, states: &[&str], ty: &str, chains: &[&str]) {
    let here = in_ns(ns);
    let lines: Vec<&Value> = obs.incidents().into_iter().filter(|v| here(v)).collect();
    let got: Vec<&str> = lines.iter().filter_map(|v| v["state"].as_str()).collect();
    assert_eq!(got, states, "{lines:#?}");
    for v in &lines {
        assert_eq!(v["id"], lines[0]["id"], "{lines:#?}");
        assert_eq!(v["type"], ty, "{v}");
        assert_eq!(v["owner"], "kube-proxy", "{v}");
        assert_eq!(v["actors"], serde_json::json!(["firewalld"]), "{v}");
        assert_eq!(v["chains"], serde_json::json!(chains), "{v}");
    }
}

#[test]
fn firewalld_iptables_backend_reloads_are_firewallds_and_each_wipe_is_its_own_incident() {
    skip_unless!(
        "ip",
        "iptables-legacy-restore",
        "firewalld",
        "firewall-cmd",
        "dbus-daemon"
    );
    let host_before = host_rulesets();
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("fwd-ipt");
    let here = in_ns(&ns);
    let fw = Firewalld::start(&ns, "iptables", true);
    let kp = kube_proxy_beside_firewalld(&mut obs, &ns);

    // A reload wipes every table, kube-proxy's chains with them.
    fw.must(&["--reload"]);
    let first = incident(&mut obs, "the first reload's incident", WAIT, |v| {
        here(v) && v["owner"] == "kube-proxy" && v["state"] == "open"
    });
    assert!(
        first["actors"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "firewalld")),
        "{first}"
    );
    // kube-proxy puts them back: resolved.
    ns.write_stdin(
        &kp,
        &["iptables-legacy-restore", "--noflush"],
        KUBE_PROXY_NAT,
    );
    incident(&mut obs, "the first incident resolved", WAIT, |v| {
        v["id"] == first["id"] && v["state"] == "resolved"
    });
    // Exactly these lines so far: one foreign_delete, opened and resolved.
    assert_incident_lines(
        &obs,
        &ns,
        &["open", "resolved"],
        "foreign_delete",
        &["KUBE-SERVICES", "KUBE-SVC-WEB"],
    );
    // observer restarts in the middle: the owners come from the catalog and the rulesets.
    obs.stop();
    let mut obs = Observer::start(&[]);
    // A second reload opens it again: kube-proxy is not "repaired" any more.
    let mark = obs.mark();
    fw.must(&["--reload"]);
    let second = obs.wait_line_since(mark, "the second reload's incident", WAIT, |v| {
        v["kind"] == "incident" && here(v) && v["owner"] == "kube-proxy" && v["state"] == "open"
    });
    assert!(
        second["owners"]
            .as_array()
            .is_none_or(|o| o.iter().all(|x| x["repaired"] != true)),
        "a second wipe inherits no repair: {second}"
    );
    // kube-proxy repairs; a complete reload (firewalld also reloads its modules) wipes again.
    ns.write_stdin(
        &kp,
        &["iptables-legacy-restore", "--noflush"],
        KUBE_PROXY_NAT,
    );
    obs.wait_line_since(mark, "the second incident resolved", WAIT, |v| {
        v["kind"] == "incident" && here(v) && v["owner"] == "kube-proxy" && v["state"] == "resolved"
    });
    let mark = obs.mark();
    fw.must(&["--complete-reload"]);
    obs.wait_line_since(mark, "the complete reload's incident", WAIT, |v| {
        v["kind"] == "incident" && here(v) && v["owner"] == "kube-proxy" && v["state"] == "open"
    });
    // A direct rule is firewalld's too.
    fw.must(&[
        "--direct",
        "--add-rule",
        "ipv4",
        "filter",
        "INPUT",
        "0",
        "-p",
        "tcp",
        "--dport",
        "9999",
        "-j",
        "ACCEPT",
    ]);
    obs.expect("the direct rule", WAIT, |v| {
        here(v)
            && v["chain"] == "INPUT_direct"
            && v["rule"].as_str().is_some_and(|r| r.contains("9999"))
    });
    // Nothing named after a shell, an interpreter or nobody.
    assert_actors(&obs, &ns, &["firewalld", "kube-proxy"]);
    // No incident blames kube-proxy for firewalld's chains, nor firewalld for its own.
    for i in obs.incidents().into_iter().filter(|v| here(v)) {
        assert_ne!(i["owner"], "firewalld", "{i}");
    }
    // Exactly these incident lines after the restart: the second reload's foreign_delete of
    // kube-proxy's chains by firewalld, resolved by kube-proxy, opened again by the complete
    // reload (its owner back to not repaired); nothing else.
    assert_incident_lines(
        &obs,
        &ns,
        &["open", "resolved", "open"],
        "foreign_delete",
        &["KUBE-SERVICES", "KUBE-SVC-WEB"],
    );
    drop(fw);
    obs.stop();
    assert_eq!(host_rulesets(), host_before, "the host's ruleset changed");
}

/// A bus of the test's own that observer watches from the start, then firewalld on it in a
/// namespace `name` (see [`Firewalld::start_on`]).
fn firewalld_on_a_watched_bus(
    name: &str,
    backend: &str,
    legacy: bool,
) -> (Observer, Netns, Firewalld) {
    let dir = tempfile::tempdir().expect("tempdir");
    let bus = Bus::start(dir.path());
    let obs = Observer::start(&["--system-bus", &bus.address]);
    let ns = Netns::new(name);
    let fw = Firewalld::start_on(&ns, backend, legacy, dir, bus);
    (obs, ns, fw)
}

/// A script named `compliance-job` that runs `firewall-cmd ARGS` on `fw`'s bus (not through
/// exec: the job stays firewall-cmd's parent, as a real job's shell does).
fn compliance_job(fw: &Firewalld, dir: &Path, args: &str) {
    let script = dir.join("compliance-job");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nfirewall-cmd {args}\nexit $?\n"),
    )
    .expect("write the job");
    let mut perm = std::fs::metadata(&script).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&script, perm).expect("chmod");
    let out = Command::new(&script)
        .env("DBUS_SYSTEM_BUS_ADDRESS", &fw.bus.address)
        .output()
        .expect("run the job");
    assert!(out.status.success(), "compliance-job {args}: {out:?}");
}

/// firewalld's changes name who asked for them over D-Bus: a reload run by a compliance job
/// wipes kube-proxy's chains, and the incident names the job through firewall-cmd; a direct
/// rule carries the caller; what firewalld does on its own (its start-up) carries none.
#[test]
fn firewalld_changes_name_the_caller_behind_them_on_the_bus() {
    skip_unless!(
        "ip",
        "iptables-legacy-restore",
        "firewalld",
        "firewall-cmd",
        "dbus-daemon"
    );
    let host_before = host_rulesets();
    let (mut obs, ns, fw) = firewalld_on_a_watched_bus("fwd-bus", "iptables", true);
    let here = in_ns(&ns);
    let jobs = tempfile::tempdir().expect("tempdir");
    kube_proxy_beside_firewalld(&mut obs, &ns);
    // firewalld's start-up was its own doing.
    let own: Vec<&Value> = obs
        .changes()
        .into_iter()
        .filter(|v| here(v) && v["process"]["actor"] == "firewalld")
        .collect();
    assert!(!own.is_empty(), "firewalld's start-up was not seen");
    for v in &own {
        assert!(v["process"].get("requested_by").is_none(), "{v}");
    }

    let mark = obs.mark();
    compliance_job(&fw, jobs.path(), "--reload");
    let wipe = obs.wait_line_since(mark, "the reload's incident", WAIT, |v| {
        v["kind"] == "incident" && here(v) && v["owner"] == "kube-proxy" && v["state"] == "open"
    });
    assert_eq!(wipe["actors"][0], "firewall-cmd (via firewalld)", "{wipe}");
    assert_eq!(wipe["requested_by"]["comm"], "firewall-cmd", "{wipe}");
    assert_eq!(wipe["requested_by"]["actor"], "compliance-job", "{wipe}");
    assert_eq!(
        wipe["requested_by"]["method"], "org.fedoraproject.FirewallD1.reload",
        "{wipe}"
    );
    let summary = wipe["summary"].as_str().unwrap_or("");
    assert!(
        summary.contains("Asked by firewall-cmd") && summary.contains("run by compliance-job"),
        "{wipe}"
    );
    // Each change of the wipe names the caller, its job in the caller's ancestry.
    let deleted = obs.expect("KUBE-SVC-WEB deleted", WAIT, |v| {
        here(v) && v["chain"] == "KUBE-SVC-WEB" && v["op"] == "chain_delete"
    });
    let by = &deleted["process"]["requested_by"];
    assert_eq!(by["comm"], "firewall-cmd", "{deleted}");
    assert!(
        by["ancestry"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["comm"] == "compliance-job")),
        "{deleted}"
    );
    assert_eq!(deleted["process"]["actor"], "firewalld", "{deleted}");

    // A direct rule, asked for by firewall-cmd from this test (no job around it).
    let mark = obs.mark();
    fw.must(&[
        "--direct",
        "--add-rule",
        "ipv4",
        "filter",
        "INPUT",
        "0",
        "-p",
        "tcp",
        "--dport",
        "9998",
        "-j",
        "ACCEPT",
    ]);
    let direct = obs.wait_line_since(mark, "the direct rule", WAIT, |v| {
        here(v)
            && v["kind"] == "change"
            && v["chain"] == "INPUT_direct"
            && v["rule"].as_str().is_some_and(|r| r.contains("9998"))
    });
    assert_eq!(
        direct["process"]["requested_by"]["method"], "org.fedoraproject.FirewallD1.direct.addRule",
        "{direct}"
    );
    // doctor says whether the bus can be monitored, and that no bus at all loses nothing.
    let bus_check = |address: &str| -> Value {
        let out = Command::new(test_support::observer_bin())
            .args(["doctor", "--json", "--system-bus", address])
            .output()
            .expect("run observer doctor");
        let report: Value = serde_json::from_slice(&out.stdout).expect("doctor --json");
        report["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == "system_bus").cloned())
            .unwrap_or_else(|| panic!("no system_bus check: {report}"))
    };
    let here_bus = bus_check(&fw.bus.address);
    assert_eq!(here_bus["ok"], true, "{here_bus}");
    assert!(
        here_bus["detail"]
            .as_str()
            .is_some_and(|d| d.contains("can be monitored")),
        "{here_bus}"
    );
    let none = bus_check("unix:path=/nonexistent/bus.sock");
    assert_eq!(none["ok"], true, "{none}");
    assert!(
        none["detail"]
            .as_str()
            .is_some_and(|d| d.contains("no system bus")),
        "{none}"
    );
    drop(fw);
    obs.stop();
    assert_eq!(host_rulesets(), host_before, "the host's ruleset changed");
}

/// On the nftables backend firewalld writes through libnftables in its own process: a port
/// opened by a job's `firewall-cmd` is that job's request too.
#[test]
fn firewalld_nftables_backend_changes_name_their_caller() {
    skip_unless!("ip", "nft", "firewalld", "firewall-cmd", "dbus-daemon");
    let host_before = host_rulesets();
    let (mut obs, ns, fw) = firewalld_on_a_watched_bus("fwd-bus-nft", "nftables", false);
    let here = in_ns(&ns);
    let jobs = tempfile::tempdir().expect("tempdir");
    let mark = obs.mark();
    compliance_job(&fw, jobs.path(), "--add-port 4444/tcp");
    let port = obs.wait_line_since(mark, "the port's rule", WAIT, |v| {
        here(v)
            && v["kind"] == "change"
            && v["op"] == "rule_add"
            && v["rule"].as_str().is_some_and(|r| r.contains("4444"))
    });
    assert_eq!(port["process"]["comm"], "firewalld", "{port}");
    let by = &port["process"]["requested_by"];
    assert_eq!(by["comm"], "firewall-cmd", "{port}");
    assert_eq!(by["actor"], "compliance-job", "{port}");
    assert_eq!(
        by["method"], "org.fedoraproject.FirewallD1.zone.addPort",
        "{port}"
    );
    drop(fw);
    obs.stop();
    assert_eq!(host_rulesets(), host_before, "the host's ruleset changed");
}

#[test]
fn firewalld_nftables_backend_owns_its_table_and_leaves_others_alone() {
    skip_unless!("ip", "nft", "firewalld", "firewall-cmd", "dbus-daemon");
    let host_before = host_rulesets();
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("fwd-nft");
    let here = in_ns(&ns);
    let fw = Firewalld::start(&ns, "nftables", false);
    obs.expect("firewalld's table", WAIT, |v| {
        here(v) && v["table"] == "firewalld" && v["op"] == "chain_create"
    });
    // kube-proxy in nftables mode: a table of its own.
    let kp = Writer::new("kube-proxy");
    ns.write_stdin(
        &kp,
        &["nft", "-f", "-"],
        "table ip kube-proxy {\n chain services {\n  ip daddr 10.96.0.10 tcp dport 80 accept\n }\n}\n",
    );
    obs.expect("kube-proxy's table", WAIT, |v| {
        here(v) && v["table"] == "kube-proxy" && v["op"] == "rule_add"
    });
    obs.drain(500);
    assert_actors(&obs, &ns, &["firewalld", "kube-proxy"]);
    // observer restarts: both tables' owners come from the catalog.
    obs.stop();
    let mut obs = Observer::start(&[]);
    fw.must(&["--reload"]);
    fw.must(&["--reload"]);
    fw.must(&["--add-port=8080/tcp"]);
    obs.expect("the port rule", WAIT, |v| {
        here(v)
            && v["table"] == "firewalld"
            && v["rule"].as_str().is_some_and(|r| r.contains("8080"))
    });
    obs.drain(1000);
    assert_actors(&obs, &ns, &["firewalld", "kube-proxy"]);
    // The reloads rebuilt only firewalld's table: no incident at all.
    assert_no_incidents(&obs, &ns);
    // Someone else deleting a chain of firewalld's table is firewalld's problem, whatever its
    // name.
    let admin = Writer::new("obs-admin");
    let chain = obs
        .changes()
        .iter()
        .filter(|v| here(v) && v["table"] == "firewalld" && v["op"] == "chain_create")
        .filter_map(|v| v["chain"].as_str().map(str::to_string))
        .find(|c| c.starts_with("filter_IN_public"))
        .expect("a zone chain");
    ns.write(
        &admin,
        &["nft", "flush", "chain", "inet", "firewalld", &chain],
    );
    let i = incident(&mut obs, "a flush of firewalld's chain", WAIT, |v| here(v));
    assert_eq!(i["owner"], "firewalld", "{i}");
    obs.drain(1000);
    // Exactly that incident: one id, foreign_flush of that chain by the admin.
    let mine: Vec<&Value> = obs.incidents().into_iter().filter(|v| here(v)).collect();
    assert!(mine.iter().all(|v| v["id"] == i["id"]), "{mine:#?}");
    assert_eq!(i["type"], "foreign_flush", "{i}");
    assert_eq!(i["chains"], serde_json::json!([chain]), "{i}");
    assert_eq!(i["actors"], serde_json::json!(["obs-admin"]), "{i}");
    drop(fw);
    obs.stop();
    assert_eq!(host_rulesets(), host_before, "the host's ruleset changed");
}

#[test]
fn ufw_and_its_init_script_are_one_owner_and_never_a_conflict() {
    skip_unless!("ip", "iptables-legacy", "ufw");
    let host_before = host_rulesets();
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("ufw");
    let here = in_ns(&ns);
    let dir = tempfile::tempdir().expect("tempdir");
    let etc = copy_dir("/etc/ufw", dir.path(), "etc");
    let lib = copy_dir("/lib/ufw", dir.path(), "lib");
    let setup = private_mounts(&[(&etc, "/etc/ufw"), (&lib, "/lib/ufw")], true);
    let ufw = |commands: &str| {
        let out = in_private_mounts(&ns, &setup, commands)
            .output()
            .expect("run ufw");
        assert!(out.status.success(), "ufw: {out:?}");
    };
    ufw("ufw --force enable && ufw allow 22/tcp");
    obs.expect("ufw's chains", WAIT, |v| {
        here(v) && v["chain"] == "ufw-user-input" && v["op"] == "rule_add"
    });
    obs.drain(1000);
    assert_no_incidents(&obs, &ns);
    assert_actors(&obs, &ns, &["ufw", "ufw-init"]);
    // observer restarts: ufw's chains are known from the catalog; its reload and disable flush
    // and delete them, which is ufw on its own chains.
    obs.stop();
    let mut obs = Observer::start(&[]);
    ufw("ufw reload && ufw disable");
    obs.expect("ufw's reload", WAIT, |v| {
        here(v) && v["chain"] == "ufw-user-input" && v["op"] == "rule_add"
    });
    obs.drain(1500);
    // The python front end (`ufw`) and its init script (`ufw-init`) write, never a shell.
    assert_actors(&obs, &ns, &["ufw", "ufw-init"]);
    for a in ["ufw", "ufw-init"] {
        assert!(
            obs.changes()
                .iter()
                .any(|v| here(v) && v["process"]["actor"] == a),
            "no change by {a}"
        );
    }
    // ufw-init flushing what ufw wrote is ufw on its own chains: no incident.
    assert_no_incidents(&obs, &ns);
    obs.stop();
    assert_eq!(host_rulesets(), host_before, "the host's ruleset changed");
}

/// How a fail2ban action shows a ban, an unban, and the jail's stop.
struct Steps {
    ban: fn(&Value) -> bool,
    unban: fn(&Value) -> bool,
    stop: fn(&Value) -> bool,
}

/// fail2ban with `banaction`: ban, unban, stop, each seen; the actor is fail2ban-server through
/// `sh -c` and from its action threads; no incident; the host untouched.
fn fail2ban_scenario(tag: &str, banaction: &str, steps: Steps) {
    let host_before = host_rulesets();
    let mut obs = Observer::start(&[]);
    let ns = Netns::new(tag);
    let here = in_ns(&ns);
    let dir = tempfile::tempdir().expect("tempdir");
    let etc = copy_dir("/etc/fail2ban", dir.path(), "etc");
    let auth_log = dir.path().join("auth.log");
    std::fs::write(&auth_log, "").expect("auth.log");
    let sock = dir.path().join("f2b.sock");
    std::fs::write(
        etc.join("fail2ban.local"),
        format!(
            "[Definition]\nlogtarget = {}\nsocket = {}\npidfile = {}\ndbfile = :memory:\n",
            dir.path().join("f2b.log").display(),
            sock.display(),
            dir.path().join("f2b.pid").display()
        ),
    )
    .expect("fail2ban.local");
    for e in std::fs::read_dir(etc.join("jail.d"))
        .expect("jail.d")
        .flatten()
    {
        let _ = std::fs::remove_file(e.path());
    }
    std::fs::write(
        etc.join("jail.local"),
        format!(
            "[DEFAULT]\nbanaction = {banaction}\nbackend = polling\n\n\
             [sshd]\nenabled = true\nport = 22\nlogpath = {}\n",
            auth_log.display()
        ),
    )
    .expect("jail.local");
    let setup = private_mounts(&[], true);
    let mut server = KilledOnDrop(
        in_private_mounts(
            &ns,
            &setup,
            &format!("exec fail2ban-server -c {} -f -x", etc.display()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start fail2ban-server"),
    );
    let client = |args: &[&str]| -> bool {
        Command::new("timeout")
            .arg("30")
            .arg("fail2ban-client")
            .args(["-c", etc.to_str().expect("utf-8")])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let deadline = Instant::now() + Duration::from_secs(WAIT);
    while !client(&["status", "sshd"]) {
        assert!(Instant::now() < deadline, "fail2ban-server did not start");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(client(&["set", "sshd", "banip", "192.0.2.7"]));
    obs.expect("the ban", WAIT, |v| here(v) && (steps.ban)(v));
    // observer restarts between the ban and the unban: fail2ban's chains and tables are known
    // from the catalog.
    obs.drain(500);
    assert_actors(&obs, &ns, &["fail2ban-server"]);
    assert_no_incidents(&obs, &ns);
    obs.stop();
    let mut obs = Observer::start(&[]);
    assert!(client(&["set", "sshd", "unbanip", "192.0.2.7"]));
    obs.expect("the unban", WAIT, |v| here(v) && (steps.unban)(v));
    // Stopping runs the jail's stop action on its action thread (`f2b/a.sshd`).
    assert!(client(&["stop"]));
    let stopped = obs.expect("the jail's stop", WAIT, |v| here(v) && (steps.stop)(v));
    let _ = server.0.wait();
    obs.drain(1000);
    // Through `sh -c` and from any of its threads: fail2ban-server, never `sh`.
    assert_actors(&obs, &ns, &["fail2ban-server"]);
    let v = stopped;
    let ancestry = ancestry_comms(&v);
    // The way to the actor, then what is above it (the test that started the server).
    assert_eq!(
        ancestry.get(..2),
        Some(&["sh", "fail2ban-server"][..]),
        "{v}"
    );
    // fail2ban removing its own chain is no incident.
    assert_no_incidents(&obs, &ns);
    obs.stop();
    assert_eq!(host_rulesets(), host_before, "the host's ruleset changed");
}

#[test]
fn fail2ban_bans_through_its_iptables_action_are_fail2bans() {
    skip_unless!(
        "ip",
        "iptables-legacy",
        "fail2ban-server",
        "fail2ban-client"
    );
    fail2ban_scenario(
        "f2b-ipt",
        "iptables-multiport",
        Steps {
            ban: |v| {
                v["chain"] == "f2b-sshd"
                    && v["op"] == "rule_add"
                    && v["rule"].as_str().is_some_and(|r| r.contains("192.0.2.7"))
            },
            unban: |v| v["chain"] == "f2b-sshd" && v["op"] == "rule_delete",
            // Run on its action thread (`f2b/a.sshd`).
            stop: |v| v["chain"] == "f2b-sshd" && v["op"] == "chain_delete",
        },
    );
}

#[test]
fn fail2ban_bans_through_its_nftables_action_are_fail2bans() {
    skip_unless!("ip", "nft", "fail2ban-server", "fail2ban-client");
    fail2ban_scenario(
        "f2b-nft",
        "nftables-multiport",
        Steps {
            ban: |v| {
                v["table"] == "f2b-table"
                    && v["op"] == "element_add"
                    && v["rule"].as_str().is_some_and(|d| d.contains("192.0.2.7"))
            },
            // The set's only element, deleted (not the set flushed: the request says which).
            unban: |v| {
                v["table"] == "f2b-table"
                    && v["op"] == "element_delete"
                    && v["rule"].as_str().is_some_and(|r| r.contains("192.0.2.7"))
            },
            stop: |v| {
                v["table"] == "f2b-table"
                    && (v["op"] == "set_delete"
                        || v["op"] == "chain_delete"
                        || v["op"] == "table_delete")
            },
        },
    );
}

/// Debian's docker client (docker.io); another `docker` may come first in PATH.
const DOCKER: &str = "/usr/bin/docker";

/// dockerd in `ns` with its own data and state directories (no bridge: the kernel's bridge
/// module may be missing; docker sets up its chains anyway), on `bus` when given (it then hands
/// its rules to firewalld).
struct Dockerd {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Dockerd {
    fn start(ns: &Netns, bus: Option<&Bus>) -> Dockerd {
        Dockerd::start_with(ns, bus, false, true)
    }

    /// With `bridge`, docker's default bridge network (docker0 in `ns`), for containers with
    /// published ports; the host's cgroup hierarchy stays visible under the namespace's /sys,
    /// where runc puts the containers. With `legacy`, its `iptables` is iptables-legacy, else
    /// Debian's default, iptables-nft.
    fn start_with(ns: &Netns, bus: Option<&Bus>, bridge: bool, legacy: bool) -> Dockerd {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let mut setup = private_mounts(&[], legacy);
        if bridge {
            let keep = d.join("cgroup");
            std::fs::create_dir_all(&keep).expect("mkdir");
            setup = setup.replace(
                "mount -t sysfs sysfs /sys && ",
                &format!(
                    "mount --rbind /sys/fs/cgroup {k} && mount -t sysfs sysfs /sys && \
                     mount --move {k} /sys/fs/cgroup && ip link set lo up && ",
                    k = keep.display()
                ),
            );
        }
        let mut c = in_private_mounts(
            ns,
            &setup,
            &format!(
                "exec dockerd --data-root {d}/data --exec-root {d}/exec --pidfile {d}/pid \
                 -H unix://{d}/sock --iptables=true{}",
                if bridge { "" } else { " --bridge=none" },
                d = d.display()
            ),
        );
        if let Some(b) = bus {
            c.env("DBUS_SYSTEM_BUS_ADDRESS", &b.address);
        }
        let child = c
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dockerd");
        let sock = d.join("sock");
        let deadline = Instant::now() + Duration::from_secs(WAIT);
        while !sock.exists() {
            assert!(Instant::now() < deadline, "dockerd did not start");
            std::thread::sleep(Duration::from_millis(200));
        }
        Dockerd { child, _dir: dir }
    }

    /// Debian's docker client on this daemon's socket.
    fn client(&self, args: &[&str]) -> std::process::Output {
        Command::new(DOCKER)
            .arg("-H")
            .arg(format!(
                "unix://{}",
                self._dir.path().join("sock").display()
            ))
            .args(args)
            .output()
            .expect("run docker")
    }

    fn must(&self, args: &[&str]) -> String {
        let out = self.client(args);
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// SIGTERM, as systemd stops it.
    fn stop(mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn dockerd_alone_and_through_firewalld_makes_no_false_incident() {
    skip_unless!(
        "ip",
        "iptables-legacy",
        "dockerd",
        "firewalld",
        "firewall-cmd",
        "dbus-daemon"
    );
    let host_before = host_rulesets();
    let mut obs = Observer::start(&[]);
    // dockerd alone: it runs iptables itself.
    let ns = Netns::new("docker");
    let here = in_ns(&ns);
    let d = Dockerd::start(&ns, None);
    let v = obs.expect("docker's isolation chain", WAIT, |v| {
        here(v) && v["chain"] == "DOCKER-ISOLATION-STAGE-1" && v["op"] == "chain_create"
    });
    assert_eq!(v["process"]["actor"], "dockerd", "{v}");
    d.stop();
    let d = Dockerd::start(&ns, None);
    obs.drain(1500);
    d.stop();
    assert_actors(&obs, &ns, &["dockerd"]);
    assert_no_incidents(&obs, &ns);
    // observer restarts with docker's chains in place: known from the catalog.
    obs.stop();
    let mut obs = Observer::start(&[]);
    let d = Dockerd::start(&ns, None);
    obs.drain(1500);
    d.stop();
    // On a firewalld host docker hands its rules to firewalld, which writes docker's chains.
    let ns2 = Netns::new("docker-fwd");
    let here2 = in_ns(&ns2);
    let fw = Firewalld::start(&ns2, "iptables", true);
    let d = Dockerd::start(&ns2, Some(&fw.bus));
    obs.expect("docker's chain through firewalld", WAIT, |v| {
        here2(v) && v["chain"] == "DOCKER-USER" && v["op"] == "chain_create"
    });
    fw.must(&["--reload"]);
    obs.drain(2000);
    d.stop();
    drop(fw);
    assert_actors(&obs, &ns2, &["firewalld", "dockerd"]);
    // Docker's chains are written by firewalld there (its passthrough interface).
    assert!(
        obs.changes().iter().any(|v| here2(v)
            && v["chain"].as_str().is_some_and(|c| c.starts_with("DOCKER"))
            && v["process"]["actor"] == "firewalld"),
        "no docker chain written by firewalld"
    );
    let false_alarms: Vec<&Value> = obs
        .incidents()
        .into_iter()
        .filter(|v| {
            here(v)
                || (here2(v)
                    && v["actors"]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|x| x == "firewalld"))
                    && v["owner"] == "dockerd")
        })
        .collect();
    assert!(false_alarms.is_empty(), "{false_alarms:#?}");
    obs.stop();
    assert_eq!(host_rulesets(), host_before, "the host's ruleset changed");
}

#[test]
fn dockerd_publishes_a_containers_port_and_only_dockerd_writes() {
    skip_unless!("ip", "iptables-legacy", "dockerd", "busybox");
    if !Path::new(DOCKER).exists() {
        test_support::skip(format!("{DOCKER} (Debian's docker.io) is missing"));
        return;
    }
    let host_before = host_rulesets();
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("docker-port");
    let here = in_ns(&ns);
    let d = Dockerd::start_with(&ns, None, true, true);
    obs.expect("docker's nat chain", WAIT, |v| {
        here(v) && v["chain"] == "DOCKER" && v["table"] == "nat" && v["op"] == "chain_create"
    });
    let _image = busybox_image(&d);
    // observer restarts with docker's chains in place: known from the catalog.
    obs.drain(500);
    obs.stop();
    let mut obs = Observer::start(&[]);
    let cgroup_parent = format!("/obs-docker-test-{}", std::process::id());
    run_web(&d, &cgroup_parent);
    expect_dnat(&mut obs, &ns);
    d.must(&["rm", "-f", "web"]);
    obs.expect("the DNAT rule removed", WAIT, |v| {
        here(v)
            && v["chain"] == "DOCKER"
            && v["op"] == "rule_delete"
            && v["rule"]
                .as_str()
                .is_some_and(|r| r.contains("--dport 8080"))
    });
    obs.drain(1000);
    d.stop();
    obs.drain(1000);
    assert_actors(&obs, &ns, &["dockerd"]);
    // docker on its own chains: no incident, before or after the restart.
    assert_no_incidents(&obs, &ns);
    obs.stop();
    remove_cgroup(&cgroup_parent);
    assert_eq!(host_rulesets(), host_before, "the host's ruleset changed");
}

/// firewalld's iptables backend on Debian's default iptables, iptables-nft: every IPv4 rule it
/// writes reads in observer's lines as `iptables-nft-save` prints it, in order, after its start
/// and after a reload (which rewrites everything); firewalld is the only writer, and its own
/// reload is no incident.
#[test]
fn firewalld_iptables_backend_through_iptables_nft_reads_as_iptables_nft_save_prints_it() {
    skip_unless!(
        "ip",
        "iptables-nft-save",
        "ip6tables-nft-save",
        "firewalld",
        "firewall-cmd",
        "dbus-daemon"
    );
    let host_before = host_rulesets();
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("fwd-iptnft");
    let here = in_ns(&ns);
    let fw = Firewalld::start(&ns, "iptables", false);
    obs.expect("firewalld's chains, through iptables-nft", WAIT, |v| {
        here(v) && v["backend"] == "nft" && v["chain"] == "INPUT_direct"
    });
    obs.drain(2000);
    let started = assert_rules_read_as_saved(&mut obs, &ns, "after firewalld started");
    assert!(started >= 20, "only {started} rules compared");
    fw.must(&["--reload"]);
    obs.drain(3000);
    let reloaded = assert_rules_read_as_saved(&mut obs, &ns, "after a reload");
    assert_eq!(reloaded, started, "a reload writes the same rules again");
    drop(fw);
    obs.drain(1000);
    assert_actors(&obs, &ns, &["firewalld"]);
    assert_no_incidents(&obs, &ns);
    obs.stop();
    eprintln!("firewalld's iptables backend through iptables-nft: {started} rules identical to iptables-nft-save, {reloaded} after a reload");
    assert_eq!(host_rulesets(), host_before, "the host's ruleset changed");
}

/// One rule event `xtables-monitor -e` printed: `add` (`-A`, `-I`) or `delete` (`-D`), table,
/// chain and rule text.
fn monitor_event(line: &str) -> Option<(String, String, String, String)> {
    let rest = line.trim_start().strip_prefix("EVENT: -")?;
    let (_family, rest) = rest.split_once(" -t ")?;
    let (table, rest) = rest.split_once(' ')?;
    let (op, rest) = rest.split_once(' ')?;
    if !["-A", "-D", "-I"].contains(&op) {
        return None;
    }
    let (chain, rule) = rest.split_once(' ').unwrap_or((rest, ""));
    let op = if op == "-D" { "delete" } else { "add" };
    Some((op.into(), table.into(), chain.into(), rule.into()))
}

/// Side by side with `xtables-monitor -e`, iptables' own event monitor, on the same changes:
/// every rule it prints, observer prints with the same text, table and chain; observer names
/// the writer where the monitor says only `iptables-nft` and its pid. Two rules the monitor
/// cannot parse (and stops at), observer prints: an IPv6 tcp REJECT as `ip6tables-nft-save` does,
/// and a rule `nft` wrote into an iptables-nft table in nft syntax, saying why iptables-nft
/// cannot read it back.
#[test]
fn xtables_monitor_and_observer_print_the_same_rules_and_observer_names_the_writer() {
    skip_unless!(
        "ip",
        "iptables-nft",
        "ip6tables-nft",
        "xtables-monitor",
        "nft",
        "stdbuf"
    );
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("xtmon");
    let here = in_ns(&ns);
    let writer = Writer::new("xtmonwriter");
    // A change made the instant a namespace appears may predate observer's subscription to it
    // (then it is reported `replayed`, without its writer): this first one waits for that, and
    // the writer is checked on every change after it.
    ns.write(&writer, &["nft", "add", "table", "inet", "first"]);
    let first = obs.expect("the first change", WAIT, |v| {
        here(v) && v["table"] == "first"
    });
    let mut monitor = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns.name(),
            "stdbuf",
            "-oL",
            "xtables-monitor",
            "-e",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start xtables-monitor");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let out = monitor.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // The monitor subscribes as it starts: a first change, waited for, says it listens.
    let wait_monitor = |what: &str, pred: &dyn Fn(&str) -> bool, seen: &mut Vec<String>| {
        let deadline = Instant::now() + Duration::from_secs(WAIT);
        while !seen.iter().any(|l| pred(l)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) => seen.push(l),
                Err(_) => panic!("xtables-monitor printed no {what}:\n{}", seen.join("\n")),
            }
        }
    };
    let mut printed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(WAIT);
    loop {
        ns.write(&writer, &["iptables-nft", "-N", "XTMON"]);
        let got = rx.recv_timeout(Duration::from_secs(1));
        if let Ok(l) = got {
            printed.push(l);
            break;
        }
        assert!(Instant::now() < deadline, "xtables-monitor printed nothing");
        ns.write(&writer, &["iptables-nft", "-X", "XTMON"]);
    }
    let commands: &[&[&str]] = &[
        &[
            "iptables-nft",
            "-A",
            "XTMON",
            "-p",
            "tcp",
            "--dport",
            "80",
            "-m",
            "comment",
            "--comment",
            "a \"quoted\" word",
            "-j",
            "ACCEPT",
        ],
        &[
            "iptables-nft",
            "-A",
            "XTMON",
            "-s",
            "10.0.0.0/8",
            "-i",
            "eth+",
            "-m",
            "conntrack",
            "--ctstate",
            "ESTABLISHED,RELATED",
            "-j",
            "RETURN",
        ],
        &[
            "iptables-nft",
            "-I",
            "XTMON",
            "-p",
            "udp",
            "-m",
            "multiport",
            "--dports",
            "53,5353",
            "-j",
            "DROP",
        ],
        &["iptables-nft", "-t", "nat", "-N", "XTMON-DNAT"],
        &[
            "iptables-nft",
            "-t",
            "nat",
            "-A",
            "XTMON-DNAT",
            "-p",
            "tcp",
            "-m",
            "tcp",
            "--dport",
            "8080",
            "-j",
            "DNAT",
            "--to-destination",
            "10.244.1.5:80",
        ],
        &[
            "ip6tables-nft",
            "-A",
            "INPUT",
            "-s",
            "2001:db8::/32",
            "-j",
            "DROP",
        ],
        &["iptables-nft", "-D", "XTMON", "1"],
    ];
    for c in commands {
        ns.write(&writer, c);
    }
    // Its last rule event, then two it cannot print (it stops at the first): 1.8.9's monitor
    // does not parse an IPv6 rule with a tcp match, nor a rule nft wrote.
    wait_monitor(
        "delete of the multiport rule",
        &|l: &str| l.contains("-D XTMON") && l.contains("multiport"),
        &mut printed,
    );
    ns.write(
        &writer,
        &[
            "ip6tables-nft",
            "-A",
            "INPUT",
            "-p",
            "tcp",
            "--dport",
            "444",
            "-j",
            "REJECT",
            "--reject-with",
            "tcp-reset",
        ],
    );
    let reject = obs.expect("the IPv6 REJECT rule", WAIT, |v| {
        here(v)
            && v["op"] == "rule_add"
            && v["family"] == "ip6"
            && v["rule"]
                .as_str()
                .is_some_and(|r| r.contains("--dport 444"))
    });
    let saved6 = ns.read(&["ip6tables-nft-save", "-t", "filter"]);
    let want = saved6
        .lines()
        .find(|l| l.contains("--dport 444"))
        .and_then(|l| l.strip_prefix("-A INPUT "))
        .unwrap_or_else(|| panic!("no REJECT rule in ip6tables-nft-save:\n{saved6}"));
    assert_eq!(reject["rule"], want, "{reject}");
    assert_eq!(reject["rule_syntax"], "iptables", "{reject}");
    // Written by nft into the iptables-nft table: iptables-nft cannot read it back.
    ns.write(
        &writer,
        &[
            "nft", "add", "rule", "ip", "filter", "XTMON", "ct", "mark", "0x1", "accept",
        ],
    );
    let unreadable = obs.expect("the rule nft wrote", WAIT, |v| {
        here(v) && v["op"] == "rule_add" && v["chain"] == "XTMON" && v["rule_syntax"] == "nft"
    });
    assert!(
        unreadable["iptables_unreadable"]
            .as_str()
            .is_some_and(|w| !w.is_empty()),
        "{unreadable}"
    );
    assert!(
        unreadable["rule"]
            .as_str()
            .is_some_and(|r| r.contains("ct mark")),
        "{unreadable}"
    );
    obs.drain(1000);
    let _ = monitor.kill();
    let _ = monitor.wait();
    while let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
        printed.push(l);
    }
    let from_monitor: Vec<(String, String, String, String)> =
        printed.iter().filter_map(|l| monitor_event(l)).collect();
    let ours: Vec<(String, String, String, String)> = obs
        .changes()
        .into_iter()
        .filter(|v| {
            here(v)
                && v["rule_syntax"] == "iptables"
                && (v["op"] == "rule_add" || v["op"] == "rule_delete")
                && v["seq"] != reject["seq"]
        })
        .map(|v| {
            let op = if v["op"] == "rule_delete" {
                "delete"
            } else {
                "add"
            };
            (
                op.to_string(),
                v["table"].as_str().unwrap_or_default().to_string(),
                v["chain"].as_str().unwrap_or_default().to_string(),
                v["rule"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        ours,
        from_monitor,
        "observer's rule lines (left) against xtables-monitor's (right):\n{}",
        printed.join("\n")
    );
    assert_eq!(
        from_monitor.len(),
        commands.len() - 1,
        "{}",
        printed.join("\n")
    );
    // Who: the monitor has the command's name and pid; observer the writer behind it.
    assert!(
        printed.iter().any(|l| l.contains("NAME=iptables-nft")),
        "{}",
        printed.join("\n")
    );
    assert!(
        !printed.iter().any(|l| l.contains("xtmonwriter")),
        "{}",
        printed.join("\n")
    );
    let after_first = |v: &Value| here(v) && v["seq"].as_u64() > first["seq"].as_u64();
    assert_actors_of(&obs, &after_first, &["xtmonwriter"]);
    obs.stop();
    eprintln!(
        "xtables-monitor and observer: {} rule events, the same text; the nft-written rule: {}",
        from_monitor.len(),
        unreadable["iptables_unreadable"]
    );
}

/// An image built from Debian's busybox-static and imported into `d` as `obs-busybox:test`:
/// nothing pulled. The directory holds its files.
fn busybox_image(d: &Dockerd) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("bin")).expect("mkdir");
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("busybox");
    std::fs::copy(busybox, rootfs.join("bin/busybox")).expect("copy busybox");
    let tar = dir.path().join("busybox.tar");
    test_support::run(
        "tar",
        &[
            "-C",
            rootfs.to_str().expect("utf-8"),
            "-cf",
            tar.to_str().expect("utf-8"),
            ".",
        ],
    );
    d.must(&["import", tar.to_str().expect("utf-8"), "obs-busybox:test"]);
    dir
}

/// The DNAT rule of the published port 8080, in `ns`, written by dockerd.
fn expect_dnat(obs: &mut Observer, ns: &Netns) {
    let here = in_ns(ns);
    let dnat = obs.expect("the published port's DNAT rule", WAIT, |v| {
        here(v)
            && v["chain"] == "DOCKER"
            && v["op"] == "rule_add"
            && v["rule"]
                .as_str()
                .is_some_and(|r| r.contains("--dport 8080") && r.contains("-j DNAT"))
    });
    assert_eq!(dnat["process"]["actor"], "dockerd", "{dnat}");
}

/// `docker run` of a web server with port 8080 published, in the cgroup `parent`.
fn run_web(d: &Dockerd, parent: &str) {
    d.must(&[
        "run",
        "-d",
        "--name",
        "web",
        "--cgroup-parent",
        parent,
        // runc may not raise the limits docker asks for by default where the test runs.
        "--ulimit",
        "nofile=1024:1024",
        "-p",
        "8080:80",
        "obs-busybox:test",
        "/bin/busybox",
        "httpd",
        "-f",
        "-p",
        "80",
    ]);
}

fn remove_cgroup(parent: &str) {
    for c in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        let _ = std::fs::remove_dir(c.path().join(parent.trim_start_matches('/')));
    }
}

/// The nftables rules of `family` in `ns` as observer's changes leave them, by (table, chain),
/// in order. Each transaction (`txn`) is replayed as `position` is defined: its flushes and
/// deletes of chains and tables, then its rule deletes (positions before the transaction),
/// then its replaces, then its adds in the order of their positions after it.
fn replayed_rules(
    obs: &Observer,
    ns: &Netns,
    family: &str,
) -> BTreeMap<(String, String), Vec<String>> {
    let here = in_ns(ns);
    let lines: Vec<&Value> = obs
        .changes()
        .into_iter()
        .filter(|v| {
            here(v) && v["backend"] == "nft" && v["family"] == family && v["result"] == "ok"
        })
        .collect();
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let key = |v: &Value| {
        (
            v["table"].as_str().unwrap_or_default().to_string(),
            v["chain"].as_str().unwrap_or_default().to_string(),
        )
    };
    let position = |v: &Value| v["position"].as_u64().map(|p| p as usize);
    let rule = |v: &Value| v["rule"].as_str().unwrap_or_default().to_string();
    for txn in lines.chunk_by(|a, b| a["txn"] == b["txn"]) {
        let of = |op: &'static str| txn.iter().copied().filter(move |v| v["op"] == op);
        for v in txn {
            match v["op"].as_str().unwrap_or_default() {
                "chain_flush" | "chain_delete" => {
                    out.remove(&key(v));
                }
                "table_flush" | "table_delete" => {
                    let table = key(v).0;
                    out.retain(|(t, _), _| *t != table);
                }
                _ => {}
            }
        }
        let mut deletes: Vec<&Value> = of("rule_delete").collect();
        deletes.sort_by_key(|v| std::cmp::Reverse(position(v)));
        for v in deletes {
            let rules = out.entry(key(v)).or_default();
            let r = rule(v);
            let found = position(v)
                .filter(|&p| rules.get(p) == Some(&r))
                .or_else(|| rules.iter().position(|x| *x == r))
                .unwrap_or_else(|| panic!("a delete of a rule never added: {v}"));
            rules.remove(found);
        }
        for v in of("rule_replace") {
            let rules = out.entry(key(v)).or_default();
            let at = position(v).unwrap_or_else(|| panic!("a replace without a position: {v}"));
            rules[at] = rule(v);
        }
        let mut adds: Vec<&Value> = of("rule_add").collect();
        adds.sort_by_key(|v| position(v).unwrap_or(usize::MAX));
        for v in adds {
            let rules = out.entry(key(v)).or_default();
            let at = position(v).unwrap_or(rules.len()).min(rules.len());
            rules.insert(at, rule(v));
        }
    }
    out.retain(|_, rules| !rules.is_empty());
    out
}

/// `tool`'s (`iptables-nft-save`, `ip6tables-nft-save`) rules in `ns`, by (table, chain), in
/// order, without `-A CHAIN `.
fn saved_rules(ns: &Netns, tool: &str) -> BTreeMap<(String, String), Vec<String>> {
    test_support::save_rules(&ns.read(&[tool]))
}

/// Every IPv4 and IPv6 rule observer printed for `ns` reads as `iptables-nft-save` and
/// `ip6tables-nft-save` print it now, chain by chain and in order; every IPv4 and IPv6 rule line was in iptables syntax with its nft form
/// beside it (ebtables-nft's bridge rules are still printed in nft syntax). Returns how many
/// rules were compared.
fn assert_rules_read_as_saved(obs: &mut Observer, ns: &Netns, when: &str) -> usize {
    // The writer is done; observer's last lines may still be on their way on a busy machine.
    let deadline = Instant::now() + Duration::from_secs(WAIT);
    let tools = [("ip", "iptables-nft-save"), ("ip6", "ip6tables-nft-save")];
    while Instant::now() < deadline
        && tools
            .iter()
            .any(|&(family, tool)| saved_rules(ns, tool) != replayed_rules(obs, ns, family))
    {
        obs.drain(500);
    }
    let here = in_ns(ns);
    for v in obs.changes() {
        if here(v)
            && v["backend"] == "nft"
            && (v["family"] == "ip" || v["family"] == "ip6")
            && v["op"].as_str().is_some_and(|o| o.starts_with("rule_"))
        {
            assert_eq!(v["rule_syntax"], "iptables", "{when}: {v}");
            assert!(
                v["rule_nft"].as_str().is_some_and(|r| !r.is_empty()),
                "{when}: {v}"
            );
        }
    }
    let mut compared = 0;
    for (family, tool) in tools {
        let (want, got) = (saved_rules(ns, tool), replayed_rules(obs, ns, family));
        assert_eq!(
            got, want,
            "{when}: observer's {family} rules (left) against {tool}'s (right)"
        );
        compared += want.values().map(Vec::len).sum::<usize>();
    }
    compared
}

/// docker on Debian's default iptables, iptables-nft: every rule it writes, for its chains and
/// for a published port, reads in observer's lines as `iptables-nft-save` prints it, in order,
/// before and after the container goes; dockerd is the only writer and no incident is raised.
#[test]
fn dockerd_through_iptables_nft_writes_rules_that_read_as_iptables_nft_save_prints_them() {
    skip_unless!(
        "ip",
        "iptables-nft",
        "iptables-nft-save",
        "ip6tables-nft-save",
        "dockerd",
        "busybox"
    );
    if !Path::new(DOCKER).exists() {
        test_support::skip(format!("{DOCKER} (Debian's docker.io) is missing"));
        return;
    }
    let host_before = host_rulesets();
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("docker-nft");
    let here = in_ns(&ns);
    let d = Dockerd::start_with(&ns, None, true, false);
    obs.expect("docker's nat chain, through iptables-nft", WAIT, |v| {
        here(v)
            && v["backend"] == "nft"
            && v["chain"] == "DOCKER"
            && v["table"] == "nat"
            && v["op"] == "chain_create"
    });
    let _image = busybox_image(&d);
    let cgroup_parent = format!("/obs-docker-nft-test-{}", std::process::id());
    run_web(&d, &cgroup_parent);
    expect_dnat(&mut obs, &ns);
    obs.drain(1500);
    let running = assert_rules_read_as_saved(&mut obs, &ns, "with the container running");
    assert!(running >= 10, "only {running} rules compared");
    d.must(&["rm", "-f", "web"]);
    obs.expect("the DNAT rule removed", WAIT, |v| {
        here(v)
            && v["chain"] == "DOCKER"
            && v["op"] == "rule_delete"
            && v["rule"]
                .as_str()
                .is_some_and(|r| r.contains("--dport 8080"))
    });
    obs.drain(1500);
    let after = assert_rules_read_as_saved(&mut obs, &ns, "after the container went");
    assert!(after < running, "{after} rules after, {running} before");
    d.stop();
    obs.drain(1000);
    assert_actors(&obs, &ns, &["dockerd"]);
    assert_no_incidents(&obs, &ns);
    obs.stop();
    remove_cgroup(&cgroup_parent);
    eprintln!(
        "dockerd through iptables-nft: {running} rules identical to iptables-nft-save with the \
         container, {after} after"
    );
    assert_eq!(host_rulesets(), host_before, "the host's ruleset changed");
}

/// The seed's firewall reload against kubelet and kube-proxy, told from the record: the reload
/// wipes both owners' chains (one `mass_flush`), both repair, and `observer query --incident`
/// (and `GET /incidents/ID`) names every change and its writer, each owner's repair with its time
/// and change, and the chains before, after firewalld's changes and at the end.
#[test]
fn a_firewalld_reload_incident_tells_its_story_from_the_record() {
    skip_unless!(
        "ip",
        "iptables-legacy",
        "iptables-legacy-restore",
        "firewalld",
        "firewall-cmd",
        "dbus-daemon"
    );
    let host_before = host_rulesets();
    let dir = tempfile::tempdir().expect("tempdir");
    let record = dir.path().join("record.db");
    let port = test_support::free_port();
    let mut d = test_support::Daemon::start(port, &["--record", record.to_str().expect("utf-8")]);
    let ns = Netns::new("fwd-story");
    let here = in_ns(&ns);
    let fw = Firewalld::start(&ns, "iptables", true);
    d.expect("firewalld's chains", |v| {
        here(v) && v["chain"] == "INPUT_direct"
    });
    let kp = Writer::new("kube-proxy");
    let kubelet = Writer::new("kubelet");
    let kubelet_filter = "*filter\n:KUBE-FIREWALL - [0:0]\n\
        -A INPUT -j KUBE-FIREWALL\n\
        -A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP\nCOMMIT\n";
    let write_all = || {
        ns.write_stdin(
            &kubelet,
            &["iptables-legacy-restore", "--noflush"],
            kubelet_filter,
        );
        ns.write_stdin(
            &kp,
            &["iptables-legacy-restore", "--noflush"],
            KUBE_PROXY_NAT,
        );
    };
    write_all();
    for (who, chain) in [("kubelet", "KUBE-FIREWALL"), ("kube-proxy", "KUBE-SVC-WEB")] {
        d.expect(&format!("{who}'s chain"), |v| {
            here(v) && v["chain"] == chain && v["op"] == "rule_add"
        });
    }
    let before_reload = d.seen.iter().filter_map(|v| v["seq"].as_u64()).max();
    fw.must(&["--reload"]);
    let mass = test_support::wait_for(&d.lines, &mut d.seen, "the reload's mass_flush", |v| {
        v["kind"] == "incident" && here(v) && v["type"] == "mass_flush"
    });
    let id = mass["id"].as_str().expect("id").to_string();
    // Both repair: the mass_flush resolves.
    write_all();
    test_support::wait_for(&d.lines, &mut d.seen, "the mass_flush resolved", |v| {
        v["kind"] == "incident" && v["id"] == id.as_str() && v["state"] == "resolved"
    });

    // What the stream said of it: its lines and the changes they name.
    let lines: Vec<Value> = d
        .seen
        .iter()
        .filter(|v| v["kind"] == "incident" && v["id"] == id.as_str())
        .cloned()
        .collect();
    let mut events: Vec<u64> = lines
        .iter()
        .flat_map(|v| v["events"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| s.as_u64())
        .collect();
    events.sort();
    events.dedup();
    assert!(!events.is_empty(), "{lines:#?}");
    assert!(events.first().copied() > before_reload, "{lines:#?}");

    let stories = test_support::query(&record, &["--incident", &id]);
    assert_eq!(stories.len(), 1, "{stories:#?}");
    let story = &stories[0];
    assert_eq!(story["kind"], "incident_story", "{story}");
    assert_eq!(story["id"], id.as_str());
    assert_eq!(story["incident"]["type"], "mass_flush", "{story}");
    // Every line, in order.
    let states: Vec<&str> = story["states"]
        .as_array()
        .expect("states")
        .iter()
        .filter_map(|s| s["state"].as_str())
        .collect();
    let streamed: Vec<&str> = lines.iter().filter_map(|v| v["state"].as_str()).collect();
    assert_eq!(states, streamed, "{story}");
    assert_eq!(states.first(), Some(&"open"));
    assert_eq!(states.last(), Some(&"resolved"));
    // Every change, each as the stream printed it: firewalld's, then the owners' repairs.
    let changes = story["changes"].as_array().expect("changes");
    let seqs: Vec<u64> = changes.iter().filter_map(|c| c["seq"].as_u64()).collect();
    assert_eq!(seqs, events, "{story}");
    assert!(story.get("missing").is_none(), "{story}");
    for c in changes {
        let printed = d
            .seen
            .iter()
            .find(|v| v["kind"] == "change" && v["seq"] == c["seq"])
            .unwrap_or_else(|| panic!("change {} was not printed", c["seq"]));
        assert_eq!(c["op"], printed["op"], "{c}");
        assert_eq!(c["chain"], printed["chain"], "{c}");
        assert_eq!(c["process"], printed["process"], "{c}");
    }
    let actor = |c: &Value| c["process"]["actor"].as_str().unwrap_or("").to_string();
    assert_eq!(actor(&changes[0]), "firewalld", "{story}");
    let ns_of = |v: &Value| {
        time::OffsetDateTime::parse(
            v.as_str().expect("time"),
            &time::format_description::well_known::Rfc3339,
        )
        .expect("RFC 3339")
        .unix_timestamp_nanos()
    };
    // Each owner's repair: by itself, with the change that made it and when.
    let repairs = story["repairs"].as_array().expect("repairs");
    for owner in ["kubelet", "kube-proxy"] {
        let r = repairs
            .iter()
            .find(|r| r["owner"] == owner)
            .unwrap_or_else(|| panic!("no repair of {owner}: {story}"));
        assert_eq!(r["repaired"], true, "{r}");
        assert_eq!(r["repaired_by"], owner, "{r}");
        let fix = &r["change"];
        assert_eq!(actor(fix), owner, "{r}");
        assert!(
            seqs.contains(&fix["seq"].as_u64().expect("seq")),
            "the repair is one of the incident's changes: {r}"
        );
        let took_ms = (ns_of(&fix["time"]) - ns_of(&changes[0]["time"])) as f64 / 1e6;
        let said = r["repair_ms"].as_f64().expect("repair_ms");
        assert!(
            (took_ms - said).abs() <= 2.0,
            "repair_ms {said}, but the repair came {took_ms} ms after the first change: {r}"
        );
        // Nothing of the owner's before its repair: the wipe is firewalld's alone.
        for c in changes
            .iter()
            .filter(|c| c["seq"].as_u64() < fix["seq"].as_u64())
        {
            assert_ne!(actor(c), owner, "{c}");
        }
    }
    // The chains: there before, gone after firewalld's changes, back (kube-proxy's) at the end.
    let chain = |table: &str, name: &str| {
        story["chains"]
            .as_array()
            .expect("chains")
            .iter()
            .find(|c| c["chain"] == name && c["table"] == table)
            .unwrap_or_else(|| panic!("no chain {table} {name} in {story}"))
            .clone()
    };
    let rules = |v: &Value| v["rules"].as_array().cloned().unwrap_or_default();
    for (table, name, owner, rule) in [
        ("nat", "KUBE-SERVICES", "kube-proxy", "KUBE-SVC-WEB"),
        ("filter", "KUBE-FIREWALL", "kubelet", "DROP"),
    ] {
        let c = chain(table, name);
        assert!(
            rules(&c["before"])
                .iter()
                .any(|r| r.as_str().is_some_and(|r| r.contains(rule))),
            "{c}"
        );
        assert!(c["after"].is_null(), "deleted by the reload: {c}");
        assert_eq!(rules(&c["end"]), rules(&c["before"]), "{c}");
        assert_eq!(c["end"]["last"]["actor"], owner, "{c}");
    }

    // The same story for people, and over HTTP.
    let text = Command::new(test_support::observer_bin())
        .args(["query", "--record"])
        .arg(&record)
        .args(["--incident", &id])
        .output()
        .expect("observer query");
    assert!(text.status.success(), "{text:?}");
    let text = String::from_utf8_lossy(&text.stdout);
    for want in [
        "timeline",
        id.as_str(),
        "firewalld",
        "repair",
        "kube-proxy",
        "kubelet",
        "resolved",
        "KUBE-SERVICES",
    ] {
        assert!(text.contains(want), "`{want}` missing from:\n{text}");
    }
    let (status, body) = test_support::get(port, &format!("/incidents/{id}"), &[]);
    assert_eq!(status, 200, "{body}");
    let over_http: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(over_http["changes"], story["changes"]);
    assert_eq!(over_http["repairs"], story["repairs"]);
    let (status, body) = test_support::get(port, "/incidents/foreign_delete-1-1", &[]);
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("no incident"), "{body}");
    let unknown = Command::new(test_support::observer_bin())
        .args(["query", "--record"])
        .arg(&record)
        .args(["--incident", "foreign_delete-1-1"])
        .output()
        .expect("observer query");
    assert!(!unknown.status.success());
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("--incidents"),
        "{unknown:?}"
    );
    drop(fw);
    d.stop();
    assert_eq!(host_rulesets(), host_before, "the host's ruleset changed");
}
