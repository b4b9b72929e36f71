//! `cargo xtask`: observer's developer tasks (set up a machine, build, test, run).
//!
//! Each verb is one variant of [`Verb`] and one function; add a verb by adding both.

mod bench;
mod cmd;
mod deploy;
mod fuzz;
mod image;
mod setup;
mod skips;
mod vm;

use std::{
    env,
    ffi::OsString,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, ExitCode},
};

use anyhow::{bail, Context as _, Result};
use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Developer tasks for observer: set up a machine, build, test, run",
    long_about = "Developer tasks for observer: set up a machine, build, test, run.\n\n\
                  Every verb but `setup` runs setup's checks first (a couple of seconds when \
                  everything is there), so `cargo xtask test` or `cargo xtask tail` is the one \
                  command a fresh Debian machine needs."
)]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Subcommand)]
enum Verb {
    /// Install what building and testing needs, and nothing more (idempotent)
    #[command(
        long_about = "Install what building and testing observer needs, and nothing more.\n\n\
        Prints one line per check (`ok ...`, `installing ...`, `note ...`) and is quick when all \
        is there. It checks:\n\
        - Debian packages nftables, iptables, arptables, ebtables, iproute2, ipset, nfacct, \
          procps, the firewall managers and fleet tools the tests run, and (when apt has it) \
          bpftool, by their binaries; missing ones are installed with apt-get (needs root; \
          `apt-get update` runs once, only when something is missing).\n\
        - netfilter-persistent, iptables-persistent and ipset-persistent, unpacked (not \
          installed: ufw breaks them) in /var/cache/observer-tests/netfilter-persistent for the \
          attribution and restore tests.\n\
        - The nightly toolchain and its rust-src component (rustup), which build the eBPF programs.\n\
        - bpf-linker, built with `cargo install` against nightly rustc's own libLLVM \
          (prefix $CARGO_HOME/bpf-linker-llvm), when the installed one does not run or links \
          another LLVM major version.\n\
        - cargo-fuzz (for the fuzz targets), `cargo install --locked` of a pinned release when \
          none runs.\n\
        - tracefs and kernel BTF: reported only (observer mounts tracefs itself)."
    )]
    Setup(SetupArgs),

    /// Run setup's checks, then build observer with its eBPF programs (release)
    #[command(
        long_about = "Run setup's checks, then `cargo build --release -p observer`.\n\n\
        observer/build.rs builds the eBPF crate with aya-build (nightly, rust-src, bpf-linker). \
        Not being root is fine here: missing Debian packages are only reported."
    )]
    Build,

    /// Run setup, build observer, then `cargo test --workspace --release [ARGS]` (not observer-ebpf)
    #[command(
        long_about = "Run setup, `cargo build --release --workspace --exclude observer-ebpf --bins \
        --examples` (the integration tests of `tests/` run that binary and its bench example), \
        then `cargo test --workspace --exclude observer-ebpf --release [ARGS]`, exiting with its \
        status. observer-ebpf is left out: it is a no_main BPF program that cannot link as a \
        host test binary (observer's build already compiles it).\n\n\
        Integration tests need root (they create network namespaces and load eBPF programs); \
        without root they skip with a message. ARGS go to cargo test unchanged, e.g. \
        `cargo xtask test -- -p observer nft -- --nocapture`.\n\n\
        Without ARGS and as root, `vm-test` follows: the integration \
        tests in QEMU guests (Debian's 5.10, 6.1 and 6.12 kernels) on the kprobe and fentry \
        backends (skipped with the reason when no guest can be had; OBSERVER_SKIP_VM=1 skips \
        it).\n\n\
        Without ARGS, after the host tests, every fuzz target of fuzz/ runs for 18 s after one \
        build (`cargo xtask fuzz --seconds 18`), at niceness 10 beside the guests when they \
        run (its output printed when it ends); a crash, timeout or OOM fails the run \
        (OBSERVER_SKIP_FUZZ=1 skips it). Every phase runs even when one before it failed; the \
        run ends with the list of the phases that failed."
    )]
    Test(PassThrough),

    /// Build observer, then run `observer tail [ARGS]` (as root, through sudo if needed)
    #[command(long_about = "Run setup's checks, build observer (release), then run \
        `target/release/observer tail [ARGS]` and exit with its status. observer needs root: \
        when not root, it is run through sudo if sudo exists. Example: `cargo xtask tail -- --help`.")]
    Tail(PassThrough),

    /// Build observer, then measure event latency, x_tables read cost, idle wake-ups and RSS
    #[command(
        long_about = "Run setup's checks, build observer (release), then measure it in \
        network namespaces of its own (created and deleted by the bench; the host's ruleset is \
        never touched): event latency for iptables-legacy and nft changes, the read+diff of a \
        20,000-rule x_tables table against `iptables-legacy-save`, idle CPU and context \
        switches, RSS while tracking that table, and the kernel's run count and nanoseconds \
        of each of observer's eBPF programs during iptables-legacy and nft changes \
        (kernel.bpf_stats_enabled is set for that part and put back after it). Prints a table and writes it into \
        BENCHMARKS.md between its bench markers. Needs root. About a minute; `--quick` is \
        shorter and noisier."
    )]
    Bench(bench::BenchArgs),

    /// Build observer, then measure its cost per kube-proxy sync on a big legacy nat table
    #[command(
        long_about = "Run setup's checks, build observer (release), then, for each size \
        (--services, default 2,500 and 10,000 services), in a network namespace of its own \
        (`obs-bignode-PID-N`, deleted at the end; the host's ruleset is never touched): start \
        `observer tail --json --netns NS`, load a nat table shaped like kube-proxy's iptables \
        mode (4 chains and 11 rules per service) with one `iptables-legacy-restore`, then make \
        --syncs partial syncs one a second (`iptables-legacy-restore --noflush` of one \
        KUBE-SEP- chain rewritten with a new endpoint IP). Measures observer's CPU per sync \
        (utime + stime from /proc), the latency from the restore's exit to the first line \
        naming the chain (p50, p95), observer's VmRSS and VmHWM, and `iptables-legacy-save -t \
        nat` of the same table (wall and CPU, median of 3): the ratio of observer's CPU per \
        sync to one save, and how both grow from one size to the next. Prints the table and \
        writes it into BENCHMARKS.md between its bench-bignode markers. Needs root and \
        iptables-legacy-restore. Some minutes (10,000 services take a while to load); `--quick` \
        is 500 and 2,000 services with 3 syncs. `--nft` then measures kube-proxy's nftables \
        mode the same way (table `ip kube-proxy` loaded with one `nft -f`, each sync one `nft -f` \
        transaction swapping an endpoint chain, against `nft list table`), between its \
        bench-bignode-nft markers; `--nft-only` measures that part alone."
    )]
    BenchBignode(bench::bignode::BenchBignodeArgs),

    /// Build observer, then measure one namespace's change latency while another rewrites a big table
    #[command(
        long_about = "Run setup's checks and build observer (release; or take the binary named \
        with --bin), then, in two network namespaces of its own (`obs-neighbour-PID-pod` and \
        `-node`, deleted at the end; the host's ruleset is never touched), with one `observer \
        tail --json` watching every namespace: the node adds one nft rule every --interval-ms \
        (default 200) while the pod loads the kube-proxy-shaped legacy nat table of \
        bench-bignode (--services, default 10,000: 110,008 rules) with one \
        `iptables-legacy-restore` and then rewrites the whole table --rewrites times (default 3; \
        a restore without --noflush, one service's endpoint moved each time), each once \
        observer has reported the one before. Reports the node's changes sent and reported \
        (a missing one fails the run) and their latency from `nft`'s exit to their line (p50, \
        p95, max), while the pod's restores were being handled and overall; per restore, the \
        time from its exit to observer's first and last line for it, and the pod's change \
        lines. With --against PATH (a second observer binary, an earlier build say), the plan \
        runs with it first, then with --bin's, in fresh namespaces each time, and the figures \
        are shown side by side with the ratio of the p95 latency while the restores were \
        handled. Prints a markdown section and writes it into BENCHMARKS.md between its \
        bench-neighbour markers, unless --no-write. Needs root; a minute or two per binary."
    )]
    BenchNeighbour(bench::neighbour::BenchNeighbourArgs),

    /// Run the integration tests in a QEMU guest with kprobes and fentry, once per backend
    #[command(
        long_about = "Install what the guest needs when missing (Debian packages qemu-system-x86, \
        linux-image-amd64, busybox-static, Debian 12's 6.12 kernel and Debian 11's 5.10 one, the \
        latter from bullseye through a sources file and pin of its own; `pip install \
        virtme-ng`), build observer and the integration tests on the host, boot the newest \
        /boot/vmlinuz-* of each series 5.10, 6.1 and 6.12 (or OBSERVER_VM_KERNEL, paths \
        separated by `:`) with `vng --disable-kvm`, one guest each, two guests at a time \
        (OBSERVER_VM_PARALLEL=N for another number), load the netfilter modules, and run the \
        integration tests once with `--hooks kprobe` and once with `--hooks fentry` (on 5.10 \
        and 6.1 one of them runs its smoke tests only), each test's \
        time in the log. Each run fails unless its \
        ready line names that backend and every legacy change carries it as `source`. Exits \
        non-zero when a run fails; skips (exit 0, with the reason) when no guest can be had. \
        Needs root. A few minutes under software emulation."
    )]
    VmTest,

    /// In the QEMU guest: the cost of each hook backend to 20,000-rule restores and `nft -f`
    #[command(
        long_about = "Boot the guest of vm-test (at niceness 10), load the 20,000-rule filter \
        table of `bench` and the same table in nftables' words into a namespace, and time \
        `iptables-legacy-restore` and then `nft -f` of them (alternating two versions, so each \
        run is a change) with no observer, then with observer on the fentry, kprobe and \
        tracepoint backends, then with none again, in one boot. Counts the change lines with \
        full attribution, and reads the kernel's BPF statistics (run count and nanoseconds) of \
        each of observer's programs for each load. Prints the tables and writes them into \
        BENCHMARKS.md between its vm-bench markers. Needs root; about 20 minutes with the \
        default rounds."
    )]
    VmBench(bench::vm::VmBenchArgs),

    /// What observer's hooks cost unrelated work and netfilter writers, per backend
    #[command(
        long_about = "Run workloads that have nothing to do with netfilter (UDP loopback \
        ping-pong, fork and exit, a network namespace made, a mount and unmount, a netlink link \
        dump) and two netfilter writers (single-rule nft transactions, `iptables-legacy -A` on a \
        2,000-rule table) with no observer and with `observer tail --hooks B`, interleaved over \
        rounds: on the host (tracepoint) and in a QEMU guest of each VM kernel (fentry, kprobe, \
        tracepoint). Reports medians, the difference to no observer, and each eBPF program's \
        runs and nanoseconds per run from the kernel's BPF statistics; writes the tables into \
        BENCHMARKS.md between its bench-overhead markers. Needs root; about 40 minutes with the \
        default rounds (the guests run under software emulation)."
    )]
    BenchOverhead(bench::overhead::OverheadArgs),

    /// One workload of bench-overhead (run by its scripts); prints nanoseconds per operation
    #[command(hide = true)]
    OverheadWorkload(bench::overhead::WorkloadArgs),

    /// Build observer, then measure the record (size, query time) and `observer run` under load
    #[command(
        long_about = "Run setup's checks, build observer (release), then: fill a record with a \
        week of synthetic kube-proxy-like churn through the record's own writer (write cost, size \
        per million changes), time `observer query` for one chain over that week, and run \
        `observer run` while real nft transactions in a namespace of its own make 1,000 changes \
        per second (CPU share, RSS, records dropped). Writes the figures into BENCHMARKS.md \
        between its bench-daemon markers. Needs root. About 3 minutes; `--quick` is shorter."
    )]
    BenchDaemon(bench::daemon::BenchDaemonArgs),
    /// Build observer, then measure snapshots in the record and `observer query --at`
    #[command(
        long_about = "Run setup's checks, build observer (release), then write a week of \
        kube-proxy-like churn on a 21,000-rule nat table through the record's own writer twice, \
        with the snapshots of the daemon's default policy and without them: the record's growth \
        from snapshots, and `query --at` at the end of the week and just before a snapshot (the \
        most changes to replay). Writes the figures into BENCHMARKS.md between its \
        bench-forensics markers. Needs no root. About 3 minutes."
    )]
    BenchForensics(bench::forensics::BenchForensicsArgs),
    /// Measure the incident engine (per-transaction cost, incident latency, memory under churn)
    /// and write the figures into BENCHMARKS.md
    BenchIncidents(bench::incidents::BenchIncidentsArgs),

    /// Build observer, then measure fleet streaming on NATS JetStream (latency, rate, cost)
    #[command(
        long_about = "Run setup's checks, build observer (release), start Debian's nats-server \
        with JetStream in a directory of the bench's own, then measure: the latency from 100 \
        single nft changes to their lines on the daemon's stdout and in `observer tail --nats`, \
        side by side; and `observer run` alone and with `--nats` at 1,000 changes per second \
        (rate held, CPU, publish cost per change, how far the fleet tail falls behind). Writes \
        the figures into BENCHMARKS.md between its bench-nats markers. Needs root. About a \
        minute and a half; `--quick` is shorter."
    )]
    BenchNats(bench::nats::BenchNatsArgs),

    /// Build observer, then run `observer run` for N minutes under mixed churn and check it stays flat
    #[command(
        long_about = "Run setup's checks, build observer (release), copy the binary to a \
        directory of the soak's own and run `observer run` from there (fresh record, HTTP \
        endpoint on a free loopback port, stdout read through a pipe) for --minutes (default 60) \
        under about 1,000 changes per second in network namespaces the soak makes and deletes \
        (`obs-soak-PID-*`; the host's ruleset is never touched): `nft -f` transactions and \
        `iptables-legacy-restore --noflush` into a 3,000-rule table, a namespace made, written \
        and deleted every 5 s, and an SSE client on /events that reconnects every 20-30 s with \
        Last-Event-ID or ?after=. Prints one line a minute (RSS, open fds, CPU, record size, \
        dropped rows, gaps, lost records, changes/s, SSE gaps/duplicates), then checks the aims: \
        flat memory (the last 10 minutes' mean RSS within 5 % of minutes 10-20; under 30 minutes \
        the last third against the middle third), nothing dropped or lost, no fd growth (end \
        against minute 1), every seq exactly once over SSE. Exits 1 when an aim is missed. \
        With --bench (only then) the per-minute table (every 5th minute and min/max for longer \
        runs) and the summary go into BENCHMARKS.md between its soak markers, also when an aim \
        is missed. Ctrl-C stops early, cleans up and exits 130 without writing. Needs root."
    )]
    Soak(bench::soak::SoakArgs),

    /// Validate deploy/'s Kubernetes manifests offline and check its Containerfile
    #[command(
        long_about = "Validate the Kubernetes manifests in deploy/ against the API schemas \
        with kubernetes-validate (strict: unknown fields fail), offline; installs the validator \
        into a Python virtual environment in cargo's target directory the first time. Also \
        checks that a broken manifest is rejected, and that deploy/Containerfile builds with \
        `cargo xtask build` and copies target/release/observer. `cargo xtask test` runs this."
    )]
    DeployCheck,

    /// Build observer, then its container image with podman, from scratch (nothing pulled)
    #[command(
        long_about = "Run setup's checks, build observer with the `dist` profile (fat LTO, one \
        codegen unit, stripped: the binary to ship; a few minutes), then make the image \
        `localhost/observer:latest` from deploy/Containerfile with podman: the build context \
        (target/image) holds a root filesystem with the stripped binary and the shared \
        libraries ldd names for it, and the Containerfile starts FROM scratch, so no base image \
        is pulled from a registry. The image is labelled with the binary's SHA-256 (tests/tests/image.rs \
        checks it runs this build). Prints the image's and the binary's sizes and writes them \
        into BENCHMARKS.md between its image markers. Needs root. `cargo xtask test` makes the \
        image of the release binary it tests."
    )]
    Image(image::ImageArgs),

    /// Run the cargo-fuzz targets of fuzz/ (observer's decoders) for N seconds each
    #[command(
        long_about = "Run setup's checks (which install cargo-fuzz when missing), build the fuzz \
        targets of fuzz/ once (`cargo +nightly fuzz build`, AYA_BUILD_SKIP=1, into fuzz/target), \
        then run each TARGET (default: all) for N seconds, one at a time: `cargo +nightly fuzz \
        run --sanitizer none --codegen-units 16 TARGET fuzz/corpus/TARGET fuzz/seeds/TARGET -- \
        -max_total_time=N -rss_limit_mb=2048 -timeout=10` (no sanitizer: the decoders are safe \
        Rust, and without ASan the build is shorter and the runs faster). The committed seeds (fuzz/seeds, made from the tests' fixtures by \
        fuzz/examples/make_seeds.rs) are read; new inputs go to the git-ignored working corpus \
        fuzz/corpus. Prints per target the inputs run, libFuzzer's coverage (cov, ft) and \
        corpus at the end, and crash or not; libFuzzer's own output is in \
        fuzz/target/logs/TARGET.log. Exits non-zero on a crash, a timeout (an input over 10 s), \
        an out-of-memory or a hang, naming the input it left in fuzz/artifacts/TARGET/. With \
        --bench (only then) the table is also written into BENCHMARKS.md between its fuzz \
        markers. Targets: nft_netlink, nft_expr, xt_blob, kernel_event, sse, owners, config, \
        record."
    )]
    Fuzz(fuzz::FuzzArgs),
}

