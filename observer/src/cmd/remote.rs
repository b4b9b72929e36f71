//! `observer tail --remote URL`: the live view fed from a running `observer run` instead of the
//! local kernel. Reads the daemon's `/events` Server-Sent Events stream with the same filters
//! (as query parameters) and, when the connection drops, reconnects with `Last-Event-ID`, so
//! nothing is missed and nothing printed twice. Plain HTTP (the daemon serves no TLS).

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context as _};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::cli::{RemoteAccess, TailArgs};
use crate::output::Line;
use crate::sinks::tail::screen::Screen;

/// A pause this long in the stream ends the transaction being drawn.
const IDLE: Duration = Duration::from_millis(100);

/// One Server-Sent Event.
#[derive(Debug, Default, PartialEq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub data: String,
}

/// Incremental Server-Sent Events parser (the subset the daemon sends: `id`, `data`, comments).
///
/// Linear in what it is fed however the stream is cut: a line arriving a few bytes at a time is
/// not searched again from its start, and the lines of a large chunk are not moved one by one.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    /// How many bytes at the start of `buf` are known to hold no newline.
    scanned: usize,
    current: SseEvent,
    has_data: bool,
}

impl SseParser {
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        let mut from = self.scanned;
        while let Some(off) = buf[from..].iter().position(|&b| b == b'\n') {
            let nl = from + off;
            let line = &buf[start..nl];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            self.line(&String::from_utf8_lossy(line), &mut out);
            start = nl + 1;
            from = start;
        }
        buf.drain(..start);
        self.scanned = buf.len();
        self.buf = buf;
        out
    }

    /// One line, without its end.
    fn line(&mut self, line: &str, out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if self.has_data {
                out.push(std::mem::take(&mut self.current));
            } else {
                self.current = SseEvent::default();
            }
            self.has_data = false;
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.has_data = true;
            }
            "id" => self.current.id = Some(value.to_string()),
            _ => {}
        }
    }
}

/// The `/events` URL with the tail filters as query parameters.
fn events_uri(base: &str, args: &TailArgs) -> anyhow::Result<Uri> {
    let base = base_url(base);
    let mut q = form_urlencoded::Serializer::new(String::new());
    if args.netns != "all" {
        q.append_pair("netns", &args.netns);
    }
    if let Some(b) = args.backend {
        q.append_pair("backend", crate::ruleset::Backend::from(b).as_str());
    }
    for (k, v) in [
        ("table", &args.table),
        ("chain", &args.chain),
        ("actor", &args.actor),
    ] {
        if let Some(v) = v {
            q.append_pair(k, v);
        }
    }
    if let Some(since) = &args.since {
        crate::timestamp::Timestamp::parse_arg(since).context("--since")?;
        q.append_pair("since", since);
    }
    if !args.op.is_empty() {
        let ops: Vec<&str> = args.op.iter().map(|o| o.as_str()).collect();
        q.append_pair("op", &ops.join(","));
    }
    let q = q.finish();
    let uri = if q.is_empty() {
        format!("{base}/events")
    } else {
        format!("{base}/events?{q}")
    };
    uri.parse()
        .with_context(|| format!("--remote {base}: not a URL like http://HOST:9820"))
}

