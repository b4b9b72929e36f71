//! x_tables blobs → chains and rules → `iptables-save` text: `GET_INFO` and the
//! `ipt_entry`/`ip6t_entry`/`arpt_entry` entries decoded by the reader's decoder (through
//! `observer_rules::fuzzing::xt_table`, with the entries' size as given and as a kernel would give
//! it), every rule rendered, and the table diffed against nothing and against itself, which
//! must give no change; the same bytes decoded as a writer's replace struct
//! (`xtables::decode_replace`) go through the same checks. (ebtables blobs are not decoded by
//! observer: nothing to fuzz there.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use observer_rules::xtables;

fuzz_target!(|data: &[u8]| {
    let Some((selector, bytes)) = data.split_first() else {
        return;
    };
    let proto = observer_fuzz::xt_proto(*selector);
    for fix_size in [false, true] {
        if let Ok(t) = observer_rules::fuzzing::xt_table(proto, bytes, fix_size) {
            check(&t);
        }
    }
    // The same bytes as a writer's replace struct (`ipt_replace` and its entries).
    if let Ok(t) = xtables::decode_replace(proto, bytes.to_vec(), None) {
        check(&t);
    }
});

/// Every rule renders, and the table diffs against nothing and against itself (no change).
fn check(t: &xtables::XtTable) {
    let mut rules = 0;
    for c in &t.chains {
        for r in &c.rules {
            std::hint::black_box(t.rule_text(r));
        }
        rules += c.rules.len();
        assert!(t.jump_targets(c).len() <= c.rules.len());
    }
    assert_eq!(t.rule_count(), rules);
    std::hint::black_box(t.set_indices());
    std::hint::black_box(xtables::diff(None, Some(t)));
    std::hint::black_box(xtables::diff(Some(t), None));
    let same = xtables::diff(Some(t), Some(t));
    assert!(same.is_empty(), "a table differs from itself: {same:?}");
}
