//! Sessions in this process, with the Redis store's semantics.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::SessionError;
use super::store::{BoxFuture, Changes, EXP_FIELD, Lifetimes, Record, SessionInfo, SessionStore};
use crate::backend::{Clock, ExpiringTable, InProcess};

/// Default bound on the number of sessions a [`MemorySessionStore`] holds.
pub const DEFAULT_MAX_SESSIONS: usize = 100_000;

/// Sessions in this process: for development, tests and single-instance deployments. Same
/// semantics as [`RedisSessionStore`](super::RedisSessionStore) (per-field writes, idle and
/// absolute expiry, no resurrection, per-user index), on a [`Clock`] tests can drive.
///
/// Bounded: sessions sit in an expiry-ordered table; expired ones are swept out a few at a time
/// as the store is used, and past [`max_sessions`](MemorySessionStoreBuilder::max_sessions) the
/// sessions closest to expiry (the least recently used, for one idle timeout) are ended. No
/// operation scans the table: each costs O(log n) plus O(per-user cap) when it indexes a user.
/// The per-user index is keyed by the SHA-256 of the user id and loses its entries when their
/// sessions end. Clones share state.
///
/// ```
/// use redis_guard::session::MemorySessionStore;
/// let store = MemorySessionStore::new();
/// let small = MemorySessionStore::builder().max_sessions(1_000).build();
/// # let _ = (store, small);
/// ```
#[derive(Clone, Debug)]
pub struct MemorySessionStore {
    inner: Arc<InProcess<State>>,
}

/// Builds a [`MemorySessionStore`]: its bound and, for tests, its clock.
#[derive(Debug)]
#[must_use]
pub struct MemorySessionStoreBuilder {
    max_sessions: usize,
    clock: Option<Box<dyn Clock>>,
}

impl MemorySessionStoreBuilder {
    /// Bounds the number of sessions (default [`DEFAULT_MAX_SESSIONS`], at least 1).
    pub fn max_sessions(mut self, max: usize) -> Self {
        self.max_sessions = max;
        self
    }

    /// Reads time from `clock` instead of the monotonic clock, e.g. a
    /// `ManualClock` (feature `test-util`) in tests.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Box::new(clock));
        self
    }

    /// The store.
    pub fn build(self) -> MemorySessionStore {
        MemorySessionStore {
            inner: Arc::new(InProcess::new(
                State {
                    sessions: ExpiringTable::new(self.max_sessions),
                    users: HashMap::new(),
                    #[cfg(test)]
                    examined: 0,
                },
                self.clock,
            )),
        }
    }
}

#[derive(Debug)]
struct State {
    /// Sessions by storage key, each until the sooner of its idle and absolute expiry.
    sessions: ExpiringTable<String, Entry>,
    /// Per user (SHA-256 of the user id, never the raw id): storage key → absolute expiry.
    /// Holds only sessions in `sessions`: every removal goes through [`State::remove`] or
    /// [`ExpiringTable::maintain`] with [`unindex`].
    users: HashMap<[u8; 32], HashMap<String, u64>>,
    /// Entries looked at by the last operation's maintenance and indexing (a test probe for
    /// the bounded-work promise).
    #[cfg(test)]
    examined: usize,
}

#[derive(Debug)]
struct Entry {
    fields: HashMap<String, String>,
    exp: u64,
    /// The user index holding this session, if any.
    user: Option<[u8; 32]>,
}

fn user_digest(user: &str) -> [u8; 32] {
    Sha256::digest(user.as_bytes()).into()
}

fn unindex(users: &mut HashMap<[u8; 32], HashMap<String, u64>>, user: [u8; 32], key: &str) {
    if let Some(index) = users.get_mut(&user) {
        index.remove(key);
        if index.is_empty() {
            users.remove(&user);
        }
    }
}

