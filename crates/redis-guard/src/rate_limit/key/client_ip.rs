use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::request::Parts;

use super::cidr::{Cidr, ProxyConfigError, is_trusted};
use super::forwarded::{ForwardedHeader, resolve_chain};
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
///
/// # Behind reverse proxies
///
/// [`ClientIp::trusted_proxies`] reads the forwarding headers, but only as far as they were
/// written by proxies you trust. The client address is found like this:
///
/// 1. Take the TCP peer address. If it is not in a trusted CIDR, it is the client, and every
///    forwarding header is ignored: anybody can send `X-Forwarded-For`.
/// 2. Otherwise take the forwarding chain from the **one** header your proxies write, which you
///    configure with [`ClientIp::forwarded_header`]: `X-Forwarded-For` by default (all its
///    lines, in order, comma separated), or the `for=` parameters of the RFC 7239 `Forwarded`
///    header (all its lines, in order, elements separated by commas). The other header is
///    ignored completely. It is never guessed from the request: most proxies append to
///    `X-Forwarded-For` and pass a client's own `Forwarded` through untouched, so a client could
///    otherwise send `Forwarded: for=<anything>` and pick a fresh key for every request.
/// 3. Walk the chain from right to left (each proxy appends the address it received the request
///    from). Entries in a trusted CIDR are skipped; the first untrusted entry is the client.
/// 4. If every entry is trusted, the left-most one is the client (e.g. an internal caller).
/// 5. If the chain is empty, the trusted peer itself is the client.
///
/// The walk stops early, and the client is the *nearest address verified so far* (the last
/// trusted entry to the right of the stop, or the peer itself when there is none), when:
///
/// - an entry is not an address: `unknown`, an obfuscated identifier such as `_hidden`, an empty
///   entry, a `Forwarded` element without a `for=` parameter or with a malformed parameter,
///   invalid text or non-UTF-8 bytes. What lies to its left cannot be verified, so it is not
///   guessed at: such requests share the bucket of the proxy that forwarded them, which limits
///   them together rather than letting a client choose its key;
/// - [`ClientIp::MAX_HOPS`] entries have been examined: a header with thousands of entries costs
///   a bounded amount of work.
///
/// Entries may be `1.2.3.4`, `1.2.3.4:5678`, `2001:db8::1`, `[2001:db8::1]` or
/// `[2001:db8::1]:443`, and in `Forwarded` also quoted (`for="[2001:db8::1]:443"`) and with an
/// obfuscated port (`for="1.2.3.4:_p1"`). Parameter names are case-insensitive and whitespace
/// around parameters is ignored; `by=`, `host=`, `proto=` and any other parameter are ignored.
/// An IPv6 zone id (`fe80::1%eth0`, `[fe80::1%25eth0]`) is stripped: it names an interface of the
/// proxy, not a different client. IPv4-mapped IPv6 addresses, as peer, as chain entries or as
/// trusted CIDRs (`::ffff:10.0.0.0/104`), are compared as IPv4.
///
/// ```
/// use redis_guard::rate_limit::{ClientIp, Key, KeyExtractor, PeerAddr};
/// # fn main() -> Result<(), redis_guard::rate_limit::ProxyConfigError> {
/// let ip = ClientIp::trusted_proxies(["10.0.0.0/8", "fd00::/8"])?;
///
/// let mut req = http::Request::get("/")
///     .header("x-forwarded-for", "6.6.6.6, 203.0.113.7, 10.0.0.2")
///     .body(())
///     .unwrap();
/// req.extensions_mut().insert(PeerAddr("10.0.0.1:40000".parse().unwrap()));
/// let (parts, ()) = req.into_parts();
/// // 10.0.0.1 and 10.0.0.2 are our proxies; 6.6.6.6 was sent by the client and does not count.
/// assert_eq!(ip.extract(&parts), Ok(Key::from("203.0.113.7")));
/// # Ok(()) }
/// ```
///
/// Trust only addresses that clients cannot connect from: if the application is also reachable
/// directly from inside `10.0.0.0/8`, any host there can pick its own key.
#[derive(Clone, Debug)]
pub struct ClientIp {
    ipv6_prefix: u8,
    /// `None`: only the peer counts. Never `Some` of an empty list.
    trusted: Option<Arc<[Cidr]>>,
    header: ForwardedHeader,
}

