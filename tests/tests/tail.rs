//! `observer tail --json` against real iptables-legacy, ip6tables-legacy, iptables-nft and nft
//! runs in namespaces these tests create (and remove). Needs root; skips otherwise.

use serde_json::Value;
use test_support::{change, skip_unless, Netns, Observer, Writer};

const WAIT: u64 = 20;

fn in_ns(ns: &Netns) -> impl Fn(&Value) -> bool + '_ {
    move |v: &Value| v["netns"].as_u64() == Some(ns.ino())
}

/// The process fields of a change made by `tool` run from the writer script.
fn assert_writer(v: &Value, tool: &str, writer: &Writer) {
    let p = &v["process"];
    assert_eq!(p["comm"], tool, "comm in {v}");
    assert_eq!(p["actor"], writer.name.as_str(), "actor in {v}");
    assert_eq!(p["parent_comm"], writer.name.as_str(), "parent_comm in {v}");
    assert!(p["pid"].as_u64().unwrap_or(0) > 0, "pid in {v}");
    assert!(p["ppid"].as_u64().unwrap_or(0) > 0, "ppid in {v}");
}

#[test]
fn legacy_changes_in_a_namespace_created_after_start() {
    skip_unless!(
        "ip",
        "iptables-legacy",
        "ip6tables-legacy",
        "iptables-legacy-restore"
    );
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("legacy");
    let w = Writer::new("obs-kubeproxy");
    let here = in_ns(&ns);

    ns.write(&w, &["iptables-legacy", "-N", "OBS-A"]);
    let v = obs.expect("chain_create OBS-A", WAIT, |v| {
        here(v) && change("chain_create", Some("OBS-A"))(v)
    });
    assert_eq!(v["backend"], "legacy");
    assert_eq!(v["family"], "ip");
    assert_eq!(v["table"], "filter");
    assert_eq!(v["source"], test_support::legacy_source().as_str());
    assert_eq!(v["result"], "ok");
    assert_writer(&v, "iptables-legacy", &w);

    ns.write(
        &w,
        &[
            "iptables-legacy",
            "-A",
            "OBS-A",
            "-s",
            "10.0.0.0/8",
            "-p",
            "tcp",
            "--dport",
            "80",
            "-j",
            "ACCEPT",
        ],
    );
    let v = obs.expect("rule_add", WAIT, |v| {
        here(v) && change("rule_add", Some("OBS-A"))(v)
    });
    assert_eq!(
        v["rule"],
        "-s 10.0.0.0/8 -p tcp -m tcp --dport 80 -j ACCEPT"
    );
    assert_writer(&v, "iptables-legacy", &w);

    ns.write(
        &w,
        &[
            "iptables-legacy",
            "-A",
            "OBS-A",
            "-m",
            "mark",
            "--mark",
            "0x8000/0x8000",
            "-j",
            "DROP",
        ],
    );
    obs.expect("second rule_add", WAIT, |v| {
        here(v)
            && change("rule_add", Some("OBS-A"))(v)
            && v["rule"] == "-m mark --mark 0x8000/0x8000 -j DROP"
    });

    ns.write(&w, &["iptables-legacy", "-R", "OBS-A", "2", "-j", "DROP"]);
    let v = obs.expect("rule_replace", WAIT, |v| {
        here(v) && change("rule_replace", Some("OBS-A"))(v)
    });
    assert_eq!(v["rule"], "-j DROP");
    assert!(
        v["detail"]
            .as_str()
            .unwrap_or("")
            .contains("--mark 0x8000/0x8000"),
        "{v}"
    );

    ns.write(&w, &["iptables-legacy", "-D", "OBS-A", "1"]);
    let v = obs.expect("rule_delete", WAIT, |v| {
        here(v) && change("rule_delete", Some("OBS-A"))(v)
    });
    assert_eq!(
        v["rule"],
        "-s 10.0.0.0/8 -p tcp -m tcp --dport 80 -j ACCEPT"
    );

    // A flush of a one-rule chain is a flush (the kernel hook saw `-F` on the command line)...
    ns.write(&w, &["iptables-legacy", "-F", "OBS-A"]);
    obs.expect("chain_flush", WAIT, |v| {
        here(v) && change("chain_flush", Some("OBS-A"))(v)
    });
    // ...and the delete of a chain's only rule is that rule's delete, not a flush.
    ns.write(&w, &["iptables-legacy", "-A", "OBS-A", "-j", "RETURN"]);
    obs.expect("rule_add", WAIT, |v| {
        here(v) && change("rule_add", Some("OBS-A"))(v) && v["rule"] == "-j RETURN"
    });
    let mark = obs.mark();
    ns.write(&w, &["iptables-legacy", "-D", "OBS-A", "1"]);
    let v = obs.expect_since(mark, "rule_delete of the only rule", WAIT, |v| {
        here(v) && change("rule_delete", Some("OBS-A"))(v)
    });
    assert_eq!(v["rule"], "-j RETURN", "{v}");
    assert_eq!(v["detail"], "the chain's only rule", "{v}");
    ns.write(&w, &["iptables-legacy", "-X", "OBS-A"]);
    obs.expect("chain_delete", WAIT, |v| {
        here(v) && change("chain_delete", Some("OBS-A"))(v)
    });

    ns.write(&w, &["ip6tables-legacy", "-N", "OBS-SIX"]);
    let v = obs.expect("ip6 chain_create", WAIT, |v| {
        here(v) && change("chain_create", Some("OBS-SIX"))(v)
    });
    assert_eq!(v["family"], "ip6");
    assert_writer(&v, "ip6tables-legac", &w);
    ns.write(
        &w,
        &[
            "ip6tables-legacy",
            "-A",
            "OBS-SIX",
            "-p",
            "tcp",
            "-j",
            "REJECT",
            "--reject-with",
            "tcp-reset",
        ],
    );
    let v = obs.expect("ip6 rule_add", WAIT, |v| {
        here(v) && change("rule_add", Some("OBS-SIX"))(v)
    });
    assert_eq!(v["rule"], "-p tcp -j REJECT --reject-with tcp-reset");

    // Several chains in one restore: one transaction.
    ns.write_stdin(
        &w,
        &["iptables-legacy-restore", "--noflush"],
        "*nat\n:OBS-SVC-1 - [0:0]\n:OBS-SVC-2 - [0:0]\n-A OBS-SVC-1 -j OBS-SVC-2\n-A OBS-SVC-2 -p udp --dport 53 -j DNAT --to-destination 10.1.2.3:53\nCOMMIT\n",
    );
    let a = obs.expect("restore chain 1", WAIT, |v| {
        here(v) && change("chain_create", Some("OBS-SVC-1"))(v)
    });
    let b = obs.expect("restore chain 2", WAIT, |v| {
        here(v) && change("chain_create", Some("OBS-SVC-2"))(v)
    });
    assert_eq!(a["table"], "nat");
    assert_eq!(a["txn"], b["txn"], "one restore is one transaction");
    assert_writer(&a, "iptables-legacy", &w);
    let dnat = obs.expect("restore DNAT rule", WAIT, |v| {
        here(v) && change("rule_add", Some("OBS-SVC-2"))(v)
    });
    assert_eq!(
        dnat["rule"],
        "-p udp -m udp --dport 53 -j DNAT --to-destination 10.1.2.3:53"
    );
    obs.stop();
}

