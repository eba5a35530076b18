//! [`PeerAddr`]: the TCP peer's address, which the server puts into each request's extensions.

use std::net::SocketAddr;
#[cfg(feature = "rate-limit")]
use std::sync::atomic::{AtomicBool, Ordering};

use http::request::Parts;

#[cfg(feature = "rate-limit")]
use crate::rate_limit::KeyError;

/// The address of the TCP peer, for stacks that are not axum: insert it into each request's
/// extensions (hyper's `serve_connection` knows the peer; see `examples/hyper-app`).
///
/// With the `axum` feature, [`ClientIp`](super::ClientIp) also reads
/// `axum::extract::ConnectInfo<SocketAddr>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

#[cfg(feature = "rate-limit")]
const NO_PEER: &str = "no peer address in the request extensions. With axum, serve the router with \
     `into_make_service_with_connect_info::<std::net::SocketAddr>()`; with hyper or tower, insert \
     `redis_guard::client_ip::PeerAddr(addr)` into each request's extensions";

#[cfg(feature = "rate-limit")]
static LOGGED_NO_PEER: AtomicBool = AtomicBool::new(false);

/// The peer address from the request extensions (as [`PeerAddr`] or axum's `ConnectInfo`), if
/// any: sessions record no address without one, and log nothing.
pub(super) fn peer(parts: &Parts) -> Option<SocketAddr> {
    if let Some(PeerAddr(addr)) = parts.extensions.get::<PeerAddr>() {
        return Some(*addr);
    }
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(*addr);
    }
    None
}

/// The peer address from the request extensions. Its absence is a server misconfiguration,
/// logged once with how to fix it.
#[cfg(feature = "rate-limit")]
pub(super) fn peer_addr(parts: &Parts) -> Result<SocketAddr, KeyError> {
    if let Some(addr) = peer(parts) {
        return Ok(addr);
    }
    if !LOGGED_NO_PEER.swap(true, Ordering::Relaxed) {
        tracing::error!("redis-guard: ClientIp cannot limit: {NO_PEER}");
    }
    Err(KeyError::Misconfigured(NO_PEER))
}

#[cfg(all(test, feature = "rate-limit"))]
mod tests {
    use super::*;

    fn parts_with<T: Clone + Send + Sync + 'static>(extension: T) -> Parts {
        let mut req = http::Request::new(());
        req.extensions_mut().insert(extension);
        req.into_parts().0
    }

    #[test]
    fn peer_addr_is_read_from_the_extensions() {
        let addr: SocketAddr = "[2001:db8::1]:443".parse().unwrap();
        assert_eq!(peer_addr(&parts_with(PeerAddr(addr))), Ok(addr));
        #[cfg(feature = "axum")]
        assert_eq!(
            peer_addr(&parts_with(axum::extract::ConnectInfo(addr))),
            Ok(addr)
        );
        let err = peer_addr(&parts_with(addr)).unwrap_err();
        assert!(matches!(err, KeyError::Misconfigured(m) if m.contains("connect_info")));
    }
}
