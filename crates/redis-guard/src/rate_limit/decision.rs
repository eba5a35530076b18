//! What the limiter decided, as handlers and response builders see it.

use std::sync::Arc;
use std::time::Duration;

use super::limiter::live::same_quota;
use super::limiter::{Check, LimiterError, no_checks};
use super::{Lease, Mode, Quota, RuleState};
use crate::backend::BackendError;
use crate::telemetry::{self, Metric, RuleMetrics};

/// One rule's verdict within a [`Decision`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuleDecision {
    /// The rule's name.
    pub rule: Arc<str>,
    /// The rule's quota.
    pub quota: Quota,
    /// What the rule said.
    pub state: RuleState,
    /// The rule's rollout mode: whether its verdict binds.
    pub mode: Mode,
    /// A concurrency rule: left out of the `RateLimit` headers.
    pub(crate) lease: bool,
    /// The units the request took under the rule: what a throttled waiter that goes away
    /// gives back.
    pub(crate) cost: u32,
}

impl RuleDecision {
    /// `check`'s rule, its state not known yet: a denial of nothing until [`Decision::of`]
    /// fills it in.
    pub(crate) fn undecided(check: &Check) -> Self {
        Self {
            rule: Arc::clone(check.rule.name_arc()),
            quota: check.quota,
            state: RuleState::from_parts(false, 0, 0, 0, 0),
            mode: check.mode,
            lease: check.rule.algorithm().is_lease(),
            // Nothing was taken under a key on the rule's static allow list.
            cost: if check.rule.allows(&check.key) {
                0
            } else {
                check.cost
            },
        }
    }
}

/// The state of an observed ([`Mode::Shadow`] or [`Mode::Soft`]) rule that the store failed to
/// decide: [`Decision::of`] leaves the rule out, as it never changes the answer. No store
/// answers with it: a wait of [`Duration::MAX`] is none a store writes.
pub(crate) const UNDECIDED: RuleState = RuleState {
    allowed: true,
    limit: 0,
    remaining: 0,
    retry_after: Duration::MAX,
    reset_after: Duration::MAX,
};

/// The outcome of rate limiting one request, inserted into the request extensions when the
/// request is admitted and the layer was built with
/// [`extensions(true)`](crate::rate_limit::RateLimitLayerBuilder::extensions), and handed to
/// the response builder when it is not.
///
/// The top-level fields describe the *binding* rule: the denying rule with the longest
/// `retry_after` when denied, the rule with the fewest remaining requests when admitted.
///
/// ```
/// # use redis_guard::rate_limit::Decision;
/// async fn handler(decision: Option<axum::Extension<Decision>>) -> String {
///     match decision {
///         Some(axum::Extension(d)) => format!("{} left under {}", d.remaining, d.rule),
///         None => "not limited".to_owned(),
///     }
/// }
/// # let _ = handler;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// The binding rule's name.
    pub rule: Arc<str>,
    /// The binding rule's limit.
    pub limit: u32,
    /// Requests still admitted under the binding rule.
    pub remaining: u32,
    /// When denied, how long the client must wait; zero when admitted.
    pub retry_after: Duration,
    /// How long until the binding rule's quota is fully available again.
    pub reset_after: Duration,
    /// Admitted after a wait ([`Rule::throttle`](super::Rule::throttle)): how long from the
    /// decision until the request's reserved slot (the longest of its throttled rules' waits).
    /// A [`RateLimitLayer`](super::RateLimitLayer) has waited that long before the handler sees
    /// the decision. Zero when denied, or admitted at once.
    pub wait: Duration,
    /// Every evaluated rule the client sees ([`Mode::Enforce`] and [`Mode::Soft`]), in the
    /// layer's order.
    pub rules: Vec<RuleDecision>,
    /// The [`Mode::Soft`] rules this request went over: admitted anyway, and named in the
    /// `RateLimit-Exceeded` header.
    pub exceeded: Vec<Arc<str>>,
    /// The [`Mode::Shadow`] rules' verdicts, in the layer's order: never binding, never in a
    /// header.
    pub shadow: Vec<RuleDecision>,
    /// The concurrency leases of a direct call's admitted request.
    pub(crate) lease: HeldLease,
}

