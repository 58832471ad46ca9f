//! The accept loop: each connection served by hyper's HTTP/1 builder under deadlines a slow or
//! idle client cannot stretch (`axum::serve` runs hyper with no timer, so a client sending its
//! headers a byte a minute, or keeping a connection open, held a task forever).
//!
//! A connection's clock ([`Clock`]) tells its two waits apart: between requests it may stay
//! idle `idle_timeout_secs`; once the first byte of a request arrives its headers must be
//! complete within `header_timeout_secs`. While a request runs (headers in, response body not
//! yet sent) neither applies: the body deadline (`body_timeout_secs`) and the request's own
//! timeout bound it. On shutdown every connection finishes its request in flight and closes.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::serve::Listener;
use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tower::ServiceExt;

/// The deadlines of every connection.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    pub header: Duration,
    pub idle: Duration,
}

/// Serves `router` on `listener` until `shutdown` resolves, then waits for every connection to
/// finish its request in flight.
pub async fn serve(
    mut listener: TcpListener,
    router: Router,
    deadlines: Deadlines,
    shutdown: impl std::future::Future<Output = ()>,
) {
    // Dropped receivers tell the connections to shut down; dropped `done` receivers tell us
    // they have (the pattern `axum::serve` uses).
    let (stop_tx, stop_rx) = watch::channel(());
    let (done_tx, done_rx) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        // axum's `Listener` retries transient accept errors (out of file descriptors) itself.
        let (stream, _) = tokio::select! {
            accepted = Listener::accept(&mut listener) => accepted,
            _ = &mut shutdown => break,
        };
        let (stop, done, router) = (stop_rx.clone(), done_rx.clone(), router.clone());
        tokio::spawn(async move {
            serve_connection(stream, router, deadlines, stop).await;
            drop(done);
        });
    }
    drop(stop_tx);
    drop(listener);
    drop(done_rx);
    done_tx.closed().await;
}

async fn serve_connection(stream: TcpStream, router: Router, deadlines: Deadlines, mut stop: watch::Receiver<()>) {
    let clock = Arc::new(Clock::new(deadlines));
    let io = TokioIo::new(Tracked { inner: Some(stream), clock: clock.clone() });
    let service = {
        let clock = clock.clone();
        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let running = clock.request_started();
            let response = router.clone().oneshot(req);
            async move {
                let response = response.await.unwrap_or_else(|never: Infallible| match never {});
                // The request counts as running until hyper drops its response body (sent).
                Ok::<_, Infallible>(response.map(|body| {
                    Body::new(body.map_frame(move |frame| {
                        let _ = &running;
                        frame
                    }))
                }))
            }
        })
    };
    let mut builder = http1::Builder::new();
    // hyper's own header clock starts when the connection is ready for a request, so it spans
    // the keep-alive wait too: set to both waits together it is only a backstop to ours.
    builder.timer(TokioTimer::new()).header_read_timeout(deadlines.header + deadlines.idle);
    let conn = builder.serve_connection(io, service).with_upgrades();
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        let deadline = clock.deadline();
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = clock.changed.notified() => {}
            _ = sleep_until(deadline) => {
                if clock.deadline().is_some_and(|d| d <= Instant::now()) {
                    // Dropping the connection closes it.
                    return;
                }
            }
            _ = stop.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// What a connection is doing, for its deadline.
struct Clock {
    deadlines: Deadlines,
    state: Mutex<ClockState>,
    /// Woken when the deadline may have moved.
    changed: Notify,
}

struct ClockState {
    /// Requests whose headers arrived and whose response is not yet sent.
    running: usize,
    /// When the connection became idle, or when the first byte of the next request came.
    since: Instant,
    /// A byte of the next request has arrived (its headers are being read).
    reading: bool,
}

impl Clock {
    fn new(deadlines: Deadlines) -> Self {
        let state = ClockState { running: 0, since: Instant::now(), reading: false };
        Clock { deadlines, state: Mutex::new(state), changed: Notify::new() }
    }

    fn deadline(&self) -> Option<Instant> {
        let s = self.state.lock().unwrap();
        match (s.running, s.reading) {
            (0, false) => Some(s.since + self.deadlines.idle),
            (0, true) => Some(s.since + self.deadlines.header),
            _ => None,
        }
    }

    fn bytes_read(&self) {
        let mut s = self.state.lock().unwrap();
        if s.running == 0 && !s.reading {
            s.reading = true;
            s.since = Instant::now();
            drop(s);
            self.changed.notify_one();
        }
    }

    fn request_started(self: &Arc<Self>) -> Running {
        let mut s = self.state.lock().unwrap();
        s.running += 1;
        drop(s);
        self.changed.notify_one();
        Running(self.clone())
    }
}

/// A request in flight; dropped once its response is sent.
struct Running(Arc<Clock>);

impl Drop for Running {
    fn drop(&mut self) {
        let mut s = self.0.state.lock().unwrap();
        s.running -= 1;
        if s.running == 0 {
            s.reading = false;
            s.since = Instant::now();
        }
        drop(s);
        self.0.changed.notify_one();
    }
}

/// How long, and how many bytes, a closing connection reads what its client still sends.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 64 << 20;

/// The socket, telling the clock when bytes arrive; it lingers when dropped.
struct Tracked {
    /// `Some` until dropped.
    inner: Option<TcpStream>,
    clock: Arc<Clock>,
}

impl Tracked {
    fn io(&mut self) -> &mut TcpStream {
        self.inner.as_mut().expect("the socket is open until dropped")
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        // Dropped inside its connection's task, so a runtime is there to linger on.
        if let (Some(stream), Ok(runtime)) = (self.inner.take(), tokio::runtime::Handle::try_current()) {
            runtime.spawn(linger(stream));
        }
    }
}

/// A socket closed with input unread makes the kernel send a reset, which can destroy a response
/// the client has not read yet: a 413 answered while the body is still arriving reached the
/// client as a broken connection. So the write side is shut and what the client still sends is
/// read and dropped, for a short while, before the socket closes (nginx's lingering close).
async fn linger(mut stream: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = stream.shutdown().await;
    let mut buf = vec![0u8; 64 << 10];
    let drain = async {
        let mut left = LINGER_BYTES;
        while left > 0 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, drain).await;
}

impl AsyncRead for Tracked {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(self.io()).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.clock.bytes_read();
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(self.io()).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.io()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(TcpStream::is_write_vectored)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.io()).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.io()).poll_shutdown(cx)
    }
}
