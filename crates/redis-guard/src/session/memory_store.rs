//! Sessions in this process, with the Redis store's semantics.

use std::collections::HashMap;
use std::sync::Arc;

use super::SessionError;
use super::memory_table::State;
use super::memory_users::{UserDigest, user_digest};
use super::store::{
    BoxFuture, CREATED_FIELD, CSRF_FIELD, Changes, EXP_FIELD, FieldChange, FieldOutcome, Lifetimes,
    Record, SEEN_FIELD, SessionInfo, SessionStore, Store, StoreFuture,
};
use crate::backend::{BackendError, Clock, InProcess, InProcessBuilder};

/// Default bound on the number of sessions a [`MemorySessionStore`] holds.
pub(crate) const DEFAULT_MAX_SESSIONS: usize = 100_000;

/// Sessions in this process: for development, tests and single-instance deployments. Same
/// semantics as [`RedisSessionStore`](super::RedisSessionStore) (per-field writes, idle and
/// absolute expiry, no resurrection, per-user index), on a [`Clock`](crate::backend::Clock) tests can drive.
///
/// Bounded: sessions sit in an expiry-ordered table; expired ones are swept out a few at a time
/// as the store is used, and past [`capacity`](InProcessBuilder::capacity) sessions are ended:
/// expired ones first, then sessions that never had a user ([`Session::set_user`](super::Session::set_user)),
/// then, only when none of those is left, sessions with a user; each group closest to expiry
/// first (the least recently used, for one idle timeout). A flood of cookie-less requests that
/// each store an anonymous session cannot push a logged-in user out; once the store is full
/// of logged-in sessions, a new anonymous one is the first to go. No
/// operation scans the table: each costs O(log n) plus O(per-user cap) when it indexes a user.
/// The per-user index is keyed by the SHA-256 of the user id and loses its entries when their
/// sessions end. Clones share state.
///
/// ```
/// use redis_guard::session::MemorySessionStore;
/// let store = MemorySessionStore::new();
/// let small = MemorySessionStore::builder().capacity(1_000).build();
/// # let _ = (store, small);
/// ```
#[derive(Clone, Debug)]
pub struct MemorySessionStore {
    inner: Arc<InProcess<State>>,
}

impl MemorySessionStore {
    /// A store on the real monotonic clock, bounded to 100 000 sessions.
    #[must_use]
    pub fn new() -> Self {
        Self::with_parts(DEFAULT_MAX_SESSIONS, None)
    }

    /// A builder, to set the capacity or the clock.
    pub fn builder() -> InProcessBuilder<Self> {
        InProcessBuilder::new(DEFAULT_MAX_SESSIONS, Self::with_parts)
    }

    fn with_parts(capacity: usize, clock: Option<Box<dyn Clock>>) -> Self {
        Self {
            inner: Arc::new(InProcess::new(State::new(capacity), clock)),
        }
    }

    /// How many sessions are held (expired ones included until swept).
    #[must_use]
    pub fn len(&self) -> usize {
        self.inner.lock().sessions.len()
    }

    /// Whether no session is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[cfg(test)]
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.lock()
    }

    fn with<T: Send + 'static>(&self, f: impl FnOnce(&mut State, u64) -> T) -> BoxFuture<T> {
        let now = self.inner.now_us();
        let mut state = self.inner.lock();
        #[cfg(test)]
        {
            state.examined = 0;
        }
        let out = f(&mut state, now);
        state.maintain(now);
        Box::pin(std::future::ready(out))
    }

    /// `f` on the fields of the live session `key` under the lock; `None` when the session is
    /// gone (nothing is written).
    fn on_fields<T: Send + 'static>(
        &self,
        key: String,
        life: Lifetimes,
        f: impl FnOnce(&mut HashMap<String, String>) -> Result<T, SessionError>,
    ) -> StoreFuture<Option<T>> {
        self.with(move |s, now| {
            s.live(&key, now, life)
                .map(|e| f(&mut e.fields))
                .transpose()
        })
    }
}

