//! The backend-neutral interface: evaluate a request against rules, all or nothing.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::rate_limit::decision::{RuleDecision, UNDECIDED};
use futures_util::future::join_all;

use super::live::{LiveChange, LiveRecord};
use super::overrides::Steer;
use crate::backend::BackendError;
pub(crate) use crate::rate_limit::Check;
use crate::rate_limit::decision::HeldLease;
use crate::rate_limit::{Decision, Few, Inspection, Key, Lease, Mode, Quota, Rule, RuleState};
use crate::telemetry;
use crate::{ConfigError, ConfigErrorKind};

/// A boxed, sendable future, as [`Engine`] methods return.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a limiter's calls answer with, as redis-rs' `RedisFuture`.
pub(crate) type LimiterFuture<T> = BoxFuture<Result<T, LimiterError>>;

/// The states of an evaluation, the concurrency leases it took, and the quotas the store read
/// for live rules itself.
pub(crate) type Held = (Vec<RuleState>, Option<Lease>, LiveQuotas);

/// The quotas live rules ([`Rule::live`]) were decided with, by rule name, where the store read
/// their records in the decision's own call: the decision names those, not this limiter's copy,
/// which may lag.
pub(crate) type LiveQuotas = Vec<(Arc<str>, Quota)>;

/// Why a limiter could not decide.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LimiterError {
    /// The store failed: unreachable, too slow, a script error (a custom algorithm that does not
    /// compile or breaks its contract: [`BackendError::Script`]), or a reply that makes no sense.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The call cannot work as asked; [`ConfigError::kind`] says why: a rule that cannot work,
    /// a limiter configured so that it cannot decide (a zero Redis timeout:
    /// [`Store`](ConfigErrorKind::Store)), no checks at all
    /// ([`NoRules`](ConfigErrorKind::NoRules)), an operation the limiter or the rule does not
    /// support ([`Unsupported`](ConfigErrorKind::Unsupported): a custom Lua algorithm on the
    /// memory backend, a penalty on a rule that reads no overrides), or a penalty or allow-list
    /// entry outside 1 ms to 366 days ([`Duration`](ConfigErrorKind::Duration)).
    #[error(transparent)]
    Config(#[from] ConfigError),
}

pub(crate) fn no_checks() -> LimiterError {
    ConfigError::new(ConfigErrorKind::NoRules, "no rules to evaluate").into()
}

/// Decides whether requests are admitted: [`RedisLimiter`] or [`MemoryLimiter`], or an `Arc` of
/// either, as [`RateLimitLayer::new`](crate::rate_limit::RateLimitLayer::new) and
/// [`RateLimitLayer::builder`](crate::rate_limit::RateLimitLayer::builder) take them.
///
/// This trait is **sealed** and has nothing to call (as tokio's `ToSocketAddrs`): it cannot be
/// implemented outside this crate, because what the layer asks of a limiter is not a stable
/// contract yet. Custom decision logic plugs in as a Lua algorithm
/// ([`CustomAlgorithm`](crate::rate_limit::CustomAlgorithm)), which runs inside the same
/// script with the same guarantees. What a handler or an admin task calls (`check`,
/// `check_all`, `inspect`, `reset`, `penalize`, `allow`, `charge`, `charge_all`) are inherent
/// methods of the two limiters, and of `dyn Limiter` for code that picks its backend at run
/// time and keeps an `Arc<dyn Limiter>`:
///
/// ```
/// use std::sync::Arc;
/// use redis_guard::rate_limit::{Key, Limiter, MemoryLimiter, Quota, RateLimitLayer, Rule};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// // e.g. `RedisLimiter` when a Redis URL is configured
/// let limiter: Arc<dyn Limiter> = Arc::new(MemoryLimiter::new());
/// let calls = Rule::new("calls", Quota::per_minute(5));
/// let layer = RateLimitLayer::builder(Arc::clone(&limiter)).build();
/// assert!(limiter.check(&calls, Key::from("+15550100")).await.unwrap().allowed);
/// # let _ = layer; }
/// ```
///
/// Implementations evaluate all checks of one call atomically: a request is admitted only if
/// every check admits it, and nothing is recorded when any denies.
///
/// What the layer calls is out of reach, through a bound as through a trait object:
///
/// ```compile_fail
/// use redis_guard::rate_limit::{Check, Limiter};
/// fn evaluate<L: Limiter>(limiter: &L, checks: Vec<Check>) {
///     let _ = limiter.evaluate_leased(checks);
/// }
/// ```
///
/// ```compile_fail
/// use redis_guard::rate_limit::Limiter;
/// fn problem(limiter: &dyn Limiter) -> Option<String> {
///     limiter.config_problem()
/// }
/// ```
///
/// [`RedisLimiter`]: crate::rate_limit::RedisLimiter
/// [`MemoryLimiter`]: crate::rate_limit::MemoryLimiter
#[allow(private_bounds)] // see `Engine`
pub trait Limiter: Engine + Send + Sync + fmt::Debug + 'static {}

