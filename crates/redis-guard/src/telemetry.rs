//! What redis-guard reports: `tracing` events and spans, and metrics through the
//! [`metrics`](https://docs.rs/metrics) facade (cargo feature `metrics`, on by default).
//!
//! redis-guard only records; the application installs a recorder (an exporter) to collect, e.g.
//! `metrics-exporter-prometheus`, as the axum example does for `GET /metrics`. Without one,
//! recording costs a lookup of the global recorder and nothing more; a rate-limit decision then
//! reads no clock either. (The facade's no-op recorder, in place while none is installed, is
//! told apart by its size: a zero-sized recorder of your own gets no rate-limit decisions.) Names and labels are fixed
//! and documented on [`Metric`], so dashboards and alerts can rely on them.
//!
//! **Cardinality is bounded**: labels are rule names (chosen in code, at most 64 characters),
//! key prefixes, operation names and fixed outcome words; never a client key, an IP address, a
//! user or a session id.
//!
//! Every metric is a [`Metric`]: [`Metric::name`] is the name an exporter shows and
//! [`Metric::ALL`] lists them all; the table on [`Metric`] gives each one's kind, labels and
//! meaning.
//!
//! # Rate limiting
//!
//! Decisions of a [`RateLimitLayer`] and of direct [`RedisLimiter::check`] calls (a login handler's
//! rules) are counted alike. Each rule counts its own verdict: a request that rule `a` admits and rule `b` denies adds one
//! to `allowed{rule="a"}` and one to `limited{rule="b"}`; the request is answered `429`. A
//! decision of the fallback counts as allowed or limited too, and once more under
//! `fallback_decisions`. The latency histogram gets one sample per request under each rule the
//! request was evaluated against: the time from the start of the evaluation to the decision,
//! including a fallback's decision after a failure.
//!
//! # Backend (labels `prefix`, the backend's key prefix, and `master`)
//!
//! One circuit guards a single Redis (`master="0"`); on a Redis Cluster each master has its own,
//! numbered in the order `CLUSTER SLOTS` listed them when the connection was made, so a dead
//! master opens only its own circuit.
//!
//! # Tracing
//!
//! Events use the targets `redis_guard::…`: `debug` for every denial (rule, retry-after), `warn`
//! for failures (at most one line every 10 s per layer, with a count) and circuit
//! changes, `info` when the circuit closes. Each rate-limit evaluation runs in a `debug` span
//! `rate_limit` with the rule count, so a subscriber at `debug` ties the Redis call's events to
//! the request.
//!
//! [`RateLimitLayer`]: crate::rate_limit::RateLimitLayer
//! [`RedisLimiter::check`]: crate::rate_limit::RedisLimiter::check
//! [`Mode::Shadow`]: crate::rate_limit::Mode::Shadow
//! [`Mode::Soft`]: crate::rate_limit::Mode::Soft
//! [`FailurePolicy::Fallback`]: crate::rate_limit::FailurePolicy::Fallback

#![cfg_attr(
    not(feature = "rate-limit"),
    allow(rustdoc::broken_intra_doc_links, dead_code)
)]

use std::fmt;