impl Default for MemorySessionStore {
    fn default() -> Self {
        Self::new()
    }
}

/// A new session under a key that is already taken: ids are 256 random bits, so this is a
/// broken random source, never a client's doing.
fn collision() -> SessionError {
    SessionError::Backend(BackendError::BadReply("session id collision".into()))
}

impl crate::sealed::Sealed for MemorySessionStore {}

impl SessionStore for MemorySessionStore {}

#[allow(private_interfaces)] // see `Store`
impl Store for MemorySessionStore {
    fn load(&self, key: &str, life: Lifetimes) -> StoreFuture<Option<Record>> {
        self.with(move |s, now| {
            Ok(s.live_marked(key, now, life).map(|(e, marked)| Record {
                fields: e
                    .fields
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                marked,
            }))
        })
    }

    fn create(&self, key: String, changes: Changes, life: Lifetimes) -> StoreFuture<u64> {
        self.with(move |s, now| {
            if s.sessions.contains_key(&key) {
                return Err(collision());
            }
            let exp = now.saturating_add(life.max_us());
            let mut fields = HashMap::new();
            fields.insert(CREATED_FIELD.to_owned(), now.to_string());
            fields.insert(SEEN_FIELD.to_owned(), now.to_string());
            fields.insert(EXP_FIELD.to_owned(), exp.to_string());
            changes.apply_to(&mut fields);
            s.insert(key.clone(), fields, exp, now, life);
            s.relife(&key, now, life).ok_or_else(|| {
                SessionError::Backend(BackendError::BadReply(
                    "created a session that had already ended".into(),
                ))
            })
        })
    }

    fn save(&self, key: &str, changes: Changes, life: Lifetimes) -> StoreFuture<Option<u64>> {
        self.with(move |s, now| {
            let Some(e) = s.live(key, now, life) else {
                return Ok(None);
            };
            changes.apply_to(&mut e.fields);
            Ok(s.relife(key, now, life))
        })
    }

    fn delete(&self, key: String) -> StoreFuture<()> {
        self.with(move |s, _| {
            s.remove(&key);
            Ok(())
        })
    }
    fn rotate(&self, old: String, new: String, life: Lifetimes) -> StoreFuture<bool> {
        self.with(move |s, now| {
            if s.live(&old, now, life).is_none() {
                return Ok(false);
            }
            if s.sessions.contains_key(&new) {
                return Err(collision());
            }
            let Some(mut entry) = s.remove(&old) else {
                return Ok(false);
            };
            entry.fields.remove(CSRF_FIELD);
            let exp = entry.exp;
            s.insert(new.clone(), entry.fields, exp, now, life);
            // The index follows the session to its new id, in the same step.
            if let Some(user) = entry.user {
                s.users.insert(user, new.clone(), exp);
                if let Some(e) = s.sessions.get_mut(&new) {
                    e.user = Some(user);
                }
            }
            Ok(true)
        })
    }

    fn index_user(
        &self,
        user: String,
        key: String,
        expires: u64,
        life: Lifetimes,
    ) -> StoreFuture<()> {
        self.with(move |s, now| {
            let cap = usize::try_from(life.per_user.max(1)).unwrap_or(usize::MAX);
            s.index(user_digest(&user), &key, expires, cap, now);
            Ok(())
        })
    }

    fn end_user(&self, user: String) -> StoreFuture<usize> {
        self.with(move |s, _| {
            let index = s.users.take(&user_digest(&user));
            for key in index.keys() {
                s.remove(key);
            }
            Ok(index.len())
        })
    }

    fn list_user(&self, user: String) -> StoreFuture<Vec<SessionInfo>> {
        self.with(move |s, now| Ok(s.listing(&user_digest(&user), now)))
    }

    fn end_session(&self, user: String, handle: String) -> StoreFuture<bool> {
        self.with(move |s, now| {
            let found = s
                .listing(&user_digest(&user), now)
                .into_iter()
                .find(|info| info.handle == handle);
            Ok(found.is_some_and(|info| s.remove(&info.storage_key).is_some()))
        })
    }

