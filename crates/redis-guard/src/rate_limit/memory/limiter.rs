//! The in-process limiter: the same algorithms and decisions as Redis, for development, tests and
//! single-instance deployments.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::settle::InMemory;
use super::table::{EntryId, Table};
use crate::ConfigErrorKind;
use crate::backend::InProcessBuilder;
use crate::rate_limit::Few;
use crate::rate_limit::algorithm::{self, Commit, RuleState, ceil_ms};
use crate::rate_limit::decision::{HeldLease, RuleDecision};
use crate::rate_limit::lease::{Place, Receipt, request_id};
use crate::rate_limit::limiter::live;
use crate::rate_limit::limiter::operations::{self, Inspection, allow_listed_state};
use crate::rate_limit::limiter::overrides::{Effect, Override, Steer};
use crate::rate_limit::limiter::{
    Check, Engine, Held, Limiter, LimiterError, LimiterFuture, PlainStates, PlainStore, chargeable,
};
use crate::rate_limit::{Decision, Key, Lease, Mode, Rule};

/// Default bound on the number of keys a [`MemoryLimiter`] tracks.
pub(crate) const DEFAULT_MAX_KEYS: usize = 100_000;

/// A limiter that keeps its state in this process.
///
/// Decisions are the same as [`RedisLimiter`](crate::rate_limit::RedisLimiter)'s for the same
/// sequence of requests and times; only the clock differs (a monotonic clock here, Redis `TIME`
/// there). It limits one process: behind two replicas each one admits the full quota, which is why
/// the Redis limiter exists.
///
/// Memory is bounded: the table holds a fixed-size keyed hash per key (never the key), and at
/// most [`capacity`](InProcessBuilder::capacity) states (and as many override records). It is
/// split into shards that lock apart, a power of two of them (one below 128 keys, at most 64),
/// each holding its share of the capacity; a decision locks only the shards of its keys and
/// looks each key up once. Expired state is swept out a shard at a time as the limiter is used.
/// A new key that finds its shard full drops the shard's expired state first, then the
/// sixteenth of its states closest to expiry (the quietest clients'), so a flood of distinct
/// keys loosens the limit for them instead of growing memory without end; with several shards
/// that happens when the key's shard is full, which can be before the whole table is.
///
/// Clones share state.
///
/// ```
/// use redis_guard::rate_limit::{Key, MemoryLimiter, Quota, Rule};
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
    pub(super) table: Arc<Table>,
    /// Live quotas and modes set on this limiter ([`Rule::live`]), by rule name, shared by its
    /// clones.
    live: Arc<Mutex<HashMap<Arc<str>, live::LiveRecord>>>,
}

impl MemoryLimiter {
    /// A limiter on the real monotonic clock, bounded to 100 000 keys.
    #[must_use]
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder, to set the capacity or the clock.
    pub fn builder() -> InProcessBuilder<Self> {
        InProcessBuilder::new(DEFAULT_MAX_KEYS, |capacity, clock| Self {
            table: Arc::new(Table::new(capacity, clock)),
            live: Arc::default(),
        })
    }

    /// How many keys hold state right now (expired ones included until swept).
    #[must_use]
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no key holds state.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decides `checks` (known to be valid) at once, by mode as a layer does: its path in
    /// process, and its fallback while Redis is down, which must not allocate a future per
    /// request. The decision holds the leases its concurrency rules took, when it waits for its
    /// slot (a throttled rule) the receipt that gives the slot back, and when `settled` (not the
    /// fallback) whatever else the response may settle.
    pub(crate) fn decide_now(
        &self,
        checks: &[Check],
        settled: bool,
    ) -> Result<Decision, LimiterError> {
        let (states, receipt) = self.evaluate_now(checks, true, false)?;
        let rules = checks.iter().map(RuleDecision::undecided).collect();
        let mut decision = Decision::of(rules, states.as_slice(), &[])?;
        let keep = settled || !decision.wait.is_zero();
        decision.lease = HeldLease(
            Lease::new(receipt.into_iter().collect())
                .filter(|l| keep || l.holds_leases())
                .map(Arc::new),
        );
        Ok(decision)
    }