/// A metric redis-guard records (cargo feature `metrics`), by the name an exporter shows.
///
/// | name | kind | labels | what |
/// |---|---|---|---|
/// | [`redis_guard_rate_limit_allowed_total`](Self::RateLimitAllowed) | counter | `rule` | requests the rule admitted |
/// | [`redis_guard_rate_limit_limited_total`](Self::RateLimitLimited) | counter | `rule` | requests an enforced rule denied (answered `429`) |
/// | [`redis_guard_rate_limit_shadow_limited_total`](Self::RateLimitShadowLimited) | counter | `rule` | requests a [`Mode::Shadow`](crate::rate_limit::Mode::Shadow) rule would have denied (admitted) |
/// | [`redis_guard_rate_limit_soft_limited_total`](Self::RateLimitSoftLimited) | counter | `rule` | requests over a [`Mode::Soft`](crate::rate_limit::Mode::Soft) rule's limit (admitted with `RateLimit-Exceeded`) |
/// | [`redis_guard_rate_limit_backend_errors_total`](Self::RateLimitBackendErrors) | counter | `rule` | requests the limiter could not decide (the failure policy answered) |
/// | [`redis_guard_rate_limit_fallback_decisions_total`](Self::RateLimitFallbackDecisions) | counter | `rule` | decisions made in process by [`FailurePolicy::Fallback`](crate::rate_limit::FailurePolicy::Fallback) |
/// | [`redis_guard_rate_limit_deny_cache_hits_total`](Self::RateLimitDenyCacheHits) | counter | `rule` | denials answered from the deny cache, without Redis |
/// | [`redis_guard_rate_limit_decision_seconds`](Self::RateLimitDecisionSeconds) | histogram | `rule` | time to decide a request |
/// | [`redis_guard_rate_limit_throttle_wait_seconds`](Self::RateLimitThrottleWaitSeconds) | histogram | `rule` (the binding rule) | how long a layer holds a request admitted after a wait ([`Rule::throttle`](crate::rate_limit::Rule::throttle)) before calling the handler |
/// | [`redis_guard_rate_limit_lease_releases_total`](Self::RateLimitLeaseReleases) | counter | `result` = `released`, `failed` (the store failed: the lease expires), `abandoned` (dropped outside a Tokio runtime: it expires) | releases of a request's [concurrency leases](crate::rate_limit::Rule::concurrency) |
/// | [`redis_guard_breaker_state`](Self::BreakerState) | gauge | `prefix`, `master` | `0` closed, `1` half-open (a probe is out), `2` open |
/// | [`redis_guard_breaker_opened_total`](Self::BreakerOpened) | counter | `prefix`, `master` | times the circuit opened |
/// | [`redis_guard_session_loads_total`](Self::SessionLoads) | counter | `result` = `live`, `absent` | session loads |
/// | [`redis_guard_session_saves_total`](Self::SessionSaves) | counter | `result` = `merged`, `created`, `gone` | writes: changed fields merged into the stored session (concurrent writes to other fields kept), a new session, or dropped because the session had ended (never resurrected) |
/// | [`redis_guard_session_revocations_total`](Self::SessionRevocations) | counter | `kind` = `destroy`, `rotate`, `user`, `session`, `others` | sessions ended: logout, id rotation, "log out everywhere", one device revoked, "log out everywhere else" (one per session ended) |
/// | [`redis_guard_session_store_errors_total`](Self::SessionStoreErrors) | counter | `op` = `load`, `create`, `save`, `increment`, `delete`, `rotate`, `index`, `revoke`, `list`, `take`, `ensure`, `compare_and_set` | store calls that failed |
/// | [`redis_guard_cache_responses_total`](Self::CacheResponses) | counter | `result` = `hit`, `stale`, `fallback`, `revalidated`, `miss` | responses of the requests the cache looked up, as their `x-cache` header says: stored and fresh, stored and served while one request refreshes it, stored and served in place of a handler that failed or was too slow or of a softly purged entry (`x-cache: STALE`, `Cache-Status: …; fwd=stale`), stored and confirmed by the handler's `304` (`x-cache: REVALIDATED`), or computed by the handler (the hit ratio is `hit / (hit + stale + fallback + revalidated + miss)`); requests the cache does not look up (unsafe methods, credentials) are not counted |
///
/// ```
/// use redis_guard::telemetry::Metric;
///
/// assert_eq!(Metric::RateLimitLimited.name(), "redis_guard_rate_limit_limited_total");
/// // e.g. describe every metric to the exporter once, at start:
/// for metric in Metric::ALL {
///     assert!(metric.name().starts_with("redis_guard_"));
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Metric {
    /// Counter `redis_guard_rate_limit_allowed_total`: requests the rule admitted.
    RateLimitAllowed,
    /// Counter `redis_guard_rate_limit_limited_total`: requests an enforced rule denied.
    RateLimitLimited,
    /// Counter `redis_guard_rate_limit_shadow_limited_total`: requests a shadow rule would
    /// have denied.
    RateLimitShadowLimited,
    /// Counter `redis_guard_rate_limit_soft_limited_total`: requests over a soft rule's limit.
    RateLimitSoftLimited,
    /// Counter `redis_guard_rate_limit_backend_errors_total`: requests the limiter could not
    /// decide.
    RateLimitBackendErrors,
    /// Counter `redis_guard_rate_limit_fallback_decisions_total`: decisions made by the
    /// in-process fallback.
    RateLimitFallbackDecisions,
    /// Counter `redis_guard_rate_limit_deny_cache_hits_total`: denials answered from the deny
    /// cache.
    RateLimitDenyCacheHits,
    /// Counter `redis_guard_rate_limit_lease_releases_total`: releases of a request's
    /// concurrency leases, by `result`.
    RateLimitLeaseReleases,
    /// Histogram `redis_guard_rate_limit_decision_seconds` (seconds): time to decide a request.
    RateLimitDecisionSeconds,
    /// Histogram `redis_guard_rate_limit_throttle_wait_seconds` (seconds): how long a layer
    /// holds a throttled request before calling the handler.
    RateLimitThrottleWaitSeconds,
    /// Gauge `redis_guard_breaker_state`: the circuit breaker's state (0 closed, 1 half-open,
    /// 2 open).
    BreakerState,
    /// Counter `redis_guard_breaker_opened_total`: times the circuit opened.
    BreakerOpened,
    /// Counter `redis_guard_session_loads_total`: session loads.
    SessionLoads,
    /// Counter `redis_guard_session_saves_total`: session writes.
    SessionSaves,
    /// Counter `redis_guard_session_revocations_total`: sessions ended.
    SessionRevocations,
    /// Counter `redis_guard_session_store_errors_total`: session store calls that failed.
    SessionStoreErrors,
    /// Counter `redis_guard_cache_responses_total`: responses of requests the response cache
    /// looked up, by where they came from.
    CacheResponses,
}

