//! `observer run` settings: flags win over environment variables (`OBSERVER_*`, read by clap),
//! which win over an optional TOML file (`--config`), which wins over the defaults. The file
//! accepts the flags' long names with `_` for `-`; an unknown key or a value of the wrong type is
//! an error naming the key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::cli::run::{
    parse_duration, parse_size, RunArgs, DEFAULT_HTTP_HEAD_TIMEOUT, DEFAULT_HTTP_IDLE_TIMEOUT,
    DEFAULT_HTTP_MAX_CONNECTIONS, DEFAULT_LISTEN, DEFAULT_MAX_RECORD, DEFAULT_NETLINK_RCVBUF,
    DEFAULT_RECORD, DEFAULT_RETAIN,
};
use crate::cli::{ArgError, HooksMode, SourceArgs};

/// Why `observer run`'s settings cannot be used. `at` names the setting: its key, in the config
/// file when there is one (`FILE (key `retain`)`).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file (`--config`) cannot be read.
    #[error("cannot read the config file {}: {cause}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    /// The config file is not TOML, or has an unknown key or a value of the wrong type.
    #[error("config file {}: {}", path.display(), cause.to_string().trim_end())]
    Syntax {
        path: PathBuf,
        #[source]
        cause: toml::de::Error,
    },
    /// A duration, size or window in the file that does not parse.
    #[error("{at}: {cause}")]
    Value {
        at: String,
        #[source]
        cause: ArgError,
    },
    /// A `hooks` value that is not a hook mode.
    #[error("{at}: `{given}` is not one of auto, fentry, kprobe, tracepoint, netlink")]
    Hooks { at: String, given: String },
    /// `flap_cycles` of zero.
    #[error("{at}: must be at least 1")]
    FlapCycles { at: String },
    /// `http_max_connections` or `stdout_queue` of zero.
    #[error("{at}: must be at least 1")]
    Zero { at: String },
    /// An HTTP timeout of zero.
    #[error("{at}: must be longer than 0s")]
    ZeroTimeout { at: String },
    /// A certificate without its key.
    #[error("{at}: needs tls_key too")]
    NoTlsKey { at: String },
    /// A key without its certificate.
    #[error("{at}: needs tls_cert too")]
    NoTlsCert { at: String },
    /// Client certificates asked for without a certificate and key of the server's own.
    #[error("{at}: mutual TLS needs tls_cert and tls_key too")]
    ClientCaAlone { at: String },
    /// The NATS TLS or credential settings cannot be used.
    #[error("{at}{cause}")]
    Nats {
        at: String,
        #[source]
        cause: crate::sinks::nats::auth::NatsAuthError,
    },
    /// Publishing to NATS without a record to spool from.
    #[error(
        "{at}: publishing to NATS needs the record (it is the spool that keeps what the server \
         has not acknowledged): drop --no-record"
    )]
    NatsNeedsRecord { at: String },
    /// A replica count JetStream does not take.
    #[error("{at}: must be 1 to 5")]
    NatsReplicas { at: String },
    #[error("{at}: {why}")]
    Restore { at: String, why: String },
    #[error("{at}: restoring is off (no restore key, no --restore): a dry run of it needs one")]
    RestoreDryRunAlone { at: String },
    /// A NATS window out of range.
    #[error("{at}: must be 1 to 65536")]
    NatsWindow { at: String },
    /// Plain HTTP on an address beyond loopback, not accepted with `--insecure-plaintext`.
    #[error(
        "refusing to serve plain HTTP on {0} (beyond loopback, the bearer token and every event \
         would cross the network in clear): pass --tls-cert FILE and --tls-key FILE, or \
         --insecure-plaintext to accept that, or listen on 127.0.0.1"
    )]
    PlainHttp(SocketAddr),
}