    /// Decides plain `rules` for `keys` ([`MemoryPlain`]), all or nothing.
    fn plain_now(&self, rules: &[Arc<Rule>], keys: &[Key]) -> Result<Few<RuleState>, LimiterError> {
        let ([rule], [key]) = (rules, keys) else {
            // Several rules: as the general engine decides them.
            let checks = rules.iter().zip(keys);
            let checks: Few<Check> = checks.map(|(r, k)| Check::shared(r, k.clone())).collect();
            return Ok(self.evaluate_now(checks.as_slice(), true, false)?.0);
        };
        // The usual single rule: its state found once, changed in place when it admits. Kept
        // small, as this runs under the shard's lock.
        let now = self.table.now_us();
        let id = self.table.state_id(rule, key);
        let decided = self.table.decide(id, now, |current| {
            if rule.allows(key) {
                return (Some(allow_listed_state(rule.quota().limit())), None);
            }
            let params = rule.params(rule.quota(), rule.cost(), Mode::Enforce);
            // `None` for an algorithm this limiter cannot run (never a plain rule's).
            let Some(step) = algorithm::step(current, now, &params) else {
                return (None, None);
            };
            let state = RuleState::from_parts(
                step.allowed,
                params.limit,
                step.remaining,
                ceil_ms(step.retry_after_us),
                ceil_ms(step.reset_after_us),
            );
            (Some(state), step.commit.filter(|_| step.allowed))
        });
        decided
            .map(|state| Few::from_buf([state]))
            .ok_or_else(|| custom_needs_redis(rule))
    }

    /// Evaluates `checks`. `by_mode`: as the layer evaluates rules ([`Mode`]): the enforced
    /// checks all or nothing, each other one on its own; otherwise every check all or nothing.
    /// `dry`: records nothing (inspect). The states, kept inline for the usual single rule (the
    /// layer's path allocates no list of them), and the receipt of the leases taken, if any.
    fn evaluate_now(
        &self,
        checks: &[Check],
        by_mode: bool,
        dry: bool,
    ) -> Result<(Few<RuleState>, Option<Receipt>), LimiterError> {
        // The checks a response may settle (the request is admitted then: kept only if so);
        // with a throttled rule, every counted check: a waiter that goes away gives them back.
        let throttled = checks.iter().any(|c| c.rule.max_wait().is_some());
        let settled: Vec<Check> = checks
            .iter()
            .filter(|c| {
                !dry && (c.rule.settles_after_response() || (throttled && !c.rule.allows(&c.key)))
            })
            .cloned()
            .collect();
        let request = (!dry
            && (!settled.is_empty() || checks.iter().any(|c| c.rule.algorithm().is_lease())))
        .then(request_id);
        let mut leases = Vec::new();
        // Each check's state entry, and its override record's when its rule reads them.
        let mut ids: Few<(EntryId, Option<EntryId>)> = Few::default();
        for c in checks {
            let record = c.rule.reads_overrides();
            let record = record.then(|| self.table.record_id(&c.rule, &c.key));
            ids.push((self.table.state_id(&c.rule, &c.key), record));
        }
        let every = ids.as_slice().iter().flat_map(|&(id, oid)| [Some(id), oid]);
        let now = self.table.now_us();
        let mut table = self.table.lock(every.flatten());
        let mut states = Few::default();
        let mut commits = Few::default();
        // Override records changed by bans in this evaluation, stored whatever the decision.
        let mut records: Vec<(EntryId, Override)> = Vec::new();
        for (check, &(id, oid)) in checks.iter().zip(ids.as_slice()) {
            if check.rule.allows(&check.key) {
                states.push(allow_listed_state(check.rule.quota().limit()));
                continue;
            }
            // Cost 0 is a probe: decided as one unit, never recorded.
            let probe = check.cost == 0;
            let mut params = check.decided_params(check.cost.max(1));
            if probe || dry {
                // As the scripts: only a request that records anything can wait for its slot.
                params.max_wait_us = 0;
            }
            let mut current = table.state(id, now);
            let Some(step) = algorithm::step(current.as_deref_mut(), now, &params) else {
                return Err(custom_needs_redis(&check.rule));
            };
            // Nothing recorded: an admitted probe reports the state as it stands.
            let reset_us = (probe && step.allowed)
                .then(|| algorithm::standing_reset(current.as_deref(), now, &params))
                .flatten()
                .unwrap_or(step.reset_after_us);
            // As the scripts: the override record applies after the algorithm.
            // As on Redis, only a rule that reads overrides pays for the lookup.
            let mut record = oid.map_or_else(Override::default, |oid| table.record(oid, now));
            let mut effect = record.effect(now);
            if let (false, Effect::None, false, Some(bans), Some(oid)) =
                (step.allowed, effect, dry, check.rule.bans(), oid)
            {
                record.strike(now, bans.micros());
                records.push((oid, record));
                effect = record.effect(now);
            }
            let (allowed, remaining, retry_us, reset_us, commit) = match effect {
                Effect::None if probe && step.allowed => {
                    (true, step.remaining + 1, 0, reset_us, None)
                }
                Effect::None => (
                    step.allowed,
                    step.remaining,
                    step.retry_after_us,
                    reset_us,
                    step.commit,
                ),
                // Not counted: what is left is what was left before the request.
                Effect::Allowed => {
                    let left = step.remaining + if step.allowed { params.cost } else { 0 };
                    (true, left, 0, reset_us, None)
                }
                Effect::Blocked(wait) => (false, 0, wait, reset_us.max(wait), None),
            };
            if let Some(commit) = commit {
                let alone = by_mode && check.mode != Mode::Enforce;
                commits.push((id, commit, alone.then_some(allowed)));
            }
            states.push(RuleState::from_parts(
                allowed,
                params.limit,
                remaining,
                ceil_ms(retry_us),
                ceil_ms(reset_us),
            ));
        }
        let together = checks
            .iter()
            .zip(states.as_slice())
            .filter(|(c, _)| !by_mode || c.mode == Mode::Enforce)
            .all(|(_, s)| s.allowed);
        for (id, commit, alone) in commits {
            if !dry && alone.unwrap_or(together) {
                if let (Commit::Lease { ttl, .. }, Some(request)) = (&commit, &request) {
                    leases.push((id, *ttl));
                    table.apply(id, commit, now, request);
                } else {
                    table.apply(id, commit, now, "");
                }
            }
        }
        for (oid, record) in records {
            table.store(oid, record, now);
        }
        drop(table);
        let admitted = states.as_slice().iter().all(|s| s.allowed);
        let receipt = request
            .filter(|_| !leases.is_empty() || (admitted && !settled.is_empty()))
            .map(|request| Receipt {
                request,
                place: Place::Memory(InMemory {
                    limiter: self.clone(),
                    leases,
                    settled,
                    evaluated_at: now,
                }),
            });
        Ok((states, receipt))
    }
}

