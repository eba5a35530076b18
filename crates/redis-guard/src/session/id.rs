//! Session ids: 256 bits from the OS CSPRNG, base64url in the cookie, SHA-256 in storage.

use std::fmt;

use sha2::{Digest, Sha256};

use super::SessionError;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Length of an encoded id: 32 bytes in unpadded base64url.
pub(crate) const ENCODED_LEN: usize = 43;

/// A session id as the client holds it. Never logged, never stored: storage uses
/// [`SessionId::storage_key`], its SHA-256.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionId([u8; 32]);

impl SessionId {
    /// A fresh id from the operating system's CSPRNG.
    ///
    /// # Errors
    ///
    /// [`SessionError::Random`] when the OS cannot provide randomness.
    pub fn generate() -> Result<Self, SessionError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| SessionError::Random(e.to_string()))?;
        Ok(Self(bytes))
    }

    /// Parses a cookie value: exactly 43 characters of unpadded base64url that decode to 32
    /// bytes with no stray bits. Anything else is `None`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.as_bytes();
        if s.len() != ENCODED_LEN {
            return None;
        }
        let mut out = [0u8; 32];
        let mut acc: u32 = 0;
        let mut bits = 0;
        let mut n = 0;
        for &c in s {
            let v = u32::try_from(ALPHABET.iter().position(|&a| a == c)?).ok()?;
            acc = (acc << 6) | v;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                *out.get_mut(n)? = u8::try_from((acc >> bits) & 0xff).ok()?;
                n += 1;
            }
        }
        // 43 × 6 = 258 bits: the last 2 must be zero in a canonical encoding.
        (n == 32 && acc & ((1 << bits) - 1) == 0).then_some(Self(out))
    }

    /// The cookie value.
    #[must_use]
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(ENCODED_LEN);
        for chunk in self.0.chunks(3) {
            let b = [
                chunk[0],
                chunk.get(1).copied().unwrap_or(0),
                chunk.get(2).copied().unwrap_or(0),
            ];
            let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            let chars = chunk.len() + 1;
            for i in 0..chars {
                let index = (v >> (18 - 6 * i)) & 0x3f;
                out.push(char::from(ALPHABET[index as usize]));
            }
        }
        out
    }

    /// The name of this session in storage: SHA-256 of the id, 64 hex digits. A Redis dump or
    /// `MONITOR` shows only this, which cannot be turned back into a usable cookie.
    #[must_use]
    pub fn storage_key(&self) -> String {
        hex(&Sha256::digest(self.0))
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The id is a bearer credential: print only a prefix of its storage key.
        write!(f, "SessionId(storage {}…)", &self.storage_key()[..8])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_is_random() {
        let a = SessionId::generate().unwrap();
        let b = SessionId::generate().unwrap();
        assert_ne!(a, b);
        let s = a.encode();
        assert_eq!(s.len(), ENCODED_LEN);
        assert!(s.bytes().all(|c| ALPHABET.contains(&c)));
        assert_eq!(SessionId::parse(&s), Some(a.clone()));
        assert_eq!(a.storage_key().len(), 64);
        assert!(!format!("{a:?}").contains(&s));
    }

    #[test]
    fn rejects_everything_else() {
        let good = SessionId::generate().unwrap().encode();
        let mut padded = good.clone();
        padded.push('=');
        for bad in [
            String::new(),
            good[..42].to_owned(),
            padded,
            good.replace(|c: char| c.is_ascii_digit(), "+"),
            "é".repeat(22),
            "a".repeat(4096),
            format!("{}/", &good[..42]),
        ] {
            if bad != good {
                assert_eq!(SessionId::parse(&bad), None, "{bad:?}");
            }
        }
        // The last character carries 2 unused bits that must be zero.
        assert_eq!(SessionId::parse(&format!("{}B", "A".repeat(42))), None);
        assert!(SessionId::parse(&format!("{}E", "A".repeat(42))).is_some());
    }
}
