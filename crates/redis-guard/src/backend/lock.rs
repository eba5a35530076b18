//! [`Lock`]: a lease on a name, shared by every replica on Redis (or by the tasks of one process
//! in memory).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Value;

use crate::{ConfigError, ConfigErrorKind};

use super::{
    BackendError, Clock, ExpiringTable, InProcess, InProcessBuilder, LuaScript, RedisBackend,
};

/// The longest lease [`Lock::try_acquire`] and [`LockGuard::extend`] take: a day. Longer work
/// renews its lease.
pub(crate) const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);

/// How many locks a memory [`Lock`] holds at most by default.
const DEFAULT_CAPACITY: usize = 100_000;

static SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new(include_str!("lock.lua")));

/// A lock on a name: whoever acquires it holds a **lease** until they release it or it runs out,
/// and nobody else acquires it meanwhile. On Redis every replica sees the same locks (one key
/// per name, `<prefix>lock:{<name>}`, with a TTL: a holder that dies frees it when its lease
/// runs out); in memory it locks the tasks of one process. Make it from its store, as the
/// layers are made from theirs: `Lock::new(RedisLockStore::new(backend))` or
/// `Lock::new(MemoryLockStore::new())`.
///
/// - **Acquire** writes a random token with the lease (`SET … PX` inside one script);
///   [`try_acquire`](Self::try_acquire) tries once, [`acquire`](Self::acquire) retries for a
///   while.
/// - **Release** deletes the key only if it still holds this holder's token (compare and
///   delete in Lua), so a holder whose lease ran out never frees the lock of the next holder.
///   Dropping the [`LockGuard`] releases it too (in a spawned task on Redis).
/// - **Extend** renews the lease of a holder that still holds it, for work that takes longer.
///
/// **What it is not.** It is a lease, not a fencing token: a holder stalled past its lease (a
/// long GC pause, a frozen VM) may still act while the next holder does, and nothing here can
/// stop its late writes. Guard work where that matters with a check in the store it writes to
/// (a version or the token itself). It runs on one Redis (or one master of a cluster): if that
/// master fails over before the key reaches its replica, a second holder can acquire it. That
/// is why this is not Redlock, and claims no more than a single Redis gives: right for
/// "recompute once, not two hundred times" (the response cache's stampede protection), not for
/// correctness that must survive a failover.
///
/// ```
/// use std::time::Duration;
/// use redis_guard::backend::{Lock, MemoryLockStore};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let locks = Lock::new(MemoryLockStore::new()); // or RedisLockStore::new(backend)
/// let guard = locks.try_acquire("nightly-report", Duration::from_secs(30)).await?;
/// let guard = guard.expect("nobody else holds it");
/// assert!(locks.try_acquire("nightly-report", Duration::from_secs(30)).await?.is_none());
/// assert!(guard.extend(Duration::from_secs(60)).await?);
/// assert!(guard.release().await?);
/// assert!(locks.try_acquire("nightly-report", Duration::from_secs(30)).await?.is_some());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Lock {
    place: Arc<Place>,
}

#[derive(Debug)]
enum Place {
    Redis(RedisBackend),
    /// Per name: the holder's token and the lease's deadline (the table's own deadline).
    Memory(InProcess<ExpiringTable<String, u128>>),
}

/// Why a lock operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The store failed (unreachable, too slow, or the lock's key holds something that is not a
    /// lock: [`BackendError::Script`] with code `RG_LOCK`).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The name ([`ConfigErrorKind::Name`]) or the lease ([`ConfigErrorKind::Duration`]) cannot
    /// work.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An in-process lock ([`MemoryLockStore`]) holds as many live leases as its capacity: a new
    /// name is refused until one is released or runs out. A live lease is never evicted to
    /// make room: a lock that forgot a holder would be acquired twice. Never from Redis.
    #[error("the in-process lock holds {capacity} live leases, its capacity: no room for another")]
    Full {
        /// The lock's capacity.
        capacity: usize,
    },
}

