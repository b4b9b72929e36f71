//! Root tests: real iptables-legacy in a throw-away netns, the fixture capture, and the
//! benchmark. Each creates its own namespace and deletes it on drop, also when it fails; without
//! root or the tools they print `skipping: <reason>`.

use super::*;

pub use test_support::Netns;

pub fn run_stdin(ns: &Netns, cmd: &str, args: &[&str], input: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = ns
        .command(cmd)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("{cmd}: {e}"))?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(input.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{cmd}: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

/// Why a root test cannot run here, if it cannot.
pub fn skip_reason() -> Option<String> {
    test_support::skip_reason(&[
        "ip",
        "iptables-legacy",
        "iptables-legacy-save",
        "iptables-legacy-restore",
    ])
}

#[test]
#[ignore = "writes fixtures; needs root and iptables-legacy"]
fn capture_fixtures() {
    if let Some(why) = skip_reason() {
        test_support::skip(format_args!("{why}"));
        return;
    }
    let dir = std::env::var("XT_CAPTURE_DIR").expect("set XT_CAPTURE_DIR");
    let ns = Netns::add("obs-xt-cap").expect("netns");
    ns.run("ipset", &["create", "kube-test", "hash:ip", "counters"])
        .expect("ipset");
    ns.run("ipset", &["create", "kube-ipport", "hash:ip,port"])
        .expect("ipset");
    let sets: &[(&str, XtProto, &str)] = &[
        ("ip_filter_basic", XtProto::Ipv4, "filter"),
        ("ip_filter_ext", XtProto::Ipv4, "filter"),
        ("ip_nat", XtProto::Ipv4, "nat"),
        ("ip_raw", XtProto::Ipv4, "raw"),
        ("ip_mangle", XtProto::Ipv4, "mangle"),
        ("ip6_filter", XtProto::Ipv6, "filter"),
        ("ip6_nat", XtProto::Ipv6, "nat"),
    ];
    for &(name, proto, table) in sets {
        let rules = std::fs::read_to_string(format!("{dir}/{name}.rules")).expect("rules");
        let (restore, save) = match proto {
            XtProto::Ipv6 => ("ip6tables-legacy-restore", "ip6tables-legacy-save"),
            _ => ("iptables-legacy-restore", "iptables-legacy-save"),
        };
        run_stdin(&ns, restore, &[], &rules).expect("restore");
        let raw = ns
            .enter(move || sockopt::read_raw(proto, table))
            .expect("thread")
            .expect("read");
        let mut bin = raw.info_bytes.clone();
        bin.extend(raw.entries());
        std::fs::write(format!("{dir}/{name}.bin"), bin).expect("write");
        let saved = ns.run(save, &["-t", table]).expect("save");
        let lines: String = saved
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                // Drop the counters of the chain lines.
                match l.rfind(" [") {
                    Some(i) if l.starts_with(':') => format!("{}\n", &l[..i]),
                    _ => format!("{l}\n"),
                }
            })
            .collect();
        std::fs::write(format!("{dir}/{name}.save"), lines).expect("write");
    }
}

/// What the live test compares of a change: op, chain, rule, position, detail.
type Seen = (
    Op,
    Option<String>,
    Option<String>,
    Option<usize>,
    Option<String>,
);

/// Reads the namespace's `filter` table after each iptables-legacy command and diffs it with
/// the copy read after the one before.
struct Stepper<'a> {
    ns: &'a Netns,
    prev: Option<XtTable>,
}

impl Stepper<'_> {
    fn read(&self, proto: XtProto, table: &'static str) -> Result<XtTable, XtError> {
        self.ns
            .enter(move || read_table(proto, table))
            .expect("thread")
    }

    /// Run one command; the changes it made, after checking the table renders as
    /// `iptables-legacy-save` prints it.
    fn step(&mut self, args: &[&str]) -> Vec<Seen> {
        self.ns.run("iptables-legacy", args).expect("iptables");
        let now = self.read(XtProto::Ipv4, "filter").expect("read");
        let saved = self
            .ns
            .run("iptables-legacy-save", &["-t", "filter"])
            .expect("save");
        let want: Vec<&str> = saved.lines().filter(|l| l.starts_with("-A ")).collect();
        assert_eq!(rule_lines(&now), want, "after {args:?}");
        let out = diff(self.prev.as_ref(), Some(&now));
        self.prev = Some(now);
        out.into_iter()
            .map(|c| (c.op, c.chain, c.rule, c.position, c.detail))
            .collect()
    }
}

