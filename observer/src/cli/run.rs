//! `observer run`'s flags (resolved with the environment and the `--config` file by
//! `crate::daemon::config`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{ArgError, HooksMode};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:9820";
pub const DEFAULT_RECORD: &str = "/var/lib/observer/record.db";
pub const DEFAULT_RETAIN: &str = "7d";
pub const DEFAULT_MAX_RECORD: &str = "512MiB";
pub const DEFAULT_NETLINK_RCVBUF: &str = "32MiB";
/// `--max-table-read`'s default: a 40,000-service kube-proxy nat table (264 MB) is read.
pub const DEFAULT_MAX_TABLE_READ: &str = "288MiB";
pub const DEFAULT_HTTP_HEAD_TIMEOUT: &str = "5s";
pub const DEFAULT_HTTP_IDLE_TIMEOUT: &str = "60s";
pub const DEFAULT_HTTP_MAX_CONNECTIONS: usize = 256;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// TOML file with any of the settings below (keys: listen, token_file, record, no_record,
    /// retain, max_record, hooks, ringbuf_size, netlink_rcvbuf, rule_level_limit, rule_level_budget, node_netns, max_table_read, owners, flap_cycles,
    /// flap_window, mass_window, repair_within, pod_logs, container_logs, system_bus, tls_cert, tls_key,
    /// tls_client_ca, insecure_plaintext, stdout_queue, nats, node, nats_stream, nats_max_age, nats_max_bytes,
    /// nats_replicas, nats_window, nats_ca, nats_cert, nats_key, nats_creds, nats_nkey, nats_token_file,
    /// nats_user, nats_password_file, nats_insecure, restore, restore_after, restore_dry_run). Flags and environment variables win over
    /// it.
    #[arg(long, env = "OBSERVER_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address of the HTTP endpoint [default: 127.0.0.1:9820]. Beyond loopback it needs
    /// --token-file.
    #[arg(long, env = "OBSERVER_LISTEN", value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,

    /// File holding the bearer token every HTTP request but /healthz must carry
    /// (`Authorization: Bearer TOKEN`).
    #[arg(long, env = "OBSERVER_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Serve HTTPS with this certificate (PEM, the chain after it). Renewed files are picked up
    /// for new connections without a restart (cert-manager renews them in place).
    #[arg(
        long,
        env = "OBSERVER_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// The certificate's private key (PEM).
    #[arg(
        long,
        env = "OBSERVER_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,

    /// Mutual TLS: clients must present a certificate issued by this CA (PEM).
    #[arg(
        long,
        env = "OBSERVER_TLS_CLIENT_CA",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_client_ca: Option<PathBuf>,

    /// Serve plain HTTP beyond loopback (the token then crosses the network in clear). Without
    /// it, listening beyond loopback needs --tls-cert and --tls-key.
    #[arg(long, env = "OBSERVER_INSECURE_PLAINTEXT")]
    pub insecure_plaintext: bool,

    /// The forensic record (SQLite) [default: /var/lib/observer/record.db]; a directory means
    /// `record.db` in it.
    #[arg(long, env = "OBSERVER_RECORD", value_name = "PATH")]
    pub record: Option<PathBuf>,

    /// Close an HTTP connection that has not sent a whole request head this long after it
    /// opened or after the first byte of its next request [default: 5s].
    #[arg(long, env = "OBSERVER_HTTP_HEAD_TIMEOUT", value_name = "DURATION", value_parser = parse_duration)]
    pub http_head_timeout: Option<Duration>,

    /// Close a kept-alive HTTP connection that sends no next request this long after its last
    /// answer [default: 60s].
    #[arg(long, env = "OBSERVER_HTTP_IDLE_TIMEOUT", value_name = "DURATION", value_parser = parse_duration)]
    pub http_idle_timeout: Option<Duration>,

    /// Open HTTP connections at most; beyond it a connection is answered 503 with
    /// `Retry-After` and closed [default: 256].
    #[arg(long, env = "OBSERVER_HTTP_MAX_CONNECTIONS", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub http_max_connections: Option<u32>,

    /// Lines waiting for stdout at most; when stdout is not read fast enough (a stalled log
    /// pipe), newer lines are dropped from stdout only (counted, and told with a gap line): the
    /// record and the HTTP streams keep them [default: 4096].
    #[arg(long, env = "OBSERVER_STDOUT_QUEUE", value_name = "LINES", value_parser = clap::value_parser!(u32).range(1..))]
    pub stdout_queue: Option<u32>,

    /// Keep no record (streams only; a reconnecting client can then only catch up on recent
    /// events held in memory).
    #[arg(long, env = "OBSERVER_NO_RECORD", conflicts_with = "record")]
    pub no_record: bool,

    /// Delete records older than this (e.g. `7d`, `36h`) [default: 7d].
    #[arg(long, env = "OBSERVER_RETAIN", value_name = "DURATION", value_parser = parse_duration)]
    pub retain: Option<Duration>,

    /// Delete the oldest records when the record grows past this (e.g. `512MiB`, `2GiB`)
    /// [default: 512MiB].
    #[arg(long, env = "OBSERVER_MAX_RECORD", value_name = "SIZE", value_parser = parse_size)]
    pub max_record: Option<u64>,

    /// Snapshot every namespace's rulesets into the record after this long (with the first
    /// change after it), so that `observer query --at` replays few changes [default: 1h].
    /// Snapshots are also taken when a namespace is first watched and after every re-read.
    #[arg(long, env = "OBSERVER_SNAPSHOT_EVERY", value_name = "DURATION", value_parser = parse_duration)]
    pub snapshot_every: Option<Duration>,

    /// Snapshot a namespace's backend after this many changes to it [default: 10000].
    #[arg(long, env = "OBSERVER_SNAPSHOT_CHANGES", value_name = "N")]
    pub snapshot_changes: Option<u64>,

    /// Kernel hooks to use [default: auto].
    #[arg(long, env = "OBSERVER_HOOKS", value_enum)]
    pub hooks: Option<HooksMode>,

    /// Size of the kernel ring buffer in bytes [default: 4194304].
    #[arg(long, env = "OBSERVER_RINGBUF_SIZE", value_parser = super::parse_ringbuf_size)]
    pub ringbuf_size: Option<u32>,

    /// Receive buffer of each namespace's nftables notification socket [default: 32MiB].
    #[arg(long, env = "OBSERVER_NETLINK_RCVBUF", value_name = "SIZE", value_parser = super::parse_rcvbuf)]
    pub netlink_rcvbuf: Option<usize>,

    /// The most rules one namespace's legacy tables are held at rule level; a larger table is
    /// held at chain level, as for `tail` [default: 450000].
    #[arg(long, env = "OBSERVER_RULE_LEVEL_LIMIT", value_name = "RULES")]
    pub rule_level_limit: Option<usize>,

    /// The most rules the legacy tables of every namespace but the node's together are held at
    /// rule level; past it, a table is held at chain level, as for `tail` [default: 50000].
    #[arg(long, env = "OBSERVER_RULE_LEVEL_BUDGET", value_name = "RULES")]
    pub rule_level_budget: Option<usize>,

    /// The node's own network namespace, whose legacy tables no other namespace's take room
    /// from, as for `tail` [default: /proc/1/ns/net].
    #[arg(long, env = "OBSERVER_NODE_NETNS", value_name = "PATH")]
    pub node_netns: Option<std::path::PathBuf>,

    /// The most bytes observer copies out of the kernel to read one legacy table, as for
    /// `tail` [default: 288MiB].
    #[arg(long, env = "OBSERVER_MAX_TABLE_READ", value_name = "SIZE", value_parser = super::parse_table_read)]
    pub max_table_read: Option<usize>,

    /// Chain ownership file (TOML or YAML), as for `tail`.
    #[arg(long, env = "OBSERVER_OWNERS", value_name = "FILE")]
    pub owners: Option<PathBuf>,

    /// Undo/redo cycles that make a `flapping` incident [default: 3].
    #[arg(long, env = "OBSERVER_FLAP_CYCLES", value_parser = clap::value_parser!(u32).range(1..))]
    pub flap_cycles: Option<u32>,

    /// The window of those cycles [default: 60s].
    #[arg(long, env = "OBSERVER_FLAP_WINDOW", value_name = "DURATION", value_parser = super::parse_window)]
    pub flap_window: Option<Duration>,

    /// The window of a `mass_flush` [default: 5s].
    #[arg(long, env = "OBSERVER_MASS_WINDOW", value_name = "DURATION", value_parser = super::parse_window)]
    pub mass_window: Option<Duration>,

    /// How long a `mass_flush` waits for repairs [default: 60s].
    #[arg(long, env = "OBSERVER_REPAIR_WITHIN", value_name = "DURATION", value_parser = super::parse_window)]
    pub repair_within: Option<Duration>,

    /// kubelet's pod log directory, read to name writers' pods [default: /var/log/pods].
    #[arg(long, env = "OBSERVER_POD_LOGS", value_name = "DIR")]
    pub pod_logs: Option<PathBuf>,

    /// The runtime's container log links, read to name writers' containers
    /// [default: /var/log/containers].
    #[arg(long, env = "OBSERVER_CONTAINER_LOGS", value_name = "DIR")]
    pub container_logs: Option<PathBuf>,

    /// The D-Bus system bus, watched (read only) for who asks firewalld for each change
    /// [default: DBUS_SYSTEM_BUS_ADDRESS, else unix:path=/run/dbus/system_bus_socket]; `off`
    /// to not watch it.
    #[arg(long, env = "OBSERVER_SYSTEM_BUS", value_name = "ADDRESS|off")]
    pub system_bus: Option<String>,

    /// Publish every change and incident line to NATS JetStream at this URL
    /// (`nats://HOST:4222`), on `observer.<node>.change` and `observer.<node>.incident`. The
    /// record is the spool: while the server is unreachable nothing is lost, and publishing
    /// resumes after the last row the stream holds. Needs the record. `observer tail --nats URL`
    /// is the fleet view.
    #[arg(long, env = "OBSERVER_NATS", value_name = "URL")]
    pub nats: Option<String>,

    /// The node's name in NATS subjects and in the fleet view [default: the host name]. On
    /// Kubernetes, set it from the pod's `spec.nodeName`.
    #[arg(long, env = "OBSERVER_NODE", value_name = "NAME")]
    pub node: Option<String>,

    /// The JetStream stream to publish to; created when missing (subjects `observer.>`)
    /// [default: OBSERVER].
    #[arg(long, env = "OBSERVER_NATS_STREAM", value_name = "NAME")]
    pub nats_stream: Option<String>,

    /// When the stream is created: how long it keeps messages [default: 7d].
    #[arg(long, env = "OBSERVER_NATS_MAX_AGE", value_name = "DURATION", value_parser = parse_duration)]
    pub nats_max_age: Option<Duration>,

    /// When the stream is created: the most it holds, oldest messages dropped first
    /// [default: 1GiB].
    #[arg(long, env = "OBSERVER_NATS_MAX_BYTES", value_name = "SIZE", value_parser = parse_size)]
    pub nats_max_bytes: Option<u64>,

    /// When the stream is created: its replicas in a NATS cluster [default: 1].
    #[arg(long, env = "OBSERVER_NATS_REPLICAS", value_name = "N", value_parser = clap::value_parser!(u8).range(1..=5))]
    pub nats_replicas: Option<u8>,

    /// Rows published to NATS without waiting for their acknowledgement, at most
    /// [default: 256]. Row n is sent once row n-N is acknowledged; 1 waits for each row's
    /// acknowledgement before sending the next. Each node's rows stay in order and are stored
    /// once: a session that fails with rows in flight is repaired when the next one starts.
    #[arg(long, env = "OBSERVER_NATS_WINDOW", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub nats_window: Option<u32>,

    /// TLS and credentials for --nats.
    #[command(flatten)]
    pub nats_auth: crate::sinks::nats::flags::NatsAuthArgs,

    /// Restoring what a foreign wipe took (config keys: restore, restore_after,
    /// restore_dry_run).
    #[command(flatten)]
    pub restore: crate::cli::RestoreArgs,
}

/// `7d`, `36h`, `90m`, `1w`...
pub fn parse_duration(s: &str) -> Result<Duration, ArgError> {
    humantime::parse_duration(s.trim()).map_err(|cause| ArgError::Duration {
        given: s.to_string(),
        cause,
    })
}

/// `512MiB`, `2GiB`, `100MB`, `4096`... of a record (at least 64KiB).
pub fn parse_size(s: &str) -> Result<u64, ArgError> {
    let v = super::parse_bytes(s)?;
    if v < 64 * 1024 {
        return Err(ArgError::RecordTooSmall(s.to_string()));
    }
    Ok(v)
}
