//! Writes fuzz/seeds/<target>/ from the fixtures observer's own tests use (captured nfnetlink
//! datagrams, captured x_tables blobs, the incident fixtures' records) and a few hand-made
//! inputs (ring-buffer records of each kind, an arp_tables blob, owners and config files, small
//! records). Deterministic: run it again after a fixture changes and commit what differs.
//!
//! `AYA_BUILD_SKIP=1 cargo run --manifest-path fuzz/Cargo.toml --example make_seeds`

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use observer::sinks::record_writer::{Limits, Row, StoreStats, Writer};
use observer::store::{self, ChangeRow};
use observer_common::{nfnl, ns, process::Process, xt, Event, Header};
use observer_fuzz::{nla, push_record, rule_message, xt_selector};
use observer_rules::nftables::decode::{self, Notification};
use observer_rules::nftables::state::NftState;
use observer_rules::nftables::Dump;
use observer_rules::xtables::XtProto;

const NLA_F_NESTED: u16 = 0x8000;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("fuzz/ has a parent")
        .to_path_buf()
}

fn read(path: &str) -> Vec<u8> {
    let p = root().join(path);
    fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// The seeds of one target, written into a fresh directory.
struct Seeds {
    dir: PathBuf,
    bytes: usize,
    count: usize,
}

impl Seeds {
    fn new(target: &str) -> Seeds {
        let dir = root().join("fuzz/seeds").join(target);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("creating the seed directory");
        Seeds {
            dir,
            bytes: 0,
            count: 0,
        }
    }

    fn add(&mut self, name: &str, data: &[u8]) {
        fs::write(self.dir.join(name), data).expect("writing a seed");
        self.bytes += data.len();
        self.count += 1;
    }
}

impl Drop for Seeds {
    fn drop(&mut self) {
        println!(
            "{}: {} seeds, {} bytes",
            self.dir.display(),
            self.count,
            self.bytes
        );
    }
}

/// `(comment, datagram)` of a `testdata/*.hex` fixture (the format of `observer_rules::nftables::testing`).
fn hex_fixture(text: &str) -> Fixture {
    let mut out = Vec::new();
    let mut comment = String::new();
    for line in text.lines().map(str::trim) {
        if let Some(c) = line.strip_prefix('#') {
            comment = c.trim().to_string();
        } else if !line.is_empty() {
            let bytes = (0..line.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&line[i..i + 2], 16).expect("hex"))
                .collect();
            out.push((comment.clone(), bytes));
        }
    }
    out
}

/// The netlink messages of a datagram, each whole.
fn messages(mut d: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while d.len() >= 16 {
        let len = u32::from_ne_bytes([d[0], d[1], d[2], d[3]]) as usize;
        if len < 16 || len > d.len() {
            break;
        }
        out.push(&d[..len]);
        d = &d[len.next_multiple_of(4).min(d.len())..];
    }
    out
}

fn nlmsg(msg_type: u16, flags: u16, body: &[u8]) -> Vec<u8> {
    let mut m = ((16 + body.len()) as u32).to_ne_bytes().to_vec();
    m.extend_from_slice(&msg_type.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&[0; 8]);
    m.extend_from_slice(body);
    m
}

/// An `NFT_MSG_NEWGEN` closing a transaction of `nft` (pid 4242).
fn newgen(id: u32) -> Vec<u8> {
    let mut body = vec![0, 0, 0, 0];
    nla(&mut body, 1, &id.to_be_bytes());
    nla(&mut body, 2, &4242u32.to_be_bytes());
    nla(&mut body, 3, b"nft\0");
    nlmsg((10 << 8) | 15, 0, &body)
}

/// `(comment, datagram)` lines of a hex fixture.
type Fixture = Vec<(String, Vec<u8>)>;

