use super::*;

fn rule(op: Op, chain: &str, text: &str, pos: usize, fp: u64) -> Change {
    Change::new(op, Family::Ip, "filter")
        .chain(chain)
        .rule(text, Some(pos), fp)
}

#[test]
fn all_rules_deleted_is_a_chain_flush() {
    let changes = vec![
        rule(Op::RuleDelete, "KUBE-FIREWALL", "-j DROP", 0, 1),
        rule(Op::RuleDelete, "KUBE-FIREWALL", "-j ACCEPT", 1, 2),
    ];
    let out = summarize(changes, |_, _, _| 2, |_, _| 2);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].op, Op::ChainFlush);
    assert_eq!(out[0].chain.as_deref(), Some("KUBE-FIREWALL"));
    assert_eq!(out[0].rule, None);
}

#[test]
fn the_only_rule_deleted_is_a_flush_only_when_the_writer_flushed() {
    let one = || {
        summarize(
            vec![rule(Op::RuleDelete, "KUBE-FW", "-j DROP", 0, 1)],
            |_, _, _| 1,
            |_, _| 5,
        )
    };
    let args = |line: &str| line.split(' ').map(str::to_string).collect::<Vec<_>>();
    // `-F`: a flush.
    let mut out = one();
    let ev = FlushEvidence::from_args(&args("iptables-legacy -w 5 -t nat -F KUBE-FW"));
    assert_eq!(ev, FlushEvidence::Flush(vec!["KUBE-FW".into()]));
    settle_flushes(&mut out, &ev);
    assert_eq!(out[0].op, Op::ChainFlush);
    assert_eq!(out[0].rule, None);
    assert_eq!(out[0].detail.as_deref(), Some("1 rule deleted"));
    // A restore that leaves the chain empty: a flush.
    let mut out = one();
    settle_flushes(
        &mut out,
        &FlushEvidence::from_args(&args("iptables-restore --noflush")),
    );
    assert_eq!(out[0].op, Op::ChainFlush);
    // `-D`: the rule, by name.
    let mut out = one();
    let ev = FlushEvidence::from_args(&args("iptables-legacy -D KUBE-FW 1"));
    assert_eq!(ev, FlushEvidence::Delete);
    settle_flushes(&mut out, &ev);
    assert_eq!(out[0].op, Op::RuleDelete);
    assert_eq!(out[0].rule.as_deref(), Some("-j DROP"));
    assert_eq!(out[0].detail.as_deref(), Some("the chain's only rule"));
    // A flush of another chain, or no request seen: the delete, saying what is not known.
    let mut out = one();
    settle_flushes(
        &mut out,
        &FlushEvidence::from_args(&args("iptables -F OTHER")),
    );
    assert_eq!(out[0].op, Op::RuleDelete);
    let mut out = one();
    settle_flushes(&mut out, &FlushEvidence::Unknown);
    assert_eq!(out[0].op, Op::RuleDelete);
    assert!(out[0].detail.as_deref().unwrap().contains("looks the same"));
    // Several rules all deleted stay a flush whatever the evidence.
    let mut out = summarize(
        vec![
            rule(Op::RuleDelete, "X", "-j DROP", 0, 1),
            rule(Op::RuleDelete, "X", "-j ACCEPT", 1, 2),
        ],
        |_, _, _| 2,
        |_, _| 9,
    );
    settle_flushes(&mut out, &FlushEvidence::Unknown);
    assert_eq!(out[0].op, Op::ChainFlush);
    assert_eq!(out[0].rule, None);
    assert_eq!(FlushEvidence::from_args(&[]), FlushEvidence::Unknown);
    assert_eq!(
        FlushEvidence::from_args(&args("iptables -F")),
        FlushEvidence::Flush(Vec::new())
    );
}