/// What a layer asks of a limiter. Unnameable outside this crate (it seals [`Limiter`]), and
/// uncallable there (its parameter is crate-private); the user operations built on it are in
/// `direct.rs`.
#[allow(private_bounds, private_interfaces)]
pub trait Engine<Seal = crate::sealed::Private>: crate::sealed::Sealed {
    /// Evaluates `checks` (validated, non-empty): one state per check, in order, and the
    /// concurrency leases ([`Rule::concurrency`]) an admitted request took.
    fn evaluate_leased(&self, checks: Vec<Check>) -> LimiterFuture<Held>;

    /// Decides `checks` (validated, non-empty) at once, by mode as a layer evaluates them, when
    /// this limiter can: `None` when it needs a future (Redis).
    #[doc(hidden)]
    fn evaluate_at_once(&self, checks: &[Check]) -> Option<Result<Decision, LimiterError>> {
        let _ = checks;
        None
    }

    /// Prepares the decisions of the plain rules `rules` ([`Rule::is_plain`]) when a layer is
    /// built, so that a request brings only its keys: the layer's common case. `None` when this
    /// limiter has no such path.
    #[doc(hidden)]
    fn plain_store(&self, rules: &[Arc<Rule>]) -> Option<Arc<dyn PlainStore>> {
        let _ = rules;
        None
    }

    /// Whether this limiter keeps its state in this process.
    #[doc(hidden)]
    fn in_process(&self) -> bool {
        false
    }

    /// Why this limiter cannot work as configured (e.g. a zero timeout), or `None`: a layer
    /// refuses it when built, a direct call without evaluating.
    fn config_problem(&self) -> Option<ConfigError> {
        None
    }

    /// What `rule` knows about `key` (the user operation `inspect`).
    fn inspect_key(&self, rule: &Rule, key: Key) -> LimiterFuture<Inspection>;

    /// Forgets everything `rule` knows about `key` (`reset`).
    fn reset_key(&self, rule: &Rule, key: Key) -> LimiterFuture<()>;

    /// Blocks `key` under `rule` for a while (`penalize`), or puts it on the rule's runtime
    /// allow list (`allow`).
    fn steer_key(&self, rule: &Rule, key: Key, steer: Steer) -> LimiterFuture<()>;

    /// Charges each check its cost whatever is left (`charge_all`).
    fn charge_checks(&self, checks: Vec<Check>) -> LimiterFuture<()>;

    /// The live record this limiter knows for `rule` ([`Rule::live`]).
    fn live_record(&self, rule: &Rule) -> LiveRecord;

    /// Makes `change` to `rule`'s live record for every limiter of the store; the new version.
    fn set_live(&self, rule: &Rule, change: LiveChange) -> LimiterFuture<u64>;
}