/// Locks on Redis, shared by every replica (`backend`'s prefix, timeout and circuit breaker
/// apply): the store of a [`Lock`].
///
/// ```no_run
/// use redis_guard::backend::{Lock, RedisConnection, RedisLockStore};
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let conn = RedisConnection::open("redis://127.0.0.1/").await?;
/// let locks = Lock::new(RedisLockStore::new(conn));
/// # let _ = locks; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisLockStore(Lock);

impl RedisLockStore {
    /// Locks on `backend` (a [`RedisBackend`] or a `RedisConnection`).
    #[must_use]
    pub fn new(backend: impl Into<RedisBackend>) -> Self {
        Self(Lock {
            place: Arc::new(Place::Redis(backend.into())),
        })
    }
}

/// Locks of this process, in memory, at most 100,000 held at once unless
/// [`builder`](Self::builder) says otherwise: the store of a [`Lock`]. Clones (and the locks
/// made from them) share the locks. Leases that ran out are swept a few per acquisition (as
/// every in-process table is); when every slot holds a live lease, acquiring a new name fails
/// with [`LockError::Full`] rather than evict a holder.
///
/// ```
/// use redis_guard::backend::{Lock, MemoryLockStore};
/// let locks = Lock::new(MemoryLockStore::new());
/// let few = Lock::new(MemoryLockStore::builder().capacity(100).build());
/// # let _ = (locks, few);
/// ```
#[derive(Clone, Debug)]
pub struct MemoryLockStore(Lock);

impl MemoryLockStore {
    /// Locks of this process (at most 100,000 held at once).
    #[must_use]
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Builds in-process locks with another capacity (the most leases held at once, at least
    /// 1), or a clock for tests.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::backend::{Lock, LockError, MemoryLockStore};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let locks = Lock::new(MemoryLockStore::builder().capacity(1).build());
    /// let held = locks.try_acquire("a", Duration::from_secs(30)).await?;
    /// let full = locks.try_acquire("b", Duration::from_secs(30)).await;
    /// assert!(matches!(full, Err(LockError::Full { capacity: 1 })));
    /// drop(held); // released: room again
    /// assert!(locks.try_acquire("b", Duration::from_secs(30)).await?.is_some());
    /// # Ok(()) }
    /// ```
    pub fn builder() -> InProcessBuilder<Self> {
        InProcessBuilder::new(DEFAULT_CAPACITY, |capacity, clock| {
            Self(Lock::in_memory(capacity, clock))
        })
    }
}

impl Default for MemoryLockStore {
    /// [`MemoryLockStore::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl From<RedisLockStore> for Lock {
    fn from(store: RedisLockStore) -> Self {
        store.0
    }
}

impl From<MemoryLockStore> for Lock {
    fn from(store: MemoryLockStore) -> Self {
        store.0
    }
}

impl Lock {
    /// Locks in `store`: a [`RedisLockStore`] (every replica) or a [`MemoryLockStore`] (this
    /// process).
    #[must_use]
    pub fn new(store: impl Into<Self>) -> Self {
        store.into()
    }

    /// Locks shared by every replica on `backend`.
    #[deprecated(note = "use `Lock::new(RedisLockStore::new(backend))`")]
    #[must_use]
    pub fn redis(backend: impl Into<RedisBackend>) -> Self {
        RedisLockStore::new(backend).into()
    }

    /// Locks of this process, in memory (at most 100,000 held at once).
    #[deprecated(note = "use `Lock::new(MemoryLockStore::new())`")]
    #[must_use]
    pub fn memory() -> Self {
        MemoryLockStore::new().into()
    }

    /// Builds in-process locks with another capacity, or a clock for tests.
    #[deprecated(note = "use `MemoryLockStore::builder()`")]
    pub fn memory_builder() -> InProcessBuilder<Self> {
        InProcessBuilder::new(DEFAULT_CAPACITY, Self::in_memory)
    }

    fn in_memory(capacity: usize, clock: Option<Box<dyn Clock>>) -> Self {
        Self {
            place: Arc::new(Place::Memory(InProcess::new(
                ExpiringTable::new(capacity.max(1)),
                clock,
            ))),
        }
    }

