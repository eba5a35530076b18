use std::sync::atomic::{AtomicBool, Ordering};

use http::HeaderName;
use http::request::Parts;

use super::digest::Key;
use super::error::KeyError;
use super::extractor::KeyExtractor;
use crate::ConfigError;

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
/// let api_key = HeaderKey::new("x-api-key"); // or a `HeaderName`
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
    /// The header, or the text given for it when that is not a header name: the layer builder
    /// refuses it ([`KeyExtractor::validate`]).
    name: Result<HeaderName, Box<str>>,
}

/// What [`HeaderKey::extract`](KeyExtractor::extract) says with a bad name, reachable only
/// outside a layer (whose builder refuses the name).
const BAD_NAME: &str = "HeaderKey::new was given a name that is not a header name; \
     HeaderKey::validate (called by the layer builder) names it";

static LOGGED_BAD_NAME: AtomicBool = AtomicBool::new(false);

impl HeaderKey {
    /// Keys requests by the header `name`: a `&str` (`"x-api-key"`; upper-case letters are
    /// lowered, as HTTP/2 requires), a [`HeaderName`] (`http::header::AUTHORIZATION`) or
    /// bytes.
    ///
    /// A name that is not a header name (a space, a colon, empty) does not panic: the layer
    /// builder refuses it with a [`ConfigError`] of kind [`ConfigErrorKind::HeaderName`](crate::ConfigErrorKind::HeaderName) that
    /// names it ([`validate`](KeyExtractor::validate)).
    ///
    /// ```
    /// use redis_guard::ConfigErrorKind;
    /// use redis_guard::rate_limit::{HeaderKey, MemoryLimiter, Quota, RateLimitLayer};
    ///
    /// let ok = RateLimitLayer::new(MemoryLimiter::new(), "api", HeaderKey::new("X-Api-Key"), Quota::per_minute(60));
    /// assert!(ok.is_ok());
    /// let err = RateLimitLayer::new(MemoryLimiter::new(), "api", HeaderKey::new("x-api key:"), Quota::per_minute(60))
    ///     .unwrap_err();
    /// assert_eq!(err.kind(), ConfigErrorKind::HeaderName);
    /// assert_eq!(err.rule(), Some("api"));
    /// assert_eq!(err.value(), Some("x-api key:"));
    /// ```
    #[must_use]
    pub fn new(name: impl AsRef<[u8]>) -> Self {
        let bytes = name.as_ref();
        Self {
            name: HeaderName::from_bytes(bytes).map_err(|_| String::from_utf8_lossy(bytes).into()),
        }
    }
}

impl KeyExtractor for HeaderKey {
    fn extract(&self, parts: &Parts) -> Result<Key, KeyError> {
        let Ok(name) = &self.name else {
            if !LOGGED_BAD_NAME.swap(true, Ordering::Relaxed) {
                tracing::error!("redis-guard: {BAD_NAME}");
            }
            return Err(KeyError::Misconfigured(BAD_NAME));
        };
        match parts.headers.get(name) {
            Some(v) if !v.is_empty() => Ok(Key::from(v.as_bytes())),
            _ => Err(KeyError::Missing),
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        match &self.name {
            Ok(_) => Ok(()),
            Err(bad) => Err(ConfigError::header_name(bad, "HeaderKey::new")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConfigErrorKind;
    use crate::rate_limit::{MemoryLimiter, Quota, RateLimitLayer};

    fn head(name: &str, value: &str) -> Parts {
        http::Request::get("/")
            .header(name, value)
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    #[test]
    fn a_name_is_text_or_a_header_name() {
        let parts = head("x-api-key", "k1");
        let want = Ok(Key::from("k1"));
        assert_eq!(HeaderKey::new("x-api-key").extract(&parts), want);
        assert_eq!(HeaderKey::new("X-Api-Key").extract(&parts), want);
        assert_eq!(
            HeaderKey::new(String::from("x-api-key")).extract(&parts),
            want
        );
        let name = HeaderName::from_static("x-api-key");
        assert_eq!(HeaderKey::new(&name).extract(&parts), want);
        assert_eq!(HeaderKey::new(name).extract(&parts), want);
        assert_eq!(
            HeaderKey::new(http::header::AUTHORIZATION).extract(&head("authorization", "t")),
            Ok(Key::from("t"))
        );
    }

    /// A bad name is a build error that names it and the rule, never a panic; outside a layer,
    /// a misconfiguration.
    #[test]
    fn a_bad_name_is_a_clear_error_when_the_layer_is_built() {
        for bad in ["x-api key", "x-api-key:", "", "clé"] {
            let key = HeaderKey::new(bad);
            let err = RateLimitLayer::new(
                MemoryLimiter::new(),
                "api",
                key.clone(),
                Quota::per_minute(1),
            )
            .unwrap_err();
            assert_eq!(err.kind(), ConfigErrorKind::HeaderName, "{err}");
            assert_eq!(err.setting(), Some("HeaderKey::new"), "{err}");
            assert_eq!(err.value(), Some(bad), "{err}");
            assert_eq!(err.rule(), Some("api"), "{err}");
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
            assert!(err.to_string().contains("not a header name"), "{err}");
            let parts = head("x-api-key", "k1");
            assert_eq!(key.extract(&parts), Err(KeyError::Misconfigured(BAD_NAME)));
        }
        // Inside a combinator too.
        use crate::rate_limit::{ClientIp, KeyExtractorExt};
        let err = RateLimitLayer::new(
            MemoryLimiter::new(),
            "api",
            ClientIp::peer().and(HeaderKey::new("x user")),
            Quota::per_minute(1),
        )
        .unwrap_err();
        assert_eq!(err.value(), Some("x user"), "{err}");
    }
}