#[test]
fn an_emptied_set_is_a_flush_or_its_element_deleted_as_asked() {
    // A set emptied of its only element, as the nftables generation reports it.
    let emptied = |element: &str| {
        vec![Change {
            op: Op::SetFlush,
            rule: Some(element.to_string()),
            detail: Some("1 element deleted".into()),
            ..Change::new(Op::SetFlush, Family::Inet, "f2b-table").chain("addr-set-sshd")
        }]
    };
    // `nft flush set`: a flush, without the elements.
    let mut out = emptied("192.0.2.7");
    settle_set_flushes(
        &mut out,
        &FlushEvidence::Flush(vec!["addr-set-sshd".into()]),
    );
    assert_eq!((out[0].op, out[0].rule.as_deref()), (Op::SetFlush, None));
    // `nft delete element` of the last element: its delete, by value.
    let mut out = emptied("192.0.2.7");
    settle_set_flushes(&mut out, &FlushEvidence::Delete);
    assert_eq!(out[0].op, Op::ElementDelete);
    assert_eq!(out[0].rule.as_deref(), Some("192.0.2.7"));
    assert_eq!(out[0].detail.as_deref(), Some("1 element"));
    // No request seen: its delete, saying what is not known.
    let mut out = emptied("192.0.2.7");
    settle_set_flushes(&mut out, &FlushEvidence::Unknown);
    assert_eq!(out[0].op, Op::ElementDelete);
    assert!(out[0].detail.as_deref().unwrap().contains("looks the same"));
    // A flush of another set in the same batch: still a flush.
    let mut out = emptied("192.0.2.7");
    settle_set_flushes(&mut out, &FlushEvidence::Flush(vec!["other".into()]));
    assert_eq!((out[0].op, out[0].rule.as_deref()), (Op::SetFlush, None));
}

#[test]
fn some_rules_deleted_stay_rule_deletes() {
    let changes = vec![rule(Op::RuleDelete, "X", "-j DROP", 0, 1)];
    let out = summarize(changes, |_, _, _| 2, |_, _| 2);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].op, Op::RuleDelete);
}

#[test]
fn every_chain_emptied_is_a_table_flush() {
    let changes = vec![
        rule(Op::RuleDelete, "A", "-j DROP", 0, 1),
        rule(Op::RuleDelete, "B", "-j DROP", 0, 1),
        rule(Op::RuleDelete, "B", "-j ACCEPT", 1, 2),
    ];
    let out = summarize(changes, |_, _, c| if c == "A" { 1 } else { 2 }, |_, _| 3);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].op, Op::TableFlush);
    assert_eq!(out[0].chain, None);
}

#[test]
fn chains_emptied_while_others_keep_rules_are_chain_flushes() {
    // `-D PREROUTING -j X; -D OUTPUT -j X` on a nat table whose other chains keep their rules.
    let changes = vec![
        rule(Op::RuleDelete, "PREROUTING", "-j KUBE-SERVICES", 0, 1),
        rule(Op::RuleDelete, "OUTPUT", "-j KUBE-SERVICES", 0, 1),
    ];
    let out = summarize(changes, |_, _, _| 1, |_, _| 9);
    let ops: Vec<Op> = out.iter().map(|c| c.op).collect();
    assert_eq!(ops, vec![Op::ChainFlush, Op::ChainFlush]);
}

#[test]
fn rewrite_without_change_is_nothing() {
    let changes = vec![
        rule(Op::RuleDelete, "A", "-j DROP", 0, 7),
        rule(Op::RuleAdd, "A", "-j DROP", 0, 7),
    ];
    assert!(summarize(changes, |_, _, _| 1, |_, _| 1).is_empty());
}

#[test]
fn delete_and_add_at_one_position_is_a_replace() {
    let changes = vec![
        rule(
            Op::RuleDelete,
            "A",
            "-m mark --mark 0x8000/0x8000 -j DROP",
            0,
            7,
        ),
        rule(Op::RuleAdd, "A", "-j DROP", 0, 8),
    ];
    let out = summarize(changes, |_, _, _| 1, |_, _| 1);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].op, Op::RuleReplace);
    assert_eq!(out[0].rule.as_deref(), Some("-j DROP"));
    assert_eq!(
        out[0].detail.as_deref(),
        Some("was: -m mark --mark 0x8000/0x8000 -j DROP")
    );
}

