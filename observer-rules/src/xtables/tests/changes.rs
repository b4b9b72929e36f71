//! The diff: one expected change list per kind of iptables command, on hand-built tables.

use super::*;

/// Rule `n` of the diff tests: `-s 10.0.0.n/32 -j DROP`.
fn drop_rule(n: u8) -> R {
    R::new(T::Verdict(-1)).with_header(testblob::ip4([10, 0, 0, n], 32, [0; 4], 0, 0))
}

fn rule_text_of(n: u8) -> String {
    format!("-s 10.0.0.{n}/32 -j DROP")
}

/// A filter table: INPUT (policy given) with `input` rules, FORWARD, OUTPUT, then user chains.
fn filter(policy: i32, input: Vec<R>, user: &[(&str, &[u8])]) -> XtTable {
    let mut chains = vec![
        C::builtin("INPUT", 1, policy, input),
        C::builtin("FORWARD", 2, -2, vec![]),
        C::builtin("OUTPUT", 3, -2, vec![]),
    ];
    for (name, rules) in user {
        chains.push(C::user(name, rules.iter().map(|&n| drop_rule(n)).collect()));
    }
    let b = testblob::build(XtProto::Ipv4, "filter", &chains);
    let info = parse_info(XtProto::Ipv4, &b.info).expect("info");
    decode_table(XtProto::Ipv4, &info, b.entries).expect("decode")
}

fn base() -> XtTable {
    filter(
        -2,
        vec![drop_rule(1), R::new(T::Jump("A".into()))],
        &[("A", &[3, 4]), ("B", &[])],
    )
}

fn ch(op: Op, chain: &str) -> Change {
    Change::new(op, Family::Ip, "filter").chain(chain)
}

fn fp_of(t: &XtTable, chain: &str, i: usize) -> u64 {
    t.chain(chain).expect("chain").rules[i].fingerprint
}

#[test]
fn diff_new_chain() {
    let old = base();
    let new = filter(
        -2,
        vec![drop_rule(1), R::new(T::Jump("A".into()))],
        &[("A", &[3, 4]), ("B", &[]), ("C", &[])],
    );
    assert_eq!(diff(Some(&old), Some(&new)), vec![ch(Op::ChainCreate, "C")]);
}

#[test]
fn diff_delete_chain() {
    let old = base();
    let new = filter(
        -2,
        vec![drop_rule(1), R::new(T::Jump("A".into()))],
        &[("A", &[3, 4])],
    );
    assert_eq!(diff(Some(&old), Some(&new)), vec![ch(Op::ChainDelete, "B")]);
}

#[test]
fn diff_append() {
    let old = base();
    let new = filter(
        -2,
        vec![drop_rule(1), R::new(T::Jump("A".into()))],
        &[("A", &[3, 4, 9]), ("B", &[])],
    );
    let fp = fp_of(&new, "A", 2);
    assert_eq!(
        diff(Some(&old), Some(&new)),
        vec![ch(Op::RuleAdd, "A").rule(rule_text_of(9), Some(2), fp)]
    );
}

#[test]
fn diff_insert_at_top() {
    let old = base();
    let new = filter(
        -2,
        vec![drop_rule(1), R::new(T::Jump("A".into()))],
        &[("A", &[9, 3, 4]), ("B", &[])],
    );
    let fp = fp_of(&new, "A", 0);
    assert_eq!(
        diff(Some(&old), Some(&new)),
        vec![ch(Op::RuleAdd, "A").rule(rule_text_of(9), Some(0), fp)]
    );
}

/// Every jump offset moves when a rule is inserted before the user chains; the jumps are
/// still the same rules.
#[test]
fn diff_shifted_jumps_are_unchanged() {
    let old = base();
    let new = filter(
        -2,
        vec![drop_rule(7), drop_rule(1), R::new(T::Jump("A".into()))],
        &[("A", &[3, 4]), ("B", &[])],
    );
    let fp = fp_of(&new, "INPUT", 0);
    assert_eq!(
        diff(Some(&old), Some(&new)),
        vec![ch(Op::RuleAdd, "INPUT").rule(rule_text_of(7), Some(0), fp)]
    );
}

#[test]
fn diff_delete_rule() {
    let old = base();
    let new = filter(
        -2,
        vec![drop_rule(1), R::new(T::Jump("A".into()))],
        &[("A", &[4]), ("B", &[])],
    );
    let fp = fp_of(&old, "A", 0);
    assert_eq!(
        diff(Some(&old), Some(&new)),
        vec![ch(Op::RuleDelete, "A").rule(rule_text_of(3), Some(0), fp)]
    );
}

