//! The soak's SSE client: follows `/events` from the start, drops its connection every 20 to
//! 30 s and resumes after the last `seq` it saw, alternately with `Last-Event-ID` and
//! `?after=`, counting into [`Shared`]'s [`SseStats`](super::SseStats) the gaps, duplicates and
//! ids that differ from their `seq`.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::daemon::number_after;
use super::{Shared, SSE_HOLD_S};

/// Follows `/events` from the start (`?after=0`), drops the connection every 20 to 30 s and
/// resumes after the last `seq` it saw, alternately with `Last-Event-ID` and `?after=`.
pub(super) fn sse(sh: &Shared, port: u16) {
    let st = &sh.sse;
    let mut rng = time::OffsetDateTime::now_utc().unix_timestamp_nanos() as u64 | 1;
    let mut by_header = false;
    while !sh.stop_sse.load(Ordering::Relaxed) {
        let last = st.last.load(Ordering::SeqCst);
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let hold = Duration::from_secs(SSE_HOLD_S) + Duration::from_millis(rng % 10_000);
        let request = if by_header {
            format!("GET /events HTTP/1.0\r\nHost: 127.0.0.1\r\nLast-Event-ID: {last}\r\n\r\n")
        } else {
            format!("GET /events?after={last} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        };
        by_header = !by_header;
        if let Err(e) = sse_connection(sh, port, &request, hold) {
            st.errors.fetch_add(1, Ordering::Relaxed);
            eprintln!("xtask: soak: SSE client: {e:#}; reconnecting in 1 s");
            thread::sleep(Duration::from_secs(1));
        }
    }
}

/// One connection, held for `hold` (or until told to stop). Errors when it could not be made or
/// the server ended it.
fn sse_connection(sh: &Shared, port: u16, request: &str, hold: Duration) -> Result<()> {
    let st = &sh.sse;
    let mut s = TcpStream::connect(("127.0.0.1", port)).context("connecting")?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    s.write_all(request.as_bytes())?;
    st.connections.fetch_add(1, Ordering::Relaxed);
    let until = Instant::now() + hold;
    let mut r = BufReader::with_capacity(1 << 16, s);
    let mut line = Vec::new();
    let mut in_headers = true;
    let mut id: Option<u64> = None;
    let mut data_seq: Option<u64> = None;
    loop {
        if Instant::now() >= until || sh.stop_sse.load(Ordering::Relaxed) {
            return Ok(());
        }
        // A read timeout leaves the part of a line read so far in `line`; the next read goes on.
        match r.read_until(b'\n', &mut line) {
            Ok(0) => bail!("the server ended the stream"),
            Ok(_) if !line.ends_with(b"\n") => bail!("the server ended the stream mid-line"),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return Err(e).context("reading the stream"),
        }
        let text = String::from_utf8_lossy(&line);
        let l = text.trim_end_matches(['\n', '\r']);
        if in_headers {
            if l.starts_with("HTTP/") && !l.contains(" 200 ") {
                bail!("/events answered `{l}`");
            }
            in_headers = !l.is_empty();
        } else if let Some(v) = l.strip_prefix("id:") {
            id = v.trim().parse().ok();
        } else if let Some(v) = l.strip_prefix("data:") {
            data_seq = number_after(v, r#""seq":"#);
        } else if l.is_empty() {
            // The end of an event; status lines come without an id.
            if let Some(seq) = id.take() {
                if data_seq != Some(seq) {
                    st.mismatched.fetch_add(1, Ordering::Relaxed);
                }
                st.events.fetch_add(1, Ordering::Relaxed);
                let last = st.last.load(Ordering::SeqCst);
                if seq <= last {
                    st.duplicates.fetch_add(1, Ordering::Relaxed);
                } else {
                    st.gaps.fetch_add(seq - last - 1, Ordering::Relaxed);
                    st.last.store(seq, Ordering::SeqCst);
                }
            }
            data_seq = None;
        }
        line.clear();
    }
}
