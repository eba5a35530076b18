//! [`RedisCacheStore`]: entries in Redis, shared by every replica.

use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use redis::Value;

use super::store::{Backing, BoxFuture, CacheStore, Key, Ops, Read, Write};
use crate::backend::{
    BackendError, Coalescer, DEFAULT_BATCH, Form, Lock, LuaScript, RedisBackend, RedisLockStore,
    Replies, micros,
};

static PUT: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new(include_str!("scripts/put.lua")));
static INVALIDATE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("scripts/invalidate.lua")));

/// Cache entries in Redis (a server, a `bb8` pool or a Cluster, as the [`RedisBackend`] says),
/// shared by every replica.
///
/// Keys (every one with a TTL): a response `<prefix>cr:<variant digest>:{<URI digest>}` (a
/// string: times, status, headers, tags, body); the target URI's variant list
/// `<prefix>cs:{<URI digest>}` (a set of those keys, kept at least as long as the longest of
/// them) and its last invalidation `<prefix>ct:{<URI digest>}`; a
/// [`ValueCache`](super::ValueCache)'s value `<prefix>c:{<digest of its key>}`; a tag's last
/// invalidation `<prefix>ct:{<tag digest>}` (and its last soft purge, under another digest);
/// the lock of a recomputation `<prefix>lock:{c:<variant digest>}`; with `stale_if_error`,
/// the marker of an entry's last failed fill, `<prefix>c:{<digest of the variant digest>}`.
///
/// An invalidation of a URI (after an unsafe method) deletes every variant its list names and
/// records when; a fill lists its entry, and stores nothing when the URI was invalidated since
/// its computation started (it may predate the change). So a hit reads no record of its URI:
/// an entry the handler named no tags for is one `GET`, with `TIME` in front at most once a
/// second (in between, the store's clock is the last reading moved on by this process's
/// monotonic clock, never ahead of Redis's). An entry with tags is one `MGET` of the entry
/// and its tags' records; on a Cluster, where a tag lives in a slot of its own (it spans many
/// URIs), a `GET` of each record goes to its master at the same time: still one round trip,
/// no script. Under load, the hits without tags that arrive while two reads are out go
/// together, one `MGET` of their entries. The entries of a URI (every `Vary` variant), its
/// list and its record share a hash slot (the URI digest is their hash tag), so fills and
/// invalidations are scripts on one slot: nothing crosses hash slots.
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
    clock: RedisClock,
    /// The hits' `GET`s: those that arrive while reads are in flight go together.
    reads: Coalescer<Queued, Gets>,
    /// What the name of a response entry starts with (the backend's prefix and `cr:`).
    entry_prefix: String,
    /// What the name of a value in no group starts with (the backend's prefix and `c:`).
    plain_prefix: String,
}

/// A key's name as [`RedisBackend::key`] writes it (`<prefix><name>:{<tag>}`), written
/// straight into a command.
struct KeyName<'a> {
    /// The backend's prefix and the kind of key, as `RedisBackend::key` ends them (`:`).
    prefix: &'a str,
    name: Option<&'a str>,
    tag: &'a str,
}

impl KeyName<'_> {
    fn len(&self) -> usize {
        self.prefix.len() + self.name.map_or(0, |n| n.len() + 1) + self.tag.len() + 2
    }
}

impl redis::ToRedisArgs for KeyName<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write as _;
        // The usual name (a short prefix, two digests) put together on the stack, then
        // written at once.
        let mut name = [0u8; 192];
        let mut at = 0;
        let parts = [
            self.prefix.as_bytes(),
            self.name.map_or(&b""[..], str::as_bytes),
            if self.name.is_some() { b":{" } else { b"{" },
            self.tag.as_bytes(),
            b"}",
        ];
        if self.len() <= name.len() {
            for part in parts {
                name[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
            out.write_arg(&name[..at]);
            return;
        }
        let mut arg = out.writer_for_next_arg();
        // Writes into the command's buffer: they do not fail.
        let _ = arg.write_all(self.prefix.as_bytes());
        if let Some(name) = self.name {
            let _ = arg.write_all(name.as_bytes());
            let _ = arg.write_all(b":");
        }
        let _ = arg.write_all(b"{");
        let _ = arg.write_all(self.tag.as_bytes());
        let _ = arg.write_all(b"}");
    }
}

