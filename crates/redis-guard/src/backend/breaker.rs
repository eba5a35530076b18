//! The circuit breaker: after repeated failures to reach Redis, stop calling it for a while.
//!
//! Closed (calls go to Redis) → open after [`Breaker::failures`] calls in a row found Redis
//! unavailable ([`BackendError::is_unavailable`]) → after the cool-down, half-open: the next call
//! is the probe, every other call fails fast until it returns → closed when it succeeds, open
//! again when it fails (for the same cool-down, or twice the last one up to
//! [`Breaker::max_cool_down`]).
//!
//! The closed path is two atomics and no lock; the lock is taken only while the circuit is open.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{BackendError, Clock, MonotonicClock};
use crate::telemetry;

/// Default for how many calls in a row must find Redis unavailable to open the circuit.
pub const DEFAULT_FAILURES: u32 = 5;

/// Default time the circuit stays open before it lets a probe through.
pub const DEFAULT_COOL_DOWN: Duration = Duration::from_millis(500);

/// How a [`RedisBackend`](super::RedisBackend) stops calling a Redis that keeps failing: its
/// circuit breaker.
///
/// Without one, a Redis that is frozen or unreachable costs every request the whole timeout
/// before the failure policy answers. With it, after [`failures`](Self::failures) calls in a row
/// time out or cannot connect, calls fail at once with [`BackendError::CircuitOpen`] (which the
/// failure policies treat as Redis being down, without a network round trip). After the
/// [`cool_down`](Self::cool_down) one call goes to Redis as a probe while the others still fail
/// fast: if Redis answers, the circuit closes and every call goes to Redis again; if not, the
/// circuit opens again for another cool-down (growing, if you set a
/// [`max_cool_down`](Self::max_cool_down)).
///
/// Only calls that could not reach Redis count: a script error, a `WRONGTYPE` or an
/// out-of-memory reply is Redis answering, and resets the count. The breaker never retries a
/// call; reconnecting is the connection's job, and the probe is simply the first call after the
/// cool-down.
///
/// The defaults are [`DEFAULT_FAILURES`] = 5 failures in a row and a fixed
/// [`DEFAULT_COOL_DOWN`] of 500 ms. Five: one slow call or a dropped connection does not open
/// the circuit, and at most five requests (or five coalesced calls) pay the timeout before the
/// others are answered in microseconds. 500 ms: a Redis that is back is found within about a
/// second (the connection reconnects on its own meanwhile), while a long outage costs two
/// probes a second, each at most one request waiting one timeout.
///
/// One breaker per backend: clones of a [`RedisBackend`](super::RedisBackend), and the limiter
/// and session store built on it, share it. On a Redis Cluster connected with
/// [`RedisConnection::cluster`](super::RedisConnection::cluster) the breaker keeps one circuit
/// per master (found from `CLUSTER SLOTS` when the connection was made): a dead master opens the
/// circuit of its own slots, and the keys on the other masters keep being decided by Redis.
///
/// ```
/// use std::time::Duration;
/// use redis_guard::backend::{Breaker, RedisBackend, RedisConnection};
/// # async fn f(conn: RedisConnection) {
/// let redis = RedisBackend::new(conn)
///     .timeout(Duration::from_millis(50))
///     .breaker(Breaker::new().failures(3).cool_down(Duration::from_secs(2)));
/// # }
/// # async fn g(conn: RedisConnection) {
/// // Every call waits for Redis, however often it failed before:
/// let redis = RedisBackend::new(conn).breaker(Breaker::off());
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Breaker {
    failures: u32,
    cool_down: Duration,
    max_cool_down: Option<Duration>,
    clock: Option<Arc<dyn Clock>>,
}

impl Breaker {
    /// A breaker with the defaults: opens after [`DEFAULT_FAILURES`] failures in a row, for
    /// [`DEFAULT_COOL_DOWN`] each time.
    #[must_use]
    pub fn new() -> Self {
        Self {
            failures: DEFAULT_FAILURES,
            cool_down: DEFAULT_COOL_DOWN,
            max_cool_down: None,
            clock: None,
        }
    }

    /// No breaker: every call goes to Redis and waits up to the timeout.
    ///
    /// ```
    /// use redis_guard::backend::Breaker;
    /// assert!(Breaker::off().is_off());
    /// assert!(Breaker::new().failures(0).is_off());
    /// ```
    #[must_use]
    pub fn off() -> Self {
        Self::new().failures(0)
    }

    /// Opens the circuit after `n` calls in a row found Redis unavailable (default
    /// [`DEFAULT_FAILURES`]); `0` turns the breaker off.
    ///
    /// ```
    /// use redis_guard::backend::Breaker;
    /// assert!(!Breaker::new().failures(1).is_off());
    /// ```
    #[must_use]
    pub fn failures(mut self, n: u32) -> Self {
        self.failures = n;
        self
    }

