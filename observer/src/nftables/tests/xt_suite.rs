//! iptables' own extension tests (`xtables/testdata/suite/*.t`, iptables 1.8.11) replayed through
//! iptables-nft: every line marked OK for the nft variant is added with `iptables-nft-restore` /
//! `ip6tables-nft-restore` in a throw-away namespace (one per file and family), the ruleset is
//! dumped over netlink as the daemon dumps it, and observer's iptables-nft-save text of every
//! rule (`xt_syntax`) is compared with the line the installed `*-nft-save` prints for it. The
//! tool is the ground truth, not the `.t` file's expected text.
//!
//! The files are read by the legacy suite's parser (`xtables::tests::suite`) with the nft
//! variant's result column. It prints `N of M identical`, the refusals grouped by the tool's
//! reason, and the differences grouped by extension (the full list goes to a file in the
//! temporary directory). Under `CI=true` it fails when fewer rules are identical than the floor
//! in `testdata/xt_suite_floor.txt`: raise the floor as the renderer improves.

use std::collections::BTreeMap;

use crate::nftables::ifnames::{self, IfNames};
use crate::nftables::socket;
use crate::nftables::state::NftState;
use crate::nftables::xt_syntax::XtText;
use crate::xtables::tests::live::Netns;
use crate::xtables::tests::suite::{
    add, families, family_name, parse, reason, suite_dir, suite_files, tool, Rule, Step, Tally,
    Variant,
};
use crate::xtables::XtProto;

const FLOOR: &str = include_str!("../testdata/xt_suite_floor.txt");
const NFT: Variant = Variant::Nft;

/// A save line with its counters taken out (`[p:b] ` before it, `-c p b` in it).
fn strip_counters(line: &str) -> String {
    let line = match line.strip_prefix('[') {
        Some(rest) => rest.split_once("] ").map_or(line, |(_, r)| r),
        None => line,
    };
    let words: Vec<&str> = line.split(' ').collect();
    let mut out = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        if words[i] == "-c" && i + 2 < words.len() {
            i += 3;
            continue;
        }
        out.push(words[i]);
        i += 1;
    }
    out.join(" ")
}

/// The extension a `.t` file tests: `libxt_tcp.t` is `tcp`.
fn extension(file: &str) -> &str {
    let stem = file.strip_suffix(".t").unwrap_or(file);
    ["libxt_", "libipt_", "libip6t_"]
        .iter()
        .find_map(|p| stem.strip_prefix(p))
        .unwrap_or(stem)
}

/// observer's line for a rule of an iptables-nft chain.
fn observer_line(chain: &str, text: &str, xt: Option<&XtText>) -> String {
    match xt {
        Some(XtText::Saved(s)) if s.is_empty() => format!("-A {chain}"),
        Some(XtText::Saved(s)) => format!("-A {chain} {s}"),
        Some(XtText::Unreadable(why)) => format!("(unreadable: {why}) {text}"),
        None => format!("(not iptables-nft's) {text}"),
    }
}

