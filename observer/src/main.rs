//! The `observer` command: parses the command line, starts the async runtime and runs one verb
//! of the library (see `lib.rs` for the data path).

use observer::bench;
use observer::{cli, daemon, doctor, engine, follow, incidents, nats, ownership, query, remote};

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    init_logging(args.log_level.as_deref());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Threads that entered a namespace for one read exit soon after, so that an idle
        // observer has no thread waiting on a timer.
        .thread_keep_alive(std::time::Duration::from_secs(1))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("observer: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match args.command {
            cli::Command::Tail(t) if t.remote.is_some() => remote::tail(*t).await,
            cli::Command::Tail(t) if t.nats.is_some() => nats::fleet::tail(*t).await,
            cli::Command::Tail(t) if t.record.is_some() => follow::tail(*t).await,
            cli::Command::Tail(t) => engine::tail(*t).await,
            cli::Command::Run(r) => daemon::run(*r).await,
            cli::Command::Query(q) => query::run(*q),
            cli::Command::Doctor(d) => doctor::run(d),
            cli::Command::BenchXt(b) => bench::run(b),
            cli::Command::BenchRecord(b) => bench::record(b),
            cli::Command::Owners(o) => ownership::run(o),
            cli::Command::BenchIncidents(b) => incidents::bench::run(b),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("observer: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(level: Option<&str>) {
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(l) => EnvFilter::new(l),
        None => EnvFilter::try_from_env("OBSERVER_LOG").unwrap_or_else(|_| EnvFilter::new("warn")),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
