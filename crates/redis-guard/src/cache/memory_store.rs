//! [`MemoryCacheStore`]: entries in this process, bounded.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;

use super::entry::{Times, header};
use super::store::{Backing, BoxFuture, CacheStore, Key, Ops, Read, Write};
use crate::backend::{
    BackendError, Clock, ExpiringTable, InProcess, InProcessBuilder, Lock, MemoryLockStore, micros,
};

/// How many entries a memory store holds at most by default.
const DEFAULT_CAPACITY: usize = 10_000;

/// How many bytes of keys and values a memory store holds at most by default: 64 MiB.
pub(crate) const DEFAULT_MAX_BYTES: usize = 64 * 1024 * 1024;

/// Cache entries in this process: for one instance, development and tests. Bounded twice: by
/// bytes (64 MiB of keys and values by default, hit-for-pass markers included:
/// [`max_bytes`](InProcessBuilder::max_bytes)) and by entries (10,000 by default:
/// [`capacity`](InProcessBuilder::capacity)); past either bound the entries closest to
/// expiry go first, and expired ones are swept a few per operation. An entry larger than the
/// whole byte bound is not stored. It remembers as many tag
/// invalidations; when one must be forgotten early to make room, every entry is dropped with
/// it, so that no invalidated entry comes back. The lock-on-miss strategy
/// uses an in-process [`Lock`] on the same clock. Clones share the entries.
///
/// ```
/// use redis_guard::cache::{CacheLayer, MemoryCacheStore};
/// let store = MemoryCacheStore::builder()
///     .max_bytes(16 * 1024 * 1024)
///     .capacity(1_000)
///     .build();
/// let layer = CacheLayer::new(store)?;
/// # let _ = layer;
/// # Ok::<(), redis_guard::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct MemoryCacheStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: InProcess<State>,
    lock: Lock,
    /// The last time handed out: every operation reads a later one, so that an invalidation
    /// and the lookup after it never share a microsecond (a manual clock stands still).
    last: AtomicU64,
}

impl Inner {
    fn now(&self) -> u64 {
        let clock = self.state.now_us();
        let prev = self
            .last
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
                Some(clock.max(last + 1))
            })
            .unwrap_or(clock);
        clock.max(prev + 1)
    }
}

#[derive(Debug)]
struct State {
    entries: ExpiringTable<String, Bytes>,
    tags: ExpiringTable<String, u64>,
    /// Bytes of the entries' keys and values held now, and at most.
    bytes: usize,
    max_bytes: usize,
}

/// What an entry counts against the byte bound.
fn cost(key: &str, value: &Bytes) -> usize {
    key.len() + value.len()
}

impl State {
    /// Sweeps expired entries, then evicts until both bounds hold.
    fn maintain(&mut self, now: u64) {
        let mut freed = 0;
        self.entries.maintain(now, |k, v| freed += cost(&k, &v));
        self.bytes -= freed;
        while self.bytes > self.max_bytes {
            let Some((k, v)) = self.entries.pop_first() else {
                break;
            };
            self.bytes -= cost(&k, &v);
        }
    }

    fn put(&mut self, key: String, value: Bytes, deadline: u64, now: u64) {
        let size = cost(&key, &value);
        if size > self.max_bytes {
            tracing::debug!(
                size,
                max = self.max_bytes,
                "cache entry larger than the memory store: not stored"
            );
            if let Some(old) = self.entries.remove(&key) {
                self.bytes -= cost(&key, &old);
            }
            return;
        }
        self.bytes += size;
        let key_len = key.len();
        if let Some(old) = self.entries.insert(key, value, deadline) {
            self.bytes -= key_len + old.len();
        }
        self.maintain(now);
    }
}

/// One clock read by the entries' table and by the locks.
#[derive(Clone, Debug)]
struct SharedClock(Arc<dyn Clock>);

impl Clock for SharedClock {
    fn now(&self) -> Duration {
        self.0.now()
    }
}

