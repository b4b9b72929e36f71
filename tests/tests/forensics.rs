//! `observer query --at` and `--diff` against the real tools: `observer run` records real
//! iptables-legacy and nft writes in two namespaces (rules added and inserted, a restore, flushes,
//! chain deletes, a policy, a replace), across a restart of the daemon and across retention
//! deleting the oldest rows; `iptables-legacy-save` and `nft list ruleset` are saved at known
//! moments, and the ruleset rebuilt from the record for each moment must equal them (counters and
//! handles aside); the diff between two moments must equal the difference of the saved ones.
//! Needs root; skips otherwise.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use test_support::{free_port, get, observer_bin, query, skip_unless, Daemon, Netns, Writer};

/// One daemon at a time: each watches every namespace and could take the other's port.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn now() -> String {
    let t = time::OffsetDateTime::now_utc();
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// `iptables-save` text without comments and counters, as a set of table blocks.
fn norm_legacy(text: &str) -> Vec<String> {
    let mut tables: Vec<String> = Vec::new();
    for l in text.lines() {
        let l = l.trim_end();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if l.starts_with('*') {
            tables.push(String::new());
        }
        let l = match l.rsplit_once(" [") {
            Some((head, _)) if l.starts_with(':') => head.to_string(),
            _ => l.to_string(),
        };
        if let Some(t) = tables.last_mut() {
            t.push_str(&l);
            t.push('\n');
        }
    }
    tables.sort();
    tables
}

/// `nft list ruleset` text without comments, counters' values and blank lines, per table.
fn norm_nft(text: &str) -> Vec<String> {
    let mut tables: Vec<String> = Vec::new();
    for l in text.lines() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if l.starts_with("table ") {
            tables.push(String::new());
        }
        let words: Vec<&str> = l.split(' ').collect();
        let mut kept = Vec::new();
        let mut i = 0;
        while i < words.len() {
            kept.push(words[i]);
            i += if words[i] == "counter" && words.get(i + 1) == Some(&"packets") {
                5
            } else {
                1
            };
        }
        if let Some(t) = tables.last_mut() {
            t.push_str(&kept.join(" "));
            t.push('\n');
        }
    }
    tables.sort();
    tables
}

/// What the tools said at one moment, per namespace.
struct Moment {
    label: String,
    time: String,
    legacy: BTreeMap<String, Vec<String>>,
    nft: BTreeMap<String, Vec<String>>,
}

fn save(label: &str, spaces: &[&Netns]) -> Moment {
    // Let observer see and record the last change, then mark the moment.
    std::thread::sleep(Duration::from_millis(600));
    let time = now();
    std::thread::sleep(Duration::from_millis(50));
    let mut m = Moment {
        label: label.into(),
        time,
        legacy: BTreeMap::new(),
        nft: BTreeMap::new(),
    };
    for ns in spaces {
        m.legacy.insert(
            ns.name().to_string(),
            norm_legacy(&ns.read(&["iptables-legacy-save"])),
        );
        m.nft.insert(
            ns.name().to_string(),
            norm_nft(&ns.read(&["nft", "list", "ruleset"])),
        );
    }
    m
}

/// The record's ruleset at a moment, per namespace, in the same normal form.
fn rebuilt(record: &Path, m: &Moment, ns: &Netns) -> (Vec<String>, Vec<String>) {
    let lines = query(record, &["--at", &m.time, "--netns", ns.name()]);
    let text = |backend: &str| -> String {
        lines
            .iter()
            .filter(|v| v["kind"] == "ruleset" && v["backend"] == backend)
            .filter_map(|v| v["text"].as_str())
            .collect()
    };
    (norm_legacy(&text("legacy")), norm_nft(&text("nft")))
}

fn check(record: &Path, moments: &[Moment], spaces: &[&Netns]) {
    for m in moments {
        for ns in spaces {
            let (legacy, nft) = rebuilt(record, m, ns);
            assert_eq!(
                legacy,
                m.legacy[ns.name()],
                "legacy tables of {} at moment `{}` ({})",
                ns.name(),
                m.label,
                m.time
            );
            assert_eq!(
                nft,
                m.nft[ns.name()],
                "nft tables of {} at moment `{}` ({})",
                ns.name(),
                m.label,
                m.time
            );
        }
    }
}

