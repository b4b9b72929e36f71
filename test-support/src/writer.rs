//! Writers: a shell script with a distinctive name that makes the test's changes, standing for a
//! component such as kube-proxy, so that observer's lines about them can be told apart by
//! actor; and the namespace's methods that run a tool through one.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::{Cgroup, Netns};

impl Netns {
    /// Run a command inside the namespace through the writer script (so the writer's parent is
    /// the script), failing the test if it fails.
    pub fn write(&self, writer: &Writer, args: &[&str]) {
        let mut full = vec!["netns", "exec", self.name()];
        let script = writer.path.to_str().expect("utf-8 path");
        full.push(script);
        full.extend_from_slice(args);
        run("ip", &full);
    }

    /// Run a command that must fail inside the namespace through the writer script; returns
    /// its stderr.
    pub fn write_refused(&self, writer: &Writer, args: &[&str]) -> String {
        let script = writer.path.to_str().expect("utf-8 path");
        let out = Command::new("ip")
            .args(["netns", "exec", self.name(), script])
            .args(args)
            .output()
            .expect("spawn");
        assert!(!out.status.success(), "{args:?} should have failed");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Run the writer script inside the namespace from the cgroup `cg`: the process moves itself
    /// there before `ip netns exec` (which remounts /sys, hiding the cgroup tree) runs the script.
    pub fn write_in_cgroup(&self, writer: &Writer, cg: &Cgroup, args: &[&str]) {
        let procs = cg.procs_file();
        let script = writer.path.to_str().expect("utf-8 path");
        let mut full = vec![
            "-c",
            "echo $$ > \"$0\" && exec ip netns exec \"$@\"",
            procs.to_str().expect("utf-8 path"),
            self.name(),
            script,
        ];
        full.extend_from_slice(args);
        run("sh", &full);
    }

    /// Same, with a stdin (for `*-restore`).
    pub fn write_stdin(&self, writer: &Writer, args: &[&str], input: &str) {
        use std::io::Write;
        let script = writer.path.to_str().expect("utf-8 path");
        let mut child = Command::new("ip")
            .args(["netns", "exec", self.name(), script])
            .args(args)
            .stdin(Stdio::piped())
            .spawn()
            .expect("spawn");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        let status = child.wait().expect("wait");
        assert!(status.success(), "{args:?} failed");
    }
}

/// Run `cmd args`, failing the test if it fails.
pub fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A shell script with a distinctive name that runs its arguments as a child, standing for a
/// component such as kube-proxy.
pub struct Writer {
    pub path: PathBuf,
    pub name: String,
    _dir: tempfile::TempDir,
}

impl Writer {
    pub fn new(name: &str) -> Writer {
        // Not `exec`: the tool must be a child of the script.
        Writer::script(name, "\"$@\"")
    }

    /// A script named `name` whose body is `body` (sh syntax; `"$@"` are its arguments). Every
    /// command it runs is its child, so the script is the actor of the changes they make.
    pub fn script(name: &str, body: &str) -> Writer {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\nset -e\n{body}\n")).expect("write script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Writer {
            path,
            name: name.to_string(),
            _dir: dir,
        }
    }
}
