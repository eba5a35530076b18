//! What [`RedisLimiter`](super::RedisLimiter) keeps in its deny cache: the key of a request and
//! of the Redis states it reads, the cache's clock, and a cached denial counted down.

use std::hash::{Hash, Hasher};
use std::time::Duration;

use super::algorithm::RuleState;
use super::limiter::Check;
use crate::backend::{DenyCache, RedisBackend};

/// Now on the deny cache's clock: Redis' frozen time under the test seam, else the process'
/// monotonic clock plus the test shift.
pub(super) fn cache_now<V>(backend: &RedisBackend, cache: &DenyCache<V>) -> u64 {
    backend
        .frozen_us()
        .unwrap_or_else(|| cache.now(backend.shift_us()))
}

/// The deny cache's keys of the Redis states `checks` read: a rule (name, algorithm) and a key.
pub(super) fn state_keys<'a, V>(
    cache: &'a DenyCache<V>,
    checks: &'a [Check],
) -> impl Iterator<Item = u64> + 'a {
    checks
        .iter()
        .map(|c| cache.key((c.rule.name(), c.rule.algorithm(), c.key.as_bytes())))
}

/// A request as the deny cache knows it: every check's rule (name, algorithm, quota, whether it
/// reads overrides), key and cost.
pub(super) struct Request<'a>(pub(super) &'a [Check]);

impl Hash for Request<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for check in self.0 {
            check.rule.name().hash(state);
            check.rule.algorithm().hash(state);
            check.quota.hash(state);
            check.rule.reads_overrides().hash(state);
            check.key.as_bytes().hash(state);
            check.cost.hash(state);
        }
    }
}

/// The states of a cached denial, `elapsed` later: the waits counted down (a denied rule waits
/// at least a millisecond more: its cached wait has not passed yet).
pub(super) fn counted_down(states: Vec<RuleState>, elapsed: Duration) -> Vec<RuleState> {
    states
        .into_iter()
        .map(|mut s| {
            s.retry_after = s.retry_after.saturating_sub(elapsed);
            s.reset_after = s.reset_after.saturating_sub(elapsed);
            if !s.allowed {
                s.retry_after = s.retry_after.max(Duration::from_millis(1));
            }
            s
        })
        .collect()
}
