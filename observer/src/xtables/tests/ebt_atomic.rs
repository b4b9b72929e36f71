//! ebtables decoding against the real ebtables-legacy, without a kernel: ebtables writes the
//! table it would hand the kernel (`struct ebt_replace` and the entries blob
//! `EBT_SO_SET_REPLACE` takes and `EBT_SO_GET_ENTRIES` returns) to an `--atomic-file`, and
//! lists that file as `ebtables-legacy-save` would list the kernel's table. Each command's
//! result is decoded, rendered and compared with the installed save script's text, and diffed
//! into chain and rule changes.

use super::*;
use crate::xtables::ebt::{self, EbTable, REPLACE_LEN};

/// An empty table as an atomic file: `struct ebt_replace`, then one `struct ebt_entries` per
/// built-in chain (policy ACCEPT, no rules).
fn empty_table(name: &str, hooks: &[(u32, &str)]) -> Vec<u8> {
    let mut head = vec![0u8; REPLACE_LEN];
    head[..name.len()].copy_from_slice(name.as_bytes());
    let valid: u32 = hooks.iter().map(|(h, _)| 1 << h).sum();
    head[32..36].copy_from_slice(&valid.to_ne_bytes());
    head[40..44].copy_from_slice(&(48 * hooks.len() as u32).to_ne_bytes());
    let mut body = Vec::new();
    for (i, (h, chain)) in hooks.iter().enumerate() {
        let at = 48 + 8 * *h as usize;
        head[at..at + 8].copy_from_slice(&(48 * i as u64).to_ne_bytes());
        let mut e = vec![0u8; 48];
        e[4..4 + chain.len()].copy_from_slice(chain.as_bytes());
        e[40..44].copy_from_slice(&(-1i32).to_ne_bytes());
        body.extend(e);
    }
    head.extend(body);
    head
}

fn ebt_skip_reason() -> Option<String> {
    ["ebtables-legacy", "ebtables-legacy-save", "perl"]
        .iter()
        .find(|p| super::arp_live::which(p).is_empty())
        .map(|p| format!("{p} is not installed (run `cargo xtask setup`)"))
}

/// The `:CHAIN POLICY` and `-A` lines the installed `ebtables-legacy-save` prints for `table`
/// in `file`: its script, run with the listing command pointed at the file and the table list
/// (which it takes from /proc/modules) set to `table`.
fn legacy_save(file: &std::path::Path, table: &str) -> Vec<String> {
    let legacy = super::arp_live::which("ebtables-legacy");
    save_with(
        &format!("{legacy} --atomic-file {}", file.display()),
        table,
        std::process::Command::new("perl"),
    )
}

