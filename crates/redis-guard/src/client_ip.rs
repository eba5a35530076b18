//! The client's address, as the rate limiter and the sessions see it: [`ClientIp`] reads it
//! from the TCP peer ([`PeerAddr`], or axum's `ConnectInfo`) and, behind reverse proxies you
//! trust, from the one forwarding header they write ([`ForwardedHeader`]).
//!
//! The same `ClientIp` is a rate-limit key extractor (feature `rate-limit`, where it is also
//! re-exported as `redis_guard::rate_limit::ClientIp`) and what a session layer records as each
//! session's address ([`SessionLayerBuilder::client_ip`](crate::session::SessionLayerBuilder::client_ip)):
//! give both the same one, so a client cannot write its own address into the device listing
//! while the limiter counts the proxy's.
//!
//! A handler that needs the address (a login form limited by address and user name, an audit
//! line) takes a [`ClientAddr`]: the address a rate-limit rule keyed by `ClientIp` counted, or
//! the one a [`ClientIpLayer`] found, left in the request extensions by the layer itself, so
//! it cannot disagree with what the layer limited.

#[cfg(feature = "rate-limit")]
use std::fmt::Write as _;
use std::net::IpAddr;
#[cfg(feature = "rate-limit")]
use std::net::Ipv6Addr;
use std::sync::Arc;

use http::HeaderMap;
use http::request::Parts;

mod addr;
mod cidr;
mod forwarded;
mod layer;
mod peer;

pub use addr::ClientAddr;
use cidr::{Cidr, is_trusted};
pub use forwarded::ForwardedHeader;
use forwarded::resolve_chain;
pub use layer::{ClientIpLayer, ClientIpService};
pub use peer::PeerAddr;
#[cfg(feature = "rate-limit")]
use peer::peer_addr;

#[cfg(feature = "rate-limit")]
use crate::rate_limit::{Inline, Key, KeyError, KeyExtractor};

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
/// # fn main() -> Result<(), redis_guard::ConfigError> {
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
    pub const MAX_HOPS: usize = forwarded::MAX_HOPS;

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
    /// use redis_guard::ConfigErrorKind;
    /// use redis_guard::rate_limit::ClientIp;
    /// assert!(ClientIp::trusted_proxies(["10.0.0.0/8", "192.168.1.1", "::1/128"]).is_ok());
    /// let err = ClientIp::trusted_proxies(["10.0.0.0/33"]).unwrap_err();
    /// assert_eq!(err.kind(), ConfigErrorKind::TrustedProxy);
    /// assert_eq!(err.value(), Some("10.0.0.0/33"));
    /// assert!(err.to_string().contains("prefix length"));
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`](crate::ConfigError) for the first entry that is not an address or CIDR.
    pub fn trusted_proxies<I, S>(cidrs: I) -> Result<Self, crate::ConfigError>
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
    /// # fn main() -> Result<(), redis_guard::ConfigError> {
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
    #[cfg(feature = "rate-limit")]
    #[must_use]
    pub fn key_for(&self, ip: IpAddr) -> Key {
        key_of(ip, self.ipv6_prefix)
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
    #[cfg(feature = "rate-limit")]
    pub fn client_ip(&self, parts: &Parts) -> Result<IpAddr, KeyError> {
        self.client_ip_in(&parts.headers, &parts.extensions)
    }

    /// [`client_ip`](Self::client_ip) from a request's headers and extensions, where they are
    /// (the rate-limit layer reads them without taking the request apart).
    #[cfg(feature = "rate-limit")]
    pub(crate) fn client_ip_in(
        &self,
        headers: &HeaderMap,
        extensions: &http::Extensions,
    ) -> Result<IpAddr, KeyError> {
        Ok(self.behind(headers, peer_addr(extensions)?.ip()))
    }

    /// The client's address as a [`ClientAddr`] (what [`ClientIpLayer`] and the rate-limit
    /// layer leave in the request extensions), or `None`, with nothing logged, when the request
    /// carries no peer address.
    ///
    /// ```
    /// use redis_guard::client_ip::{ClientIp, PeerAddr};
    /// # fn main() -> Result<(), redis_guard::ConfigError> {
    /// let ip = ClientIp::trusted_proxies(["10.0.0.0/8"])?;
    /// let mut req = http::Request::get("/")
    ///     .header("x-forwarded-for", "203.0.113.7, 10.0.0.2")
    ///     .body(())
    ///     .unwrap();
    /// req.extensions_mut().insert(PeerAddr("10.0.0.1:40000".parse().unwrap()));
    /// let (parts, ()) = req.into_parts();
    /// assert_eq!(ip.resolve(&parts).unwrap().to_string(), "203.0.113.7");
    /// assert_eq!(ip.resolve(&http::Request::new(()).into_parts().0), None);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn resolve(&self, parts: &Parts) -> Option<ClientAddr> {
        peer::peer(&parts.extensions).map(|addr| self.addr(self.behind(&parts.headers, addr.ip())))
    }

    /// The client's address, or `None` (nothing logged) when the request carries no peer
    /// address: what sessions record.
    #[cfg(feature = "session")]
    pub(crate) fn address(
        &self,
        headers: &HeaderMap,
        extensions: &http::Extensions,
    ) -> Option<IpAddr> {
        peer::peer(extensions).map(|addr| self.behind(headers, addr.ip()))
    }

    /// `ip`, found by this `ClientIp`, with its grouping.
    pub(crate) const fn addr(&self, ip: IpAddr) -> ClientAddr {
        ClientAddr::new(ip, self.ipv6_prefix)
    }

    /// The client's address for a request from `peer`.
    fn behind(&self, headers: &HeaderMap, peer: IpAddr) -> IpAddr {
        let peer = peer.to_canonical();
        match self.trusted.as_deref() {
            Some(trusted) if is_trusted(trusted, peer) => {
                resolve_chain(trusted, self.header, headers, peer)
            }
            _ => peer,
        }
    }
}