#[derive(Args)]
struct SetupArgs {
    /// Rebuild bpf-linker even when the installed one works (e.g. after updating nightly)
    #[arg(long)]
    force_bpf_linker: bool,
}

#[derive(Args)]
struct PassThrough {
    /// Arguments passed on unchanged
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<OsString>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.verb {
        Verb::Setup(a) => setup_verb(&a).map(|()| 0),
        Verb::Build => build().map(|_| 0),
        Verb::Test(a) => test(&a.args),
        Verb::Tail(a) => tail(&a.args),
        Verb::Bench(a) => bench::run(&a),
        Verb::BenchBignode(a) => bench::bignode::run(&a),
        Verb::BenchNeighbour(a) => bench::neighbour::run(&a),
        Verb::VmBench(a) => bench::vm::run(&a),
        Verb::BenchOverhead(a) => bench::overhead::run(&a),
        Verb::OverheadWorkload(a) => bench::overhead::workload(&a),
        Verb::VmTest => build().and_then(|ready| vm::vm_test(&ready).map(|r| r.unwrap_or(0))),
        Verb::BenchDaemon(a) => bench::daemon::run(&a),
        Verb::BenchForensics(a) => bench::forensics::run(&a),
        Verb::BenchIncidents(a) => bench::incidents::run(&a),
        Verb::BenchNats(a) => bench::nats::run(&a),
        Verb::Soak(a) => bench::soak::run(&a),
        Verb::DeployCheck => deploy_check().map(|()| 0),
        Verb::Image(a) => {
            build_profile(image::PROFILE).and_then(|_| image::run(&a, &root(), &target_dir()?))
        }
        Verb::Fuzz(a) => setup_lenient().and_then(|_| fuzz::run(&a, &root())),
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The eBPF crate: built for bpfel-unknown-none by observer/build.rs, never for the host.
const EBPF_CRATE: &str = "observer-ebpf";

/// The workspace root (xtask lives one level below it).
fn root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

fn cargo() -> Command {
    let mut c = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root());
    c
}

fn setup_verb(a: &SetupArgs) -> Result<()> {
    let opts = setup::Options {
        force_bpf_linker: a.force_bpf_linker,
        lenient_packages: false,
    };
    cmd::phase("setup", || setup::run(opts))?;
    // The manifest validator that `test` runs.
    deploy::ensure_validator(&target_dir()?).map(|_| ())
}

fn deploy_check() -> Result<()> {
    let target = target_dir()?;
    cmd::phase("deploy-check", || deploy::check(&root(), &target))
}

/// Setup's checks, lenient about Debian packages when not root (they are not needed to build).
fn setup_lenient() -> Result<setup::Ready> {
    let opts = setup::Options {
        force_bpf_linker: false,
        lenient_packages: true,
    };
    cmd::phase("setup", || setup::run(opts))
}

/// Setup (lenient about Debian packages when not root), then the release build of observer.
fn build() -> Result<setup::Ready> {
    build_profile("release")
}

/// Setup's checks, then `cargo build --profile PROFILE -p observer`.
fn build_profile(profile: &str) -> Result<setup::Ready> {
    let ready = setup_lenient()?;
    cmd::phase(
        &format!("cargo build --profile {profile} -p observer"),
        || {
            let mut c = cargo();
            c.args(["build", "--profile", profile, "-p", "observer"]);
            ready.apply(&mut c);
            cmd::run(&mut c).context(
            "building observer failed (see cargo's output above); `cargo xtask setup` checks the \
             toolchain, and AYA_BUILD_SKIP=1 builds userspace only",
        )
        },
    )?;
    Ok(ready)
}

/// Build observer (as [`build`]) and the `bench` example, the measuring tools the benches drive
/// (kept out of the shipped binary); returns the example's path.
fn build_bench_tools() -> Result<PathBuf> {
    let ready = build()?;
    cmd::phase("cargo build --release -p observer --example bench", || {
        let mut c = cargo();
        c.args(["build", "--release", "-p", "observer", "--example", "bench"]);
        ready.apply(&mut c);
        cmd::run(&mut c).context("building the bench example failed (see cargo's output above)")
    })?;
    Ok(target_dir()?.join("release").join("examples").join("bench"))
}

fn test(args: &[OsString]) -> Result<i32> {
    let ready = setup_lenient()?;
    deploy_check()?;
    // The whole workspace but the BPF crate, unless the caller picked packages (with
    // `--workspace`, cargo would quietly ignore their -p).
    let picks_packages = args
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "-p" || a == "--package" || a.to_string_lossy().starts_with("--package="));
    let cargo_test = |extra: &[&str]| {
        let mut c = cargo();
        c.args(["test", "--release"]).args(extra);
        if !picks_packages {
            c.args(["--workspace", "--exclude", EBPF_CRATE]);
        }
        c.args(args);
        ready.apply(&mut c);
        c
    };
    build_for_tests(&ready, picks_packages)?;
    cmd::phase("cargo test --no-run", || {
        cmd::run(&mut cargo_test(&["--no-run"])).context(
            "building observer and its tests failed (see cargo's output above); `cargo xtask \
             setup` checks the toolchain",
        )
    })?;
    let target = target_dir()?;
    // The image of the binary the tests run, for tests/tests/image.rs.
    if cmd::is_root() {
        let bin = target.join("release").join("observer");
        cmd::phase("image", || image::build(&root(), &target, &bin))?;
    }
    // Every phase runs even when one before it failed, and every test binary even when one
    // fails: a CI log then shows every failure at once, and ends with the list of what failed.
    let mut failed: Vec<String> = Vec::new();
    let skips = skips::Skips::fresh(&target)?;
    let mut c = cargo_test(&["--no-fail-fast"]);
    c.env(test_support::SKIPS_FILE, skips.path());
    if !cmd::is_root() {
        eprintln!("xtask: note: not root, so the integration tests will skip");
    }
    eprintln!("xtask: == {}", cmd::describe(&c));
    match cmd::run_status(&mut c) {
        Ok(0) => {}
        Ok(code) => failed.push(format!("host tests (cargo test exited with {code})")),
        Err(e) => failed.push(format!("host tests ({e:#})")),
    }
    // Every fuzz target for a short while (a crash fails the run), and the kprobe and fentry
    // backends in the guests (the host's kernel has neither). The guests wait on an emulated
    // clock more than they compute, so the fuzz step runs beside them (niced) when both run.
    let fuzz = if !args.is_empty()
        || std::env::var_os("OBSERVER_SKIP_FUZZ").is_some_and(|v| v == "1")
    {
        println!("fuzz: skipped: it runs after the whole test suite (no ARGS), unless OBSERVER_SKIP_FUZZ=1");
        false
    } else {
        true
    };
    let vm = if std::env::var_os("OBSERVER_SKIP_VM").is_some_and(|v| v == "1") {
        println!("vm-test: skipped: OBSERVER_SKIP_VM=1");
        false
    } else if !args.is_empty() || !cmd::is_root() {
        println!("vm-test: skipped: it runs after the whole test suite (no ARGS), as root");
        false
    } else {
        true
    };
    let mut beside = None;
    if fuzz && vm {
        match fuzz::Background::start(&root()) {
            Ok(b) => beside = Some(b),
            Err(e) => failed.push(format!("fuzz ({e:#})")),
        }
    } else if fuzz {
        if let Err(e) = cmd::phase("fuzz", || fuzz::test_step(&root())) {
            failed.push(format!("fuzz ({e:#})"));
        }
    }
    if vm {
        match vm::vm_test_counting_skips(&ready, Some(&skips)) {
            Ok(None | Some(0)) => {}
            Ok(Some(_)) => failed.push("vm-test (a guest's tests failed; see above)".into()),
            Err(e) => failed.push(format!("vm-test ({e:#})")),
        }
    }
    if let Some(b) = beside {
        if let Err(e) = b.finish() {
            failed.push(format!("fuzz ({e:#})"));
        }
    }
    skips.report();
    Ok(phases_summary(&failed))
}