fn nft_netlink(ops: &[(&str, Fixture)], corpus: &[&[u8]]) {
    let mut s = Seeds::new("nft_netlink");
    for (name, fixture) in ops {
        let mut gen = 0u32;
        let mut dump = Vec::new();
        let mut setup = Vec::new();
        let mut steps: Vec<(String, Vec<&[u8]>)> = Vec::new();
        for (comment, d) in fixture {
            if let Some(g) = comment.strip_prefix("dump gen ") {
                gen = g.parse().expect("generation");
                dump.extend_from_slice(d);
            } else if comment.starts_with("setup: ") {
                setup.push(d.as_slice());
            } else if let Some(cmd) = comment.strip_prefix("cmd: ") {
                match steps.last_mut() {
                    Some((c, v)) if c == cmd => v.push(d),
                    _ => steps.push((cmd.to_string(), vec![d])),
                }
            }
        }
        // The notifications that built the dump, from an empty state.
        let mut seed = 0u32.to_le_bytes().to_vec();
        push_record(&mut seed, &[]);
        for d in &setup {
            push_record(&mut seed, d);
        }
        s.add(&format!("{name}-setup"), &seed);
        // The first commands on top of the dump, then each command alone on an empty state
        // (later commands refer to what earlier ones made: that is fine for a fuzzer).
        let mut seed = gen.to_le_bytes().to_vec();
        push_record(&mut seed, &dump);
        for d in steps.iter().take(3).flat_map(|(_, ds)| ds) {
            push_record(&mut seed, d);
        }
        s.add(&format!("{name}-dump"), &seed);
        for (i, (_, ds)) in steps.iter().enumerate() {
            let mut seed = 0u32.to_le_bytes().to_vec();
            push_record(&mut seed, &[]);
            for d in ds {
                push_record(&mut seed, d);
            }
            s.add(&format!("{name}-step{i:02}"), &seed);
        }
    }
    // The rendering corpus: its tables, chains, sets and elements as a dump, and its rules as
    // notifications in datagrams of about 2 KiB, each closed by a NEWGEN.
    let msgs: Vec<&[u8]> = corpus.iter().flat_map(|d| messages(d)).collect();
    // NFT_MSG_NEWRULE of nf_tables.
    let is_rule = |m: &[u8]| m[4] == 6 && m[5] == 10;
    let mut objects = 1u32.to_le_bytes().to_vec();
    let others: Vec<&[u8]> = msgs.iter().copied().filter(|m| !is_rule(m)).collect();
    push_record(&mut objects, &others.concat());
    s.add("render-objects", &objects);
    let mut chunk = Vec::new();
    let mut n = 0;
    for m in msgs.iter().copied().filter(|m| is_rule(m)) {
        chunk.extend_from_slice(m);
        if chunk.len() > 2048 {
            let mut seed = 1u32.to_le_bytes().to_vec();
            push_record(&mut seed, &[]);
            chunk.extend_from_slice(&newgen(2));
            push_record(&mut seed, &chunk);
            s.add(&format!("render-rules{n:02}"), &seed);
            chunk.clear();
            n += 1;
        }
    }
}

/// The tables the nft_expr target picks from, in its order (see fuzz_targets/nft_expr.rs).
fn expr_tables(corpus: &[&[u8]]) -> Vec<(u8, String)> {
    let msgs: Vec<Notification> = corpus.iter().flat_map(|d| decode::decode(d)).collect();
    let st = NftState::from_dump(&Dump::from_notifications(1, msgs));
    std::iter::once((2, "t".to_string()))
        .chain(st.tables.keys().cloned())
        .collect()
}

