//! The listener: HTTP/1.1 and h2 on one port, and a graceful stop.
//!
//! On shutdown the listener closes first (no new connections), then in-flight requests and open
//! streams get up to `drain` to finish before the process exits.
//!
//! A connection holds one of `max_connections` slots for as long as it is open, so a connection
//! that idles (HTTP/1 keep-alive between requests, an h2 connection with no stream) is closed
//! after the header timeout: otherwise a client could hold every slot by doing nothing.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::app::handle;
use crate::state::App;

/// How long open requests and streams may run after a stop signal. Defaults to 25 s.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(25);

/// The most a connection's read buffer grows to. hyper grows it with the reads it fills, to
/// about 400 KiB by default, and keeps that much reserved while the connection idles between
/// requests: an agent's body of a few hundred KB left each keep-alive connection holding
/// 0.8 MB (50 MB of 200 at 64 connections, `heaptrack` under `benches/hop.sh`'s growing
/// arm, on the system allocator: `--no-default-features`). At 64 KiB a 355 KB body takes six
/// reads instead of one or two, a few microseconds, and the body is copied out of the buffer
/// as it comes (`forward::read_body`) either way.
/// A request's head must fit in it: 64 KiB is eight times nginx's default limit for a header
/// line (`large_client_header_buffers`), and a longer head is answered 431.
const READ_BUFFER_MAX: usize = 64 * 1024;

/// Serves `app` on `listener` until `stop` resolves, then drains for at most `drain`.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    stop: impl std::future::Future<Output = ()>,
    drain: Duration,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // A connection that sends partial headers, or idles between requests, is closed after
    // `header_timeout` (hyper's timer starts when it waits for a request's first byte).
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(app.settings().header_timeout)
        .max_buf_size(READ_BUFFER_MAX);
    let slots = Arc::new(Semaphore::new(app.settings().max_connections));
    tokio::pin!(stop);
    loop {
        // At the cap, new connections wait in the kernel's backlog rather than in sluice.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = &mut stop => break,
        };
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %err, "Accept failed.");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let (app, builder, watcher) = (app.clone(), builder.clone(), graceful.watcher());
                tokio::spawn(connection(app, stream, peer, builder, watcher, slot));
            }
            () = &mut stop => break,
        }
    }
    drop(listener);
    // The dashboard's live feeds never end by themselves; they must not hold the drain.
    if let Some(dashboard) = app.dashboard() {
        dashboard.close_live();
    }
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            seconds = drain.as_secs(),
            "Drain timed out; closing remaining connections."
        );
    }
    // The requests have ended: the last rows go to the dashboard's file before the process does.
    if let Some(dashboard) = app.dashboard().cloned() {
        let _ = tokio::task::spawn_blocking(move || dashboard.close()).await;
    }
}

/// Serves one accepted connection until it ends, goes idle for the header timeout, or the
/// drain closes it; `_slot` holds its place under `max_connections` until then.
async fn connection(
    app: Arc<App>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    builder: auto::Builder<TokioExecutor>,
    watcher: hyper_util::server::graceful::Watcher,
    _slot: tokio::sync::OwnedSemaphorePermit,
) {
    // A connection that never sends a byte is closed after the header timeout:
    // hyper's own timer starts only with the first byte of a request.
    let mut first = [0u8; 1];
    let wait = app.settings().header_timeout;
    if !matches!(tokio::time::timeout(wait, stream.peek(&mut first)).await, Ok(Ok(n)) if n > 0) {
        return;
    }
    let activity = Arc::new(Activity::new());
    let busy = activity.clone();
    let service = service_fn(move |request| {
        let (app, busy) = (app.clone(), busy.clone());
        async move {
            // Counted until the response body is done or dropped: a stream that
            // pauses (a model thinking) is not idle.
            let request_in_flight = busy.begin();
            let response = handle(app, peer, request).await?;
            Ok::<_, std::convert::Infallible>(response.map(|body| {
                BodyExt::boxed(Counted {
                    body,
                    _in_flight: request_in_flight,
                })
            }))
        }
    });
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: activity.clone(),
    });
    let connection = builder.serve_connection_with_upgrades(io, service);
    let connection = watcher.watch(connection.into_owned());
    tokio::pin!(connection);
    loop {
        tokio::select! {
            ended = &mut connection => {
                if let Err(err) = ended {
                    tracing::debug!(error = %err, %peer, "Connection ended with an error.");
                }
                break;
            }
            () = tokio::time::sleep(wait / 2) => {
                // Idle: no request in flight, and none started or finished and no
                // byte written for the whole timeout. Dropping it closes it.
                if activity.idle_for() >= wait && activity.in_flight() == 0 {
                    break;
                }
            }
        }
    }
}

/// When a connection last started or finished a request or wrote a byte, and how many of its
/// requests are in flight (until their response body is done).
struct Activity {
    started: Instant,
    last_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn touch(&self) {
        let now = self.started.elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last)
    }

    fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.touch();
        InFlight(self.clone())
    }
}

/// One request awaiting its response head; counted down on drop (a cancelled one too).
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// A response body that keeps its request counted as in flight until it is dropped.
struct Counted {
    body: crate::respond::Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = crate::respond::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A stream that records when it last wrote a byte (a response still going out is activity).
struct Watched<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    /// Reads are not activity: an h2 client that only pings, or sends settings, opens no
    /// request and must not hold its slot (a request is counted when it starts, and a partial
    /// HTTP/1 head is hyper's header timeout).
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn stop_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// Binds `addr` (port 0 picks one) and returns the listener and the address it got.
///
/// # Errors
/// When the address cannot be bound.
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}