/// The TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    token_file: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    insecure_plaintext: Option<bool>,
    http_head_timeout: Option<String>,
    http_idle_timeout: Option<String>,
    http_max_connections: Option<u32>,
    stdout_queue: Option<u32>,
    record: Option<PathBuf>,
    no_record: Option<bool>,
    retain: Option<String>,
    max_record: Option<String>,
    snapshot_every: Option<String>,
    snapshot_changes: Option<u64>,
    hooks: Option<String>,
    ringbuf_size: Option<u32>,
    netlink_rcvbuf: Option<String>,
    rule_level_limit: Option<usize>,
    rule_level_budget: Option<usize>,
    node_netns: Option<PathBuf>,
    max_table_read: Option<String>,
    owners: Option<PathBuf>,
    flap_cycles: Option<u32>,
    flap_window: Option<String>,
    mass_window: Option<String>,
    repair_within: Option<String>,
    pod_logs: Option<PathBuf>,
    container_logs: Option<PathBuf>,
    system_bus: Option<String>,
    nats: Option<String>,
    node: Option<String>,
    nats_stream: Option<String>,
    nats_max_age: Option<String>,
    nats_max_bytes: Option<String>,
    nats_replicas: Option<u8>,
    nats_window: Option<u32>,
    nats_ca: Option<PathBuf>,
    nats_cert: Option<PathBuf>,
    nats_key: Option<PathBuf>,
    nats_creds: Option<PathBuf>,
    nats_nkey: Option<PathBuf>,
    nats_token_file: Option<PathBuf>,
    nats_user: Option<String>,
    nats_password_file: Option<PathBuf>,
    nats_insecure: Option<bool>,
    /// Owners to restore: a list, or `"all"`.
    restore: Option<RestoreKey>,
    restore_after: Option<String>,
    restore_dry_run: Option<bool>,
}

/// `restore = "all"`, `restore = "kubelet,cni-plugins"` or `restore = ["kubelet"]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RestoreKey {
    One(String),
    List(Vec<String>),
}

/// Resolved settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub token_file: Option<PathBuf>,
    /// HTTPS instead of HTTP.
    pub tls: Option<crate::sinks::http::tls::TlsFiles>,
    /// What one HTTP connection may hold, and how many.
    pub http: crate::sinks::http::limits::HttpLimits,
    /// Lines waiting for stdout at most.
    pub stdout_queue: usize,
    /// None: no record.
    pub record: Option<PathBuf>,
    pub retain: Duration,
    pub max_record: u64,
    /// When snapshots go into the record.
    pub snapshots: crate::forensics::SnapshotPolicy,
    pub source: SourceArgs,
    /// Publishing to NATS JetStream, when asked for.
    pub nats: Option<crate::sinks::nats::NatsSettings>,
}

impl RunArgs {
    pub fn resolve(self) -> Result<Settings, ConfigError> {
        let file = match &self.config {
            Some(p) => read_file(p)?,
            None => FileConfig::default(),
        };
        let mut layers = Layers { flags: self, file };
        // In this order: the first setting that cannot be used is the one the error names.
        let (retain, max_record, snapshots) = layers.record_limits()?;
        let source = layers.source()?;
        let record = layers.record();
        let listen = layers.listen();
        let tls = layers.tls()?;
        let nats = layers.nats(record.is_some())?;
        let http = layers.http()?;
        let stdout_queue = layers.at_least_one(
            layers.flags.stdout_queue.or(layers.file.stdout_queue),
            "stdout_queue",
            crate::sinks::stdout::STDOUT_QUEUE,
        )?;
        let insecure =
            layers.flags.insecure_plaintext || layers.file.insecure_plaintext == Some(true);
        if tls.is_none() && !listen.ip().is_loopback() && !insecure {
            return Err(ConfigError::PlainHttp(listen));
        }
        Ok(Settings {
            nats,
            listen,
            tls,
            http,
            stdout_queue,
            token_file: layers.flags.token_file.or(layers.file.token_file),
            record,
            retain,
            max_record,
            snapshots,
            source,
        })
    }
}

/// The two layers above the defaults: the flags (with the environment, as clap read them) and
/// the file. Each setting is taken from them once, by the step that resolves it.
struct Layers {
    flags: RunArgs,
    file: FileConfig,
}

impl Layers {
    /// Where an error about `key` points: the key in the file, when there is a file.
    fn at(&self, key: &str) -> String {
        match &self.flags.config {
            Some(p) => format!("{} (key `{key}`)", p.display()),
            None => key.to_string(),
        }
    }

