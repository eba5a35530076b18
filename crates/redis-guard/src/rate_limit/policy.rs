//! What the layer does when a key is missing or the limiter fails.

use http::StatusCode;

/// What to do with a request from which a rule's key cannot be extracted (no API-key header, no
/// logged-in user).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// Reject the request with this status (the default is `400 Bad Request`): a client cannot
    /// escape its limit by leaving the key out.
    Reject(StatusCode),
    /// Do not apply the rule to this request (other rules still apply). Use it when another layer
    /// guarantees the key, or when keyless requests are limited elsewhere.
    Skip,
}

impl Default for MissingKey {
    fn default() -> Self {
        Self::Reject(StatusCode::BAD_REQUEST)
    }
}

/// What to do when the limiter cannot decide (Redis down, slow, or answering nonsense).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Admit the request without a decision and log a warning (the default): a Redis outage
    /// does not take the application down with it.
    #[default]
    Open,
    /// Answer `503 Service Unavailable` with `Retry-After: 1`: for endpoints where an unlimited
    /// request is worse than none (login, SMS sending).
    Closed,
}
