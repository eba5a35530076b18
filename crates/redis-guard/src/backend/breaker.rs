//! The circuit breaker: after repeated failures to reach Redis, stop calling it for a while.
//!
//! Closed (calls go to Redis) → open after [`Breaker::failures`] calls in a row found Redis
//! unavailable ([`BackendError::is_unavailable`]): every call fails fast, and a task of the
//! backend probes Redis every cool-down → half-open while a probe is out → closed when Redis
//! answers one, open again when it does not. No call ever waits for a probe.
//!
//! The closed path is two atomics and no lock; the lock is taken only while the circuit is open.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use super::{BackendError, Clock, MonotonicClock};
use crate::telemetry::{self, Metric};

/// Default for how many calls in a row must find Redis unavailable to open the circuit.
pub(crate) const DEFAULT_FAILURES: u32 = 5;

/// Default time between two background probes while the circuit is open (the first one goes
/// this long after it opened).
pub(crate) const DEFAULT_COOL_DOWN: Duration = Duration::from_millis(100);

/// The longest the probe task sleeps before it reads the breaker's clock again (a test's manual
/// clock moves without waking it).
const PROBE_POLL: Duration = Duration::from_millis(20);

/// How a [`RedisBackend`](super::RedisBackend) stops calling a Redis that keeps failing: its
/// circuit breaker.
///
/// Without one, a Redis that is frozen or unreachable costs every request the whole timeout
/// before the failure policy answers. With it, after [`failures`](Self::failures) calls in a row
/// time out or cannot connect, calls fail at once with [`BackendError::CircuitOpen`] (which the
/// failure policies treat as Redis being down, without a network round trip). While the
/// circuit is open, a background task of the backend probes Redis every
/// [`cool_down`](Self::cool_down) with a `PING` (on a Cluster, a read routed to the circuit's
/// master), under the backend's timeout; the first probe Redis answers closes the circuit, and
/// every call goes to Redis again. Calls keep failing fast while a probe is out: no request
/// ever waits for one, and a Redis that is back is found within a cool-down or two (its
/// connection reconnects meanwhile), however long it was gone. The task ends when the circuit
/// closes or the last clone of the backend is dropped.
///
/// Only calls that could not reach Redis count: a script error, a `WRONGTYPE` or an
/// out-of-memory reply is Redis answering, and resets the count. The breaker never retries a
/// call; reconnecting is the connection's job.
///
/// The defaults are 5 failures in a row and a cool-down of 100 ms. Five: one slow call or a dropped connection does not open the circuit, and at most
/// five requests (or five coalesced calls) pay the timeout before the others are answered in
/// microseconds. 100 ms: the first request after Redis is back is decided by Redis within
/// about half a second, for ten `PING`s a second per backend (one circuit per Cluster master)
/// while Redis is gone, none of them on a request's path.
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
///     .breaker(Breaker::new().failures(3).cool_down(Duration::from_millis(250)));
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
    clock: Option<Arc<dyn Clock>>,
}

impl Breaker {
    /// A breaker with the defaults: opens after 5 failures in a row, and probes every
    /// 100 ms while open.
    #[must_use]
    pub fn new() -> Self {
        Self {
            failures: DEFAULT_FAILURES,
            cool_down: DEFAULT_COOL_DOWN,
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

    setters! {
        /// Opens the circuit after `n` calls in a row found Redis unavailable (default 5);
        /// `0` turns the breaker off.
        ///
        /// ```
        /// use redis_guard::backend::Breaker;
        /// assert!(!Breaker::new().failures(1).is_off());
        /// ```
        #[must_use]
        pub fn failures(n: u32) => failures;

        /// How long between two background probes while the circuit is open, the first one this
        /// long after it opened (default 100 ms). A longer cool-down costs fewer
        /// probes during an outage and finds Redis back later; no request waits for it either way.
        ///
        /// ```
        /// use std::time::Duration;
        /// use redis_guard::backend::Breaker;
        /// // Probe every second while Redis is down:
        /// let b = Breaker::new().cool_down(Duration::from_secs(1));
        /// ```
        #[must_use]
        pub fn cool_down(d: Duration) => cool_down;
    }

    /// Reads time from `clock` instead of a monotonic clock, e.g. a `ManualClock` (feature
    /// `test-util`) so a test decides when the next probe is due without sleeping.
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
    /// Calls fail fast with [`BackendError::CircuitOpen`]; the next background probe is due
    /// when the cool-down ends.
    Open,
    /// A background probe is out; calls still fail fast until Redis answers it.
    HalfOpen,
}

/// The breaker of one backend: the configuration and the state.
#[derive(Debug)]
pub(crate) struct Circuit {
    threshold: u32,
    cool_down: Duration,
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
    /// When the next probe is due.
    until: Duration,
    /// Whether the probe is out.
    probing: bool,
}

/// Leave to make one call; say how it went with [`record`](Self::record).
#[derive(Debug)]
#[must_use = "a permit records the outcome of the call it allows"]
pub(crate) struct Permit<'a> {
    circuit: &'a Circuit,
}

/// What the probe task does next ([`Circuit::next_probe`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NextProbe {
    /// The circuit is closed: the task ends.
    Done,
    /// The next probe is due in this long.
    Wait(Duration),
    /// Probe now (the circuit is half-open until [`Circuit::probed`]).
    Go,
}

