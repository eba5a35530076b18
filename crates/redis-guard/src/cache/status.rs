//! What a response says about where it came from: `x-cache` and RFC 9211 `Cache-Status`.

use http::header::HeaderName;
use http::{HeaderMap, HeaderValue};

/// This cache's name in `Cache-Status`.
const NAME: &str = "redis-guard";

/// `Cache-Status` (RFC 9211); `http` has no constant for it.
pub(crate) const CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// How a response was served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// From a fresh entry; `ttl` its remaining freshness (s).
    Hit { ttl: i64 },
    /// From an entry past its freshness, inside its stale window; `ttl` ≤ 0.
    Stale { ttl: i64 },
    /// Computed by the handler for this request; `stored` when the fill was written.
    Miss { stored: bool },
    /// A stored entry the handler confirmed with a `304` to the layer's conditional request
    /// (RFC 9111 §4.3); `stored` when the freshened entry was written.
    Revalidated { stored: bool },
    /// A stored copy served in place of a handler that failed or was too slow, or of an
    /// entry purged softly; `ttl` ≤ 0.
    Fallback { ttl: i64 },
}

impl Outcome {
    /// A hit from an entry fresh until `fresh_until`, at `now` (µs on the store's clock).
    pub(crate) fn served(fresh_until: u64, now: u64) -> Self {
        // Whole seconds, rounded up: a fresh entry says 1 or more, a stale one 0 or less.
        // (A u64 of µs is under 2^45 seconds: the seconds fit an i64.)
        let seconds = |s: u64| i64::try_from(s).unwrap_or(i64::MAX);
        if now < fresh_until {
            Self::Hit {
                ttl: seconds((fresh_until - now).div_ceil(1_000_000)),
            }
        } else {
            Self::Stale {
                ttl: -seconds((now - fresh_until) / 1_000_000),
            }
        }
    }

    /// As served in place of the handler (`fwd=stale`): the ttl is at most zero.
    pub(crate) fn forwarded(self) -> Self {
        match self {
            Self::Hit { ttl } | Self::Stale { ttl } | Self::Fallback { ttl } => {
                Self::Fallback { ttl: ttl.min(0) }
            }
            other @ (Self::Miss { .. } | Self::Revalidated { .. }) => other,
        }
    }

    /// Marks `headers`: `header` (`x-cache`) says `HIT`, `STALE`, `REVALIDATED` or `MISS`, and
    /// this cache's member goes last in `Cache-Status`, after those of the caches nearer the
    /// origin (RFC 9211 §2). Counts the response
    /// ([`Metric::CacheResponses`](crate::telemetry::Metric::CacheResponses)).
    pub(crate) fn mark(self, header: &HeaderName, headers: &mut HeaderMap) {
        let earlier = headers.contains_key(&CACHE_STATUS);
        self.mark_after(header, headers, earlier);
    }

    /// [`mark`](Self::mark), when whether `headers` hold a `Cache-Status` already is known:
    /// `earlier` (when `false`, none is looked up).
    pub(crate) fn mark_after(self, header: &HeaderName, headers: &mut HeaderMap, earlier: bool) {
        // A stale entry served without forwarding the request is a hit with a ttl of zero or
        // less (RFC 9211 §2.1, §2.4, and §3's "stale hit" example); `fwd=stale` would say the
        // request went to the handler, which it did not.
        let (value, label, member, ttl): (_, _, &'static str, _) = match self {
            Self::Hit { ttl } => ("HIT", "hit", "redis-guard; hit; ttl=", Some(ttl)),
            Self::Stale { ttl } => ("STALE", "stale", "redis-guard; hit; ttl=", Some(ttl)),
            Self::Miss { stored: true } => ("MISS", "miss", "redis-guard; fwd=miss; stored", None),
            Self::Miss { stored: false } => ("MISS", "miss", "redis-guard; fwd=miss", None),
            // The stored response was stale, and the handler said it is current (RFC 9211
            // §2.2 `fwd=stale`, §2.3 `fwd-status`).
            Self::Revalidated { stored: true } => (
                "REVALIDATED",
                "revalidated",
                "redis-guard; fwd=stale; fwd-status=304; stored",
                None,
            ),
            Self::Revalidated { stored: false } => (
                "REVALIDATED",
                "revalidated",
                "redis-guard; fwd=stale; fwd-status=304",
                None,
            ),
            // The request was forwarded (or would have been: a soft purge) and the stale
            // copy answered instead (RFC 9211 §2.2 `fwd=stale`).
            Self::Fallback { ttl } => (
                "STALE",
                "fallback",
                "redis-guard; fwd=stale; ttl=",
                Some(ttl),
            ),
        };
        debug_assert!(member.starts_with(NAME));
        crate::telemetry::count(
            crate::telemetry::Metric::CacheResponses,
            "result",
            label.into(),
            1,
        );
        headers.insert(header.clone(), HeaderValue::from_static(value));
        let joined = match (earlier, ttl) {
            // Alone, with nothing to write: a constant.
            (false, None) => Some(HeaderValue::from_static(member)),
            (false, Some(ttl)) => numbered(member, ttl),
            (true, _) => {
                let mut list = Vec::new();
                for before in headers.get_all(&CACHE_STATUS) {
                    list.extend_from_slice(before.as_bytes());
                    list.extend_from_slice(b", ");
                }
                list.extend_from_slice(member.as_bytes());
                if let Some(ttl) = ttl {
                    let mut digits = Line::default();
                    digits.push_int(ttl);
                    list.extend_from_slice(digits.as_bytes());
                }
                // The earlier members are header values already, and ours is ASCII.
                HeaderValue::from_bytes(&list).ok()
            }
        };
        if let Some(joined) = joined {
            headers.insert(CACHE_STATUS, joined);
        }
    }
}

