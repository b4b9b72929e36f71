//! Writers that exit at once are still named: nftables writers through the kernel's `sendmsg`
//! capture (not `/proc`), ipset writers, and writers whose change the kernel refused. Needs root;
//! skips otherwise.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use serde_json::Value;
use test_support::{ancestry_comms, skip_unless, Netns, Observer};

const WAIT: u64 = 20;

/// A cgroup v2 directory for one test, removed when dropped.
struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// A fresh cgroup under the cgroup v2 mount, or `None` when there is none.
    fn new(tag: &str) -> Option<Cgroup> {
        let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
        let root = mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() > 2 && f[2] == "cgroup2").then(|| f[1].to_string())
        })?;
        let path = PathBuf::from(root).join(format!("obs-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&path).ok()?;
        Some(Cgroup { path })
    }

    fn id(&self) -> u64 {
        std::fs::metadata(&self.path).expect("cgroup dir").ino()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// A writer script named like a component, which runs its arguments as a child, then exits; run
/// inside `cgroup` when given.
struct Writer {
    path: PathBuf,
    name: String,
    cgroup: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Writer {
    fn new(name: &str, cgroup: Option<&Cgroup>) -> Writer {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(name);
        std::fs::write(&path, "#!/bin/sh\n\"$@\"\n").expect("write script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Writer {
            path,
            name: name.to_string(),
            cgroup: cgroup.map(|c| c.path.clone()),
            _dir: dir,
        }
    }

    /// Run `args` in the namespace through the script; returns whether it succeeded.
    fn run(&self, ns: &Netns, args: &[&str], stdin: Option<&str>) -> bool {
        use std::io::Write;
        use std::process::{Command, Stdio};
        // Join the cgroup before `ip netns exec`, which mounts a sysfs of the namespace's own.
        let join = match &self.cgroup {
            Some(c) => format!("echo $$ > {}/cgroup.procs && ", c.display()),
            None => String::new(),
        };
        let mut child = Command::new("sh")
            .args(["-c", &format!("{join}exec \"$@\""), "sh"])
            .args(["ip", "netns", "exec", ns.name()])
            .arg(&self.path)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let mut input = child.stdin.take().expect("stdin");
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).expect("write stdin");
        }
        drop(input);
        child.wait().expect("wait").success()
    }
}

fn in_ns(ns: &Netns) -> impl Fn(&Value) -> bool + '_ {
    move |v: &Value| v["netns"].as_u64() == Some(ns.ino())
}

/// The process fields of a change made by `comm` run from `writer`, captured in the kernel.
fn assert_writer(v: &Value, comm: &str, writer: &Writer, cgroup: Option<&Cgroup>) {
    let p = &v["process"];
    assert_eq!(p["comm"], comm, "comm in {v}");
    assert_eq!(p["actor"], writer.name.as_str(), "actor in {v}");
    assert_eq!(p["parent_comm"], writer.name.as_str(), "parent_comm in {v}");
    assert!(p["pid"].as_u64().unwrap_or(0) > 0, "pid in {v}");
    assert!(p["ppid"].as_u64().unwrap_or(0) > 0, "ppid in {v}");
    match cgroup {
        Some(c) => assert_eq!(p["cgroup"].as_u64(), Some(c.id()), "cgroup in {v}"),
        None => assert!(p["cgroup"].as_u64().is_some(), "cgroup in {v}"),
    }
}

#[test]
fn short_lived_nftables_writers_are_named_every_time() {
    skip_unless!("ip", "nft", "iptables-nft-restore");
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("attr-nft");
    let here = in_ns(&ns);
    let cg = Cgroup::new("attr-nft");
    let w = Writer::new("kube-proxy", cg.as_ref());
    let dir = tempfile::tempdir().expect("tempdir");
    for i in 0..20 {
        let chain = format!("KP-{i}");
        let restore = format!("*filter\n:{chain} - [0:0]\n-A {chain} -j ACCEPT\nCOMMIT\n");
        assert!(w.run(&ns, &["iptables-nft-restore", "--noflush"], Some(&restore)));
        let v = obs.expect(&format!("chain_create {chain}"), WAIT, |v| {
            here(v) && v["op"] == "chain_create" && v["chain"] == chain.as_str()
        });
        assert_eq!(v["backend"], "nft");
        assert_writer(&v, "iptables-nft-re", &w, cg.as_ref());

        let file = dir.path().join(format!("r{i}.nft"));
        let table = format!("kp{i}");
        std::fs::write(
            &file,
            format!("table inet {table} {{\n chain c {{\n }}\n}}\n"),
        )
        .expect("write nft file");
        assert!(w.run(&ns, &["nft", "-f", file.to_str().expect("utf-8")], None));
        let v = obs.expect(&format!("table_create {table}"), WAIT, |v| {
            here(v) && v["op"] == "table_create" && v["table"] == table.as_str()
        });
        assert_writer(&v, "nft", &w, cg.as_ref());
    }
    obs.stop();
}

