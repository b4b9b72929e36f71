//! A table held at chain level (more rules than the decode had room for): its chains without
//! their rules, and its changes told a chain at a time.

use super::*;
use crate::xtables::decode::TableInfo;

fn rule(n: u8) -> R {
    R::new(T::Verdict(-1)).with_header(testblob::ip4([10, 0, 0, n], 32, [0; 4], 0, 0))
}

fn user(name: &str, rules: &[u8]) -> C {
    C::user(name, rules.iter().map(|&n| rule(n)).collect())
}

fn table(input_policy: i32, input: Vec<R>, user_chains: Vec<C>) -> (TableInfo, Vec<u8>) {
    let mut chains = vec![
        C::builtin("INPUT", 1, input_policy, input),
        C::builtin("FORWARD", 2, -1, vec![]),
        C::builtin("OUTPUT", 3, -2, vec![]),
    ];
    chains.extend(user_chains);
    let b = testblob::build(XtProto::Ipv4, "filter", &chains);
    (parse_info(XtProto::Ipv4, &b.info).expect("info"), b.entries)
}

fn decode(t: &(TableInfo, Vec<u8>), prev: Option<&XtTable>, room: usize) -> XtTable {
    decode::decode_table_against(XtProto::Ipv4, &t.0, t.1.clone(), 0, Against { prev, room })
        .expect("decode")
}

fn ops(changes: &[Change]) -> Vec<(Op, Option<&str>)> {
    changes.iter().map(|c| (c.op, c.chain.as_deref())).collect()
}

fn base() -> (TableInfo, Vec<u8>) {
    table(
        -2,
        vec![rule(1), R::new(T::Jump("A".into()))],
        vec![user("A", &[3, 4]), user("B", &[5]), user("C", &[6, 7, 8])],
    )
}

#[test]
fn a_table_over_the_room_keeps_its_chains_and_their_counts_but_no_rules() {
    let t = base();
    let whole = decode(&t, None, 8);
    assert!(!whole.chain_level(), "8 rules fit a room of 8");
    let coarse = decode(&t, None, 7);
    assert!(coarse.chain_level());
    assert_eq!(coarse.rule_count(), 8);
    assert_eq!(coarse.rule_count(), whole.rule_count());
    assert_eq!(coarse.entry_count(), whole.entry_count());
    assert_eq!(coarse.kept_bytes(), 0);
    for (c, w) in coarse.chains.iter().zip(&whole.chains) {
        assert_eq!(
            (&c.name, c.builtin, &c.policy, c.rule_count(), c.key),
            (&w.name, w.builtin, &w.policy, w.rules.len(), w.key)
        );
        assert!(c.rules.is_empty());
    }
}

#[test]
fn a_table_created_at_chain_level_is_its_chains_with_their_rule_counts() {
    let coarse = decode(&base(), None, 0);
    let changes = diff(None, Some(&coarse));
    assert_eq!(
        ops(&changes),
        [
            (Op::TableCreate, None),
            (Op::ChainCreate, Some("INPUT")),
            (Op::ChainCreate, Some("FORWARD")),
            (Op::ChainCreate, Some("OUTPUT")),
            (Op::ChainCreate, Some("A")),
            (Op::ChainCreate, Some("B")),
            (Op::ChainCreate, Some("C")),
        ]
    );
    let input = changes[1].detail.as_deref().unwrap_or_default();
    assert!(
        input.starts_with("builtin, policy ACCEPT; 2 rules ("),
        "{input}"
    );
    assert!(input.contains("chain level"), "{input}");
    assert!(changes[5]
        .detail
        .as_deref()
        .unwrap_or_default()
        .starts_with("1 rule ("));
    let lazily: Vec<Change> = diff::created(std::sync::Arc::new(coarse.clone())).collect();
    assert_eq!(lazily, changes);
    assert_eq!(diff::created_count(&coarse), changes.len());
}

#[test]
fn changes_at_chain_level_name_the_chains_that_changed_and_only_those() {
    let old = decode(&base(), None, 0);
    // A rule added to A, B flushed, C deleted, D created, the policy of INPUT changed.
    let after = table(
        -1,
        vec![rule(1), R::new(T::Jump("A".into()))],
        vec![user("A", &[3, 4, 9]), user("B", &[]), user("D", &[1])],
    );
    let new = decode(&after, Some(&old), 0);
    let changes = diff(Some(&old), Some(&new));
    assert_eq!(
        ops(&changes),
        [
            (Op::ChainCreate, Some("D")),
            (Op::ChainUpdate, Some("INPUT")),
            (Op::ChainUpdate, Some("A")),
            (Op::ChainFlush, Some("B")),
            (Op::ChainDelete, Some("C")),
        ],
        "{changes:#?}"
    );
    assert_eq!(changes[1].detail.as_deref(), Some("policy ACCEPT -> DROP"));
    assert!(changes[2]
        .detail
        .as_deref()
        .unwrap_or_default()
        .starts_with("rules changed: 2 -> 3"));
    assert!(changes[3]
        .detail
        .as_deref()
        .unwrap_or_default()
        .starts_with("1 rule flushed"));
    assert_eq!(changes[4].detail.as_deref(), Some("3 rules deleted"));
    // FORWARD and OUTPUT did not change: they are the last copy's.
    assert_eq!(new.carried_chains(), 2);
    assert!(std::sync::Arc::ptr_eq(&new.chains[1], &old.chains[1]));
    // The same table again: every chain is the last copy's, and nothing changed.
    let again = decode(&after, Some(&new), 0);
    assert_eq!(again.carried_chains(), again.chains.len());
    assert!(diff(Some(&new), Some(&again)).is_empty());
}

#[test]
fn a_table_that_grows_past_the_room_or_shrinks_back_is_compared_a_chain_at_a_time() {
    let t = base();
    let fine = decode(&t, None, usize::MAX);
    let grown = table(
        -2,
        vec![rule(1), R::new(T::Jump("A".into()))],
        vec![
            user("A", &[3, 4]),
            user("B", &[5]),
            user("C", &[6, 7, 8, 9]),
        ],
    );
    // Past the room: held at chain level, and only C is said to have changed.
    let coarse = decode(&grown, Some(&fine), 8);
    assert!(coarse.chain_level());
    let up = diff(Some(&fine), Some(&coarse));
    assert_eq!(ops(&up), [(Op::ChainUpdate, Some("C"))], "{up:#?}");
    // Back under it: rule by rule again, decoded whole (nothing is carried from a copy without
    // rules), and the step back is told a chain at a time too.
    let back = decode(&t, Some(&coarse), 8);
    assert!(!back.chain_level());
    assert_eq!(back.carried_chains(), 0);
    assert_eq!(back.save_text(), fine.save_text());
    let down = diff(Some(&coarse), Some(&back));
    assert_eq!(ops(&down), [(Op::ChainUpdate, Some("C"))], "{down:#?}");
}
