//! Where a request's rate-limit key comes from.
//!
//! A [`KeyExtractor`] looks at the request head and returns the [`Key`] its rule counts against.
//! Closures `Fn(&http::request::Parts) -> Option<Key>` are extractors; the built-in ones cover the
//! peer IP ([`ClientIp`]), a header ([`HeaderKey`], e.g. an API key), a typed value the
//! application put into the request extensions ([`ExtensionKey`], e.g. the user id) and one
//! key for everybody ([`Global`]). [`KeyExtractorExt`] combines two extractors: both keys as one
//! ([`And`]), or the second when the first has none ([`Or`]).
//!
//! The key itself never reaches Redis: key names carry a digest of it (see [`Key::digest`]), so a
//! phone number, an e-mail address or an API key is never visible in `KEYS`, `MONITOR` or a dump.

mod cidr;
mod client_ip;
mod compose;
mod extension;
mod forwarded;
mod header;

pub use cidr::ProxyConfigError;
pub use client_ip::{ClientIp, PeerAddr};
pub use compose::{And, Or};
pub use extension::ExtensionKey;
pub use forwarded::ForwardedHeader;
pub use header::HeaderKey;

use std::fmt;
use std::net::IpAddr;

use http::request::Parts;
use sha2::{Digest, Sha256};

/// The value a rule counts against: opaque bytes, hashed before they are used in a Redis key.
///
/// ```
/// use redis_guard::rate_limit::Key;
/// let a = Key::from("+380501234567");
/// let b = Key::from(String::from("+380501234567"));
/// assert_eq!(a, b);
/// assert_eq!(a.digest(), b.digest());
/// assert!(!a.digest().contains("380"));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key(Vec<u8>);

impl Key {
    /// A key from raw bytes.
    #[must_use]
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    /// Two keys as one, e.g. client IP and username for login throttling. Each part is
    /// length-prefixed, so `("ab", "c")` and `("a", "bc")` stay different keys.
    #[must_use]
    pub fn pair(a: &Key, b: &Key) -> Self {
        let mut v = Vec::with_capacity(a.0.len() + b.0.len() + 16);
        for part in [a, b] {
            v.extend_from_slice(&(part.0.len() as u64).to_be_bytes());
            v.extend_from_slice(&part.0);
        }
        Self(v)
    }

    /// The key's bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The digest used in Redis key names: the first 128 bits of SHA-256, as 32 hex digits.
    ///
    /// A digest hides the key from anyone reading Redis, and no byte of the key can inject a
    /// separator, a glob or a hash tag into a key name. It is not a secret: a small key space
    /// (phone numbers) can be enumerated by whoever can read Redis.
    #[must_use]
    pub fn digest(&self) -> String {
        let mut out = String::with_capacity(32);
        for byte in self.digest_bytes() {
            use fmt::Write as _;
            let _ = write!(out, "{byte:02x}");
        }
        out
    }

    /// The first 128 bits of the key's SHA-256: what in-process tables store instead of the key,
    /// so their memory per key is fixed whatever a client sends.
    pub(crate) fn digest_bytes(&self) -> [u8; 16] {
        let hash = Sha256::digest(&self.0);
        let mut out = [0; 16];
        out.copy_from_slice(&hash[..16]);
        out
    }
}

impl fmt::Debug for Key {
    // Keys are often personal data (phone numbers, e-mails, API keys): don't print them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({}…)", &self.digest()[..8])
    }
}

impl From<&str> for Key {
    fn from(s: &str) -> Self {
        Self(s.as_bytes().to_vec())
    }
}

impl From<String> for Key {
    fn from(s: String) -> Self {
        Self(s.into_bytes())
    }
}

impl From<&[u8]> for Key {
    fn from(b: &[u8]) -> Self {
        Self(b.to_vec())
    }
}

impl From<Vec<u8>> for Key {
    fn from(b: Vec<u8>) -> Self {
        Self(b)
    }
}

impl From<u64> for Key {
    fn from(n: u64) -> Self {
        Self(n.to_string().into_bytes())
    }
}

impl From<i64> for Key {
    fn from(n: i64) -> Self {
        Self(n.to_string().into_bytes())
    }
}