/// The decimal digits of every octet, then their count: `[b'7', _, _, 1]`, `[b'2', b'5', b'5', 3]`.
#[cfg(feature = "rate-limit")]
const OCTETS: [[u8; 4]; 256] = {
    let mut table = [[0; 4]; 256];
    let mut i = 0;
    while i < 256 {
        // Below 256: fits a byte.
        #[allow(clippy::cast_possible_truncation)]
        let n = i as u8;
        table[i] = if n >= 100 {
            [b'0' + n / 100, b'0' + n / 10 % 10, b'0' + n % 10, 3]
        } else if n >= 10 {
            [b'0' + n / 10, b'0' + n % 10, 0, 2]
        } else {
            [b'0' + n, 0, 0, 1]
        };
        i += 1;
    }
    table
};

/// The key `ClientIp` counts `ip` under, IPv6 grouped by `ipv6_prefix` bits.
#[cfg(feature = "rate-limit")]
fn key_of(ip: IpAddr, ipv6_prefix: u8) -> Key {
    // Written in place (no formatter for IPv4, no allocation for either): this runs per
    // request. Every form fits a key's inline bytes.
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            // Dotted decimal, as `Display` writes it, at most 15 bytes: each octet's digits
            // copied from a table, a dot after each (the last one dropped).
            let mut out = [0; 16];
            let mut n = 0;
            for octet in v4.octets() {
                let [a, b, c, len] = OCTETS[usize::from(octet)];
                out[n..n + 4].copy_from_slice(&[a, b, c, b'.']);
                // Shifts the dot back over the unused digit slots.
                out[n + usize::from(len)] = b'.';
                n += usize::from(len) + 1;
            }
            Inline::filled(out, n - 1).unwrap_or_else(|| Key::copied(&out[..n - 1]))
        }
        IpAddr::V6(v6) => {
            let bits = u32::from(ipv6_prefix);
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            let net = Ipv6Addr::from(u128::from(v6) & mask);
            let mut key = Inline::default();
            // A key grows past its inline bytes, so writing to it cannot fail.
            let _ = write!(key, "{net}/{bits}");
            key.key()
        }
    }
}

#[cfg(feature = "rate-limit")]
impl KeyExtractor for ClientIp {
    fn extract(&self, parts: &Parts) -> Result<Key, KeyError> {
        self.client_ip(parts).map(|ip| self.key_for(ip))
    }
}

