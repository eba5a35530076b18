//! How a [`RateLimitLayer`] is made: `new` for one rule, or [`RateLimitLayerBuilder`] with
//! rules and settings, validated by `build`.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

use bytes::Bytes;
use http::Response;

use super::config::{Config, Fallback, LayerRule};
use super::headers;
use super::rejection::{PreparedDenial, Rejection};
use crate::problem::Respond;
use crate::rate_limit::{
    Algorithm, FailurePolicy, KeyExtractor, Limiter, MissingKey, Mode, Quota, RateLimitLayer, Rule,
};
use crate::{ConfigError, ConfigErrorKind};

impl RateLimitLayer {
    /// One rule named `name`: `quota` per key from `extractor`, with the default algorithm and
    /// settings. Use [`builder`](Self::builder) for more rules or settings.
    ///
    /// # Errors
    ///
    /// The name or quota cannot work, or the limiter is misconfigured (see
    /// [`RateLimitLayerBuilder::build`]).
    pub fn new(
        limiter: impl Limiter,
        name: &str,
        extractor: impl KeyExtractor,
        quota: Quota,
    ) -> Result<Self, ConfigError> {
        Self::builder(limiter).rule(name, extractor, quota).build()
    }

    /// A builder: rules, then settings, then [`build`](RateLimitLayerBuilder::build).
    pub fn builder(limiter: impl Limiter) -> RateLimitLayerBuilder {
        RateLimitLayerBuilder::new(Arc::new(limiter))
    }
}

/// Builds a [`RateLimitLayer`] with one or more rules; [`build`](Self::build) validates them.
#[must_use]
pub struct RateLimitLayerBuilder {
    /// The layer's settings as they stand; `build` checks them.
    config: Config,
    /// A [`candidate`](Self::candidate) named a rule that was not there: `build` says so.
    unknown_candidate: Option<String>,
    /// [`replicas`](Self::replicas), checked by `build`.
    replicas: Option<u32>,
}

impl RateLimitLayerBuilder {
    pub(crate) fn new(limiter: Arc<dyn Limiter>) -> Self {
        Self {
            config: Config::new(limiter),
            unknown_candidate: None,
            replicas: None,
        }
    }

    /// Adds a rule named `name` with `quota` and the default algorithm, keyed by `extractor`.
    pub fn rule(self, name: &str, extractor: impl KeyExtractor, quota: Quota) -> Self {
        self.rule_with(Rule::new(name, quota), extractor)
    }

    /// Adds a fully specified [`Rule`], keyed by `extractor`.
    pub fn rule_with(mut self, rule: Rule, extractor: impl KeyExtractor) -> Self {
        self.config.rules.push(LayerRule::new(rule, extractor));
        self
    }

    /// Adds one rule per quota over the same key: `"10/s; 1000/h"` limits bursts and the hourly
    /// total at once. Rules are named `<name>-<period>` (`api-1s`, `api-1h`); quotas must have
    /// different periods. Each quota uses `algorithm`.
    ///
    /// ```
    /// use redis_guard::rate_limit::{Algorithm, ClientIp, MemoryLimiter, Quota, RateLimitLayer};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = RateLimitLayer::builder(MemoryLimiter::new())
    ///     .rules("api", ClientIp::peer(), &Quota::parse_many("10/s; 1000/h")?, Algorithm::Gcra)
    ///     .build()?;
    /// # let _ = layer; Ok(()) }
    /// ```
    pub fn rules(
        mut self,
        name: &str,
        extractor: impl KeyExtractor,
        quotas: &[Quota],
        algorithm: Algorithm,
    ) -> Self {
        let client_ip = LayerRule::client_ip_of(&extractor);
        let extractor: Arc<dyn KeyExtractor> = Arc::new(extractor);
        // The last rule takes `algorithm` itself, the others a clone.
        for (quota, algorithm) in quotas
            .iter()
            .zip(std::iter::repeat_n(algorithm, quotas.len()))
        {
            let rule = Rule::new(format!("{name}-{}", period_label(quota.period())), *quota)
                .with_algorithm(algorithm);
            self.config.rules.push(LayerRule {
                rule: Arc::new(rule),
                extractor: Arc::clone(&extractor),
                client_ip: client_ip.clone(),
            });
        }
        self
    }

