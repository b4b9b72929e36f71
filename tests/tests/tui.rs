//! `observer tail` in a real terminal (tmux), read back with `capture-pane`: columns that line
//! up, lines that fit 80 and 200 columns, colours only when allowed, one header for a whole
//! restore, an incident block that says how it ended, and a hostile writer's text that drives
//! nothing.
//!
//! Each test runs its own tmux server (`-L`), its own namespace and writers; needs root, tmux,
//! iptables-legacy and ip.

use std::process::Command;
use std::time::{Duration, Instant};

use test_support::{observer_bin, Netns, Writer};

/// A tmux server of its own, with one window running a command, removed when dropped.
struct Term {
    socket: String,
}

impl Term {
    fn start(tag: &str, cols: u16, env: &[(&str, &str)], args: &[&str]) -> Term {
        let socket = format!("obs-tui-{tag}-{}", std::process::id());
        let mut cmd = String::from("exec env");
        for (k, v) in env {
            cmd.push_str(&format!(" {k}={v}"));
        }
        cmd.push_str(&format!(" {} tail", observer_bin().display()));
        for a in args {
            cmd.push_str(&format!(" '{a}'"));
        }
        let t = Term { socket };
        let ok = Command::new("tmux")
            .args(["-L", &t.socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", &cols.to_string(), "-y", "60", &cmd])
            .status()
            .expect("run tmux")
            .success();
        assert!(ok, "tmux new-session failed");
        Command::new("tmux")
            .args(["-L", &t.socket, "set-option", "-g", "history-limit", "5000"])
            .status()
            .expect("tmux set-option");
        t.wait_for("the ready line", 60, |s| s.contains("-- ready"));
        t
    }

    /// The whole pane, history included; with `escapes`, colours as escape sequences.
    fn screen(&self, escapes: bool) -> String {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket, "capture-pane", "-p", "-S", "-", "-J"]);
        if escapes {
            c.arg("-e");
        }
        let out = c.output().expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pane's title (what an escape sequence would set).
    fn title(&self) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "display-message", "-p", "#{pane_title}"])
            .output()
            .expect("tmux display-message");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn wait_for(&self, what: &str, secs: u64, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.screen(false);
            if pred(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "{what} never showed; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

fn runnable() -> bool {
    if let Some(reason) = test_support::skip_reason(&["tmux", "ip", "iptables-legacy"]) {
        test_support::skip(reason);
        return false;
    }
    true
}

/// The lines of the screen that are change lines of `chain`.
fn lines_of<'a>(screen: &'a str, chain: &str) -> Vec<&'a str> {
    screen
        .lines()
        .filter(|l| l.contains(&format!(" {chain} ")) || l.ends_with(&format!(" {chain}")))
        .collect()
}

/// The column (in characters) where `word` starts in `line`.
fn col(line: &str, word: &str) -> usize {
    let byte = line
        .find(word)
        .unwrap_or_else(|| panic!("{word} in {line}"));
    line[..byte].chars().count()
}

const SHORT: &str = "kube-system/kube-dns:dns cluster IP";
const LONG: &str = "this rule has a long comment that cannot fit on a narrow terminal at all";

#[test]
fn eighty_columns_fit_line_up_and_stay_plain_under_no_color() {
    if !runnable() {
        return;
    }
    let ns = Netns::new("tui80");
    let w = Writer::new("kube-proxy");
    let term = Term::start(
        "80",
        80,
        &[("NO_COLOR", "1")],
        &["--netns", ns.name(), "--no-group"],
    );
    ns.write(&w, &["iptables-legacy", "-N", "OBS-T"]);
    ns.write(
        &w,
        &[
            "iptables-legacy",
            "-A",
            "OBS-T",
            "-m",
            "comment",
            "--comment",
            LONG,
            "-j",
            "ACCEPT",
        ],
    );
    ns.write(&w, &["iptables-legacy", "-F", "OBS-T"]);
    ns.write(&w, &["iptables-legacy", "-X", "OBS-T"]);
    let screen = term.wait_for("the chain delete", 30, |s| s.contains("chain_delete"));
    for l in screen.lines() {
        assert!(l.chars().count() <= 80, "wider than 80: {l:?}\n{screen}");
    }
    let ours = lines_of(&screen, "OBS-T");
    let create = ours.iter().find(|l| l.contains("chain_create")).unwrap();
    let add = ours.iter().find(|l| l.contains("rule_add")).unwrap();
    let delete = ours.iter().find(|l| l.contains("chain_delete")).unwrap();
    assert_eq!(
        col(create, "chain_create"),
        col(add, "rule_add"),
        "{screen}"
    );
    assert_eq!(
        col(add, "rule_add"),
        col(delete, "chain_delete"),
        "{screen}"
    );
    assert_eq!(col(create, "OBS-T"), col(delete, "OBS-T"), "{screen}");
    assert!(add.contains("kube-proxy"), "the actor in its column: {add}");
    // The rule goes on its own line under a narrow row, cut with `…`.
    let rule = screen
        .lines()
        .find(|l| l.contains("↳") && l.contains("this rule has a long"))
        .unwrap_or_else(|| panic!("no rule line:\n{screen}"));
    assert!(rule.ends_with('…'), "{rule}");
    // NO_COLOR: no escape sequence at all.
    let raw = term.screen(true);
    assert!(!raw.contains("\x1b[3"), "colour under NO_COLOR:\n{raw:?}");
    // The footer, only because this is a terminal.
    assert!(screen.contains("open incidents: 0"), "{screen}");
}