/// A namespace made and written while observer could not look (stopped, as on a starved node)
/// is found after its first write: what it holds is read from its ruleset (`replayed`), and is
/// still named after the writer the kernel saw sending the batch, not `unknown`.
#[test]
fn a_namespace_written_before_it_was_subscribed_names_its_writer() {
    skip_unless!("ip", "nft");
    let mut obs = Observer::start(&[]);
    let w = Writer::new("kube-proxy", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("early.nft");
    std::fs::write(&file, "table ip early {\n chain c {\n }\n}\n").expect("write nft file");
    obs.freeze(true);
    let ns = Netns::new("attr-early");
    let written = w.run(&ns, &["nft", "-f", file.to_str().expect("utf-8")], None);
    obs.freeze(false);
    assert!(written, "nft -f in the namespace failed");
    let here = in_ns(&ns);
    for (op, chain) in [("table_create", None), ("chain_create", Some("c"))] {
        let v = obs.expect(&format!("{op} early"), WAIT, |v| {
            here(v) && v["op"] == op && v["table"] == "early" && v["chain"].as_str() == chain
        });
        assert_eq!(v["replayed"], true, "found after its first write: {v}");
        assert_writer(&v, "nft", &w, None);
    }
    obs.stop();
}

#[test]
fn legacy_writers_that_follow_each_other_unread_each_get_their_own_change() {
    skip_unless!("ip", "iptables-legacy");
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("attr-burst");
    let here = in_ns(&ns);
    let writers: Vec<Writer> = (0..8)
        .map(|i| Writer::new(&format!("writer-{i}"), None))
        .collect();
    // The first change makes the table, so the burst below only adds chains.
    assert!(writers[0].run(&ns, &["iptables-legacy", "-N", "BURST-BASE"], None));
    obs.expect("chain_create BURST-BASE", WAIT, |v| {
        here(v) && v["op"] == "chain_create" && v["chain"] == "BURST-BASE"
    });
    // Observer is stopped while eight writers replace the table one after another (`-w` waits
    // for the xtables lock): any read of the table after they are done shows all eight chains,
    // so only the table each writer installed tells whose chain is whose.
    obs.freeze(true);
    std::thread::scope(|s| {
        for (i, w) in writers.iter().enumerate() {
            let ns = &ns;
            s.spawn(move || {
                let chain = format!("BURST-{i}");
                assert!(w.run(ns, &["iptables-legacy", "-w", "-N", &chain], None));
            });
        }
    });
    obs.freeze(false);
    for (i, w) in writers.iter().enumerate() {
        let chain = format!("BURST-{i}");
        let v = obs.expect(&format!("chain_create {chain}"), WAIT, |v| {
            here(v) && v["op"] == "chain_create" && v["chain"] == chain.as_str()
        });
        assert_writer(&v, "iptables-legacy", w, None);
    }
    let txns: std::collections::HashSet<&str> = obs
        .changes()
        .into_iter()
        .filter(|v| here(v) && v["chain"].as_str().is_some_and(|c| c.starts_with("BURST-")))
        .filter(|v| v["op"] == "chain_create" && v["chain"] != "BURST-BASE")
        .filter_map(|v| v["txn"].as_str())
        .collect();
    assert_eq!(txns.len(), 8, "one transaction per writer: {txns:?}");
    obs.stop();
}

/// The kernel side wakes the reader at most once per 4 ms. Of two replaces made back to back,
/// the second is committed without a wakeup, most often after the reader has read the first:
/// it must come all the same, from the read the reader makes by itself once that time is up.
/// Each round waits for both lines before the next write, which would wake the reader.
#[test]
fn a_write_right_after_another_is_not_left_unread() {
    skip_unless!("ip", "iptables-legacy", "sh");
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("attr-linger");
    let here = in_ns(&ns);
    let w = Writer::new("obs-linger", None);
    for round in 0..10 {
        let (a, b) = (format!("LINGER-A{round}"), format!("LINGER-B{round}"));
        let cmd = format!("iptables-legacy -N {a} && iptables-legacy -N {b}");
        assert!(w.run(&ns, &["sh", "-c", &cmd], None));
        for chain in [&a, &b] {
            let v = obs.expect(&format!("chain_create {chain}"), WAIT, |v| {
                here(v) && v["op"] == "chain_create" && v["chain"] == chain.as_str()
            });
            assert_eq!(v["process"]["comm"], "iptables-legacy", "{v}");
            assert_eq!(v["process"]["actor"], w.name.as_str(), "{v}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    obs.stop();
}

#[test]
fn a_legacy_table_too_large_to_copy_is_read_back() {
    skip_unless!("ip", "iptables-legacy-restore", "iptables-legacy");
    // A 256 KiB ring buffer copies tables of up to 128 KiB; this one is about 180 KiB.
    let mut obs = Observer::start(&["--ringbuf-size", "262144"]);
    let ns = Netns::new("attr-big");
    let here = in_ns(&ns);
    let w = Writer::new("big-writer", None);
    let mut restore = String::from("*filter\n:BIG - [0:0]\n");
    for i in 0..1200 {
        restore.push_str(&format!(
            "-A BIG -s 10.1.{}.{}/32 -j ACCEPT\n",
            i / 250,
            i % 250
        ));
    }
    restore.push_str("COMMIT\n");
    assert!(w.run(
        &ns,
        &["iptables-legacy-restore", "--noflush"],
        Some(&restore)
    ));
    obs.expect("chain_create BIG", WAIT, |v| {
        here(v) && v["op"] == "chain_create" && v["chain"] == "BIG"
    });
    assert!(w.run(
        &ns,
        &[
            "iptables-legacy",
            "-I",
            "BIG",
            "7",
            "-s",
            "192.0.2.9/32",
            "-j",
            "DROP"
        ],
        None
    ));
    let v = obs.expect("rule_add in BIG", WAIT, |v| {
        here(v) && v["op"] == "rule_add" && v["rule"] == "-s 192.0.2.9/32 -j DROP"
    });
    assert_eq!(v["position"], 6, "{v}");
    assert_writer(&v, "iptables-legacy", &w, None);
    // The insert is the only change of its replace.
    let txn = v["txn"].clone();
    let same: Vec<_> = obs
        .changes()
        .into_iter()
        .filter(|c| c["txn"] == txn)
        .collect();
    assert_eq!(same.len(), 1, "{same:?}");
    // Two writers while observer cannot read: the first read finds the second's table too,
    // and says so rather than passing both changes off as the first writer's alone.
    obs.freeze(true);
    assert!(w.run(&ns, &["iptables-legacy", "-N", "BIG-2"], None));
    assert!(w.run(&ns, &["iptables-legacy", "-N", "BIG-3"], None));
    obs.freeze(false);
    let gap = obs.wait_line("the mixed-up read", WAIT, |v| {
        v["kind"] == "status" && v["state"] == "gap"
    });
    let message = gap["message"].as_str().unwrap_or("");
    assert!(
        message.contains("replaced again before it could be read back"),
        "{gap}"
    );
    assert!(message.contains("--ringbuf-size"), "{gap}");
    obs.stop();
}

#[test]
fn a_replace_the_kernel_refused_is_a_change_line_naming_its_writer() {
    skip_unless!("ip", "iptables-legacy");
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("attr-fail");
    let here = in_ns(&ns);
    let setup = Writer::new("obs-setup", None);
    for args in [
        &["iptables-legacy", "-N", "LOOP-A"][..],
        &["iptables-legacy", "-N", "LOOP-B"],
        &["iptables-legacy", "-A", "INPUT", "-j", "LOOP-A"],
        &["iptables-legacy", "-A", "LOOP-A", "-j", "LOOP-B"],
    ] {
        assert!(setup.run(&ns, args, None), "{args:?}");
    }
    obs.expect("LOOP-A -> LOOP-B", WAIT, |v| {
        here(v) && v["op"] == "rule_add" && v["chain"] == "LOOP-A"
    });
    // A jump back from LOOP-B closes a loop reachable from INPUT: the kernel refuses the replace.
    let w = Writer::new("kubelet", None);
    assert!(!w.run(
        &ns,
        &["iptables-legacy", "-A", "LOOP-B", "-j", "LOOP-A"],
        None
    ));
    let v = obs.expect("the refused replace", WAIT, |v| {
        here(v) && v["op"] == "table_replace"
    });
    assert_eq!(v["backend"], "legacy");
    assert_eq!(v["table"], "filter");
    assert_eq!(v["family"], "ip");
    assert!(
        v["result"].as_str().unwrap_or("").starts_with("ELOOP"),
        "result in {v}"
    );
    assert_writer(&v, "iptables-legacy", &w, None);
    // Nothing changed: no rule_add into LOOP-B was reported.
    obs.drain(300);
    assert!(
        !obs.changes()
            .iter()
            .any(|v| here(v) && v["chain"] == "LOOP-B" && v["op"] == "rule_add"),
        "a refused replace was reported as a change"
    );
    obs.stop();
}

/// A component whose `iptables` runs through a shell and wrappers (as fail2ban's actions and
/// many init scripts do): the actor is the component, and `ancestry` shows the way to it.
#[test]
fn the_actor_is_found_above_shells_and_wrappers_with_its_ancestry() {
    skip_unless!("ip", "iptables-legacy", "timeout", "flock");
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("attr-wrap");
    let here = in_ns(&ns);
    let w = Writer::new("obs-component", None);
    let lock = tempfile::NamedTempFile::new().expect("lock file");
    let cmd = format!(
        "flock {} timeout 20 iptables-legacy -N OBS-WRAPPED",
        lock.path().display()
    );
    assert!(w.run(&ns, &["sh", "-c", &cmd], None));
    let v = obs.expect("chain_create OBS-WRAPPED", WAIT, |v| {
        here(v) && v["op"] == "chain_create" && v["chain"] == "OBS-WRAPPED"
    });
    let p = &v["process"];
    assert_eq!(p["comm"], "iptables-legacy", "{v}");
    assert_eq!(p["parent_comm"], "timeout", "{v}");
    assert_eq!(
        p["actor"],
        w.name.as_str(),
        "the component, not a wrapper: {v}"
    );
    let chain = ancestry_comms(&v);
    // The way to the actor, then on above it (the test that ran the component).
    assert_eq!(
        chain.get(..4),
        Some(&["timeout", "flock", "sh", "obs-component"][..]),
        "{v}"
    );
    assert!(chain.len() > 4, "nothing above the actor: {v}");
    assert!(
        p["ancestry"]
            .as_array()
            .is_some_and(|a| a.iter().all(|x| x["pid"].as_u64().unwrap_or(0) > 0)),
        "{v}"
    );
    obs.stop();
}

/// ipset lines of one namespace.
fn ipset_lines<'a>(obs: &'a Observer, ns: &Netns) -> Vec<&'a Value> {
    obs.changes()
        .into_iter()
        .filter(|v| v["netns"].as_u64() == Some(ns.ino()) && v["backend"] == "ipset")
        .collect()
}

#[test]
fn ipset_lifecycle_race_names_both_writers() {
    skip_unless!("ip", "ipset", "iptables-legacy");
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("attr-ipset");
    let here = in_ns(&ns);
    let npm = Writer::new("azure-npm", None);
    let reconciler = Writer::new("npm-reconcile", None);
    let set = "podlabel-pod2";
    let is = |v: &Value, op: &str| {
        here(v) && v["backend"] == "ipset" && v["op"] == op && v["chain"] == set
    };

    assert!(npm.run(&ns, &["ipset", "create", set, "hash:ip"], None));
    let v = obs.expect("set_create", WAIT, |v| is(v, "set_create"));
    assert_eq!(v["result"], "ok");
    assert_eq!(v["table"], "ipset");
    assert_eq!(v["family"], "ip");
    assert_writer(&v, "ipset", &npm, None);
    assert!(npm.run(&ns, &["ipset", "add", set, "10.0.0.1"], None));
    let v = obs.expect("element_add", WAIT, |v| is(v, "element_add"));
    assert_eq!(
        v["detail"], "1 elements requested; the set holds 1 (was 0)",
        "{v}"
    );

    // The reconcile loop destroys the set; the dataplane still uses it and fails, then
    // re-creates it.
    assert!(reconciler.run(&ns, &["ipset", "destroy", set], None));
    let v = obs.expect("set_delete", WAIT, |v| is(v, "set_delete"));
    assert_eq!(v["result"], "ok");
    assert_eq!(v["detail"], "held 1 elements");
    assert_writer(&v, "ipset", &reconciler, None);
    // `ipset add` to a missing set fails in the tool (its header query), before any write:
    // nothing to report. The re-create is the dataplane's.
    assert!(!npm.run(&ns, &["ipset", "add", set, "10.0.0.2"], None));
    assert!(npm.run(&ns, &["ipset", "create", set, "hash:ip"], None));
    let v = obs.expect("second set_create", WAIT, |v| {
        is(v, "set_create") && v["seq"].as_u64() > Some(3)
    });
    assert_writer(&v, "ipset", &npm, None);

    // A set in use by a rule cannot be destroyed: the attempt is a line with its writer.
    let rule = [
        "iptables-legacy",
        "-A",
        "INPUT",
        "-m",
        "set",
        "--match-set",
        set,
        "src",
    ];
    if npm.run(&ns, &rule, None) {
        let v = obs.expect("rule_add with the set", WAIT, |v| {
            here(v) && v["op"] == "rule_add" && v["chain"] == "INPUT"
        });
        assert_eq!(
            v["rule"].as_str(),
            Some(format!("-m set --match-set {set} src").as_str()),
            "{v}"
        );
        // The first table with a set was read back (which opened the namespace's sockets);
        // the next comes from the writer's copy and still names its set.
        let dst = [&rule[..6], &[set, "dst", "-j", "ACCEPT"]].concat();
        assert!(npm.run(&ns, &dst, None));
        let v = obs.expect("second rule_add with the set", WAIT, |v| {
            here(v) && v["op"] == "rule_add" && v["position"] == 1
        });
        assert_eq!(
            v["rule"].as_str(),
            Some(format!("-m set --match-set {set} dst -j ACCEPT").as_str()),
            "{v}"
        );
        assert!(!reconciler.run(&ns, &["ipset", "destroy", set], None));
        let v = obs.expect("refused set_delete", WAIT, |v| {
            is(v, "set_delete") && v["result"] != "ok"
        });
        assert!(v["result"].as_str().unwrap_or("").contains("in use"), "{v}");
        assert_writer(&v, "ipset", &reconciler, None);
        assert!(npm.run(&ns, &["iptables-legacy", "-F", "INPUT"], None));
    } else {
        println!("skipping the in-use part: iptables-legacy has no set match here");
    }

    // Both at once, as in the race: every line names one of the two writers, never unknown.
    let before = ipset_lines(&obs, &ns).len();
    // Each loop is itself a script named like the component, so the components are the
    // parents of every `ipset` run.
    let dir = tempfile::tempdir().expect("tempdir");
    let mk = |name: &str, body: String| {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.path().join(name);
        std::fs::create_dir_all(&path).expect("mkdir");
        let path = path.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}")).expect("write loop");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    };
    let npm_loop = mk(
        &npm.name,
        format!(
            "for i in 1 2 3 4 5; do ipset -exist create {set} hash:ip; \
             ipset -exist add {set} 10.0.0.$i; done; true\n"
        ),
    );
    let rec_loop = mk(
        &reconciler.name,
        format!("for i in 1 2 3 4 5; do ipset destroy {set} 2>/dev/null; done; true\n"),
    );
    let run = |path: &PathBuf| {
        test_support::run(
            "ip",
            &["netns", "exec", ns.name(), path.to_str().expect("utf-8")],
        );
    };
    std::thread::scope(|s| {
        s.spawn(|| run(&npm_loop));
        s.spawn(|| run(&rec_loop));
    });
    obs.drain(1500);
    let lines = ipset_lines(&obs, &ns);
    let burst = &lines[before..];
    assert!(!burst.is_empty(), "no ipset lines from the race");
    for v in burst {
        let actor = v["process"]["actor"].as_str().unwrap_or("");
        assert!(
            actor == npm.name || actor == reconciler.name,
            "unexpected actor in {v}"
        );
        assert!(v["process"]["cgroup"].as_u64().is_some(), "cgroup in {v}");
    }
    for w in [&npm, &reconciler] {
        assert!(
            burst
                .iter()
                .any(|v| v["process"]["actor"] == w.name.as_str()),
            "{} named in none of {burst:?}",
            w.name
        );
    }
    obs.stop();
}

/// A tool that runs its plugins straight from its plugin directory (no `run-parts`): each
/// plugin's change is named after the tool, the plugin kept in the ancestry; a script the tool
/// runs from elsewhere is its own actor, as before.
#[test]
fn a_plugin_its_tool_runs_from_its_plugin_directory_is_named_after_the_tool() {
    skip_unless!("ip", "iptables-legacy", "sleep");
    use std::os::unix::fs::PermissionsExt;
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("attr-plug");
    let here = in_ns(&ns);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("plugins.d")).expect("mkdir");
    let script = |rel: &str, body: &str| {
        let path = dir.path().join(rel);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    };
    script(
        "obs-fwtool",
        "here=$(dirname \"$0\")\nfor p in \"$here\"/plugins.d/*; do \"$p\" || exit 1; done\n\
         \"$here\"/obs-helper",
    );
    // Alive when its change is read: known by its path.
    script(
        "plugins.d/obs-rules",
        "iptables-legacy -N OBS-PLUGGED\nsleep 1",
    );
    // Gone at once: known by its numbered name.
    script("plugins.d/20-rules", "iptables-legacy -N OBS-NUMBERED");
    // Not a plugin: its own actor.
    script("obs-helper", "iptables-legacy -N OBS-HELPED\nsleep 1");
    let status = std::process::Command::new("ip")
        .args(["netns", "exec", ns.name()])
        .arg(dir.path().join("obs-fwtool"))
        .status()
        .expect("run the tool");
    assert!(status.success(), "obs-fwtool: {status}");
    for (chain, plugin) in [("OBS-PLUGGED", "obs-rules"), ("OBS-NUMBERED", "20-rules")] {
        let v = obs.expect(chain, WAIT, |v| {
            here(v) && v["op"] == "chain_create" && v["chain"] == chain
        });
        assert_eq!(v["process"]["actor"], "obs-fwtool", "{v}");
        assert_eq!(
            ancestry_comms(&v).get(..2),
            Some(&[plugin, "obs-fwtool"][..]),
            "{v}"
        );
    }
    let v = obs.expect("OBS-HELPED", WAIT, |v| {
        here(v) && v["op"] == "chain_create" && v["chain"] == "OBS-HELPED"
    });
    assert_eq!(v["process"]["actor"], "obs-helper", "{v}");
    obs.stop();
}

/// Debian's `netfilter-persistent reload` runs its plugins with `run-parts`, and
/// `plugins.d/15-ip4tables` runs `iptables-restore` on /etc/iptables/rules.v4: the actor is the
/// tool that ran the dispatcher, and the ancestry keeps the script and `run-parts` and goes on
/// above the actor. Run in a namespace of the test's own and a mount namespace whose /etc is
/// the machine's under an overlay with the test's rules files and the package's defaults
/// pointing at its unpacked plugins (the machine's /etc is never written).
#[test]
fn a_script_run_parts_runs_is_named_after_the_tool_that_ran_it() {
    skip_unless!("ip", "unshare", "mount", "run-parts", "iptables-restore");
    if !test_support::netfilter_persistent_unpacked() {
        return;
    }
    let mut obs = Observer::start(&[]);
    let ns = Netns::new("attr-nfp");
    let here = in_ns(&ns);
    let out = test_support::netfilter_persistent_reload(
        &ns,
        "*filter\n:OBS-PERSISTENT - [0:0]\n-A OBS-PERSISTENT -j RETURN\nCOMMIT\n",
        "*filter\nCOMMIT\n",
    );
    assert!(
        out.status.success(),
        "netfilter-persistent reload: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let v = obs.expect("chain_create OBS-PERSISTENT", WAIT, |v| {
        here(v) && v["op"] == "chain_create" && v["chain"] == "OBS-PERSISTENT"
    });
    let p = &v["process"];
    assert_eq!(p["comm"], "iptables-restor", "{v}");
    assert_eq!(p["parent_comm"], "15-ip4tables", "{v}");
    assert_eq!(p["actor"], "netfilter-persistent", "{v}");
    let chain = ancestry_comms(&v);
    assert_eq!(
        chain.get(..3),
        Some(&["15-ip4tables", "run-parts", "netfilter-persi"][..]),
        "{v}"
    );
    // On past the actor: the test itself ran it, and it is alive to be read.
    assert!(chain.len() > 3, "nothing above the actor: {v}");
    eprintln!(
        "netfilter-persistent reload: actor {}, ancestry {chain:?}",
        p["actor"]
    );
    obs.stop();
}
