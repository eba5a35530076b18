//! The [`KeyExtractor`] trait, and its impl for closures.

use http::request::Parts;

use super::digest::Key;
use super::error::KeyError;

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
