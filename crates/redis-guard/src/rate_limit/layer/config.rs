//! The layer's settings, shared by every clone of it, and the per-request plan they give.

use std::fmt;
use std::sync::Arc;

use http::HeaderValue;

use super::headers::{self, LastState};
use super::rejection::{PreparedDenial, Rejection};
use super::throttle::{DEFAULT_MAX_WAITERS, Waiters};
use super::warn_every::{WARN_INTERVAL, WarnEvery};
use crate::client_ip::{ClientAddr, ClientIp};
use crate::problem::Respond;
use crate::rate_limit::quota_lookup as resolve;
use crate::rate_limit::{
    Algorithm, Check, Decision, FailurePolicy, Few, Key, KeyError, KeyExtractor, Limiter,
    LimiterError, Lookup, MemoryLimiter, MissingKey, Mode, Quota, Resolved, Rule,
};
use crate::{ConfigError, ConfigErrorKind, telemetry};

/// One rule of a layer: what to count and what to count it by.
#[derive(Clone)]
pub(crate) struct LayerRule {
    pub(crate) rule: Arc<Rule>,
    pub(crate) extractor: Arc<dyn KeyExtractor>,
    /// The extractor, when it is a [`ClientIp`]: the layer leaves the address it counted in
    /// the extensions for the handler.
    pub(crate) client_ip: Option<ClientIp>,
}

impl LayerRule {
    pub(crate) fn new(rule: Rule, extractor: impl KeyExtractor) -> Self {
        Self {
            rule: Arc::new(rule),
            client_ip: Self::client_ip_of(&extractor),
            extractor: Arc::new(extractor),
        }
    }

    pub(crate) fn client_ip_of(extractor: &dyn std::any::Any) -> Option<ClientIp> {
        extractor.downcast_ref::<ClientIp>().cloned()
    }

    /// The key for this request. The address a [`ClientIp`] rule counted goes to `client` (the
    /// last one wins, as in the extensions), put in the extensions at once only when a later
    /// rule of another kind may read it.
    pub(super) fn key(
        &self,
        parts: &mut http::request::Parts,
        client: &mut Option<ClientAddr>,
    ) -> Result<Key, KeyError> {
        let Some(ip) = &self.client_ip else {
            if let Some(addr) = client.take() {
                parts.extensions.insert(addr);
            }
            return self.extractor.extract(parts);
        };
        client_key(ip, &parts.headers, &parts.extensions, client)
    }
}

/// The key of a [`ClientIp`] rule: the client's address, read from the request's `headers` and
/// `extensions`; the address goes to `client`.
pub(super) fn client_key(
    ip: &ClientIp,
    headers: &http::HeaderMap,
    extensions: &http::Extensions,
    client: &mut Option<ClientAddr>,
) -> Result<Key, KeyError> {
    let addr = ip.addr(ip.client_ip_in(headers, extensions)?);
    *client = Some(addr);
    Ok(addr.key())
}

/// Shared by every clone of the layer and the services it makes.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) limiter: Arc<dyn Limiter>,
    pub(crate) rules: Vec<LayerRule>,
    pub(crate) missing_key: MissingKey,
    pub(crate) failure: FailurePolicy,
    /// Admitted responses carry `RateLimit-Policy` and `RateLimit`.
    pub(crate) ietf_on_allowed: bool,
    /// Responses carry the legacy `X-RateLimit-*` headers.
    pub(crate) legacy: bool,
    pub(crate) response: Option<Respond<Rejection>>,
    /// Made when the layer is built: `RateLimit-Policy` of all the rules, each rule's `429`
    /// and metrics, the in-process fallback.
    pub(crate) policy: HeaderValue,
    pub(crate) denials: Vec<PreparedDenial>,
    pub(crate) metrics: Vec<telemetry::RuleMetrics>,
    pub(crate) fallback: Option<Arc<Fallback>>,
    /// Keeps "rate limiter failed" to a line per interval.
    pub(crate) warn: Arc<WarnEvery>,
    /// Some rule resolves its quota per request.
    pub(crate) dynamic: bool,
    /// The requests waiting for their slot.
    pub(crate) waiters: Arc<Waiters>,
    pub(crate) extensions: bool,
    /// Every rule, when all are plain, and the limiter's decisions of them (`plain_store`): the
    /// plan a request runs then (`lean.rs`).
    pub(crate) plain: Option<super::lean::PlainPlan>,
    /// Every rule keys by the client's address: the plain plan reads it where the request
    /// holds it.
    pub(crate) by_address: bool,
    /// The last `RateLimit` value of an admitted request on the plain plan of a one-rule layer.
    pub(crate) last_state: LastState,
}

