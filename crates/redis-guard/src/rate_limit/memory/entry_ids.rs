//! The memory limiter's entry ids: what names a rule's state for a key in its table.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use crate::rate_limit::{Key, Rule};

/// Hashes an [`EntryId`] into the table by taking its first word as it is: it is a keyed hash
/// already, so a second SipHash pass per lookup buys nothing.
pub(super) type Ids = BuildHasherDefault<IdHasher>;

/// See [`Ids`].
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // An id's words arrive as one slice of 16 bytes; whatever the split, every byte counts.
        for chunk in bytes.chunks(8) {
            let mut word = [0; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(5) ^ u64::from_ne_bytes(word);
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = self.0.rotate_left(5) ^ word;
    }

    fn write_usize(&mut self, _: usize) {
        // The length prefix of the id's array: always 2.
    }
}

/// What one entry is the state of: a rule, its algorithm (each keeps its own state, as on Redis)
/// and the key, as 128 bits of keyed SipHash. Never the key itself: a client that sends 16 KB
/// user names must not make the table grow by 16 KB per name. The hash keys are random per
/// limiter, so clients cannot aim collisions at each other; a cryptographic digest (as in Redis
/// key names, which outlive the process) would cost more on every request for nothing here.
pub(super) type EntryId = [u64; 2];

/// Makes [`EntryId`]s: SipHash with one limiter's random keys.
#[derive(Clone, Debug)]
pub(super) struct EntryIds(RandomState);

impl EntryIds {
    pub(super) fn new() -> Self {
        Self(RandomState::new())
    }

    /// The entry of `rule`'s state for `key`.
    pub(super) fn state(&self, rule: &Rule, key: &Key) -> EntryId {
        match rule.algorithm().builtin_id() {
            Some(tag) => self.id(rule.name(), tag, key.as_bytes()),
            // Never evaluated here (Lua only), but reset and inspected like the others.
            None => {
                let digest = self
                    .0
                    .hash_one((rule.name(), rule.algorithm(), key.as_bytes()));
                self.id(rule.name(), u8::MAX, &digest.to_le_bytes())
            }
        }
    }

    /// The entry of `rule`'s override record (penalty, allow-list entry, bans) for `key`.
    pub(super) fn record(&self, rule: &Rule, key: &Key) -> EntryId {
        self.id(rule.name(), 0, key.as_bytes())
    }

    /// The id of `name ∥ 0xff ∥ tag ∥ key` (a rule name is UTF-8, never 0xff: the parts are
    /// told apart), in as few hasher calls as fit: this runs on every request.
    fn id(&self, name: &str, tag: u8, key: &[u8]) -> EntryId {
        let mut h = self.0.build_hasher();
        let mut buf = [0; 64];
        let len = name.len() + 2 + key.len();
        if let Some(out) = buf.get_mut(..len) {
            let (head, rest) = out.split_at_mut(name.len());
            head.copy_from_slice(name.as_bytes());
            rest[0] = 0xff;
            rest[1] = tag;
            rest[2..].copy_from_slice(key);
            h.write(out);
        } else {
            // SipHash reads a stream of bytes: the same id as one call with all of them.
            h.write(name.as_bytes());
            h.write(&[0xff, tag]);
            h.write(key);
        }
        // One pass over the (possibly long) key, then two outputs from two different endings.
        let mut h1 = h.clone();
        h.write_u8(0);
        h1.write_u8(1);
        [h.finish(), h1.finish()]
    }
}
