//! `observer doctor`: what this kernel and this process allow, which sources `tail` would use, and
//! for each missing piece what is lost and how to fix it.
//!
//! Every answer comes from trying the real thing (loading the programs, opening a netlink
//! subscription, resolving BTF offsets), not from version numbers.

use std::path::Path;

use serde::Serialize;

use crate::caps;
use crate::cli::DoctorArgs;
use crate::hooks::{self, btf, tracefs};
use crate::shown::Shown;

#[derive(Debug, Serialize)]
struct Check {
    name: &'static str,
    ok: bool,
    /// What was found.
    detail: String,
    /// When not ok: what is lost, and how to fix it.
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    checks: Vec<Check>,
    /// Which backend each hook of `tail --hooks auto` would be on, and what was refused and why.
    hooks: String,
    /// Every program `tail --hooks auto` would attach, and where (`kprobe:netlink_unicast`).
    attached: Vec<String>,
    /// What the hooks cost the rest of the node on the backend they are on.
    cost: String,
    /// The eBPF error counters of each observer running now, by the id of its counter map.
    running: Vec<Running>,
    /// What `tail` would not see.
    lost: Vec<String>,
    /// Hooks this kernel puts on a worse backend than the others (a function it refuses on
    /// theirs, e.g. x_tables on 5.10's fentry), and what that costs.
    degraded: Vec<String>,
    /// With `--remote`: how the readers of that `observer run` stand.
    #[serde(skip_serializing_if = "Option::is_none")]
    daemon: Option<Daemon>,
}

/// A running `observer run`'s readers, from its `/metrics`.
#[derive(Debug, Serialize, PartialEq)]
struct Daemon {
    url: String,
    /// `None` when it does not publish to NATS.
    nats: Option<NatsState>,
    /// Lines each stream dropped since it started (`observer_sink_dropped_total`), by stream.
    dropped: std::collections::BTreeMap<String, u64>,
    /// Rows the record dropped (its queue was full: the disk too slow or full).
    record_dropped: u64,
    /// Legacy tables it holds at chain level (`observer_chain_level_tables`).
    chain_level_tables: u64,
    /// Namespaces whose nftables ruleset it holds at chain level
    /// (`observer_nft_chain_level_namespaces`).
    nft_chain_level: u64,
    /// How its record stands; `None` when it keeps none.
    #[serde(skip_serializing_if = "Option::is_none")]
    record: Option<RecordState>,
}

/// A running daemon's record: taking rows, or failing since when and why; its gaps so far.
#[derive(Debug, Serialize, PartialEq)]
struct RecordState {
    /// `ok` or `failing`.
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// Gap rows written so far (each a stretch the record could not take).
    gaps: u64,
    /// Rows that failed to be written (disk full, I/O error) or were dropped (writer behind).
    rows_lost: u64,
}

impl RecordState {
    fn from_metrics(text: &str) -> Option<RecordState> {
        let count = |name: &str, labels: &str| sample(text, name, labels).unwrap_or(0.0) as u64;
        sample(text, "observer_record_rows_total", "outcome=\"written\"")?;
        let since = sample(text, "observer_record_failing_since_seconds", "").unwrap_or(0.0);
        let reason = text.lines().find_map(|l| {
            let rest = l.strip_prefix("observer_record_failing{reason=\"")?;
            let (reason, value) = rest.rsplit_once("\"} ")?;
            (value.trim().parse::<f64>().ok()? >= 1.0)
                .then(|| reason.replace("\\\"", "\"").replace("\\\\", "\\"))
        });
        let failing = since > 0.0;
        Some(RecordState {
            state: if failing { "failing" } else { "ok" },
            since: failing.then(|| {
                crate::timestamp::Timestamp::from_unix_nanos((since * 1e9) as i64).to_string()
            }),
            reason: reason.filter(|_| failing),
            gaps: count("observer_record_gaps_total", ""),
            rows_lost: count("observer_record_rows_total", "outcome=\"failed\"")
                + count("observer_record_rows_total", "outcome=\"dropped\""),
        })
    }