/// `Age: <age>` of a response served from the cache: below [`SMALL_AGES`] a constant, a slice
/// of [`AGES`] (no copy, nothing shared to count).
pub(crate) fn age(age: u64) -> HeaderValue {
    if let Ok(small) = usize::try_from(age)
        && small < SMALL_AGES
    {
        // Ones, tens, then hundreds of digits: where `age`'s text starts, and its length.
        let (at, len) = match small {
            0..10 => (small, 1),
            10..100 => (10 + (small - 10) * 2, 2),
            _ => (190 + (small - 100) * 3, 3),
        };
        if let Some(text) = AGES.get(at..at + len) {
            return HeaderValue::from_static(text);
        }
    }
    numbered("", i64::try_from(age).unwrap_or(i64::MAX)).unwrap_or(HeaderValue::from_static("0"))
}

/// The ages written from [`AGES`].
const SMALL_AGES: usize = 1000;

/// The decimal texts of 0 to 999, one after the other (`0123…9899100101…999`).
static AGES: &str = match std::str::from_utf8(&ages()) {
    Ok(text) => text,
    Err(_) => panic!("digits are text"),
};

/// The bytes of [`AGES`].
// Each digit is below 10: a byte. (`u8::try_from` is not `const`.)
#[allow(clippy::cast_possible_truncation)]
const fn ages() -> [u8; 2890] {
    let mut out = [0; 2890];
    let (mut n, mut at) = (0, 0);
    while n < SMALL_AGES {
        let digits: &[u8] = &[
            b'0' + (n / 100) as u8,
            b'0' + (n / 10 % 10) as u8,
            b'0' + (n % 10) as u8,
        ];
        let skip = if n < 10 {
            2
        } else if n < 100 {
            1
        } else {
            0
        };
        let mut i = skip;
        while i < 3 {
            out[at] = digits[i];
            at += 1;
            i += 1;
        }
        n += 1;
    }
    out
}

/// How many header values each thread remembers (the `Age` and the `Cache-Status` of a hit,
/// of a stale hit and of a fallback hold one each, in the common case).
const REMEMBERED: usize = 4;

