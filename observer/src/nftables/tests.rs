//! Tests on captured notifications (no root needed) and live tests in a throw-away network
//! namespace (root and nft needed; they print `skipping: <reason>` otherwise).
//!
//! Fixtures in `testdata/` were captured with `capture_fixtures` (an ignored test):
//! `OBSERVER_NFT_FIXTURES=$PWD/src/nftables/testdata cargo test -p observer capture_fixtures
//! -- --ignored` as root, on Linux 6.18 with nft 1.0.6 and iptables 1.8.9.

use super::decode::{decode, Notification, Verb};
use super::generation::{GenerationBuilder, Transaction};
use super::scenarios::{Scenario, IPTABLES_OPS, NFT_OPS, PRELUDE, RENDER_CORPUS, TRAFFIC};
use super::socket::Dump;
use super::state::NftState;
use super::testutil::*;
use super::*;
use crate::ruleset::Op;

const NFT_OPS_HEX: &str = include_str!("testdata/nft_ops.hex");
const IPTABLES_OPS_HEX: &str = include_str!("testdata/iptables_ops.hex");
const CORPUS_BIN: &[u8] = include_bytes!("testdata/render_corpus.bin");
const CORPUS_NFT: &str = include_str!("testdata/render_corpus.nft");

const KUBE_FW_COMMENT: &str = "comment \"kubernetes firewall for dropping marked packets\"";

/// The changes each step of `NFT_OPS` must produce.
fn nft_ops_expected() -> Vec<Vec<String>> {
    let v = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        v(&["rule_add ip t c @3: iifname \"lo\" accept"]),
        v(&["rule_add ip t c @0: ip saddr 192.168.0.0/16 drop"]),
        v(&["rule_add ip t c @3: meta mark 0x00000001 drop"]),
        v(&["rule_replace ip t c @4: ct state established accept \
             (was: ct state established,related accept)"]),
        v(&["rule_delete ip t c @5: iifname \"lo\" accept"]),
        v(&["element_add ip t blocked: { 10.0.0.3, 10.0.0.4 } (2 elements)"]),
        v(&["element_delete ip t blocked: { 10.0.0.1 } (1 element)"]),
        v(&["set_flush ip t blocked (3 elements deleted)"]),
        v(&[
            "chain_update ip t c (type filter hook input priority filter; policy drop \
             (was: type filter hook input priority filter; policy accept))",
        ]),
        v(&["chain_update ip t renamed (renamed from other)"]),
        v(&["rule_add ip t renamed @0: counter"]),
        v(&["chain_flush ip t c (5 rules deleted)"]),
        v(&[
            "rule_add ip t c @0: tcp dport 22 accept",
            "rule_add ip t c @1: udp dport 53 accept",
        ]),
        v(&["table_flush ip t (2 chains, 3 rules deleted)"]),
        v(&["rule_add ip t c @0: accept"]),
        v(&[
            "set_delete ip t blocked",
            "chain_delete ip t c (type filter hook input priority filter; policy drop)",
            "chain_delete ip t renamed",
            "table_delete ip t",
        ]),
        v(&[
            "table_create inet web",
            "chain_create inet web input (type filter hook input priority filter; policy drop)",
            "rule_add inet web input @0: tcp dport { 80, 443 } accept",
            "rule_add inet web input @1: ct state established accept",
        ]),
        // Flushing the chain and adding the same rules back (new anonymous sets) is no change.
        v(&[]),
        // So is flushing the whole ruleset and loading it again.
        v(&[]),
    ]
}

