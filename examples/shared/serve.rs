//! The accept loop of both example apps (included with `#[path]`): HTTP/1.1 with a header-read
//! timeout, the peer address handed to the limiter, and graceful shutdown.
//!
//! `axum::serve` sets no header-read timeout, and hyper enforces one only with a timer: a client
//! sending its request head one byte at a time (slow loris) held a connection, and a task, for
//! ever. Here hyper closes a connection whose head is not complete within the timeout; the same
//! timer closes keep-alive connections idle that long.

use std::future::Future;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use redis_guard::rate_limit::PeerAddr;
use tokio::net::TcpListener;
use tower::ServiceExt;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a shutdown waits for requests in flight.
const DRAIN: Duration = Duration::from_secs(10);

/// Serves `service` on `listener` until `shutdown` completes, then lets requests in flight
/// finish (for up to 10 s). Every request carries the peer address as [`PeerAddr`].
pub(crate) async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    header_read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) where
    S: tower::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let svc = service
            .clone()
            .map_request(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(PeerAddr(peer));
                req
            });
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after {DRAIN:?}: exiting anyway");
    }
}

/// Completes on Ctrl-C or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
