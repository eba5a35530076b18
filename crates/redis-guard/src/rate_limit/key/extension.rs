use std::fmt;
use std::marker::PhantomData;

use http::request::Parts;

use super::digest::Key;
use super::error::KeyError;
use super::extractor::KeyExtractor;

/// A typed value from the request extensions, put there by an earlier layer (authentication, the
/// session layer), turned into a key by a function: per-user limits.
///
/// A request without the value is [`KeyError::Missing`].
///
/// ```
/// use redis_guard::rate_limit::{ExtensionKey, Key, KeyExtractor};
///
/// #[derive(Clone)]
/// struct CurrentUser { id: u64 }
///
/// let per_user = ExtensionKey::new(|u: &CurrentUser| Key::from(u.id));
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(CurrentUser { id: 7 });
/// let (parts, ()) = req.into_parts();
/// assert_eq!(per_user.extract(&parts), Ok(Key::from(7u64)));
/// ```
pub struct ExtensionKey<T, F> {
    to_key: F,
    _marker: PhantomData<fn(&T)>,
}

impl<T, F> ExtensionKey<T, F>
where
    T: Send + Sync + 'static,
    F: Fn(&T) -> Key + Send + Sync + 'static,
{
    /// Keys requests by the `T` in their extensions, mapped through `to_key`.
    #[must_use]
    pub fn new(to_key: F) -> Self {
        Self {
            to_key,
            _marker: PhantomData,
        }
    }
}

impl<T, F: Clone> Clone for ExtensionKey<T, F> {
    fn clone(&self) -> Self {
        Self {
            to_key: self.to_key.clone(),
            _marker: PhantomData,
        }
    }
}

impl<T, F> fmt::Debug for ExtensionKey<T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtensionKey")
            .field("type", &std::any::type_name::<T>())
            .finish_non_exhaustive()
    }
}

impl<T, F> KeyExtractor for ExtensionKey<T, F>
where
    T: Send + Sync + 'static,
    F: Fn(&T) -> Key + Send + Sync + 'static,
{
    fn extract(&self, parts: &Parts) -> Result<Key, KeyError> {
        parts
            .extensions
            .get::<T>()
            .map(&self.to_key)
            .ok_or(KeyError::Missing)
    }
}
