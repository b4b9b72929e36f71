//! Time, one type: [`Timestamp`], nanoseconds since the Unix epoch in UTC.
//!
//! Records carry a `Timestamp`; it becomes text only where a line is written: RFC 3339 with
//! nanoseconds in JSON (`2026-11-21T05:42:37.123456789Z`, always nine digits, always `Z`), a
//! clock on the screen, an integer in the record's rows. The kernel's times (the boot clock of
//! `bpf_ktime_get_boot_ns`) become a `Timestamp` once, in [`Timestamp::from_boot_ns`]. Time
//! arguments (`--since 2h`, `--at 2026-11-21T03:12:00Z`, `now`) are read by
//! [`Timestamp::parse_arg`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const NS_PER_S: i64 = 1_000_000_000;

/// A moment, as nanoseconds since 1970-01-01T00:00:00Z (1677 to 2262).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

/// A time that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// Not RFC 3339 (the `time` of a line).
    #[error("`{0}` is not an RFC 3339 time like 2026-11-21T03:12:00Z")]
    NotRfc3339(String),
    /// A time argument that is neither a duration ago, `now`, nor RFC 3339.
    #[error(
        "`{0}` is neither a duration like 2h or 7d nor an RFC 3339 time like 2026-11-21T03:12:00Z"
    )]
    NotTimeArg(String),
}

impl Timestamp {
    /// The epoch itself: the time of a line not stamped yet.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// Now, on the wall clock.
    pub fn now() -> Timestamp {
        Timestamp::from_unix_nanos_i128(time::OffsetDateTime::now_utc().unix_timestamp_nanos())
    }

    pub const fn from_unix_nanos(ns: i64) -> Timestamp {
        Timestamp(ns)
    }

    /// Nanoseconds out of `i64`'s range are clamped to it.
    fn from_unix_nanos_i128(ns: i128) -> Timestamp {
        Timestamp(ns.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
    }

    /// Nanoseconds since the epoch.
    pub const fn unix_nanos(self) -> i64 {
        self.0
    }

    /// The wall-clock time of a boot-clock stamp (`bpf_ktime_get_boot_ns()`, the kernel
    /// records' clock): the two clocks are read together and the stamp moved by their offset.
    /// If the clocks cannot be read, now.
    pub fn from_boot_ns(boot_ns: u64) -> Timestamp {
        use nix::time::ClockId;
        let (Some(boot), Some(real)) = (
            clock_ns(ClockId::CLOCK_BOOTTIME),
            clock_ns(ClockId::CLOCK_REALTIME),
        ) else {
            return Timestamp::now();
        };
        Timestamp::from_unix_nanos_i128(real - boot + boot_ns as i128)
    }

    /// Reads RFC 3339 (any offset; fractions of a second optional).
    pub fn parse(s: &str) -> Result<Timestamp, TimeError> {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
            .map(|t| Timestamp::from_unix_nanos_i128(t.unix_timestamp_nanos()))
            .map_err(|_| TimeError::NotRfc3339(s.to_string()))
    }

    /// A time argument: `now`, a duration ago (`2h`, `7d`, `90s ago`), or RFC 3339.
    pub fn parse_arg(s: &str) -> Result<Timestamp, TimeError> {
        let s = s.trim();
        if s == "now" {
            return Ok(Timestamp::now());
        }
        if let Ok(t) = Timestamp::parse(s) {
            return Ok(t);
        }
        let ago = humantime::parse_duration(s.trim_end_matches(" ago"))
            .map_err(|_| TimeError::NotTimeArg(s.to_string()))?;
        Ok(Timestamp::now().saturating_sub(ago))
    }

    /// `d` earlier (the epoch's range permitting).
    pub fn saturating_sub(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_sub(d.as_nanos().min(i64::MAX as u128) as i64),
        )
    }

    /// `d` later (the epoch's range permitting).
    pub fn saturating_add(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_add(d.as_nanos().min(i64::MAX as u128) as i64),
        )
    }

    /// How long after `earlier` this is (zero when `earlier` is later).
    pub fn elapsed_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0).max(0) as u64)
    }

    /// Nanoseconds from `earlier` to `self` (negative when `earlier` is later).
    pub fn nanos_since(self, earlier: Timestamp) -> i64 {
        self.0.saturating_sub(earlier.0)
    }

    /// Hours, minutes, seconds and nanoseconds of the day, `offset_s` east of UTC.
    pub fn time_of_day(self, offset_s: i64) -> (u32, u32, u32, u32) {
        let secs = self.0.div_euclid(NS_PER_S) + offset_s;
        let sub = self.0.rem_euclid(NS_PER_S) as u32;
        let day = secs.rem_euclid(86_400) as u32;
        (day / 3600, day / 60 % 60, day % 60, sub)
    }

    /// `YYYY-MM-DD`, in UTC.
    pub fn date(self) -> String {
        let (y, m, d, ..) = self.fields();
        format!("{y:04}-{m:02}-{d:02}")
    }

    /// Year, month, day, hour, minute, second, nanosecond, in UTC.
    fn fields(self) -> (i32, u8, u8, u8, u8, u8, u32) {
        match time::OffsetDateTime::from_unix_timestamp_nanos(self.0 as i128) {
            Ok(t) => (
                t.year(),
                t.month() as u8,
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                t.nanosecond(),
            ),
            // Out of the time crate's range: cannot happen for an i64 of nanoseconds.
            Err(_) => (1970, 1, 1, 0, 0, 0, 0),
        }
    }
}

