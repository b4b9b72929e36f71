//! Loss accounting on plain counters.

use super::*;

fn losses(ring: u64, pending: u64, read: u64, map: u64, malformed: u64) -> Losses {
    Losses {
        kernel: KernelErrors {
            ringbuf_full: ring,
            pending_full: pending,
            read_failed: read,
            map_full: map,
        },
        malformed,
    }
}

const REREAD: &str = "every legacy table is re-read: what changed meanwhile follows as changes \
                      marked `recovered`, of an unknown writer";
const MAYBE_MISSING: &str = "legacy changes around this time may be missing";

#[test]
fn counters_that_did_not_move_say_nothing() {
    assert_eq!(account(&Losses::default(), &Losses::default()), None);
    let l = losses(3, 1, 2, 5, 4);
    assert_eq!(account(&l, &l), None);
}

#[test]
fn a_full_ring_buffer_is_a_kernel_gap_and_every_legacy_table_is_read_again() {
    let r = account(&losses(2, 0, 0, 0, 0), &losses(7, 0, 0, 0, 0)).unwrap();
    assert_eq!(r.gap, Gap::Kernel { records: 5 });
    assert!(r.reread_legacy);
    assert_eq!(
        r.message,
        format!(
            "5 kernel records lost because the ring buffer was full (raise --ringbuf-size); \
             {REREAD}"
        )
    );
}

#[test]
fn replaces_not_tracked_are_read_again_too() {
    let r = account(&Losses::default(), &losses(0, 2, 0, 0, 0)).unwrap();
    assert_eq!(r.gap, Gap::Kernel { records: 2 });
    assert!(r.reread_legacy);
    assert_eq!(
        r.message,
        format!("2 table replaces not tracked because too many were in flight; {REREAD}")
    );
}

#[test]
fn undecodable_records_are_counted_but_read_nothing_again() {
    let r = account(&Losses::default(), &losses(0, 0, 0, 0, 3)).unwrap();
    assert_eq!(r.gap, Gap::Kernel { records: 3 });
    assert!(!r.reread_legacy);
    assert_eq!(
        r.message,
        format!("3 kernel records could not be decoded; {MAYBE_MISSING}")
    );
}

#[test]
fn failed_reads_and_map_updates_are_an_other_gap() {
    let r = account(&Losses::default(), &losses(0, 0, 4, 1, 0)).unwrap();
    assert_eq!(r.gap, Gap::Other);
    assert!(!r.reread_legacy);
    assert_eq!(
        r.message,
        "4 kernel reads failed (a writer's record may be missing or incomplete); 1 kernel map \
         updates failed (a namespace or a refused batch may go unseen); legacy changes around \
         this time may be missing"
    );
}

#[test]
fn every_counter_that_moved_is_said_in_order_and_only_kernel_records_count_as_records() {
    let r = account(&losses(1, 1, 1, 1, 1), &losses(2, 3, 4, 5, 6)).unwrap();
    assert_eq!(r.gap, Gap::Kernel { records: 1 + 2 + 5 });
    assert!(r.reread_legacy);
    let parts: Vec<&str> = r.message.split("; ").collect();
    assert_eq!(parts.len(), 6, "{}", r.message);
    assert!(parts[0].starts_with("1 kernel records lost"));
    assert!(parts[1].starts_with("2 table replaces"));
    assert!(parts[2].starts_with("5 kernel records could not"));
    assert!(parts[3].starts_with("3 kernel reads failed"));
    assert!(parts[4].starts_with("4 kernel map updates"));
    assert!(parts[5].starts_with("every legacy table is re-read"));
}

#[test]
fn counters_that_went_back_still_say_so_without_a_part_of_their_own() {
    // A counter lower than the one reported (not expected of the kernel's sums) is not a loss,
    // but the counters changed: the line is still written, with no part but the tail.
    let r = account(&losses(5, 0, 0, 0, 0), &losses(4, 0, 0, 0, 0)).unwrap();
    assert_eq!(r.gap, Gap::Other);
    assert!(!r.reread_legacy);
    assert_eq!(r.message, format!("; {MAYBE_MISSING}"));
}

#[test]
fn a_reread_diffs_each_table_against_its_old_self_and_the_gone_against_nothing() {
    let old: HashMap<&str, u32> = [("filter", 1), ("nat", 2)].into();
    let read: HashMap<&str, u32> = [("filter", 10), ("mangle", 30)].into();
    let mut pairs = reread_pairs(&old, &read);
    // Tables read first (in map order), then the gone ones.
    let gone = pairs.split_off(2);
    pairs.sort();
    assert_eq!(pairs, [(None, Some(&30)), (Some(&1), Some(&10))]);
    assert_eq!(gone, [(Some(&2), None)]);
    assert!(reread_pairs::<&str, u32>(&HashMap::new(), &HashMap::new()).is_empty());
}

#[test]
fn lost_notifications_say_when_and_what_follows() {
    let at = Timestamp::from_unix_nanos(1_780_000_000_000_000_000);
    assert_eq!(
        notifications_lost(&"No buffer space available (os error 105)", at),
        format!(
            "No buffer space available (os error 105) at {at}; re-reading the namespace: what \
             changed meanwhile follows as changes marked `recovered` (each generation's own \
             grouping and intermediate states are lost)"
        )
    );
}

#[test]
fn recovered_transactions_are_numbered_apart_from_their_generation() {
    assert_eq!(nft_txn(4026531840, 17, None), "nft-4026531840-17");
    assert_eq!(
        nft_txn(4026531840, 17, Some(3)),
        "nft-4026531840-17-recovered-3"
    );
}