/// The installed save script's lines for `table`, listing it with `tool`, run by `perl`.
fn save_with(tool: &str, table: &str, mut perl: std::process::Command) -> Vec<String> {
    let path = super::arp_live::which("ebtables-legacy-save");
    let script = std::fs::read_to_string(path).expect("read ebtables-legacy-save");
    let script = script
        .replace(
            "my $ebtables = \"/usr/sbin/ebtables\";",
            &format!("my $ebtables = \"{tool}\";"),
        )
        .replace("unless (-x $ebtables) { exit -1 };", "")
        .replace(
            "`grep -E '^ebtable_' /proc/modules | cut -f1 -d' ' | sed s/ebtable_//`",
            &format!("\"{table}\""),
        );
    assert!(script.contains(tool), "unexpected save script");
    let out = perl.arg("-e").arg(&script).output().expect("perl");
    assert!(out.status.success(), "ebtables-legacy-save: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(':') || l.starts_with("-A "))
        .map(|l| l.trim_end().to_string())
        .collect()
}

type Seen = (
    Op,
    Option<String>,
    Option<String>,
    Option<usize>,
    Option<String>,
);

struct Atomic {
    dir: std::path::PathBuf,
    file: std::path::PathBuf,
    table: &'static str,
    prev: Option<EbTable>,
}

impl Atomic {
    fn new(test: &str, table: &'static str, hooks: &[(u32, &str)]) -> Atomic {
        let dir =
            std::env::temp_dir().join(format!("obs-ebt-{}-{test}-{table}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("table");
        std::fs::write(&file, empty_table(table, hooks)).expect("write");
        let mut a = Atomic {
            dir,
            file,
            table,
            prev: None,
        };
        a.prev = Some(a.read());
        a
    }

    fn read(&self) -> EbTable {
        let b = std::fs::read(&self.file).expect("read atomic file");
        let t = ebt::decode_atomic(&b).expect("decode");
        assert_eq!(t.save_lines(), legacy_save(&self.file, self.table));
        t
    }

    fn step(&mut self, args: &[&str]) -> Vec<Seen> {
        let out = std::process::Command::new("ebtables-legacy")
            .args(["--atomic-file"])
            .arg(&self.file)
            .args(["-t", self.table])
            .args(args)
            .output()
            .expect("ebtables-legacy");
        assert!(out.status.success(), "ebtables-legacy {args:?}: {out:?}");
        let now = self.read();
        let changes = ebt::diff(self.prev.as_ref(), Some(&now));
        self.prev = Some(now);
        changes
            .into_iter()
            .map(|c| (c.op, c.chain, c.rule, c.position, c.detail))
            .collect()
    }
}

impl Drop for Atomic {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const FILTER: &[(u32, &str)] = &[(1, "INPUT"), (2, "FORWARD"), (3, "OUTPUT")];
const NAT: &[(u32, &str)] = &[(0, "PREROUTING"), (3, "OUTPUT"), (4, "POSTROUTING")];
const BROUTE: &[(u32, &str)] = &[(5, "BROUTING")];

/// Rules of the common matches and targets, each rendered as ebtables-legacy-save prints it
/// and reported as one rule_add.
#[test]
fn ebtables_legacy_rules_render_like_save() {
    if let Some(why) = ebt_skip_reason() {
        test_support::skip(format_args!("{why}"));
        return;
    }
    let mut t = Atomic::new("render", "filter", FILTER);
    let s = |x: &str| Some(x.to_string());
    assert_eq!(
        t.step(&["-N", "FOO", "-P", "DROP"]),
        vec![(Op::ChainCreate, s("FOO"), None, None, None)]
    );
    let rules: &[(&str, &str)] = &[
        ("FORWARD", "-p IPv4 -s 0:1:2:3:4:5 -i eth0 --ip-src 10.0.0.1 -j DROP"),
        ("FORWARD", "-p ! IPv6 -d ! Multicast -o veth+ -j ACCEPT"),
        ("FORWARD", "-d Broadcast --logical-in br0 --logical-out ! br1 -j CONTINUE"),
        ("FORWARD", "-s ! Unicast -d BGA -j CONTINUE"),
        ("FORWARD", "-p 802_1Q --vlan-id 10 --vlan-prio 2 --vlan-encap IPv4 -j CONTINUE"),
        ("FORWARD", "-p IPv4 --ip-dst 192.168.0.0/16 --ip-tos 0x10 --ip-proto tcp --ip-sport ! 1024 --ip-dport 22:80 -j FOO"),
        ("FORWARD", "-p IPv6 --ip6-src 2001:db8::/64 --ip6-proto udp --ip6-dport 53 -j ACCEPT"),
        ("FORWARD", "--mark 0x10/0xff -j mark --mark-set 0x5 --mark-target ACCEPT"),
        ("FORWARD", "--mark ! 0x3 -j ACCEPT"),
        ("FORWARD", "--pkttype-type ! multicast -j ACCEPT"),
        ("FORWARD", "--limit 10/min --limit-burst 3 -j ACCEPT"),
        ("FORWARD", "-p Length -j ACCEPT"),
        ("FORWARD", "-p 0x1234 -j ACCEPT"),
        ("INPUT", "-j mark --mark-or 0x4 --mark-target CONTINUE"),
        ("FOO", "-s 0:1:2:0:0:0/ff:ff:ff:0:0:0 -j RETURN"),
        ("OUTPUT", "-p IPv4 --ip-src ! 10.0.0.0/8 -j ACCEPT"),
    ];
    for &(chain, rule) in rules {
        let mut args = vec!["-A", chain];
        args.extend(shell_words(rule));
        let got = t.step(&args);
        let want = vec![(Op::RuleAdd, s(chain), s(rule), None, None)];
        let got_np: Vec<Seen> = got
            .into_iter()
            .map(|(o, c, r, _, d)| (o, c, r, None, d))
            .collect();
        assert_eq!(got_np, want, "{rule}");
    }
}

/// Cases the suite does not hold, each checked by [`Atomic::read`] against the save script: the
/// ulog watcher, IGMP types (whose number runs into the next option), ICMP types without a name,
/// odd masks, protocol 0, ARP opcodes past the names, and the stp names and blanks.
#[test]
fn ebtables_legacy_edge_cases_render_like_save() {
    if let Some(why) = ebt_skip_reason() {
        test_support::skip(format_args!("{why}"));
        return;
    }
    let mut t = Atomic::new("edges", "filter", FILTER);
    for rule in [
        "--ulog",
        "--ulog-prefix x --ulog-nlgroup 3 --ulog-cprange 5 --ulog-qthreshold 2",
        "--log-prefix a_b --log-level 7 --log-arp --nflog-group 0 --nflog-threshold 3",
        "--nflog-prefix p --nflog-range 7 --log",
        "-p IPv4 --ip-proto igmp --ip-igmp-type membership-report-v3",
        "-p IPv4 --ip-proto igmp --ip-igmp-type ! 1:3 -j DROP",
        "-p IPv4 --ip-proto igmp --ip-igmp-type 9",
        "-p IPv4 --ip-proto icmp --ip-icmp-type 3/1:2",
        "-p IPv4 --ip-proto icmp --ip-icmp-type 200",
        "-p IPv4 --ip-proto icmp --ip-icmp-type port-unreachable",
        "-p IPv4 --ip-src 0.0.0.0/0 --ip-dst 1.2.3.4/1 --ip-proto 0",
        "-p IPv6 --ip6-src ::ffff:1.2.3.4/96 --ip6-dst ::1.2.3.4/127",
        "-p IPv6 --ip6-dst ::/0 --ip6-proto ipv6-icmp --ip6-icmp-type 1:3/2",
        "-p IPv6 --ip6-proto ipv6-icmp --ip6-icmp-type 200/2:3",
        "-p IPv6 --ip6-proto ipv6-icmp --ip6-icmp-type port-unreachable",
        "-p ARP --arp-op 12 --arp-htype 6 --arp-ptype IPv4 --arp-ip-dst 1.2.3.4/0",
        "-p RARP --arp-op Reply_Reverse --arp-mac-dst 1:0:0:0:0:0/1:0:0:0:0:0",
        "-d BGA --stp-type 0 --stp-flags 0x80 --stp-root-cost 2: --stp-forward-delay ! 3",
        "-d BGA --stp-type tcn --stp-flags 3 --stp-root-addr 1:80:c2:0:0:0",
        "-p Length --802_3-type 0x0800",
        "--among-dst 0:0:0:0:0:2=10.0.0.2,0:0:0:0:0:1 --among-src ! 0:0:0:0:0:3 --mark 1",
    ] {
        let mut args = vec!["-A", "INPUT"];
        args.extend(shell_words(rule));
        let got = t.step(&args);
        assert_eq!(got.len(), 1, "{rule}: {got:#?}");
        assert!(
            !got[0].2.as_deref().unwrap_or("").contains("[data 0x"),
            "{rule}: {got:?}"
        );
    }
}

/// The words of a rule (the rules here have no quoted words).
fn shell_words(s: &str) -> Vec<&str> {
    s.split(' ').filter(|w| !w.is_empty()).collect()
}

/// The built-in chains of a bridge table: hook number and name.
type Hooks = &'static [(u32, &'static str)];

/// A bridge table's name and built-in chains, by name.
fn bridge_table(table: &str) -> Option<(&'static str, Hooks)> {
    Some(match table {
        "filter" => ("filter", FILTER),
        "nat" => ("nat", NAT),
        "broute" => ("broute", BROUTE),
        _ => return None,
    })
}

/// A suite file's text with every rule line's result set to OK, and the numbers of the lines
/// the suite expects to fail: whether a line is refused is ebtables-legacy's to say (the result
/// column is written for ebtables-nft, which refuses and accepts other lines).
fn every_rule_line(text: &str) -> (String, Vec<usize>) {
    let mut failing = Vec::new();
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_end();
        let directive = t.is_empty() || t.starts_with(['#', ':', '*', '@', '%']);
        let fields: Vec<&str> = t.split(';').collect();
        if directive || fields.len() < 3 {
            out.push_str(line);
        } else {
            if fields[2].trim() != "OK" {
                failing.push(i + 1);
            }
            out.push_str(&format!("{};{};OK", fields[0], fields[1]));
        }
        out.push('\n');
    }
    (out, failing)
}

/// One table of a suite file, as an atomic file, with a user chain for the rules that
/// ebtables-legacy takes only there.
struct SuiteTable {
    atomic: Atomic,
    user_chain: bool,
}

/// Append `words` to `chain` of the atomic file; the tool's complaint when it refuses.
fn ebt_append(a: &Atomic, chain: &str, words: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new("ebtables-legacy")
        .arg("--atomic-file")
        .arg(&a.file)
        .args(["-t", a.table, "-A", chain])
        .args(words)
        .output()
        .expect("ebtables-legacy");
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(super::suite::reason(&err))
    }
}

