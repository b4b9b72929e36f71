//! `observer run`: the node agent (a DaemonSet on Kubernetes), put together from the parts in
//! `crate::daemon`.
//!
//! Every record goes, unfiltered and in order, to stdout as JSON lines (the same contract as
//! `tail --json`), to the forensic record (`crate::sinks::record_writer` into `crate::store`), to the metrics
//! and to the HTTP streams. Logs go to stderr. SIGTERM (or SIGINT) stops the engine, ends the
//! streams, writes everything queued to the record and exits 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};

use crate::cli::run::RunArgs;
use crate::daemon::config::Settings;
use crate::daemon::token_from;
use crate::sinks::fanout::DaemonOutput;
use crate::sinks::http::hub::{self, Hub};
use crate::sinks::http::limits::{Limited, MakeMarked};
use crate::sinks::http::{self, tls};
use crate::sinks::metrics;
use crate::sinks::record_writer::{self as recorder, QUEUE as STORE_QUEUE};
use crate::sinks::stdout::DRAIN as STDOUT_DRAIN;
use crate::store;

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let mut settings = args.resolve().map_err(anyhow::Error::msg)?;
    let token = read_token(&settings)?;
    // What observer needs, capability by capability: crate::caps.
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "observer run needs root (or {}) to load its eBPF programs and join every network \
             namespace; run it as root (on Kubernetes: deploy/observer.yaml, a DaemonSet with \
             hostPID, hostNetwork and those capabilities)",
            crate::caps::NEEDED
        );
    }

    // The record first: a record that cannot be written stops the start, before any hook.
    let store_stats = Arc::new(recorder::StoreStats::default());
    let record = open_record(&mut settings, &store_stats)?;

    let nats_stats = settings
        .nats
        .as_ref()
        .map(|_| Arc::new(crate::sinks::nats::publish::NatsStats::default()));
    let metrics = metrics::Metrics::new(
        settings.record.as_ref().map(|_| store_stats.clone()),
        nats_stats.clone(),
    );
    let hub = Arc::new(Hub::new(metrics, settings.record.clone()));
    let publisher = start_publisher(&settings, record.id, nats_stats, &hub, &store_stats);
    let server = start_http(&settings, &hub, token).await?;

    let (sender, join) = match record.writer {
        Some((s, j)) => (Some(s), Some(j)),
        None => (None, None),
    };
    let stdout = crate::sinks::stdout::StdoutQueue::spawn(
        crate::sinks::stdout::FdOut::stdout().context("opening stdout")?,
        settings.stdout_queue,
        hub.metrics.dropped("stdout"),
    )
    .context("starting the stdout writer thread")?;
    // Whatever holds the stop (a disk that does not answer), the kubelet does not have to kill
    // observer: it ends 9 s after SIGTERM at the latest, with status 1.
    // (Its stdout never blocks, so lines taken say nothing of the disk: stall and cap alike.)
    super::exit_after_signal(Duration::from_secs(9), Duration::from_secs(9), 1)?;
    let output = DaemonOutput::new(
        hub.clone(),
        Some(stdout.clone()),
        sender,
        record.last_incident,
        settings.snapshots,
    );
    // The engine owns the output: when it returns, the record's sender is gone and the writer
    // finishes what is queued.
    let result = crate::engine::run(&settings.source.engine_config(), Box::new(output)).await;
    stop(join, &hub, server, publisher, stdout).await;
    Ok(result?)
}

/// The record, opened for writing, with its writer thread.
struct Line {
    writer: Option<(recorder::StoreSender, std::thread::JoinHandle<()>)>,
    /// The number of the last incident in it: numbering goes on after it.
    last_incident: u64,
    /// Its id, when it is the spool of a NATS publisher.
    id: Option<String>,
}

/// Open the record (when there is one) and start its writer; the engine's numbering goes on
/// after the record's last change.
fn open_record(
    settings: &mut Settings,
    store_stats: &Arc<recorder::StoreStats>,
) -> anyhow::Result<Line> {
    let mut record = Line {
        writer: None,
        last_incident: 0,
        id: None,
    };
    let Some(path) = &settings.record else {
        return Ok(record);
    };
    let conn = store::open_rw(path)?;
    let (last_seq, last_no) = store::last_numbers(&conn)?;
    if settings.nats.is_some() {
        record.id = Some(store::record_id(&conn)?);
    }
    settings.source.first_seq = last_seq;
    record.last_incident = last_no;
    let limits = recorder::Limits {
        retain: settings.retain,
        max_bytes: settings.max_record,
    };
    let w = recorder::spawn_writer(conn, path.clone(), limits, STORE_QUEUE, store_stats.clone())
        .context("starting the record writer thread")?;
    tracing::info!(
        "record {}: numbering goes on after seq {last_seq}",
        path.display()
    );
    record.writer = Some(w);
    Ok(record)
}

