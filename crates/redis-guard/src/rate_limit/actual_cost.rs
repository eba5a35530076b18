//! [`ActualCost`]: the cost of a request as its response reports it.

use std::sync::Arc;

/// The real cost of a request, known once the handler has run (the tokens an answer used, the
/// rows an export wrote): put it in the **response's** extensions, and the
/// [`RateLimitLayer`](super::RateLimitLayer) settles each named rule that accepts it
/// ([`Rule::charged_after_response`](super::Rule::charged_after_response)): the difference from
/// what the rule took when it admitted the request is charged (whatever is left: the key may go
/// over its limit, and then waits until the debt is paid) or given back, in one more script call
/// before the response leaves. Rules it does not name keep what they took.
///
/// ```
/// use axum::{Extension, response::IntoResponse};
/// use redis_guard::rate_limit::ActualCost;
///
/// async fn complete() -> impl IntoResponse {
///     let used_tokens = 1234; // what the model reported
///     (Extension(ActualCost::of("tokens", used_tokens)), "…the answer…")
/// }
/// # let _ = complete;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActualCost {
    costs: Vec<(Arc<str>, u32)>,
}

impl ActualCost {
    /// `cost` units of rule `rule`.
    #[must_use]
    pub fn of(rule: impl Into<Arc<str>>, cost: u32) -> Self {
        Self::default().and(rule, cost)
    }

    /// Also `cost` units of rule `rule` (a later cost for the same rule replaces an earlier one).
    #[must_use]
    pub fn and(mut self, rule: impl Into<Arc<str>>, cost: u32) -> Self {
        let rule = rule.into();
        self.costs.retain(|(r, _)| *r != rule);
        self.costs.push((rule, cost));
        self
    }

    /// The cost reported for rule `rule`, if any.
    ///
    /// ```
    /// use redis_guard::rate_limit::ActualCost;
    /// let cost = ActualCost::of("tokens", 900).and("api", 2).and("tokens", 950);
    /// assert_eq!((cost.get("tokens"), cost.get("api"), cost.get("other")), (Some(950), Some(2), None));
    /// ```
    #[must_use]
    pub fn get(&self, rule: &str) -> Option<u32> {
        self.costs
            .iter()
            .find_map(|(r, c)| (**r == *rule).then_some(*c))
    }
}
