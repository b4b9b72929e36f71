//! nf_tables rule expressions → `nft list ruleset` text: the expressions of a rule decoded by
//! `nftables::decode::decode`, rendered by `nftables::render::rule` against the sets of a table
//! of the rendering corpus (or none), and again through `NftState::from_dump`, which also
//! fingerprints them: both renderings must agree. Input format: see `observer_fuzz`.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use observer_rules::nftables::decode::{self, Notification, Table};
use observer_rules::nftables::render;
use observer_rules::nftables::state::{NftState, TableState};
use observer_rules::nftables::Dump;

/// Every table of the rendering corpus (with their sets), after an empty one.
fn tables() -> &'static [TableState] {
    static TABLES: OnceLock<Vec<TableState>> = OnceLock::new();
    TABLES.get_or_init(|| {
        let corpus = include_bytes!("../../observer-rules/src/nftables/testdata/render_corpus.bin");
        let msgs = observer_fuzz::records(corpus)
            .into_iter()
            .flat_map(decode::decode)
            .collect::<Vec<_>>();
        let mut st = NftState::from_dump(&Dump::from_notifications(1, msgs));
        let empty = Dump {
            tables: vec![Table {
                family: 2,
                name: "t".into(),
                flags: 0,
                handle: None,
            }],
            ..Dump::default()
        };
        let mut out: Vec<TableState> = NftState::from_dump(&empty).tables.into_values().collect();
        for t in st.tables.values_mut() {
            // The rules are not needed, only the sets.
            t.chains.clear();
        }
        out.extend(st.tables.into_values());
        out
    })
}

fuzz_target!(|data: &[u8]| {
    let [family, pick, exprs @ ..] = data else {
        return;
    };
    let tables = tables();
    let t = &tables[usize::from(*pick) % tables.len()];
    let msg = observer_fuzz::rule_message(*family, &t.table.name, exprs);
    let Some(Notification::Rule(_, rule)) = decode::decode(&msg).pop() else {
        return;
    };
    let text = render::rule(&rule, t);
    // The same rule in a dump of that table (in the rule's family).
    let dump = Dump {
        gen_id: 1,
        tables: vec![Table {
            family: rule.family,
            ..t.table.clone()
        }],
        sets: t
            .sets
            .values()
            .map(|s| decode::Set {
                family: rule.family,
                ..s.set.clone()
            })
            .collect(),
        elements: t
            .sets
            .values()
            .map(|s| decode::SetElems {
                family: rule.family,
                table: t.table.name.clone(),
                set: s.set.name.clone(),
                elements: s.elements.values().cloned().collect(),
            })
            .collect(),
        rules: vec![rule.clone()],
        ..Dump::default()
    };
    let st = NftState::from_dump(&dump);
    let kept = st
        .chain(rule.family, &rule.table, &rule.chain)
        .and_then(|c| c.rules.first())
        .expect("the dump's rule is in its chain");
    assert_eq!(
        &*kept.text,
        text.as_str(),
        "rendered alone and through the state"
    );
});