/// arptables-legacy through the kernel's x_tables hook: chains and rules as
/// `arptables-legacy-save` prints them, with their writer.
#[test]
fn arptables_legacy_changes_by_chain_and_rule() {
    skip_unless!("ip", "arptables-legacy");
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("arp");
    let w = Writer::new("obs-arpwriter");
    let here = in_ns(&ns);

    ns.write(&w, &["arptables-legacy", "-N", "OBS-ARP"]);
    let v = obs.expect("chain_create OBS-ARP", WAIT, |v| {
        here(v) && change("chain_create", Some("OBS-ARP"))(v)
    });
    assert_eq!(v["backend"], "legacy");
    assert_eq!(v["family"], "arp");
    assert_eq!(v["table"], "filter");
    // The command name as the kernel keeps it: 15 characters.
    assert_writer(&v, "arptables-legac", &w);

    let add = [
        "arptables-legacy",
        "-A",
        "OBS-ARP",
        "-s",
        "10.0.0.1",
        "-i",
        "eth0",
        "-j",
        "DROP",
    ];
    ns.write(&w, &add);
    let v = obs.expect("rule_add", WAIT, |v| {
        here(v) && change("rule_add", Some("OBS-ARP"))(v)
    });
    assert_eq!(v["rule"], "-j DROP -i eth0 -s 10.0.0.1");
    assert_writer(&v, "arptables-legac", &w);

    ns.write(
        &w,
        &[
            "arptables-legacy",
            "-A",
            "OBS-ARP",
            "--opcode",
            "1",
            "-j",
            "mangle",
            "--mangle-ip-s",
            "10.0.0.9",
        ],
    );
    obs.expect("mangle rule_add", WAIT, |v| {
        here(v)
            && change("rule_add", Some("OBS-ARP"))(v)
            && v["rule"] == "-j mangle --opcode 1 --mangle-ip-s 10.0.0.9"
    });

    ns.write(&w, &["arptables-legacy", "-D", "OBS-ARP", "1"]);
    let v = obs.expect("rule_delete", WAIT, |v| {
        here(v) && change("rule_delete", Some("OBS-ARP"))(v)
    });
    assert_eq!(v["rule"], "-j DROP -i eth0 -s 10.0.0.1");

    ns.write(&w, &["arptables-legacy", "-F", "OBS-ARP"]);
    ns.write(&w, &["arptables-legacy", "-X", "OBS-ARP"]);
    obs.expect("chain_delete OBS-ARP", WAIT, |v| {
        here(v) && change("chain_delete", Some("OBS-ARP"))(v)
    });
}

