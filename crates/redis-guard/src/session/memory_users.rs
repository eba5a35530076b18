//! The memory store's per-user index: which sessions each user holds, keyed by the SHA-256 of
//! the user id (never the raw id).

use std::collections::HashMap;

use sha2::{Digest, Sha256};

/// The SHA-256 of a user id: what the index is keyed by.
pub(crate) type UserDigest = [u8; 32];

pub(crate) fn user_digest(user: &str) -> UserDigest {
    Sha256::digest(user.as_bytes()).into()
}

/// Per user: storage key → absolute expiry (store time, µs).
#[derive(Debug, Default)]
pub(crate) struct UserIndex {
    users: HashMap<UserDigest, HashMap<String, u64>>,
}

impl UserIndex {
    /// `user`'s entries.
    pub(crate) fn get(&self, user: &UserDigest) -> Option<&HashMap<String, u64>> {
        self.users.get(user)
    }

    /// Records `key` (expiring at `exp`) under `user`.
    pub(crate) fn insert(&mut self, user: UserDigest, key: String, exp: u64) {
        self.users.entry(user).or_default().insert(key, exp);
    }

    /// Takes `user`'s entries out of the index.
    pub(crate) fn take(&mut self, user: &UserDigest) -> HashMap<String, u64> {
        self.users.remove(user).unwrap_or_default()
    }

    /// Drops `key` from `user`'s entries, and the user once they have none.
    pub(crate) fn unindex(&mut self, user: UserDigest, key: &str) {
        if let Some(index) = self.users.get_mut(&user) {
            index.remove(key);
            if index.is_empty() {
                self.users.remove(&user);
            }
        }
    }

    /// Records `key` under `user`, then drops the entries whose session is gone (`is_live`
    /// says no) and, past `cap`, those closest to their absolute expiry, never `key` itself.
    /// Returns the keys dropped (their sessions must end) and how many entries were examined.
    pub(crate) fn admit(
        &mut self,
        user: UserDigest,
        key: &str,
        expires: u64,
        cap: usize,
        is_live: impl Fn(&str) -> bool,
    ) -> (Vec<String>, usize) {
        let mut index = self.take(&user);
        index.insert(key.to_owned(), expires);
        // Entries of sessions that have expired but not yet been swept do not count.
        let mut popped: Vec<String> = index.keys().filter(|k| !is_live(k)).cloned().collect();
        let examined = index.len();
        for k in &popped {
            index.remove(k);
        }
        while index.len() > cap {
            let Some(oldest) = index
                .iter()
                .filter(|(k, _)| *k != key)
                .min_by_key(|(k, exp)| (**exp, (*k).clone()))
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            index.remove(&oldest);
            popped.push(oldest);
        }
        self.users.insert(user, index);
        (popped, examined)
    }

    /// How many entries the index holds, over all users.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        self.users.values().map(HashMap::len).sum()
    }
}
