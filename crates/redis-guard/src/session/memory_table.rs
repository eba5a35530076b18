//! The memory store's storage: sessions in an expiry-ordered table, each with its place in the
//! per-user index.

use std::collections::HashMap;

use super::memory_users::{UserDigest, UserIndex};
use super::store::{
    CREATED_FIELD, EXP_FIELD, IDLE_FIELD, Lifetimes, MAX_FIELD, SEEN_FIELD, USER_FIELD,
};
use crate::backend::ExpiringTable;

/// Everything a [`MemorySessionStore`](super::MemorySessionStore) holds, behind its lock.
#[derive(Debug)]
pub(crate) struct State {
    /// Sessions by storage key, each until the sooner of its idle and absolute expiry. Those
    /// that have had a user are kept: past the bound, sessions that never had one go first,
    /// so a flood of anonymous sessions (cookie-less requests that store something) cannot
    /// push logged-in users out.
    pub(crate) sessions: ExpiringTable<String, Entry>,
    /// Holds only sessions in `sessions`: every removal goes through [`State::remove`] or
    /// [`State::maintain`].
    pub(crate) users: UserIndex,
    /// Entries looked at by the last operation's maintenance and indexing (a test probe for
    /// the bounded-work promise).
    #[cfg(test)]
    pub(crate) examined: usize,
}

#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) fields: HashMap<String, String>,
    pub(crate) exp: u64,
    /// The user index holding this session, if any.
    pub(crate) user: Option<UserDigest>,
}

impl Entry {
    /// A metadata field as a number.
    fn number(&self, field: &str) -> Option<u64> {
        self.fields.get(field).and_then(|v| v.parse().ok())
    }

    /// When the session ends if unused from `now`: the sooner of its absolute expiry and its
    /// idle timeout (its own, else the layer's).
    fn deadline(&self, now: u64, life: Lifetimes) -> u64 {
        let idle = self.number(IDLE_FIELD).unwrap_or_else(|| life.idle_us());
        self.exp.min(now.saturating_add(idle))
    }
}

impl State {
    pub(crate) fn new(max_sessions: usize) -> Self {
        Self {
            sessions: ExpiringTable::new(max_sessions),
            users: UserIndex::default(),
            #[cfg(test)]
            examined: 0,
        }
    }

    pub(crate) fn examine(&mut self, n: usize) {
        #[cfg(test)]
        {
            self.examined += n;
        }
        let _ = n;
    }

    /// Stores a session (not in any user's index), live until the sooner of `exp` and its idle
    /// timeout; kept past the bound if it has a user.
    pub(crate) fn insert(
        &mut self,
        key: String,
        fields: HashMap<String, String>,
        exp: u64,
        now: u64,
        life: Lifetimes,
    ) {
        let kept = fields.contains_key(USER_FIELD);
        let entry = Entry {
            fields,
            exp,
            user: None,
        };
        let deadline = entry.deadline(now, life);
        self.remove(&key);
        if kept {
            self.sessions.insert(key.clone(), entry, deadline);
            self.sessions.keep(&key);
        } else {
            self.sessions.insert(key, entry, deadline);
        }
    }

    /// Removes a session with its place in its user's index.
    pub(crate) fn remove(&mut self, key: &str) -> Option<Entry> {
        let key = key.to_owned();
        let entry = self.sessions.remove(&key)?;
        if let Some(user) = entry.user {
            self.users.unindex(user, &key);
        }
        Some(entry)
    }

    /// Whether the session under `key` is live at `now`, without marking it used.
    pub(crate) fn is_live(&self, key: &str, now: u64) -> bool {
        self.sessions.is_live(&key.to_owned(), now)
    }

    /// The live entry under `key`, after marking it used (its idle timeout restarts); an
    /// expired one is removed. The use is recorded in its fields (last seen) only when the last
    /// one recorded is no longer fresh, as in Redis.
    pub(crate) fn live(&mut self, key: &str, now: u64, life: Lifetimes) -> Option<&mut Entry> {
        self.live_marked(key, now, life).map(|(entry, _)| entry)
    }

    /// [`live`](Self::live), and whether it marked the use in the fields.
    pub(crate) fn live_marked(
        &mut self,
        key: &str,
        now: u64,
        life: Lifetimes,
    ) -> Option<(&mut Entry, bool)> {
        let key = key.to_owned();
        let deadline = self.sessions.deadline(&key)?;
        if now >= deadline {
            self.remove(&key);
            return None;
        }
        let entry = self.sessions.get_mut(&key)?;
        let deadline = entry.deadline(now, life);
        let seen = entry.number(SEEN_FIELD).unwrap_or(0);
        let marked = now.saturating_sub(seen) >= life.fresh_us();
        if marked {
            entry.fields.insert(SEEN_FIELD.to_owned(), now.to_string());
        }
        self.sessions.set_deadline(&key, deadline);
        self.sessions.get_mut(&key).map(|entry| (entry, marked))
    }

    /// After a write to the live session `key` that may have set its own lifetimes: its absolute
    /// expiry and deadline follow them. Returns the absolute expiry, or `None` when the new
    /// lifetime has already passed (the session is removed).
    pub(crate) fn relife(&mut self, key: &str, now: u64, life: Lifetimes) -> Option<u64> {
        let key = key.to_owned();
        let entry = self.sessions.get_mut(&key)?;
        if let (Some(created), Some(max)) = (entry.number(CREATED_FIELD), entry.number(MAX_FIELD)) {
            entry.exp = created.saturating_add(max);
            entry
                .fields
                .insert(EXP_FIELD.to_owned(), entry.exp.to_string());
        }
        let (exp, deadline) = (entry.exp, entry.deadline(now, life));
        if now >= exp {
            self.remove(&key);
            return None;
        }
        self.sessions.set_deadline(&key, deadline);
        Some(exp)
    }

    /// Puts the live session `key` in `user`'s index (leaving any other user's), then ends the
    /// sessions the index drops: gone ones, and past `cap` those closest to expiry.
    pub(crate) fn index(
        &mut self,
        user: UserDigest,
        key: &str,
        expires: u64,
        cap: usize,
        now: u64,
    ) {
        if !self.is_live(key, now) {
            return;
        }
        let previous = self
            .sessions
            .get_mut(&key.to_owned())
            .and_then(|e| e.user.replace(user));
        if let Some(previous) = previous.filter(|p| *p != user) {
            self.users.unindex(previous, key);
        }
        self.sessions.keep(&key.to_owned());
        let sessions = &self.sessions;
        let (popped, examined) = self.users.admit(user, key, expires, cap, |k| {
            sessions.is_live(&k.to_owned(), now)
        });
        self.examine(examined);
        for k in popped {
            self.remove(&k);
        }
    }

    /// Sweeps a few expired sessions and evicts past the bound, pruning the user index.
    pub(crate) fn maintain(&mut self, now: u64) {
        let users = &mut self.users;
        let n = self.sessions.maintain(now, |key, entry| {
            if let Some(user) = entry.user {
                users.unindex(user, &key);
            }
        });
        self.examine(n);
    }
}
