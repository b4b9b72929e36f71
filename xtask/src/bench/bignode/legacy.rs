//! bench-bignode's legacy shape: a nat table shaped like kube-proxy's iptables mode, loaded with
//! one `iptables-legacy-restore`, partial syncs of one endpoint chain each
//! (`iptables-legacy-restore --noflush`), and `iptables-legacy-save -t nat` of the same table
//! to compare observer's cost per sync with.

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
    run_syncs, settle, Figures, ENDPOINTS, SAVE_RUNS,
};
use crate::bench::{
    cgroup::MemCgroup,
    netns::Netns,
    procfs::status_kib,
    remove_stale_namespaces,
    spawn::{run_bounded, Observer},
    stats::{mib, ms, thousands},
    table::chain_hash,
    Environment,
};

/// The namespaces: `obs-bignode-PID-SERVICES`.
pub(super) const NS_PREFIX: &str = "obs-bignode-";

/// User chains of one service: its KUBE-SVC- and its KUBE-SEP- chains.
const CHAINS_PER_SERVICE: usize = 1 + ENDPOINTS;
/// Rules of one service: one in KUBE-SERVICES, 1 + ENDPOINTS in its KUBE-SVC-, 2 per KUBE-SEP-.
const RULES_PER_SERVICE: usize = 1 + (1 + ENDPOINTS) + 2 * ENDPOINTS;
/// User chains outside the services: KUBE-SERVICES, KUBE-POSTROUTING, KUBE-MARK-MASQ,
/// KUBE-NODEPORTS.
const FIXED_CHAINS: usize = 4;
/// Rules outside the services: the jumps from PREROUTING, OUTPUT and POSTROUTING, three in
/// KUBE-POSTROUTING, one in KUBE-MARK-MASQ, and KUBE-SERVICES' last rule (to KUBE-NODEPORTS).
const FIXED_RULES: usize = 3 + 3 + 1 + 1;

/// Loading the whole table (iptables-legacy-restore of up to a few hundred thousand rules).
const LOAD_TIMEOUT: Duration = Duration::from_secs(600);
/// observer reporting the loaded table, from the restore's exit until it is quiet.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(900);
/// No line and no CPU tick for this long: observer has reported the load.
const SETTLE_QUIET: Duration = Duration::from_secs(2);
/// One save, or one restore --noflush.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs the legacy shape at `sizes` with `syncs` syncs each (observer's `--ringbuf-size` when
/// given); prints the section and writes it into BENCHMARKS.md unless `no_write`. True when
/// every size was measured.
/// What observer runs under: its `--ringbuf-size` and `--rule-level-limit`, and a memory
/// cgroup's limit in bytes.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Under {
    pub(super) ringbuf: Option<u32>,
    pub(super) rule_level_limit: Option<u32>,
    pub(super) memory_limit: Option<u64>,
}

pub(super) fn run(
    bin: &Path,
    sizes: &[usize],
    syncs: usize,
    under: Under,
    no_write: bool,
) -> Result<bool> {
    let env = Environment::collect();
    remove_stale_namespaces(NS_PREFIX);
    let mut notes = Vec::new();
    let results = measure_sizes(
        sizes,
        |services| {
            format!(
                "bench-bignode: {} services ({} rules), {syncs} syncs",
                thousands(services as u64),
                thousands(expected_rules(services) as u64)
            )
        },
        |services| measure(bin, services, syncs, under, &mut notes),
    );
    publish(Shape::Legacy, &env, syncs, &results, &notes, no_write)?;
    Ok(results.iter().all(|(_, r)| r.is_ok()))
}

// ---------------------------------------------------------------------------------------------
// The table and the syncs

fn svc_chain(s: usize) -> String {
    format!("KUBE-SVC-{}", chain_hash(s as u64 * 4))
}

fn sep_chain(s: usize, e: usize) -> String {
    format!("KUBE-SEP-{}", chain_hash(s as u64 * 4 + 1 + e as u64))
}

/// `namespace/service:port`, as kube-proxy writes it in comments.
fn port_name(s: usize) -> String {
    format!("ns-{}/svc-{s}:http", s % 40)
}

/// An endpoint chain's two rules, as kube-proxy writes them.
fn sep_rules(out: &mut String, chain: &str, port: &str, ip: &str) {
    let _ = writeln!(
        out,
        "-A {chain} -s {ip}/32 -m comment --comment \"{port}\" -j KUBE-MARK-MASQ\n\
         -A {chain} -p tcp -m comment --comment \"{port}\" -m tcp -j DNAT --to-destination {ip}:8080"
    );
}

/// The rules of [`nat_table`]`(services)`, as `iptables-legacy-save` lists them.
pub(crate) fn expected_rules(services: usize) -> usize {
    FIXED_RULES + RULES_PER_SERVICE * services
}