#[test]
fn two_hundred_columns_show_whole_rules_in_colour() {
    if !runnable() {
        return;
    }
    let ns = Netns::new("tui200");
    let w = Writer::new("kube-proxy");
    let term = Term::start("200", 200, &[], &["--netns", ns.name()]);
    ns.write(&w, &["iptables-legacy", "-N", "OBS-W"]);
    ns.write(
        &w,
        &[
            "iptables-legacy",
            "-A",
            "OBS-W",
            "-m",
            "comment",
            "--comment",
            SHORT,
            "-j",
            "ACCEPT",
        ],
    );
    let screen = term.wait_for("the rule", 30, |s| s.contains("rule_add"));
    let add = lines_of(&screen, "OBS-W")
        .into_iter()
        .find(|l| l.contains("rule_add"))
        .unwrap();
    assert!(
        add.ends_with(&format!("-m comment --comment \"{SHORT}\" -j ACCEPT")),
        "{add}"
    );
    assert!(add.chars().count() <= 200);
    let raw = term.screen(true);
    assert!(raw.contains("\x1b[3"), "no colour on a terminal:\n{raw:?}");
}

#[test]
fn a_restore_of_300_rules_is_one_header() {
    if !runnable() {
        return;
    }
    let ns = Netns::new("tuigrp");
    let w = Writer::new("kube-proxy");
    let term = Term::start("grp", 160, &[("NO_COLOR", "1")], &["--netns", ns.name()]);
    // The chain first (this also makes the namespace's filter table): the restore then adds
    // 300 rules in one replace.
    ns.write(&w, &["iptables-legacy", "-N", "OBS-G"]);
    term.wait_for("the chain", 30, |s| s.contains("OBS-G"));
    let mut restore = String::from("*filter\n");
    for i in 0..300 {
        restore.push_str(&format!(
            "-A OBS-G -s 10.0.{}.{}/32 -j ACCEPT\n",
            i / 250,
            i % 250
        ));
    }
    restore.push_str("COMMIT\n");
    ns.write_stdin(&w, &["iptables-legacy-restore", "--noflush"], &restore);
    let screen = term.wait_for("the header", 30, |s| s.contains("more changes"));
    let headers: Vec<&str> = screen
        .lines()
        .filter(|l| l.contains("── ") && l.contains("rule_add"))
        .collect();
    assert_eq!(headers.len(), 1, "{screen}");
    assert!(
        headers[0].contains("kube-proxy [iptables-legacy ")
            && headers[0].contains("300 changes in legacy ip filter")
            && headers[0].contains(": 300 rule_add"),
        "{}",
        headers[0]
    );
    let rows = screen
        .lines()
        .filter(|l| l.contains("rule_add") && !l.contains("── "))
        .count();
    assert!(rows <= 5, "collapsed to 5 rows, got {rows}:\n{screen}");
    assert!(
        screen.contains("295 more changes in this transaction"),
        "{screen}"
    );
}

