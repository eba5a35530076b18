//! [`MemoryCacheStore`]: entries in this process, bounded.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;

use super::entry::{Times, header};
use super::store::{Backing, BoxFuture, CacheStore, Ops, Read, Write};
use crate::backend::{BackendError, Clock, ExpiringTable, InProcess, InProcessBuilder, Lock};

/// How many entries a memory store holds at most by default.
const DEFAULT_CAPACITY: usize = 10_000;

/// Cache entries in this process: for one instance, development and tests. Bounded (10,000
/// entries by default, see [`builder`](Self::builder)); past the bound the entries closest to
/// expiry go first, and expired ones are swept a few per operation. It remembers as many tag
/// invalidations; when one must be forgotten early to make room, every entry is dropped with
/// it, so that no invalidated entry comes back. The lock-on-miss strategy
/// uses an in-process [`Lock`] on the same clock. Clones share the entries.
///
/// ```
/// use redis_guard::cache::{CacheLayer, MemoryCacheStore};
/// let layer = CacheLayer::new(MemoryCacheStore::builder().capacity(1_000).build())?;
/// # let _ = layer;
/// # Ok::<(), redis_guard::cache::CacheConfigError>(())
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
        InProcessBuilder::new(DEFAULT_CAPACITY, |capacity, clock| {
            let clock = SharedClock(match clock {
                Some(clock) => Arc::from(clock),
                None => Arc::new(crate::backend::MonotonicClock::new()),
            });
            let capacity = capacity.max(1);
            Self {
                inner: Arc::new(Inner {
                    lock: Lock::memory_builder()
                        .capacity(capacity)
                        .clock(clock.clone())
                        .build(),
                    state: InProcess::new(
                        State {
                            entries: ExpiringTable::new(capacity),
                            tags: ExpiringTable::new(capacity),
                        },
                        Some(Box::new(clock)),
                    ),
                    last: AtomicU64::new(0),
                }),
            }
        })
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

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn ready<T: Send + 'static>(v: T) -> BoxFuture<T> {
    Box::pin(std::future::ready(v))
}

impl Ops for MemoryCacheStore {
    fn read(&self, key: &str) -> BoxFuture<Result<Read, BackendError>> {
        let now = self.inner.now();
        let mut state = self.inner.state.lock();
        state.entries.maintain(now, |_, _| {});
        let value = state.entries.get_live_mut(&key.to_owned(), now).cloned();
        ready(Ok(Read {
            now,
            value,
            foreign: false,
        }))
    }

    fn write(&self, key: &str, w: Write) -> BoxFuture<Result<(), BackendError>> {
        let now = self.inner.now();
        let fresh_until = now.saturating_add(micros(w.fresh));
        let stale_until = fresh_until.saturating_add(micros(w.stale));
        let times = Times {
            fresh_until,
            stale_until,
            started: w.started,
            delta: now.saturating_sub(w.started),
        };
        let mut value = header(w.kind, times).into_bytes();
        value.extend_from_slice(&w.blob);
        let mut state = self.inner.state.lock();
        state.entries.maintain(now, |_, _| {});
        state
            .entries
            .insert(key.to_owned(), Bytes::from(value), stale_until.max(now + 1));
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
        }
        ready(Ok(()))
    }

    fn lock(&self) -> &Lock {
        &self.inner.lock
    }

    fn check(&self) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::entry::Kind;
    use futures_util::FutureExt;

    fn sync<T>(f: BoxFuture<T>) -> T {
        f.now_or_never().expect("the memory store never waits")
    }

    #[test]
    fn a_tag_forgotten_for_room_takes_every_entry_with_it() {
        let store = MemoryCacheStore::builder().capacity(2).build();
        let day = Duration::from_secs(86_400);
        let write = Write {
            kind: Kind::Entry,
            started: 0,
            fresh: day,
            stale: Duration::ZERO,
            blob: Bytes::from_static(b"blob"),
        };
        sync(store.write("k", write)).expect("write");
        for tag in ["a", "b"] {
            sync(store.invalidate(tag, day)).expect("invalidate");
        }
        assert!(sync(store.read("k")).expect("read").value.is_some());
        // A third tag: "a" is forgotten long before its time, and the entries go with it.
        sync(store.invalidate("c", day)).expect("invalidate");
        assert!(sync(store.read("k")).expect("read").value.is_none());
        let times = sync(store.tag_times(&["b".into(), "c".into()])).expect("tags");
        assert!(times.iter().all(Option::is_some));
    }
}
