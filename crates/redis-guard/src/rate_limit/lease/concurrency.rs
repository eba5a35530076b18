//! Concurrency leases: [`Rule::concurrency`] and the [`Lease`] an admitted request holds.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::receipt::{Place, Receipt};
use crate::rate_limit::limiter::{LimiterError, LimiterFuture};
use crate::rate_limit::{Algorithm, Quota, Rule};
use crate::telemetry;

/// How long a lease lives without being released or renewed, unless
/// [`Rule::lease_expiry`] says otherwise.
pub(crate) const DEFAULT_LEASE_EXPIRY: Duration = Duration::from_secs(30);

impl Rule {
    /// A rule that limits **in-flight** requests per key, across every replica that shares the
    /// limiter: at most `max_in_flight` requests of one key are being served at once.
    ///
    /// An admitted request takes a lease before the inner service runs, decided in the same script
    /// call as the layer's other rules (all or nothing: a request another rule denies takes no
    /// lease, and one denied for want of a lease consumes no other quota). A
    /// [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) releases the lease when the response
    /// body ends or is dropped (the client went away), when the inner service fails, or when the
    /// response future is dropped before the response exists. While a long body streams and is
    /// polled, the layer renews the lease every third of its expiry. A lease that is never released
    /// (its replica crashed, or a body is never polled) expires after
    /// [`lease_expiry`](Self::lease_expiry) (default 30 s), so a dead replica cannot hold a key's
    /// slots for ever.
    ///
    /// A denied request gets `429` with `Retry-After: 1` (the time to the earliest lease's
    /// expiry when that is shorter): leases are usually released long before they expire, so
    /// the expiry is only an upper bound, and a client that retries after a second has a fair
    /// chance. A concurrency rule is left out of the `RateLimit` and `RateLimit-Policy`
    /// headers, whose IETF draft knows only quotas per time window.
    ///
    /// [`RedisLimiter::inspect`](crate::rate_limit::RedisLimiter::inspect) reports the leases free
    /// for a key as `remaining` (0 when denied), without taking one;
    /// [`RedisLimiter::reset`](crate::rate_limit::RedisLimiter::reset) drops every lease of the
    /// key. On Redis, a request with leases costs two script calls: the decision and the release.
    ///
    /// Each request takes one lease: the cost is 1. A cost of 0 (a probe:
    /// [`Check::with_cost`](crate::rate_limit::Check::with_cost)) asks whether a lease is free
    /// without taking one; any other cost, and [`with_cost_from`](Self::with_cost_from), are
    /// refused by [`validate`](Self::validate).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::rate_limit::{ClientIp, Key, MemoryLimiter, Quota, RateLimitLayer, Rule};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // At most 2 reports per client at once, beside a rate limit, in one layer:
    /// let layer = RateLimitLayer::builder(MemoryLimiter::new()) // RedisLimiter across replicas
    ///     .rule("api", ClientIp::peer(), Quota::per_minute(60))
    ///     .rule_with(Rule::concurrency("report", 2).lease_expiry(Duration::from_secs(10)), ClientIp::peer())
    ///     .build()?;
    /// # let _ = layer;
    ///
    /// // Direct calls: the decision holds the lease until it is dropped or released.
    /// let limiter = MemoryLimiter::new();
    /// let exports = Rule::concurrency("export", 1);
    /// let first = limiter.check(&exports, Key::from("alice")).await?;
    /// assert!(first.allowed && first.lease().is_some());
    /// assert!(!limiter.check(&exports, Key::from("alice")).await?.allowed);
    /// first.lease().expect("admitted").release().await?;
    /// assert!(limiter.check(&exports, Key::from("alice")).await?.allowed);
    /// # Ok(()) }
    /// ```
    pub fn concurrency(name: impl Into<Arc<str>>, max_in_flight: u32) -> Self {
        Self::new(name, Quota::new(max_in_flight, DEFAULT_LEASE_EXPIRY))
            .with_algorithm(Algorithm::Concurrency)
    }

