//! The [`Key`] a rule counts against, and the digest that names it in Redis.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;

use sha2::{Digest, Sha256};
use smallvec::SmallVec;

/// The value a rule counts against: opaque bytes, hashed before they are used in a Redis key.
///
/// ```
/// use redis_guard::rate_limit::Key;
/// let a = Key::from("+380501234567");
/// let b = Key::from(String::from("+380501234567"));
/// assert_eq!(a, b);
/// assert_eq!(a.digest(), b.digest());
/// assert!(!a.digest().contains("380"));
/// ```
#[derive(Clone)]
pub struct Key(SmallVec<[u8; INLINE]>);

/// Keys up to this many bytes live inside the [`Key`], without an allocation: every IPv4 and
/// IPv6 client key ([`ClientIp`](super::ClientIp) writes at most `xxxx:…:xxxx/128`, 44 bytes),
/// most user ids and API keys. A request's key is made on every request.
const INLINE: usize = 46;

impl Key {
    /// A key from raw bytes.
    #[must_use]
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(SmallVec::from_vec(bytes.into()))
    }

    /// A key holding a copy of `bytes`: inline when they fit.
    pub(crate) fn copied(bytes: &[u8]) -> Self {
        Self(SmallVec::from_slice(bytes))
    }

    /// Two keys as one, e.g. client IP and username for login throttling. Each part is
    /// length-prefixed, so `("ab", "c")` and `("a", "bc")` stay different keys.
    #[must_use]
    pub fn pair(a: &Key, b: &Key) -> Self {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        let mut v = SmallVec::with_capacity(a.len() + b.len() + 16);
        for part in [a, b] {
            v.extend_from_slice(&(part.len() as u64).to_be_bytes());
            v.extend_from_slice(part);
        }
        Self(v)
    }

    /// The key's bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The digest used in Redis key names: the first 128 bits of SHA-256, as 32 hex digits.
    ///
    /// A digest hides the key from anyone reading Redis, and no byte of the key can inject a
    /// separator, a glob or a hash tag into a key name. It is not a secret: a small key space
    /// (phone numbers) can be enumerated by whoever can read Redis.
    #[must_use]
    pub fn digest(&self) -> String {
        // The hash's own `LowerHex`: two digits per byte, 16 bytes kept.
        let hash = Sha256::digest(self.as_bytes());
        let mut out = format!("{hash:x}");
        out.truncate(32);
        out
    }
}

/// A key being written in place, for extractors that build one per request: inline up to
/// [`INLINE`] bytes, on the heap past them.
#[derive(Default)]
pub(crate) struct Inline(SmallVec<[u8; INLINE]>);

impl Inline {
    pub(crate) fn key(self) -> Key {
        Key(self.0)
    }

    /// A key of the first `len` bytes of `buf`, a buffer of a size known when compiled (a
    /// copy of fixed length, no call); `None` when `buf` is longer than a key's inline bytes
    /// or `len` is past its end.
    pub(crate) fn filled<const N: usize>(buf: [u8; N], len: usize) -> Option<Key> {
        let mut inline = [0; INLINE];
        inline.get_mut(..N)?.copy_from_slice(&buf);
        (len <= N).then(|| Key(SmallVec::from_buf_and_len(inline, len)))
    }
}

impl fmt::Write for Inline {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Keys are their bytes, wherever they are kept.
impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl fmt::Debug for Key {
    // Keys are often personal data (phone numbers, e-mails, API keys): don't print them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({}…)", &self.digest()[..8])
    }
}

impl From<&str> for Key {
    fn from(s: &str) -> Self {
        Self::copied(s.as_bytes())
    }
}

impl From<String> for Key {
    fn from(s: String) -> Self {
        Self::new(s)
    }
}

impl From<&[u8]> for Key {
    fn from(b: &[u8]) -> Self {
        Self::copied(b)
    }
}

impl From<Vec<u8>> for Key {
    fn from(b: Vec<u8>) -> Self {
        Self::new(b)
    }
}

/// Written in place: a number, an address and its `Display` fit.
fn displayed(value: impl fmt::Display) -> Key {
    let mut inline = Inline::default();
    // Writing to memory never fails, nor does a number's or an address's `Display`.
    let _ = fmt::write(&mut inline, format_args!("{value}"));
    inline.key()
}

impl From<u64> for Key {
    fn from(n: u64) -> Self {
        displayed(n)
    }
}

impl From<i64> for Key {
    fn from(n: i64) -> Self {
        displayed(n)
    }
}

impl From<IpAddr> for Key {
    fn from(ip: IpAddr) -> Self {
        displayed(ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_is_unambiguous() {
        let ab_c = Key::pair(&Key::from("ab"), &Key::from("c"));
        let a_bc = Key::pair(&Key::from("a"), &Key::from("bc"));
        assert_ne!(ab_c, a_bc);
        assert_ne!(ab_c.digest(), a_bc.digest());
    }

    #[test]
    fn a_key_is_its_bytes_wherever_they_are_kept() {
        use std::collections::hash_map::RandomState;
        use std::hash::BuildHasher;
        let hasher = RandomState::new();
        let long = "x".repeat(INLINE + 1);
        for text in ["", "203.0.113.7", &"y".repeat(INLINE), &long] {
            let inline = Key::from(text);
            let heap = Key::new(text.as_bytes().to_vec());
            assert_eq!(inline.as_bytes(), text.as_bytes());
            assert_eq!(inline, heap);
            assert_eq!(hasher.hash_one(&inline), hasher.hash_one(&heap));
            assert_eq!(hasher.hash_one(&inline), hasher.hash_one(text.as_bytes()));
            assert_eq!(inline.digest(), heap.digest());
        }
        assert_ne!(Key::from("a"), Key::from("a\0"));
        assert_eq!(
            Key::from(u64::MAX).as_bytes(),
            u64::MAX.to_string().as_bytes()
        );
        assert_eq!(
            Key::from(i64::MIN).as_bytes(),
            i64::MIN.to_string().as_bytes()
        );
        let v6: IpAddr = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe".parse().unwrap();
        assert_eq!(Key::from(v6).as_bytes(), v6.to_string().as_bytes());
    }

    #[test]
    fn a_key_filled_in_place_is_its_first_bytes_only() {
        let written = *b"10.0.0.1.junk\0\0\0";
        let key = Inline::filled(written, 8).unwrap();
        assert_eq!(key, Key::from("10.0.0.1"));
        assert_eq!(key.digest(), Key::from("10.0.0.1").digest());
        assert!(Inline::filled(written, 17).is_none(), "past the buffer");
        assert!(
            Inline::filled([0; INLINE + 1], 1).is_none(),
            "past the inline bytes"
        );
        assert_eq!(
            Inline::filled([b'x'; INLINE], INLINE)
                .unwrap()
                .as_bytes()
                .len(),
            INLINE
        );
    }

    #[test]
    fn digest_names_existing_redis_keys_and_hides_the_key() {
        // `printf %s … | sha256sum | cut -c1-32`: key names already in Redis must not change.
        let alice = Key::from("alice@example.com");
        assert_eq!(alice.digest(), "ff8d9819fc0e12bf0d24892e45987e24");
        assert_eq!(Key::from("").digest(), "e3b0c44298fc1c149afbf4c8996fb924");
        assert!(!format!("{alice:?}").contains("alice"));
    }
}
