//! The bench's arithmetic and number formats: milliseconds between instants, the median and the
//! distribution (min, median, nearest-rank p99, max) of a set of samples, MiB and thousands
//! separators.

use std::time::{Duration, Instant};

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `later - earlier` in ms, negative when `later` is in fact earlier.
pub(crate) fn signed_ms(later: Instant, earlier: Instant) -> f64 {
    match later.checked_duration_since(earlier) {
        Some(d) => ms(d),
        None => -ms(earlier - later),
    }
}

pub(crate) struct Dist {
    pub(crate) n: usize,
    pub(crate) min: f64,
    pub(crate) median: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
}

/// The median (the mean of the middle two for an even count); NaN when `v` is empty.
pub(crate) fn median(v: &[f64]) -> f64 {
    median_opt(v).unwrap_or(f64::NAN)
}

/// The median (the mean of the middle two for an even count); `None` when `v` is empty.
pub(crate) fn median_opt(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2]),
        n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

impl Dist {
    pub(crate) fn of(v: &[f64]) -> Option<Dist> {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        // Nearest rank: the smallest value with at least 99% of the values at or below it.
        let p99 = *s.get((n * 99).div_ceil(100).max(1) - 1)?;
        Some(Dist {
            n,
            min: s[0],
            median: median(&s),
            p99,
            max: s[n - 1],
        })
    }
}

/// The nearest-rank percentile `p` (in (0, 100]) of `v`: the smallest value with at least `p` %
/// of the values at or below it; `None` when `v` is empty.
pub(crate) fn percentile(v: &[f64], p: f64) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let rank = ((p / 100.0) * n as f64).ceil().max(1.0) as usize;
    s.get(rank.min(n).checked_sub(1)?).copied()
}

pub(crate) fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string().into_bytes();
    let groups: Vec<&[u8]> = digits.rchunks(3).rev().collect();
    groups
        .iter()
        .map(|g| String::from_utf8_lossy(g))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p99_is_nearest_rank() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        let d = Dist::of(&v).unwrap();
        assert_eq!((d.min, d.p99, d.max), (1.0, 198.0, 200.0));
        assert_eq!(d.median, 100.5);
        let d = Dist::of(&[3.0, -1.0, 2.0]).unwrap();
        assert_eq!((d.min, d.median, d.p99, d.max), (-1.0, 2.0, 3.0, 3.0));
        assert!(Dist::of(&[]).is_none());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=20).rev().map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(10.0));
        assert_eq!(percentile(&v, 95.0), Some(19.0));
        assert_eq!(percentile(&v, 100.0), Some(20.0));
        assert_eq!(percentile(&[7.0, 3.0, 5.0], 95.0), Some(7.0));
        assert_eq!(percentile(&[4.0], 50.0), Some(4.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(20_003), "20,003");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000_000), "1,000,000");
    }
}
