//! The screen on records built here: columns, widths, grouping, incident blocks, the footer.

use super::*;
use crate::attribution::ProcessInfo;
use crate::output::line::{IncidentKind, OwnerHit, Source};
use crate::ruleset::Family;

fn change(seq: u64, txn: &str, op: Op, chain: &str, rule: Option<&str>) -> ChangeLine {
    ChangeLine {
        seq,
        time: crate::timestamp::Timestamp::parse("2026-11-21T05:42:37.123456789Z").unwrap(),
        netns: 4026532317,
        netns_name: Some("blue".into()),
        node: None,
        backend: Backend::Legacy,
        family: Family::Ip,
        table: "filter".into(),
        chain: Some(chain.into()),
        op,
        rule: rule.map(str::to_string),
        forms: Default::default(),
        position: None,
        detail: None,
        txn: txn.into(),
        result: "ok".into(),
        source: Source::Tracepoint,
        process: ProcessInfo::named(
            4121,
            "iptables-restor",
            Some((4119, "kube-proxy")),
            "kube-proxy",
        )
        .into(),
        replayed: false,
        recovered: false,
        restore: None,
    }
}

fn opts(width: Option<usize>) -> ScreenOptions {
    ScreenOptions {
        colour: false,
        width,
        utc_offset_s: 0,
        group: true,
        group_lines: DEFAULT_GROUP_LINES,
        footer: false,
        incidents_only: false,
    }
}

fn draw(opt: ScreenOptions, records: &[Line]) -> Vec<String> {
    let mut out = Vec::new();
    {
        let mut s = Screen::new(&mut out, opt);
        for r in records {
            s.record(r).unwrap();
        }
        s.end_txn().unwrap();
    }
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

const LONG_RULE: &str = "-s 10.96.0.10/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU";

#[test]
fn columns_line_up_whatever_the_names() {
    let a = change(1, "a", Op::RuleAdd, "X", Some("-j ACCEPT"));
    let mut b = change(2, "b", Op::ChainDelete, "KUBE-SVC-TCOU7JCQXEZGVUNU", None);
    b.netns_name = Some("a-much-longer-namespace-name".into());
    std::sync::Arc::make_mut(&mut b.process).actor = "calico-node".into();
    for width in [None, Some(200), Some(80)] {
        let lines = draw(
            opts(width),
            &[Line::Change(a.clone()), Line::Change(b.clone())],
        );
        let at = |l: &str, w: &str| {
            let byte = l.find(w).unwrap_or_else(|| panic!("{w} in {l}"));
            l[..byte].chars().count()
        };
        assert_eq!(
            at(&lines[0], "rule_add"),
            at(lines.last().unwrap(), "chain_delete"),
            "{width:?}: {lines:#?}"
        );
        if let Some(w) = width {
            for l in &lines {
                assert!(l.chars().count() <= w, "{w}: {l}");
            }
        }
    }
}

#[test]
fn long_rules_are_cut_to_the_terminal_and_whole_otherwise() {
    let c = change(1, "a", Op::RuleAdd, "KUBE-SERVICES", Some(LONG_RULE));
    let wide = draw(opts(Some(300)), &[Line::Change(c.clone())]);
    assert_eq!(wide.len(), 1);
    assert!(wide[0].contains(LONG_RULE), "{wide:#?}");
    let mid = draw(opts(Some(130)), &[Line::Change(c.clone())]);
    assert_eq!(mid.len(), 1);
    assert!(
        mid[0].ends_with('…') && mid[0].chars().count() == 130,
        "{mid:#?}"
    );
    // Narrow: the rule on a line of its own under the columns, cut to fit.
    let narrow = draw(opts(Some(80)), &[Line::Change(c.clone())]);
    assert_eq!(narrow.len(), 2, "{narrow:#?}");
    assert!(narrow[1].trim_start().starts_with("↳ -s 10.96.0.10/32"));
    assert!(narrow[1].ends_with('…') && narrow[1].chars().count() == 80);
    // Not a terminal (or --wide): whole.
    let whole = draw(opts(None), &[Line::Change(c)]);
    assert!(whole[0].ends_with(LONG_RULE));
}

#[test]
fn a_transaction_is_one_header_with_its_changes_collapsed() {
    let records: Vec<Line> = (0..300)
        .map(|i| {
            Line::Change(change(
                i,
                "t1",
                Op::RuleAdd,
                "KUBE-SVC-A",
                Some("-j ACCEPT"),
            ))
        })
        .chain(std::iter::once(Line::Change(change(
            300,
            "t1",
            Op::ChainCreate,
            "KUBE-SVC-A",
            None,
        ))))
        .collect();
    let lines = draw(opts(Some(200)), &records);
    assert_eq!(lines.len(), 1 + DEFAULT_GROUP_LINES + 1, "{lines:#?}");
    assert!(lines[0].contains("── kube-proxy [iptables-restor 4121 < kube-proxy]"));
    assert!(
        lines[0].contains("301 changes in legacy ip filter"),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].contains("300 rule_add, 1 chain_create"),
        "{}",
        lines[0]
    );
    assert!(lines.last().unwrap().contains("296 more changes"));
    // -v: every change; --no-group: today's flat lines.
    let mut all = opts(Some(200));
    all.group_lines = usize::MAX;
    assert_eq!(draw(all, &records).len(), 302);
    let mut flat = opts(Some(200));
    flat.group = false;
    assert_eq!(draw(flat, &records).len(), 301);
    // Two transactions: two groups, in order.
    let two = draw(
        opts(Some(200)),
        &[
            Line::Change(change(1, "a", Op::RuleAdd, "A", Some("-j ACCEPT"))),
            Line::Change(change(2, "a", Op::RuleAdd, "A", Some("-j DROP"))),
            Line::Change(change(3, "b", Op::RuleAdd, "B", Some("-j ACCEPT"))),
        ],
    );
    assert_eq!(two.len(), 4, "{two:#?}");
    assert!(two[0].contains("2 changes"));
    assert!(two[3].contains(" B "));
}

