//! Decoding a table against its last copy: the chains that did not change are carried over,
//! and the result is the table decoded alone.

use super::*;
use crate::xtables::decode::TableInfo;

fn drop_rule(n: u8) -> R {
    R::new(T::Verdict(-1)).with_header(testblob::ip4([10, 0, 0, n], 32, [0; 4], 0, 0))
}

fn user(name: &str, rules: &[u8]) -> C {
    C::user(name, rules.iter().map(|&n| drop_rule(n)).collect())
}

fn table(input: Vec<R>, user_chains: Vec<C>) -> (TableInfo, Vec<u8>) {
    let mut chains = vec![
        C::builtin("INPUT", 1, -2, input),
        C::builtin("FORWARD", 2, -1, vec![]),
        C::builtin("OUTPUT", 3, -2, vec![]),
    ];
    chains.extend(user_chains);
    let b = testblob::build(XtProto::Ipv4, "filter", &chains);
    (parse_info(XtProto::Ipv4, &b.info).expect("info"), b.entries)
}

fn decode(t: &(TableInfo, Vec<u8>), prev: Option<&XtTable>) -> XtTable {
    decode::decode_table_against(XtProto::Ipv4, &t.0, t.1.clone(), 0, prev).expect("decode")
}

#[test]
fn unchanged_chains_are_carried_over_and_the_table_is_the_same_as_decoded_alone() {
    let before = table(
        vec![drop_rule(1), R::new(T::Jump("A".into()))],
        vec![user("A", &[3, 4]), user("B", &[]), user("C", &[5, 6])],
    );
    // A new chain first (every later entry moves, and with it every jump's target offset),
    // and one rule of C changed.
    let after = table(
        vec![drop_rule(1), R::new(T::Jump("A".into()))],
        vec![
            user("NEW", &[9, 9, 9]),
            user("A", &[3, 4]),
            user("B", &[]),
            user("C", &[5, 7]),
        ],
    );
    let old = decode(&before, None);
    assert_eq!(old.carried_chains(), 0);
    let alone = decode(&after, None);
    let against = decode(&after, Some(&old));
    // INPUT (its jump's offset moved, its target did not), FORWARD, OUTPUT, A and B; not NEW,
    // not C.
    assert_eq!(against.carried_chains(), 5);
    assert_eq!(against.chains, alone.chains);
    assert_eq!(against.save_text(), alone.save_text());
    assert!(against.save_text().contains("-A INPUT -j A\n"));
    let changes = diff(Some(&old), Some(&against));
    assert_eq!(changes, diff(Some(&old), Some(&alone)));
    let mut chains: Vec<&str> = changes.iter().filter_map(|c| c.chain.as_deref()).collect();
    chains.dedup();
    assert_eq!(chains, ["NEW", "C"], "{changes:?}");
    // Decoding the same table against itself carries every chain and finds nothing.
    let again = decode(&after, Some(&against));
    assert_eq!(again.carried_chains(), again.chains.len());
    assert!(diff(Some(&against), Some(&again)).is_empty());
}

#[test]
fn a_jump_to_another_chain_at_the_same_offset_is_a_change() {
    // INPUT jumps to the first user chain in both copies: the same bytes, another target.
    let before = table(
        vec![R::new(T::Jump("A".into()))],
        vec![user("A", &[1]), user("B", &[2])],
    );
    let after = table(
        vec![R::new(T::Jump("B".into()))],
        vec![user("B", &[2]), user("A", &[1])],
    );
    let old = decode(&before, None);
    let against = decode(&after, Some(&old));
    assert_eq!(against.save_text(), decode(&after, None).save_text());
    assert!(against.save_text().contains("-A INPUT -j B\n"));
    // FORWARD, OUTPUT, A and B are the same; INPUT is not.
    assert_eq!(against.carried_chains(), 4);
    let changes = diff(Some(&old), Some(&against));
    assert!(
        changes.iter().any(|c| c.chain.as_deref() == Some("INPUT")),
        "{changes:?}"
    );
}
