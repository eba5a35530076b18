//! [`RedisCacheStore`]: entries in Redis, shared by every replica.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use bytes::Bytes;
use redis::Value;

use super::store::{Backing, BoxFuture, CacheStore, Ops, Read, Write};
use crate::backend::{BackendError, Lock, LuaScript, RedisBackend, RedisLockStore, micros};

static GET: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new(include_str!("scripts/get.lua")));
static PUT: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new(include_str!("scripts/put.lua")));
static INVALIDATE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("scripts/invalidate.lua")));

/// Cache entries in Redis (a server, a `bb8` pool or a Cluster, as the [`RedisBackend`] says),
/// shared by every replica.
///
/// Keys (every one with a TTL): an entry `<prefix>c:{<variant digest>}` (a string: times,
/// status, headers, tags, body; a [`ValueCache`](super::ValueCache)'s value is one too, under
/// the digest of its key); a tag's last invalidation `<prefix>ct:{<tag digest>}` (and its last
/// soft purge, under another digest); the
/// lock of a recomputation `<prefix>lock:{c:<variant digest>}`; with `stale_if_error`, the
/// marker of an entry's last failed fill, `<prefix>c:{<digest of the variant digest>}`. One
/// key per command or script:
/// nothing crosses hash slots on a Cluster.
///
/// ```no_run
/// use redis_guard::backend::{RedisBackend, RedisConnection};
/// use redis_guard::cache::{CacheLayer, RedisCacheStore};
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let redis = RedisBackend::new(RedisConnection::open("redis://127.0.0.1/").await?);
/// let layer = CacheLayer::new(RedisCacheStore::new(redis))?;
/// # let _ = layer; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisCacheStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    backend: RedisBackend,
    lock: Lock,
}

impl RedisCacheStore {
    /// A store on `backend` (its prefix, timeout and circuit breaker apply).
    #[must_use]
    pub fn new(backend: impl Into<RedisBackend>) -> Self {
        let backend = backend.into();
        Self {
            inner: Arc::new(Inner {
                lock: Lock::new(RedisLockStore::new(backend.clone())),
                backend,
            }),
        }
    }
}

impl crate::sealed::Sealed for RedisCacheStore {}

impl CacheStore for RedisCacheStore {
    fn into_backing(self) -> Backing {
        Backing(Arc::new(self))
    }
}

/// An integer in a script's reply (a bulk string or an integer).
fn number(v: &Value) -> Option<u64> {
    match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn bad(what: &str, v: &Value) -> BackendError {
    BackendError::BadReply(format!("the cache {what} script answered {v:?}"))
}

impl RedisCacheStore {
    /// The put script on `key`, with `NX` when `only` says so: its reply.
    fn put(
        &self,
        key: &str,
        write: Write,
        only: Option<&'static str>,
    ) -> BoxFuture<Result<Value, BackendError>> {
        let this = Arc::clone(&self.inner);
        let key = this.backend.key(&["c"], key);
        Box::pin(async move {
            let mut call = this.backend.script(&PUT, &[key]);
            call.arg(write.kind.letter())
                .arg(write.started)
                .arg(micros(write.fresh))
                .arg(micros(write.stale))
                .arg(&write.blob[..])
                .arg(micros(write.grace));
            if let Some(only) = only {
                call.arg(only);
            }
            call.run().await
        })
    }
}

impl Ops for RedisCacheStore {
    fn read(&self, key: &str) -> BoxFuture<Result<Read, BackendError>> {
        let this = Arc::clone(&self.inner);
        let key = this.backend.key(&["c"], key);
        Box::pin(async move {
            let reply = this.backend.script(&GET, &[key]).run().await?;
            let Value::Array(items) = &reply else {
                return Err(bad("read", &reply));
            };
            let (Some(now), Some(value), Some(foreign)) = (
                items.first().and_then(number),
                items.get(1),
                items.get(2).and_then(number),
            ) else {
                return Err(bad("read", &reply));
            };
            let value = match value {
                Value::BulkString(b) => Some(Bytes::copy_from_slice(b)),
                _ => None,
            };
            Ok(Read {
                now,
                value,
                foreign: foreign == 1,
            })
        })
    }

    fn write(&self, key: &str, write: Write) -> BoxFuture<Result<(), BackendError>> {
        let put = self.put(key, write, None);
        Box::pin(async move { put.await.map(drop) })
    }

    fn add(&self, key: &str, write: Write) -> BoxFuture<Result<bool, BackendError>> {
        let put = self.put(key, write, Some("NX"));
        Box::pin(async move { Ok(put.await? != Value::Nil) })
    }

    fn remove(&self, key: &str) -> BoxFuture<Result<(), BackendError>> {
        let this = Arc::clone(&self.inner);
        let cmd = redis::cmd("DEL").arg(this.backend.key(&["c"], key)).clone();
        Box::pin(async move { this.backend.query(&cmd).await.map(drop) })
    }

    fn tag_times(&self, tags: &[String]) -> BoxFuture<Result<Vec<Option<u64>>, BackendError>> {
        let this = Arc::clone(&self.inner);
        let keys: Vec<String> = tags.iter().map(|t| this.backend.key(&["ct"], t)).collect();
        Box::pin(async move {
            // One GET per tag, concurrently: the tags of one entry live in different slots.
            let reads = keys.iter().map(|key| {
                let cmd = redis::cmd("GET").arg(key).clone();
                let backend = this.backend.clone();
                async move { backend.query(&cmd).await }
            });
            let replies = futures_util::future::join_all(reads).await;
            replies
                .into_iter()
                .map(|r| match r? {
                    Value::Nil => Ok(None),
                    // Not a time of ours: as if invalidated right now (the entry is not served).
                    v => Ok(Some(number(&v).unwrap_or(u64::MAX))),
                })
                .collect()
        })
    }

    fn invalidate(&self, tag: &str, keep: Duration) -> BoxFuture<Result<(), BackendError>> {
        let this = Arc::clone(&self.inner);
        let key = this.backend.key(&["ct"], tag);
        Box::pin(async move {
            let mut call = this.backend.script(&INVALIDATE, &[key]);
            call.arg(u64::try_from(keep.as_millis()).unwrap_or(u64::MAX).max(1));
            call.run().await.map(drop)
        })
    }

    fn lock(&self) -> &Lock {
        &self.inner.lock
    }

    fn check(&self) -> Option<crate::ConfigError> {
        self.inner.backend.config_problem()
    }
}