#[test]
fn a_new_legacy_table_is_one_line() {
    let mut t = change(1, "t", Op::TableCreate, "", None);
    t.chain = None;
    t.table = "nat".into();
    let chains: Vec<Line> = ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"]
        .iter()
        .map(|c| {
            let mut c = change(2, "t", Op::ChainCreate, c, None);
            c.table = "nat".into();
            Line::Change(c)
        })
        .collect();
    let mut records = vec![Line::Change(t)];
    records.extend(chains);
    let lines = draw(opts(None), &records);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("table_create"));
    assert!(lines[0].contains("built-in chains PREROUTING, INPUT, OUTPUT, POSTROUTING"));
}

fn incident(state: IncidentState) -> IncidentLine {
    IncidentLine {
        id: "mass_flush-7-3".into(),
        time: crate::timestamp::Timestamp::parse("2026-11-21T05:42:39.000000000Z").unwrap(),
        since: crate::timestamp::Timestamp::parse("2026-11-21T05:42:37.200000000Z").unwrap(),
        state,
        kind: IncidentKind::MassFlush,
        severity: Severity::Critical,
        netns: 7,
        netns_name: Some("blue".into()),
        node: None,
        backend: Backend::Legacy,
        family: Family::Ip,
        table: "filter".into(),
        chains: vec!["KUBE-FIREWALL".into(), "KUBE-SERVICES".into()],
        owner: "kube-proxy".into(),
        actors: vec!["iptables.init".into()],
        events: vec![3, 4],
        summary: "iptables.init flushed or deleted the chains of 2 owners at once.".into(),
        cycles: None,
        last: None,
        rule: None,
        was: None,
        lost: Vec::new(),
        owners: vec![
            OwnerHit {
                owner: "kube-proxy".into(),
                chains: vec!["KUBE-SERVICES".into()],
                repaired: state == IncidentState::Resolved,
                repair_ms: (state == IncidentState::Resolved).then_some(1800),
                repaired_by: (state == IncidentState::Resolved).then(|| "kube-proxy".into()),
                failed: None,
            },
            OwnerHit {
                owner: "kubelet".into(),
                chains: vec!["KUBE-FIREWALL".into()],
                repaired: state == IncidentState::Resolved,
                repair_ms: (state == IncidentState::Resolved).then_some(2500),
                repaired_by: (state == IncidentState::Resolved).then(|| "kubelet".into()),
                failed: None,
            },
        ],
        tables: vec!["ip filter".into(), "ip nat".into()],
        merged_into: None,
        backends: None,
        last_backend: None,
        restore: None,
        requested_by: None,
    }
}

