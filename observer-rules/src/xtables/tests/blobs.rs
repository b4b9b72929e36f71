//! Hand-built blobs: arp_tables (which the installed tools cannot write), jumps/gotos, and
//! malformed or mutated input that must give errors or generic text, never a panic.

use super::*;

fn arp_table() -> testblob::Built {
    let mut hdr = vec![0u8; 164];
    hdr[0..4].copy_from_slice(&[10, 0, 0, 1]);
    hdr[8..12].copy_from_slice(&[255, 255, 255, 255]);
    hdr[82..84].copy_from_slice(&1u16.to_be_bytes());
    hdr[84..86].copy_from_slice(&0xffffu16.to_be_bytes());
    testblob::build(
        XtProto::Arp,
        "filter",
        &[
            C::builtin(
                "INPUT",
                0,
                -2,
                vec![
                    R::new(T::Verdict(-1)).with_header(hdr),
                    R::new(T::Jump("ARPCHAIN".into())),
                ],
            ),
            C::builtin("OUTPUT", 1, -1, vec![]),
            C::builtin("FORWARD", 2, -2, vec![]),
            C::user(
                "ARPCHAIN",
                vec![R::new(T::Ext("mangle".into(), 0, vec![1, 2, 3]))],
            ),
        ],
    )
}

#[test]
fn arp_tables_decode() {
    let b = arp_table();
    let info = parse_info(XtProto::Arp, &b.info).expect("info");
    let t = decode_table(XtProto::Arp, &info, b.entries).expect("decode");
    let chains: Vec<(&str, Option<&str>, usize)> = t
        .chains
        .iter()
        .map(|c| (c.name.as_str(), c.policy.as_deref(), c.rules.len()))
        .collect();
    assert_eq!(
        chains,
        vec![
            ("INPUT", Some("ACCEPT"), 2),
            ("OUTPUT", Some("DROP"), 0),
            ("FORWARD", Some("ACCEPT"), 0),
            ("ARPCHAIN", None, 1)
        ]
    );
    let input = &t.chains[0];
    assert_eq!(
        t.rule_text(&input.rules[0]),
        "-j DROP -s 10.0.0.1 --opcode 1"
    );
    assert_eq!(t.rule_text(&input.rules[1]), "-j ARPCHAIN");
    assert_eq!(
        t.rule_text(&t.chains[3].rules[0]),
        "-j mangle [rev 0 data 0x010203]"
    );
}

fn small_ipv4() -> testblob::Built {
    testblob::build(
        XtProto::Ipv4,
        "filter",
        &[
            C::builtin(
                "INPUT",
                1,
                -2,
                vec![
                    R::new(T::Jump("A".into()))
                        .with_header(testblob::ip4([10, 0, 0, 0], 8, [0; 4], 0, 6))
                        .with_match("tcp", 0, {
                            let mut d = vec![0u8; 12];
                            d[2..4].copy_from_slice(&u16::MAX.to_ne_bytes());
                            d[4..6].copy_from_slice(&80u16.to_ne_bytes());
                            d[6..8].copy_from_slice(&80u16.to_ne_bytes());
                            d
                        }),
                    R::new(T::Goto("A".into())),
                    R::new(T::Fallthrough).with_header(testblob::ip4(
                        [0; 4],
                        0,
                        [1, 2, 3, 4],
                        32,
                        0,
                    )),
                ],
            ),
            C::builtin("FORWARD", 2, -1, vec![]),
            C::builtin("OUTPUT", 3, -2, vec![]),
            C::user(
                "A",
                vec![
                    R::new(T::Ext("LOG".into(), 0, {
                        let mut d = vec![0u8; 32];
                        d[0] = 4;
                        d
                    })),
                    R::new(T::Verdict(-5)),
                ],
            ),
        ],
    )
}

#[test]
fn jumps_gotos_and_fallthrough() {
    let b = small_ipv4();
    let info = parse_info(XtProto::Ipv4, &b.info).expect("info");
    let t = decode_table(XtProto::Ipv4, &info, b.entries).expect("decode");
    assert_eq!(
        rule_lines(&t),
        vec![
            "-A INPUT -s 10.0.0.0/8 -p tcp -m tcp --dport 80 -j A",
            "-A INPUT -g A",
            "-A INPUT -d 1.2.3.4/32",
            "-A A -j LOG",
            "-A A -j RETURN",
        ]
    );
}

/// kube-proxy's metrics rules: `-m nfacct --nfacct-name NAME`, rev 0 (name, pointer) and rev 1
/// (the pointer 8-aligned; 40 bytes either way on 64-bit), printed as iptables-save prints them
/// (two spaces before the name); a name that needs quotes is quoted; a short payload is generic.
#[test]
fn nfacct_prints_its_name() {
    let info = |name: &[u8]| {
        let mut d = vec![0u8; 40];
        d[..name.len()].copy_from_slice(name);
        // The kernel's pointer, filled in when the rule is loaded.
        d[32..40].copy_from_slice(&0xffff_8880_1234_5678u64.to_ne_bytes());
        d
    };
    let b = testblob::build(
        XtProto::Ipv4,
        "filter",
        &[
            C::builtin(
                "INPUT",
                1,
                -1,
                vec![
                    R::new(T::Fallthrough).with_match("nfacct", 1, info(b"kp-metric")),
                    R::new(T::Fallthrough).with_match("nfacct", 0, info(b"a b")),
                    R::new(T::Fallthrough).with_match("nfacct", 1, vec![b'x'; 8]),
                ],
            ),
            C::builtin("FORWARD", 2, -1, vec![]),
            C::builtin("OUTPUT", 3, -1, vec![]),
        ],
    );
    let i = parse_info(XtProto::Ipv4, &b.info).expect("info");
    let t = decode_table(XtProto::Ipv4, &i, b.entries).expect("decode");
    let lines = rule_lines(&t);
    assert_eq!(lines[0], "-A INPUT -m nfacct --nfacct-name  kp-metric");
    assert_eq!(lines[1], "-A INPUT -m nfacct --nfacct-name  \"a b\"");
    assert!(
        lines[2].starts_with("-A INPUT -m nfacct [rev 1 data 0x"),
        "{lines:?}"
    );
}

