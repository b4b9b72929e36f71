use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::sinks::record_writer::{Limits, Row, StoreStats, Writer};
use crate::store::ChangeRow;

const NETNS: u32 = 4026532177;

fn time_of(ns: i64) -> String {
    crate::timestamp::Timestamp::from_unix_nanos(ns).to_string()
}

fn change(
    seq: u64,
    ns: i64,
    txn: &str,
    op: &str,
    chain: &str,
    rule: Option<&str>,
    actor: &str,
) -> Row {
    let v = json!({
        "kind": "change", "seq": seq, "time": time_of(ns), "netns": NETNS,
        "backend": "legacy", "family": "ip", "table": "filter", "chain": chain, "op": op,
        "rule": rule, "position": rule.map(|_| 0), "txn": txn, "result": "ok",
        "source": "tracepoint",
        "process": {"pid": 100 + seq, "tid": 100 + seq, "comm": "iptables", "actor": actor,
                    "ancestry": [{"comm": actor, "pid": 7}]},
    });
    Row::Change(ChangeRow {
        seq,
        time_ns: ns,
        netns: Some(NETNS),
        backend: Some("legacy".into()),
        table: Some("filter".into()),
        chain: Some(chain.into()),
        op: Some(op.into()),
        actor: Some(actor.into()),
        comm: Some("iptables".into()),
        json: v.to_string().into(),
    })
}

fn incident(no: u64, ns: i64, since: i64, state: &str, events: &[u64], repaired: bool) -> Row {
    let owner: Value = if repaired {
        json!({"owner": "kube-proxy", "chains": ["KUBE-SVC"], "repaired": true,
               "repair_ms": (ns - since) / 1_000_000, "repaired_by": "kube-proxy"})
    } else {
        json!({"owner": "kube-proxy", "chains": ["KUBE-SVC"], "repaired": false,
               "repair_ms": null})
    };
    let v = json!({
        "kind": "incident", "id": format!("foreign_delete-{NETNS}-3"), "time": time_of(ns),
        "since": time_of(since), "state": state, "type": "foreign_delete",
        "severity": "warning", "netns": NETNS, "backend": "legacy", "family": "ip",
        "table": "filter", "chains": ["KUBE-SVC"], "owner": "kube-proxy",
        "actors": ["admin"], "events": events, "summary": format!("{state} summary"),
        "owners": [owner],
    });
    Row::Incident {
        no,
        time_ns: ns,
        kind: Some("foreign_delete".into()),
        netns: Some(NETNS),
        json: v.to_string().into(),
    }
}

/// kube-proxy makes KUBE-SVC with a rule; an admin deletes it; kube-proxy puts it back.
fn record(dir: &std::path::Path, events: &[u64]) -> std::path::PathBuf {
    let path = dir.join("r.db");
    let mut w = Writer::new(
        crate::store::open_rw(&path).expect("open"),
        path.clone(),
        Limits {
            retain: Duration::from_secs(3600 * 24 * 365),
            max_bytes: u64::MAX,
        },
        Arc::new(StoreStats::default()),
    );
    let t0 = crate::timestamp::Timestamp::now().unix_nanos() - 60_000_000_000;
    let ms = 1_000_000;
    w.write_batch(&[
        change(1, t0, "a", "chain_create", "KUBE-SVC", None, "kube-proxy"),
        change(
            2,
            t0 + ms,
            "a",
            "rule_add",
            "KUBE-SVC",
            Some("-j ACCEPT"),
            "kube-proxy",
        ),
        change(
            3,
            t0 + 10 * ms,
            "b",
            "rule_delete",
            "KUBE-SVC",
            Some("-j ACCEPT"),
            "admin",
        ),
        change(
            4,
            t0 + 10 * ms,
            "b",
            "chain_delete",
            "KUBE-SVC",
            None,
            "admin",
        ),
        change(
            5,
            t0 + 25 * ms,
            "c",
            "chain_create",
            "KUBE-SVC",
            None,
            "kube-proxy",
        ),
        change(
            6,
            t0 + 25 * ms,
            "c",
            "rule_add",
            "KUBE-SVC",
            Some("-j ACCEPT"),
            "kube-proxy",
        ),
        incident(1, t0 + 10 * ms, t0 + 10 * ms, "open", &[3, 4], false),
        incident(2, t0 + 25 * ms, t0 + 10 * ms, "resolved", events, true),
    ]);
    path
}

#[test]
fn a_story_has_its_lines_changes_repair_and_chains() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = record(dir.path(), &[3, 4, 5, 6]);
    let conn = crate::store::open_ro(&path).expect("open");
    let s = story(&conn, &format!("foreign_delete-{NETNS}-3")).expect("story");
    let states: Vec<&str> = s.states.iter().map(|l| l.state.as_str()).collect();
    assert_eq!(states, ["open", "resolved"]);
    assert_eq!(s.states[0].new_events, [3, 4]);
    assert_eq!(s.states[1].new_events, [5, 6]);
    let seqs: Vec<u64> = s.changes.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, [3, 4, 5, 6]);
    assert!(s.missing.is_empty());
    assert_eq!(s.repairs.len(), 1);
    assert_eq!(s.repairs[0].change.as_ref().map(|c| c.seq), Some(5));
    assert_eq!(s.repairs[0].repair_ms, Some(15));
    assert_eq!(s.chains.len(), 1);
    let c = &s.chains[0];
    assert_eq!(c.chain, "KUBE-SVC");
    let rules = |c: &Option<Chain>| c.as_ref().map(|c| c.rules.clone());
    assert_eq!(rules(&c.before), Some(vec!["-j ACCEPT".to_string()]));
    assert_eq!(rules(&c.after), None, "deleted by the admin");
    assert_eq!(rules(&c.end), Some(vec!["-j ACCEPT".to_string()]));
    assert_eq!(
        c.end.as_ref().and_then(|c| c.last.as_ref()).map(|l| l.seq),
        Some(6)
    );

    let text = story_text(&s);
    for want in [
        "timeline",
        "change 3",
        "chain_delete legacy ip filter KUBE-SVC by admin (iptables 104 < admin 7)",
        "repair 5",
        "kube-proxy's KUBE-SVC put back 15 ms after it began",
        "resolved      resolved summary",
        "  before:\n    *filter\n    :KUBE-SVC - [0:0]\n    -A KUBE-SVC -j ACCEPT",
        "  after the actors' changes: (absent)",
    ] {
        assert!(text.contains(want), "`{want}` missing from:\n{text}");
    }
    // The repair is told once, as a repair.
    assert!(!text.contains("change 5"), "{text}");
}

#[test]
fn changes_the_record_lost_are_named_and_an_unknown_id_says_where_ids_are() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = record(dir.path(), &[3, 4, 5, 6, 9]);
    let conn = crate::store::open_ro(&path).expect("open");
    let s = story(&conn, &format!("foreign_delete-{NETNS}-3")).expect("story");
    assert_eq!(s.missing, [9]);
    assert!(story_text(&s).contains("[9] are no longer in the record"));
    let e = story(&conn, "foreign_delete-1-1").unwrap_err().to_string();
    assert!(e.contains("no incident `foreign_delete-1-1`"), "{e}");
    assert!(e.contains("--incidents"), "{e}");
}