impl MemorySessionStore {
    /// A store on the real monotonic clock, bounded by [`DEFAULT_MAX_SESSIONS`].
    #[must_use]
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder, to set the bound or the clock.
    pub fn builder() -> MemorySessionStoreBuilder {
        MemorySessionStoreBuilder {
            max_sessions: DEFAULT_MAX_SESSIONS,
            clock: None,
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
}

impl Default for MemorySessionStore {
    fn default() -> Self {
        Self::new()
    }
}

impl State {
    fn examine(&mut self, n: usize) {
        #[cfg(test)]
        {
            self.examined += n;
        }
        let _ = n;
    }

    fn insert(&mut self, key: String, fields: HashMap<String, String>, exp: u64, deadline: u64) {
        let entry = Entry {
            fields,
            exp,
            user: None,
        };
        self.remove(&key);
        self.sessions.insert(key, entry, deadline);
    }

    /// Removes a session with its place in its user's index.
    fn remove(&mut self, key: &str) -> Option<Entry> {
        let key = key.to_owned();
        let entry = self.sessions.remove(&key)?;
        if let Some(user) = entry.user {
            unindex(&mut self.users, user, &key);
        }
        Some(entry)
    }

    /// Whether the session under `key` is live at `now`, without marking it used.
    fn is_live(&self, key: &str, now: u64) -> bool {
        self.sessions.is_live(&key.to_owned(), now)
    }

    /// The live entry under `key`, after marking it used; an expired one is removed.
    fn live(&mut self, key: &str, now: u64, life: Lifetimes) -> Option<&mut Entry> {
        let key = key.to_owned();
        let deadline = self.sessions.deadline(&key)?;
        if now >= deadline {
            self.remove(&key);
            return None;
        }
        let exp = self.sessions.get_mut(&key)?.exp;
        self.sessions
            .set_deadline(&key, exp.min(now.saturating_add(life.idle_us())));
        self.sessions.get_mut(&key)
    }

    /// Sweeps a few expired sessions and evicts past the bound, pruning the user index.
    fn maintain(&mut self, now: u64) {
        let users = &mut self.users;
        let n = self.sessions.maintain(now, |key, entry| {
            if let Some(user) = entry.user {
                unindex(users, user, &key);
            }
        });
        self.examine(n);
    }
}

impl crate::sealed::Sealed for MemorySessionStore {}

impl SessionStore for MemorySessionStore {
    fn load(
        &self,
        key: String,
        life: Lifetimes,
    ) -> BoxFuture<Result<Option<Record>, SessionError>> {
        self.with(move |s, now| {
            Ok(s.live(&key, now, life).map(|e| Record {
                fields: e.fields.clone(),
            }))
        })
    }

    fn create(
        &self,
        key: String,
        changes: Changes,
        life: Lifetimes,
    ) -> BoxFuture<Result<u64, SessionError>> {
        self.with(move |s, now| {
            if s.sessions.contains_key(&key) {
                return Err(SessionError::Backend(
                    crate::backend::BackendError::BadReply("session id collision".into()),
                ));
            }
            let exp = now.saturating_add(life.max_us());
            let mut fields = HashMap::new();
            fields.insert("$created".to_owned(), now.to_string());
            fields.insert(EXP_FIELD.to_owned(), exp.to_string());
            fields.insert("$v".to_owned(), "1".to_owned());
            changes.apply_to(&mut fields);
            s.insert(
                key,
                fields,
                exp,
                exp.min(now.saturating_add(life.idle_us())),
            );
            Ok(exp)
        })
    }

    fn save(
        &self,
        key: String,
        changes: Changes,
        life: Lifetimes,
    ) -> BoxFuture<Result<Option<u64>, SessionError>> {
        self.with(move |s, now| {
            Ok(s.live(&key, now, life).map(|e| {
                changes.apply_to(&mut e.fields);
                e.exp
            }))
        })
    }

    fn increment(
        &self,
        key: String,
        field: String,
        by: i64,
        life: Lifetimes,
    ) -> BoxFuture<Result<Option<i64>, SessionError>> {
        self.with(move |s, now| {
            let Some(e) = s.live(&key, now, life) else {
                return Ok(None);
            };
            let current = match e.fields.get(&field) {
                None => 0,
                Some(v) => v
                    .parse::<i64>()
                    .map_err(|_| SessionError::NotAnInteger(field.clone()))?,
            };
            let next = current
                .checked_add(by)
                .ok_or_else(|| SessionError::NotAnInteger(field.clone()))?;
            e.fields.insert(field, next.to_string());
            Ok(Some(next))
        })
    }

    fn delete(&self, key: String) -> BoxFuture<Result<(), SessionError>> {
        self.with(move |s, _| {
            s.remove(&key);
            Ok(())
        })
    }

    fn rotate(
        &self,
        old: String,
        new: String,
        life: Lifetimes,
    ) -> BoxFuture<Result<bool, SessionError>> {
        self.with(move |s, now| {
            if s.live(&old, now, life).is_none() {
                return Ok(false);
            }
            if s.sessions.contains_key(&new) {
                return Err(SessionError::Backend(
                    crate::backend::BackendError::BadReply("session id collision".into()),
                ));
            }
            let Some(entry) = s.remove(&old) else {
                return Ok(false);
            };
            let exp = entry.exp;
            s.insert(
                new.clone(),
                entry.fields,
                exp,
                exp.min(now.saturating_add(life.idle_us())),
            );
            // The index follows the session to its new id, in the same step.
            if let Some(user) = entry.user {
                s.users.entry(user).or_default().insert(new.clone(), exp);
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
    ) -> BoxFuture<Result<(), SessionError>> {
        self.with(move |s, now| {
            let digest = user_digest(&user);
            if !s.is_live(&key, now) {
                return Ok(());
            }
            let previous = s
                .sessions
                .get_mut(&key)
                .and_then(|e| e.user.replace(digest));
            if let Some(previous) = previous.filter(|p| *p != digest) {
                unindex(&mut s.users, previous, &key);
            }
            let mut index = s.users.remove(&digest).unwrap_or_default();
            index.insert(key.clone(), expires);
            // Entries of sessions that have expired but not yet been swept do not count.
            let dead: Vec<String> = index
                .keys()
                .filter(|k| !s.is_live(k, now))
                .cloned()
                .collect();
            s.examine(index.len());
            let cap = usize::try_from(life.per_user.max(1)).unwrap_or(usize::MAX);
            let mut popped = dead;
            for k in &popped {
                index.remove(k);
            }
            while index.len() > cap {
                let Some(oldest) = index
                    .iter()
                    .filter(|(k, _)| **k != key)
                    .min_by_key(|(k, exp)| (**exp, (*k).clone()))
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                index.remove(&oldest);
                popped.push(oldest);
            }
            s.users.insert(digest, index);
            for k in popped {
                s.remove(&k);
            }
            Ok(())
        })
    }

    fn revoke_user(&self, user: String) -> BoxFuture<Result<usize, SessionError>> {
        self.with(move |s, _| {
            let index = s.users.remove(&user_digest(&user)).unwrap_or_default();
            for key in index.keys() {
                s.remove(key);
            }
            Ok(index.len())
        })
    }

    fn user_sessions(&self, user: String) -> BoxFuture<Result<Vec<SessionInfo>, SessionError>> {
        self.with(move |s, now| {
            let mut out: Vec<SessionInfo> = s
                .users
                .get(&user_digest(&user))
                .into_iter()
                .flatten()
                .filter(|(k, exp)| now < **exp && s.is_live(k, now))
                .map(|(k, exp)| SessionInfo {
                    storage_key: k.clone(),
                    expires_in: Duration::from_micros(exp - now),
                })
                .collect();
            out.sort_by_key(|i| (i.expires_in, i.storage_key.clone()));
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ManualClock;

    fn block<T>(f: BoxFuture<T>) -> T {
        futures_util::FutureExt::now_or_never(f).expect("the memory store never waits")
    }

    fn user_changes(user: &str) -> Changes {
        let mut c = Changes::default();
        c.set
            .insert(super::super::store::USER_FIELD.to_owned(), user.to_owned());
        c
    }

    /// Issue 7, item 11: filling the store far past its bound costs bounded work per insert, the
    /// table never exceeds the bound, and the user index holds no evicted session.
    #[test]
    fn eviction_is_bounded_work_and_prunes_the_user_index() {
        let clock = ManualClock::new();
        let store = MemorySessionStore::builder()
            .clock(clock.clone())
            .max_sessions(100)
            .build();
        let life = Lifetimes::default();
        let mut most = 0;
        for i in 0..1000 {
            clock.advance(Duration::from_millis(1));
            let key = format!("{i:064x}");
            let user = format!("user{}", i % 7);
            let exp = block(store.create(key.clone(), user_changes(&user), life)).unwrap();
            most = most.max(store.lock().examined);
            block(store.index_user(user, key, exp, life)).unwrap();
            most = most.max(store.lock().examined);
            assert!(store.len() <= 100, "{} sessions", store.len());
        }
        assert!(most <= 2 + 64, "an insert examined {most} entries");
        let mut indexed = 0;
        for u in 0..7 {
            for info in block(store.user_sessions(format!("user{u}"))).unwrap() {
                indexed += 1;
                assert!(
                    block(store.load(info.storage_key, life)).unwrap().is_some(),
                    "the index lists an evicted session"
                );
            }
        }
        assert_eq!(indexed, 100);
        let state = store.lock();
        let entries: usize = state.users.values().map(HashMap::len).sum();
        assert_eq!(entries, 100, "no dead entries in the user index");
    }

    /// Mass expiry is swept a few sessions per operation, not all under one lock.
    #[test]
    fn expired_sessions_are_swept_in_small_batches() {
        let clock = ManualClock::new();
        let store = MemorySessionStore::builder().clock(clock.clone()).build();
        let life = Lifetimes::default();
        for i in 0..500 {
            block(store.create(format!("{i:064x}"), Changes::default(), life)).unwrap();
        }
        clock.advance(life.max);
        let mut ops = 0;
        while !store.is_empty() {
            block(store.load("absent".to_owned(), life)).unwrap();
            assert!(store.lock().examined <= crate::backend::SWEEP_PER_OP);
            ops += 1;
        }
        assert_eq!(ops, 500 / crate::backend::SWEEP_PER_OP + 1);
    }
}
