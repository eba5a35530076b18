//! Requests admitted after a wait ([`Rule::throttle`](crate::rate_limit::Rule::throttle)): the
//! layer's bound on how many wait at once, and the reservation a waiter holds until its slot,
//! given back when the waiter goes away.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::rate_limit::decision::HeldLease;
use crate::rate_limit::{Decision, Lease, Mode, denying};
use crate::telemetry::{self, Metric};

/// How many requests of a layer may wait for their slot at once, by default
/// ([`RateLimitLayerBuilder::max_waiters`](crate::rate_limit::RateLimitLayerBuilder::max_waiters)).
pub(crate) const DEFAULT_MAX_WAITERS: usize = 1024;

/// The requests of one layer waiting for their slot, at most `max`.
#[derive(Debug)]
pub(crate) struct Waiters {
    max: usize,
    waiting: AtomicUsize,
}

impl Waiters {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            waiting: AtomicUsize::new(0),
        }
    }

    /// A place among the waiters, or `None` when `max` wait already.
    fn enter(self: &Arc<Self>) -> Option<Place> {
        self.waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Place(Arc::clone(self)))
    }

    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }
}

/// One waiter's place, left when dropped.
#[derive(Debug)]
struct Place(Arc<Waiters>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a waiting request holds until its slot: its place among the waiters and what it took,
/// given back (every enforced rule's cost) if it is dropped before [`Reservation::kept`].
#[derive(Debug)]
pub(crate) struct Reservation {
    _place: Place,
    taken: Option<Taken>,
}

/// The receipts of a throttled evaluation and the units it took per rule.
#[derive(Debug)]
struct Taken {
    lease: Arc<Lease>,
    deltas: Vec<(Arc<str>, i64)>,
}

impl Taken {
    /// What `decision` took (it holds the receipts), to give back; `None` when it holds none.
    fn of(decision: &Decision) -> Option<Self> {
        let lease = decision.lease.0.clone()?;
        let deltas = decision
            .rules
            .iter()
            .filter(|r| r.mode == Mode::Enforce && r.cost > 0)
            .map(|r| (Arc::clone(&r.rule), -i64::from(r.cost)))
            .collect();
        Some(Self { lease, deltas })
    }

    fn give_back(self) {
        self.lease.settle_detached(&self.deltas);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(taken) = self.taken.take() {
            tracing::debug!("a throttled request went away before its slot: its slot given back");
            taken.give_back();
        }
    }
}

impl Reservation {
    /// The slot came: nothing to give back.
    pub(crate) fn kept(mut self) {
        self.taken = None;
    }
}

/// The wait of an admitted `decision` when it has one (a throttled rule), and the reservation
/// to hold meanwhile. When `waiters` are full the decision becomes a denial by its throttled
/// rules (their `retry_after` the wait they offered), its slot given back at once: `None`, as
/// for a decision without a wait.
pub(crate) fn wait_for(
    waiters: &Arc<Waiters>,
    decision: &mut Decision,
) -> Option<(Duration, Reservation)> {
    let wait = decision.wait;
    if wait.is_zero() {
        return None;
    }
    let Some(place) = waiters.enter() else {
        tracing::debug!(
            rule = %decision.rule,
            wait_ms = wait.as_millis(),
            max_waiters = waiters.max,
            "rate limited: too many requests already wait for their slot"
        );
        if let Some(taken) = Taken::of(decision) {
            taken.give_back();
        }
        deny(decision);
        return None;
    };
    tracing::debug!(
        rule = %decision.rule,
        wait_ms = wait.as_millis(),
        "rate limit: waiting for the request's slot"
    );
    telemetry::observe(
        Metric::RateLimitThrottleWaitSeconds,
        "rule",
        (&decision.rule).into(),
        wait.as_secs_f64(),
    );
    let reservation = Reservation {
        _place: place,
        taken: Taken::of(decision),
    };
    Some((wait, reservation))
}

/// Turns an admitted-after-a-wait `decision` into a denial by its throttled rules, the one
/// with the longest wait binding.
fn deny(decision: &mut Decision) {
    for r in &mut decision.rules {
        if r.mode == Mode::Enforce && r.state.allowed && !r.state.retry_after.is_zero() {
            r.state.allowed = false;
        }
    }
    let states = decision.rules.iter().map(|r| &r.state).enumerate();
    if let Some(binding) = denying(states).map(|i| &decision.rules[i]) {
        decision.rule = Arc::clone(&binding.rule);
        decision.limit = binding.state.limit;
        decision.remaining = binding.state.remaining;
        decision.reset_after = binding.state.reset_after;
    }
    decision.allowed = false;
    decision.retry_after = decision.wait;
    decision.wait = Duration::ZERO;
    decision.lease = HeldLease::default();
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::super::response::tests::{collected, x_key};
    use super::*;
    use crate::backend::ManualClock;
    use crate::rate_limit::{MemoryLimiter, Quota, RateLimitLayer, RateLimitLayerBuilder, Rule};

    /// A layer of rule `api` (10 a second, burst 1: one slot every 100 ms) keyed by `x-key`,
    /// throttled up to `max_wait`, on a memory limiter whose clock stands still.
    fn api(max_wait: Duration) -> RateLimitLayerBuilder {
        let rule = Rule::new("api", Quota::per_second(10).burst(1)).throttle(max_wait);
        let limiter = MemoryLimiter::builder().clock(ManualClock::new()).build();
        RateLimitLayer::builder(limiter).rule_with(rule, x_key())
    }

    /// The gRPC answers ride on the same future: a throttled call is held until its slot, then
    /// the service answers; one past the max wait is `RESOURCE_EXHAUSTED` at once. Tokio's
    /// paused clock and the limiter's manual one make every time exact.
    #[tokio::test(start_paused = true)]
    async fn a_grpc_call_waits_for_its_slot_as_a_request_does() {
        let layer = api(Duration::from_millis(150)).grpc().build().unwrap();
        #[cfg(feature = "metrics")]
        let metrics = crate::telemetry::testing::Captured::default();
        #[cfg(feature = "metrics")]
        let _guard = metrics::set_default_local_recorder(&metrics);
        let start = Instant::now();
        assert_eq!(collected(&layer, Some("k")).await.body(), "ok");
        assert_eq!(start.elapsed(), Duration::ZERO);
        let held = collected(&layer, Some("k")).await;
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        assert_eq!(held.body(), "ok");
        assert!(
            held.headers().get("grpc-status").is_none(),
            "the service answered"
        );
        assert!(held.headers().get("ratelimit").is_some());
        // 200 ms away, past the 150 ms allowed.
        let denied = collected(&layer, Some("k")).await;
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        assert_eq!(denied.headers()["grpc-status"], "8");
        assert_eq!(layer.config.waiters.waiting(), 0);
        // One wait, in the histogram under the rule's name.
        #[cfg(feature = "metrics")]
        assert_eq!(
            metrics.get(r#"redis_guard_rate_limit_throttle_wait_seconds{rule="api"}"#),
            1
        );
    }

    /// No place left: the request is denied by its throttled rule, counted so, the wait it was
    /// offered as its `retry_after`, its slot given back (the next is offered the same wait).
    #[tokio::test(start_paused = true)]
    async fn past_the_bound_a_throttled_request_is_denied_at_once() {
        let layer = api(Duration::from_secs(1))
            .max_waiters(0)
            .extensions(true)
            .build()
            .unwrap();
        #[cfg(feature = "metrics")]
        let metrics = crate::telemetry::testing::Captured::default();
        #[cfg(feature = "metrics")]
        let _guard = metrics::set_default_local_recorder(&metrics);
        let start = Instant::now();
        assert_eq!(collected(&layer, Some("k")).await.status(), 200);
        for _ in 0..2 {
            let denied = collected(&layer, Some("k")).await;
            assert_eq!(denied.status(), 429);
            let rejection = denied.extensions().get::<crate::rate_limit::Rejection>();
            let decision = rejection.and_then(|r| r.decision()).unwrap();
            assert_eq!(decision.retry_after, Duration::from_millis(100));
            assert_eq!(&*decision.rule, "api");
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        #[cfg(feature = "metrics")]
        for (name, n) in [("allowed", 1), ("limited", 2)] {
            let series = format!("redis_guard_rate_limit_{name}_total{{rule=\"api\"}}");
            assert_eq!(metrics.get(&series), n, "{series}");
        }
    }
}