    /// One line for people.
    fn detail(&self) -> String {
        let state = match (&self.since, &self.reason) {
            (Some(t), Some(r)) => format!("failing since {t}: {r}"),
            (Some(t), None) => format!("failing since {t}"),
            _ => "ok: rows reach the record".into(),
        };
        format!(
            "{state}; {} gaps so far ({} rows not recorded)",
            self.gaps, self.rows_lost
        )
    }
}

#[derive(Debug, Serialize, PartialEq)]
struct NatsState {
    connected: bool,
    /// Rows recorded that JetStream has not acknowledged yet.
    backlog_rows: u64,
    /// How long the oldest of them has waited, in seconds.
    backlog_oldest_seconds: f64,
}

/// The value of `name` with exactly these labels in Prometheus text (`None`: absent).
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (key, value) = l.rsplit_once(' ')?;
        let (n, l) = match key.split_once('{') {
            Some((n, rest)) => (n, rest.strip_suffix('}')?),
            None => (key, ""),
        };
        (n == name && l == labels).then(|| value.parse().ok())?
    })
}

/// What `/metrics` says of the daemon's readers.
fn daemon_state(url: &str, text: &str) -> Daemon {
    let count = |name: &str, labels: &str| sample(text, name, labels).unwrap_or(0.0) as u64;
    let nats = sample(text, "observer_nats_connected", "").map(|c| NatsState {
        connected: c >= 1.0,
        backlog_rows: count("observer_nats_backlog_rows", ""),
        backlog_oldest_seconds: sample(text, "observer_nats_backlog_oldest_seconds", "")
            .unwrap_or(0.0),
    });
    let dropped = text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("observer_sink_dropped_total{sink=\"")?;
            let (sink, value) = rest.split_once("\"} ")?;
            Some((sink.to_string(), value.trim().parse::<f64>().ok()? as u64))
        })
        .collect();
    Daemon {
        url: url.to_string(),
        nats,
        dropped,
        record_dropped: count("observer_record_rows_total", "outcome=\"dropped\""),
        chain_level_tables: count("observer_chain_level_tables", ""),
        nft_chain_level: count("observer_nft_chain_level_namespaces", ""),
        record: RecordState::from_metrics(text),
    }
}

/// What the `rule level` check says: the legacy tables and the nftables rulesets held at
/// chain level, or that there are none.
fn rule_level(chain_level: u64, nft: u64) -> String {
    let mut parts = Vec::new();
    if chain_level > 0 {
        parts.push(format!(
            "{} held at chain level: more rules than --rule-level-limit (per namespace) or \
             --rule-level-budget (shared by the namespaces other than the node's) leaves for \
             them; their changes are told a chain at a time, without rule text, rule-level \
             incidents or restore",
            crate::ruleset::plural(chain_level, "legacy table is", "legacy tables are")
        ));
    }
    if nft > 0 {
        parts.push(format!(
            "{} held at chain level: more rules than --rule-level-limit (per namespace) or \
             --rule-level-budget (a pod's) allows; their changes are told a chain at a time, \
             without rule text, rule-level incidents or restore, until observer restarts",
            crate::ruleset::plural(
                nft,
                "namespace's nftables ruleset is",
                "namespaces' nftables rulesets are"
            )
        ));
    }
    if parts.is_empty() {
        return "every legacy table and nftables ruleset is held rule by rule".into();
    }
    parts.join("; ")
}

/// Ask the daemon at `url` for its `/metrics`.
async fn ask_daemon(url: &str, access: &crate::cli::RemoteAccess) -> anyhow::Result<Daemon> {
    let text = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        crate::cmd::remote::get_text(url, "/metrics", access),
    )
    .await
    .map_err(|_| anyhow::anyhow!("{url}/metrics did not answer within 10 s"))??;
    Ok(daemon_state(url, &text))
}

#[derive(Debug, Serialize)]
struct Running {
    map_id: u32,
    errors: hooks::KernelErrors,
}

