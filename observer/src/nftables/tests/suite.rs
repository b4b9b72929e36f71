//! nftables' own test suite (`testdata/suite`, nftables 1.0.6's `tests/py/**/*.t`) as a test:
//! every `ok` rule is added with the installed `nft` in a throw-away namespace, in the base
//! chains the file declares (as upstream's `nft-test.py` does), and observer's text for each
//! rule is compared with that rule in `nft -a list ruleset` (counter values aside). The
//! installed nft is the ground truth, not the file's expected text.
//!
//! It prints `N of M identical`, what nft or the kernel refused and why, and the differences
//! grouped by kind and by file (the full list goes to a file in the temporary directory). Under
//! `CI=true` it fails when fewer rules are identical than the floor in `testdata/suite_floor.txt`:
//! raise the floor as the renderer improves, so that a regression fails.

use std::collections::BTreeMap;
use std::path::Path;

use super::suite_load::{load, parse, SuiteRule};
use crate::nftables::ifnames;
use crate::nftables::socket;
use crate::nftables::state::NftState;
use observer_rules::nftables::testing::{nfproto, nft_rules, strip_counters};

use super::netns::{root_skip_reason, Netns};

const SUITE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/nftables/testdata/suite");
const FLOOR: &str = include_str!("../testdata/suite_floor.txt");

/// One accepted rule's comparison.
struct Outcome {
    rule: SuiteRule,
    want: String,
    got: String,
}

fn suite_files() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(SUITE)
        .expect("suite directory")
        .flatten()
        .filter(|e| e.path().is_dir())
        .collect();
    dirs.sort_by_key(|e| e.file_name());
    for d in dirs {
        let mut files: Vec<_> = std::fs::read_dir(d.path())
            .expect("family directory")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "t"))
            .collect();
        files.sort();
        for f in files {
            let rel = f.strip_prefix(SUITE).unwrap_or(&f).display().to_string();
            out.push((rel, std::fs::read_to_string(&f).expect("read .t file")));
        }
    }
    out
}

/// Load one file in a namespace of its own and compare every accepted rule.
fn run_file(origin: &str, text: &str, refused: &mut Vec<(String, String)>) -> Vec<Outcome> {
    let file = parse(origin, text);
    if file.rules.is_empty() {
        return Vec::new();
    }
    let tag = origin.replace(['/', '.'], "-");
    let ns = Netns::new(&format!("s-{}", &tag[..tag.len().min(12)]));
    let loaded = load(&ns, &tag, &file);
    for (i, why) in &loaded.refused {
        let r = &file.rules[*i];
        refused.push((
            why.clone(),
            format!("{} {}: {}", r.origin, r.family, r.text),
        ));
    }
    for (cmd, why) in &loaded.setup_refused {
        refused.push((why.clone(), format!("{origin} setup: {cmd}")));
    }
    let listing = ns.sh("nft -a list ruleset");
    let (_notify, req) = ns.sockets().expect("sockets");
    let mut names = Some(ns.ifnames());
    let dump = socket::dump_on(&req).expect("dump");
    let st = ifnames::scope(&mut names, || NftState::from_dump(&dump));
    // nft's rules per chain, in order; the accepted rules of each chain, in the order added.
    let mut listed: BTreeMap<(String, String, String), Vec<(u64, String)>> = BTreeMap::new();
    for ((fam, table, chain, handle), text) in nft_rules(&listing) {
        listed
            .entry((fam, table, chain))
            .or_default()
            .push((handle, text));
    }
    let mut added: BTreeMap<(String, String, String), Vec<usize>> = BTreeMap::new();
    for &i in &loaded.accepted {
        let r = &file.rules[i];
        let key = (r.family.clone(), r.table.clone(), r.chain.clone());
        added.entry(key).or_default().push(i);
    }
    let mut out = Vec::new();
    for (key, rules) in added {
        let nft = listed.remove(&key).unwrap_or_default();
        let chain = st.chain(nfproto(&key.0), &key.1, &key.2);
        for (n, i) in rules.into_iter().enumerate() {
            let (want, got) = match nft.get(n) {
                Some((handle, text)) => (
                    strip_counters(text),
                    chain
                        .and_then(|c| c.rules.iter().find(|r| r.handle == *handle))
                        .map(|r| r.text.to_string())
                        .unwrap_or_else(|| "<missing>".into()),
                ),
                None => ("<not listed>".into(), String::new()),
            };
            out.push(Outcome {
                rule: file.rules[i].clone(),
                want,
                got,
            });
        }
    }
    out
}

