//! What [`RedisLimiter`](crate::rate_limit::RedisLimiter) keeps in its deny cache: the key of a
//! request and of the Redis states it reads, the cache's clock, and a cached denial counted down.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use super::limiter::DENY_CACHE_MAX_WAIT;
use crate::backend::{DenyCache, RedisBackend};
use crate::rate_limit::algorithm::{Algorithm, RuleState};
use crate::rate_limit::limiter::Check;
use crate::rate_limit::{Key, Quota, Rule};
use crate::telemetry;

/// Whether a denial of `checks` may be cached: a custom algorithm's waits are its own business
/// (it may count denials), a rule with bans counts every rejection toward the next ban, and a
/// lease may be released at any moment, a throttled rule admits requests long before its
/// denial's retry_after, and a rule with a reserve denies the requests outside its class before
/// those in it (one key, two answers).
pub(super) fn cacheable(checks: &[Check]) -> bool {
    !checks.iter().any(|c| {
        matches!(
            c.rule.algorithm(),
            Algorithm::Custom(_) | Algorithm::Concurrency
        ) || c.rule.bans().is_some()
            || c.rule.max_wait().is_some()
            || c.rule.reserve.is_some()
            // A changed quota must reach a cached client at once.
            || c.rule.is_live()
    })
}

/// The cached denial of the request `asked` (its key in the cache `key`) at `now`, counted
/// down, and counted as a hit.
pub(super) fn cached_denial<'a, I: Iterator<Item = Asking<'a>> + Clone>(
    cache: &DenyCache<Vec<RuleState>>,
    asked: &Asked<I>,
    key: u64,
    now: u64,
) -> Option<Vec<RuleState>> {
    let (states, elapsed) = cache.get(key, now, || state_keys(cache, asked))?;
    // A name two requests of different rules share (a 64-bit hash): not this one's answer.
    if states.len() != asked.0.clone().count() {
        return None;
    }
    for ((rule, ..), _) in asked.0.clone().zip(&states).filter(|(_, s)| !s.allowed) {
        telemetry::count(
            telemetry::Metric::RateLimitDenyCacheHits,
            "rule",
            rule.name_arc().into(),
            1,
        );
    }
    Some(counted_down(states, elapsed))
}

/// The rules of `checks`, as the deny cache knows them.
pub(super) fn asked(checks: &[Check]) -> Asked<impl Iterator<Item = Asking<'_>> + Clone> {
    Asked(checks.iter().map(|c| (&*c.rule, &c.quota, &c.key, c.cost)))
}

/// The plain rules `rules` (each with its own quota and cost) for `keys`: the same request as
/// their checks.
pub(super) fn asked_plain<'a>(
    rules: &'a [Arc<Rule>],
    keys: &'a [Key],
) -> Asked<impl Iterator<Item = Asking<'a>> + Clone> {
    Asked(
        rules
            .iter()
            .zip(keys)
            .map(|(r, k)| (&**r, r.quota(), k, r.cost())),
    )
}

/// Tells `cache` what Redis answered for the request `asked`: an admitted one forgets its
/// keys' cached denials; a denied one is cached for its wait when `looked_up` (the cache's time
/// before the call, and the request's key in the cache when it was made) says the request is
/// one the cache answers.
pub(super) fn answered<'a, I: Iterator<Item = Asking<'a>> + Clone>(
    cache: &DenyCache<Vec<RuleState>>,
    backend: &RedisBackend,
    states: &[RuleState],
    asked: &Asked<I>,
    looked_up: Option<(u64, Option<u64>)>,
) {
    if states.iter().all(|s| s.allowed) {
        // Taken after the reply: a denial cached while this call was out may predate what it
        // recorded.
        if cache.has_denials() {
            let now = cache_now(backend, cache);
            cache.admitted(now, DENY_CACHE_MAX_WAIT, || state_keys(cache, asked));
        }
    } else if let (Some((now, looked)), Some(wait)) = (looked_up, cached_wait(states)) {
        let key = looked.unwrap_or_else(|| cache.key(asked));
        cache.insert(key, states.to_vec(), now, wait);
    }
}

/// How long a denial of `states` is cached: Redis reports waits in whole milliseconds, rounded
/// up, so the true wait may be up to 1 ms shorter; the cache keeps the denial 1 ms less (at most
/// [`DENY_CACHE_MAX_WAIT`]), and never denies a request Redis would admit. `None`: not at all.
pub(super) fn cached_wait(states: &[RuleState]) -> Option<Duration> {
    states
        .iter()
        .filter(|s| !s.allowed)
        .map(|s| s.retry_after.saturating_sub(Duration::from_millis(1)))
        .max()
        .map(|wait| wait.min(DENY_CACHE_MAX_WAIT))
        .filter(|wait| !wait.is_zero())
}

/// Now on the deny cache's clock: Redis' frozen time under the test seam, else the process'
/// monotonic clock plus the test shift.
pub(super) fn cache_now<V>(backend: &RedisBackend, cache: &DenyCache<V>) -> u64 {
    backend
        .frozen_us()
        .unwrap_or_else(|| cache.now(backend.shift_us()))
}

/// The deny cache's keys of the Redis states the request `asked` reads: a rule (name,
/// algorithm) and a key.
pub(super) fn state_keys<'a, V>(
    cache: &DenyCache<V>,
    asked: &Asked<impl Iterator<Item = Asking<'a>> + Clone>,
) -> impl Iterator<Item = u64> {
    let asked = asked.0.clone();
    asked.map(|(rule, _, key, _)| cache.key((rule.name(), rule.algorithm(), key.as_bytes())))
}

/// One rule of a request as the deny cache knows it: the rule, the quota and cost it is
/// decided with, and the key.
pub(super) type Asking<'a> = (&'a Rule, &'a Quota, &'a Key, u32);

/// A request as the deny cache knows it: every rule's name, algorithm, quota and whether it
/// reads overrides, its key and its cost.
#[derive(Clone)]
pub(super) struct Asked<I>(pub(super) I);

impl<'a, I: Iterator<Item = Asking<'a>> + Clone> Hash for Asked<I> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for (rule, quota, key, cost) in self.0.clone() {
            rule.name().hash(state);
            rule.algorithm().hash(state);
            quota.hash(state);
            rule.reads_overrides().hash(state);
            key.as_bytes().hash(state);
            cost.hash(state);
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
