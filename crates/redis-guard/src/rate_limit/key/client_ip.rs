use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};

use http::request::Parts;

use super::{Key, KeyError, KeyExtractor};

/// The address of the TCP peer, for stacks that are not axum: insert it into each request's
/// extensions (hyper's `serve_connection` knows the peer; see `examples/hyper-app`).
///
/// With the `axum` feature, [`ClientIp`] also reads `axum::extract::ConnectInfo<SocketAddr>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

const NO_PEER: &str = "no peer address in the request extensions. With axum, serve the router with \
     `into_make_service_with_connect_info::<std::net::SocketAddr>()`; with hyper or tower, insert \
     `redis_guard::rate_limit::PeerAddr(addr)` into each request's extensions";

static LOGGED_NO_PEER: AtomicBool = AtomicBool::new(false);

/// The client's IP address, normalized so that one client is one key.
///
/// - IPv4-mapped IPv6 (`::ffff:1.2.3.4`) counts as the IPv4 address;
/// - IPv6 addresses are grouped by prefix, `/64` by default: one subscriber usually holds a whole
///   `/64` and could otherwise rotate through 2⁶⁴ buckets;
/// - ports never count.
///
/// [`ClientIp::peer`] trusts only the TCP peer. A missing peer address is a server
/// misconfiguration: the layer answers `500` and logs, once, how to fix it.
///
/// ```
/// use redis_guard::rate_limit::{ClientIp, Key, KeyExtractor, PeerAddr};
/// let ip = ClientIp::peer();
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(PeerAddr("[2001:db8::1]:443".parse().unwrap()));
/// let (parts, ()) = req.into_parts();
/// assert_eq!(ip.extract(&parts), Ok(Key::from("2001:db8::/64")));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ClientIp {
    ipv6_prefix: u8,
}

impl ClientIp {
    /// The TCP peer's address: right when clients connect directly.
    #[must_use]
    pub const fn peer() -> Self {
        Self { ipv6_prefix: 64 }
    }

    /// Groups IPv6 clients by a prefix of `bits` (clamped to 1..=128; 128 keys each address).
    #[must_use]
    pub const fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.ipv6_prefix = if bits == 0 {
            1
        } else if bits > 128 {
            128
        } else {
            bits
        };
        self
    }

    /// The normalized key for `ip`.
    #[must_use]
    pub fn key_for(&self, ip: IpAddr) -> Key {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Key::from(v4.to_string()),
            IpAddr::V6(v6) => {
                let bits = u32::from(self.ipv6_prefix);
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                let net = Ipv6Addr::from(u128::from(v6) & mask);
                Key::from(format!("{net}/{bits}"))
            }
        }
    }

    /// The peer address from the request extensions.
    pub(crate) fn peer_addr(parts: &Parts) -> Option<SocketAddr> {
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
}

impl KeyExtractor for ClientIp {
    fn extract(&self, parts: &Parts) -> Result<Key, KeyError> {
        if let Some(addr) = Self::peer_addr(parts) {
            return Ok(self.key_for(addr.ip()));
        }
        if !LOGGED_NO_PEER.swap(true, Ordering::Relaxed) {
            tracing::error!("redis-guard: ClientIp cannot limit: {NO_PEER}");
        }
        Err(KeyError::Misconfigured(NO_PEER))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts_with(addr: &str) -> Parts {
        let mut req = http::Request::new(());
        req.extensions_mut().insert(PeerAddr(addr.parse().unwrap()));
        req.into_parts().0
    }

    #[test]
    fn mapped_ipv4_is_ipv4_and_ports_do_not_count() {
        let ip = ClientIp::peer();
        let a = ip.extract(&parts_with("1.2.3.4:1000")).unwrap();
        let b = ip.extract(&parts_with("[::ffff:1.2.3.4]:2000")).unwrap();
        assert_eq!(a, b);
        assert_eq!(a, Key::from("1.2.3.4"));
    }

    #[test]
    fn ipv6_grouped_by_prefix() {
        let ip = ClientIp::peer();
        let a = ip.extract(&parts_with("[2001:db8:1:2::1]:1")).unwrap();
        let b = ip.extract(&parts_with("[2001:db8:1:2:ffff::9]:1")).unwrap();
        let c = ip.extract(&parts_with("[2001:db8:1:3::1]:1")).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let exact = ClientIp::peer().ipv6_prefix(128);
        assert_ne!(
            exact.extract(&parts_with("[2001:db8:1:2::1]:1")),
            exact.extract(&parts_with("[2001:db8:1:2::2]:1"))
        );
        assert_eq!(ClientIp::peer().ipv6_prefix(0).ipv6_prefix, 1);
    }

    #[test]
    fn missing_peer_is_a_configuration_error() {
        let (parts, ()) = http::Request::new(()).into_parts();
        let err = ClientIp::peer().extract(&parts).unwrap_err();
        assert!(matches!(err, KeyError::Misconfigured(m) if m.contains("connect_info")));
    }
}