/// ebtables-legacy through the kernel's hook: the bridge table read back after each replace
/// and reported by chain and rule, as `ebtables-legacy-save` prints them, with their writer.
/// The CI machines' own kernel has no legacy ebtables, so this runs in the guests of
/// `cargo xtask vm-test`, on every backend, under `CI=true`.
#[test]
#[ignore = "needs a kernel with legacy ebtables: runs in the guests of `cargo xtask vm-test`"]
fn ebtables_legacy_changes_by_chain_and_rule() {
    skip_unless!("ip", "ebtables-legacy");
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("ebt");
    let w = Writer::new("obs-ebtwriter");
    let here = in_ns(&ns);

    ns.write(&w, &["ebtables-legacy", "-N", "OBS-EBT"]);
    let v = obs.expect("chain_create OBS-EBT", WAIT, |v| {
        here(v) && change("chain_create", Some("OBS-EBT"))(v)
    });
    assert_eq!(v["backend"], "legacy");
    assert_eq!(v["family"], "bridge");
    assert_eq!(v["table"], "filter");
    assert_writer(&v, "ebtables-legacy", &w);

    let rule = "-p IPv4 -i eth0 --ip-src 10.0.0.1 -j DROP";
    let mut add = vec!["ebtables-legacy", "-A", "OBS-EBT"];
    add.extend(rule.split(' '));
    ns.write(&w, &add);
    let v = obs.expect("rule_add", WAIT, |v| {
        here(v) && change("rule_add", Some("OBS-EBT"))(v)
    });
    assert_eq!(v["rule"], rule);
    assert_writer(&v, "ebtables-legacy", &w);

    ns.write(&w, &["ebtables-legacy", "-D", "OBS-EBT", "1"]);
    let v = obs.expect("rule_delete", WAIT, |v| {
        here(v) && change("rule_delete", Some("OBS-EBT"))(v)
    });
    assert_eq!(v["rule"], rule);

    ns.write(&w, &["ebtables-legacy", "-X", "OBS-EBT"]);
    obs.expect("chain_delete OBS-EBT", WAIT, |v| {
        here(v) && change("chain_delete", Some("OBS-EBT"))(v)
    });
}

