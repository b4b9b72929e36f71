//! How observer reaches a NATS server that asks for TLS or credentials, as a NATS user sets
//! them: `tls://` URLs or a CA bundle, a client certificate, and one kind of credentials (a
//! `.creds` file with a JWT, an nkey seed, a token, or a user and password), each read from a
//! file so that a Kubernetes Secret can hold it. Both `observer run --nats` (the publisher) and
//! `observer tail --nats` (the fleet view) connect through [`NatsAuth::options`].
//!
//! Credentials never cross the network in plain text unless the user says so: over `nats://`
//! to a host beyond loopback they are refused without `--nats-insecure`, as the HTTP endpoint
//! refuses plain HTTP beyond loopback.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// TLS and credentials for NATS (every field optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsAuth {
    /// The CA bundle (PEM) the server's certificate must chain to; implies TLS.
    pub ca: Option<PathBuf>,
    /// The client certificate (PEM) to present, with its key; implies TLS.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// A `.creds` file (user JWT and nkey seed), as `nsc` writes it.
    pub creds: Option<PathBuf>,
    /// A file holding an nkey seed (`SU...`).
    pub nkey: Option<PathBuf>,
    /// A file holding the server's authorization token.
    pub token_file: Option<PathBuf>,
    /// A user name, with its password in `password_file`.
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
    /// Credentials over plain `nats://` beyond loopback are allowed.
    pub insecure: bool,
}

/// Why the NATS settings cannot be used (each names the flag and the fix).
#[derive(Debug, thiserror::Error)]
pub enum NatsAuthError {
    #[error(
        "--nats-cert needs --nats-key (the client certificate's private key), and --nats-key \
         needs --nats-cert"
    )]
    CertWithoutKey,
    #[error("--nats-user needs --nats-password-file, and --nats-password-file needs --nats-user")]
    UserWithoutPassword,
    #[error(
        "NATS credentials are given in more than one way ({0}): give one of --nats-creds, \
         --nats-nkey, --nats-token-file, or --nats-user with --nats-password-file"
    )]
    SeveralCredentials(String),
    #[error(
        "{url:?} is not a NATS URL: give nats://HOST:PORT or tls://HOST:PORT (several, for a \
         cluster, separated by commas)"
    )]
    BadUrl { url: String },
    #[error(
        "NATS credentials would cross the network in plain text to {host}: use tls://{host} \
         (with --nats-ca when its certificate is not signed by a system root), or add \
         --nats-insecure if that network is trusted"
    )]
    PlainCredentials { host: String },
    #[error("cannot read the {what} {}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    #[error("the {what} {} is empty", path.display())]
    Empty { what: &'static str, path: PathBuf },
}

/// One server of a `--nats` URL list: whether it asks for TLS, and its host.
#[derive(Debug, PartialEq, Eq)]
struct Server {
    tls: bool,
    host: String,
    /// `user:password@` or `token@` in the URL itself.
    userinfo: bool,
}

/// The servers of a comma-separated URL list (`nats://a:4222,nats://b:4222`); a server without
/// a scheme is `nats://`, as the client reads it.
fn servers(urls: &str) -> Result<Vec<Server>, NatsAuthError> {
    let bad = || NatsAuthError::BadUrl {
        url: urls.to_string(),
    };
    let list = url_list(urls);
    if list.is_empty() {
        return Err(bad());
    }
    list.iter()
        .map(|u| {
            let (scheme, rest) = u.split_once("://").unwrap_or(("nats", u));
            let tls = match scheme.to_ascii_lowercase().as_str() {
                "nats" => false,
                "tls" => true,
                _ => return Err(bad()),
            };
            let authority = rest.split('/').next().unwrap_or_default();
            let (userinfo, hostport) = match authority.rsplit_once('@') {
                Some((_, h)) => (true, h),
                None => (false, authority),
            };
            let host = match hostport.strip_prefix('[') {
                Some(v6) => v6.split(']').next().unwrap_or_default(),
                None => hostport.split(':').next().unwrap_or_default(),
            };
            if host.is_empty() {
                return Err(bad());
            }
            Ok(Server {
                tls,
                host: host.to_string(),
                userinfo,
            })
        })
        .collect()
}

/// The URLs of a comma-separated list (a cluster's servers), as the client is given them.
pub fn url_list(urls: &str) -> Vec<String> {
    urls.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_string)
        .collect()
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A secret file's content without its line end; an empty one is an error.
fn read_secret(what: &'static str, path: &Path) -> Result<String, NatsAuthError> {
    let text = std::fs::read_to_string(path).map_err(|cause| NatsAuthError::Read {
        what,
        path: path.to_path_buf(),
        cause,
    })?;
    let text = text.trim_end_matches(['\r', '\n']).to_string();
    if text.trim().is_empty() {
        return Err(NatsAuthError::Empty {
            what,
            path: path.to_path_buf(),
        });
    }
    Ok(text)
}