impl ClientIp {
    /// The most forwarding-chain entries examined per request, counted from the right. A chain
    /// of more trusted hops than this ends the walk at the last one examined.
    pub const MAX_HOPS: usize = 32;

    /// The TCP peer's address: right when clients connect directly.
    #[must_use]
    pub const fn peer() -> Self {
        Self {
            ipv6_prefix: 64,
            trusted: None,
            header: ForwardedHeader::XForwardedFor,
        }
    }

    /// The client address behind reverse proxies: the peer and the forwarding headers, as far as
    /// the proxies in `cidrs` wrote them (see [the type's docs](ClientIp#behind-reverse-proxies)).
    ///
    /// Each entry is an address (`"192.168.1.1"`, the same as `/32`, or `/128` for IPv6) or a
    /// CIDR (`"10.0.0.0/8"`, `"fd00::/8"`, `"::1/128"`); surrounding whitespace is ignored and
    /// host bits below the prefix are cleared (`"10.1.2.3/8"` is `"10.0.0.0/8"`). An empty list
    /// trusts nobody, like [`ClientIp::peer`].
    ///
    /// ```
    /// use redis_guard::rate_limit::{ClientIp, ProxyConfigError};
    /// assert!(ClientIp::trusted_proxies(["10.0.0.0/8", "192.168.1.1", "::1/128"]).is_ok());
    /// let err = ClientIp::trusted_proxies(["10.0.0.0/33"]).unwrap_err();
    /// assert_eq!(err, ProxyConfigError::InvalidPrefix("10.0.0.0/33".into()));
    /// assert!(err.to_string().contains("10.0.0.0/33"));
    /// ```
    ///
    /// # Errors
    ///
    /// [`ProxyConfigError`] for the first entry that is not an address or CIDR.
    pub fn trusted_proxies<I, S>(cidrs: I) -> Result<Self, ProxyConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let list = cidrs
            .into_iter()
            .map(|s| Cidr::parse(s.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            ipv6_prefix: 64,
            trusted: if list.is_empty() {
                None
            } else {
                Some(Arc::from(list))
            },
            header: ForwardedHeader::XForwardedFor,
        })
    }

    /// Which header the trusted proxies write (default [`ForwardedHeader::XForwardedFor`]); the
    /// other one is ignored. Set it to what your proxy writes, and make sure that proxy
    /// overwrites or appends to that header on every request.
    ///
    /// ```
    /// use redis_guard::rate_limit::{ClientIp, ForwardedHeader, Key, KeyExtractor, PeerAddr};
    /// # fn main() -> Result<(), redis_guard::rate_limit::ProxyConfigError> {
    /// let xff = ClientIp::trusted_proxies(["10.0.0.0/8"])?;
    /// let mut req = http::Request::get("/")
    ///     .header("x-forwarded-for", "203.0.113.7")
    ///     .header("forwarded", "for=6.6.6.6") // sent by the client, passed through by the proxy
    ///     .body(())
    ///     .unwrap();
    /// req.extensions_mut().insert(PeerAddr("10.0.0.1:40000".parse().unwrap()));
    /// let (parts, ()) = req.into_parts();
    /// assert_eq!(xff.extract(&parts), Ok(Key::from("203.0.113.7")));
    /// let rfc = xff.forwarded_header(ForwardedHeader::Forwarded);
    /// assert_eq!(rfc.extract(&parts), Ok(Key::from("6.6.6.6")));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub const fn forwarded_header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
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

    /// The client's address, before IPv6 grouping: the peer, or with
    /// [`ClientIp::trusted_proxies`] the address found in the forwarding headers. IPv4-mapped
    /// IPv6 is returned as IPv4; ports and zone ids are dropped.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use redis_guard::rate_limit::{ClientIp, PeerAddr};
    /// let mut req = http::Request::new(());
    /// req.extensions_mut().insert(PeerAddr("[2001:db8::7]:443".parse().unwrap()));
    /// let (parts, ()) = req.into_parts();
    /// let ip: IpAddr = "2001:db8::7".parse().unwrap();
    /// assert_eq!(ClientIp::peer().client_ip(&parts), Ok(ip));
    /// ```
    ///
    /// # Errors
    ///
    /// [`KeyError::Misconfigured`] when the request carries no peer address (logged once).
    pub fn client_ip(&self, parts: &Parts) -> Result<IpAddr, KeyError> {
        let Some(peer) = Self::peer_addr(parts) else {
            if !LOGGED_NO_PEER.swap(true, Ordering::Relaxed) {
                tracing::error!("redis-guard: ClientIp cannot limit: {NO_PEER}");
            }
            return Err(KeyError::Misconfigured(NO_PEER));
        };
        let peer = peer.ip().to_canonical();
        match self.trusted.as_deref() {
            Some(trusted) if is_trusted(trusted, peer) => {
                Ok(resolve_chain(trusted, self.header, &parts.headers, peer))
            }
            _ => Ok(peer),
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
        self.client_ip(parts).map(|ip| self.key_for(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn parts_with(addr: &str) -> Parts {
        let mut req = http::Request::new(());
        req.extensions_mut().insert(PeerAddr(addr.parse().unwrap()));
        req.into_parts().0
    }

    /// A request from `peer` with the given header lines (bytes, so non-UTF-8 works).
    fn request(peer: &str, headers: &[(&str, &[u8])]) -> Parts {
        let mut parts = parts_with(peer);
        for (name, value) in headers {
            let name = http::HeaderName::from_bytes(name.as_bytes()).unwrap();
            parts
                .headers
                .append(name, HeaderValue::from_bytes(value).unwrap());
        }
        parts
    }

    fn xff(peer: &str, value: &str) -> Parts {
        request(peer, &[("x-forwarded-for", value.as_bytes())])
    }

    fn fwd(peer: &str, value: &str) -> Parts {
        request(peer, &[("forwarded", value.as_bytes())])
    }

    fn proxied() -> ClientIp {
        ClientIp::trusted_proxies(["10.0.0.0/8", "fd00::/8"]).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The client as seen by proxies that write the header this request carries.
    fn client(parts: &Parts) -> IpAddr {
        let header = if parts.headers.contains_key("forwarded") {
            ForwardedHeader::Forwarded
        } else {
            ForwardedHeader::XForwardedFor
        };
        proxied().forwarded_header(header).client_ip(parts).unwrap()
    }

    #[test]
    fn client_sent_forwarded_header_is_ignored_behind_xff_proxies() {
        // The proxy appends to X-Forwarded-For and passes the client's Forwarded through.
        let p = "10.0.0.1:1";
        for spoof in ["for=1.1.1.1", "for=6.6.6.6", "for=10.0.0.5", "for=unknown"] {
            let parts = request(
                p,
                &[
                    ("forwarded", spoof.as_bytes()),
                    ("x-forwarded-for", b"203.0.113.7"),
                ],
            );
            assert_eq!(
                proxied().client_ip(&parts),
                Ok(ip("203.0.113.7")),
                "{spoof}"
            );
            assert_eq!(proxied().extract(&parts), Ok(Key::from("203.0.113.7")));
        }
        // Forwarded alone is not read either: the peer is the nearest verified hop.
        let parts = fwd(p, "for=1.1.1.1");
        assert_eq!(proxied().client_ip(&parts), Ok(ip("10.0.0.1")));
        // And with `Forwarded` configured, X-Forwarded-For is the one ignored.
        let rfc = proxied().forwarded_header(ForwardedHeader::Forwarded);
        let parts = request(
            p,
            &[
                ("forwarded", b"for=203.0.113.7"),
                ("x-forwarded-for", b"6.6.6.6"),
            ],
        );
        assert_eq!(rfc.client_ip(&parts), Ok(ip("203.0.113.7")));
        assert_eq!(rfc.client_ip(&xff(p, "6.6.6.6")), Ok(ip("10.0.0.1")));
    }

    #[test]
    fn forwarded_header_names_parse() {
        for (s, h) in [
            ("x-forwarded-for", ForwardedHeader::XForwardedFor),
            ("X-Forwarded-For", ForwardedHeader::XForwardedFor),
            (" forwarded ", ForwardedHeader::Forwarded),
        ] {
            assert_eq!(s.parse::<ForwardedHeader>(), Ok(h));
        }
        let err = "x-real-ip".parse::<ForwardedHeader>().unwrap_err();
        assert_eq!(err, ProxyConfigError::UnknownHeader("x-real-ip".into()));
        assert!(err.to_string().contains("x-real-ip"));
        assert_eq!(ForwardedHeader::default().to_string(), "x-forwarded-for");
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
        let err = proxied().client_ip(&parts).unwrap_err();
        assert!(matches!(err, KeyError::Misconfigured(_)));
    }

    #[test]
    fn headers_from_an_untrusted_peer_are_ignored() {
        let parts = xff("203.0.113.9:5000", "1.2.3.4");
        assert_eq!(client(&parts), ip("203.0.113.9"));
        assert_eq!(proxied().extract(&parts), Ok(Key::from("203.0.113.9")));
        let parts = fwd("203.0.113.9:5000", "for=1.2.3.4");
        assert_eq!(client(&parts), ip("203.0.113.9"));
        // `peer()` never reads headers, even from a private address.
        let parts = xff("10.0.0.1:5000", "1.2.3.4");
        assert_eq!(ClientIp::peer().client_ip(&parts), Ok(ip("10.0.0.1")));
    }

    #[test]
    fn right_most_untrusted_entry_is_the_client() {
        let parts = xff("10.0.0.1:5000", "6.6.6.6, 1.2.3.4, 10.0.0.2");
        assert_eq!(client(&parts), ip("1.2.3.4"));
        assert_eq!(proxied().extract(&parts), Ok(Key::from("1.2.3.4")));
        // Whatever the client puts on the left does not change its key.
        for spoof in [
            "7.7.7.7",
            "10.0.0.9",
            "unknown",
            "",
            "7.7.7.7, 8.8.8.8, ::1",
        ] {
            let parts = xff("10.0.0.1:5000", &format!("{spoof}, 1.2.3.4, 10.0.0.2"));
            assert_eq!(client(&parts), ip("1.2.3.4"), "{spoof}");
        }
    }

    #[test]
    fn trusted_peer_without_headers_is_the_client() {
        assert_eq!(client(&parts_with("10.0.0.1:1")), ip("10.0.0.1"));
    }

    #[test]
    fn all_entries_trusted_gives_the_left_most() {
        let parts = xff("10.0.0.1:5000", "10.1.1.1, 10.0.0.3, 10.0.0.2");
        assert_eq!(client(&parts), ip("10.1.1.1"));
    }

    #[test]
    fn ipv6_clients_in_one_prefix_share_a_key() {
        let a = proxied()
            .extract(&xff("[fd00::1]:1", "2001:db8:1:2::1"))
            .unwrap();
        let b = proxied()
            .extract(&xff("[fd00::1]:1", "[2001:db8:1:2:ffff::9]:8080"))
            .unwrap();
        let c = proxied()
            .extract(&xff("[fd00::1]:1", "2001:db8:1:3::1"))
            .unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a, Key::from("2001:db8:1:2::/64"));
        // client_ip is not grouped
        assert_eq!(
            client(&xff("[fd00::1]:1", "2001:db8:1:2::1")),
            ip("2001:db8:1:2::1")
        );
    }

    #[test]
    fn mapped_ipv4_matches_ipv4_everywhere() {
        // As peer, against an IPv4 CIDR.
        assert_eq!(
            client(&xff("[::ffff:10.0.0.1]:1", "1.2.3.4")),
            ip("1.2.3.4")
        );
        // As chain entry, trusted and untrusted.
        assert_eq!(
            client(&xff("10.0.0.1:1", "1.2.3.4, ::ffff:10.0.0.2")),
            ip("1.2.3.4")
        );
        let mapped = proxied()
            .extract(&xff("10.0.0.1:1", "::ffff:1.2.3.4"))
            .unwrap();
        let plain = proxied().extract(&xff("10.0.0.1:1", "1.2.3.4")).unwrap();
        let bracketed = proxied()
            .extract(&xff("10.0.0.1:1", "[::ffff:1.2.3.4]:99"))
            .unwrap();
        assert_eq!(mapped, plain);
        assert_eq!(bracketed, plain);
        assert_eq!(client(&xff("10.0.0.1:1", "::ffff:1.2.3.4")), ip("1.2.3.4"));
        // As a trusted CIDR written in mapped form.
        let mapped_cidr = ClientIp::trusted_proxies(["::ffff:10.0.0.0/104"]).unwrap();
        assert_eq!(
            mapped_cidr.client_ip(&xff("10.9.9.9:1", "1.2.3.4")),
            Ok(ip("1.2.3.4"))
        );
        assert_eq!(
            mapped_cidr.client_ip(&xff("11.0.0.1:1", "1.2.3.4")),
            Ok(ip("11.0.0.1"))
        );
    }

    #[test]
    fn forwarded_header() {
        let p = "10.0.0.1:1";
        assert_eq!(
            client(&fwd(p, r#"for="[2001:db8::1]:443";proto=https"#)),
            ip("2001:db8::1")
        );
        assert_eq!(
            proxied()
                .forwarded_header(ForwardedHeader::Forwarded)
                .extract(&fwd(p, r#"for="[2001:db8::1]:443""#)),
            Ok(Key::from("2001:db8::/64"))
        );
        assert_eq!(client(&fwd(p, r#"for="1.2.3.4""#)), ip("1.2.3.4"));
        assert_eq!(client(&fwd(p, r#"for="1.2.3.4:_p1""#)), ip("1.2.3.4"));
        assert_eq!(
            client(&fwd(
                p,
                "proto=http ; For = 1.2.3.4 ;by=10.0.0.1;host=example.com"
            )),
            ip("1.2.3.4")
        );
        assert_eq!(client(&fwd(p, "FOR=1.2.3.4:80")), ip("1.2.3.4"));
        assert_eq!(
            client(&fwd(
                p,
                r#"for=6.6.6.6, for="1.2.3.4", for=10.0.0.2;by=10.0.0.1"#
            )),
            ip("1.2.3.4")
        );
        // Empty pairs are allowed.
        assert_eq!(client(&fwd(p, ";for=1.2.3.4;;")), ip("1.2.3.4"));
    }

    #[test]
    fn forwarded_takes_precedence_over_x_forwarded_for() {
        let parts = request(
            "10.0.0.1:1",
            &[
                ("x-forwarded-for", b"7.7.7.7"),
                ("forwarded", b"for=5.5.5.5"),
            ],
        );
        assert_eq!(client(&parts), ip("5.5.5.5"));
        // Even when Forwarded gives no usable address: the headers are never mixed.
        let parts = request(
            "10.0.0.1:1",
            &[
                ("x-forwarded-for", b"7.7.7.7"),
                ("forwarded", b"proto=https"),
            ],
        );
        assert_eq!(client(&parts), ip("10.0.0.1"));
    }

    #[test]
    fn multiple_header_lines_are_one_chain() {
        let parts = request(
            "10.0.0.1:1",
            &[
                ("x-forwarded-for", b"6.6.6.6, 1.2.3.4"),
                ("x-forwarded-for", b"10.0.0.3"),
            ],
        );
        assert_eq!(client(&parts), ip("1.2.3.4"));
        let parts = request(
            "10.0.0.1:1",
            &[
                ("x-forwarded-for", b"6.6.6.6"),
                ("x-forwarded-for", b"10.0.0.4, 10.0.0.3"),
            ],
        );
        assert_eq!(client(&parts), ip("6.6.6.6"));
        let parts = request(
            "10.0.0.1:1",
            &[
                ("forwarded", b"for=6.6.6.6, for=1.2.3.4"),
                ("forwarded", b"for=10.0.0.3;proto=https"),
            ],
        );
        assert_eq!(client(&parts), ip("1.2.3.4"));
    }

    #[test]
    fn garbage_stops_the_walk_at_the_nearest_verified_hop() {
        let p = "10.0.0.1:1";
        for garbage in [
            "unknown",
            "_abc",
            "999.1.1.1",
            "",
            " ",
            "::::",
            "1.2.3",
            "01.2.3.4",
            "1.2.3.4:",
            "1.2.3.4:99999",
            "1.2.3.4:80:80",
            "[1.2.3.4]",
            "[::1",
            "[::1]x",
            "[::1]:",
            "fe80::1%",
            "fe80::1% eth0",
            "1.2.3.4%eth0",
            "\"1.2.3.4\"",
        ] {
            // Garbage right next to the peer: the peer is the nearest verified hop.
            assert_eq!(
                client(&xff(p, &format!("1.2.3.4, {garbage}"))),
                ip("10.0.0.1"),
                "{garbage:?}"
            );
            // Garbage behind a trusted entry: that entry.
            assert_eq!(
                client(&xff(p, &format!("1.2.3.4, {garbage}, 10.0.0.2"))),
                ip("10.0.0.2"),
                "{garbage:?}"
            );
            // Garbage to the left of the client does not matter.
            assert_eq!(
                client(&xff(p, &format!("{garbage}, 1.2.3.4, 10.0.0.2"))),
                ip("1.2.3.4"),
                "{garbage:?}"
            );
        }
        for element in [
            "for=unknown",
            "for=_hidden",
            "for=\"_hidden\"",
            "for=",
            "for=\"",
            "for=\"1.2.3.4",
            "proto=https",
            "for=1.2.3.4;for=5.6.7.8",
            "for=1.2.3.4;garbage",
            "by=10.0.0.1",
            "for=\"[::1\\]\"",
        ] {
            assert_eq!(
                client(&fwd(p, &format!("for=1.2.3.4, {element}"))),
                ip("10.0.0.1"),
                "{element:?}"
            );
        }
        // Non-UTF-8 bytes.
        let parts = request(p, &[("x-forwarded-for", b"1.2.3.4, \xff\xfe, 10.0.0.2")]);
        assert_eq!(client(&parts), ip("10.0.0.2"));
        let parts = request(p, &[("x-forwarded-for", b"\xff\xfe, 1.2.3.4")]);
        assert_eq!(client(&parts), ip("1.2.3.4"));
        let parts = request(p, &[("forwarded", b"for=1.2.3.4, for=\xc3\x28")]);
        assert_eq!(client(&parts), ip("10.0.0.1"));
        // Non-UTF-8 bytes in another parameter: the element is still garbage-free.
        let parts = request(p, &[("forwarded", b"for=1.2.3.4;host=\xff")]);
        assert_eq!(client(&parts), ip("1.2.3.4"));
    }

    #[test]
    fn zone_ids_are_stripped() {
        let p = "10.0.0.1:1";
        assert_eq!(client(&xff(p, "fe80::1%eth0")), ip("fe80::1"));
        assert_eq!(client(&xff(p, "[fe80::1%25eth0]:80")), ip("fe80::1"));
        assert_eq!(client(&fwd(p, r#"for="[fe80::1%eth0]""#)), ip("fe80::1"));
    }

    #[test]
    fn long_chains_are_capped() {
        let p = "10.0.0.1:1";
        // 1,000 trusted entries: the walk stops after MAX_HOPS, at the last one examined.
        let entries: Vec<String> = (0..1000_u32)
            .map(|i| format!("10.0.{}.{}", i / 256, i % 256))
            .collect();
        let parts = xff(p, &entries.join(", "));
        let expected = ip(&entries[1000 - ClientIp::MAX_HOPS]);
        assert_eq!(client(&parts), expected);
        // An untrusted entry within the cap is found.
        let mut entries: Vec<String> = (0..1000_u32)
            .map(|i| format!("1.1.{}.{}", i / 256, i % 256))
            .collect();
        entries.push("10.0.0.2".into());
        assert_eq!(client(&xff(p, &entries.join(","))), ip("1.1.3.231"));
        // One beyond the cap is not.
        let mut entries = vec!["1.2.3.4".to_owned()];
        entries.extend((0..ClientIp::MAX_HOPS).map(|i| format!("10.0.1.{i}")));
        assert_eq!(client(&xff(p, &entries.join(","))), ip("10.0.1.0"));
        // Split over 1,000 header lines.
        let lines: Vec<(&str, &[u8])> = (0..1000)
            .map(|_| ("x-forwarded-for", b"10.0.0.7".as_slice()))
            .collect();
        assert_eq!(client(&request(p, &lines)), ip("10.0.0.7"));
        // The same for Forwarded.
        let elements: Vec<String> = (0..1000_u32)
            .map(|i| format!("for=10.0.{}.{};proto=https", i / 256, i % 256))
            .collect();
        assert_eq!(client(&fwd(p, &elements.join(", "))), expected);
    }

    #[test]
    fn huge_values_are_garbage() {
        let p = "10.0.0.1:1";
        let big = "1".repeat(100_000);
        assert_eq!(client(&xff(p, &big)), ip("10.0.0.1"));
        assert_eq!(
            client(&xff(p, &format!("1.2.3.4, {big}, 10.0.0.2"))),
            ip("10.0.0.2")
        );
        let commas = ",".repeat(100_000);
        assert_eq!(client(&xff(p, &commas)), ip("10.0.0.1"));
        let many = "1.2.3.4,".repeat(12_500);
        assert_eq!(client(&xff(p, &many)), ip("10.0.0.1"));
        assert_eq!(client(&xff(p, &format!("{many}5.6.7.8"))), ip("5.6.7.8"));
        let semis = format!("for=1.2.3.4{}", ";".repeat(100_000));
        assert_eq!(client(&fwd(p, &semis)), ip("10.0.0.1"));
        // Whitespace is trimmed (in linear time) before the length check.
        let spaces = format!("{}1.2.3.4", " ".repeat(100_000));
        assert_eq!(client(&xff(p, &spaces)), ip("1.2.3.4"));
    }

    #[test]
    fn pseudo_random_headers_never_panic() {
        const ALPHABET: &[u8] = b"0123456789abcdefABCDEF.:[]%,;=\"_ \tforFORunknwn\x80\xff/-";
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            state >> 33
        };
        let all = ClientIp::trusted_proxies(["0.0.0.0/0", "::/0"]).unwrap();
        let ids = [
            proxied(),
            proxied().forwarded_header(ForwardedHeader::Forwarded),
            all.clone(),
            all.forwarded_header(ForwardedHeader::Forwarded),
        ];
        let mut tried = 0;
        for round in 0..4000 {
            let len = usize::try_from(next() % 80).unwrap();
            let value: Vec<u8> = (0..len)
                .map(|_| {
                    let r = usize::try_from(next()).unwrap();
                    if r % 7 == 0 {
                        u8::try_from(r % 256).unwrap()
                    } else {
                        ALPHABET[r % ALPHABET.len()]
                    }
                })
                .collect();
            let Ok(value) = HeaderValue::from_bytes(&value) else {
                continue;
            };
            tried += 1;
            let name = if round % 2 == 0 {
                "x-forwarded-for"
            } else {
                "forwarded"
            };
            let mut parts = parts_with("10.0.0.1:1");
            parts.headers.append(name, value.clone());
            parts.headers.append(name, value);
            for id in &ids {
                assert!(id.extract(&parts).is_ok());
            }
        }
        assert!(tried > 1000, "only {tried} valid header values");
    }

    #[test]
    fn cidr_parsing() {
        let ok = |s: &str| format!("{:?}", Cidr::parse(s).unwrap());
        assert_eq!(ok("10.0.0.0/8"), "10.0.0.0/8");
        assert_eq!(ok(" 10.1.2.3/8 "), "10.0.0.0/8");
        assert_eq!(ok("192.168.1.1"), "192.168.1.1/32");
        assert_eq!(ok("::1"), "::1/128");
        assert_eq!(ok("::1/128"), "::1/128");
        assert_eq!(ok("fd00::/8"), "fd00::/8");
        assert_eq!(ok("0.0.0.0/0"), "0.0.0.0/0");
        assert_eq!(ok("::ffff:10.0.0.0/104"), "10.0.0.0/8");
        assert_eq!(ok("::ffff:1.2.3.4"), "1.2.3.4/32");

        let cases = [
            ("", ProxyConfigError::Empty(String::new())),
            ("  ", ProxyConfigError::Empty("  ".into())),
            ("banana", ProxyConfigError::InvalidAddress("banana".into())),
            (
                "10.0.0/8",
                ProxyConfigError::InvalidAddress("10.0.0/8".into()),
            ),
            (
                "[::1]/128",
                ProxyConfigError::InvalidAddress("[::1]/128".into()),
            ),
            ("/8", ProxyConfigError::InvalidAddress("/8".into())),
            (
                "10.0.0.0/33",
                ProxyConfigError::InvalidPrefix("10.0.0.0/33".into()),
            ),
            ("::1/129", ProxyConfigError::InvalidPrefix("::1/129".into())),
            (
                "10.0.0.0/8/1",
                ProxyConfigError::InvalidPrefix("10.0.0.0/8/1".into()),
            ),
            (
                "10.0.0.0/",
                ProxyConfigError::InvalidPrefix("10.0.0.0/".into()),
            ),
            (
                "10.0.0.0/+8",
                ProxyConfigError::InvalidPrefix("10.0.0.0/+8".into()),
            ),
            (
                "10.0.0.0/-1",
                ProxyConfigError::InvalidPrefix("10.0.0.0/-1".into()),
            ),
            (
                "10.0.0.0/0008",
                ProxyConfigError::InvalidPrefix("10.0.0.0/0008".into()),
            ),
            (
                "10.0.0.0/ 8",
                ProxyConfigError::InvalidPrefix("10.0.0.0/ 8".into()),
            ),
        ];
        for (input, expected) in cases {
            let err = ClientIp::trusted_proxies(["127.0.0.1", input]).unwrap_err();
            assert_eq!(err, expected, "{input:?}");
            assert!(err.to_string().contains(&format!("{input:?}")), "{err}");
        }
        let err = ClientIp::trusted_proxies(["10.0.0.0/8/1"]).unwrap_err();
        assert!(err.to_string().contains("10.0.0.0/8/1"));

        let none: [&str; 0] = [];
        let id = ClientIp::trusted_proxies(none).unwrap();
        assert!(id.trusted.is_none());
        assert_eq!(
            id.client_ip(&xff("10.0.0.1:1", "1.2.3.4")),
            Ok(ip("10.0.0.1"))
        );
        let owned = ClientIp::trusted_proxies(vec![String::from("10.0.0.0/8")]).unwrap();
        assert!(format!("{owned:?}").contains("10.0.0.0/8"));
    }

    #[test]
    fn cidr_matching() {
        let net = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(net.contains(ip("10.255.255.255")));
        assert!(!net.contains(ip("11.0.0.0")));
        assert!(!net.contains(ip("::a00:1")));
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains(ip("fdff::1")));
        assert!(!v6.contains(ip("fe00::1")));
        assert!(!v6.contains(ip("10.0.0.1")));
        let all = Cidr::parse("::/0").unwrap();
        assert!(all.contains(ip("2001:db8::1")));
        assert!(!all.contains(ip("1.2.3.4")));
        let host = Cidr::parse("192.168.1.1").unwrap();
        assert!(host.contains(ip("192.168.1.1")));
        assert!(!host.contains(ip("192.168.1.2")));
    }

    #[test]
    fn peer_stays_const() {
        const PEER: ClientIp = ClientIp::peer().ipv6_prefix(56);
        assert_eq!(PEER.ipv6_prefix, 56);
    }
}
