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

use http::{HeaderMap, HeaderName, HeaderValue};

use super::Decision;
use super::decision::ceil_secs;

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

/// Writes the IETF headers for `decision` (rule names are validated to be token characters,
/// so they need no escaping inside the quoted strings).
pub(crate) fn insert_ietf(headers: &mut HeaderMap, decision: &Decision) {
    let policy = decision
        .rules
        .iter()
        .map(|r| {
            format!(
                "\"{}\";q={};w={}",
                r.rule,
                r.quota.limit(),
                ceil_secs(r.quota.period()).max(1)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let state = decision
        .rules
        .iter()
        .map(|r| {
            format!(
                "\"{}\";r={};t={}",
                r.rule,
                r.state.remaining,
                ceil_secs(r.state.reset_after)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    for (name, value) in [(RATELIMIT_POLICY, policy), (RATELIMIT, state)] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
        }
    }
}

/// Writes the legacy `X-RateLimit-*` headers for the binding rule.
pub(crate) fn insert_legacy(headers: &mut HeaderMap, decision: &Decision) {
    headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(decision.limit));
    headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(decision.remaining));
    headers.insert(
        X_RATELIMIT_RESET,
        HeaderValue::from(ceil_secs(decision.reset_after)),
    );
}

/// `Retry-After` in whole seconds, rounded up, at least 1.
pub(crate) fn insert_retry_after(headers: &mut HeaderMap, secs: u64) {
    headers.insert(http::header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
}
