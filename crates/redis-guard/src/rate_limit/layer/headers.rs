//! The rate-limit response headers, as the module docs of [`rate_limit`](super) list them
//! (the IETF draft's `RateLimit-Policy` and `RateLimit`, the legacy `X-RateLimit-*`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::rate_limit::{Decision, Quota, RuleDecision, ceil_secs};

pub(crate) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
pub(crate) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
pub(crate) const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
pub(crate) const X_RATELIMIT_REMAINING: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining");
pub(crate) const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
/// redis-guard's own, not in the IETF draft.
pub(crate) const RATELIMIT_EXCEEDED: HeaderName = HeaderName::from_static("ratelimit-exceeded");

/// The headers a decision adds to a response, computed before the response exists (an admitted
/// request's headers wait for the inner service): values only, no map of their own.
#[derive(Debug)]
pub(crate) struct RateLimitHeaders {
    ietf: Option<(HeaderValue, HeaderValue)>,
    /// The headers of options most layers leave off, boxed so that the response future that
    /// carries these values stays small.
    rare: Option<Box<Rare>>,
}

/// See [`RateLimitHeaders::rare`]: the binding rule's legacy limit, remaining and reset, and
/// `RateLimit-Exceeded`.
#[derive(Debug, Default)]
struct Rare {
    legacy: Option<(u32, u32, u64)>,
    exceeded: Option<HeaderValue>,
}

impl RateLimitHeaders {
    /// The headers for `decision`: the IETF pair when `policy` is given, the legacy ones when
    /// `legacy`; none for a decision of shadow rules only.
    pub(crate) fn new(decision: &Decision, policy: Option<HeaderValue>, legacy: bool) -> Self {
        let d = decision;
        let ietf = policy.filter(|_| windowed(d).next().is_some());
        let legacy = legacy && !d.rules.is_empty();
        let mut headers = Self::plain(
            ietf.map(|policy| (policy, state(d))),
            legacy.then(|| (d.limit, d.remaining, ceil_secs(d.reset_after))),
        );
        if !d.exceeded.is_empty() {
            let exceeded = list(d.exceeded.iter().map(|name| (&**name, [])));
            headers.rare.get_or_insert_default().exceeded = Some(exceeded);
        }
        headers
    }

    /// The headers of a plain decision (`lean.rs`): `RateLimit-Policy` and `RateLimit`, and the
    /// binding rule's (limit, remaining, reset) for the legacy ones.
    pub(crate) fn plain(
        ietf: Option<(HeaderValue, HeaderValue)>,
        legacy: Option<(u32, u32, u64)>,
    ) -> Self {
        let legacy = legacy.map(|legacy| Rare {
            legacy: Some(legacy),
            exceeded: None,
        });
        let rare = legacy.map(Box::new);
        Self { ietf, rare }
    }

    pub(crate) fn insert(self, headers: &mut HeaderMap) {
        if let Some((policy, state)) = self.ietf {
            headers.insert(RATELIMIT_POLICY, policy);
            headers.insert(RATELIMIT, state);
        }
        let Some(rare) = self.rare else {
            return;
        };
        if let Some(exceeded) = rare.exceeded {
            headers.insert(RATELIMIT_EXCEEDED, exceeded);
        }
        if let Some((limit, remaining, reset)) = rare.legacy {
            headers.insert(X_RATELIMIT_LIMIT, uint_value(limit.into()));
            headers.insert(X_RATELIMIT_REMAINING, uint_value(remaining.into()));
            headers.insert(X_RATELIMIT_RESET, uint_value(reset));
        }
    }
}

/// The `RateLimit-Policy` value of `rules` (name and quota, in order). A layer makes the value
/// of all its rules once, when it is built.
pub(crate) fn policy<'a, I>(rules: I) -> HeaderValue
where
    I: IntoIterator<Item = (&'a str, &'a Quota)>,
    I::IntoIter: Clone,
{
    list(rules.into_iter().map(|(name, quota)| {
        let w = ceil_secs(quota.period()).max(1);
        (name, [("q", u64::from(quota.limit())), ("w", w)])
    }))
}

/// The `RateLimit-Policy` value of `decision`'s rules, with the quotas they were decided with.
pub(crate) fn decision_policy(decision: &Decision) -> HeaderValue {
    policy(windowed(decision).map(|r| (&*r.rule, &r.quota)))
}

