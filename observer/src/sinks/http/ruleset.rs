//! `GET /ruleset?at=TIME`, `GET /diff?from=TIME&to=TIME` and `GET /incidents/ID`: `observer
//! query --at`, `--diff` and `--incident` over HTTP, from the daemon's own record (same token
//! and TLS as the other endpoints). JSON by default (what `--json` prints: a list for the first
//! two, one object for a story); `format=text` for what a person reads.

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::hub::AppState;
use super::params::ParamError;
use crate::forensics::query as fq;
use crate::forensics::ForensicsError;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    at: Option<String>,
    from: Option<String>,
    to: Option<String>,
    netns: Option<String>,
    table: Option<String>,
    backend: Option<String>,
    format: Option<String>,
}

fn reply(status: StatusCode, msg: String) -> Response {
    (status, format!("{msg}\n")).into_response()
}

impl Params {
    fn scope(&self) -> Result<fq::Scope, ParamError> {
        let backend = match self.backend.as_deref() {
            None => None,
            Some("legacy") => Some(crate::ruleset::Backend::Legacy),
            Some("nft") => Some(crate::ruleset::Backend::Nft),
            Some(b) => return Err(ParamError::RulesetBackend(b.to_string())),
        };
        let netns = self
            .netns
            .as_deref()
            .map(|n| n.parse::<u32>())
            .transpose()
            .map_err(ParamError::NetnsInode)?;
        Ok(fq::Scope {
            netns,
            table: self.table.clone(),
            backend,
        })
    }
}

/// What to answer.
enum Ask {
    Ruleset,
    Diff,
    Incident(String),
}

async fn answer(
    st: AppState,
    params: Result<Query<Params>, axum::extract::rejection::QueryRejection>,
    ask: Ask,
) -> Response {
    let Query(p) = match params {
        Ok(p) => p,
        Err(e) => return reply(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let scope = match p.scope() {
        Ok(s) => s,
        Err(e) => return reply(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let Some(path) = st.hub.record.clone() else {
        return reply(
            StatusCode::NOT_FOUND,
            "this daemon keeps no record (--no-record): there is no history to rebuild".into(),
        );
    };
    let text = p.format.as_deref() == Some("text");
    let job = move || -> Result<String, ForensicsError> {
        let conn = crate::store::open_ro(&path)?;
        if let Ask::Incident(id) = &ask {
            let story = crate::forensics::story::story(&conn, id)?;
            return Ok(if text {
                crate::forensics::story::story_text(&story)
            } else {
                serde_json::to_string(&story).unwrap_or_default()
            });
        }
        if matches!(ask, Ask::Diff) {
            let from = fq::parse_time("from", p.from.as_deref().unwrap_or(""))?;
            let to = fq::parse_time("to", p.to.as_deref().unwrap_or("now"))?;
            let (diffs, holes) = fq::diff_with_gaps(&conn, from, to, &scope)?;
            Ok(if text {
                fq::diff_text(from, to, &diffs, &holes)
            } else {
                serde_json::to_string(&diffs).unwrap_or_default()
            })
        } else {
            let at = fq::parse_time("at", p.at.as_deref().unwrap_or("now"))?;
            let (seq, states, holes) = fq::at_with_gaps(&conn, at, &scope)?;
            Ok(if text {
                fq::at_text(at, seq, &states, &holes)
            } else {
                serde_json::to_string(&fq::at_json(at, seq, &states, &holes)).unwrap_or_default()
            })
        }
    };
    match tokio::task::spawn_blocking(job).await {
        Ok(Ok(body)) => {
            let kind = if text {
                "text/plain; charset=utf-8"
            } else {
                "application/json"
            };
            ([(header::CONTENT_TYPE, kind)], body).into_response()
        }
        Ok(Err(e @ ForensicsError::BadTime { .. })) => {
            reply(StatusCode::BAD_REQUEST, e.to_string())
        }
        Ok(Err(e @ ForensicsError::UnknownIncident(_))) => {
            reply(StatusCode::NOT_FOUND, e.to_string())
        }
        Ok(Err(e)) => reply(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => reply(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

pub async fn ruleset(
    State(st): State<AppState>,
    params: Result<Query<Params>, axum::extract::rejection::QueryRejection>,
) -> Response {
    answer(st, params, Ask::Ruleset).await
}

pub async fn diff(
    State(st): State<AppState>,
    params: Result<Query<Params>, axum::extract::rejection::QueryRejection>,
) -> Response {
    answer(st, params, Ask::Diff).await
}

/// `GET /incidents/ID`: the story `observer query --incident ID` tells.
pub async fn incident(
    State(st): State<AppState>,
    Path(id): Path<String>,
    params: Result<Query<Params>, axum::extract::rejection::QueryRejection>,
) -> Response {
    answer(st, params, Ask::Incident(id)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unusable_scope_parameter_is_named_in_the_answer() {
        let refused = |p: Params| p.scope().err().map(|e| e.to_string()).unwrap_or_default();
        let backend = Params {
            backend: Some("ipset".into()),
            ..Default::default()
        };
        assert_eq!(
            refused(backend),
            "backend: `ipset` is neither legacy nor nft"
        );
        let netns = Params {
            netns: Some("blue".into()),
            ..Default::default()
        };
        assert_eq!(refused(netns), "netns: give the namespace's inode number");
    }
}
