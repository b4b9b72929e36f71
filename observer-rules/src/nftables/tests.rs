//! Tests on captured notifications: decoding, transactions, rendering and the state they keep,
//! replayed from the fixtures in `testdata/` (no root, no kernel).
//!
//! The fixtures were captured with the agent's `capture_fixtures` (an ignored live test):
//! `OBSERVER_NFT_FIXTURES=$PWD/../observer-rules/src/nftables/testdata cargo test -p observer
//! capture_fixtures -- --ignored` as root, on Linux 6.18 with nft 1.0.6 and iptables 1.8.9.

use super::decode::{self, decode, Notification, Verb};
use super::generation::{GenerationBuilder, Transaction};
use super::state::NftState;
use super::testing::scenarios::*;
use super::testing::*;
use super::{render, state, Dump};
use crate::ruleset::{Change, Op};

fn check_steps(r: &Replay, sc: &Scenario, expected: &[Vec<String>]) {
    assert_eq!(
        r.steps.len(),
        sc.steps.len(),
        "one group of datagrams per command"
    );
    assert_eq!(r.steps.len(), expected.len());
    for ((cmd, txns), want) in r.steps.iter().zip(expected) {
        assert_eq!(txns.len(), 1, "`{cmd}`: one generation per command");
        assert_eq!(&step_lines(txns), want, "`{cmd}`");
    }
}

#[test]
fn fixtures_decode_without_skips() {
    let mut kinds = std::collections::BTreeMap::new();
    let hex = parse_fixture(NFT_OPS_HEX)
        .into_iter()
        .chain(parse_fixture(IPTABLES_OPS_HEX));
    let all: Vec<Vec<u8>> = hex.map(|(_, d)| d).chain(parse_bin(CORPUS_BIN)).collect();
    for d in &all {
        for n in decode(d) {
            let kind = match &n {
                Notification::Table(..) => "table",
                Notification::Chain(..) => "chain",
                Notification::Rule(Verb::New, _) => "newrule",
                Notification::Rule(Verb::Del, _) => "delrule",
                Notification::Set(..) => "set",
                Notification::Elements(..) => "elements",
                Notification::Gen(_) => "gen",
                Notification::Skipped(s) => panic!("skipped: {s:?}"),
            };
            *kinds.entry(kind).or_insert(0) += 1;
        }
    }
    for kind in [
        "table", "chain", "newrule", "delrule", "set", "elements", "gen",
    ] {
        assert!(
            kinds.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} in fixtures"
        );
    }
}

#[test]
fn nft_ops_become_the_expected_changes() {
    let r = replay(NFT_OPS_HEX);
    assert_eq!(
        r.setup_transactions, 0,
        "generations up to the dump are in the dump"
    );
    check_steps(&r, &NFT_OPS, &nft_ops_expected());
}

#[test]
fn iptables_ops_become_the_expected_changes() {
    let r = replay(IPTABLES_OPS_HEX);
    check_steps(&r, &IPTABLES_OPS, &iptables_ops_expected());
}

#[test]
fn transactions_carry_generation_pid_and_comm() {
    let r = replay(IPTABLES_OPS_HEX);
    let txns: Vec<&Transaction> = r.steps.iter().flat_map(|(_, t)| t).collect();
    // Generations follow each other from the dump's (1 in a fresh namespace).
    for (i, t) in txns.iter().enumerate() {
        assert_eq!(t.gen_id, 2 + i as u32);
        assert!(t.pid > 0);
    }
    assert_eq!(txns[0].comm, "iptables-nft");
    // The 15-character comm of iptables-nft-restore.
    assert_eq!(txns[6].comm, "iptables-nft-re");
    let r = replay(NFT_OPS_HEX);
    let first = &r.steps[0].1[0];
    assert_eq!((first.gen_id, first.comm.as_str()), (10, "nft"));
    // The writer's thread id, read by hand from the NEWGEN message: nlmsghdr (16), nfgenmsg
    // (4), NFTA_GEN_ID (8), then NFTA_GEN_PROC_PID's header and big-endian value.
    let cmd = "cmd: nft add rule ip t c iifname lo accept";
    let newgen = parse_fixture(NFT_OPS_HEX)
        .into_iter()
        .filter(|(c, _)| c == cmd)
        .map(|(_, d)| d)
        .next_back()
        .expect("NEWGEN datagram");
    assert_eq!(newgen[4..6], ((10u16 << 8) | 15).to_ne_bytes()); // NFT_MSG_NEWGEN
    assert_eq!(newgen[28..32], [8, 0, 2, 0]); // NFTA_GEN_PROC_PID, 8 bytes
    let pid = u32::from_be_bytes([newgen[32], newgen[33], newgen[34], newgen[35]]);
    assert_eq!(first.pid, pid);
}