/// A value [`numbered`] made: its text, its number, the value.
type Made = Option<(&'static str, i64, HeaderValue)>;

thread_local! {
    /// The last header values [`numbered`] made on this thread: the responses of one second
    /// carry the same ones, and a clone costs no allocation.
    static RECENT: std::cell::RefCell<[Made; REMEMBERED]> =
        const { std::cell::RefCell::new([const { None }; REMEMBERED]) };
}

/// The header value `text` then `n` in decimal, written on the stack; the same value as the
/// last one of `text` on this thread is a clone of it.
fn numbered(text: &'static str, n: i64) -> Option<HeaderValue> {
    // The slot of `text` (the same literal: its address), or the first free one.
    let slot = |recent: &[Made]| {
        recent
            .iter()
            .position(|r| r.as_ref().is_none_or(|(t, ..)| std::ptr::eq(*t, text)))
    };
    let known = RECENT.with_borrow(|recent| {
        let (_, m, value) = recent[slot(recent)?].as_ref()?;
        (*m == n).then(|| value.clone())
    });
    if known.is_some() {
        return known;
    }
    let mut line = Line::default();
    line.push(text.as_bytes());
    line.push_int(n);
    let value = HeaderValue::from_bytes(line.as_bytes()).ok()?;
    RECENT.with_borrow_mut(|recent| {
        // A text not seen yet on a full table takes the first slot.
        let at = slot(recent).unwrap_or(0);
        recent[at] = Some((text, n, value.clone()));
    });
    Some(value)
}

/// A short header value written on the stack: this cache's member of `Cache-Status`.
struct Line {
    bytes: [u8; 64],
    len: usize,
}

impl Default for Line {
    fn default() -> Self {
        Self {
            bytes: [0; 64],
            len: 0,
        }
    }
}

impl Line {
    /// Appends `text` (what does not fit is left out: the members are shorter).
    fn push(&mut self, text: &[u8]) {
        let n = text.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&text[..n]);
        self.len += n;
    }

    /// Appends `n` in decimal.
    fn push_int(&mut self, n: i64) {
        if n < 0 {
            self.push(b"-");
        }
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut rest = n.unsigned_abs();
        loop {
            at -= 1;
            // A digit: below 10.
            digits[at] = b'0' + u8::try_from(rest % 10).unwrap_or(0);
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        self.push(&digits[at..]);
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(outcome: Outcome, before: &[&str]) -> String {
        let mut headers = HeaderMap::new();
        for b in before {
            headers.append(CACHE_STATUS, HeaderValue::from_str(b).unwrap());
        }
        outcome.mark(&HeaderName::from_static("x-cache"), &mut headers);
        assert_eq!(headers.get_all(&CACHE_STATUS).iter().count(), 1);
        headers[&CACHE_STATUS].to_str().unwrap().to_owned()
    }

    /// The values a thread remembers are the ones it would write: the same number again, a
    /// number changed, several texts in turn, more texts than slots.
    #[test]
    fn remembered_values_are_the_written_ones() {
        for n in [7, 7, 8, 0, 8, 9, 10, 99, 100, 999, 1000, 1001, u64::MAX] {
            let written = age(n);
            assert_eq!(written, n.min(i64::MAX as u64).to_string().as_str());
        }
        for n in 0..2000 {
            assert_eq!(age(n), n.to_string().as_str());
        }
        for ttl in [5, 5, -3, 5, i64::MIN, 86_400] {
            assert_eq!(
                marked(Outcome::Hit { ttl }, &[]),
                format!("redis-guard; hit; ttl={ttl}")
            );
            assert_eq!(age(9), "9");
            assert_eq!(
                marked(
                    Outcome::Fallback {
                        ttl: -ttl.saturating_abs()
                    },
                    &[]
                ),
                format!("redis-guard; fwd=stale; ttl={}", -ttl.saturating_abs())
            );
        }
        let texts = ["a=", "b=", "c=", "d=", "e=", "f="];
        for round in 0..3 {
            for (i, text) in texts.iter().enumerate() {
                let n = i64::try_from(i).unwrap() + round;
                assert_eq!(numbered(text, n).unwrap(), format!("{text}{n}").as_str());
            }
        }
    }

    #[test]
    fn members_follow_rfc_9211_and_go_last() {
        assert_eq!(Outcome::served(5_500_000, 0), Outcome::Hit { ttl: 6 });
        assert_eq!(Outcome::served(5_000_000, 0), Outcome::Hit { ttl: 5 });
        assert_eq!(
            Outcome::served(1_000_001, 1_000_000),
            Outcome::Hit { ttl: 1 }
        );
        assert_eq!(
            Outcome::served(1_000_000, 1_000_000),
            Outcome::Stale { ttl: 0 }
        );
        assert_eq!(Outcome::served(0, 2_500_000), Outcome::Stale { ttl: -2 });
        assert_eq!(
            marked(Outcome::Hit { ttl: 5 }, &[]),
            "redis-guard; hit; ttl=5"
        );
        assert_eq!(
            marked(Outcome::Stale { ttl: -3 }, &[]),
            "redis-guard; hit; ttl=-3"
        );
        assert_eq!(
            marked(
                Outcome::Miss { stored: true },
                &["Origin; fwd=miss", "Db; hit"]
            ),
            "Origin; fwd=miss, Db; hit, redis-guard; fwd=miss; stored"
        );
        assert_eq!(
            marked(Outcome::Miss { stored: false }, &[]),
            "redis-guard; fwd=miss"
        );
        let fallback = Outcome::served(5_000_000, 0).forwarded();
        assert_eq!(marked(fallback, &[]), "redis-guard; fwd=stale; ttl=0");
        let late = Outcome::served(0, 3_000_000).forwarded();
        assert_eq!(marked(late, &[]), "redis-guard; fwd=stale; ttl=-3");
        assert_eq!(
            marked(Outcome::Revalidated { stored: true }, &[]),
            "redis-guard; fwd=stale; fwd-status=304; stored"
        );
        assert_eq!(
            marked(Outcome::Revalidated { stored: false }, &[]),
            "redis-guard; fwd=stale; fwd-status=304"
        );
        assert_eq!(
            marked(Outcome::Stale { ttl: -40 }, &["Db; hit"]),
            "Db; hit, redis-guard; hit; ttl=-40"
        );
        assert_eq!(
            marked(Outcome::Hit { ttl: 86_400_123 }, &[]),
            "redis-guard; hit; ttl=86400123"
        );
        assert_eq!(
            marked(Outcome::Stale { ttl: i64::MIN }, &[]),
            format!("redis-guard; hit; ttl={}", i64::MIN)
        );
    }
}