    /// How long a lease of this concurrency rule lives unless released or renewed (default
    /// 30 s): the longest a crashed replica's leases keep their slots, and
    /// the longest a body that is never polled holds one. At least 1 ms (refused by
    /// [`validate`](Self::validate) otherwise). Keeps the rule's maximum in flight. A rule of
    /// another algorithm is returned unchanged: its period is its quota's.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::rate_limit::Rule;
    /// let rule = Rule::concurrency("report", 2).lease_expiry(Duration::from_secs(5));
    /// assert_eq!(rule.quota().period(), Duration::from_secs(5));
    /// assert_eq!(rule.quota().limit(), 2);
    /// assert!(rule.validate().is_ok());
    /// assert!(Rule::concurrency("report", 0).validate().is_err());
    /// assert!(Rule::concurrency("report", 2).lease_expiry(Duration::ZERO).validate().is_err());
    /// # use redis_guard::rate_limit::Quota;
    /// let rate = Rule::new("api", Quota::per_minute(60));
    /// assert_eq!(rate.clone().lease_expiry(Duration::from_secs(5)), rate);
    /// ```
    pub fn lease_expiry(self, expiry: Duration) -> Self {
        if !self.algorithm().is_lease() {
            return self;
        }
        let quota = Quota::new(self.quota().limit(), expiry);
        let algorithm = self.algorithm().clone();
        self.reshaped(quota, algorithm)
    }

    /// Why this concurrency rule cannot work, if it is one and cannot.
    pub(crate) fn lease_problem(&self, cost_from: bool) -> Option<&'static str> {
        if !self.algorithm().is_lease() {
            return None;
        }
        if self.quota().limit() == 0 {
            return Some("a concurrency rule needs a maximum in flight of at least 1");
        }
        if self.quota().period() < Duration::from_millis(1) {
            return Some("a concurrency rule needs a lease expiry of at least 1 ms");
        }
        if self.cost() > 1 || cost_from {
            return Some(
                "a concurrency rule takes one lease per request: its cost is 1 (or 0, a probe), never a cost function",
            );
        }
        None
    }
}

/// The concurrency leases one admitted request holds (see [`Rule::concurrency`]).
///
/// A [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) keeps its requests' leases itself. A
/// direct call ([`RedisLimiter::check_all`](crate::rate_limit::RedisLimiter::check_all)) hands them
/// to the caller inside the [`Decision`](crate::rate_limit::Decision)
/// ([`Decision::lease`](crate::rate_limit::Decision::lease)): they are released when
/// [`release`](Self::release) is called, or when the decision and all its clones are dropped (then
/// in a task spawned on the current Tokio runtime; without one, Redis leases are left to expire and
/// a line is logged at `warn`). A lease that outlives its expiry without a [`renew`](Self::renew)
/// is lost: another request may take its slot.
pub struct Lease {
    /// Taken out (emptied) by the first release.
    receipts: Mutex<Vec<Receipt>>,
    /// The shortest expiry of the leases.
    expiry: Duration,
}

impl Lease {
    /// The leases of `receipts`, or `None` when there are none.
    pub(crate) fn new(receipts: Vec<Receipt>) -> Option<Self> {
        let shortest = receipts.iter().map(Receipt::shortest_expiry_us).min()?;
        Some(Self {
            receipts: Mutex::new(receipts),
            expiry: Duration::from_micros(shortest),
        })
    }

    pub(crate) fn merge(a: Option<Self>, b: Option<Self>) -> Option<Self> {
        match (a, b) {
            (None, x) | (x, None) => x,
            (Some(a), Some(b)) => {
                let mut receipts = a.take();
                receipts.extend(b.take());
                Self::new(receipts)
            }
        }
    }

    fn take(&self) -> Vec<Receipt> {
        std::mem::take(&mut *self.receipts())
    }

