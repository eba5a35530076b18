//! The backend's circuit breaker against a real `redis-server`: frozen (`SIGSTOP`), back
//! (`SIGCONT`), killed and restarted on the same port. Each test prints the latencies it
//! measured (`cargo test --test breaker -- --nocapture`).

use std::time::{Duration, Instant};

use redis_guard::backend::{BackendError, Breaker, BreakerState, ManualClock, RedisBackend};
use redis_guard::rate_limit::{Decision, Key, LimiterError, Quota, RedisLimiter, Rule};
use redis_guard::session::{RedisSessionStore, SessionError};
use redis_guard_tests::Harness;

/// The Redis timeout of these tests: long enough that a call that waited for it cannot be
/// mistaken for one that failed fast.
const TIMEOUT: Duration = Duration::from_millis(200);

/// Failures in a row that open the circuit.
const FAILURES: u32 = 5;

/// What "fast" must beat: generous for a loaded 2-core machine running debug builds, and still
/// half of [`TIMEOUT`] (a call that waited for it takes at least [`WAITED`]).
const FAST: Duration = Duration::from_millis(100);

/// A call that waited for the timeout took at least this long (timers may fire a little early
/// on some platforms; never by 10 ms).
const WAITED: Duration = Duration::from_millis(190);

/// At most ten calls a day: the remaining count says exactly how many calls Redis ran.
fn rule() -> Rule {
    Rule::new("breaker", Quota::per_day(10))
}

/// A backend on `h` with the test timeout and a breaker that opens after [`FAILURES`] failures
/// for one second of `clock`.
async fn backend(h: &Harness, clock: &ManualClock) -> RedisBackend {
    h.backend().await.timeout(TIMEOUT).breaker(
        Breaker::new()
            .failures(FAILURES)
            .cool_down(Duration::from_secs(1))
            .clock(clock.clone()),
    )
}

async fn timed_check(limiter: &RedisLimiter) -> (Duration, Result<Decision, LimiterError>) {
    let started = Instant::now();
    let outcome = limiter.check(&rule(), Key::from("client")).await;
    (started.elapsed(), outcome)
}

fn is_circuit_open(outcome: &Result<Decision, LimiterError>) -> bool {
    matches!(
        outcome,
        Err(LimiterError::Backend(BackendError::CircuitOpen))
    )
}

fn is_timeout(outcome: &Result<Decision, LimiterError>) -> bool {
    matches!(
        outcome,
        Err(LimiterError::Backend(BackendError::Timeout(_)))
    )
}

/// Prints `latencies` under `label` (each one, then min / median / max) and returns the max.
fn report(label: &str, latencies: &[Duration]) -> Duration {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    let each: Vec<String> = latencies.iter().map(|d| format!("{d:.1?}")).collect();
    let (min, median, max) = (
        sorted[0],
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
    );
    println!(
        "{label}: {} calls, min {min:.2?}, median {median:.2?}, max {max:.2?}; each: {}",
        latencies.len(),
        each.join(" ")
    );
    max
}

/// Freezes Redis and makes the [`FAILURES`] calls that open the circuit; each waits for the
/// timeout, no more (plus a margin).
async fn freeze_and_open(h: &Harness, limiter: &RedisLimiter, backend: &RedisBackend) {
    h.server()
        .expect("a standalone Redis")
        .freeze()
        .expect("SIGSTOP");
    let mut before = Vec::new();
    for _ in 0..FAILURES {
        assert_eq!(backend.breaker_state(), BreakerState::Closed);
        let (took, outcome) = timed_check(limiter).await;
        assert!(is_timeout(&outcome), "{outcome:?}");
        before.push(took);
    }
    let max = report("frozen, circuit closed (each waits the timeout)", &before);
    assert!(before.iter().all(|&d| d >= WAITED), "{before:?}");
    assert!(max < TIMEOUT + Duration::from_secs(1), "{before:?}");
    settles_at(backend, BreakerState::Open).await;
}

