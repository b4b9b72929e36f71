//! Root test: real arptables-legacy in a throw-away netns. Every command's changes are read back
//! through getsockopt, diffed, and the whole table rendered is compared with what
//! `arptables-legacy-save` prints.

use super::live::Netns;
use super::*;

/// Why the arptables test cannot run here, if it cannot.
fn arp_skip_reason() -> Option<String> {
    test_support::skip_reason(&["ip", "perl", "arptables-legacy", "arptables-legacy-save"])
}

/// `arptables-legacy-save` as installed. Debian's script runs `/usr/sbin/arptables`, which the
/// alternatives system may point at arptables-nft; the script is run with that one path
/// replaced by arptables-legacy, so the text is still the installed script's own.
fn legacy_save(ns: &Netns) -> String {
    let path = which("arptables-legacy-save");
    let legacy = which("arptables-legacy");
    let script = std::fs::read_to_string(path).expect("read arptables-legacy-save");
    let script = script.replace("\"/usr/sbin/arptables\"", &format!("\"{legacy}\""));
    let out = ns
        .command("perl")
        .arg("-e")
        .arg(&script)
        .output()
        .expect("perl");
    assert!(
        out.status.success(),
        "arptables-legacy-save failed: {out:?}"
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The full path of `program` on the PATH.
pub(super) fn which(program: &str) -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .expect("sh");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The `:CHAIN POLICY` and `-A` lines, with the trailing blank arptables leaves after each rule
/// removed.
fn save_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with(':') || l.starts_with("-A "))
        .map(|l| l.trim_end().to_string())
        .collect()
}

fn our_lines(t: &XtTable) -> Vec<String> {
    save_lines(&t.save_text())
}

type Seen = (
    Op,
    Option<String>,
    Option<String>,
    Option<usize>,
    Option<String>,
);

/// The rules the test adds, each with the text it must get (empty: checked against
/// `arptables-legacy-save` only).
const RULES: &[(&[&str], &str)] = &[
    (
        &[
            "-A",
            "INPUT",
            "-s",
            "10.0.0.1",
            "-d",
            "10.0.0.0/8",
            "-i",
            "eth0",
            "-j",
            "ACCEPT",
        ],
        "-j ACCEPT -i eth0 -s 10.0.0.1 -d 10.0.0.0/8",
    ),
    (
        &[
            "-A",
            "OUTPUT",
            "-o",
            "eth1",
            "--source-mac",
            "00:11:22:33:44:55",
            "--opcode",
            "1",
            "-j",
            "DROP",
        ],
        "-j DROP -o eth1 --src-mac 00:11:22:33:44:55 --opcode 1",
    ),
    (
        &[
            "-A",
            "ARPCHAIN",
            "--destination-mac",
            "00:11:22:33:44:00/ff:ff:ff:ff:ff:00",
            "-j",
            "RETURN",
        ],
        "-j RETURN --dst-mac 00:11:22:33:44:00/ff:ff:ff:ff:ff:00",
    ),
    (
        &[
            "-A", "INPUT", "!", "-s", "1.2.3.4", "!", "-i", "lo+", "!", "--opcode", "2", "-j",
            "ACCEPT",
        ],
        "-j ACCEPT ! -i lo+ ! -s 1.2.3.4 ! --opcode 2",
    ),
    (
        &[
            "-A",
            "INPUT",
            "--h-length",
            "6",
            "--opcode",
            "Reply",
            "--h-type",
            "1",
            "--proto-type",
            "0x800",
            "-j",
            "ACCEPT",
        ],
        "",
    ),
    (&["-A", "INPUT", "-j", "ARPCHAIN"], "-j ARPCHAIN"),
    (
        &[
            "-A",
            "OUTPUT",
            "-j",
            "mangle",
            "--mangle-ip-s",
            "10.0.0.2",
            "--mangle-ip-d",
            "10.0.0.3",
        ],
        "",
    ),
    (
        &[
            "-A",
            "OUTPUT",
            "--h-length",
            "6",
            "-j",
            "mangle",
            "--mangle-mac-s",
            "00:11:22:33:44:66",
            "--mangle-mac-d",
            "00:11:22:33:44:77",
            "--mangle-target",
            "DROP",
        ],
        "",
    ),
    (
        &["-A", "FORWARD", "-j", "CLASSIFY", "--set-class", "1:2"],
        "-j CLASSIFY --set-class 1:2",
    ),
];

#[test]
fn live_arptables_legacy_changes() {
    if let Some(why) = arp_skip_reason() {
        test_support::skip(format_args!("{why}"));
        return;
    }
    let ns = Netns::add(format!("obs-arp-live-{}", std::process::id())).expect("netns");
    let read = || {
        ns.enter(|| read_table(XtProto::Arp, "filter"))
            .expect("thread")
    };
    let mut prev: Option<XtTable> = None;
    let mut step = |args: &[&str]| -> Vec<Seen> {
        ns.run("arptables-legacy", args)
            .unwrap_or_else(|e| panic!("arptables-legacy {args:?}: {e}"));
        let now = read().expect("read");
        let want = save_lines(&legacy_save(&ns));
        assert_eq!(our_lines(&now), want, "after {args:?}");
        let out = diff(prev.as_ref(), Some(&now));
        prev = Some(now);
        out.into_iter()
            .map(|c| (c.op, c.chain, c.rule, c.position, c.detail))
            .collect()
    };
    let s = |x: &str| Some(x.to_string());
    let created = step(&["-N", "ARPCHAIN"]);
    assert_eq!(created[0].0, Op::TableCreate);
    assert!(created.contains(&(Op::ChainCreate, s("ARPCHAIN"), None, None, None)));
    assert_eq!(
        step(&["-P", "INPUT", "DROP"]),
        vec![(
            Op::ChainUpdate,
            s("INPUT"),
            None,
            None,
            s("policy ACCEPT -> DROP")
        )]
    );
    for &(args, text) in RULES {
        let got = step(args);
        assert_eq!(got.len(), 1, "{args:?}: {got:#?}");
        let (op, chain, rule, _, _) = &got[0];
        assert_eq!((op, chain.as_deref()), (&Op::RuleAdd, Some(args[1])));
        if !text.is_empty() {
            assert_eq!(rule.as_deref(), Some(text), "{args:?}");
        }
    }
    assert_eq!(
        step(&["-D", "INPUT", "1"]),
        vec![(
            Op::RuleDelete,
            s("INPUT"),
            s("-j ACCEPT -i eth0 -s 10.0.0.1 -d 10.0.0.0/8"),
            Some(0),
            None
        )]
    );
    assert_eq!(
        step(&["-F", "OUTPUT"]),
        vec![(
            Op::ChainFlush,
            s("OUTPUT"),
            None,
            None,
            s("3 rules deleted")
        )]
    );
    step(&["-F", "ARPCHAIN"]);
    step(&["-D", "INPUT", "-j", "ARPCHAIN"]);
    assert_eq!(
        step(&["-X", "ARPCHAIN"]),
        vec![(Op::ChainDelete, s("ARPCHAIN"), None, None, None)]
    );
}