pub async fn tail(args: TailArgs) -> anyhow::Result<()> {
    let base = args.remote.clone().unwrap_or_default();
    let uri = events_uri(&base, &args)?;
    let (tls, token) = access(&uri, &args.access)?;
    let mut printer = Printer {
        screen: (!args.json).then(|| Box::new(crate::cmd::tail::tail_screen(&args))),
        last_status: None,
    };
    let mut last_id: Option<String> = None;
    let mut delay = Duration::from_millis(250);
    let mut connected_once = false;
    loop {
        let attempt = follow(
            &uri,
            tls.as_ref(),
            token.as_deref(),
            &mut last_id,
            &mut printer,
            &mut connected_once,
        );
        let why = tokio::select! {
            r = attempt => r,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        match why {
            Ok(()) => {
                tracing::warn!("{uri}: the stream ended; reconnecting");
                delay = Duration::from_millis(250);
            }
            Err(Fatal(e)) => return Err(e),
            Err(Retry(e)) => {
                if !connected_once {
                    // Never reached: say why now rather than retry forever in silence.
                    return Err(e.context(format!("cannot follow {uri}")));
                }
                tracing::warn!("{uri}: {e:#}; reconnecting in {delay:?}");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

enum FollowError {
    /// Retrying would not help (refused token, bad request).
    Fatal(anyhow::Error),
    /// The connection failed or dropped.
    Retry(anyhow::Error),
}
use FollowError::{Fatal, Retry};

impl From<std::io::Error> for FollowError {
    fn from(e: std::io::Error) -> Self {
        Retry(e.into())
    }
}

/// The TLS connector (for an `https://` URL) and the bearer token that `access` gives.
fn access(
    uri: &Uri,
    access: &RemoteAccess,
) -> anyhow::Result<(Option<tokio_rustls::TlsConnector>, Option<String>)> {
    let token = access
        .token_file
        .as_deref()
        .map(crate::daemon::token_from)
        .transpose()?;
    if uri.scheme_str() != Some("https") {
        if access.ca.is_some() || access.client_cert.is_some() {
            bail!("--ca and --client-cert are for an https:// --remote URL");
        }
        return Ok((None, token));
    }
    let cfg = crate::sinks::http::tls::client_config(
        access.ca.as_deref(),
        access.client_cert.as_deref(),
        access.client_key.as_deref(),
    )?;
    Ok((
        Some(tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg))),
        token,
    ))
}

/// `base` (`HOST:PORT` or a URL) with `http://` when it names no scheme.
fn base_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.starts_with("http://") || base.starts_with("https://") {
        base.to_string()
    } else {
        format!("http://{base}")
    }
}

/// One `GET` of `path` (e.g. `/metrics`) from the daemon at `base`: the body, or why not.
pub async fn get_text(base: &str, path: &str, how: &RemoteAccess) -> anyhow::Result<String> {
    let url = format!("{}{path}", base_url(base));
    let uri: Uri = url
        .parse()
        .with_context(|| format!("--remote {base}: not a URL like http://HOST:9820"))?;
    let (tls, token) = access(&uri, how)?;
    let (resp, conn) = request(&uri, tls.as_ref(), token.as_deref(), "text/plain", None)
        .await
        .map_err(|(Fatal(e) | Retry(e))| e)?;
    let body = resp.into_body().collect().await;
    conn.abort();
    let body = body.with_context(|| format!("reading {uri}"))?;
    Ok(String::from_utf8_lossy(&body.to_bytes()).into_owned())
}

/// A connection to the daemon, plain or TLS.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// Connect to the daemon, with TLS when `tls` is given (an `https://` URL).
async fn connect(
    uri: &Uri,
    tls: Option<&tokio_rustls::TlsConnector>,
) -> Result<Box<dyn Io>, FollowError> {
    let host = uri.host().unwrap_or("127.0.0.1");
    let port = uri
        .port_u16()
        .unwrap_or(if tls.is_some() { 443 } else { 80 });
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| Retry(anyhow::anyhow!("connecting to {host}:{port}: {e}")))?;
    let Some(tls) = tls else {
        return Ok(Box::new(stream));
    };
    // `[::1]` in a URL is `::1` to TLS.
    let name = host.trim_start_matches('[').trim_end_matches(']');
    let server = tokio_rustls::rustls::pki_types::ServerName::try_from(name.to_string())
        .map_err(|e| Fatal(anyhow::anyhow!("{host} is not a TLS server name: {e}")))?;
    match tls.connect(server, stream).await {
        Ok(s) => Ok(Box::new(s)),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(Fatal(anyhow::anyhow!(
            "TLS with {host}:{port}: {e} (is the daemon's certificate issued by the CA given \
             with --ca, for this host name, and still valid?)"
        ))),
        Err(e) => Err(Retry(anyhow::anyhow!("TLS with {host}:{port}: {e}"))),
    }
}

/// Send `GET uri` with the token and `accept`, and `Last-Event-ID` when given: the answer when
/// it is `200 OK`, with the task that drives the connection (abort it when done), else why not
/// (a refused token or a bad request is fatal).
async fn request(
    uri: &Uri,
    tls: Option<&tokio_rustls::TlsConnector>,
    token: Option<&str>,
    accept: &str,
    last_id: Option<&str>,
) -> Result<
    (
        hyper::Response<hyper::body::Incoming>,
        tokio::task::JoinHandle<()>,
    ),
    FollowError,
> {
    let host = uri.host().unwrap_or("127.0.0.1");
    let stream = connect(uri, tls).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Retry(e.into()))?;
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = Request::get(uri.clone())
        .header(
            hyper::header::HOST,
            uri.authority().map(|a| a.as_str()).unwrap_or(host),
        )
        .header(hyper::header::ACCEPT, accept);
    if let Some(t) = token {
        req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    if let Some(id) = last_id {
        req = req.header("last-event-id", id);
    }
    let req = req
        .body(Empty::<Bytes>::new())
        .map_err(|e| Fatal(e.into()))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| Retry(e.into()))?;
    let status = resp.status();
    if status != StatusCode::OK {
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).trim().to_string())
            .unwrap_or_default();
        let e = anyhow::anyhow!("{uri}: {status}: {body}");
        return Err(match status {
            StatusCode::UNAUTHORIZED => Fatal(
                e.context("the daemon refused the request: pass its token with --token-file FILE"),
            ),
            s if s.is_client_error() => Fatal(e),
            _ => Retry(e),
        });
    }
    Ok((resp, conn))
}