    fn end_user_except(&self, user: String, keep: String) -> StoreFuture<usize> {
        self.with(move |s, now| {
            let mut ended = 0;
            for info in s.listing(&user_digest(&user), now) {
                if info.storage_key != keep && s.remove(&info.storage_key).is_some() {
                    ended += 1;
                }
            }
            Ok(ended)
        })
    }

    fn change_field(
        &self,
        key: String,
        field: String,
        change: FieldChange,
        life: Lifetimes,
    ) -> StoreFuture<Option<FieldOutcome>> {
        self.on_fields(key, life, move |fields| change.apply(fields, field))
    }
}

impl State {
    /// The live sessions in `user`'s index with their metadata, soonest expiry first.
    fn listing(&self, user: &UserDigest, now: u64) -> Vec<SessionInfo> {
        let mut out: Vec<SessionInfo> = self
            .users
            .get(user)
            .into_iter()
            .flatten()
            .filter(|(k, exp)| now < **exp && self.is_live(k, now))
            .filter_map(|(k, _)| {
                let entry = self.sessions.get(&k.clone())?;
                SessionInfo::from_fields(k.clone(), |f| entry.fields.get(f).cloned(), now)
            })
            .collect();
        out.sort_by(|a, b| (a.expires_in, &a.storage_key).cmp(&(b.expires_in, &b.storage_key)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ManualClock;
    use crate::backend::ready;
    use std::time::Duration;

    fn user_changes(user: &str) -> Changes {
        let mut c = Changes::default();
        c.set
            .insert(super::super::store::USER_FIELD.to_owned(), user.to_owned());
        c
    }

    /// Filling the store far past its bound costs bounded work per insert, the
    /// table never exceeds the bound, and the user index holds no evicted session.
    #[test]
    fn eviction_is_bounded_work_and_prunes_the_user_index() {
        let clock = ManualClock::new();
        let store = MemorySessionStore::builder()
            .clock(clock.clone())
            .capacity(100)
            .build();
        let life = Lifetimes::default();
        let mut most = 0;
        for i in 0..1000 {
            clock.advance(Duration::from_millis(1));
            let key = format!("{i:064x}");
            let user = format!("user{}", i % 7);
            let exp = ready(store.create(key.clone(), user_changes(&user), life)).unwrap();
            most = most.max(store.lock().examined);
            ready(store.index_user(user, key, exp, life)).unwrap();
            most = most.max(store.lock().examined);
            assert!(store.len() <= 100, "{} sessions", store.len());
        }
        assert!(most <= 2 + 64, "an insert examined {most} entries");
        let mut indexed = 0;
        for u in 0..7 {
            for info in ready(store.list_user(format!("user{u}"))).unwrap() {
                indexed += 1;
                assert!(
                    ready(store.load(&info.storage_key, life))
                        .unwrap()
                        .is_some(),
                    "the index lists an evicted session"
                );
            }
        }
        assert_eq!(indexed, 100);
        assert_eq!(
            store.lock().users.entries(),
            100,
            "no dead entries in the user index"
        );
    }

    /// Mass expiry is swept a few sessions per operation, not all under one lock.
    #[test]
    fn expired_sessions_are_swept_in_small_batches() {
        let clock = ManualClock::new();
        let store = MemorySessionStore::builder().clock(clock.clone()).build();
        let life = Lifetimes::default();
        for i in 0..500 {
            ready(store.create(format!("{i:064x}"), Changes::default(), life)).unwrap();
        }
        clock.advance(life.max);
        let mut ops = 0;
        while !store.is_empty() {
            ready(store.load("absent", life)).unwrap();
            assert!(store.lock().examined <= crate::backend::SWEEP_PER_OP);
            ops += 1;
        }
        assert_eq!(ops, 500 / crate::backend::SWEEP_PER_OP + 1);
    }
}