#[test]
fn nft_changes_in_a_namespace_created_after_start() {
    skip_unless!("ip", "nft");
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("nft");
    let w = Writer::new("obs-nftadmin");
    let here = in_ns(&ns);

    ns.write(&w, &["nft", "add", "table", "inet", "obst"]);
    let v = obs.expect("table_create", WAIT, |v| {
        here(v) && change("table_create", None)(v) && v["table"] == "obst"
    });
    assert_eq!(v["backend"], "nft");
    assert_eq!(v["family"], "inet");
    assert_eq!(v["source"], "netlink");
    assert_eq!(v["process"]["comm"], "nft");

    ns.write(
        &w,
        &[
            "nft",
            "add",
            "chain",
            "inet",
            "obst",
            "input",
            "{ type filter hook input priority 0; policy accept; }",
        ],
    );
    let v = obs.expect("chain_create", WAIT, |v| {
        here(v) && change("chain_create", Some("input"))(v)
    });
    assert_eq!(v["table"], "obst");
    ns.write(
        &w,
        &[
            "nft", "add", "rule", "inet", "obst", "input", "tcp", "dport", "22", "accept",
        ],
    );
    let v = obs.expect("rule_add", WAIT, |v| {
        here(v) && change("rule_add", Some("input"))(v)
    });
    assert_eq!(v["rule"], "tcp dport 22 accept");
    ns.write(
        &w,
        &[
            "nft",
            "add",
            "rule",
            "inet",
            "obst",
            "input",
            "ip",
            "saddr",
            "10.0.0.0/8",
            "drop",
        ],
    );
    obs.expect("second rule_add", WAIT, |v| {
        here(v) && change("rule_add", Some("input"))(v) && v["rule"] == "ip saddr 10.0.0.0/8 drop"
    });
    // Interfaces are named from the namespace's own link table, as `nft` names them.
    ns.write(
        &w,
        &[
            "ip", "link", "add", "obs0", "type", "veth", "peer", "name", "obs1",
        ],
    );
    ns.write(
        &w,
        &[
            "nft", "add", "rule", "inet", "obst", "input", "iif", "obs1", "accept",
        ],
    );
    obs.expect("rule_add naming an interface", WAIT, |v| {
        here(v) && change("rule_add", Some("input"))(v) && v["rule"] == "iif \"obs1\" accept"
    });

    // The delete of a chain's only rule is that rule's delete (the request carries its handle),
    // and the flush of a one-rule chain is a flush (the request has none).
    ns.write(&w, &["nft", "add", "chain", "inet", "obst", "one"]);
    ns.write(
        &w,
        &[
            "nft", "add", "rule", "inet", "obst", "one", "counter", "accept",
        ],
    );
    let added = obs.expect("the only rule", WAIT, |v| {
        here(v) && change("rule_add", Some("one"))(v)
    });
    let _ = added;
    let handle = ns
        .read(&["nft", "-a", "list", "chain", "inet", "obst", "one"])
        .lines()
        .filter(|l| l.contains("counter"))
        .find_map(|l| {
            l.rsplit_once("# handle ")
                .map(|(_, h)| h.trim().to_string())
        })
        .expect("the rule's handle");
    let mark = obs.mark();
    ns.write(
        &w,
        &[
            "nft", "delete", "rule", "inet", "obst", "one", "handle", &handle,
        ],
    );
    let v = obs.expect_since(mark, "rule_delete of the only rule", WAIT, |v| {
        here(v) && v["chain"] == "one" && (v["op"] == "rule_delete" || v["op"] == "chain_flush")
    });
    assert_eq!(v["op"], "rule_delete", "{v}");
    assert_eq!(v["detail"], "the chain's only rule", "{v}");
    ns.write(
        &w,
        &[
            "nft", "add", "rule", "inet", "obst", "one", "counter", "accept",
        ],
    );
    let mark = obs.mark();
    ns.write(&w, &["nft", "flush", "chain", "inet", "obst", "one"]);
    let v = obs.expect_since(mark, "flush of a one-rule chain", WAIT, |v| {
        here(v) && v["chain"] == "one" && (v["op"] == "rule_delete" || v["op"] == "chain_flush")
    });
    assert_eq!(v["op"], "chain_flush", "{v}");

    ns.write(&w, &["nft", "flush", "chain", "inet", "obst", "input"]);
    let v = obs.expect("chain_flush", WAIT, |v| {
        here(v) && change("chain_flush", Some("input"))(v)
    });
    // One flush, not one delete per rule.
    let deletes = obs
        .changes()
        .iter()
        .filter(|c| here(c) && c["op"] == "rule_delete" && c["chain"] == "input")
        .count();
    assert_eq!(
        deletes, 0,
        "a flush must not also appear as rule deletes: {v}"
    );

    ns.write(&w, &["nft", "add", "chain", "inet", "obst", "other"]);
    ns.write(
        &w,
        &[
            "nft", "add", "rule", "inet", "obst", "other", "counter", "accept",
        ],
    );
    ns.write(
        &w,
        &[
            "nft", "add", "rule", "inet", "obst", "input", "udp", "dport", "53", "accept",
        ],
    );
    obs.expect("rule in other", WAIT, |v| {
        here(v) && change("rule_add", Some("other"))(v)
    });
    ns.write(&w, &["nft", "flush", "table", "inet", "obst"]);
    obs.expect("table_flush", WAIT, |v| {
        here(v) && change("table_flush", None)(v) && v["table"] == "obst"
    });

    ns.write(&w, &["nft", "delete", "table", "inet", "obst"]);
    obs.expect("table_delete", WAIT, |v| {
        here(v) && change("table_delete", None)(v) && v["table"] == "obst"
    });
    obs.stop();
}