/// What [`RedisBackend::key`] writes before the hash tag for `kind` (a key `<this>{<tag>}`).
fn key_prefix(backend: &RedisBackend, kind: &str) -> String {
    let mut key = backend.key(&[kind], "");
    key.truncate(key.len().saturating_sub("{}".len()));
    key
}

/// How long a reading of Redis `TIME` stands for the store's clock; past that the next read
/// asks again.
const CLOCK_REFRESH: Duration = Duration::from_secs(1);

/// The store's clock between reads of Redis `TIME`: the last reading, moved on by this
/// process's monotonic clock. Every replica reads the same Redis clock this way, so ages
/// and freshness agree across replicas as when each read asks for `TIME`.
///
/// It never runs ahead of Redis: the reading counts from when its reply arrived (after Redis
/// read its clock), and a thousandth of the time since is taken off (more than two clocks
/// drift apart). A time that is a little late only makes an entry look younger by as much
/// (under a millisecond a second), and the start of a computation earlier, which voids its
/// entry on an invalidation just before it, never keeps one made before an invalidation.
#[derive(Debug, Default)]
struct RedisClock {
    /// Redis `TIME` (µs, without the test seam's shift) and when its reply arrived.
    reading: std::sync::Mutex<Option<(std::time::Instant, u64)>>,
}

impl RedisClock {
    /// Redis's time now (µs), when a reading younger than [`CLOCK_REFRESH`] stands for it.
    fn now(&self) -> Option<u64> {
        let reading = *self
            .reading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (at, us) = reading?;
        let since = at.elapsed();
        (since < CLOCK_REFRESH).then(|| {
            let since = micros(since);
            us.saturating_add(since - since / 1000)
        })
    }

    /// Records a reading of Redis `TIME` (µs) whose reply arrived `at`.
    fn set(&self, at: std::time::Instant, us: u64) {
        *self
            .reading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((at, us));
    }

    /// Records the time (µs) a write of this store ran at, whose reply arrived `at`, unless
    /// the clock already reads that late: the entries this process wrote are then never
    /// younger on its clock than when they were written (a clock a moment behind would show a
    /// fresh entry one second longer to live, and a stale one one second less past its
    /// freshness).
    fn catch_up(&self, at: std::time::Instant, us: u64) {
        let mut reading = self
            .reading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let behind = match *reading {
            Some((then, was)) => {
                let since = micros(at.saturating_duration_since(then));
                at.saturating_duration_since(then) >= CLOCK_REFRESH
                    || was.saturating_add(since - since / 1000) < us
            }
            None => true,
        };
        if behind {
            *reading = Some((at, us));
        }
    }
}