#[test]
fn objects_wait_for_their_newgen() {
    let cmd = "cmd: nft add rule ip t c iifname lo accept";
    let datagrams = datagrams_of(NFT_OPS_HEX, cmd);
    let mut b = replay_until(NFT_OPS_HEX, cmd);
    let mut msgs: Vec<Notification> = datagrams.iter().flat_map(|d| decode(d)).collect();
    let gen = msgs.pop().expect("NEWGEN last");
    assert!(
        matches!(gen, Notification::Gen(_)),
        "NEWGEN comes after the objects"
    );
    for m in msgs {
        assert!(b.push(m).is_none());
    }
    assert_eq!(b.pending(), 1);
    let t = b.push(gen).expect("NEWGEN closes the transaction");
    assert_eq!(b.pending(), 0);
    assert_eq!(t.changes.len(), 1);
    assert_eq!(t.changes[0].op, Op::RuleAdd);
    assert_eq!(t.changes[0].position, Some(3));
}

/// A rule's message waits as its bytes and is decoded when its transaction is applied: one
/// that does not decode is skipped then, and told by the feed that closes the transaction.
#[test]
fn a_rule_waits_as_its_bytes_and_a_bad_one_is_told_when_applied() {
    let cmd = "cmd: nft add rule ip t c iifname lo accept";
    let datagrams = datagrams_of(NFT_OPS_HEX, cmd);
    let [rule, newgen] = &datagrams[..] else {
        panic!("a rule's datagram, then NEWGEN's: {}", datagrams.len());
    };
    let mut bad = rule.clone();
    bad[20] = 0xff; // first attribute's length (after nlmsghdr + nfgenmsg)
    bad[21] = 0x00;
    let mut b = replay_until(NFT_OPS_HEX, cmd);
    let fed = b.feed(&bad);
    assert!(fed.skipped.is_empty() && fed.transactions.is_empty());
    b.feed(rule);
    assert_eq!(b.pending(), 2);
    let fed = b.feed(newgen);
    assert_eq!(b.pending(), 0);
    assert_eq!(fed.skipped.len(), 1, "{:?}", fed.skipped);
    assert!(
        fed.skipped[0].reason.contains("length"),
        "{:?}",
        fed.skipped
    );
    assert_eq!(b.skipped(), 1);
    let [t] = &fed.transactions[..] else {
        panic!("one transaction: {:?}", fed.transactions);
    };
    assert_eq!(t.changes.len(), 1);
    assert_eq!(t.changes[0].op, Op::RuleAdd);
}