async fn follow(
    uri: &Uri,
    tls: Option<&tokio_rustls::TlsConnector>,
    token: Option<&str>,
    last_id: &mut Option<String>,
    printer: &mut Printer,
    connected_once: &mut bool,
) -> Result<(), FollowError> {
    let (resp, conn) = request(uri, tls, token, "text/event-stream", last_id.as_deref()).await?;
    *connected_once = true;
    let mut body = resp.into_body();
    let mut parser = SseParser::default();
    loop {
        // A pause in the stream ends the transaction being drawn (its changes arrive together).
        let frame = match tokio::time::timeout(IDLE, body.frame()).await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(_) => {
                printer.idle().map_err(|e| Fatal(super::output_error(e)))?;
                continue;
            }
        };
        let frame = frame.map_err(|e| Retry(e.into()))?;
        let Some(data) = frame.data_ref() else {
            continue;
        };
        for ev in parser.feed(data) {
            if let Some(id) = ev.id {
                *last_id = Some(id);
            }
            printer
                .print(&ev.data)
                .map_err(|e| Fatal(super::output_error(e)))?;
        }
    }
    conn.abort();
    Ok(())
}

struct Printer {
    /// The screen a person reads; `None` with `--json` (lines as the daemon sent them).
    screen: Option<Box<Screen<std::io::Stdout>>>,
    /// The daemon repeats its ready line on every connection: print it once.
    last_status: Option<String>,
}