/// What the hooks on `placement` cost processes that have nothing to do with netfilter.
fn cost_of(placement: Option<&hooks::backend::Placement>) -> String {
    let Some(p) = placement else {
        return "nothing: no hook is attached".into();
    };
    let syscall_tracepoints = [p.x_tables, p.namespaces, p.umount, p.nf_writers, p.refusals]
        .contains(&Some(hooks::backend::HookBackend::Tracepoint));
    if syscall_tracepoints {
        "syscall tracepoints: a program runs on every setsockopt, sendmsg, sendto, recvmsg, \
         clone, unshare, setns and umount of every process on the node, and returns at its first \
         check unless the call is netfilter or namespace work (figures: docs/hooks.md, \"What it costs\")"
            .into()
    } else {
        "kernel functions only: programs run when a netlink message is sent or multicast \
         (netlink_unicast, nlmsg_notify, netlink_ack), a table is replaced (nf_setsockopt), a \
         network namespace is made (copy_net_ns) or a file system unmounted (path_umount); \
         other work (UDP, fork, exec, file I/O) runs none"
            .into()
    }
}

fn check(name: &'static str, ok: bool, detail: String, fix: &str) -> Check {
    Check {
        name,
        ok,
        detail,
        fix: (!ok).then(|| fix.to_string()),
    }
}

fn kprobes_available() -> bool {
    Path::new("/sys/bus/event_source/devices/kprobe/type").exists()
}