/// The error of a rule whose custom Lua algorithm this limiter cannot run.
fn custom_needs_redis(rule: &Rule) -> LimiterError {
    rule.problem(
        ConfigErrorKind::Unsupported,
        "uses a custom Lua algorithm, which needs Redis; the memory backend cannot run it",
        "Rule::with_algorithm",
    )
    .into()
}

/// A layer's plain rules on a [`MemoryLimiter`]: decided at once.
#[derive(Debug)]
struct MemoryPlain {
    limiter: MemoryLimiter,
    rules: Box<[Arc<Rule>]>,
}

impl PlainStore for MemoryPlain {
    fn decide(&self, keys: Few<Key>) -> Option<PlainStates> {
        // On an error nothing was recorded: the general engine decides again, and applies the
        // failure policy.
        let states = self.limiter.plain_now(&self.rules, keys.as_slice()).ok()?;
        Some(PlainStates::Now(states))
    }
}

impl Default for MemoryLimiter {
    fn default() -> Self {
        Self::new()
    }
}

impl crate::sealed::Sealed for MemoryLimiter {}

impl Limiter for MemoryLimiter {}

impl Engine for MemoryLimiter {
    fn in_process(&self) -> bool {
        true
    }

    fn live_record(&self, rule: &Rule) -> live::LiveRecord {
        let table = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        table.get(rule.name()).copied().unwrap_or_default()
    }

    fn set_live(&self, rule: &Rule, change: live::LiveChange) -> LimiterFuture<u64> {
        let set = live::valid(self, rule, change).map(|()| {
            let mut table = self.live.lock().unwrap_or_else(PoisonError::into_inner);
            let record = table.entry(Arc::clone(rule.name_arc())).or_default();
            let old = *record;
            *record = change.applied(old, old.version + 1);
            live::log_change(rule, old, change, record.version);
            record.version
        });
        Box::pin(std::future::ready(set))
    }

