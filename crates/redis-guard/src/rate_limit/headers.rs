//! The rate-limit response headers.
//!
//! `RateLimit-Policy` and `RateLimit` follow the IETF HTTPAPI draft "RateLimit header fields for
//! HTTP" (<https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/>), in its
//! structured-field form: one list item per rule, named by the rule:
//!
//! ```text
//! RateLimit-Policy: "api";q=100;w=60
//! RateLimit: "api";r=42;t=35
//! ```
//!
//! `q` is the limit, `w` the period in seconds, `r` the requests remaining now and `t` the seconds
//! until the quota is fully available again (both rounded up).
//!
//! Concurrency rules ([`Rule::concurrency`](super::Rule::concurrency)) are left out of both: the
//! draft knows only quotas per time window, and `q=2;w=30` would tell a client it may send two
//! requests per 30 s. A denial by one still carries `Retry-After`, and the legacy
//! `X-RateLimit-*` headers describe the binding rule, which may be a concurrency rule (its
//! limit, and the leases still free).

use http::{HeaderMap, HeaderName, HeaderValue};

use super::decision::ceil_secs;
use super::{Decision, Quota};

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit` (legacy).
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining` (legacy).
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset` (legacy): seconds until the quota is full again.
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
/// `RateLimit-Exceeded` (redis-guard's own, not in the IETF draft): the
/// [`Mode::Soft`](super::Mode::Soft) rules an admitted request went over, as a structured-field
/// list of rule names: `RateLimit-Exceeded: "api"`.
pub const RATELIMIT_EXCEEDED: HeaderName = HeaderName::from_static("ratelimit-exceeded");

/// The headers a decision adds to a response, computed before the response exists (an admitted
/// request's headers wait for the inner service): values only, no map of their own.
#[derive(Debug)]
pub(crate) struct RateLimitHeaders {
    /// `RateLimit-Policy` and `RateLimit`.
    ietf: Option<(HeaderValue, HeaderValue)>,
    /// `X-RateLimit-Limit`, `-Remaining` and `-Reset` of the binding rule.
    legacy: Option<(u32, u32, u64)>,
    /// `RateLimit-Exceeded`, when a soft rule was exceeded.
    exceeded: Option<HeaderValue>,
}

impl RateLimitHeaders {
    /// The headers for `decision`: the IETF pair when `policy` is given (the layer's value for
    /// the rules of `decision`), the legacy ones when `legacy`.
    /// No header at all for a decision of shadow rules only (the client sees none of them).
    pub(crate) fn new(decision: &Decision, policy: Option<HeaderValue>, legacy: bool) -> Self {
        let visible = !decision.rules.is_empty();
        let windowed = decision.rules.iter().any(|r| !r.lease);
        Self {
            ietf: policy
                .filter(|_| windowed)
                .map(|policy| (policy, state(decision))),
            exceeded: (!decision.exceeded.is_empty()).then(|| {
                list(&decision.exceeded, |out, name| {
                    out.push('"');
                    out.push_str(name);
                    out.push('"');
                })
            }),
            legacy: (legacy && visible).then(|| {
                (
                    decision.limit,
                    decision.remaining,
                    ceil_secs(decision.reset_after),
                )
            }),
        }
    }

    /// Writes the headers into `headers`, replacing those of the same names.
    pub(crate) fn insert(self, headers: &mut HeaderMap) {
        if let Some((policy, state)) = self.ietf {
            headers.insert(RATELIMIT_POLICY, policy);
            headers.insert(RATELIMIT, state);
        }
        if let Some(exceeded) = self.exceeded {
            headers.insert(RATELIMIT_EXCEEDED, exceeded);
        }
        if let Some((limit, remaining, reset)) = self.legacy {
            headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(limit));
            headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(remaining));
            headers.insert(X_RATELIMIT_RESET, HeaderValue::from(reset));
        }
    }
}

/// The `RateLimit-Policy` value of `rules` (name and quota, in order). A layer makes the value
/// of all its rules once, when it is built.
pub(crate) fn policy<'a>(rules: impl IntoIterator<Item = (&'a str, &'a Quota)>) -> HeaderValue {
    list(rules, |out, (name, quota)| {
        let w = ceil_secs(quota.period()).max(1);
        item(out, name, [("q", u64::from(quota.limit())), ("w", w)]);
    })
}

/// The `RateLimit` value of `decision`.
fn state(decision: &Decision) -> HeaderValue {
    list(decision.rules.iter().filter(|r| !r.lease), |out, r| {
        let t = ceil_secs(r.state.reset_after);
        item(
            out,
            &r.rule,
            [("r", u64::from(r.state.remaining)), ("t", t)],
        );
    })
}

/// A structured-field list: `write` each item into one buffer, `, ` between items. Rule names
/// are validated to be token characters, so they need no escaping inside the quoted strings and
/// the value is always a valid header value (the empty fallback is never used).
fn list<T>(
    items: impl IntoIterator<Item = T>,
    mut write: impl FnMut(&mut String, T),
) -> HeaderValue {
    let mut out = String::with_capacity(64);
    for (i, it) in items.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write(&mut out, it);
    }
    HeaderValue::try_from(out).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `"name";a=1;b=2`.
fn item(out: &mut String, name: &str, params: [(&str, u64); 2]) {
    use std::fmt::Write;
    out.push('"');
    out.push_str(name);
    out.push('"');
    for (key, value) in params {
        out.push(';');
        out.push_str(key);
        out.push('=');
        // Writing into a `String` cannot fail.
        let _ = write!(out, "{value}");
    }
}

/// `Retry-After` in whole seconds, rounded up, at least 1.
pub(crate) fn insert_retry_after(headers: &mut HeaderMap, secs: u64) {
    headers.insert(http::header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
}
