//! The circuit breaker's unit tests: the state machine on a manual clock, and the probe task.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::breaker::{Circuit, NextProbe, probe_while_open};
use super::{BackendError, Breaker, BreakerState, ManualClock};

fn unavailable() -> Result<(), BackendError> {
    Err(BackendError::Timeout(Duration::from_millis(100)))
}

fn circuit(clock: &ManualClock) -> Circuit {
    Circuit::new(
        Breaker::new()
            .failures(3)
            .cool_down(Duration::from_secs(1))
            .clock(clock.clone()),
        "rg:",
        0,
    )
}

/// A circuit just opened by three failures, and its clock.
fn opened() -> (ManualClock, Circuit) {
    let clock = ManualClock::new();
    let c = circuit(&clock);
    (0..2).for_each(|_| assert!(!fail(&c)));
    assert!(fail(&c), "the third failure opens it");
    (clock, c)
}

/// One call that found Redis unavailable: whether it opened the circuit.
fn fail(c: &Circuit) -> bool {
    c.admit().expect("admitted").record(&unavailable())
}

#[test]
fn opens_after_consecutive_unavailable_failures_only() {
    let clock = ManualClock::new();
    let c = circuit(&clock);
    fail(&c);
    fail(&c);
    // Redis answered (with an error of its own): the count starts again.
    let answered: Result<(), _> = Err(BackendError::BadReply("?".into()));
    assert!(!c.admit().expect("admitted").record(&answered));
    fail(&c);
    fail(&c);
    assert_eq!(c.state(), BreakerState::Closed);
    assert!(fail(&c));
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
    (0..3).for_each(|_| {
        fail(&c);
    });
    assert_eq!(gauge(), 2);
    clock.advance(Duration::from_secs(1));
    assert_eq!(c.next_probe(), NextProbe::Go);
    assert_eq!(gauge(), 1);
    c.probed(false);
    assert_eq!(gauge(), 2, "open again");
    clock.advance(Duration::from_secs(1));
    assert_eq!(c.next_probe(), NextProbe::Go);
    c.probed(true);
    assert_eq!(gauge(), 0);
    (0..3).for_each(|_| {
        fail(&c);
    });
    assert_eq!(
        metrics.get(r#"redis_guard_breaker_opened_total{prefix="app:",master="0"}"#),
        2
    );
}

/// While open, every call fails fast, before and after the cool-down: only the probe goes
/// to Redis, one cool-down after the circuit opened and one after each failed probe.
#[test]
fn calls_fail_fast_while_open_and_probes_go_every_cool_down() {
    let (clock, c) = opened();
    for _ in 0..3 {
        assert_eq!(c.next_probe(), NextProbe::Wait(Duration::from_secs(1)));
        clock.advance(Duration::from_millis(999));
        assert_eq!(c.next_probe(), NextProbe::Wait(Duration::from_millis(1)));
        assert_eq!(c.state(), BreakerState::Open);
        clock.advance(Duration::from_millis(1));
        assert!(c.admit().is_err(), "a call never probes");
        assert_eq!(c.next_probe(), NextProbe::Go);
        assert_eq!(c.state(), BreakerState::HalfOpen);
        assert!(c.admit().is_err(), "nor waits for the probe out");
        assert!(!c.probed(false));
        assert_eq!(c.state(), BreakerState::Open);
    }
    clock.advance(Duration::from_secs(1));
    assert_eq!(c.next_probe(), NextProbe::Go);
    assert!(c.probed(true));
    assert_eq!(c.state(), BreakerState::Closed);
    assert_eq!(c.next_probe(), NextProbe::Done);
    // Closed again, with a fresh count.
    assert!(!fail(&c));
    assert!(!fail(&c));
    assert!(c.admit().is_ok());
}

/// The probe task probes when due, ends when Redis answers, and ends when the backend (the
/// circuits) is dropped.
#[tokio::test(start_paused = true)]
async fn the_probe_task_runs_while_open_only() {
    let (clock, c) = opened();
    let circuits: Arc<[Circuit]> = Arc::from(vec![c]);
    let probes = Arc::new(AtomicU32::new(0));
    let task = {
        let (circuits, probes) = (Arc::downgrade(&circuits), probes.clone());
        tokio::spawn(probe_while_open(circuits, 0, move || {
            // Redis answers the third probe.
            std::future::ready(probes.fetch_add(1, Ordering::SeqCst) + 1 == 3)
        }))
    };
    for second in 1..=10 {
        // Paused tokio time: each sleep lets the task run until it waits again.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            probes.load(Ordering::SeqCst),
            second - 1,
            "one probe per cool-down"
        );
        if task.is_finished() {
            break;
        }
        clock.advance(Duration::from_secs(1));
    }
    assert!(task.is_finished());
    assert_eq!(probes.load(Ordering::SeqCst), 3);
    assert_eq!(circuits[0].state(), BreakerState::Closed);

    let (_clock, c) = opened();
    let circuits: Arc<[Circuit]> = Arc::from(vec![c]);
    let task = tokio::spawn(probe_while_open(Arc::downgrade(&circuits), 0, || {
        std::future::ready(false)
    }));
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(circuits);
    tokio::time::timeout(Duration::from_secs(1), task)
        .await
        .expect("the task ends with the backend")
        .expect("task");
}

#[test]
fn late_outcomes_of_calls_made_while_closed_do_not_close_it() {
    let clock = ManualClock::new();
    let c = circuit(&clock);
    let late = c.admit().expect("admitted while closed");
    (0..3).for_each(|_| {
        fail(&c);
    });
    assert!(!late.record(&Ok::<(), BackendError>(())));
    assert_eq!(c.state(), BreakerState::Open);
}

#[test]
fn off_never_opens() {
    let c = Circuit::new(Breaker::off(), "rg:", 0);
    (0..100).for_each(|_| assert!(!fail(&c)));
    assert_eq!(c.state(), BreakerState::Closed);
}
