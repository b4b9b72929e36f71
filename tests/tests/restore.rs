//! `--restore`: observer puts back what a foreign wipe took, through the real tools, in
//! namespaces these tests create; and without `--restore` it writes nothing.
//!
//! The owners are stand-ins named after kubelet (not packaged in Debian) and a podman-like nft
//! table's owner; the wipers are the real `netfilter-persistent reload` (Debian's package,
//! unpacked by `cargo xtask setup`), `iptables-legacy -F/-X` and an `nft -f` file that starts
//! with `flush ruleset`. Needs root; skips otherwise (fails under CI=true).

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use test_support::{skip_unless, Netns, Observer, Writer};

const WAIT: u64 = 20;
const DROP_RULE: &str = "-m comment --comment \"block incoming traffic\" -m mark --mark \
                         0x8000/0x8000 -j DROP";

fn in_ns(ns: &Netns) -> impl Fn(&Value) -> bool + '_ {
    let inode = ns.ino();
    move |v: &Value| v["netns"].as_u64() == Some(inode)
}

fn sh(ns: &Netns, script: &str) -> std::process::Output {
    Command::new("ip")
        .args(["netns", "exec", ns.name(), "sh", "-c", script])
        .output()
        .expect("ip netns exec")
}

fn must(ns: &Netns, script: &str) -> String {
    let out = sh(ns, script);
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// observer watching `ns` only, restoring `owner`, with `more` arguments.
fn restoring(ns: &Netns, owner: &str, more: &[&str]) -> Observer {
    let mut args = vec!["--netns", ns.name(), "--restore", owner];
    args.extend_from_slice(more);
    Observer::start(&args)
}

/// kubelet's one-shot set-up (seed 002): KUBE-FIREWALL drops packets marked 0x8000, jumped to
/// from INPUT and OUTPUT.
fn kubelet_sets_up(ns: &Netns, iptables: &str) {
    let kubelet = Writer::script(
        "kubelet",
        &format!(
            "{ipt} -N KUBE-FIREWALL\n\
             {ipt} -A KUBE-FIREWALL -m comment --comment \"block incoming traffic\" \
             -m mark --mark 0x8000/0x8000 -j DROP\n\
             {ipt} -I INPUT -j KUBE-FIREWALL\n\
             {ipt} -I OUTPUT -j KUBE-FIREWALL",
            ipt = iptables
        ),
    );
    must(
        ns,
        &format!("ip link set lo up; {}", kubelet.path.display()),
    );
}

/// Wait for the last change of kubelet's set-up.
fn kubelet_seen(obs: &mut Observer, ns: &Netns) {
    let here = in_ns(ns);
    obs.expect("kubelet's jump from OUTPUT", WAIT, |v| {
        here(v) && v["op"] == "rule_add" && v["chain"] == "OUTPUT"
    });
}

/// A reset script's `iptables-legacy -F; iptables-legacy -X`: every chain flushed, every
/// user chain deleted.
fn legacy_wipe(ns: &Netns) {
    let wiper = Writer::script("iptables-reset", "iptables-legacy -F\niptables-legacy -X");
    must(ns, &wiper.path.display().to_string());
}

/// The filter table's lines that name KUBE-FIREWALL, as the backend's save prints them.
fn firewall_lines(ns: &Netns, save: &str) -> Vec<String> {
    must(ns, &format!("{save} -t filter"))
        .lines()
        .filter(|l| l.contains("KUBE-FIREWALL"))
        .map(str::to_string)
        .collect()
}

/// Whether a ping marked 0x8000 gets through (KUBE-FIREWALL drops it).
fn marked_ping_passes(ns: &Netns) -> bool {
    sh(ns, "ping -c 1 -W 1 -m 32768 127.0.0.1").status.success()
}

fn restore_line(obs: &mut Observer, ns: &Netns, outcome: &str) -> Value {
    let here = in_ns(ns);
    obs.wait_line(
        &format!("incident line with restore {outcome}"),
        WAIT,
        |v| here(v) && v["kind"] == "incident" && v["restore"]["outcome"] == outcome,
    )
}

/// Debian's real `netfilter-persistent reload` of an admin's rules.v4 (which knows nothing of
/// kubelet).
fn netfilter_persistent_reload(ns: &Netns) {
    netfilter_persistent_reload_with(
        ns,
        "*filter\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -i lo -j ACCEPT\nCOMMIT\n",
    );
}

/// The same, with this rules.v4.
fn netfilter_persistent_reload_with(ns: &Netns, rules_v4: &str) {
    let out = test_support::netfilter_persistent_reload(ns, rules_v4, "*filter\nCOMMIT\n");
    assert!(
        out.status.success(),
        "netfilter-persistent reload: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn netfilter_persistent_unpacked() -> bool {
    test_support::netfilter_persistent_unpacked()
}

/// Seed 002 on iptables-nft: `netfilter-persistent reload` deletes kubelet's KUBE-FIREWALL
/// for good; with `--restore kubelet` it is back, exactly as it was, and marked traffic is
/// dropped again; the incident ends resolved by observer.
#[test]
fn seed_002_kubelets_firewall_comes_back_after_netfilter_persistent_reload() {
    skip_unless!(
        "ip",
        "unshare",
        "mount",
        "run-parts",
        "iptables-nft",
        "ping"
    );
    if !netfilter_persistent_unpacked() {
        return;
    }
    let ns = Netns::new("restore-nfp");
    let mut obs = restoring(&ns, "kubelet", &[]);
    kubelet_sets_up(&ns, "iptables-nft");
    let before = firewall_lines(&ns, "iptables-nft-save");
    assert_eq!(before.len(), 4, "{before:?}");
    assert!(
        !marked_ping_passes(&ns),
        "KUBE-FIREWALL drops marked traffic"
    );
    let here = in_ns(&ns);
    kubelet_seen(&mut obs, &ns);

    netfilter_persistent_reload(&ns);
    let line = restore_line(&mut obs, &ns, "restored");
    let note = &line["restore"];
    assert_eq!(note["owner"], "kubelet", "{line}");
    assert_eq!(note["command"], "iptables-nft-restore --noflush", "{line}");
    assert!(
        note["script"].as_str().unwrap_or("").contains(DROP_RULE),
        "{line}"
    );
    // The write itself comes back as changes of observer's, tagged with the incident.
    let id = line["id"].as_str().unwrap().to_string();
    let own = obs.expect("the restore's own rule", WAIT, |v| {
        here(v) && v["op"] == "rule_add" && v["chain"] == "KUBE-FIREWALL" && v["restore"] == id
    });
    assert_eq!(own["process"]["actor"], "observer", "{own}");
    obs.wait_line("the incident resolved by observer", WAIT, |v| {
        v["kind"] == "incident"
            && v["id"] == id
            && v["state"] == "resolved"
            && v["owners"][0]["repaired_by"] == "observer"
    });
    assert_eq!(firewall_lines(&ns, "iptables-nft-save"), before);
    assert!(!marked_ping_passes(&ns), "marked traffic is dropped again");
    // Its own writes raise nothing.
    let restores = obs
        .drain(1500)
        .into_iter()
        .chain(obs.seen.clone())
        .filter(|v| v["kind"] == "incident" && v["actors"].to_string().contains("observer"))
        .count();
    assert_eq!(
        restores,
        0,
        "observer's writes raised an incident:\n{}",
        obs.dump()
    );
    obs.stop();
}

/// Without `--restore` observer writes nothing: the same wipe leaves the chains gone.
#[test]
fn without_restore_a_wipe_leaves_the_chains_gone() {
    skip_unless!("ip", "iptables-legacy", "iptables-legacy-save", "ping");
    let ns = Netns::new("restore-off");
    let mut obs = Observer::start(&["--netns", ns.name()]);
    kubelet_sets_up(&ns, "iptables-legacy");
    let here = in_ns(&ns);
    kubelet_seen(&mut obs, &ns);
    legacy_wipe(&ns);
    obs.wait_line("the foreign delete", WAIT, |v| {
        here(v) && v["kind"] == "incident" && v["type"] == "foreign_delete"
    });
    // Three times --restore-after's default.
    let later = obs.drain(3000);
    assert!(
        later.iter().all(|v| v.get("restore").is_none()),
        "a line tells of a restore: {later:?}"
    );
    assert!(firewall_lines(&ns, "iptables-legacy-save").is_empty());
    assert!(
        marked_ping_passes(&ns),
        "nothing drops marked traffic any more"
    );
    obs.stop();
}

/// The same on iptables-legacy, with a wiper that flushes and deletes every chain; and a
/// second wipe after a chain of that name was made with other content is left alone.
#[test]
fn legacy_chains_come_back_and_a_chain_with_other_content_is_left_alone() {
    skip_unless!("ip", "iptables-legacy", "iptables-legacy-save", "ping");
    let ns = Netns::new("restore-leg");
    // The second wipe's newer content must come within the delay: 2 s, 10 s in an emulated
    // guest (OBSERVER_TEST_SLOWDOWN), where the writes after a wipe take seconds.
    let after = format!("{}s", 2 * test_support::slowdown());
    let mut obs = restoring(&ns, "kubelet", &["--restore-after", &after]);
    kubelet_sets_up(&ns, "iptables-legacy");
    let before = firewall_lines(&ns, "iptables-legacy-save");
    let here = in_ns(&ns);
    kubelet_seen(&mut obs, &ns);
    legacy_wipe(&ns);
    let line = restore_line(&mut obs, &ns, "restored");
    assert_eq!(
        line["restore"]["command"], "iptables-legacy-restore --noflush",
        "{line}"
    );
    assert_eq!(firewall_lines(&ns, "iptables-legacy-save"), before);
    assert!(!marked_ping_passes(&ns), "marked traffic is dropped again");

    // Wiped again, and someone makes KUBE-FIREWALL with other content before the delay ends.
    let mark = obs.mark();
    legacy_wipe(&ns);
    let other = Writer::script(
        "admin-script",
        "iptables-legacy -N KUBE-FIREWALL\niptables-legacy -A KUBE-FIREWALL -j ACCEPT",
    );
    must(&ns, &other.path.display().to_string());
    let refused = obs.wait_line_since(mark, "a refused restore", WAIT, |v| {
        here(v) && v["restore"]["outcome"] == "refused_conflict"
    });
    assert!(
        refused["restore"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("KUBE-FIREWALL now holds 1 rule"),
        "{refused}"
    );
    assert_eq!(
        firewall_lines(&ns, "iptables-legacy-save"),
        vec![":KUBE-FIREWALL - [0:0]", "-A KUBE-FIREWALL -j ACCEPT"],
        "the newer content is left as it is"
    );
    obs.stop();
}

/// A wiper in a loop: each wipe after a restore is put back again, three times within the
/// window; the fourth is left as it is, and observer says once, on the loop's incident, that
/// it stopped and who keeps removing the chains.
#[test]
fn a_wiper_in_a_loop_gets_three_restores_then_observer_stops_and_says_so() {
    skip_unless!("ip", "iptables-legacy", "iptables-legacy-save");
    let ns = Netns::new("restore-loop");
    let mut obs = restoring(&ns, "kubelet", &[]);
    kubelet_sets_up(&ns, "iptables-legacy");
    let before = firewall_lines(&ns, "iptables-legacy-save");
    let here = in_ns(&ns);
    kubelet_seen(&mut obs, &ns);
    // Each restore makes KUBE-FIREWALL again, as observer.
    let restores = |obs: &Observer| {
        obs.seen
            .iter()
            .filter(|v| {
                here(v)
                    && v["op"] == "chain_create"
                    && v["chain"] == "KUBE-FIREWALL"
                    && v["process"]["actor"] == "observer"
            })
            .count()
    };
    for round in 1..=3 {
        legacy_wipe(&ns);
        obs.wait_count(&format!("restore {round}"), WAIT, round, |v| {
            here(v)
                && v["op"] == "chain_create"
                && v["chain"] == "KUBE-FIREWALL"
                && v["process"]["actor"] == "observer"
        });
        assert!(
            poll(5, || firewall_lines(&ns, "iptables-legacy-save") == before),
            "restore {round} did not put the chain back as it was: {:?}",
            firewall_lines(&ns, "iptables-legacy-save")
        );
    }
    let mark = obs.mark();
    legacy_wipe(&ns);
    let stopped = obs.wait_line_since(mark, "observer says it stopped", WAIT, |v| {
        here(v) && v["restore"]["outcome"] == "gave_up"
    });
    let summary = stopped["summary"].as_str().unwrap_or("");
    assert!(
        summary
            .contains("observer stopped restoring: iptables-reset keeps removing kubelet's chains"),
        "{stopped}"
    );
    assert_eq!(
        stopped["type"], "flapping",
        "told on the loop's incident: {stopped}"
    );
    // Three times --restore-after: nothing more is written, and it is said once.
    obs.drain(3000);
    assert_eq!(restores(&obs), 3, "{}", obs.dump());
    let said = obs.seen[mark..]
        .iter()
        .filter(|v| here(v) && v["restore"]["outcome"] == "gave_up")
        .count();
    assert_eq!(said, 1, "{}", obs.dump());
    assert!(firewall_lines(&ns, "iptables-legacy-save").is_empty());
    obs.stop();
}

/// A wiper that flushes nat every 0.3 s for 9 s: kubelet's KUBE-MARK-DROP rule is put back at
/// most the bound of times (3), then observer stops, says so once, and the chain stays empty.
#[test]
fn a_wiper_flushing_nat_every_300ms_gets_the_bound_of_restores_then_observer_stops() {
    skip_unless!("ip", "iptables-legacy", "iptables-legacy-save");
    let ns = Netns::new("restore-flush");
    let mut obs = restoring(&ns, "kubelet", &[]);
    let kubelet = Writer::script(
        "kubelet",
        "iptables-legacy -t nat -N KUBE-MARK-DROP\n\
         iptables-legacy -t nat -A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000",
    );
    must(&ns, &kubelet.path.display().to_string());
    let here = in_ns(&ns);
    obs.expect("kubelet's rule", WAIT, |v| {
        here(v) && v["op"] == "rule_add" && v["chain"] == "KUBE-MARK-DROP"
    });
    let mark = obs.mark();
    let wiper = Writer::script(
        "nat-flusher",
        "i=0; while [ $i -lt 30 ]; do iptables-legacy -t nat -F; sleep 0.3; i=$((i+1)); done",
    );
    must(&ns, &wiper.path.display().to_string());
    obs.wait_line_since(mark, "observer says it stopped", WAIT, |v| {
        here(v) && v["restore"]["outcome"] == "gave_up"
    });
    // Twice --restore-after past the wiper's end: nothing more.
    obs.drain(2000);
    let after = &obs.seen[mark..];
    let restores = after
        .iter()
        .filter(|v| {
            here(v)
                && v["op"] == "rule_add"
                && v["chain"] == "KUBE-MARK-DROP"
                && v["process"]["actor"] == "observer"
        })
        .count();
    assert!(
        (1..=3).contains(&restores),
        "{restores} restores:\n{}",
        obs.dump()
    );
    let stopped: Vec<&Value> = after
        .iter()
        .filter(|v| here(v) && v["restore"]["outcome"] == "gave_up")
        .collect();
    assert_eq!(stopped.len(), 1, "said once:\n{}", obs.dump());
    assert!(
        stopped[0]["summary"]
            .as_str()
            .unwrap_or("")
            .contains("observer stopped restoring: nat-flusher keeps removing kubelet's chains"),
        "{}",
        stopped[0]
    );
    assert!(
        !must(&ns, "iptables-legacy-save -t nat").contains("-A KUBE-MARK-DROP"),
        "the chain is left as the wiper left it"
    );
    obs.stop();
}

/// An owner that puts its chains back itself within `--restore-after` is left alone: the
/// incident says so, and observer writes nothing.
#[test]
fn an_owner_that_repairs_itself_in_time_gets_no_restore() {
    skip_unless!("ip", "iptables-legacy", "iptables-legacy-save");
    let ns = Netns::new("restore-self");
    let after = format!("{}s", 3 * test_support::slowdown());
    let mut obs = restoring(&ns, "kubelet", &["--restore-after", &after]);
    kubelet_sets_up(&ns, "iptables-legacy");
    let before = firewall_lines(&ns, "iptables-legacy-save");
    kubelet_seen(&mut obs, &ns);
    let mark = obs.mark();
    legacy_wipe(&ns);
    kubelet_sets_up(&ns, "iptables-legacy");
    let here = in_ns(&ns);
    let line = obs.wait_line_since(mark, "the skipped restore", WAIT, |v| {
        here(v) && v["restore"]["outcome"] == "skipped_owner_repaired"
    });
    assert!(
        line["summary"]
            .as_str()
            .unwrap_or("")
            .contains("kubelet repaired its chains itself"),
        "{line}"
    );
    obs.drain(1500);
    let written = obs.seen[mark..]
        .iter()
        .filter(|v| here(v) && v["process"]["actor"] == "observer")
        .count();
    assert_eq!(written, 0, "observer wrote:\n{}", obs.dump());
    assert_eq!(firewall_lines(&ns, "iptables-legacy-save"), before);
    obs.stop();
}

/// A restore the tool refuses (its rule needs an ipset the wipe destroyed) is `failed`, with
/// the tool's words, and leaves nothing half written: the write is one atomic restore.
#[test]
fn a_refused_restore_is_failed_and_leaves_nothing_half_written() {
    skip_unless!("ip", "iptables-legacy", "iptables-legacy-save", "ipset");
    let ns = Netns::new("restore-fail");
    let mut obs = restoring(&ns, "kubelet", &[]);
    // An admin's chain that kubelet's jumps to: the wipe takes it too, and observer does not
    // restore its owner, so kubelet's rule that jumps there is refused by the tool, after the
    // ipset its other rule names was created again.
    let admin = Writer::script("admin-script", "iptables-legacy -N OBS-OTHER");
    must(&ns, &admin.path.display().to_string());
    let kubelet = Writer::script(
        "kubelet",
        "ipset create obs-allowed hash:ip\n\
         ipset add obs-allowed 10.0.0.1\n\
         iptables-legacy -N KUBE-FIREWALL\n\
         iptables-legacy -A KUBE-FIREWALL -m set --match-set obs-allowed src -j ACCEPT\n\
         iptables-legacy -A KUBE-FIREWALL -j OBS-OTHER\n\
         iptables-legacy -A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -j DROP\n\
         iptables-legacy -I INPUT -j KUBE-FIREWALL\n\
         iptables-legacy -I OUTPUT -j KUBE-FIREWALL",
    );
    must(&ns, &kubelet.path.display().to_string());
    kubelet_seen(&mut obs, &ns);
    let wiper = Writer::script(
        "iptables-reset",
        "iptables-legacy -F\niptables-legacy -X\nipset destroy",
    );
    must(&ns, &wiper.path.display().to_string());
    let line = restore_line(&mut obs, &ns, "failed");
    let reason = line["restore"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("OBS-OTHER"), "the tool's words: {line}");
    assert_eq!(
        line["restore"]["command"], "ipset restore; iptables-legacy-restore --noflush",
        "{line}"
    );
    assert!(
        firewall_lines(&ns, "iptables-legacy-save").is_empty(),
        "half written: {:?}",
        firewall_lines(&ns, "iptables-legacy-save")
    );
    // The set created for the refused rules was taken back.
    assert!(
        !sh(&ns, "ipset list -n obs-allowed").status.success(),
        "the ipset was left behind: {}",
        must(&ns, "ipset list -n")
    );
    obs.stop();
}

/// `netfilter-persistent flush` (Debian's, with ipset-persistent's plugins): every chain
/// flushed and deleted through iptables-nft, then every ipset destroyed. A kube-router-like
/// owner's chain drops what comes from the addresses of its ipset; with `--restore
/// kube-router` the set comes back first, with its members, then the chain and its jump, as
/// `ipset save` and `iptables-nft-save` printed them, and the traffic is dropped again.
#[test]
fn an_ipset_destroyed_with_the_chains_comes_back_with_its_members_before_them() {
    skip_unless!(
        "ip",
        "ipset",
        "iptables-nft",
        "iptables-nft-save",
        "ping",
        "unshare"
    );
    if !netfilter_persistent_unpacked() {
        return;
    }
    let ns = Netns::new("restore-ipset");
    let mut obs = restoring(&ns, "kube-router", &[]);
    let kube_router = Writer::script(
        "kube-router",
        "ipset create kube-router-block hash:ip\n\
         ipset add kube-router-block 127.0.0.1\n\
         ipset add kube-router-block 10.9.8.7\n\
         iptables-nft -N KUBE-ROUTER-INPUT\n\
         iptables-nft -A KUBE-ROUTER-INPUT -p icmp -m set --match-set kube-router-block src \
         -j DROP\n\
         iptables-nft -I INPUT -j KUBE-ROUTER-INPUT",
    );
    must(
        &ns,
        &format!("ip link set lo up; {}", kube_router.path.display()),
    );
    let here = in_ns(&ns);
    obs.expect("kube-router's jump from INPUT", WAIT, |v| {
        here(v) && v["op"] == "rule_add" && v["chain"] == "INPUT"
    });
    let lines = |ns: &Netns| -> Vec<String> {
        must(ns, "iptables-nft-save -t filter")
            .lines()
            .filter(|l| l.contains("KUBE-ROUTER"))
            .map(str::to_string)
            .collect()
    };
    let chains_before = lines(&ns);
    let set_before = must(&ns, "ipset save kube-router-block");
    let pings = |ns: &Netns| sh(ns, "ping -c 1 -W 1 127.0.0.1").status.success();
    assert!(!pings(&ns), "kube-router's chain drops the ping");

    let out = test_support::netfilter_persistent_flush(&ns);
    assert!(
        out.status.success(),
        "netfilter-persistent flush: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = restore_line(&mut obs, &ns, "restored");
    assert_eq!(
        line["restore"]["command"], "ipset restore; iptables-nft-restore --noflush",
        "{line}"
    );
    assert_eq!(
        line["restore"]["sets"],
        serde_json::json!(["kube-router-block"]),
        "{line}"
    );
    assert_eq!(lines(&ns), chains_before);
    assert_eq!(must(&ns, "ipset save kube-router-block"), set_before);
    assert!(!pings(&ns), "the ping is dropped again");
    // observer's own ipset write is a change line like any other, tagged with the incident.
    obs.expect("observer's ipset write", WAIT, |v| {
        here(v)
            && v["kind"] == "change"
            && v["table"] == "ipset"
            && v["process"]["actor"] == "observer"
            && v["restore"].is_string()
    });
    obs.stop();
}

/// nftables: an `nft -f` reload that starts with `flush ruleset` takes another owner's table;
/// it comes back with its set, its verdict map and its chains, as `nft list table` printed it.
/// On a kernel before 6.1 (5.10 in the guests), whose notifications do not say where a rule
/// went, observer says why it does not restore, and writes nothing.
#[test]
fn an_nft_table_wiped_by_flush_ruleset_comes_back_with_its_sets() {
    skip_unless!("ip", "nft");
    let ns = Netns::new("restore-nft");
    let podman = Writer::script(
        "podman",
        "nft -f - <<'EOF'\n\
         table inet podman {\n\
         \tset blocked {\n\t\ttype ipv4_addr\n\t\telements = { 10.1.1.1, 10.2.2.2 }\n\t}\n\
         \tmap ports {\n\t\ttype inet_service : verdict\n\t\telements = { 9090 : jump allow }\n\t}\n\
         \tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\
         \t\tip saddr @blocked drop\n\t\ttcp dport 8080 jump allow\n\t\ttcp dport vmap @ports\n\t}\n\
         \tchain allow {\n\t\tcounter accept\n\t}\n\
         }\nEOF",
    );
    // The owners file names podman the owner of its table.
    let dir = tempfile::tempdir().expect("tempdir");
    let owners = dir.path().join("owners.toml");
    std::fs::write(
        &owners,
        "[[owner]]\nname = \"podman\"\nactors = [\"podman\"]\nchains = [\"input\", \"allow\"]\n",
    )
    .expect("owners");
    let mut obs = restoring(&ns, "podman", &["--owners", owners.to_str().unwrap()]);
    must(&ns, &podman.path.display().to_string());
    let here = in_ns(&ns);
    obs.expect("podman's chain allow", WAIT, |v| {
        here(v) && v["op"] == "rule_add" && v["chain"] == "allow"
    });
    let listed = |ns: &Netns| {
        must(ns, "nft list table inet podman")
            .lines()
            .map(|l| {
                // Counters move: the statement is compared, not its numbers.
                match l.find("counter packets") {
                    Some(i) => format!("{}counter accept", &l[..i]),
                    None => l.to_string(),
                }
            })
            .collect::<Vec<_>>()
    };
    let before = listed(&ns);
    let reload = Writer::script(
        "nftables-reload",
        "nft -f - <<'EOF'\nflush ruleset\ntable inet filter {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\t}\n}\nEOF",
    );
    must(&ns, &reload.path.display().to_string());
    if kernel_before(6, 1) {
        // Its nf_tables notifications do not say where a rule went, so the order observer
        // holds may not be the kernel's: it says so and writes nothing.
        let line = restore_line(&mut obs, &ns, "refused_conflict");
        let reason = line["restore"]["reason"].as_str().unwrap_or("");
        assert!(reason.contains("do not say where a rule went"), "{line}");
        assert!(!sh(&ns, "nft list table inet podman").status.success());
    } else {
        let line = restore_line(&mut obs, &ns, "restored");
        assert_eq!(line["restore"]["command"], "nft -f -", "{line}");
        assert_eq!(listed(&ns), before);
    }
    obs.stop();
}

/// Whether the running kernel is older than `major.minor`.
fn kernel_before(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut n = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (n.next().unwrap_or(0), n.next().unwrap_or(0)) < (major, minor)
}

/// `--restore-dry-run` says what it would write and writes nothing.
#[test]
fn a_dry_run_says_what_it_would_write_and_writes_nothing() {
    skip_unless!("ip", "iptables-legacy", "iptables-legacy-save");
    let ns = Netns::new("restore-dry");
    let mut obs = restoring(&ns, "kubelet", &["--restore-dry-run"]);
    kubelet_sets_up(&ns, "iptables-legacy");
    kubelet_seen(&mut obs, &ns);
    legacy_wipe(&ns);
    let line = restore_line(&mut obs, &ns, "dry_run");
    let script = line["restore"]["script"].as_str().unwrap_or("");
    assert!(script.contains(":KUBE-FIREWALL - [0:0]"), "{line}");
    assert!(script.contains("-I INPUT 1 -j KUBE-FIREWALL"), "{line}");
    assert!(
        line["summary"].as_str().unwrap().contains("dry run"),
        "{line}"
    );
    obs.drain(1000);
    assert!(firewall_lines(&ns, "iptables-legacy-save").is_empty());
    obs.stop();
}

/// An owner nobody knows is refused at start, with the known ones listed.
#[test]
fn an_unknown_owner_is_refused_with_the_known_ones_listed() {
    skip_unless!("ip");
    let out = Command::new(test_support::observer_bin())
        .args(["tail", "--json", "--restore", "kubelet,kubeletx"])
        .output()
        .expect("observer");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown owner kubeletx"), "{err}");
    assert!(err.contains("known owners: "), "{err}");
    assert!(err.contains("cni-plugins"), "{err}");
}

/// Whether `f` holds within `secs` seconds (tried every 100 ms).
fn poll(secs: u64, f: impl Fn() -> bool) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if f() {
            return true;
        }
        if std::time::Instant::now() > end {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The CNI plugins Debian packages (containernetworking-plugins).
const CNI_PATH: &str = "/usr/lib/cni";

/// Where the CNI's iptables writes go: `iptables` is iptables-nft on Debian; for legacy, the
/// plugins run in a mount namespace whose iptables tools are the legacy ones.
#[derive(Clone, Copy, PartialEq)]
enum Backend {
    Nft,
    Legacy,
}

impl Backend {
    fn save(self) -> &'static str {
        match self {
            Backend::Nft => "iptables-nft-save",
            Backend::Legacy => "iptables-legacy-save",
        }
    }

    fn restore(self) -> &'static str {
        match self {
            Backend::Nft => "iptables-nft-restore --noflush",
            Backend::Legacy => "iptables-legacy-restore --noflush",
        }
    }
}

/// Run CNI plugin `plugin` with `command` (`ADD`, `DEL`) in `node` for a pod in `pod`, with
/// `conf` on stdin, its iptables on `backend`: its result.
fn cni(
    (node, pod): (&Netns, &Netns),
    backend: Backend,
    command: &str,
    plugin: &str,
    conf: &str,
) -> String {
    use std::io::Write;
    let run = format!(
        "exec ip netns exec {} {}",
        node.name(),
        Path::new(CNI_PATH).join(plugin).display()
    );
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c"]);
    match backend {
        Backend::Nft => c.arg(run),
        Backend::Legacy => c.arg(format!(
            "mount --bind /usr/sbin/xtables-legacy-multi /usr/sbin/xtables-nft-multi && {run}"
        )),
    };
    let mut child = c
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", "obsrestore1")
        .env("CNI_NETNS", pod.path())
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", CNI_PATH)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("CNI plugin");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(conf.as_bytes())
        .unwrap();
    let out = child.wait_with_output().expect("CNI plugin");
    assert!(
        out.status.success(),
        "{plugin} {command}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The nat table's CNI lines, as the backend's save prints them.
fn cni_lines(ns: &Netns, backend: Backend) -> Vec<String> {
    let mut l: Vec<String> = must(ns, &format!("{} -t nat", backend.save()))
        .lines()
        .filter(|l| l.contains("CNI-"))
        .map(str::to_string)
        .collect();
    // Sorted: chains may be declared in another order after a restore; each chain's rules
    // keep theirs, which `rules_in_order` checks.
    l.sort();
    l
}

/// Each chain's rules that name a CNI chain, in their order, from a save's text.
fn rules_in_order(save: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut chains = std::collections::BTreeMap::<String, Vec<String>>::new();
    for l in save.lines().filter(|l| l.contains("CNI-")) {
        if let Some(chain) = l.strip_prefix("-A ").and_then(|r| r.split(' ').next()) {
            chains
                .entry(chain.to_string())
                .or_default()
                .push(l.to_string());
        }
    }
    chains
}

/// What wipes the CNI's chains.
#[derive(Clone, Copy)]
enum Wiper {
    /// Debian's `netfilter-persistent reload` of an admin's rules.v4 that has a nat table of
    /// its own (iptables-nft only: its plugin runs the system's `iptables-restore`).
    NetfilterPersistent,
    /// `firewall-cmd --reload` of a running firewalld (iptables backend), which flushes and
    /// deletes every chain of every table before it writes its own.
    FirewalldReload,
}

/// The rke2#10469 shape: the real bridge and portmap plugins give a pod a hostPort that a real
/// server in the pod answers on; `wiper` wipes the CNI chains, and the hostPort is dead until
/// the pod restarts. With `--restore cni-plugins` the chains read again as the backend's save
/// printed them, the hostPort answers within 3 s, and the incident ends resolved; then the
/// pod's DEL removes them as the CNI's own change, which raises nothing.
fn cni_hostport_case(name: &str, backend: Backend, wiper: Wiper) {
    skip_unless!(
        "ip",
        "unshare",
        "mount",
        "run-parts",
        backend.save(),
        "curl",
        "busybox"
    );
    match wiper {
        Wiper::FirewalldReload => skip_unless!("firewalld", "firewall-cmd", "dbus-daemon"),
        Wiper::NetfilterPersistent => {}
    }
    if matches!(wiper, Wiper::NetfilterPersistent) && !netfilter_persistent_unpacked() {
        return;
    }
    if !Path::new(CNI_PATH).join("portmap").exists() {
        test_support::skip(format_args!(
            "the CNI plugins are not in {CNI_PATH} (run `cargo xtask setup`)"
        ));
        return;
    }
    let node = Netns::new(&format!("{name}-node"));
    let pod = Netns::new(&format!("{name}-pod"));
    let mut obs = restoring(&node, "cni-plugins", &[]);
    must(&node, "ip link set lo up");
    must(&pod, "ip link set lo up");
    // firewalld runs before the pod starts, as on a node (its start wipes what was there).
    let fw = matches!(wiper, Wiper::FirewalldReload)
        .then(|| test_support::Firewalld::start(&node, "iptables", backend == Backend::Legacy));
    let ipam = tempfile::tempdir().expect("tempdir");
    let bridge_conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"obsnet","type":"bridge","bridge":"cni-obs0",
           "isGateway":true,"ipMasq":true,
           "ipam":{{"type":"host-local","ranges":[[{{"subnet":"10.89.0.0/24"}}]],
                    "routes":[{{"dst":"0.0.0.0/0"}}],"dataDir":"{}"}}}}"#,
        ipam.path().display()
    );
    let bridge = cni((&node, &pod), backend, "ADD", "bridge", &bridge_conf);
    let portmap_conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"obsnet","type":"portmap",
           "capabilities":{{"portMappings":true}},
           "runtimeConfig":{{"portMappings":[{{"hostPort":18080,"containerPort":80,"protocol":"tcp"}}]}},
           "prevResult":{bridge}}}"#
    );
    cni((&node, &pod), backend, "ADD", "portmap", &portmap_conf);
    // A real server in the pod.
    let www = tempfile::tempdir().expect("tempdir");
    std::fs::write(www.path().join("index.html"), "pong\n").expect("index");
    let _server = test_support::KilledOnDrop(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                pod.name(),
                "busybox",
                "httpd",
                "-f",
                "-p",
                "80",
                "-h",
            ])
            .arg(www.path())
            .spawn()
            .expect("httpd"),
    );
    let answers = |node: &Netns| {
        sh(node, "curl -s --max-time 1 http://10.89.0.1:18080/")
            .stdout
            .starts_with(b"pong")
    };
    assert!(poll(10, || answers(&node)), "the hostPort never answered");
    let before = cni_lines(&node, backend);
    let before_order = rules_in_order(&must(&node, &format!("{} -t nat", backend.save())));
    assert!(
        before.iter().any(|l| l.contains("CNI-HOSTPORT-DNAT")),
        "{before:?}"
    );
    let here = in_ns(&node);
    obs.expect("portmap's chains", WAIT, |v| {
        here(v)
            && v["chain"]
                .as_str()
                .is_some_and(|c| c.starts_with("CNI-DN-"))
    });

    match (wiper, &fw) {
        (Wiper::FirewalldReload, Some(fw)) => fw.must(&["--reload"]),
        // The admin's rules.v4 has a nat table of its own, without the CNI's chains.
        _ => netfilter_persistent_reload_with(
            &node,
            "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n\
             COMMIT\n*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n",
        ),
    }
    let wiped = std::time::Instant::now();
    let line = restore_line(&mut obs, &node, "restored");
    assert_eq!(line["restore"]["owner"], "cni-plugins", "{line}");
    assert_eq!(line["restore"]["command"], backend.restore(), "{line}");
    assert!(
        poll(3, || answers(&node)),
        "the hostPort does not answer 3 s after the wipe:\n{}",
        obs.dump()
    );
    let took = wiped.elapsed();
    let id = line["id"].as_str().unwrap().to_string();
    obs.wait_line("the incident resolved by observer", WAIT, |v| {
        v["kind"] == "incident" && v["id"] == id && v["state"] == "resolved"
    });
    let after_save = must(&node, &format!("{} -t nat", backend.save()));
    let after = cni_lines(&node, backend);
    assert_eq!(after, before, "the CNI's chains and rules read as they did");
    assert_eq!(
        rules_in_order(&after_save),
        before_order,
        "each chain's rules in their order"
    );
    eprintln!(
        "the hostPort answered again {} ms after the wipe",
        took.as_millis()
    );

    // The pod goes away: the plugins' own DEL removes what observer put back, as the CNI's
    // own change, which raises no incident and makes no restore.
    let mark = obs.mark();
    cni((&node, &pod), backend, "DEL", "portmap", &portmap_conf);
    cni((&node, &pod), backend, "DEL", "bridge", &bridge_conf);
    obs.expect_since(mark, "portmap's DEL", WAIT, |v| {
        here(v)
            && v["op"] == "chain_delete"
            && v["chain"]
                .as_str()
                .is_some_and(|c| c.starts_with("CNI-DN-"))
    });
    // Three times --restore-after. Incidents of the wipe may still end meanwhile; a new one,
    // or a write of observer's, would be the DEL's.
    obs.drain(3000);
    let known: std::collections::HashSet<&str> = obs.seen[..mark]
        .iter()
        .filter(|v| v["kind"] == "incident")
        .filter_map(|v| v["id"].as_str())
        .collect();
    let told: Vec<&Value> = obs.seen[mark..]
        .iter()
        .filter(|v| {
            let new_incident =
                v["kind"] == "incident" && !v["id"].as_str().is_some_and(|id| known.contains(id));
            here(v) && (new_incident || v["process"]["actor"] == "observer")
        })
        .collect();
    assert!(
        told.is_empty(),
        "the CNI's own DEL raised an incident or a restore: {told:?}\n{}",
        obs.dump()
    );
    assert!(
        !cni_lines(&node, backend)
            .iter()
            .any(|l| l.contains("CNI-DN-")),
        "portmap's DEL left its chain: {:?}",
        cni_lines(&node, backend)
    );
    drop(fw);
    obs.stop();
}