/// Replay one file for one family and compare every rule line of the tables it touched.
fn replay(file: &str, proto: XtProto, tally: &mut Tally) {
    let text = std::fs::read_to_string(suite_dir().join(file)).expect("read a .t file");
    let ns = Netns::add(format!("obs-xtnft-{}", std::process::id())).expect("netns");
    let mut tables: Vec<String> = Vec::new();
    let mut batch: Vec<Rule> = Vec::new();
    for step in parse(&text, proto, NFT) {
        match step {
            Step::Rule(r) => {
                if batch.first().is_some_and(|b| b.table != r.table) {
                    add(&ns, (proto, NFT), file, &mut batch, tally);
                }
                if !tables.contains(&r.table) {
                    tables.push(r.table.clone());
                }
                batch.push(r);
            }
            Step::Command(words) => {
                add(&ns, (proto, NFT), file, &mut batch, tally);
                let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
                if let Err(e) = ns.run(&words[0], &args) {
                    tally.refused.push(format!(
                        "{file}: ({}) command `{}`\n    {}",
                        family_name(proto),
                        words.join(" "),
                        reason(&e.to_string())
                    ));
                }
            }
        }
    }
    add(&ns, (proto, NFT), file, &mut batch, tally);
    let req = ns
        .enter(socket::request_socket)
        .expect("thread")
        .expect("request socket");
    let mut names = Some(
        ns.enter(|| IfNames::open().expect("NETLINK_ROUTE socket"))
            .expect("thread"),
    );
    let dump = socket::dump_on(&req).expect("dump");
    let st = ifnames::scope(&mut names, || NftState::from_dump(&dump));
    let family = if proto == XtProto::Ipv6 { 10 } else { 2 };
    for table in tables {
        let saved = ns
            .run(&tool(proto, NFT, "-save"), &["-t", &table])
            .expect("save");
        // The save's rules per chain, in order.
        let mut want: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for l in saved.lines().map(strip_counters) {
            if let Some(rest) = l.strip_prefix("-A ") {
                let chain = rest.split(' ').next().unwrap_or_default().to_string();
                want.entry(chain).or_default().push(l);
            }
        }
        let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
        if let Some(t) = st.table(family, &table) {
            for (name, c) in &t.chains {
                let lines = c
                    .rules
                    .iter()
                    .map(|r| observer_line(name, &r.text, r.xt.as_deref()))
                    .collect();
                got.insert(name.clone(), lines);
            }
        }
        let label = format!(
            "{} {file} ({}) -t {table}",
            extension(file),
            family_name(proto)
        );
        for (chain, w) in &want {
            let g = got.remove(chain).unwrap_or_default();
            tally.compare(w, &g, &label);
        }
        for (chain, g) in got {
            for l in g {
                tally.different.push(format!(
                    "{label}\n    save:     (none in {chain})\n    observer: {l}"
                ));
            }
        }
    }
}

#[test]
fn the_rules_of_iptables_extension_tests_through_iptables_nft_render_as_iptables_nft_save_prints_them(
) {
    let Some(files) = suite_files(NFT) else {
        return;
    };
    let mut tally = Tally::default();
    for file in &files {
        for &proto in families(file) {
            replay(file, proto, &mut tally);
        }
    }
    let floor: usize = FLOOR
        .trim()
        .parse()
        .expect("xt_suite_floor.txt holds a number");
    // Refusals by the tool's reason (the last line of each entry).
    let mut by_why: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in &tally.refused {
        let (what, why) = r.rsplit_once("\n    ").unwrap_or((r, ""));
        by_why.entry(why).or_default().push(what);
    }
    println!("refused by the tool or the kernel: {}", tally.refused.len());
    let mut whys: Vec<_> = by_why.into_iter().collect();
    whys.sort_by_key(|(w, v)| (std::cmp::Reverse(v.len()), w.to_string()));
    for (why, whats) in &whys {
        println!("  {:4} {why}", whats.len());
        for w in whats.iter().take(3) {
            println!("         {w}");
        }
    }
    let mut by_ext: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for d in &tally.different {
        let (ext, rest) = d.split_once(' ').unwrap_or(("?", d));
        by_ext.entry(ext).or_default().push(rest);
    }
    let mut exts: Vec<_> = by_ext.into_iter().collect();
    exts.sort_by_key(|(e, v)| (std::cmp::Reverse(v.len()), e.to_string()));
    println!("different by extension: {}", tally.different.len());
    for (ext, ds) in &exts {
        println!("  {:4} {ext}", ds.len());
        for d in ds.iter().take(3) {
            println!("       {}", d.replace('\n', "\n       "));
        }
    }
    let full = std::env::temp_dir().join("observer-xt-nft-suite-differences.txt");
    let _ = std::fs::write(&full, tally.different.join("\n"));
    println!("every difference: {}", full.display());
    println!(
        "iptables 1.8.11 suite through iptables-nft: {} of {} identical ({:.1} %; {} suite lines \
         accepted; floor {floor})",
        tally.identical,
        tally.compared,
        100.0 * tally.identical as f64 / tally.compared.max(1) as f64,
        tally.accepted,
    );
    assert!(
        tally.compared > 900,
        "only {} rules compared",
        tally.compared
    );
    if test_support::in_ci() {
        assert!(
            tally.identical >= floor,
            "{} identical, below the floor of {floor} (testdata/xt_suite_floor.txt)",
            tally.identical
        );
    }
}