#[test]
fn iptables_nft_changes() {
    skip_unless!("ip", "iptables-nft");
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("ipt-nft");
    let w = Writer::new("obs-kubelet");
    let here = in_ns(&ns);

    ns.write(&w, &["iptables-nft", "-N", "OBS-FW"]);
    let v = obs.expect("chain_create", WAIT, |v| {
        here(v) && change("chain_create", Some("OBS-FW"))(v)
    });
    assert_eq!(v["backend"], "nft");
    assert_eq!(v["family"], "ip");
    assert_eq!(v["table"], "filter");
    ns.write(
        &w,
        &[
            "iptables-nft",
            "-A",
            "OBS-FW",
            "-m",
            "mark",
            "--mark",
            "0x8000/0x8000",
            "-j",
            "DROP",
        ],
    );
    let v = obs.expect("rule_add", WAIT, |v| {
        here(v) && change("rule_add", Some("OBS-FW"))(v)
    });
    let rule = v["rule"].as_str().unwrap_or_default();
    // In its writer's syntax (iptables-nft-save's), the nft form beside it.
    assert_eq!(rule, "-m mark --mark 0x8000/0x8000 -j DROP");
    assert_eq!(v["rule_syntax"], "iptables", "{v}");
    assert_eq!(
        v["rule_nft"], "meta mark & 0x00008000 == 0x00008000 counter drop",
        "{v}"
    );
    ns.write(&w, &["iptables-nft", "-A", "OBS-FW", "-j", "ACCEPT"]);
    obs.expect("rule_add 2", WAIT, |v| {
        here(v) && change("rule_add", Some("OBS-FW"))(v) && v["rule"] == "-j ACCEPT"
    });
    ns.write(&w, &["iptables-nft", "-F", "OBS-FW"]);
    obs.expect("chain_flush", WAIT, |v| {
        here(v) && change("chain_flush", Some("OBS-FW"))(v)
    });
    ns.write(&w, &["iptables-nft", "-X", "OBS-FW"]);
    obs.expect("chain_delete", WAIT, |v| {
        here(v) && change("chain_delete", Some("OBS-FW"))(v)
    });
    obs.stop();
}

#[test]
fn netns_filter_and_untouched_namespaces() {
    skip_unless!("ip", "nft", "iptables-legacy");
    // Both namespaces exist before observer starts.
    let watched = Netns::new("watched");
    let other = Netns::new("other");
    let quiet = Netns::new("quiet");
    let w = Writer::new("obs-filtered");
    let mut obs = Observer::start(&["--netns", watched.name()]);

    other.write(&w, &["iptables-legacy", "-N", "OBS-OTHER"]);
    other.write(&w, &["nft", "add", "table", "ip", "obsother"]);
    watched.write(&w, &["iptables-legacy", "-N", "OBS-MINE"]);
    watched.write(&w, &["nft", "add", "table", "ip", "obsmine"]);
    obs.expect(
        "legacy change in the watched namespace",
        WAIT,
        change("chain_create", Some("OBS-MINE")),
    );
    obs.expect("nft change in the watched namespace", WAIT, |v| {
        v["op"] == "table_create" && v["table"] == "obsmine"
    });
    obs.drain(500);
    for c in obs.changes() {
        assert_eq!(
            c["netns"].as_u64(),
            Some(watched.ino()),
            "leaked from another namespace: {c}"
        );
    }
    obs.stop();

    // An unfiltered observer reports nothing for a namespace nobody touches.
    let mut obs = Observer::start(&[]);
    other.write(&w, &["iptables-legacy", "-N", "OBS-OTHER2"]);
    obs.expect(
        "a change elsewhere",
        WAIT,
        change("chain_create", Some("OBS-OTHER2")),
    );
    obs.drain(300);
    let inode = quiet.ino();
    assert!(
        obs.changes()
            .iter()
            .all(|c| c["netns"].as_u64() != Some(inode)),
        "the untouched namespace produced changes"
    );
    obs.stop();
}

#[test]
fn ctrl_c_while_busy_exits_cleanly() {
    skip_unless!("ip", "iptables-legacy", "iptables-legacy-restore");
    let ns = Netns::new("busy");
    let w = Writer::new("obs-busy");
    // A table big enough that every replace keeps the engine busy for a while.
    let mut restore = String::from("*filter\n");
    for c in 0..400 {
        restore.push_str(&format!(":OBS-BUSY-{c} - [0:0]\n"));
    }
    for c in 0..400 {
        for r in 0..10 {
            restore.push_str(&format!(
                "-A OBS-BUSY-{c} -s 10.{c_hi}.{c_lo}.{r}/32 -p tcp -m tcp --dport 80 -j ACCEPT\n",
                c_hi = c / 256,
                c_lo = c % 256
            ));
        }
    }
    restore.push_str("COMMIT\n");
    ns.write_stdin(&w, &["iptables-legacy-restore"], &restore);
    let mut obs = Observer::start(&["--netns", ns.name()]);
    let name = ns.name().to_string();
    let script = w.path.clone();
    let writer = std::thread::spawn(move || {
        for i in 0..40 {
            let _ = std::process::Command::new("ip")
                .args(["netns", "exec", &name])
                .arg(&script)
                .args(["iptables-legacy", "-N", &format!("OBS-LOAD-{i}")])
                .output();
        }
    });
    obs.expect("the first change of the stream", WAIT, |v| {
        v["op"] == "chain_create"
            && v["chain"]
                .as_str()
                .is_some_and(|c| c.starts_with("OBS-LOAD-"))
    });
    // Interrupt while replaces keep arriving: observer must notice and exit with success.
    obs.stop();
    writer.join().expect("writer thread");
}

