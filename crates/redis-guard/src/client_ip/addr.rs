//! [`ClientAddr`]: the client address a [`ClientIp`](super::ClientIp) found for a request, as
//! the layers leave it in the request extensions for the handler.

use std::fmt;
use std::net::IpAddr;

/// The client's address as a [`ClientIp`](super::ClientIp) resolved it for this request: behind
/// the same trusted proxies, from the same forwarding header, with the same IPv6 grouping.
///
/// A handler gets it from the request extensions, where one of two layers puts it:
///
/// - a [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) with a rule keyed by a
///   [`ClientIp`](super::ClientIp) puts the address **that rule counted** (the first such rule
///   that applies to the request), so [`key`](Self::key) is the very key the layer limited:
///   the handler and the layer cannot disagree;
/// - a [`ClientIpLayer`](super::ClientIpLayer), for routes without such a rule, puts the
///   address its `ClientIp` finds, unless a `ClientAddr` is there already.
///
/// A rate-limit layer inside a `ClientIpLayer` replaces the address; a `ClientIpLayer` inside
/// a rate-limit layer leaves it: either way the handler sees what the limiter keyed on. With
/// the `axum` feature it is an extractor: a route where no layer put it answers `500` and logs
/// why (a server misconfiguration, like a missing `ConnectInfo`). On plain tower or hyper, read
/// it with `req.extensions().get::<ClientAddr>()`.
///
/// ```
/// # #[cfg(all(feature = "axum", feature = "rate-limit"))] {
/// use axum::{Router, routing::post};
/// use redis_guard::client_ip::{ClientAddr, ClientIp};
/// use redis_guard::rate_limit::{MemoryLimiter, Quota, RateLimitLayer};
///
/// async fn login(client: ClientAddr) -> String {
///     // `client.key()` is the key the "ip" rule below counted this request under.
///     format!("hello, {}", client.ip())
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ip = ClientIp::trusted_proxies(["10.0.0.0/8"])?;
/// let app: Router = Router::new()
///     .route("/login", post(login))
///     .layer(RateLimitLayer::new(MemoryLimiter::new(), "ip", ip, Quota::per_minute(600))?);
/// # let _ = app; Ok(()) }
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClientAddr {
    ip: IpAddr,
    ipv6_prefix: u8,
}

impl ClientAddr {
    pub(super) const fn new(ip: IpAddr, ipv6_prefix: u8) -> Self {
        Self { ip, ipv6_prefix }
    }

    /// The client's address: IPv4-mapped IPv6 as IPv4, no port, no zone id, not grouped.
    ///
    /// ```
    /// use redis_guard::client_ip::{ClientIp, PeerAddr};
    /// let mut req = http::Request::new(());
    /// req.extensions_mut().insert(PeerAddr("[::ffff:203.0.113.7]:443".parse().unwrap()));
    /// let (parts, ()) = req.into_parts();
    /// let client = ClientIp::peer().resolve(&parts).unwrap();
    /// assert_eq!(client.ip().to_string(), "203.0.113.7");
    /// ```
    #[must_use]
    pub const fn ip(&self) -> IpAddr {
        self.ip
    }

    /// The rate-limit key of this address, as [`ClientIp`](super::ClientIp) counts it: the IPv4
    /// address, or the IPv6 prefix it belongs to (`/64` unless the `ClientIp` was set otherwise).
    /// Use it for a direct [`check`](crate::rate_limit::RedisLimiter::check) in a handler, alone
    /// or in a [`Key::pair`](crate::rate_limit::Key::pair).
    ///
    /// ```
    /// use redis_guard::client_ip::{ClientIp, PeerAddr};
    /// use redis_guard::rate_limit::Key;
    /// let mut req = http::Request::new(());
    /// req.extensions_mut().insert(PeerAddr("[2001:db8::7]:443".parse().unwrap()));
    /// let (parts, ()) = req.into_parts();
    /// let client = ClientIp::peer().resolve(&parts).unwrap();
    /// assert_eq!(client.key(), Key::from("2001:db8::/64"));
    /// ```
    #[cfg(feature = "rate-limit")]
    #[must_use]
    pub fn key(&self) -> crate::rate_limit::Key {
        super::key_of(self.ip, self.ipv6_prefix)
    }
}

/// The address, as `IpAddr` shows it.
impl fmt::Display for ClientAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.ip.fmt(f)
    }
}

#[cfg(feature = "axum")]
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for ClientAddr {
    type Rejection = (http::StatusCode, &'static str);

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Self>().copied().ok_or_else(|| {
            tracing::error!(
                "ClientAddr extractor used on a route where no layer resolved the client address: \
                 add a RateLimitLayer rule keyed by ClientIp, or a ClientIpLayer, to the route"
            );
            (
                http::StatusCode::INTERNAL_SERVER_ERROR,
                "the client address is not resolved on this route",
            )
        })
    }
}
