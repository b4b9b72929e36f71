//! Ports for the daemons a test starts.
//!
//! A port the kernel hands out as "free" (`bind :0`) is an ephemeral port: between the moment it
//! is released and the moment the daemon binds it, any outgoing connection on the machine (a
//! client of another test, a publisher reconnecting) may take it as its source port, and the
//! daemon fails with "Address already in use". So ports are taken below the kernel's ephemeral
//! range, where no outgoing connection is ever given one, and each is handed out once per
//! process.

use std::collections::HashSet;
use std::sync::Mutex;

/// Where ports are looked for when the ephemeral range leaves no room below it.
const FALLBACK: (u16, u16) = (20_000, 30_000);

/// The lowest port handed out: below it lie the well-known and registered services.
const LOWEST: u16 = 10_000;

static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A TCP port free on 127.0.0.1 now, outside the ephemeral range and not given before by this
/// process.
pub fn free_port() -> u16 {
    let (lo, hi) = candidates();
    let span = u32::from(hi - lo) + 1;
    // Test binaries run one after the other and each starts its own walk: a start of their own
    // keeps them away from ports another one's daemons may still hold in TIME_WAIT.
    let start = (std::process::id().wrapping_mul(7919)) % span;
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    for i in 0..span {
        let port = lo + ((start + i) % span) as u16;
        if given.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    panic!("no free TCP port on 127.0.0.1 between {lo} and {hi}")
}

/// The ports to choose from: those below the ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`), or a fixed span when it leaves too few.
fn candidates() -> (u16, u16) {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok();
    below_ephemeral(range.as_deref()).unwrap_or(FALLBACK)
}

fn below_ephemeral(range: Option<&str>) -> Option<(u16, u16)> {
    let low: u16 = range?.split_whitespace().next()?.parse().ok()?;
    (low > LOWEST + 1_000).then(|| (LOWEST, low - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_lie_below_the_ephemeral_range() {
        assert_eq!(
            below_ephemeral(Some("32768\t60999\n")),
            Some((10_000, 32_767))
        );
        // A range that starts low leaves no room: a fixed span is used.
        assert_eq!(below_ephemeral(Some("1024 65535")), None);
        assert_eq!(below_ephemeral(None), None);
        assert_eq!(below_ephemeral(Some("junk")), None);
    }

    #[test]
    fn a_port_is_given_once_and_is_free() {
        let a = free_port();
        let b = free_port();
        assert_ne!(a, b);
        let (lo, hi) = candidates();
        assert!((lo..=hi).contains(&a) && (lo..=hi).contains(&b));
        std::net::TcpListener::bind(("127.0.0.1", a)).expect("free");
    }
}