impl MemoryCacheStore {
    /// A store holding at most 10,000 entries.
    #[must_use]
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Builds a store with another capacity, or a clock for tests.
    pub fn builder() -> InProcessBuilder<Self> {
        InProcessBuilder::sized(
            DEFAULT_CAPACITY,
            DEFAULT_MAX_BYTES,
            |capacity, max_bytes, clock| {
                let clock = SharedClock(match clock {
                    Some(clock) => Arc::from(clock),
                    None => Arc::new(crate::backend::MonotonicClock::new()),
                });
                let capacity = capacity.max(1);
                Self {
                    inner: Arc::new(Inner {
                        lock: Lock::new(
                            MemoryLockStore::builder()
                                .capacity(capacity)
                                .clock(clock.clone())
                                .build(),
                        ),
                        state: InProcess::new(
                            State {
                                entries: ExpiringTable::new(capacity),
                                tags: ExpiringTable::new(capacity),
                                bytes: 0,
                                max_bytes,
                            },
                            Some(Box::new(clock)),
                        ),
                        last: AtomicU64::new(0),
                    }),
                }
            },
        )
    }
}

impl InProcessBuilder<MemoryCacheStore> {
    /// The most bytes of keys and values the store holds (default 64 MiB); past it, the
    /// entries closest to expiry go first.
    ///
    /// ```
    /// use redis_guard::cache::MemoryCacheStore;
    /// let store = MemoryCacheStore::builder().max_bytes(8 * 1024 * 1024).build();
    /// # let _ = store;
    /// ```
    pub fn max_bytes(mut self, bytes: usize) -> Self {
        self.bytes = bytes;
        self
    }
}

impl Default for MemoryCacheStore {
    fn default() -> Self {
        Self::new()
    }
}

impl crate::sealed::Sealed for MemoryCacheStore {}

impl CacheStore for MemoryCacheStore {
    fn into_backing(self) -> Backing {
        Backing(Arc::new(self))
    }
}

impl MemoryCacheStore {
    /// Writes `w` under `key`; when `only_new`, only if the key holds nothing live. Whether
    /// it wrote.
    fn put(&self, key: &str, w: &Write, only_new: bool) -> bool {
        let now = self.inner.now();
        let fresh_until = now.saturating_add(micros(w.fresh));
        let stale_until = fresh_until.saturating_add(micros(w.stale));
        let started = w.started.min(now);
        let times = Times {
            fresh_until,
            stale_until,
            started,
            delta: now - started,
        };
        let mut value = header(w.kind, times).to_vec();
        value.extend_from_slice(&w.blob);
        let mut state = self.inner.state.lock();
        if only_new {
            state.maintain(now);
            if state.entries.get_live_mut(&key.to_owned(), now).is_some() {
                return false;
            }
        }
        let kept = stale_until.max(fresh_until.saturating_add(micros(w.grace)));
        state.put(key.to_owned(), Bytes::from(value), kept.max(now + 1), now);
        true
    }
}

fn ready<T: Send + 'static>(v: T) -> BoxFuture<T> {
    Box::pin(std::future::ready(v))
}

impl Ops for MemoryCacheStore {
    fn read(&self, key: Key<'_>, tags: &[String]) -> BoxFuture<Result<Read, BackendError>> {
        let now = self.inner.now();
        let mut state = self.inner.state.lock();
        state.maintain(now);
        // Names are digests: unique without their group.
        let value = state.entries.get_live_mut(key.name, now).cloned();
        let group = key
            .group
            .and_then(|g| state.tags.get_live_mut(g, now).copied());
        let tags = tags
            .iter()
            .map(|t| state.tags.get_live_mut(t, now).copied())
            .collect();
        ready(Ok(Read {
            now,
            value,
            foreign: false,
            group,
            tags,
        }))
    }

    fn write(&self, key: Key<'_>, w: Write) -> BoxFuture<Result<bool, BackendError>> {
        // An entry of a URI invalidated since its computation began is stored, and void on
        // read (its URI's record is read with it).
        ready(Ok(self.put(key.name, &w, false)))
    }

    fn add(&self, key: &str, w: Write) -> BoxFuture<Result<bool, BackendError>> {
        ready(Ok(self.put(key, &w, true)))
    }

    fn remove(&self, key: &str) -> BoxFuture<Result<(), BackendError>> {
        let mut state = self.inner.state.lock();
        if let Some(old) = state.entries.remove(&key.to_owned()) {
            state.bytes -= cost(key, &old);
        }
        ready(Ok(()))
    }

    fn tag_times(&self, tags: &[String]) -> BoxFuture<Result<Vec<Option<u64>>, BackendError>> {
        let now = self.inner.now();
        let mut state = self.inner.state.lock();
        let times = tags
            .iter()
            .map(|t| state.tags.get_live_mut(t, now).copied())
            .collect();
        ready(Ok(times))
    }