fn expected_chains(services: usize) -> usize {
    FIXED_CHAINS + CHAINS_PER_SERVICE * services
}

/// An `iptables-legacy-restore` input: a nat table shaped like kube-proxy's iptables mode with
/// `services` services of [`ENDPOINTS`] endpoints each ([`CHAINS_PER_SERVICE`] chains and
/// [`RULES_PER_SERVICE`] rules per service), plus KUBE-MARK-MASQ, KUBE-POSTROUTING,
/// KUBE-NODEPORTS and the jumps from the built-in chains.
pub(crate) fn nat_table(services: usize) -> String {
    nat_table_moving(services, |_, _| None)
}

/// [`nat_table`] with some endpoints moved: endpoint `e` of service `s` at `moved(s, e)` when
/// that is `Some` (in its KUBE-SVC- rule's comment and its KUBE-SEP- chain's two rules), at its
/// own address otherwise. The chains and the number of rules stay those of [`nat_table`].
pub(crate) fn nat_table_moving(
    services: usize,
    moved: impl Fn(usize, usize) -> Option<String>,
) -> String {
    let mut t = String::with_capacity(services * 1_400 + 4_096);
    t.push_str(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
         :POSTROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-POSTROUTING - [0:0]\n\
         :KUBE-MARK-MASQ - [0:0]\n:KUBE-NODEPORTS - [0:0]\n",
    );
    for s in 0..services {
        let _ = writeln!(t, ":{} - [0:0]", svc_chain(s));
        for e in 0..ENDPOINTS {
            let _ = writeln!(t, ":{} - [0:0]", sep_chain(s, e));
        }
    }
    t.push_str(
        "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n\
         -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n\
         -A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0\n\
         -A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" \
         -j MASQUERADE --random-fully\n\
         -A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n",
    );
    for s in 0..services {
        let (svc, ip, port) = (svc_chain(s), cluster_ip(s), port_name(s));
        let endpoints: Vec<String> = (0..ENDPOINTS)
            .map(|e| moved(s, e).unwrap_or_else(|| endpoint_ip(s, e)))
            .collect();
        let _ = writeln!(
            t,
            "-A KUBE-SERVICES -d {ip}/32 -p tcp -m comment --comment \"{port} cluster IP\" \
             -m tcp --dport 80 -j {svc}\n\
             -A {svc} ! -s 10.128.0.0/9 -d {ip}/32 -p tcp -m comment --comment \"{port} cluster IP\" \
             -m tcp --dport 80 -j KUBE-MARK-MASQ"
        );
        for (e, endpoint) in endpoints.iter().enumerate() {
            let statistic = match ENDPOINTS - e {
                1 => String::new(),
                left => format!(
                    " -m statistic --mode random --probability {:.11}",
                    1.0 / left as f64
                ),
            };
            let _ = writeln!(
                t,
                "-A {svc} -m comment --comment \"{port} -> {endpoint}:8080\"{statistic} -j {}",
                sep_chain(s, e)
            );
        }
        for (e, endpoint) in endpoints.iter().enumerate() {
            sep_rules(&mut t, &sep_chain(s, e), &port, endpoint);
        }
    }
    t.push_str(
        "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must \
         be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\nCOMMIT\n",
    );
    t
}

/// One partial sync: the chain it rewrites and its `iptables-legacy-restore --noflush` input.
struct Sync {
    chain: String,
    text: String,
}

/// Sync `k` of a table of `services` services: one endpoint chain declared (which flushes it)
/// and written again with a new endpoint IP, as kube-proxy's partial sync does. Successive
/// syncs touch services spread over the table.
fn sync_block(services: usize, k: usize) -> Sync {
    let s = (k * 7_919 + services / 2) % services;
    let e = k % ENDPOINTS;
    let chain = sep_chain(s, e);
    let mut text = format!("*nat\n:{chain} - [0:0]\n");
    sep_rules(
        &mut text,
        &chain,
        &port_name(s),
        &ipv4([10, 64, 0, 0], k + 1),
    );
    text.push_str("COMMIT\n");
    Sync { chain, text }
}

// ---------------------------------------------------------------------------------------------
// The measurement

