//! The 20,000-rule table the bench's x_tables parts work on: a filter table shaped like
//! kube-proxy's (services, endpoints, comments, statistic, jumps between chains), for
//! `iptables-legacy-restore` and in nftables' words for `nft -f`, and its build in a namespace
//! (checked against `iptables-legacy-save`).

use std::{fmt::Write as _, time::Instant};

use anyhow::{bail, Result};

use super::{netns::Netns, spawn::run_bounded, stats::ms, SLOW_COMMAND_TIMEOUT};

/// The big table: user chains and rules per chain (2 fixed chains + 666 services of 3 chains).
const BIG_CHAINS: usize = 2_000;
const RULES_PER_CHAIN: usize = 10;
const SERVICES: usize = (BIG_CHAINS - 2) / 3;
const _: () = assert!(2 + 3 * SERVICES == BIG_CHAINS);

pub(super) struct BigTable {
    /// `-A` lines and user chains in `iptables-legacy-save -t filter` once ONEMORE exists.
    pub(super) rules: usize,
    pub(super) user_chains: usize,
    pub(super) restore_ms: f64,
    pub(super) save_bytes: usize,
}

/// A kube-proxy-like chain name: KUBE-SVC-/KUBE-SEP- and 16 base32 characters.
pub(crate) fn chain_hash(seed: u64) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut x = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut out = String::with_capacity(16);
    for round in 0..2 {
        // splitmix64
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(round + 1));
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        for _ in 0..8 {
            out.push(char::from(ALPHABET[(z & 31) as usize]));
            z >>= 5;
        }
    }
    out
}

/// Service `s`'s chain.
fn svc(s: usize) -> String {
    format!("KUBE-SVC-{}", chain_hash(s as u64 * 4))
}

/// The chain of service `s`'s endpoint `e`.
fn sep(s: usize, e: usize) -> String {
    format!("KUBE-SEP-{}", chain_hash(s as u64 * 4 + 1 + e as u64))
}

/// The address of service `s`'s endpoint `e`.
fn endpoint(s: usize, e: usize) -> String {
    let n = 2 * s + e;
    format!("10.244.{}.{}", n / 250, n % 250 + 1)
}

fn cluster_ip(s: usize) -> String {
    format!("10.96.{}.{}", s / 250, s % 250 + 1)
}

/// Service `s`'s namespace and name.
fn name(s: usize) -> (String, String) {
    (format!("ns-{}", s % 40), format!("svc-{s}"))
}

/// An `iptables-legacy-restore` input: a filter table of [`BIG_CHAINS`] user chains of
/// [`RULES_PER_CHAIN`] rules each, shaped like kube-proxy's (services, endpoints, comments,
/// statistic, jumps between chains), plus one jump from each built-in chain.
///
/// kube-proxy's `-j DNAT --to-destination` is only valid in the nat table; the kernel refuses it
/// in filter, so each endpoint chain has `-j MARK --set-xmark` (a target with data) in its place.
pub(crate) fn kube_like_table() -> String {
    let mut t = String::with_capacity(5 << 20);
    t.push_str("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n");
    t.push_str(":KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n");
    for s in 0..SERVICES {
        let _ = writeln!(
            t,
            ":{} - [0:0]\n:{} - [0:0]\n:{} - [0:0]",
            svc(s),
            sep(s, 0),
            sep(s, 1)
        );
    }
    for builtin in ["INPUT", "FORWARD", "OUTPUT"] {
        let _ = writeln!(
            t,
            "-A {builtin} -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
        );
    }
    // KUBE-SERVICES: the first services' cluster IPs (the rest hang below them, see rules 3-4).
    for s in 0..RULES_PER_CHAIN {
        let (ns, name) = name(s);
        let _ = writeln!(
            t,
            "-A KUBE-SERVICES -d {}/32 -p tcp -m comment --comment \"{ns}/{name}:http cluster IP\" \
             -m tcp --dport 80 -j {}",
            cluster_ip(s),
            svc(s)
        );
    }
    t.push_str("-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n");
    for k in 1..RULES_PER_CHAIN {
        let _ = writeln!(
            t,
            "-A KUBE-MARK-MASQ -m mark --mark 0x{k}000/0xf000 -m comment --comment \"masq class {k}\" -j RETURN"
        );
    }
    for s in 0..SERVICES {
        for r in legacy_service_rules(s) {
            t.push_str(&r);
            t.push('\n');
        }
        for e in 0..2 {
            for r in legacy_endpoint_rules(s, e) {
                t.push_str(&r);
                t.push('\n');
            }
        }
    }
    t.push_str("COMMIT\n");
    t
}

