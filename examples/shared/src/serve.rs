//! The accept loop of the demo apps: HTTP/1.1 with timeouts on
//! every read and write a client controls, a cap on open connections, the peer address handed
//! to the limiter, and graceful shutdown.
//!
//! `axum::serve` sets no timeout at all, and hyper enforces only a header-read timeout, and only
//! with a timer. What a client could hold open for ever, and what closes it here:
//!
//! | the client… | closed by |
//! | --- | --- |
//! | sends its request head slowly (slow loris), or idles on a keep-alive connection | `HEADER_READ_TIMEOUT` |
//! | sends its body slowly | `BODY_READ_TIMEOUT`, plus one second per `BODY_MIN_RATE` bytes received |
//! | does not read the response | `RESPONSE_WRITE_TIMEOUT` without progress |
//! | opens many connections | `MAX_CONNECTIONS_PER_IP`: one more from its address is closed at once, unanswered |
//! | holds connections open, idle | `MAX_CONNECTIONS`: once that many are open, the connection idle the longest is closed for each newcomer; only when every one is serving a request does the next wait in the listen backlog |
//!
//! Behind a reverse proxy every connection comes from the proxy's address: set
//! `MAX_CONNECTIONS_PER_IP` to `MAX_CONNECTIONS` there, and cap connections per client on the
//! proxy.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

mod connections;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use redis_guard::rate_limit::PeerAddr;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

use crate::settings::{self, Lookup};
use connections::{Admission, Busy, Connections};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a shutdown waits for requests in flight.
const DRAIN: Duration = Duration::from_secs(10);

/// What the server allows a client; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// `HEADER_READ_TIMEOUT`: the request head, and the idle time between keep-alive requests.
    pub header_read_timeout: Duration,
    /// `BODY_READ_TIMEOUT`: the request body, before [`Limits::body_min_rate`] extends it.
    pub body_read_timeout: Duration,
    /// `BODY_MIN_RATE`: each this many bytes of body received add one second to the body's time.
    pub body_min_rate: u32,
    /// `RESPONSE_WRITE_TIMEOUT`: how long a write may wait for the client to read.
    pub write_timeout: Duration,
    /// `MAX_CONNECTIONS`: connections served at once.
    pub max_connections: usize,
    /// `MAX_CONNECTIONS_PER_IP`: connections served at once from one client address (an IPv6
    /// /64 counting as one address).
    pub max_connections_per_ip: usize,
}

impl Limits {
    /// What the server allows a client (see the module docs): `HEADER_READ_TIMEOUT` (default
    /// `10s`), `BODY_READ_TIMEOUT` (`10s`) and `BODY_MIN_RATE` (`1024` bytes per second),
    /// `RESPONSE_WRITE_TIMEOUT` (`30s`), each timeout at most `1h`, `MAX_CONNECTIONS` (`1024`)
    /// and `MAX_CONNECTIONS_PER_IP` (a quarter of `MAX_CONNECTIONS`, at least 1; at most
    /// `MAX_CONNECTIONS`).
    pub fn from_env(get: Lookup<'_>) -> Result<Self, String> {
        let hour = Duration::from_secs(3600);
        let max_connections =
            settings::number(get, "MAX_CONNECTIONS", 1024, 1..=1_000_000, "connections")?;
        let max_connections_per_ip = match get("MAX_CONNECTIONS_PER_IP") {
            None => (max_connections / 4).max(1),
            Some(v) => v
                .trim()
                .parse()
                .ok()
                .filter(|n| (1..=max_connections).contains(n))
                .ok_or_else(|| {
                    format!(
                        "MAX_CONNECTIONS_PER_IP={v:?} must be a whole number of connections from 1 to MAX_CONNECTIONS ({max_connections})"
                    )
                })?,
        };
        Ok(Self {
            header_read_timeout: settings::duration(get, "HEADER_READ_TIMEOUT", "10s", hour)?,
            body_read_timeout: settings::duration(get, "BODY_READ_TIMEOUT", "10s", hour)?,
            body_min_rate: settings::number(
                get,
                "BODY_MIN_RATE",
                1024,
                1..=1 << 30,
                "bytes per second",
            )?,
            write_timeout: settings::duration(get, "RESPONSE_WRITE_TIMEOUT", "30s", hour)?,
            max_connections,
            max_connections_per_ip,
        })
    }
}