#[test]
fn diff_replace_rule() {
    let old = base();
    let new = filter(
        -2,
        vec![drop_rule(1), R::new(T::Jump("A".into()))],
        &[("A", &[3, 9]), ("B", &[])],
    );
    let fp = fp_of(&new, "A", 1);
    assert_eq!(
        diff(Some(&old), Some(&new)),
        vec![ch(Op::RuleReplace, "A")
            .rule(rule_text_of(9), Some(1), fp)
            .detail(format!("was: {}", rule_text_of(4)))]
    );
}

#[test]
fn diff_flush_one_chain() {
    let old = base();
    let new = filter(
        -2,
        vec![drop_rule(1), R::new(T::Jump("A".into()))],
        &[("A", &[]), ("B", &[])],
    );
    let out = diff(Some(&old), Some(&new));
    assert_eq!(out, vec![ch(Op::ChainFlush, "A").detail("2 rules deleted")]);
}

#[test]
fn diff_flush_all_chains() {
    let old = base();
    let new = filter(-2, vec![], &[("A", &[]), ("B", &[])]);
    let out = diff(Some(&old), Some(&new));
    assert_eq!(
        out,
        vec![Change::new(Op::TableFlush, Family::Ip, "filter").detail("2 chains, 4 rules deleted")]
    );
}

#[test]
fn diff_policy_change() {
    let old = base();
    let new = filter(
        -1,
        vec![drop_rule(1), R::new(T::Jump("A".into()))],
        &[("A", &[3, 4]), ("B", &[])],
    );
    assert_eq!(
        diff(Some(&old), Some(&new)),
        vec![ch(Op::ChainUpdate, "INPUT").detail("policy ACCEPT -> DROP")]
    );
}

#[test]
fn diff_rename_chain_rewrites_the_jump() {
    let old = base();
    let new = filter(
        -2,
        vec![drop_rule(1), R::new(T::Jump("Z".into()))],
        &[("B", &[]), ("Z", &[3, 4])],
    );
    let fp = fp_of(&new, "INPUT", 1);
    let mut z = vec![ch(Op::ChainCreate, "Z")];
    for (i, n) in [3u8, 4].into_iter().enumerate() {
        z.push(ch(Op::RuleAdd, "Z").rule(rule_text_of(n), Some(i), fp_of(&new, "Z", i)));
    }
    z.push(
        ch(Op::RuleReplace, "INPUT")
            .rule("-j Z", Some(1), fp)
            .detail("was: -j A"),
    );
    z.push(ch(Op::ChainDelete, "A").detail("2 rules deleted"));
    assert_eq!(diff(Some(&old), Some(&new)), z);
}

#[test]
fn diff_same_table_is_empty() {
    let t = base();
    assert!(diff(Some(&t), Some(&base())).is_empty());
    assert!(diff(None, None).is_empty());
}

/// The kernel does not make chain names unique: the k-th chain of a name is compared with the
/// k-th of the other copy (by name alone, a table differed from itself).
#[test]
fn diff_pairs_chains_of_the_same_name_in_order() {
    let a = filter(-2, vec![], &[("A", &[1]), ("B", &[]), ("A", &[2])]);
    assert!(diff(Some(&a), Some(&a)).is_empty());
    let b = filter(-2, vec![], &[("A", &[1]), ("B", &[]), ("A", &[2, 3])]);
    let a_names: Vec<&str> = a.chains.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(a_names, ["INPUT", "FORWARD", "OUTPUT", "A", "B", "A"]);
    let d = diff(Some(&a), Some(&b));
    assert_eq!(
        d,
        vec![ch(Op::RuleAdd, "A").rule(rule_text_of(3), Some(1), b.chains[5].rules[1].fingerprint)]
    );
}

/// Found by the `xt_blob` fuzz target (the ip_filter_basic fixture with a user chain's name
/// repeated): `diff` of the table with itself reported two rule replaces.
#[test]
fn fuzz_repeated_chain_name_is_no_change() {
    let input = include_bytes!("../testdata/fuzz/xt_blob-repeated-chain.bin");
    let (selector, bytes) = input.split_first().expect("selector byte");
    assert_eq!(*selector % 3, 0, "ip_tables");
    let mut decoded = 0;
    for fix_size in [false, true] {
        let Ok(t) = crate::fuzzing::xt_table(XtProto::Ipv4, bytes, fix_size) else {
            continue;
        };
        decoded += 1;
        let names: std::collections::HashSet<&str> =
            t.chains.iter().map(|c| c.name.as_str()).collect();
        assert!(names.len() < t.chains.len(), "a chain name is repeated");
        assert!(diff(Some(&t), Some(&t)).is_empty());
    }
    assert!(decoded > 0, "the input decodes");
}

