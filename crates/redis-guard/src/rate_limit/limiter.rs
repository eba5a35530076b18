//! The backend-neutral interface: evaluate a request against rules, all or nothing.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::decision::RuleDecision;
use futures_util::future::join_all;

use super::algorithm::Params;
use super::decision::HeldLease;
use super::{Decision, Inspection, Key, Lease, Mode, Quota, Rule, RuleError, RuleState};
use crate::backend::BackendError;
use crate::telemetry;

/// A boxed, sendable future, as [`Limiter`] methods return.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The states of an evaluation, and the concurrency leases it took.
pub(crate) type Held = (Vec<RuleState>, Option<Lease>);

/// One rule applied to one key with a cost: a line of an evaluation.
#[derive(Clone, Debug)]
pub struct Check {
    /// Shared with the layer's rule: a check costs a reference count, not a copy of the rule.
    pub(crate) rule: Arc<Rule>,
    pub(crate) key: Key,
    pub(crate) cost: u32,
    /// The rule's quota, or the one resolved for this request.
    pub(crate) quota: Quota,
    /// Given a quota ([`with_quota`](Self::with_quota)): the rule's quota varies, so its state
    /// on Redis keeps the quota's shape (never the lean GCRA script's bare TAT).
    pub(crate) varying: bool,
}

impl Check {
    /// `rule` for `key`, costing the rule's cost.
    #[must_use]
    pub fn new(rule: Rule, key: Key) -> Self {
        Self::shared(&Arc::new(rule), key)
    }

    /// `rule` (a layer's, shared) for `key`, costing the rule's cost.
    pub(crate) fn shared(rule: &Arc<Rule>, key: Key) -> Self {
        Self {
            rule: Arc::clone(rule),
            key,
            cost: rule.cost(),
            quota: *rule.quota(),
            varying: false,
        }
    }

    /// Overrides the cost for this request.
    #[must_use]
    pub fn with_cost(mut self, cost: u32) -> Self {
        self.cost = cost;
        self
    }

    /// Decides this request with `quota` instead of the rule's own: the quota of the caller's
    /// plan, as a layer's [`Rule::with_quota_from`] resolves it. A key's state carries over
    /// when its quota changes (see there), provided every check of a rule whose quota varies
    /// says its quota, the rule's own included: on Redis, that keeps the quota's shape with the
    /// key's state.
    ///
    /// ```
    /// use redis_guard::rate_limit::{Check, Key, Limiter, MemoryLimiter, Quota, Rule};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter = MemoryLimiter::new();
    /// let api = Rule::new("api", Quota::per_hour(10));
    /// let pro = Quota::per_hour(100);
    /// for _ in 0..10 {
    ///     limiter.check(&api, Key::from("acme")).await.unwrap();
    /// }
    /// assert!(!limiter.check(&api, Key::from("acme")).await.unwrap().allowed);
    /// // Upgraded mid-hour: 90 more, not 100.
    /// let upgraded = Check::new(api.clone(), Key::from("acme")).with_quota(pro);
    /// let d = limiter.check_all(vec![upgraded]).await.unwrap();
    /// assert!(d.allowed);
    /// assert_eq!(d.remaining, 89);
    /// # }
    /// ```
    #[must_use]
    pub fn with_quota(mut self, quota: Quota) -> Self {
        self.quota = quota;
        self.varying = true;
        self
    }

    /// The quota this request is decided with.
    #[must_use]
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The algorithm's parameters for this request, `cost` units.
    pub(crate) fn params(&self, cost: u32) -> Params {
        self.rule.params(&self.quota, cost)
    }

    /// The rule.
    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    /// The key.
    #[must_use]
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The cost of this request.
    #[must_use]
    pub fn cost(&self) -> u32 {
        self.cost
    }

    pub(crate) fn validate(&self) -> Result<(), RuleError> {
        self.rule.validate()?;
        if self.cost != self.rule.cost() || self.quota != *self.rule.quota() {
            self.rule.resolved_problem(&self.quota, self.cost)?;
        }
        Ok(())
    }
}