/// An `nft -f` input with the shape of [`kube_like_table`] in nftables' own words: table `ip
/// {table}` with the same 2,000 user chains of 10 rules each (20,003 rules with one jump from
/// each base chain). The file first empties the table when it exists (`flush table`), so each
/// run replaces every rule, as a full resync does. `extra` adds one chain with one rule, so two
/// versions can alternate.
pub(crate) fn kube_like_nft(table: &str, extra: bool) -> String {
    let mut t = String::with_capacity(3 << 20);
    let _ = writeln!(
        t,
        "table ip {table}\nflush table ip {table}\ntable ip {table} {{"
    );
    // Every chain first, so that jumps may name chains defined further down.
    let mut chains = vec!["KUBE-SERVICES".to_owned(), "KUBE-MARK-MASQ".to_owned()];
    for s in 0..SERVICES {
        chains.extend([svc(s), sep(s, 0), sep(s, 1)]);
    }
    if extra {
        chains.push("OBS-BENCH-EXTRA".to_owned());
    }
    for c in &chains {
        let _ = writeln!(t, "\tchain {c} {{\n\t}}");
    }
    for (base, hook) in [
        ("INPUT", "input"),
        ("FORWARD", "forward"),
        ("OUTPUT", "output"),
    ] {
        let _ = writeln!(t, "\tchain {base} {{");
        let _ = writeln!(
            t,
            "\t\ttype filter hook {hook} priority filter; policy accept;"
        );
        let _ = writeln!(
            t,
            "\t\tjump KUBE-SERVICES comment \"kubernetes service portals\"\n\t}}"
        );
    }
    let mut chain = |name: &str, rules: &[String]| {
        let _ = writeln!(t, "\tchain {name} {{");
        for r in rules {
            let _ = writeln!(t, "\t\t{r}");
        }
        t.push_str("\t}\n");
    };
    let services: Vec<String> = (0..RULES_PER_CHAIN)
        .map(|s| {
            let (ns, n) = name(s);
            format!(
                "ip daddr {} tcp dport 80 jump {} comment \"{ns}/{n}:http cluster IP\"",
                cluster_ip(s),
                svc(s)
            )
        })
        .collect();
    chain("KUBE-SERVICES", &services);
    let mut masq = vec!["meta mark set meta mark | 0x4000".to_owned()];
    masq.extend(
        (1..RULES_PER_CHAIN)
            .map(|k| format!("meta mark & 0xf000 == 0x{k}000 return comment \"masq class {k}\"")),
    );
    chain("KUBE-MARK-MASQ", &masq);
    for s in 0..SERVICES {
        chain(&svc(s), &nft_service_rules(s));
        for e in 0..2 {
            chain(&sep(s, e), &nft_endpoint_rules(s, e));
        }
    }
    if extra {
        chain("OBS-BENCH-EXTRA", &["tcp dport 9 drop".to_owned()]);
    }
    t.push_str("}\n");
    t
}

/// Service `s`'s chain in [`kube_like_table`]: its rules, as `-A` lines.
fn legacy_service_rules(s: usize) -> [String; RULES_PER_CHAIN] {
    let (ns, n) = name(s);
    let (chain, ip, port) = (svc(s), cluster_ip(s), 80 + s % 20);
    let child = |c: usize| {
        if c < SERVICES {
            format!(
                "-A {chain} -m comment --comment \"{ns}/{n}:http dependent\" -j {}",
                svc(c)
            )
        } else {
            format!(
                "-A {chain} -d {ip}/32 -p tcp -m tcp --dport {} -j DROP",
                port + 1000
            )
        }
    };
    [
        format!(
            "-A {chain} -d {ip}/32 ! -s 10.244.0.0/16 -p tcp -m comment --comment \"{ns}/{n}:http cluster IP\" -m tcp --dport {port} -j KUBE-MARK-MASQ"
        ),
        format!(
            "-A {chain} -m comment --comment \"{ns}/{n}:http -> {}:8080\" -m statistic --mode random --probability 0.50000000000 -j {}",
            endpoint(s, 0),
            sep(s, 0)
        ),
        format!(
            "-A {chain} -m comment --comment \"{ns}/{n}:http -> {}:8080\" -j {}",
            endpoint(s, 1),
            sep(s, 1)
        ),
        child(2 * s + RULES_PER_CHAIN),
        child(2 * s + RULES_PER_CHAIN + 1),
        format!("-A {chain} -d {ip}/32 -p udp -m comment --comment \"{ns}/{n}:dns\" -m udp --dport 53 -j ACCEPT"),
        format!("-A {chain} -d {ip}/32 -p tcp -m comment --comment \"{ns}/{n}:https has no endpoints\" -m tcp --dport 443 -j REJECT --reject-with icmp-port-unreachable"),
        format!("-A {chain} -m mark --mark 0x4000/0x4000 -m comment --comment \"{ns}/{n} masqueraded\" -j ACCEPT"),
        format!("-A {chain} -s 10.244.{}.0/24 -d {ip}/32 -p tcp -m multiport --dports 8000:8100,9090 -j ACCEPT", s % 250),
        format!("-A {chain} -m comment --comment \"{ns}/{n}:http no endpoint matched\" -j RETURN"),
    ]
}

