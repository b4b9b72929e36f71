//! nfnetlink datagrams → nf_tables objects → transactions: `nftables::decode::decode`,
//! `GenerationBuilder::feed` on top of a state made from a dump (`NftState::from_dump`, which
//! renders and fingerprints every rule), then `GenerationBuilder::resync` to a dump of
//! everything decoded. Input format: see `observer_fuzz` (a dump, then notification datagrams).
#![no_main]

use libfuzzer_sys::fuzz_target;
use observer_rules::nftables::decode::{self, Notification};
use observer_rules::nftables::generation::GenerationBuilder;
use observer_rules::nftables::state::{self, NftState};
use observer_rules::nftables::Dump;

fuzz_target!(|data: &[u8]| {
    let Some((gen, rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let records = observer_fuzz::records(rest);
    let Some((dump_bytes, datagrams)) = records.split_first() else {
        return;
    };
    let dump = Dump::from_notifications(u32::from_le_bytes(*gen), decode::decode(dump_bytes));
    let mut builder = GenerationBuilder::new(NftState::from_dump(&dump));
    let mut seen = Vec::new();
    for d in datagrams {
        std::hint::black_box(builder.feed(d));
        seen.extend(decode::decode(d));
    }
    for t in builder.state().tables.values() {
        for c in t.chains.values() {
            let _ = state::describe_chain(&c.chain);
        }
        for s in t.sets.values() {
            let _ = state::describe_set(&s.set);
        }
    }
    // Catch up with a dump of everything the notifications created (as after lost
    // notifications), from the state they left.
    let created = seen.into_iter().filter(|n| {
        matches!(
            n,
            Notification::Table(..)
                | Notification::Chain(..)
                | Notification::Set(..)
                | Notification::Elements(..)
                | Notification::Rule(..)
        )
    });
    let later = Dump::from_notifications(dump.gen_id.wrapping_add(1), created);
    let gen_id = later.gen_id;
    let t = builder.resync(later);
    assert_eq!(t.gen_id, gen_id);
});
