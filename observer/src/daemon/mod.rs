//! The node agent's parts (`observer run`, put together by `crate::cmd::run`): where the
//! engine's records go (`sink`: stdout, the record, the metrics, the HTTP streams of `hub`), the
//! HTTP endpoint (`http`, `tls`, `ruleset`), the metrics, and the settings (`config`: flags over
//! a file over defaults).

pub mod config;
pub(crate) mod http;
pub(crate) mod hub;
pub mod limits;
pub(crate) mod metrics;
mod params;
mod ruleset;
pub(crate) mod sink;
pub(crate) mod stdout;
pub mod tls;

use std::path::{Path, PathBuf};

/// What is wrong with the bearer token's file (`--token-file`).
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file cannot be read.
    #[error("cannot read the token file {} (--token-file)", path.display())]
    Read {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    /// Empty, or more than one word.
    #[error("the token file {} must hold one token without spaces (--token-file)", .0.display())]
    Malformed(PathBuf),
}

/// The bearer token in a file (surrounding whitespace ignored).
pub fn token_from(path: &Path) -> Result<String, TokenError> {
    let text = std::fs::read_to_string(path).map_err(|cause| TokenError::Read {
        path: path.into(),
        cause,
    })?;
    let token = text.trim().to_string();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err(TokenError::Malformed(path.into()));
    }
    Ok(token)
}

/// The stream filter of `/incidents`, for `observer query` over stored incidents.
pub fn incident_filter(
    netns: Option<u32>,
    backend: Option<crate::ruleset::Backend>,
    table: Option<String>,
    chain: Option<globset::GlobMatcher>,
    actor: Option<String>,
    types: Vec<String>,
) -> impl Fn(&serde_json::Value) -> bool {
    let f = hub::StreamFilter {
        filter: crate::output::filter::Filter {
            netns,
            backend,
            table,
            chain,
            actor,
            ops: vec![],
        },
        types,
    };
    move |v| f.matches(&hub::Meta::from_json(v), hub::Stream::Incidents)
}
