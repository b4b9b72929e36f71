//! `cargo xtask bench-bignode --nft`: the same question as the legacy part of bench-bignode, for
//! kube-proxy's nftables mode: what observer costs per sync on a node with a big `ip kube-proxy`
//! table, against one `nft list table` of the same table, side by side in one run.
//!
//! Per size, in a network namespace of its own (made and deleted here; the host's ruleset is
//! never touched):
//! 1. `observer tail --json --netns NS` is started and its ready line awaited;
//! 2. table `ip kube-proxy` of N services is loaded with one `nft -f`: per service a
//!    `service-HASH-ns/name/tcp/p80` chain (the masquerade mark for traffic from outside the pod
//!    range, then `numgen random mod 3 vmap { ... }` to its endpoints) and three
//!    `endpoint-HASH-ns/name/tcp/p80__IP/8080` chains (`ip saddr IP jump mark-for-masquerade`,
//!    `meta l4proto tcp dnat to IP:8080`), one element of the `service-ips` verdict map, and the
//!    fixed chains (nat hooks, `services`, `masquerading`, `mark-for-masquerade`); observer's
//!    lines for it are let through until observer is quiet;
//! 3. S syncs, one a second, each one `nft -f` transaction as kube-proxy makes it when an
//!    endpoint changes: a new endpoint chain and its rules, the service chain flushed and
//!    written again to jump to it, the old endpoint chain deleted. observer's CPU time (utime +
//!    stime) before the transaction and once its lines are in, and the time from `nft`'s exit to
//!    the first line naming the new chain;
//! 4. observer's VmRSS and VmHWM after the syncs; observer is stopped;
//! 5. `nft list table ip kube-proxy` (after one untimed run that checks the table's shape):
//!    wall time and CPU, median of 3 (one run above 20,000 services: it takes seconds).

