use serde_json::Value;

use super::*;
use crate::sinks::metrics::Metrics;

/// The daemon's output with no record, and its metrics.
fn output() -> (DaemonOutput, Arc<Hub>) {
    let hub = Arc::new(Hub::new(Metrics::new(None, None), None));
    let out = DaemonOutput::new(
        hub.clone(),
        None,
        None,
        0,
        crate::forensics::SnapshotPolicy::default(),
    );
    (out, hub)
}

/// The value of the series whose line starts with `series` (name and labels).
fn value(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn the_hook_metric_names_the_x_tables_backend() {
    let (mut out, hub) = output();
    let mut ready = StatusLine::ready("watching".into());
    ready.hooks = Some("x_tables=kprobe namespaces=tracepoint nf_tables=netlink (x)".into());
    ready.x_tables_hook = Some("kprobe");
    out.emit(&Line::Status(ready)).unwrap();
    let m = hub.metrics.encode();
    assert_eq!(
        value(&m, r#"observer_hook_backend{backend="kprobe"}"#),
        Some(1.0),
        "{m}"
    );
    assert_eq!(value(&m, "observer_ready"), Some(1.0), "{m}");
}

#[test]
fn gap_lines_count_by_cause_and_kernel_records_lost() {
    let (mut out, hub) = output();
    for gap in [
        Gap::Kernel { records: 5 },
        Gap::Kernel { records: 2 },
        Gap::Netlink,
        Gap::Other,
    ] {
        out.emit(&Line::Status(StatusLine::gap(gap, "lost".into())))
            .unwrap();
    }
    let m = hub.metrics.encode();
    let gaps = |cause: &str| value(&m, &format!(r#"observer_gaps_total{{cause="{cause}"}}"#));
    assert_eq!(gaps("ringbuf"), Some(2.0), "{m}");
    assert_eq!(gaps("netlink"), Some(1.0), "{m}");
    assert_eq!(gaps("other"), Some(1.0), "{m}");
    assert_eq!(
        value(&m, "observer_kernel_records_lost_total"),
        Some(7.0),
        "{m}"
    );
}

#[test]
fn an_incident_counts_once_while_open_and_its_filter_fields_are_its_own() {
    let (mut out, hub) = output();
    let line = |state: &str| {
        format!(
            r#"{{"kind":"incident","id":"i-1","time":"2026-11-21T03:12:00.000000000Z",
            "since":"2026-11-21T03:12:00.000000000Z","state":"{state}",
            "type":"foreign_delete","severity":"critical","netns":42,"backend":"legacy",
            "family":"ip","table":"nat","chains":["KUBE-SVC-A","KUBE-SVC-B"],
            "owner":"kube-proxy","actors":["calico-node"],"events":[1,2],"summary":"x"}}"#
        )
    };
    let open: Line = serde_json::from_str(&line("open")).unwrap();
    let Line::Incident(i) = &open else {
        panic!("not an incident")
    };
    // The typed fields give what the JSON gives (a record read back is filtered by its JSON).
    let v: Value = serde_json::to_value(&open).unwrap();
    assert_eq!(Meta::from_incident(i), Meta::from_json(&v));
    out.emit(&open).unwrap();
    out.emit(&serde_json::from_str(&line("update")).unwrap())
        .unwrap();
    let m = hub.metrics.encode();
    let series = r#"{severity="critical",type="foreign_delete"}"#;
    let series2 = r#"{type="foreign_delete",severity="critical"}"#;
    let count = |name: &str| {
        value(&m, &format!("{name}{series}")).or(value(&m, &format!("{name}{series2}")))
    };
    assert_eq!(count("observer_incidents_total"), Some(1.0), "{m}");
    assert_eq!(count("observer_incidents_open"), Some(1.0), "{m}");
    out.emit(&serde_json::from_str(&line("resolved")).unwrap())
        .unwrap();
    let m = hub.metrics.encode();
    let count = |name: &str| {
        value(&m, &format!("{name}{series}")).or(value(&m, &format!("{name}{series2}")))
    };
    assert_eq!(count("observer_incidents_open"), Some(0.0), "{m}");
}