#[cfg(all(test, feature = "rate-limit"))]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn parts_with(addr: &str) -> Parts {
        let mut req = http::Request::new(());
        req.extensions_mut().insert(PeerAddr(addr.parse().unwrap()));
        req.into_parts().0
    }

    /// A request from `peer` with the given header lines.
    fn request(peer: &str, headers: &[(&str, &str)]) -> Parts {
        let mut parts = parts_with(peer);
        for (name, value) in headers {
            let name = http::HeaderName::from_bytes(name.as_bytes()).unwrap();
            parts
                .headers
                .append(name, HeaderValue::from_str(value).unwrap());
        }
        parts
    }

    fn xff(peer: &str, value: &str) -> Parts {
        request(peer, &[("x-forwarded-for", value)])
    }

    fn proxied() -> ClientIp {
        ClientIp::trusted_proxies(["10.0.0.0/8", "fd00::/8"]).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The client `id` finds in a request from `peer` with `X-Forwarded-For: value`.
    fn client(id: &ClientIp, peer: &str, value: &str) -> IpAddr {
        id.client_ip(&xff(peer, value)).unwrap()
    }

    // The walk and the header grammar are tested in `forwarded`; these test what `ClientIp`
    // adds: the peer, its trust, the configured header and the key.

    #[test]
    fn client_sent_forwarded_header_is_ignored_behind_xff_proxies() {
        // The proxy appends to X-Forwarded-For and passes the client's Forwarded through.
        let parts = request(
            "10.0.0.1:1",
            &[
                ("forwarded", "for=6.6.6.6"),
                ("x-forwarded-for", "203.0.113.7"),
            ],
        );
        assert_eq!(proxied().client_ip(&parts), Ok(ip("203.0.113.7")));
        assert_eq!(proxied().extract(&parts), Ok(Key::from("203.0.113.7")));
        // With `Forwarded` configured, X-Forwarded-For is the one ignored.
        let rfc = proxied().forwarded_header(ForwardedHeader::Forwarded);
        assert_eq!(rfc.client_ip(&parts), Ok(ip("6.6.6.6")));
        assert_eq!(rfc.extract(&parts), Ok(Key::from("6.6.6.6")));
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
        assert_eq!(proxied().extract(&parts), Ok(Key::from("203.0.113.9")));
        let parts = request("203.0.113.9:5000", &[("forwarded", "for=1.2.3.4")]);
        let rfc = proxied().forwarded_header(ForwardedHeader::Forwarded);
        assert_eq!(rfc.client_ip(&parts), Ok(ip("203.0.113.9")));
        // `peer()` never reads headers, even from a private address.
        assert_eq!(
            client(&ClientIp::peer(), "10.0.0.1:1", "1.2.3.4"),
            ip("10.0.0.1")
        );
        // A trusted peer is the client when there is no chain.
        assert_eq!(
            proxied().client_ip(&parts_with("10.0.0.1:1")),
            Ok(ip("10.0.0.1"))
        );
    }

    #[test]
    fn ipv6_clients_in_one_prefix_share_a_key() {
        let key = |value: &str| proxied().extract(&xff("[fd00::1]:1", value)).unwrap();
        let a = key("2001:db8:1:2::1");
        let b = key("[2001:db8:1:2:ffff::9]:8080");
        let c = key("2001:db8:1:3::1");
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a, Key::from("2001:db8:1:2::/64"));
        // client_ip is not grouped
        let v6 = "2001:db8:1:2::1";
        assert_eq!(client(&proxied(), "[fd00::1]:1", v6), ip(v6));
        // Nor does the header matter.
        let parts = request("10.0.0.1:1", &[("forwarded", r#"for="[2001:db8::1]:443""#)]);
        let rfc = proxied().forwarded_header(ForwardedHeader::Forwarded);
        assert_eq!(rfc.extract(&parts), Ok(Key::from("2001:db8::/64")));
    }

    #[test]
    fn mapped_ipv4_matches_ipv4_everywhere() {
        // As peer, against an IPv4 CIDR.
        let mapped_peer = "[::ffff:10.0.0.1]:1";
        assert_eq!(client(&proxied(), mapped_peer, "1.2.3.4"), ip("1.2.3.4"));
        // As chain entry: one key.
        let key = |value: &str| proxied().extract(&xff("10.0.0.1:1", value)).unwrap();
        assert_eq!(key("::ffff:1.2.3.4"), key("1.2.3.4"));
        assert_eq!(key("[::ffff:1.2.3.4]:99"), key("1.2.3.4"));
        // As a trusted CIDR written in mapped form.
        let mapped = ClientIp::trusted_proxies(["::ffff:10.0.0.0/104"]).unwrap();
        assert_eq!(client(&mapped, "10.9.9.9:1", "1.2.3.4"), ip("1.2.3.4"));
        assert_eq!(client(&mapped, "11.0.0.1:1", "1.2.3.4"), ip("11.0.0.1"));
    }

    #[test]
    fn trusted_proxy_lists() {
        // The first bad entry is reported, as given.
        for (input, why) in [
            ("", "empty entry"),
            ("banana", "not an IP address"),
            ("10.0.0.0/8/1", "prefix length"),
        ] {
            let err = ClientIp::trusted_proxies(["127.0.0.1", input, "nope"]).unwrap_err();
            assert_eq!(
                err.kind(),
                crate::ConfigErrorKind::TrustedProxy,
                "{input:?}"
            );
            assert_eq!(err.value(), Some(input), "{input:?}");
            assert!(err.to_string().contains(why), "{input:?}: {err}");
        }
        let none: [&str; 0] = [];
        let id = ClientIp::trusted_proxies(none).unwrap();
        assert!(id.trusted.is_none());
        assert_eq!(client(&id, "10.0.0.1:1", "1.2.3.4"), ip("10.0.0.1"));
        let owned = ClientIp::trusted_proxies(vec![String::from("10.0.0.0/8")]).unwrap();
        assert!(format!("{owned:?}").contains("10.0.0.0/8"));
    }

    #[test]
    fn peer_stays_const() {
        const PEER: ClientIp = ClientIp::peer().ipv6_prefix(56);
        assert_eq!(PEER.ipv6_prefix, 56);
    }

    #[test]
    fn ipv4_keys_are_dotted_decimal() {
        // The key is part of Redis key names (through its digest): it must stay `Display`'s.
        let id = ClientIp::peer();
        for n in 0..=255_u8 {
            for v4 in [[n, 0, 9, 10], [99, n, 100, 255], [1, 2, n, 3], [n, n, n, n]] {
                let v4 = std::net::Ipv4Addr::from(v4);
                assert_eq!(id.key_for(v4.into()).as_bytes(), v4.to_string().as_bytes());
            }
        }
    }
}
