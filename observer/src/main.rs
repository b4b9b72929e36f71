//! The `observer` command: parses the command line, starts the async runtime and runs one verb
//! of the library's commands (`cmd`; see `lib.rs` for the data path).

use observer::cli;
use observer::cmd::{doctor, fleet, follow, owners, query, remote, run, tail};

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    tune_allocator();
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
            cli::Command::Tail(t) if t.nats.is_some() => fleet::tail(*t).await,
            cli::Command::Tail(t) if t.record.is_some() => follow::tail(*t).await,
            cli::Command::Tail(t) => tail::tail(*t).await,
            cli::Command::Run(r) => run::run(*r).await,
            cli::Command::Query(q) => query::run(*q),
            cli::Command::Doctor(d) => doctor::run(d).await,
            cli::Command::Owners(o) => owners::run(o),
        }
    });
    // Threads blocked in a read or a write (a namespace that does not answer) do not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `observer tail ... | head`: the reader has what it wanted.
        Err(e) if observer::cmd::reader_gone(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // An error can quote a name or a server's words: shown escaped.
            eprintln!("observer: {}", observer::shown::Shown(&format!("{e:#}")));
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
        .with_writer(observer::sinks::tail::terminal::LogWriter::default)
        .with_target(false)
        .init();
}

/// Two settings of glibc's allocator, made before any thread starts:
/// - Buffers of 256 KiB and more (a legacy table's entries, several MB, read at every change of
///   it; a record's pages) are mapped for themselves and unmapped when freed. glibc would
///   otherwise raise that threshold to the largest buffer freed so far, serve the next ones from
///   its heaps and keep the memory after they are freed: on a node with a 20,000-rule table that
///   left some 8 MiB resident for nothing, and the peak 12 MiB higher.
/// - One heap for all threads (unless `MALLOC_ARENA_MAX` says otherwise). A namespace's ruleset
///   is read on one thread and held, diffed and freed on others; with a heap per thread, what
///   one freed stayed resident beside what the next allocated. A pod's 440,000-rule nftables
///   load peaked at 248 to 266 MiB with a heap per thread, 219 MiB with one, for the same CPU
///   (each thread keeps its own cache of small blocks either way).
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const THRESHOLD: libc::c_int = 256 * 1024;
        // SAFETY: mallopt only sets a tunable of the allocator; called before any thread starts.
        if unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD) } != 1 {
            eprintln!(
                "observer: warning: mallopt(M_MMAP_THRESHOLD) refused; memory use may be higher"
            );
        }
        // SAFETY: as above.
        if std::env::var_os("MALLOC_ARENA_MAX").is_none()
            && unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) } != 1
        {
            eprintln!("observer: warning: mallopt(M_ARENA_MAX) refused; memory use may be higher");
        }
    }
}