fn nft_expr(datagrams: &[&[u8]], tables: &[(u8, String)]) {
    let mut s = Seeds::new("nft_expr");
    let mut seen = BTreeSet::new();
    for d in datagrams {
        for n in decode::decode(d) {
            let Notification::Rule(_, r) = n else {
                continue;
            };
            let mut payload = Vec::new();
            for e in &r.exprs {
                let mut elem = Vec::new();
                nla(&mut elem, 1, format!("{}\0", e.name).as_bytes());
                nla(&mut elem, 2 | NLA_F_NESTED, &e.data);
                nla(&mut payload, 1 | NLA_F_NESTED, &elem);
            }
            let pick = tables
                .iter()
                .position(|t| *t == (r.family, r.table.clone()))
                .unwrap_or(0);
            let mut seed = vec![r.family, pick as u8];
            seed.extend_from_slice(&payload);
            // Round trip through the target's own wrapping.
            assert!(matches!(
                decode::decode(&rule_message(r.family, &r.table, &payload)).as_slice(),
                [Notification::Rule(_, back)] if back.exprs == r.exprs
            ));
            if seen.insert(seed.clone()) {
                s.add(&format!("rule{:03}", s.count), &seed);
            }
        }
    }
}

/// A small arp_tables table (the installed tools cannot write one): INPUT with a rule and a
/// jump to a user chain holding a `mangle` target, OUTPUT with policy DROP, FORWARD.
fn arp_table() -> Vec<u8> {
    const ENTRY: usize = 192;
    let standard = |verdict: i32| {
        let mut t = vec![0u8; 40];
        t[0..2].copy_from_slice(&40u16.to_ne_bytes());
        t[32..36].copy_from_slice(&verdict.to_ne_bytes());
        t
    };
    let error = |name: &str| {
        let mut t = vec![0u8; 64];
        t[0..2].copy_from_slice(&64u16.to_ne_bytes());
        t[2..7].copy_from_slice(b"ERROR");
        t[32..32 + name.len()].copy_from_slice(name.as_bytes());
        t
    };
    let entry = |head: Vec<u8>, target: Vec<u8>| {
        let mut e = head;
        e.resize(ENTRY, 0);
        e[164..166].copy_from_slice(&(ENTRY as u16).to_ne_bytes());
        e[166..168].copy_from_slice(&((ENTRY + target.len()) as u16).to_ne_bytes());
        e.extend_from_slice(&target);
        e
    };
    let mut rule_head = vec![0u8; ENTRY];
    rule_head[0..4].copy_from_slice(&[10, 0, 0, 1]);
    rule_head[8..12].copy_from_slice(&[255; 4]);
    rule_head[82..84].copy_from_slice(&1u16.to_be_bytes());
    rule_head[84..86].copy_from_slice(&0xffffu16.to_be_bytes());
    let mut mangle = vec![0u8; 40];
    mangle[0..2].copy_from_slice(&40u16.to_ne_bytes());
    mangle[2..8].copy_from_slice(b"mangle");
    mangle[32..35].copy_from_slice(&[1, 2, 3]);
    // Offsets: INPUT rule 0, jump 232, policy 464; OUTPUT 696; FORWARD 928; user chain head
    // 1160, its rule 1416, its return 1648; the end 1880.
    let entries = [
        entry(rule_head, standard(-1)),
        entry(vec![], standard(1416)),
        entry(vec![], standard(-2)),
        entry(vec![], standard(-1)),
        entry(vec![], standard(-2)),
        entry(vec![], error("ARPCHAIN")),
        entry(vec![], mangle),
        entry(vec![], standard(-5)),
        entry(vec![], error("ERROR")),
    ]
    .concat();
    let mut info = vec![0u8; 68];
    info[..6].copy_from_slice(b"filter");
    let words: [u32; 9] = [0b111, 0, 696, 928, 464, 696, 928, 9, entries.len() as u32];
    for (i, w) in words.iter().enumerate() {
        info[32 + 4 * i..36 + 4 * i].copy_from_slice(&w.to_ne_bytes());
    }
    [info, entries].concat()
}

