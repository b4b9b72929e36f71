//! `observer run`'s stdout (the container runtime's log pipe) as a reader of its own: a bounded
//! queue and a thread that writes it, so that a pipe nobody reads never holds the record, the
//! other streams or the exit.
//!
//! When the queue is full, new lines are dropped and counted
//! (`observer_sink_dropped_total{sink="stdout"}`); once the pipe takes lines again, a gap line
//! says how many were lost, where they were lost.
//!
//! A pipe is never filled to the last page: the thread keeps room in it for one more line, so
//! that when observer stops with the pipe stalled, a last gap line still goes in after what the
//! pipe holds, and whoever reads it later learns how many lines it never got. The pipe is
//! written through a non-blocking descriptor of its own, so the thread never waits in a write
//! and the exit never waits for the pipe.
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use crate::output::line::{Gap, StatusLine};
use crate::output::Line;

/// Lines that may wait for stdout before new ones are dropped (the default of `--stdout-queue`).
pub const STDOUT_QUEUE: usize = 4096;

/// How long the exit waits for stdout to take the lines queued for it.
pub const DRAIN: Duration = Duration::from_secs(1);

/// The most lines written in one `write`.
const BATCH: usize = 256;

/// How soon a thread waiting for room in a pipe that still has a page free looks again: soon
/// while the reader reads (it empties a pipe in microseconds), then less and less often while it
/// reads nothing. A full pipe is waited for in `poll`, which a read ends at once.
const PAUSE_READING: Duration = Duration::from_millis(1);
const PAUSE_STALLED: Duration = Duration::from_millis(50);

/// Where the thread writes: a plain writer, or stdout with room kept for a last line.
pub trait Out: Send + 'static {
    /// Bytes the next write may take and still leave room for a last gap line; `usize::MAX`
    /// when the writer has no such limit.
    fn room(&mut self) -> usize {
        usize::MAX
    }

    /// The most room the writer can ever give: a longer line is written as it is taken.
    fn most_room(&self) -> usize {
        usize::MAX
    }

    /// Write a prefix of `buf`: how many bytes were taken. `WouldBlock` when none fit now.
    fn write_some(&mut self, buf: &[u8]) -> io::Result<usize>;

    /// A write found no room: wait for some, or say how long to pause before looking again
    /// (zero when it waited already). Short, so that the thread sees soon that observer stops.
    fn wait_room(&mut self) -> Duration {
        PAUSE_READING
    }

    /// Write `line` into the room kept for it, without waiting: false when it did not fit.
    fn write_last(&mut self, line: &[u8]) -> io::Result<bool> {
        self.write_some(line).map(|n| n == line.len())
    }
}

/// Any `Write` (no room kept: its writes may block).
#[cfg(test)]
pub struct Plain<W>(pub W);

#[cfg(test)]
impl<W: std::io::Write + Send + 'static> Out for Plain<W> {
    fn write_some(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.0.write(buf)?;
        self.0.flush()?;
        Ok(n)
    }
}

enum Item {
    Line(Arc<str>),
    /// `n` lines were dropped here.
    Gap(u64),
}

impl Item {
    /// The lines this item stands for.
    fn weight(&self) -> u64 {
        match self {
            Item::Line(_) => 1,
            Item::Gap(n) => *n,
        }
    }
}

#[derive(Default)]
struct State {
    items: VecDeque<Item>,
    /// Lines dropped since the last gap line was queued.
    lost: u64,
    /// A write failed (the reader closed the pipe), or the last line is written: lines are no
    /// longer queued.
    failed: bool,
    /// The thread is writing lines it took from the queue.
    writing: bool,
    /// Observer stops: what is not written by now is told in a last gap line.
    closing: bool,
}

