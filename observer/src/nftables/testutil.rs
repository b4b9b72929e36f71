//! Test helpers: a throw-away network namespace, sockets opened inside it, commands run in it,
//! and the hex fixture format of captured datagrams (`testdata/*.hex`: one datagram per line,
//! `#` lines are comments naming the command that produced the datagrams below them).

use std::time::Duration;

use netlink_sys::Socket;

use super::decode::{decode, Element};
use super::generation::{GenerationBuilder, Transaction};
use super::socket::{self, Dump};
use super::state::NftState;
use super::NftError;

/// A set element of a 4-byte key, with no range end, data or comment.
pub fn element(key: [u8; 4], flags: u32) -> Element {
    Element {
        key: key.to_vec(),
        key_end: None,
        data: None,
        objref: None,
        flags,
        timeout_ms: None,
        comment: None,
    }
}

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
    pub fn ifnames(&self) -> super::ifnames::IfNames {
        self.ns
            .enter(|| super::ifnames::IfNames::open().expect("NETLINK_ROUTE socket"))
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

pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parse a fixture: `(comment lines before it, datagram)` for each datagram line.
pub fn parse_fixture(text: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut comment = String::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(c) = line.strip_prefix('#') {
            comment = c.trim().to_string();
            continue;
        }
        if line.is_empty() {
            continue;
        }
        let bytes = (0..line.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&line[i..i + 2], 16).expect("hex fixture"))
            .collect();
        out.push((comment.clone(), bytes));
    }
    out
}

/// Datagrams of a binary fixture: each a little-endian u32 length and its bytes.
pub fn parse_bin(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let [a, b, c, d, rest @ ..] = bytes {
        let len = u32::from_le_bytes([*a, *b, *c, *d]) as usize;
        out.push(rest[..len].to_vec());
        bytes = &rest[len..];
    }
    out
}

/// `nft -a list ruleset` rule lines: ((family, table, chain, handle), text).
pub fn nft_rules(listing: &str) -> Vec<((String, String, String, u64), String)> {
    let mut out = Vec::new();
    let (mut fam, mut table, mut chain) = (String::new(), String::new(), String::new());
    for line in listing.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("table ") {
            let mut it = rest.split_whitespace();
            fam = it.next().unwrap_or_default().into();
            table = it.next().unwrap_or_default().into();
        } else if let Some(rest) = l.strip_prefix("chain ") {
            chain = rest.split_whitespace().next().unwrap_or_default().into();
        } else if let Some((body, h)) = l.rsplit_once(" # handle ") {
            if body.starts_with("type ") || body.ends_with('{') {
                continue;
            }
            if let Ok(h) = h.trim().parse() {
                out.push((
                    (fam.clone(), table.clone(), chain.clone(), h),
                    body.trim().to_string(),
                ));
            }
        }
    }
    out
}

pub fn nfproto(family: &str) -> u8 {
    match family {
        "inet" => 1,
        "ip" => 2,
        "arp" => 3,
        "netdev" => 5,
        "bridge" => 7,
        "ip6" => 10,
        _ => 0,
    }
}

/// nft prints counters with their values; the renderer prints `counter` alone.
pub fn strip_counters(s: &str) -> String {
    let words: Vec<&str> = s.split(' ').collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        out.push(words[i]);
        if words[i] == "counter" && words.get(i + 1) == Some(&"packets") {
            i += 5;
        } else {
            i += 1;
        }
    }
    out.join(" ")
}

/// One change as a line: `rule_add ip t c @3: iifname "lo" accept (detail)`.
pub fn line(c: &crate::ruleset::Change) -> String {
    let mut s = format!("{} {} {}", c.op, c.family, c.table);
    if let Some(ch) = &c.chain {
        s = format!("{s} {ch}");
    }
    if let Some(p) = c.position {
        s = format!("{s} @{p}");
    }
    // The nft form, when the rule is also in its writer's (iptables-nft-save) syntax.
    if let Some(r) = c.forms.rule_nft.as_ref().or(c.rule.as_ref()) {
        s = format!("{s}: {r}");
    }
    if let Some(d) = &c.detail {
        s = format!("{s} ({d})");
    }
    s
}

/// A fixture replayed through a builder.
pub struct Replay {
    pub builder: GenerationBuilder,
    /// Transactions produced by the setup notifications (older than the dump).
    pub setup_transactions: usize,
    /// The transactions of each command.
    pub steps: Vec<(String, Vec<Transaction>)>,
    /// The dump taken after the last command.
    pub final_dump: Dump,
}

pub fn replay(text: &str) -> Replay {
    let mut setup = Vec::new();
    let (mut dump_msgs, mut final_msgs) = (Vec::new(), Vec::new());
    let (mut gen_id, mut final_gen) = (0, 0);
    let mut steps: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
    for (comment, bytes) in parse_fixture(text) {
        if let Some(g) = comment.strip_prefix("dump gen ") {
            gen_id = g.parse().expect("gen");
            dump_msgs.extend(decode(&bytes));
        } else if let Some(g) = comment.strip_prefix("final dump gen ") {
            final_gen = g.parse().expect("gen");
            final_msgs.extend(decode(&bytes));
        } else if comment.starts_with("setup: ") {
            setup.push(bytes);
        } else if let Some(cmd) = comment.strip_prefix("cmd: ") {
            match steps.last_mut() {
                Some((c, v)) if c == cmd => v.push(bytes),
                _ => steps.push((cmd.to_string(), vec![bytes])),
            }
        }
    }
    let dump = Dump::from_notifications(gen_id, dump_msgs);
    let mut builder = GenerationBuilder::new(NftState::from_dump(&dump));
    let setup_transactions = setup
        .iter()
        .map(|d| builder.feed(d).transactions.len())
        .sum();
    let steps = steps
        .into_iter()
        .map(|(cmd, ds)| {
            let txns = ds
                .iter()
                .flat_map(|d| builder.feed(d).transactions)
                .collect();
            (cmd, txns)
        })
        .collect();
    Replay {
        builder,
        setup_transactions,
        steps,
        final_dump: Dump::from_notifications(final_gen, final_msgs),
    }
}

/// What must agree between an incrementally maintained state and a fresh dump: per chain the
/// rules (handle, text, fingerprint) in order, per set its elements.
pub fn projection(st: &NftState) -> Vec<String> {
    let mut out = Vec::new();
    for ((fam, name), t) in &st.tables {
        out.push(format!("table {fam} {name}"));
        for (cname, c) in &t.chains {
            out.push(format!(
                "chain {cname} {:?}",
                crate::nftables::state::describe_chain(&c.chain)
            ));
            for r in &c.rules {
                out.push(format!("  #{} {:016x} {}", r.handle, r.fingerprint, r.text));
            }
        }
        for (sname, s) in &t.sets {
            out.push(format!("set {sname} {} elements", s.elements.len()));
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