/// A builder capped at the rules it holds plus one tells a one-rule transaction rule by rule;
/// capped at what it holds, it goes to chain level: it lets go of its rules and tells the
/// transaction as the chain's new rule count; capped below what it holds, it is at chain level
/// from the start.
#[test]
fn a_builder_past_its_rule_cap_holds_the_ruleset_at_chain_level() {
    let cmd = "cmd: nft add rule ip t c iifname lo accept";
    let datagrams = datagrams_of(NFT_OPS_HEX, cmd);
    let before = replay_until(NFT_OPS_HEX, cmd);
    let held = before.state().rule_count();
    let in_c = before
        .state()
        .chain(2, "t", "c")
        .map(|c| c.rules.len())
        .expect("chain ip t c");
    assert!(
        held >= 3,
        "the chain holds the rules before the new one: {held}"
    );
    let feed = |b: &mut GenerationBuilder| -> Vec<Change> {
        datagrams
            .iter()
            .flat_map(|d| b.feed(d).transactions)
            .flat_map(|t| t.changes)
            .collect()
    };
    let mut room = replay_until(NFT_OPS_HEX, cmd).with_rule_cap(held + 1);
    let told = feed(&mut room);
    assert_eq!(told.iter().map(|c| c.op).collect::<Vec<_>>(), [Op::RuleAdd]);
    assert!(!room.chain_level() && room.take_chain_level().is_none());
    assert_eq!(room.state().rule_count(), held + 1);

    let mut full = replay_until(NFT_OPS_HEX, cmd).with_rule_cap(held);
    assert!(!full.chain_level());
    let told = feed(&mut full);
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(
        (told[0].op, told[0].chain.as_deref()),
        (Op::ChainUpdate, Some("c"))
    );
    let detail = told[0].detail.as_deref().unwrap_or_default();
    assert!(
        detail.starts_with(&format!("rules changed: {in_c} -> {}", in_c + 1)),
        "{detail}"
    );
    assert!(full.chain_level());
    assert_eq!(full.take_chain_level(), Some(held + 1));
    assert_eq!(full.take_chain_level(), None, "said once");
    assert_eq!((full.state().rule_count(), full.pending()), (0, 0));
    assert!(
        full.state().chain(2, "t", "c").is_some(),
        "the chains are kept"
    );

    let mut over = replay_until(NFT_OPS_HEX, cmd).with_rule_cap(held - 1);
    assert_eq!(
        over.take_chain_level(),
        Some(held),
        "a state already past the cap"
    );
}

/// A ruleset held at chain level, read again (its rules counted): a chain left without rules
/// is told as flushed, although a counting dump lists no chain without rules; the chains whose
/// count did not move are not told.
#[test]
fn a_chain_level_resync_tells_a_chain_left_without_rules_as_flushed() {
    let cmd = "cmd: nft add rule ip t c iifname lo accept";
    let b = replay_until(NFT_OPS_HEX, cmd);
    let st = b.state().clone();
    let in_c = st
        .chain(2, "t", "c")
        .map(|c| c.rules.len())
        .expect("chain ip t c");
    let mut counts = std::collections::HashMap::new();
    for ((family, table), t) in &st.tables {
        for (name, c) in &t.chains {
            let flushed = table == "t" && name == "c";
            if !flushed && !c.rules.is_empty() {
                counts.insert((*family, table.clone(), name.clone()), c.rules.len());
            }
        }
    }
    let dump = Dump {
        gen_id: st.gen_id + 1,
        tables: st.tables.values().map(|t| t.table.clone()).collect(),
        chains: st
            .tables
            .values()
            .flat_map(|t| t.chains.values().map(|c| (*c.chain).clone()))
            .collect(),
        sets: st
            .tables
            .values()
            .flat_map(|t| t.sets.values().map(|s| s.set.clone()))
            .filter(|s| !s.is_anonymous())
            .collect(),
        rule_counts: Some(counts),
        ..Dump::default()
    };
    let mut b = b.with_rule_cap(st.rule_count() - 1);
    assert!(b.take_chain_level().is_some());
    let t = b.resync(dump);
    let told: Vec<(Op, Option<&str>)> = t
        .changes
        .iter()
        .map(|c| (c.op, c.chain.as_deref()))
        .collect();
    assert_eq!(told, [(Op::ChainFlush, Some("c"))], "{:?}", t.changes);
    let detail = t.changes[0].detail.as_deref().unwrap_or_default();
    assert!(
        detail.starts_with(&format!("{in_c} rules flushed")),
        "{detail}"
    );
}

/// The datagrams of the fixture `text` under the comment `cmd`.
fn datagrams_of(text: &str, cmd: &str) -> Vec<Vec<u8>> {
    parse_fixture(text)
        .into_iter()
        .filter(|(c, _)| c == cmd)
        .map(|(_, d)| d)
        .collect()
}

/// A builder fed with everything before the first datagram with the given comment.
fn replay_until(text: &str, stop: &str) -> GenerationBuilder {
    let mut dump_msgs = Vec::new();
    let mut gen_id = 0;
    let mut rest = Vec::new();
    for (comment, bytes) in parse_fixture(text) {
        if comment == stop {
            break;
        }
        if let Some(g) = comment.strip_prefix("dump gen ") {
            gen_id = g.parse().expect("gen");
            dump_msgs.extend(decode(&bytes));
        } else {
            rest.push(bytes);
        }
    }
    let mut b = GenerationBuilder::new(NftState::from_dump(&Dump::from_notifications(
        gen_id, dump_msgs,
    )));
    for d in rest {
        b.feed(&d);
    }
    b
}