    /// How long the circuit stays open before a probe (default [`DEFAULT_COOL_DOWN`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::backend::Breaker;
    /// // Probe every 2 s while Redis is down:
    /// let b = Breaker::new().cool_down(Duration::from_secs(2));
    /// ```
    #[must_use]
    pub fn cool_down(mut self, d: Duration) -> Self {
        self.cool_down = d;
        self
    }

    /// Lets the cool-down grow during a long outage: each failed probe doubles it, up to `d`.
    /// By default it does not grow; a `d` at or below [`cool_down`](Self::cool_down) keeps it
    /// fixed. A longer cool-down costs fewer probes and finds Redis back later.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::backend::Breaker;
    /// // Probes after 0.5, 1, 2, 4, 8, 10, 10 … seconds:
    /// let b = Breaker::new().max_cool_down(Duration::from_secs(10));
    /// ```
    #[must_use]
    pub fn max_cool_down(mut self, d: Duration) -> Self {
        self.max_cool_down = Some(d);
        self
    }

    /// Reads time from `clock` instead of a monotonic clock, e.g. a `ManualClock` (feature
    /// `test-util`) so a test ends a cool-down without sleeping.
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Whether the breaker is turned off.
    #[must_use]
    pub fn is_off(&self) -> bool {
        self.failures == 0
    }
}

impl Default for Breaker {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a backend's circuit breaker stands ([`RedisBackend::breaker_state`](super::RedisBackend::breaker_state)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BreakerState {
    /// Calls go to Redis (always, when the breaker is off).
    Closed,
    /// Calls fail fast with [`BackendError::CircuitOpen`] until the cool-down ends.
    Open,
    /// The cool-down is over: the next call is the probe (or the probe is out), and the others
    /// fail fast until it returns.
    HalfOpen,
}

/// The breaker of one backend: the configuration and the state.
#[derive(Debug)]
pub(crate) struct Circuit {
    threshold: u32,
    cool_down: Duration,
    max_cool_down: Duration,
    clock: Arc<dyn Clock>,
    /// Whether the circuit is open or half-open: the one flag the closed path reads.
    open: AtomicBool,
    /// Calls in a row that found Redis unavailable, while closed.
    failures: AtomicU32,
    /// The open circuit's timing; taken only while [`open`](Self::open) is set.
    trip: Mutex<Trip>,
    /// The backend's key prefix: the `prefix` label of the breaker's metrics.
    label: Mutex<Arc<str>>,
    /// Which master of a cluster this circuit guards (0 on one server): the `master` label.
    master: usize,
}

#[derive(Debug, Default)]
struct Trip {
    /// When the next probe may go.
    until: Duration,
    /// The cool-down that set `until`.
    cool_down: Duration,
    /// Whether the probe is out.
    probing: bool,
}

/// Leave to make one call; say how it went with [`record`](Self::record).
#[derive(Debug)]
#[must_use = "a permit records the outcome of the call it allows"]
pub(crate) struct Permit<'a> {
    circuit: &'a Circuit,
    probe: bool,
}

impl Circuit {
    pub(crate) fn new(config: Breaker, prefix: &str, master: usize) -> Self {
        Self {
            threshold: config.failures,
            cool_down: config.cool_down,
            max_cool_down: config
                .max_cool_down
                .map_or(config.cool_down, |d| d.max(config.cool_down)),
            clock: config
                .clock
                .unwrap_or_else(|| Arc::new(MonotonicClock::new())),
            open: AtomicBool::new(false),
            failures: AtomicU32::new(0),
            trip: Mutex::new(Trip::default()),
            label: Mutex::new(Arc::from(prefix)),
            master,
        }
    }

    /// Labels the breaker's metrics with `prefix` from now on.
    pub(crate) fn relabel(&self, prefix: &str) {
        *self.label.lock().unwrap_or_else(PoisonError::into_inner) = Arc::from(prefix);
    }

    /// Sets the `redis_guard_breaker_state` gauge (0 closed, 1 half-open, 2 open), and counts
    /// `redis_guard_breaker_opened_total` when the circuit opens from closed (`opened`).
    fn report(&self, state: BreakerState, opened: bool) {
        let prefix = self
            .label
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let labels = telemetry::Labels::breaker(&prefix, self.master);
        if opened {
            telemetry::count_with(telemetry::BREAKER_OPENED, labels.clone(), 1);
        }
        let value = match state {
            BreakerState::Closed => 0.0,
            BreakerState::HalfOpen => 1.0,
            BreakerState::Open => 2.0,
        };
        telemetry::set_with(telemetry::BREAKER_STATE, labels, value);
    }

