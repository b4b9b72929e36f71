//! What an incident line says of a restore (`--restore`): the `restore` object.

use serde::{Deserialize, Serialize};

/// How a restore went (`observer_restores_total`'s `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Restored,
    SkippedOwnerRepaired,
    RefusedConflict,
    GaveUp,
    Failed,
    DryRun,
}

impl Outcome {
    pub const ALL: [Outcome; 6] = [
        Outcome::Restored,
        Outcome::SkippedOwnerRepaired,
        Outcome::RefusedConflict,
        Outcome::GaveUp,
        Outcome::Failed,
        Outcome::DryRun,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Restored => "restored",
            Outcome::SkippedOwnerRepaired => "skipped_owner_repaired",
            Outcome::RefusedConflict => "refused_conflict",
            Outcome::GaveUp => "gave_up",
            Outcome::Failed => "failed",
            Outcome::DryRun => "dry_run",
        }
    }
}

/// One restore (or the decision not to), as an incident line carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestoreNote {
    pub outcome: Outcome,
    pub owner: String,
    /// The chains put back (or that would have been).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chains: Vec<String>,
    /// How many jumps into them were put back.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub jumps: usize,
    /// The ipsets their rules name that were created again (`ipset restore`, before them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sets: Vec<String>,
    /// The program and the script it was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Why nothing was written, or what the tool said when it refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Milliseconds from the wipe to the write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_ms: Option<u64>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

crate::output::people::texts!(RestoreNote: owner, chains, sets, command, script, reason);