/// Waits until the breaker of `backend` is in `state`. A coalesced call's outcome is recorded by
/// the future that made it, which may be another request's, a moment after the others stop waiting.
async fn settles_at(backend: &RedisBackend, state: BreakerState) {
    let started = Instant::now();
    while backend.breaker_state() != state {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "still {:?}, not {state:?}",
            backend.breaker_state()
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_redis_costs_the_timeout_five_times_then_calls_fail_fast() {
    let h = Harness::redis().await;
    let clock = ManualClock::new();
    let backend = backend(&h, &clock).await;
    let limiter = RedisLimiter::new(backend.clone());
    let sessions = RedisSessionStore::new(backend.clone());
    let (took, outcome) = timed_check(&limiter).await;
    assert_eq!(outcome.expect("Redis decides").remaining, 9);
    println!("redis up: one decision in {took:.2?}");

    freeze_and_open(&h, &limiter, &backend).await;
    let mut after = Vec::new();
    for _ in 0..50 {
        let (took, outcome) = timed_check(&limiter).await;
        assert!(is_circuit_open(&outcome), "{outcome:?}");
        after.push(took);
    }
    let max = report("frozen, circuit open (fail fast)", &after);
    assert!(max < FAST, "{after:?}");

    // The session store built on the same backend shares the breaker.
    let started = Instant::now();
    let outcome = sessions.revoke_user("any").await;
    let took = started.elapsed();
    println!("frozen, circuit open: session store call failed in {took:.2?}");
    assert!(
        matches!(
            outcome,
            Err(SessionError::Backend(BackendError::CircuitOpen))
        ),
        "{outcome:?}"
    );
    assert!(took < FAST);
    h.server()
        .expect("a standalone Redis")
        .thaw()
        .expect("SIGCONT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_open_no_call_waits_for_the_background_probe_that_closes_the_circuit() {
    let h = Harness::redis().await;
    let clock = ManualClock::new();
    let backend = backend(&h, &clock).await;
    // One request per call, so that each call below is one request.
    let limiter = RedisLimiter::new(backend.clone()).batch_size(1);
    // Loads the script: a call that finds none answers `NOSCRIPT` and counts nothing.
    let (_, outcome) = timed_check(&limiter).await;
    assert_eq!(outcome.expect("Redis decides").remaining, 9);
    freeze_and_open(&h, &limiter, &backend).await;

    // Cool-down over, Redis still frozen: the background probe is out, waiting for its
    // timeout, and ten concurrent calls all fail fast: none is the probe, none waits for it.
    clock.advance(Duration::from_secs(1));
    settles_at(&backend, BreakerState::HalfOpen).await;
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move { timed_check(&limiter).await })
        })
        .collect();
    let mut fast = Vec::new();
    for call in calls {
        let (took, outcome) = call.await.expect("task");
        assert!(is_circuit_open(&outcome), "{outcome:?}");
        fast.push(took);
    }
    let max = report("half-open, frozen: calls while the probe is out", &fast);
    assert!(max < FAST, "{fast:?}");
    // The probe timed out: open again, for another cool-down.
    settles_at(&backend, BreakerState::Open).await;

    // Redis is back, but the next probe is not due: calls still fail fast, none goes to Redis.
    h.server()
        .expect("a standalone Redis")
        .thaw()
        .expect("SIGCONT");
    let (took, outcome) = timed_check(&limiter).await;
    assert!(is_circuit_open(&outcome), "{outcome:?}");
    println!("thawed, probe not due: failed fast in {took:.2?}");

    clock.advance(Duration::from_secs(1));
    let started = Instant::now();
    settles_at(&backend, BreakerState::Closed).await;
    println!(
        "thawed, probe due: the background probe closed the circuit in {:.2?}",
        started.elapsed()
    );
    // Redis ran the first call, then the five that timed out once each when it thawed, then
    // these: the seventh to ninth of ten. No call was retried, none was sent while the circuit
    // was open, and the probes counted nothing.
    let mut closed = Vec::new();
    for remaining in [3, 2, 1] {
        let (took, outcome) = timed_check(&limiter).await;
        assert_eq!(outcome.expect("Redis decides").remaining, remaining);
        closed.push(took);
    }
    report("closed again: decisions from Redis", &closed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_after_an_outage_decides_again_within_half_a_second() {
    let mut h = Harness::redis().await;
    // The default breaker and the real clock: what an application gets.
    let backend = h.backend().await.timeout(TIMEOUT);
    let limiter = RedisLimiter::new(backend.clone());
    let (_, outcome) = timed_check(&limiter).await;
    assert_eq!(outcome.expect("Redis decides").remaining, 9);

    let server = h.server_mut().expect("a standalone Redis");
    server.stop();
    // Four seconds of calls every 10 ms: longer than any cool-down the old request-probing
    // breaker would have reached. Once the circuit is open, no call waits (for a probe or
    // anything else).
    let down = Instant::now();
    let (mut before, mut open) = (Vec::new(), Vec::new());
    while down.elapsed() < Duration::from_secs(4) {
        let was_closed = backend.breaker_state() == BreakerState::Closed;
        let (took, outcome) = timed_check(&limiter).await;
        assert!(
            matches!(&outcome, Err(LimiterError::Backend(e)) if e.is_unavailable()),
            "{outcome:?}"
        );
        if was_closed && open.is_empty() {
            before.push(took);
        } else {
            open.push(took);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    report("killed, circuit closed", &before);
    let max = report("killed, circuit open (fail fast)", &open);
    assert!(before.len() <= FAILURES as usize + 1, "{before:?}");
    assert!(open.len() > 100, "{} calls", open.len());
    assert!(max < FAST, "a call waited {max:?} with the circuit open");

    let server = h.server_mut().expect("a standalone Redis");
    tokio::task::block_in_place(|| server.restart()).expect("restart on the same port");
    // `restart` returns once the new server answers PING: Redis is back from here.
    let back = Instant::now();
    let decision = loop {
        let (took, outcome) = timed_check(&limiter).await;
        match outcome {
            Ok(decision) => break decision,
            Err(e) => {
                assert!(took < FAST, "a call waited {took:?}: {e:?}");
                assert!(back.elapsed() < Duration::from_secs(5), "{e:?}");
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let recovered = back.elapsed();
    println!("restarted: decisions from Redis again {recovered:.2?} after it answered PING");
    // A new, empty Redis: the count starts again.
    assert_eq!(decision.remaining, 9);
    assert!(recovered < Duration::from_millis(500), "{recovered:?}");
    assert_eq!(backend.breaker_state(), BreakerState::Closed);
}