    fn invalidate(&self, tag: &str, keep: Duration) -> BoxFuture<Result<(), BackendError>> {
        let now = self.inner.now();
        let keep = micros(keep);
        let mut state = self.inner.state.lock();
        // A record dropped for room, before its time, would bring back the entries it voids:
        // then every entry goes instead.
        state
            .tags
            .insert(tag.to_owned(), now, now.saturating_add(keep));
        let mut forgotten = false;
        state.tags.maintain(now, |_, at| {
            forgotten |= at.saturating_add(keep) > now;
        });
        if forgotten {
            state.entries.clear();
            state.bytes = 0;
        }
        ready(Ok(()))
    }

    fn lock(&self) -> &Lock {
        &self.inner.lock
    }

    fn check(&self) -> Option<crate::ConfigError> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ready;
    use crate::cache::entry::Kind;

    #[test]
    fn a_tag_forgotten_for_room_takes_every_entry_with_it() {
        let store = MemoryCacheStore::builder().capacity(2).build();
        let day = Duration::from_secs(86_400);
        let write = Write {
            kind: Kind::Entry,
            started: 0,
            fresh: day,
            stale: Duration::ZERO,
            grace: Duration::ZERO,
            blob: Bytes::from_static(b"blob"),
        };
        ready(store.write(Key::plain("k"), write)).expect("write");
        for tag in ["a", "b"] {
            ready(store.invalidate(tag, day)).expect("invalidate");
        }
        assert!(
            ready(store.read(Key::plain("k"), &[]))
                .expect("read")
                .value
                .is_some()
        );
        // A third tag: "a" is forgotten long before its time, and the entries go with it.
        ready(store.invalidate("c", day)).expect("invalidate");
        assert!(
            ready(store.read(Key::plain("k"), &[]))
                .expect("read")
                .value
                .is_none()
        );
        let times = ready(store.tag_times(&["b".into(), "c".into()])).expect("tags");
        assert!(times.iter().all(Option::is_some));
    }

    #[test]
    fn the_byte_bound_holds_and_the_oldest_entries_go() {
        let store = MemoryCacheStore::new();
        let day = Duration::from_secs(86_400);
        let body = Bytes::from(vec![b'x'; 1024 * 1024]);
        let keys: Vec<String> = (0..80).map(|i| format!("key-{i:02}")).collect();
        for (i, key) in keys.iter().enumerate() {
            let write = Write {
                kind: Kind::Entry,
                started: 0,
                // Later entries live longer: the first written are the first to go.
                fresh: day + Duration::from_secs(u64::try_from(i).expect("small")),
                stale: Duration::ZERO,
                grace: Duration::ZERO,
                blob: body.clone(),
            };
            ready(store.write(Key::plain(key), write)).expect("write");
        }
        let held: Vec<(String, usize)> = keys
            .iter()
            .filter_map(|k| {
                let value = ready(store.read(Key::plain(k), &[])).expect("read").value?;
                Some((k.clone(), k.len() + value.len()))
            })
            .collect();
        let bytes: usize = held.iter().map(|(_, n)| n).sum();
        assert!(bytes <= DEFAULT_MAX_BYTES, "{bytes} bytes held");
        assert!(held.len() >= 60, "only {} entries held", held.len());
        let first_held = keys.iter().position(|k| *k == held[0].0).expect("held");
        assert!(
            held.iter().map(|(k, _)| k).eq(keys[first_held..].iter()),
            "the oldest went first"
        );
        // Hit-for-pass markers count too: a flood of them stays within a small bound.
        let small = MemoryCacheStore::builder().max_bytes(10_000).build();
        for i in 0..1_000 {
            let write = Write {
                kind: Kind::Pass,
                started: 0,
                fresh: day,
                stale: Duration::ZERO,
                grace: Duration::ZERO,
                blob: Bytes::new(),
            };
            ready(small.write(Key::plain(&format!("pass-{i:04}")), write)).expect("write");
        }
        let state = small.inner.state.lock();
        assert!(state.bytes <= 10_000, "{}", state.bytes);
        assert!(state.entries.len() < 1_000);
        let counted: usize = (0..1_000)
            .map(|i| format!("pass-{i:04}"))
            .filter_map(|k| state.entries.get(&k).map(|v| cost(&k, v)))
            .sum();
        assert_eq!(counted, state.bytes);
    }
}