/// Now on the boot clock (`CLOCK_BOOTTIME`), the clock of the kernel records' stamps, in
/// nanoseconds; 0 if it cannot be read.
pub fn boot_now_ns() -> u64 {
    clock_ns(nix::time::ClockId::CLOCK_BOOTTIME).map_or(0, |ns| ns as u64)
}

/// A clock's reading in nanoseconds.
fn clock_ns(clock: nix::time::ClockId) -> Option<i128> {
    nix::time::clock_gettime(clock)
        .ok()
        .map(|t| t.tv_sec() as i128 * 1_000_000_000 + t.tv_nsec() as i128)
}

impl fmt::Display for Timestamp {
    /// RFC 3339 with nanoseconds, in UTC: `2026-11-21T05:42:37.123456789Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, mo, d, h, mi, s, ns) = self.fields();
        write!(f, "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ns:09}Z")
    }
}

impl FromStr for Timestamp {
    type Err = TimeError;

    fn from_str(s: &str) -> Result<Timestamp, TimeError> {
        Timestamp::parse(s)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        struct Rfc3339;
        impl serde::de::Visitor<'_> for Rfc3339 {
            type Value = Timestamp;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 time")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Timestamp, E> {
                Timestamp::parse(s).map_err(E::custom)
            }
        }
        d.deserialize_str(Rfc3339)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_rfc3339_with_nine_digits_in_utc() {
        let t = Timestamp::from_unix_nanos(1_700_000_000_123_456_789);
        assert_eq!(t.to_string(), "2023-11-14T22:13:20.123456789Z");
        assert_eq!(
            Timestamp::from_unix_nanos(5).to_string(),
            "1970-01-01T00:00:00.000000005Z"
        );
        assert_eq!(
            Timestamp::from_unix_nanos(-1).to_string(),
            "1969-12-31T23:59:59.999999999Z"
        );
        assert_eq!(t.date(), "2023-11-14");
    }

    #[test]
    fn reads_back_what_it_writes_and_other_offsets() {
        let t = Timestamp::from_unix_nanos(1_700_000_000_123_456_789);
        assert_eq!(Timestamp::parse(&t.to_string()), Ok(t));
        assert_eq!(
            Timestamp::parse("2023-11-14T23:13:20.123456789+01:00"),
            Ok(t)
        );
        assert_eq!(
            Timestamp::parse("2023-11-14T22:13:20Z").map(Timestamp::unix_nanos),
            Ok(1_700_000_000_000_000_000)
        );
        assert_eq!(
            Timestamp::parse("yesterday"),
            Err(TimeError::NotRfc3339("yesterday".into()))
        );
    }

    #[test]
    fn json_is_the_rfc3339_string() {
        let t = Timestamp::from_unix_nanos(1_700_000_000_000_000_001);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, "\"2023-11-14T22:13:20.000000001Z\"");
        assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), t);
        let bad = serde_json::from_str::<Timestamp>("\"t12\"").unwrap_err();
        assert!(
            bad.to_string().contains("`t12` is not an RFC 3339 time"),
            "{bad}"
        );
        assert!(serde_json::from_str::<Timestamp>("12").is_err());
    }

    #[test]
    fn arguments_are_now_a_duration_ago_or_rfc3339() {
        let before = Timestamp::now();
        let ago = Timestamp::parse_arg("2h").unwrap();
        let want = before.saturating_sub(Duration::from_secs(7200));
        assert!(
            ago.nanos_since(want).abs() < 60 * NS_PER_S,
            "{ago} vs {want}"
        );
        let d = Timestamp::parse_arg("90s ago").unwrap().nanos_since(before);
        assert!((-90 * NS_PER_S..-89 * NS_PER_S).contains(&d), "{d}");
        assert!(Timestamp::parse_arg("now").unwrap() >= before);
        assert_eq!(
            Timestamp::parse_arg(" 2026-11-21T03:12:00Z ")
                .unwrap()
                .to_string(),
            "2026-11-21T03:12:00.000000000Z"
        );
        let e = Timestamp::parse_arg("soon").unwrap_err();
        assert_eq!(
            e.to_string(),
            "`soon` is neither a duration like 2h or 7d nor an RFC 3339 time like 2026-11-21T03:12:00Z"
        );
    }

    #[test]
    fn boot_clock_stamps_map_to_now() {
        let ns = boot_now_ns();
        assert!(ns > 0, "the boot clock reads");
        let t = Timestamp::from_boot_ns(ns);
        assert!(t.nanos_since(Timestamp::now()).abs() < NS_PER_S, "{t}");
        let earlier = Timestamp::from_boot_ns(ns - 5 * NS_PER_S as u64);
        assert_eq!((t.nanos_since(earlier) + NS_PER_S / 2) / NS_PER_S, 5);
    }

    #[test]
    fn time_of_day_moves_by_the_offset() {
        let t = Timestamp::parse("2026-11-21T05:42:37.123456789Z").unwrap();
        assert_eq!(t.time_of_day(0), (5, 42, 37, 123_456_789));
        assert_eq!(t.time_of_day(3600), (6, 42, 37, 123_456_789));
        assert_eq!(t.time_of_day(-6 * 3600), (23, 42, 37, 123_456_789));
    }
}
