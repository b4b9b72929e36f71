//! A hostile namespace's text on an admin's screen: a writer whose comm holds escape
//! sequences, a rule comment that would set the window's title, clear the screen, recolour and
//! overwrite the line, bidi overrides, chain names with control characters (one through
//! iptables-nft, one with a newline and a CR that no tool allows, sent through raw netlink).
//! `observer tail` printing to a file shows all of it escaped (`\x1b`, `\u202e`) and holds no
//! control byte but its own line ends; `--json` holds the exact text. Needs root, ip,
//! iptables-legacy, iptables-nft and nft.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use observer_rules::netlink::{cstr, push_attr, NLMSG_ERROR, NLM_F_ACK, NLM_F_REQUEST};
use serde_json::Value;
use test_support::{change, observer_bin, skip_unless, KilledOnDrop, Netns, Observer, Writer};

const WAIT: u64 = 20;

/// The writer script's name, so the comm of its shell (and the actor of its changes).
const COMM: &str = "e\x1b[31mvil\x07";
/// The comment of the example: title, clear, colour, carriage return, backspace; and bidi.
const COMMENT: &str = "ok\x1b]0;pwned\x07\x1b[2J\x1b[31mRED\rX\x08Y \u{202e}evil\u{2066}";
const COMMENT_SHOWN: &str =
    "ok\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mRED\\x0dX\\x08Y \\u202eevil\\u2066";
/// A chain name iptables-nft accepts (it refuses only whitespace).
const NFT_CHAIN: &str = "n\x1b[2J\u{202e}x";
const NFT_CHAIN_SHOWN: &str = "n\\x1b[2J\\u202ex";
/// A chain name only raw netlink makes: a newline and a CR would forge a line of their own.
const RAW_TABLE: &str = "obs_raw";
const RAW_CHAIN: &str = "a\nb\rc\x1b[2J";
const RAW_CHAIN_SHOWN: &str = "a\\x0ab\\x0dc\\x1b[2J";

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFT_MSG_NEWTABLE: u16 = NFNL_SUBSYS_NFTABLES << 8;
const NFT_MSG_NEWCHAIN: u16 = (NFNL_SUBSYS_NFTABLES << 8) | 3;
const NLM_F_CREATE: u16 = 0x400;
const NFPROTO_IPV4: u8 = 2;

/// One nfnetlink message: header, `nfgenmsg`, attributes.
fn message(
    out: &mut Vec<u8>,
    msg_type: u16,
    flags: u16,
    seq: u32,
    family: u8,
    res_id: u16,
    attrs: &[u8],
) {
    let len = 16 + 4 + attrs.len();
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&msg_type.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&[family, 0]);
    out.extend_from_slice(&res_id.to_be_bytes());
    out.extend_from_slice(attrs);
}

/// Create table `ip RAW_TABLE` and its chain `RAW_CHAIN` in one batch, from this thread's
/// namespace; panics with the kernel's error when it refuses them.
fn raw_chain() {
    use nix::sys::socket::{self, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol};
    let fd = socket::socket(
        AddressFamily::Netlink,
        socket::SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkNetFilter,
    )
    .expect("netlink socket");
    let create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE;
    let mut table = Vec::new();
    push_attr(&mut table, 1, &cstr(RAW_TABLE)); // NFTA_TABLE_NAME
    let mut chain = Vec::new();
    push_attr(&mut chain, 1, &cstr(RAW_TABLE)); // NFTA_CHAIN_TABLE
    push_attr(&mut chain, 3, &cstr(RAW_CHAIN)); // NFTA_CHAIN_NAME
    let mut batch = Vec::new();
    message(
        &mut batch,
        NFNL_MSG_BATCH_BEGIN,
        NLM_F_REQUEST,
        1,
        0,
        NFNL_SUBSYS_NFTABLES,
        &[],
    );
    message(
        &mut batch,
        NFT_MSG_NEWTABLE,
        create,
        2,
        NFPROTO_IPV4,
        0,
        &table,
    );
    message(
        &mut batch,
        NFT_MSG_NEWCHAIN,
        create,
        3,
        NFPROTO_IPV4,
        0,
        &chain,
    );
    message(
        &mut batch,
        NFNL_MSG_BATCH_END,
        NLM_F_REQUEST,
        4,
        0,
        NFNL_SUBSYS_NFTABLES,
        &[],
    );
    socket::sendto(
        fd.as_raw_fd(),
        &batch,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .expect("send the batch");
    // The batch is processed in the send: its acks are queued when it returns.
    let mut acks = 0;
    let mut buf = vec![0u8; 65536];
    while let Ok(n) = socket::recv(fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
        for m in observer_rules::netlink::messages(&buf[..n]) {
            let m = m.expect("a netlink message");
            if m.msg_type == NLMSG_ERROR {
                let errno = i32::from_ne_bytes(m.payload[..4].try_into().unwrap());
                assert_eq!(
                    errno, 0,
                    "the kernel refused message {}: errno {}",
                    m.seq, -errno
                );
                acks += 1;
            }
        }
    }
    assert_eq!(acks, 2, "acks for the table and the chain");
}

/// Whether `c` may be in a tail's output to a file: nothing that drives a terminal.
fn inert(c: char) -> bool {
    c == '\n'
        || !(c.is_control()
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c))
}