use std::{
    fmt::Write as _,
    fs,
    path::Path,
    process,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use super::{
    cluster_ip, cpu_ms, endpoint_ip, ipv4, measure_sizes,
    report::{publish, Shape},
    run_syncs, settle, Figures, ENDPOINTS, LIST_RUNS, ONE_LIST_ABOVE,
};
use crate::{
    bench::{
        netns::Netns,
        procfs::status_kib,
        remove_stale_namespaces,
        spawn::{run_bounded, Observer},
        stats::{ms, thousands},
        table::chain_hash,
        Environment,
    },
    cmd,
};

/// The namespaces: `obs-bignft-PID-SERVICES`.
const NS_PREFIX: &str = "obs-bignft-";

/// Chains of one service: its service chain and one per endpoint.
const CHAINS_PER_SERVICE: usize = 1 + ENDPOINTS;
/// Rules of one service: two in its service chain, two per endpoint chain.
const RULES_PER_SERVICE: usize = 2 + 2 * ENDPOINTS;
/// nat-prerouting, nat-output, nat-postrouting, services, masquerading, mark-for-masquerade.
const FIXED_CHAINS: usize = 6;
/// One jump in each hook chain, the vmap in `services`, three in `masquerading`, one in
/// `mark-for-masquerade`.
const FIXED_RULES: usize = 3 + 1 + 3 + 1;

const LOAD_TIMEOUT: Duration = Duration::from_secs(900);
const SETTLE_TIMEOUT: Duration = Duration::from_secs(900);
const SETTLE_QUIET: Duration = Duration::from_secs(2);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs the nftables shape at `sizes` with `syncs` syncs each; prints the section and writes it
/// into BENCHMARKS.md unless `no_write`. True when every size was measured.
pub(super) fn run(bin: &Path, sizes: &[usize], syncs: usize, no_write: bool) -> Result<bool> {
    if cmd::which("nft").is_none() {
        bail!("`nft` was not found; `cargo xtask setup` installs it (Debian package nftables)");
    }
    let env = Environment::collect();
    remove_stale_namespaces(NS_PREFIX);
    let mut notes = Vec::new();
    let results = measure_sizes(
        sizes,
        |services| {
            format!(
                "bench-bignode --nft: {} services ({} chains, {} rules), {syncs} syncs",
                thousands(services as u64),
                thousands(expected_chains(services) as u64),
                thousands(expected_rules(services) as u64)
            )
        },
        |services| measure(bin, services, syncs, &mut notes),
    );
    publish(Shape::Nft, &env, syncs, &results, &notes, no_write)?;
    Ok(results.iter().all(|(_, r)| r.is_ok()))
}

// ---------------------------------------------------------------------------------------------
// The table and the syncs

/// `ns-N/svc-S/tcp/p80`, kube-proxy's service port name in its chain names.
fn port_name(s: usize) -> String {
    format!("ns-{}/svc-{s}/tcp/p80", s % 40)
}

fn service_chain(s: usize) -> String {
    format!("service-{}-{}", chain_hash(s as u64 * 4), port_name(s))
}

/// An endpoint chain's name: kube-proxy hashes the port name and the endpoint.
fn endpoint_chain(s: usize, ip: &str) -> String {
    let mut seed = s as u64 * 4 + 1;
    for b in ip.bytes() {
        seed = seed.wrapping_mul(0x100_0000_01b3) ^ u64::from(b);
    }
    format!("endpoint-{}-{}__{ip}/8080", chain_hash(seed), port_name(s))
}

fn expected_chains(services: usize) -> usize {
    FIXED_CHAINS + CHAINS_PER_SERVICE * services
}

fn expected_rules(services: usize) -> usize {
    FIXED_RULES + RULES_PER_SERVICE * services
}

/// An endpoint chain and its two rules, as `nft -f` input.
fn endpoint_block(out: &mut String, chain: &str, ip: &str) {
    let _ = writeln!(
        out,
        "add chain ip kube-proxy {chain}\n\
         add rule ip kube-proxy {chain} ip saddr {ip} jump mark-for-masquerade\n\
         add rule ip kube-proxy {chain} meta l4proto tcp dnat to {ip}:8080"
    );
}

/// A service chain's two rules, jumping to `endpoints`.
fn service_rules(out: &mut String, s: usize, endpoints: &[String]) {
    let chain = service_chain(s);
    let arms: Vec<String> = endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| format!("{i} : goto {e}"))
        .collect();
    let _ = writeln!(
        out,
        "add rule ip kube-proxy {chain} ip daddr {} tcp dport 80 ip saddr != 10.128.0.0/9 \
         jump mark-for-masquerade\n\
         add rule ip kube-proxy {chain} numgen random mod {} vmap {{ {} }}",
        cluster_ip(s),
        endpoints.len(),
        arms.join(", ")
    );
}

/// The `nft -f` input that makes table `ip kube-proxy` of `services` services; and each
/// service's endpoint chains.
fn kube_proxy_table(services: usize) -> (String, Vec<Vec<String>>) {
    let mut t = String::with_capacity(services * 1_600 + 4_096);
    t.push_str(
        "add table ip kube-proxy { comment \"rules for kube-proxy\" ; }\n\
         add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; \
         comment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\" ; }\n\
         add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }\n\
         add chain ip kube-proxy nat-output { type nat hook output priority -100 ; }\n\
         add chain ip kube-proxy nat-postrouting { type nat hook postrouting priority 100 ; }\n\
         add chain ip kube-proxy services\n\
         add chain ip kube-proxy masquerading\n\
         add chain ip kube-proxy mark-for-masquerade\n\
         add rule ip kube-proxy nat-prerouting jump services\n\
         add rule ip kube-proxy nat-output jump services\n\
         add rule ip kube-proxy nat-postrouting jump masquerading\n\
         add rule ip kube-proxy masquerading meta mark & 0x4000 == 0 return\n\
         add rule ip kube-proxy masquerading meta mark set meta mark ^ 0x4000\n\
         add rule ip kube-proxy masquerading masquerade fully-random\n\
         add rule ip kube-proxy mark-for-masquerade meta mark set meta mark | 0x4000\n\
         add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips\n",
    );
    let mut all = Vec::with_capacity(services);
    for s in 0..services {
        let endpoints: Vec<String> = (0..ENDPOINTS)
            .map(|e| endpoint_chain(s, &endpoint_ip(s, e)))
            .collect();
        for (e, chain) in endpoints.iter().enumerate() {
            endpoint_block(&mut t, chain, &endpoint_ip(s, e));
        }
        let _ = writeln!(t, "add chain ip kube-proxy {}", service_chain(s));
        service_rules(&mut t, s, &endpoints);
        let _ = writeln!(
            t,
            "add element ip kube-proxy service-ips {{ {} . tcp . 80 : goto {} }}",
            cluster_ip(s),
            service_chain(s)
        );
        all.push(endpoints);
    }
    (t, all)
}