#[test]
fn incidents_are_blocks_that_say_how_they_ended() {
    let open = draw(
        opts(Some(100)),
        &[Line::Incident(Box::new(incident(IncidentState::Open)))],
    );
    assert!(
        open[0].starts_with("!! 05:42:39.000 CRITICAL mass_flush OPEN"),
        "{open:#?}"
    );
    assert!(open[1].contains("legacy ip filter, ip nat · owner kube-proxy · by iptables.init"));
    assert!(
        open[2].contains("kubelet (1 chains: not repaired yet)"),
        "{open:#?}"
    );
    assert!(open.iter().all(|l| l.chars().count() <= 100));
    assert!(
        !open.iter().any(|l| l.contains("writer:")),
        "no change seen, no writer: {open:#?}"
    );
    // After the change that made it: the writer as its change line named it.
    let mut flush = change(3, "t9", Op::ChainFlush, "KUBE-SERVICES", None);
    std::sync::Arc::make_mut(&mut flush.process).comm = "iptables".into();
    std::sync::Arc::make_mut(&mut flush.process).parent_comm = Some("iptables.init".into());
    std::sync::Arc::make_mut(&mut flush.process).unit = Some("iptables.service".into());
    let seen = draw(
        opts(Some(100)),
        &[
            Line::Change(flush),
            Line::Incident(Box::new(incident(IncidentState::Open))),
        ],
    );
    assert!(
        seen.iter()
            .any(|l| l.trim() == "writer: iptables 4121 < iptables.init · iptables.service"),
        "{seen:#?}"
    );
    // With the ancestry the kernel captured: the whole way to the actor, not above it.
    let mut wrapped = change(3, "t9", Op::ChainFlush, "KUBE-SERVICES", None);
    std::sync::Arc::make_mut(&mut wrapped.process).comm = "iptables".into();
    std::sync::Arc::make_mut(&mut wrapped.process).actor = "iptables.init".into();
    std::sync::Arc::make_mut(&mut wrapped.process).ancestry =
        ["sh", "timeout", "iptables.init", "systemd"]
            .iter()
            .enumerate()
            .map(|(i, c)| crate::attribution::Ancestor {
                comm: c.to_string(),
                pid: 200 + i as u32,
            })
            .collect();
    let seen = draw(
        opts(Some(100)),
        &[
            Line::Change(wrapped),
            Line::Incident(Box::new(incident(IncidentState::Open))),
        ],
    );
    assert!(
        seen.iter()
            .any(|l| l.trim() == "writer: iptables 4121 < sh < timeout < iptables.init"),
        "{seen:#?}"
    );
    let done = draw(
        opts(Some(100)),
        &[Line::Incident(Box::new(incident(IncidentState::Resolved)))],
    );
    assert!(
        done[0].contains("RESOLVED after 1.8 s by kube-proxy, after 2.5 s by kubelet"),
        "{done:#?}"
    );
    let expired = draw(
        opts(Some(100)),
        &[Line::Incident(Box::new(incident(IncidentState::Expired)))],
    );
    assert!(
        expired[0].contains("EXPIRED NOT repaired: kube-proxy, kubelet"),
        "{expired:#?}"
    );
    assert!(expired[2].contains("NEVER repaired"));
    // --incidents-only: one line each.
    let mut compact = opts(Some(120));
    compact.incidents_only = true;
    let lines = draw(
        compact,
        &[
            Line::Change(change(1, "a", Op::RuleAdd, "A", None)),
            Line::Incident(Box::new(incident(IncidentState::Open))),
            Line::Incident(Box::new(incident(IncidentState::Resolved))),
        ],
    );
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[1].contains("resolved")
            && lines[1].contains("kube-proxy ← iptables.init  kube-proxy after 1.8 s"),
        "{lines:#?}"
    );
    // Open and resolved lines keep the same columns: the owner starts at the same place.
    let owner_at = |l: &str| l.find("kube-proxy ←").expect("owner column");
    assert_eq!(owner_at(&lines[0]), owner_at(&lines[1]), "{lines:#?}");
}

#[test]
fn colour_only_when_asked_and_the_footer_counts_what_is_open() {
    let mut o = opts(Some(120));
    o.colour = true;
    o.footer = true;
    let mut out = Vec::new();
    {
        let mut s = Screen::new(&mut out, o);
        s.record(&Line::Incident(Box::new(incident(IncidentState::Open))))
            .unwrap();
        s.record(&Line::Change(change(
            1,
            "a",
            Op::RuleAdd,
            "A",
            Some("-j ACCEPT"),
        )))
        .unwrap();
        s.end_txn().unwrap();
    }
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("\x1b["), "colour");
    assert!(text.contains("open incidents: 1 (1 critical)"), "{text}");
    // The footer is erased before every new line and redrawn under it.
    assert!(text.contains("\r\x1b[2K"));
    let plain = draw(
        opts(Some(120)),
        &[Line::Incident(Box::new(incident(IncidentState::Open)))],
    );
    assert!(plain.iter().all(|l| !l.contains('\x1b')));
}

