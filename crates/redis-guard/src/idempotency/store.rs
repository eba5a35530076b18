//! [`IdempotencyStore`]: where the records live, in process or on Redis.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use bytes::Bytes;
use redis::Value;

use super::record::{Record, head_line, split};
use crate::backend::{
    BackendError, ExpiringTable, InProcess, InProcessBuilder, LuaScript, RedisBackend,
    RedisConnection, micros,
};

static CLAIM: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("scripts/claim.lua")));
static COMPLETE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("scripts/complete.lua")));
static RELEASE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("scripts/release.lua")));

/// How many records the memory store holds at most by default.
const DEFAULT_CAPACITY: usize = 10_000;

/// Where an [`IdempotencyLayer`](super::IdempotencyLayer) keeps its records: on Redis
/// ([`RedisIdempotencyStore`]: shared by every replica; a server, a `bb8` pool or a Cluster, as
/// the [`RedisBackend`] says) or in this process ([`MemoryIdempotencyStore`]: one instance,
/// development and tests). Both convert into it, as a [`RedisBackend`] or a
/// [`RedisConnection`] does; the layer takes any of them. Clones share the records.
///
/// On Redis a record is one key, `<prefix>idem:{<digest>}` (the digest of the client's scope and
/// key: neither shows in Redis), written by one script per step, with a TTL: the lease while
/// the request runs, the retention once it is done. One key per command: nothing crosses hash
/// slots on a Cluster; no `KEYS` or `SCAN`.
///
/// In memory, records are bounded (10,000 by default:
/// [`capacity`](InProcessBuilder::capacity)), and expired ones are swept a few per request.
/// Past the bound completed records go, the oldest first; a running request's claim is never
/// evicted while its lease runs: when running requests fill the store, a request with a new key
/// is answered `503` with `Retry-After: 1` ([`Rejection::StoreFull`](super::Rejection::StoreFull))
/// until one of them ends. A record holds the stored response, so the most memory held is about
/// the capacity times the layer's
/// [`response_limit`](super::IdempotencyLayerBuilder::response_limit).
///
/// ```no_run
/// use redis_guard::backend::{RedisBackend, RedisConnection};
/// use redis_guard::idempotency::{IdempotencyLayer, MemoryIdempotencyStore, RedisIdempotencyStore};
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let redis = RedisBackend::new(RedisConnection::open("redis://127.0.0.1/").await?);
/// let shared = IdempotencyLayer::new(RedisIdempotencyStore::new(redis))?; // or ::new(redis)
/// let local = IdempotencyLayer::new(MemoryIdempotencyStore::builder().capacity(1_000).build())?;
/// # let _ = (shared, local); Ok(()) }
/// ```
#[derive(Clone)]
pub struct IdempotencyStore {
    place: Place,
}

#[derive(Clone)]
enum Place {
    Memory(Arc<InProcess<Records>>),
    Redis(RedisBackend),
}

/// The memory store's records: the value a Redis key would hold, under its record's name.
type Records = ExpiringTable<String, Bytes>;

// By hand: the records (stored responses) stay out of a layer's `Debug`.
impl std::fmt::Debug for IdempotencyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.place {
            Place::Memory(memory) => f
                .debug_struct("IdempotencyStore::Memory")
                .field("records", &memory.lock().len())
                .finish(),
            Place::Redis(backend) => f
                .debug_tuple("IdempotencyStore::Redis")
                .field(backend)
                .finish(),
        }
    }
}

/// What a claim found.
#[derive(Debug)]
pub(crate) enum Claim {
    /// The record is this request's now: run it.
    Claimed,
    /// A live record of a request with the same key.
    Found(Record),
    /// The memory store holds as many running requests as it can: this one is refused, never
    /// let in at the cost of a running one's claim.
    Full,
}

/// Idempotency records on Redis, shared by every replica (`backend`'s prefix, timeout and
/// circuit breaker apply); an [`IdempotencyLayer`](super::IdempotencyLayer) takes it.
///
/// ```no_run
/// use redis_guard::backend::RedisConnection;
/// use redis_guard::idempotency::{IdempotencyLayer, RedisIdempotencyStore};
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let conn = RedisConnection::open("redis://127.0.0.1/").await?;
/// let layer = IdempotencyLayer::new(RedisIdempotencyStore::new(conn))?;
/// # let _ = layer; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisIdempotencyStore(IdempotencyStore);

