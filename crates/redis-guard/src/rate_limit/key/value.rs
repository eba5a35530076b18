//! The [`Key`] a rule counts against, and the digest that names it in Redis.

use std::fmt;
use std::net::IpAddr;

use sha2::{Digest, Sha256};

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
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key(Vec<u8>);

impl Key {
    /// A key from raw bytes.
    #[must_use]
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    /// Two keys as one, e.g. client IP and username for login throttling. Each part is
    /// length-prefixed, so `("ab", "c")` and `("a", "bc")` stay different keys.
    #[must_use]
    pub fn pair(a: &Key, b: &Key) -> Self {
        let mut v = Vec::with_capacity(a.0.len() + b.0.len() + 16);
        for part in [a, b] {
            v.extend_from_slice(&(part.0.len() as u64).to_be_bytes());
            v.extend_from_slice(&part.0);
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
        let hash = Sha256::digest(&self.0);
        let mut out = format!("{hash:x}");
        out.truncate(32);
        out
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
        Self(s.as_bytes().to_vec())
    }
}

impl From<String> for Key {
    fn from(s: String) -> Self {
        Self(s.into_bytes())
    }
}

impl From<&[u8]> for Key {
    fn from(b: &[u8]) -> Self {
        Self(b.to_vec())
    }
}

impl From<Vec<u8>> for Key {
    fn from(b: Vec<u8>) -> Self {
        Self(b)
    }
}

impl From<u64> for Key {
    fn from(n: u64) -> Self {
        Self(n.to_string().into_bytes())
    }
}

impl From<i64> for Key {
    fn from(n: i64) -> Self {
        Self(n.to_string().into_bytes())
    }
}

impl From<IpAddr> for Key {
    fn from(ip: IpAddr) -> Self {
        Self(ip.to_string().into_bytes())
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
    fn digest_is_hex_and_hides_the_key() {
        let d = Key::from("alice@example.com").digest();
        assert_eq!(d.len(), 32);
        assert!(d.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(!format!("{:?}", Key::from("alice@example.com")).contains("alice"));
    }

    #[test]
    fn digest_names_existing_redis_keys() {
        // `printf %s … | sha256sum | cut -c1-32`: key names already in Redis must not change.
        assert_eq!(
            Key::from("alice@example.com").digest(),
            "ff8d9819fc0e12bf0d24892e45987e24"
        );
        assert_eq!(Key::from("").digest(), "e3b0c44298fc1c149afbf4c8996fb924");
    }
}