struct Shared {
    state: Mutex<State>,
    ready: Condvar,
    /// Signalled when the thread finds the queue empty, or has ended.
    idle: Condvar,
    capacity: usize,
    dropped: Counter,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The sending side: never blocks on the pipe.
#[derive(Clone)]
pub struct StdoutQueue {
    shared: Arc<Shared>,
}

impl StdoutQueue {
    /// Start the thread that writes `out` (stdout in `observer run`). Lines dropped are added to
    /// `dropped`.
    pub fn spawn<O: Out>(out: O, capacity: usize, dropped: Counter) -> io::Result<StdoutQueue> {
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
        let mut st = sh.lock();
        if st.failed || st.closing {
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
    pub fn drain(&self, timeout: Duration) -> bool {
        let sh = &self.shared;
        let (st, _) = sh
            .idle
            .wait_timeout_while(sh.lock(), timeout, |st| !st.failed && busy(st))
            .unwrap_or_else(|e| e.into_inner());
        st.failed || !busy(&st)
    }

    /// Stop: what is still unwritten is dropped, and told in a last gap line written into the
    /// room kept for it. Waits up to `timeout` for the thread; the lines it told of, or None
    /// when nothing was lost or the thread did not answer in time (a writer that blocks).
    pub fn close(&self, timeout: Duration) -> Option<u64> {
        let sh = &self.shared;
        let mut st = sh.lock();
        if st.failed {
            return None;
        }
        st.closing = true;
        sh.ready.notify_all();
        let (st, _) = sh
            .idle
            .wait_timeout_while(st, timeout, |st| !st.failed)
            .unwrap_or_else(|e| e.into_inner());
        if !st.failed {
            return None;
        }
        // The thread leaves what it told of in `lost`.
        Some(st.lost).filter(|n| *n > 0)
    }
}

/// Lines are queued or being written.
fn busy(st: &State) -> bool {
    st.writing || !st.items.is_empty() || st.lost > 0
}

/// One batch of lines taken from the queue: its bytes, and where each item ends with how many
/// lines it stands for.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// Where each item ends, how many lines it stands for, and whether it is a line (a gap
    /// line's lines were counted when they were dropped).
    ends: Vec<(usize, u64, bool)>,
}

impl Batch {
    fn push(&mut self, item: Item) {
        let w = item.weight();
        let line = matches!(item, Item::Line(_));
        match item {
            Item::Line(l) => self.bytes.extend_from_slice(l.as_bytes()),
            Item::Gap(n) => self.bytes.extend_from_slice(gap_line(n).as_bytes()),
        }
        self.bytes.push(b'\n');
        self.ends.push((self.bytes.len(), w, line));
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// The end of the longest run of whole items from `pos` that fits in `room` bytes.
    fn fits(&self, pos: usize, room: usize) -> usize {
        self.ends
            .iter()
            .map(|&(e, ..)| e)
            .filter(|&e| e > pos)
            .take_while(|&e| e - pos <= room)
            .last()
            .unwrap_or(pos)
    }

    /// The end of the item at `pos`.
    fn next_end(&self, pos: usize) -> usize {
        self.ends
            .iter()
            .map(|&(e, ..)| e)
            .find(|&e| e > pos)
            .unwrap_or(self.bytes.len())
    }

    /// The lines from `pos` on (an item cut at `pos` counts as lost), and of them those that
    /// were not counted as dropped yet.
    fn lines_from(&self, pos: usize) -> (u64, u64) {
        self.ends
            .iter()
            .filter(|&&(e, ..)| e > pos)
            .fold((0, 0), |(all, new), &(_, w, line)| {
                (all + w, new + u64::from(line))
            })
    }

    /// `pos` is inside an item (a line was cut).
    fn cuts(&self, pos: usize) -> bool {
        pos > 0 && pos < self.bytes.len() && !self.ends.iter().any(|&(e, ..)| e == pos)
    }
}

fn write_loop<O: Out>(sh: &Shared, mut out: O) {
    let mut batch = Batch::default();
    loop {
        batch.clear();
        {
            let mut st = sh.lock();
            st.writing = false;
            while st.items.is_empty() && st.lost == 0 && !st.closing {
                sh.idle.notify_all();
                st = sh.ready.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.closing {
                drop(st);
                return finish(sh, &mut out, &batch, 0);
            }
            st.writing = true;
            for _ in 0..BATCH {
                let Some(item) = st.items.pop_front() else {
                    break;
                };
                batch.push(item);
            }
            // Everything queued is taken: the lines dropped after it are told now.
            if st.items.is_empty() && st.lost > 0 {
                let n = std::mem::take(&mut st.lost);
                batch.push(Item::Gap(n));
            }
        }
        let mut pos = 0;
        while pos < batch.bytes.len() {
            if sh.lock().closing {
                return finish(sh, &mut out, &batch, pos);
            }
            let mut end = batch.fits(pos, out.room());
            // A line longer than all the room the pipe can ever give goes in as the pipe takes it.
            if end == pos && batch.next_end(pos) - pos > out.most_room() {
                end = batch.next_end(pos);
            }
            let wrote = if end > pos {
                out.write_some(&batch.bytes[pos..end])
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
            match wrote {
                Ok(n) => pos += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // No room: wait for the reader; a pause ends at once when observer stops.
                    let pause = out.wait_room();
                    let st = sh.lock();
                    if !st.closing && !pause.is_zero() {
                        let _ = sh.ready.wait_timeout(st, pause);
                    }
                }
                Err(e) => {
                    // The record, the streams and the metrics go on without stdout.
                    tracing::error!("cannot write to stdout ({e}); going on without it");
                    let mut st = sh.lock();
                    st.failed = true;
                    st.items.clear();
                    sh.idle.notify_all();
                    return;
                }
            }
        }
    }
}

/// Observer stops with `batch` written up to `pos`: count what will never be written, and tell
/// it in a last gap line.
fn finish<O: Out>(sh: &Shared, out: &mut O, batch: &Batch, pos: usize) {
    let mut st = sh.lock();
    let (mut lost, mut uncounted) = batch.lines_from(pos);
    for item in st.items.drain(..) {
        lost += item.weight();
        uncounted += u64::from(matches!(item, Item::Line(_)));
    }
    lost += std::mem::take(&mut st.lost);
    sh.dropped.inc_by(uncounted);
    if lost > 0 {
        let mut line = Vec::new();
        if batch.cuts(pos) {
            // The line cut short ends here, so the gap line stands on its own.
            line.push(b'\n');
        }
        line.extend_from_slice(gap_line_at_exit(lost).as_bytes());
        line.push(b'\n');
        match out.write_last(&line) {
            Ok(true) => st.lost = lost,
            Ok(false) => tracing::warn!(
                "stdout had no room for its last gap line; {lost} lines were not written to it"
            ),
            Err(e) => tracing::warn!(
                "cannot write stdout's last gap line ({e}); {lost} lines were not written to it"
            ),
        }
    }
    st.failed = true;
    st.writing = false;
    sh.idle.notify_all();
}

/// The gap line stdout gets where `n` lines were dropped.
pub fn gap_line(n: u64) -> String {
    gap_text(format!(
        "{n} lines were not written to stdout: it was not read fast enough (the queue of \
         --stdout-queue lines waiting was full); the record and the HTTP streams have them"
    ))
}

/// The last line stdout gets when observer stops with `n` lines not written.
pub fn gap_line_at_exit(n: u64) -> String {
    gap_text(format!(
        "{n} lines were not written to stdout: it was not read when observer stopped; the \
         record has them"
    ))
}

fn gap_text(message: String) -> String {
    let line = Line::Status(StatusLine::gap(Gap::Other, message));
    serde_json::to_string(&line)
        .unwrap_or_else(|e| format!(r#"{{"kind":"status","state":"gap","message":"{e}"}}"#))
}

/// A descriptor written with plain `write` calls, outside the standard library's lock and
/// buffer. When it is a pipe it is written without blocking, through a descriptor of its own,
/// and its last page is kept free for a last gap line.
pub struct FdOut {
    fd: OwnedFd,
    pipe: Option<PipeBook>,
}

/// What a pipe holds of what was written to it, to know how much room is left: a pipe is a ring
/// of pages, each write starts a page of its own unless its tail fits in the last one, and a
/// page is free only once read to its end. So the pages in use are at most the unread bytes'
/// whole pages, plus one page ended by each write not yet read, plus the page being read.
struct PipeBook {
    page: usize,
    /// The pipe's size when last looked at.
    size: usize,
    /// Bytes written since the start.
    written: u64,
    /// Where each write not yet wholly read ends, in `written`'s count.
    ends: VecDeque<u64>,
    /// Bytes read from the pipe when the thread last waited for room, and its pause then.
    read_before: u64,
    pause: Duration,
}

impl FdOut {
    /// observer's stdout.
    pub fn stdout() -> io::Result<FdOut> {
        FdOut::new(io::stdout().as_fd().try_clone_to_owned()?)
    }

    /// Write `fd`; a pipe through a non-blocking descriptor of its own when it can be opened.
    pub fn new(fd: OwnedFd) -> io::Result<FdOut> {
        let stat = nix::sys::stat::fstat(fd.as_raw_fd())?;
        let is_pipe = nix::sys::stat::SFlag::from_bits_truncate(stat.st_mode)
            .contains(nix::sys::stat::SFlag::S_IFIFO);
        if !is_pipe {
            return Ok(FdOut { fd, pipe: None });
        }
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .and_then(|p| usize::try_from(p).ok())
            .unwrap_or(4096);
        // The same pipe opened again is a file description of its own: O_NONBLOCK on it does not
        // change the descriptor others share.
        let reopened = nix::fcntl::open(
            format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str(),
            nix::fcntl::OFlag::O_WRONLY
                | nix::fcntl::OFlag::O_NONBLOCK
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        );
        let fd = match reopened {
            // SAFETY: `open` returned this descriptor and nothing else owns it.
            Ok(raw) => unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) },
            Err(e) => {
                tracing::debug!(
                    "stdout is a pipe that cannot be opened again ({e}); writing it as it is"
                );
                fd
            }
        };
        let size = nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_GETPIPE_SZ)
            .ok()
            .and_then(|s| usize::try_from(s).ok())
            .unwrap_or(16 * page);
        Ok(FdOut {
            fd,
            pipe: Some(PipeBook {
                page,
                size,
                written: 0,
                ends: VecDeque::new(),
                read_before: 0,
                pause: PAUSE_READING,
            }),
        })
    }

    /// The pipe's size, and the bytes in it not read yet.
    fn pipe_fill(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<(usize, usize)> {
        let size = nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_GETPIPE_SZ)?;
        let mut unread: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int at the pointer given, which lives across the call.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut unread) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((
            usize::try_from(size).unwrap_or(0),
            usize::try_from(unread).unwrap_or(0),
        ))
    }

