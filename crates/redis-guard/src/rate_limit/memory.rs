//! The in-process limiter: the same algorithms and decisions as Redis, for development, tests and
//! single-instance deployments.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::algorithm::{self, Commit, RuleState, State, ceil_ms};
use super::limiter::{BoxFuture, Check, Limiter, LimiterError};
use crate::backend::{Clock, MonotonicClock};

/// Default bound on the number of keys a [`MemoryLimiter`] tracks.
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// A limiter that keeps its state in this process.
///
/// Decisions are the same as [`RedisLimiter`](super::RedisLimiter)'s for the same sequence of
/// requests and times; only the clock differs (a monotonic clock here, Redis `TIME` there). It
/// limits one process: behind two replicas each one admits the full quota, which is why the
/// Redis limiter exists.
///
/// Memory is bounded: expired state is swept out as the limiter is used (amortized O(1) per
/// request), and when more than [`max_keys`](MemoryLimiter::max_keys) keys are live at once the
/// half closest to expiry is dropped, so a flood of distinct keys loosens the limit for the
/// quietest clients instead of growing memory without end.
///
/// Clones share state.
///
/// ```
/// use redis_guard::rate_limit::{Key, Limiter, MemoryLimiter, Quota, Rule};
/// use redis_guard::backend::ManualClock;
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let clock = ManualClock::new();
/// let limiter = MemoryLimiter::with_clock(clock.clone());
/// let rule = Rule::new("api", Quota::per_minute(1));
/// assert!(limiter.check(&rule, Key::from("k")).await.unwrap().allowed);
/// assert!(!limiter.check(&rule, Key::from("k")).await.unwrap().allowed);
/// clock.advance(Duration::from_secs(60));
/// assert!(limiter.check(&rule, Key::from("k")).await.unwrap().allowed);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct MemoryLimiter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    clock: Box<dyn Clock>,
    max_keys: AtomicUsize,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    entries: HashMap<EntryId, Entry>,
    ops_since_sweep: usize,
}

/// What one entry is the state of: a rule, its algorithm (each keeps its own state, as on Redis)
/// and the key's digest. Never the key itself: a client that sends 16 KB user names must not
/// make the table grow by 16 KB per name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EntryId {
    rule: Arc<str>,
    algorithm: Cow<'static, str>,
    key: [u8; 16],
}

#[derive(Clone, Debug)]
struct Entry {
    state: State,
    expires_at: u64,
}

impl MemoryLimiter {
    /// A limiter on the real monotonic clock.
    #[must_use]
    pub fn new() -> Self {
        Self::with_clock(MonotonicClock::new())
    }

    /// A limiter on `clock`, e.g. a [`ManualClock`](crate::backend::ManualClock) in tests.
    #[must_use]
    pub fn with_clock(clock: impl Clock) -> Self {
        Self {
            inner: Arc::new(Inner {
                clock: Box::new(clock),
                max_keys: AtomicUsize::new(DEFAULT_MAX_KEYS),
                table: Mutex::default(),
            }),
        }
    }

    /// Bounds the number of live keys (default [`DEFAULT_MAX_KEYS`], at least 1). Clones share
    /// the bound.
    #[must_use]
    pub fn max_keys(self, max_keys: usize) -> Self {
        self.inner
            .max_keys
            .store(max_keys.max(1), Ordering::Relaxed);
        self
    }

    /// How many keys hold state right now (expired ones included until the next sweep).
    #[must_use]
    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    /// Whether no key holds state.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.inner.clock.now().as_micros()).unwrap_or(u64::MAX)
    }

    fn evaluate_now(&self, checks: &[Check]) -> Result<Vec<RuleState>, LimiterError> {
        let now = self.now_us();
        let mut table = self.inner.lock();
        let mut states = Vec::with_capacity(checks.len());
        let mut commits = Vec::with_capacity(checks.len());
        for check in checks {
            let params = check.rule.params(check.cost);
            let id = EntryId {
                rule: check.rule.name_arc().clone(),
                algorithm: check.rule.get_algorithm().key_tag(),
                key: check.key.digest_bytes(),
            };
            let current = table
                .entries
                .get_mut(&id)
                .filter(|e| e.expires_at > now)
                .map(|e| &mut e.state);
            let Some(step) = algorithm::step(current, now, &params) else {
                return Err(LimiterError::Unsupported(format!(
                    "rule `{}` uses a custom Lua algorithm, which needs Redis; the memory backend cannot run it",
                    check.rule.name()
                )));
            };
            if let Some(commit) = step.commit {
                commits.push((id, commit));
            }
            states.push(RuleState::from_parts(
                step.allowed,
                params.limit,
                step.remaining,
                ceil_ms(step.retry_after_us),
                ceil_ms(step.reset_after_us),
            ));
        }
        if states.iter().all(|s| s.allowed) {
            for (id, commit) in commits {
                table.apply(id, commit, now);
            }
        }
        table.maintain(now, self.inner.max_keys.load(Ordering::Relaxed));
        Ok(states)
    }
}

impl Default for MemoryLimiter {
    fn default() -> Self {
        Self::new()
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic elsewhere while holding the lock leaves a table that is still consistent
        // (entries are plain values), so keep going rather than propagating the poison.
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Table {
    fn apply(&mut self, id: EntryId, commit: Commit, now: u64) {
        // Same expiry as Redis' PX: whole milliseconds, rounded up.
        let expiry = |ttl_us: u64| now + ceil_ms(ttl_us) * 1000;
        match commit {
            Commit::Replace(state, ttl) => {
                self.entries.insert(
                    id,
                    Entry {
                        state,
                        expires_at: expiry(ttl),
                    },
                );
            }
            Commit::Append { at, n, ttl } => {
                let entry = self.entries.entry(id).or_insert_with(|| Entry {
                    state: State::Log(std::collections::VecDeque::new()),
                    expires_at: 0,
                });
                if entry.expires_at <= now || !matches!(entry.state, State::Log(_)) {
                    entry.state = State::Log(std::collections::VecDeque::new());
                }
                if let State::Log(log) = &mut entry.state {
                    log.extend(std::iter::repeat_n(at, usize::try_from(n).unwrap_or(0)));
                }
                entry.expires_at = expiry(ttl);
            }
        }
    }

    fn maintain(&mut self, now: u64, max_keys: usize) {
        self.ops_since_sweep += 1;
        let over = self.entries.len() > max_keys;
        if over || self.ops_since_sweep >= self.entries.len().max(1024) {
            self.entries.retain(|_, e| e.expires_at > now);
            self.ops_since_sweep = 0;
        }
        if self.entries.len() > max_keys {
            let mut expiries: Vec<u64> = self.entries.values().map(|e| e.expires_at).collect();
            let mid = expiries.len() / 2;
            let (_, cutoff, _) = expiries.select_nth_unstable(mid);
            let cutoff = *cutoff;
            self.entries.retain(|_, e| e.expires_at > cutoff);
        }
    }
}

impl Limiter for MemoryLimiter {
    fn evaluate(&self, checks: Vec<Check>) -> BoxFuture<Result<Vec<RuleState>, LimiterError>> {
        Box::pin(std::future::ready(self.evaluate_now(&checks)))
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
        let limiter = MemoryLimiter::with_clock(clock.clone()).max_keys(100);
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