fn contents(path: &std::path::Path) -> String {
    let mut s = String::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_string(&mut s))
        .expect("read the tail's output");
    s
}

/// Wait until the file holds `what`; its contents.
fn wait_file(path: &std::path::Path, what: &str, secs: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let s = contents(path);
        if s.contains(what) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "no {what:?} within {secs} s in:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn hostile_text_is_escaped_for_people_and_exact_in_json() {
    skip_unless!("ip", "iptables-legacy", "iptables-nft", "nft");
    let ns = Netns::new("hostile");
    let w = Writer::new(COMM);
    let dir = tempfile::tempdir().expect("tempdir");
    let human = dir.path().join("tail.txt");
    let _tail = KilledOnDrop(
        Command::new(observer_bin())
            .args(["tail", "--utc", "--netns", ns.name()])
            .stdout(std::fs::File::create(&human).expect("create the output file"))
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start observer tail"),
    );
    let mut obs = Observer::start(&["--netns", ns.name()]);
    wait_file(&human, "-- ready", 60);

    ns.write(&w, &["iptables-legacy", "-N", "OBS-HOSTILE"]);
    ns.write(
        &w,
        &[
            "iptables-legacy",
            "-A",
            "OBS-HOSTILE",
            "-m",
            "comment",
            "--comment",
            COMMENT,
            "-j",
            "ACCEPT",
        ],
    );
    ns.write(&w, &["iptables-nft", "-N", NFT_CHAIN]);
    ns.write(
        &w,
        &[
            "nft",
            "add table ip obs_hostile; add chain ip obs_hostile c",
        ],
    );
    ns.write(
        &w,
        &[
            "nft",
            &format!("add rule ip obs_hostile c counter comment \"{COMMENT}\""),
        ],
    );
    ns.enter(raw_chain).expect("enter the namespace");

    // JSON: the exact text.
    let v = obs.expect(
        "the legacy rule",
        WAIT,
        change("rule_add", Some("OBS-HOSTILE")),
    );
    assert_eq!(
        v["rule"],
        format!("-m comment --comment \"{COMMENT}\" -j ACCEPT"),
        "{v}"
    );
    assert_eq!(v["process"]["actor"], COMM, "{v}");
    assert_eq!(v["process"]["parent_comm"], COMM, "{v}");
    let v = obs.expect(
        "the iptables-nft chain",
        WAIT,
        change("chain_create", Some(NFT_CHAIN)),
    );
    assert_eq!(v["backend"], "nft", "{v}");
    let v = obs.expect("the nft rule", WAIT, |v: &Value| {
        change("rule_add", Some("c"))(v) && v["table"] == "obs_hostile"
    });
    let rule = v["rule"].as_str().unwrap_or_default();
    assert!(rule.contains(&format!("comment \"{COMMENT}\"")), "{v}");
    let v = obs.expect(
        "the raw chain",
        WAIT,
        change("chain_create", Some(RAW_CHAIN)),
    );
    assert_eq!(v["table"], RAW_TABLE, "{v}");

    // For people: every text escaped, and nothing in the file that drives a terminal.
    let text = wait_file(&human, RAW_CHAIN_SHOWN, WAIT);
    let bad: Vec<char> = text.chars().filter(|&c| !inert(c)).collect();
    assert!(
        bad.is_empty(),
        "control characters {bad:?} in the tail's output:\n{text}"
    );
    let legacy = text
        .lines()
        .find(|l| l.contains("rule_add") && l.contains("OBS-HOSTILE"))
        .unwrap_or_else(|| panic!("no legacy rule line in:\n{text}"));
    assert!(
        legacy.contains(&format!("--comment \"{COMMENT_SHOWN}\" -j ACCEPT")),
        "{legacy}"
    );
    assert!(
        legacy.contains(" e\\x1b[31mvil\\x07 "),
        "the actor escaped: {legacy}"
    );
    assert!(
        text.contains(NFT_CHAIN_SHOWN),
        "the iptables-nft chain escaped:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("obs_hostile")
                && l.contains(&format!("comment \"{COMMENT_SHOWN}\""))),
        "the nft rule's comment escaped:\n{text}"
    );
    // The newline in the raw chain's name forges no line: its change is one line.
    let raw = text
        .lines()
        .find(|l| l.contains(RAW_CHAIN_SHOWN))
        .unwrap_or_else(|| panic!("no raw chain line in:\n{text}"));
    assert!(
        raw.contains("chain_create") && raw.contains(RAW_TABLE),
        "{raw}"
    );
}