impl RedisCacheStore {
    /// A store on `backend` (its prefix, timeout and circuit breaker apply).
    #[must_use]
    pub fn new(backend: impl Into<RedisBackend>) -> Self {
        let backend = backend.into();
        Self {
            inner: Arc::new(Inner {
                lock: Lock::new(RedisLockStore::new(backend.clone())),
                reads: Coalescer::with_form(backend.clone(), Gets, DEFAULT_BATCH),
                entry_prefix: key_prefix(&backend, "cr"),
                plain_prefix: key_prefix(&backend, "c"),
                backend,
                clock: RedisClock::default(),
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

/// What one read of the entry's slot found.
struct NearRead {
    /// The store's time, µs.
    now: u64,
    value: Option<Bytes>,
    /// The entry's key holds another type.
    foreign: bool,
    /// The records of the tags read along.
    tags: Vec<Option<u64>>,
}

/// Whether `e` is Redis refusing a command on a key of another type.
fn wrong_type(e: &redis::RedisError) -> bool {
    e.code() == Some("WRONGTYPE")
}

/// The store's time when it is known without asking Redis: frozen by a test, or `clock`'s
/// recent reading.
fn known_now(backend: &RedisBackend, clock: &RedisClock) -> Option<u64> {
    backend.frozen_us().map_or_else(
        || clock.now().map(|us| us.saturating_add(backend.shift_us())),
        Some,
    )
}

/// What one `GET` of an entry answered, read at `now`.
fn read_one(reply: Result<Value, BackendError>, now: u64) -> Result<Read, BackendError> {
    let (value, foreign) = match reply {
        Ok(Value::BulkString(b)) => (Some(Bytes::from(b)), false),
        Ok(_) => (None, false),
        // A key of another type: a miss, which the fill overwrites.
        Err(BackendError::Redis(e)) if wrong_type(&e) => (None, true),
        Err(e) => return Err(e),
    };
    Ok(Read {
        now,
        value,
        foreign,
        group: None,
        tags: Vec::new(),
    })
}

/// The `GET` of one page's entry, built by the page's first hit and sent by every later one.
#[derive(Debug)]
pub(crate) struct EntryGet {
    /// The entry's name (its hash slot picks the coalescer's queue on a cluster).
    key: [String; 1],
    get: redis::Cmd,
}

/// Where a page keeps its [`EntryGet`] (shared by the page's requests).
pub(crate) type ReadCommand = Arc<OnceLock<EntryGet>>;

/// One hit's `GET`, as the coalescer queues it (its command built).
struct Queued(ReadCommand);

impl Queued {
    fn get(&self) -> Option<&EntryGet> {
        self.0.get()
    }
}

/// The coalescer's [`Form`] for hits: the `GET`s that go together are one `MGET` (of keys
/// in one hash slot, on a cluster: the coalescer queues by slot), one sent alone is the
/// `GET` itself (a bulk string, no array to parse). In an `MGET` a key of another type reads
/// as absent, where its `GET` fails with `WRONGTYPE`: a miss either way, which the fill
/// overwrites.
#[derive(Clone, Copy, Debug)]
struct Gets;

impl Form<Queued> for Gets {
    type Reply = Value;

    fn keys(entry: &Queued) -> &[String] {
        entry.get().map_or(&[], |get| &get.key[..])
    }

    async fn call(
        &self,
        backend: &RedisBackend,
        entries: &[&Queued],
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Replies, BackendError> {
        let mut mget = redis::Cmd::with_capacity(1 + entries.len(), 4 + 64 * entries.len());
        mget.arg("MGET");
        for entry in entries {
            let Some(get) = entry.get() else {
                return Err(BackendError::BadReply(
                    "a cache read without its key".into(),
                ));
            };
            mget.arg(&get.key[0]);
        }
        match backend.query_until(&mget, deadline).await? {
            Value::Array(values) if values.len() == entries.len() => {
                Ok(values.into_iter().map(Ok).collect())
            }
            other => Err(bad_reply("MGET", &other)),
        }
    }

    async fn call_one(
        &self,
        backend: &RedisBackend,
        entry: &Queued,
    ) -> Result<Value, BackendError> {
        match entry.get() {
            Some(get) => backend.query(&get.get).await,
            None => Err(BackendError::BadReply(
                "a cache read without its key".into(),
            )),
        }
    }
}

/// One round trip to the master of the entry's slot: the store's time (`TIME`, unless a test
/// froze it or `clock` has a recent reading), the `entry` (a `GET`) and the records of `tags`
/// (with it, in one `MGET`; on a cluster, where a multi-key command does not route a
/// pipeline, `tags` is empty).
async fn read_near(
    backend: &RedisBackend,
    clock: &RedisClock,
    cluster: bool,
    entry: &str,
    tags: &[String],
) -> Result<NearRead, BackendError> {
    let known = known_now(backend, clock);
    let keys = 1 + tags.len();
    // The entry alone (or on a cluster) a `GET` of each key, else one `MGET`.
    let single = keys == 1 || cluster;
    let (values, now) = match known {
        // The clock is known and one command reads everything: no pipeline.
        Some(now) if keys == 1 => {
            let mut get = redis::cmd("GET");
            get.arg(entry);
            match backend.query(&get).await {
                Ok(value) => (vec![value], now),
                // A key of another type: a miss, which the fill overwrites.
                Err(BackendError::Redis(e)) if wrong_type(&e) => {
                    return Ok(NearRead {
                        now,
                        value: None,
                        foreign: true,
                        tags: Vec::new(),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        Some(now) if !single => {
            let mut mget = redis::cmd("MGET");
            mget.arg(entry).arg(tags);
            match backend.query(&mget).await? {
                Value::Array(values) => (values, now),
                other => return Err(bad_reply("MGET", &other)),
            }
        }
        _ => {
            let mut pipe = redis::pipe();
            // A GET of a key of another type fails: that entry is a miss, not the whole read.
            pipe.ignore_errors();
            if known.is_none() {
                pipe.cmd("TIME");
            }
            if single {
                pipe.cmd("GET").arg(entry);
                for tag in tags {
                    pipe.cmd("GET").arg(tag);
                }
            } else {
                pipe.cmd("MGET").arg(entry).arg(tags);
            }
            let reply = backend.pipeline(&pipe, entry).await?;
            let arrived = std::time::Instant::now();
            let Value::Array(mut replies) = reply else {
                return Err(bad_reply("a read", &reply));
            };
            let values = if single {
                replies.split_off(replies.len().saturating_sub(keys))
            } else {
                match replies.pop() {
                    Some(Value::Array(values)) => values,
                    Some(Value::ServerError(e)) => return Err(BackendError::Redis(e.into())),
                    other => return Err(bad_reply("MGET", &other.unwrap_or(Value::Nil))),
                }
            };
            let now = match (known, replies.pop()) {
                (Some(us), _) => us,
                (None, Some(Value::ServerError(e))) => return Err(BackendError::Redis(e.into())),
                (None, time) => {
                    let us = redis_time(time)?;
                    clock.set(arrived, us);
                    us.saturating_add(backend.shift_us())
                }
            };
            (values, now)
        }
    };
    if values.len() != keys {
        return Err(bad_reply("a read", &Value::Array(values)));
    }
    let mut values = values.into_iter();
    let (value, foreign) = match values.next() {
        Some(Value::BulkString(b)) => (Some(Bytes::from(b)), false),
        Some(Value::ServerError(e)) if e.code() == "WRONGTYPE" => (None, true),
        Some(Value::ServerError(e)) => return Err(BackendError::Redis(e.into())),
        _ => (None, false),
    };
    let record = |v: Value| match v {
        Value::ServerError(e) => Err(BackendError::Redis(e.into())),
        v => Ok(tag_time(&v)),
    };
    let tags = values.map(record).collect::<Result<_, _>>()?;
    Ok(NearRead {
        now,
        value,
        foreign,
        tags,
    })
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
            // Not `c:`: an entry stored before URIs kept a variant list is never read (a miss),
            // since no invalidation would delete it.
            Some(group) => self.inner.backend.key(&["cr", key.name], group),
            None => self.inner.backend.key(&["c"], key.name),
        }
    }

    /// A `GET` of the value of `key`: its name written into the command as
    /// [`name`](Self::name) writes it, without a string of its own.
    fn get(&self, key: Key<'_>) -> redis::Cmd {
        let (prefix, group) = match key.group {
            Some(group) => (&self.inner.entry_prefix, group),
            None => (&self.inner.plain_prefix, key.name),
        };
        let name = KeyName {
            prefix,
            name: key.group.map(|_| key.name),
            tag: group,
        };
        let mut get = redis::Cmd::with_capacity(2, 3 + name.len());
        get.arg("GET").arg(name);
        get
    }

    /// The keys of the target URI whose digest is `group`: its invalidation record and its
    /// variant list.
    fn uri_keys(&self, group: &str) -> [String; 2] {
        let backend = &self.inner.backend;
        [backend.key(&["ct"], group), backend.key(&["cs"], group)]
    }

    /// The put script on `key`, with `NX` when `only` says so: its reply. A key in a group
    /// (a response entry) is checked against and listed in its URI's keys.
    fn put(
        &self,
        key: Key<'_>,
        write: Write,
        only: Option<&'static str>,
    ) -> BoxFuture<Result<Value, BackendError>> {
        let mut keys = vec![self.name(key)];
        if let Some(group) = key.group {
            keys.extend(self.uri_keys(group));
        }
        let this = Arc::clone(&self.inner);
        Box::pin(async move {
            let backend = &this.backend;
            let shift = backend.shift_us();
            let mut call = backend.script(&PUT, &keys);
            call.arg(write.kind.letter())
                .arg(write.started)
                .arg(micros(write.fresh))
                .arg(micros(write.stale))
                .arg(&write.blob[..])
                .arg(micros(write.grace));
            if let Some(only) = only {
                call.arg(only);
            }
            let reply = call.run().await?;
            // The script's time (Redis `TIME` and the test seam's shift) keeps the store's
            // clock up with the entry just written.
            if backend.frozen_us().is_none()
                && let Some(now) = number(&reply)
            {
                this.clock
                    .catch_up(std::time::Instant::now(), now.saturating_sub(shift));
            }
            Ok(reply)
        })
    }
}

impl RedisCacheStore {
    /// [`Ops::read`] of `key` with no tags, as the lookup of a hit awaits it in place (no
    /// boxed future, no clone of the store): one `GET`, when the store's time is known
    /// without asking Redis; `None` when it is not (then [`Ops::read`] asks for it). The `GET`
    /// is the one `built` holds (it is built there the first time: every request of a page
    /// sends the same command), else built for this read. A page's read takes the coalescer's
    /// room and sends its `GET` straight when the coalescer has some (on a single Redis), else
    /// waits for room and goes with the others that waited, in one `MGET`.
    pub(crate) async fn read_alone(
        &self,
        key: Key<'_>,
        built: Option<&ReadCommand>,
    ) -> Option<Result<Read, BackendError>> {
        let now = known_now(&self.inner.backend, &self.inner.clock)?;
        let reply = match built {
            Some(built) => {
                built.get_or_init(|| EntryGet {
                    key: [self.name(key)],
                    get: self.get(key),
                });
                let reads = &self.inner.reads;
                // A single Redis with room: the `GET` straight, in this future, the room held
                // for it (a queued read's future stays small: the coalescer boxes its call).
                match reads.room() {
                    Some(room) => reads.call_in(room, Queued(Arc::clone(built))).await,
                    None => reads.call(Queued(Arc::clone(built))).await,
                }
            }
            None => self.inner.backend.query(&self.get(key)).await,
        };
        Some(read_one(reply, now))
    }
}

impl Ops for RedisCacheStore {
    fn read(&self, key: Key<'_>, tags: &[String]) -> BoxFuture<Result<Read, BackendError>> {
        let this = Arc::clone(&self.inner);
        let backend = &self.inner.backend;
        // A hit on an entry the handler named no tags for: one `GET`, its key written straight
        // into the command, in a small future.
        if tags.is_empty()
            && let Some(now) = known_now(backend, &self.inner.clock)
        {
            let get = self.get(key);
            return Box::pin(async move { read_one(this.backend.query(&get).await, now) });
        }
        let entry = self.name(key);
        let tags: Vec<String> = tags.iter().map(|t| backend.key(&["ct"], t)).collect();
        Box::pin(async move {
            let backend = &this.backend;
            // On one server: the entry alone in a `GET`, with tags' records in one `MGET`. On
            // a Cluster each tag's record goes to its own master, concurrently: still one
            // round trip. The URI's record is not read: its invalidation deleted the entry.
            let (near, tags) = if backend.connection().is_cluster() && !tags.is_empty() {
                let far_reads = tags.iter().map(|key| {
                    let cmd = redis::cmd("GET").arg(key).clone();
                    async move { backend.query(&cmd).await }
                });
                let (near, far) = futures_util::future::join(
                    read_near(backend, &this.clock, true, &entry, &[]),
                    futures_util::future::join_all(far_reads),
                )
                .await;
                let near = near?;
                let tags = far
                    .into_iter()
                    .map(|r| Ok(tag_time(&r?)))
                    .collect::<Result<_, BackendError>>()?;
                (near, tags)
            } else {
                let cluster = backend.connection().is_cluster();
                let mut near = read_near(backend, &this.clock, cluster, &entry, &tags).await?;
                let tags = std::mem::take(&mut near.tags);
                (near, tags)
            };
            Ok(Read {
                now: near.now,
                value: near.value,
                // On one server MGET answers nil for a key of another type: a miss all the same,
                // which the fill overwrites.
                foreign: near.foreign,
                group: None,
                tags,
            })
        })
    }

    fn write(&self, key: Key<'_>, write: Write) -> BoxFuture<Result<bool, BackendError>> {
        let put = self.put(key, write, None);
        Box::pin(async move { Ok(put.await? != Value::Nil) })
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
        // A tag and a URI alike: a tag has no variant list, and the script deletes nothing.
        let keys = self.uri_keys(tag);
        let this = Arc::clone(&self.inner);
        Box::pin(async move {
            let mut call = this.backend.script(&INVALIDATE, &keys);
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

    fn redis(&self) -> Option<&RedisCacheStore> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{CLOCK_REFRESH, KeyName, RedisClock};

    /// A name written into a command is `<prefix><name>:{<tag>}` (or `<prefix>{<tag>}`),
    /// short or too long for the stack.
    #[test]
    fn key_names_are_written_whole() {
        let long = "p".repeat(300);
        for prefix in ["rg:cr:", long.as_str()] {
            for name in [Some("n"), None] {
                let mut cmd = redis::Cmd::new();
                cmd.arg("GET").arg(KeyName {
                    prefix,
                    name,
                    tag: "t",
                });
                let written: Vec<Vec<u8>> = cmd
                    .args_iter()
                    .map(|a| match a {
                        redis::Arg::Simple(b) => b.to_vec(),
                        _ => Vec::new(),
                    })
                    .collect();
                let expected = match name {
                    Some(name) => format!("{prefix}{name}:{{t}}"),
                    None => format!("{prefix}{{t}}"),
                };
                assert_eq!(written, [b"GET".to_vec(), expected.into_bytes()]);
            }
        }
    }

    /// A reading moves on with this process's clock, never ahead of it, and stands for Redis's
    /// clock for a second only.
    #[test]
    fn the_clock_follows_a_recent_reading_and_never_runs_ahead() {
        let clock = RedisClock::default();
        assert_eq!(clock.now(), None, "no reading yet");
        let half = Duration::from_millis(500);
        let before = Instant::now();
        clock.set(before.checked_sub(half).expect("an instant"), 7_000_000);
        let now = clock.now().expect("a recent reading");
        let elapsed = u64::try_from(before.elapsed().as_micros()).expect("µs");
        // Half a second on, less a thousandth of it, never more than has passed.
        assert!(now >= 7_000_000 + 500_000 - 500, "{now}");
        assert!(now <= 7_000_000 + 500_000 + elapsed, "{now}");
        let old = Instant::now()
            .checked_sub(CLOCK_REFRESH)
            .expect("an instant");
        clock.set(old, 7_000_000);
        assert_eq!(clock.now(), None, "a reading a second old is read again");
    }

    /// A write's time moves the clock on when the clock reads earlier, and never back.
    #[test]
    fn a_write_brings_a_clock_behind_it_up_to_its_time() {
        let clock = RedisClock::default();
        let at = Instant::now();
        clock.catch_up(at, 5_000_000);
        assert!(
            clock.now().expect("a reading") >= 5_000_000,
            "taken when there was none"
        );
        // A reading half a second old, then a write that ran a second after it: the clock
        // reads the write's time (a moment behind, it would read half a second less).
        let earlier = at
            .checked_sub(Duration::from_millis(500))
            .expect("an instant");
        clock.set(earlier, 9_000_000);
        clock.catch_up(at, 10_000_000);
        assert!(clock.now().expect("a reading") >= 10_000_000);
        // A write whose reply came in after a later reading leaves the clock where it is.
        clock.set(at, 20_000_000);
        clock.catch_up(at, 15_000_000);
        assert!(clock.now().expect("a reading") >= 20_000_000);
    }
}
