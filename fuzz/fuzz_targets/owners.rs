//! The `--owners` file: TOML or YAML (the first byte's low bit picks, as the file's extension
//! does) parsed by `incidents::owners::parse_file` and put in front of the catalog (through
//! `observer::fuzzing::owners`), then asked who owns a few chains and tables.
#![no_main]

use libfuzzer_sys::fuzz_target;
use observer::ruleset::{Backend, Family};

fuzz_target!(|data: &[u8]| {
    let Some((selector, text)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let ext = if selector & 1 == 0 { "toml" } else { "yaml" };
    let Ok(o) = observer::fuzzing::owners(ext, text) else {
        return;
    };
    for chain in ["KUBE-SVC-X", "cali-FORWARD", "INPUT", ""] {
        std::hint::black_box(o.claim(chain));
        std::hint::black_box(o.claim_in(Backend::Nft, Family::Inet, "filter", chain));
    }
    std::hint::black_box(o.canonical("calico-node"));
    std::hint::black_box(o.writes_for("firewalld", "dockerd"));
});
