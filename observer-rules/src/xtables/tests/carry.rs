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
    decode::decode_table_against(XtProto::Ipv4, &t.0, t.1.clone(), 0, prev.into()).expect("decode")
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

#[test]
fn with_the_same_chains_in_the_same_order_a_grown_chain_moves_the_rest_and_only_it_changes() {
    // A rule added to A: B and C, and the entries INPUT jumps to, sit further on.
    let before = table(
        vec![drop_rule(1), R::new(T::Jump("C".into()))],
        vec![user("A", &[3]), user("B", &[4]), user("C", &[5, 6])],
    );
    let after = table(
        vec![drop_rule(1), R::new(T::Jump("C".into()))],
        vec![user("A", &[3, 8]), user("B", &[4]), user("C", &[5, 6])],
    );
    let old = decode(&before, None);
    let alone = decode(&after, None);
    let against = decode(&after, Some(&old));
    // All but A.
    assert_eq!(against.carried_chains(), against.chains.len() - 1);
    assert_eq!(against.chains, alone.chains);
    assert_eq!(against.save_text(), alone.save_text());
    assert_eq!(against.jump_targets(&against.chains[0]), ["C"]);
    let changes = diff(Some(&old), Some(&against));
    assert_eq!(changes, diff(Some(&old), Some(&alone)));
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].op, Op::RuleAdd);
    assert_eq!(changes[0].chain.as_deref(), Some("A"));
}

#[test]
fn a_rule_whose_counters_alone_changed_is_carried_over() {
    let t = table(
        vec![drop_rule(1), R::new(T::Jump("A".into()))],
        vec![user("A", &[3])],
    );
    let old = decode(&t, None);
    // The first entry (INPUT's first rule): its packet and byte counters, after `comefrom`.
    let mut counted = t.clone();
    let l = layout(XtProto::Ipv4);
    let counters = l.next_offset_at + 6;
    counted.1[counters..l.entry_size].copy_from_slice(&[7u8; 16]);
    let against = decode(&counted, Some(&old));
    assert_eq!(against.carried_chains(), against.chains.len());
    assert!(diff(Some(&old), Some(&against)).is_empty());
}

#[test]
fn one_changed_byte_of_a_match_is_a_change_in_the_same_order() {
    let with = |b: u8| {
        table(
            vec![drop_rule(1).with_match("mark", 1, vec![1, 0, 0, 0, b, 0, 0, 0, 0, 0, 0, 0])],
            vec![user("A", &[3])],
        )
    };
    let old = decode(&with(0xff), None);
    let after = with(0xfe);
    let against = decode(&after, Some(&old));
    // FORWARD, OUTPUT and A; not INPUT.
    assert_eq!(against.carried_chains(), against.chains.len() - 1);
    assert_eq!(against.chains, decode(&after, None).chains);
    let changes = diff(Some(&old), Some(&against));
    assert!(
        changes.iter().all(|c| c.chain.as_deref() == Some("INPUT")) && !changes.is_empty(),
        "{changes:?}"
    );
}

#[test]
fn a_renamed_chain_is_deleted_and_created_and_the_others_are_carried() {
    let before = table(
        vec![R::new(T::Jump("B".into()))],
        vec![user("A", &[1]), user("B", &[2]), user("C", &[3])],
    );
    let after = table(
        vec![R::new(T::Jump("B2".into()))],
        vec![user("A", &[1]), user("B2", &[2]), user("C", &[3])],
    );
    let old = decode(&before, None);
    let alone = decode(&after, None);
    let against = decode(&after, Some(&old));
    // FORWARD, OUTPUT, A and C; not INPUT (its jump's target is another name), not B2.
    assert_eq!(against.carried_chains(), 4);
    assert_eq!(against.chains, alone.chains);
    assert_eq!(against.save_text(), alone.save_text());
    let changes = diff(Some(&old), Some(&against));
    assert_eq!(changes, diff(Some(&old), Some(&alone)));
    let has = |op: Op, chain: &str| {
        changes
            .iter()
            .any(|c| c.op == op && c.chain.as_deref() == Some(chain))
    };
    assert!(has(Op::ChainCreate, "B2"), "{changes:?}");
    assert!(has(Op::ChainDelete, "B"), "{changes:?}");
    assert!(changes
        .iter()
        .all(|c| ["B", "B2", "INPUT"].contains(&c.chain.as_deref().unwrap_or(""))));
}

#[test]
fn a_chain_emptied_in_the_same_order_is_a_flush() {
    let before = table(
        vec![],
        vec![user("A", &[1]), user("B", &[2, 3]), user("C", &[4])],
    );
    let after = table(
        vec![],
        vec![user("A", &[1]), user("B", &[]), user("C", &[4])],
    );
    let old = decode(&before, None);
    let against = decode(&after, Some(&old));
    let changes = diff(Some(&old), Some(&against));
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].op, Op::ChainFlush);
    assert_eq!(changes[0].chain.as_deref(), Some("B"));
}

#[test]
fn a_copy_shares_the_unchanged_chains_entries_and_memory_follows_the_change() {
    // 300 chains of 4 rules; each replace changes one rule of one chain.
    let chains = |changed: u8, round: u8| -> Vec<C> {
        (0..300u16)
            .map(|i| {
                let last = if i == u16::from(changed) { round } else { 4 };
                user(&format!("C{i}"), &[1, 2, 3, last])
            })
            .collect()
    };
    let first = table(vec![drop_rule(1)], chains(0, 4));
    let mut held = decode(&first, None);
    let whole = held.kept_bytes();
    assert_eq!(held.live_bytes(), whole);
    // Rounds whose unchanged chains' entries were copied (packed afresh) rather than shared:
    // a shared store keeps the last copy's segments and adds one of its own.
    let (mut copied, mut shared) = (0, 0);
    for round in 0..=255u8 {
        let next = table(vec![drop_rule(1)], chains(round % 200, round));
        let against = decode(&next, Some(&held));
        let alone = decode(&next, None);
        assert_eq!(against.chains, alone.chains, "round {round}");
        assert_eq!(against.save_text(), alone.save_text(), "round {round}");
        assert_eq!(against.live_bytes(), alone.live_bytes(), "round {round}");
        let changes = diff(Some(&held), Some(&against));
        assert!(changes.len() <= 2, "round {round}: {changes:?}");
        if against.entries.segments() == held.entries.segments() + 1 {
            shared += 1;
        } else {
            copied += 1;
        }
        // What the copy holds beyond what it uses stays bounded: the segments it shares are
        // let go once unused, and a store grown with many small segments is packed afresh.
        assert!(
            against.kept_bytes() <= 2 * against.live_bytes() + (1 << 20),
            "round {round}: {} held for {} used",
            against.kept_bytes(),
            against.live_bytes()
        );
        held = against;
    }
    assert!(held.carried_chains() >= held.chains.len() - 2);
    // One round in a hundred or so packs afresh (many small segments); the others share.
    assert!(
        (1..=3).contains(&copied),
        "{copied} rounds of 256 copied, {shared} shared"
    );
}
