//! Symbol tables nft reads from the system rather than carrying built in: protocol names from
//! `/etc/protocols` (nft asks `getprotobynumber`), device groups from `/etc/iproute2/group`
//! and routing realms from `/etc/iproute2/rt_realms`. Each file is read once; a missing file
//! leaves its values printed as numbers, as nft does.

use std::collections::HashMap;
use std::sync::OnceLock;

fn load(path: &str, name_first: bool) -> HashMap<u64, String> {
    let mut out = HashMap::new();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let mut words = line.split_whitespace();
        let (Some(a), Some(b)) = (words.next(), words.next()) else {
            continue;
        };
        let (name, num) = if name_first { (a, b) } else { (b, a) };
        let num = match num.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => num.parse().ok(),
        };
        if let Some(n) = num {
            // The first name given for a number wins (as getprotobynumber returns it).
            out.entry(n).or_insert_with(|| name.to_string());
        }
    }
    out
}

/// The name of an IP protocol number, from `/etc/protocols`.
pub(crate) fn protocol(n: u64) -> Option<&'static str> {
    static T: OnceLock<HashMap<u64, String>> = OnceLock::new();
    T.get_or_init(|| load("/etc/protocols", true))
        .get(&n)
        .map(String::as_str)
}

/// The name of a device group, from `/etc/iproute2/group`.
pub(crate) fn devgroup(n: u64) -> Option<&'static str> {
    static T: OnceLock<HashMap<u64, String>> = OnceLock::new();
    T.get_or_init(|| load("/etc/iproute2/group", false))
        .get(&n)
        .map(String::as_str)
}

/// The name of a routing realm, from `/etc/iproute2/rt_realms`.
pub(crate) fn realm(n: u64) -> Option<&'static str> {
    static T: OnceLock<HashMap<u64, String>> = OnceLock::new();
    T.get_or_init(|| load("/etc/iproute2/rt_realms", false))
        .get(&n)
        .map(String::as_str)
}
