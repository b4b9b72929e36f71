use super::*;

#[test]
fn summary_names_each_hook_and_every_refusal() {
    let p = Placement {
        x_tables: Some(HookBackend::Kprobe),
        namespaces: Some(HookBackend::Kprobe),
        umount: Some(HookBackend::Kprobe),
        nf_writers: Some(HookBackend::Kprobe),
        nft_gens: None,
        refusals: Some(HookBackend::Kprobe),
        refused: vec![
            Refusal {
                hook: "x_tables",
                backend: HookBackend::Fentry,
                reason: "Operation not permitted (os error 1)".into(),
            },
            Refusal {
                hook: "namespaces",
                backend: HookBackend::Fentry,
                reason: "Operation not permitted (os error 1)".into(),
            },
        ],
    };
    assert_eq!(
        p.summary(),
        "x_tables=kprobe namespaces=kprobe umount=kprobe nf_tables=netlink nf_writers=kprobe \
         nft_gens=thread nf_refusals=kprobe (x_tables: fentry refused: Operation not \
         permitted (os error 1)) (the other hooks: refused there for the same reason)"
    );
    // A refusal of a hook alone is said.
    let mut alone = p.clone();
    alone.refused.push(Refusal {
        hook: "umount",
        backend: HookBackend::Kprobe,
        reason: "no such field".into(),
    });
    assert!(alone
        .summary()
        .contains("(umount: kprobe refused: no such field)"));
    assert_eq!(p.sources(), vec![Source::Kprobe, Source::Netlink]);
}

#[test]
fn no_syscall_tracepoint_on_the_kernel_backends() {
    for hook in [
        &X_TABLES,
        &NAMESPACES,
        &UNMOUNTS,
        &NF_WRITERS,
        &NFT_GENS,
        &NF_REFUSALS,
    ] {
        for a in hook.fentry.iter().chain(hook.kprobe) {
            assert!(
                !matches!(a, Attach::Tracepoint(..)),
                "{}: {a:?} on a kernel backend",
                hook.name
            );
        }
        for a in hook.fentry {
            assert!(matches!(a, Attach::Fentry(..) | Attach::Fexit(..)));
        }
        for a in hook.kprobe {
            assert!(matches!(a, Attach::Kprobe(..) | Attach::Kretprobe(..)));
        }
    }
}

#[test]
fn record_sources_map_to_backends() {
    assert_eq!(
        HookBackend::from_raw(HOOK_FENTRY),
        Some(HookBackend::Fentry)
    );
    assert_eq!(
        HookBackend::from_raw(HOOK_KPROBE),
        Some(HookBackend::Kprobe)
    );
    assert_eq!(
        HookBackend::from_raw(HOOK_TRACEPOINT),
        Some(HookBackend::Tracepoint)
    );
    assert_eq!(HookBackend::from_raw(0), None);
    assert_eq!(Source::from(HookBackend::Kprobe), Source::Kprobe);
}

#[test]
fn a_function_refused_on_a_backend_that_carries_the_others_is_degraded() {
    use HookBackend::*;
    let reason = "loading fexit on nf_setsockopt: arg3 type STRUCT is unsupported";
    // 5.10: fentry carries every hook but x_tables.
    let p = Placement {
        x_tables: Some(Kprobe),
        namespaces: Some(Fentry),
        umount: Some(Fentry),
        nf_writers: Some(Fentry),
        nft_gens: Some(Fentry),
        refusals: Some(Fentry),
        refused: vec![Refusal {
            hook: "x_tables",
            backend: Fentry,
            reason: reason.into(),
        }],
    };
    assert!(p.carries(Fentry));
    assert!(!p.carries(Kprobe));
    let d = p.degraded();
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].starts_with("x_tables on kprobe, not fentry (refused: loading fexit on nf_setsockopt"),
        "{d:?}"
    );
    assert!(d[0].contains("nothing is missed"), "{d:?}");
    // A kernel that refuses the whole backend (no trampolines at all): nothing degraded, the
    // summary says it.
    let host = Placement {
        x_tables: Some(Tracepoint),
        namespaces: Some(Tracepoint),
        refused: vec![
            Refusal {
                hook: "x_tables",
                backend: Fentry,
                reason: "EPERM".into(),
            },
            Refusal {
                hook: "namespaces",
                backend: Fentry,
                reason: "EPERM".into(),
            },
        ],
        ..Placement::default()
    };
    assert!(host.degraded().is_empty(), "{:?}", host.degraded());
}
