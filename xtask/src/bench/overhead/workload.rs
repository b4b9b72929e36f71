//! The workloads of bench-overhead, run by its scripts as this binary's hidden
//! `overhead-workload` verb (so the host and the guests run the same code): each does one
//! kind of work N times and prints its nanoseconds per operation.

use std::{
    fmt::Write as _,
    fs,
    io::Write as _,
    net::UdpSocket,
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{bail, Context as _, Result};
use clap::Args;

use crate::{bench::procfs::rusage_cpu_ms, cmd};

#[derive(Args)]
pub struct WorkloadArgs {
    /// udp, fork, unshare, mount, netlink, nft, iptables.
    name: String,
    iterations: u64,
}

/// Run one workload and print its nanoseconds per operation: the wall time, then the CPU time
/// (user and system) of this process and the children it waited for (for the writers: the
/// writer's own CPU, which includes the eBPF programs that run in its syscalls, and not
/// observer's work on the other CPUs).
pub fn workload(args: &WorkloadArgs) -> Result<i32> {
    let n = args.iterations.max(1);
    let cpu_before = cpu_ms()?;
    let start = Instant::now();
    match args.name.as_str() {
        "udp" => udp(n)?,
        "fork" => forks(n, false)?,
        "unshare" => forks(n, true)?,
        "mount" => mounts(n)?,
        "netlink" => link_dumps(n)?,
        "nft" => nft_transactions(n)?,
        "iptables" => {
            for i in 0..n {
                let dport = (1000 + i % 60_000).to_string();
                cmd::run(Command::new("iptables-legacy").args([
                    "-A", "OBSOV", "-p", "tcp", "--dport", &dport, "-j", "ACCEPT",
                ]))?;
            }
        }
        other => bail!("no workload {other}"),
    }
    let wall = start.elapsed().as_nanos() as f64 / n as f64;
    let cpu = (cpu_ms()? - cpu_before) * 1e6 / n as f64;
    println!("{wall:.0} {cpu:.0}");
    Ok(0)
}

/// User and system time of this process and of its children waited for, in ms.
fn cpu_ms() -> Result<f64> {
    Ok(rusage_cpu_ms(libc::RUSAGE_SELF)? + rusage_cpu_ms(libc::RUSAGE_CHILDREN)?)
}

fn udp(n: u64) -> Result<()> {
    let a = UdpSocket::bind("127.0.0.1:0")?;
    let b = UdpSocket::bind("127.0.0.1:0")?;
    let (aa, ba) = (a.local_addr()?, b.local_addr()?);
    let mut buf = [0u8; 64];
    for _ in 0..n {
        a.send_to(&buf[..32], ba)?;
        b.recv_from(&mut buf)?;
        b.send_to(&buf[..32], aa)?;
        a.recv_from(&mut buf)?;
    }
    Ok(())
}

fn forks(n: u64, new_netns: bool) -> Result<()> {
    for _ in 0..n {
        // SAFETY: the child only calls async-signal-safe functions (unshare, _exit).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            bail!("fork: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: as above.
            unsafe {
                let ok = !new_netns || libc::unshare(libc::CLONE_NEWNET) == 0;
                libc::_exit(if ok { 0 } else { 1 });
            }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if status != 0 {
            bail!("the child failed (status {status})");
        }
    }
    Ok(())
}

fn c_string(s: &str) -> std::ffi::CString {
    std::ffi::CString::new(s).unwrap_or_default()
}

fn mounts(n: u64) -> Result<()> {
    // A mount namespace of our own: the node's mount table never sees these mounts.
    // SAFETY: plain syscalls on our own process.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            bail!("unshare(CLONE_NEWNS): {}", std::io::Error::last_os_error());
        }
        let root = c_string("/");
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        );
    }
    let dir = std::env::temp_dir().join(format!("obs-overhead-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let target = c_string(&dir.display().to_string());
    let (src, fstype) = (c_string("none"), c_string("tmpfs"));
    for _ in 0..n {
        // SAFETY: C strings that outlive the calls.
        let rc = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            bail!("mount: {}", std::io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::umount2(target.as_ptr(), 0) } != 0 {
            bail!("umount: {}", std::io::Error::last_os_error());
        }
    }
    let _ = fs::remove_dir(&dir);
    Ok(())
}

fn link_dumps(n: u64) -> Result<()> {
    // SAFETY: a socket we own and close.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE) };
    if fd < 0 {
        bail!("netlink socket: {}", std::io::Error::last_os_error());
    }
    // struct nlmsghdr (16) + struct ifinfomsg (16): RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP.
    let mut req = [0u8; 32];
    req[..4].copy_from_slice(&32u32.to_ne_bytes());
    req[4..6].copy_from_slice(&(libc::RTM_GETLINK).to_ne_bytes());
    req[6..8].copy_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    req[16] = libc::AF_UNSPEC as u8;
    let mut buf = vec![0u8; 32 * 1024];
    let mut result = Ok(());
    'outer: for seq in 0..n {
        req[8..12].copy_from_slice(&(seq as u32).to_ne_bytes());
        // SAFETY: our buffer and socket.
        if unsafe { libc::send(fd, req.as_ptr().cast(), req.len(), 0) } < 0 {
            result = Err(anyhow::anyhow!("send: {}", std::io::Error::last_os_error()));
            break;
        }
        loop {
            // SAFETY: as above.
            let got = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if got <= 0 {
                result = Err(anyhow::anyhow!("recv: {}", std::io::Error::last_os_error()));
                break 'outer;
            }
            let mut off = 0usize;
            while off + 16 <= got as usize {
                let len = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap_or([0; 4]));
                let ty = u16::from_ne_bytes(buf[off + 4..off + 6].try_into().unwrap_or([0; 2]));
                if ty == libc::NLMSG_DONE as u16 || ty == libc::NLMSG_ERROR as u16 {
                    continue 'outer;
                }
                off += (len as usize + 3) & !3;
                if len == 0 {
                    break;
                }
            }
        }
    }
    // SAFETY: closing our own socket.
    unsafe { libc::close(fd) };
    result
}

fn nft_transactions(n: u64) -> Result<()> {
    let mut child = Command::new("nft")
        .arg("-i")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .context("starting nft -i")?;
    let mut stdin = child.stdin.take().context("nft's stdin")?;
    let mut script = String::new();
    for i in 0..n {
        let _ = writeln!(
            script,
            "add rule ip obsov c tcp dport {} accept",
            1000 + i % 60_000
        );
    }
    stdin.write_all(script.as_bytes())?;
    drop(stdin);
    let status = child.wait()?;
    if !status.success() {
        bail!("nft -i failed: {status}");
    }
    Ok(())
}