/// The changes each step of `IPTABLES_OPS` must produce.
fn iptables_ops_expected() -> Vec<Vec<String>> {
    let marked = format!("meta mark & 0x00008000 == 0x00008000 counter drop {KUBE_FW_COMMENT}");
    let unmarked = format!("counter drop {KUBE_FW_COMMENT}");
    // The old rule of a replace is in its writer's syntax (iptables-nft-save's).
    let xt_comment = "-m comment --comment \"kubernetes firewall for dropping marked packets\"";
    let xt_marked = format!("-m mark --mark 0x8000/0x8000 {xt_comment} -j DROP");
    let xt_unmarked = format!("{xt_comment} -j DROP");
    vec![
        vec![
            "table_create ip filter".into(),
            "chain_create ip filter KUBE-FIREWALL".into(),
        ],
        vec![
            "chain_create ip filter INPUT (type filter hook input priority filter; policy accept)"
                .into(),
            "rule_add ip filter INPUT @0: counter jump KUBE-FIREWALL".into(),
        ],
        vec![format!("rule_add ip filter KUBE-FIREWALL @0: {unmarked}")],
        vec!["rule_add ip filter KUBE-FIREWALL @1: ct state invalid counter drop".into()],
        vec!["rule_add ip filter KUBE-FIREWALL @0: ip saddr 10.0.0.0/8 counter accept".into()],
        // iptables -R: the kernel deletes the old rule and adds the new one with its handle.
        vec![format!(
            "rule_replace ip filter KUBE-FIREWALL @1: {marked} (was: {xt_unmarked})"
        )],
        // iptables-nft-restore --noflush rewriting the chain as it was: no change.
        vec![],
        // ... and dropping `-m mark` from the DROP rule (seeds/003): a replace.
        vec![format!(
            "rule_replace ip filter KUBE-FIREWALL @1: {unmarked} (was: {xt_marked})"
        )],
        vec![
            "chain_update ip filter INPUT (type filter hook input priority filter; policy drop \
              (was: type filter hook input priority filter; policy accept))"
                .into(),
        ],
        vec!["chain_create ip filter OTHER".into()],
        vec!["rule_add ip filter OTHER @0: counter return".into()],
        vec!["chain_flush ip filter KUBE-FIREWALL (3 rules deleted)".into()],
        vec!["rule_add ip filter KUBE-FIREWALL @0: counter accept".into()],
        vec!["table_flush ip filter (3 chains, 3 rules deleted)".into()],
        vec!["chain_delete ip filter OTHER".into()],
        // A full restore deletes and recreates the table; net, two rules were added.
        vec![
            "rule_add ip filter INPUT @0: counter jump KUBE-FIREWALL".into(),
            "rule_add ip filter KUBE-FIREWALL @0: counter drop".into(),
        ],
        // The same restore again: no change.
        vec![],
    ]
}

fn step_lines(txns: &[Transaction]) -> Vec<String> {
    txns.iter()
        .flat_map(|t| t.changes.iter().map(line))
        .collect()
}

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
    let datagrams: Vec<Vec<u8>> = parse_fixture(NFT_OPS_HEX)
        .into_iter()
        .filter(|(c, _)| c == cmd)
        .map(|(_, d)| d)
        .collect();
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
            let a = super::expr::Attrs::of(e);
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
            .map(|r| r.text.clone())
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
    assert_eq!(input.text, "counter jump KUBE-FIREWALL");
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

// ---- live tests: root, nft, a throw-away namespace ----

/// Run a scenario live and return the transactions of each step.
fn run_live(ns: &Netns, sc: &Scenario) -> (Vec<Vec<Transaction>>, GenerationBuilder, Dump) {
    let (sub, req) = ns.sockets().expect("sockets in the namespace");
    for cmd in sc.setup {
        ns.sh(&format!("{PRELUDE}{cmd}"));
    }
    let dump = socket::dump_on(&req).expect("dump");
    let mut b = GenerationBuilder::new(NftState::from_dump(&dump));
    let mut steps = Vec::new();
    // Notifications of the setup are queued: they belong to generations in the dump.
    let queued: usize = drain(&sub)
        .iter()
        .map(|d| b.feed(d).transactions.len())
        .sum();
    assert_eq!(queued, 0);
    for cmd in sc.steps {
        ns.sh(&format!("{PRELUDE}{cmd}"));
        let txns = drain(&sub)
            .iter()
            .flat_map(|d| b.feed(d).transactions)
            .collect();
        steps.push(txns);
    }
    ns.sh(TRAFFIC);
    let after = socket::dump_on(&req).expect("final dump");
    (steps, b, after)
}

