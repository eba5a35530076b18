//! Forwarding headers (`Forwarded`, RFC 7239, and `X-Forwarded-For`): the chain of addresses a
//! request passed through, walked right to left over trusted proxies (see
//! [`ClientIp`](super::ClientIp)).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::HeaderMap;

use super::cidr::{Cidr, is_trusted};
use crate::{ConfigError, ConfigErrorKind};

/// The most chain entries examined per request: [`ClientIp::MAX_HOPS`](super::ClientIp::MAX_HOPS).
pub(super) const MAX_HOPS: usize = 32;

/// Longest forwarding-chain entry (one address, with brackets, zone and port) that is parsed;
/// anything longer is not an address.
const MAX_NODE_LEN: usize = 128;

/// Longest `Forwarded` element (`for=…;by=…;host=…;proto=…`) that is parsed.
const MAX_ELEMENT_LEN: usize = 1024;

/// Which forwarding header the trusted proxies write. The other one is never read.
///
/// This is configuration, never detected from the request: nginx, HAProxy, Envoy and cloud load
/// balancers append to `X-Forwarded-For` and pass a client's own `Forwarded` header through
/// untouched, so reading `Forwarded` whenever it is present would let a client choose its key.
///
/// ```
/// use redis_guard::rate_limit::{ClientIp, ForwardedHeader};
/// # fn main() -> Result<(), redis_guard::ConfigError> {
/// // The default: X-Forwarded-For, as written by nginx, HAProxy, AWS ALB, GCP LB and Envoy.
/// let xff = ClientIp::trusted_proxies(["10.0.0.0/8"])?;
/// // A proxy that writes RFC 7239 `Forwarded` (and removes what clients sent).
/// let rfc = ClientIp::trusted_proxies(["10.0.0.0/8"])?.forwarded_header(ForwardedHeader::Forwarded);
/// assert_eq!("forwarded".parse(), Ok(ForwardedHeader::Forwarded));
/// # let _ = (xff, rfc); Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1` (only the `for=` parameters are read).
    Forwarded,
}

impl ForwardedHeader {
    /// The header's name, lowercase.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::XForwardedFor => "x-forwarded-for",
            Self::Forwarded => "forwarded",
        }
    }
}

impl std::fmt::Display for ForwardedHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ForwardedHeader {
    type Err = ConfigError;

    /// `x-forwarded-for` or `forwarded`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("x-forwarded-for") {
            Ok(Self::XForwardedFor)
        } else if t.eq_ignore_ascii_case("forwarded") {
            Ok(Self::Forwarded)
        } else {
            Err(ConfigError::new(
                ConfigErrorKind::ForwardedHeader,
                format!(
                    "invalid forwarding header {s:?}: expected `x-forwarded-for` or `forwarded`"
                ),
            )
            .with_setting("ClientIp::forwarded_header")
            .with_value(s))
        }
    }
}

/// The client address for a request whose peer (`peer`, canonical) is trusted, read from
/// `header` only.
pub(super) fn resolve_chain(
    trusted: &[Cidr],
    header: ForwardedHeader,
    headers: &HeaderMap,
    peer: IpAddr,
) -> IpAddr {
    match header {
        ForwardedHeader::Forwarded => walk(
            trusted,
            peer,
            entries(headers, "forwarded").map(forwarded_for),
        ),
        ForwardedHeader::XForwardedFor => walk(
            trusted,
            peer,
            entries(headers, "x-forwarded-for").map(parse_node),
        ),
    }
}

/// The comma-separated entries of every line of header `name`, right to left. Lazy: only the
/// entries the walk looks at are split off.
fn entries<'a>(headers: &'a HeaderMap, name: &'static str) -> impl Iterator<Item = &'a [u8]> {
    headers
        .get_all(name)
        .into_iter()
        .rev()
        .flat_map(|line| line.as_bytes().rsplit(|&b| b == b','))
}

/// The walk described in [`ClientIp`'s docs](super::ClientIp#behind-reverse-proxies). `None`
/// entries are garbage.
fn walk(trusted: &[Cidr], peer: IpAddr, chain: impl Iterator<Item = Option<IpAddr>>) -> IpAddr {
    let mut nearest = peer;
    for entry in chain.take(MAX_HOPS) {
        let Some(ip) = entry else {
            return nearest;
        };
        let ip = ip.to_canonical();
        if !is_trusted(trusted, ip) {
            return ip;
        }
        nearest = ip;
    }
    nearest
}

/// The address in the `for=` parameter of one `Forwarded` element, `None` when there is none or
/// the element is malformed.
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    if element.len() > MAX_ELEMENT_LEN {
        return None;
    }
    let mut node = None;
    for pair in element.split(|&b| b == b';') {
        let pair = pair.trim_ascii();
        if pair.is_empty() {
            continue;
        }
        let mut halves = pair.splitn(2, |&b| b == b'=');
        let name = halves.next().unwrap_or_default().trim_ascii();
        let value = halves.next()?.trim_ascii();
        if name.eq_ignore_ascii_case(b"for") {
            if node.is_some() {
                return None;
            }
            node = Some(value);
        }
    }
    let value = node?;
    let value = if value.first() == Some(&b'"') {
        value.strip_prefix(b"\"")?.strip_suffix(b"\"")?
    } else {
        value
    };
    parse_node(value)
}

/// One chain entry: `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:443`,
/// with an optional IPv6 zone id (stripped) and an optional port (numeric or obfuscated).
fn parse_node(raw: &[u8]) -> Option<IpAddr> {
    let raw = raw.trim_ascii();
    if raw.is_empty() || raw.len() > MAX_NODE_LEN {
        return None;
    }
    let s = std::str::from_utf8(raw).ok()?;
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        if !after.is_empty() && !after.strip_prefix(':').is_some_and(is_port) {
            return None;
        }
        return parse_ipv6(host).map(IpAddr::V6);
    }
    if s.contains('%') {
        return parse_ipv6(s).map(IpAddr::V6);
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    let (host, port) = s.split_once(':')?;
    if !is_port(port) {
        return None;
    }
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// An IPv6 address, with an optional zone id (`%eth0`, `%25eth0`) that is dropped.
fn parse_ipv6(s: &str) -> Option<Ipv6Addr> {
    let addr = match s.split_once('%') {
        Some((addr, zone)) => {
            let zone_ok = !zone.is_empty()
                && zone
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'%'));
            if !zone_ok {
                return None;
            }
            addr
        }
        None => s,
    };
    addr.parse().ok()
}

/// A port: 0-65535 in decimal, or an RFC 7239 obfuscated port (`_abc`).
fn is_port(p: &str) -> bool {
    if let Some(obfuscated) = p.strip_prefix('_') {
        return !obfuscated.is_empty()
            && obfuscated
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    }
    !p.is_empty()
        && p.len() <= 5
        && p.bytes().all(|b| b.is_ascii_digit())
        && p.parse::<u16>().is_ok()
}

#[cfg(test)]
mod tests;