#[test]
fn incremental_state_matches_the_final_dump() {
    // Traffic went through the iptables rules before the final dump: their dumped counters are
    // not zero, unlike in the notifications the incremental state was built from.
    let r = replay(IPTABLES_OPS_HEX);
    let counted = r.final_dump.rules.iter().any(|rule| {
        rule.exprs.iter().any(|e| {
            let a = super::netlink::expr::Attrs::of(e);
            e.name == "counter" && a.u64(2).unwrap_or(0) > 0 // NFTA_COUNTER_PACKETS
        })
    });
    assert!(counted, "the final dump should hold non-zero counters");
    for text in [NFT_OPS_HEX, IPTABLES_OPS_HEX] {
        let r = replay(text);
        let fresh = NftState::from_dump(&r.final_dump);
        assert_eq!(r.builder.state().gen_id, fresh.gen_id);
        assert_eq!(projection(r.builder.state()), projection(&fresh));
    }
}

/// Rules whose rendering differs from nft's on purpose (or is not modelled): nft's text after
/// counter stripping, and ours.
const RENDER_EXCEPTIONS: &[(&str, &str)] = &[
    // iptables' -m comment: nft prints an empty translation; we keep the text.
    (
        "meta mark & 0x00008000 == 0x00008000  counter drop",
        "meta mark & 0x00008000 == 0x00008000 counter drop comment \"kubernetes firewall for dropping marked packets\"",
    ),
    (
        "counter jump KUBE-MARK-MASQ",
        "counter jump KUBE-MARK-MASQ comment \"hello world\"",
    ),
    // ip6tables NAT targets: nft 1.0.6 prints an empty translation.
    ("counter", "counter masquerade"),
    (
        "meta l4proto tcp counter",
        "meta l4proto tcp counter dnat to [2001:db8::1]:80",
    ),
    // Not modelled: -m policy, -m time.
    ("meta secpath exists counter accept", "xt match policy counter accept"),
    (
        "meta hour \"10:00:00\"-\"23:59:59\" counter accept",
        "xt match time counter accept",
    ),
];

