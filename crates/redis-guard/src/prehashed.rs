//! [`KeyedHash`], the keyed hash of what clients choose (keys, URIs), and [`PreHashed`]: maps
//! keyed by a value that is such a hash already.

use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::OnceLock;

use foldhash::SharedSeed;
use foldhash::quality::FoldHasher;

/// foldhash, keyed from the OS's random source (through the standard library's `RandomState`):
/// a seed of its own and one shared by the process, so clients cannot choose inputs that
/// collide.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyedHash {
    seed: u64,
    shared: &'static SharedSeed,
}

impl Default for KeyedHash {
    fn default() -> Self {
        static SHARED: OnceLock<SharedSeed> = OnceLock::new();
        let random = || RandomState::new().hash_one(0_u64);
        let shared = SHARED.get_or_init(|| SharedSeed::from_u64(random()));
        Self {
            seed: random(),
            shared,
        }
    }
}

impl BuildHasher for KeyedHash {
    type Hasher = FoldHasher<'static>;

    fn build_hasher(&self) -> FoldHasher<'static> {
        FoldHasher::with_seed(self.seed, self.shared)
    }
}

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