    /// Tries `quota` on live traffic beside the rule named `rule` (added before): a
    /// [`Mode::Shadow`] copy named `<rule>.candidate`, with the same key, algorithm and cost,
    /// that counts and reports under its own name (metrics, [`Decision::shadow`]) and never
    /// blocks nor shows in a header. Promote it by changing the rule's quota once its
    /// `redis_guard_rate_limit_shadow_limited_total` says who it would have stopped.
    ///
    /// ```
    /// use redis_guard::rate_limit::{ClientIp, MemoryLimiter, Quota, RateLimitLayer};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = RateLimitLayer::builder(MemoryLimiter::new())
    ///     .rule("api", ClientIp::peer(), Quota::per_minute(100))
    ///     .candidate("api", Quota::per_minute(60)) // would 60 a minute be enough?
    ///     .build()?;
    /// # let _ = layer; Ok(()) }
    /// ```
    ///
    /// [`Decision::shadow`]: crate::rate_limit::Decision::shadow
    pub fn candidate(mut self, rule: &str, quota: Quota) -> Self {
        let Some(of) = self.config.rules.iter().find(|r| r.rule.name() == rule) else {
            self.unknown_candidate
                .get_or_insert_with(|| rule.to_owned());
            return self;
        };
        let mut shadow = Rule::new(format!("{rule}.candidate"), quota)
            .with_algorithm(of.rule.algorithm().clone())
            .with_cost(of.rule.cost())
            .with_mode(Mode::Shadow);
        if let Some(route) = of.rule.route() {
            shadow = shadow.for_route(route.clone());
        }
        let candidate = LayerRule {
            rule: Arc::new(shadow),
            ..of.clone()
        };
        self.config.rules.push(candidate);
        self
    }

    setters! {
        /// What to do when a key is missing (default: reject with `400`).
        pub fn missing_key(policy: MissingKey) => config.missing_key;

        /// What to do when the limiter fails (default: [`FailurePolicy::Fallback`], sharing
        /// each quota among [`replicas`](Self::replicas); the policy's docs argue the choice).
        pub fn failure_policy(policy: FailurePolicy) => config.failure;

        /// Whether admitted responses carry `RateLimit-Policy` and `RateLimit` (default: yes).
        /// Denied responses always do.
        pub fn rate_limit_headers(on: bool) => config.ietf_on_allowed;

        /// Whether to also send the legacy `X-RateLimit-*` headers for older clients (default: no).
        pub fn legacy_headers(on: bool) => config.legacy;

        /// Puts the [`Decision`] in the request extensions of each admitted request (for the
        /// handler: `Option<Extension<Decision>>`) and the [`Rejection`] in the extensions of each
        /// answer the layer makes itself (for an outer layer or a test). Off by default: most
        /// applications read neither, and the two inserts are a good part of what a request costs
        /// the layer. The headers and the `response` hook get the decision either way.
        ///
        /// ```
        /// use redis_guard::rate_limit::{ClientIp, MemoryLimiter, Quota, RateLimitLayer};
        /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
        /// let layer = RateLimitLayer::builder(MemoryLimiter::new())
        ///     .rule("api", ClientIp::peer(), Quota::per_minute(100))
        ///     .extensions(true) // handlers read `Option<axum::Extension<Decision>>`
        ///     .build()?;
        /// # let _ = layer; Ok(()) }
        /// ```
        ///
        /// [`Decision`]: crate::rate_limit::Decision
        pub fn extensions(on: bool) => config.extensions;
    }

    /// How many instances (replicas) of the application run this layer against one Redis
    /// (default 1). Under [`FailurePolicy::Fallback`] (the default policy) each instance admits
    /// its share, `quota ÷ replicas`, of every rule while Redis is unavailable, so that together
    /// they admit about the quota rather than `replicas` times it. Set it from your deployment
    /// (the replica count of the Kubernetes deployment, the size of the autoscaling group).
    ///
    /// It is the one place the count is stated: every `Fallback` policy of the layer, its own
    /// and its rules' ([`Rule::on_failure`]), uses it, unless one names another count than 1
    /// ([`FailurePolicy::fallback`]), which `build` refuses as a contradiction.
    ///
    /// When the layer is built, a line at `info` says, per rule, what each replica admits while
    /// Redis is unavailable ("while Redis is unavailable each of 3 replicas admits up to
    /// 200/minute of rule `api`"); without a count, on a Redis limiter, the line says that the
    /// layer assumes one replica, which then admits the whole quota, and how to set it.
    ///
    /// ```
    /// use redis_guard::rate_limit::{ClientIp, MemoryLimiter, Quota, RateLimitLayer};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = RateLimitLayer::builder(MemoryLimiter::new()) // RedisLimiter::new(backend)
    ///     .rule("api", ClientIp::peer(), Quota::per_minute(600))
    ///     .replicas(3) // each admits 200/minute while Redis is down
    ///     .build()?;
    /// # let _ = layer;
    /// let zero = RateLimitLayer::builder(MemoryLimiter::new())
    ///     .rule("api", ClientIp::peer(), Quota::per_minute(600))
    ///     .replicas(0)
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(zero.value(), Some("0"));
    /// # Ok(()) }
    /// ```
    ///
    /// [`Rule::on_failure`]: crate::rate_limit::Rule::on_failure
    pub fn replicas(mut self, replicas: u32) -> Self {
        self.replicas = Some(replicas);
        self
    }