fn xt_blob() {
    let mut s = Seeds::new("xt_blob");
    for (name, proto) in [
        ("ip_filter_basic", XtProto::Ipv4),
        ("ip_filter_ext", XtProto::Ipv4),
        ("ip_nat", XtProto::Ipv4),
        ("ip_raw", XtProto::Ipv4),
        ("ip_mangle", XtProto::Ipv4),
        ("ip6_filter", XtProto::Ipv6),
        ("ip6_nat", XtProto::Ipv6),
    ] {
        let mut seed = vec![xt_selector(proto)];
        seed.extend(read(&format!(
            "observer-rules/src/xtables/testdata/{name}.bin"
        )));
        s.add(name, &seed);
    }
    let arp = arp_table();
    let t =
        observer_rules::fuzzing::xt_table(XtProto::Arp, &arp, false).expect("the arp seed decodes");
    assert_eq!(t.rule_count(), 3);
    let mut seed = vec![xt_selector(XtProto::Arp)];
    seed.extend(arp);
    s.add("arp_filter", &seed);
}

fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: the observer-common records are #[repr(C)] without padding; reading their bytes
    // is what the eBPF side does when it writes them.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
}

fn ring_record<T: Copy>(kind: u32, data: T) -> Vec<u8> {
    bytes_of(&Event {
        header: Header {
            kind,
            len: size_of::<Event<T>>() as u32,
            ktime_ns: 123_456_789,
        },
        data,
    })
}

fn process(comm: &str) -> Process {
    let mut p = Process::zeroed();
    p.tgid = 4242;
    p.tid = 4243;
    p.netns = 4026531840;
    p.cgroup_id = 77;
    p.comm[..comm.len()].copy_from_slice(comm.as_bytes());
    p.ancestor_tgid[..2].copy_from_slice(&[4241, 1]);
    p.ancestor_comm[0][..10].copy_from_slice(b"kube-proxy");
    p.ancestor_comm[1][..7].copy_from_slice(b"systemd");
    p
}

fn cstr(s: &str) -> Vec<u8> {
    format!("{s}\0").into_bytes()
}

/// An nf_tables request: header, nfgenmsg (family ip), attributes.
fn nft_request(cmd: u8, flags: u16, attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = vec![2, 0, 0, 0];
    for (k, v) in attrs {
        nla(&mut body, *k, v);
    }
    nlmsg((10 << 8) | u16::from(cmd), flags, &body)
}

fn copy_into(dst: &mut [u8], src: &[u8]) -> u32 {
    let n = src.len().min(dst.len());
    dst[..n].copy_from_slice(&src[..n]);
    n as u32
}