/// `observer tail | head -1`: when the reader goes away, the next line written ends the run,
/// quietly and with success.
#[test]
fn a_reader_that_goes_away_ends_the_tail_quietly() {
    use std::io::BufRead;
    skip_unless!("ip", "iptables-legacy");
    let ns = Netns::new("gone");
    let w = Writer::new("obs-gone");
    let mut child = std::process::Command::new(test_support::observer_bin())
        .args(["tail", "--json", "--netns", ns.name()])
        .args(
            test_support::forced_hooks()
                .iter()
                .flat_map(|h| ["--hooks", h.as_str()]),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start observer");
    let mut ready = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("the ready line");
    assert!(ready.contains(r#""state":"ready""#), "first line: {ready}");
    // The reader is gone (dropped with its BufReader); each change is one more line to write.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(WAIT);
    let mut n = 0;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "observer still runs {WAIT} s after its reader went away ({n} changes made)"
        );
        ns.write(&w, &["iptables-legacy", "-N", &format!("OBS-GONE-{n}")]);
        n += 1;
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert!(status.success(), "observer exited with {status}: {stderr}");
    assert!(
        !stderr.contains("cannot write output") && !stderr.contains("panicked"),
        "the end was not quiet: {stderr}"
    );
}

/// `--hooks fentry` and `--hooks kprobe` either attach (the ready line says so) or fail at once
/// with the kernel's reason; they never fall back quietly to another backend. A run that forces
/// one (OBSERVER_TEST_HOOKS, in the guests) checks that one: the run of the other checks it.
#[test]
fn a_forced_backend_attaches_or_fails_with_the_kernels_error() {
    skip_unless!("ip");
    let forced = test_support::forced_hooks().filter(|b| b == "fentry" || b == "kprobe");
    let backends: Vec<&str> = match forced.as_deref() {
        Some(b) => vec![b],
        None => vec!["fentry", "kprobe"],
    };
    for backend in backends {
        let mut child = std::process::Command::new(test_support::observer_bin())
            .args(["tail", "--json", "--hooks", backend])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start observer");
        let stdout = child.stdout.take().expect("stdout");
        // stderr is read as it comes: a refusal can carry a long verifier log.
        let mut stderr = child.stderr.take().expect("stderr");
        let err_reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
            s
        });
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut line = String::new();
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let first = rx
            .recv_timeout(std::time::Duration::from_secs(
                60 * test_support::slowdown(),
            ))
            .expect("observer neither got ready nor exited");
        if first.trim().is_empty() {
            let status = child.wait().expect("observer exit");
            let stderr = err_reader.join().expect("stderr reader");
            assert!(
                !status.success(),
                "{backend}: exited 0 without a ready line"
            );
            assert!(
                stderr.contains(&format!(
                    "cannot attach the x_tables hook on the {backend} backend: "
                )) && stderr.contains("os error"),
                "{backend}: the kernel's reason is missing: {stderr}"
            );
            println!(
                "{backend} refused here, as it should say: {}",
                stderr.trim()
            );
        } else {
            let _ = child.kill();
            let _ = child.wait();
            let v: Value = serde_json::from_str(&first).expect("ready line is JSON");
            assert_eq!(v["state"], "ready", "{first}");
            let hooks = v["hooks"].as_str().unwrap_or("");
            // The one exception: a kernel that refuses the x_tables function alone on this
            // backend (fentry on 5.10) puts that hook on the next one, and says why.
            let fallback = test_support::xt_fallback(hooks, backend);
            if let Some(on) = &fallback {
                println!("{backend}: the x_tables hook went on {on}, as it should say: {hooks}");
            }
            assert!(
                hooks.starts_with(&format!("x_tables={backend} ")) || fallback.is_some(),
                "{backend} forced, but: {hooks}"
            );
            // Every hook is on that backend: no syscall tracepoint is attached at all.
            for hook in [
                "namespaces",
                "umount",
                "nf_writers",
                "nft_gens",
                "nf_refusals",
            ] {
                assert!(
                    hooks.contains(&format!(" {hook}={backend}")),
                    "{backend} forced, but {hook} is elsewhere: {hooks}"
                );
            }
            // doctor lists exactly what is attached: kernel functions only.
            let out = std::process::Command::new(test_support::observer_bin())
                .args(["doctor", "--json"])
                .output()
                .expect("run observer doctor");
            let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!(
                    "doctor --json: {e}: {}",
                    String::from_utf8_lossy(&out.stdout)
                )
            });
            let attached: Vec<&str> = report["attached"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            assert!(
                attached.len() >= 7
                    && attached.iter().all(|a| !a.starts_with("syscalls:"))
                    && attached.iter().any(|a| a.ends_with(":netlink_unicast"))
                    && attached.iter().any(|a| a.ends_with(":copy_net_ns")),
                "doctor on a {backend} kernel: {attached:?}"
            );
            // doctor names what such a kernel loses: the x_tables hook on a worse backend.
            if fallback.is_some() {
                let degraded = report["degraded"].to_string();
                assert!(
                    degraded.contains("x_tables on ") && degraded.contains("refused"),
                    "doctor does not say the x_tables hook is degraded: {report}"
                );
            }
        }
    }
}

