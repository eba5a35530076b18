//! [`PeerAddr`]: the TCP peer's address, which the server puts into each request's extensions.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use http::request::Parts;

use super::error::KeyError;

/// The address of the TCP peer, for stacks that are not axum: insert it into each request's
/// extensions (hyper's `serve_connection` knows the peer; see `examples/hyper-app`).
///
/// With the `axum` feature, [`ClientIp`](super::ClientIp) also reads
/// `axum::extract::ConnectInfo<SocketAddr>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

const NO_PEER: &str = "no peer address in the request extensions. With axum, serve the router with \
     `into_make_service_with_connect_info::<std::net::SocketAddr>()`; with hyper or tower, insert \
     `redis_guard::rate_limit::PeerAddr(addr)` into each request's extensions";

static LOGGED_NO_PEER: AtomicBool = AtomicBool::new(false);

/// Whether the request extensions carry the peer address (as [`PeerAddr`] or axum's
/// `ConnectInfo`): what sessions check before recording a client address, so an app without
/// one records none rather than logging a rate-limit misconfiguration.
#[cfg_attr(not(feature = "session"), allow(dead_code))]
pub(crate) fn has_peer(parts: &Parts) -> bool {
    #[cfg(feature = "axum")]
    if parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .is_some()
    {
        return true;
    }
    parts.extensions.get::<PeerAddr>().is_some()
}

/// The peer address from the request extensions. Its absence is a server misconfiguration,
/// logged once with how to fix it.
pub(super) fn peer_addr(parts: &Parts) -> Result<SocketAddr, KeyError> {
    if let Some(PeerAddr(addr)) = parts.extensions.get::<PeerAddr>() {
        return Ok(*addr);
    }
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Ok(*addr);
    }
    if !LOGGED_NO_PEER.swap(true, Ordering::Relaxed) {
        tracing::error!("redis-guard: ClientIp cannot limit: {NO_PEER}");
    }
    Err(KeyError::Misconfigured(NO_PEER))
}

#[cfg(test)]
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
