//! iptables' own extension tests (`testdata/suite/*.t`, iptables 1.8.11) replayed through the real
//! tools: every line marked OK for the legacy variant is added with `iptables-legacy-restore` /
//! `ip6tables-legacy-restore` in a throw-away namespace (one per file and family), the tables
//! are read back through the kernel, and observer's text of every rule is compared with the line
//! the installed `*-legacy-save` prints for it (the tool is the ground truth, not the `.t` file's
//! expected text).
//!
//! The files are read as upstream's `iptables-test.py` reads them: `:CHAIN,...`, `*table`,
//! `@cmd` / `%cmd`, `rule;save;OK|FAIL[;LEGACY|NFT[;other result]]`. `libxt_*` run as IPv4
//! and IPv6, `libipt_*` and `iptables.t` as IPv4, `libip6t_*` as IPv6; arptables and ebtables
//! files are left out. Each rule goes to the first chain of its `:` line (upstream adds it to
//! every chain listed; the text does not depend on the chain). Rules are added one batch per
//! table, and one by one when the tool refuses a batch, so that each refusal is listed with the
//! tool's reason.
//!
//! The test prints `N of M identical`, the refusals and every difference, and fails when fewer
//! rules than the floor in `testdata/suite.floor` are identical: raise the floor as printers are
//! added, so that a printer that breaks fails it.

use std::path::{Path, PathBuf};

use super::live::{run_stdin, Netns};
use super::*;

/// Which iptables the files are replayed through: the result column of a line depends on it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Variant {
    Legacy,
    Nft,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Legacy => "legacy",
            Variant::Nft => "nft",
        }
    }
}

/// One rule to add: its table, chain and text, and where it comes from.
pub(crate) struct Rule {
    pub(crate) table: String,
    pub(crate) chain: String,
    pub(crate) text: String,
    pub(crate) lineno: usize,
}

pub(crate) enum Step {
    Rule(Rule),
    /// An `@` or `%` line: a command run as is (`%`: with the variant's binary).
    Command(Vec<String>),
}

/// The result of a `;`-separated line for a variant: upstream's `variant_res` (a result scoped
/// to the other variant is inverted there, unless the line gives this variant's own).
fn variant_result(fields: &[&str], variant: Variant) -> Option<bool> {
    let res = fields.get(2)?.trim();
    let own = match variant {
        Variant::Legacy => "LEGACY",
        Variant::Nft => "NFT",
    };
    let ok = match fields.get(3).map(|v| v.trim()) {
        None | Some("") => res == "OK",
        Some(v) if v == own => res == "OK",
        Some(_) => match fields.get(4).map(|r| r.trim()) {
            Some(alt) => alt == "OK",
            None => res != "OK",
        },
    };
    Some(ok)
}

/// The steps of one `.t` file for one family and variant.
pub(crate) fn parse(text: &str, proto: XtProto, variant: Variant) -> Vec<Step> {
    let (mut table, mut chain) = ("filter".to_string(), None::<String>);
    let mut steps = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(chains) = line.strip_prefix(':') {
            chain = chains.split(',').next().map(str::to_string);
            continue;
        }
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
            continue;
        }
        if let Some(cmd) = line.strip_prefix('@').or_else(|| line.strip_prefix('%')) {
            let mut words: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
            if line.starts_with('%') && words.first().is_some_and(|w| w == "iptables") {
                words[0] = tool(proto, variant, "");
            }
            steps.push(Step::Command(words));
            continue;
        }
        let fields: Vec<&str> = line.split(';').collect();
        let (Some(chain), Some(true)) = (&chain, variant_result(&fields, variant)) else {
            continue;
        };
        let mut text = fields[0].trim();
        // iptables 1.8.10+ scope a line to one family with a leading -4 or -6.
        if let Some(rest) = text.strip_prefix("-4 ") {
            if proto != XtProto::Ipv4 {
                continue;
            }
            text = rest;
        } else if let Some(rest) = text.strip_prefix("-6 ") {
            if proto != XtProto::Ipv6 {
                continue;
            }
            text = rest;
        }
        steps.push(Step::Rule(Rule {
            table: table.clone(),
            chain: chain.clone(),
            text: text.to_string(),
            lineno: i + 1,
        }));
    }
    steps
}

pub(crate) fn tool(proto: XtProto, variant: Variant, suffix: &str) -> String {
    let v = variant.name();
    match proto {
        XtProto::Ipv6 => format!("ip6tables-{v}{suffix}"),
        _ => format!("iptables-{v}{suffix}"),
    }
}

pub(crate) fn families(file: &str) -> &'static [XtProto] {
    if file.starts_with("libxt_") {
        &[XtProto::Ipv4, XtProto::Ipv6]
    } else if file.starts_with("libipt_") || file == "iptables.t" {
        &[XtProto::Ipv4]
    } else if file.starts_with("libip6t_") {
        &[XtProto::Ipv6]
    } else {
        &[]
    }
}

pub(crate) fn family_name(proto: XtProto) -> &'static str {
    if proto == XtProto::Ipv6 {
        "ipv6"
    } else {
        "ipv4"
    }
}

/// The tool's complaint, on one line.
pub(crate) fn reason(err: &str) -> String {
    err.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Error occurred at line"))
        .collect::<Vec<_>>()
        .join(" / ")
}

#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) accepted: usize,
    pub(crate) compared: usize,
    pub(crate) identical: usize,
    pub(crate) refused: Vec<String>,
    pub(crate) different: Vec<String>,
}