    /// How long the record keeps rows, how big it may grow, and when snapshots go into it.
    fn record_limits(
        &self,
    ) -> Result<(Duration, u64, crate::forensics::SnapshotPolicy), ConfigError> {
        let (flags, file) = (&self.flags, &self.file);
        let retain = flag_or_file(flags.retain, file.retain.as_deref(), parse_duration, || {
            self.at("retain")
        })?
        .unwrap_or_else(|| builtin(parse_duration, DEFAULT_RETAIN));
        let max_record = flag_or_file(
            flags.max_record,
            file.max_record.as_deref(),
            parse_size,
            || self.at("max_record"),
        )?
        .unwrap_or_else(|| builtin(parse_size, DEFAULT_MAX_RECORD));
        let defaults = crate::forensics::SnapshotPolicy::default();
        let snapshots = crate::forensics::SnapshotPolicy {
            every: flag_or_file(
                flags.snapshot_every,
                file.snapshot_every.as_deref(),
                parse_duration,
                || self.at("snapshot_every"),
            )?
            .unwrap_or(defaults.every),
            changes: flags
                .snapshot_changes
                .or(file.snapshot_changes)
                .unwrap_or(defaults.changes)
                .max(1),
        };
        Ok((retain, max_record, snapshots))
    }

    /// What the engine is given: its hooks and buffers, the incident windows, and where owners
    /// and pod names come from.
    fn source(&mut self) -> Result<SourceArgs, ConfigError> {
        let hooks = self.hooks()?;
        let (flags, file) = (&self.flags, &self.file);
        let ringbuf_size = flag_or_file(
            flags.ringbuf_size,
            file.ringbuf_size.map(|n| n.to_string()).as_deref(),
            crate::cli::parse_ringbuf_size,
            || self.at("ringbuf_size"),
        )?
        .unwrap_or(1 << 22);
        let netlink_rcvbuf = flag_or_file(
            flags.netlink_rcvbuf,
            file.netlink_rcvbuf.as_deref(),
            crate::cli::parse_rcvbuf,
            || self.at("netlink_rcvbuf"),
        )?
        .unwrap_or_else(|| builtin(crate::cli::parse_rcvbuf, DEFAULT_NETLINK_RCVBUF));
        let max_table_read = flag_or_file(
            flags.max_table_read,
            file.max_table_read.as_deref(),
            crate::cli::parse_table_read,
            || self.at("max_table_read"),
        )?
        .unwrap_or_else(|| {
            builtin(
                crate::cli::parse_table_read,
                crate::cli::run::DEFAULT_MAX_TABLE_READ,
            )
        });
        let window = |flag, file: &Option<String>, key: &str, default: &str| {
            flag_or_file(flag, file.as_deref(), crate::cli::parse_window, || {
                self.at(key)
            })
            .map(|d| d.unwrap_or_else(|| builtin(crate::cli::parse_window, default)))
        };
        let flap_window = window(flags.flap_window, &file.flap_window, "flap_window", "60s")?;
        let mass_window = window(flags.mass_window, &file.mass_window, "mass_window", "5s")?;
        let repair_within = window(
            flags.repair_within,
            &file.repair_within,
            "repair_within",
            "60s",
        )?;
        let flap_cycles = flags.flap_cycles.or(file.flap_cycles).unwrap_or(3);
        if flap_cycles == 0 {
            return Err(ConfigError::FlapCycles {
                at: self.at("flap_cycles"),
            });
        }
        let restore = self.restore()?;
        let (flags, file) = (&mut self.flags, &mut self.file);
        Ok(SourceArgs {
            owners: flags.owners.take().or(file.owners.take()),
            flap_cycles,
            flap_window,
            mass_window,
            repair_within,
            hooks,
            ringbuf_size,
            netlink_rcvbuf,
            rule_level_limit: flags
                .rule_level_limit
                .or(file.rule_level_limit)
                .unwrap_or(crate::engine::DEFAULT_RULE_LEVEL_LIMIT),
            rule_level_budget: flags
                .rule_level_budget
                .or(file.rule_level_budget)
                .unwrap_or(crate::engine::DEFAULT_RULE_LEVEL_BUDGET),
            node_netns: flags
                .node_netns
                .take()
                .or(file.node_netns.take())
                .unwrap_or_else(|| PathBuf::from(crate::engine::DEFAULT_NODE_NETNS)),
            max_table_read,
            pod_logs: flags
                .pod_logs
                .take()
                .or(file.pod_logs.take())
                .unwrap_or_else(|| PathBuf::from(crate::pods::POD_LOGS)),
            container_logs: flags
                .container_logs
                .take()
                .or(file.container_logs.take())
                .unwrap_or_else(|| PathBuf::from(crate::pods::CONTAINER_LOGS)),
            system_bus: flags.system_bus.take().or(file.system_bus.take()),
            restore,
            first_seq: 0,
        })
    }