    fn receipts(&self) -> MutexGuard<'_, Vec<Receipt>> {
        self.receipts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Releases the leases now (at most once: later calls, and the drop, do nothing).
    ///
    /// # Errors
    ///
    /// The store failed; the leases then expire on their own.
    pub fn release(&self) -> impl Future<Output = Result<(), LimiterError>> + Send + 'static {
        let calls: Vec<_> = self.take().iter().map(Receipt::release).collect();
        async move {
            let counted = !calls.is_empty();
            let outcome = each(calls).await;
            if counted {
                count_release(if outcome.is_ok() {
                    "released"
                } else {
                    "failed"
                });
            }
            outcome
        }
    }

    /// Renews the leases: each expires a full [`expiry`](Self::expiry) from now. `true` when
    /// every lease was still held (none had expired), `false` when one was lost or the leases
    /// were released.
    ///
    /// # Errors
    ///
    /// The store failed.
    pub fn renew(&self) -> impl Future<Output = Result<bool, LimiterError>> + Send + 'static {
        let (calls, count): (Vec<LimiterFuture<usize>>, usize) = {
            let receipts = self.receipts();
            let count = receipts.iter().map(Receipt::lease_count).sum();
            (receipts.iter().map(Receipt::renew).collect(), count)
        };
        async move {
            let mut renewed = 0;
            for call in calls {
                renewed += call.await?;
            }
            Ok(count > 0 && renewed == count)
        }
    }

    /// Whether a concurrency rule's lease is among them (not only receipts kept for settling
    /// the request after its response).
    pub(crate) fn holds_leases(&self) -> bool {
        self.receipts().iter().any(|r| r.lease_count() > 0)
    }

    /// Settles the request's rules after its response ([`Receipt::settle`]): every receipt's
    /// calls are made, the first error is returned.
    pub(crate) fn settle(&self, deltas: &[(Arc<str>, i64)]) -> LimiterFuture<()> {
        let calls: Vec<_> = self.receipts().iter().map(|r| r.settle(deltas)).collect();
        Box::pin(each(calls))
    }

    /// Settles in the background ([`settle`](Self::settle)): in process at once, on Redis in a
    /// spawned task (without a runtime the reservation stands, and a line is logged at `warn`).
    pub(crate) fn settle_detached(&self, deltas: &[(Arc<str>, i64)]) {
        let remote: Vec<_> = self
            .receipts()
            .iter()
            .filter_map(|r| {
                // In process the settlement is made here; its future is ready.
                let call = r.settle(deltas);
                matches!(r.place, Place::Redis(_)).then_some(call)
            })
            .collect();
        if !remote.is_empty() && !spawned(remote, warn_settle, |_| {}) {
            tracing::warn!(
                "a rate-limit settlement was dropped outside a Tokio runtime: the reservation stands"
            );
        }
    }

    /// How long the (shortest-lived) lease lives without a renewal.
    #[must_use]
    pub fn expiry(&self) -> Duration {
        self.expiry
    }

    /// Whether the leases were released.
    #[must_use]
    pub fn is_released(&self) -> bool {
        self.receipts().is_empty()
    }

    /// Releases in the background: in process at once, on Redis in a spawned task.
    pub(crate) fn release_detached(&self) {
        // A receipt kept only for settling has nothing to release.
        let receipts: Vec<_> = self
            .take()
            .into_iter()
            .filter(|r| r.lease_count() > 0)
            .collect();
        if receipts.is_empty() {
            return;
        }
        let mut remote = Vec::new();
        for receipt in receipts {
            if let Place::Memory(_) = receipt.place {
                // Synchronous: the future is ready.
                drop(receipt.release());
            } else {
                remote.push(receipt.release());
            }
        }
        if remote.is_empty() {
            count_release("released");
            return;
        }
        let done = |ok| count_release(if ok { "released" } else { "failed" });
        if !spawned(remote, warn_release, done) {
            count_release("abandoned");
            tracing::warn!(
                "a concurrency lease was dropped outside a Tokio runtime: it cannot be released and expires on its own"
            );
        }
    }
}

/// Awaits every one of `calls` (each is made): the first error.
async fn each(calls: Vec<LimiterFuture<()>>) -> Result<(), LimiterError> {
    let mut outcome = Ok(());
    for call in calls {
        if let Err(e) = call.await {
            outcome = outcome.and(Err(e));
        }
    }
    outcome
}