    fn charge_checks(&self, checks: Vec<Check>) -> LimiterFuture<()> {
        let charged = chargeable(checks).map(|checks| {
            let lines: Vec<(&Check, i64)> = checks.iter().map(|c| (c, i64::from(c.cost))).collect();
            self.settle_now(&lines, 0);
        });
        Box::pin(std::future::ready(charged))
    }

    fn evaluate_leased(&self, checks: Vec<Check>) -> LimiterFuture<Held> {
        let held = self
            .evaluate_now(&checks, false, false)
            .map(|(states, receipt)| {
                (
                    states.into_vec(),
                    Lease::new(receipt.into_iter().collect()),
                    Vec::new(),
                )
            });
        Box::pin(std::future::ready(held))
    }

    fn evaluate_at_once(&self, checks: &[Check]) -> Option<Result<Decision, LimiterError>> {
        Some(self.decide_now(checks, true))
    }

    fn plain_store(&self, rules: &[Arc<Rule>]) -> Option<Arc<dyn PlainStore>> {
        Some(Arc::new(MemoryPlain {
            limiter: self.clone(),
            rules: rules.into(),
        }))
    }

    fn inspect_key(&self, rule: &Rule, key: Key) -> LimiterFuture<Inspection> {
        let seen = operations::valid(self, rule).and_then(|()| {
            if rule.allows(&key) {
                return Ok(Inspection::allow_listed(rule.quota().limit()));
            }
            let oid = self.table.record_id(rule, &key);
            let mut check = Check::new(rule.clone(), key);
            live::apply(self, std::slice::from_mut(&mut check));
            let state = self
                .evaluate_now(std::slice::from_ref(&check), false, true)?
                .0
                .as_slice()[0];
            let now = self.table.now_us();
            // A rule that reads no record has none that applies.
            let record = rule
                .reads_overrides()
                .then(|| self.table.lock([oid]).record(oid, now));
            Ok(Inspection::new(
                state,
                record.unwrap_or_default(),
                now,
                rule.cost(),
            ))
        });
        Box::pin(std::future::ready(seen))
    }

    fn reset_key(&self, rule: &Rule, key: Key) -> LimiterFuture<()> {
        let done = operations::valid(self, rule).map(|()| {
            let (id, oid) = (
                self.table.state_id(rule, &key),
                self.table.record_id(rule, &key),
            );
            let mut table = self.table.lock([id, oid]);
            table.remove(id);
            table.remove(oid);
        });
        Box::pin(std::future::ready(done))
    }

    fn steer_key(&self, rule: &Rule, key: Key, steer: Steer) -> LimiterFuture<()> {
        let done = operations::valid_for(self, rule, steer.duration()).map(|_| {
            let now = self.table.now_us();
            let oid = self.table.record_id(rule, &key);
            let mut table = self.table.lock([oid]);
            let mut record = table.record(oid, now);
            record.steer(steer, now);
            table.store(oid, record, now);
        });
        Box::pin(std::future::ready(done))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::backend::ManualClock;
    use crate::rate_limit::{Key, Quota, Rule};

    /// Threads deciding two rules at once, a key each for the first and one shared key for the
    /// second: their shards are locked together, so the shared quota is charged exactly and no
    /// denied request charges the first rule (and no two decisions wait for each other).
    #[test]
    fn decisions_from_many_threads_stay_all_or_nothing() {
        let limiter = MemoryLimiter::new();
        let rules = [
            Arc::new(Rule::new("each", Quota::per_hour(1_000))),
            Arc::new(Rule::new("all", Quota::per_hour(60))),
        ];
        let admitted: u32 = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4_u64)
                .map(|t| {
                    let (limiter, rules) = (&limiter, &rules);
                    scope.spawn(move || {
                        let mut admitted = 0;
                        for i in 0..100 {
                            let keys = [Key::from(t * 1_000 + i % 7), Key::from("shared")];
                            let states = limiter.plain_now(rules, &keys).unwrap();
                            admitted += u32::from(states.as_slice().iter().all(|s| s.allowed));
                        }
                        admitted
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).sum()
        });
        assert_eq!(admitted, 60);
        // What each key of the first rule was charged: only the admitted requests.
        let charged: u32 = (0..4_u64)
            .flat_map(|t| (0..7).map(move |i| Key::from(t * 1_000 + i)))
            .map(|key| {
                let states = limiter.plain_now(&rules[..1], &[key]).unwrap();
                999 - states.as_slice()[0].remaining
            })
            .sum();
        assert_eq!(charged, 60);
    }

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