fn kernel_event() {
    let mut s = Seeds::new("kernel_event");
    for (name, level, optname, source) in [
        (
            "xt_ipv4",
            0,
            xt::IPT_SO_SET_REPLACE,
            observer_common::hook::HOOK_TRACEPOINT,
        ),
        (
            "xt_ipv6",
            xt::SOL_IPV6,
            xt::IPT_SO_SET_REPLACE,
            observer_common::hook::HOOK_KPROBE,
        ),
        (
            "xt_arp",
            0,
            xt::ARPT_SO_SET_REPLACE,
            observer_common::hook::HOOK_FENTRY,
        ),
        (
            "xt_ebt",
            0,
            xt::EBT_SO_SET_ENTRIES,
            observer_common::hook::HOOK_KPROBE,
        ),
    ] {
        let mut table = [0u8; 32];
        table[..3].copy_from_slice(b"nat");
        let mut args = [0u8; xt::ARGS_LEN];
        let args_len = copy_into(
            &mut args,
            b"iptables-legacy-restore\0--noflush\0HOME=/root\0",
        );
        let x = xt::XtReplace {
            process: process("iptables-legacy"),
            ret: if name == "xt_arp" { -16 } else { 0 },
            start_ns: 1,
            table,
            level,
            optname,
            num_entries: 9,
            size: 1880,
            source,
            _pad: 0,
            args_len: args_len - 11,
            _pad2: 0,
            args,
            blob_cookie: 0,
            blob_len: 0,
            blob_state: xt::BLOB_NONE,
        };
        s.add(name, &ring_record(observer_common::KIND_XT_REPLACE, x));
    }
    s.add(
        "netns_seen",
        &ring_record(
            observer_common::KIND_NETNS_SEEN,
            ns::NetnsSeen {
                process: process("unshare"),
                via: ns::VIA_UNSHARE,
                _pad: 0,
            },
        ),
    );
    let mut path = [0u8; ns::UMOUNT_PATH_LEN];
    copy_into(&mut path, b"/run/netns/blue");
    s.add(
        "umount",
        &ring_record(
            observer_common::KIND_UMOUNT,
            ns::Umount {
                process: process("ip"),
                path,
            },
        ),
    );
    // An nftables batch: begin, then a chain flush and a chain delete.
    let begin = nlmsg(
        nfnl::NFNL_MSG_BATCH_BEGIN,
        1,
        &[0, 0, 0, nfnl::NFNL_SUBSYS_NFTABLES as u8],
    );
    let flush = nft_request(8, 1, &[(1, cstr("filter")), (2, cstr("KUBE-SERVICES"))]);
    let delchain = nft_request(5, 1, &[(1, cstr("filter")), (3, cstr("KUBE-SERVICES"))]);
    let flush_set = nft_request(14, 1, &[(1, cstr("filter")), (2, cstr("blocked"))]);
    let deltable = nft_request(2, 1, &[(1, cstr("filter"))]);
    // An ipset add: protocol, set name, and an IPv4 address in IPSET_ATTR_DATA.
    let mut ip = Vec::new();
    nla(&mut ip, 1 | 0x4000, &[10, 0, 0, 1]);
    let mut adt = Vec::new();
    nla(&mut adt, 1 | NLA_F_NESTED, &ip);
    let mut ipset_body = vec![2, 0, 0, 0];
    nla(&mut ipset_body, 1, &[7]);
    nla(&mut ipset_body, 2, &cstr("kube-test"));
    nla(&mut ipset_body, 7 | NLA_F_NESTED, &adt);
    let ipset_add = nlmsg((nfnl::NFNL_SUBSYS_IPSET << 8) | 9, 5, &ipset_body);
    for (name, subsys, phase, head) in [
        (
            "nfnl_send_flush",
            nfnl::NFNL_SUBSYS_NFTABLES,
            nfnl::PHASE_ENTER,
            [begin.clone(), flush.clone(), delchain.clone()].concat(),
        ),
        (
            "nfnl_send_set_flush",
            nfnl::NFNL_SUBSYS_NFTABLES,
            nfnl::PHASE_ENTER,
            [begin.clone(), flush_set, deltable.clone()].concat(),
        ),
        (
            "nfnl_send_ipset",
            nfnl::NFNL_SUBSYS_IPSET,
            nfnl::PHASE_EXIT,
            ipset_add,
        ),
    ] {
        let mut buf = [0u8; nfnl::NFNL_HEAD_LEN];
        let captured = copy_into(&mut buf, &head);
        let n = nfnl::NfnlSend {
            process: process("nft"),
            ret: if phase == nfnl::PHASE_EXIT {
                head.len() as i64
            } else {
                0
            },
            sock_netns: 4026532245,
            subsys: u32::from(subsys),
            phase,
            len: head.len() as u32,
            captured,
            _pad: 0,
            head: buf,
        };
        s.add(name, &ring_record(observer_common::KIND_NFNL_SEND, n));
    }
    // What a writer read back: an acknowledgement, then EBUSY for the chain delete (echoed).
    let error = |errno: i32, req: &[u8]| {
        let mut body = errno.to_ne_bytes().to_vec();
        body.extend_from_slice(req);
        nlmsg(2, 0, &body)
    };
    let replies = [
        error(0, &deltable),
        error(-16, &delchain),
        error(-2, &flush),
    ]
    .concat();
    let mut data = [0u8; nfnl::NFNL_ACK_LEN];
    let captured = copy_into(&mut data, &replies);
    s.add(
        "nfnl_ack",
        &ring_record(
            observer_common::KIND_NFNL_ACK,
            nfnl::NfnlAck {
                process: process("iptables-nft-re"),
                sock_netns: 4026532245,
                ret: replies.len() as u32,
                captured,
                _pad: 0,
                data,
            },
        ),
    );
    let mut request = [0u8; nfnl::NFNL_REFUSED_LEN];
    let captured = copy_into(&mut request, &delchain);
    s.add(
        "nfnl_refused",
        &ring_record(
            observer_common::KIND_NFNL_REFUSED,
            nfnl::NfnlRefused {
                process: process("nft"),
                sock_netns: 0,
                errno: -16,
                captured,
                source: observer_common::hook::HOOK_FENTRY,
                request,
            },
        ),
    );
    for name in ["xt_ipv4", "nfnl_send_flush"] {
        let seed = fs::read(s.dir.join(name)).expect("seed");
        observer::hooks::decode::KernelEvent::parse(&seed).expect("the seed decodes");
    }
}

