//! Writing a restore script: the backend's own tool, run in the namespace, the script on its
//! stdin, one atomic write. The only code that changes the kernel's ruleset.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::plan::Tool;

/// How long the tool may take (it waits up to 5 s for the xtables lock).
const TIMEOUT: Duration = Duration::from_secs(15);

/// The arguments after the program: iptables-restore waits for the xtables lock instead of
/// failing at once when another writer holds it.
fn args(tool: Tool) -> Vec<&'static str> {
    let [_, first] = tool.argv();
    match tool {
        Tool::Nft => vec![first, "-"],
        Tool::Ipset => vec![first],
        Tool::IptablesLegacy(_) | Tool::IptablesNft(_) => vec![first, "--wait", "5"],
    }
}

/// The PATH the node's tools are found in.
const NODE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The node's mount namespace, when `prog` is not in observer's own PATH and observer runs in
/// another mount namespace (a container, with the host's PIDs): init's, or else that of the
/// first process observer may look into whose root holds `prog` (on a node where init is out of
/// reach). `Err`: why none can be used (said when the tool is then not found).
fn node_mounts(prog: &str) -> Result<Option<std::fs::File>, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(std::path::PathBuf::from))
        .any(|d| d.join(prog).is_file())
    {
        return Ok(None);
    }
    let ino = |p: &str| {
        std::fs::metadata(p)
            .ok()
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
    };
    let own = ino("/proc/self/ns/mnt").ok_or("/proc/self/ns/mnt cannot be read")?;
    let holds = |pid: &str| {
        NODE_PATH
            .split(':')
            .any(|d| std::path::Path::new(&format!("/proc/{pid}/root{d}/{prog}")).is_file())
    };
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map_err(|e| format!("/proc: {e}"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    for pid in pids.iter().map(u32::to_string) {
        let ns = format!("/proc/{pid}/ns/mnt");
        match ino(&ns) {
            Some(i) if i != own && holds(&pid) => {
                return std::fs::File::open(&ns)
                    .map(Some)
                    .map_err(|e| format!("{ns}: {e}"));
            }
            _ => {}
        }
    }
    Err(format!(
        "no process outside observer's mount namespace that it may look into has {prog} \
         (hostPID and CAP_SYS_PTRACE let it see the node's)"
    ))
}

/// `prog` with `args`, to be run in the network namespace `netns` (and, when observer's own
/// filesystem lacks it, in the node's mount namespace), its stderr piped; and the node's mount
/// namespace when it is used, or why none could be (said when `prog` is then not found).
struct InNamespace {
    cmd: tokio::process::Command,
    /// Kept open until the child has exited (its descriptor is entered in the child).
    host: Option<std::fs::File>,
    why_not: Option<String>,
}

fn in_namespace(netns: BorrowedFd<'_>, prog: &str, args: &[&str]) -> InNamespace {
    let fd = netns.as_fd().as_raw_fd();
    // In a container without the tool (the image holds none), the node's own: run in the
    // node's mount namespace (init's), where its PATH finds it.
    let (host, why_not) = match node_mounts(prog) {
        Ok(h) => (h, None),
        Err(why) => (None, Some(why)),
    };
    let host_fd = host.as_ref().map(|f| f.as_raw_fd());
    let mut cmd = tokio::process::Command::new(prog);
    let own = std::env::var("PATH").unwrap_or_default();
    cmd.env(
        "PATH",
        if own.is_empty() {
            NODE_PATH.to_string()
        } else {
            format!("{own}:{NODE_PATH}")
        },
    );
    cmd.args(args).stderr(Stdio::piped()).kill_on_drop(true);
    // SAFETY: setns(2) is async-signal-safe; the closure touches nothing but the descriptors,
    // which the caller keeps open until the child has exited.
    unsafe {
        cmd.pre_exec(move || {
            let ns = BorrowedFd::borrow_raw(fd);
            nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(std::io::Error::from)?;
            if let Some(m) = host_fd {
                nix::sched::setns(
                    BorrowedFd::borrow_raw(m),
                    nix::sched::CloneFlags::CLONE_NEWNS,
                )
                .map_err(std::io::Error::from)?;
            }
            Ok(())
        });
    }
    InNamespace { cmd, host, why_not }
}

impl InNamespace {
    fn spawn(&mut self, prog: &str) -> Result<tokio::process::Child, String> {
        self.cmd.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!(
                "{prog} is not installed{} (observer restores through the backend's own tool{})",
                if self.host.is_some() {
                    " on the node"
                } else {
                    ""
                },
                self.why_not.as_deref().map_or(String::new(), |w| format!(
                    "; the node's could not be used: {w}"
                ))
            ),
            std::io::ErrorKind::PermissionDenied if self.host.is_some() => format!(
                "cannot enter the node's mount namespace to run its {prog}: {e} (grant \
                 CAP_SYS_CHROOT, or put {prog} in observer's own filesystem)"
            ),
            _ => format!("cannot run {prog}: {e}"),
        })
    }
}

/// What a finished tool's status and stderr say: `Ok` when it succeeded.
fn finished(prog: &str, out: &std::process::Output) -> Result<(), String> {
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let said = said.trim();
    Err(format!(
        "{prog} refused it ({}){}{}",
        out.status,
        if said.is_empty() { "" } else { ": " },
        said
    ))
}

fn too_long(prog: &str) -> String {
    format!(
        "{prog} did not finish within {} s: stopped (an atomic write leaves nothing \
         half-written)",
        TIMEOUT.as_secs()
    )
}

/// Run `tool` in the network namespace `netns` with `script` on its stdin. `spawned` is told
/// the writer's pid before it can write (its changes are tagged with it). `Err`: what went
/// wrong, with what the tool said.
pub async fn write(
    netns: BorrowedFd<'_>,
    tool: Tool,
    script: &str,
    spawned: impl FnOnce(u32),
) -> Result<(), String> {
    let [prog, _] = tool.argv();
    let mut run = in_namespace(netns, prog, &args(tool));
    run.cmd.stdin(Stdio::piped()).stdout(Stdio::null());
    let mut child = run.spawn(prog)?;
    if let Some(pid) = child.id() {
        spawned(pid);
    }
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let feed = async {
        stdin.write_all(script.as_bytes()).await?;
        stdin.shutdown().await?;
        drop(stdin);
        Ok::<(), std::io::Error>(())
    };
    let waited = async {
        // A tool that exits before reading all of the script shows it in its status.
        let _ = feed.await;
        child.wait_with_output().await
    };
    match tokio::time::timeout(TIMEOUT, waited).await {
        Err(_) => Err(too_long(prog)),
        Ok(Err(e)) => Err(format!("{prog}: {e}")),
        Ok(Ok(out)) => finished(prog, &out),
    }
}

/// `ipset save` in the network namespace `netns`: every set with its members, as `ipset
/// restore` takes them back. Only reads.
pub async fn save_ipsets(netns: BorrowedFd<'_>) -> Result<String, String> {
    let prog = "ipset";
    let mut run = in_namespace(netns, prog, &["save"]);
    run.cmd.stdin(Stdio::null()).stdout(Stdio::piped());
    let child = run.spawn(prog)?;
    match tokio::time::timeout(TIMEOUT, child.wait_with_output()).await {
        Err(_) => Err(format!(
            "{prog} save did not finish within {} s",
            TIMEOUT.as_secs()
        )),
        Ok(Err(e)) => Err(format!("{prog}: {e}")),
        Ok(Ok(out)) => {
            finished(prog, &out)?;
            String::from_utf8(out.stdout).map_err(|_| format!("{prog} save printed non-UTF-8 text"))
        }
    }
}