/// Makes the `remote` calls in a spawned task, each error told to `failed`, then `done` told
/// whether all went through; `false` when there is no runtime to spawn on.
fn spawned(remote: Vec<LimiterFuture<()>>, failed: fn(&LimiterError), done: fn(bool)) -> bool {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return false;
    };
    drop(runtime.spawn(async move {
        let mut ok = true;
        for call in remote {
            if let Err(e) = call.await {
                failed(&e);
                ok = false;
            }
        }
        done(ok);
    }));
    true
}

/// Counts one request's release under `result`.
fn count_release(result: &'static str) {
    telemetry::count(
        telemetry::Metric::RateLimitLeaseReleases,
        "result",
        result.into(),
        1,
    );
}

/// Logs a settlement that failed: the reservation stands.
pub(crate) fn warn_settle(e: &LimiterError) {
    tracing::warn!(
        error = %e,
        "settling the rate-limit cost after the response failed; the reservation stands"
    );
}

/// Logs a release that failed: the lease expires on its own.
pub(super) fn warn_release(e: &LimiterError) {
    tracing::warn!(error = %e, "releasing a concurrency lease failed; it expires on its own");
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.release_detached();
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("released", &self.is_released())
            .field("expiry", &self.expiry)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    //! Renewal on the Tokio clock (paused: it moves only when the test says), expiry on the
    //! limiter's manual clock.

    use std::convert::Infallible;
    use std::time::Duration;

    use bytes::Bytes;
    use http::{Request, Response};
    use http_body_util::BodyExt;
    use http_body_util::channel::Channel;
    use tokio::sync::mpsc;
    use tower::{Layer, ServiceExt, service_fn};

    use super::*;
    use crate::backend::ManualClock;
    use crate::rate_limit::{Global, MemoryLimiter, RateLimitLayer};

    #[tokio::test(start_paused = true)]
    async fn a_polled_stream_renews_its_lease() {
        #[cfg(feature = "metrics")]
        let metrics = crate::telemetry::testing::Captured::default();
        #[cfg(feature = "metrics")]
        let _guard = metrics::set_default_local_recorder(&metrics);
        let clock = ManualClock::new();
        let limiter = MemoryLimiter::builder().clock(clock.clone()).build();
        let layer = RateLimitLayer::builder(limiter)
            .rule_with(Rule::concurrency("stream", 1), Global)
            .build()
            .unwrap();
        let (feeds, mut fed) = mpsc::unbounded_channel();
        let svc = layer.layer(service_fn(move |_: Request<String>| {
            let (tx, body) = Channel::<Bytes>::new(1);
            feeds.send(tx).unwrap();
            async move { Ok::<_, Infallible>(Response::new(body)) }
        }));
        let send = |svc: &_| ServiceExt::oneshot(Clone::clone(svc), Request::new(String::new()));
        let status = |svc: &_| {
            let res = send(svc);
            async move {
                let res: Response<_> = res.await.unwrap();
                res.status().as_u16()
            }
        };
        // A stream that is polled (here: read to its end by a task) but idle for 50 s.
        let res = send(&svc).await.unwrap();
        let feed = fed.recv().await.unwrap();
        let reader = tokio::spawn(res.into_body().collect());
        // The lease clock and the Tokio clock move together.
        let pass = |secs| {
            clock.advance(Duration::from_secs(secs));
            tokio::time::sleep(Duration::from_secs(secs))
        };
        for _ in 0..5 {
            // Renewed every 10 s (a third of 30), the lease never reaches its expiry.
            pass(10).await;
            assert_eq!(status(&svc).await, 429, "the stream keeps its lease");
        }
        drop(feed);
        reader.await.unwrap().unwrap();
        assert_eq!(status(&svc).await, 200, "released at its end");
        // The stream's release, and that of the request just admitted (its body dropped).
        #[cfg(feature = "metrics")]
        assert_eq!(
            metrics.get(r#"redis_guard_rate_limit_lease_releases_total{result="released"}"#),
            2
        );
    }
}