/// The difference of two saved moments, chain by chain: (table, chain) -> (rules added, rules
/// removed), both sorted; a chain that appears or goes counts all its rules, and a chain whose
/// policy changed is there too.
fn saved_diff(
    a: &[String],
    b: &[String],
) -> BTreeMap<(String, String), (Vec<String>, Vec<String>)> {
    type Chains = BTreeMap<(String, String), (String, Vec<String>)>;
    let chains = |tables: &[String]| {
        let mut m: Chains = BTreeMap::new();
        for t in tables {
            let name = t
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches('*')
                .to_string();
            for l in t.lines() {
                if let Some(c) = l.strip_prefix(':') {
                    let (c, policy) = c.split_once(' ').unwrap_or((c, ""));
                    m.entry((name.clone(), c.to_string())).or_default().0 = policy.to_string();
                } else if let Some(rest) = l.strip_prefix("-A ") {
                    let (c, r) = rest.split_once(' ').unwrap_or((rest, ""));
                    m.entry((name.clone(), c.to_string()))
                        .or_default()
                        .1
                        .push(r.to_string());
                }
            }
        }
        m
    };
    let (old, new) = (chains(a), chains(b));
    let mut out = BTreeMap::new();
    let keys: std::collections::BTreeSet<_> = old.keys().chain(new.keys()).cloned().collect();
    for k in keys {
        let (o, n) = (
            old.get(&k).cloned().unwrap_or_default(),
            new.get(&k).cloned().unwrap_or_default(),
        );
        if old.contains_key(&k) && new.contains_key(&k) && o == n {
            continue;
        }
        let mut added: Vec<String> = n.1.iter().filter(|r| !o.1.contains(r)).cloned().collect();
        let mut removed: Vec<String> = o.1.iter().filter(|r| !n.1.contains(r)).cloned().collect();
        added.sort();
        removed.sort();
        out.insert(k, (added, removed));
    }
    out
}