/// The NATS publisher, when publishing is asked for (the record is its spool).
fn start_publisher(
    settings: &Settings,
    record_id: Option<String>,
    nats_stats: Option<Arc<crate::sinks::nats::publish::NatsStats>>,
    hub: &Hub,
    store_stats: &Arc<recorder::StoreStats>,
) -> Option<tokio::task::JoinHandle<()>> {
    let (Some(nats), Some(record), Some(id), Some(stats)) =
        (&settings.nats, &settings.record, record_id, nats_stats)
    else {
        return None;
    };
    tracing::info!(
        "publishing to NATS {} as node {} (stream {})",
        nats.url,
        nats.node,
        nats.stream
    );
    let spool = crate::sinks::nats::publish::Spool {
        path: record.clone(),
        id,
        stats: store_stats.clone(),
    };
    Some(crate::sinks::nats::publish::spawn(
        nats.clone(),
        spool,
        stats,
        hub.on_shutdown(),
    ))
}

/// The HTTP endpoint, serving until the hub shuts down.
async fn start_http(
    settings: &Settings,
    hub: &Arc<Hub>,
    token: Option<String>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    // TLS files are read before anything is attached: a bad one stops the start.
    let tls = settings
        .tls
        .clone()
        .map(tls::Reloading::load)
        .transpose()
        .context("the HTTP endpoint's TLS")?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|e| listen_error(settings.listen, e))?;
    let app = http::router(hub::AppState {
        hub: hub.clone(),
        token: token.map(Into::into),
    });
    let mut stopped = hub.on_shutdown();
    let shutdown = async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let limits = settings.http;
    Ok(match tls {
        Some(tls) => {
            tracing::info!("HTTP endpoint on https://{}", settings.listen);
            let listener = tls::TlsListener::new(listener, Arc::new(tls))
                .map_err(|e| listen_error(settings.listen, e))?;
            tokio::spawn(serve(Limited::new(listener, limits), app, shutdown))
        }
        None => {
            tracing::info!("HTTP endpoint on http://{}", settings.listen);
            tokio::spawn(serve(Limited::new(listener, limits), app, shutdown))
        }
    })
}

/// After the engine: the record's writer writes and streams what is queued, then the HTTP
/// clients are let go, the publisher stops, and stdout gets what it can take.
async fn stop(
    join: Option<std::thread::JoinHandle<()>>,
    hub: &Hub,
    server: tokio::task::JoinHandle<()>,
    publisher: Option<tokio::task::JoinHandle<()>>,
    stdout: crate::sinks::stdout::StdoutQueue,
) {
    if let Some(j) = join {
        let _ = tokio::task::spawn_blocking(move || j.join()).await;
    }
    hub.shut_down();
    if tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .is_err()
    {
        tracing::warn!("HTTP clients did not disconnect within 5 s; closing");
    }
    if let Some(p) = publisher {
        // It stops at the shutdown signal; what it had not published waits in the record.
        if tokio::time::timeout(Duration::from_secs(2), p)
            .await
            .is_err()
        {
            tracing::warn!("the NATS publisher did not stop within 2 s; leaving it");
        }
    }
    // stdout gets what is queued if it reads; a stalled pipe does not hold the exit, and gets a
    // last gap line that says how many lines it never got.
    let closed = tokio::task::spawn_blocking(move || {
        if stdout.drain(STDOUT_DRAIN) {
            return Ok(());
        }
        Err(stdout.close(STDOUT_DRAIN))
    })
    .await;
    if let Ok(Err(lost)) = closed {
        match lost {
            Some(n) => tracing::warn!(
                "stdout did not take its last lines within {} s; exiting without {n} of them, \
                 told in a last gap line",
                STDOUT_DRAIN.as_secs()
            ),
            None => tracing::warn!(
                "stdout did not take its last lines within {} s; exiting without them",
                STDOUT_DRAIN.as_secs()
            ),
        }
    }
}

/// Serve `app` on `listener` until `shutdown`.
async fn serve<L>(
    listener: Limited<L>,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
    L::Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let res = axum::serve(listener, MakeMarked(app))
        .with_graceful_shutdown(shutdown)
        .await;
    if let Err(e) = res {
        tracing::error!("HTTP endpoint stopped: {e}");
    }
}

fn read_token(s: &Settings) -> anyhow::Result<Option<String>> {
    let Some(path) = &s.token_file else {
        if !s.listen.ip().is_loopback() {
            bail!(
                "refusing to listen on {} (beyond loopback) without a token: pass --token-file FILE \
                 (or OBSERVER_TOKEN_FILE) with a bearer token, or listen on 127.0.0.1",
                s.listen
            );
        }
        return Ok(None);
    };
    let token = token_from(path)?;
    Ok(Some(token))
}

fn listen_error(addr: SocketAddr, e: std::io::Error) -> anyhow::Error {
    let hint = match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            "another process (another observer?) listens there; stop it or choose another \
             address with --listen"
        }
        std::io::ErrorKind::AddrNotAvailable => "this machine has no such address; check --listen",
        std::io::ErrorKind::PermissionDenied => "ports below 1024 need CAP_NET_BIND_SERVICE",
        _ => "check --listen",
    };
    anyhow::anyhow!("cannot listen on {addr}: {e} ({hint})")
}