impl Metric {
    /// Every metric, in the order of the table above.
    pub const ALL: &'static [Self] = &[
        Self::RateLimitAllowed,
        Self::RateLimitLimited,
        Self::RateLimitShadowLimited,
        Self::RateLimitSoftLimited,
        Self::RateLimitBackendErrors,
        Self::RateLimitFallbackDecisions,
        Self::RateLimitDenyCacheHits,
        Self::RateLimitLeaseReleases,
        Self::RateLimitDecisionSeconds,
        Self::RateLimitThrottleWaitSeconds,
        Self::BreakerState,
        Self::BreakerOpened,
        Self::SessionLoads,
        Self::SessionSaves,
        Self::SessionRevocations,
        Self::SessionStoreErrors,
        Self::CacheResponses,
    ];

    /// The name the metric is recorded under, as an exporter shows it.
    ///
    /// ```
    /// use redis_guard::telemetry::Metric;
    /// assert_eq!(Metric::BreakerState.name(), "redis_guard_breaker_state");
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::RateLimitAllowed => "redis_guard_rate_limit_allowed_total",
            Self::RateLimitLimited => "redis_guard_rate_limit_limited_total",
            Self::RateLimitShadowLimited => "redis_guard_rate_limit_shadow_limited_total",
            Self::RateLimitSoftLimited => "redis_guard_rate_limit_soft_limited_total",
            Self::RateLimitBackendErrors => "redis_guard_rate_limit_backend_errors_total",
            Self::RateLimitFallbackDecisions => "redis_guard_rate_limit_fallback_decisions_total",
            Self::RateLimitDenyCacheHits => "redis_guard_rate_limit_deny_cache_hits_total",
            Self::RateLimitLeaseReleases => "redis_guard_rate_limit_lease_releases_total",
            Self::RateLimitDecisionSeconds => "redis_guard_rate_limit_decision_seconds",
            Self::RateLimitThrottleWaitSeconds => "redis_guard_rate_limit_throttle_wait_seconds",
            Self::BreakerState => "redis_guard_breaker_state",
            Self::BreakerOpened => "redis_guard_breaker_opened_total",
            Self::SessionLoads => "redis_guard_session_loads_total",
            Self::SessionSaves => "redis_guard_session_saves_total",
            Self::SessionRevocations => "redis_guard_session_revocations_total",
            Self::SessionStoreErrors => "redis_guard_session_store_errors_total",
            Self::CacheResponses => "redis_guard_cache_responses_total",
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The labels of a circuit breaker's metrics: the backend's prefix and the master's index.
#[derive(Clone, Debug)]
pub(crate) struct Labels(#[cfg(feature = "metrics")] [(&'static str, metrics::SharedString); 2]);

impl Labels {
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn breaker(prefix: &std::sync::Arc<str>, master: usize) -> Self {
        Self(
            #[cfg(feature = "metrics")]
            [
                (
                    "prefix",
                    metrics::SharedString::from(std::sync::Arc::clone(prefix)),
                ),
                ("master", metrics::SharedString::from(master.to_string())),
            ],
        )
    }
}

/// Defines each recorder twice: as written with the `metrics` feature, and as doing nothing
/// without it (so callers never need a `cfg` of their own).
macro_rules! recorders {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $body:block)*) => {$(
        $(#[$doc])*
        #[cfg(feature = "metrics")]
        pub(crate) fn $name($($arg: $ty),*) $body

        #[cfg(not(feature = "metrics"))]
        #[allow(unused_variables, clippy::needless_pass_by_value)]
        pub(crate) fn $name($($arg: $ty),*) {}
    )*};
}

