//! `observer tail`: the filtered stream on stdout, as JSON lines or as the screen a person
//! reads; fed by the engine on this node, or by a record (`--record`), a daemon (`--remote`) or
//! the fleet (`--nats`), which use the same output: the flags made into `crate::sinks::tail`.

use std::io::IsTerminal;

use crate::cli::{ColorWhen, TailArgs};
use crate::engine::{self, Output};
use crate::netns;
use crate::output::filter::Filter;
use crate::ruleset::Backend;
use crate::sinks::tail::screen::{
    local_offset_s, terminal_width, Screen, ScreenOptions, DEFAULT_GROUP_LINES,
};
use crate::sinks::tail::{Format, Sink, TailOutput, TailView};

/// The screen a person reads, as `observer tail`'s flags and the terminal ask for (local and
/// `--remote` alike).
pub fn tail_screen(args: &TailArgs) -> Screen<std::io::Stdout> {
    let terminal = std::io::stdout().is_terminal();
    let colour = match args.color {
        _ if args.no_color => false,
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => terminal && std::env::var_os("NO_COLOR").is_none(),
    };
    Screen::new(
        std::io::stdout(),
        ScreenOptions {
            colour,
            width: if args.wide { None } else { terminal_width() },
            utc_offset_s: if args.utc { 0 } else { local_offset_s() },
            group: !args.no_group,
            group_lines: if args.verbose {
                usize::MAX
            } else {
                DEFAULT_GROUP_LINES
            },
            footer: terminal,
            incidents_only: args.incidents_only,
        },
    )
    .sharing_the_terminal()
}

/// `observer tail`'s filtered output on stdout (JSON lines, or the screen), whatever feeds it.
pub fn tail_output(args: &TailArgs) -> anyhow::Result<Box<dyn Output>> {
    let filter = build_filter(args).map_err(anyhow::Error::msg)?;
    Ok(filtered_output(args, filter))
}

/// [`tail_output`] with its filter already built.
fn filtered_output(args: &TailArgs, filter: Filter) -> Box<dyn Output> {
    let view = if args.json {
        TailView::Json(Sink::new(std::io::stdout(), Format::Json))
    } else {
        TailView::Screen(Box::new(tail_screen(args)))
    };
    Box::new(TailOutput::new(view, filter, args.incidents_only))
}

/// `observer tail` on this node: every namespace watched, the filtered stream on stdout.
pub async fn tail(args: TailArgs) -> anyhow::Result<()> {
    if args.since.is_some() {
        anyhow::bail!(
            "--since needs a history to start from: the record of `observer run` (--record FILE) \
             or a running daemon (--remote URL); the local kernel keeps none"
        );
    }
    let filter = build_filter(&args).map_err(anyhow::Error::msg)?;
    let mut config = args.source.engine_config();
    if let Some(r) = config.restore.as_mut() {
        // A tail of one namespace restores in that one only.
        r.netns = filter.netns;
    }
    let output = filtered_output(&args, filter);
    // A terminal that stopped reading does not hold the exit (5 s without a line taken); one
    // that still reads a long backlog has until the kubelet's grace is nearly out.
    super::exit_after_signal(
        std::time::Duration::from_secs(5),
        std::time::Duration::from_secs(25),
        0,
    )?;
    Ok(engine::run(&config, output).await?)
}

fn build_filter(args: &TailArgs) -> Result<Filter, String> {
    Ok(Filter {
        netns: match args.netns.as_str() {
            "all" => None,
            other => Some(netns::resolve_arg(other).map_err(|e| e.to_string())?),
        },
        backend: args.backend.map(Backend::from),
        table: args.table.clone(),
        chain: args
            .chain
            .as_deref()
            .map(Filter::chain_glob)
            .transpose()
            .map_err(|e| e.to_string())?,
        actor: args.actor.clone(),
        ops: args.op.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_built_from_arguments() {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from([
            "observer",
            "tail",
            "--netns",
            "12345",
            "--chain",
            "KUBE-*",
            "--backend",
            "nft",
        ])
        .unwrap();
        let crate::cli::Command::Tail(t) = cli.command else {
            panic!()
        };
        let f = build_filter(&t).unwrap();
        assert_eq!(f.netns, Some(12345));
        assert_eq!(f.backend, Some(Backend::Nft));
        assert!(f.chain.unwrap().is_match("KUBE-SVC-X"));
    }
}
