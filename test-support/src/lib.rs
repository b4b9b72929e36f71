//! What observer's tests and benchmarks share, in one place:
//!
//! - [`skip`] and [`skip_reason`]: a test that cannot run here (no root, a program missing) says
//!   why and returns; under CI (`CI=true`) it fails instead, so that a CI run never reports a
//!   pass it did not earn. Each skip is also written to the file `OBSERVER_SKIPS_FILE` names,
//!   so that a run can count them.
//! - [`Netns`]: a network namespace made for one test or benchmark and deleted when dropped,
//!   also when the test fails, so that nothing is ever changed in the host's namespace.
//! - [`json_lines`] and [`wait_for`]: a child's stdout read as JSON lines, and a line waited for
//!   with a deadline that names what did not arrive.
//! - [`save_rules`]: an `iptables-save` text as rules by table and chain.

mod ci;
mod lines;
mod netns;
mod save;

pub use ci::{in_ci, skip, skip_reason, SKIPS_FILE};
pub use lines::{free_port, json_lines, wait_for, wait_within, WAIT};
pub use netns::{Netns, NetnsError};
pub use save::save_rules;