/// What kind of difference: nft's words where observer's text starts to differ.
fn kind(want: &str, got: &str) -> String {
    let (w, g): (Vec<&str>, Vec<&str>) = (want.split(' ').collect(), got.split(' ').collect());
    let p = w.iter().zip(&g).take_while(|(a, b)| a == b).count();
    let from = p.saturating_sub(1);
    w.get(from..(p + 1).min(w.len()))
        .unwrap_or_default()
        .join(" ")
}

#[test]
fn nftables_suite_renders_as_nft_lists_it() {
    if let Some(reason) = root_skip_reason() {
        test_support::skip(format_args!("{reason}"));
        return;
    }
    let files = suite_files();
    assert!(files.len() > 90, "only {} .t files found", files.len());
    let (mut outcomes, mut refused) = (Vec::new(), Vec::new());
    for (origin, text) in &files {
        outcomes.extend(run_file(origin, text, &mut refused));
    }
    let same = outcomes.iter().filter(|o| o.want == o.got).count();
    let floor: usize = FLOOR
        .trim()
        .parse()
        .expect("suite_floor.txt holds a number");
    let mut report = String::new();
    let mut by_why: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (why, what) in &refused {
        by_why.entry(why).or_default().push(what);
    }
    report += &format!("refused by nft or the kernel: {}\n", refused.len());
    for (why, whats) in &by_why {
        report += &format!("  {:4} {why}\n", whats.len());
        for w in whats.iter().take(3) {
            report += &format!("         {w}\n");
        }
    }
    let wrong: Vec<&Outcome> = outcomes.iter().filter(|o| o.want != o.got).collect();
    let mut by_kind: BTreeMap<String, Vec<&Outcome>> = BTreeMap::new();
    let mut by_file: BTreeMap<&str, usize> = BTreeMap::new();
    for o in &wrong {
        by_kind.entry(kind(&o.want, &o.got)).or_default().push(o);
        let file = o.rule.origin.split(':').next().unwrap_or_default();
        *by_file.entry(file).or_default() += 1;
    }
    let mut kinds: Vec<_> = by_kind.into_iter().collect();
    kinds.sort_by_key(|(k, v)| (std::cmp::Reverse(v.len()), k.clone()));
    report += "differences by kind (nft's words where observer's text departs):\n";
    for (k, v) in &kinds {
        let o = v[0];
        report += &format!(
            "  {:4} `{k}`  e.g. {}\n         nft: {}\n         got: {}\n",
            v.len(),
            o.rule.origin,
            o.want,
            o.got
        );
    }
    let mut files_wrong: Vec<_> = by_file.into_iter().collect();
    files_wrong.sort_by_key(|(f, n)| (std::cmp::Reverse(*n), f.to_string()));
    report += "differences by file:\n";
    for (f, n) in &files_wrong {
        report += &format!("  {n:4} {f}\n");
    }
    let full = std::env::temp_dir().join("observer-nft-suite-differences.txt");
    let detail: String = wrong
        .iter()
        .map(|o| {
            let r = &o.rule;
            let file = match &r.expected {
                Some(e) => format!(" (the file expects: {e})"),
                None => String::new(),
            };
            format!(
                "{} {} {} {}\n  rule: {}{file}\n  nft:  {}\n  got:  {}\n",
                r.origin, r.family, r.table, r.chain, r.text, o.want, o.got
            )
        })
        .collect();
    let _ = std::fs::write(&full, detail);
    println!("{report}");
    println!("every difference: {}", full.display());
    println!(
        "nftables 1.0.6 suite: {same} of {} identical ({:.1} %), floor {floor}",
        outcomes.len(),
        100.0 * same as f64 / outcomes.len().max(1) as f64
    );
    assert!(
        outcomes.len() > 4000,
        "only {} rules accepted",
        outcomes.len()
    );
    if test_support::in_ci() {
        assert!(
            same >= floor,
            "{same} of {} identical, below the floor of {floor} ({})",
            outcomes.len(),
            Path::new("testdata/suite_floor.txt").display()
        );
    }
}
