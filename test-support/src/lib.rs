//! What observer's tests and benchmarks share, in one place:
//!
//! - [`skip`], [`skip_reason`] and [`skip_unless!`]: a test that cannot run here (no root, a
//!   program missing) says why and returns; under CI (`CI=true`) it fails instead, so that a CI
//!   run never reports a pass it did not earn. Each skip is also written to the file
//!   `OBSERVER_SKIPS_FILE` names, so that a run can count them.
//! - [`Netns`]: a network namespace made for one test or benchmark and deleted when dropped,
//!   also when the test fails, so that nothing is ever changed in the host's namespace.
//! - [`json_lines`] and [`wait_for`]: a child's stdout read as JSON lines, and a line waited for
//!   with a deadline that names what did not arrive.
//! - [`save_rules`]: an `iptables-save` text as rules by table and chain.
//! - [`observer_bin`] and [`bench_bin`]: the binaries under test, found beside the test
//!   executable (or `OBSERVER_BIN`).
//!
//! With the `integration` feature, the integration tests' pieces (the `observer-tests` package,
//! in the workspace's `tests/`): `Observer` (`observer tail --json`), `Daemon` (`observer run`)
//! and `query`, `Writer` scripts that make a test's changes as a named actor, `Cgroup`s, the
//! hook backend a run forces (`forced_hooks`), HTTP reads (`get`, `metric`), certificates
//! (`Ca`) and NATS streams read back (`stream_messages`).
//!
//! The integration tests need root and the real tools (nft, iptables-legacy, iptables-nft, ip);
//! without them each test skips (see [`skip`]).

mod bin;
mod ci;
mod lines;
mod netns;
mod ports;
mod save;

#[cfg(feature = "integration")]
mod certs;
#[cfg(feature = "integration")]
mod cgroup;
#[cfg(feature = "integration")]
mod daemon;
#[cfg(feature = "integration")]
mod firewalld;
#[cfg(feature = "integration")]
mod hooks;
#[cfg(feature = "integration")]
mod http;
#[cfg(feature = "integration")]
mod nats;
#[cfg(feature = "integration")]
mod persistent;
#[cfg(feature = "integration")]
mod smallfs;
#[cfg(feature = "integration")]
mod tail;
#[cfg(feature = "integration")]
mod writer;

pub use bin::{bench_bin, observer_bin, OBSERVER_BIN};
pub use ci::{in_ci, skip, skip_reason, SKIPS_FILE};
pub use lines::{ancestry_comms, json_lines, json_lines_paced, wait_for, wait_within, WAIT};
pub use netns::{Netns, NetnsError};
pub use ports::free_port;
pub use save::save_rules;

#[cfg(feature = "integration")]
pub use certs::{write_pair, Ca};
#[cfg(feature = "integration")]
pub use cgroup::{cgroup2_mount, Cgroup};
#[cfg(feature = "integration")]
pub use daemon::{query, Daemon, KilledOnDrop};
#[cfg(feature = "integration")]
pub use firewalld::{copy_dir, in_private_mounts, private_mounts, Bus, Firewalld};
#[cfg(feature = "integration")]
pub use hooks::{forced_hooks, hooks_source, legacy_source, slowdown, xt_fallback};
#[cfg(feature = "integration")]
pub use http::{get, metric};
#[cfg(feature = "integration")]
pub use nats::{stream_messages, StreamMessage};
#[cfg(feature = "integration")]
pub use persistent::{
    netfilter_persistent_flush, netfilter_persistent_reload, netfilter_persistent_unpacked,
    NETFILTER_PERSISTENT,
};
#[cfg(feature = "integration")]
pub use smallfs::{fill, legacy_rules, SmallFs};
#[cfg(feature = "integration")]
pub use tail::{change, is_change, is_incident, Observer};
#[cfg(feature = "integration")]
pub use writer::{run, Writer};