/// Why a limiter could not decide.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LimiterError {
    /// The store failed: unreachable, too slow, a script error (a custom algorithm that does not
    /// compile or breaks its contract: [`BackendError::Script`]), or a reply that makes no sense.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The rule cannot work.
    #[error(transparent)]
    Rule(#[from] RuleError),
    /// Nothing to evaluate.
    #[error("no rules to evaluate")]
    Empty,
    /// The limiter cannot run this rule (a custom Lua algorithm on the memory backend).
    #[error("{0}")]
    Unsupported(String),
    /// A penalty or allow-list entry must last from 1 ms to
    /// [`MAX_OVERRIDE`](super::MAX_OVERRIDE).
    #[error("a penalty or allow-list entry of {0:?}: use 1 ms to one year")]
    Duration(Duration),
}

/// Decides whether requests are admitted: implemented by [`RedisLimiter`] and [`MemoryLimiter`]
/// (and `Arc` of either).
///
/// This trait is **sealed**: it cannot be implemented outside this crate, because the types its
/// [`evaluate`](Limiter::evaluate) moves are not a stable contract yet. Custom decision logic
/// plugs in as a Lua algorithm ([`CustomAlgorithm`](crate::rate_limit::CustomAlgorithm)), which
/// runs inside the same script with the same guarantees.
///
/// Implementations must evaluate all checks of one call atomically: admit the request only if
/// every check admits it, and record nothing when any denies.
///
/// [`RedisLimiter`]: crate::rate_limit::RedisLimiter
/// [`MemoryLimiter`]: crate::rate_limit::MemoryLimiter
pub trait Limiter: crate::sealed::Sealed + Send + Sync + fmt::Debug + 'static {
    /// Evaluates `checks` (validated, non-empty) and returns one state per check, in order.
    ///
    /// A concurrency rule's lease ([`Rule::concurrency`]) is released as soon as it is taken:
    /// [`check_all`](Self::check_all) returns a [`Decision`] that holds it.
    fn evaluate(&self, checks: Vec<Check>) -> BoxFuture<Result<Vec<RuleState>, LimiterError>>;

    /// Evaluates `checks` as [`evaluate`](Self::evaluate), and hands back the concurrency
    /// leases an admitted request took. Not part of the stable interface.
    #[doc(hidden)]
    fn evaluate_leased(&self, checks: Vec<Check>) -> BoxFuture<Result<Held, LimiterError>> {
        let states = self.evaluate(checks);
        Box::pin(async move { Ok((states.await?, None)) })
    }

    /// Decides `checks` (validated, non-empty) at once, by mode as a layer evaluates them (the
    /// enforced ones together, all or nothing, each [`Mode::Shadow`] or [`Mode::Soft`] one on
    /// its own), when this limiter decides in process: `None` when it needs a future (Redis).
    /// The decision holds the concurrency leases it took, whether or not they hold any. Not
    /// part of the stable interface.
    #[doc(hidden)]
    fn evaluate_at_once(&self, checks: &[Check]) -> Option<Result<Decision, LimiterError>> {
        let _ = checks;
        None
    }

    /// Why this limiter cannot work as configured (e.g. a zero timeout, which would fail every
    /// decision), or `None`. [`RateLimitLayerBuilder::build`] refuses such a limiter, and
    /// [`check_all`](Limiter::check_all) answers [`LimiterError::Rule`] without calling
    /// [`evaluate`](Limiter::evaluate).
    ///
    /// [`RateLimitLayerBuilder::build`]: crate::rate_limit::RateLimitLayerBuilder::build
    fn config_problem(&self) -> Option<String> {
        None
    }

    /// Checks one request for `key` against `rule`: the call for limits that need the request
    /// body, such as "5 calls per minute per phone number".
    ///
    /// ```
    /// use redis_guard::rate_limit::{Key, Limiter, MemoryLimiter, Quota, Rule};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter = MemoryLimiter::new();
    /// let calls = Rule::new("calls", Quota::per_minute(5));
    /// for _ in 0..5 {
    ///     assert!(limiter.check(&calls, Key::from("+15550100")).await.unwrap().allowed);
    /// }
    /// assert!(!limiter.check(&calls, Key::from("+15550100")).await.unwrap().allowed);
    /// # }
    /// ```
    fn check(&self, rule: &Rule, key: Key) -> BoxFuture<Result<Decision, LimiterError>> {
        self.check_all(vec![Check::new(rule.clone(), key)])
    }

    /// What `rule` knows about `key`: the answer one more request would get (decided without
    /// recording anything, so inspecting never consumes quota, counts a rejection or starts a
    /// ban), and the key's penalty, runtime allow-list entry and ban level. See
    /// [`Inspection`].
    ///
    /// ```
    /// use redis_guard::rate_limit::{Key, Limiter, MemoryLimiter, Quota, Rule};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter = MemoryLimiter::new();
    /// let api = Rule::new("api", Quota::per_minute(60));
    /// for _ in 0..3 {
    ///     limiter.check(&api, Key::from("alice")).await.unwrap();
    /// }
    /// let seen = limiter.inspect(&api, Key::from("alice")).await.unwrap();
    /// assert_eq!(seen.state.remaining, 57);
    /// assert_eq!(limiter.inspect(&api, Key::from("alice")).await.unwrap(), seen);
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LimiterError`]: the store failed, or the rule is invalid.
    fn inspect(&self, rule: &Rule, key: Key) -> BoxFuture<Result<Inspection, LimiterError>>;

    /// Forgets everything `rule` knows about `key`: its quota state, penalty, runtime allow-list
    /// entry and ban history. The next request sees the full quota. On Redis every replica sees
    /// it at once; a replica that cached a denial of the key answers from that cache for at
    /// most [`DENY_CACHE_MAX_WAIT`](super::DENY_CACHE_MAX_WAIT).
    ///
    /// ```
    /// use redis_guard::rate_limit::{Key, Limiter, MemoryLimiter, Quota, Rule};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter = MemoryLimiter::new();
    /// let api = Rule::new("api", Quota::per_hour(1));
    /// assert!(limiter.check(&api, Key::from("bob")).await.unwrap().allowed);
    /// assert!(!limiter.check(&api, Key::from("bob")).await.unwrap().allowed);
    /// limiter.reset(&api, Key::from("bob")).await.unwrap();
    /// assert!(limiter.check(&api, Key::from("bob")).await.unwrap().allowed);
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LimiterError`]: the store failed, or the rule is invalid.
    fn reset(&self, rule: &Rule, key: Key) -> BoxFuture<Result<(), LimiterError>>;

    /// Blocks `key` under `rule` for `duration` (1 ms to [`MAX_OVERRIDE`](super::MAX_OVERRIDE)):
    /// every request is denied by the rule, with `Retry-After` the rest of the block, on every
    /// replica. The rule must read overrides ([`Rule::with_overrides`](super::Rule::with_overrides)
    /// or bans; otherwise [`LimiterError::Unsupported`]). Replaces an earlier penalty and ends
    /// a runtime allow-list entry; a
    /// [`reset`](Self::reset) or [`allow`](Self::allow) lifts it. Denials during the block
    /// record nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::rate_limit::{Key, Limiter, MemoryLimiter, Quota, Rule};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter = MemoryLimiter::new();
    /// let api = Rule::new("api", Quota::per_minute(60)).with_overrides();
    /// limiter.penalize(&api, Key::from("mallory"), Duration::from_secs(600)).await.unwrap();
    /// let d = limiter.check(&api, Key::from("mallory")).await.unwrap();
    /// assert!(!d.allowed);
    /// assert_eq!(d.retry_after, Duration::from_secs(600));
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LimiterError`]: the store failed, the rule is invalid, or the duration is out of range.
    fn penalize(
        &self,
        rule: &Rule,
        key: Key,
        duration: Duration,
    ) -> BoxFuture<Result<(), LimiterError>>;

    /// Puts `key` on `rule`'s runtime allow list for `duration` (1 ms to
    /// [`MAX_OVERRIDE`](super::MAX_OVERRIDE)): the rule admits it without counting, on every
    /// replica, until the entry expires. The rule must read overrides, as for
    /// [`penalize`](Self::penalize). Ends a penalty or ban in progress (not the ban history). For a list fixed at start, use
    /// [`Rule::with_allowed_keys`](super::Rule::with_allowed_keys), which costs no Redis call.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::rate_limit::{Key, Limiter, MemoryLimiter, Quota, Rule};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter = MemoryLimiter::new();
    /// let api = Rule::new("api", Quota::per_hour(1)).with_overrides();
    /// limiter.allow(&api, Key::from("load-test"), Duration::from_secs(3600)).await.unwrap();
    /// for _ in 0..10 {
    ///     assert!(limiter.check(&api, Key::from("load-test")).await.unwrap().allowed);
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LimiterError`]: the store failed, the rule is invalid, or the duration is out of range.
    fn allow(
        &self,
        rule: &Rule,
        key: Key,
        duration: Duration,
    ) -> BoxFuture<Result<(), LimiterError>>;

    /// Charges `key` `cost` more units of `rule` whatever is left: a cost learnt after the
    /// request was admitted (the tokens an answer used, once its stream ended). The key may go
    /// over its limit and then waits until the debt is paid (GCRA and the window algorithms keep
    /// all of it; the token bucket empties and keeps none below). A cost of 0 does nothing. A
    /// [`RateLimitLayer`](super::RateLimitLayer) does this itself for rules that are
    /// [`charged_after_response`](super::Rule::charged_after_response).
    ///
    /// ```
    /// use redis_guard::rate_limit::{Key, Limiter, MemoryLimiter, Quota, Rule};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter = MemoryLimiter::new();
    /// let tokens = Rule::new("tokens", Quota::per_hour(10_000));
    /// limiter.charge(&tokens, Key::from("acme"), 9_000).await.unwrap();
    /// let seen = limiter.inspect(&tokens, Key::from("acme")).await.unwrap();
    /// assert_eq!(seen.state.remaining, 1_000);
    /// limiter.charge(&tokens, Key::from("acme"), 5_000).await.unwrap();
    /// assert!(!limiter.check(&tokens, Key::from("acme")).await.unwrap().allowed);
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LimiterError`]: the store failed, the rule is invalid, or its algorithm has no charge
    /// (a custom one: [`LimiterError::Unsupported`]).
    fn charge(&self, rule: &Rule, key: Key, cost: u32) -> BoxFuture<Result<(), LimiterError>> {
        self.charge_all(vec![Check::new(rule.clone(), key).with_cost(cost)])
    }

    /// [`charge`](Self::charge) for several rules and keys at once, each check's cost: one
    /// script call per hash slot on Redis.
    ///
    /// # Errors
    ///
    /// As [`charge`](Self::charge).
    fn charge_all(&self, checks: Vec<Check>) -> BoxFuture<Result<(), LimiterError>>;

    /// Checks one request against several rules, all or nothing.    /// Checks one request against several rules, all or nothing. The [`Decision`] of an
    /// admitted request holds the leases of its concurrency rules ([`Decision::lease`]).
    fn check_all(&self, checks: Vec<Check>) -> BoxFuture<Result<Decision, LimiterError>> {
        if checks.is_empty() {
            return Box::pin(std::future::ready(Err(LimiterError::Empty)));
        }
        if let Some(why) = self.config_problem() {
            return Box::pin(std::future::ready(Err(RuleError::Limiter(why).into())));
        }
        if let Some(err) = checks.iter().find_map(|c| c.validate().err()) {
            return Box::pin(std::future::ready(Err(err.into())));
        }
        decide(self, checks)
    }
}

/// The checks of a [`Limiter::charge_all`] that charge something, once every rule is known to
/// work and to have a charge.
pub(crate) fn chargeable(checks: Vec<Check>) -> Result<Vec<Check>, LimiterError> {
    for check in &checks {
        check.rule.validate()?;
        let algorithm = match check.rule.algorithm() {
            super::Algorithm::Custom(custom) => format!("the custom algorithm {}", custom.name()),
            super::Algorithm::Concurrency => "leases (a concurrency rule)".to_owned(),
            _ => continue,
        };
        return Err(LimiterError::Unsupported(format!(
            "rule `{}` uses {algorithm}, which has no charge",
            check.rule.name()
        )));
    }
    Ok(checks.into_iter().filter(|c| c.cost > 0).collect())
}

/// Evaluates checks that are known to be valid (a layer's rules were validated when it was
/// built) into a [`Decision`]: the hot path skips re-validating every rule on every request.
/// Direct calls are counted in the metrics as the layer's decisions are.
pub(crate) fn decide<L: Limiter + ?Sized>(
    limiter: &L,
    checks: Vec<Check>,
) -> BoxFuture<Result<Decision, LimiterError>> {
    // Modes are the layer's business: a direct call evaluates every rule all or nothing and
    // gets every verdict as it is.
    let mut rules = rule_decisions(&checks);
    for rule in &mut rules {
        rule.mode = Mode::Enforce;
    }
    let held = limiter.evaluate_leased(checks);
    let started = std::time::Instant::now();
    Box::pin(async move {
        let (states, lease) = held.await.map_err(|err| count_failure(&rules, err))?;
        let mut decision = decision_from(rules, &states)?;
        // A direct call settles nothing after a response: only leases are handed out.
        decision.lease = HeldLease(lease.filter(Lease::holds_leases).map(Arc::new));
        decision.record(started.elapsed());
        Ok(decision)
    })
}

/// An evaluation under way: the limiter's future of the rules' states, and the rules they will
/// fill in. The layer awaits `states` itself rather than through another boxed future.
pub(crate) struct Pending {
    pub(crate) states: BoxFuture<Result<Held, LimiterError>>,
    pub(crate) rules: Vec<RuleDecision>,
    /// The enforced rules the response may settle, with the cost each took.
    pub(crate) settling: Settling,
}

/// The rules a response may settle ([`Rule::settles_after_response`]) and the cost each took.
pub(crate) type Settling = Vec<(Arc<Rule>, u32)>;

/// The enforced checks of `checks` a response may settle (not those of a key on the rule's
/// static allow list: those were not counted).
pub(crate) fn settling(checks: &[Check]) -> Settling {
    checks
        .iter()
        .filter(|c| {
            c.rule.settles_after_response()
                && c.rule.mode() == Mode::Enforce
                && !c.rule.allows(&c.key)
        })
        .map(|c| (Arc::clone(&c.rule), c.cost))
        .collect()
}

impl Pending {
    /// Starts evaluating `checks` (known to be valid): the enforced ones together, all or
    /// nothing, and each [`Mode::Shadow`] or [`Mode::Soft`] one on its own beside them.
    pub(crate) fn start<L: Limiter + ?Sized>(limiter: &L, checks: Vec<Check>) -> Self {
        let rules = rule_decisions(&checks);
        let settling = settling(&checks);
        if checks.iter().all(|c| c.rule.mode() == Mode::Enforce) {
            return Self {
                states: limiter.evaluate_leased(checks),
                rules,
                settling,
            };
        }
        let n = checks.len();
        let (enforced, observed): (Vec<_>, Vec<_>) = checks
            .into_iter()
            .enumerate()
            .partition(|(_, c)| c.rule.mode() == Mode::Enforce);
        let (enforced_at, enforced): (Vec<usize>, Vec<Check>) = enforced.into_iter().unzip();
        let mut parts = Vec::with_capacity(observed.len() + 1);
        if !enforced.is_empty() {
            parts.push((enforced_at, limiter.evaluate_leased(enforced)));
        }
        for (i, check) in observed {
            parts.push((vec![i], limiter.evaluate_leased(vec![check])));
        }
        let (places, futures): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
        let states = Box::pin(async move {
            let mut states = vec![None; n];
            let mut leases = None;
            // Every part's leases are kept (and released with the others on an error).
            let results = join_all(futures).await;
            let mut failed = None;
            for (at, result) in places.into_iter().zip(results) {
                match result {
                    Ok((got, lease)) => {
                        leases = Lease::merge(leases, lease);
                        for (i, state) in at.into_iter().zip(got) {
                            states[i] = Some(state);
                        }
                    }
                    Err(e) => failed = failed.or(Some(e)),
                }
            }
            if let Some(e) = failed {
                return Err(e);
            }
            let states = states
                .into_iter()
                .map(|s| {
                    s.ok_or_else(|| BackendError::BadReply("a rule got no state".into()).into())
                })
                .collect::<Result<Vec<_>, LimiterError>>()?;
            Ok((states, leases))
        });
        Self {
            states,
            rules,
            settling,
        }
    }
}

/// One not-yet-decided entry per check, for [`decision_from`] to fill in.
pub(crate) fn rule_decisions(checks: &[Check]) -> Vec<RuleDecision> {
    // Each rule's state is filled in by `decision_from`; until then it is a denial of nothing.
    let unknown = RuleState {
        allowed: false,
        limit: 0,
        remaining: 0,
        retry_after: Duration::ZERO,
        reset_after: Duration::ZERO,
    };
    checks
        .iter()
        .map(|c| RuleDecision {
            rule: c.rule.name_arc().clone(),
            quota: c.quota,
            state: unknown,
            mode: c.rule.mode(),
            lease: c.rule.algorithm().is_lease(),
        })
        .collect()
}

/// Counts `err`, the limiter's failure to decide `rules`, under each rule's name; returns it.
pub(crate) fn count_failure(rules: &[RuleDecision], err: LimiterError) -> LimiterError {
    count_failure_of(rules.iter().map(|r| &r.rule), err)
}

/// [`count_failure`] for the rules named `names`.
pub(crate) fn count_failure_of<'a>(
    names: impl Iterator<Item = &'a Arc<str>>,
    err: LimiterError,
) -> LimiterError {
    for name in names {
        telemetry::count(telemetry::RATE_LIMIT_BACKEND_ERRORS, "rule", name.into(), 1);
    }
    err
}

/// Fills `rules` with their states, in order, into a [`Decision`].
pub(crate) fn decision_from(
    mut rules: Vec<RuleDecision>,
    states: &[RuleState],
) -> Result<Decision, LimiterError> {
    if states.len() != rules.len() {
        return Err(BackendError::BadReply(format!(
            "{} states for {} rules",
            states.len(),
            rules.len()
        ))
        .into());
    }
    for (rule, state) in rules.iter_mut().zip(states) {
        rule.state = *state;
    }
    Decision::combine(rules).ok_or(LimiterError::Empty)
}

impl<L: Limiter + ?Sized> Limiter for std::sync::Arc<L> {
    fn evaluate(&self, checks: Vec<Check>) -> BoxFuture<Result<Vec<RuleState>, LimiterError>> {
        (**self).evaluate(checks)
    }

    fn evaluate_leased(&self, checks: Vec<Check>) -> BoxFuture<Result<Held, LimiterError>> {
        (**self).evaluate_leased(checks)
    }

    fn evaluate_at_once(&self, checks: &[Check]) -> Option<Result<Decision, LimiterError>> {
        (**self).evaluate_at_once(checks)
    }

    fn config_problem(&self) -> Option<String> {
        (**self).config_problem()
    }

    fn inspect(&self, rule: &Rule, key: Key) -> BoxFuture<Result<Inspection, LimiterError>> {
        (**self).inspect(rule, key)
    }

    fn charge_all(&self, checks: Vec<Check>) -> BoxFuture<Result<(), LimiterError>> {
        (**self).charge_all(checks)
    }

    fn reset(&self, rule: &Rule, key: Key) -> BoxFuture<Result<(), LimiterError>> {
        (**self).reset(rule, key)
    }

    fn penalize(
        &self,
        rule: &Rule,
        key: Key,
        duration: Duration,
    ) -> BoxFuture<Result<(), LimiterError>> {
        (**self).penalize(rule, key, duration)
    }

    fn allow(
        &self,
        rule: &Rule,
        key: Key,
        duration: Duration,
    ) -> BoxFuture<Result<(), LimiterError>> {
        (**self).allow(rule, key, duration)
    }
}