/// Add a batch of rules of one table; one by one when the batch is refused.
pub(crate) fn add(
    ns: &Netns,
    (proto, variant): (XtProto, Variant),
    file: &str,
    batch: &mut Vec<Rule>,
    tally: &mut Tally,
) {
    let Some(first) = batch.first() else {
        return;
    };
    let restore = tool(proto, variant, "-restore");
    let input = |rules: &[Rule]| {
        let mut s = format!("*{}\n", first.table);
        for r in rules {
            s.push_str(&format!("-A {} {}\n", r.chain, r.text));
        }
        s.push_str("COMMIT\n");
        s
    };
    if run_stdin(ns, &restore, &["--noflush"], &input(batch)).is_ok() {
        tally.accepted += batch.len();
    } else {
        for r in batch.iter() {
            match run_stdin(
                ns,
                &restore,
                &["--noflush"],
                &input(std::slice::from_ref(r)),
            ) {
                Ok(()) => tally.accepted += 1,
                Err(e) => tally.refused.push(format!(
                    "{file}:{} ({}) -t {} -A {} {}\n    {}",
                    r.lineno,
                    family_name(proto),
                    r.table,
                    r.chain,
                    r.text,
                    reason(&e)
                )),
            }
        }
    }
    batch.clear();
}

/// Replay one file for one family and compare every rule line of the tables it touched.
fn replay(dir: &Path, file: &str, proto: XtProto, tally: &mut Tally) {
    let text = std::fs::read_to_string(dir.join(file)).expect("read a .t file");
    let ns = Netns::add(format!("obs-xt-suite-{}", std::process::id())).expect("netns");
    let mut tables: Vec<String> = Vec::new();
    let mut batch: Vec<Rule> = Vec::new();
    for step in parse(&text, proto, Variant::Legacy) {
        match step {
            Step::Rule(r) => {
                if batch.first().is_some_and(|b| b.table != r.table) {
                    add(&ns, (proto, Variant::Legacy), file, &mut batch, tally);
                }
                if !tables.contains(&r.table) {
                    tables.push(r.table.clone());
                }
                batch.push(r);
            }
            Step::Command(words) => {
                add(&ns, (proto, Variant::Legacy), file, &mut batch, tally);
                let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
                if let Err(e) = ns.run(&words[0], &args) {
                    tally.refused.push(format!(
                        "{file} ({}) command `{}`: {}",
                        family_name(proto),
                        words.join(" "),
                        reason(&e.to_string())
                    ));
                }
            }
        }
    }
    add(&ns, (proto, Variant::Legacy), file, &mut batch, tally);
    for table in tables {
        let t = table.clone();
        let ours = ns
            .enter(move || sockopt::read_table(proto, &t))
            .expect("thread")
            .unwrap_or_else(|e| panic!("{file} {table}: {e}"));
        let saved = ns
            .run(&tool(proto, Variant::Legacy, "-save"), &["-t", &table])
            .expect("save");
        let rules = |s: &str| -> Vec<String> {
            s.lines()
                .filter(|l| l.starts_with("-A "))
                .map(str::to_string)
                .collect()
        };
        let (want, got) = (rules(&saved), rules(&ours.save_text()));
        let label = format!("{file} ({}) -t {table}", family_name(proto));
        tally.compare(&want, &got, &label);
    }
}

impl Tally {
    /// Compare the tool's lines with observer's, in order: each line the tool printed counts
    /// as compared, identical or a difference listed under `label`.
    pub(crate) fn compare(&mut self, want: &[String], got: &[String], label: &str) {
        self.compared += want.len();
        for i in 0..want.len().max(got.len()) {
            let (w, g) = (want.get(i), got.get(i));
            if w.is_some() && w == g {
                self.identical += 1;
            } else {
                self.different.push(format!(
                    "{label}\n    save:     {}\n    observer: {}",
                    w.map_or("(none)", String::as_str),
                    g.map_or("(none)", String::as_str),
                ));
            }
        }
    }
}

pub(crate) fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/xtables/testdata/suite")
}

/// The suite's `.t` files, sorted, when `variant`'s tools (and `ip`) are installed; `None`
/// after saying why the test is skipped (it fails instead under `CI=true`).
pub(crate) fn suite_files(variant: Variant) -> Option<Vec<String>> {
    let mut programs = vec!["ip".to_string()];
    for p in [XtProto::Ipv4, XtProto::Ipv6] {
        for s in ["", "-save", "-restore"] {
            programs.push(tool(p, variant, s));
        }
    }
    let programs: Vec<&str> = programs.iter().map(String::as_str).collect();
    if let Some(why) = test_support::skip_reason(&programs) {
        test_support::skip(format_args!("{why}"));
        return None;
    }
    let mut files: Vec<String> = std::fs::read_dir(suite_dir())
        .expect("the suite's directory")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".t"))
        .collect();
    files.sort();
    assert!(files.len() > 100, "only {} .t files", files.len());
    Some(files)
}

#[test]
fn the_rules_of_iptables_extension_tests_render_as_iptables_save_prints_them() {
    let Some(files) = suite_files(Variant::Legacy) else {
        return;
    };
    let dir = suite_dir();
    let mut tally = Tally::default();
    for file in &files {
        for &proto in families(file) {
            replay(&dir, file, proto, &mut tally);
        }
    }
    let floor: usize = std::fs::read_to_string(dir.join("../suite.floor"))
        .expect("testdata/suite.floor")
        .trim()
        .parse()
        .expect("suite.floor holds a number");
    println!(
        "refused by the kernel or the tool ({}):",
        tally.refused.len()
    );
    for r in &tally.refused {
        println!("  {r}");
    }
    println!("different ({}):", tally.different.len());
    for d in &tally.different {
        println!("  {d}");
    }
    println!(
        "{} of {} identical ({:.1} %; {} suite lines accepted; floor {floor})",
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
    assert!(
        tally.identical >= floor,
        "{} identical, below the floor of {floor} (testdata/suite.floor)",
        tally.identical
    );
}