    /// Acquires `name` for `lease` if nobody holds it: `None` when somebody does.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for a name that is empty, longer than 256 bytes or contains `{`
    /// or `}`, or a lease outside 1 ms to a day; [`LockError::Backend`] when Redis
    /// fails; [`LockError::Full`] when an in-process lock holds as many live leases as its
    /// capacity.
    pub async fn try_acquire(
        &self,
        name: &str,
        lease: Duration,
    ) -> Result<Option<LockGuard>, LockError> {
        let lease_ms = valid(name, lease)?;
        let token = token();
        let taken = match &*self.place {
            Place::Redis(backend) => redis_op(backend, name, "acquire", token, lease_ms).await?,
            Place::Memory(table) => {
                let now = table.now_us();
                let mut locks = table.lock();
                let key = name.to_owned();
                // Leases that ran out go a few at a time; the table never holds more than its
                // capacity, so this never evicts a live one.
                locks.maintain(now, |_, _| {});
                if locks.is_live(&key, now) {
                    false
                } else {
                    while locks.len() >= locks.capacity() && !locks.contains_key(&key) {
                        // Full: only a lease that ran out may make room.
                        if locks.maintain(now, |_, _| {}) == 0 {
                            return Err(LockError::Full {
                                capacity: locks.capacity(),
                            });
                        }
                    }
                    locks.insert(key, token, now.saturating_add(lease_ms * 1000));
                    true
                }
            }
        };
        Ok(taken.then(|| LockGuard {
            lock: self.clone(),
            name: name.to_owned(),
            token,
            released: false,
        }))
    }

    /// Acquires `name` for `lease`, trying again (every few milliseconds, backing off to 50 ms)
    /// for at most `wait`: `None` when it stayed held.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn acquire(
        &self,
        name: &str,
        lease: Duration,
        wait: Duration,
    ) -> Result<Option<LockGuard>, LockError> {
        let until = tokio::time::Instant::now() + wait;
        let mut pause = Duration::from_millis(2);
        loop {
            if let Some(guard) = self.try_acquire(name, lease).await? {
                return Ok(Some(guard));
            }
            let now = tokio::time::Instant::now();
            if now >= until {
                return Ok(None);
            }
            // Jittered, so that waiters do not come back in step.
            let jitter = Duration::from_micros(u64::try_from(token() % 1000).unwrap_or(0));
            tokio::time::sleep((pause + jitter).min(until - now)).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// `op` on `name` for the holder of `token`.
    async fn holder_op(
        &self,
        name: &str,
        op: &str,
        token: u128,
        lease: Duration,
    ) -> Result<bool, LockError> {
        let lease_ms = valid(name, lease)?;
        match &*self.place {
            Place::Redis(backend) => Ok(redis_op(backend, name, op, token, lease_ms).await?),
            Place::Memory(table) => {
                let now = table.now_us();
                let mut locks = table.lock();
                let key = name.to_owned();
                if locks.get_live_mut(&key, now).map(|t| *t) != Some(token) {
                    return Ok(false);
                }
                if op == "release" {
                    locks.remove(&key);
                } else {
                    locks.set_deadline(&key, now + lease_ms * 1000);
                }
                Ok(true)
            }
        }
    }
}

/// A held lock: [`release`](Self::release) it, or drop it (released in a spawned task on Redis;
/// without a Tokio runtime the lease runs out instead).
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    lock: Lock,
    name: String,
    token: u128,
    released: bool,
}

impl LockGuard {
    /// The name held.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Renews the lease to `lease` from now, if this guard still holds the lock: `false` when
    /// its lease ran out (and somebody else may hold the lock now).
    ///
    /// # Errors
    ///
    /// As [`Lock::try_acquire`].
    pub async fn extend(&self, lease: Duration) -> Result<bool, LockError> {
        self.lock
            .holder_op(&self.name, "extend", self.token, lease)
            .await
    }

