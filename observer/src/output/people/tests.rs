use serde_json::Value;

use super::*;
use crate::cgroup::Qos;
use crate::output::line::{IncidentKind, IncidentState, Severity, Source};
use crate::ruleset::{Backend, Family, Op, RuleSyntax};
use crate::timestamp::Timestamp;

const HOSTILE: &str = "x\x1b]0;pwned\x07\r\n\u{202e}\u{9b}";

fn time() -> Timestamp {
    Timestamp::parse("2026-11-21T05:42:37.123456789Z").unwrap()
}

/// A change with every field set (built field by field: a new field must be named here).
fn change() -> ChangeLine {
    ChangeLine {
        seq: 7,
        time: time(),
        netns: 4026532317,
        netns_name: Some("blue".into()),
        node: Some("node-a".into()),
        backend: Backend::Nft,
        family: Family::Ip,
        table: "filter".into(),
        chain: Some("INPUT".into()),
        op: Op::RuleAdd,
        rule: Some("-m comment --comment \"c\" -j ACCEPT".into()),
        forms: RuleForms {
            rule_syntax: Some(RuleSyntax::Iptables),
            rule_nft: Some("counter accept comment \"c\"".into()),
            iptables_unreadable: Some("why".into()),
        },
        position: Some(0),
        detail: Some("detail".into()),
        txn: "nft-1".into(),
        result: ChangeResult::Refused("EPERM".into()),
        source: Source::Netlink,
        process: ProcessInfo {
            pid: 2,
            tid: 2,
            comm: "iptables".into(),
            ppid: Some(1),
            parent_comm: Some("sh".into()),
            actor: "kube-proxy".into(),
            cgroup: Some(9),
            unit: Some("kubelet.service".into()),
            container_id: Some("abc".into()),
            pod: Some(Pod {
                uid: "uid".into(),
                qos: Qos::Burstable,
                namespace: Some("kube-system".into()),
                name: Some("kube-proxy-x".into()),
                container: Some("kube-proxy".into()),
            }),
            ancestry: vec![Ancestor {
                comm: "sh".into(),
                pid: 1,
            }],
            requested_by: requester(),
        }
        .into(),
        replayed: false,
        recovered: false,
        restore: None,
    }
}

fn requester() -> Option<Box<crate::attribution::Requester>> {
    Some(Box::new(crate::attribution::Requester {
        pid: 3,
        comm: "firewall-cmd".into(),
        actor: "compliance-job".into(),
        method: "org.fedoraproject.FirewallD1.reload".into(),
        unit: Some("cron.service".into()),
        container_id: Some("def".into()),
        pod: None,
        ancestry: vec![Ancestor {
            comm: "compliance-job".into(),
            pid: 1,
        }],
    }))
}

fn incident() -> IncidentLine {
    IncidentLine {
        id: "inc-1".into(),
        time: time(),
        since: time(),
        state: IncidentState::Open,
        kind: IncidentKind::MassFlush,
        severity: Severity::Critical,
        netns: 1,
        netns_name: Some("blue".into()),
        node: Some("node-a".into()),
        backend: Backend::Legacy,
        family: Family::Ip,
        table: "filter".into(),
        chains: vec!["KUBE-SERVICES".into()],
        owner: "kube-proxy".into(),
        actors: vec!["sh".into()],
        events: vec![7],
        summary: "summary".into(),
        cycles: Some(1),
        last: Some(time()),
        rule: Some("-j ACCEPT".into()),
        was: Some("-j DROP".into()),
        lost: vec!["-s 10.0.0.1".into()],
        owners: vec![OwnerHit {
            owner: "kube-proxy".into(),
            chains: vec!["KUBE-SERVICES".into()],
            repaired: true,
            repair_ms: Some(5),
            repaired_by: Some("kube-proxy".into()),
            failed: Some("EPERM".into()),
        }],
        tables: vec!["ip filter".into()],
        merged_into: Some("inc-0".into()),
        backends: Some(SplitBackends {
            legacy: vec!["A".into()],
            nft: vec!["B".into()],
        }),
        last_backend: Some(Backend::Nft),
        restore: None,
        requested_by: requester(),
    }
}

fn status() -> StatusLine {
    StatusLine {
        hooks: Some("x_tables=kprobe".into()),
        lost: vec!["lost".into()],
        ..StatusLine::ready("following".into())
    }
}

/// Every string in `v`, with its path.
fn strings(v: &Value, path: String, out: &mut Vec<(String, String)>) {
    match v {
        Value::String(s) => out.push((path, s.clone())),
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                strings(x, format!("{path}[{i}]"), out);
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                strings(x, format!("{path}.{k}"), out);
            }
        }
        _ => {}
    }
}

/// Set the string at `path` (as [`strings`] names it) to `to`.
fn set(v: &mut Value, path: &str, to: &str) {
    let mut at = v;
    for part in path.split('.').skip(1) {
        let (key, index) = match part.split_once('[') {
            Some((k, i)) => (k, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        at = &mut at[key];
        if let Some(i) = index {
            at = &mut at[i];
        }
    }
    *at = Value::String(to.into());
}

/// Each string field of `line` that holds free text (the line still reads back with hostile
/// text in it) is shown escaped by `for_people`: a text field missing from `Texts` fails here.
fn every_text_field_is_escaped(line: Line, at_least: usize) {
    let v = serde_json::to_value(&line).unwrap();
    let mut fields = Vec::new();
    strings(&v, String::new(), &mut fields);
    let mut free = 0;
    for (path, _) in &fields {
        let mut hostile = v.clone();
        set(&mut hostile, path, HOSTILE);
        let Ok(parsed) = serde_json::from_value::<Line>(hostile) else {
            continue; // an enum, a time: not free text
        };
        free += 1;
        let shown = serde_json::to_value(for_people(&parsed)).unwrap();
        let mut after = Vec::new();
        strings(&shown, String::new(), &mut after);
        let (_, s) = after
            .iter()
            .find(|(p, _)| p == path)
            .unwrap_or_else(|| panic!("{path} gone"));
        assert_eq!(
            s, "x\\x1b]0;pwned\\x07\\x0d\\x0a\\u202e\\u009b",
            "{path} is not escaped"
        );
        // The line's JSON itself still holds the exact text.
        let raw = serde_json::to_value(&parsed).unwrap();
        let mut exact = Vec::new();
        strings(&raw, String::new(), &mut exact);
        assert!(exact.iter().any(|(p, s)| p == path && s == HOSTILE));
    }
    assert!(
        free >= at_least,
        "only {free} free text fields found in {v}"
    );
}

#[test]
fn every_text_of_a_change_is_escaped() {
    every_text_field_is_escaped(Line::Change(change()), 20);
}

#[test]
fn every_text_of_an_incident_is_escaped() {
    every_text_field_is_escaped(Line::Incident(Box::new(incident())), 19);
}

#[test]
fn every_text_of_a_status_line_is_escaped() {
    every_text_field_is_escaped(Line::Status(status()), 3);
}

#[test]
fn clean_lines_come_out_the_same() {
    let c = change();
    let shown = for_people(&c);
    assert_eq!(
        serde_json::to_value(&shown).unwrap(),
        serde_json::to_value(&c).unwrap()
    );
}
