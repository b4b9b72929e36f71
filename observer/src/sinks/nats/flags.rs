//! The NATS connection's TLS and credential flags, shared by `observer run --nats` (the
//! publisher; also keys of its `--config` file) and `observer tail --nats` (the fleet view), and
//! the defaults of the stream's flags.

use std::path::PathBuf;

use clap::Args;

use super::auth::NatsAuth;

/// The NATS JetStream stream `run --nats` creates and `tail --nats` reads, and its limits.
pub const DEFAULT_STREAM: &str = "OBSERVER";
pub const DEFAULT_MAX_AGE: &str = "7d";
pub const DEFAULT_MAX_BYTES: &str = "1GiB";
/// Rows `run --nats` keeps in flight (sent, not yet acknowledged).
pub const DEFAULT_WINDOW: usize = 256;

#[derive(Debug, Clone, Default, Args)]
pub struct NatsAuthArgs {
    /// With --nats: verify the server's certificate against this CA bundle (PEM) rather than
    /// the system's roots. Implies TLS, as a `tls://` URL does.
    #[arg(long, env = "OBSERVER_NATS_CA", value_name = "FILE")]
    pub nats_ca: Option<PathBuf>,

    /// With --nats: the client certificate (PEM) to present to a server that verifies clients
    /// (with --nats-key). Implies TLS.
    #[arg(long, env = "OBSERVER_NATS_CERT", value_name = "FILE")]
    pub nats_cert: Option<PathBuf>,

    /// With --nats: the client certificate's private key (PEM).
    #[arg(long, env = "OBSERVER_NATS_KEY", value_name = "FILE")]
    pub nats_key: Option<PathBuf>,

    /// With --nats: a `.creds` file (the user's JWT and nkey seed, as `nsc` writes it).
    #[arg(long, env = "OBSERVER_NATS_CREDS", value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,

    /// With --nats: a file holding the user's nkey seed (`SU...`).
    #[arg(long, env = "OBSERVER_NATS_NKEY", value_name = "FILE")]
    pub nats_nkey: Option<PathBuf>,

    /// With --nats: a file holding the server's authorization token.
    #[arg(long, env = "OBSERVER_NATS_TOKEN_FILE", value_name = "FILE")]
    pub nats_token_file: Option<PathBuf>,

    /// With --nats: the user name (with --nats-password-file).
    #[arg(long, env = "OBSERVER_NATS_USER", value_name = "NAME")]
    pub nats_user: Option<String>,

    /// With --nats: a file holding the user's password.
    #[arg(long, env = "OBSERVER_NATS_PASSWORD_FILE", value_name = "FILE")]
    pub nats_password_file: Option<PathBuf>,

    /// With --nats: allow credentials over plain `nats://` to a server beyond loopback (they
    /// are refused by default: use `tls://`).
    #[arg(long, env = "OBSERVER_NATS_INSECURE")]
    pub nats_insecure: bool,
}

impl NatsAuthArgs {
    pub fn auth(&self) -> NatsAuth {
        NatsAuth {
            ca: self.nats_ca.clone(),
            cert: self.nats_cert.clone(),
            key: self.nats_key.clone(),
            creds: self.nats_creds.clone(),
            nkey: self.nats_nkey.clone(),
            token_file: self.nats_token_file.clone(),
            user: self.nats_user.clone(),
            password_file: self.nats_password_file.clone(),
            insecure: self.nats_insecure,
        }
    }
}
