//! The node agent's parts (`observer run`, put together by `crate::cmd::run`): the settings
//! (`config`: flags over a file over defaults) and the bearer token. Where the records go (stdout,
//! the record, the metrics, the HTTP streams, NATS) is `crate::sinks`.

pub mod config;

use std::path::{Path, PathBuf};

use crate::sinks::http::hub::{Meta, Stream, StreamFilter};

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
    let f = StreamFilter {
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
    move |v| f.matches(&Meta::from_json(v), Stream::Incidents)
}