    /// How many requests may wait for their slot at once in this layer (default 1024): those
    /// a [throttled rule](crate::rate_limit::Rule::throttle) admitted after a wait. A request
    /// past the bound is denied at once (`429`, a [`Rejection::Limited`] whose `retry_after` is
    /// the wait it was offered) and gives its slot back. 0 turns waiting off.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::rate_limit::{Global, MemoryLimiter, Quota, RateLimitLayer, Rule};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = RateLimitLayer::builder(MemoryLimiter::new())
    ///     .rule_with(
    ///         Rule::new("upstream", Quota::per_second(50)).throttle(Duration::from_secs(1)),
    ///         Global,
    ///     )
    ///     .max_waiters(100)
    ///     .build()?;
    /// # let _ = layer; Ok(()) }
    /// ```
    pub fn max_waiters(mut self, max: usize) -> Self {
        self.config.waiters = Arc::new(super::throttle::Waiters::new(max));
        self
    }

    /// Writes the layer's own answers: `build` gets the [`Rejection`] (a denial, the limiter
    /// unavailable, a missing key, a misconfiguration) and returns the response, in place of
    /// the default `application/problem+json` ones ([`Rejection::response`], which a hook
    /// returns for the answers it leaves alone). The layer adds `Retry-After` (and, to a
    /// denial, the `RateLimit` headers) where the answer has none, and puts the rejection in
    /// its extensions.
    ///
    /// ```
    /// use redis_guard::rate_limit::{Global, MemoryLimiter, Quota, RateLimitLayer, Rejection};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = RateLimitLayer::builder(MemoryLimiter::new())
    ///     .rule("upstream", Global, Quota::per_second(100))
    ///     .response(|rejection| match rejection {
    ///         Rejection::Limited(d) => http::Response::builder()
    ///             .status(429)
    ///             .header("content-type", "application/json")
    ///             .body(format!(r#"{{"status":"rejected","rule":"{}"}}"#, d.rule).into())
    ///             .unwrap_or_default(),
    ///         other => other.response(),
    ///     })
    ///     .build()?;
    /// # let _ = layer; Ok(()) }
    /// ```
    pub fn response<F>(mut self, build: F) -> Self
    where
        F: Fn(&Rejection) -> Response<Bytes> + Send + Sync + 'static,
    {
        self.config.response = Some(Respond::new(build));
        self
    }

    /// Answers in gRPC: [`response`](Self::response) with [`grpc::response`], `RESOURCE_EXHAUSTED`
    /// for a denial and the matching status for the layer's other answers (the
    /// [`grpc`](crate::rate_limit::grpc) module docs list them). Put it on a layer in front of a
    /// gRPC service only: HTTP clients would see `200`.
    ///
    /// A [`response`](Self::response) hook set after this one replaces it; call
    /// [`grpc::response`] in it for the answers it leaves alone.
    ///
    /// [`grpc::response`]: crate::rate_limit::grpc::response
    ///
    /// ```
    /// use redis_guard::rate_limit::{HeaderKey, MemoryLimiter, Quota, RateLimitLayer};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = RateLimitLayer::builder(MemoryLimiter::new()) // RedisLimiter in production
    ///     .rule("api", HeaderKey::new("x-api-key"), Quota::per_minute(60))
    ///     .grpc()
    ///     .build()?;
    /// // tonic::transport::Server::builder().layer(layer).add_service(…)
    /// # let _ = layer; Ok(()) }
    /// ```
    pub fn grpc(self) -> Self {
        self.response(super::grpc::response)
    }

