use http::HeaderName;
use http::request::Parts;

use super::{Key, KeyError, KeyExtractor};

/// The value of a request header, e.g. an API key.
///
/// The raw bytes are the key (they need not be UTF-8) and only their digest reaches Redis. An
/// absent or empty header is [`KeyError::Missing`]. When the header is repeated, the first value
/// counts: a client cannot get a fresh bucket by adding copies.
///
/// ```
/// use redis_guard::rate_limit::{HeaderKey, KeyExtractor};
/// let api_key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
/// let (parts, ()) = http::Request::get("/").header("x-api-key", "k1").body(()).unwrap().into_parts();
/// assert!(api_key.extract(&parts).is_ok());
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