fn s(x: &str) -> Option<String> {
    Some(x.to_string())
}

/// Real iptables-legacy commands in a throw-away netns, read back through getsockopt from a
/// thread inside it: each command gives exactly the expected changes, and the rendered table
/// equals `iptables-legacy-save`.
#[test]
fn live_iptables_legacy_changes() {
    if let Some(why) = skip_reason() {
        test_support::skip(format_args!("{why}"));
        return;
    }
    let ns = Netns::add(format!("obs-xt-live-{}", std::process::id())).expect("netns");
    let mut st = Stepper {
        ns: &ns,
        prev: None,
    };
    nothing_exists_yet(&st);
    rule_edits(&mut st);
    chains_sets_and_flushes(&mut st);
    ip6_rule(&st);

    // arp_tables through a hand-built SET_REPLACE (arp_live.rs drives the real arptables-legacy).
    let arp = ns.enter(live_arp_roundtrip).expect("thread");
    arp.expect("arp round trip");
}

/// Nothing exists yet, and asking does not create anything.
fn nothing_exists_yet(st: &Stepper<'_>) {
    assert!(matches!(
        st.read(XtProto::Ipv4, "filter"),
        Err(XtError::NoSuchTable { .. })
    ));
    assert!(matches!(
        st.read(XtProto::Ipv4, "nat"),
        Err(XtError::NoSuchTable { .. })
    ));
    let names = st
        .ns
        .enter(|| table_names(XtProto::Ipv4))
        .expect("thread")
        .expect("names");
    assert!(names.is_empty(), "{names:?}");
}

/// Rules added, inserted, replaced and deleted, and a policy changed.
fn rule_edits(st: &mut Stepper<'_>) {
    let created = st.step(&["-N", "KUBE-FIREWALL"]);
    assert_eq!(created[0].0, Op::TableCreate);
    assert!(created.contains(&(Op::ChainCreate, s("KUBE-FIREWALL"), None, None, None)));
    let kf = "-m comment --comment \"kubernetes firewall for dropping marked packets\" -m mark --mark 0x8000/0x8000 -j DROP";
    assert_eq!(
        st.step(&[
            "-A",
            "KUBE-FIREWALL",
            "-m",
            "comment",
            "--comment",
            "kubernetes firewall for dropping marked packets",
            "-m",
            "mark",
            "--mark",
            "0x8000/0x8000",
            "-j",
            "DROP"
        ]),
        vec![(Op::RuleAdd, s("KUBE-FIREWALL"), s(kf), Some(0), None)]
    );
    assert_eq!(
        st.step(&["-A", "INPUT", "-j", "KUBE-FIREWALL"]),
        vec![(
            Op::RuleAdd,
            s("INPUT"),
            s("-j KUBE-FIREWALL"),
            Some(0),
            None
        )]
    );
    assert_eq!(
        st.step(&["-I", "KUBE-FIREWALL", "1", "-s", "10.0.0.1", "-j", "ACCEPT"]),
        vec![(
            Op::RuleAdd,
            s("KUBE-FIREWALL"),
            s("-s 10.0.0.1/32 -j ACCEPT"),
            Some(0),
            None
        )]
    );
    // kube-router's bug: the mark match silently dropped.
    assert_eq!(
        st.step(&["-R", "KUBE-FIREWALL", "2", "-j", "DROP"]),
        vec![(
            Op::RuleReplace,
            s("KUBE-FIREWALL"),
            s("-j DROP"),
            Some(1),
            Some(format!("was: {kf}"))
        )]
    );
    assert_eq!(
        st.step(&["-D", "KUBE-FIREWALL", "1"]),
        vec![(
            Op::RuleDelete,
            s("KUBE-FIREWALL"),
            s("-s 10.0.0.1/32 -j ACCEPT"),
            Some(0),
            None
        )]
    );
    assert_eq!(
        st.step(&["-P", "FORWARD", "DROP"]),
        vec![(
            Op::ChainUpdate,
            s("FORWARD"),
            None,
            None,
            s("policy ACCEPT -> DROP")
        )]
    );
}