/// A decision's leases, shared by its clones; decisions compare equal whatever they hold.
#[derive(Clone, Debug, Default)]
pub(crate) struct HeldLease(pub(crate) Option<Arc<Lease>>);

impl PartialEq for HeldLease {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for HeldLease {}

impl Decision {
    /// The decision of `rules` ([`RuleDecision::undecided`]) by their `states`, in order, and
    /// the quotas `live` rules were decided with: the enforced rules decide.
    pub(crate) fn of(
        mut rules: Vec<RuleDecision>,
        states: &[RuleState],
        live: &[(Arc<str>, Quota)],
    ) -> Result<Self, LimiterError> {
        if states.len() != rules.len() {
            let why = format!("{} states for {} rules", states.len(), rules.len());
            return Err(BackendError::BadReply(why).into());
        }
        for (rule, state) in rules.iter_mut().zip(states) {
            rule.state = *state;
        }
        rules.retain(|r| r.state != UNDECIDED);
        for (name, quota) in live {
            // The quota the store decided with, not this limiter's copy: the same unless the
            // record changed since the copy was read. Left as it is when alike, so that the
            // layer's `RateLimit-Policy` value made once is still the one that fits.
            for rule in rules.iter_mut().filter(|r| r.rule == *name) {
                if !same_quota(&rule.quota, quota) {
                    rule.quota = *quota;
                }
            }
        }
        let shadow = if rules.iter().any(|r| r.mode == Mode::Shadow) {
            let (shadow, visible) = rules.into_iter().partition(|r| r.mode == Mode::Shadow);
            rules = visible;
            shadow
        } else {
            Vec::new()
        };
        let binds = |r: &&RuleDecision| r.mode == Mode::Enforce;
        let allowed = rules.iter().filter(binds).all(|r| r.state.allowed);
        let exceeded = rules
            .iter()
            .filter(|r| r.mode == Mode::Soft && !r.state.allowed)
            .map(|r| r.rule.clone())
            .collect();
        let binding = if allowed {
            admitting(rules.iter().map(|r| &r.state))
        } else {
            let enforced = rules.iter().enumerate().filter(|(_, r)| binds(r));
            denying(enforced.map(|(i, r)| (i, &r.state)))
        }
        .map(|i| &rules[i]);
        // Only shadow rules: admitted, and nothing for the client to see.
        let Some(b) = binding.or_else(|| shadow.first()) else {
            return Err(no_checks());
        };
        let (rule, state) = (b.rule.clone(), b.state);
        Ok(Self {
            allowed,
            rule,
            limit: state.limit,
            remaining: state.remaining,
            retry_after: if allowed {
                Duration::ZERO
            } else {
                state.retry_after
            },
            reset_after: state.reset_after,
            wait: if allowed {
                // Only a throttled rule admits with a retry_after (its wait).
                rules
                    .iter()
                    .filter(binds)
                    .map(|r| r.state.retry_after)
                    .max()
                    .unwrap_or_default()
            } else {
                Duration::ZERO
            },
            rules,
            exceeded,
            shadow,
            lease: HeldLease::default(),
        })
    }

    /// The concurrency leases ([`Rule::concurrency`](super::Rule::concurrency)) of an admitted
    /// direct call; the [`Lease`] docs say when they are released. `None` when no concurrency
    /// rule admitted it, and in a layer, which holds its requests' leases itself.
    ///
    /// ```
    /// use redis_guard::rate_limit::{Key, MemoryLimiter, Rule};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = MemoryLimiter::new();
    /// let jobs = Rule::concurrency("jobs", 1);
    /// let held = limiter.check(&jobs, Key::from("tenant-7")).await?;
    /// assert!(held.lease().is_some());
    /// drop(held); // released
    /// assert!(limiter.check(&jobs, Key::from("tenant-7")).await?.allowed);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn lease(&self) -> Option<&Lease> {
        self.lease.0.as_deref()
    }

