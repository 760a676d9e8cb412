//! The listener: HTTP/1.1 and h2 on one port, and a graceful stop.
//!
//! On shutdown the listener closes first (no new connections), then in-flight requests and open
//! streams get up to `drain` to finish before the process exits.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::app::{App, handle};

/// How long open requests and streams may run after a stop signal. Defaults to 25 s.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(25);

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
        .header_read_timeout(app.settings().header_timeout);
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
                let app = app.clone();
                let (builder, watcher) = (builder.clone(), graceful.watcher());
                tokio::spawn(async move {
                    // A connection that never sends a byte is closed after the header timeout:
                    // hyper's own timer starts only with the first byte of a request.
                    let mut first = [0u8; 1];
                    let wait = app.settings().header_timeout;
                    if !matches!(tokio::time::timeout(wait, stream.peek(&mut first)).await, Ok(Ok(n)) if n > 0) {
                        drop(slot);
                        return;
                    }
                    let service = service_fn(move |request| handle(app.clone(), peer, request));
                    let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    if let Err(err) = watcher.watch(connection.into_owned()).await {
                        tracing::debug!(error = %err, %peer, "Connection ended with an error.");
                    }
                    drop(slot);
                });
            }
            () = &mut stop => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            seconds = drain.as_secs(),
            "Drain timed out; closing remaining connections."
        );
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