    /// Releases the lock if this guard still holds it: `false` when its lease ran out first
    /// (another holder's lock is never touched).
    ///
    /// # Errors
    ///
    /// As [`Lock::try_acquire`].
    pub async fn release(mut self) -> Result<bool, LockError> {
        self.released = true;
        self.lock
            .holder_op(&self.name, "release", self.token, Duration::from_millis(1))
            .await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (lock, name, token) = (
            self.lock.clone(),
            std::mem::take(&mut self.name),
            self.token,
        );
        let release = async move {
            if let Err(e) = lock
                .holder_op(&name, "release", token, Duration::from_millis(1))
                .await
            {
                tracing::warn!(lock = %name, error = %e, "releasing a dropped lock failed; its lease will run out");
            }
        };
        match &*self.lock.place {
            Place::Memory(_) => {
                // No await inside: the future completes on its first poll.
                futures_util::FutureExt::now_or_never(release);
            }
            Place::Redis(_) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(release);
                }
            }
        }
    }
}

/// `op` with `token` on the lock `name` on Redis: whether it took effect.
async fn redis_op(
    backend: &RedisBackend,
    name: &str,
    op: &str,
    token: u128,
    lease_ms: u64,
) -> Result<bool, BackendError> {
    let key = backend.key(&["lock"], name);
    let reply = backend
        .eval(
            &SCRIPT,
            &[key],
            &[op.to_owned(), format!("{token:032x}"), lease_ms.to_string()],
        )
        .await?;
    match reply {
        Value::Int(n) => Ok(n == 1),
        other => Err(BackendError::BadReply(format!(
            "the lock script answered {other:?}"
        ))),
    }
}

/// The lease in whole ms, once `name` and `lease` are checked.
fn valid(name: &str, lease: Duration) -> Result<u64, LockError> {
    if name.is_empty() || name.len() > 256 || name.contains(['{', '}']) {
        return Err(ConfigError::new(
            ConfigErrorKind::Name,
            format!("lock name {name:?}: use 1 to 256 bytes without `{{` or `}}`"),
        )
        .with_value(name)
        .into());
    }
    ConfigError::check_duration(lease, MAX_LEASE, "a lease", format_args!("{MAX_LEASE:?}"))?;
    Ok(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
}

/// A fresh 128-bit token: unpredictable enough, and unique across holders (per-process random
/// keys, plus a counter).
pub(crate) fn token() -> u128 {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let state = std::hash::RandomState::new();
    (u128::from(state.hash_one(n)) << 64) | u128::from(state.hash_one(!n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{ManualClock, ready};

    /// How many leases, live or not, the memory lock holds.
    fn held(lock: &Lock) -> usize {
        match &*lock.place {
            Place::Memory(table) => table.lock().len(),
            Place::Redis(_) => unreachable!("a memory lock"),
        }
    }

    #[test]
    fn leases_that_ran_out_are_swept_and_live_ones_are_never_evicted() {
        let ms = Duration::from_millis;
        let clock = ManualClock::new();
        let locks = Lock::new(
            MemoryLockStore::builder()
                .capacity(10)
                .clock(clock.clone())
                .build(),
        );
        // Holders whose leases ran out before they released (a release then finds nothing).
        for i in 0..1_000 {
            let guard = ready(Box::pin(locks.try_acquire(&format!("job-{i}"), ms(1))));
            let guard = guard.expect("acquire").expect("free");
            clock.advance(ms(2));
            drop(guard);
            assert!(held(&locks) <= 10, "{} leases held", held(&locks));
        }
        // Ten live leases fill it; an eleventh name is refused, and the ten are kept.
        let live: Vec<LockGuard> = (0..10)
            .map(|i| {
                let guard = ready(Box::pin(locks.try_acquire(&format!("live-{i}"), ms(60_000))));
                guard.expect("acquire").expect("free")
            })
            .collect();
        let full = ready(Box::pin(locks.try_acquire("one-more", ms(60_000))));
        assert!(matches!(full, Err(LockError::Full { capacity: 10 })), "{full:?}");
        assert_eq!(held(&locks), 10);
        for guard in &live {
            assert!(ready(Box::pin(guard.extend(ms(60_000)))).expect("extend"));
        }
    }
}
