//! The HTTP endpoint of `observer run`.
//!
//! - `GET /events`: Server-Sent Events, one per change (`id:` its `seq`), and the daemon's status
//!   lines (no `id:`; the ready line first). `GET /incidents`: one per incident (`id:` the
//!   incident's record number). Both take the `tail` filters as query parameters (`netns`,
//!   `chain`, `actor`, `backend`, `table`, `op`; `type` for incidents) and resume after
//!   `Last-Event-ID` (or `?after=N`) from memory and the record: nothing missed, nothing twice.
//!   A new client may start in the past instead with `?since=10m` (or an RFC 3339 time, read on
//!   the daemon's clock): history first, then live, with no gap and no duplicate.
//! - `GET /incidents?format=json` (or `Accept: application/json`), with `since`: a JSON list.
//! - `GET /ruleset?at=TIME`, `GET /diff?from=TIME&to=TIME`: the record's rulesets rebuilt;
//!   `GET /incidents/ID`: one incident's story (see `ruleset`).
//! - `GET /metrics` (Prometheus text), `GET /healthz` (alive), `GET /readyz` (200 once ready).
//!
//! With a token, every endpoint but `/healthz` needs `Authorization: Bearer TOKEN`.
//!
//! The streams' bound is the hub's ring: a client that falls behind it catches up from the
//! record. Connections are bounded by `limits` and served over `tls` when asked.

pub(crate) mod hub;
pub mod limits;
mod params;
mod ruleset;
pub mod tls;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use crate::output::filter::Filter;
use crate::ruleset::{Backend, Op};
use hub::{AppState, Event, Hub, Stream, StreamFilter};
use params::ParamError;

pub fn router(state: AppState) -> Router {
    let guarded = Router::new()
        .route("/events", get(events))
        .route("/incidents", get(incidents))
        .route("/metrics", get(metrics))
        .route("/readyz", get(readyz))
        .route("/ruleset", get(ruleset::ruleset))
        .route("/diff", get(ruleset::diff))
        .route("/incidents/{id}", get(ruleset::incident))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .merge(guarded)
        .with_state(state)
}

async fn auth(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(token) = &st.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| constant_time_eq(g.trim().as_bytes(), token.as_bytes())) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "missing or wrong bearer token\n",
            )
                .into_response();
        }
    }
    next.run(req).await
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn readyz(State(st): State<AppState>) -> Response {
    if st.hub.is_ready() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "starting: hooks and subscriptions not all live yet\n",
        )
            .into_response()
    }
}

async fn metrics(State(st): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        st.hub.metrics.encode(),
    )
        .into_response()
}

/// The query parameters of the streams (the `tail` filters).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    netns: Option<String>,
    chain: Option<String>,
    actor: Option<String>,
    backend: Option<String>,
    table: Option<String>,
    op: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    after: Option<u64>,
    since: Option<String>,
    format: Option<String>,
}

fn bad(msg: String) -> Response {
    (StatusCode::BAD_REQUEST, format!("{msg}\n")).into_response()
}