fn state(decision: &Decision) -> HeaderValue {
    states(windowed(decision).map(|r| (&*r.rule, &r.state)))
}

/// The rules of `decision` the `RateLimit` headers name: all but the concurrency rules.
fn windowed(decision: &Decision) -> impl Iterator<Item = &RuleDecision> + Clone {
    decision.rules.iter().filter(|r| !r.lease)
}

/// The `RateLimit` value of the rules (name, state).
pub(crate) fn states<'a>(
    rules: impl Iterator<Item = (&'a str, &'a crate::rate_limit::RuleState)> + Clone,
) -> HeaderValue {
    let mut rest = rules.clone();
    if let (Some((name, state)), None) = (rest.next(), rest.next())
        && let Some(value) = one_state(name, state)
    {
        return value;
    }
    list(rules.map(|(name, state)| {
        let t = ceil_secs(state.reset_after);
        (name, [("r", u64::from(state.remaining)), ("t", t)])
    }))
}

/// The `RateLimit` value of one rule, `"name";r=1;t=2`, written on the stack and copied once
/// into the value (the usual single rule: no pass to measure it first). `None` when the name is
/// too long for the stack.
fn one_state(name: &str, state: &crate::rate_limit::RuleState) -> Option<HeaderValue> {
    let (mut r, mut t) = (itoa::Buffer::new(), itoa::Buffer::new());
    let parts: [&[u8]; 6] = [
        b"\"",
        name.as_bytes(),
        b"\";r=",
        r.format(state.remaining).as_bytes(),
        b";t=",
        t.format(ceil_secs(state.reset_after)).as_bytes(),
    ];
    let mut buf = [0; 128];
    let mut len = 0;
    for part in parts {
        buf.get_mut(len..len + part.len())?.copy_from_slice(part);
        len += part.len();
    }
    HeaderValue::from_bytes(&buf[..len]).ok()
}

/// A structured-field list of `"name";a=1;b=2` items, written into one buffer of its exact
/// length (this runs on every admitted request). Rule names are validated to be token
/// characters: they need no escaping, and the value is always valid.
fn list<'a, const N: usize>(
    items: impl Iterator<Item = (&'a str, [(&'static str, u64); N])> + Clone,
) -> HeaderValue {
    let len: usize = items
        .clone()
        .enumerate()
        .map(|(i, (name, params))| {
            let between = if i > 0 { 2 } else { 0 };
            let params: usize = params.iter().map(|(k, v)| 2 + k.len() + digits(*v)).sum();
            between + 2 + name.len() + params
        })
        .sum();
    let mut out = Vec::with_capacity(len);
    for (i, (name, params)) in items.enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        out.push(b'"');
        out.extend_from_slice(name.as_bytes());
        out.push(b'"');
        for (key, value) in params {
            out.push(b';');
            out.extend_from_slice(key.as_bytes());
            out.push(b'=');
            out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
        }
    }
    debug_assert_eq!(out.len(), len);
    HeaderValue::from_maybe_shared(Bytes::from(out))
        .unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// The last value written and its key, cloned when asked for the same key. Never waited for:
/// a writer that finds it busy writes its own.
#[derive(Debug)]
pub(crate) struct LastWritten<K, V>(Mutex<Option<(K, V)>>);

impl<K, V> Default for LastWritten<K, V> {
    fn default() -> Self {
        Self(Mutex::new(None))
    }
}