/// Endpoint `e` of service `s` in [`kube_like_table`]: its chain's rules, as `-A` lines.
fn legacy_endpoint_rules(s: usize, e: usize) -> [String; RULES_PER_CHAIN] {
    let (ns, n) = name(s);
    let (chain, ep) = (sep(s, e), endpoint(s, e));
    let id = 2 * s + e + 1;
    [
        format!("-A {chain} -s {ep}/32 -m comment --comment \"{ns}/{n}:http\" -j KUBE-MARK-MASQ"),
        // Stands for `-p tcp -m tcp -j DNAT --to-destination {ep}:8080` (nat only).
        format!("-A {chain} -p tcp -m comment --comment \"{ns}/{n}:http\" -m tcp -j MARK --set-xmark 0x{id:x}/0xffffffff"),
        format!("-A {chain} -d {ep}/32 -p tcp -m tcp --dport 8080 --tcp-flags SYN,RST,ACK SYN -j ACCEPT"),
        format!("-A {chain} -s {ep}/32 -p udp -m udp --sport 53 -j ACCEPT"),
        format!("-A {chain} -d {ep}/32 -p tcp -m comment --comment \"{ns}/{n}:metrics\" -m tcp --dport 9090 -j ACCEPT"),
        format!("-A {chain} -m mark --mark 0x{id:x}/0xffffffff -j ACCEPT"),
        format!("-A {chain} -s {ep}/32 -p icmp -m icmp --icmp-type 8 -j ACCEPT"),
        format!("-A {chain} -d {ep}/32 -p tcp -m tcp --dport 22 -j DROP"),
        format!("-A {chain} -d {ep}/32 -p tcp -m comment --comment \"{ns}/{n}:https\" -m tcp --dport 8443 -j ACCEPT"),
        format!("-A {chain} -j RETURN"),
    ]
}

/// Service `s`'s chain in [`kube_like_nft`]: its rules, in nftables' words.
fn nft_service_rules(s: usize) -> [String; RULES_PER_CHAIN] {
    let (ns, n) = name(s);
    let (ip, port) = (cluster_ip(s), 80 + s % 20);
    let child = |c: usize| {
        if c < SERVICES {
            format!("jump {} comment \"{ns}/{n}:http dependent\"", svc(c))
        } else {
            format!("ip daddr {ip} tcp dport {} drop", port + 1000)
        }
    };
    [
        format!(
            "ip daddr {ip} ip saddr != 10.244.0.0/16 tcp dport {port} jump KUBE-MARK-MASQ \
             comment \"{ns}/{n}:http cluster IP\""
        ),
        format!(
            "numgen random mod 2 vmap {{ 0 : jump {}, 1 : jump {} }} comment \"{ns}/{n}:http endpoints\"",
            sep(s, 0),
            sep(s, 1)
        ),
        format!(
            "jump {} comment \"{ns}/{n}:http -> {}:8080\"",
            sep(s, 1),
            endpoint(s, 1)
        ),
        child(2 * s + RULES_PER_CHAIN),
        child(2 * s + RULES_PER_CHAIN + 1),
        format!("ip daddr {ip} udp dport 53 accept comment \"{ns}/{n}:dns\""),
        format!(
            "ip daddr {ip} tcp dport 443 reject with icmp type port-unreachable \
             comment \"{ns}/{n}:https has no endpoints\""
        ),
        format!("meta mark & 0x4000 == 0x4000 accept comment \"{ns}/{n} masqueraded\""),
        format!(
            "ip saddr 10.244.{}.0/24 ip daddr {ip} tcp dport 8000-8100 accept",
            s % 250
        ),
        format!("return comment \"{ns}/{n}:http no endpoint matched\""),
    ]
}