/// The first `n` lines of an incident fixture.
fn fixture_lines(name: &str, n: usize) -> Vec<String> {
    String::from_utf8(read(&format!("observer/src/incidents/fixtures/{name}")))
        .expect("UTF-8")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(n)
        .map(String::from)
        .collect()
}

fn sse() {
    let mut s = Seeds::new("sse");
    let churn = fixture_lines("kube_proxy_churn.jsonl", 12);
    let calico = fixture_lines("calico_vs_kube_proxy.jsonl", 200);
    let incidents: Vec<&String> = calico
        .iter()
        .filter(|l| l.contains("\"incident\""))
        .take(4)
        .collect();
    let mut stream = vec![4u8]; // chunks of 5 bytes
    stream.extend_from_slice(b": keep-alive\n\n");
    for (i, l) in churn.iter().enumerate() {
        stream.extend_from_slice(format!("id: {i}\ndata: {l}\n\n").as_bytes());
    }
    s.add("changes", &stream);
    let mut stream = vec![15u8];
    for (i, l) in incidents.iter().enumerate() {
        stream.extend_from_slice(format!("id: {}\r\ndata: {l}\r\n\r\n", 100 + i).as_bytes());
    }
    s.add("incidents-crlf", &stream);
    // A record split over data lines, an event without data, an unknown field, comments.
    let mut stream = vec![0u8];
    stream.extend_from_slice(
        b":ok\nretry: 1000\nid: 7\n\nevent: x\ndata: {\"kind\":\n data: \"status\"}\ndata\n\nid\ndata:  two spaces\n\n",
    );
    s.add("fields", &stream);
}

fn owners() {
    let mut s = Seeds::new("owners");
    let toml = [
        "[[owner]]\nname = \"calico\"\nactors = [\"calico-node\", \"calico-felix\"]\nchains = [\"cali-*\", \"felix-*\"]\n\n[[shared]]\nchains = [\"KUBE-MARK-MASQ\"]\nwriters = [\"kubelet\", \"kube-proxy\"]\n",
        "[[owner]]\nname = \"edge\"\nchains = [\"EDGE-*\"]\nvia = [\"edge-sync\"]\ntables = [\"inet edge\", \"ip edge-*\"]\n\nwrappers = [\"iptables-wrapper\"]\n",
        "[[owner]]\nname = \"\"\n",
        "[[shared]]\nchains = [\"X-{a,b}\", \"[!a-z]*\"]\nwriters = []\n",
    ];
    for (i, t) in toml.iter().enumerate() {
        s.add(
            &format!("toml{i}"),
            &[b"0".as_slice(), t.as_bytes()].concat(),
        );
    }
    let yaml = [
        "owner:\n  - name: calico\n    actors: [calico-node, calico-felix]\n    chains: [\"cali-*\"]\nshared:\n  - chains: [KUBE-FIREWALL]\n    writers: [kubelet, kube-router]\n",
        "owner:\n  - name: fw\n    tables: [\"inet firewalld\", \"bogus x\"]\n    via: [docker]\nwrappers: [sh]\n",
    ];
    for (i, t) in yaml.iter().enumerate() {
        s.add(
            &format!("yaml{i}"),
            &[b"1".as_slice(), t.as_bytes()].concat(),
        );
    }
}