/// An nkey seed file's seed: its first line that is not blank or a comment.
fn read_seed(path: &Path) -> Result<String, NatsAuthError> {
    let text = read_secret("nkey seed file", path)?;
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("--"))
        .map(str::to_string)
        .ok_or_else(|| NatsAuthError::Empty {
            what: "nkey seed file",
            path: path.to_path_buf(),
        })
}

impl NatsAuth {
    /// Each setting from `self` where given, else from `other` (flags over the config file).
    pub fn or(self, other: NatsAuth) -> NatsAuth {
        NatsAuth {
            ca: self.ca.or(other.ca),
            cert: self.cert.or(other.cert),
            key: self.key.or(other.key),
            creds: self.creds.or(other.creds),
            nkey: self.nkey.or(other.nkey),
            token_file: self.token_file.or(other.token_file),
            user: self.user.or(other.user),
            password_file: self.password_file.or(other.password_file),
            insecure: self.insecure || other.insecure,
        }
    }

    /// The kinds of credentials given (flags' names).
    fn credentials(&self) -> Vec<&'static str> {
        [
            (self.creds.is_some(), "--nats-creds"),
            (self.nkey.is_some(), "--nats-nkey"),
            (self.token_file.is_some(), "--nats-token-file"),
            (self.user.is_some(), "--nats-user"),
        ]
        .into_iter()
        .filter_map(|(given, name)| given.then_some(name))
        .collect()
    }

    /// Whether the connection to `urls` is TLS: a `tls://` URL, a CA or a client certificate.
    fn tls(&self, servers: &[Server]) -> bool {
        self.ca.is_some() || self.cert.is_some() || servers.iter().any(|s| s.tls)
    }

    /// Checks the settings against `urls` before any connection: pairs complete, one kind of
    /// credentials, no credentials in plain text beyond loopback unless allowed, every file
    /// readable. Run at start-up, so that a mistake is an error there, not a retry loop.
    pub fn check(&self, urls: &str) -> Result<(), NatsAuthError> {
        let servers = servers(urls)?;
        if self.cert.is_some() != self.key.is_some() {
            return Err(NatsAuthError::CertWithoutKey);
        }
        if self.user.is_some() != self.password_file.is_some() {
            return Err(NatsAuthError::UserWithoutPassword);
        }
        let kinds = self.credentials();
        if kinds.len() > 1 {
            return Err(NatsAuthError::SeveralCredentials(kinds.join(", ")));
        }
        let has_credentials = !kinds.is_empty() || servers.iter().any(|s| s.userinfo);
        if has_credentials && !self.tls(&servers) && !self.insecure {
            if let Some(s) = servers.iter().find(|s| !is_loopback(&s.host)) {
                return Err(NatsAuthError::PlainCredentials {
                    host: s.host.clone(),
                });
            }
        }
        let files = [
            ("CA file", &self.ca),
            ("client certificate", &self.cert),
            ("client key", &self.key),
            ("credentials file", &self.creds),
        ];
        for (what, path) in files {
            if let Some(p) = path {
                read_secret(what, p)?;
            }
        }
        if let Some(p) = &self.nkey {
            read_seed(p)?;
        }
        if let Some(p) = &self.token_file {
            read_secret("token file", p)?;
        }
        if let Some(p) = &self.password_file {
            read_secret("password file", p)?;
        }
        Ok(())
    }

    /// The client's options for `urls` (checked first): TLS required when asked for, the CA and
    /// client certificate, and the credentials read from their files now (a rotated Secret is
    /// read again at the next connection).
    pub async fn options(
        &self,
        urls: &str,
        name: String,
    ) -> Result<async_nats::ConnectOptions, NatsAuthError> {
        self.check(urls)?;
        let servers = servers(urls)?;
        let mut o = async_nats::ConnectOptions::new().name(name);
        if self.tls(&servers) {
            o = o.require_tls(true);
        }
        if let Some(ca) = &self.ca {
            o = o.add_root_certificates(ca.clone());
        }
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            o = o.add_client_certificate(cert.clone(), key.clone());
        }
        if let Some(p) = &self.creds {
            o = o
                .credentials_file(p)
                .await
                .map_err(|cause| NatsAuthError::Read {
                    what: "credentials file",
                    path: p.clone(),
                    cause,
                })?;
        }
        if let Some(p) = &self.nkey {
            o = o.nkey(read_seed(p)?);
        }
        if let Some(p) = &self.token_file {
            o = o.token(read_secret("token file", p)?);
        }
        if let (Some(user), Some(p)) = (&self.user, &self.password_file) {
            o = o.user_and_password(user.clone(), read_secret("password file", p)?);
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    #[test]
    fn urls_name_their_servers_tls_and_hosts() {
        let s = servers("nats://a:4222, tls://user:pw@b.example:4443,[::1]:4222,c").expect("ok");
        let got: Vec<(bool, &str, bool)> = s
            .iter()
            .map(|s| (s.tls, s.host.as_str(), s.userinfo))
            .collect();
        assert_eq!(
            got,
            vec![
                (false, "a", false),
                (true, "b.example", true),
                (false, "::1", false),
                (false, "c", false)
            ]
        );
        for bad in ["", " , ", "http://a:4222", "nats://:4222"] {
            let e = servers(bad).unwrap_err();
            assert!(e.to_string().contains("is not a NATS URL"), "{bad}: {e}");
        }
    }

    #[test]
    fn credentials_in_plain_text_beyond_loopback_are_refused_unless_asked_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let token = file(dir.path(), "token", "s3cret\n");
        let auth = NatsAuth {
            token_file: Some(token),
            ..Default::default()
        };
        let e = auth.check("nats://nats.observer:4222").unwrap_err();
        assert_eq!(
            e.to_string(),
            "NATS credentials would cross the network in plain text to nats.observer: use \
             tls://nats.observer (with --nats-ca when its certificate is not signed by a system \
             root), or add --nats-insecure if that network is trusted"
        );
        // Loopback, TLS, or the user's word: allowed.
        auth.check("nats://127.0.0.1:4222,nats://localhost:4223")
            .expect("loopback");
        auth.check("tls://nats.observer:4222").expect("tls");
        NatsAuth {
            insecure: true,
            ..auth.clone()
        }
        .check("nats://nats.observer:4222")
        .expect("insecure");
        // A password in the URL is a credential too.
        let e = NatsAuth::default()
            .check("nats://u:p@10.0.0.5:4222")
            .unwrap_err();
        assert!(matches!(e, NatsAuthError::PlainCredentials { .. }), "{e}");
        // No credentials: plain is fine anywhere.
        NatsAuth::default()
            .check("nats://nats.observer:4222")
            .expect("no credentials");
    }

    #[test]
    fn pairs_must_be_complete_and_one_kind_of_credentials_given() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = file(dir.path(), "f", "x\n");
        let e = NatsAuth {
            cert: Some(f.clone()),
            ..Default::default()
        }
        .check("tls://n:4222")
        .unwrap_err();
        assert!(matches!(e, NatsAuthError::CertWithoutKey), "{e}");
        let e = NatsAuth {
            user: Some("observer".into()),
            ..Default::default()
        }
        .check("tls://n:4222")
        .unwrap_err();
        assert!(matches!(e, NatsAuthError::UserWithoutPassword), "{e}");
        let e = NatsAuth {
            token_file: Some(f.clone()),
            nkey: Some(f.clone()),
            ..Default::default()
        }
        .check("tls://n:4222")
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "NATS credentials are given in more than one way (--nats-nkey, --nats-token-file): \
             give one of --nats-creds, --nats-nkey, --nats-token-file, or --nats-user with \
             --nats-password-file"
        );
    }

    #[test]
    fn missing_or_empty_files_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope");
        let e = NatsAuth {
            ca: Some(missing.clone()),
            ..Default::default()
        }
        .check("tls://n:4222")
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("cannot read the CA file {}", missing.display())
        );
        let empty = file(dir.path(), "empty", "\n");
        let e = NatsAuth {
            token_file: Some(empty.clone()),
            ..Default::default()
        }
        .check("nats://127.0.0.1:4222")
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("the token file {} is empty", empty.display())
        );
    }

    #[test]
    fn secrets_lose_their_line_end_and_seed_files_their_comments() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = file(dir.path(), "pw", "pa ss\r\n");
        assert_eq!(read_secret("password file", &p).expect("read"), "pa ss");
        let seed = file(
            dir.path(),
            "seed",
            "# observer's nkey\n\nSUAM6ZJ2S4A3V4KJ7X\n",
        );
        assert_eq!(read_seed(&seed).expect("seed"), "SUAM6ZJ2S4A3V4KJ7X");
    }
}