/// One size: observer started in a namespace of its own, the table loaded, the syncs, then the
/// saves.
fn measure(
    bin: &Path,
    services: usize,
    syncs: usize,
    under: Under,
    notes: &mut Vec<String>,
) -> Result<Figures> {
    let ns = Netns::add(format!("{NS_PREFIX}{}-{services}", process::id()))?;
    let tag = format!("bignode-{services}");
    // Made before observer starts, dropped after it ends.
    let cgroup = under
        .memory_limit
        .map(|limit| MemCgroup::create(&tag, limit))
        .transpose()?;
    let ring = under.ringbuf.map(|b| b.to_string());
    // The table is the node's, as kube-proxy's is: its namespace is named the node's, which
    // holds up to --rule-level-limit whatever else observer sees.
    let node = format!("/run/netns/{}", ns.name);
    let mut args = vec!["tail", "--json", "--netns", &ns.name, "--node-netns", &node];
    if let Some(ring) = &ring {
        args.extend(["--ringbuf-size", ring.as_str()]);
    }
    let limit = under.rule_level_limit.map(|n| n.to_string());
    if let Some(limit) = &limit {
        args.extend(["--rule-level-limit", limit.as_str()]);
    }
    let procs = cgroup.as_ref().map(|c| c.procs().display().to_string());
    let bin_text = bin.display().to_string();
    let mut obs = match &procs {
        // Into the cgroup before observer starts: a shell that joins it, then becomes observer.
        Some(procs) => {
            let mut wrapped = vec!["-c", "echo $$ > \"$0\" && exec \"$@\"", procs, &bin_text];
            wrapped.extend(&args);
            Observer::start(Path::new("/bin/sh"), &wrapped, &tag)?
        }
        None => Observer::start(bin, &args, &tag)?,
    };
    let measured = load_and_sync(&ns, &mut obs, services, syncs, notes);
    let mut size = match (measured, &cgroup) {
        (Ok(size), _) => size,
        (Err(e), Some(cg)) if cg.figures().oom_kills > 0 => {
            let f = cg.figures();
            bail!(
                "observer was killed by the OOM killer of its memory cgroup (limit {}, peak \
                 usage {}): {e:#}",
                mib(f.limit >> 10),
                f.peak.map_or("not kept".into(), |p| mib(p >> 10))
            )
        }
        (Err(e), _) => return Err(e),
    };
    size.rss_kib = status_kib(obs.pid, "VmRSS:")?;
    size.hwm_kib = status_kib(obs.pid, "VmHWM:")?;
    size.cgroup = cgroup.as_ref().map(MemCgroup::figures);
    obs.finish(&format!("{services} services"), notes);
    drop(cgroup);

    // iptables-legacy-save of the same table: one untimed run that checks its shape, then timed.
    let save = || {
        let mut c = ns.cmd("iptables-legacy-save");
        c.args(["-t", "nat"]);
        c
    };
    let saved = run_bounded(&mut save(), None, COMMAND_TIMEOUT)?;
    size.rules = saved.lines().filter(|l| l.starts_with("-A ")).count();
    size.chains = saved
        .lines()
        .filter(|l| l.starts_with(':') && l.contains(" - "))
        .count();
    size.dump_bytes = saved.len();
    if size.rules != expected_rules(services) || size.chains != expected_chains(services) {
        bail!(
            "iptables-legacy-save shows {} rules in {} user chains; expected {} in {}",
            size.rules,
            size.chains,
            expected_rules(services),
            expected_chains(services)
        );
    }
    size.time_dumps(SAVE_RUNS, save)?;
    drop(ns);
    Ok(size)
}