#[test]
fn diff_table_appears_and_goes() {
    let t = filter(-2, vec![drop_rule(1)], &[("A", &[])]);
    let created = diff(None, Some(&t));
    assert_eq!(
        created,
        vec![
            Change::new(Op::TableCreate, Family::Ip, "filter"),
            ch(Op::ChainCreate, "INPUT").detail("builtin, policy ACCEPT"),
            ch(Op::RuleAdd, "INPUT").rule(rule_text_of(1), Some(0), fp_of(&t, "INPUT", 0)),
            ch(Op::ChainCreate, "FORWARD").detail("builtin, policy ACCEPT"),
            ch(Op::ChainCreate, "OUTPUT").detail("builtin, policy ACCEPT"),
            ch(Op::ChainCreate, "A"),
        ]
    );
    assert_eq!(
        diff(Some(&t), None),
        vec![Change::new(Op::TableDelete, Family::Ip, "filter").detail("4 chains, 1 rules")]
    );
}

/// A table's creation made a chain at a time says exactly what `diff` from nothing says.
#[test]
fn created_is_diff_from_nothing() {
    let mut tables = vec![
        filter(-2, vec![drop_rule(1)], &[("A", &[]), ("B", &[2, 3, 4])]),
        base(),
    ];
    for f in [
        fixture!("ip_filter_basic", XtProto::Ipv4),
        fixture!("ip_filter_ext", XtProto::Ipv4),
        fixture!("ip_nat", XtProto::Ipv4),
        fixture!("ip6_nat", XtProto::Ipv6),
    ] {
        tables.push(fixture_table(&f));
    }
    for t in tables {
        let whole = diff(None, Some(&t));
        assert!(whole.len() > 2, "{}: a table with chains and rules", t.name);
        assert_eq!(super::diff::created_count(&t), whole.len(), "{}", t.name);
        let lazy: Vec<Change> = super::diff::created(std::sync::Arc::new(t)).collect();
        assert_eq!(lazy, whole);
    }
}

/// Counters change on every packet; they must never show up as a change.
#[test]
fn diff_ignores_counters() {
    let f = fixture!("ip_filter_basic", XtProto::Ipv4);
    let t = fixture_table(&f);
    let mut bin = f.bin.to_vec();
    let n = layout(XtProto::Ipv4).info_size;
    // Counters of the first entry.
    bin[n + 96..n + 112].copy_from_slice(&[7; 16]);
    let t2 = decode_bytes(XtProto::Ipv4, &bin).expect("decode");
    assert!(diff(Some(&t), Some(&t2)).is_empty());
}

/// The edit script is valid and as short as the LCS says, on random sequences.
#[test]
fn edit_script_is_a_shortest_script() {
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for _ in 0..2000 {
        let a: Vec<u64> = (0..rnd(12)).map(|_| rnd(4)).collect();
        let b: Vec<u64> = (0..rnd(12)).map(|_| rnd(4)).collect();
        let script = diff::edit_script(&a, &b);
        // Apply: keep a's elements not deleted, merge in inserts at their b positions.
        let deleted: Vec<usize> = script
            .iter()
            .filter_map(|e| match e {
                diff::Edit::Delete(i) => Some(*i),
                _ => None,
            })
            .collect();
        let inserted: Vec<usize> = script
            .iter()
            .filter_map(|e| match e {
                diff::Edit::Insert(j) => Some(*j),
                _ => None,
            })
            .collect();
        let kept_a: Vec<u64> = (0..a.len())
            .filter(|i| !deleted.contains(i))
            .map(|i| a[i])
            .collect();
        let kept_b: Vec<u64> = (0..b.len())
            .filter(|j| !inserted.contains(j))
            .map(|j| b[j])
            .collect();
        assert_eq!(kept_a, kept_b, "{a:?} -> {b:?}: {script:?}");
        // LCS length by dynamic programming.
        let mut dp = vec![vec![0usize; b.len() + 1]; a.len() + 1];
        for i in (0..a.len()).rev() {
            for j in (0..b.len()).rev() {
                dp[i][j] = if a[i] == b[j] {
                    dp[i + 1][j + 1] + 1
                } else {
                    dp[i + 1][j].max(dp[i][j + 1])
                };
            }
        }
        assert_eq!(
            script.len(),
            a.len() + b.len() - 2 * dp[0][0],
            "{a:?} -> {b:?}"
        );
    }
}

