//! The digests of the keys a limiter saw last: a busy client's key is hashed with SHA-256 once,
//! not on every request.
//!
//! Key names carry a digest of the client's key ([`Key::digest`]), so that what a client sends
//! never shapes a Redis key. SHA-256 is the largest part of naming a key. A direct-mapped table
//! keeps the digests of recent keys, each slot behind its own lock (requests of different
//! clients rarely wait for each other), its index a [`KeyedHash`] of the key (clients cannot aim
//! their keys at one slot). A key found in its slot is compared in full before its digest is
//! used; a miss, or a key longer than [`LONGEST`], is hashed.

use std::hash::{BuildHasher, Hasher};
use std::sync::{Mutex, PoisonError};

use crate::prehashed::KeyedHash;
use crate::rate_limit::Key;

const SLOTS: usize = 1024;

/// The longest key kept (a client IP, a user id, an API key fit).
const LONGEST: usize = 64;

/// A slot: a key and its digest, or none yet.
type Slot = Mutex<Option<(Box<[u8]>, String)>>;

/// Recent keys and their digests.
pub(super) struct Digests {
    /// The keyed hash of the slots' index.
    hash: KeyedHash,
    slots: Box<[Slot]>,
}

impl Digests {
    pub(super) fn new() -> Self {
        Self {
            hash: KeyedHash::default(),
            slots: (0..SLOTS).map(|_| Mutex::new(None)).collect(),
        }
    }

    /// `f` of `key`'s digest ([`Key::digest`]), from the table when `key` is in it.
    pub(super) fn with<R>(&self, key: &Key, f: impl FnOnce(&str) -> R) -> R {
        let bytes = key.as_bytes();
        if bytes.len() > LONGEST {
            return f(&key.digest());
        }
        // The low bits of a keyed 64-bit hash: uniform over the slots.
        #[allow(clippy::cast_possible_truncation)]
        let index = {
            let mut h = self.hash.build_hasher();
            h.write(bytes);
            h.finish() as usize % SLOTS
        };
        let mut slot = self.slots[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((kept, digest)) = &*slot
            && **kept == *bytes
        {
            return f(digest);
        }
        let digest = key.digest();
        let out = f(&digest);
        *slot = Some((bytes.into(), digest));
        out
    }
}

impl std::fmt::Debug for Digests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Digests").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_digest_is_the_keys_own() {
        let digests = Digests::new();
        let keys: Vec<Key> = (0..3000)
            .map(|i| Key::from(format!("client-{i}")))
            .collect();
        // Twice over more keys than slots: hits, misses and evictions, every answer exact.
        for _ in 0..2 {
            for key in &keys {
                assert_eq!(digests.with(key, str::to_owned), key.digest());
            }
        }
        let long = Key::from("x".repeat(LONGEST + 1));
        assert_eq!(digests.with(&long, str::to_owned), long.digest());
    }
}
