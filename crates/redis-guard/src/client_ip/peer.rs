//! [`PeerAddr`]: the TCP peer's address, which the server puts into each request's extensions.

use std::net::SocketAddr;
#[cfg(feature = "rate-limit")]
use std::sync::atomic::{AtomicBool, Ordering};

use http::Extensions;

#[cfg(feature = "rate-limit")]
use crate::rate_limit::KeyError;

/// The address of the TCP peer, for stacks that are not axum: insert it into each request's
/// extensions (hyper's `serve_connection` knows the peer; see `examples/hyper-app`).
///
/// With the `axum` feature (on by default), [`ClientIp`](super::ClientIp) also reads
/// `axum::extract::ConnectInfo<SocketAddr>`, which axum 0.8 puts there when the router is served
/// with `into_make_service_with_connect_info::<SocketAddr>()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// The text of [`NO_PEER`], with what to say about the `axum` feature: every cause of a missing
/// peer address, each with its fix. Built by a macro because `concat!` takes literals only.
#[cfg(feature = "rate-limit")]
macro_rules! no_peer {
    ($axum_off:literal) => {
        concat!(
            "no peer address in the request extensions. Causes, each with its fix: ",
            $axum_off,
            "axum served without connect info: serve the router with \
             `into_make_service_with_connect_info::<std::net::SocketAddr>()`; \
             a server, proxy layer or test harness that does not put the peer address in the \
             request (hyper's `serve_connection`, tonic, a test calling `Router::oneshot`): \
             insert `redis_guard::client_ip::PeerAddr(addr)` into each request's extensions \
             (an axum test can add the layer `axum::extract::connect_info::MockConnectInfo(addr)`); \
             an axum other than 0.8, whose `ConnectInfo` redis-guard does not read: insert \
             `PeerAddr(addr)` from it"
        )
    };
}

/// What a missing peer address is logged with, and what [`KeyError::Misconfigured`] says.
#[cfg(all(feature = "rate-limit", feature = "axum"))]
const NO_PEER: &str = no_peer!("");
#[cfg(all(feature = "rate-limit", not(feature = "axum")))]
const NO_PEER: &str = no_peer!(
    "redis-guard's feature `axum` is off, so axum's `ConnectInfo` is not read: enable it \
     (it is on by default; `features = [\"axum\"]` with `default-features = false`); "
);

#[cfg(feature = "rate-limit")]
static LOGGED_NO_PEER: AtomicBool = AtomicBool::new(false);

/// The peer address from the request extensions (as [`PeerAddr`] or axum's `ConnectInfo`), if
/// any: sessions record no address without one, and log nothing.
pub(super) fn peer(extensions: &Extensions) -> Option<SocketAddr> {
    if let Some(PeerAddr(addr)) = extensions.get::<PeerAddr>() {
        return Some(*addr);
    }
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) =
        extensions.get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(*addr);
    }
    None
}

/// The peer address from the request extensions. Its absence is a server misconfiguration,
/// logged once with how to fix it.
#[cfg(feature = "rate-limit")]
pub(super) fn peer_addr(extensions: &Extensions) -> Result<SocketAddr, KeyError> {
    if let Some(addr) = peer(extensions) {
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

    fn extensions_with<T: Clone + Send + Sync + 'static>(extension: T) -> Extensions {
        let mut extensions = Extensions::new();
        extensions.insert(extension);
        extensions
    }

    #[test]
    fn peer_addr_is_read_from_the_extensions() {
        let addr: SocketAddr = "[2001:db8::1]:443".parse().unwrap();
        assert_eq!(peer_addr(&extensions_with(PeerAddr(addr))), Ok(addr));
        #[cfg(feature = "axum")]
        assert_eq!(
            peer_addr(&extensions_with(axum::extract::ConnectInfo(addr))),
            Ok(addr)
        );
        let err = peer_addr(&extensions_with(addr)).unwrap_err();
        assert!(matches!(err, KeyError::Misconfigured(m) if m.contains("connect_info")));
    }

    /// The one line a user reads names every cause of a missing peer address with its fix, the
    /// `axum` feature only in a build where it is off.
    #[test]
    fn the_misconfiguration_line_names_every_cause_and_its_fix() {
        let KeyError::Misconfigured(line) = peer_addr(&extensions_with(())).unwrap_err() else {
            panic!("a missing peer is a misconfiguration");
        };
        for fix in [
            "into_make_service_with_connect_info::<std::net::SocketAddr>()",
            "redis_guard::client_ip::PeerAddr(addr)",
            "Router::oneshot",
            "MockConnectInfo",
            "an axum other than 0.8",
        ] {
            assert!(line.contains(fix), "{fix:?} in {line:?}");
        }
        let names_feature = line.contains("feature `axum` is off");
        assert_eq!(names_feature, cfg!(not(feature = "axum")), "{line}");
        if names_feature {
            assert!(line.contains(r#"features = ["axum"]"#), "{line}");
        }
    }
}
