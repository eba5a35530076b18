//! Costs settled after the response: the rules that accept it
//! ([`Rule::charged_after_response`], [`Rule::refund_when`]), and what a handler reports
//! ([`ActualCost`], [`CostReport`]).

use std::sync::{Arc, Mutex, PoisonError};

use crate::rate_limit::Rule;
use crate::rate_limit::rule::Shared;

impl Rule {
    /// Lets the response settle the rule's cost in a
    /// [`RateLimitLayer`](crate::rate_limit::RateLimitLayer), for costs known only after the work:
    /// the tokens an LLM answer used, the rows an export wrote. The rule's cost
    /// ([`with_cost`](Self::with_cost) or [`with_cost_from`](Self::with_cost_from)) is then a
    /// **reservation**: a request is admitted only if it fits in what the key has left, and takes
    /// it up front, all or nothing with its other rules, so at most as many requests run at once as
    /// reservations fit. What the handler reports ([`ActualCost`](crate::rate_limit::ActualCost) in
    /// the response's extensions, or the request's [`CostReport`](crate::rate_limit::CostReport)
    /// while the body streams) settles the difference in one more script call: charged whatever is
    /// left (the key may go over its limit and then waits until the debt is paid) or given back.
    ///
    /// The layer settles when the response body ends, before its end reaches the client (so
    /// the client's next request sees the settled state), or, in a task of its own, when the
    /// body is dropped before its end or the response future is dropped before there is a
    /// response (the client went away). Then what was reported by then is settled; a rule with
    /// nothing reported keeps its reservation.
    ///
    /// Reserve what a typical request costs: too small lets that many more run at once on what
    /// is left, too large denies requests that would fit. A constant cost of 0 reserves nothing
    /// (every concurrent request would pass on one unit left), so [`validate`](Self::validate)
    /// refuses it (a [`ConfigErrorKind::Cost`](crate::ConfigErrorKind::Cost) error); a cost function may still answer 0 for
    /// requests that are free.
    ///
    /// Only enforced rules are settled ([`Mode::Enforce`](crate::rate_limit::Mode::Enforce): a
    /// shadow or soft rule keeps its reservation), and only rules of the built-in algorithms (a
    /// custom one keeps it too). A settlement that fails (Redis down) is logged at `warn` and
    /// leaves the reservation standing; the response is sent all the same. The `RateLimit` header
    /// of the response shows the state after the reservation. The token bucket keeps no debt below
    /// empty: a charge beyond what is left empties it; GCRA and the window algorithms keep all of
    /// it.
    ///
    /// ```
    /// use redis_guard::rate_limit::{ActualCost, ClientIp, MemoryLimiter, Quota, RateLimitLayer, Rule};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // 100k tokens a minute per client; each answer reserves 2k and is charged what it used.
    /// let tokens = Rule::new("tokens", Quota::per_minute(100_000))
    ///     .with_cost(2_000)
    ///     .charged_after_response();
    /// let layer = RateLimitLayer::builder(MemoryLimiter::new())
    ///     .rule_with(tokens, ClientIp::peer())
    ///     .build()?;
    /// // The handler answers with `Extension(ActualCost::of("tokens", used))`, or reports through
    /// // the request's `CostReport` while its body streams.
    /// # let _ = (layer, ActualCost::of("tokens", 1));
    /// let nothing = Rule::new("tokens", Quota::per_minute(100_000)).with_cost(0);
    /// assert!(nothing.charged_after_response().validate().is_err());
    /// # Ok(()) }
    /// ```
    pub fn charged_after_response(mut self) -> Self {
        self.after_response = true;
        self
    }

    /// Gives the request's whole cost back when the response's status matches `refund`, e.g.
    /// `StatusCode::is_server_error`: a failure of the service should not cost the client its
    /// quota. Settled as [`charged_after_response`](Self::charged_after_response) is (one more
    /// script call when the body ends, enforced rules of the built-in algorithms); a refund wins
    /// over a reported [`ActualCost`](crate::rate_limit::ActualCost). A request without a response
    /// (its future dropped, the inner service failed) is not refunded.
    ///
    /// ```
    /// use http::StatusCode;
    /// use redis_guard::rate_limit::{Quota, Rule};
    /// let api = Rule::new("api", Quota::per_minute(60)).refund_when(StatusCode::is_server_error);
    /// assert!(api.settles_after_response());
    /// ```
    pub fn refund_when<F>(mut self, refund: F) -> Self
    where
        F: Fn(&http::StatusCode) -> bool + Send + Sync + 'static,
    {
        self.refund_when = Some(Shared(Arc::new(refund)));
        self
    }

    /// Whether the response may settle the rule's cost
    /// ([`charged_after_response`](Self::charged_after_response) or
    /// [`refund_when`](Self::refund_when)).
    #[must_use]
    pub fn settles_after_response(&self) -> bool {
        self.after_response || self.refund_when.is_some()
    }

    /// What the response `status` (`None`: there was no response) and the `actual` cost
    /// reported for this rule change of `charged`, the cost it took: units to charge more
    /// (positive) or to give back (negative).
    pub(crate) fn settlement(
        &self,
        status: Option<http::StatusCode>,
        actual: Option<u32>,
        charged: u32,
    ) -> i64 {
        if let (Some(refund), Some(status)) = (&self.refund_when, status)
            && (refund.0)(&status)
        {
            return -i64::from(charged);
        }
        match actual {
            Some(cost) if self.after_response => i64::from(cost) - i64::from(charged),
            _ => 0,
        }
    }
}

/// The real cost of a request, known once the handler has run: put it in the **response's**
/// extensions, and the [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) settles each named
/// rule that accepts it as
/// [`Rule::charged_after_response`](crate::rate_limit::Rule::charged_after_response) describes.
/// Rules it does not name keep what they reserved. A cost learnt while the body streams goes to
/// the request's [`CostReport`] instead.
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
/// A [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) puts one in the **request's** extensions
/// when a rule may be settled
/// ([`Rule::charged_after_response`](crate::rate_limit::Rule::charged_after_response), which says
/// when) and the request was counted (not when the limiter failed and let it through, or no such
/// rule applied to it: take it as an `Option`); clone it into the body's stream and
/// [`report`](Self::report) before the body ends. A cost reported here replaces one that the
/// response's [`ActualCost`] gives for the same rule.
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

    pub(crate) fn reported(&self) -> ActualCost {
        self.cost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