#[test]
fn live_namespace_transactions() {
    if let Some(reason) = root_skip_reason() {
        test_support::skip(format_args!("{reason}"));
        return;
    }
    if let Some(reason) = iptables_skip_reason() {
        test_support::skip(format_args!("{reason}"));
        return;
    }
    let host_before = std::process::Command::new("nft")
        .args(["list", "ruleset"])
        .output()
        .map(|o| o.stdout);
    for (sc, expected, comm) in [
        (&IPTABLES_OPS, iptables_ops_expected(), "iptables-nft"),
        (&NFT_OPS, nft_ops_expected(), "nft"),
    ] {
        let ns = Netns::new("live");
        let (steps, builder, after) = run_live(&ns, sc);
        for ((cmd, txns), want) in sc.steps.iter().zip(&steps).zip(&expected) {
            assert_eq!(txns.len(), 1, "`{cmd}`");
            assert_eq!(&step_lines(txns), want, "`{cmd}`");
            assert!(txns[0].pid > 0);
        }
        assert_eq!(steps[0][0].comm, comm);
        assert_eq!(
            projection(builder.state()),
            projection(&NftState::from_dump(&after))
        );
    }
    let host_after = std::process::Command::new("nft")
        .args(["list", "ruleset"])
        .output()
        .map(|o| o.stdout);
    assert_eq!(
        host_before.ok(),
        host_after.ok(),
        "the host ruleset must not change"
    );
}

/// `nft -f` a file starting with `flush ruleset`; the changes of its one generation.
fn reload(
    ns: &Netns,
    sub: &netlink_sys::Socket,
    b: &mut GenerationBuilder,
    text: &str,
) -> Vec<String> {
    let path = std::env::temp_dir().join(format!("obs-nft-reload-{}.nft", std::process::id()));
    std::fs::write(&path, format!("flush ruleset\n{text}")).expect("write");
    ns.sh(&format!("nft -f {}", path.display()));
    let _ = std::fs::remove_file(&path);
    let txns: Vec<Transaction> = drain(sub)
        .iter()
        .flat_map(|d| b.feed(d).transactions)
        .collect();
    assert_eq!(txns.len(), 1, "one generation per nft -f");
    step_lines(&txns)
}

#[test]
fn live_flush_ruleset_and_reload_is_no_change() {
    if let Some(reason) = root_skip_reason() {
        test_support::skip(format_args!("{reason}"));
        return;
    }
    let ns = Netns::new("reload");
    let (sub, req) = ns.sockets().expect("sockets");
    let mut b = GenerationBuilder::new(NftState::from_dump(&socket::dump_on(&req).expect("dump")));
    let corpus = include_str!("testdata/corpus.nft");
    let first = reload(&ns, &sub, &mut b, corpus);
    assert!(first.iter().any(|l| l.starts_with("table_create inet g")));
    assert!(first
        .iter()
        .any(|l| l.starts_with("set_create inet g nets")));
    let fresh = NftState::from_dump(&socket::dump_on(&req).expect("dump"));
    assert_eq!(projection(b.state()), projection(&fresh));
    // Everything deleted and recreated as it was: no change at all.
    assert_eq!(reload(&ns, &sub, &mut b, corpus), Vec::<String>::new());
    // One rule edited.
    let edited = corpus.replace("ip ttl 64 accept", "ip ttl 65 accept");
    assert_eq!(
        reload(&ns, &sub, &mut b, &edited),
        ["rule_replace inet g c @4: ip ttl 65 accept (was: ip ttl 64 accept)"]
    );
    let fresh = NftState::from_dump(&socket::dump_on(&req).expect("dump"));
    assert_eq!(projection(b.state()), projection(&fresh));
}

