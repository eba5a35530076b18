//! [`ActualCost`] and [`CostReport`]: the cost of a request as its handler reports it.

use std::sync::{Arc, Mutex, PoisonError};

/// The real cost of a request, known once the handler has run (the tokens an answer used, the
/// rows an export wrote): put it in the **response's** extensions, and the
/// [`RateLimitLayer`](super::RateLimitLayer) settles each named rule that accepts it
/// ([`Rule::charged_after_response`](super::Rule::charged_after_response)): the difference from
/// what the rule reserved when it admitted the request is charged (whatever is left: the key
/// may go over its limit, and then waits until the debt is paid) or given back, in one more
/// script call when the response body ends. Rules it does not name keep what they reserved. A
/// cost learnt while the body streams goes to the request's [`CostReport`] instead.
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

/// Where a handler reports the cost of its request while it works: for a cost known only as a
/// streamed body ends (the tokens of a streamed answer), or to have the work done so far
/// charged when the client goes away.
///
/// A [`RateLimitLayer`](super::RateLimitLayer) puts one in the **request's** extensions when
/// a rule may be settled ([`Rule::charged_after_response`](super::Rule::charged_after_response))
/// and the request was counted (not when the limiter failed and let it through, or no such
/// rule applied to it: take it as an `Option`); clone it into the body's stream and
/// [`report`](Self::report) before the body ends. The
/// layer reads it when the body ends (its last frame), when the body is dropped before its end,
/// or when the response future is dropped before there is a response: what was reported by
/// then is settled, and a rule nothing was reported for keeps its reservation. A cost reported
/// here replaces one that the response's [`ActualCost`] gives for the same rule.
///
/// ```
/// use std::convert::Infallible;
/// use axum::{Extension, body::Body};
/// use futures_util::stream::{self, StreamExt};
/// use redis_guard::rate_limit::CostReport;
///
/// async fn complete(report: Option<Extension<CostReport>>) -> Body {
///     let words = ["Hello", ", ", "world"]; // what the model streams, one token at a time
///     let answer = stream::iter(words.into_iter().zip(1u32..)).map(move |(word, used)| {
///         if let (Some(Extension(report)), 3) = (&report, used) {
///             report.report("tokens", used); // with the last token
///         }
///         Ok::<_, Infallible>(word)
///     });
///     Body::from_stream(answer)
/// }
/// # let _ = complete;
/// ```
#[derive(Clone, Debug)]
pub struct CostReport {
    cost: Arc<Mutex<ActualCost>>,
}

impl CostReport {
    pub(crate) fn new() -> Self {
        Self {
            cost: Arc::default(),
        }
    }

    /// Reports `cost` units of rule `rule` (a later report for the same rule replaces an
    /// earlier one).
    pub fn report(&self, rule: impl Into<Arc<str>>, cost: u32) {
        let mut reported = self.cost.lock().unwrap_or_else(PoisonError::into_inner);
        *reported = std::mem::take(&mut *reported).and(rule, cost);
    }

    /// What was reported so far.
    pub(crate) fn reported(&self) -> ActualCost {
        self.cost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
