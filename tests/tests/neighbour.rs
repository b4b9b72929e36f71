//! A noisy neighbour does not hold back another namespace's evidence.
//!
//! In one namespace (the "pod"), a kube-proxy-shaped legacy nat table of 10,000 services
//! (110,008 rules; 40,004 chains beside the built-in ones) is loaded with one
//! `iptables-legacy-restore`, then the whole table is rewritten three times (no `--noflush`),
//! each rewrite moving one service's endpoint to a new address. Meanwhile, in another namespace
//! (the "node"), one nft rule is added every 200 ms, from before the load until after the last
//! rewrite. observer watches both.
//!
//! Every change must be reported: each node rule; each rule and chain of the load; each
//! rewrite's change, in the moved service's chains only. And the load must not hold back the
//! node: a node rule whose `nft` started after the load's restore exited is printed before the
//! load's last line. That is read from the order of observer's stdout, not from time; the node
//! rules' latency (the line read, less the `nft` exit) is printed, not checked, since the
//! machines are shared. Needs root.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use test_support::{is_change, skip_unless, slowdown, Netns, Observer, Writer};

/// Services in the pod's nat table: 4 chains and 11 rules each.
const SERVICES: usize = 10_000;
/// Endpoints (`KUBE-SEP-` chains) per service.
const ENDPOINTS: usize = 3;
/// Whole-table rewrites after the load.
const REWRITES: usize = 3;
/// How often the node adds a rule.
const NODE_EVERY: Duration = Duration::from_millis(200);
/// How long one step (the node's first rule, the load, a rewrite) may take to be reported
/// before the pod's writes give up, and how long the node's last rules may take after them.
const STEP_WAIT: Duration = Duration::from_secs(60);
/// The pod's restores: the whole nat table, waiting for the xtables lock if another holds it.
const RESTORE: [&str; 3] = ["iptables-legacy-restore", "-w", "30"];

/// `base` plus `n`, as an address.
fn ipv4(base: [u8; 4], n: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from_be_bytes(base) + n as u32)
}

/// A kube-proxy-like chain name: `PREFIX-` and 16 hex digits, different for each `seed` (the
/// service chains take seeds below [`SERVICES`], the endpoint chains the seeds above).
fn chain(prefix: &str, seed: usize) -> String {
    format!(
        "{prefix}-{:016X}",
        (seed as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    )
}

fn svc_chain(s: usize) -> String {
    chain("KUBE-SVC", s)
}

fn sep_chain(s: usize, e: usize) -> String {
    chain("KUBE-SEP", SERVICES + s * ENDPOINTS + e)
}

/// Rewrite `k`'s move: service `.0`'s first endpoint goes to address `.1` (services spread
/// over the table).
fn moved(k: usize) -> (usize, Ipv4Addr) {
    (
        (k + 1) * SERVICES / (REWRITES + 1),
        ipv4([10, 64, 0, 0], k + 1),
    )
}

/// The pod's nat table as `iptables-legacy-restore` reads it, shaped like kube-proxy's: per
/// service, a rule in KUBE-SERVICES jumping to its KUBE-SVC- chain, which marks traffic from
/// outside the pod range for masquerading and jumps to three KUBE-SEP- chains (by
/// `-m statistic --mode random --probability`, the last one unconditionally), each with its
/// KUBE-MARK-MASQ and DNAT rules; comments as kube-proxy writes them. The first endpoint of each
/// service in `moves` is at the address given there.
fn nat_table(moves: &[(usize, Ipv4Addr)]) -> String {
    nat_table_of(SERVICES, moves)
}

/// [`nat_table`] of `services` services (at most [`SERVICES`]: the chain names stay apart).
fn nat_table_of(services: usize, moves: &[(usize, Ipv4Addr)]) -> String {
    let endpoint = |s: usize, e: usize| {
        moves.iter().find(|&&(m, _)| e == 0 && m == s).map_or_else(
            || ipv4([10, 128, 0, 0], s * ENDPOINTS + e + 1),
            |&(_, ip)| ip,
        )
    };
    let mut t = String::with_capacity(services * 1_400);
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
        let (svc, ip, port) = (
            svc_chain(s),
            ipv4([10, 96, 0, 0], s + 1),
            format!("ns-{}/svc-{s}:http", s % 40),
        );
        let _ = writeln!(
            t,
            "-A KUBE-SERVICES -d {ip}/32 -p tcp -m comment --comment \"{port} cluster IP\" \
             -m tcp --dport 80 -j {svc}\n\
             -A {svc} ! -s 10.128.0.0/9 -d {ip}/32 -p tcp -m comment --comment \"{port} cluster \
             IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ"
        );
        for e in 0..ENDPOINTS {
            let statistic = match ENDPOINTS - e {
                1 => String::new(),
                left => format!(
                    " -m statistic --mode random --probability {:.11}",
                    1.0 / left as f64
                ),
            };
            let _ = writeln!(
                t,
                "-A {svc} -m comment --comment \"{port} -> {}:8080\"{statistic} -j {}",
                endpoint(s, e),
                sep_chain(s, e)
            );
        }
        for e in 0..ENDPOINTS {
            let (sep, ip) = (sep_chain(s, e), endpoint(s, e));
            let _ = writeln!(
                t,
                "-A {sep} -s {ip}/32 -m comment --comment \"{port}\" -j KUBE-MARK-MASQ\n\
                 -A {sep} -p tcp -m comment --comment \"{port}\" -m tcp -j DNAT \
                 --to-destination {ip}:8080"
            );
        }
    }
    t.push_str(
        "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must \
         be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\n\
         COMMIT\n",
    );
    t
}

