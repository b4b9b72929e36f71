//! The namespace life cycle on plain data.

use super::*;
use crate::attribution::KernelAncestor;

const NS: u32 = 4026532177;

#[test]
fn a_record_without_a_namespace_looks_for_nothing() {
    for event in [
        NsEvent::Reported { created: true },
        NsEvent::Reported { created: false },
        NsEvent::Written,
    ] {
        assert_eq!(look(0, false, event), Look::Nothing, "{event:?}");
        assert_eq!(look(0, true, event), Look::Nothing, "{event:?}");
    }
}

#[test]
fn a_watched_namespace_is_not_looked_for_again() {
    for event in [
        NsEvent::Reported { created: true },
        NsEvent::Reported { created: false },
        NsEvent::Written,
    ] {
        assert_eq!(look(NS, true, event), Look::Watched, "{event:?}");
    }
}

#[test]
fn a_namespace_just_made_is_looked_for_again_an_entered_one_once_quietly_a_written_one_loudly() {
    assert_eq!(
        look(NS, false, NsEvent::Reported { created: true }),
        Look::FindWithRetries
    );
    assert_eq!(
        look(NS, false, NsEvent::Reported { created: false }),
        Look::Find { warn: false }
    );
    assert_eq!(look(NS, false, NsEvent::Written), Look::Find { warn: true });
    // About 100 ms of looks in all, the first at once after a millisecond.
    assert_eq!(CREATED_RETRIES_MS, [1, 2, 5, 10, 20, 60]);
    assert_eq!(CREATED_RETRIES_MS.iter().sum::<u64>(), 98);
}

#[test]
fn a_namespace_is_looked_for_among_the_writer_then_its_ancestors() {
    let p = KernelProcess {
        tgid: 300,
        tid: 301,
        uid: 0,
        comm: "unshare".into(),
        ancestors: vec![
            KernelAncestor {
                tgid: 200,
                comm: "sh".into(),
            },
            KernelAncestor {
                tgid: 1,
                comm: "systemd".into(),
            },
        ],
        netns: NS,
        cgroup_id: 0,
        top_reached: true,
    };
    assert_eq!(holders(&p), [300, 200, 1]);
    assert_eq!(
        holders(&KernelProcess {
            ancestors: vec![],
            ..p
        }),
        [300]
    );
}

#[test]
fn a_namespace_not_found_is_reported_again_unless_it_was_watched_meanwhile() {
    assert!(report_again(false));
    assert!(!report_again(true));
}

#[test]
fn only_a_namespace_there_at_start_has_a_legacy_baseline() {
    assert_eq!(
        first_read(false, false),
        Some(FirstRead {
            legacy_baseline: true
        })
    );
    assert_eq!(
        first_read(false, true),
        Some(FirstRead {
            legacy_baseline: false
        })
    );
    assert_eq!(first_read(true, false), None);
    assert_eq!(first_read(true, true), None);
}

#[test]
fn what_a_new_namespace_already_holds_is_reported_when_it_holds_tables() {
    assert!(report_established(true, true));
    assert!(!report_established(true, false));
    assert!(!report_established(false, true));
    assert!(!report_established(false, false));
}

#[test]
fn unmounts_of_namespace_files_let_namespaces_go() {
    assert_eq!(
        umount_lets_go("", false).as_deref(),
        Some("a namespace file unmounted")
    );
    assert_eq!(
        umount_lets_go("/srv/ns/blue", true).as_deref(),
        Some("/srv/ns/blue unmounted")
    );
    assert_eq!(
        umount_lets_go("/run/netns/blue", false).as_deref(),
        Some("/run/netns/blue unmounted")
    );
    assert_eq!(
        umount_lets_go("/var/run/netns/cni-1234", false).as_deref(),
        Some("/var/run/netns/cni-1234 unmounted")
    );
    assert_eq!(umount_lets_go("/mnt/usb", false), None);
    assert_eq!(umount_lets_go("/run/netnsx/blue", false), None);
}

#[test]
fn namespaces_no_mount_holds_are_candidates_but_observer_s_own_never() {
    let mounted: HashSet<u32> = [2, 4].into();
    assert_eq!(unmounted([1, 2, 3, 4, 5], &mounted, Some(5)), [1, 3]);
    assert_eq!(
        unmounted([3, 1], &mounted, None),
        [3, 1],
        "in watched order"
    );
    assert!(unmounted([2, 4], &mounted, Some(1)).is_empty());
}

#[test]
fn candidates_no_process_holds_are_let_go_and_proc_is_read_only_for_candidates() {
    let gone_now = gone(vec![1, 3, 7], || [3].into());
    assert_eq!(gone_now, [1, 7]);
    assert!(gone(vec![1], || [1].into()).is_empty());
    let read = std::cell::Cell::new(false);
    assert!(gone(Vec::new(), || {
        read.set(true);
        HashSet::new()
    })
    .is_empty());
    assert!(!read.get(), "no candidate: /proc is not read");
}

#[test]
fn a_sweep_is_due_after_activity_and_again_only_while_processes_alone_hold_a_namespace() {
    let t = |s: u64| Duration::from_secs(s);
    let mut sweep = Sweep::new(t(0));
    assert_eq!(sweep.at, Some(t(10)));
    // Activity while a sweep is due does not put it off.
    sweep.activity(t(5));
    assert_eq!(sweep.at, Some(t(10)));
    // Everything is mounted: no further sweep until something happens.
    sweep.swept(t(10), false);
    assert_eq!(sweep.at, None);
    sweep.activity(t(42));
    assert_eq!(sweep.at, Some(t(52)));
    // A namespace only processes hold: swept again, and again.
    sweep.swept(t(52), true);
    assert_eq!(sweep.at, Some(t(62)));
    sweep.swept(t(62), true);
    assert_eq!(sweep.at, Some(t(72)));
}
