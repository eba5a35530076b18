//! [`CacheTags`]: the tags a handler puts on its response.

/// Tags of a response, set by the handler as a response extension; the layer records them with
/// the entry, and [`CacheLayer::invalidate_tag`](super::CacheLayer::invalidate_tag) voids every
/// entry that carries one. (A handler that cannot set extensions sends the header
/// `x-cache-tags: a, b` instead; the layer strips it.)
///
/// ```
/// # #[cfg(feature = "axum")] {
/// use axum::response::IntoResponse;
/// use redis_guard::cache::CacheTags;
///
/// async fn profile() -> impl IntoResponse {
///     (CacheTags::new(["user:42", "profiles"]), "the profile of user 42")
/// }
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheTags(pub(crate) Vec<String>);

impl CacheTags {
    /// These tags.
    pub fn new<T: Into<String>>(tags: impl IntoIterator<Item = T>) -> Self {
        Self(tags.into_iter().map(Into::into).collect())
    }

    /// The tags.
    #[must_use]
    pub fn tags(&self) -> &[String] {
        &self.0
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponseParts for CacheTags {
    type Error = std::convert::Infallible;

    fn into_response_parts(
        self,
        mut res: axum::response::ResponseParts,
    ) -> Result<axum::response::ResponseParts, Self::Error> {
        res.extensions_mut().insert(self);
        Ok(res)
    }
}

/// The tag records each entry was last seen to depend on (hard and soft, as digests), by
/// variant digest, so that the next read of the entry fetches them with it in one round trip.
/// Only entries with tags of their own are remembered; a guess that turns out wrong (the
/// entry's tags changed, or this process never read it) costs one more round trip, once.
/// Bounded: when full it starts over.
#[derive(Debug, Default)]
pub(crate) struct TagMemo {
    map: std::sync::Mutex<std::collections::HashMap<String, Arc<[String]>>>,
    /// Whether the map may hold anything: a layer whose handlers name no tags never takes
    /// the lock on a hit.
    used: AtomicBool,
}

/// How many entries' tags a layer remembers.
const MEMO_CAPACITY: usize = 4096;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

impl TagMemo {
    fn map(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Arc<[String]>>> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The records the entry `digest` was last seen to depend on.
    pub(crate) fn get(&self, digest: &str) -> Option<Arc<[String]>> {
        if !self.used.load(Ordering::Relaxed) {
            return None;
        }
        self.map().get(digest).cloned()
    }

    /// Remembers the records of `digest` (none: forgets it).
    pub(crate) fn set(&self, digest: &str, records: &[String]) {
        if records.is_empty() && !self.used.load(Ordering::Relaxed) {
            return;
        }
        let mut map = self.map();
        if records.is_empty() {
            map.remove(digest);
            return;
        }
        if map.len() >= MEMO_CAPACITY && !map.contains_key(digest) {
            map.clear();
        }
        map.insert(digest.to_owned(), records.into());
        self.used.store(true, Ordering::Relaxed);
    }
}
