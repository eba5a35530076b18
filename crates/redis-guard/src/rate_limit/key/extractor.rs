//! The [`KeyExtractor`] trait, and its impl for closures.

use http::request::Parts;

use super::digest::Key;
use super::error::KeyError;
use crate::ConfigError;

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

    /// Whether this extractor can work as it is set up, checked once when a layer is built
    /// with it: an error fails [`RateLimitLayerBuilder::build`](crate::rate_limit::RateLimitLayerBuilder::build)
    /// instead of every request. The default accepts; a [`HeaderKey`](super::HeaderKey) with a
    /// name that is not a header name refuses, and an extractor that wraps others (as
    /// [`And`](super::And) and [`Or`](super::Or) do) asks them.
    ///
    /// ```
    /// use redis_guard::ConfigErrorKind;
    /// use redis_guard::rate_limit::{HeaderKey, KeyExtractor};
    /// assert!(HeaderKey::new("x-api-key").validate().is_ok());
    /// let err = HeaderKey::new("x api key").validate().unwrap_err();
    /// assert_eq!(err.kind(), ConfigErrorKind::HeaderName);
    /// assert_eq!(err.value(), Some("x api key"));
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] that names the setting and the bad value.
    fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }
}

impl<F> KeyExtractor for F
where
    F: Fn(&Parts) -> Option<Key> + Send + Sync + 'static,
{
    fn extract(&self, parts: &Parts) -> Result<Key, KeyError> {
        self(parts).ok_or(KeyError::Missing)
    }
}
