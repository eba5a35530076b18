//! [`RuleState`]: what one rule says about one request.

use std::time::Duration;

/// What one rule says about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleState {
    /// Whether this rule admits the request.
    pub allowed: bool,
    /// The rule's limit (requests per period).
    pub limit: u32,
    /// Requests (cost units) still admitted right now, after this one if it was admitted.
    pub remaining: u32,
    /// When denied, how long until the request would be admitted; when admitted, zero, or the
    /// wait before its reserved slot ([`Rule::throttle`](crate::rate_limit::Rule::throttle)).
    pub retry_after: Duration,
    /// How long until the rule's quota is fully available again.
    pub reset_after: Duration,
}

impl RuleState {
    /// Builds a state from the integer reply both backends produce.
    pub(crate) fn from_parts(
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry_after_ms: u64,
        reset_after_ms: u64,
    ) -> Self {
        Self {
            allowed,
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
            retry_after: Duration::from_millis(retry_after_ms),
            reset_after: Duration::from_millis(reset_after_ms),
        }
    }
}
