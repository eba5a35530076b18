//! [`PreHashed`]: maps keyed by a value that is a keyed hash already.

use std::hash::{BuildHasherDefault, Hasher};

/// The `BuildHasher` of a map whose `u64` keys are already a keyed (seeded) hash of what they
/// name: the key is its own hash, nothing is hashed twice.
pub(crate) type PreHashed = BuildHasherDefault<Identity>;

/// See [`PreHashed`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Never called for a `u64` key; every byte counts all the same.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}