/// One node rule added: its K (`comment "mark-K"`), when its `nft` started and when it exited.
struct NodeWrite {
    k: usize,
    started: Instant,
    exited: Instant,
}

/// Adds the node's rules, one every [`NODE_EVERY`], into `writes`, until `stop` is set; one
/// more after that, so that the last one starts after whatever set it.
fn node_writes(node: &Netns, writer: &Writer, stop: &AtomicBool, writes: &Mutex<Vec<NodeWrite>>) {
    for k in 0.. {
        let last = stop.load(Ordering::SeqCst);
        let started = Instant::now();
        node.write(
            writer,
            &[
                "nft",
                &format!("add rule inet t c counter comment \"mark-{k}\""),
            ],
        );
        let exited = Instant::now();
        writes
            .lock()
            .unwrap()
            .push(NodeWrite { k, started, exited });
        if last {
            return;
        }
        std::thread::sleep((started + NODE_EVERY).saturating_duration_since(Instant::now()));
    }
}

/// Sets its flag when dropped: the node's writes stop however the pod's writes end (also in a
/// panic).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Waits until `reported` says that at least `steps` steps were reported; false when that did
/// not happen within [`STEP_WAIT`].
fn wait_reported(reported: &mpsc::Receiver<usize>, steps: usize) -> bool {
    let deadline = Instant::now() + STEP_WAIT * slowdown() as u32;
    loop {
        match reported.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(n) if n >= steps => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
}

/// The pod's writes, each once the step before it is reported (`reported` gives how many
/// steps were: the node's first rule, the load, then each rewrite): the load, then the
/// rewrites. Returns when the load's restore exited (`None`: the node's first rule was not
/// reported), after the last rewrite is reported or a step was not; sets `stop` then.
fn pod_writes(
    pod: &Netns,
    writer: &Writer,
    load: &str,
    reported: mpsc::Receiver<usize>,
    stop: &AtomicBool,
) -> Option<Instant> {
    let _stop = StopOnDrop(stop);
    if !wait_reported(&reported, 1) {
        return None;
    }
    pod.write_stdin(writer, &RESTORE, load);
    let load_exited = Instant::now();
    for k in 0..REWRITES {
        if !wait_reported(&reported, k + 2) {
            break;
        }
        let moves: Vec<_> = (0..=k).map(moved).collect();
        pod.write_stdin(writer, &RESTORE, &nat_table(&moves));
    }
    wait_reported(&reported, REWRITES + 2);
    Some(load_exited)
}

/// A pod change line outside the load: its transaction, op, chain and rule.
struct PodChange {
    txn: String,
    op: String,
    chain: String,
    rule: String,
}

/// What the test keeps of observer's stdout: each line's position (lines since the ready line)
/// and what the lines about the two namespaces said.
struct Stream {
    node: u64,
    pod: u64,
    lines: usize,
    /// Node rule K: the position of its line and when the test read it.
    marks: HashMap<usize, (usize, Instant)>,
    /// The load's transaction: the pod's first change.
    load_txn: Option<String>,
    load_lines: usize,
    load_rules: usize,
    load_chains: usize,
    /// The position of the load's last line.
    load_last: usize,
    others: Vec<PodChange>,
}

impl Stream {
    fn new(node: &Netns, pod: &Netns) -> Stream {
        Stream {
            node: node.ino(),
            pod: pod.ino(),
            lines: 0,
            marks: HashMap::new(),
            load_txn: None,
            load_lines: 0,
            load_rules: 0,
            load_chains: 0,
            load_last: 0,
            others: Vec::new(),
        }
    }

    /// Keeps what matters of the next line of stdout.
    fn take(&mut self, v: &Value) {
        let at = self.lines;
        self.lines += 1;
        if !is_change(v) {
            return;
        }
        let text = |key: &str| v[key].as_str().unwrap_or_default().to_string();
        let netns = v["netns"].as_u64();
        if netns == Some(self.node) && v["op"] == "rule_add" {
            if let Some(k) = mark_of(&text("rule")) {
                self.marks.entry(k).or_insert((at, Instant::now()));
            }
        } else if netns == Some(self.pod) {
            let txn = text("txn");
            let load = self.load_txn.get_or_insert_with(|| txn.clone());
            if *load == txn {
                self.load_last = at;
                self.load_lines += 1;
                self.load_rules += usize::from(v["op"] == "rule_add");
                self.load_chains += usize::from(v["op"] == "chain_create");
            } else {
                self.others.push(PodChange {
                    txn,
                    op: text("op"),
                    chain: text("chain"),
                    rule: text("rule"),
                });
            }
        }
    }

    /// The transaction of rewrite `k`: the one that moved its service's first endpoint.
    fn rewrite_txn(&self, k: usize) -> Option<&str> {
        let (s, ip) = moved(k);
        let (sep, dnat) = (sep_chain(s, 0), format!("--to-destination {ip}:8080"));
        self.others
            .iter()
            .find(|c| c.chain == sep && c.rule.contains(&dnat))
            .map(|c| c.txn.as_str())
    }

    /// How many steps are reported, in order: the node's first rule, the whole load (`rules`
    /// rule adds), then each rewrite.
    fn steps(&self, rules: usize) -> usize {
        let mut done = vec![!self.marks.is_empty(), self.load_rules >= rules];
        done.extend((0..REWRITES).map(|k| self.rewrite_txn(k).is_some()));
        done.iter().take_while(|d| **d).count()
    }
}

/// The K of a rule's `comment "mark-K"`.
fn mark_of(rule: &str) -> Option<usize> {
    rule.split_once("comment \"mark-")?
        .1
        .split_once('"')?
        .0
        .parse()
        .ok()
}

/// The value at fraction `q` of sorted `v`.
fn quantile(v: &[f64], q: f64) -> f64 {
    v[((v.len() - 1) as f64 * q).round() as usize]
}

#[test]
fn a_big_legacy_load_in_one_namespace_does_not_hold_back_another() {
    skip_unless!("ip", "nft", "iptables-legacy-restore");
    // The worst case for the node: the pod's whole load held rule by rule. By default the
    // namespaces other than the node's share 50,000 rules at rule level, and this load would
    // be held at chain level.
    let mut obs = Observer::start(&["--rule-level-budget", "450000"]);
    let node = Netns::new("nb-node");
    let pod = Netns::new("nb-pod");
    let node_writer = Writer::new("obs-node-agent");
    let pod_writer = Writer::new("obs-kube-proxy");
    node.write(
        &node_writer,
        &["nft", "add table inet t; add chain inet t c"],
    );
    let load = nat_table(&[]);
    let rules = load.lines().filter(|l| l.starts_with("-A ")).count();
    // Every chain the restore declares, the four built-in ones included.
    let chains = load.lines().filter(|l| l.starts_with(':')).count();
    let mut stream = Stream::new(&node, &pod);
    let stop = AtomicBool::new(false);
    let writes = Mutex::new(Vec::new());
    let (reported, reported_rx) = mpsc::channel();

    // Observer's lines are read here while the two namespaces write from their own threads; each
    // pod write waits until the step before it is reported.
    let load_exited = std::thread::scope(|s| {
        let node_thread = s.spawn(|| node_writes(&node, &node_writer, &stop, &writes));
        let pod_thread = s.spawn(|| pod_writes(&pod, &pod_writer, &load, reported_rx, &stop));
        let mut steps = 0;
        let mut settle: Option<Instant> = None;
        loop {
            if let Some(v) = obs.take_line(Duration::from_millis(50)) {
                stream.take(&v);
            }
            let now = stream.steps(rules);
            if now > steps {
                steps = now;
                let _ = reported.send(steps);
            }
            if node_thread.is_finished() && pod_thread.is_finished() {
                let all = writes.lock().unwrap().len();
                let until = *settle.get_or_insert(Instant::now() + STEP_WAIT * slowdown() as u32);
                if stream.marks.len() >= all || Instant::now() > until {
                    break;
                }
            }
        }
        node_thread.join().expect("the node's writes");
        pod_thread.join().expect("the pod's writes")
    });
    let writes = writes.into_inner().unwrap();

    // (1) Every node rule reported.
    let missing: Vec<String> = writes
        .iter()
        .filter(|w| !stream.marks.contains_key(&w.k))
        .map(|w| format!("mark-{}", w.k))
        .collect();
    assert!(
        missing.is_empty(),
        "expected a change line for each of the node's {} rules; none for {}",
        writes.len(),
        missing.join(", ")
    );

    // (2) Every change of the load reported once, and each rewrite's change to its service only.
    let load_exited = load_exited.expect("the load ran: the node's first rule was reported");
    assert_eq!(
        (stream.load_rules, stream.load_chains),
        (rules, chains),
        "expected the load's transaction to add {rules} rules and {chains} chains (rule_add, \
         chain_create); saw {} and {}",
        stream.load_rules,
        stream.load_chains
    );
    for k in 0..REWRITES {
        let (s, ip) = moved(k);
        let Some(txn) = stream.rewrite_txn(k) else {
            let seen: Vec<String> = stream
                .others
                .iter()
                .take(10)
                .map(|c| format!("{} {} {}", c.op, c.chain, c.rule))
                .collect();
            panic!(
                "expected rewrite {k} (service {s}'s first endpoint moved to {ip}) reported as a \
                 DNAT to {ip}:8080 in {}; saw {} pod changes after the load, such as {seen:?}",
                sep_chain(s, 0),
                stream.others.len()
            );
        };
        let own = |c: &str| c == svc_chain(s) || (0..ENDPOINTS).any(|e| c == sep_chain(s, e));
        let strays: Vec<String> = stream
            .others
            .iter()
            .filter(|c| c.txn == txn && !own(&c.chain))
            .map(|c| format!("{} {} {}", c.op, c.chain, c.rule))
            .collect();
        assert!(
            strays.is_empty(),
            "expected rewrite {k} (service {s}'s first endpoint moved to {ip}) to change that \
             service's chains only; its transaction also has {} other changes, such as {:?}",
            strays.len(),
            &strays[..strays.len().min(5)]
        );
    }

    // The node rules' latency, for information: the line read, less the nft exit.
    let mut latency: Vec<f64> = writes
        .iter()
        .map(|w| {
            let read = stream.marks[&w.k].1;
            match read.checked_duration_since(w.exited) {
                Some(d) => d.as_secs_f64() * 1e3,
                None => -(w.exited - read).as_secs_f64() * 1e3,
            }
        })
        .collect();
    latency.sort_by(f64::total_cmp);
    eprintln!(
        "node rules: {} added; latency from nft's exit to the line read: p50 {:.1} ms, p95 \
         {:.1} ms, max {:.1} ms",
        writes.len(),
        quantile(&latency, 0.5),
        quantile(&latency, 0.95),
        quantile(&latency, 1.0)
    );

    // (3) The load did not hold the node back: a node rule started after the load's restore
    // exited is printed among the load's lines, before its last.
    let after: Vec<(usize, usize)> = writes
        .iter()
        .filter(|w| w.started > load_exited)
        .map(|w| (w.k, stream.marks[&w.k].0))
        .collect();
    let within = after
        .iter()
        .filter(|&&(_, at)| at < stream.load_last)
        .count();
    eprintln!(
        "the load: {} lines, its last at line {}; node rules started after the restore exited: \
         {}, printed before the load's last line: {within}",
        stream.load_lines,
        stream.load_last,
        after.len()
    );
    let first = after
        .iter()
        .min_by_key(|&&(_, at)| at)
        .map_or("none".into(), |(k, at)| format!("mark-{k} at line {at}"));
    assert!(
        within > 0,
        "expected a node rule started after the load's restore exited to be printed before the \
         load's last line (line {}); saw {} such rules, the first printed: {first}: the load held \
         the node's changes back",
        stream.load_last,
        after.len()
    );
    obs.stop();
}

/// What the pod's lines said: the load's changes by op, and whether the rewrite's move came.
#[derive(Default)]
struct Ended {
    load_txn: Option<String>,
    rules: usize,
    chains: usize,
    moved: bool,
    /// Lines read after SIGTERM.
    after_signal: usize,
}

impl Ended {
    fn take(&mut self, v: &Value, pod: u64, dnat: &str) {
        if !is_change(v) || v["netns"].as_u64() != Some(pod) {
            return;
        }
        let txn = v["txn"].as_str().unwrap_or_default();
        if self.load_txn.get_or_insert_with(|| txn.to_string()) == txn {
            self.rules += usize::from(v["op"] == "rule_add");
            self.chains += usize::from(v["op"] == "chain_create");
        } else if v["rule"].as_str().is_some_and(|r| r.contains(dnat)) {
            self.moved = true;
        }
    }
}

/// A pod namespace watched by a tail that is loading a kube-proxy table, its first line read.
struct Loading {
    pod: Netns,
    obs: Observer,
    writer: Writer,
    /// The load's rules and chains.
    rules: usize,
    chains: usize,
    ended: Ended,
}

/// Watch a new namespace `name` (reading the tail at `pace` lines a second, 0: at once), load a
/// table of `services` in it, and read until the load's first line (`dnat` marks a rewrite's
/// move, see [`Ended`]).
fn loading(name: &str, services: usize, pace: u64, dnat: &str) -> Loading {
    let pod = Netns::new(name);
    let mut obs = Observer::start(&["--netns", pod.name()]);
    let writer = Writer::new("obs-kube-proxy");
    let load = nat_table_of(services, &[]);
    let rules = load.lines().filter(|l| l.starts_with("-A ")).count();
    let chains = load.lines().filter(|l| l.starts_with(':')).count();
    let mut ended = Ended::default();
    obs.pace(pace);
    pod.write_stdin(&writer, &RESTORE, &load);
    let until = Instant::now() + STEP_WAIT * slowdown() as u32;
    while ended.load_txn.is_none() {
        assert!(
            Instant::now() < until,
            "expected the load's first line within {STEP_WAIT:?}"
        );
        if let Some(v) = obs.take_line(Duration::from_millis(50)) {
            ended.take(&v, pod.ino(), dnat);
        }
    }
    Loading {
        pod,
        obs,
        writer,
        rules,
        chains,
        ended,
    }
}

/// Services of the table loaded in the end's test: 4,408 rules (6,009 changes, six pieces),
/// written, and the rewrite learned, in about a second on a loaded machine: well within the 4 s
/// the end waits, and `tail`'s 5 s after a signal.
const END_SERVICES: usize = 400;

/// SIGTERM while the load's lines are still being written and a whole-table rewrite behind it
/// is on its way and not learned: observer ends cleanly, only once it has written every change of
/// both (a DaemonSet's restart loses nothing the kernel already reported).
#[test]
fn the_end_writes_every_change_the_kernel_reported_before_it() {
    skip_unless!("ip", "iptables-legacy-restore");
    let (s, ip) = (END_SERVICES / 2, ipv4([10, 64, 0, 0], 9));
    let dnat = format!("--to-destination {ip}:8080");
    // The load is being written: its first line.
    let Loading {
        pod,
        obs,
        writer,
        rules,
        chains,
        mut ended,
    } = loading("nb-end", END_SERVICES, 0, &dnat);
    // Observer stopped (SIGSTOP) with most of the load still to write; the rewrite made, and
    // SIGTERM sent, while it is stopped; then it goes on: at the signal it holds the load's
    // backlog, the rewrite's record on its way, and nothing learned of it.
    obs.freeze(true);
    pod.write_stdin(&writer, &RESTORE, &nat_table_of(END_SERVICES, &[(s, ip)]));
    std::thread::sleep(Duration::from_millis(200));
    let pid = nix::unistd::Pid::from_raw(obs.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    obs.freeze(false);
    let before = ended.rules;
    obs.terminate_reading(120, |v| {
        ended.after_signal += 1;
        ended.take(v, pod.ino(), &dnat);
    });
    eprintln!(
        "rule adds of the load read before SIGTERM: {before} of {rules}; lines read after it: {}",
        ended.after_signal
    );
    assert_eq!(
        (ended.rules, ended.chains),
        (rules, chains),
        "expected every change of the load (rule_add, chain_create) before observer ended"
    );
    assert!(
        ended.moved,
        "expected the rewrite's move (service {s}'s first endpoint to {ip}, a DNAT to {ip}:8080 \
         in {}) before observer ended",
        sep_chain(s, 0)
    );
}

/// Services of the slow reader's load: 4,408 rules and 1,604 chains (6,012 lines), read at
/// [`SLOW_PACE`] lines a second after the signal: 10 s (12 s here, with the reader's own
/// time), twice the 5 s an output that takes nothing gets, and well within the 25 s cap.
const SLOW_SERVICES: usize = 400;
const SLOW_PACE: u64 = 600;

/// SIGTERM with a long backlog still to write, to a reader slower than the backlog (a slow
/// terminal, a log shipper): observer goes on while its output takes lines, past the 5 s an
/// output that takes nothing gets, and ends once every change of the load is written.
#[test]
fn after_sigterm_a_slow_reader_still_gets_the_whole_backlog() {
    skip_unless!("ip", "iptables-legacy-restore");
    let Loading {
        pod,
        obs,
        rules,
        chains,
        mut ended,
        ..
    } = loading("nb-slow", SLOW_SERVICES, SLOW_PACE, "no rewrite");
    let signalled = Instant::now();
    obs.terminate_reading(120, |v| {
        ended.after_signal += 1;
        ended.take(v, pod.ino(), "no rewrite");
    });
    let took = signalled.elapsed();
    eprintln!(
        "lines read after SIGTERM: {}, in {took:?}; rule adds of the load: {} of {rules}",
        ended.after_signal, ended.rules
    );
    assert_eq!(
        (ended.rules, ended.chains),
        (rules, chains),
        "expected every change of the load (rule_add, chain_create) before observer ended, \
         {took:?} after SIGTERM"
    );
    assert!(
        took > Duration::from_secs(6),
        "the backlog was read in {took:?} after SIGTERM: too little to show that observer waits \
         past 5 s for an output that still takes lines"
    );
}

/// The rule-level limit of the chain-level test: the pod's 4,408-rule table is past it, the
/// node's rules and the pod's shrunk table are within it.
const LIMIT: usize = 1_000;

/// A change line of namespace `ns`.
fn change_in(v: &Value, ns: u64) -> bool {
    is_change(v) && v["netns"] == ns
}

/// A status line of `state` whose message holds every word of `words`.
fn status_saying(v: &Value, state: &str, words: &[&str]) -> bool {
    v["kind"] == "status"
        && v["state"] == state
        && v["message"]
            .as_str()
            .is_some_and(|m| words.iter().all(|w| m.contains(w)))
}

/// The node namespace drops `addr` (one `iptables-legacy -A`), and observer tells that rule.
fn node_drops(obs: &mut Observer, node: &Netns, writer: &Writer, addr: &str) {
    node.write(
        writer,
        &["iptables-legacy", "-A", "INPUT", "-s", addr, "-j", "DROP"],
    );
    obs.expect(&format!("the node's rule dropping {addr}"), 60, |v| {
        change_in(v, node.ino())
            && v["op"] == "rule_add"
            && v["rule"].as_str().is_some_and(|r| r.contains(addr))
    });
}

#[test]
fn a_namespace_past_the_rule_level_limit_is_held_at_chain_level_and_the_others_are_not() {
    skip_unless!("ip", "iptables-legacy-restore", "iptables-legacy");
    let (pod, node) = (Netns::new("nb-coarse"), Netns::new("nb-fine"));
    let limit = LIMIT.to_string();
    let mut obs = Observer::start(&["--rule-level-limit", &limit]);
    let writer = Writer::new("obs-kube-proxy");
    let ns = pod.ino().to_string();

    // The load is past the limit: one warning that names the table and the namespace, then its
    // chains, each with its rule count, and not one rule.
    let load = nat_table_of(END_SERVICES, &[]);
    let rules = load.lines().filter(|l| l.starts_with("-A ")).count();
    let chains = load.lines().filter(|l| l.starts_with(':')).count();
    assert!(rules > LIMIT);
    pod.write_stdin(&writer, &RESTORE, &load);
    let held = format!("holds {rules} rules");
    obs.wait_line(
        "the status line of the table held at chain level",
        60,
        |v| status_saying(v, "warning", &["ip nat", &ns, &held, "held at chain level"]),
    );
    let pod_ino = pod.ino();
    obs.wait_count("the load's chain_create lines", 60, chains, |v| {
        change_in(v, pod_ino) && v["op"] == "chain_create"
    });
    let svc = svc_chain(7);
    let created = obs.expect("service 7's chain", 10, |v| {
        change_in(v, pod_ino) && v["op"] == "chain_create" && v["chain"] == svc.as_str()
    });
    let detail = created["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with("4 rules (") && detail.contains("chain level"),
        "{created}"
    );

    // The other namespace is held rule by rule.
    node_drops(&mut obs, &node, &writer, "192.0.2.7");

    // A move of one endpoint: its service's chain and the endpoint's chain changed, only those.
    let mark = obs.mark();
    let (s, ip) = (END_SERVICES / 2, ipv4([10, 64, 0, 0], 9));
    pod.write_stdin(&writer, &RESTORE, &nat_table_of(END_SERVICES, &[(s, ip)]));
    for c in [svc_chain(s), sep_chain(s, 0)] {
        obs.expect_since(mark, &format!("chain_update of {c}"), 60, |v| {
            change_in(v, pod_ino)
                && v["op"] == "chain_update"
                && v["chain"] == c.as_str()
                && v["detail"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("rules changed:"))
        });
    }
    // A chain flushed by another writer is a flush, and deleting it is a delete.
    let (flushed, deleted) = (sep_chain(3, 1), sep_chain(5, 2));
    let admin = Writer::new("obs-admin");
    pod.write(&admin, &["iptables-legacy", "-t", "nat", "-F", &flushed]);
    obs.expect_since(mark, "the chain_flush", 60, |v| {
        change_in(v, pod_ino) && v["op"] == "chain_flush" && v["chain"] == flushed.as_str()
    });
    let mut moved: Vec<String> = obs
        .seen
        .iter()
        .skip(mark)
        .filter(|v| change_in(v, pod_ino) && v["op"] != "chain_flush")
        .filter_map(|v| v["chain"].as_str().map(str::to_string))
        .collect();
    moved.sort();
    let mut want = [svc_chain(s), sep_chain(s, 0)];
    want.sort();
    assert_eq!(
        moved, want,
        "the move changed two chains, and nothing else was said of the pod"
    );
    pod.write(&admin, &["iptables-legacy", "-t", "nat", "-F", &deleted]);
    let jumps_to = format!("-j {deleted}");
    let without: String = nat_table_of(END_SERVICES, &[(s, ip)])
        .lines()
        .filter(|l| !l.contains(&jumps_to) && *l != format!(":{deleted} - [0:0]"))
        .filter(|l| {
            !l.starts_with(&format!("-A {deleted} ")) && !l.starts_with(&format!("-A {flushed} "))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    pod.write_stdin(&admin, &RESTORE, &without);
    obs.expect_since(mark, "the chain_delete", 60, |v| {
        change_in(v, pod_ino) && v["op"] == "chain_delete" && v["chain"] == deleted.as_str()
    });
    // Chain-level changes still raise the incidents of chains: kube-proxy's chains flushed and
    // deleted by another writer.
    for (ty, c) in [("foreign_flush", &flushed), ("foreign_delete", &deleted)] {
        let i = obs.expect_incident(ty, 30, |v| {
            v["netns"] == pod_ino
                && v["chains"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(|x| x == c.as_str()))
        });
        assert_eq!(i["owner"], "kube-proxy", "{i}");
        assert_eq!(i["actors"], serde_json::json!(["obs-admin"]), "{i}");
    }

    // Shrunk within the limit: held rule by rule again, and said so.
    let small = nat_table_of(10, &[]);
    pod.write_stdin(&writer, &RESTORE, &small);
    obs.wait_line("the status line of the table back at rule level", 60, |v| {
        status_saying(v, "warning", &["ip nat", &ns, "rule level again"])
    });
    let back = obs.mark();
    pod.write(&writer, &MARK_RETURN);
    obs.expect_since(back, "a rule of the pod, rule by rule again", 60, |v| {
        change_in(v, pod_ino)
            && v["op"] == "rule_add"
            && v["chain"] == "KUBE-MARK-MASQ"
            && v["rule"] == "-j RETURN"
    });
    let early_rules = obs.seen[..back]
        .iter()
        .filter(|v| {
            change_in(v, pod_ino) && v["op"].as_str().is_some_and(|o| o.starts_with("rule_"))
        })
        .count();
    assert_eq!(
        early_rules, 0,
        "no rule of the pod told while it was held at chain level"
    );
}

/// A one-rule change: KUBE-MARK-MASQ gets `-j RETURN`.
const MARK_RETURN: [&str; 7] = [
    "iptables-legacy",
    "-t",
    "nat",
    "-A",
    "KUBE-MARK-MASQ",
    "-j",
    "RETURN",
];

/// The services of each table in the budget's test: smaller than the other tests' loads.
const BUDGET_SERVICES: usize = 100;

/// Two pods, each within `--rule-level-limit`, whose tables together pass
/// `--rule-level-budget`, and the node's own namespace (`--node-netns`) loading the same table
/// meanwhile: the first pod is held rule by rule, the node too although the budget has no room
/// left for it (the pods cannot take the node's room), the second pod at chain level, with a
/// warning that names the budget; once the first pod's table is gone, the second's next change
/// brings it back to rule level (the node's rules do not count against the pods).
#[test]
fn pods_that_together_pass_the_budget_hold_the_last_at_chain_level_and_never_the_node() {
    skip_unless!("ip", "iptables-legacy-restore", "iptables-legacy");
    let (first, second) = (Netns::new("nb-first"), Netns::new("nb-second"));
    let node = Netns::new("nb-host");
    let load = nat_table_of(BUDGET_SERVICES, &[]);
    let rules = load.lines().filter(|l| l.starts_with("-A ")).count();
    // Room for one load and a half: the second does not fit beside the first. This observer
    // sees the other tests' namespaces too: its limit, just above one load, holds their bigger
    // tables at chain level, outside the budget, and the half load to spare is room for their
    // few small ones.
    let budget = (rules + rules / 2).to_string();
    let limit = (rules + 100).to_string();
    let node_path = format!("/run/netns/{}", node.name());
    let mut obs = Observer::start(&[
        "--rule-level-limit",
        &limit,
        "--rule-level-budget",
        &budget,
        "--node-netns",
        &node_path,
    ]);
    let writer = Writer::new("obs-kube-proxy");
    let (one, two, host) = (first.ino(), second.ino(), node.ino());
    first.write_stdin(&writer, &RESTORE, &load);
    obs.wait_count("the first pod's rules, rule by rule", 60, rules, |v| {
        change_in(v, one) && v["op"] == "rule_add"
    });
    // The budget leaves half a load beside the first pod: the node's namespace has its own.
    node.write_stdin(&writer, &RESTORE, &load);
    obs.wait_count("the node's rules, rule by rule", 60, rules, |v| {
        change_in(v, host) && v["op"] == "rule_add"
    });
    let mark = obs.mark();
    second.write_stdin(&writer, &RESTORE, &load);
    let ns = two.to_string();
    let held = format!("holds {rules} rules");
    let warning = obs.wait_line("the second pod held at chain level", 60, |v| {
        status_saying(v, "warning", &["ip nat", &ns, &held, "held at chain level"])
    });
    let message = warning["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("--rule-level-budget {budget}")),
        "the warning names the budget: {message}"
    );
    let chains = load.lines().filter(|l| l.starts_with(':')).count();
    obs.wait_count("the second pod's chains", 60, chains, |v| {
        change_in(v, two) && v["op"] == "chain_create"
    });
    let second_rules = obs.seen[mark..]
        .iter()
        .filter(|v| change_in(v, two) && v["op"] == "rule_add")
        .count();
    assert_eq!(
        second_rules, 0,
        "no rule of the second pod told at chain level"
    );
    let host_ns = host.to_string();
    assert!(
        !obs.seen
            .iter()
            .any(|v| status_saying(v, "warning", &[&host_ns, "held at chain level"])),
        "the node's namespace is never held at chain level for the pods' sake"
    );
    // The first pod still holds its place, and so does the node: their next rules are told
    // rule by rule.
    first.write(&writer, &MARK_RETURN);
    node.write(&writer, &MARK_RETURN);
    for (who, ino) in [("the first pod", one), ("the node", host)] {
        obs.expect_since(mark, &format!("{who}'s rule"), 60, |v| {
            change_in(v, ino) && v["op"] == "rule_add" && v["rule"] == "-j RETURN"
        });
    }
    // The first pod's table emptied: the second fits at its next change (the node's rules
    // stay out of the pods' budget), and says so.
    first.write_stdin(&writer, &RESTORE, "*nat\nCOMMIT\n");
    second.write(&writer, &MARK_RETURN);
    obs.wait_line("the second pod back at rule level", 60, |v| {
        status_saying(v, "warning", &["ip nat", &ns, "rule level again"])
    });
}

/// The rules one namespace's nftables ruleset may hold in the next test.
const NFT_LIMIT: usize = 1_000;

/// An nftables table of `rules` rules in one transaction, as `nft -f` reads it.
fn nft_table_of(rules: usize) -> String {
    let mut t = String::from("add table ip big\nadd chain ip big c\n");
    for i in 0..rules {
        let _ = writeln!(t, "add rule ip big c tcp dport {} accept", 1 + i % 60_000);
    }
    t
}

/// A pod's nftables ruleset past what it may hold rule by rule is held at chain level, with a
/// warning that says so, whether it is there when observer starts, comes in one transaction,
/// or is read again after lost notifications: its chains' changes are told with their rule
/// counts and none of its rules, and another namespace's rules are still told one by one.
#[test]
fn an_nftables_ruleset_past_the_limit_is_held_at_chain_level_and_the_others_are_not() {
    skip_unless!("ip", "nft");
    let (early, late) = (Netns::new("nb-nft-early"), Netns::new("nb-nft-late"));
    let (lost, node) = (Netns::new("nb-nft-lost"), Netns::new("nb-nft-node"));
    let writer = Writer::new("obs-nft-pod");
    let rules = NFT_LIMIT + 500;
    let big = nft_table_of(rules);
    early.write_stdin(&writer, &["nft", "-f", "-"], &big);
    let limit = NFT_LIMIT.to_string();
    // A notification buffer small enough that a ruleset loaded while observer is stopped
    // overflows it.
    let mut obs = Observer::start(&["--rule-level-limit", &limit, "--netlink-rcvbuf", "64KiB"]);
    let held = |ns: &Netns| {
        let ino = ns.ino().to_string();
        let cap = format!("more than the {NFT_LIMIT} rules");
        move |v: &Value| status_saying(v, "warning", &[&ino, &cap, "held at chain level"])
    };
    let counted = |ns: &Netns, was: usize, now: usize| {
        let ino = ns.ino();
        let said = format!("rules changed: {was} -> {now} ");
        move |v: &Value| {
            change_in(v, ino)
                && v["op"] == "chain_update"
                && v["chain"] == "c"
                && v["detail"].as_str().is_some_and(|d| d.starts_with(&said))
        }
    };
    // There at start: held at chain level from the first read; a rule more is counted.
    obs.wait_line("the early pod held at chain level", 60, held(&early));
    early.write(&writer, &["nft", "add rule ip big c accept"]);
    obs.expect(
        "the early pod's rule, counted",
        60,
        counted(&early, rules, rules + 1),
    );
    let early_ino = early.ino();
    early.write(&writer, &["nft", "flush chain ip big c"]);
    obs.expect("the early pod's flush", 60, |v| {
        change_in(v, early_ino) && v["op"] == "chain_flush" && v["chain"] == "c"
    });
    // In one transaction: held at chain level once it passes; the load told as counts.
    late.write_stdin(&writer, &["nft", "-f", "-"], &big);
    obs.wait_line("the late pod held at chain level", 60, held(&late));
    obs.expect("the late pod's load, counted", 60, counted(&late, 0, rules));
    // Read again after its notifications were lost (observer stopped meanwhile).
    obs.freeze(true);
    lost.write_stdin(&writer, &["nft", "-f", "-"], &big);
    obs.freeze(false);
    obs.wait_line("the pod read again, held at chain level", 60, held(&lost));
    obs.expect("the re-read, counted", 60, counted(&lost, 0, rules));
    // Another namespace's rule is still told rule by rule.
    node.write(
        &writer,
        &[
            "nft",
            "add table inet t; add chain inet t c; add rule inet t c accept",
        ],
    );
    let node_ino = node.ino();
    obs.expect("the node's rule", 60, |v| {
        change_in(v, node_ino) && v["op"] == "rule_add"
    });
    let pods = [early.ino(), late.ino(), lost.ino()];
    let pod_rules = obs
        .seen
        .iter()
        .filter(|v| pods.iter().any(|&p| change_in(v, p)) && v["op"] == "rule_add")
        .count();
    assert_eq!(
        pod_rules, 0,
        "no rule of a ruleset held at chain level is told"
    );
}

#[test]
fn a_table_too_large_to_read_is_a_gap_and_observer_goes_on() {
    skip_unless!("ip", "iptables-legacy-restore", "iptables-legacy");
    let (pod, node) = (Netns::new("nb-huge"), Netns::new("nb-small"));
    // 1 MiB read at most; the ring buffer small enough that the load is not copied through it.
    let mut obs = Observer::start(&["--max-table-read", "1MiB", "--ringbuf-size", "262144"]);
    let writer = Writer::new("obs-kube-proxy");
    pod.write_stdin(&writer, &RESTORE, &nat_table_of(END_SERVICES, &[]));
    let ns = pod.ino().to_string();
    obs.wait_line("the gap line of the table not read", 60, |v| {
        status_saying(
            v,
            "gap",
            &[
                "legacy table nat",
                &ns,
                "observer reads at once",
                "--max-table-read",
            ],
        )
    });
    // Still watching: the other namespace's change, and the pod's own once its table is small.
    node_drops(&mut obs, &node, &writer, "192.0.2.8");
    pod.write_stdin(&writer, &RESTORE, &nat_table_of(10, &[]));
    let pod_ino = pod.ino();
    obs.expect("the pod's small table", 60, |v| {
        change_in(v, pod_ino) && v["op"] == "chain_create" && v["chain"] == svc_chain(9).as_str()
    });
    assert!(
        !obs.seen
            .iter()
            .any(|v| change_in(v, pod_ino) && v["chain"] == svc_chain(300).as_str()),
        "nothing of the table not read is told"
    );
}

#[test]
fn what_a_namespace_reports_after_two_replaces_comes_after_both() {
    skip_unless!("ip", "iptables-legacy-restore", "nft");
    let pod = Netns::new("nb-order");
    // A ring buffer that holds both replaces' copies: each is learned from its own, not read
    // back (a read after both would find the rewrite already there, and learn both at once).
    let mut obs = Observer::start(&["--netns", pod.name(), "--ringbuf-size", "16777216"]);
    let writer = Writer::new("obs-kube-proxy");
    let pod_ino = pod.ino();
    for cmd in ["add table inet t", "add chain inet t c"] {
        pod.write(&writer, &["nft", cmd]);
    }
    obs.expect("the nft chain", 60, |v| {
        change_in(v, pod_ino) && v["chain"] == "c"
    });
    // While observer is stopped: a load, a rewrite of it, then an nft rule. When it goes on,
    // the load is being learned when the rewrite and the rule come: the rule is reported
    // after both replaces, as they were made.
    let (s, ip) = (END_SERVICES / 3, ipv4([10, 64, 0, 0], 7));
    obs.freeze(true);
    pod.write_stdin(&writer, &RESTORE, &nat_table_of(END_SERVICES, &[]));
    pod.write_stdin(&writer, &RESTORE, &nat_table_of(END_SERVICES, &[(s, ip)]));
    pod.write(
        &writer,
        &["nft", "add rule inet t c counter comment \"after\""],
    );
    obs.freeze(false);
    let rule = obs.expect("the nft rule", 60, |v| {
        change_in(v, pod_ino) && v["op"] == "rule_add" && v["table"] == "t"
    });
    let at = |pred: &dyn Fn(&Value) -> bool| obs.seen.iter().position(pred);
    let rule_at = at(&|v| v["seq"] == rule["seq"]).expect("the rule was seen");
    let moved = format!("{ip}:8080");
    let rewrite_at = at(&|v| {
        change_in(v, pod_ino)
            && v["chain"] == sep_chain(s, 0).as_str()
            && v["rule"].as_str().is_some_and(|r| r.contains(&moved))
    });
    let load_end = obs
        .seen
        .iter()
        .rposition(|v| change_in(v, pod_ino) && v["table"] == "nat" && v["op"] == "rule_add");
    assert!(
        rewrite_at.is_some_and(|r| r < rule_at) && load_end.is_some_and(|l| l < rule_at),
        "the nft rule (line {rule_at}) before the rewrite ({rewrite_at:?}) or the load's end \
         ({load_end:?})"
    );
}
