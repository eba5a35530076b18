//! [`RedisCacheStore`]: entries in Redis, shared by every replica.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use bytes::Bytes;
use redis::Value;

use super::store::{Backing, BoxFuture, CacheStore, Key, Ops, Read, Write};
use crate::backend::{BackendError, Lock, LuaScript, RedisBackend, RedisLockStore, micros};

static PUT: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new(include_str!("scripts/put.lua")));
static INVALIDATE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("scripts/invalidate.lua")));

/// Cache entries in Redis (a server, a `bb8` pool or a Cluster, as the [`RedisBackend`] says),
/// shared by every replica.
///
/// Keys (every one with a TTL): a response `<prefix>c:<variant digest>:{<URI digest>}` (a
/// string: times, status, headers, tags, body); a [`ValueCache`](super::ValueCache)'s value
/// `<prefix>c:{<digest of its key>}`; a tag's last invalidation `<prefix>ct:{<tag digest>}`
/// (and its last soft purge, under another digest), the target URI's own record
/// `<prefix>ct:{<URI digest>}` among them; the lock of a recomputation
/// `<prefix>lock:{c:<variant digest>}`; with `stale_if_error`, the marker of an entry's last
/// failed fill, `<prefix>c:{<digest of the variant digest>}`.
///
/// A hit is one round trip of plain commands, no script: `TIME` and one `MGET` of the entry
/// and the records of the tags it carries. On a Cluster the entries of a URI (every `Vary`
/// variant) and the URI's record share a hash slot (the URI digest is their hash tag), so
/// that `MGET` is one command to one master; a tag the handler named lives in a slot of its
/// own (it spans many URIs) and is read by a `GET` sent to its master at the same time.
/// Fills and invalidations are scripts, each on one key: nothing crosses hash slots.
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

/// What one read of the entry's slot found: the store's time, the entry, whether the key
/// holds another type, the records' times.
type NearRead = (u64, Option<Bytes>, bool, Vec<Option<u64>>);

/// One round trip to the master of the entry's slot: the store's time (`TIME`, unless a test
/// froze it), the `entry` and the `records` of its slot (`MGET`; on a cluster, where a
/// multi-key command does not route a pipeline, a `GET` each).
async fn read_near(
    backend: &RedisBackend,
    cluster: bool,
    entry: &str,
    records: &[String],
) -> Result<NearRead, BackendError> {
    let frozen = backend.frozen_us();
    let keys: Vec<&str> = std::iter::once(entry)
        .chain(records.iter().map(String::as_str))
        .collect();
    let mut pipe = redis::pipe();
    // A GET of a key of another type fails: that entry is a miss, not the whole read.
    pipe.ignore_errors();
    if frozen.is_none() {
        pipe.cmd("TIME");
    }
    if cluster {
        for key in &keys {
            pipe.cmd("GET").arg(*key);
        }
    } else {
        pipe.cmd("MGET").arg(&keys);
    }
    let reply = backend.pipeline(&pipe, entry).await?;
    let Value::Array(mut replies) = reply else {
        return Err(bad_reply("a read", &reply));
    };
    let values = if cluster {
        replies.split_off(replies.len().saturating_sub(keys.len()))
    } else {
        match replies.pop() {
            Some(Value::Array(values)) => values,
            Some(Value::ServerError(e)) => return Err(BackendError::Redis(e.into())),
            other => return Err(bad_reply("MGET", &other.unwrap_or(Value::Nil))),
        }
    };
    if values.len() != keys.len() {
        return Err(bad_reply("a read", &Value::Array(values)));
    }
    let now = match (frozen, replies.pop()) {
        (Some(us), _) => us,
        (None, Some(Value::ServerError(e))) => return Err(BackendError::Redis(e.into())),
        (None, time) => redis_time(time)?.saturating_add(backend.shift_us()),
    };
    let mut values = values.into_iter();
    let (value, foreign) = match values.next() {
        Some(Value::BulkString(b)) => (Some(Bytes::from(b)), false),
        Some(Value::ServerError(e)) if e.code() == "WRONGTYPE" => (None, true),
        Some(Value::ServerError(e)) => return Err(BackendError::Redis(e.into())),
        _ => (None, false),
    };
    let times = values
        .map(|v| match v {
            Value::ServerError(e) => Err(BackendError::Redis(e.into())),
            v => Ok(tag_time(&v)),
        })
        .collect::<Result<_, _>>()?;
    Ok((now, value, foreign, times))
}