#[test]
fn the_ruleset_at_each_moment_and_the_diff_between_two_are_rebuilt_from_the_record() {
    skip_unless!(
        "iptables-legacy",
        "iptables-legacy-save",
        "iptables-legacy-restore",
        "nft",
        "ip"
    );
    let a = Netns::new("fx-a");
    let b = Netns::new("fx-b");
    let spaces = [&a, &b];
    let kp = Writer::new("kube-proxy");
    let admin = Writer::new("fw-admin");
    let dir = tempfile::tempdir().expect("tempdir");
    let record = dir.path().join("record.db");
    let rec = record.to_str().unwrap();
    let port = free_port();
    // Few changes per snapshot: the rebuilds cross snapshots and replay changes after them.
    let start = |extra: &[&str]| {
        let mut args = vec!["--record", rec, "--snapshot-changes", "7"];
        args.extend_from_slice(extra);
        Daemon::start(port, &args)
    };
    let d = start(&[]);
    let mut moments = Vec::new();

    a.write(&kp, &["iptables-legacy", "-N", "OBS-A"]);
    a.write(
        &kp,
        &[
            "iptables-legacy",
            "-A",
            "OBS-A",
            "-s",
            "10.0.0.1/32",
            "-j",
            "ACCEPT",
        ],
    );
    a.write(&kp, &["iptables-legacy", "-A", "INPUT", "-j", "OBS-A"]);
    a.write(
        &kp,
        &[
            "iptables-legacy",
            "-I",
            "OBS-A",
            "1",
            "-p",
            "tcp",
            "--dport",
            "22",
            "-j",
            "DROP",
        ],
    );
    b.write(&admin, &["nft", "add table inet fw"]);
    b.write(
        &admin,
        &[
            "nft",
            "add chain inet fw input { type filter hook input priority 0; policy accept; }",
        ],
    );
    b.write(&admin, &["nft", "add rule inet fw input iif lo accept"]);
    b.write(
        &admin,
        &["nft", "add rule inet fw input tcp dport 22 counter accept"],
    );
    b.write(&admin, &["nft", "add chain inet fw extra"]);
    b.write(
        &admin,
        &["nft", "add rule inet fw extra ip saddr 10.1.0.0/16 drop"],
    );
    moments.push(save("first writes", &spaces));

    a.write_stdin(
        &kp,
        &["iptables-legacy-restore", "--noflush"],
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
         :POSTROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-X - [0:0]\n\
         :KUBE-SEP-1 - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n\
         -A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-X\n\
         -A KUBE-SVC-X -j KUBE-SEP-1\n-A KUBE-SEP-1 -p tcp -m tcp -j DNAT --to-destination 10.244.1.5:80\n\
         COMMIT\n",
    );
    b.write(
        &admin,
        &[
            "nft",
            "insert rule inet fw input ip saddr 192.168.0.0/16 drop",
        ],
    );
    moments.push(save("a restore and an insert", &spaces));

    a.write(&admin, &["iptables-legacy", "-t", "nat", "-F"]);
    a.write(&admin, &["iptables-legacy", "-F", "OBS-A"]);
    b.write(&admin, &["nft", "flush chain inet fw input"]);
    moments.push(save("flushes", &spaces));

    a.write(&admin, &["iptables-legacy", "-t", "nat", "-X"]);
    b.write(&admin, &["nft", "delete chain inet fw extra"]);
    moments.push(save("chain deletes", &spaces));

    // A restart in the middle: the record goes on.
    d.stop();
    let d = start(&[]);
    a.write(&kp, &["iptables-legacy", "-P", "FORWARD", "DROP"]);
    a.write(
        &kp,
        &[
            "iptables-legacy",
            "-A",
            "OBS-A",
            "-s",
            "10.0.0.2/32",
            "-j",
            "ACCEPT",
        ],
    );
    a.write(
        &kp,
        &[
            "iptables-legacy",
            "-A",
            "OBS-A",
            "-s",
            "10.0.0.3/32",
            "-j",
            "ACCEPT",
        ],
    );
    a.write(
        &kp,
        &[
            "iptables-legacy",
            "-R",
            "OBS-A",
            "1",
            "-s",
            "10.0.0.9/32",
            "-j",
            "REJECT",
        ],
    );
    a.write(&kp, &["iptables-legacy", "-D", "INPUT", "1"]);
    b.write(
        &admin,
        &["nft", "add rule inet fw input udp dport 53 accept"],
    );
    b.write(
        &admin,
        &["nft", "add set inet fw blocked { type ipv4_addr; }"],
    );
    b.write(
        &admin,
        &["nft", "add element inet fw blocked { 10.9.0.1, 10.9.0.2 }"],
    );
    b.write(
        &admin,
        &["nft", "add rule inet fw input ip saddr @blocked drop"],
    );
    moments.push(save("after the restart", &spaces));
    d.stop();

    check(&record, &moments, &spaces);

    // The diff between two moments is the difference of what the tools printed.
    for (i, j) in [(0, 1), (1, 3), (0, 4)] {
        let (from, to) = (&moments[i], &moments[j]);
        let range = format!("{}..{}", from.time, to.time);
        let got = query(
            &record,
            &["--diff", &range, "--netns", a.name(), "--backend", "legacy"],
        );
        let mut rebuilt: BTreeMap<(String, String), (Vec<String>, Vec<String>)> = BTreeMap::new();
        for v in &got {
            let Some(chain) = v["chain"].as_str() else {
                continue;
            };
            let list = |k: &str| -> Vec<String> {
                let mut l: Vec<String> = v[k]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                l.sort();
                l
            };
            assert!(v["by"]["actor"].is_string(), "who is missing: {v}");
            rebuilt.insert(
                (v["table"].as_str().unwrap().to_string(), chain.to_string()),
                (list("rules_added"), list("rules_removed")),
            );
        }
        assert_eq!(
            rebuilt,
            saved_diff(&from.legacy[a.name()], &to.legacy[a.name()]),
            "diff `{}`..`{}`",
            from.label,
            to.label
        );
    }

    // Retention deletes the rows older than the third moment: the later moments still rebuild.
    let cut = time::OffsetDateTime::parse(
        &moments[2].time,
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    // A little before it, as the daemon applies it a moment after it starts.
    let age = (time::OffsetDateTime::now_utc() - cut).whole_milliseconds() + 300;
    let d = start(&["--retain", &format!("{age}ms")]);
    std::thread::sleep(Duration::from_millis(500));
    d.stop();
    let oldest = query(&record, &["--limit", "1"]);
    let first_seq = oldest
        .first()
        .and_then(|v| v["seq"].as_u64())
        .expect("changes are left");
    assert!(
        first_seq > 10,
        "retention deleted nothing (first seq {first_seq})"
    );
    check(&record, &moments[2..], &spaces);
}

#[test]
fn the_http_endpoints_rebuild_and_diff_with_the_token() {
    skip_unless!("iptables-legacy", "ip");
    let _serial = serial();
    let ns = Netns::new("fx-http");
    let kp = Writer::new("kube-proxy");
    let dir = tempfile::tempdir().expect("tempdir");
    let record = dir.path().join("record.db");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let port = free_port();
    let mut d = Daemon::start(
        port,
        &[
            "--record",
            record.to_str().unwrap(),
            "--token-file",
            token_file.to_str().unwrap(),
        ],
    );
    let before = now();
    std::thread::sleep(Duration::from_millis(50));
    ns.write(&kp, &["iptables-legacy", "-N", "OBS-HTTP"]);
    ns.write(&kp, &["iptables-legacy", "-A", "OBS-HTTP", "-j", "RETURN"]);
    d.expect("the rule", |v| {
        v["chain"] == "OBS-HTTP" && v["op"] == "rule_add"
    });
    std::thread::sleep(Duration::from_millis(500));
    let auth = [("Authorization", "Bearer s3cret")];
    let inode = ns.ino().to_string();

    let (code, _) = get(port, "/ruleset?at=now", &[]);
    assert_eq!(code, 401, "no token, no ruleset");
    let (code, body) = get(port, &format!("/ruleset?at=now&netns={inode}"), &auth);
    assert_eq!(code, 200, "{body}");
    let list: Vec<Value> = serde_json::from_str(&body).expect("a JSON list");
    let legacy = list
        .iter()
        .find(|v| v["backend"] == "legacy")
        .unwrap_or_else(|| panic!("no legacy ruleset in {body}"));
    let text = legacy["text"].as_str().unwrap();
    assert!(
        text.contains(":OBS-HTTP - [0:0]") && text.contains("-A OBS-HTTP -j RETURN"),
        "{text}"
    );
    let chain = legacy["tables"][0]["chains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "OBS-HTTP")
        .expect("the chain");
    assert_eq!(chain["last"]["actor"], "kube-proxy", "{chain}");

    // Before the writes, the chain did not exist; the diff says who added it.
    let (code, body) = get(port, &format!("/ruleset?at={before}&netns={inode}"), &auth);
    assert_eq!(code, 200, "{body}");
    assert!(!body.contains("OBS-HTTP"), "{body}");
    let (code, body) = get(
        port,
        &format!("/diff?from={before}&to=now&netns={inode}"),
        &auth,
    );
    assert_eq!(code, 200, "{body}");
    let diffs: Vec<Value> = serde_json::from_str(&body).expect("a JSON list");
    let added = diffs
        .iter()
        .find(|v| v["chain"] == "OBS-HTTP")
        .unwrap_or_else(|| panic!("no OBS-HTTP in {body}"));
    assert_eq!(added["change"], "chain_added");
    assert_eq!(added["rules_added"][0], "-j RETURN");
    assert_eq!(added["by"]["actor"], "kube-proxy");
    let (code, body) = get(port, "/diff?from=now&to=now&format=text", &auth);
    assert_eq!(code, 200, "{body}");
    assert!(body.starts_with("# what changed between"), "{body}");

    // Bad input: a clear 400 naming the parameter and the forms it takes.
    let (code, body) = get(port, "/ruleset?at=yesterday-ish", &auth);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("at:") && body.contains("RFC 3339"), "{body}");
    let (code, body) = get(port, "/ruleset?when=now", &auth);
    assert_eq!(code, 400, "{body}");
    d.stop();

    // The same bad time on the command line: an error naming the flag, no panic.
    let out = Command::new(observer_bin())
        .args(["query", "--at", "yesterday-ish", "--record"])
        .arg(&record)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--at") && err.contains("RFC 3339"), "{err}");
}
