//! The errors of the HTTP endpoints' query parameters, shared by the streams (`http`) and the
//! rebuilt rulesets (`ruleset`), and of the `Last-Event-ID` header that stands for a stream's
//! `after`.

use crate::netns::NetnsArgError;
use crate::output::filter::ChainGlobError;

/// A query parameter, or a `Last-Event-ID` header, that cannot be used (the request is answered
/// 400 with this message).
#[derive(Debug, thiserror::Error)]
pub enum ParamError {
    /// `op` names no operation.
    #[error("op: unknown op `{0}`")]
    Op(String),
    /// `backend` of a stream that is none of legacy, nft or ipset.
    #[error("backend: `{0}` is not legacy, nft or ipset")]
    Backend(String),
    /// `backend` of a rebuilt ruleset that is neither legacy nor nft.
    #[error("backend: `{0}` is neither legacy nor nft")]
    RulesetBackend(String),
    /// `netns` of a rebuilt ruleset that is not an inode number.
    #[error("netns: give the namespace's inode number")]
    NetnsInode(#[source] std::num::ParseIntError),
    /// `netns` of a stream that names no namespace.
    #[error("netns: {0}")]
    Netns(#[source] NetnsArgError),
    /// `chain` that is not a glob.
    #[error(transparent)]
    Chain(#[from] ChainGlobError),
    /// A `Last-Event-ID` header that is not a number (the header as given).
    #[error("Last-Event-ID `{value}` is not a number")]
    LastEventId {
        value: String,
        #[source]
        cause: std::num::ParseIntError,
    },
    /// A `Last-Event-ID` header that is not text (bytes other than visible ASCII).
    #[error("Last-Event-ID is not text")]
    LastEventIdText(#[source] axum::http::header::ToStrError),
}