#[test]
fn nft_changes_lost_by_netlink_are_recovered_and_attributed() {
    skip_unless!("ip", "nft");
    let ns = Netns::new("flood");
    // A receive buffer far too small for one generation of 400 rules: the kernel drops
    // notifications (ENOBUFS), and observer must still report every change, with its writer.
    let mut obs = Observer::start(&["--netns", ns.name(), "--netlink-rcvbuf", "4KiB"]);
    let here = in_ns(&ns);
    let mut script = String::from("add table ip obsflood\nadd chain ip obsflood marker\n");
    script.push_str("add chain ip obsflood flood\n");
    for port in 1..=400 {
        script.push_str(&format!(
            "add rule ip obsflood flood tcp dport {port} accept\n"
        ));
    }
    let w = Writer::new("obs-flooder");
    // Stopped while the burst arrives: nothing drains the socket, so the overflow is certain.
    obs.freeze(true);
    ns.write_stdin(&w, &["nft", "-f", "-"], &script);
    obs.freeze(false);
    obs.wait_line("a gap line naming the overrun", WAIT, |v| {
        v["kind"] == "status"
            && v["state"] == "gap"
            && v["message"].as_str().is_some_and(|m| m.contains("ENOBUFS"))
    });
    let v = obs.expect("the marker chain, recovered", WAIT, |v| {
        here(v) && change("chain_create", Some("marker"))(v)
    });
    assert_eq!(v["recovered"], true, "{v}");
    assert_eq!(v["backend"], "nft");
    assert_writer(&v, "nft", &w);
    // Every rule, once, from the same writer.
    obs.expect("the last rule", WAIT, |v| {
        here(v) && change("rule_add", Some("flood"))(v) && v["rule"] == "tcp dport 400 accept"
    });
    obs.drain(500);
    let rules: Vec<&Value> = obs
        .changes()
        .into_iter()
        .filter(|c| here(c) && c["op"] == "rule_add" && c["chain"] == "flood")
        .collect();
    assert_eq!(rules.len(), 400, "each rule once");
    for r in &rules {
        assert_eq!(r["process"]["actor"], w.name.as_str(), "{r}");
    }
    // The stream goes on as usual afterwards.
    ns.write(&w, &["nft", "add", "chain", "ip", "obsflood", "after"]);
    let v = obs.expect("a change after the gap", WAIT, |v| {
        here(v) && change("chain_create", Some("after"))(v)
    });
    assert!(v.get("recovered").is_none(), "{v}");
    assert_writer(&v, "nft", &w);
    obs.stop();
}

