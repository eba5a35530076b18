//! The in-process limiter: the same algorithms and decisions as Redis, for development, tests and
//! single-instance deployments.

use std::collections::VecDeque;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use super::algorithm::{self, Commit, RuleState, State, ceil_ms};
use super::limiter::{BoxFuture, Check, Limiter, LimiterError, decision_from, rule_decisions};
use super::{Decision, Mode};
use crate::backend::{ExpiringTable, InProcess, InProcessBuilder};

/// Default bound on the number of keys a [`MemoryLimiter`] tracks.
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// A limiter that keeps its state in this process.
///
/// Decisions are the same as [`RedisLimiter`](super::RedisLimiter)'s for the same sequence of
/// requests and times; only the clock differs (a monotonic clock here, Redis `TIME` there). It
/// limits one process: behind two replicas each one admits the full quota, which is why the
/// Redis limiter exists.
///
/// Memory is bounded: the table holds a fixed-size digest per key (never the key), expired
/// state is swept out a few entries at a time as the limiter is used, and past
/// [`capacity`](InProcessBuilder::capacity) keys the state closest to expiry (the quietest
/// clients') is dropped, so a flood of distinct keys loosens the limit for them instead of
/// growing memory without end. Every operation is O(log n).
///
/// Clones share state.
///
/// ```
/// use redis_guard::rate_limit::{Key, Limiter, MemoryLimiter, Quota, Rule};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let limiter = MemoryLimiter::new();
/// let bounded = MemoryLimiter::builder().capacity(10_000).build();
/// let rule = Rule::new("api", Quota::per_minute(1));
/// assert!(limiter.check(&rule, Key::from("k")).await.unwrap().allowed);
/// assert!(!limiter.check(&rule, Key::from("k")).await.unwrap().allowed);
/// # let _ = bounded; }
/// ```
#[derive(Clone, Debug)]
pub struct MemoryLimiter {
    inner: Arc<InProcess<Table>>,
    /// Keys the table's entry ids: SipHash with this limiter's random keys (clones share them).
    hasher: RandomState,
}

#[derive(Debug)]
struct Table(ExpiringTable<EntryId, State>);

/// What one entry is the state of: a rule, its algorithm (each keeps its own state, as on Redis)
/// and the key, as 128 bits of keyed SipHash. Never the key itself: a client that sends 16 KB
/// user names must not make the table grow by 16 KB per name. The hash keys are random per
/// limiter, so clients cannot aim collisions at each other; a cryptographic digest (as in Redis
/// key names, which outlive the process) would cost more on every request for nothing here.
type EntryId = [u64; 2];

impl MemoryLimiter {
    /// A limiter on the real monotonic clock, bounded by [`DEFAULT_MAX_KEYS`].
    #[must_use]
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder, to set the capacity or the clock.
    pub fn builder() -> InProcessBuilder<Self> {
        InProcessBuilder::new(DEFAULT_MAX_KEYS, |capacity, clock| Self {
            inner: Arc::new(InProcess::new(Table(ExpiringTable::new(capacity)), clock)),
            hasher: RandomState::new(),
        })
    }

    /// How many keys hold state right now (expired ones included until swept).
    #[must_use]
    pub fn len(&self) -> usize {
        self.inner.lock().0.len()
    }