/// One sync: the endpoint chain it makes and its `nft -f` input.
struct Sync {
    chain: String,
    text: String,
}

/// Sync `k`: endpoint `k % 3` of a service spread over the table gets a new IP. The new
/// endpoint chain is made, the service chain flushed and written again to jump to it, and the
/// old endpoint chain deleted, in one transaction. `endpoints` is updated.
fn sync_block(services: usize, k: usize, endpoints: &mut [Vec<String>]) -> Sync {
    let s = (k * 7_919 + services / 2) % services;
    let e = k % ENDPOINTS;
    let ip = ipv4([10, 64, 0, 0], k + 1);
    let chain = endpoint_chain(s, &ip);
    let old = std::mem::replace(&mut endpoints[s][e], chain.clone());
    let mut text = String::new();
    endpoint_block(&mut text, &chain, &ip);
    let _ = writeln!(text, "flush chain ip kube-proxy {}", service_chain(s));
    service_rules(&mut text, s, &endpoints[s]);
    let _ = writeln!(text, "delete chain ip kube-proxy {old}");
    Sync { chain, text }
}

// ---------------------------------------------------------------------------------------------
// The measurement

/// One size: observer started in a namespace of its own, the table loaded, the syncs, then the
/// listings.
fn measure(bin: &Path, services: usize, syncs: usize, notes: &mut Vec<String>) -> Result<Figures> {
    let ns = Netns::add(format!("{NS_PREFIX}{}-{services}", process::id()))?;
    let tag = format!("bignft-{services}");
    // The table is the node's, as kube-proxy's is: its namespace is named the node's, which
    // holds up to --rule-level-limit whatever else observer sees.
    let node = format!("/run/netns/{}", ns.name);
    let args = ["tail", "--json", "--netns", &ns.name, "--node-netns", &node];
    let mut obs = Observer::start(bin, &args, &tag)?;
    let file = std::env::temp_dir().join(format!("obs-bignft-{}.nft", process::id()));
    let ready_rss_kib = status_kib(obs.pid, "VmRSS:")?;
    let other_namespaces = cmd::output(process::Command::new("ip").args(["netns", "list"]))
        .map(|l| l.lines().filter(|l| !l.starts_with(&ns.name)).count())
        .unwrap_or(0);

    let (table, mut endpoints) = kube_proxy_table(services);
    fs::write(&file, &table).with_context(|| format!("writing {}", file.display()))?;
    drop(table);
    let cpu0 = cpu_ms(obs.pid)?;
    let t0 = Instant::now();
    let mut load = ns.cmd("nft");
    load.arg("-f").arg(&file);
    run_bounded(&mut load, None, LOAD_TIMEOUT).context("loading table ip kube-proxy")?;
    let mut size = Figures {
        load_ms: ms(t0.elapsed()),
        ready_rss_kib,
        other_namespaces,
        ..Figures::default()
    };
    let t1 = Instant::now();
    size.load_lines = settle(&mut obs, SETTLE_QUIET, SETTLE_TIMEOUT)?;
    size.load_settle_ms = ms(t1.elapsed()) - ms(SETTLE_QUIET);
    size.load_cpu_ms = cpu_ms(obs.pid)? - cpu0;
    size.loaded_rss_kib = status_kib(obs.pid, "VmRSS:")?;
    if size.load_lines == 0 {
        notes.push(format!(
            "{services} services: observer printed no change line for the table's load"
        ));
    }

    size.syncs = run_syncs(&mut obs, services, syncs, &file, notes, |k| {
        let sync = sync_block(services, k, &mut endpoints);
        let mut c = ns.cmd("nft");
        c.arg("-f").arg(&file);
        (sync.chain, sync.text, c)
    })?;
    let _ = fs::remove_file(&file);
    size.rss_kib = status_kib(obs.pid, "VmRSS:")?;
    size.hwm_kib = status_kib(obs.pid, "VmHWM:")?;
    obs.finish(&format!("{services} services (nftables)"), notes);

    let list = || {
        let mut c = ns.cmd("nft");
        c.args(["list", "table", "ip", "kube-proxy"]);
        c
    };
    let listed = run_bounded(&mut list(), None, COMMAND_TIMEOUT)?;
    size.chains = listed
        .lines()
        .filter(|l| l.trim_start().starts_with("chain "))
        .count();
    size.rules = listed
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty()
                && !l.starts_with("chain ")
                && !l.starts_with("type ")
                && !l.starts_with('}')
                && (l.contains("jump ")
                    || l.contains("vmap ")
                    || l.contains("dnat ")
                    || l.contains("masquerade")
                    || l.contains("return")
                    || l.starts_with("meta mark set"))
                && !l.starts_with("elements")
        })
        .count();
    size.dump_bytes = listed.len();
    if size.chains != expected_chains(services) || size.rules != expected_rules(services) {
        bail!(
            "nft list table shows {} chains and {} rules; expected {} and {}",
            size.chains,
            size.rules,
            expected_chains(services),
            expected_rules(services)
        );
    }
    let runs = if services > ONE_LIST_ABOVE {
        1
    } else {
        LIST_RUNS
    };
    size.time_dumps(runs, list)?;
    drop(ns);
    Ok(size)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn table_has_kube_proxys_nftables_shape() {
        let n = 23;
        let (t, endpoints) = kube_proxy_table(n);
        let chains: Vec<&str> = t
            .lines()
            .filter_map(|l| l.strip_prefix("add chain ip kube-proxy "))
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        assert_eq!(chains.len(), expected_chains(n));
        assert_eq!(chains.iter().collect::<HashSet<_>>().len(), chains.len());
        let rules: Vec<&str> = t.lines().filter(|l| l.starts_with("add rule ")).collect();
        assert_eq!(rules.len(), expected_rules(n));
        assert_eq!(
            t.lines().filter(|l| l.starts_with("add element ")).count(),
            n
        );
        // Every goto and jump names a chain of the table.
        for r in &rules {
            for word in r.split(&[' ', ','][..]) {
                if word.starts_with("endpoint-") || word.starts_with("service-") {
                    assert!(chains.contains(&word), "{r}: no chain {word}");
                }
            }
        }
        assert_eq!(endpoints.len(), n);
        assert!(endpoints[5][2].starts_with("endpoint-"));
        assert!(endpoints[5][2].ends_with("-ns-5/svc-5/tcp/p80__10.128.0.18/8080"));
        assert!(t.contains(&format!(
            "add rule ip kube-proxy {} numgen random mod 3 vmap {{ 0 : goto {}, 1 : goto {}, 2 : goto {} }}\n",
            service_chain(5),
            endpoints[5][0],
            endpoints[5][1],
            endpoints[5][2]
        )));
    }

    #[test]
    fn a_sync_swaps_one_endpoint_chain() {
        let n = 2_500;
        let (_, mut endpoints) = kube_proxy_table(n);
        let before = endpoints.clone();
        let mut seen = HashSet::new();
        for k in 0..10 {
            let s = (k * 7_919 + n / 2) % n;
            let old = endpoints[s][k % ENDPOINTS].clone();
            let sync = sync_block(n, k, &mut endpoints);
            let lines: Vec<&str> = sync.text.lines().collect();
            assert_eq!(lines.len(), 7, "{}", sync.text);
            assert_eq!(lines[0], format!("add chain ip kube-proxy {}", sync.chain));
            assert!(lines[1].ends_with("jump mark-for-masquerade"));
            assert!(lines[2].contains("dnat to 10.64."));
            assert_eq!(
                lines[3],
                format!("flush chain ip kube-proxy {}", service_chain(s))
            );
            assert!(lines[5].contains(&format!("goto {}", sync.chain)));
            assert!(!lines[5].contains(&old));
            assert_eq!(lines[6], format!("delete chain ip kube-proxy {old}"));
            assert_ne!(sync.chain, old);
            assert!(seen.insert(sync.chain));
        }
        assert_ne!(before, endpoints);
    }
}