/// Upstream's ebtables extension tests (`testdata/suite/libebt_*.t`): every rule line that
/// ebtables-legacy accepts is appended to its table and chain of an atomic file, and observer's
/// text of every rule is compared with what `ebtables-legacy-save` prints for it. The files are
/// read with the iptables suite's parser (`:CHAIN`, `*table`, `rule;save;result`), each rule
/// going to the first chain listed. The result column is ebtables-nft's, so every rule line is
/// tried, whatever it says: the lines ebtables-legacy refuses are counted and left out. Two
/// refusals that only concern where ebtables-legacy takes a rule are met by moving it: an `stp`
/// rule (which ebtables-legacy takes only for the bridge group address) gets `-d BGA`, and a
/// RETURN (a target's RETURN verdict) goes to a user chain.
#[test]
fn ebtables_suite_rules_render_like_save() {
    if let Some(why) = ebt_skip_reason() {
        test_support::skip(format_args!("{why}"));
        return;
    }
    use super::suite::{self, Step, Tally, Variant};
    let dir = suite::suite_dir();
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("the suite's directory")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("libebt_") && n.ends_with(".t"))
        .collect();
    files.sort();
    assert!(files.len() >= 15, "only {} libebt_*.t files", files.len());
    let mut tally = Tally::default();
    let (mut moved, mut failing_taken) = (Vec::new(), Vec::new());
    for file in &files {
        let text = std::fs::read_to_string(dir.join(file)).expect("read a .t file");
        let (text, failing) = every_rule_line(&text);
        let mut tables: Vec<SuiteTable> = Vec::new();
        let stem = file.trim_end_matches(".t");
        // The family only scopes `-4`/`-6` lines, which ebtables files have none of.
        for step in suite::parse(&text, XtProto::Ipv4, Variant::Legacy) {
            let r = match step {
                Step::Rule(r) => r,
                Step::Command(words) => {
                    tally.refused.push(format!(
                        "{file}: command `{}` not replayed",
                        words.join(" ")
                    ));
                    continue;
                }
            };
            let label = format!(
                "{file}:{} -t {} -A {} {}",
                r.lineno, r.table, r.chain, r.text
            );
            let Some((table, hooks)) = bridge_table(&r.table) else {
                tally
                    .refused
                    .push(format!("{label}\n    no such bridge table"));
                continue;
            };
            let t = match tables.iter().position(|t| t.atomic.table == table) {
                Some(i) => &mut tables[i],
                None => {
                    tables.push(SuiteTable {
                        atomic: Atomic::new(&format!("suite-{stem}"), table, hooks),
                        user_chain: false,
                    });
                    tables.last_mut().expect("just pushed")
                }
            };
            let words: Vec<&str> = r.text.split_whitespace().collect();
            let mut result = ebt_append(&t.atomic, &r.chain, &words);
            if let Err(e) = &result {
                let with_bga = [&["-d", "BGA"][..], &words].concat();
                let retry = if e.contains("bridge group address (BGA)") {
                    Some((r.chain.as_str(), with_bga, "with -d BGA"))
                } else if e.contains("user defined chains") || e.contains("RETURN not allowed") {
                    if !t.user_chain {
                        let out = std::process::Command::new("ebtables-legacy")
                            .arg("--atomic-file")
                            .arg(&t.atomic.file)
                            .args(["-t", t.atomic.table, "-N", "SUITE"])
                            .output()
                            .expect("ebtables-legacy");
                        assert!(out.status.success(), "ebtables-legacy -N SUITE: {out:?}");
                        t.user_chain = true;
                    }
                    Some(("SUITE", words.clone(), "in a user chain"))
                } else {
                    None
                };
                if let Some((chain, words, how)) = retry {
                    result = ebt_append(&t.atomic, chain, &words);
                    if result.is_ok() {
                        moved.push(format!("{label} ({how})"));
                    }
                }
            }
            match result {
                Ok(()) => {
                    tally.accepted += 1;
                    if failing.contains(&r.lineno) {
                        failing_taken.push(label);
                    }
                }
                Err(e) => {
                    let ok = if failing.contains(&r.lineno) {
                        "FAIL"
                    } else {
                        "OK"
                    };
                    tally
                        .refused
                        .push(format!("{label} (suite: {ok})\n    {e}"));
                }
            }
        }
        for t in &tables {
            let a = &t.atomic;
            let b = std::fs::read(&a.file).expect("read atomic file");
            let ours = ebt::decode_atomic(&b).unwrap_or_else(|e| panic!("{file} {}: {e}", a.table));
            let rules = |lines: Vec<String>| -> Vec<String> {
                lines.into_iter().filter(|l| l.starts_with("-A ")).collect()
            };
            let want = rules(legacy_save(&a.file, a.table));
            let got = rules(ours.save_lines());
            tally.compare(&want, &got, &format!("{file} -t {}", a.table));
        }
    }
    let suite_ok_refused = tally
        .refused
        .iter()
        .filter(|r| r.contains("(suite: OK)"))
        .count();
    println!(
        "refused by ebtables-legacy ({}, {suite_ok_refused} of them marked OK in the suite):",
        tally.refused.len()
    );
    for r in &tally.refused {
        println!("  {r}");
    }
    println!("taken after a move ({}):", moved.len());
    for m in &moved {
        println!("  {m}");
    }
    println!(
        "taken although the suite marks them FAIL ({}):",
        failing_taken.len()
    );
    for f in &failing_taken {
        println!("  {f}");
    }
    println!("different ({}):", tally.different.len());
    for d in &tally.different {
        println!("  {d}");
    }
    println!(
        "{} of {} identical ({} suite lines accepted, {} refused)",
        tally.identical,
        tally.compared,
        tally.accepted,
        tally.refused.len()
    );
    assert_eq!(tally.compared, tally.accepted, "a rule went missing");
    assert!(
        tally.compared > 200,
        "only {} rules compared",
        tally.compared
    );
    assert!(
        tally.different.is_empty(),
        "{} of {} rules differ from ebtables-legacy-save",
        tally.different.len(),
        tally.compared
    );
}