#[test]
fn cni_hostport_chains_come_back_after_netfilter_persistent_reload_and_the_port_answers() {
    cni_hostport_case("rst-nfp", Backend::Nft, Wiper::NetfilterPersistent);
}

#[test]
fn cni_hostport_chains_come_back_after_a_firewalld_reload_on_iptables_nft() {
    cni_hostport_case("rst-fwn", Backend::Nft, Wiper::FirewalldReload);
}

#[test]
fn cni_hostport_chains_come_back_after_a_firewalld_reload_on_iptables_legacy() {
    cni_hostport_case("rst-fwl", Backend::Legacy, Wiper::FirewalldReload);
}

/// `observer query --incident ID --restore-script` on a daemon's record (restore off): the
/// script, applied as it says, puts the chains back as they were.
#[test]
fn the_records_restore_script_applied_by_hand_puts_the_chains_back() {
    skip_unless!("ip", "iptables-legacy", "iptables-legacy-save");
    let ns = Netns::new("restore-rec");
    let dir = tempfile::tempdir().expect("tempdir");
    let record = dir.path().join("record.db");
    let rec = record.to_str().unwrap();
    let mut d = test_support::Daemon::start(test_support::free_port(), &["--record", rec]);
    kubelet_sets_up(&ns, "iptables-legacy");
    let before = firewall_lines(&ns, "iptables-legacy-save");
    let inode = ns.ino();
    d.expect("kubelet's jump from OUTPUT", |v| {
        v["netns"].as_u64() == Some(inode) && v["op"] == "rule_add" && v["chain"] == "OUTPUT"
    });
    legacy_wipe(&ns);
    d.expect("the delete", |v| {
        v["netns"].as_u64() == Some(inode) && v["op"] == "chain_delete"
    });
    // The record has the incident once the writer has it.
    let id = poll_value(20, || {
        test_support::query(&record, &["--incidents", "--netns", ns.name()])
            .into_iter()
            .find(|v| v["type"] == "foreign_delete")
            .and_then(|v| v["id"].as_str().map(str::to_string))
    })
    .expect("the record holds the foreign_delete");
    assert!(firewall_lines(&ns, "iptables-legacy-save").is_empty());
    let out = Command::new(test_support::observer_bin())
        .args([
            "query",
            "--record",
            rec,
            "--incident",
            &id,
            "--restore-script",
        ])
        .output()
        .expect("observer query");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        script.contains(&format!(
            "apply with `ip netns exec {} iptables-legacy-restore --noflush`",
            ns.name()
        )),
        "{script}"
    );
    // Applied as it says (its comments are comments to iptables-restore too).
    let file = dir.path().join("restore.rules");
    std::fs::write(&file, &script).expect("script");
    must(
        &ns,
        &format!("iptables-legacy-restore --noflush < {}", file.display()),
    );
    assert_eq!(firewall_lines(&ns, "iptables-legacy-save"), before);
    d.stop();
}

fn poll_value<T>(secs: u64, f: impl Fn() -> Option<T>) -> Option<T> {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if std::time::Instant::now() > end {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