/// A layer's plain rules made ready on a store ([`Engine::plain_store`]).
pub(crate) trait PlainStore: Send + Sync + fmt::Debug {
    /// The rules' states for `keys`, one per rule: at once (a cached denial), or once the store
    /// answers. `None` when the general engine decides this request (an allow-listed key, say).
    fn decide(&self, keys: Few<Key>) -> Option<PlainStates>;
}

/// What [`PlainStore::decide`] answers.
pub(crate) enum PlainStates {
    Now(Few<RuleState>),
    Later(LimiterFuture<Few<RuleState>>),
}

/// The user operation `check_all`: validated first, as a layer's rules are when it is built.
pub(crate) fn check_all<L: Engine + ?Sized>(
    limiter: &L,
    checks: Vec<Check>,
) -> LimiterFuture<Decision> {
    if checks.is_empty() {
        return Box::pin(std::future::ready(Err(no_checks())));
    }
    if let Some(why) = limiter.config_problem() {
        return Box::pin(std::future::ready(Err(why.into())));
    }
    if let Some(err) = checks.iter().find_map(|c| c.validate().err()) {
        return Box::pin(std::future::ready(Err(err.into())));
    }
    let mut checks = checks;
    super::live::apply(limiter, &mut checks);
    decide(limiter, checks)
}

/// The checks of a `charge_all` that charge something, once every rule has a charge.
pub(crate) fn chargeable(checks: Vec<Check>) -> Result<Vec<Check>, LimiterError> {
    for check in &checks {
        check.rule.validate()?;
        let algorithm = match check.rule.algorithm() {
            crate::rate_limit::Algorithm::Custom(custom) => {
                format!("the custom algorithm {}", custom.name())
            }
            crate::rate_limit::Algorithm::Concurrency => "leases (a concurrency rule)".to_owned(),
            _ => continue,
        };
        return Err(check
            .rule
            .problem(
                ConfigErrorKind::Unsupported,
                format!("uses {algorithm}, which has no charge"),
                "Rule::with_algorithm",
            )
            .into());
    }
    Ok(checks.into_iter().filter(|c| c.cost > 0).collect())
}

/// Evaluates checks known to be valid into a [`Decision`], counted in the metrics.
pub(crate) fn decide<L: Engine + ?Sized>(
    limiter: &L,
    checks: Vec<Check>,
) -> LimiterFuture<Decision> {
    // Modes are the layer's business: a direct call evaluates every rule all or nothing and
    // gets every verdict as it is.
    let mut rules: Vec<_> = checks.iter().map(RuleDecision::undecided).collect();
    for rule in &mut rules {
        rule.mode = Mode::Enforce;
    }
    let held = limiter.evaluate_leased(checks);
    let started = std::time::Instant::now();
    Box::pin(async move {
        let (states, lease, live) = held
            .await
            .map_err(|err| count_failure_of(rules.iter().map(|r| &r.rule), err))?;
        let mut decision = Decision::of(rules, &states, &live)?;
        // A direct call settles nothing after a response: only leases are handed out.
        decision.lease = HeldLease(lease.filter(Lease::holds_leases).map(Arc::new));
        decision.record(Some(started.elapsed()), &[]);
        Ok(decision)
    })
}

/// An evaluation under way: the limiter's future of the rules' states, and the rules they will
/// fill in.
pub(crate) struct Pending {
    pub(crate) states: LimiterFuture<Held>,
    pub(crate) rules: Vec<RuleDecision>,
    /// The enforced rules the response may settle, with the cost each took.
    pub(crate) settling: Settling,
}

/// The rules a response may settle ([`Rule::settles_after_response`]) and the cost each took.
pub(crate) type Settling = Vec<(Arc<Rule>, u32)>;

/// The enforced checks a response may settle (a key on the static allow list was not counted).
pub(crate) fn settling(checks: &[Check]) -> Settling {
    checks
        .iter()
        .filter(|c| {
            c.rule.settles_after_response() && c.mode == Mode::Enforce && !c.rule.allows(&c.key)
        })
        .map(|c| (Arc::clone(&c.rule), c.cost))
        .collect()
}