/// Chain and rule level changes: add and delete chains, append, insert and delete rules, flush,
/// policy; in filter, nat (with its targets) and broute.
#[test]
fn ebtables_legacy_changes() {
    if let Some(why) = ebt_skip_reason() {
        test_support::skip(format_args!("{why}"));
        return;
    }
    let s = |x: &str| Some(x.to_string());
    let mut t = Atomic::new("changes", "filter", FILTER);
    assert_eq!(
        t.step(&["-N", "USER"]),
        vec![(Op::ChainCreate, s("USER"), None, None, None)]
    );
    assert_eq!(
        t.step(&["-A", "INPUT", "-j", "USER"]),
        vec![(Op::RuleAdd, s("INPUT"), s("-j USER"), Some(0), None)]
    );
    assert_eq!(
        t.step(&["-I", "INPUT", "1", "-p", "ARP", "-j", "DROP"]),
        vec![(Op::RuleAdd, s("INPUT"), s("-p ARP -j DROP"), Some(0), None)]
    );
    assert_eq!(
        t.step(&["-D", "INPUT", "1"]),
        vec![(
            Op::RuleDelete,
            s("INPUT"),
            s("-p ARP -j DROP"),
            Some(0),
            None
        )]
    );
    assert_eq!(
        t.step(&["-P", "FORWARD", "DROP"]),
        vec![(
            Op::ChainUpdate,
            s("FORWARD"),
            None,
            None,
            s("policy ACCEPT -> DROP")
        )]
    );
    t.step(&["-A", "USER", "-i", "eth0", "-j", "ACCEPT"]);
    t.step(&["-A", "USER", "-i", "eth1", "-j", "ACCEPT"]);
    assert_eq!(
        t.step(&["-F", "USER"]),
        vec![(Op::ChainFlush, s("USER"), None, None, s("2 rules deleted"))]
    );
    t.step(&["-D", "INPUT", "-j", "USER"]);
    assert_eq!(
        t.step(&["-X", "USER"]),
        vec![(Op::ChainDelete, s("USER"), None, None, None)]
    );

    let mut n = Atomic::new("changes", "nat", NAT);
    for (chain, rule) in [
        (
            "PREROUTING",
            "-d 0:1:2:3:4:5 -j dnat --to-dst 0:1:2:3:4:6 --dnat-target ACCEPT",
        ),
        (
            "POSTROUTING",
            "-j snat --to-src 0:1:2:3:4:7 --snat-arp --snat-target CONTINUE",
        ),
        ("PREROUTING", "-j redirect --redirect-target DROP"),
        (
            "PREROUTING",
            "-p ARP -j arpreply --arpreply-mac 0:1:2:3:4:5",
        ),
    ] {
        let mut args = vec!["-A", chain];
        args.extend(shell_words(rule));
        let got = n.step(&args);
        assert_eq!(got.len(), 1, "{rule}: {got:#?}");
        assert_eq!((got[0].0, got[0].1.as_deref()), (Op::RuleAdd, Some(chain)));
    }

    let mut b = Atomic::new("changes", "broute", BROUTE);
    assert_eq!(
        b.step(&["-A", "BROUTING", "-p", "IPv4", "-j", "DROP"]),
        vec![(
            Op::RuleAdd,
            s("BROUTING"),
            s("-p IPv4 -j DROP"),
            Some(0),
            None
        )]
    );
}