impl RedisIdempotencyStore {
    /// Records on `backend` (a [`RedisBackend`] or a [`RedisConnection`]).
    #[must_use]
    pub fn new(backend: impl Into<RedisBackend>) -> Self {
        Self(IdempotencyStore::on_redis(backend.into()))
    }
}

/// Idempotency records in this process, at most 10,000 unless [`builder`](Self::builder) says
/// otherwise: one instance, development and tests. Clones share the records.
///
/// ```
/// use redis_guard::idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
/// # fn main() -> Result<(), redis_guard::ConfigError> {
/// let layer = IdempotencyLayer::new(MemoryIdempotencyStore::new())?;
/// let small = IdempotencyLayer::new(MemoryIdempotencyStore::builder().capacity(100).build())?;
/// # let _ = (layer, small); Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MemoryIdempotencyStore(IdempotencyStore);

impl MemoryIdempotencyStore {
    /// Records in this process, at most 10,000.
    #[must_use]
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Records in this process, with another capacity, or a clock for tests.
    pub fn builder() -> InProcessBuilder<Self> {
        InProcessBuilder::new(DEFAULT_CAPACITY, |capacity, clock| {
            Self(IdempotencyStore::in_memory(capacity, clock))
        })
    }
}

impl Default for MemoryIdempotencyStore {
    /// [`MemoryIdempotencyStore::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl From<RedisIdempotencyStore> for IdempotencyStore {
    fn from(store: RedisIdempotencyStore) -> Self {
        store.0
    }
}

impl From<MemoryIdempotencyStore> for IdempotencyStore {
    fn from(store: MemoryIdempotencyStore) -> Self {
        store.0
    }
}

impl IdempotencyStore {
    /// Records in this process, at most 10,000.
    #[deprecated(note = "use `MemoryIdempotencyStore::new()`")]
    #[must_use]
    pub fn memory() -> Self {
        MemoryIdempotencyStore::new().into()
    }

    /// Records in this process, with another capacity, or a clock for tests.
    #[deprecated(note = "use `MemoryIdempotencyStore::builder()`")]
    pub fn memory_builder() -> InProcessBuilder<Self> {
        InProcessBuilder::new(DEFAULT_CAPACITY, Self::in_memory)
    }

    /// Records on Redis, shared by every replica (`backend`'s prefix, timeout and circuit
    /// breaker apply).
    #[deprecated(note = "use `RedisIdempotencyStore::new(backend)`")]
    #[must_use]
    pub fn redis(backend: impl Into<RedisBackend>) -> Self {
        Self::on_redis(backend.into())
    }

    fn in_memory(capacity: usize, clock: Option<Box<dyn crate::backend::Clock>>) -> Self {
        Self {
            place: Place::Memory(Arc::new(InProcess::new(
                ExpiringTable::new(capacity),
                clock,
            ))),
        }
    }

    fn on_redis(backend: RedisBackend) -> Self {
        Self {
            place: Place::Redis(backend),
        }
    }

    /// Why the store cannot work as configured, or `None`.
    pub(crate) fn check(&self) -> Option<crate::ConfigError> {
        match &self.place {
            Place::Memory(_) => None,
            Place::Redis(backend) => backend.config_problem(),
        }
    }

    /// Claims `name` for the request holding `token` for `lease`, unless a live record is
    /// there; `rest` is the in-flight record's part after its head.
    pub(crate) async fn claim(
        &self,
        name: &str,
        token: &str,
        lease: Duration,
        rest: &[u8],
    ) -> Result<Claim, BackendError> {
        let backend = match &self.place {
            Place::Memory(memory) => {
                let (now, mut table) = (memory.now_us(), memory.lock());
                let key = name.to_owned();
                if let Some(value) = table.get_live_mut(&key, now) {
                    return Record::decode(value).map(Claim::Found).ok_or_else(foreign);
                }
                if !room_for_a_claim(&mut table, now) {
                    return Ok(Claim::Full);
                }
                put(&mut table, key, now, lease, (false, token), rest);
                return Ok(Claim::Claimed);
            }
            Place::Redis(backend) => backend,
        };
        let mut call = backend.script(&CLAIM, &[backend.key(&["idem"], name)]);
        call.arg(token).arg(micros(lease)).arg(rest);
        let reply = call.run().await?;
        let items = match &reply {
            Value::Array(items) => items.as_slice(),
            _ => &[],
        };
        match items {
            [Value::BulkString(what)] if what == b"claimed" => Ok(Claim::Claimed),
            [Value::BulkString(what), Value::BulkString(value)] if what == b"found" => {
                Record::decode(value).map(Claim::Found).ok_or_else(foreign)
            }
            [Value::BulkString(what)] if what == b"foreign" => Err(foreign()),
            _ => Err(BackendError::BadReply(format!(
                "the idempotency claim script answered {reply:?}"
            ))),
        }
    }