/// Endpoint `e` of service `s` in [`kube_like_nft`]: its chain's rules, in nftables' words.
fn nft_endpoint_rules(s: usize, e: usize) -> [String; RULES_PER_CHAIN] {
    let (ns, n) = name(s);
    let ep = endpoint(s, e);
    let id = 2 * s + e + 1;
    [
        format!("ip saddr {ep} jump KUBE-MARK-MASQ comment \"{ns}/{n}:http\""),
        format!("meta l4proto tcp meta mark set 0x{id:x} comment \"{ns}/{n}:http\""),
        format!("ip daddr {ep} tcp dport 8080 tcp flags & (syn | rst | ack) == syn accept"),
        format!("ip saddr {ep} udp sport 53 accept"),
        format!("ip daddr {ep} tcp dport 9090 accept comment \"{ns}/{n}:metrics\""),
        format!("meta mark 0x{id:x} accept"),
        format!("ip saddr {ep} icmp type echo-request accept"),
        format!("ip daddr {ep} tcp dport 22 drop"),
        format!("ip daddr {ep} tcp dport 8443 accept comment \"{ns}/{n}:https\""),
        "return".to_owned(),
    ]
}

pub(super) fn build_big_table(ns: &Netns) -> Result<BigTable> {
    let input = kube_like_table();
    let start = Instant::now();
    let mut restore = ns.cmd("iptables-legacy-restore");
    restore.args(["-w", "30"]);
    run_bounded(&mut restore, Some(input.as_bytes()), SLOW_COMMAND_TIMEOUT)?;
    let restore_ms = ms(start.elapsed());
    run_bounded(
        &mut ns.legacy(&["-N", "ONEMORE"]),
        None,
        SLOW_COMMAND_TIMEOUT,
    )?;
    let mut save = ns.cmd("iptables-legacy-save");
    save.args(["-t", "filter"]);
    let saved = run_bounded(&mut save, None, SLOW_COMMAND_TIMEOUT)?;
    let rules = saved.lines().filter(|l| l.starts_with("-A ")).count();
    let user_chains = saved
        .lines()
        .filter(|l| l.starts_with(':') && l.contains(" - "))
        .count();
    let want = BIG_CHAINS * RULES_PER_CHAIN;
    if rules < want || user_chains != BIG_CHAINS + 1 {
        bail!(
            "iptables-legacy-save shows {rules} rules in {user_chains} user chains; expected \
             {want} + 3 rules in {} chains",
            BIG_CHAINS + 1
        );
    }
    Ok(BigTable {
        rules,
        user_chains,
        restore_ms,
        save_bytes: saved.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_table_has_the_promised_shape() {
        let t = kube_like_table();
        let rules = t.lines().filter(|l| l.starts_with("-A ")).count();
        let user_chains = t
            .lines()
            .filter(|l| l.starts_with(':') && l.ends_with(" - [0:0]"))
            .count();
        assert_eq!(rules, BIG_CHAINS * RULES_PER_CHAIN + 3);
        assert_eq!(user_chains, BIG_CHAINS);
        let names: std::collections::HashSet<&str> = t
            .lines()
            .filter_map(|l| l.strip_prefix(':')?.split(' ').next())
            .collect();
        assert_eq!(names.len(), BIG_CHAINS + 3, "chain names collide");
        // Every user chain has exactly RULES_PER_CHAIN rules, and every jump target exists.
        let chains: std::collections::HashSet<&str> = t
            .lines()
            .filter_map(|l| l.strip_prefix(':'))
            .filter_map(|l| l.split(' ').next())
            .collect();
        for l in t.lines().filter(|l| l.starts_with("-A ")) {
            let target = l.rsplit_once(" -j ").unwrap().1.split(' ').next().unwrap();
            if target.starts_with("KUBE-") {
                assert!(chains.contains(target), "{l}");
            }
        }
        assert!(t.contains("--probability 0.5"));
    }

    #[test]
    fn nft_table_has_the_shape_of_the_legacy_one() {
        let t = kube_like_nft("kb", false);
        let rule = |l: &&str| l.starts_with("\t\t") && !l.contains(" hook ");
        assert_eq!(
            t.lines().filter(rule).count(),
            BIG_CHAINS * RULES_PER_CHAIN + 3
        );
        let chains: std::collections::HashSet<&str> = t
            .lines()
            .filter_map(|l| l.strip_prefix("\tchain "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        assert_eq!(chains.len(), BIG_CHAINS + 3);
        for l in t.lines().filter(rule) {
            for w in l.split([' ', ',']).filter(|w| w.starts_with("KUBE-")) {
                assert!(chains.contains(w), "{l}");
            }
        }
        assert!(t.starts_with("table ip kb\nflush table ip kb\ntable ip kb {\n"));
        let x = kube_like_nft("kb", true);
        assert_eq!(
            x.lines().filter(rule).count(),
            BIG_CHAINS * RULES_PER_CHAIN + 4
        );
        assert!(x.contains("chain OBS-BENCH-EXTRA {"));
    }
}