impl Printer {
    fn print(&mut self, data: &str) -> std::io::Result<()> {
        let v: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("the daemon sent a line that is not JSON ({e}): {data}");
                return Ok(());
            }
        };
        if v.get("kind").and_then(Value::as_str) == Some("status") {
            if self.last_status.as_deref() == Some(data) {
                return Ok(());
            }
            self.last_status = Some(data.to_string());
        }
        match (&mut self.screen, serde_json::from_value::<Line>(v)) {
            (Some(screen), Ok(r)) => screen.record(&r),
            (Some(screen), Err(e)) => {
                // A newer daemon's line this version cannot draw: shown as sent (escaped, as
                // every text on the screen), not dropped.
                tracing::debug!("drawing a line from the daemon: {e}");
                screen.end_txn().and_then(|_| {
                    writeln!(std::io::stdout().lock(), "{}", crate::shown::Shown(data))
                })
            }
            (None, _) => {
                let mut out = std::io::stdout().lock();
                writeln!(out, "{data}").and_then(|_| out.flush())
            }
        }
    }

    /// The stream paused: draw what is pending.
    fn idle(&mut self) -> std::io::Result<()> {
        match &mut self.screen {
            Some(screen) => screen.end_txn(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daemon_lines_are_drawn_from_the_same_records_without_losing_a_field() {
        let fixture = include_str!("../incidents/fixtures/calico_vs_kube_proxy.jsonl");
        let mut kinds = std::collections::BTreeSet::new();
        for line in fixture.lines().filter(|l| !l.trim().is_empty()) {
            let sent: Value = serde_json::from_str(line).expect("fixture line");
            let r: Line = serde_json::from_value(sent.clone())
                .unwrap_or_else(|e| panic!("cannot draw {line}: {e}"));
            assert_eq!(serde_json::to_value(&r).expect("serialize"), sent, "{line}");
            kinds.insert(sent["kind"].as_str().unwrap_or_default().to_string());
        }
        assert!(
            kinds.contains("change") && kinds.contains("incident"),
            "{kinds:?}"
        );
    }

    #[test]
    fn sse_events_are_parsed_across_chunks() {
        let mut p = SseParser::default();
        assert!(p.feed(b": keep-alive\n\nid: 4\ndata: {\"a\"").is_empty());
        let got = p.feed(b":1}\n\ndata: x\ndata: y\n\n");
        assert_eq!(
            got,
            vec![
                SseEvent {
                    id: Some("4".into()),
                    data: "{\"a\":1}".into()
                },
                SseEvent {
                    id: None,
                    data: "x\ny".into()
                }
            ]
        );
    }

    /// The same events however the stream is cut, a CR before its LF included; a long line fed
    /// a byte at a time (the `sse` fuzz target's property).
    #[test]
    fn sse_events_do_not_depend_on_chunking() {
        let stream = b"id: 1\r\ndata: {\"a\":1}\r\n\r\n: c\ndata: x\ndata: y\n\nid: 2\ndata\n\n";
        let whole = SseParser::default().feed(stream);
        assert_eq!(whole.len(), 3);
        assert_eq!(
            whole[2],
            SseEvent {
                id: Some("2".into()),
                data: String::new()
            }
        );
        for n in 1..stream.len() {
            let mut p = SseParser::default();
            let got: Vec<SseEvent> = stream.chunks(n).flat_map(|c| p.feed(c)).collect();
            assert_eq!(got, whole, "chunks of {n}");
        }
        let long = format!("data: {}\n\n", "x".repeat(200_000));
        let mut p = SseParser::default();
        let got: Vec<SseEvent> = long.as_bytes().iter().flat_map(|b| p.feed(&[*b])).collect();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].data.len(), 200_000);
    }

    #[test]
    fn filters_become_query_parameters() {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from([
            "observer",
            "tail",
            "--remote",
            "http://127.0.0.1:9820/",
            "--chain",
            "KUBE-SVC-*",
            "--op",
            "chain_delete,chain_flush",
            "--backend",
            "nft",
        ])
        .unwrap();
        let crate::cli::Command::Tail(t) = cli.command else {
            panic!()
        };
        let u = events_uri(t.remote.as_deref().unwrap(), &t).unwrap();
        assert_eq!(
            u.to_string(),
            "http://127.0.0.1:9820/events?backend=nft&chain=KUBE-SVC-*&op=chain_delete%2Cchain_flush"
        );
    }
}