#[test]
fn times_are_local_unless_utc() {
    let c = change(1, "a", Op::RuleAdd, "A", None);
    let mut o = opts(None);
    o.utc_offset_s = 3600;
    let lines = draw(o, &[Line::Change(c.clone())]);
    assert!(lines[0].starts_with("06:42:37.123456"), "{lines:#?}");
    let lines = draw(opts(None), &[Line::Change(c)]);
    assert!(lines[0].starts_with("05:42:37.123456"));
}

#[test]
fn fleet_nodes_are_told_apart_by_their_first_label_whole() {
    // EKS names: the part that differs is the first label, the rest is shared.
    let mut a = change(1, "a", Op::RuleAdd, "X", Some("-j ACCEPT"));
    a.node = Some("ip-10-0-1-23.us-west-2.compute.internal".into());
    a.netns_name = None;
    a.netns = 4026531840;
    let mut b = change(2, "b", Op::RuleAdd, "X", Some("-j ACCEPT"));
    b.node = Some("ip-10-0-1-24.us-west-2.compute.internal".into());
    b.netns_name = Some("a-much-longer-namespace-name".into());
    for width in [None, Some(200), Some(80)] {
        let lines = draw(
            opts(width),
            &[Line::Change(a.clone()), Line::Change(b.clone())],
        );
        assert!(lines[0].contains(" ip-10-0-1-23/"), "{width:?}: {lines:#?}");
        assert!(
            lines.iter().any(|l| l.contains(" ip-10-0-1-24/")),
            "{lines:#?}"
        );
        assert!(!lines.iter().any(|l| l.contains("compute")), "{lines:#?}");
        let at = |l: &str| l.find("rule_add").map(|b| l[..b].chars().count());
        let cols: Vec<_> = lines.iter().filter_map(|l| at(l)).collect();
        assert!(cols.windows(2).all(|w| w[0] == w[1]), "{lines:#?}");
    }
    let mut i = incident(IncidentState::Open);
    i.node = a.node.clone();
    let mut o = opts(Some(200));
    o.incidents_only = true;
    let line = draw(o, &[Line::Incident(Box::new(i))]);
    assert!(line[0].contains("ip-10-0-1-23/blue"), "{line:#?}");
}

#[test]
fn hostile_text_is_shown_escaped_in_every_part_of_the_screen() {
    let evil = "e\x1b[31mv\r\u{202e}";
    let shown = "e\\x1b[31mv\\x0d\\u202e";
    let mut a = change(3, "t", Op::ChainFlush, evil, None);
    std::sync::Arc::make_mut(&mut a.process).actor = evil.into();
    std::sync::Arc::make_mut(&mut a.process).parent_comm = Some(evil.into());
    a.netns_name = Some(evil.into());
    let mut b = change(
        4,
        "t",
        Op::RuleAdd,
        "X",
        Some("-m comment --comment \"\x1b]0;t\x07\""),
    );
    b.process = a.process.clone();
    let mut i = incident(IncidentState::Open);
    i.owner = evil.into();
    i.actors = vec![evil.into()];
    i.summary = format!("{evil} flushed the chains of 2 owners.");
    i.events = vec![3];
    for width in [None, Some(200), Some(80)] {
        let mut opt = opts(width);
        opt.colour = true;
        let records = [
            Line::Change(a.clone()),
            Line::Change(b.clone()),
            Line::Incident(Box::new(i.clone())),
        ];
        let lines = draw(opt.clone(), &records);
        let text = lines.join("\n");
        // Colour is on: every ESC left starts one of the screen's own codes.
        for (at, _) in text.match_indices('\x1b') {
            assert!(
                [RESET, DIM, BOLD, RED, GREEN, YELLOW, BLUE, CYAN, MAGENTA, REVERSE]
                    .iter()
                    .any(|k| text[at..].starts_with(k)),
                "{width:?}: {text:?}"
            );
        }
        assert!(!text.contains(['\r', '\u{202e}', '\x07']), "{text:?}");
        if width.is_none() {
            assert!(
                text.contains(&format!("writer: iptables-restor 4121 < {shown}")),
                "{text}"
            );
            assert!(text.contains("--comment \"\\x1b]0;t\\x07\""), "{text}");
            assert!(
                text.contains(&format!("owner {shown} · by {shown}")),
                "{text}"
            );
        }
        opt.incidents_only = true;
        let compact = draw(opt, &records).join("\n");
        if width.is_none() {
            assert!(compact.contains(&format!("{shown} ← {shown}")), "{compact}");
        }
        assert!(!compact.contains(['\r', '\u{202e}']), "{compact:?}");
    }
}
