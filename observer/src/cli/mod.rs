//! Command line: `observer tail`, `observer run`, `observer query`, `observer doctor`.

use clap::{Args, Parser, Subcommand, ValueEnum};

pub mod query;
pub mod run;

use crate::engine::{EngineConfig, HookChoice};
use crate::hooks::backend::HookBackend;
use crate::ruleset::{Backend, Op};

/// See every netfilter ruleset change (iptables-legacy, iptables-nft, nft) the moment the kernel
/// applies it, in every network namespace, and who made it.
#[derive(Debug, Parser)]
#[command(name = "observer", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Log filter for messages on stderr (e.g. `info`, `debug`); default `warn`, or OBSERVER_LOG.
    #[arg(long, global = true, value_name = "FILTER")]
    pub log_level: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run as a node agent: JSON lines of every record on stdout, an HTTP endpoint (event and
    /// incident streams, metrics, health) and the forensic record (needs root).
    Run(Box<run::RunArgs>),
    /// Search the forensic record that `observer run` keeps (a copied file works).
    Query(Box<query::QueryArgs>),
    /// Print every ruleset change, and the ownership incidents they make, as they happen (needs
    /// root).
    ///
    /// Human lines by default; `--json` prints JSON lines whose first line is
    /// {"kind":"status","state":"ready",...} once every hook and subscription is live. Incidents
    /// are `{"kind":"incident",...}` lines (marked `!!` in human output).
    Tail(Box<TailArgs>),
    /// Show who owns every chain and set of every namespace (catalog, `--owners` file, or
    /// unknown), and which backends each owner's chains live in (needs root).
    Owners(OwnersArgs),
    /// Say what this kernel and this process allow, which sources `tail` would use, and for each
    /// missing piece what is lost and how to fix it.
    Doctor(DoctorArgs),
}

/// Which kernel hooks to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HooksMode {
    /// The best this kernel allows: fentry/fexit, else kprobes, else syscall tracepoints, else
    /// netlink only.
    Auto,
    /// BTF trampolines (fentry/fexit); fail with the kernel's error if they cannot be attached.
    Fentry,
    /// kprobes/kretprobes; fail with the kernel's error if they cannot be attached.
    Kprobe,
    /// Syscall tracepoints (fail if they cannot be attached).
    Tracepoint,
    /// No BPF: nftables changes only, from netlink; iptables-legacy changes are not seen.
    Netlink,
}