#[test]
fn malformed_blobs_are_errors_not_panics() {
    let b = small_ipv4();
    let info = parse_info(XtProto::Ipv4, &b.info).expect("info");
    let l = layout(XtProto::Ipv4);
    let set16 =
        |v: &mut Vec<u8>, at: usize, x: u16| v[at..at + 2].copy_from_slice(&x.to_ne_bytes());
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("truncated header", b.entries[..50].to_vec()),
        ("truncated entry", b.entries[..b.entries.len() - 1].to_vec()),
        ("next_offset 0", {
            let mut v = b.entries.clone();
            set16(&mut v, l.next_offset_at, 0);
            v
        }),
        ("next_offset past end", {
            let mut v = b.entries.clone();
            set16(&mut v, l.next_offset_at, 0xfff0);
            v
        }),
        ("target_offset inside header", {
            let mut v = b.entries.clone();
            set16(&mut v, l.target_offset_at, 20);
            v
        }),
        ("target_offset past next_offset", {
            let mut v = b.entries.clone();
            set16(&mut v, l.target_offset_at, 0xfff0);
            v
        }),
        ("match size 0", {
            let mut v = b.entries.clone();
            set16(&mut v, l.entry_size, 0);
            v
        }),
    ];
    for (what, blob) in cases {
        // Both as the kernel would describe the cut blob and with the original size.
        let mut cut = info.clone();
        cut.size = blob.len() as u32;
        for i in [&info, &cut] {
            let r = decode_table(XtProto::Ipv4, i, blob.clone());
            assert!(matches!(r, Err(XtError::Malformed { .. })), "{what}");
        }
    }
    let mut bad = info.clone();
    bad.num_entries += 1;
    assert!(decode_table(XtProto::Ipv4, &bad, b.entries.clone()).is_err());
    // A bad GET_INFO: hooks that are no entry boundary.
    let mut bad = info.clone();
    bad.underflow[1] += 4;
    assert!(decode_table(XtProto::Ipv4, &bad, b.entries.clone()).is_err());
    assert!(parse_info(XtProto::Ipv4, &b.info[..40]).is_err());
}

#[test]
fn absurd_jump_offsets_render_generically() {
    let b = small_ipv4();
    let info = parse_info(XtProto::Ipv4, &b.info).expect("info");
    let mut v = b.entries.clone();
    // The first rule's verdict (after the 112-byte header and the 48-byte tcp match).
    let at = 112 + 48 + 32;
    v[at..at + 4].copy_from_slice(&123_456i32.to_ne_bytes());
    let t = decode_table(XtProto::Ipv4, &info, v.clone()).expect("decode");
    let first = t.rule_text(&t.chains[0].rules[0]);
    assert!(first.ends_with("-j [jump to byte 123456]"), "{first}");
    v[at..at + 4].copy_from_slice(&(-77i32).to_ne_bytes());
    let t = decode_table(XtProto::Ipv4, &info, v).expect("decode");
    assert!(t
        .rule_text(&t.chains[0].rules[0])
        .ends_with("-j [verdict -77]"));
}

/// Decode, render and diff never panic, whatever single byte of a real blob is changed or
/// wherever it is cut.
#[test]
fn mutated_and_truncated_blobs_never_panic() {
    for f in fixtures() {
        let n = layout(f.proto).info_size;
        let info = parse_info(f.proto, &f.bin[..n]).expect("info");
        let blob = &f.bin[n..];
        let base = fixture_table(&f);
        // Render every rule, and diff now and then.
        let exercise = |t: &XtTable, with_diff: bool| {
            for c in &t.chains {
                for r in &c.rules {
                    let _ = t.rule_text(r);
                }
            }
            if with_diff {
                let _ = diff(Some(&base), Some(t));
            }
        };
        for cut in 0..blob.len() {
            let mut i = info.clone();
            i.size = cut as u32;
            if let Ok(t) = decode_table(f.proto, &i, blob[..cut].to_vec()) {
                exercise(&t, true);
            }
        }
        let mut v = blob.to_vec();
        for i in 0..v.len() {
            let orig = v[i];
            // One mutation per byte keeps this fast in debug builds; alternate the kind.
            let x = match i % 3 {
                0 => orig ^ 0xff,
                1 => orig.wrapping_add(1),
                _ => 0,
            };
            {
                v[i] = x;
                if let Ok(t) = decode_table(f.proto, &info, v.clone()) {
                    exercise(&t, i % 61 == 0);
                }
            }
            v[i] = orig;
        }
    }
}
