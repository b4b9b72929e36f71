//! The soak's measurements: once a minute a [`Row`] (RSS, open descriptors at a quiet moment,
//! CPU, record size, the counters of `/metrics`, the rate streamed, the SSE client's count), and
//! the line printed for it.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::thread;
use std::time::Duration;

use super::Shared;
use crate::bench::harness::http_get;

/// One minute's line.
#[derive(Clone)]
pub(super) struct Row {
    pub(super) minute: u64,
    pub(super) rss_mib: f64,
    pub(super) fds: usize,
    pub(super) cpu_pct: f64,
    pub(super) record_mib: f64,
    pub(super) dropped: u64,
    pub(super) failed: u64,
    pub(super) gaps: u64,
    pub(super) lost: u64,
    pub(super) rate: f64,
    /// Of `rate`, the changes of namespaces not the soak's.
    pub(super) other_rate: f64,
    pub(super) sse_gaps: u64,
    pub(super) sse_dups: u64,
}

/// Counters of one scrape of `/metrics`.
#[derive(Default, Clone, Copy)]
pub(super) struct Scrape {
    pub(super) dropped: u64,
    pub(super) failed: u64,
    pub(super) expired: u64,
    pub(super) written: u64,
    pub(super) gaps: u64,
    pub(super) lost: u64,
    /// `observer_changes_total` of each backend.
    pub(super) nft: u64,
    pub(super) legacy: u64,
}

/// The sum of every series of `name` (with its labels when given in `name`).
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The sum of the series whose name and first labels are `prefix`.
fn labelled(text: &str, prefix: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

pub(super) fn scrape(port: u16) -> Option<Scrape> {
    let text = http_get(port, "/metrics").ok()?;
    if !text.contains("observer_ready") {
        return None;
    }
    let rows = |o: &str| {
        metric(
            &text,
            &format!("observer_record_rows_total{{outcome=\"{o}\"}}"),
        )
    };
    Some(Scrape {
        dropped: rows("dropped"),
        failed: rows("failed"),
        expired: rows("expired"),
        written: rows("written"),
        gaps: metric(&text, "observer_gaps_total"),
        lost: metric(&text, "observer_kernel_records_lost_total"),
        nft: labelled(&text, "observer_changes_total{backend=\"nft\""),
        legacy: labelled(&text, "observer_changes_total{backend=\"legacy\""),
    })
}

/// What each open descriptor is (digits of `socket:[123]` dropped), and how many of each.
fn fd_kinds(pid: u32) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for e in fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let target = fs::read_link(e.path())
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "?".into());
        let kind = match target.find('[') {
            Some(i) if target.ends_with(']') => format!("{}[]", &target[..i]),
            _ => target,
        };
        *kinds.entry(kind).or_insert(0) += 1;
    }
    kinds
}

/// Descriptors open at a quiet moment: no churn namespace alive (the lock), and the least of a
/// few reads (an SSE reconnection or a scrape holds one more for a moment).
pub(super) fn quiet_fds(sh: &Shared, pid: u32, reads: usize) -> (usize, BTreeMap<String, usize>) {
    let _quiet = sh.churn_quiet.lock();
    thread::sleep(Duration::from_millis(300));
    let mut best = (usize::MAX, BTreeMap::new());
    for i in 0..reads {
        if i > 0 {
            thread::sleep(Duration::from_millis(100));
        }
        let k = fd_kinds(pid);
        let n = k.values().sum();
        if n < best.0 {
            best = (n, k);
        }
    }
    best
}

pub(super) fn record_mib(dir: &Path) -> f64 {
    let size = |name: &str| fs::metadata(dir.join(name)).map_or(0, |m| m.len());
    (size("record.db") + size("record.db-wal")) as f64 / (1024.0 * 1024.0)
}

pub(super) const MIB: f64 = 1024.0 * 1024.0;

pub(super) fn print_header() {
    println!(
        "soak: {:>6} {:>8} {:>5} {:>6} {:>10} {:>14} {:>5} {:>5} {:>9} {:>8} {:>10}",
        "minute",
        "RSS MiB",
        "fds",
        "CPU %",
        "record MiB",
        "dropped/failed",
        "gaps",
        "lost",
        "changes/s",
        "other/s",
        "SSE gap/dup"
    );
}

pub(super) fn print_row(r: &Row) {
    println!(
        "soak: {:>6} {:>8.1} {:>5} {:>6.1} {:>10.1} {:>14} {:>5} {:>5} {:>9.0} {:>8.0} {:>10}",
        r.minute,
        r.rss_mib,
        r.fds,
        r.cpu_pct,
        r.record_mib,
        format!("{}/{}", r.dropped, r.failed),
        r.gaps,
        r.lost,
        r.rate,
        r.other_rate,
        format!("{}/{}", r.sse_gaps, r.sse_dups),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_metrics() {
        let m = "observer_gaps_total{cause=\"ringbuf\"} 1\nobserver_gaps_total{cause=\"netlink\"} 2\n\
                 observer_kernel_records_lost_total 3\nobserver_record_rows_total{outcome=\"dropped\"} 4\n";
        assert_eq!(metric(m, "observer_gaps_total"), 3);
        assert_eq!(metric(m, "observer_kernel_records_lost_total"), 3);
        assert_eq!(
            metric(m, "observer_record_rows_total{outcome=\"dropped\"}"),
            4
        );
        assert_eq!(metric(m, "observer_gaps"), 0);
    }
}