impl Params {
    fn filter(&self) -> Result<StreamFilter, ParamError> {
        let split = |s: &Option<String>| -> Vec<String> {
            s.iter()
                .flat_map(|x| x.split(','))
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect()
        };
        let ops = split(&self.op)
            .iter()
            .map(|o| Op::parse(o).ok_or_else(|| ParamError::Op(o.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        let backend = match self.backend.as_deref() {
            None | Some("") => None,
            Some("legacy") => Some(Backend::Legacy),
            Some("nft") => Some(Backend::Nft),
            Some("ipset") => Some(Backend::Ipset),
            Some(b) => return Err(ParamError::Backend(b.to_string())),
        };
        let netns = match self.netns.as_deref() {
            None | Some("") | Some("all") => None,
            Some(n) => Some(crate::netns::resolve_arg(n).map_err(ParamError::Netns)?),
        };
        Ok(StreamFilter {
            filter: Filter {
                netns,
                backend,
                table: self.table.clone().filter(|t| !t.is_empty()),
                chain: self
                    .chain
                    .as_deref()
                    .filter(|c| !c.is_empty())
                    .map(Filter::chain_glob)
                    .transpose()?,
                actor: self.actor.clone().filter(|a| !a.is_empty()),
                ops,
            },
            types: split(&self.kind),
        })
    }
}

fn last_event_id(headers: &HeaderMap, p: &Params) -> Result<Option<u64>, ParamError> {
    match headers.get("last-event-id").map(|v| v.to_str()) {
        Some(Ok(v)) if !v.trim().is_empty() => {
            v.trim()
                .parse::<u64>()
                .map(Some)
                .map_err(|cause| ParamError::LastEventId {
                    value: v.to_string(),
                    cause,
                })
        }
        Some(Err(e)) => Err(ParamError::LastEventIdText(e)),
        _ => Ok(p.after),
    }
}

async fn events(
    State(st): State<AppState>,
    headers: HeaderMap,
    params: Result<Query<Params>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(p) = match params {
        Ok(p) => p,
        Err(e) => return bad(e.body_text()),
    };
    stream(st, headers, p, Stream::Changes).await
}

async fn incidents(
    State(st): State<AppState>,
    headers: HeaderMap,
    params: Result<Query<Params>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(p) = match params {
        Ok(p) => p,
        Err(e) => return bad(e.body_text()),
    };
    let wants_json = p.format.as_deref() == Some("json")
        || headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("application/json"));
    if !wants_json {
        return stream(st, headers, p, Stream::Incidents).await;
    }
    let filter = match p.filter() {
        Ok(f) => f,
        Err(e) => return bad(e.to_string()),
    };
    let since = match p
        .since
        .as_deref()
        .map(|s| crate::timestamp::Timestamp::parse_arg(s).map(|t| t.unix_nanos()))
        .transpose()
    {
        Ok(s) => s,
        Err(e) => return bad(format!("since: {e}")),
    };
    match st.hub.incidents_since(since).await {
        Ok(list) => {
            let mut body = String::from("[");
            for e in list
                .iter()
                .filter(|e| filter.matches(&e.meta, Stream::Incidents))
            {
                if body.len() > 1 {
                    body.push(',');
                }
                body.push_str(&e.json);
            }
            body.push_str("]\n");
            ([(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reading the record: {e}\n"),
        )
            .into_response(),
    }
}

/// One client's position in a stream.
struct Client {
    hub: Arc<Hub>,
    stream: Stream,
    filter: StreamFilter,
    backlog: VecDeque<Arc<Event>>,
    /// More waits after the backlog, in the record or in memory (a client far behind is caught
    /// up a page at a time).
    more: bool,
    rx: tokio::sync::broadcast::Receiver<Arc<Event>>,
    last: u64,
    shutdown: tokio::sync::watch::Receiver<bool>,
    _gauge: ClientGauge,
}

/// Counts connected clients for the metrics.
struct ClientGauge(Arc<Hub>);

impl Drop for ClientGauge {
    fn drop(&mut self) {
        self.0.metrics.sse_clients.dec();
    }
}

async fn stream(st: AppState, headers: HeaderMap, p: Params, s: Stream) -> Response {
    let filter = match p.filter() {
        Ok(f) => f,
        Err(e) => return bad(e.to_string()),
    };
    let mut after = match last_event_id(&headers, &p) {
        Ok(a) => a,
        Err(e) => return bad(e.to_string()),
    };
    // `since` starts a new client at a moment in the past; a reconnecting one resumes by id.
    if let (None, Some(since)) = (after, p.since.as_deref()) {
        match crate::timestamp::Timestamp::parse_arg(since) {
            Ok(t) => after = Some(st.hub.after_time(s, t.unix_nanos()).await),
            Err(e) => return bad(format!("since: {e}")),
        }
    }
    let (backlog, rx) = st.hub.attach(s, after).await;
    let more = backlog.more;
    let mut backlog: VecDeque<Arc<Event>> = backlog.events.into();
    if s == Stream::Changes {
        if let Some(line) = st.hub.ready_line() {
            backlog.push_front(Arc::new(Event {
                id: None,
                json: line,
                meta: Default::default(),
            }));
        }
    }
    st.hub.metrics.sse_clients.inc();
    let client = Client {
        hub: st.hub.clone(),
        stream: s,
        filter,
        backlog,
        more,
        rx,
        last: after.unwrap_or(0),
        shutdown: st.hub.on_shutdown(),
        _gauge: ClientGauge(st.hub.clone()),
    };
    let events = futures_util::stream::unfold(client, next_event);
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

async fn next_event(mut c: Client) -> Option<(Result<SseEvent, Infallible>, Client)> {
    loop {
        if let Some(e) = c.backlog.pop_front() {
            match e.id {
                None => {
                    return Some((Ok(SseEvent::default().data(&*e.json)), c));
                }
                Some(id) if id <= c.last => continue,
                Some(id) => {
                    c.last = id;
                    if !c.filter.matches(&e.meta, c.stream) {
                        continue;
                    }
                    let ev = SseEvent::default().id(id.to_string()).data(&*e.json);
                    return Some((Ok(ev), c));
                }
            }
        }
        if *c.shutdown.borrow() {
            return None;
        }
        if c.more {
            let next = c.hub.since(c.stream, c.last).await;
            c.more = next.more;
            c.backlog.extend(next.events);
            continue;
        }
        tokio::select! {
            _ = c.shutdown.changed() => return None,
            r = c.rx.recv() => match r {
                Ok(e) => c.backlog.push_back(e),
                // Fell behind the live stream: catch up from memory and the record, a page
                // at a time (above).
                Err(RecvError::Lagged(_)) => c.more = true,
                Err(RecvError::Closed) => return None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unusable_filter_parameter_is_named_in_the_answer() {
        let refused = |p: Params| p.filter().err().map(|e| e.to_string()).unwrap_or_default();
        let op = Params {
            op: Some("rule_add,nuke".into()),
            ..Default::default()
        };
        assert_eq!(refused(op), "op: unknown op `nuke`");
        let backend = Params {
            backend: Some("ebtables".into()),
            ..Default::default()
        };
        assert_eq!(
            refused(backend),
            "backend: `ebtables` is not legacy, nft or ipset"
        );
        let netns = Params {
            netns: Some("no-such-ns-xyz".into()),
            ..Default::default()
        };
        let e = refused(netns);
        assert!(
            e.starts_with("netns: --netns no-such-ns-xyz: cannot stat /run/netns/no-such-ns-xyz: "),
            "{e}"
        );
        let chain = Params {
            chain: Some("KUBE-[".into()),
            ..Default::default()
        };
        assert!(refused(chain).starts_with("--chain KUBE-[: "));
    }

    #[test]
    fn a_last_event_id_that_is_not_a_number_is_named_in_the_answer() {
        let after = Params {
            after: Some(5),
            ..Default::default()
        };
        let with = |v: &[u8]| {
            let mut h = HeaderMap::new();
            h.insert("last-event-id", v.try_into().unwrap());
            last_event_id(&h, &after)
        };
        assert_eq!(last_event_id(&HeaderMap::new(), &after).unwrap(), Some(5));
        assert_eq!(with(b" 12 ").unwrap(), Some(12));
        assert_eq!(with(b" ").unwrap(), Some(5), "blank: the parameter");
        let refused = |v: &[u8]| with(v).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(refused(b"x12 "), "Last-Event-ID `x12 ` is not a number");
        assert_eq!(refused(b"caf\xc3\xa9"), "Last-Event-ID is not text");
    }
}