    fn write_fd(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = loop {
            match nix::unistd::write(&self.fd, buf) {
                Err(nix::errno::Errno::EINTR) => continue,
                r => break r.map_err(io::Error::from)?,
            }
        };
        if let Some(b) = self.pipe.as_mut() {
            b.written += n as u64;
            b.ends.push_back(b.written);
        }
        Ok(n)
    }
}

impl Out for FdOut {
    fn room(&mut self) -> usize {
        let Some(b) = self.pipe.as_mut() else {
            return usize::MAX;
        };
        // Not measurable: written as it takes lines.
        FdOut::pipe_fill(self.fd.as_fd()).map_or(usize::MAX, |(size, unread)| b.room(size, unread))
    }

    fn most_room(&self) -> usize {
        self.pipe.as_ref().map_or(usize::MAX, PipeBook::most_room)
    }

    fn write_some(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_fd(buf)
    }

    fn wait_room(&mut self) -> Duration {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let ready = |ms: u16| {
            let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLOUT)];
            // An error (EINTR) is a wait that ended: the thread looks again.
            poll(&mut fds, PollTimeout::from(ms)).map_or(true, |n| n > 0)
        };
        // Full to its last page (the reader took more than the book allowed for, or not a pipe):
        // a read wakes `poll` at once.
        if !ready(0) {
            let most = u16::try_from(PAUSE_STALLED.as_millis()).unwrap_or(u16::MAX);
            ready(most);
            return Duration::ZERO;
        }
        let Some(b) = self.pipe.as_mut() else {
            return PAUSE_READING;
        };
        // A page is free, perhaps only the one kept: `poll` says no more (it reports a pipe
        // writable while one page is free), so the thread pauses and looks again; soon while the
        // reader reads, less and less often while it does not.
        let Ok((_, unread)) = FdOut::pipe_fill(self.fd.as_fd()) else {
            return PAUSE_READING;
        };
        let read = b.written.saturating_sub(unread as u64);
        b.pause = if read > b.read_before {
            PAUSE_READING
        } else {
            (b.pause * 2).min(PAUSE_STALLED)
        };
        b.read_before = read;
        b.pause
    }