/// A clone starts with nothing written.
impl<K, V> Clone for LastWritten<K, V> {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl<K: PartialEq, V: Clone> LastWritten<K, V> {
    pub(crate) fn get_or(&self, key: K, write: impl FnOnce() -> V) -> V {
        let mut last = self.0.try_lock().ok();
        if let Some(Some((k, value))) = last.as_deref()
            && *k == key
        {
            return value.clone();
        }
        let value = write();
        if let Some(last) = last.as_deref_mut() {
            *last = Some((key, value.clone()));
        }
        value
    }
}

/// The last `RateLimit` value of a one-rule layer's admitted requests, by the rule's remaining
/// and reset (seconds). A client under its quota gets the same numbers request after request,
/// so their value is written once and shared. The numbers are kept on their first sight and
/// the value on the second: keeping a value costs a clone (an allocation the first time),
/// which numbers that change on every request (a client spending its burst) would pay for
/// nothing; they pay one atomic load and store. Never waited for: a writer that finds it busy
/// writes its own.
#[derive(Debug)]
pub(crate) struct LastState {
    /// The numbers of the last request, packed ([`LastState::pack`]); `u64::MAX`: none.
    seen: AtomicU64,
    value: LastWritten<u64, HeaderValue>,
}

impl Default for LastState {
    fn default() -> Self {
        let seen = AtomicU64::new(u64::MAX);
        let value = LastWritten::default();
        Self { seen, value }
    }
}

/// A clone starts with nothing seen.
impl Clone for LastState {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl LastState {
    /// The value for `remaining` and `reset` (seconds): the one kept, or `write`'s.
    #[inline]
    pub(crate) fn get_or(
        &self,
        remaining: u32,
        reset: u64,
        write: impl FnOnce() -> HeaderValue,
    ) -> HeaderValue {
        let Some(key) = Self::pack(remaining, reset) else {
            return write();
        };
        if self.seen.swap(key, Ordering::Relaxed) != key {
            return write();
        }
        // Seen twice in a row: kept from now on.
        self.value.get_or(key, write)
    }

    /// Both numbers in one word; `None` for a reset too far off to pack (and never `u64::MAX`).
    #[inline]
    fn pack(remaining: u32, reset: u64) -> Option<u64> {
        let reset = u32::try_from(reset).ok().filter(|r| *r < u32::MAX)?;
        Some(u64::from(remaining) << 32 | u64::from(reset))
    }
}

/// `n` as a header value, in one allocation of its exact length.
pub(crate) fn uint_value(n: u64) -> HeaderValue {
    HeaderValue::from_bytes(itoa::Buffer::new().format(n).as_bytes())
        .unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// `Retry-After` in whole seconds, rounded up, at least 1.
pub(crate) fn insert_retry_after(headers: &mut HeaderMap, secs: u64) {
    headers.insert(http::header::RETRY_AFTER, uint_value(secs.max(1)));
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn numbers_are_written_as_display_writes_them() {
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            12_345,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ]
        .into_iter()
        // Every length, odd and even, with every digit pair.
        .chain(0..=100_000)
        .chain((1..20).map(|e| 10u64.pow(e) - 1))
        .chain((1..20).map(|e| 10u64.pow(e) + 1))
        {
            assert_eq!(digits(n), n.to_string().len(), "{n}");
            assert_eq!(uint_value(n), n.to_string().as_str());
        }
    }

    #[test]
    fn one_rule_is_written_as_a_list_of_one() {
        let state = crate::rate_limit::RuleState::from_parts(true, 10, 7, 0, 2_500);
        for name in ["api", &"n".repeat(120)] {
            let one = states([(name, &state)].into_iter());
            assert_eq!(one, format!(r#""{name}";r=7;t=3"#).as_str());
            assert_eq!(one, list([(name, [("r", 7), ("t", 3)])].into_iter()));
        }
    }

    /// (Numbers seen twice sharing one value: `lean.rs`'
    /// `admitted_requests_with_the_same_numbers_share_their_value`.)
    #[test]
    fn a_reset_too_far_off_is_never_kept() {
        let last = LastState::default();
        let far = u64::from(u32::MAX);
        let value = || HeaderValue::from_bytes(b"c").unwrap();
        let kept: Vec<_> = (0..3).map(|_| last.get_or(7, far, value)).collect();
        let at = |i: usize| kept[i].as_bytes().as_ptr();
        assert_ne!(at(1), at(2), "written each time");
        assert_eq!(LastState::pack(u32::MAX, far - 1), Some(u64::MAX - 1));
    }

    #[test]
    fn lists_are_written_in_one_buffer_of_their_exact_length() {
        let minute = Quota::per_minute(100);
        let odd = Quota::new(7, Duration::from_millis(1500));
        assert_eq!(policy([("api", &minute)]), r#""api";q=100;w=60"#);
        assert_eq!(
            policy([("api", &minute), ("burst-2", &odd)]),
            r#""api";q=100;w=60, "burst-2";q=7;w=2"#
        );
        let none: [(&str, &Quota); 0] = [];
        assert_eq!(policy(none), "");
        assert_eq!(list([("a", []), ("b", [])].into_iter()), r#""a", "b""#);
        let max = [("m", [("r", u64::MAX), ("t", 0)])];
        assert_eq!(
            list(max.into_iter()),
            format!(r#""m";r={};t=0"#, u64::MAX).as_str()
        );
    }
}
