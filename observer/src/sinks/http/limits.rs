//! What one HTTP connection may hold, and how many may be open: nobody on the node network can
//! take the descriptors `observer run` needs by opening connections and never finishing them.
//!
//! - A request's head must arrive within `head_timeout` of the connection's opening, or of the
//!   first byte of a kept-alive connection's next request.
//! - A connection kept alive is closed when `idle_timeout` passes after its last answer's last
//!   byte without the first byte of a next request (a stream's heartbeat, every 15 s, counts as
//!   an answer's byte). While a handler works on a request and has not answered yet, or while
//!   the client does not read its answer, no limit runs: the stream clients are bounded by the
//!   hub, which keeps nothing per client (they catch up from memory and the record).
//! - Beyond `max_connections` open ones, a new connection is answered 503 with `Retry-After`
//!   and closed.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::Request;
use axum::response::Response;
use axum::serve::{IncomingStream, Listener};
use axum::Router;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::{Instant, Sleep};
use tower_service::Service;

/// The limits (flags `--http-head-timeout`, `--http-idle-timeout`, `--http-max-connections`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    pub head_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

/// Where a connection is.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Waiting for a request's head since then.
    Head(Instant),
    /// A request is being answered; the last byte of the answer was written then (none yet:
    /// the handler works, no limit runs).
    Answer(Option<Instant>),
}

/// A connection's phase, shared by its stream and its service.
#[derive(Debug, Clone)]
pub struct ConnPhase(Arc<Mutex<Phase>>);

impl ConnPhase {
    fn set(&self, p: Phase) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }

    fn get(&self) -> Phase {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The head is read and the request handed to its handler.
    pub fn request(&self) {
        self.set(Phase::Answer(None));
    }
}

/// The endpoint's service for one connection: marks each request's head as read.
#[derive(Clone)]
pub struct Marked {
    router: Router,
    phase: ConnPhase,
}

impl Service<Request> for Marked {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = <Router as Service<Request>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::<Request>::poll_ready(&mut self.router, cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        self.phase.request();
        self.router.call(req)
    }
}

/// Makes a [`Marked`] service for each connection [`Limited`] accepts (for `axum::serve`).
#[derive(Clone)]
pub struct MakeMarked(pub Router);

impl<L> Service<IncomingStream<'_, Limited<L>>> for MakeMarked
where
    L: Listener,
    L::Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Response = Marked;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Marked, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, conn: IncomingStream<'_, Limited<L>>) -> Self::Future {
        std::future::ready(Ok(Marked {
            router: self.0.clone(),
            phase: conn.io().phase(),
        }))
    }
}

/// Accepts from `L` with the limits.
pub struct Limited<L> {
    inner: L,
    limits: HttpLimits,
    open: Arc<AtomicUsize>,
}

impl<L> Limited<L> {
    pub fn new(inner: L, limits: HttpLimits) -> Limited<L> {
        Limited {
            inner,
            limits,
            open: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl<L> Listener for Limited<L>
where
    L: Listener,
    L::Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Io = Guarded<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (io, addr) = self.inner.accept().await;
            if self.open.fetch_add(1, Ordering::AcqRel) >= self.limits.max_connections {
                self.open.fetch_sub(1, Ordering::AcqRel);
                tokio::spawn(refuse(io));
                continue;
            }
            return (Guarded::new(io, self.limits, self.open.clone()), addr);
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// The answer past the cap.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\
Content-Type: text/plain; charset=utf-8\r\nContent-Length: 40\r\nConnection: close\r\n\r\n\
too many open connections; retry later\n";

/// Answer 503 and close, within 2 s whatever the client does.
async fn refuse<Io: AsyncRead + AsyncWrite + Unpin>(mut io: Io) {
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        io.write_all(BUSY).await?;
        io.shutdown().await?;
        // Read what the client sent until it closes: closing with unread bytes would reset the
        // connection and could lose the answer.
        let mut buf = [0u8; 1024];
        while io.read(&mut buf).await? > 0 {}
        Ok::<_, io::Error>(())
    })
    .await;
}

/// A connection with its deadlines; counted open until dropped.
pub struct Guarded<Io> {
    io: Io,
    phase: ConnPhase,
    limits: HttpLimits,
    timer: Pin<Box<Sleep>>,
    open: Arc<AtomicUsize>,
    /// The client does not read the answer: the stream clients are bounded by the hub (they
    /// catch up from memory and the record), not timed out.
    write_blocked: bool,
}

impl<Io> Guarded<Io> {
    fn new(io: Io, limits: HttpLimits, open: Arc<AtomicUsize>) -> Guarded<Io> {
        let now = Instant::now();
        Guarded {
            io,
            phase: ConnPhase(Arc::new(Mutex::new(Phase::Head(now)))),
            limits,
            timer: Box::pin(tokio::time::sleep_until(now + limits.head_timeout)),
            open,
            write_blocked: false,
        }
    }

    /// The phase, for the connection's service to mark requests.
    pub fn phase(&self) -> ConnPhase {
        self.phase.clone()
    }

    fn deadline(&self) -> Option<Instant> {
        if self.write_blocked {
            return None;
        }
        match self.phase.get() {
            Phase::Head(t) => Some(t + self.limits.head_timeout),
            Phase::Answer(Some(t)) => Some(t + self.limits.idle_timeout),
            Phase::Answer(None) => None,
        }
    }

    /// Ready with an error once the deadline has passed; otherwise the timer wakes the task
    /// when it does.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let Some(deadline) = self.deadline() else {
            return Poll::Pending;
        };
        if self.timer.deadline() != deadline {
            self.timer.as_mut().reset(deadline);
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                let what = match self.phase.get() {
                    Phase::Head(_) => "no whole request head in time",
                    Phase::Answer(_) => "idle too long",
                };
                Poll::Ready(io::Error::new(io::ErrorKind::TimedOut, what))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<Io> Drop for Guarded<Io> {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for Guarded<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    // The first byte of a kept-alive connection's next request.
                    if let Phase::Answer(Some(_)) = self.phase.get() {
                        self.phase.set(Phase::Head(Instant::now()));
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match self.poll_deadline(cx) {
                Poll::Ready(e) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Guarded<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.io).poll_write(cx, buf);
        self.write_blocked = res.is_pending();
        match res {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.phase.set(Phase::Answer(Some(Instant::now())));
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match self.poll_deadline(cx) {
                Poll::Ready(e) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.io).poll_flush(cx) {
            Poll::Pending => match self.poll_deadline(cx) {
                Poll::Ready(e) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            },
            r => r,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