    /// `--restore`, `--restore-after`, `--restore-dry-run` over the file's keys.
    fn restore(&self) -> Result<crate::cli::RestoreArgs, ConfigError> {
        let (flags, file) = (&self.flags.restore, &self.file);
        let restore = match (&flags.restore, &file.restore) {
            (Some(w), _) => Some(w.clone()),
            (None, Some(k)) => {
                let text = match k {
                    RestoreKey::One(s) => s.clone(),
                    RestoreKey::List(l) => l.join(","),
                };
                Some(
                    crate::restore::Which::parse(&text).map_err(|why| ConfigError::Restore {
                        at: self.at("restore"),
                        why,
                    })?,
                )
            }
            (None, None) => None,
        };
        let restore_after = flag_or_file(
            flags.restore_after,
            file.restore_after.as_deref(),
            crate::cli::parse_window,
            || self.at("restore_after"),
        )?;
        let restore_dry_run = flags.restore_dry_run || file.restore_dry_run.unwrap_or(false);
        if restore_dry_run && restore.is_none() {
            return Err(ConfigError::RestoreDryRunAlone {
                at: self.at("restore_dry_run"),
            });
        }
        Ok(crate::cli::RestoreArgs {
            restore,
            restore_after,
            restore_dry_run,
        })
    }

    fn hooks(&self) -> Result<HooksMode, ConfigError> {
        Ok(match (self.flags.hooks, &self.file.hooks) {
            (Some(h), _) => h,
            (None, Some(s)) => {
                use clap::ValueEnum;
                HooksMode::from_str(s, false).map_err(|_| ConfigError::Hooks {
                    at: self.at("hooks"),
                    given: s.clone(),
                })?
            }
            (None, None) => HooksMode::Auto,
        })
    }

    /// The record's path (`None`: no record).
    fn record(&mut self) -> Option<PathBuf> {
        // `--record` (flag or env) beats `no_record` from the file, and `--no-record` beats a
        // file's `record`.
        let record = if self.flags.no_record {
            None
        } else if let Some(r) = self.flags.record.take() {
            Some(r)
        } else if self.file.no_record == Some(true) {
            None
        } else {
            Some(
                self.file
                    .record
                    .take()
                    .unwrap_or_else(|| PathBuf::from(DEFAULT_RECORD)),
            )
        };
        // A directory holds the record as `record.db`.
        record.map(|r| if r.is_dir() { r.join("record.db") } else { r })
    }

