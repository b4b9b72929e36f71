//! Faults injected, nothing lost silently: a kernel ring buffer too small for a burst. observer
//! is frozen (as CPU starvation would) with a 4 KiB ring buffer while one namespace's burst fills
//! it and another namespace's changes find it full: every one of the latter's records is lost.
//! The loss must be counted on a `gap` line, every legacy table re-read, and what the lost records
//! would have shown reported as `recovered` changes, so that observer's view of the table ends
//! equal to `iptables-legacy-save`. Needs root.

mod common;

use std::process::Command;

use common::{Netns, Observer, Writer};
use serde_json::Value;

/// The `-A` lines of `iptables-legacy-save -t TABLE` in `ns`, as (chain, rule).
fn saved_rules(ns: &Netns, table: &str) -> Vec<(String, String)> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            "iptables-legacy-save",
            "-t",
            table,
        ])
        .output()
        .expect("iptables-legacy-save");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("-A "))
        .filter_map(|l| l.split_once(' '))
        .map(|(c, r)| (c.to_string(), r.to_string()))
        .collect()
}

#[test]
fn a_ring_buffer_overrun_is_reported_and_the_tables_re_read() {
    skip_unless!("ip", "iptables-legacy", "iptables-legacy-save");
    let mut obs = Observer::start(&["--ringbuf-size", "4096"]);
    let busy = Netns::new("rb-busy");
    let quiet = Netns::new("rb-quiet");
    let writer = Writer::new("rbwriter");
    // Both namespaces known to observer before it stalls.
    for ns in [&busy, &quiet] {
        ns.write(&writer, &["iptables-legacy", "-t", "nat", "-N", "OBS-RB"]);
        let inode = ns.inode();
        obs.expect("the chain", 20, |v| {
            v["netns"].as_u64() == Some(inode) && v["chain"] == "OBS-RB"
        });
    }
    obs.freeze(true);
    // The burst fills the ring buffer; the quiet namespace's changes come after it.
    for i in 0..40 {
        busy.write(
            &writer,
            &[
                "iptables-legacy",
                "-A",
                "INPUT",
                "-p",
                "tcp",
                "--dport",
                &(1000 + i).to_string(),
                "-j",
                "ACCEPT",
            ],
        );
    }
    for i in 0..5 {
        quiet.write(
            &writer,
            &[
                "iptables-legacy",
                "-t",
                "nat",
                "-A",
                "OBS-RB",
                "-p",
                "tcp",
                "--dport",
                &(2000 + i).to_string(),
                "-j",
                "RETURN",
            ],
        );
    }
    obs.freeze(false);
    let gap = obs.wait_line("the gap line", 20, |v| {
        v["kind"] == "status" && v["state"] == "gap"
    });
    let message = gap["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("kernel records lost") && message.contains("re-read"),
        "{gap}"
    );
    // The quiet namespace's rules, every one, recovered from the re-read.
    let inode = quiet.inode();
    let last = obs.expect("the quiet namespace's last rule", 20, |v| {
        v["netns"].as_u64() == Some(inode)
            && v["op"] == "rule_add"
            && v["rule"]
                .as_str()
                .is_some_and(|r| r.contains("--dport 2004 "))
    });
    assert_eq!(last["recovered"], true, "{last}");
    assert_eq!(last["process"]["actor"], "unknown", "{last}");
    obs.drain(500);
    // observer's view of the quiet namespace's nat table is iptables-legacy-save's.
    let seen: Vec<(String, String)> = obs
        .changes()
        .iter()
        .filter(|v| v["netns"].as_u64() == Some(inode) && v["table"] == "nat")
        .filter(|v| v["op"] == "rule_add")
        .map(|v: &&Value| {
            (
                v["chain"].as_str().unwrap_or_default().to_string(),
                v["rule"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(seen, saved_rules(&quiet, "nat"));
    // And the busy namespace's burst is all there too.
    let busy_inode = busy.inode();
    let busy_rules = obs
        .changes()
        .iter()
        .filter(|v| {
            v["netns"].as_u64() == Some(busy_inode)
                && v["op"] == "rule_add"
                && v["chain"] == "INPUT"
        })
        .count();
    assert_eq!(busy_rules, saved_rules(&busy, "filter").len());
    obs.stop();
}