impl From<IpAddr> for Key {
    fn from(ip: IpAddr) -> Self {
        Self(ip.to_string().into_bytes())
    }
}

/// Why no key could be taken from a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The request does not carry what the extractor looks for (no header, no user). The layer's
    /// [`MissingKey`](crate::rate_limit::MissingKey) policy decides what happens.
    #[error("the request has no rate-limit key")]
    Missing,
    /// The server is set up wrongly, e.g. axum is served without `into_make_service_with_connect_info`.
    /// The layer answers `500` and logs the message once.
    #[error("rate-limit key extractor is misconfigured: {0}")]
    Misconfigured(&'static str),
}

/// Takes the rate-limit key from a request head.
///
/// Implemented for closures, so any rule is one line away:
///
/// ```
/// use redis_guard::rate_limit::{Key, KeyExtractor};
/// let by_tenant = |parts: &http::request::Parts| {
///     parts.uri.path().split('/').nth(2).map(Key::from)
/// };
/// let (parts, ()) = http::Request::get("/t/acme/items").body(()).unwrap().into_parts();
/// assert_eq!(by_tenant.extract(&parts), Ok(Key::from("acme")));
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key for this request.
    ///
    /// # Errors
    ///
    /// [`KeyError::Missing`] when the request has no key; [`KeyError::Misconfigured`] when the
    /// server setup makes extraction impossible.
    fn extract(&self, parts: &Parts) -> Result<Key, KeyError>;
}

impl<F> KeyExtractor for F
where
    F: Fn(&Parts) -> Option<Key> + Send + Sync + 'static,
{
    fn extract(&self, parts: &Parts) -> Result<Key, KeyError> {
        self(parts).ok_or(KeyError::Missing)
    }
}

/// Combinators for every [`KeyExtractor`]; import the trait to use them.
///
/// ```
/// use redis_guard::rate_limit::{ClientIp, ExtensionKey, Key, KeyExtractorExt};
///
/// #[derive(Clone)]
/// struct CurrentUser { id: u64 } // put into the extensions by your auth layer
///
/// // Per authenticated user when there is one, else per client IP. The first extractor must be
/// // something the client cannot invent: with a raw header (`HeaderKey`) a client that sends a
/// // fresh value per request would never meet the IP fallback.
/// let api = ExtensionKey::new(|u: &CurrentUser| Key::from(u.id)).or(ClientIp::peer());
/// // Both keys as one, e.g. client IP and a normalized username.
/// let both = ClientIp::peer().and(ExtensionKey::new(|u: &CurrentUser| Key::from(u.id)));
/// # let _ = (api, both);
/// ```
pub trait KeyExtractorExt: KeyExtractor + Sized {
    /// Both keys as one ([`Key::pair`]). Missing when either is missing; misconfigured when
    /// either is. See [`And`].
    #[must_use]
    fn and<B: KeyExtractor>(self, other: B) -> And<Self, B> {
        And::new(self, other)
    }

    /// This extractor's key, or `other`'s when this one has none ([`KeyError::Missing`]);
    /// [`KeyError::Misconfigured`] is returned as is. See [`Or`].
    #[must_use]
    fn or<B: KeyExtractor>(self, other: B) -> Or<Self, B> {
        Or::new(self, other)
    }
}

impl<T: KeyExtractor> KeyExtractorExt for T {}

/// One key for every request: a global limit on a route (protecting a fragile upstream).
#[derive(Clone, Copy, Debug, Default)]
pub struct Global;

impl KeyExtractor for Global {
    fn extract(&self, _: &Parts) -> Result<Key, KeyError> {
        Ok(Key::from("global"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_is_unambiguous() {
        let ab_c = Key::pair(&Key::from("ab"), &Key::from("c"));
        let a_bc = Key::pair(&Key::from("a"), &Key::from("bc"));
        assert_ne!(ab_c, a_bc);
        assert_ne!(ab_c.digest(), a_bc.digest());
    }

    #[test]
    fn digest_is_hex_and_hides_the_key() {
        let d = Key::from("alice@example.com").digest();
        assert_eq!(d.len(), 32);
        assert!(d.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(!format!("{:?}", Key::from("alice@example.com")).contains("alice"));
    }
}