/// A tag record as read: when the tag was last invalidated.
fn tag_time(v: &Value) -> Option<u64> {
    match v {
        Value::Nil => None,
        // Not a time of ours: as if invalidated right now (the entry is not served).
        v => Some(number(v).unwrap_or(u64::MAX)),
    }
}

fn bad_reply(what: &str, v: &Value) -> BackendError {
    BackendError::BadReply(format!("the cache store's {what} answered {v:?}"))
}

/// Redis `TIME` (seconds and microseconds) in µs.
fn redis_time(reply: Option<Value>) -> Result<u64, BackendError> {
    if let Some(Value::Array(parts)) = &reply
        && let [s, us] = parts.as_slice()
        && let (Some(s), Some(us)) = (number(s), number(us))
    {
        return Ok(s.saturating_mul(1_000_000).saturating_add(us));
    }
    Err(bad_reply("TIME", &reply.unwrap_or(Value::Nil)))
}

impl RedisCacheStore {
    /// The Redis key of a value.
    fn name(&self, key: Key<'_>) -> String {
        match key.group {
            Some(group) => self.inner.backend.key(&["c", key.name], group),
            None => self.inner.backend.key(&["c"], key.name),
        }
    }

    /// The put script on `key`, with `NX` when `only` says so: its reply.
    fn put(
        &self,
        key: Key<'_>,
        write: Write,
        only: Option<&'static str>,
    ) -> BoxFuture<Result<Value, BackendError>> {
        let key = self.name(key);
        let this = Arc::clone(&self.inner);
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
    fn read(&self, key: Key<'_>, tags: &[String]) -> BoxFuture<Result<Read, BackendError>> {
        let this = Arc::clone(&self.inner);
        let entry = self.name(key);
        let group = key.group.map(str::to_owned);
        let tags: Vec<String> = tags.to_vec();
        Box::pin(async move {
            let backend = &this.backend;
            // On a Cluster only the records in the entry's slot (the URI's own) join its read;
            // each other one goes to its own master, concurrently: still one round trip.
            let cluster = backend.connection().is_cluster();
            let (near, far): (Vec<usize>, Vec<usize>) =
                (0..tags.len()).partition(|&i| !cluster || group.as_deref() == Some(&tags[i]));
            let near_keys: Vec<String> = near
                .iter()
                .map(|&i| backend.key(&["ct"], &tags[i]))
                .collect();
            let far_reads = far.iter().map(|&i| {
                let cmd = redis::cmd("GET")
                    .arg(backend.key(&["ct"], &tags[i]))
                    .clone();
                async move { backend.query(&cmd).await }
            });
            let (read, far_replies) = futures_util::future::join(
                read_near(backend, cluster, &entry, &near_keys),
                futures_util::future::join_all(far_reads),
            )
            .await;
            let (now, value, foreign, near_times) = read?;
            let mut times = vec![None; tags.len()];
            for (&i, t) in near.iter().zip(near_times) {
                times[i] = t;
            }
            for (&i, r) in far.iter().zip(far_replies) {
                times[i] = tag_time(&r?);
            }
            Ok(Read {
                now,
                value,
                // On one server MGET answers nil for a key of another type: a miss all the same,
                // which the fill overwrites.
                foreign,
                tags: times,
            })
        })
    }

    fn write(&self, key: Key<'_>, write: Write) -> BoxFuture<Result<(), BackendError>> {
        let put = self.put(key, write, None);
        Box::pin(async move { put.await.map(drop) })
    }

    fn add(&self, key: &str, write: Write) -> BoxFuture<Result<bool, BackendError>> {
        let put = self.put(Key::plain(key), write, Some("NX"));
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
            replies.into_iter().map(|r| Ok(tag_time(&r?))).collect()
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