    /// Takes the leases out (the layer keeps them with the response body).
    pub(crate) fn take_lease(&mut self) -> Option<Arc<Lease>> {
        self.lease.0.take()
    }

    /// Counts each rule's verdict, and the time the decision took (`took`; `None` when no
    /// recorder is in place) under each rule's name ([`telemetry`](crate::telemetry)), through
    /// the rule's prepared metrics when `metrics` (a layer's) has them.
    pub(crate) fn record(&self, took: Option<Duration>, metrics: &[RuleMetrics]) {
        // `None`: no recorder in place, nothing to record.
        if let Some(took) = took {
            let seconds = took.as_secs_f64();
            for r in self.rules.iter().chain(&self.shadow) {
                let metric = verdict_metric(r.state.allowed, r.mode);
                // Without the `metrics` feature there is nothing to look up.
                let prepared = if cfg!(feature = "metrics") {
                    metrics.iter().find(|m| m.is_of(&r.rule))
                } else {
                    None
                };
                if let Some(prepared) = prepared {
                    prepared.record(metric, seconds);
                    continue;
                }
                telemetry::count(metric, "rule", (&r.rule).into(), 1);
                telemetry::observe(
                    Metric::RateLimitDecisionSeconds,
                    "rule",
                    (&r.rule).into(),
                    seconds,
                );
            }
        }
        for r in self.shadow.iter().filter(|r| !r.state.allowed) {
            tracing::debug!(rule = %r.rule, "shadow rule would have limited this request");
        }
    }

    /// `Retry-After` in whole seconds: rounded up, at least 1.
    #[must_use]
    pub fn retry_after_secs(&self) -> u64 {
        ceil_secs(self.retry_after).max(1)
    }
}

/// The metric that counts a rule's verdict: admitted, or limited in the rule's mode.
pub(crate) fn verdict_metric(allowed: bool, mode: Mode) -> Metric {
    match (allowed, mode) {
        (true, _) => Metric::RateLimitAllowed,
        (false, Mode::Shadow) => Metric::RateLimitShadowLimited,
        (false, Mode::Soft) => Metric::RateLimitSoftLimited,
        (false, _) => Metric::RateLimitLimited,
    }
}

/// The binding rule of an admitted request among `states`: the one with the fewest requests
/// left, the first of those that stays full the longest. `None`: no states.
pub(crate) fn admitting<'a>(states: impl IntoIterator<Item = &'a RuleState>) -> Option<usize> {
    let (i, _) = states.into_iter().enumerate().min_by(|(_, a), (_, b)| {
        (a.remaining.cmp(&b.remaining)).then(b.reset_after.cmp(&a.reset_after))
    })?;
    Some(i)
}

/// The binding rule of a denied request among the binding rules' `states` (each with its
/// index): the denying rule with the longest wait, the last of those. `None`: none denies.
pub(crate) fn denying<'a>(
    states: impl IntoIterator<Item = (usize, &'a RuleState)>,
) -> Option<usize> {
    states
        .into_iter()
        .filter(|(_, s)| !s.allowed)
        .max_by_key(|(_, s)| s.retry_after)
        .map(|(i, _)| i)
}

pub(crate) fn ceil_secs(d: Duration) -> u64 {
    // Saturating: a wait of `Duration::MAX` is `u64::MAX` seconds, never an overflow.
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whole seconds rounded up, and the longest wait saturates instead of overflowing.
    #[test]
    fn ceil_secs_rounds_up_and_saturates() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_millis(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1_500)), 2);
        assert_eq!(ceil_secs(Duration::from_secs(3)), 3);
        assert_eq!(ceil_secs(Duration::MAX), u64::MAX);
    }
}