#[test]
fn rules_of_a_deleted_chain_are_implied() {
    let changes = vec![
        rule(Op::RuleDelete, "A", "-j DROP", 0, 7),
        Change::new(Op::ChainDelete, Family::Ip, "filter").chain("A"),
    ];
    let out = summarize(changes, |_, _, _| 1, |_, _| 1);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].op, Op::ChainDelete);
}

#[test]
fn tables_keep_their_order() {
    let mut a = rule(Op::RuleAdd, "A", "-j DROP", 0, 1);
    a.table = "nat".into();
    let b = rule(Op::RuleAdd, "B", "-j DROP", 0, 2);
    let out = summarize(vec![a, b], |_, _, _| 0, |_, _| 0);
    assert_eq!(out[0].table, "nat");
    assert_eq!(out[1].table, "filter");
}

#[test]
fn op_names_round_trip() {
    for op in Op::ALL {
        assert_eq!(Op::parse(op.as_str()), Some(op));
        let json = serde_json::to_string(&op).unwrap();
        assert_eq!(json, format!("\"{}\"", op.as_str()));
    }
}

#[test]
fn words_keep_a_quoted_comment_whole_with_its_escaped_quotes() {
    assert_eq!(
        words("  -m comment --comment \"x \\\" -j y\" -j  DROP "),
        [
            "-m",
            "comment",
            "--comment",
            "\"x \\\" -j y\"",
            "-j",
            "DROP"
        ]
    );
    assert_eq!(
        words("comment \"a b\" drop"),
        ["comment", "\"a b\"", "drop"]
    );
    // An unclosed quote runs to the end.
    assert_eq!(words("-j \"a b"), ["-j", "\"a b"]);
    assert!(words("   ").is_empty());
}

#[test]
fn jump_targets_are_read_from_either_syntax() {
    let ipt = Some(RuleSyntax::Iptables);
    let nft = Some(RuleSyntax::Nft);
    assert_eq!(
        jump_targets(ipt, "-m comment --comment \"svc a\" -j KUBE-SVC-X"),
        ["KUBE-SVC-X"]
    );
    assert_eq!(jump_targets(ipt, "--goto X"), ["X"]);
    assert_eq!(jump_targets(ipt, "-g X"), ["X"]);
    assert_eq!(jump_targets(ipt, "-p tcp --jump ACCEPT"), ["ACCEPT"]);
    assert_eq!(jump_targets(nft, "ip daddr 10.0.0.1 jump X"), ["X"]);
    assert_eq!(jump_targets(nft, "counter goto \"X\""), ["X"]);
    assert!(jump_targets(ipt, "-m mark --mark 1").is_empty());
    assert!(jump_targets(nft, "counter drop").is_empty());
    // The syntax read from the text.
    assert_eq!(
        jump_targets(None, "! -s 10.0.0.0/8 -j KUBE-SVC-X"),
        ["KUBE-SVC-X"]
    );
    assert_eq!(jump_targets(None, "--goto X"), ["X"]);
    assert_eq!(jump_targets(None, "jump X"), ["X"]);
    assert_eq!(jump_targets(None, "ip saddr @set goto X"), ["X"]);
}

#[test]
fn a_comment_is_never_a_jump_target() {
    let ipt = Some(RuleSyntax::Iptables);
    let nft = Some(RuleSyntax::Nft);
    for syntax in [ipt, None] {
        assert!(jump_targets(syntax, "-m comment --comment \"x -j FOO\"").is_empty());
        assert_eq!(
            jump_targets(syntax, "-m comment --comment \"x \\\" -j FOO\" -j ACCEPT"),
            ["ACCEPT"]
        );
        // `iptables-save` leaves a one-word comment unquoted.
        assert_eq!(
            jump_targets(syntax, "-m comment --comment -j -j KUBE-SVC-X"),
            ["KUBE-SVC-X"]
        );
        assert!(jump_targets(syntax, "-m comment --comment --goto").is_empty());
    }
    for syntax in [nft, None] {
        assert!(jump_targets(syntax, "counter comment \"a jump FOO\" accept").is_empty());
        assert_eq!(
            jump_targets(syntax, "comment \"goto \\\"FOO\\\"\" jump BAR"),
            ["BAR"]
        );
    }
}
