//! A child's stdout as JSON lines, and a line waited for.

use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long [`wait_for`] waits for a line.
pub const WAIT: Duration = Duration::from_secs(20);

/// The comms of a change line's `process.ancestry`, nearest first (`""` for one without a comm,
/// so that positions hold).
pub fn ancestry_comms(line: &Value) -> Vec<&str> {
    line["process"]["ancestry"]
        .as_array()
        .expect("ancestry")
        .iter()
        .map(|a| a["comm"].as_str().unwrap_or(""))
        .collect()
}

/// Lines of a child's stdout, parsed as JSON, on a channel. A line that is not JSON fails the
/// test (observer's stdout is JSON lines only).
pub fn json_lines(out: impl Read + Send + 'static) -> mpsc::Receiver<Value> {
    json_lines_paced(out, Arc::new(AtomicU64::new(0)))
}

/// [`json_lines`], read at most `pace` lines a second while `pace` is not 0: a slow reader, whom
/// the child's writes wait for once the pipe is full.
pub fn json_lines_paced(
    out: impl Read + Send + 'static,
    pace: Arc<AtomicU64>,
) -> mpsc::Receiver<Value> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let v = match line {
                Ok(line) => match serde_json::from_str::<Value>(&line) {
                    Ok(v) => v,
                    // Told to the waiter, which fails the test with it.
                    Err(e) => Value::String(format!("a line that is not JSON ({e}): {line:?}")),
                },
                Err(e) => Value::String(format!("stdout could not be read: {e}")),
            };
            let last = v.is_string();
            if tx.send(v).is_err() || last {
                break;
            }
            let per_second = pace.load(Ordering::Relaxed);
            if per_second > 0 {
                std::thread::sleep(Duration::from_secs(1) / per_second as u32);
            }
        }
    });
    rx
}

/// Wait on `rx` for a value matching `pred`, keeping everything seen in `seen`; fails the test
/// after [`WAIT`], naming `what` and showing what was seen.
pub fn wait_for(
    rx: &mpsc::Receiver<Value>,
    seen: &mut Vec<Value>,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    wait_within(WAIT, rx, seen, what, pred)
}

/// [`wait_for`] with a time of its own (a step known to take longer, such as a TLS handshake
/// after a certificate's renewal).
pub fn wait_within(
    within: Duration,
    rx: &mpsc::Receiver<Value>,
    seen: &mut Vec<Value>,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    if let Some(v) = seen.iter().find(|v| pred(v)) {
        return v.clone();
    }
    let deadline = Instant::now() + within;
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Value::String(broken)) => {
                panic!(
                    "{what}: the output broke off: {broken}; saw:\n{}",
                    shown(seen)
                )
            }
            Ok(v) => {
                seen.push(v.clone());
                if pred(&v) {
                    return v;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                "{what}: the output ended before it came (the process closed its stdout or \
                 exited); saw:\n{}",
                shown(seen)
            ),
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "{what} did not arrive within {within:?}; saw:\n{}",
                shown(seen)
            ),
        }
    }
}

fn shown(seen: &[Value]) -> String {
    seen.iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_and_the_one_asked_for_is_found() {
        let rx = json_lines(&b"{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n"[..]);
        let mut seen = Vec::new();
        let v = wait_for(&rx, &mut seen, "a = 2", |v| v["a"] == 2);
        assert_eq!(v["a"], 2);
        assert_eq!(seen.len(), 2, "stops at the line asked for");
        // A line already seen is found again without waiting.
        assert_eq!(wait_for(&rx, &mut seen, "a = 1", |v| v["a"] == 1)["a"], 1);
    }

    #[test]
    fn a_line_that_is_not_json_is_named_by_the_waiter() {
        let rx = json_lines(&b"{\"a\":1}\nnot json\n{\"a\":2}\n"[..]);
        let mut seen = Vec::new();
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_for(&rx, &mut seen, "a = 2", |v| v["a"] == 2)
        }))
        .expect_err("a = 2 comes after a broken line");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("not JSON") && msg.contains("\"not json\""),
            "{msg}"
        );
    }

    #[test]
    fn an_ended_output_is_told_apart_from_a_slow_one() {
        let rx = json_lines(&b"{\"a\":1}\n"[..]);
        let mut seen = Vec::new();
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_within(Duration::from_secs(5), &rx, &mut seen, "a = 2", |v| {
                v["a"] == 2
            })
        }))
        .expect_err("a = 2 never comes");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("ended before it came"), "{msg}");
    }
}