    /// A permit for one call, or [`BackendError::CircuitOpen`] when the call must not be made.
    pub(crate) fn admit(&self) -> Result<Permit<'_>, BackendError> {
        let permit = |probe| Permit {
            circuit: self,
            probe,
        };
        if !self.open.load(Ordering::Acquire) {
            return Ok(permit(false));
        }
        let mut trip = self.lock();
        if !self.open.load(Ordering::Acquire) {
            return Ok(permit(false));
        }
        if trip.probing || self.clock.now() < trip.until {
            return Err(BackendError::CircuitOpen);
        }
        trip.probing = true;
        self.report(BreakerState::HalfOpen, false);
        Ok(permit(true))
    }

    pub(crate) fn state(&self) -> BreakerState {
        if !self.open.load(Ordering::Acquire) {
            return BreakerState::Closed;
        }
        let trip = self.lock();
        if trip.probing || self.clock.now() >= trip.until {
            BreakerState::HalfOpen
        } else {
            BreakerState::Open
        }
    }

    /// Opens the circuit for the base cool-down, unless it is open already.
    fn trip(&self) {
        let mut trip = self.lock();
        if self.open.load(Ordering::Acquire) {
            return;
        }
        *trip = Trip {
            until: self.clock.now().saturating_add(self.cool_down),
            cool_down: self.cool_down,
            probing: false,
        };
        self.open.store(true, Ordering::Release);
        self.report(BreakerState::Open, true);
        tracing::warn!(
            failures = self.threshold,
            cool_down = ?self.cool_down,
            "redis-guard: Redis unavailable for {} calls in a row; circuit open, calls fail fast",
            self.threshold,
        );
    }

    fn lock(&self) -> MutexGuard<'_, Trip> {
        self.trip.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Permit<'_> {
    /// Records how the call went: a failure that says Redis is unavailable counts toward
    /// opening; anything else (Redis answered, even with an error) resets the count.
    pub(crate) fn record<T>(mut self, outcome: &Result<T, BackendError>) {
        let failed = matches!(outcome, Err(e) if e.is_unavailable());
        let c = self.circuit;
        if self.probe {
            // Recorded here, not released by `drop`.
            self.probe = false;
            let mut trip = c.lock();
            trip.probing = false;
            if failed {
                trip.cool_down = trip.cool_down.saturating_mul(2).min(c.max_cool_down);
                trip.until = c.clock.now().saturating_add(trip.cool_down);
                c.report(BreakerState::Open, false);
                tracing::debug!(cool_down = ?trip.cool_down, "redis-guard: probe failed; circuit open again");
            } else {
                c.failures.store(0, Ordering::Relaxed);
                c.open.store(false, Ordering::Release);
                c.report(BreakerState::Closed, false);
                tracing::info!("redis-guard: Redis answered the probe; circuit closed");
            }
        } else if c.threshold == 0 || c.open.load(Ordering::Acquire) {
            // Off, or open already: a late outcome of a call made while closed changes nothing.
        } else if failed {
            if c.failures.fetch_add(1, Ordering::AcqRel) + 1 >= c.threshold {
                c.trip();
            }
        } else if c.failures.load(Ordering::Relaxed) != 0 {
            c.failures.store(0, Ordering::Relaxed);
        }
    }
}