fn config() {
    let mut s = Seeds::new("config");
    let files = [
        "listen = \"127.0.0.1:9999\"\nretain = \"36h\"\nmax_record = \"1GiB\"\nhooks = \"netlink\"\n",
        "listen = \"127.0.0.1:9999\"\nretian = \"7d\"\n",
        "ringbuf_size = 8388608\nnetlink_rcvbuf = \"64MiB\"\nflap_cycles = 0\n",
        "nats = \"nats://file:4222\"\nnats_max_age = \"2d\"\nnats_replicas = 3\nnats_max_bytes = \"2GiB\"\nnode = \"worker-1\"\nnats_stream = \"NETFILTER\"\n",
        "listen = \"0.0.0.0:9820\"\ntls_cert = \"/etc/observer/tls.crt\"\ntls_key = \"/etc/observer/tls.key\"\ntls_client_ca = \"/etc/observer/ca.crt\"\ntoken_file = \"/etc/observer/token\"\n",
        "record = \"/var/lib/observer\"\nno_record = true\nowners = \"/etc/observer/owners.toml\"\nflap_window = \"2m\"\nmass_window = \"5s\"\nrepair_within = \"90s\"\npod_logs = \"/var/log/pods\"\ncontainer_logs = \"/var/log/containers\"\ninsecure_plaintext = false\n",
    ];
    for (i, f) in files.iter().enumerate() {
        s.add(&format!("config{i}"), f.as_bytes());
    }
}

/// A change row for a fixture line (its own fields, as the daemon fills the columns).
fn change_row(seq: u64, line: &str) -> Row {
    let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
    let text = |k: &str| v.get(k).and_then(|x| x.as_str()).map(String::from);
    Row::Change(ChangeRow {
        seq,
        time_ns: 1_763_709_885_000_000_000 + seq as i64 * 1_000_000,
        netns: v.get("netns").and_then(|x| x.as_u64()).map(|n| n as u32),
        backend: text("backend"),
        table: text("table"),
        chain: text("chain"),
        op: text("op"),
        actor: v
            .pointer("/process/actor")
            .and_then(|x| x.as_str())
            .map(String::from),
        comm: v
            .pointer("/process/comm")
            .and_then(|x| x.as_str())
            .map(String::from),
        json: Arc::from(line),
    })
}

/// A record written by observer's own writer, then made small: rows `drop_below` and under
/// deleted, no write-ahead log, 512-byte pages.
fn make_record(dir: &Path, name: &str, rows: Vec<Row>, drop_below: u64) -> Vec<u8> {
    let path = dir.join(name);
    let mut w = Writer::new(
        store::open_rw(&path).expect("open_rw"),
        path.clone(),
        Limits {
            retain: Duration::from_secs(100 * 365 * 86400),
            max_bytes: u64::MAX,
        },
        Arc::new(StoreStats::default()),
    );
    for batch in rows.chunks(500) {
        w.write_batch(batch);
    }
    drop(w);
    let c = rusqlite::Connection::open(&path).expect("open");
    c.execute("DELETE FROM changes WHERE seq < ?1", [drop_below as i64])
        .expect("delete");
    c.execute_batch(
        "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE; \
         PRAGMA page_size = 512; VACUUM;",
    )
    .expect("shrink");
    drop(c);
    let conn = store::open_ro(&path).expect("open_ro");
    let got = store::select_changes(&conn, &store::Selection::default()).expect("select");
    assert!(!got.is_empty(), "{name}: no rows read back");
    fs::read(&path).expect("read the record")
}

