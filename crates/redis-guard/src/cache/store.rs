//! The storage interface behind the cache layer: [`CacheStore`], sealed, with a Redis and a
//! memory implementation.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::entry::Kind;
use crate::backend::{BackendError, Lock};

/// A boxed, sendable future.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Where a [`CacheLayer`](super::CacheLayer) keeps its entries:
/// [`RedisCacheStore`](super::RedisCacheStore) (shared by every replica: one Redis, a `bb8`
/// pool or a Cluster) or [`MemoryCacheStore`](super::MemoryCacheStore) (this process, bounded).
///
/// Sealed: its operations move internal types whose shape is not a stable contract yet, so
/// only this crate implements it.
pub trait CacheStore: crate::sealed::Sealed + Send + Sync + fmt::Debug + 'static {
    /// The store as the layer drives it.
    #[doc(hidden)]
    fn into_backing(self) -> Backing;
}

/// A store as the layer drives it (opaque).
#[derive(Clone, Debug)]
pub struct Backing(pub(crate) Arc<dyn Ops>);

/// Where a value lives: its name (a variant digest, a value cache key's digest, a marker's
/// digest) and, for a response cache entry, its group: the digest of the target URI, which is
/// also the implicit tag that voids every variant of that URI. On a Cluster the keys of one
/// group (its entries and its tag record) share a hash slot, so a hit reads them together.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Key<'a> {
    pub(crate) name: &'a str,
    pub(crate) group: Option<&'a str>,
}

impl<'a> Key<'a> {
    /// A key in no group: its own hash slot.
    pub(crate) fn plain(name: &'a str) -> Self {
        Self { name, group: None }
    }
}

/// One read of a key, with the tag records read along.
#[derive(Debug)]
pub(crate) struct Read {
    /// The store's clock at the read, µs.
    pub(crate) now: u64,
    /// What the key holds, if a string.
    pub(crate) value: Option<Bytes>,
    /// The key holds another type.
    pub(crate) foreign: bool,
    /// When the key's group (its target URI) was last invalidated, as [`Ops::tag_times`]
    /// answers; `None` for a key in no group, and from a store whose invalidation of a URI
    /// deletes its entries and whose fills refuse an entry that predates it (Redis).
    pub(crate) group: Option<u64>,
    /// When each tag asked for was last invalidated, as [`Ops::tag_times`] answers.
    pub(crate) tags: Vec<Option<u64>>,
}

/// One write of a key.
#[derive(Debug)]
pub(crate) struct Write {
    pub(crate) kind: Kind,
    /// The store's clock when the computing request read the key, µs; a time past the
    /// store's clock at the write (e.g. [`NOW`]) is that clock.
    pub(crate) started: u64,
    /// Fresh for this long from the write (jitter included).
    pub(crate) fresh: Duration,
    /// Then servable stale for this long.
    pub(crate) stale: Duration,
    /// Kept this long past its freshness at least (for `stale_if_error`): the key lives
    /// `fresh + max(stale, grace)`.
    pub(crate) grace: Duration,
    pub(crate) blob: Bytes,
}

/// As [`Write::started`]: the store's time at the write (a value written without a read).
pub(crate) const NOW: u64 = u64::MAX;

/// What a store does: keys are names without the store's prefix (the digest of a variant, a
/// tag's digest).
pub(crate) trait Ops: Send + Sync + fmt::Debug + 'static {
    /// Reads `key` and the records of `tags` (tag digests) in one round trip of plain
    /// commands: no script, so that a hit costs Redis what a `GET` does (the memory store
    /// also reads the record of the key's group, its URI's implicit tag).
    fn read(&self, key: Key<'_>, tags: &[String]) -> BoxFuture<Result<Read, BackendError>>;
    /// Writes the key: whether it stored. An entry in a group (a response) that started
    /// before its URI's last invalidation may be refused (Redis), or stored and void on read
    /// (memory).
    fn write(&self, key: Key<'_>, write: Write) -> BoxFuture<Result<bool, BackendError>>;
    /// Writes the key only if it holds nothing (`SET NX`): whether it wrote.
    fn add(&self, key: &str, write: Write) -> BoxFuture<Result<bool, BackendError>>;
    /// Deletes the key.
    fn remove(&self, key: &str) -> BoxFuture<Result<(), BackendError>>;
    /// When each tag was last invalidated (µs on the store's clock), `None` for never.
    fn tag_times(&self, tags: &[String]) -> BoxFuture<Result<Vec<Option<u64>>, BackendError>>;
    /// Voids every entry computed before now that carries `tag`; the record lives `keep`.
    fn invalidate(&self, tag: &str, keep: Duration) -> BoxFuture<Result<(), BackendError>>;
    /// The locks of the lock-on-miss strategy, on the same store.
    fn lock(&self) -> &Lock;
    /// Why the store cannot work as configured, or `None`.
    fn check(&self) -> Option<crate::ConfigError>;
    /// The store as a [`RedisCacheStore`](super::RedisCacheStore), whose read of a key alone
    /// a lookup awaits in place, without a boxed future; `None` for the others.
    fn redis(&self) -> Option<&super::RedisCacheStore> {
        None
    }
}

/// The digest (hex SHA-256) of `parts`, each length-prefixed so that no two lists collide.
pub(crate) fn digest<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    hex(&h.finalize())
}

/// `bytes` in lower-case hex, from a table (a formatter per byte costs tens of times more).
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 0xf)]);
    }
    // Only ASCII digits and letters were written.
    String::from_utf8(out).unwrap_or_default()
}