#[test]
fn an_incident_block_shows_its_resolution() {
    if !runnable() {
        return;
    }
    let ns = Netns::new("tuiinc");
    let owner = Writer::new("kube-proxy");
    let intruder = Writer::new("calico-node");
    let term = Term::start("inc", 160, &[("NO_COLOR", "1")], &["--netns", ns.name()]);
    ns.write(
        &owner,
        &["iptables-legacy", "-t", "nat", "-N", "KUBE-SVC-TUI"],
    );
    term.wait_for("the chain", 30, |s| s.contains("KUBE-SVC-TUI"));
    ns.write(
        &intruder,
        &["iptables-legacy", "-t", "nat", "-X", "KUBE-SVC-TUI"],
    );
    let open = term.wait_for("the incident", 30, |s| s.contains("foreign_delete OPEN"));
    let head = open
        .lines()
        .find(|l| l.starts_with("!! ") && l.contains("foreign_delete OPEN"))
        .unwrap();
    assert!(head.contains("WARNING"), "{head}");
    assert!(
        open.contains("owner kube-proxy · by calico-node"),
        "who and whose:\n{open}"
    );
    assert!(open.contains("open incidents: 1"), "{open}");
    ns.write(
        &owner,
        &["iptables-legacy", "-t", "nat", "-N", "KUBE-SVC-TUI"],
    );
    let done = term.wait_for("the resolution", 30, |s| {
        s.contains("foreign_delete RESOLVED after")
    });
    let line = done
        .lines()
        .find(|l| l.contains("foreign_delete RESOLVED"))
        .unwrap();
    assert!(line.contains("by kube-proxy"), "{line}");
    assert!(done.contains("open incidents: 0"), "{done}");
}

/// A log line written while the footer is drawn goes on a line of its own above the footer,
/// cut to the width, and the footer is drawn again under it: it neither lands on the footer's
/// line nor runs past 80 columns.
#[test]
fn a_log_line_goes_above_the_footer_cut_to_the_width() {
    if !runnable() {
        return;
    }
    let ns = Netns::new("tuilog");
    let w = Writer::new("kube-proxy");
    let term = Term::start(
        "log",
        80,
        &[("NO_COLOR", "1"), ("OBSERVER_LOG", "observer=debug")],
        &["--netns", ns.name(), "--no-group"],
    );
    ns.write(&w, &["iptables-legacy", "-N", "OBS-LOG"]);
    term.wait_for("the chain create", 30, |s| {
        lines_of(s, "OBS-LOG")
            .iter()
            .any(|l| l.contains("chain_create"))
    });
    let inode = ns.ino();
    // `ip netns del`: the mount goes, and the engine's debug line says the namespace is gone.
    drop(ns);
    let gone = format!("namespace {inode} is gone");
    // Other tests' namespaces may log too: the screen is read once the footer is its last line
    // again (a capture can fall between a line and the footer drawn after it).
    let shown = |s: &str| {
        s.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(str::to_string)
    };
    let screen = term.wait_for("the namespace's log line, then the footer", 30, |s| {
        s.contains(&gone) && shown(s).is_some_and(|l| l.starts_with(" open incidents:"))
    });
    // Start-up's log lines come before the screen is drawn, whole; from `ready` on, every
    // line fits.
    let lines: Vec<&str> = screen
        .lines()
        .skip_while(|l| !l.starts_with("-- ready"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    for l in &lines {
        assert!(l.chars().count() <= 80, "wider than 80: {l:?}\n{screen}");
    }
    let log = lines.iter().position(|l| l.contains(&gone)).unwrap();
    assert!(
        !lines[log].contains("open incidents"),
        "the log line is on the footer's line: {screen}"
    );
    assert!(
        lines[log].contains("DEBUG"),
        "the log line starts on a line of its own: {screen}"
    );
}

/// A hostile writer on a real terminal: its comm and its rule's comment would set the window's
/// title, clear the screen, recolour and overwrite the line; on the screen they are text,
/// escaped, and the title and colours stay as they were.
#[test]
fn hostile_text_does_not_drive_the_terminal() {
    if !runnable() {
        return;
    }
    let ns = Netns::new("tuihostile");
    let w = Writer::new("e\x1b[31mvil\x07");
    let term = Term::start(
        "hostile",
        200,
        &[("NO_COLOR", "1")],
        &["--netns", ns.name()],
    );
    let title = term.title();
    ns.write(&w, &["iptables-legacy", "-N", "OBS-H"]);
    let comment = "ok\x1b]0;pwned\x07\x1b[2J\x1b[31mRED\rX\x08Y \u{202e}evil";
    ns.write(
        &w,
        &[
            "iptables-legacy",
            "-A",
            "OBS-H",
            "-m",
            "comment",
            "--comment",
            comment,
            "-j",
            "ACCEPT",
        ],
    );
    let screen = term.wait_for("the rule", 30, |s| s.contains("rule_add"));
    assert!(
        screen.contains("\"ok\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mRED\\x0dX\\x08Y \\u202eevil\""),
        "the comment, escaped:\n{screen}"
    );
    assert!(
        screen.contains("e\\x1b[31mvil\\x07"),
        "the writer, escaped:\n{screen}"
    );
    assert_eq!(term.title(), title, "the window's title changed");
    let raw = term.screen(true);
    assert!(
        !raw.contains("\x1b[31m"),
        "recoloured under NO_COLOR:\n{raw:?}"
    );
}