/// Every truncation of a real table's blob, and a few corruptions, give an error and never a
/// panic.
#[test]
fn truncated_ebtables_blob_is_an_error() {
    // A hand-built filter table with one rule: INPUT `-j DROP` (standard target, verdict -2).
    let mut blob = empty_table("filter", FILTER);
    let mut rule = vec![0u8; 112];
    rule[0..4].copy_from_slice(&(0x01u32 | 0x02).to_ne_bytes()); // entry, no protocol
    rule[100..104].copy_from_slice(&112u32.to_ne_bytes());
    rule[104..108].copy_from_slice(&112u32.to_ne_bytes());
    rule[108..112].copy_from_slice(&(112u32 + 48).to_ne_bytes());
    let mut target = vec![0u8; 48];
    target[..8].copy_from_slice(b"standard");
    target[32..36].copy_from_slice(&8u32.to_ne_bytes());
    target[40..44].copy_from_slice(&(-2i32).to_ne_bytes());
    rule.extend(target);
    // INPUT is the first chain: its rule goes right after its head, which now counts one rule.
    blob[REPLACE_LEN + 44..REPLACE_LEN + 48].copy_from_slice(&1u32.to_ne_bytes());
    let mut full = blob[..REPLACE_LEN + 48].to_vec();
    full.extend(&rule);
    full.extend(&blob[REPLACE_LEN + 48..]);
    let size = (full.len() - REPLACE_LEN) as u32;
    full[36..40].copy_from_slice(&1u32.to_ne_bytes());
    full[40..44].copy_from_slice(&size.to_ne_bytes());
    let t = ebt::decode_atomic(&full).expect("the whole blob decodes");
    assert_eq!(t.chains[0].rules[0].text, "-j DROP");
    for len in 0..full.len() {
        let mut cut = full[..len].to_vec();
        if len >= REPLACE_LEN {
            cut[40..44].copy_from_slice(&((len - REPLACE_LEN) as u32).to_ne_bytes());
        }
        let e = ebt::decode_atomic(&cut);
        assert!(
            matches!(e, Err(XtError::Malformed { .. })),
            "{len} bytes: {e:?}"
        );
    }
    // A target size that runs past the entry, and a next_offset past the end.
    let mut bad = full.clone();
    let tsize = REPLACE_LEN + 48 + 112 + 32;
    bad[tsize..tsize + 4].copy_from_slice(&4096u32.to_ne_bytes());
    assert!(ebt::decode_atomic(&bad).is_err());
    let mut bad = full.clone();
    let next = REPLACE_LEN + 48 + 108;
    bad[next..next + 4].copy_from_slice(&u32::MAX.to_ne_bytes());
    let e = ebt::decode_atomic(&bad).unwrap_err();
    assert!(e.to_string().contains("next_offset"), "{e}");
}

