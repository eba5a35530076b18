//! Session ids: 256 bits from the OS CSPRNG, base64url in the cookie, SHA-256 in storage.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use super::SessionError;

/// Length of an encoded id: 32 bytes in unpadded base64url.
pub(crate) const ENCODED_LEN: usize = 43;

/// A session id as the client holds it. Never logged, never stored: storage uses
/// [`SessionId::storage_key`], its SHA-256.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionId([u8; 32]);

impl SessionId {
    /// A placeholder for the unused places of a fixed-size list of ids; never read as an id.
    pub(crate) const UNUSED: Self = Self([0; 32]);

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
        Self::parse_bytes(s.as_bytes())
    }

    /// [`parse`](Self::parse) on the bytes of a header value, as they came: any byte outside
    /// the base64url alphabet (non-ASCII included) makes it `None`, so no UTF-8 check is
    /// needed first. Every id has exactly one accepted spelling: 43 × 6 = 258 bits, and the
    /// last 2 must be zero.
    pub(crate) fn parse_bytes(s: &[u8]) -> Option<Self> {
        let s: &[u8; ENCODED_LEN] = s.try_into().ok()?;
        let mut bytes = [0u8; 32];
        // Any byte outside the alphabet has [`INVALID`]'s top bits: one check at the end.
        let mut seen = 0u8;
        let mut value = |c: u8| {
            let v = SEXTETS[usize::from(c)];
            seen |= v;
            u32::from(v)
        };
        // Ten groups of 4 characters give 30 bytes; the last 3 characters give 2 more.
        for (out, group) in bytes.chunks_exact_mut(3).zip(s[..40].chunks_exact(4)) {
            let n = value(group[0]) << 18
                | value(group[1]) << 12
                | value(group[2]) << 6
                | value(group[3]);
            out.copy_from_slice(&n.to_be_bytes()[1..]);
        }
        let n = value(s[40]) << 12 | value(s[41]) << 6 | value(s[42]);
        if seen & !0x3f != 0 || n & 0b11 != 0 {
            return None;
        }
        bytes[30..].copy_from_slice(&u16::try_from(n >> 2).ok()?.to_be_bytes());
        Some(Self(bytes))
    }

    /// The cookie value.
    #[must_use]
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0)
    }

    /// The name of this session in storage: SHA-256 of the id, 64 hex digits. A Redis dump or
    /// `MONITOR` shows only this, which cannot be turned back into a usable cookie.
    #[must_use]
    pub fn storage_key(&self) -> String {
        let digest: [u8; 32] = Sha256::digest(self.0).into();
        // Written on the stack, a byte's two digits at a time, then copied out once: pushing
        // digit by digit costs as much as a good part of the hash.
        let mut hex = [[0u8; 2]; 32];
        for (digits, byte) in hex.iter_mut().zip(digest) {
            *digits = HEX_PAIRS[usize::from(byte)];
        }
        let hex = hex.as_flattened();
        // ASCII digits: the check cannot fail.
        std::str::from_utf8(hex)
            .map(str::to_owned)
            .unwrap_or_default()
    }
}

/// The two lowercase hex digits of each byte.
const HEX_PAIRS: [[u8; 2]; 256] = {
    let digits = b"0123456789abcdef";
    let mut table = [[0u8; 2]; 256];
    let mut byte = 0;
    while byte < 256 {
        table[byte] = [digits[byte >> 4], digits[byte & 0xf]];
        byte += 1;
    }
    table
};

/// The value of each base64url character (`A`–`Z`, `a`–`z`, `0`–`9`, `-`, `_`), by byte;
/// [`INVALID`] for every other byte.
const SEXTETS: [u8; 256] = {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut table = [INVALID; 256];
    let mut value: u8 = 0;
    while value < 64 {
        table[alphabet[value as usize] as usize] = value;
        value += 1;
    }
    table
};

/// [`SEXTETS`]' mark for a byte outside the alphabet.
const INVALID: u8 = 0xff;

/// A session id with its storage key, hashed once per request: what a request's loaded session
/// is known by (a load, then a save or a rotation, all name the same key).
#[derive(Clone)]
pub(crate) struct KeyedId {
    pub(crate) id: SessionId,
    /// [`SessionId::storage_key`] of `id`.
    pub(crate) key: String,
}

impl KeyedId {
    pub(crate) fn new(id: SessionId) -> Self {
        let key = id.storage_key();
        Self { id, key }
    }
}

impl fmt::Debug for KeyedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.id.fmt(f)
    }
}

/// A fresh public handle for a session (see [`SessionInfo::handle`](super::SessionInfo::handle)):
/// 128 random bits, unrelated to the id, 22 characters of base64url.
pub(crate) fn new_handle() -> Result<String, SessionError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| SessionError::Random(e.to_string()))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
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
        assert!(
            s.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
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

    /// The decoder accepts exactly what the base64 crate's strict unpadded base64url engine
    /// accepts, with the same bytes: every character in every position, every last character,
    /// and random spellings.
    #[test]
    fn the_decoder_agrees_with_the_base64_engine() {
        let engine = |s: &[u8]| {
            let mut out = [0u8; 33];
            let n = URL_SAFE_NO_PAD.decode_slice(s, &mut out).ok()?;
            <[u8; 32]>::try_from(out.get(..n)?).ok()
        };
        let check = |s: &[u8]| {
            assert_eq!(
                SessionId::parse_bytes(s).map(|id| id.0),
                engine(s),
                "{:?}",
                String::from_utf8_lossy(s)
            );
        };
        let base = SessionId::generate().unwrap().encode().into_bytes();
        for at in 0..ENCODED_LEN {
            for c in 0..=u8::MAX {
                let mut s = base.clone();
                s[at] = c;
                check(&s);
            }
        }
        for _ in 0..2000 {
            let mut raw = [0u8; ENCODED_LEN];
            getrandom::fill(&mut raw).unwrap();
            let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
            let s: Vec<u8> = raw.iter().map(|b| alphabet[usize::from(b % 64)]).collect();
            check(&s);
            check(&raw);
        }
        check(b"");
        check(&base[..42]);
        check(&[base.as_slice(), b"A"].concat());
    }

    #[test]
    fn cookie_values_and_storage_keys_are_pinned() {
        // Cookies already issued and sessions already stored must still be found.
        let counting = SessionId(std::array::from_fn(|i| u8::try_from(i).unwrap()));
        assert_eq!(
            counting.encode(),
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"
        );
        assert_eq!(
            counting.storage_key(),
            "630dcd2966c4336691125448bbb25b4ff412a49c732db2c8abc1b8581bd710dd"
        );
        let zeros = SessionId::parse(&"A".repeat(ENCODED_LEN)).unwrap();
        assert_eq!(zeros, SessionId([0; 32]));
        assert_eq!(
            zeros.storage_key(),
            "66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925"
        );
    }
}
