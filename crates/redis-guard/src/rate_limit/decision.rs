//! What the limiter decided, as handlers and response builders see it.

use std::sync::Arc;
use std::time::Duration;

use super::{Quota, RuleState};

/// One rule's verdict within a [`Decision`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuleDecision {
    /// The rule's name.
    pub rule: Arc<str>,
    /// The rule's quota.
    pub quota: Quota,
    /// What the rule said.
    pub state: RuleState,
}

/// The outcome of rate limiting one request, inserted into the request extensions when the
/// request is admitted, and handed to the response builder when it is not.
///
/// The top-level fields describe the *binding* rule: the denying rule with the longest
/// `retry_after` when denied, the rule with the fewest remaining requests when admitted.
///
/// ```
/// # use redis_guard::rate_limit::Decision;
/// async fn handler(decision: Option<axum::Extension<Decision>>) -> String {
///     match decision {
///         Some(axum::Extension(d)) => format!("{} left under {}", d.remaining, d.rule),
///         None => "not limited".to_owned(),
///     }
/// }
/// # let _ = handler;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// The binding rule's name.
    pub rule: Arc<str>,
    /// The binding rule's limit.
    pub limit: u32,
    /// Requests still admitted under the binding rule.
    pub remaining: u32,
    /// When denied, how long the client must wait; zero when admitted.
    pub retry_after: Duration,
    /// How long until the binding rule's quota is fully available again.
    pub reset_after: Duration,
    /// Every evaluated rule, in the layer's order.
    pub rules: Vec<RuleDecision>,
}

impl Decision {
    /// Combines per-rule verdicts. `rules` must not be empty.
    pub(crate) fn combine(rules: Vec<RuleDecision>) -> Option<Self> {
        let allowed = rules.iter().all(|r| r.state.allowed);
        let binding = if allowed {
            rules.iter().min_by(|a, b| {
                a.state
                    .remaining
                    .cmp(&b.state.remaining)
                    .then(b.state.reset_after.cmp(&a.state.reset_after))
            })
        } else {
            rules
                .iter()
                .filter(|r| !r.state.allowed)
                .max_by_key(|r| r.state.retry_after)
        }?;
        let (rule, state) = (binding.rule.clone(), binding.state);
        Some(Self {
            allowed,
            rule,
            limit: state.limit,
            remaining: state.remaining,
            retry_after: state.retry_after,
            reset_after: state.reset_after,
            rules,
        })
    }

    /// `Retry-After` in whole seconds: rounded up, at least 1.
    #[must_use]
    pub fn retry_after_secs(&self) -> u64 {
        ceil_secs(self.retry_after).max(1)
    }
}

pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}
