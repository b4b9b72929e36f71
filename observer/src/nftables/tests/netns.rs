//! Live-test helpers: a throw-away network namespace, the nfnetlink sockets opened inside it,
//! commands run in it, and reading what its notification socket queued.

use std::time::Duration;

use netlink_sys::Socket;

use crate::nftables::{ifnames, socket, NftError};

/// Why a root test cannot run here, if it cannot.
pub fn root_skip_reason() -> Option<String> {
    test_support::skip_reason(&["nft", "ip"])
}

/// A named network namespace, deleted on drop (also when the test panics).
pub struct Netns {
    pub name: String,
    ns: test_support::Netns,
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        let ns = test_support::Netns::add(format!("obs-nft-{tag}-{}", std::process::id()))
            .unwrap_or_else(|e| panic!("{e}"));
        Netns {
            name: ns.name().to_string(),
            ns,
        }
    }

    /// Run a shell command inside the namespace; panics when it fails.
    pub fn sh(&self, cmd: &str) -> String {
        self.ns
            .run("sh", &["-c", cmd])
            .unwrap_or_else(|e| panic!("`{cmd}` failed: {e}"))
    }

    /// Run a shell command inside the namespace: its stdout, or why it failed (with stderr).
    pub fn try_sh(&self, cmd: &str) -> Result<String, String> {
        self.ns.run("sh", &["-c", cmd]).map_err(|e| e.to_string())
    }

    /// Open the notification socket and a request socket inside the namespace, from a thread
    /// that entered it (the test thread stays in the host namespace).
    pub fn sockets(&self) -> Result<(Socket, Socket), NftError> {
        self.ns
            .enter(|| Ok((socket::subscribe()?, socket::request_socket()?)))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The namespace's interface names, from a socket opened inside it.
    pub fn ifnames(&self) -> ifnames::IfNames {
        self.ns
            .enter(|| ifnames::IfNames::open().expect("NETLINK_ROUTE socket"))
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// Read every datagram queued on the (non-blocking) notification socket. The kernel queues
/// notifications before the writer's commit returns, so after the command has exited a short
/// grace period is enough.
pub fn drain(sock: &Socket) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; socket::RECV_BUF_BYTES];
    let mut idle = 0;
    while idle < 3 {
        match socket::recv(sock, &mut buf).expect("recv") {
            Some(n) => {
                out.push(buf[..n].to_vec());
                idle = 0;
            }
            None => {
                idle += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    out
}

/// Why the iptables-nft parts of a live test cannot run here, if they cannot.
pub fn iptables_skip_reason() -> Option<String> {
    test_support::skip_reason(&["iptables-nft", "iptables-nft-restore"])
}

/// Make a socket's receive buffer small (to provoke ENOBUFS).
pub fn shrink_rcvbuf(sock: &Socket, bytes: i32) {
    use std::os::fd::AsRawFd;
    // SAFETY: `bytes` is a valid c_int that outlives the call; the length matches its type.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&bytes as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUFFORCE");
}