    /// Whether no key holds state.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn entry_id(&self, check: &Check) -> EntryId {
        // One pass over the (possibly long) key, then two outputs from two different endings.
        let mut h = self.hasher.build_hasher();
        (
            check.rule.name(),
            check.rule.algorithm(),
            check.key.as_bytes(),
        )
            .hash(&mut h);
        let mut h1 = h.clone();
        h.write_u8(0);
        h1.write_u8(1);
        [h.finish(), h1.finish()]
    }

    /// Decides `checks` (known to be valid) at once: the layer's fallback, which must not
    /// allocate a future per request while Redis is down.
    pub(crate) fn decide_now(&self, checks: &[Check]) -> Result<Decision, LimiterError> {
        decision_from(rule_decisions(checks), self.evaluate_now(checks, true)?)
    }

    /// `by_mode`: as the layer evaluates rules ([`Mode`]): the enforced checks all or nothing,
    /// each other one on its own. Otherwise every check all or nothing.
    fn evaluate_now(
        &self,
        checks: &[Check],
        by_mode: bool,
    ) -> Result<Vec<RuleState>, LimiterError> {
        let now = self.inner.now_us();
        let mut table = self.inner.lock();
        let mut states = Vec::with_capacity(checks.len());
        let mut commits = Vec::with_capacity(checks.len());
        for check in checks {
            let params = check.rule.params(check.cost);
            let id = self.entry_id(check);
            let current = table.0.get_live_mut(&id, now);
            let Some(step) = algorithm::step(current, now, &params) else {
                return Err(LimiterError::Unsupported(format!(
                    "rule `{}` uses a custom Lua algorithm, which needs Redis; the memory backend cannot run it",
                    check.rule.name()
                )));
            };
            if let Some(commit) = step.commit {
                let alone = by_mode && check.rule.mode() != Mode::Enforce;
                commits.push((id, commit, alone.then_some(step.allowed)));
            }
            states.push(RuleState::from_parts(
                step.allowed,
                params.limit,
                step.remaining,
                ceil_ms(step.retry_after_us),
                ceil_ms(step.reset_after_us),
            ));
        }
        let together = checks
            .iter()
            .zip(&states)
            .filter(|(c, _)| !by_mode || c.rule.mode() == Mode::Enforce)
            .all(|(_, s)| s.allowed);
        for (id, commit, alone) in commits {
            if alone.unwrap_or(together) {
                table.apply(id, commit, now);
            }
        }
        table.0.maintain(now, |_, _| {});
        Ok(states)
    }
}

impl Default for MemoryLimiter {
    fn default() -> Self {
        Self::new()
    }
}

impl Table {
    fn apply(&mut self, id: EntryId, commit: Commit, now: u64) {
        // Same expiry as Redis' PX: whole milliseconds, rounded up.
        let expiry = |ttl_us: u64| now + ceil_ms(ttl_us) * 1000;
        match commit {
            Commit::Replace(state, ttl) => {
                self.0.insert(id, state, expiry(ttl));
            }
            Commit::Append { at, n, ttl } => {
                let entries = std::iter::repeat_n(at, usize::try_from(n).unwrap_or(0));
                let live_log =
                    self.0.is_live(&id, now) && matches!(self.0.get_mut(&id), Some(State::Log(_)));
                if live_log {
                    if let Some(State::Log(log)) = self.0.get_mut(&id) {
                        log.extend(entries);
                    }
                    self.0.set_deadline(&id, expiry(ttl));
                } else {
                    self.0.insert(
                        id,
                        State::Log(entries.collect::<VecDeque<_>>()),
                        expiry(ttl),
                    );
                }
            }
        }
    }
}

impl crate::sealed::Sealed for MemoryLimiter {}

impl Limiter for MemoryLimiter {
    fn evaluate(&self, checks: Vec<Check>) -> BoxFuture<Result<Vec<RuleState>, LimiterError>> {
        Box::pin(std::future::ready(self.evaluate_now(&checks, false)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::backend::ManualClock;
    use crate::rate_limit::{Key, Quota, Rule};

    #[tokio::test]
    async fn expired_state_is_swept_and_the_bound_holds() {
        let clock = ManualClock::new();
        let limiter = MemoryLimiter::builder()
            .clock(clock.clone())
            .capacity(100)
            .build();
        let rule = Rule::new("r", Quota::per_second(10));
        for i in 0..1000u64 {
            limiter.check(&rule, Key::from(i)).await.unwrap();
            assert!(limiter.len() <= 100, "{} keys after {i}", limiter.len());
        }
        clock.advance(Duration::from_secs(2));
        for i in 0..1100u64 {
            limiter
                .check(&rule, Key::from(10_000 + (i % 3)))
                .await
                .unwrap();
        }
        assert_eq!(limiter.len(), 3, "expired keys were swept");
    }
}
