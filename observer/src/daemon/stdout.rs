//! `observer run`'s stdout (the container runtime's log pipe) as a reader of its own: a bounded
//! queue and a thread that writes it, so that a pipe nobody reads never holds the record, the
//! other streams or the exit.
//!
//! When the queue is full, new lines are dropped and counted
//! (`observer_sink_dropped_total{sink="stdout"}`); once the pipe takes lines again, a gap line
//! says how many were lost, where they were lost. The thread is never joined: at exit, whatever
//! it still holds (the pipe is stalled) is lost with it.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};

use prometheus_client::metrics::counter::Counter;

use crate::output::record::{Gap, StatusRecord};
use crate::output::Record;

/// Lines that may wait for stdout before new ones are dropped.
pub const STDOUT_QUEUE: usize = 4096;

/// The most lines written in one `write`.
const BATCH: usize = 256;

enum Item {
    Line(Arc<str>),
    /// `n` lines were dropped here.
    Gap(u64),
}

#[derive(Default)]
struct State {
    items: VecDeque<Item>,
    /// Lines dropped since the last gap line was queued.
    lost: u64,
    /// A write failed (the reader closed the pipe): lines are no longer queued.
    failed: bool,
    /// The thread is writing lines it took from the queue.
    writing: bool,
}

struct Shared {
    state: Mutex<State>,
    ready: Condvar,
    /// Signalled when the thread finds the queue empty.
    idle: Condvar,
    capacity: usize,
    dropped: Counter,
}

/// The sending side: never blocks on the pipe.
#[derive(Clone)]
pub struct StdoutQueue {
    shared: Arc<Shared>,
}

impl StdoutQueue {
    /// Start the thread that writes `out` (stdout in `observer run`). Lines dropped are added to
    /// `dropped`.
    pub fn spawn<W: Write + Send + 'static>(
        out: W,
        capacity: usize,
        dropped: Counter,
    ) -> std::io::Result<StdoutQueue> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            idle: Condvar::new(),
            capacity: capacity.max(2),
            dropped,
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("stdout".into())
            .spawn(move || write_loop(&s, out))?;
        Ok(StdoutQueue { shared })
    }

    /// Queue a line (without its newline); drop it (counted) when the queue is full.
    pub fn push(&self, line: Arc<str>) {
        let sh = &self.shared;
        let mut st = sh.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.failed {
            return;
        }
        // A gap line goes before the next line that fits, so it stands where the lines were lost.
        let room = sh.capacity.saturating_sub(st.items.len());
        let need = if st.lost > 0 { 2 } else { 1 };
        if room < need {
            st.lost += 1;
            sh.dropped.inc();
            return;
        }
        if st.lost > 0 {
            let n = std::mem::take(&mut st.lost);
            st.items.push_back(Item::Gap(n));
        }
        st.items.push_back(Item::Line(line));
        drop(st);
        sh.ready.notify_one();
    }

    /// Wait until everything queued is written, or `timeout`: true when it was. A pipe that is
    /// not read keeps its lines, and the exit does not wait for it.
    pub fn drain(&self, timeout: std::time::Duration) -> bool {
        let sh = &self.shared;
        let st = sh.state.lock().unwrap_or_else(|e| e.into_inner());
        let (st, _) = sh
            .idle
            .wait_timeout_while(st, timeout, |st| {
                !st.failed && (st.writing || !st.items.is_empty() || st.lost > 0)
            })
            .unwrap_or_else(|e| e.into_inner());
        st.failed || !(st.writing || !st.items.is_empty() || st.lost > 0)
    }
}

fn write_loop<W: Write>(sh: &Shared, mut out: W) {
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        buf.clear();
        {
            let mut st = sh.state.lock().unwrap_or_else(|e| e.into_inner());
            st.writing = false;
            while st.items.is_empty() && st.lost == 0 {
                sh.idle.notify_all();
                st = sh.ready.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            st.writing = true;
            for _ in 0..BATCH {
                let Some(item) = st.items.pop_front() else {
                    break;
                };
                append(&mut buf, item);
            }
            // Everything queued is taken: the lines dropped after it are told now.
            if st.items.is_empty() && st.lost > 0 {
                let n = std::mem::take(&mut st.lost);
                append(&mut buf, Item::Gap(n));
            }
        }
        if let Err(e) = out.write_all(&buf).and_then(|_| out.flush()) {
            // The record, the streams and the metrics go on without stdout.
            tracing::error!("cannot write to stdout ({e}); going on without it");
            let mut st = sh.state.lock().unwrap_or_else(|e| e.into_inner());
            st.failed = true;
            st.items.clear();
            sh.idle.notify_all();
            return;
        }
    }
}

fn append(buf: &mut Vec<u8>, item: Item) {
    match item {
        Item::Line(l) => buf.extend_from_slice(l.as_bytes()),
        Item::Gap(n) => buf.extend_from_slice(gap_line(n).as_bytes()),
    }
    buf.push(b'\n');
}

/// The gap line stdout gets where `n` lines were dropped.
pub fn gap_line(n: u64) -> String {
    let line = Record::Status(StatusRecord::gap(
        Gap::Other,
        format!(
            "{n} lines were not written to stdout: it was not read fast enough (more than \
             {STDOUT_QUEUE} lines waiting); the record and the HTTP streams have them"
        ),
    ));
    serde_json::to_string(&line)
        .unwrap_or_else(|e| format!(r#"{{"kind":"status","state":"gap","message":"{e}"}}"#))
}

/// stdout written with plain `write` calls on its descriptor, outside the standard library's
/// lock and buffer: a write blocked on a full pipe holds nothing the exit needs.
pub struct RawStdout;

impl Write for RawStdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        loop {
            match nix::unistd::write(std::io::stdout(), buf) {
                Err(nix::errno::Errno::EINTR) => continue,
                r => return r.map_err(std::io::Error::from),
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A writer that blocks until told to go on, then keeps what it is given.
    struct Gate {
        go: mpsc::Receiver<()>,
        out: Arc<Mutex<Vec<u8>>>,
        open: bool,
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if !self.open {
                let _ = self.go.recv();
                self.open = true;
            }
            self.out.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stalled_writer_loses_only_its_lines_and_is_told_where() {
        let (go, rx) = mpsc::channel();
        let out = Arc::new(Mutex::new(Vec::new()));
        let dropped = Counter::default();
        let gate = Gate {
            go: rx,
            out: out.clone(),
            open: false,
        };
        let q = StdoutQueue::spawn(gate, 10, dropped.clone()).unwrap();
        let t = std::time::Instant::now();
        for i in 0..1000 {
            q.push(format!("{i}").into());
        }
        // Pushing never waits for the stalled writer.
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        go.send(()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let text = loop {
            let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
            if text.contains("\"gap\"") || std::time::Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let lines: Vec<&str> = text.lines().collect();
        // The writer took the first line before it blocked, then 10 were queued.
        let kept = lines.iter().filter(|l| !l.contains("gap")).count() as u64;
        assert_eq!(kept + dropped.get(), 1000, "{text}");
        let gap = lines.last().unwrap();
        assert!(
            gap.contains(&format!("{} lines were not written", dropped.get())),
            "{gap}"
        );
        // Lines pushed later come after the gap line.
        q.push("after".into());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !String::from_utf8(out.lock().unwrap().clone())
            .unwrap()
            .ends_with("after\n")
        {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