/// A user chain created, filled, flushed; an `-m set` rule; the table flushed and its chains
/// deleted.
fn chains_sets_and_flushes(st: &mut Stepper<'_>) {
    assert_eq!(
        st.step(&["-N", "OTHER"]),
        vec![(Op::ChainCreate, s("OTHER"), None, None, None)]
    );
    st.step(&["-A", "OTHER", "-j", "RETURN"]);
    st.step(&[
        "-A",
        "OTHER",
        "-p",
        "tcp",
        "--dport",
        "22",
        "-g",
        "KUBE-FIREWALL",
    ]);
    assert_eq!(
        st.step(&["-F", "OTHER"]),
        vec![(Op::ChainFlush, s("OTHER"), None, None, s("2 rules deleted"))]
    );
    st.step(&["-A", "OTHER", "-j", "RETURN"]);
    // `-m set` names come from the kernel's ipset of the same namespace.
    let mut rules = 3;
    if st
        .ns
        .run("ipset", &["create", "live-set", "hash:ip"])
        .is_ok()
    {
        assert_eq!(
            st.step(&[
                "-A",
                "INPUT",
                "-m",
                "set",
                "--match-set",
                "live-set",
                "src",
                "-j",
                "DROP"
            ]),
            vec![(
                Op::RuleAdd,
                s("INPUT"),
                s("-m set --match-set live-set src -j DROP"),
                Some(1),
                None
            )]
        );
        // The SET target (revision 3) names its sets too, with its flags.
        assert_eq!(
            st.step(&[
                "-A",
                "INPUT",
                "-j",
                "SET",
                "--add-set",
                "live-set",
                "src",
                "--exist",
                "--del-set",
                "live-set",
                "dst"
            ]),
            vec![(
                Op::RuleAdd,
                s("INPUT"),
                s("-j SET --add-set live-set src --exist --del-set live-set dst"),
                Some(2),
                None
            )]
        );
        rules += 2;
    } else {
        println!("no ipset tool: set names not checked live");
    }
    assert_eq!(
        st.step(&["-F"]),
        vec![(
            Op::TableFlush,
            None,
            None,
            None,
            Some(format!("3 chains, {rules} rules deleted"))
        )]
    );
    assert_eq!(
        st.step(&["-X"]),
        vec![
            (Op::ChainDelete, s("KUBE-FIREWALL"), None, None, None),
            (Op::ChainDelete, s("OTHER"), None, None, None)
        ]
    );
}

/// ip6tables: another family, same machinery.
fn ip6_rule(st: &Stepper<'_>) {
    st.ns
        .run(
            "ip6tables-legacy",
            &[
                "-A",
                "INPUT",
                "-s",
                "2001:db8::/64",
                "-p",
                "tcp",
                "--dport",
                "22",
                "-j",
                "REJECT",
                "--reject-with",
                "tcp-reset",
            ],
        )
        .expect("ip6tables");
    let t6 = st.read(XtProto::Ipv6, "filter").expect("read ip6");
    let saved = st
        .ns
        .run("ip6tables-legacy-save", &["-t", "filter"])
        .expect("save");
    let want: Vec<&str> = saved.lines().filter(|l| l.starts_with("-A ")).collect();
    assert_eq!(rule_lines(&t6), want);
    assert_eq!(
        want,
        vec![
            "-A INPUT -s 2001:db8::/64 -p tcp -m tcp --dport 22 -j REJECT --reject-with tcp-reset"
        ]
    );
}