#[test]
fn a_refused_nft_batch_is_a_failed_attempt_not_a_change() {
    skip_unless!("ip", "nft");
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("refused");
    let here = in_ns(&ns);
    let w = Writer::new("obs-refuser");
    ns.write_stdin(
        &w,
        &["nft", "-f", "-"],
        "add table ip obsref\nadd chain ip obsref target\nadd chain ip obsref from\n\
         add rule ip obsref from jump target\n",
    );
    obs.expect("the jump", WAIT, |v| {
        here(v) && change("rule_add", Some("from"))(v)
    });
    // A chain still referenced cannot go: the kernel refuses the whole batch, so the chain
    // created in the same batch is not created either.
    let batch = Writer::script(
        "obs-refuser",
        "printf 'add chain ip obsref new1\\ndelete chain ip obsref target\\n' | nft -f -",
    );
    let err = ns.write_refused(&batch, &[]);
    assert!(err.contains("busy"), "nft said: {err}");
    let v = obs.expect("the refused delete", WAIT, |v| {
        here(v) && change("chain_delete", Some("target"))(v)
    });
    assert!(
        v["result"].as_str().unwrap_or("").starts_with("EBUSY"),
        "a refused write must carry the kernel's error: {v}"
    );
    assert_eq!(v["backend"], "nft");
    assert_eq!(v["table"], "obsref");
    // Seen by the hook of the backend in force: netlink_ack (kprobe, fentry) or the writer's
    // replies (tracepoint).
    assert_eq!(
        v["source"].as_str(),
        Some(test_support::hooks_source().as_str()),
        "{v}"
    );
    assert_eq!(v["process"]["comm"], "nft");
    assert!(v["process"]["pid"].as_u64().unwrap_or(0) > 0, "{v}");
    assert_eq!(v["process"]["actor"], w.name.as_str(), "{v}");
    // The batch's next change is seen normally, and nothing of the refused one was applied.
    ns.write(&w, &["nft", "add", "chain", "ip", "obsref", "after"]);
    obs.expect("the next change", WAIT, |v| {
        here(v) && change("chain_create", Some("after"))(v)
    });
    for c in obs.changes() {
        if here(c) && c["result"] == "ok" {
            assert_ne!(
                c["chain"], "new1",
                "a refused batch reported as applied: {c}"
            );
            assert!(
                !(c["op"] == "chain_delete" && c["chain"] == "target"),
                "a refused delete reported as applied: {c}"
            );
        }
    }
    obs.stop();
}

/// Each nftables generation is joined to the writer that committed it: on kprobe and fentry
/// kernels by its generation id (the kernel reports who committed which generation), on the
/// tracepoint backend by the writer's thread id. observer says at exit how many went which way.
#[test]
fn nft_generations_are_joined_to_their_writer() {
    skip_unless!("ip", "nft");
    let ns = Netns::new("genjoin");
    let forced = test_support::forced_hooks();
    let mut child = std::process::Command::new(test_support::observer_bin())
        .args(["tail", "--json", "--netns", ns.name()])
        .args(forced.iter().flat_map(|h| ["--hooks", h.as_str()]))
        .env("OBSERVER_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start observer");
    let lines = test_support::json_lines(child.stdout.take().expect("stdout"));
    let mut stderr = child.stderr.take().expect("stderr");
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let wait = std::time::Duration::from_secs(60 * test_support::slowdown());
    let ready = lines.recv_timeout(wait).expect("no ready line");
    assert_eq!(ready["state"], "ready", "{ready}");
    for rule in [
        "add table ip obsgen",
        "add chain ip obsgen c",
        "add rule ip obsgen c accept",
    ] {
        let mut args = vec!["netns", "exec", ns.name(), "nft"];
        args.extend(rule.split(' '));
        test_support::run("ip", &args);
    }
    let mut seen = 0;
    let deadline = std::time::Instant::now() + wait;
    while seen < 3 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let v = lines
            .recv_timeout(left)
            .expect("the three nft changes were not reported");
        if test_support::is_change(&v) && v["table"] == "obsgen" {
            assert_eq!(v["process"]["comm"], "nft", "{v}");
            seen += 1;
        }
    }
    test_support::run("kill", &["-INT", &child.id().to_string()]);
    let _ = child.wait();
    let err = err_reader.join().unwrap_or_default();
    let counts: Vec<u64> = err
        .lines()
        .find_map(|l| l.split_once("nftables generations:").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no join summary at exit: {err}"))
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    let [by_id, by_thread, from_proc] = counts[..] else {
        panic!("unexpected summary: {err}");
    };
    match test_support::hooks_source().as_str() {
        // Under emulation (a slowdown over 1) a generation's record can reach userspace after
        // the 10 ms the reader waits for it; the thread's batch then names the writer. Natively
        // every generation is joined by its id.
        "fentry" | "kprobe" => assert!(
            by_id >= 1
                && from_proc == 0
                && by_id + by_thread >= 3
                && (test_support::slowdown() > 1 || by_thread == 0),
            "generations not joined by id: {by_id} by id, {by_thread} by thread, {from_proc} \
             from /proc"
        ),
        _ => assert!(
            by_id == 0 && by_thread >= 3 && from_proc == 0,
            "tracepoint backend: {by_id} by id, {by_thread} by thread, {from_proc} from /proc"
        ),
    }
}