impl Pending {
    /// Starts evaluating `checks` (known to be valid): the enforced ones together, all or
    /// nothing, and each [`Mode::Shadow`] or [`Mode::Soft`] one on its own beside them. An
    /// observed rule the store fails to decide is counted as a failure and left out of the
    /// decision; only a failure of the enforced ones fails the request.
    pub(crate) fn start<L: Engine + ?Sized>(limiter: &L, checks: Vec<Check>) -> Self {
        let rules = checks.iter().map(RuleDecision::undecided).collect();
        let settling = settling(&checks);
        if checks.iter().all(|c| c.mode == Mode::Enforce) {
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
            .partition(|(_, c)| c.mode == Mode::Enforce);
        let (enforced_at, enforced): (Vec<usize>, Vec<Check>) = enforced.into_iter().unzip();
        let mut parts = Vec::with_capacity(observed.len() + 1);
        if !enforced.is_empty() {
            parts.push(((enforced_at, None), limiter.evaluate_leased(enforced)));
        }
        for (i, check) in observed {
            let name = Arc::clone(check.rule.name_arc());
            parts.push(((vec![i], Some(name)), limiter.evaluate_leased(vec![check])));
        }
        let (places, futures): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
        let states = Box::pin(async move {
            let mut states = vec![UNDECIDED; n];
            let mut leases = None;
            let mut live = Vec::new();
            // Every part's leases are kept (and released with the others on an error).
            let results = join_all(futures).await;
            let mut failed = None;
            for ((at, observed), result) in places.into_iter().zip(results) {
                match (result, observed) {
                    (Ok((got, lease, quotas)), _) => {
                        leases = Lease::merge(leases, lease);
                        live.extend(quotas);
                        if got.len() != at.len() {
                            let e = BackendError::BadReply("a rule got no state".into());
                            failed = failed.or(Some(e.into()));
                        }
                        for (i, state) in at.into_iter().zip(got) {
                            states[i] = state;
                        }
                    }
                    (Err(e), Some(name)) => {
                        let e = count_failure_of(std::iter::once(&name), e);
                        tracing::debug!(rule = %name, error = %e, "an observed rule was not decided");
                    }
                    (Err(e), None) => failed = failed.or(Some(e)),
                }
            }
            if let Some(e) = failed {
                return Err(e);
            }
            Ok((states, leases, live))
        });
        Self {
            states,
            rules,
            settling,
        }
    }
}

/// Counts `err`, the limiter's failure to decide the rules `names`, under each name; returns it.
pub(crate) fn count_failure_of<'a>(
    names: impl Iterator<Item = &'a Arc<str>>,
    err: LimiterError,
) -> LimiterError {
    for name in names {
        telemetry::count(
            telemetry::Metric::RateLimitBackendErrors,
            "rule",
            name.into(),
            1,
        );
    }
    err
}

impl<L: Limiter + ?Sized> Limiter for Arc<L> {}

impl<L: Engine + ?Sized> Engine for Arc<L> {
    forward_to_deref! {
        evaluate_leased(checks: Vec<Check>) -> LimiterFuture<Held>;
        evaluate_at_once(checks: &[Check]) -> Option<Result<Decision, LimiterError>>;
        plain_store(rules: &[Arc<Rule>]) -> Option<Arc<dyn PlainStore>>;
        in_process() -> bool;
        config_problem() -> Option<ConfigError>;
        inspect_key(rule: &Rule, key: Key) -> LimiterFuture<Inspection>;
        charge_checks(checks: Vec<Check>) -> LimiterFuture<()>;
        reset_key(rule: &Rule, key: Key) -> LimiterFuture<()>;
        steer_key(rule: &Rule, key: Key, steer: Steer) -> LimiterFuture<()>;
        live_record(rule: &Rule) -> LiveRecord;
        set_live(rule: &Rule, change: LiveChange) -> LimiterFuture<u64>;
    }
}