/// The kernel's side: real ebtables-legacy in a throw-away netns, the table read back through
/// `EBT_SO_GET_ENTRIES` from a thread inside it, equal to `ebtables-legacy-save` and diffed at
/// chain and rule level. Needs root and a kernel with legacy ebtables
/// (`CONFIG_BRIDGE_NF_EBTABLES_LEGACY`); without them it skips, and fails under CI. The CI
/// machines' own kernel has none, so it runs in the guests of `cargo xtask vm-test` (their
/// Debian kernels have it), under `CI=true`.
#[test]
#[ignore = "needs a kernel with legacy ebtables: runs in the guests of `cargo xtask vm-test`"]
fn live_ebtables_legacy_read_back() {
    if let Some(why) = ebt_skip_reason().or_else(|| test_support::skip_reason(&["ip"])) {
        test_support::skip(format_args!("{why}"));
        return;
    }
    let ns = live::Netns::add(format!("obs-ebt-live-{}", std::process::id())).expect("netns");
    if let Err(e) = ns.run("ebtables-legacy", &["-t", "filter", "-L"]) {
        test_support::skip(format_args!("the kernel has no legacy ebtables: {e}"));
        return;
    }
    let legacy = super::arp_live::which("ebtables-legacy");
    let read = || {
        ns.enter(|| {
            let socks = crate::xtables::XtSockets::open()?;
            ebt::read_table(socks.inet(), "filter")
        })
        .expect("thread")
        .expect("read")
    };
    let s = |x: &str| Some(x.to_string());
    let mut prev = read();
    let mut step = |args: &[&str]| -> Vec<Seen> {
        ns.run("ebtables-legacy", args)
            .unwrap_or_else(|e| panic!("ebtables-legacy {args:?}: {e}"));
        let now = read();
        let want = save_with(&legacy, "filter", ns.command("perl"));
        assert_eq!(now.save_lines(), want, "after {args:?}");
        let mut out = ebt::diff(Some(&prev), Some(&now));
        // As the engine does: the command line tells a flush from the delete of a last rule.
        let argv: Vec<String> = std::iter::once("ebtables-legacy")
            .chain(args.iter().copied())
            .map(String::from)
            .collect();
        crate::ruleset::settle_flushes(&mut out, &crate::ruleset::FlushEvidence::from_args(&argv));
        prev = now;
        out.into_iter()
            .map(|c| (c.op, c.chain, c.rule, c.position, c.detail))
            .collect()
    };
    assert_eq!(
        step(&["-N", "FOO"]),
        vec![(Op::ChainCreate, s("FOO"), None, None, None)]
    );
    let rule = "-p IPv4 -i eth0 --ip-src 10.0.0.1 -j FOO";
    let mut args = vec!["-A", "FORWARD"];
    args.extend(shell_words(rule));
    assert_eq!(
        step(&args),
        vec![(Op::RuleAdd, s("FORWARD"), s(rule), Some(0), None)]
    );
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
    assert_eq!(
        step(&["-D", "FORWARD", "1"]),
        vec![(
            Op::RuleDelete,
            s("FORWARD"),
            s(rule),
            None,
            s("the chain's only rule")
        )]
    );
    step(&args);
    assert_eq!(
        step(&["-F", "FORWARD"]),
        vec![(
            Op::ChainFlush,
            s("FORWARD"),
            None,
            None,
            s("1 rule deleted")
        )]
    );
    assert_eq!(
        step(&["-X", "FOO"]),
        vec![(Op::ChainDelete, s("FOO"), None, None, None)]
    );
}
