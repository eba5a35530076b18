//! [`Shared`]: the settings every request of one layer reads.

use http::HeaderName;

use super::fail_safe::FailSafe;
use super::policy::{KeyPolicy, Lifetimes};
use super::stampede::{Random, Stampede};
use super::store::Backing;

/// Settings shared by every request of a layer.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Backing,
    pub(crate) key: KeyPolicy,
    pub(crate) life: Lifetimes,
    /// Each entry of the layer stays fresh up to this fraction shorter, at random.
    pub(crate) jitter: f64,
    pub(crate) body_limit: usize,
    pub(crate) header: HeaderName,
    pub(crate) tags_header: HeaderName,
    /// Whether an entry whose handler sent no `ETag` gets one computed from its body.
    pub(crate) etag: bool,
    pub(crate) stampede: Stampede,
    pub(crate) random: Random,
    /// Whose tags these are: `None` for the layer's, a name of their own for the value
    /// cache's, so that neither voids the other's entries (each remembers an invalidation
    /// only as long as its own entries live).
    pub(crate) tag_space: Option<&'static str>,
    /// `stale_if_error` and the fill timeouts.
    pub(crate) fail_safe: FailSafe,
    /// How long past its freshness an entry with a validator is kept, to be revalidated with
    /// the handler (zero for the value cache: its values have none).
    pub(crate) revalidate: std::time::Duration,
    /// The tag records of recently read entries, read with them next time.
    pub(crate) memo: super::tags::TagMemo,
    /// The ids of recently seen requests (the response cache's).
    pub(crate) ids: super::ids::IdMemo,
}

impl Shared {
    /// The digest that names `tag` in the store.
    pub(crate) fn tag_digest(&self, tag: &str) -> String {
        match self.tag_space {
            None => super::store::digest([tag.as_bytes()]),
            Some(space) => super::store::digest([space.as_bytes(), tag.as_bytes()]),
        }
    }

    /// The digest that names the soft purge record of `tag` (see
    /// [`CacheLayer::invalidate_tag_soft`](super::CacheLayer::invalidate_tag_soft)).
    pub(crate) fn soft_tag_digest(&self, tag: &str) -> String {
        let space = self.tag_space.unwrap_or("rg-layer-tag");
        super::store::digest([
            b"rg-soft-purge".as_slice(),
            space.as_bytes(),
            tag.as_bytes(),
        ])
    }

    /// The longest a response cache entry may live: fresh (at most `max_ttl`, plus jitter),
    /// then the longest of its stale window (at most `max_ttl`), `stale_if_error` and the
    /// revalidation window. How long a tag's invalidation is remembered, and no longer.
    pub(crate) fn longest_life(&self) -> std::time::Duration {
        let after = (self.life.max_ttl)
            .max(self.fail_safe.stale_if_error)
            .max(self.revalidate);
        self.life.max_ttl.mul_f64(1.0 + self.jitter) + after
    }
}