#[test]
fn rules_render_as_nft_lists_them() {
    let msgs = parse_bin(CORPUS_BIN)
        .iter()
        .flat_map(|d| decode(d))
        .collect::<Vec<_>>();
    let st = NftState::from_dump(&Dump::from_notifications(1, msgs));
    let (mut equal, mut excepted) = (0, 0);
    let mut wrong = Vec::new();
    for ((fam, table, chain, handle), want) in nft_rules(CORPUS_NFT) {
        let got = st
            .chain(nfproto(&fam), &table, &chain)
            .and_then(|c| c.rules.iter().find(|r| r.handle == handle))
            .map(|r| r.text.to_string())
            .unwrap_or_else(|| "<missing>".into());
        let want = strip_counters(&want);
        if got == want {
            equal += 1;
        } else if RENDER_EXCEPTIONS.contains(&(want.as_str(), got.as_str())) {
            excepted += 1;
        } else {
            wrong.push(format!(
                "{fam} {table} {chain} #{handle}\n  nft: {want}\n  got: {got}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(excepted, RENDER_EXCEPTIONS.len());
    assert!(equal >= 140, "only {equal} rules compared");
}

#[test]
fn sets_in_rules_and_element_lists_render() {
    let msgs = parse_bin(CORPUS_BIN)
        .iter()
        .flat_map(|d| decode(d))
        .collect::<Vec<_>>();
    let st = NftState::from_dump(&Dump::from_notifications(1, msgs));
    let t = st.table(1, "g").expect("table inet g");
    let list = |name: &str| {
        let s = &t.sets[name];
        let elems: Vec<&decode::Element> = s.elements.values().collect();
        render::elements_text(&s.set, &elems, &[], 32)
    };
    assert_eq!(list("ports"), "{ 1000-2000, 3000, 4000-4001 }");
    assert_eq!(
        list("nets"),
        "{ 10.0.0.0/8, 172.16.0.1, 192.168.1.10-192.168.1.20 }"
    );
    // Strings sort as host-order numbers, from their last byte (as nft lists this set).
    assert_eq!(list("ifs"), "{ \"wg0\", \"eth0\" }");
    assert_eq!(list("marks"), "{ 0x00000001, 0x00000020 }");
    assert_eq!(list("pr"), "{ tcp, udp }");
    assert_eq!(list("cc"), "{ 1.2.3.4 . 80, 5.6.7.8 . 443 }");
    assert_eq!(
        state::describe_set(&t.sets["cc"].set),
        "type ipv4_addr . inet_service"
    );
    let s = &t.sets["nets"];
    let elems: Vec<&decode::Element> = s.elements.values().collect();
    assert_eq!(
        render::elements_text(&s.set, &elems, &[], 2),
        "{ 10.0.0.0/8, 172.16.0.1, … (1 more) }"
    );
}

#[test]
fn counters_do_not_change_fingerprints_but_rules_do() {
    // The same iptables rule in the corpus and in the ops fixture (different counters and
    // handles) has the same fingerprint; different rules differ.
    let r = replay(IPTABLES_OPS_HEX);
    let st = r.builder.state();
    let input = &st.chain(2, "filter", "INPUT").expect("INPUT").rules[0];
    let kfw = &st
        .chain(2, "filter", "KUBE-FIREWALL")
        .expect("KUBE-FIREWALL")
        .rules[0];
    assert_eq!(&*input.text, "counter jump KUBE-FIREWALL");
    assert_ne!(input.fingerprint, kfw.fingerprint);
    let msgs = parse_bin(CORPUS_BIN)
        .iter()
        .flat_map(|d| decode(d))
        .collect::<Vec<_>>();
    let corpus = NftState::from_dump(&Dump::from_notifications(1, msgs));
    let same = &corpus
        .chain(2, "filter", "INPUT")
        .expect("corpus INPUT")
        .rules[0];
    assert_eq!(same.text, input.text);
    assert_eq!(same.fingerprint, input.fingerprint);
}

fn all_datagrams() -> Vec<Vec<u8>> {
    let hex = parse_fixture(NFT_OPS_HEX)
        .into_iter()
        .chain(parse_fixture(IPTABLES_OPS_HEX));
    hex.map(|(_, d)| d).collect()
}

#[test]
fn truncated_and_mutated_datagrams_never_panic() {
    let datagrams = all_datagrams();
    let mut builder = GenerationBuilder::new(NftState::default());
    let mut rendered = 0usize;
    for d in datagrams.iter().filter(|d| d.len() > 44).take(40) {
        for cut in 0..d.len() {
            let fed = builder.feed(&d[..cut]);
            rendered += fed.transactions.len();
        }
        for i in 0..d.len() {
            for v in [0x00, 0xff, d[i] ^ 0x80, d[i].wrapping_add(1)] {
                let mut m = d.clone();
                m[i] = v;
                for n in decode(&m) {
                    if let Notification::Rule(_, r) = &n {
                        rendered += render::rule(r, &render::NoSets).len();
                    }
                    let _ = builder.push(n);
                }
            }
        }
    }
    assert!(rendered > 0);
    // The corpus rules, every byte of every attribute mutated: rendering copes.
    let corpus = parse_bin(CORPUS_BIN);
    for d in corpus.iter().take(3) {
        for i in 0..d.len() {
            let mut m = d.clone();
            m[i] ^= 0x5a;
            for n in decode(&m) {
                if let Notification::Rule(_, r) = n {
                    let _ = render::rule(&r, &render::NoSets);
                }
            }
        }
    }
}

#[test]
fn malformed_messages_are_skipped_with_a_reason() {
    let d = &all_datagrams()[0];
    // A header cut short.
    let out = decode(&d[..10]);
    assert!(matches!(&out[..], [Notification::Skipped(s)] if s.msg_type.is_none()));
    // A bad attribute length inside an otherwise valid message.
    let mut bad = d.clone();
    bad[20] = 0xff; // first attribute's length (after nlmsghdr + nfgenmsg)
    bad[21] = 0x00;
    let out = decode(&bad);
    assert!(matches!(&out[0], Notification::Skipped(s) if s.reason.contains("length")));
    // An nf_tables message type this build does not track (NFT_MSG_NEWOBJ = 18).
    let mut obj = d.clone();
    obj[4] = 18;
    let out = decode(&obj);
    assert!(matches!(&out[0], Notification::Skipped(s) if s.msg_type == Some(0x0a12)));
    // The builder counts skips and keeps going.
    let mut b = GenerationBuilder::new(NftState::default());
    let fed = b.feed(&obj);
    assert_eq!(fed.skipped.len(), 1);
    assert_eq!(b.skipped(), 1);
}

#[test]
fn deletes_of_unknown_objects_invent_nothing() {
    // A builder whose state missed everything (as after a drift) sees `nft delete table`.
    let cmd = "cmd: nft delete table ip t";
    let mut b = GenerationBuilder::new(NftState {
        gen_id: 24,
        ..NftState::default()
    });
    let mut lines = Vec::new();
    for (c, d) in parse_fixture(NFT_OPS_HEX) {
        if c == cmd {
            for t in b.feed(&d).transactions {
                lines.extend(t.changes.iter().map(line));
            }
        }
    }
    assert!(b.state().tables.is_empty(), "{:?}", b.state().tables.keys());
    // The deletes are still reported, from what the messages say.
    assert_eq!(
        lines,
        [
            "set_delete ip t blocked",
            "chain_delete ip t c",
            "chain_delete ip t renamed",
            "table_delete ip t",
        ]
    );
}

/// `meta mark` compared under `mask` with `data`: the expressions nft sends for
/// `meta mark and MASK == DATA`.
fn masked_mark_rule(mask: &[u8], data: &[u8]) -> decode::Rule {
    use crate::netlink::push_attr;
    let be = |v: u32| v.to_be_bytes();
    let value = |bytes: &[u8]| {
        let mut nested = Vec::new();
        push_attr(&mut nested, 1, bytes); // NFTA_DATA_VALUE
        nested
    };
    let mut meta = Vec::new();
    push_attr(&mut meta, 1, &be(1)); // NFTA_META_DREG
    push_attr(&mut meta, 2, &be(3)); // NFTA_META_KEY: NFT_META_MARK
    let mut bitwise = Vec::new();
    push_attr(&mut bitwise, 1, &be(1)); // NFTA_BITWISE_SREG
    push_attr(&mut bitwise, 2, &be(1)); // NFTA_BITWISE_DREG
    push_attr(&mut bitwise, 3, &be(mask.len() as u32)); // NFTA_BITWISE_LEN
    push_attr(&mut bitwise, 4 | 0x8000, &value(mask)); // NFTA_BITWISE_MASK
    push_attr(&mut bitwise, 5 | 0x8000, &value(&vec![0; mask.len()])); // NFTA_BITWISE_XOR
    let mut cmp = Vec::new();
    push_attr(&mut cmp, 1, &be(1)); // NFTA_CMP_SREG
    push_attr(&mut cmp, 2, &be(0)); // NFTA_CMP_OP: NFT_CMP_EQ
    push_attr(&mut cmp, 3 | 0x8000, &value(data)); // NFTA_CMP_DATA
    let expr = |name: &str, data: Vec<u8>| decode::Expr {
        name: name.into(),
        data,
    };
    decode::Rule {
        family: 2,
        table: "t".into(),
        chain: "c".into(),
        handle: 1,
        position: None,
        exprs: vec![
            expr("meta", meta),
            expr("bitwise", bitwise),
            expr("cmp", cmp),
        ],
        comment: None,
        append: true,
    }
}

#[test]
fn a_mark_compare_renders_a_prefix_mask_and_survives_an_empty_one() {
    // The kernel's byte order for the mark is the host's.
    let m16 = 0xffff_0000u32.to_ne_bytes();
    let d = 0x1234_0000u32.to_ne_bytes();
    let text = render::rule(&masked_mark_rule(&m16, &d), &render::NoSets);
    assert_eq!(text, "meta mark 0x12340000/16", "{text}");
    // A malformed rule: an empty mask and data. This once shifted a 64-bit value by 64 (the
    // fuzzer's find); it must render something, without a panic, and claim no prefix.
    let text = render::rule(&masked_mark_rule(&[], &[]), &render::NoSets);
    assert!(!text.contains('/'), "{text}");
}