    fn listen(&self) -> SocketAddr {
        self.flags
            .listen
            .or(self.file.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid default address"))
    }

    /// The HTTP endpoint's certificate, key and client CA, when it serves HTTPS.
    fn tls(&mut self) -> Result<Option<crate::sinks::http::tls::TlsFiles>, ConfigError> {
        // Flags win over the file as a set: a cert from one place and a key from the other is
        // a mistake waiting to happen.
        let (cert, key, client_ca) = if self.flags.tls_cert.is_some() {
            let f = &mut self.flags;
            (f.tls_cert.take(), f.tls_key.take(), f.tls_client_ca.take())
        } else {
            let f = &mut self.file;
            (f.tls_cert.take(), f.tls_key.take(), f.tls_client_ca.take())
        };
        match (cert, key, client_ca) {
            (Some(cert), Some(key), client_ca) => Ok(Some(crate::sinks::http::tls::TlsFiles {
                cert,
                key,
                client_ca,
            })),
            (None, None, None) => Ok(None),
            (Some(_), None, _) => Err(ConfigError::NoTlsKey {
                at: self.at("tls_cert"),
            }),
            (None, Some(_), _) => Err(ConfigError::NoTlsCert {
                at: self.at("tls_key"),
            }),
            (None, None, Some(_)) => Err(ConfigError::ClientCaAlone {
                at: self.at("tls_client_ca"),
            }),
        }
    }

    /// Publishing to NATS, when a URL is given (`has_record`: there is a record to spool from).
    fn nats(
        &mut self,
        has_record: bool,
    ) -> Result<Option<crate::sinks::nats::NatsSettings>, ConfigError> {
        let Some(url) = self.flags.nats.take().or(self.file.nats.take()) else {
            return Ok(None);
        };
        if !has_record {
            return Err(ConfigError::NatsNeedsRecord {
                at: self.at("nats"),
            });
        }
        let (flags, file) = (&self.flags, &self.file);
        let max_age = flag_or_file(
            flags.nats_max_age,
            file.nats_max_age.as_deref(),
            parse_duration,
            || self.at("nats_max_age"),
        )?
        .unwrap_or_else(|| builtin(parse_duration, crate::sinks::nats::DEFAULT_MAX_AGE));
        let max_bytes = flag_or_file(
            flags.nats_max_bytes,
            file.nats_max_bytes.as_deref(),
            parse_size,
            || self.at("nats_max_bytes"),
        )?
        .unwrap_or_else(|| builtin(parse_size, crate::sinks::nats::DEFAULT_MAX_BYTES));
        let replicas = flags.nats_replicas.or(file.nats_replicas).unwrap_or(1);
        if !(1..=5).contains(&replicas) {
            return Err(ConfigError::NatsReplicas {
                at: self.at("nats_replicas"),
            });
        }
        let window = flags
            .nats_window
            .or(file.nats_window)
            .map_or(crate::sinks::nats::DEFAULT_WINDOW, |w| w as usize);
        if !(1..=65536).contains(&window) {
            return Err(ConfigError::NatsWindow {
                at: self.at("nats_window"),
            });
        }
        let node = self
            .flags
            .node
            .take()
            .or(self.file.node.take())
            .unwrap_or_else(crate::sinks::nats::host_name);
        let auth = self.nats_auth(&url)?;
        Ok(Some(crate::sinks::nats::NatsSettings {
            auth,
            url,
            node,
            stream: self
                .flags
                .nats_stream
                .take()
                .or(self.file.nats_stream.take())
                .unwrap_or_else(|| crate::sinks::nats::DEFAULT_STREAM.into()),
            max_age,
            max_bytes,
            replicas: usize::from(replicas),
            window,
        }))
    }

    /// NATS TLS and credentials: the flags', else the file's, checked against `url`.
    fn nats_auth(&self, url: &str) -> Result<crate::sinks::nats::auth::NatsAuth, ConfigError> {
        let file = &self.file;
        let auth = self
            .flags
            .nats_auth
            .auth()
            .or(crate::sinks::nats::auth::NatsAuth {
                ca: file.nats_ca.clone(),
                cert: file.nats_cert.clone(),
                key: file.nats_key.clone(),
                creds: file.nats_creds.clone(),
                nkey: file.nats_nkey.clone(),
                token_file: file.nats_token_file.clone(),
                user: file.nats_user.clone(),
                password_file: file.nats_password_file.clone(),
                insecure: file.nats_insecure == Some(true),
            });
        auth.check(url).map_err(|cause| ConfigError::Nats {
            at: match &self.flags.config {
                Some(p) => format!("{} (its NATS settings with the flags): ", p.display()),
                None => String::new(),
            },
            cause,
        })?;
        Ok(auth)
    }

    /// What one HTTP connection may hold, and how many there may be.
    fn http(&self) -> Result<crate::sinks::http::limits::HttpLimits, ConfigError> {
        let (flags, file) = (&self.flags, &self.file);
        Ok(crate::sinks::http::limits::HttpLimits {
            head_timeout: self.timeout(
                flags.http_head_timeout,
                &file.http_head_timeout,
                "http_head_timeout",
                DEFAULT_HTTP_HEAD_TIMEOUT,
            )?,
            idle_timeout: self.timeout(
                flags.http_idle_timeout,
                &file.http_idle_timeout,
                "http_idle_timeout",
                DEFAULT_HTTP_IDLE_TIMEOUT,
            )?,
            max_connections: self.at_least_one(
                flags.http_max_connections.or(file.http_max_connections),
                "http_max_connections",
                DEFAULT_HTTP_MAX_CONNECTIONS,
            )?,
        })
    }

    /// A timeout longer than zero.
    fn timeout(
        &self,
        flag: Option<Duration>,
        file: &Option<String>,
        key: &str,
        default: &str,
    ) -> Result<Duration, ConfigError> {
        let d = flag_or_file(flag, file.as_deref(), parse_duration, || self.at(key))?
            .unwrap_or_else(|| builtin(parse_duration, default));
        if d.is_zero() {
            return Err(ConfigError::ZeroTimeout { at: self.at(key) });
        }
        Ok(d)
    }

    /// A count of at least one.
    fn at_least_one(
        &self,
        given: Option<u32>,
        key: &str,
        default: usize,
    ) -> Result<usize, ConfigError> {
        match given {
            Some(0) => Err(ConfigError::Zero { at: self.at(key) }),
            Some(n) => Ok(n as usize),
            None => Ok(default),
        }
    }
}

/// A setting's flag, else its value in the file read as the flag is (an error names it by
/// `at`), else `None`.
fn flag_or_file<T>(
    flag: Option<T>,
    file: Option<&str>,
    parse: fn(&str) -> Result<T, ArgError>,
    at: impl FnOnce() -> String,
) -> Result<Option<T>, ConfigError> {
    match (flag, file) {
        (Some(v), _) => Ok(Some(v)),
        (None, Some(s)) => parse(s)
            .map(Some)
            .map_err(|cause| ConfigError::Value { at: at(), cause }),
        (None, None) => Ok(None),
    }
}

/// A built-in default, read as a flag is (it always reads).
fn builtin<T>(parse: fn(&str) -> Result<T, ArgError>, default: &str) -> T {
    parse(default).unwrap_or_else(|e| panic!("the built-in default `{default}` does not read: {e}"))
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
        path: path.into(),
        cause,
    })?;
    toml::from_str(&text).map_err(|cause| ConfigError::Syntax {
        path: path.into(),
        cause,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> RunArgs {
        let cli = crate::cli::Cli::try_parse_from(
            ["observer", "run"].iter().chain(extra.iter()).copied(),
        )
        .unwrap();
        match cli.command {
            crate::cli::Command::Run(r) => *r,
            _ => panic!(),
        }
    }

    #[test]
    fn defaults() {
        let s = args(&[]).resolve().unwrap();
        assert_eq!(s.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(s.record.as_deref(), Some(Path::new(DEFAULT_RECORD)));
        assert_eq!(s.retain, Duration::from_secs(7 * 86400));
        assert_eq!(s.max_record, 512 << 20);
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(
            &f,
            "listen = \"127.0.0.1:9999\"\nretain = \"36h\"\nmax_record = \"1GiB\"\nhooks = \"netlink\"\n",
        )
        .unwrap();
        let s = args(&["--config", f.to_str().unwrap(), "--retain", "2d"])
            .resolve()
            .unwrap();
        assert_eq!(s.listen.port(), 9999);
        assert_eq!(s.retain, Duration::from_secs(2 * 86400));
        assert_eq!(s.max_record, 1 << 30);
        assert_eq!(s.source.hooks, HooksMode::Netlink);
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "listen = \"127.0.0.1:9999\"\nretian = \"7d\"\n").unwrap();
        let e = args(&["--config", f.to_str().unwrap()])
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(e.contains("retian"), "{e}");
        std::fs::write(&f, "ringbuf_size = \"big\"\n").unwrap();
        let e = args(&["--config", f.to_str().unwrap()])
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(e.contains("ringbuf_size"), "{e}");
        std::fs::write(&f, "max_record = \"lots\"\n").unwrap();
        let e = args(&["--config", f.to_str().unwrap()])
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_record"), "{e}");
    }

    #[test]
    fn nats_settings_from_flags_and_file_and_the_record_they_need() {
        let s = args(&["--nats", "nats://n:4222", "--node", "worker-1"])
            .resolve()
            .unwrap();
        let n = s.nats.expect("nats settings");
        assert_eq!(
            (n.url.as_str(), n.node.as_str()),
            ("nats://n:4222", "worker-1")
        );
        assert_eq!(n.stream, crate::sinks::nats::DEFAULT_STREAM);
        assert_eq!(n.max_age, Duration::from_secs(7 * 86400));
        assert_eq!((n.max_bytes, n.replicas), (1 << 30, 1));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(
            &f,
            "nats = \"nats://file:4222\"\nnats_max_age = \"2d\"\nnats_replicas = 3\n",
        )
        .unwrap();
        let n = args(&["--config", f.to_str().unwrap()])
            .resolve()
            .unwrap()
            .nats
            .expect("nats from the file");
        assert_eq!(n.url, "nats://file:4222");
        assert_eq!((n.max_age, n.replicas), (Duration::from_secs(2 * 86400), 3));
        assert!(!n.node.is_empty(), "the host name by default");
        let e = args(&["--nats", "nats://n:4222", "--no-record"])
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs the record"), "{e}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("100MB").unwrap(), 100_000_000);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("1k").is_err(), "too small");
    }
}