pub async fn run(args: DoctorArgs) -> anyhow::Result<()> {
    if let Some(url) = &args.remote {
        // A URL that is not one is a usage error, found before anything else is tried.
        url.parse::<hyper::Uri>()
            .map_err(|e| anyhow::anyhow!("--remote {url}: {e} (a URL like http://HOST:9820)"))?;
    }
    let mut checks = vec![privileges()];
    let eff = caps::effective();
    checks.extend(caps::CAPABILITIES.iter().map(|c| capability(c, eff)));
    checks.push(btf_check());
    checks.extend(tracing_checks());

    // Observers running now, before this one loads its own programs.
    let running: Vec<Running> = match hooks::running_errors() {
        Ok(v) => v
            .into_iter()
            .map(|(map_id, errors)| Running { map_id, errors })
            .collect(),
        Err(e) => {
            tracing::debug!("listing the kernel's maps: {e}");
            Vec::new()
        }
    };
    let bpf = try_hooks();
    checks.push(check(
        "bpf",
        bpf.ok,
        bpf.detail,
        "without BPF, tail runs netlink-only: nftables changes are seen (with attribution from \
         /proc), iptables-legacy changes are not",
    ));
    let nl_ok = match crate::nftables::subscribe() {
        Ok(_socket) => Ok(()),
        Err(e) => Err(e.to_string()),
    };
    checks.push(check(
        "netlink",
        nl_ok.is_ok(),
        match &nl_ok {
            Ok(()) => "subscribed to NFNLGRP_NFTABLES".into(),
            Err(e) => e.clone(),
        },
        "nftables changes cannot be seen; run as root or with CAP_NET_ADMIN",
    ));
    checks.push(x_tables_check());
    let bus = crate::bus::address(args.system_bus.as_deref());
    let bus_ok = match &bus {
        Some(address) => {
            let checked = crate::bus::check(address).await;
            // No bus at all: no firewalld to ask either, nothing lost.
            let ok = matches!(checked, Ok(()) | Err(crate::bus::BusError::Absent(_)));
            checks.push(check(
                "system_bus",
                ok,
                match &checked {
                    Ok(()) => format!("{address} can be monitored for firewalld's callers"),
                    Err(crate::bus::BusError::Absent(_)) => format!(
                        "no system bus at {address}: no D-Bus caller to name (firewalld needs                          one)"
                    ),
                    Err(e) => e.to_string(),
                },
                "firewalld's changes are named after firewalld only, not after who asked it                  (firewall-cmd and the job that ran it); where firewalld runs, let observer                  reach the system bus as root (the DaemonSet mounts /run/dbus read-only)",
            ));
            ok
        }
        None => true,
    };

    let mut lost = Vec::new();
    if !bpf.ok {
        lost.push("iptables-legacy, ip6tables-legacy and arptables-legacy changes".into());
        lost.push("namespaces created while running are found only through netlink activity in known namespaces".into());
    }
    if nl_ok.is_err() {
        lost.push("nftables changes (nft, iptables-nft, firewalld)".into());
    }
    if !bus_ok {
        lost.push("who asked firewalld for its changes (process.requested_by)".into());
    }
    if let Some(why) = bpf.writers_lost {
        lost.push(format!("{why}; refused nftables batches are not seen"));
    }
    let daemon = match &args.remote {
        Some(url) => remote(url, &args.access, &mut checks).await,
        None => None,
    };
    let report = Report {
        daemon,
        hooks: bpf.placement.unwrap_or_else(|| {
            "x_tables=none namespaces=none nf_tables=netlink nf_writers=proc".into()
        }),
        attached: bpf.attached,
        cost: bpf.cost,
        running,
        checks,
        lost,
        degraded: bpf.degraded,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    print_text(&report);
    Ok(())
}

/// Root, or every capability [`caps::needed`] lists.
fn privileges() -> Check {
    let eff = caps::effective();
    let euid = nix::unistd::geteuid();
    let held: Vec<String> = caps::needed()
        .map(|c| format!("{} {}", c.name, c.covered(eff)))
        .collect();
    check(
        "privileges",
        euid.is_root() || caps::needed().all(|c| c.covered(eff)),
        format!("euid {euid}, {}", held.join(", ")),
        &format!("run as root (sudo observer ...), or grant {}", caps::NEEDED),
    )
}

/// One capability of [`caps::CAPABILITIES`]: held or not, what it is for, what is lost without.
fn capability(c: &caps::Capability, eff: u64) -> Check {
    let held = if c.held(eff) {
        "held"
    } else if c.covered(eff) {
        "not held, CAP_SYS_ADMIN stands for it"
    } else {
        "not held"
    };
    check(
        c.name,
        c.covered(eff),
        format!("{held}; for {}", c.used_for),
        c.without,
    )
}

fn btf_check() -> Check {
    match btf::KernelBtf::running() {
        Ok(k) => {
            let r = btf::resolve_offsets(&k);
            check(
                "btf",
                r.missing.is_empty(),
                if r.missing.is_empty() {
                    format!(
                        "{} readable; every field the programs read resolved",
                        btf::VMLINUX_BTF
                    )
                } else {
                    r.missing.join("; ")
                },
                "the parent chain and namespace of legacy writers will be unknown on this kernel",
            )
        }
        Err(e) => check(
            "btf",
            false,
            e.to_string(),
            "a kernel built with CONFIG_DEBUG_INFO_BTF=y is needed for full attribution",
        ),
    }
}

/// tracefs, the syscall tracepoints in it, and kprobes.
fn tracing_checks() -> [Check; 3] {
    let tfs = tracefs::find();
    let tp = tfs.is_some_and(|d| {
        Path::new(d)
            .join("events/syscalls/sys_enter_setsockopt")
            .is_dir()
    });
    [
        check(
            "tracefs",
            tfs.is_some(),
            tfs.map_or("not mounted".to_string(), |d| format!("mounted at {d}")),
            "observer mounts it itself at start (mount -t tracefs nodev /sys/kernel/tracing)",
        ),
        check(
            "syscall tracepoints",
            tp || tfs.is_none(),
            if tfs.is_none() {
                "unknown until tracefs is mounted".into()
            } else {
                format!(
                    "syscalls:sys_enter_setsockopt {}",
                    if tp { "present" } else { "absent" }
                )
            },
            "a kernel with CONFIG_FTRACE_SYSCALLS is needed to see iptables-legacy changes",
        ),
        Check {
            name: "kprobes",
            ok: true,
            detail: format!(
                "{}; see the bpf line for which backend the hooks end up on",
                if kprobes_available() {
                    "supported by the kernel"
                } else {
                    "not supported by the kernel"
                }
            ),
            fix: None,
        },
    ]
}

/// What loading and attaching the real programs (then detaching them) showed.
struct HookTrial {
    ok: bool,
    detail: String,
    placement: Option<String>,
    writers_lost: Option<String>,
    attached: Vec<String>,
    cost: String,
    degraded: Vec<String>,
}

/// The definitive BPF test: load and attach the real programs, then detach.
fn try_hooks() -> HookTrial {
    match hooks::KernelHooks::load(&hooks::HookOptions::default()) {
        Ok(h) => HookTrial {
            ok: true,
            detail: format!("loaded and attached {}", h.report.attached.join(", ")),
            placement: Some(h.report.placement.summary()),
            writers_lost: h.report.netlink_lost.clone(),
            attached: h.report.attached.clone(),
            cost: cost_of(Some(&h.report.placement)),
            degraded: h.report.placement.degraded(),
        },
        Err(e) => HookTrial {
            ok: false,
            detail: e.to_string(),
            placement: None,
            writers_lost: None,
            attached: Vec::new(),
            cost: cost_of(None),
            degraded: Vec::new(),
        },
    }
}

fn x_tables_check() -> Check {
    let legacy = Path::new("/proc/net/ip_tables_names").exists();
    check(
        "x_tables",
        legacy,
        if legacy {
            "ip_tables present".into()
        } else {
            "ip_tables not loaded (legacy tables appear when first used)".into()
        },
        "nothing is lost: iptables-legacy changes will be seen once the module loads",
    )
}

/// With `--remote`: the daemon's readers, and a check of its NATS publishing (or of why it
/// could not be asked).
async fn remote(
    url: &str,
    access: &crate::cli::RemoteAccess,
    checks: &mut Vec<Check>,
) -> Option<Daemon> {
    match ask_daemon(url, access).await {
        Ok(d) => {
            if let Some(r) = &d.record {
                checks.push(check(
                    "record",
                    r.state == "ok",
                    r.detail(),
                    "stdout, the HTTP streams and NATS still carry every change; free space on \
                     the record's file system (or fix the disk): the record resumes by itself \
                     and keeps a gap row for what it missed, which `observer query` shows",
                ));
            }
            checks.push(check(
                "rule level",
                d.chain_level_tables == 0 && d.nft_chain_level == 0,
                rule_level(d.chain_level_tables, d.nft_chain_level),
                "the daemon's log and status lines name each table or namespace and the bound; \
                 raise --rule-level-limit or --rule-level-budget (and the memory limit: about \
                 0.5 KiB per legacy rule held, plus one read of the table, and about 2 KiB per \
                 nftables rule) if the node should hold them rule by rule; an nftables \
                 ruleset is held rule by rule again after a restart",
            ));
            if let Some(n) = &d.nats {
                checks.push(check(
                    "nats",
                    n.connected,
                    format!(
                        "{}; {} recorded rows not yet acknowledged by JetStream, the oldest \
                         {:.1} s old",
                        if n.connected {
                            "connected"
                        } else {
                            "not connected"
                        },
                        n.backlog_rows,
                        n.backlog_oldest_seconds
                    ),
                    "nothing is lost while the rows wait in the record (they are published \
                     when the server answers again); the daemon's log says why it cannot \
                     publish",
                ));
            }
            Some(d)
        }
        Err(e) => {
            checks.push(check(
                "daemon",
                false,
                format!("{e:#}"),
                "is `observer run --listen` serving at that URL (and, with a token or TLS, \
                 are --token-file, --ca and --client-cert given)?",
            ));
            None
        }
    }
}

/// The report for people. Its details hold the kernel's, a daemon's and a server's words
/// (errors, metric labels), shown escaped ([`Shown`]).
fn print_text(report: &Report) {
    for c in &report.checks {
        println!(
            "{:<4} {:<20} {}",
            if c.ok { "ok" } else { "MISS" },
            c.name,
            Shown(&c.detail)
        );
        if let Some(fix) = &c.fix {
            println!("     {:<20} -> {}", "", Shown(fix));
        }
    }
    println!("\nhooks: tail would use {}", Shown(&report.hooks));
    println!("attached: {}", Shown(&report.attached.join(", ")));
    println!("cost: {}", Shown(&report.cost));
    for d in &report.degraded {
        println!("degraded on this kernel: {}", Shown(d));
    }
    for r in &report.running {
        let e = &r.errors;
        println!(
            "running observer (counter map {}): kernel errors: ring buffer full {}, calls in \
             flight not followed {}, failed reads {}, failed map updates {}",
            r.map_id, e.ringbuf_full, e.pending_full, e.read_failed, e.map_full
        );
    }
    if let Some(d) = &report.daemon {
        let dropped: Vec<String> = d
            .dropped
            .iter()
            .map(|(k, v)| format!("{} {v}", Shown(k)))
            .collect();
        println!(
            "observer run at {}: lines dropped by stream: {}; record rows dropped {}",
            Shown(&d.url),
            if dropped.is_empty() {
                "none counted".to_string()
            } else {
                dropped.join(", ")
            },
            d.record_dropped
        );
        if d.nats.is_none() {
            println!(
                "observer run at {}: does not publish to NATS",
                Shown(&d.url)
            );
        }
    }
    if report.lost.is_empty() {
        println!("nothing is lost: every iptables-legacy and nftables change is seen");
    } else {
        for l in &report.lost {
            println!("not seen: {}", Shown(l));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = "# HELP observer_nats_connected 1 while connected.\n\
        # TYPE observer_nats_connected gauge\n\
        observer_nats_connected 0\n\
        observer_nats_backlog_rows 20013\n\
        observer_nats_backlog_oldest_seconds 7.25\n\
        observer_sink_dropped_total{sink=\"stdout\"} 12\n\
        observer_sink_dropped_total{sink=\"events\"} 0\n\
        observer_record_rows_total{outcome=\"written\"} 20013\n\
        observer_record_rows_total{outcome=\"dropped\"} 3\n\
        observer_chain_level_tables 2\n\
        observer_nft_chain_level_namespaces 1\n";

    #[test]
    fn the_daemon_state_is_read_from_its_metrics() {
        let d = daemon_state("http://n:9820", METRICS);
        assert_eq!(
            d.nats,
            Some(NatsState {
                connected: false,
                backlog_rows: 20013,
                backlog_oldest_seconds: 7.25
            })
        );
        assert_eq!(d.dropped.get("stdout"), Some(&12));
        assert_eq!(d.dropped.get("events"), Some(&0));
        assert_eq!(d.record_dropped, 3);
        assert_eq!(d.chain_level_tables, 2);
        assert_eq!(d.nft_chain_level, 1);
        let said = rule_level(d.chain_level_tables, d.nft_chain_level);
        assert!(
            said.contains("2 legacy tables are held at chain level")
                && said.contains("1 namespace's nftables ruleset is held at chain level"),
            "{said}"
        );
        assert!(rule_level(0, 0).starts_with("every legacy table"));
    }

    #[test]
    fn the_records_state_is_read_from_its_metrics() {
        let ok = daemon_state("http://n:9820", METRICS).record.unwrap();
        assert_eq!((ok.state, ok.gaps, ok.rows_lost), ("ok", 0, 3));
        assert!(ok.detail().starts_with("ok: rows reach the record"));
        let failing = format!(
            "{METRICS}observer_record_rows_total{{outcome=\"failed\"}} 29503\n\
             observer_record_gaps_total 2\n\
             observer_record_failing_since_seconds 1764680000\n\
             observer_record_failing{{reason=\"disk full\"}} 1\n"
        );
        let r = daemon_state("http://n:9820", &failing).record.unwrap();
        assert_eq!(r.state, "failing");
        assert_eq!(r.reason.as_deref(), Some("disk full"));
        assert_eq!(r.since.as_deref(), Some("2025-12-02T12:53:20.000000000Z"));
        assert_eq!((r.gaps, r.rows_lost), (2, 29506));
        assert_eq!(
            r.detail(),
            "failing since 2025-12-02T12:53:20.000000000Z: disk full; 2 gaps so far (29506 \
             rows not recorded)"
        );
    }

    #[test]
    fn a_daemon_without_nats_has_no_nats_state() {
        let d = daemon_state(
            "http://n:9820",
            "observer_record_rows_total{outcome=\"dropped\"} 0\n",
        );
        assert_eq!(d.nats, None);
        assert!(d.dropped.is_empty());
    }
}
