//! At most one "rate limiter failed" line per interval per layer: an outage under load must not
//! write a warning per request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often a layer logs that its limiter failed, at most: the line carries the number of
/// failures since the previous one.
pub(crate) const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// Counts failures and says when a line is due. Two atomics, no lock: every failed request
/// touches it.
#[derive(Debug)]
pub(crate) struct WarnEvery {
    origin: Instant,
    interval_ms: u64,
    /// Milliseconds since `origin` before which no line is due.
    next_ms: AtomicU64,
    /// Failures not logged since the last line.
    suppressed: AtomicU64,
}

impl WarnEvery {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            origin: Instant::now(),
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            next_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Counts one failure now; see [`hit_at`](Self::hit_at).
    pub(crate) fn hit(&self) -> Option<u64> {
        let now = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.hit_at(now)
    }

    /// Counts one failure at `now_ms`: `Some(n)` when this one is to be logged, `n` being how
    /// many were not since the previous line; `None` when it is only counted.
    pub(crate) fn hit_at(&self, now_ms: u64) -> Option<u64> {
        let next = self.next_ms.load(Ordering::Relaxed);
        // Of the callers that find a line due, the one that moves `next_ms` logs it.
        if now_ms >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now_ms.saturating_add(self.interval_ms),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_count_in_between() {
        let w = WarnEvery::new(Duration::from_secs(10));
        assert_eq!(w.hit_at(5), Some(0), "the first failure is logged at once");
        let logged: Vec<_> = (0..1000).filter_map(|i| w.hit_at(6 + i)).collect();
        assert!(logged.is_empty(), "{logged:?}");
        assert_eq!(w.hit_at(10_004), None, "not yet 10 s after the first line");
        assert_eq!(
            w.hit_at(10_005),
            Some(1001),
            "due: it reports the 1001 in between"
        );
        assert_eq!(w.hit_at(10_006), None);
        // A quiet spell: the next failure is logged at once, with what was counted before it.
        assert_eq!(w.hit_at(60_000), Some(1));
        assert_eq!(w.hit_at(60_001), None);
    }

    #[test]
    fn concurrent_failures_give_one_line_and_lose_no_count() {
        let w = std::sync::Arc::new(WarnEvery::new(Duration::from_secs(10)));
        let lines: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let w = &w;
                    s.spawn(move || (0..10_000).filter_map(|_| w.hit_at(1)).collect())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let lines: Vec<u64> = lines.into_iter().flatten().collect();
        assert_eq!(lines, [0], "one line for 40 000 failures in one instant");
        assert_eq!(w.hit_at(10_001), Some(39_999));
    }
}