recorders! {
    /// Adds `n` to counter `metric` with one label.
    fn count(metric: Metric, label: &'static str, value: Label, n: u64) {
        metrics::counter!(metric.name(), label => value.0).increment(n);
    }

    /// Records `seconds` in histogram `metric` with one label.
    fn observe(metric: Metric, label: &'static str, value: Label, seconds: f64) {
        metrics::histogram!(metric.name(), label => value.0).record(seconds);
    }

    /// Adds `n` to counter `metric` with `labels`.
    fn count_with(metric: Metric, labels: Labels, n: u64) {
        let [(k1, v1), (k2, v2)] = labels.0;
        metrics::counter!(metric.name(), k1 => v1, k2 => v2).increment(n);
    }

    /// Sets gauge `metric` with `labels`.
    fn set_with(metric: Metric, labels: Labels, to: f64) {
        let [(k1, v1), (k2, v2)] = labels.0;
        metrics::gauge!(metric.name(), k1 => v1, k2 => v2).set(to);
    }
}

/// Times a decision for [`Metric::RateLimitDecisionSeconds`]: reads the clock only when the
/// `metrics` feature is there to record it and a recorder is in place (the in-process limiter's
/// path has nothing else to read the clock for); off, the layer records nothing of the
/// decision.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stopwatch(#[cfg(feature = "metrics")] Option<std::time::Instant>);

/// Whether a recorder is in place (this thread's local one, or the global one): the facade's
/// no-op recorder, the one in place when none is installed, is the only zero-sized one an
/// application meets, so a request that finds it records nothing and reads no clock.
#[cfg(feature = "metrics")]
pub(crate) fn recording() -> bool {
    metrics::with_recorder(|r| std::mem::size_of_val(r) != 0)
}

#[cfg(feature = "metrics")]
impl Stopwatch {
    /// Started when a recorder is in place, else off (nothing to time).
    pub(crate) fn start() -> Self {
        Self(recording().then(std::time::Instant::now))
    }

