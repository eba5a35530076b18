use http::HeaderName;
use http::request::Parts;

use super::digest::Key;
use super::error::KeyError;
use super::extractor::KeyExtractor;

/// The value of a request header, as the client sent it.
///
/// The raw bytes are the key (they need not be UTF-8) and only their digest reaches Redis. An
/// absent or empty header is [`KeyError::Missing`]. When the header is repeated, the first value
/// counts: a client cannot get a fresh bucket by adding copies.
///
/// # A header is what the client says it is
///
/// Nothing checks the value: a client that sends a fresh `X-Api-Key` (or `X-Username`) with every
/// request gets a fresh bucket every time. So:
///
/// - **Limit per API key after authenticating it.** Let the auth layer verify the key and put
///   the tenant into the request extensions, and key the rule with an
///   [`ExtensionKey`](super::ExtensionKey): only real keys get buckets.
/// - **Never `HeaderKey::new(..).or(ClientIp::peer())`**: a client that sends any value never
///   meets the IP fallback. When you must limit on an unverified header, add a second rule per
///   client IP to the same layer (rules are all-or-nothing, so the IP rule caps what a client
///   gets however many values it invents).
/// - `HeaderKey` on its own fits headers a trusted proxy or gateway sets (and strips from client
///   requests), or tests.
///
/// ```
/// use redis_guard::rate_limit::{ClientIp, HeaderKey, KeyExtractor, Quota, RateLimitLayer, MemoryLimiter};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api_key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
/// let (parts, ()) = http::Request::get("/").header("x-api-key", "k1").body(()).unwrap().into_parts();
/// assert!(api_key.extract(&parts).is_ok());
///
/// // An unverified header: per key AND per client IP, so inventing keys gains nothing.
/// let layer = RateLimitLayer::builder(MemoryLimiter::new())
///     .rule("per-key", api_key, Quota::per_minute(100))
///     .rule("per-ip", ClientIp::peer(), Quota::per_minute(300))
///     .build()?;
/// # let _ = layer; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct HeaderKey {
    name: HeaderName,
}

impl HeaderKey {
    /// Keys requests by the header `name`.
    #[must_use]
    pub fn new(name: HeaderName) -> Self {
        Self { name }
    }
}

impl KeyExtractor for HeaderKey {
    fn extract(&self, parts: &Parts) -> Result<Key, KeyError> {
        match parts.headers.get(&self.name) {
            Some(v) if !v.is_empty() => Ok(Key::from(v.as_bytes())),
            _ => Err(KeyError::Missing),
        }
    }
}