/// The binaries the integration tests run (release), which `cargo test` does not build for
/// them, as they are a package of their own: observer's binary and its `bench` example. With
/// the packages the test run will have, so that features unify as they will there and no shared
/// dependency compiles twice; observer alone when the caller picked packages.
fn build_for_tests(ready: &setup::Ready, picks_packages: bool) -> Result<()> {
    let packages: &[&str] = if picks_packages {
        &["-p", "observer"]
    } else {
        &["--workspace", "--exclude", EBPF_CRATE]
    };
    let mut c = cargo();
    c.args(["build", "--release"])
        .args(packages)
        .args(["--bins", "--examples"]);
    ready.apply(&mut c);
    let name = format!(
        "cargo build --release {} --bins --examples",
        packages.join(" ")
    );
    cmd::phase(&name, || {
        cmd::run(&mut c).context("building observer and its bench example failed (see above)")
    })
}

/// Prints which phases of `cargo xtask test` failed (or that none did); the exit status.
fn phases_summary(failed: &[String]) -> i32 {
    if failed.is_empty() {
        eprintln!("xtask: every test phase passed");
        return 0;
    }
    eprintln!("xtask: {} test phase(s) failed:", failed.len());
    for f in failed {
        eprintln!("xtask:   - {f}");
    }
    1
}

