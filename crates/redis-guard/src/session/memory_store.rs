//! Sessions in this process, with the Redis store's semantics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::SessionError;
use super::store::{BoxFuture, Changes, EXP_FIELD, Lifetimes, Record, SessionInfo, SessionStore};
use crate::backend::{Clock, MonotonicClock};

/// Default bound on the number of sessions a [`MemorySessionStore`] holds.
pub const DEFAULT_MAX_SESSIONS: usize = 100_000;

/// Sessions in this process: for development, tests and single-instance deployments. Same
/// semantics as [`RedisSessionStore`](super::RedisSessionStore) (per-field writes, idle and
/// absolute expiry, no resurrection, per-user index), on a [`Clock`] tests can drive.
///
/// Bounded: expired sessions are swept out as the store is used, and past
/// [`max_sessions`](Self::max_sessions) the least recently used sessions are ended.
#[derive(Clone, Debug)]
pub struct MemorySessionStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    clock: Box<dyn Clock>,
    max_sessions: AtomicUsize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    sessions: HashMap<String, Entry>,
    users: HashMap<String, HashMap<String, u64>>,
    ops_since_sweep: usize,
}

#[derive(Debug)]
struct Entry {
    fields: HashMap<String, String>,
    exp: u64,
    seen: u64,
}

impl MemorySessionStore {
    /// A store on the real monotonic clock.
    #[must_use]
    pub fn new() -> Self {
        Self::with_clock(MonotonicClock::new())
    }

    /// A store on `clock`, e.g. a [`ManualClock`](crate::backend::ManualClock) in tests.
    #[must_use]
    pub fn with_clock(clock: impl Clock) -> Self {
        Self {
            inner: Arc::new(Inner {
                clock: Box::new(clock),
                max_sessions: AtomicUsize::new(DEFAULT_MAX_SESSIONS),
                state: Mutex::default(),
            }),
        }
    }

    /// Bounds the number of sessions (default [`DEFAULT_MAX_SESSIONS`], at least 1). Clones
    /// share the bound.
    #[must_use]
    pub fn max_sessions(self, max: usize) -> Self {
        self.inner.max_sessions.store(max.max(1), Ordering::Relaxed);
        self
    }

    /// How many sessions are held (expired ones included until swept).
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().sessions.len()
    }

    /// Whether no session is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn now(&self) -> u64 {
        u64::try_from(self.inner.clock.now().as_micros()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn with<T: Send + 'static>(&self, f: impl FnOnce(&mut State, u64) -> T) -> BoxFuture<T> {
        let now = self.now();
        let mut state = self.lock();
        let out = f(&mut state, now);
        state.maintain(now, self.inner.max_sessions.load(Ordering::Relaxed));
        Box::pin(std::future::ready(out))
    }
}

impl Default for MemorySessionStore {
    fn default() -> Self {
        Self::new()
    }
}

impl State {
    /// The live entry under `key`, after marking it used; an expired one is removed.
    fn live(&mut self, key: &str, now: u64, life: Lifetimes) -> Option<&mut Entry> {
        let expired = match self.sessions.get(key) {
            None => return None,
            Some(e) => now >= e.exp || now.saturating_sub(e.seen) >= life.idle_us(),
        };
        if expired {
            self.sessions.remove(key);
            return None;
        }
        let entry = self.sessions.get_mut(key)?;
        entry.seen = now;
        Some(entry)
    }

    fn maintain(&mut self, now: u64, max: usize) {
        self.ops_since_sweep += 1;
        if self.sessions.len() > max || self.ops_since_sweep >= self.sessions.len().max(1024) {
            self.sessions.retain(|_, e| now < e.exp);
            for index in self.users.values_mut() {
                index.retain(|_, exp| now < *exp);
            }
            self.users.retain(|_, index| !index.is_empty());
            self.ops_since_sweep = 0;
        }
        if self.sessions.len() > max {
            let mut seen: Vec<u64> = self.sessions.values().map(|e| e.seen).collect();
            let cut = self.sessions.len() - max;
            let (_, cutoff, _) = seen.select_nth_unstable(cut - 1);
            let cutoff = *cutoff;
            let mut removed = 0;
            self.sessions.retain(|_, e| {
                let drop_it = removed < cut && e.seen <= cutoff;
                removed += usize::from(drop_it);
                !drop_it
            });
        }
    }
}

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
                return Err(SessionError::BadReply("session id collision".into()));
            }
            let exp = now.saturating_add(life.max_us());
            let mut fields = HashMap::new();
            fields.insert("$created".to_owned(), now.to_string());
            fields.insert(EXP_FIELD.to_owned(), exp.to_string());
            fields.insert("$v".to_owned(), "1".to_owned());
            changes.apply_to(&mut fields);
            s.sessions.insert(
                key,
                Entry {
                    fields,
                    exp,
                    seen: now,
                },
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
            s.sessions.remove(&key);
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
            let Some(entry) = s.sessions.remove(&old) else {
                return Ok(false);
            };
            if s.sessions.contains_key(&new) {
                return Err(SessionError::BadReply("session id collision".into()));
            }
            s.sessions.insert(new, entry);
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
            let index = s.users.entry(user).or_default();
            index.retain(|_, exp| now < *exp);
            index.insert(key, expires);
            let cap = usize::try_from(life.per_user.max(1)).unwrap_or(usize::MAX);
            let mut popped = Vec::new();
            while index.len() > cap {
                let Some(oldest) = index
                    .iter()
                    .min_by_key(|(k, exp)| (**exp, (*k).clone()))
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                index.remove(&oldest);
                popped.push(oldest);
            }
            for key in popped {
                s.sessions.remove(&key);
            }
            Ok(())
        })
    }

    fn revoke_user(&self, user: String) -> BoxFuture<Result<usize, SessionError>> {
        self.with(move |s, _| {
            let index = s.users.remove(&user).unwrap_or_default();
            for key in index.keys() {
                s.sessions.remove(key);
            }
            Ok(index.len())
        })
    }

    fn user_sessions(&self, user: String) -> BoxFuture<Result<Vec<SessionInfo>, SessionError>> {
        self.with(move |s, now| {
            let mut out: Vec<SessionInfo> = s
                .users
                .get(&user)
                .into_iter()
                .flatten()
                .filter(|(_, exp)| now < **exp)
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
