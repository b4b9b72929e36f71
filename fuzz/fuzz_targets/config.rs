//! The `observer run --config FILE` TOML file: written to a file of this process and read by
//! `RunArgs::resolve` (daemon/config.rs; the flags are in cli/run.rs), as `observer run --config
//! FILE` does.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use clap::Parser as _;
use libfuzzer_sys::fuzz_target;
use observer::cli::{Cli, Command};

fn path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| observer_fuzz::scratch_dir().join("config.toml"))
}

fuzz_target!(|data: &[u8]| {
    let path = path();
    std::fs::write(path, data).expect("writing the config file");
    let cli = Cli::try_parse_from([
        "observer".as_ref(),
        "run".as_ref(),
        "--config".as_ref(),
        path.as_os_str(),
    ])
    .expect("observer run --config FILE parses");
    let Command::Run(args) = cli.command else {
        panic!("not `observer run`");
    };
    std::hint::black_box(args.resolve().ok());
});