    pub(crate) fn elapsed(self) -> std::time::Duration {
        self.0.map(|started| started.elapsed()).unwrap_or_default()
    }

    /// Whether a recorder was in place when it started: the decision is recorded.
    pub(crate) fn on(self) -> bool {
        self.0.is_some()
    }
}

#[cfg(not(feature = "metrics"))]
impl Stopwatch {
    pub(crate) fn start() -> Self {
        Self()
    }

    #[allow(clippy::unused_self)]
    pub(crate) fn elapsed(self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    #[allow(clippy::unused_self)]
    pub(crate) fn on(self) -> bool {
        false
    }
}

/// The metrics a rule records per decision, in the order of [`RuleMetrics`]' keys.
#[cfg(feature = "metrics")]
const RULE_METRICS: [Metric; 5] = [
    Metric::RateLimitAllowed,
    Metric::RateLimitLimited,
    Metric::RateLimitShadowLimited,
    Metric::RateLimitSoftLimited,
    Metric::RateLimitDecisionSeconds,
];

/// What the `metrics` macros pass a recorder for a metric recorded in this module.
#[cfg(feature = "metrics")]
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// The metrics one rule records per decision (its verdict counter and its decision time),
/// their keys (name and `rule` label) made once, when the layer is built: a request then
/// records without building a key or allocating its labels. The recorder is still looked up on
/// every call, as the `metrics` macros do, so one installed after the layer was built (or a
/// thread's local one) gets every count.
#[derive(Clone, Debug)]
pub(crate) struct RuleMetrics {
    rule: std::sync::Arc<str>,
    #[cfg(feature = "metrics")]
    keys: std::sync::Arc<[metrics::Key; 5]>,
}

impl RuleMetrics {
    pub(crate) fn new(rule: &std::sync::Arc<str>) -> Self {
        Self {
            rule: std::sync::Arc::clone(rule),
            #[cfg(feature = "metrics")]
            keys: std::sync::Arc::new(RULE_METRICS.map(|metric| {
                let label = metrics::SharedString::from(std::sync::Arc::clone(rule));
                metrics::Key::from_parts(metric.name(), vec![metrics::Label::new("rule", label)])
            })),
        }
    }

    /// Whether these are the metrics of the rule named `rule`.
    pub(crate) fn is_of(&self, rule: &str) -> bool {
        *self.rule == *rule
    }

    /// Adds one to the verdict counter `metric` and records `seconds` in
    /// [`Metric::RateLimitDecisionSeconds`], both labelled with the rule: what [`count`] and
    /// [`observe`] record.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables, clippy::unused_self))]
    pub(crate) fn record(&self, metric: Metric, seconds: f64) {
        #[cfg(feature = "metrics")]
        {
            match RULE_METRICS.iter().position(|m| *m == metric) {
                Some(i) => metrics::with_recorder(|r| r.register_counter(&self.keys[i], &METADATA))
                    .increment(1),
                None => count(metric, "rule", (&self.rule).into(), 1),
            }
            metrics::with_recorder(|r| r.register_histogram(&self.keys[4], &METADATA))
                .record(seconds);
        }
    }
}

/// A label value: a shared rule name or a fixed word, never copied.
#[derive(Clone, Debug)]
pub(crate) struct Label(#[cfg(feature = "metrics")] metrics::SharedString);

impl From<&'static str> for Label {
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    fn from(s: &'static str) -> Self {
        Self(
            #[cfg(feature = "metrics")]
            metrics::SharedString::const_str(s),
        )
    }
}

impl From<&std::sync::Arc<str>> for Label {
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    fn from(s: &std::sync::Arc<str>) -> Self {
        Self(
            #[cfg(feature = "metrics")]
            metrics::SharedString::from(std::sync::Arc::clone(s)),
        )
    }
}

/// A recorder for tests: counts what the code under test records on this thread.
#[cfg(all(test, feature = "metrics"))]
pub(crate) mod testing {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, PoisonError};

