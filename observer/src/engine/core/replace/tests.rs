//! The decisions of an x_tables replace on plain data.

use super::*;

#[test]
fn a_replace_the_kernel_took_is_read_an_ebtables_one_read_back_a_refused_one_is_an_attempt() {
    assert_eq!(route(0, Some(XtProto::Ipv4)), Route::Table(XtProto::Ipv4));
    assert_eq!(route(0, Some(XtProto::Ipv6)), Route::Table(XtProto::Ipv6));
    assert_eq!(route(0, Some(XtProto::Arp)), Route::Table(XtProto::Arp));
    assert_eq!(route(0, None), Route::Bridge);
    // Refused (EPERM, ENOENT...): whatever the protocol, one line for the attempt.
    assert_eq!(route(-1, Some(XtProto::Ipv4)), Route::Attempt);
    assert_eq!(route(-2, None), Route::Attempt);
    assert_eq!(route(-16, Some(XtProto::Arp)), Route::Attempt);
}

#[test]
fn a_replace_made_before_the_table_was_last_read_back_is_held_already() {
    assert!(held_already(Some(1_000), 999));
    // Made as the read began, or after: not in it for sure.
    assert!(!held_already(Some(1_000), 1_000));
    assert!(!held_already(Some(1_000), 1_001));
    // Never read back (every copy so far was the writer's): nothing is held already.
    assert!(!held_already(None, 0));
}

#[test]
fn a_whole_copy_is_trusted_and_its_sets_named_once_the_sockets_are_open() {
    let plain = WriterCopy::Whole {
        refers_to_sets: false,
    };
    let sets = WriterCopy::Whole {
        refers_to_sets: true,
    };
    assert_eq!(
        table_from(plain, true),
        TableFrom::Copy { name_sets: false }
    );
    assert_eq!(
        table_from(plain, false),
        TableFrom::Copy { name_sets: false }
    );
    assert_eq!(table_from(sets, true), TableFrom::Copy { name_sets: true });
    // Sets not nameable yet: the first read back opens the sockets.
    assert_eq!(table_from(sets, false), TableFrom::EnterNamespace);
}

#[test]
fn a_missing_cut_or_wrong_copy_means_the_table_is_read_back() {
    for copy in [
        WriterCopy::Missing,
        WriterCopy::Undecodable,
        WriterCopy::OtherTable,
    ] {
        assert_eq!(table_from(copy, true), TableFrom::Sockets, "{copy:?}");
        assert_eq!(
            table_from(copy, false),
            TableFrom::EnterNamespace,
            "{copy:?}"
        );
    }
}

#[test]
fn only_a_table_read_back_counts_as_read_back() {
    assert!(!TableFrom::Copy { name_sets: false }.read_back());
    assert!(!TableFrom::Copy { name_sets: true }.read_back());
    assert!(TableFrom::Sockets.read_back());
    assert!(TableFrom::EnterNamespace.read_back());
}

#[test]
fn a_table_gone_by_its_read_is_none_and_other_errors_are_the_caller_s() {
    assert_eq!(table_or_gone(Ok::<u32, XtError>(7)).unwrap(), Some(7));
    let gone = Err::<u32, _>(XtError::NoSuchTable {
        proto: XtProto::Ipv4,
        name: "nat".into(),
    });
    assert_eq!(table_or_gone(gone).unwrap(), None);
    let denied = Err::<u32, _>(XtError::PermissionDenied { op: "GET_INFO" });
    assert!(matches!(
        table_or_gone(denied),
        Err(XtError::PermissionDenied { op: "GET_INFO" })
    ));
    let unstable = Err::<u32, _>(XtError::Unstable {
        proto: XtProto::Ipv6,
        name: "filter".into(),
        attempts: 3,
    });
    assert!(matches!(
        table_or_gone(unstable),
        Err(XtError::Unstable { attempts: 3, .. })
    ));
}

#[test]
fn a_table_read_back_with_other_entries_than_installed_is_a_gap() {
    for from in [TableFrom::Sockets, TableFrom::EnterNamespace] {
        assert_eq!(
            settle(from, 12, Some(14)),
            Settled {
                gap: Some(14),
                mark_read: true
            }
        );
        assert_eq!(
            settle(from, 12, Some(12)),
            Settled {
                gap: None,
                mark_read: true
            }
        );
        // Gone by the read: nothing to compare, but the read is recorded.
        assert_eq!(
            settle(from, 12, None),
            Settled {
                gap: None,
                mark_read: true
            }
        );
    }
}

#[test]
fn the_writer_s_copy_is_its_own_change_never_a_gap_and_never_a_read() {
    for name_sets in [false, true] {
        let from = TableFrom::Copy { name_sets };
        for found in [Some(12), Some(99), None] {
            assert_eq!(
                settle(from, 12, found),
                Settled {
                    gap: None,
                    mark_read: false
                },
                "{found:?}"
            );
        }
    }
}
