//! `observer query`'s flags.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct QueryArgs {
    /// From this time: relative (`2h`, `30m`, `7d`: that long ago) or RFC 3339
    /// (`2026-11-21T03:00:00Z`). Default: the start of the record.
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,

    /// Until this time (same forms). Default: now.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,

    /// Only chains (or sets) whose name matches this glob (e.g. `KUBE-SVC-*`).
    #[arg(long, value_name = "GLOB")]
    pub chain: Option<String>,

    /// Only changes made by this actor (or this command); incidents naming it.
    #[arg(long)]
    pub actor: Option<String>,

    /// Only these ops (repeat, or separate with commas); only changes are shown then.
    #[arg(long, value_name = "OP", value_delimiter = ',', value_parser = super::parse_op)]
    pub op: Vec<crate::ruleset::Op>,

    /// Only this network namespace: an inode number, a /run/netns/NAME path or an `ip netns` name.
    #[arg(long)]
    pub netns: Option<String>,

    /// Only this backend (`legacy` or `nft`).
    #[arg(long, value_enum)]
    pub backend: Option<super::BackendArg>,

    /// Only this table.
    #[arg(long)]
    pub table: Option<String>,

    /// Only incidents of these types (e.g. `foreign_delete,flapping`); only incidents are shown then.
    #[arg(long = "type", value_name = "TYPE", value_delimiter = ',')]
    pub types: Vec<String>,

    /// Only incidents (no change lines).
    #[arg(long)]
    pub incidents: bool,

    /// Only incidents still open: for each incident, its latest line, shown only when that line
    /// is `open` or `update` (not `resolved` or `expired`). Implies `--incidents`.
    #[arg(long)]
    pub open: bool,

    /// Print JSON lines (as `tail --json` and `run` print them) instead of human lines.
    #[arg(long)]
    pub json: bool,

    /// The record file.
    #[arg(long, env = "OBSERVER_RECORD", default_value = super::run::DEFAULT_RECORD)]
    pub record: PathBuf,

    /// At most this many lines (the oldest first).
    #[arg(long)]
    pub limit: Option<usize>,

    /// No colour (also: NO_COLOR set, or output not a terminal).
    #[arg(long)]
    pub no_color: bool,

    /// Print the ruleset as it was at this time (relative like `2h`, or RFC 3339), rebuilt
    /// from the record's newest snapshot before it and the changes after that: legacy tables in
    /// `iptables-save` syntax, nft tables in `nft list ruleset` syntax, each chain's last writer
    /// and time in `#` comments. Narrow it with --netns, --table, --backend; --json gives one
    /// object per namespace and backend.
    #[arg(long, value_name = "TIME", conflicts_with_all = ["since", "until", "diff"])]
    pub at: Option<String>,

    /// Print what differs between the rulesets at two times, `FROM..TO` (e.g. `2h..1h`,
    /// `2026-11-21T03:00:00Z..now`; TO defaults to now): tables and chains added, removed or
    /// changed, the rules added and removed, and who changed each last and when. Narrow it with
    /// --netns, --table, --backend; --json gives one object per difference.
    #[arg(long, value_name = "FROM..TO", conflicts_with_all = ["since", "until"])]
    pub diff: Option<String>,

    /// Tell one incident's story (its id, e.g. `foreign_delete-4026532177-17`; `--incidents`
    /// lists them): a timeline of its lines, every change that made it with the writer's
    /// ancestry, unit or pod, the owners' repairs and when, and each affected chain before the
    /// incident, after its actors' changes and at its end. --json gives the same as one object.
    #[arg(long, value_name = "ID", conflicts_with_all = ["since", "until", "at", "diff"])]
    pub incident: Option<String>,

    /// With --incident: print the script that puts back what it took (the chains as they were
    /// before it, the jumps into them), against the chains at its end, with the command that
    /// applies it in its namespace. Nothing is written: it is for a person to read and apply.
    #[arg(long, requires = "incident", conflicts_with = "json")]
    pub restore_script: bool,
}
