//! TLS on `observer run`'s HTTP endpoint (rustls), optionally mutual, and the client side that
//! `observer tail --remote https://...` uses.
//!
//! The certificate and key are files that cert-manager (or an admin) renews in place: each new
//! connection checks their modification times, and a change is loaded for the connections that
//! follow, without a restart. A new file that does not load (half written, wrong key) keeps the
//! previous configuration and says why once per change.
//!
//! Handshakes run on their own tasks, bounded in time, so a client that connects and says nothing
//! holds up no one else; finished connections are handed to the HTTP server through a channel.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// A handshake that takes longer is dropped.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// Connections handshaken but not yet taken by the server.
const BACKLOG: usize = 64;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM item.
    #[error("{what} {path}: {reason}")]
    File {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// rustls refused the combination (a key that does not match the certificate...).
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The files of the endpoint's TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Clients must present a certificate issued by this CA (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    fn paths(&self) -> Vec<&Path> {
        let mut v = vec![self.cert.as_path(), self.key.as_path()];
        v.extend(self.client_ca.as_deref());
        v
    }
}

fn file_error(what: &'static str, path: &Path, reason: impl ToString) -> TlsError {
    TlsError::File {
        what,
        path: path.into(),
        reason: reason.to_string(),
    }
}

/// Certificates of a PEM file (at least one).
pub fn read_certs(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(what, path, e))?;
    if certs.is_empty() {
        return Err(file_error(what, path, "no PEM certificate in it"));
    }
    Ok(certs)
}

/// The private key of a PEM file.
pub fn read_key(what: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| file_error(what, path, e))
}

/// A root store of the CA certificates in `path`.
pub fn read_roots(what: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in read_certs(what, path)? {
        roots
            .add(c)
            .map_err(|e| file_error(what, path, format!("not a CA certificate: {e}")))?;
    }
    Ok(roots)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server configuration the files give.
pub fn server_config(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let certs = read_certs("--tls-cert", &files.cert)?;
    let key = read_key("--tls-key", &files.key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let roots = read_roots("--tls-client-ca", ca)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| TlsError::Config(format!("--tls-client-ca {}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder.with_single_cert(certs, key).map_err(|e| {
        TlsError::Config(format!(
            "--tls-cert {} with --tls-key {}: {e}",
            files.cert.display(),
            files.key.display()
        ))
    })?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// The client configuration of `tail --remote https://`: the server is verified against `ca`
/// (else the system's roots), and `cert`/`key` are presented for mutual TLS.
pub fn client_config(
    ca: Option<&Path>,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<ClientConfig, TlsError> {
    let roots = match ca {
        Some(ca) => read_roots("--ca", ca)?,
        None => {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(TlsError::Config(
                    "no system CA certificates found to verify the server: pass --ca FILE".into(),
                ));
            }
            roots
        }
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots);
    let mut cfg = match (cert, key) {
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(
                read_certs("--client-cert", cert)?,
                read_key("--client-key", key)?,
            )
            .map_err(|e| TlsError::Config(format!("--client-cert with --client-key: {e}")))?,
        _ => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// The server configuration, reloaded when its files change.
pub struct Reloading {
    files: TlsFiles,
    state: Mutex<State>,
}

struct State {
    config: Arc<ServerConfig>,
    /// Modification times of the files the configuration came from (or last failed to).
    stamps: Vec<Option<SystemTime>>,
}

fn stamps(files: &TlsFiles) -> Vec<Option<SystemTime>> {
    files
        .paths()
        .iter()
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

impl Reloading {
    /// Load the files; an error here stops the start.
    pub fn load(files: TlsFiles) -> Result<Reloading, TlsError> {
        let config = Arc::new(server_config(&files)?);
        let stamps = stamps(&files);
        Ok(Reloading {
            files,
            state: Mutex::new(State { config, stamps }),
        })
    }

    /// The configuration for a new connection: the files' again when they changed and load.
    pub fn current(&self) -> Arc<ServerConfig> {
        let Ok(mut st) = self.state.lock() else {
            // A panic elsewhere poisoned the lock: keep serving with a fresh load if it works.
            return server_config(&self.files)
                .map(Arc::new)
                .unwrap_or_else(|_| Arc::new(fallback()));
        };
        let now = stamps(&self.files);
        if now != st.stamps {
            st.stamps = now;
            match server_config(&self.files) {
                Ok(c) => {
                    tracing::info!("TLS: certificate files changed; loaded for new connections");
                    st.config = Arc::new(c);
                }
                Err(e) => tracing::error!(
                    "TLS: the changed certificate files do not load ({e}); still serving the \
                     previous certificate"
                ),
            }
        }
        st.config.clone()
    }
}

/// A configuration that refuses every handshake (no certificate), for the unreachable case of
/// a poisoned lock whose reload also fails.
fn fallback() -> ServerConfig {
    #[derive(Debug)]
    struct NoCert;
    impl rustls::server::ResolvesServerCert for NoCert {
        fn resolve(
            &self,
            _: rustls::server::ClientHello<'_>,
        ) -> Option<Arc<rustls::sign::CertifiedKey>> {
            None
        }
    }
    ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map(|b| b.with_no_client_auth().with_cert_resolver(Arc::new(NoCert)))
        .expect("the default protocol versions are supported by the ring provider")
}

/// A listener whose connections are TLS, for `axum::serve`.
pub struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accept on `tcp` and handshake with `tls`'s current configuration.
    pub fn new(tcp: TcpListener, tls: Arc<Reloading>) -> io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, rx) = mpsc::channel(BACKLOG);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of file descriptors and the like: wait a little, as axum does.
                        tracing::warn!("HTTP endpoint: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                let acceptor = TlsAcceptor::from(tls.current());
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
                        Ok(Ok(s)) => {
                            let _ = tx.send((s, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!("TLS handshake with {peer}: {e}"),
                        Err(_) => {
                            tracing::debug!("TLS handshake with {peer}: no end in {HANDSHAKE:?}")
                        }
                    }
                });
            }
        });
        Ok(TlsListener { rx, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The acceptor task ended (it never does while the listener lives): no more
            // connections.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}