    use metrics::{
        Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata,
        Recorder, SharedString, Unit,
    };

    /// Every metric by `name{label="value"}`: counters' totals, gauges' last values and
    /// histograms' sample counts.
    #[derive(Clone, Debug, Default)]
    pub(crate) struct Captured(Arc<Mutex<BTreeMap<String, Arc<Cell>>>>);

    #[derive(Debug, Default)]
    struct Cell(AtomicU64);

    impl CounterFn for Cell {
        fn increment(&self, value: u64) {
            self.0.fetch_add(value, Ordering::Relaxed);
        }
        fn absolute(&self, value: u64) {
            self.0.store(value, Ordering::Relaxed);
        }
    }

    impl GaugeFn for Cell {
        fn increment(&self, _: f64) {}
        fn decrement(&self, _: f64) {}
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        fn set(&self, value: f64) {
            self.0.store(value as u64, Ordering::Relaxed);
        }
    }

    impl HistogramFn for Cell {
        fn record(&self, _: f64) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    impl Captured {
        fn cell(&self, key: &Key) -> Arc<Cell> {
            // Every name the crate records is one of the documented table's.
            assert!(
                super::Metric::ALL.iter().any(|m| m.name() == key.name()),
                "{} is not a telemetry::Metric",
                key.name()
            );
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}=\"{}\"", l.key(), l.value()))
                .collect();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(map.entry(name).or_default())
        }

        /// The value under `name{label="value"}`, 0 when never recorded.
        pub(crate) fn get(&self, metric: &str) -> u64 {
            let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            map.get(metric).map_or(0, |c| c.0.load(Ordering::Relaxed))
        }
    }

    impl Recorder for Captured {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(self.cell(key))
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(self.cell(key))
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(self.cell(key))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Metric;

    /// Without a recorder a decision reads no clock and records nothing; with one (this
    /// thread's here) it is timed.
    #[cfg(feature = "metrics")]
    #[test]
    fn a_stopwatch_runs_only_while_a_recorder_is_in_place() {
        assert!(
            !super::Stopwatch::start().on(),
            "the facade's no-op recorder"
        );
        let captured = super::testing::Captured::default();
        let _guard = metrics::set_default_local_recorder(&captured);
        assert!(super::Stopwatch::start().on());
    }

    /// The names are the ones dashboards, the suites and the example's `/metrics` rely on, each
    /// once in [`Metric::ALL`].
    #[test]
    fn every_metric_is_listed_once_under_its_documented_name() {
        let names: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(
            names,
            [
                "redis_guard_rate_limit_allowed_total",
                "redis_guard_rate_limit_limited_total",
                "redis_guard_rate_limit_shadow_limited_total",
                "redis_guard_rate_limit_soft_limited_total",
                "redis_guard_rate_limit_backend_errors_total",
                "redis_guard_rate_limit_fallback_decisions_total",
                "redis_guard_rate_limit_deny_cache_hits_total",
                "redis_guard_rate_limit_lease_releases_total",
                "redis_guard_rate_limit_decision_seconds",
                "redis_guard_rate_limit_throttle_wait_seconds",
                "redis_guard_breaker_state",
                "redis_guard_breaker_opened_total",
                "redis_guard_session_loads_total",
                "redis_guard_session_saves_total",
                "redis_guard_session_revocations_total",
                "redis_guard_session_store_errors_total",
                "redis_guard_cache_responses_total",
            ]
        );
        assert_eq!(
            Metric::SessionSaves.to_string(),
            "redis_guard_session_saves_total"
        );
        // Each variant's docs and the table name the metric: the docs cannot drift from it.
        let docs = include_str!("telemetry.rs");
        for m in Metric::ALL {
            let row = format!("| [`{}`](Self::{m:?}) |", m.name());
            assert_eq!(docs.matches(&row).count(), 1, "{row}");
        }
    }
}