/// The request body the apps' services get: hyper's, cut off with an error when the client
/// sends it slower than [`Limits`] allow.
#[derive(Debug)]
pub struct RequestBody {
    inner: Incoming,
    /// When the body times out; moved later by every byte received.
    deadline: Pin<Box<Sleep>>,
    started: Instant,
    received: u64,
    timeout: Duration,
    min_rate: u32,
}

impl RequestBody {
    fn new(inner: Incoming, limits: &Limits) -> Self {
        let started = Instant::now();
        Self {
            inner,
            deadline: Box::pin(tokio::time::sleep_until(started + limits.body_read_timeout)),
            started,
            received: 0,
            timeout: limits.body_read_timeout,
            min_rate: limits.body_min_rate,
        }
    }
}

/// The error a body read ends with when the client is too slow.
#[derive(Debug)]
struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body arrived too slowly (BODY_READ_TIMEOUT, BODY_MIN_RATE)")
    }
}

impl std::error::Error for BodyTimedOut {}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        // The body first: what the client sent in time is read whenever the handler asks.
        let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) else {
            return match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimedOut.into()))),
                Poll::Pending => Poll::Pending,
            };
        };
        if let Some(data) = frame.as_ref().and_then(|f| f.as_ref().ok()?.data_ref()) {
            this.received = this.received.saturating_add(data.len() as u64);
            let earned = Duration::from_secs(this.received / u64::from(this.min_rate));
            let deadline = this.started + this.timeout.saturating_add(earned);
            this.deadline.as_mut().reset(deadline);
        }
        Poll::Ready(frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection whose writes fail once one has waited `timeout` for the client to read.
#[derive(Debug)]
struct WriteTimeout {
    stream: TcpStream,
    timeout: Duration,
    /// Armed while a write waits; cleared by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl WriteTimeout {
    /// `Pending` from a write: start (or check) the stall timer.
    fn stall<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not read the response (RESPONSE_WRITE_TIMEOUT)",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<T>(
        &mut self,
        poll: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match poll {
            Poll::Pending => self.stall(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl AsyncRead for WriteTimeout {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteTimeout {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.progress(poll, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.progress(poll, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.stream).poll_flush(cx);
        self.progress(poll, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.stream).poll_shutdown(cx);
        self.progress(poll, cx)
    }
}

/// Serves `service` on `listener` until `shutdown` completes, then lets requests in flight
/// finish (for up to 10 s). Every request carries the peer address as [`PeerAddr`].
///
/// At most [`Limits::max_connections`] connections are served at once, at most
/// [`Limits::max_connections_per_ip`] of them from one address (one more is closed at once,
/// unanswered: a response would spend on it what the cap saves). When the total is reached,
/// a newcomer takes the place of the connection idle the longest (closed without losing a
/// request: one that has just started is answered first); only when every connection is
/// serving a request does the newcomer wait, and the ones after it in the listen backlog.
pub async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) where
    S: tower::Service<Request<RequestBody>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let connections = Arc::new(Connections::new(
        limits.max_connections,
        limits.max_connections_per_ip,
    ));
    // Graceful shutdown: every connection watches `stop`; `closed` tells when all have ended.
    let (stop, stopping) = watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    'accept: loop {
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
        // While this one waits for room, the next ones wait in the kernel's backlog.
        let handle = loop {
            let mut changed = std::pin::pin!(connections.changed());
            changed.as_mut().enable();
            match connections.admit(peer.ip()) {
                Admission::Admitted(handle) => break handle,
                Admission::OverAddressCap => {
                    tracing::debug!(%peer, "connection closed: its address is at MAX_CONNECTIONS_PER_IP");
                    continue 'accept;
                }
                Admission::Full => tokio::select! {
                    () = changed => {}
                    () = &mut shutdown => break 'accept,
                },
            }
        };
        let tracker = handle.tracker();
        let svc = service
            .clone()
            .map_request(move |req: Request<Incoming>| {
                let mut req = req.map(|body| RequestBody::new(body, &limits));
                req.extensions_mut().insert(PeerAddr(peer));
                req
            })
            .map_future(move |response| {
                // Busy from the call until the response body is sent or dropped.
                let busy = tracker.busy();
                async move {
                    let response = response.await?;
                    Ok::<_, S::Error>(response.map(|inner| Tracked { inner, busy }))
                }
            });
        let io = WriteTimeout {
            stream,
            timeout: limits.write_timeout,
            stalled: None,
        };
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .serve_connection(TokioIo::new(io), TowerToHyperService::new(svc));
        let mut stopping = stopping.clone();
        tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            let mut closing = false;
            loop {
                tokio::select! {
                    ended = conn.as_mut() => {
                        if let Err(e) = ended {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    // Closed when idle; a request already started is answered first.
                    () = handle.close_requested(), if !closing => {
                        tracing::debug!(%peer, "idle connection closed to make room (MAX_CONNECTIONS)");
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                    _ = stopping.changed(), if !closing => {
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                }
            }
            drop(handle);
            drop(stopping);
        });
    }
    drop(listener);
    drop(stopping);
    stop.send_replace(());
    if tokio::time::timeout(DRAIN, stop.closed()).await.is_err() {
        tracing::warn!("requests still in flight after {DRAIN:?}: exiting anyway");
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its connection busy (not to be closed for room) until it
    /// has been sent or dropped.
    struct Tracked<B> {
        #[pin]
        inner: B,
        busy: Busy,
    }
}

impl<B: Body> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_limits_default_and_name_the_bad_variable() {
        let limits = |vars: &[(&str, &str)]| {
            Limits::from_env(&|name| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            })
        };
        assert_eq!(
            limits(&[]),
            Ok(Limits {
                header_read_timeout: Duration::from_secs(10),
                body_read_timeout: Duration::from_secs(10),
                body_min_rate: 1024,
                write_timeout: Duration::from_secs(30),
                max_connections: 1024,
                max_connections_per_ip: 256,
            })
        );
        let set = limits(&[("BODY_MIN_RATE", " 10 "), ("MAX_CONNECTIONS", "2")]).unwrap();
        assert_eq!((set.body_min_rate, set.max_connections), (10, 2));
        // A quarter of the total by default, never less than one.
        assert_eq!(set.max_connections_per_ip, 1);
        let set = limits(&[
            ("MAX_CONNECTIONS", "10"),
            ("MAX_CONNECTIONS_PER_IP", " 10 "),
        ])
        .unwrap();
        assert_eq!(set.max_connections_per_ip, 10);
        let e = limits(&[("MAX_CONNECTIONS", "10"), ("MAX_CONNECTIONS_PER_IP", "11")]).unwrap_err();
        assert!(e.contains("from 1 to MAX_CONNECTIONS (10)"), "{e}");
        for (name, bad) in [
            ("HEADER_READ_TIMEOUT", "0s"),
            ("BODY_READ_TIMEOUT", "2h"),
            ("BODY_MIN_RATE", "0"),
            ("BODY_MIN_RATE", "fast"),
            ("RESPONSE_WRITE_TIMEOUT", "30"),
            ("MAX_CONNECTIONS", "0"),
            ("MAX_CONNECTIONS", "1000001"),
            ("MAX_CONNECTIONS_PER_IP", "0"),
            ("MAX_CONNECTIONS_PER_IP", "1025"),
            ("MAX_CONNECTIONS_PER_IP", "-1"),
            ("MAX_CONNECTIONS_PER_IP", "many"),
        ] {
            let e = limits(&[(name, bad)]).unwrap_err();
            assert!(e.starts_with(&format!("{name}={bad:?}")), "{e}");
        }
    }
}