/// In the current (throw-away) netns: instantiate the arp filter table, replace it with a
/// hand-built one, and read it back.
fn live_arp_roundtrip() -> Result<(), String> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: plain socket(2); the descriptor is owned right away.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_RAW,
        )
    };
    if fd < 0 {
        return Err(format!("socket: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fresh descriptor, owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut info = vec![0u8; 68];
    info[..6].copy_from_slice(b"filter");
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: `info` is valid for `len` bytes. (GET_INFO creates the table in this netns.)
    let rc =
        unsafe { libc::getsockopt(sock.as_raw_fd(), 0, 96, info.as_mut_ptr().cast(), &mut len) };
    if rc < 0 {
        return Err(format!(
            "ARPT_SO_GET_INFO: {}",
            std::io::Error::last_os_error()
        ));
    }
    let old = parse_info(XtProto::Arp, &info).map_err(|e| e.to_string())?;

    let mut hdr = vec![0u8; 164];
    hdr[0..4].copy_from_slice(&[10, 0, 0, 1]);
    hdr[8..12].copy_from_slice(&[255, 255, 255, 255]);
    hdr[82..84].copy_from_slice(&1u16.to_be_bytes());
    hdr[84..86].copy_from_slice(&0xffffu16.to_be_bytes());
    let mut hdr2 = vec![0u8; 164];
    hdr2[4..8].copy_from_slice(&[10, 0, 0, 2]);
    hdr2[12..16].copy_from_slice(&[255, 255, 255, 0]);
    let b = testblob::build(
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
            C::user("ARPCHAIN", vec![R::new(T::Verdict(-2)).with_header(hdr2)]),
        ],
    );
    // struct arpt_replace: name, valid_hooks, num_entries, size, hook_entry[3], underflow[3],
    // num_counters, counters pointer, entries.
    let mut counters = vec![0u8; 16 * old.num_entries as usize];
    let mut rep = vec![0u8; 80];
    rep[..6].copy_from_slice(b"filter");
    rep[32..36].copy_from_slice(&b.valid_hooks.to_ne_bytes());
    rep[36..40].copy_from_slice(&b.num_entries.to_ne_bytes());
    rep[40..44].copy_from_slice(&(b.entries.len() as u32).to_ne_bytes());
    for h in 0..3 {
        rep[44 + 4 * h..48 + 4 * h].copy_from_slice(&b.hook_entry[h].to_ne_bytes());
        rep[56 + 4 * h..60 + 4 * h].copy_from_slice(&b.underflow[h].to_ne_bytes());
    }
    rep[68..72].copy_from_slice(&old.num_entries.to_ne_bytes());
    rep[72..80].copy_from_slice(&(counters.as_mut_ptr() as u64).to_ne_bytes());
    rep.extend(&b.entries);
    // SAFETY: `rep` is valid for its length; the kernel writes the old counters into `counters`,
    // which outlives the call and has room for `num_counters` entries.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            0,
            96,
            rep.as_ptr().cast(),
            rep.len() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(format!(
            "ARPT_SO_SET_REPLACE: {}",
            std::io::Error::last_os_error()
        ));
    }
    let t = read_table(XtProto::Arp, "filter").map_err(|e| e.to_string())?;
    let got: Vec<String> = rule_lines(&t);
    let want = vec![
        "-A INPUT -j DROP -s 10.0.0.1 --opcode 1",
        "-A INPUT -j ARPCHAIN",
        "-A ARPCHAIN -j ACCEPT -d 10.0.0.2/24",
    ];
    if got != want {
        return Err(format!("arp rules: {got:#?}"));
    }
    let policies: Vec<Option<&str>> = t.chains.iter().map(|c| c.policy.as_deref()).collect();
    if policies != [Some("ACCEPT"), Some("DROP"), Some("ACCEPT"), None] {
        return Err(format!("arp policies: {policies:?}"));
    }
    Ok(())
}

/// Timing of reading + diffing a 20,000-rule, 2,000-chain table against `iptables-legacy-save`:
/// `cargo test --release -p observer bench_big_table -- --ignored --nocapture`.
#[test]
#[ignore = "benchmark; needs root and iptables-legacy"]
fn bench_big_table() {
    use std::time::{Duration, Instant};
    if let Some(why) = skip_reason() {
        test_support::skip(format_args!("{why}"));
        return;
    }
    let ns = Netns::add(format!("obs-xt-bench-{}", std::process::id())).expect("netns");
    let mut rules =
        String::from("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n");
    for c in 0..2000 {
        rules.push_str(&format!(":KUBE-SVC-{c:06} - [0:0]\n"));
    }
    // XT_BENCH_SIMPLE=1: short rules (no comments, no statistic) instead of kube-proxy-like ones.
    let simple = std::env::var_os("XT_BENCH_SIMPLE").is_some();
    for c in 0..2000 {
        let (b, d) = (c / 256, c % 256);
        if simple {
            rules.push_str(&format!(
                "-A INPUT -d 10.96.{b}.{d}/32 -j KUBE-SVC-{c:06}\n"
            ));
        } else {
            rules.push_str(&format!("-A INPUT -d 10.96.{b}.{d}/32 -p tcp -m comment --comment \"default/svc-{c}:http cluster IP\" -m tcp --dport 80 -j KUBE-SVC-{c:06}\n"));
        }
        for r in 0..9 {
            if simple {
                rules.push_str(&format!(
                    "-A KUBE-SVC-{c:06} -s 10.244.{r}.{d}/32 -j ACCEPT\n"
                ));
            } else {
                rules.push_str(&format!("-A KUBE-SVC-{c:06} -s 10.244.{r}.0/24 -m comment --comment \"default/svc-{c}:http -> 10.244.{r}.{d}:8080\" -m statistic --mode random --probability 0.{r}5000000000 -j MARK --set-xmark 0x4000/0x4000\n"));
            }
        }
    }
    rules.push_str("COMMIT\n");
    run_stdin(&ns, "iptables-legacy-restore", &[], &rules).expect("restore");
    let best = |f: &mut dyn FnMut()| -> Duration {
        (0..5)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .min()
            .unwrap_or_default()
    };
    let save = best(&mut || {
        ns.run("iptables-legacy-save", &["-t", "filter"])
            .expect("save");
    });
    let old = ns
        .enter(|| read_table(XtProto::Ipv4, "filter"))
        .expect("thread")
        .expect("read");
    ns.run(
        "iptables-legacy",
        &["-R", "KUBE-SVC-001234", "5", "-j", "DROP"],
    )
    .expect("replace");
    let old = std::sync::Arc::new(old);
    let o2 = old.clone();
    let (read, read_diff, changes, rules_n) = ns
        .enter(move || {
            let mut changes = Vec::new();
            let mut n = 0;
            let mut raw = None;
            let raw_t =
                best(&mut || raw = Some(sockopt::read_raw(XtProto::Ipv4, "filter").expect("raw")));
            let raw = raw.expect("raw");
            let decode_t = best(&mut || {
                decode::decode_table_at(XtProto::Ipv4, &raw.info, raw.buf.clone(), 40)
                    .expect("decode");
            });
            println!(
                "getsockopt {raw_t:?} ({} bytes), decode {decode_t:?} (incl. a copy)",
                raw.entries().len()
            );
            let read = best(&mut || {
                let t = read_table(XtProto::Ipv4, "filter").expect("read");
                n = t.rule_count();
            });
            let read_diff = best(&mut || {
                let t = read_table(XtProto::Ipv4, "filter").expect("read");
                changes = diff(Some(&o2), Some(&t));
            });
            (read, read_diff, changes, n)
        })
        .expect("thread");
    println!(
        "{rules_n} rules, {} chains: iptables-legacy-save {save:?}; read_table {read:?}; read_table + diff {read_diff:?}",
        old.chains.len()
    );
    println!("{changes:#?}");
    assert_eq!(changes.len(), 1);
}

