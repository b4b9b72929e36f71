//! A network namespace made for one test or benchmark (`ip netns add`), deleted when dropped.
//!
//! The methods that return a `Result` serve xtask's benchmarks; the ones that fail the test
//! instead (`new`, `ino`, `read`, and with the `integration` feature the writer's `write...`
//! in [`crate::writer`]) serve the tests.

use std::fmt;
use std::fs::File;
use std::path::PathBuf;
use std::process::Command;

/// A namespace could not be made, entered, or a command in it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetnsError(String);

impl fmt::Display for NetnsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NetnsError {}

/// A network namespace of the caller's own, under `/run/netns`, deleted when dropped (also when
/// a test panics). Everything a test changes in netfilter it changes in here.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// `ip netns add NAME`, after deleting a namespace of that name a killed run left behind.
    pub fn add(name: impl Into<String>) -> Result<Netns, NetnsError> {
        let name = name.into();
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        output(Command::new("ip").args(["netns", "add", &name]))?;
        Ok(Netns { name })
    }

    /// A namespace for one test, `obs-TAG-PID`; fails the test when it cannot be made.
    pub fn new(tag: &str) -> Netns {
        Netns::add(format!("obs-{tag}-{}", std::process::id())).unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/NAME`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// The namespace's inode: the `netns` of observer's lines about it.
    pub fn inode(&self) -> Result<u64, NetnsError> {
        use std::os::unix::fs::MetadataExt;
        let path = self.path();
        std::fs::metadata(&path)
            .map(|m| m.ino())
            .map_err(|e| NetnsError(format!("{}: {e}", path.display())))
    }

    /// [`Netns::inode`], failing the test when it cannot be read.
    pub fn ino(&self) -> u64 {
        self.inode().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Run a command inside the namespace (not through a writer) that must succeed; returns
    /// its stdout.
    pub fn read(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("spawn ip netns exec");
        assert!(
            out.status.success(),
            "{args:?} in {} failed: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `ip netns exec NAME PROGRAM`, to add arguments to and run.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Run `program args` inside the namespace; its stdout, or an error with its stderr.
    pub fn run(&self, program: &str, args: &[&str]) -> Result<String, NetnsError> {
        output(self.command(program).args(args))
    }

    /// Run `f` on a thread that entered the namespace (the caller's thread stays where it is).
    pub fn enter<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, NetnsError> {
        let path = self.path();
        std::thread::spawn(move || {
            let file =
                File::open(&path).map_err(|e| NetnsError(format!("{}: {e}", path.display())))?;
            nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| NetnsError(format!("entering {}: {e}", path.display())))?;
            Ok(f())
        })
        .join()
        .map_err(|_| NetnsError(format!("the thread in {} panicked", self.name)))?
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = output(Command::new("ip").args(["netns", "del", &self.name])) {
            eprintln!("warning: {e}; delete it with `ip netns del {}`", self.name);
        }
    }
}

/// Run `cmd`; its stdout when it succeeds, else an error naming it with its stderr.
fn output(cmd: &mut Command) -> Result<String, NetnsError> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| NetnsError(format!("{shown}: {e}")))?;
    if !out.status.success() {
        return Err(NetnsError(format!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_made_used_and_deleted() {
        if let Some(reason) = crate::skip_reason(&["ip"]) {
            crate::skip(reason);
            return;
        }
        let name = format!("obs-ts-{}", std::process::id());
        let ns = Netns::add(&name).expect("netns");
        assert!(ns.path().exists());
        let host = std::fs::metadata("/proc/self/ns/net").map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.ino()
        });
        let inside = ns
            .enter(|| {
                use std::os::unix::fs::MetadataExt;
                std::fs::metadata("/proc/thread-self/ns/net")
                    .map(|m| m.ino())
                    .ok()
            })
            .expect("enter");
        assert_eq!(inside, Some(ns.inode().expect("inode")));
        assert_ne!(inside, host.ok());
        let links = ns.run("ip", &["-o", "link"]).expect("ip link");
        assert_eq!(
            links.lines().count(),
            1,
            "only lo in a new namespace: {links}"
        );
        let err = ns.run("false", &[]).expect_err("false fails");
        assert!(err.to_string().contains("failed"), "{err}");
        let path = ns.path();
        drop(ns);
        assert!(!path.exists(), "deleted on drop");
    }
}