#[test]
fn live_overrun_is_reported() {
    if let Some(reason) = root_skip_reason() {
        test_support::skip(format_args!("{reason}"));
        return;
    }
    let ns = Netns::new("overrun");
    let (sub, req) = ns.sockets().expect("sockets");
    // Shrink the buffer far below what 3000 rule notifications need.
    shrink_rcvbuf(&sub, 4096);
    let mut script = String::from("add table ip big\nadd chain ip big c\n");
    for i in 0..3000 {
        script.push_str(&format!("add rule ip big c tcp dport {} accept\n", i + 1));
    }
    let path = std::env::temp_dir().join(format!("obs-nft-big-{}.nft", std::process::id()));
    std::fs::write(&path, script).expect("write script");
    ns.sh(&format!("nft -f {}", path.display()));
    let _ = std::fs::remove_file(&path);
    let mut buf = vec![0u8; socket::RECV_BUF_BYTES];
    let mut seen = None;
    for _ in 0..10_000 {
        match socket::recv(&sub, &mut buf) {
            Ok(Some(_)) => continue,
            Ok(None) => break,
            Err(e) => {
                seen = Some(e);
                break;
            }
        }
    }
    let e = seen.expect("ENOBUFS reported");
    assert!(matches!(e, NftError::Overrun), "{e}");
    assert!(e.needs_resync());
    // The remedy: dump again.
    let dump = socket::dump_on(&req).expect("re-dump");
    let st = NftState::from_dump(&dump);
    assert_eq!(st.chain(2, "big", "c").map(|c| c.rules.len()), Some(3000));
}

/// Catching up from a dump after lost notifications gives the changes the notifications would
/// have given.
#[test]
fn live_resync_reports_what_notifications_reported() {
    if let Some(reason) = root_skip_reason() {
        test_support::skip(format_args!("{reason}"));
        return;
    }
    let ns = Netns::new("resync");
    let (sub, req) = ns.sockets().expect("sockets");
    for cmd in NFT_OPS.setup {
        ns.sh(&format!("{PRELUDE}{cmd}"));
    }
    let dump = socket::dump_on(&req).expect("dump");
    let mut live = GenerationBuilder::new(NftState::from_dump(&dump));
    let mut caught_up = GenerationBuilder::new(NftState::from_dump(&dump));
    drain(&sub);
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let mut compared = 0;
    for cmd in NFT_OPS.steps {
        ns.sh(&format!("{PRELUDE}{cmd}"));
        let txns: Vec<Transaction> = drain(&sub)
            .iter()
            .flat_map(|d| live.feed(d).transactions)
            .collect();
        let dump = socket::dump_on(&req).expect("dump");
        let t = caught_up.resync(&dump);
        assert_eq!(t.gen_id, dump.gen_id);
        assert_eq!(
            projection(caught_up.state()),
            projection(&NftState::from_dump(&dump))
        );
        assert_eq!(
            sorted(step_lines(&[t])),
            sorted(step_lines(&txns)),
            "`{cmd}`"
        );
        compared += 1;
    }
    assert_eq!(compared, NFT_OPS.steps.len());
    // Nothing changed since the last dump: nothing to report.
    let dump = socket::dump_on(&req).expect("dump");
    assert!(caught_up.resync(&dump).changes.is_empty());
}

#[test]
#[ignore]
fn capture_fixtures() {
    if let Some(r) = root_skip_reason() {
        test_support::skip(format_args!("{r}"));
        return;
    }
    let dir = std::env::var("OBSERVER_NFT_FIXTURES").expect("OBSERVER_NFT_FIXTURES=dir");
    for sc in [NFT_OPS, IPTABLES_OPS, RENDER_CORPUS] {
        let ns = Netns::new("cap");
        let (sub, req) = ns.sockets().expect("sockets");
        let mut out = String::new();
        for cmd in sc.setup {
            ns.sh(&format!("FIXTURES={dir}; {PRELUDE}{cmd}"));
            out.push_str(&format!("# setup: {cmd}\n"));
            for d in drain(&sub) {
                out.push_str(&to_hex(&d));
                out.push('\n');
            }
        }
        if sc.steps.is_empty() {
            let listing = ns.sh("nft -a list ruleset");
            std::fs::write(format!("{dir}/{}.nft", sc.name), listing).expect("write");
            // Binary: each datagram as a little-endian u32 length and its bytes.
            let (_, raw) = socket::dump_raw(&req).expect("dump");
            let mut bin = Vec::new();
            for d in raw {
                bin.extend_from_slice(&(d.len() as u32).to_le_bytes());
                bin.extend_from_slice(&d);
            }
            std::fs::write(format!("{dir}/{}.bin", sc.name), bin).expect("write");
            continue;
        }
        let (dump, raw) = socket::dump_raw(&req).expect("dump");
        out.push_str(&format!("# dump gen {}\n", dump.gen_id));
        for d in raw {
            out.push_str(&to_hex(&d));
            out.push('\n');
        }
        for cmd in sc.steps {
            ns.sh(&format!("{PRELUDE}{cmd}"));
            out.push_str(&format!("# cmd: {cmd}\n"));
            for d in drain(&sub) {
                out.push_str(&to_hex(&d));
                out.push('\n');
            }
        }
        ns.sh(TRAFFIC);
        let (dump, raw) = socket::dump_raw(&req).expect("dump");
        out.push_str(&format!("# final dump gen {}\n", dump.gen_id));
        for d in raw {
            out.push_str(&to_hex(&d));
            out.push('\n');
        }
        std::fs::write(format!("{dir}/{}.hex", sc.name), out).expect("write");
    }
}