fn tail(args: &[OsString]) -> Result<i32> {
    build()?;
    let bin = target_dir()?.join("release").join("observer");
    if !cmd::is_executable(&bin) {
        bail!(
            "{} was not built; run `cargo xtask build` and look at its output",
            bin.display()
        );
    }
    let mut c = if cmd::is_root() {
        Command::new(&bin)
    } else if let Some(sudo) = cmd::which_in_path("sudo") {
        eprintln!("xtask: observer needs root: running it through sudo");
        let mut c = Command::new(sudo);
        c.arg("--").arg(&bin);
        c
    } else {
        bail!(
            "observer needs root (it loads eBPF programs and reads netfilter state) and there is \
             no sudo here; run as root: {} tail",
            bin.display()
        );
    };
    c.arg("tail").args(args);
    eprintln!("xtask: == {}", cmd::describe(&c));
    // exec: observer replaces xtask, so signals and the exit status are observer's own.
    let err = c.exec();
    Err(err).with_context(|| format!("could not start `{}`", cmd::describe(&c)))
}

/// cargo's target directory (honours CARGO_TARGET_DIR and .cargo/config.toml).
fn target_dir() -> Result<PathBuf> {
    let json = cmd::output(cargo().args(["metadata", "--format-version", "1", "--no-deps"]))
        .context("asking cargo for the target directory")?;
    let meta: serde_json::Value =
        serde_json::from_str(&json).context("parsing `cargo metadata` output")?;
    meta.get("target_directory")
        .and_then(|v| v.as_str())
        .map(PathBuf::from)
        .context("`cargo metadata` printed no target_directory")
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn a_failed_phase_fails_the_run() {
        assert_eq!(phases_summary(&[]), 0);
        assert_eq!(
            phases_summary(&["host tests (cargo test exited with 101)".into()]),
            1
        );
    }

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn tail_passes_hyphen_args_through() -> Result<()> {
        let cli = Cli::try_parse_from(["xtask", "tail", "--json", "--netns", "x"])?;
        let Verb::Tail(p) = cli.verb else {
            bail!("not tail")
        };
        assert_eq!(p.args, ["--json", "--netns", "x"]);
        Ok(())
    }

    #[test]
    fn test_passes_args_after_double_dash() -> Result<()> {
        let cli =
            Cli::try_parse_from(["xtask", "test", "--", "-p", "observer", "--", "--nocapture"])?;
        let Verb::Test(p) = cli.verb else {
            bail!("not test")
        };
        assert_eq!(p.args, ["-p", "observer", "--", "--nocapture"]);
        Ok(())
    }
}