impl HooksMode {
    /// The one hook backend this mode insists on (`None`: the best that attaches, or none).
    pub fn backend(self) -> Option<HookBackend> {
        match self {
            HooksMode::Fentry => Some(HookBackend::Fentry),
            HooksMode::Kprobe => Some(HookBackend::Kprobe),
            HooksMode::Tracepoint => Some(HookBackend::Tracepoint),
            HooksMode::Auto | HooksMode::Netlink => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Legacy,
    Nft,
    Ipset,
}

impl From<BackendArg> for Backend {
    fn from(b: BackendArg) -> Backend {
        match b {
            BackendArg::Legacy => Backend::Legacy,
            BackendArg::Nft => Backend::Nft,
            BackendArg::Ipset => Backend::Ipset,
        }
    }
}

/// When to colour the human output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Args)]
pub struct TailArgs {
    /// Print JSON lines (the stable contract) instead of human lines.
    #[arg(long)]
    pub json: bool,

    /// Only this network namespace: an inode number, a /run/netns/NAME path, an `ip netns` name,
    /// or `all`.
    #[arg(long, default_value = "all", value_name = "NETNS")]
    pub netns: String,

    /// Only this backend.
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,

    /// Only this table (e.g. `filter`, `nat`).
    #[arg(long)]
    pub table: Option<String>,

    /// Only chains (or sets) whose name matches this glob (e.g. `KUBE-SVC-*`).
    #[arg(long, value_name = "GLOB")]
    pub chain: Option<String>,

    /// Only changes made by this actor (or this command).
    #[arg(long)]
    pub actor: Option<String>,

    /// Only these ops (repeat, or separate with commas), e.g. `chain_delete,chain_flush`.
    #[arg(long, value_name = "OP", value_delimiter = ',', value_parser = parse_op)]
    pub op: Vec<Op>,

    /// Print incidents only (ownership conflicts), no change lines.
    #[arg(long)]
    pub incidents_only: bool,

    #[command(flatten)]
    pub source: SourceArgs,

    /// No colour (also: NO_COLOR set, or output not a terminal); the same as `--color never`.
    #[arg(long)]
    pub no_color: bool,

    /// Colour: `auto` (when stdout is a terminal and NO_COLOR is not set), `always`, `never`.
    #[arg(long, value_enum, default_value = "auto", value_name = "WHEN")]
    pub color: ColorWhen,

    /// Whole lines: do not cut rule text to the terminal's width (`--json` is always whole).
    #[arg(long)]
    pub wide: bool,

    /// Times in UTC (default: local time).
    #[arg(long)]
    pub utc: bool,

    /// One line per change, as they come, instead of one header per transaction.
    #[arg(long)]
    pub no_group: bool,

    /// Every change of a transaction under its header (default: the first 5, then a count).
    #[arg(short, long)]
    pub verbose: bool,

    /// Follow a running `observer run` at this URL (e.g. `http://10.0.0.5:9820`) instead of the
    /// local kernel; the same filters apply. Needs no root.
    #[arg(long, value_name = "URL")]
    pub remote: Option<String>,

    /// Follow the record that `observer run` writes (its file, or its directory) instead of the
    /// local kernel: the daemon's changes and incidents, with the same filters, as it records
    /// them. Needs read access to the file, not root.
    #[arg(long, value_name = "FILE", conflicts_with = "remote")]
    pub record: Option<std::path::PathBuf>,

    /// With `--remote` or `--record`: first print what was seen since this moment (`10m`, `2h`,
    /// or an RFC 3339 time), then go on live, with no gap and no duplicate. With `--remote`,
    /// durations are read on the daemon's clock.
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,

    #[command(flatten)]
    pub access: RemoteAccess,

    /// The fleet view: follow every node that publishes to this NATS server
    /// (`observer run --nats URL`), e.g. `nats://nats.observer:4222`. Lines name their node;
    /// the same filters apply. With `--since`, the stream's history first. Needs no root.
    #[arg(long, value_name = "URL", conflicts_with_all = ["remote", "record"])]
    pub nats: Option<String>,

    /// With `--nats`: only the nodes whose name matches this glob (`worker-*`).
    #[arg(long, value_name = "GLOB", requires = "nats")]
    pub node: Option<String>,

    /// With `--nats`: read through the server's durable consumer of this name (created the
    /// first time), so that a tail that stops or loses its connection goes on where it left off.
    #[arg(long, value_name = "NAME", requires = "nats")]
    pub durable: Option<String>,

    /// With `--nats`: the JetStream stream the nodes publish to.
    #[arg(long, value_name = "NAME", default_value = crate::sinks::nats::DEFAULT_STREAM)]
    pub nats_stream: String,

    /// With `--nats`: TLS and credentials.
    #[command(flatten)]
    pub nats_auth: crate::sinks::nats::flags::NatsAuthArgs,
}

/// How observer sees changes and turns them into incidents (shared by every command that watches).
#[derive(Debug, Clone, Args)]
pub struct SourceArgs {
    /// Chain ownership file (TOML or YAML, by extension): `[[owner]] name, actors, chains` and
    /// `[[shared]] chains, writers`; its entries win over the built-in catalog.
    #[arg(long, value_name = "FILE", env = "OBSERVER_OWNERS")]
    pub owners: Option<std::path::PathBuf>,

    /// Undo/redo cycles between two components that make a `flapping` incident.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub flap_cycles: u32,

    /// The window those cycles must fall in (also: how long a loop must stop before its
    /// incident closes), e.g. `60s`, `2m`.
    #[arg(long, default_value = "60s", value_parser = parse_window)]
    pub flap_window: std::time::Duration,

    /// Flushes and deletes of several owners' chains by one actor within this window are one
    /// `mass_flush`.
    #[arg(long, default_value = "5s", value_parser = parse_window)]
    pub mass_window: std::time::Duration,

    /// How long a `mass_flush` waits for each owner to re-create its chains before it closes and
    /// names those that never did.
    #[arg(long, default_value = "60s", value_parser = parse_window)]
    pub repair_within: std::time::Duration,

    /// Kernel hooks to use.
    #[arg(long, value_enum, default_value = "auto")]
    pub hooks: HooksMode,

    /// Size of the kernel ring buffer in bytes (a power of two, at least one page). Legacy
    /// tables up to half of it (16 MiB at most; none below 256 KiB) are copied through it as
    /// each writer installs them; larger ones, and a copy that finds it half full, are read
    /// back after the change. It is mapped into observer's memory twice: RSS grows by twice
    /// this size.
    #[arg(long, default_value_t = 1 << 22, value_parser = parse_ringbuf_size)]
    pub ringbuf_size: u32,

    /// The most rules one network namespace's legacy tables (iptables, ip6tables, arptables)
    /// are held at rule level. A table that would take its namespace past it is held at chain
    /// level: its chains' names, policies and rule counts, no rules, and its changes are told a
    /// chain at a time (created, deleted, flushed, `chain_update` "rules changed: N -> M").
    /// A status line says so when it happens; `observer_chain_level_tables` counts such tables.
    /// 450000 holds a 40,000-service kube-proxy table within the DaemonSet's 512 MiB.
    #[arg(long, value_name = "RULES", default_value_t = crate::engine::DEFAULT_RULE_LEVEL_LIMIT)]
    pub rule_level_limit: usize,

    /// The most rules the legacy tables of every namespace but the node's own (`--node-netns`)
    /// together are held at rule level. A table that would take them past it is held at chain
    /// level, as for `--rule-level-limit`, and the status line names this budget: however many
    /// pods load big tables, what observer holds rule by rule (its memory) stays bounded, and
    /// none of it is taken from the node's own namespace, which has its whole
    /// `--rule-level-limit`. Namespaces are served as their tables come; a table goes back to
    /// rule level at its next change once it fits.
    #[arg(long, value_name = "RULES", env = "OBSERVER_RULE_LEVEL_BUDGET", default_value_t = crate::engine::DEFAULT_RULE_LEVEL_BUDGET)]
    pub rule_level_budget: usize,

    /// The node's own network namespace (a /proc/PID/ns/net or /run/netns/NAME path). Its
    /// legacy tables are held at rule level up to `--rule-level-limit` whatever other
    /// namespaces hold: a pod cannot take its room. The default is the namespace of the node's
    /// init process (the DaemonSet runs with hostPID), or observer's own where that cannot be
    /// read (the DaemonSet runs with hostNetwork).
    #[arg(long, value_name = "PATH", env = "OBSERVER_NODE_NETNS", default_value = crate::engine::DEFAULT_NODE_NETNS)]
    pub node_netns: std::path::PathBuf,

    /// The most bytes of entries observer copies out of the kernel to read one legacy table.
    /// The kernel hands a table over in one call, so a larger one would take that much memory
    /// at once (about 600 bytes per kube-proxy rule): its changes are not read, and a gap line
    /// says so. 288MiB reads a 40,000-service kube-proxy table (264 MB).
    #[arg(long, value_name = "SIZE", default_value = crate::cli::run::DEFAULT_MAX_TABLE_READ, value_parser = parse_table_read)]
    pub max_table_read: usize,

    /// Receive buffer of each namespace's nftables notification socket. The kernel sends a
    /// generation's notifications in one burst; when they overflow it (ENOBUFS), observer reports
    /// a gap, re-reads the namespace and reports what changed meanwhile, attributed to the
    /// writers the kernel hooks saw. 32MiB holds a 20,000-rule iptables-nft-restore.
    #[arg(long, default_value = "32MiB", value_parser = parse_rcvbuf, value_name = "SIZE")]
    pub netlink_rcvbuf: usize,

    /// kubelet's pod log directory, read to name a writer's pod (`<namespace>_<name>_<uid>`
    /// entries) without asking the API server. In a container, mount the host's read-only.
    #[arg(long, value_name = "DIR", env = "OBSERVER_POD_LOGS", default_value = crate::pods::POD_LOGS)]
    pub pod_logs: std::path::PathBuf,

    /// The runtime's container log links, read to name a writer's container
    /// (`<pod>_<namespace>_<container>-<id>.log`).
    #[arg(long, value_name = "DIR", env = "OBSERVER_CONTAINER_LOGS", default_value = crate::pods::CONTAINER_LOGS)]
    pub container_logs: std::path::PathBuf,

    /// The D-Bus system bus, watched (read only, as a monitor) for who asks firewalld for each
    /// change: its changes then carry `process.requested_by` (`firewall-cmd --reload` and the
    /// job that ran it). Default: DBUS_SYSTEM_BUS_ADDRESS, else
    /// unix:path=/run/dbus/system_bus_socket; `off` to not watch it. Without a bus, or as a
    /// user it does not let monitor, firewalld's changes are firewalld's alone (`observer
    /// doctor` says why).
    #[arg(long, env = "OBSERVER_SYSTEM_BUS", value_name = "ADDRESS|off")]
    pub system_bus: Option<String>,

    /// `--restore`: put back what foreign wipes take (off unless given).
    #[command(flatten)]
    pub restore: RestoreArgs,

    /// The `seq` of the last change already recorded: numbering goes on after it.
    #[arg(skip)]
    pub first_seq: u64,
}

/// Restoring what a foreign wipe took: the one thing that makes observer write to the kernel.
#[derive(Debug, Clone, Default, Args)]
pub struct RestoreArgs {
    /// Put back what a foreign delete, flush, unhook, mass flush or rule rewrite takes from
    /// these owners (comma-separated, or `all`), when they have not repaired it themselves
    /// within --restore-after: the chains with their rules in order, the jumps into them, the
    /// sets they use, in one atomic write through the backend they lived in. Off by default:
    /// without it observer never writes to the kernel. Suits owners that never repair
    /// themselves (kubelet's one-shot chains, the CNI plugins, docker or podman without a
    /// firewalld hook); kube-proxy and Cilium repair themselves.
    #[arg(long, env = "OBSERVER_RESTORE", value_name = "OWNER,...|all", value_parser = parse_restore)]
    pub restore: Option<crate::restore::Which>,

    /// How long an owner has to repair its chains itself before observer does [default: 1s].
    #[arg(long, env = "OBSERVER_RESTORE_AFTER", value_name = "DURATION", value_parser = parse_window)]
    pub restore_after: Option<std::time::Duration>,

    /// With --restore: say what would be written (in the incident's `restore` field), and
    /// write nothing.
    #[arg(long, env = "OBSERVER_RESTORE_DRY_RUN", requires = "restore")]
    pub restore_dry_run: bool,
}

/// The default of --restore-after.
pub const DEFAULT_RESTORE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

fn parse_restore(s: &str) -> Result<crate::restore::Which, String> {
    crate::restore::Which::parse(s)
}

impl RestoreArgs {
    /// What the engine is to restore (nothing without --restore).
    pub fn config(&self) -> Option<crate::restore::RestoreConfig> {
        self.restore.as_ref().map(|w| {
            crate::restore::RestoreConfig::new(
                w.clone(),
                self.restore_after.unwrap_or(DEFAULT_RESTORE_AFTER),
                self.restore_dry_run,
            )
        })
    }
}

impl SourceArgs {
    /// What the engine is asked to do, from these flags.
    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            hooks: match self.hooks {
                HooksMode::Auto => HookChoice::Best,
                HooksMode::Netlink => HookChoice::NetlinkOnly,
                mode => mode.backend().map_or(HookChoice::Best, HookChoice::Only),
            },
            ringbuf_size: self.ringbuf_size,
            netlink_rcvbuf: self.netlink_rcvbuf,
            rule_level_limit: self.rule_level_limit,
            rule_level_budget: self.rule_level_budget,
            node_netns: self.node_netns.clone(),
            max_table_read: self.max_table_read,
            owners: self.owners.clone(),
            incidents: crate::incidents::Config {
                flap_cycles: self.flap_cycles,
                flap_window: self.flap_window,
                mass_window: self.mass_window,
                repair_within: self.repair_within,
            },
            pods: crate::pods::PodDirs {
                pods: self.pod_logs.clone(),
                containers: self.container_logs.clone(),
            },
            first_seq: self.first_seq,
            restore: self.restore.config(),
            system_bus: crate::bus::address(self.system_bus.as_deref()),
        }
    }
}