/// The table loaded while observer watches, then the partial syncs: their figures.
fn load_and_sync(
    ns: &Netns,
    obs: &mut Observer,
    services: usize,
    syncs: usize,
    notes: &mut Vec<String>,
) -> Result<Figures> {
    // The table, loaded while observer watches.
    let table = nat_table(services);
    let cpu0 = cpu_ms(obs.pid)?;
    let t0 = Instant::now();
    let mut restore = ns.cmd("iptables-legacy-restore");
    restore.args(["-w", "30"]);
    run_bounded(&mut restore, Some(table.as_bytes()), LOAD_TIMEOUT)
        .context("loading the nat table")?;
    let load_ms = ms(t0.elapsed());
    let t1 = Instant::now();
    let load_lines = settle(obs, SETTLE_QUIET, SETTLE_TIMEOUT)?;
    // The quiet window is not observer's work.
    let load_settle_ms = ms(t1.elapsed()) - ms(SETTLE_QUIET);
    let load_cpu_ms = cpu_ms(obs.pid)? - cpu0;
    if load_lines == 0 {
        notes.push(format!(
            "{services} services: observer printed no change line for the table's load"
        ));
    }

    // The partial syncs, one a second.
    let file = std::env::temp_dir().join(format!("obs-bignode-{}-sync.txt", process::id()));
    let mut size = Figures {
        load_ms,
        load_lines,
        load_cpu_ms,
        load_settle_ms,
        ..Figures::default()
    };
    let synced = run_syncs(obs, services, syncs, &file, notes, |k| {
        let sync = sync_block(services, k);
        let mut c = ns.cmd("iptables-legacy-restore");
        c.args(["-w", "5", "--noflush"]).arg(&file);
        (sync.chain, sync.text, c)
    });
    let _ = fs::remove_file(&file);
    size.syncs = synced?;
    Ok(size)
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    #[test]
    fn table_has_kube_proxys_shape() {
        let n = 57;
        let t = nat_table(n);
        assert!(t.starts_with("*nat\n") && t.ends_with("COMMIT\n"));
        let chains: Vec<&str> = t
            .lines()
            .filter(|l| l.starts_with(':') && l.ends_with(" - [0:0]"))
            .map(|l| &l[1..l.len() - " - [0:0]".len()])
            .collect();
        assert_eq!(chains.len(), expected_chains(n));
        assert_eq!(chains.len(), 4 + 4 * n);
        assert_eq!(
            chains.iter().collect::<HashSet<_>>().len(),
            chains.len(),
            "chain names collide"
        );
        let rules: Vec<&str> = t.lines().filter(|l| l.starts_with("-A ")).collect();
        assert_eq!(rules.len(), expected_rules(n));
        assert_eq!(rules.len(), 8 + 11 * n);
        // Rules per chain: 1 + 3 per KUBE-SVC-, 2 per KUBE-SEP-, one per service in
        // KUBE-SERVICES (+ the nodeports rule); every jump's target is declared.
        let mut per_chain: HashMap<&str, usize> = HashMap::new();
        for r in &rules {
            let chain = r.split(' ').nth(1).unwrap();
            *per_chain.entry(chain).or_default() += 1;
            let target = r.rsplit_once(" -j ").unwrap().1.split(' ').next().unwrap();
            assert!(
                target
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '-'),
                "{r}"
            );
            if target.starts_with("KUBE-") {
                assert!(chains.contains(&target), "{r}: no chain {target}");
            }
        }
        for c in &chains {
            let want = match c {
                c if c.starts_with("KUBE-SVC-") => 4,
                c if c.starts_with("KUBE-SEP-") => 2,
                &"KUBE-SERVICES" => n + 1,
                &"KUBE-POSTROUTING" => 3,
                &"KUBE-MARK-MASQ" => 1,
                &"KUBE-NODEPORTS" => 0,
                other => panic!("unexpected chain {other}"),
            };
            assert_eq!(per_chain.get(c).copied().unwrap_or(0), want, "{c}");
        }
        assert_eq!(
            chains.iter().filter(|c| c.starts_with("KUBE-SVC-")).count(),
            n
        );
        // kube-proxy's probabilities: 1/3 then 1/2, the last endpoint without statistic.
        let svc = svc_chain(5);
        let jumps: Vec<&&str> = rules
            .iter()
            .filter(|r| r.starts_with(&format!("-A {svc} ")) && r.contains("KUBE-SEP-"))
            .collect();
        assert_eq!(jumps.len(), 3);
        assert!(jumps[0].contains("--probability 0.33333333333"));
        assert!(jumps[1].contains("--probability 0.50000000000"));
        assert!(!jumps[2].contains("statistic"));
        let dnat = rules
            .iter()
            .filter(|r| r.contains("-j DNAT --to-destination"))
            .count();
        assert_eq!(dnat, 3 * n);
        assert!(t.contains(&format!(
            "-A KUBE-SERVICES -d {}/32 -p tcp -m comment --comment \"ns-5/svc-5:http cluster IP\" \
             -m tcp --dport 80 -j {svc}\n",
            cluster_ip(5)
        )));
    }

    #[test]
    fn a_sync_rewrites_one_endpoint_chain() {
        let n = 2_500;
        let table = nat_table(n);
        let mut seen = HashSet::new();
        for k in 0..10 {
            let sync = sync_block(n, k);
            let lines: Vec<&str> = sync.text.lines().collect();
            assert_eq!(lines.len(), 5, "{}", sync.text);
            assert_eq!(lines[0], "*nat");
            assert_eq!(lines[1], format!(":{} - [0:0]", sync.chain));
            assert!(lines[2].starts_with(&format!("-A {} -s 10.64.", sync.chain)));
            assert!(lines[2].ends_with("-j KUBE-MARK-MASQ"));
            assert!(lines[3].starts_with(&format!("-A {} -p tcp ", sync.chain)));
            assert!(lines[3].contains(&format!(
                "-j DNAT --to-destination {}:8080",
                ipv4([10, 64, 0, 0], k + 1)
            )));
            assert_eq!(lines[4], "COMMIT");
            assert!(sync.chain.starts_with("KUBE-SEP-"));
            // A chain of the table, with rules other than the table's.
            assert!(table.contains(&format!(":{} - [0:0]\n", sync.chain)));
            assert!(!table.contains(lines[3]));
            seen.insert(sync.chain);
        }
        assert_eq!(seen.len(), 10, "each sync rewrites another chain");
        assert_eq!(sync_block(1, 4).chain, sep_chain(0, 1));
    }
}