impl Config {
    pub(crate) fn new(limiter: Arc<dyn Limiter>) -> Self {
        Self {
            limiter,
            rules: Vec::new(),
            missing_key: MissingKey::default(),
            failure: FailurePolicy::default(),
            ietf_on_allowed: true,
            legacy: false,
            response: None,
            policy: HeaderValue::from_static(""),
            denials: Vec::new(),
            metrics: Vec::new(),
            fallback: None,
            warn: Arc::new(WarnEvery::new(WARN_INTERVAL)),
            dynamic: false,
            waiters: Arc::new(Waiters::new(DEFAULT_MAX_WAITERS)),
            extensions: false,
            plain: None,
            by_address: false,
            last_state: LastState::default(),
        }
    }
}

/// The in-process limiter of the rules whose failure policy is [`FailurePolicy::Fallback`]: each
/// rule with its quota shared among its replicas, decided in this process.
#[derive(Debug)]
pub(crate) struct Fallback {
    limiter: MemoryLimiter,
    /// One per rule of the layer, in order: `None` for a rule that does not fall back.
    rules: Vec<Option<Arc<Rule>>>,
}

impl Fallback {
    /// The fallback for `rules` under the `layer`'s policy, or `None` when no rule falls back;
    /// an error when a rule's share cannot work.
    pub(crate) fn new(
        rules: &[LayerRule],
        layer: FailurePolicy,
    ) -> Result<Option<Self>, ConfigError> {
        let rules = rules
            .iter()
            .map(|r| {
                let FailurePolicy::Fallback { replicas } = r.rule.failure_policy().unwrap_or(layer)
                else {
                    return Ok(None);
                };
                // Only Redis runs Lua; the quota still says how much to admit.
                let algorithm = match r.rule.algorithm() {
                    Algorithm::Custom(_) => Algorithm::default(),
                    other => other.clone(),
                };
                let mut rule = r.rule.reshaped(r.rule.quota().share(replicas), algorithm);
                // The in-process fallback decides every request itself: nothing to lease.
                rule.leased = None;
                rule.validate().map_err(|source| {
                    ConfigError::new(
                        ConfigErrorKind::Fallback,
                        format!(
                            "FailurePolicy::Fallback with {replicas} replicas: the share of {source}"
                        ),
                    )
                    .with_setting("FailurePolicy::fallback")
                    .with_value(replicas)
                    .of_rule(r.rule.name())
                    .caused_by(source)
                })?;
                Ok(Some(Arc::new(rule)))
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        Ok(rules.iter().any(Option::is_some).then(|| Self {
            limiter: MemoryLimiter::new(),
            rules,
        }))
    }
}

/// What the layer decided to do with a request before asking the limiter.
pub(crate) enum Plan {
    /// Evaluate these checks.
    Check(Checks),
    /// Evaluate these checks once their quotas being looked up are known.
    Resolve(Vec<Check>, Vec<Lookup>),
    /// No rule applies (every key missing and skipped).
    Pass,
    /// Answer at once (missing key rejected, misconfiguration); boxed, being rare.
    Respond(Box<Rejection>),
}

/// A request's checks: the usual one without a `Vec`.
pub(crate) type Checks = Few<Check>;

impl Config {
    pub(crate) fn plan(&self, parts: &mut http::request::Parts) -> Plan {
        let misconfigured = || Plan::Respond(Box::new(Rejection::Misconfigured));
        let mut checks = Checks::default();
        let mut lookups: Vec<Lookup> = Vec::new();
        let mut client = None;
        for r in &self.rules {
            if r.rule.route().is_some_and(|route| !route.matches(parts)) {
                continue;
            }
            match r.key(parts, &mut client) {
                Ok(key) => {
                    // A constant cost was checked when the layer was built.
                    let cost = r.rule.request_cost(parts);
                    let check = Check::shared(&r.rule, key)
                        .with_cost(cost.unwrap_or(r.rule.cost()))
                        .reserving(parts);
                    if !r.rule.is_dynamic() {
                        let capacity = r.rule.algorithm().capacity(r.rule.quota());
                        if let Some(cost) = cost.filter(|&cost| cost > capacity) {
                            tracing::warn!(
                                rule = r.rule.name(),
                                cost,
                                "the rule's cost function asked for more than the burst: 500"
                            );
                            return misconfigured();
                        }
                        checks.push(check);
                        continue;
                    }
                    match resolve::resolve(&r.rule, parts) {
                        Resolved::Now(quota) => {
                            let check = check.with_quota(quota.unwrap_or(*r.rule.quota()));
                            if resolve::usable(&check).is_err() {
                                return misconfigured();
                            }
                            checks.push(check);
                        }
                        Resolved::Later(lookup) => {
                            // Checked against the quota the lookup gives, once it has.
                            lookups.push((checks.as_slice().len(), lookup));
                            checks.push(check.with_quota(*r.rule.quota()));
                        }
                    }
                }
                Err(KeyError::Missing) => match self.missing_key {
                    MissingKey::Skip => {}
                    MissingKey::Reject(status) => {
                        tracing::debug!(rule = r.rule.name(), "rate limit key missing: rejected");
                        return Plan::Respond(Box::new(Rejection::KeyMissing {
                            rule: Arc::clone(r.rule.name_arc()),
                            status,
                        }));
                    }
                },
                // The extractor logged the fix once; every request fails the same way until the
                // server is set up right, so it can't go unnoticed.
                Err(KeyError::Misconfigured(_)) => return misconfigured(),
            }
        }
        if let Some(addr) = client {
            parts.extensions.insert(addr);
        }
        // Live rules (`Rule::live`) are decided with the quota an operator set, if any.
        crate::rate_limit::limiter::live::apply(&*self.limiter, checks.as_mut_slice());
        if checks.as_slice().is_empty() {
            Plan::Pass
        } else if lookups.is_empty() {
            Plan::Check(checks)
        } else {
            Plan::Resolve(checks.into_vec(), lookups)
        }
    }

    /// The answer for a request the limiter failed to decide, by each rule's failure policy: a
    /// `503` when a `Closed` rule applies, else the fallback's decision of the `Fallback` rules
    /// (the `Open` ones skipped, and the shadow and soft ones, which never block), else the
    /// inner service. `resolved`: the quotas resolved per request, which the fallback shares as
    /// it does the rules' own.
    pub(crate) fn on_failure(
        &self,
        parts: &http::request::Parts,
        resolved: &[(Arc<str>, Quota)],
    ) -> Result<Decision, Plan> {
        let unavailable = || Plan::Respond(Box::new(Rejection::Unavailable));
        let mut checks = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            let policy = r.rule.failure_policy().unwrap_or(self.failure);
            if policy == FailurePolicy::Open
                || r.rule.mode() != Mode::Enforce
                || r.rule.route().is_some_and(|rt| !rt.matches(parts))
            {
                continue;
            }
            // The keys are extracted again rather than kept from the first plan: that costs
            // only while Redis is down, instead of a copy of every check on every request. A
            // key the first plan found missing (and skipped) is missing again.
            let Ok(key) = r.extractor.extract(parts) else {
                continue;
            };
            let shared = self
                .fallback
                .as_deref()
                .and_then(|f| f.rules.get(i)?.as_ref());
            match (policy, shared) {
                (FailurePolicy::Fallback { replicas }, Some(rule)) => {
                    let mut check = Check::shared(rule, key).reserving(parts);
                    if let Some((_, quota)) =
                        resolved.iter().find(|(name, _)| **name == *r.rule.name())
                    {
                        check = check.with_quota(quota.share(replicas));
                    }
                    // The first plan refused a cost above the burst; the share's burst may be
                    // lower: such a request is charged the whole share.
                    let cost = r.rule.request_cost(parts).unwrap_or(rule.cost());
                    let cost = cost.min(rule.algorithm().capacity(check.quota()));
                    checks.push(check.with_cost(cost));
                }
                _ => return Err(unavailable()),
            }
        }
        let Some(fallback) = self.fallback.as_deref().filter(|_| !checks.is_empty()) else {
            return Err(Plan::Pass);
        };
        let decision = fallback.limiter.decide_now(&checks, false).map_err(|err| {
            // Not expected (the fallback's rules were checked when the layer was built); the
            // failure itself was logged once per interval already.
            tracing::debug!(error = %err, "the in-process fallback could not decide: 503");
            unavailable()
        })?;
        for check in &checks {
            telemetry::count(
                telemetry::Metric::RateLimitFallbackDecisions,
                "rule",
                check.rule.name_arc().into(),
                1,
            );
        }
        Ok(decision)
    }

    /// Logs that the limiter failed, at most once per [`WARN_INTERVAL`].
    pub(crate) fn warn_failed(&self, err: &LimiterError) {
        let Some(unlogged) = self.warn.hit() else {
            return;
        };
        let action = if self.rules.iter().any(|r| r.rule.failure_policy().is_some()) {
            "requests answered by each rule's failure policy"
        } else {
            match self.failure {
                FailurePolicy::Open => "requests admitted (FailurePolicy::Open)",
                FailurePolicy::Closed => "requests answered 503 (FailurePolicy::Closed)",
                FailurePolicy::Fallback { .. } => {
                    "requests decided in process (FailurePolicy::Fallback)"
                }
            }
        };
        tracing::warn!(
            error = %err,
            source = ?std::error::Error::source(err),
            unlogged,
            "rate limiter failed: {action}; {unlogged} failures unlogged since the previous line"
        );
    }

    /// The `RateLimit-Policy` value for `decision`'s rules: the layer's own when every rule was
    /// evaluated with its own quota, else made anew.
    pub(crate) fn policy(&self, decision: &Decision) -> HeaderValue {
        let mut visible = self.rules.iter().filter(|r| r.rule.mode() != Mode::Shadow);
        let same = decision
            .rules
            .iter()
            .all(|d| visible.next().is_some_and(|r| d.quota == *r.rule.quota()));
        if same && visible.next().is_none() {
            self.policy.clone()
        } else {
            headers::decision_policy(decision)
        }
    }

    /// The default answer to `rejection`, a denial's from its rule's prepared `429`.
    pub(crate) fn default_response(&self, rejection: &Rejection) -> http::Response<bytes::Bytes> {
        if let Rejection::Limited(decision) = rejection
            && let Some(denial) = self.denials.iter().find(|d| d.is_of(&decision.rule))
        {
            return denial.response_after(decision.retry_after_secs());
        }
        rejection.response()
    }
}

/// A rule shows as itself: extractors are closures more often than not.
impl fmt::Debug for LayerRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.rule.fmt(f)
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limiter", &self.limiter)
            .field("rules", &self.rules)
            .field("missing_key", &self.missing_key)
            .field("failure", &self.failure)
            .field("fallback", &self.fallback.is_some())
            .field("ietf_on_allowed", &self.ietf_on_allowed)
            .field("legacy", &self.legacy)
            .field("response", &self.response)
            .field("extensions", &self.extensions)
            .finish()
    }
}