impl Circuit {
    pub(crate) fn new(config: Breaker, prefix: &str, master: usize) -> Self {
        Self {
            threshold: config.failures,
            cool_down: config.cool_down,
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
            telemetry::count_with(Metric::BreakerOpened, labels.clone(), 1);
        }
        let value = match state {
            BreakerState::Closed => 0.0,
            BreakerState::HalfOpen => 1.0,
            BreakerState::Open => 2.0,
        };
        telemetry::set_with(Metric::BreakerState, labels, value);
    }

    /// A permit for one call, or [`BackendError::CircuitOpen`] while the circuit is open: only
    /// the background probe goes to Redis then.
    pub(crate) fn admit(&self) -> Result<Permit<'_>, BackendError> {
        if self.open.load(Ordering::Acquire) {
            return Err(BackendError::CircuitOpen);
        }
        Ok(Permit { circuit: self })
    }

    pub(crate) fn state(&self) -> BreakerState {
        if !self.open.load(Ordering::Acquire) {
            return BreakerState::Closed;
        }
        if self.lock().probing {
            BreakerState::HalfOpen
        } else {
            BreakerState::Open
        }
    }

    /// Whether the probe task should end, wait, or probe now (then it is marked out).
    pub(crate) fn next_probe(&self) -> NextProbe {
        let mut trip = self.lock();
        if !self.open.load(Ordering::Acquire) {
            return NextProbe::Done;
        }
        let now = self.clock.now();
        if now < trip.until {
            return NextProbe::Wait(trip.until - now);
        }
        trip.probing = true;
        self.report(BreakerState::HalfOpen, false);
        NextProbe::Go
    }

    /// Records a probe's outcome: Redis answered (`true`) closes the circuit, else the next
    /// probe is due a cool-down from now. Whether the circuit is closed.
    pub(crate) fn probed(&self, answered: bool) -> bool {
        let mut trip = self.lock();
        trip.probing = false;
        if answered {
            self.failures.store(0, Ordering::Relaxed);
            self.open.store(false, Ordering::Release);
            self.report(BreakerState::Closed, false);
            tracing::info!("redis-guard: Redis answered the probe; circuit closed");
        } else {
            trip.until = self.clock.now().saturating_add(self.cool_down);
            self.report(BreakerState::Open, false);
            tracing::debug!(cool_down = ?self.cool_down, "redis-guard: probe failed; circuit still open");
        }
        answered
    }

    /// Opens the circuit, the first probe due a cool-down from now, unless it is open already:
    /// whether it opened now.
    fn trip(&self) -> bool {
        let mut trip = self.lock();
        if self.open.load(Ordering::Acquire) {
            return false;
        }
        *trip = Trip {
            until: self.clock.now().saturating_add(self.cool_down),
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
        true
    }

    fn lock(&self) -> MutexGuard<'_, Trip> {
        self.trip.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Permit<'_> {
    /// Records how the call went: a failure that says Redis is unavailable counts toward
    /// opening; anything else (Redis answered, even with an error) resets the count. Whether
    /// this outcome opened the circuit (the caller then starts the probe task).
    pub(crate) fn record<T>(self, outcome: &Result<T, BackendError>) -> bool {
        let failed = matches!(outcome, Err(e) if e.is_unavailable());
        let c = self.circuit;
        if c.threshold == 0 || c.open.load(Ordering::Acquire) {
            // Off, or open already: a late outcome of a call made while closed changes nothing.
            false
        } else if failed {
            c.failures.fetch_add(1, Ordering::AcqRel) + 1 >= c.threshold && c.trip()
        } else {
            if c.failures.load(Ordering::Relaxed) != 0 {
                c.failures.store(0, Ordering::Relaxed);
            }
            false
        }
    }
}

/// The probe task of circuit `index` of `circuits`: while it is open, `probe()` every cool-down
/// (`true`: Redis answered), until one closes it or the backend is dropped. Holds the circuits
/// weakly, so that it never keeps a dropped backend's breaker alive.
pub(crate) async fn probe_while_open<F, Fut>(circuits: Weak<[Circuit]>, index: usize, probe: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    loop {
        let next = match circuits.upgrade() {
            Some(circuits) => circuits[index].next_probe(),
            None => return,
        };
        match next {
            NextProbe::Done => return,
            NextProbe::Wait(d) => tokio::time::sleep(d.min(PROBE_POLL)).await,
            NextProbe::Go => {
                let answered = probe().await;
                match circuits.upgrade() {
                    Some(circuits) if !circuits[index].probed(answered) => {}
                    _ => return,
                }
            }
        }
    }
}