    /// Validates the rules and builds the layer.
    ///
    /// # Errors
    ///
    /// No rules, a duplicate rule name, a [`candidate`](Self::candidate) for a rule not added
    /// before it, a rule that cannot work (the error names the rule and the
    /// value), a rule whose share under [`FailurePolicy::Fallback`] cannot work (a cost above
    /// the divided burst), or a limiter that cannot work (e.g. a zero Redis timeout).
    pub fn build(self) -> Result<RateLimitLayer, ConfigError> {
        let mut config = self.config;
        if let Some(rule) = self.unknown_candidate {
            return Err(ConfigError::new(
                ConfigErrorKind::UnknownRule,
                format!(
                    "a candidate names rule `{rule}`, which the layer does not have (add the rule before its candidate)"
                ),
            )
            .with_setting("RateLimitLayer::candidate")
            .with_value(&rule)
            .of_rule(&rule));
        }
        if config.rules.is_empty() {
            return Err(ConfigError::new(
                ConfigErrorKind::NoRules,
                "the rate-limit layer has no rules",
            ));
        }
        if let Some(why) = config.limiter.config_problem() {
            return Err(why.within("the limiter cannot work"));
        }
        for (i, r) in config.rules.iter().enumerate() {
            r.rule.validate()?;
            r.extractor
                .validate()
                .map_err(|e| e.in_rule(r.rule.name()))?;
            if config.rules[..i]
                .iter()
                .any(|o| o.rule.name() == r.rule.name())
            {
                let name = r.rule.name();
                return Err(ConfigError::new(
                    ConfigErrorKind::DuplicateRule,
                    format!(
                        "two rules are named `{name}`; rule names must be unique within a layer"
                    ),
                )
                .with_setting("Rule::new")
                .with_value(name)
                .of_rule(name));
            }
        }
        let stated = self.replicas.is_some();
        if let Some(replicas) = self.replicas {
            state_replicas(&mut config, replicas)?;
        }
        config.fallback = Fallback::new(&config.rules, config.failure)?.map(Arc::new);
        if !config.limiter.in_process() {
            log_fallback_shares(&config, stated);
        }
        config.dynamic = config.rules.iter().any(|r| r.rule.is_dynamic());
        config.policy = headers::policy(
            config
                .rules
                .iter()
                .filter(|r| r.rule.mode() != Mode::Shadow && !r.rule.algorithm().is_lease())
                .map(|r| (r.rule.name(), r.rule.quota())),
        );
        config.denials = config
            .rules
            .iter()
            .filter(|r| r.rule.mode() == Mode::Enforce)
            .map(|r| PreparedDenial::new(r.rule.name_arc()))
            .collect();
        config.metrics = config
            .rules
            .iter()
            .map(|r| crate::telemetry::RuleMetrics::new(r.rule.name_arc()))
            .collect();
        super::lean::plan(&mut config);
        Ok(RateLimitLayer {
            config: Arc::new(config),
        })
    }
}

/// Makes every `Fallback` policy of the layer share its quotas among `replicas`
/// ([`RateLimitLayerBuilder::replicas`]).
fn state_replicas(config: &mut Config, replicas: u32) -> Result<(), ConfigError> {
    let setting = "RateLimitLayerBuilder::replicas";
    let Some(count) = NonZeroU32::new(replicas) else {
        return Err(ConfigError::new(
            ConfigErrorKind::Fallback,
            "replicas must be at least 1, got 0",
        )
        .with_setting(setting)
        .with_value(0));
    };
    let restate = |policy: FailurePolicy, rule: Option<&str>| match policy {
        FailurePolicy::Fallback { replicas: own } if own != count && own != NonZeroU32::MIN => {
            let err = ConfigError::new(
                ConfigErrorKind::Fallback,
                format!(
                    "replicas({count}) contradicts a FailurePolicy::Fallback with {own} replicas; \
                     state the count once, with replicas(n)"
                ),
            )
            .with_setting(setting)
            .with_value(replicas);
            Err(match rule {
                Some(name) => err.of_rule(name),
                None => err,
            })
        }
        FailurePolicy::Fallback { .. } => Ok(FailurePolicy::Fallback { replicas: count }),
        other => Ok(other),
    };
    config.failure = restate(config.failure, None)?;
    for r in &mut config.rules {
        if let Some(policy) = r.rule.failure_policy() {
            let policy = restate(policy, Some(r.rule.name()))?;
            r.rule = Arc::new((*r.rule).clone().on_failure(policy));
        }
    }
    Ok(())
}

/// Says, once per rule when the layer is built, what each replica admits while Redis is
/// unavailable; `stated`: the replica count was set ([`RateLimitLayerBuilder::replicas`]).
fn log_fallback_shares(config: &Config, stated: bool) {
    for r in &config.rules {
        let FailurePolicy::Fallback { replicas } =
            r.rule.failure_policy().unwrap_or(config.failure)
        else {
            continue;
        };
        let (rule, quota) = (r.rule.name(), r.rule.quota());
        let share = quota.share(replicas);
        let says = if replicas.get() > 1 {
            format!(
                "each of {replicas} replicas admits up to {share} of rule `{rule}` (its quota {quota} shared by {replicas})"
            )
        } else if stated {
            format!("the single replica admits up to {share} of rule `{rule}`, its whole quota")
        } else {
            format!(
                "each replica admits up to {share} of rule `{rule}`, its whole quota: the layer \
                 assumes 1 replica. With N replicas, set RateLimitLayerBuilder::replicas(N) so \
                 that together they admit about the quota"
            )
        };
        tracing::info!(
            rule,
            replicas = replicas.get(),
            share = %share,
            "rate limit: while Redis is unavailable {says}"
        );
    }
}

/// `1s`, `30s`, `1m`, `1h`, `1d`, `500ms`: the largest unit that divides the period.
fn period_label(period: std::time::Duration) -> String {
    let ms = period.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

impl fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RateLimitLayerBuilder")
            .field(&self.config)
            .finish()
    }
}
