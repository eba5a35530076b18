//! What redis-guard reports: `tracing` events and spans, and metrics through the
//! [`metrics`](https://docs.rs/metrics) facade (cargo feature `metrics`, on by default).
//!
//! redis-guard only records; the application installs a recorder (an exporter) to collect, e.g.
//! `metrics-exporter-prometheus`, as the axum example does for `GET /metrics`. Without one,
//! recording costs a lookup of the global recorder and nothing more. Names and labels are fixed
//! and documented below, so dashboards and alerts can rely on them.
//!
//! **Cardinality is bounded**: labels are rule names (chosen in code, at most 64 characters),
//! key prefixes, operation names and fixed outcome words; never a client key, an IP address, a
//! user or a session id.
//!
//! # Rate limiting (label `rule`)
//!
//! | name | kind | what |
//! |---|---|---|
//! | [`redis_guard_rate_limit_allowed_total`](RATE_LIMIT_ALLOWED) | counter | requests the rule admitted |
//! | [`redis_guard_rate_limit_limited_total`](RATE_LIMIT_LIMITED) | counter | requests an enforced rule denied (answered `429`) |
//! | [`redis_guard_rate_limit_shadow_limited_total`](RATE_LIMIT_SHADOW_LIMITED) | counter | requests a [`Mode::Shadow`] rule would have denied (admitted) |
//! | [`redis_guard_rate_limit_soft_limited_total`](RATE_LIMIT_SOFT_LIMITED) | counter | requests over a [`Mode::Soft`] rule's limit (admitted with `RateLimit-Exceeded`) |
//! | [`redis_guard_rate_limit_backend_errors_total`](RATE_LIMIT_BACKEND_ERRORS) | counter | requests the limiter could not decide (the failure policy answered) |
//! | [`redis_guard_rate_limit_fallback_decisions_total`](RATE_LIMIT_FALLBACK_DECISIONS) | counter | decisions made in process by [`FailurePolicy::Fallback`] |
//! | [`redis_guard_rate_limit_deny_cache_hits_total`](RATE_LIMIT_DENY_CACHE_HITS) | counter | denials answered from the deny cache, without Redis |
//! | [`redis_guard_rate_limit_decision_seconds`](RATE_LIMIT_DECISION_SECONDS) | histogram | time to decide a request |
//! | [`redis_guard_rate_limit_lease_releases_total`](RATE_LIMIT_LEASE_RELEASES) | counter | label `result` (not `rule`) = `released`, `failed` (the store failed: the lease expires), `abandoned` (dropped outside a Tokio runtime: it expires): releases of a request's [concurrency leases](crate::rate_limit::Rule::concurrency) |
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
//! | name | kind | what |
//! |---|---|---|
//! | [`redis_guard_breaker_state`](BREAKER_STATE) | gauge | `0` closed, `1` half-open (a probe is out), `2` open |
//! | [`redis_guard_breaker_opened_total`](BREAKER_OPENED) | counter | times the circuit opened |
//!
//! # Sessions
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | [`redis_guard_session_loads_total`](SESSION_LOADS) | counter | `result` = `live`, `absent` | session loads |
//! | [`redis_guard_session_saves_total`](SESSION_SAVES) | counter | `result` = `merged`, `created`, `gone` | writes: changed fields merged into the stored session (concurrent writes to other fields kept), a new session, or dropped because the session had ended (never resurrected) |
//! | [`redis_guard_session_revocations_total`](SESSION_REVOCATIONS) | counter | `kind` = `destroy`, `rotate`, `user`, `session`, `others` | sessions ended: logout, id rotation, "log out everywhere", one device revoked, "log out everywhere else" (one per session ended) |
//! | [`redis_guard_session_store_errors_total`](SESSION_STORE_ERRORS) | counter | `op` = `load`, `create`, `save`, `increment`, `delete`, `rotate`, `index`, `revoke`, `list`, `take`, `ensure`, `compare_and_set` | store calls that failed |
//!
//! # Response cache
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | [`redis_guard_cache_responses_total`](CACHE_RESPONSES) | counter | `result` = `hit`, `stale`, `miss` | responses of the requests the cache looked up, as their `x-cache` header says: stored and fresh, stored and served while one request refreshes it, or computed by the handler (the hit ratio is `hit / (hit + stale + miss)`); requests the cache does not look up (unsafe methods, credentials) are not counted |
//!
//! # Tracing
//!
//! Events use the targets `redis_guard::…`: `debug` for every denial (rule, retry-after), `warn`
//! for failures (at most one line per [`WARN_INTERVAL`] per layer, with a count) and circuit
//! changes, `info` when the circuit closes. Each rate-limit evaluation runs in a `debug` span
//! `rate_limit` with the rule count, so a subscriber at `debug` ties the Redis call's events to
//! the request.
//!
//! [`RateLimitLayer`]: crate::rate_limit::RateLimitLayer
//! [`RedisLimiter::check`]: crate::rate_limit::RedisLimiter::check
//! [`Mode::Shadow`]: crate::rate_limit::Mode::Shadow
//! [`Mode::Soft`]: crate::rate_limit::Mode::Soft
//! [`FailurePolicy::Fallback`]: crate::rate_limit::FailurePolicy::Fallback
//! [`WARN_INTERVAL`]: crate::rate_limit::WARN_INTERVAL