/// Manual check (release build): a 20,000-rule restore, then the same restore again, then one
/// chain of 20,000 rules flushed.
#[test]
#[ignore]
fn perf_big_restore() {
    if let Some(reason) = root_skip_reason() {
        test_support::skip(format_args!("{reason}"));
        return;
    }
    let ns = Netns::new("perf");
    let (sub, req) = ns.sockets().expect("sockets");
    let mut b = GenerationBuilder::new(NftState::from_dump(&socket::dump_on(&req).expect("dump")));
    let mut restore = String::from("*filter\n");
    for c in 0..2000 {
        restore.push_str(&format!(":KUBE-SVC-{c} - [0:0]\n"));
    }
    for c in 0..2000 {
        for r in 0..10 {
            restore.push_str(&format!(
                "-A KUBE-SVC-{c} -s 10.{}.{}.0/24 -p tcp --dport {} -m comment --comment \"svc {c}\" -j ACCEPT\n",
                c / 250, c % 250, 1000 + r
            ));
        }
    }
    restore.push_str("COMMIT\n");
    let mut one = String::from("*filter\n:BIG - [0:0]\n");
    for r in 0..20000 {
        one.push_str(&format!("-A BIG -s 10.0.{}.{} -j DROP\n", r / 250, r % 250));
    }
    one.push_str("COMMIT\n");
    let dir = std::env::temp_dir();
    let p1 = dir.join(format!("obs-perf1-{}", std::process::id()));
    let p2 = dir.join(format!("obs-perf2-{}", std::process::id()));
    std::fs::write(&p1, restore).expect("write");
    std::fs::write(&p2, one).expect("write");
    let mut buf = vec![0u8; socket::RECV_BUF_BYTES];
    for (what, cmd) in [
        (
            "restore 20k rules",
            format!("iptables-nft-restore < {}", p1.display()),
        ),
        (
            "same restore again",
            format!("iptables-nft-restore < {}", p1.display()),
        ),
        (
            "one chain of 20k",
            format!("iptables-nft-restore --noflush < {}", p2.display()),
        ),
        ("flush that chain", "iptables-nft -F BIG".to_string()),
    ] {
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", &ns.name, "sh", "-c", &cmd])
            .spawn()
            .expect("spawn");
        let start = std::time::Instant::now();
        let mut busy = std::time::Duration::ZERO;
        let mut changes = 0;
        let mut child = child;
        let mut idle = 0;
        loop {
            match socket::recv(&sub, &mut buf).expect("recv") {
                Some(n) => {
                    let t = std::time::Instant::now();
                    for txn in b.feed(&buf[..n]).transactions {
                        changes += txn.changes.len();
                    }
                    busy += t.elapsed();
                    idle = 0;
                }
                None => {
                    if child.try_wait().expect("wait").is_some() {
                        idle += 1;
                        if idle > 5 {
                            break;
                        }
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
        }
        println!(
            "{what}: {changes} changes, builder busy {busy:?}, wall {:?}",
            start.elapsed()
        );
    }
    let _ = std::fs::remove_file(p1);
    let _ = std::fs::remove_file(p2);
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