    /// Replaces the claim of `token` with the completed record (`rest` after its head), kept
    /// for `keep`; false when the record is no longer this request's to complete.
    pub(crate) async fn complete(
        &self,
        name: &str,
        token: &str,
        keep: Duration,
        rest: &[u8],
    ) -> Result<bool, BackendError> {
        let backend = match &self.place {
            Place::Memory(memory) => {
                let (now, mut table) = (memory.now_us(), memory.lock());
                let key = name.to_owned();
                let taken = table
                    .get_live_mut(&key, now)
                    .is_some_and(|v| !split(v).is_some_and(|(h, _)| !h.done && h.token == token));
                if !taken {
                    put(&mut table, key, now, keep, (true, token), rest);
                }
                return Ok(!taken);
            }
            Place::Redis(backend) => backend,
        };
        let mut call = backend.script(&COMPLETE, &[backend.key(&["idem"], name)]);
        call.arg(token).arg(micros(keep)).arg(rest);
        Ok(call.run().await? == Value::Int(1))
    }

    /// Deletes the claim of `token`, so that a retry runs the request again; false when the
    /// record is not (or no longer) that claim.
    pub(crate) async fn release(&self, name: &str, token: &str) -> Result<bool, BackendError> {
        let backend = match &self.place {
            Place::Memory(memory) => {
                let mut table = memory.lock();
                let key = name.to_owned();
                let ours = table
                    .get(&key)
                    .and_then(|v| split(v))
                    .is_some_and(|(h, _)| !h.done && h.token == token);
                if ours {
                    table.remove(&key);
                }
                return Ok(ours);
            }
            Place::Redis(backend) => backend,
        };
        let mut call = backend.script(&RELEASE, &[backend.key(&["idem"], name)]);
        call.arg(token);
        Ok(call.run().await? == Value::Int(1))
    }

    /// Whether a release completes without waiting (in process).
    pub(crate) fn in_process(&self) -> bool {
        matches!(self.place, Place::Memory(_))
    }
}

impl Default for IdempotencyStore {
    /// [`MemoryIdempotencyStore::new`].
    fn default() -> Self {
        MemoryIdempotencyStore::new().into()
    }
}

impl From<RedisBackend> for IdempotencyStore {
    fn from(backend: RedisBackend) -> Self {
        Self::on_redis(backend)
    }
}

impl From<RedisConnection> for IdempotencyStore {
    fn from(conn: RedisConnection) -> Self {
        Self::on_redis(conn.into())
    }
}

/// Writes a record under `key` in memory, alive for `life` from `now`, its head saying whether
/// it is `done` and whose `token` it is; then sweeps.
///
/// A claim is a kept entry of the table and a completed record an ordinary one: past the
/// bound, completed records go first (the oldest first, as they share a retention), and a claim
/// only once it has expired, since [`room_for_a_claim`] keeps live claims within the bound.
/// Were a fresh claim (a 60 s lease) ordinary, it would stand before every completed record
/// (24 h) and be evicted by the very call that made it, letting every duplicate run again.
fn put(
    table: &mut Records,
    key: String,
    now: u64,
    life: Duration,
    (done, token): (bool, &str),
    rest: &[u8],
) {
    let until = now.saturating_add(micros(life));
    let mut value = head_line(done, until, token).into_bytes();
    value.extend_from_slice(rest);
    if done {
        // Out of the kept order: an entry stays kept until removed.
        table.remove(&key);
        table.insert(key, Bytes::from(value), until);
    } else {
        table.insert(key.clone(), Bytes::from(value), until);
        table.keep(&key);
    }
    table.maintain(now, |_, _| {});
}

/// Whether one more claim fits beside the live ones: claims never outnumber the capacity, so
/// the bound is always met by sweeping expired records or evicting completed ones. Expired
/// claims are swept first when they are what fills the store.
fn room_for_a_claim(table: &mut Records, now: u64) -> bool {
    // The table is within its bound here: `maintain` only sweeps expired entries, a batch a
    // call; it returns 0 once the soonest entry is live.
    while table.kept_len() >= table.capacity() {
        if table.maintain(now, |_, _| {}) == 0 {
            return false;
        }
    }
    true
}

fn foreign() -> BackendError {
    BackendError::BadReply(
        "an idempotency record's key holds a value that is not a record; left as it is".to_owned(),
    )
}
