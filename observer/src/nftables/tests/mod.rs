//! Live tests of the nftables reader in a throw-away network namespace: the scenarios run with
//! the real `nft` and `iptables-nft`, resyncs after lost notifications, the fixture capture and
//! a benchmark (root and nft needed; they print `skipping: <reason>` otherwise). The tests on
//! captured notifications are the decoder crate's.

mod corpus;
mod netns;
mod suite;
mod suite_load;
mod xt_suite;
mod xt_syntax;

use observer_rules::nftables::testing::scenarios::*;
use observer_rules::nftables::testing::*;

use self::netns::*;
use super::generation::{GenerationBuilder, Transaction};
use super::socket::{self, Dump};
use super::state::NftState;
use super::*;

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
    let corpus = include_str!("../testdata/corpus.nft");
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
        let t = caught_up.resync(dump.clone());
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
    assert!(caught_up.resync(dump).changes.is_empty());
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