#![cfg_attr(
    not(feature = "rate-limit"),
    allow(rustdoc::broken_intra_doc_links, dead_code)
)]

/// Counter: requests the rule admitted.
pub const RATE_LIMIT_ALLOWED: &str = "redis_guard_rate_limit_allowed_total";
/// Counter: requests an enforced rule denied.
pub const RATE_LIMIT_LIMITED: &str = "redis_guard_rate_limit_limited_total";
/// Counter: requests a shadow rule would have denied.
pub const RATE_LIMIT_SHADOW_LIMITED: &str = "redis_guard_rate_limit_shadow_limited_total";
/// Counter: requests over a soft rule's limit.
pub const RATE_LIMIT_SOFT_LIMITED: &str = "redis_guard_rate_limit_soft_limited_total";
/// Counter: requests the limiter could not decide.
pub const RATE_LIMIT_BACKEND_ERRORS: &str = "redis_guard_rate_limit_backend_errors_total";
/// Counter: decisions made by the in-process fallback.
pub const RATE_LIMIT_FALLBACK_DECISIONS: &str = "redis_guard_rate_limit_fallback_decisions_total";
/// Counter: denials answered from the deny cache.
pub const RATE_LIMIT_DENY_CACHE_HITS: &str = "redis_guard_rate_limit_deny_cache_hits_total";
/// Counter: releases of a request's concurrency leases, by `result`.
pub const RATE_LIMIT_LEASE_RELEASES: &str = "redis_guard_rate_limit_lease_releases_total";
/// Histogram (seconds): time to decide a request.
pub const RATE_LIMIT_DECISION_SECONDS: &str = "redis_guard_rate_limit_decision_seconds";
/// Gauge: the circuit breaker's state (0 closed, 1 half-open, 2 open).
pub const BREAKER_STATE: &str = "redis_guard_breaker_state";
/// Counter: times the circuit opened.
pub const BREAKER_OPENED: &str = "redis_guard_breaker_opened_total";
/// Counter: session loads.
pub const SESSION_LOADS: &str = "redis_guard_session_loads_total";
/// Counter: session writes.
pub const SESSION_SAVES: &str = "redis_guard_session_saves_total";
/// Counter: sessions ended.
pub const SESSION_REVOCATIONS: &str = "redis_guard_session_revocations_total";
/// Counter: session store calls that failed.
pub const SESSION_STORE_ERRORS: &str = "redis_guard_session_store_errors_total";
/// Counter: responses of requests the response cache looked up, by where they came from.
pub const CACHE_RESPONSES: &str = "redis_guard_cache_responses_total";

/// Adds `n` to counter `name` with one label; nothing without the `metrics` feature.
#[cfg(feature = "metrics")]
pub(crate) fn count(name: &'static str, label: &'static str, value: Label, n: u64) {
    metrics::counter!(name, label => value.0).increment(n);
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn count(_: &'static str, _: &'static str, _: Label, _: u64) {}

/// Records `seconds` in histogram `name` with one label.
#[cfg(feature = "metrics")]
pub(crate) fn observe(name: &'static str, label: &'static str, value: Label, seconds: f64) {
    metrics::histogram!(name, label => value.0).record(seconds);
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn observe(_: &'static str, _: &'static str, _: Label, _: f64) {}

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

/// Adds `n` to counter `name` with `labels`.
#[cfg(feature = "metrics")]
pub(crate) fn count_with(name: &'static str, labels: Labels, n: u64) {
    let [(k1, v1), (k2, v2)] = labels.0;
    metrics::counter!(name, k1 => v1, k2 => v2).increment(n);
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn count_with(_: &'static str, _: Labels, _: u64) {}

/// Sets gauge `name` with `labels`.
#[cfg(feature = "metrics")]
pub(crate) fn set_with(name: &'static str, labels: Labels, to: f64) {
    let [(k1, v1), (k2, v2)] = labels.0;
    metrics::gauge!(name, k1 => v1, k2 => v2).set(to);
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn set_with(_: &'static str, _: Labels, _: f64) {}

/// Times a decision for [`RATE_LIMIT_DECISION_SECONDS`]: reads the clock only when the
/// `metrics` feature is there to record it (the in-process limiter's path has nothing else to
/// read the clock for).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stopwatch(#[cfg(feature = "metrics")] std::time::Instant);

#[cfg(feature = "metrics")]
impl Stopwatch {
    pub(crate) fn start() -> Self {
        Self(std::time::Instant::now())
    }

    pub(crate) fn elapsed(self) -> std::time::Duration {
        self.0.elapsed()
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