/// Without CAP_NET_ADMIN the error says what is missing. As root, a thread inside a throw-away
/// netns drops to `nobody` (setresuid on one thread only) to see it.
/// A table read through sockets opened in its namespace, from a thread that never entered it,
/// is that namespace's table (the thread's own namespace has no such chain).
#[test]
fn a_table_is_read_through_its_namespace_sockets_from_outside() {
    if let Some(why) = skip_reason() {
        test_support::skip(format_args!("{why}"));
        return;
    }
    let ns = Netns::add(format!("obs-xt-socks-{}", std::process::id())).expect("netns");
    let chain = format!("OBS-SOCKS-{}", std::process::id());
    ns.run("iptables-legacy", &["-w", "5", "-N", &chain])
        .expect("iptables");
    ns.run(
        "iptables-legacy",
        &[
            "-w", "5", "-A", &chain, "-p", "tcp", "--dport", "4242", "-j", "ACCEPT",
        ],
    )
    .expect("iptables");
    let socks = ns.enter(XtSockets::open).expect("thread").expect("sockets");
    let t = read_existing_table(&socks, XtProto::Ipv4, "filter", None).expect("read");
    let c = t.chain(&chain).expect("the namespace's chain");
    let rules: Vec<String> = c.rules.iter().map(|r| t.rule_text(r)).collect();
    assert_eq!(rules, ["-p tcp -m tcp --dport 4242 -j ACCEPT"]);
    // A table the namespace does not have (not built in, so never created by asking).
    assert!(matches!(
        read_existing_table(&socks, XtProto::Ipv4, "obs-none", None),
        Err(XtError::NoSuchTable { .. })
    ));
}

#[test]
fn unprivileged_read_says_root_is_needed() {
    let check = || match read_table(XtProto::Ipv4, "filter") {
        Err(e @ XtError::PermissionDenied { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("root") && msg.contains("CAP_NET_ADMIN"),
                "{msg}"
            );
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    };
    if !nix::unistd::geteuid().is_root() {
        check();
        return;
    }
    let ns = Netns::add(format!("obs-xt-unpriv-{}", std::process::id())).expect("netns");
    ns.run("iptables-legacy", &["-N", "X"]).ok();
    ns.enter(move || {
        // SAFETY: raw setresuid changes the credentials of this thread only (glibc's wrapper
        // would change every thread of the test process); the thread ends right after.
        let rc = unsafe { libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534) };
        assert_eq!(rc, 0, "setresuid");
        check();
    })
    .expect("thread");
}