#[derive(Debug, Args)]
pub struct OwnersArgs {
    /// Only this network namespace (inode, /run/netns/NAME path, `ip netns` name, or `all`).
    #[arg(long, default_value = "all", value_name = "NETNS")]
    pub netns: String,

    /// Print JSON (one object with `chains` and `owners`).
    #[arg(long)]
    pub json: bool,

    /// Chain ownership file (TOML or YAML), as for `tail`.
    #[arg(long, value_name = "FILE", env = "OBSERVER_OWNERS")]
    pub owners: Option<std::path::PathBuf>,
}

/// How to reach a daemon's HTTP API at `--remote` (TLS and its bearer token).
#[derive(Debug, Args, Default)]
pub struct RemoteAccess {
    /// With `--remote https://`: verify the daemon's certificate against this CA (PEM) instead
    /// of the system's roots.
    #[arg(long, value_name = "FILE", requires = "remote")]
    pub ca: Option<std::path::PathBuf>,

    /// With `--remote https://` and mutual TLS: the client certificate to present (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["remote", "client_key"])]
    pub client_cert: Option<std::path::PathBuf>,

    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    pub client_key: Option<std::path::PathBuf>,

    /// File holding the bearer token for `--remote`.
    #[arg(long, value_name = "FILE", requires = "remote")]
    pub token_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Also ask a running `observer run` at this URL (its HTTP API, e.g.
    /// `http://127.0.0.1:9820`) how its readers stand: whether it is connected to NATS, how
    /// many recorded rows JetStream has not acknowledged yet and how old the oldest is, and
    /// what each stream (stdout, the record) dropped. Needs no root.
    #[arg(long, value_name = "URL")]
    pub remote: Option<String>,

    #[command(flatten)]
    pub access: RemoteAccess,

    /// The D-Bus system bus to check, as `tail --system-bus` takes it (whether it can be
    /// monitored for firewalld's callers); `off` to leave it out.
    #[arg(long, env = "OBSERVER_SYSTEM_BUS", value_name = "ADDRESS|off")]
    pub system_bus: Option<String>,

    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Why a value on the command line (or the same setting in `observer run`'s config file) is
/// refused; clap prints it after `invalid value 'X' for '--flag'`.
#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    /// `--op` names no operation.
    #[error("unknown op `{0}`; one of: {ops}", ops = op_names())]
    UnknownOp(String),
    /// An incident window that is not a duration.
    #[error("`{given}`: {cause} (e.g. 500ms, 30s, 2m)")]
    Window {
        given: String,
        #[source]
        cause: humantime::DurationError,
    },
    /// An incident window of zero.
    #[error("`{0}`: a window must be longer than zero")]
    ZeroWindow(String),
    /// Not a size with a known unit.
    #[error("`{0}` is not a size like 512MiB, 2GiB or 100MB")]
    Size(String),
    /// A receive buffer below 4KiB or above 1GiB.
    #[error("`{0}`: the receive buffer must be between 4KiB and 1GiB")]
    Rcvbuf(String),
    /// A table read cap below 1MiB or above 4GiB.
    #[error("`{0}`: --max-table-read must be between 1MiB and 4GiB")]
    TableRead(String),
    /// A ring buffer size that is not a number of bytes.
    #[error("{given}: {cause}")]
    RingbufNumber {
        given: String,
        #[source]
        cause: std::num::ParseIntError,
    },
    /// A ring buffer size the kernel refuses.
    #[error("{0} is not a power of two of at least 4096 bytes (the kernel requires it)")]
    RingbufSize(u32),
    /// Not a duration (`--retain`, `--snapshot-every`, `--nats-max-age`).
    #[error("`{given}` is not a duration like 7d, 36h or 90m ({cause})")]
    Duration {
        given: String,
        #[source]
        cause: humantime::DurationError,
    },
    /// A record size below 64KiB.
    #[error("`{0}` is too small: a record needs at least 64KiB")]
    RecordTooSmall(String),
}

/// Every operation's name, for [`ArgError::UnknownOp`].
fn op_names() -> String {
    let all: Vec<&str> = Op::ALL.iter().map(|o| o.as_str()).collect();
    all.join(", ")
}

pub(crate) fn parse_op(s: &str) -> Result<Op, ArgError> {
    Op::parse(s).ok_or_else(|| ArgError::UnknownOp(s.to_string()))
}

/// A window of the incident engine: a duration longer than zero.
pub fn parse_window(s: &str) -> Result<std::time::Duration, ArgError> {
    let d = humantime::parse_duration(s).map_err(|cause| ArgError::Window {
        given: s.to_string(),
        cause,
    })?;
    if d.is_zero() {
        return Err(ArgError::ZeroWindow(s.to_string()));
    }
    Ok(d)
}

/// A size in bytes: `512MiB`, `2GiB`, `100MB`, `4096`...
pub fn parse_bytes(s: &str) -> Result<u64, ArgError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || ArgError::Size(s.to_string());
    let n: f64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "kib" => 1 << 10,
        "m" | "mb" => 1000 * 1000,
        "mib" => 1 << 20,
        "g" | "gb" => 1000 * 1000 * 1000,
        "gib" => 1 << 30,
        "t" | "tb" => 1000u64.pow(4),
        "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    let v = n * mult as f64;
    Ok(v as u64)
}

/// The notification socket's receive buffer: at least 4KiB, at most 1GiB.
pub fn parse_rcvbuf(s: &str) -> Result<usize, ArgError> {
    let v = parse_bytes(s)?;
    if !(4096..=1 << 30).contains(&v) {
        return Err(ArgError::Rcvbuf(s.to_string()));
    }
    Ok(v as usize)
}

pub fn parse_table_read(s: &str) -> Result<usize, ArgError> {
    let v = parse_bytes(s)?;
    if !(1 << 20..=1 << 32).contains(&v) {
        return Err(ArgError::TableRead(s.to_string()));
    }
    Ok(v as usize)
}

pub fn parse_ringbuf_size(s: &str) -> Result<u32, ArgError> {
    let v: u32 = s.parse().map_err(|cause| ArgError::RingbufNumber {
        given: s.to_string(),
        cause,
    })?;
    if v < 4096 || !v.is_power_of_two() {
        return Err(ArgError::RingbufSize(v));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn ops_and_sizes_are_checked() {
        let c = Cli::try_parse_from(["observer", "tail", "--op", "chain_delete,rule_add"]).unwrap();
        let Command::Tail(t) = c.command else {
            panic!()
        };
        assert_eq!(t.op, vec![Op::ChainDelete, Op::RuleAdd]);
        let err = Cli::try_parse_from(["observer", "tail", "--op", "chain_nuke"]).unwrap_err();
        assert!(err.to_string().contains("unknown op `chain_nuke`"));
        let err = Cli::try_parse_from(["observer", "tail", "--ringbuf-size", "5000"]).unwrap_err();
        assert!(err.to_string().contains("power of two"));
    }
}