impl Drop for Permit<'_> {
    /// A probe dropped before its outcome (its request was cancelled) frees the slot: the next
    /// call probes instead.
    fn drop(&mut self) {
        if self.probe {
            self.circuit.lock().probing = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ManualClock;

    fn unavailable() -> Result<(), BackendError> {
        Err(BackendError::Timeout(Duration::from_millis(100)))
    }

    fn circuit(clock: &ManualClock) -> Circuit {
        Circuit::new(
            Breaker::new()
                .failures(3)
                .cool_down(Duration::from_secs(1))
                .max_cool_down(Duration::from_secs(4))
                .clock(clock.clone()),
            "rg:",
            0,
        )
    }

    /// A circuit just opened by three failures, and its clock.
    fn opened() -> (ManualClock, Circuit) {
        let clock = ManualClock::new();
        let c = circuit(&clock);
        (0..3).for_each(|_| fail(&c));
        (clock, c)
    }

    fn fail(c: &Circuit) {
        c.admit().expect("admitted").record(&unavailable());
    }

    #[test]
    fn opens_after_consecutive_unavailable_failures_only() {
        let clock = ManualClock::new();
        let c = circuit(&clock);
        fail(&c);
        fail(&c);
        // Redis answered (with an error of its own): the count starts again.
        let answered: Result<(), _> = Err(BackendError::BadReply("?".into()));
        c.admit().expect("admitted").record(&answered);
        fail(&c);
        fail(&c);
        assert_eq!(c.state(), BreakerState::Closed);
        fail(&c);
        assert_eq!(c.state(), BreakerState::Open);
        assert!(matches!(c.admit(), Err(BackendError::CircuitOpen)));
    }

    /// The gauge follows the circuit (2 open, 1 while the probe is out, 0 closed) under the
    /// backend's prefix, and each opening is counted once.
    #[cfg(feature = "metrics")]
    #[test]
    fn the_state_gauge_and_the_openings_are_reported_under_the_prefix() {
        let metrics = crate::telemetry::testing::Captured::default();
        let _guard = metrics::set_default_local_recorder(&metrics);
        let gauge = || metrics.get(r#"redis_guard_breaker_state{prefix="app:",master="0"}"#);
        let clock = ManualClock::new();
        let c = circuit(&clock);
        c.relabel("app:");
        (0..3).for_each(|_| fail(&c));
        assert_eq!(gauge(), 2);
        clock.advance(Duration::from_secs(1));
        let probe = c.admit().expect("the probe");
        assert_eq!(gauge(), 1);
        probe.record(&unavailable());
        assert_eq!(gauge(), 2, "open again");
        clock.advance(Duration::from_secs(2));
        c.admit()
            .expect("the probe")
            .record(&Ok::<(), BackendError>(()));
        assert_eq!(gauge(), 0);
        (0..3).for_each(|_| fail(&c));
        assert_eq!(
            metrics.get(r#"redis_guard_breaker_opened_total{prefix="app:",master="0"}"#),
            2
        );
    }

    #[test]
    fn one_probe_after_the_cool_down_closes_on_success() {
        let (clock, c) = opened();
        clock.advance(Duration::from_millis(999));
        assert!(c.admit().is_err(), "still cooling down");
        clock.advance(Duration::from_millis(1));
        assert_eq!(c.state(), BreakerState::HalfOpen);
        let probe = c.admit().expect("the probe");
        assert!(
            matches!(c.admit(), Err(BackendError::CircuitOpen)),
            "one probe at a time"
        );
        probe.record(&Ok::<(), BackendError>(()));
        assert_eq!(c.state(), BreakerState::Closed);
        // Closed again, with a fresh count.
        fail(&c);
        fail(&c);
        assert_eq!(c.state(), BreakerState::Closed);
    }

    #[test]
    fn a_failed_probe_doubles_the_cool_down_up_to_the_cap() {
        let (clock, c) = opened();
        clock.advance(Duration::from_secs(1));
        for cool_down in [2, 4, 4] {
            c.admit().expect("the probe").record(&unavailable());
            clock.advance(Duration::from_secs(cool_down) - Duration::from_millis(1));
            assert_eq!(c.state(), BreakerState::Open, "cool-down {cool_down} s");
            assert!(c.admit().is_err());
            clock.advance(Duration::from_millis(1));
            assert_eq!(c.state(), BreakerState::HalfOpen, "cool-down {cool_down} s");
        }
    }

    #[test]
    fn by_default_a_failed_probe_waits_the_same_cool_down() {
        let clock = ManualClock::new();
        let c = Circuit::new(Breaker::new().clock(clock.clone()), "rg:", 0);
        (0..DEFAULT_FAILURES).for_each(|_| fail(&c));
        for _ in 0..3 {
            clock.advance(DEFAULT_COOL_DOWN - Duration::from_millis(1));
            assert!(c.admit().is_err());
            clock.advance(Duration::from_millis(1));
            c.admit().expect("the probe").record(&unavailable());
        }
    }

    #[test]
    fn a_dropped_probe_lets_the_next_call_probe() {
        let (clock, c) = opened();
        clock.advance(Duration::from_secs(1));
        drop(c.admit().expect("the probe"));
        let probe = c.admit().expect("a new probe");
        probe.record(&Ok::<(), BackendError>(()));
        assert_eq!(c.state(), BreakerState::Closed);
    }

    #[test]
    fn late_outcomes_of_calls_made_while_closed_do_not_close_it() {
        let clock = ManualClock::new();
        let c = circuit(&clock);
        let late = c.admit().expect("admitted while closed");
        (0..3).for_each(|_| fail(&c));
        late.record(&Ok::<(), BackendError>(()));
        assert_eq!(c.state(), BreakerState::Open);
    }

    #[test]
    fn off_never_opens() {
        let c = Circuit::new(Breaker::off(), "rg:", 0);
        (0..100).for_each(|_| fail(&c));
        assert_eq!(c.state(), BreakerState::Closed);
    }
}