/// A 20,000-rule, 2,000-chain table: build, decode, change one rule, diff.
fn big_table(changed: Option<(usize, usize)>) -> testblob::Built {
    let mut chains = vec![
        C::builtin("INPUT", 1, -2, vec![]),
        C::builtin("FORWARD", 2, -2, vec![]),
        C::builtin("OUTPUT", 3, -2, vec![]),
    ];
    let mut input = Vec::new();
    for c in 0..2000usize {
        let name = format!("KUBE-SVC-{c:06}");
        input.push(R::new(T::Jump(name.clone())));
        let rules = (0..10usize)
            .map(|r| {
                let n = if changed == Some((c, r)) {
                    250
                } else {
                    r as u8
                };
                let comment = format!("default/svc-{c}:port-{r}");
                let mut data = vec![0u8; 256];
                data[..comment.len()].copy_from_slice(comment.as_bytes());
                R::new(T::Jump(name.clone()))
                    .with_header(testblob::ip4(
                        [10, (c / 256) as u8, (c % 256) as u8, n],
                        32,
                        [0; 4],
                        0,
                        6,
                    ))
                    .with_match("comment", 0, data)
            })
            .collect();
        chains.push(C::user(&name, rules));
    }
    chains[0].rules = input;
    testblob::build(XtProto::Ipv4, "filter", &chains)
}

#[test]
fn diff_of_a_big_table_finds_the_one_change() {
    let a = big_table(None);
    let b = big_table(Some((1234, 5)));
    let ia = parse_info(XtProto::Ipv4, &a.info).expect("info");
    let ib = parse_info(XtProto::Ipv4, &b.info).expect("info");
    let ta = decode_table(XtProto::Ipv4, &ia, a.entries).expect("decode");
    let tb = decode_table(XtProto::Ipv4, &ib, b.entries).expect("decode");
    assert_eq!(ta.rule_count(), 2000 * 10 + 2000);
    let out = diff(Some(&ta), Some(&tb));
    assert_eq!(out.len(), 1, "{out:#?}");
    assert_eq!(out[0].op, Op::RuleReplace);
    assert_eq!(out[0].chain.as_deref(), Some("KUBE-SVC-001234"));
    assert_eq!(out[0].position, Some(5));
}

/// Decode + diff time of the synthetic 22,000-rule table, no root needed:
/// `cargo test --release -p observer bench_decode_synthetic -- --ignored --nocapture`.
#[test]
#[ignore = "benchmark"]
fn bench_decode_synthetic() {
    use std::time::Instant;
    let a = big_table(None);
    let b = big_table(Some((1234, 5)));
    let ia = parse_info(XtProto::Ipv4, &a.info).expect("info");
    let ib = parse_info(XtProto::Ipv4, &b.info).expect("info");
    let ta = decode_table(XtProto::Ipv4, &ia, a.entries.clone()).expect("decode");
    let mut best_decode = f64::MAX;
    let mut best_diff = f64::MAX;
    for _ in 0..10 {
        let blob = b.entries.clone();
        let t = Instant::now();
        let tb = decode_table(XtProto::Ipv4, &ib, blob).expect("decode");
        best_decode = best_decode.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let out = diff(Some(&ta), Some(&tb));
        best_diff = best_diff.min(t.elapsed().as_secs_f64());
        assert_eq!(out.len(), 1);
    }
    println!(
        "{} bytes, {} rules: decode {:.2} ms, diff {:.2} ms",
        b.entries.len(),
        ta.rule_count(),
        best_decode * 1e3,
        best_diff * 1e3
    );
}

/// `iptables -F` of the synthetic 22,000-rule table: how long diff + summarize take.
#[test]
#[ignore = "benchmark"]
fn bench_flush_synthetic() {
    use std::time::Instant;
    let a = big_table(None);
    let ia = parse_info(XtProto::Ipv4, &a.info).expect("info");
    let ta = decode_table(XtProto::Ipv4, &ia, a.entries).expect("decode");
    let mut chains = vec![
        C::builtin("INPUT", 1, -2, vec![]),
        C::builtin("FORWARD", 2, -2, vec![]),
        C::builtin("OUTPUT", 3, -2, vec![]),
    ];
    for c in 0..2000usize {
        chains.push(C::user(&format!("KUBE-SVC-{c:06}"), vec![]));
    }
    let b = testblob::build(XtProto::Ipv4, "filter", &chains);
    let ib = parse_info(XtProto::Ipv4, &b.info).expect("info");
    let tb = decode_table(XtProto::Ipv4, &ib, b.entries).expect("decode");
    let t = Instant::now();
    let raw = super::super::diff::raw_changes(Some(&ta), Some(&tb));
    let raw_t = t.elapsed();
    let t = Instant::now();
    let out = diff(Some(&ta), Some(&tb));
    println!(
        "flush of {} rules: raw changes {raw_t:?} ({} deltas), diff + summarize {:?}",
        ta.rule_count(),
        raw.len(),
        t.elapsed()
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].op, Op::TableFlush);
}
