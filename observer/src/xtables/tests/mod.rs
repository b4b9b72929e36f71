//! Root tests of the x_tables reader: live tables in throw-away network namespaces, written with
//! the real iptables-legacy, arptables-legacy and ebtables-legacy, read back through getsockopt
//! and compared with what their `-save` tools print. Without root or the tools they print
//! `skipping: <reason>`. The tests on captured and hand-built blobs are the decoder crate's.

use observer_rules::xtables::decode::{self, parse_info};
use observer_rules::xtables::testblob::{self, C, R, T};

use super::*;
use crate::ruleset::Op;

/// The `-A` lines of a table, as `iptables-save` prints them.
fn rule_lines(t: &XtTable) -> Vec<String> {
    t.save_text()
        .lines()
        .filter(|l| l.starts_with("-A "))
        .map(String::from)
        .collect()
}

mod arp_live;
mod corpus;
mod ebt_atomic;
pub(crate) mod live;
mod nfacct;
pub(crate) mod suite;
