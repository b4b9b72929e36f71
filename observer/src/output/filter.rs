//! The `tail` filters: `--netns`, `--backend`, `--table`, `--chain` (glob), `--actor`, `--op`.

use globset::{Glob, GlobMatcher};

use super::line::{ChangeLine, IncidentLine};
use crate::ruleset::{Backend, Op};

/// A `--chain` pattern that is not a glob.
#[derive(Debug, thiserror::Error)]
#[error("--chain {pattern}: {cause}")]
pub struct ChainGlobError {
    pattern: String,
    #[source]
    cause: globset::Error,
}

#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub netns: Option<u32>,
    pub backend: Option<Backend>,
    pub table: Option<String>,
    pub chain: Option<GlobMatcher>,
    pub actor: Option<String>,
    pub ops: Vec<Op>,
}

impl Filter {
    /// Compile a `--chain` glob (`KUBE-SVC-*`).
    pub fn chain_glob(pattern: &str) -> Result<GlobMatcher, ChainGlobError> {
        Glob::new(pattern)
            .map(|g| g.compile_matcher())
            .map_err(|cause| ChainGlobError {
                pattern: pattern.to_string(),
                cause,
            })
    }

    pub fn matches(&self, c: &ChangeLine) -> bool {
        self.netns.is_none_or(|n| n == c.netns)
            && self.backend.is_none_or(|b| b == c.backend)
            && self.table.as_ref().is_none_or(|t| *t == c.table)
            && self
                .chain
                .as_ref()
                .is_none_or(|g| c.chain.as_deref().is_some_and(|ch| g.is_match(ch)))
            && self.actor.as_ref().is_none_or(|a| {
                *a == c.process.actor
                    || *a == c.process.comm
                    || c.process
                        .requested_by
                        .as_ref()
                        .is_some_and(|r| *a == r.comm || *a == r.actor)
            })
            && (self.ops.is_empty() || self.ops.contains(&c.op))
    }

    /// Incidents pass the namespace, backend, table, chain and actor filters (`--actor` matches an
    /// actor, either side of `caller (via manager)`, a D-Bus caller's actor, or the owner); `--op`
    /// does not apply to them.
    pub fn matches_incident(&self, i: &IncidentLine) -> bool {
        self.netns.is_none_or(|n| n == i.netns)
            && self.backend.is_none_or(|b| b == i.backend)
            && self.table.as_ref().is_none_or(|t| *t == i.table)
            && self
                .chain
                .as_ref()
                .is_none_or(|g| i.chains.iter().any(|ch| g.is_match(ch)))
            && self.actor.as_ref().is_none_or(|a| {
                *a == i.owner
                    || i.actors
                        .iter()
                        .any(|x| crate::attribution::actor_names(x, a))
                    || i.requested_by.as_ref().is_some_and(|r| *a == r.actor)
            })
    }
}
