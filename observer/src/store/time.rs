//! Time as the record keeps it: nanoseconds since the epoch, read from RFC 3339 or from a
//! duration ago.

/// Now, in nanoseconds since the epoch.
pub fn now_ns() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp_nanos() as i64
}

/// A relative (`2h`: that long ago) or RFC 3339 time, as nanoseconds since the epoch.
pub fn parse_time(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if s == "now" {
        return Ok(now_ns());
    }
    if let Some(t) = parse_time_ns(s) {
        return Ok(t);
    }
    let ago = humantime::parse_duration(s.trim_end_matches(" ago")).map_err(|_| {
        format!("`{s}` is neither a duration like 2h or 7d nor an RFC 3339 time like 2026-11-21T03:12:00Z")
    })?;
    Ok(now_ns() - ago.as_nanos().min(i64::MAX as u128) as i64)
}

/// Nanoseconds since the epoch of an RFC 3339 time (the `time` of a record).
pub fn parse_time_ns(s: &str) -> Option<i64> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|t| t.unix_timestamp_nanos() as i64)
}