    fn write_last(&mut self, line: &[u8]) -> io::Result<bool> {
        // Kept room is one page at least, and a write of up to PIPE_BUF bytes is all or nothing.
        match self.write_fd(line) {
            Ok(n) => Ok(n == line.len()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl PipeBook {
    /// Bytes the next write may take so that one page stays free, in a pipe of `size` bytes
    /// holding `unread`.
    fn room(&mut self, size: usize, unread: usize) -> usize {
        self.size = size;
        let read = self.written.saturating_sub(unread as u64);
        while self.ends.front().is_some_and(|&e| e <= read) {
            self.ends.pop_front();
        }
        let pages = size / self.page;
        // In use after a write of n bytes: (unread + n) / page whole pages, a page ended by each
        // write in the pipe and by this one, the page being read; and one kept free.
        let spare = pages.saturating_sub(self.ends.len() + 3);
        ((spare + 1) * self.page)
            .saturating_sub(1)
            .saturating_sub(unread)
    }

    /// The room of the pipe when it is empty.
    fn most_room(&self) -> usize {
        ((self.size / self.page).saturating_sub(2) * self.page).saturating_sub(1)
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

    impl std::io::Write for Gate {
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
        let q = StdoutQueue::spawn(Plain(gate), 10, dropped.clone()).unwrap();
        let t = std::time::Instant::now();
        for i in 0..1000 {
            q.push(format!("{i}").into());
        }
        // Pushing never waits for the stalled writer.
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        go.send(()).unwrap();
        assert!(q.drain(std::time::Duration::from_secs(5)));
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // Every line pushed is written, or told of in a gap line where it was lost.
        let kept = lines.iter().filter(|l| !l.contains("gap")).count() as u64;
        let told: u64 = lines
            .iter()
            .filter(|l| l.contains("gap"))
            .map(|l| told(&serde_json::from_str(l).unwrap()))
            .sum();
        assert_eq!(kept + dropped.get(), 1000, "{text}");
        assert_eq!(told, dropped.get(), "{text}");
        assert!(lines.last().unwrap().contains("gap"), "{text}");
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

    /// The count at the head of a gap line's message.
    fn told(gap: &serde_json::Value) -> u64 {
        gap["message"]
            .as_str()
            .and_then(|m| m.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no count in {gap}"))
    }

    #[test]
    fn a_pipe_never_read_still_gets_a_last_gap_line_at_exit() {
        let (rd, wr) = nix::unistd::pipe().unwrap();
        let dropped = Counter::default();
        let q = StdoutQueue::spawn(FdOut::new(wr).unwrap(), 100, dropped.clone()).unwrap();
        // Lines come a few at a time, as fast as the pipe takes them until it is full, then on.
        let pad = "x".repeat(1000);
        let mut stalled = false;
        for i in 0..1000 {
            q.push(format!(r#"{{"n":{i},"pad":"{pad}"}}"#).into());
            if i % 20 == 19 {
                stalled |= !q.drain(std::time::Duration::from_millis(20));
            }
        }
        // Nobody reads: the queue does not drain, and the pipe keeps its last page.
        assert!(stalled);
        assert!(!q.drain(std::time::Duration::from_millis(100)));
        let size =
            nix::fcntl::fcntl(rd.as_raw_fd(), nix::fcntl::FcntlArg::F_GETPIPE_SZ).unwrap() as u64;
        let lost = q
            .close(std::time::Duration::from_secs(2))
            .expect("a last gap line");
        // What the pipe holds: whole lines in order, then the last gap line.
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(rd), &mut text).unwrap();
        assert!(
            (text.len() as u64) <= size,
            "{} bytes in a {size}-byte pipe",
            text.len()
        );
        let text = String::from_utf8(text).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        let (gap, before) = lines.split_last().expect("lines");
        assert_eq!(gap["state"], "gap", "{text}");
        assert!(
            gap["message"]
                .as_str()
                .is_some_and(|m| m.contains("when observer stopped")),
            "{gap}"
        );
        assert_eq!(told(gap), lost, "{gap}");
        // Whole lines in order, gap lines where the queue was full.
        let kept: Vec<u64> = before.iter().filter_map(|l| l["n"].as_u64()).collect();
        assert!(kept.windows(2).all(|w| w[0] < w[1]), "{text}");
        // The pipe took lines, and kept a page free for the last one (how much it took depends
        // on how the lines came: each write in the pipe may end short of a page).
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .unwrap()
            .unwrap() as u64;
        let last = text.lines().last().map_or(0, |l| l.len() as u64 + 1);
        assert!(!kept.is_empty(), "{text}");
        assert!(
            text.len() as u64 - last <= size - page,
            "{} bytes before the last gap line in a {size}-byte pipe",
            text.len() as u64 - last
        );
        let told_before: u64 = before
            .iter()
            .filter(|l| l["state"] == "gap")
            .map(told)
            .sum();
        // Every line is in the pipe or told of, and counted as dropped.
        assert_eq!(kept.len() as u64 + told_before + lost, 1000, "{gap}");
        assert_eq!(dropped.get(), told_before + lost);
        // Stopped: lines pushed now are not queued.
        q.push("late".into());
    }

    #[test]
    fn a_pipe_read_again_gets_the_gap_line_where_lines_were_lost() {
        let (rd, wr) = nix::unistd::pipe().unwrap();
        let dropped = Counter::default();
        let q = StdoutQueue::spawn(FdOut::new(wr).unwrap(), 50, dropped.clone()).unwrap();
        let pad = "x".repeat(1000);
        let mut stalled = false;
        for i in 0..3000 {
            q.push(format!(r#"{{"n":{i},"pad":"{pad}"}}"#).into());
            if i % 20 == 19 && !stalled {
                stalled = !q.drain(std::time::Duration::from_millis(20));
            }
        }
        assert!(stalled);
        // Read again: the lines kept, a gap line, then lines pushed later.
        let reader = std::thread::spawn(move || {
            let mut text = Vec::new();
            std::io::Read::read_to_end(&mut std::fs::File::from(rd), &mut text).unwrap();
            String::from_utf8(text).unwrap()
        });
        assert!(q.drain(std::time::Duration::from_secs(5)));
        q.push(r#"{"n":"after"}"#.into());
        assert!(q.drain(std::time::Duration::from_secs(5)));
        assert_eq!(q.close(std::time::Duration::from_secs(2)), None);
        let text = reader.join().unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let told: u64 = lines.iter().filter(|l| l["state"] == "gap").map(told).sum();
        let ns = lines.iter().filter(|l| l["n"].is_u64()).count() as u64;
        assert!(ns < 3000, "{ns} lines");
        assert_eq!(ns + told, 3000);
        assert_eq!(told, dropped.get());
        assert_eq!(lines.last().unwrap()["n"], "after");
    }
}
