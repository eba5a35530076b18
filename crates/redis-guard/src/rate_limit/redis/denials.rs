//! What [`RedisLimiter`](crate::rate_limit::RedisLimiter) keeps in its deny cache: the key of a
//! request and of the Redis states it reads, the cache's clock, and a cached denial counted down.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use super::limiter::DENY_CACHE_MAX_WAIT;
use crate::backend::{DenyCache, RedisBackend};
use crate::rate_limit::algorithm::{Algorithm, RuleState};
use crate::rate_limit::limiter::{Check, decision_from, rule_decisions};
use crate::rate_limit::{Decision, Key, Mode, Quota, RedisLimiter, Rule};
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

/// The cached denial of the request `key` at `now` (its rules and keys `asked`), counted down,
/// and counted as a hit.
pub(super) fn cached_denial<'a>(
    cache: &DenyCache<Vec<RuleState>>,
    asked: impl Iterator<Item = (&'a Rule, &'a Key)> + Clone,
    key: u64,
    now: u64,
) -> Option<Vec<RuleState>> {
    let (states, elapsed) = cache.get(key, now, || state_keys(cache, asked.clone()))?;
    // A name two requests of different rules share (a 64-bit hash): not this one's answer.
    if states.len() != asked.clone().count() {
        return None;
    }
    for ((rule, _), _) in asked.zip(&states).filter(|(_, s)| !s.allowed) {
        telemetry::count(
            telemetry::Metric::RateLimitDenyCacheHits,
            "rule",
            rule.name_arc().into(),
            1,
        );
    }
    Some(counted_down(states, elapsed))
}

/// The rules and keys of `checks`, as the deny cache reads them.
pub(super) fn asked(checks: &[Check]) -> impl Iterator<Item = (&Rule, &Key)> + Clone {
    checks.iter().map(|c| (&*c.rule, &c.key))
}

/// Tells `cache` what Redis answered for a request (its rules and keys `asked`): an admitted
/// one forgets its keys' cached denials; a denied one is cached for its wait when `looked_up`
/// (the cache's time before the call, and the request's key in the cache when it was made)
/// says the request is one the cache answers (`key` makes its key otherwise).
pub(super) fn answered<'a>(
    cache: &DenyCache<Vec<RuleState>>,
    backend: &RedisBackend,
    states: &[RuleState],
    asked: impl Iterator<Item = (&'a Rule, &'a Key)>,
    looked_up: Option<(u64, Option<u64>)>,
    key: impl FnOnce() -> u64,
) {
    if states.iter().all(|s| s.allowed) {
        // Taken after the reply: a denial cached while this call was out may predate what it
        // recorded.
        if cache.has_denials() {
            let now = cache_now(backend, cache);
            cache.admitted(now, DENY_CACHE_MAX_WAIT, || state_keys(cache, asked));
        }
    } else if let (Some((now, looked)), Some(wait)) = (looked_up, cached_wait(states)) {
        cache.insert(looked.unwrap_or_else(key), states.to_vec(), now, wait);
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

impl RedisLimiter {
    /// The decision of a layer's `checks` when the deny cache holds it: a client denied until a
    /// known time is answered in the layer's call, with no future, no list of its checks and
    /// no round trip. `None` (Redis decides, the cache looked up again on the way) when no
    /// denial is cached, or the request is not one the cache answers as a whole: a rule in
    /// another mode than enforce, a leased or allow-listed one, or one whose denials are never
    /// cached.
    pub(super) fn denied_at_once(&self, checks: &[Check]) -> Option<Decision> {
        let cache = self.deny_cache.as_deref().filter(|c| c.has_denials())?;
        let whole = checks.iter().all(|c| {
            c.mode == Mode::Enforce && c.rule.max_block().is_none() && !c.rule.allows(&c.key)
        });
        if !whole || !cacheable(checks) || self.needs_shape(checks.iter().map(|c| &*c.rule)) {
            return None;
        }
        let now = cache_now(&self.backend, cache);
        let states = cached_denial(cache, asked(checks), cache.key(Request(checks)), now)?;
        decision_from(rule_decisions(checks), &states, &[]).ok()
    }
}

/// Now on the deny cache's clock: Redis' frozen time under the test seam, else the process'
/// monotonic clock plus the test shift.
pub(super) fn cache_now<V>(backend: &RedisBackend, cache: &DenyCache<V>) -> u64 {
    backend
        .frozen_us()
        .unwrap_or_else(|| cache.now(backend.shift_us()))
}

/// The deny cache's keys of the Redis states the rules and keys `asked` read: a rule (name,
/// algorithm) and a key.
pub(super) fn state_keys<'a, V>(
    cache: &DenyCache<V>,
    asked: impl Iterator<Item = (&'a Rule, &'a Key)>,
) -> impl Iterator<Item = u64> {
    asked.map(|(rule, key)| cache.key((rule.name(), rule.algorithm(), key.as_bytes())))
}

/// A request as the deny cache knows it: every check's rule (name, algorithm, quota, whether it
/// reads overrides), key and cost.
pub(super) struct Request<'a>(pub(super) &'a [Check]);

impl Hash for Request<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for check in self.0 {
            asking(state, &check.rule, &check.quota, &check.key, check.cost);
        }
    }
}

/// A request of plain rules (each with its own quota and cost) and their keys: the same as
/// the [`Request`] of their checks.
pub(super) struct PlainRequest<'a>(pub(super) &'a [Arc<Rule>], pub(super) &'a [Key]);

impl Hash for PlainRequest<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for (rule, key) in self.0.iter().zip(self.1) {
            asking(state, rule, rule.quota(), key, rule.cost());
        }
    }
}

/// One rule of a request, hashed as the deny cache knows it.
fn asking<H: Hasher>(state: &mut H, rule: &Rule, quota: &Quota, key: &Key, cost: u32) {
    rule.name().hash(state);
    rule.algorithm().hash(state);
    quota.hash(state);
    rule.reads_overrides().hash(state);
    key.as_bytes().hash(state);
    cost.hash(state);
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