fn record() {
    let mut s = Seeds::new("record");
    let dir = std::env::temp_dir().join(format!("observer-make-seeds-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("temp dir");
    let lines = fixture_lines("calico_vs_kube_proxy.jsonl", 1000);
    let changes: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("\"kind\":\"change\""))
        .collect();
    let incidents: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("\"kind\":\"incident\""))
        .collect();
    let incident_rows = || {
        incidents.iter().take(3).enumerate().map(|(i, l)| {
            let v: serde_json::Value = serde_json::from_str(l).expect("JSON");
            Row::Incident {
                no: i as u64 + 1,
                time_ns: 1_763_709_886_000_000_000 + i as i64,
                kind: v.get("type").and_then(|x| x.as_str()).map(String::from),
                netns: v.get("netns").and_then(|x| x.as_u64()).map(|n| n as u32),
                json: Arc::from(l.as_str()),
            }
        })
    };
    // Plain rows.
    let mut rows: Vec<Row> = changes
        .iter()
        .take(8)
        .enumerate()
        .map(|(i, l)| change_row(i as u64 + 1, l))
        .collect();
    rows.extend(incident_rows());
    s.add("plain", &make_record(&dir, "plain.db", rows, 0));
    // Enough rows to train the record's dictionary, of which the last few (compressed) are kept.
    let rows: Vec<Row> = (0..1010u64)
        .map(|i| change_row(i + 1, changes[i as usize % changes.len()]))
        .chain(incident_rows())
        .collect();
    s.add("dictionary", &make_record(&dir, "dict.db", rows, 1004));
    // A record of the first layout (text columns, JSON as text).
    let path = dir.join("layout1.db");
    let c = rusqlite::Connection::open(&path).expect("open");
    c.execute_batch(
        "PRAGMA page_size = 512; PRAGMA user_version = 1;
         CREATE TABLE changes (seq INTEGER PRIMARY KEY, time_ns INTEGER NOT NULL, netns INTEGER,
           backend TEXT, tbl TEXT, chain TEXT, op TEXT, actor TEXT, comm TEXT, json TEXT NOT NULL);
         CREATE INDEX changes_time ON changes(time_ns);
         CREATE INDEX changes_chain ON changes(chain, time_ns);
         CREATE TABLE incidents (no INTEGER PRIMARY KEY, time_ns INTEGER NOT NULL, type TEXT,
           netns INTEGER, json TEXT NOT NULL);",
    )
    .expect("layout 1");
    for (i, l) in changes.iter().take(4).enumerate() {
        let Row::Change(ChangeRow {
            time_ns,
            netns,
            backend,
            table,
            chain,
            op,
            actor,
            comm,
            ..
        }) = change_row(i as u64 + 1, l)
        else {
            unreachable!()
        };
        c.execute(
            "INSERT INTO changes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            rusqlite::params![
                i as i64 + 1,
                time_ns,
                netns,
                backend,
                table,
                chain,
                op,
                actor,
                comm,
                l.as_str()
            ],
        )
        .expect("insert");
    }
    c.execute(
        "INSERT INTO incidents VALUES (1, 5, 'foreign_flush', 7, ?1)",
        [incidents[0].as_str()],
    )
    .expect("insert");
    drop(c);
    s.add("layout1", &fs::read(&path).expect("read"));
    let _ = fs::remove_dir_all(&dir);
}

fn main() {
    let nft_ops = hex_fixture(
        &String::from_utf8(read("observer-rules/src/nftables/testdata/nft_ops.hex"))
            .expect("UTF-8"),
    );
    let ipt_ops = hex_fixture(
        &String::from_utf8(read(
            "observer-rules/src/nftables/testdata/iptables_ops.hex",
        ))
        .expect("UTF-8"),
    );
    let corpus_bin = read("observer-rules/src/nftables/testdata/render_corpus.bin");
    let corpus = observer_fuzz::records(&corpus_bin);
    nft_netlink(
        &[
            ("nft_ops", nft_ops.clone()),
            ("iptables_ops", ipt_ops.clone()),
        ],
        &corpus,
    );
    let all: Vec<&[u8]> = corpus
        .iter()
        .copied()
        .chain(nft_ops.iter().map(|(_, d)| d.as_slice()))
        .chain(ipt_ops.iter().map(|(_, d)| d.as_slice()))
        .collect();
    nft_expr(&all, &expr_tables(&corpus));
    xt_blob();
    kernel_event();
    sse();
    owners();
    config();
    record();
}
