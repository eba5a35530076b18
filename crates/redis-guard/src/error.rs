//! [`ConfigError`]: what is wrong with a setting, for every layer and store.

use std::fmt;
use std::time::Duration;

/// A setting that cannot work: a rule, a quota, a proxy list, a replica count, a session or
/// cache setting, a store's own settings (e.g. a zero Redis timeout). The layers' builders
/// return it, [`Quota`](crate::rate_limit::Quota)'s `FromStr` too, so a bad configuration fails
/// at startup with one message, never on a request.
///
/// Its text says what is wrong and names the bad value. For callers that branch, it also says
/// which kind of problem it is ([`kind`](Self::kind)), the rule it concerns ([`rule`](Self::rule)),
/// the setting ([`setting`](Self::setting), e.g. `"SessionLayerBuilder::idle_timeout"`) and the bad
/// value as text ([`value`](Self::value)). A problem found inside another (a rule's share under
/// [`FailurePolicy::Fallback`](crate::rate_limit::FailurePolicy::Fallback)) is its
/// [`source`](std::error::Error::source).
///
/// ```
/// # #[cfg(feature = "rate-limit")] {
/// use redis_guard::ConfigErrorKind;
/// use redis_guard::rate_limit::{Quota, Rule};
///
/// let err = "100/fortnight".parse::<Quota>().unwrap_err();
/// assert_eq!(err.kind(), ConfigErrorKind::QuotaSyntax);
/// assert_eq!(err.value(), Some("fortnight"));
/// assert!(err.to_string().contains("unit `fortnight`"));
///
/// let err = Rule::new("login", Quota::per_minute(5)).with_cost(6).validate().unwrap_err();
/// assert_eq!(err.kind(), ConfigErrorKind::Cost);
/// assert_eq!(err.rule(), Some("login"));
/// assert_eq!(err.setting(), Some("Rule::with_cost"));
/// assert_eq!(err.value(), Some("6"));
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigError {
    kind: ConfigErrorKind,
    rule: Option<Box<str>>,
    setting: Option<&'static str>,
    value: Option<Box<str>>,
    message: Box<str>,
    source: Option<Box<ConfigError>>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

// By hand, not derived: a derived `source` would hand out the `Box`, and
// `downcast_ref::<ConfigError>()` on it would fail.
impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// What kind of setting a [`ConfigError`] rejects; [`ConfigError::kind`] returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// A quota string does not parse: not `<count>/<period>`, a count that is not a whole
    /// number, an unknown unit.
    QuotaSyntax,
    /// A quota cannot work: a limit, period or burst of 0, a period over 366 days, more than
    /// one request per microsecond, a burst that would take years to refill.
    Quota,
    /// A name cannot be used: a rule name outside 1-64 characters of `A-Z a-z 0-9 _ . -`, a
    /// lock name outside 1-256 bytes or with `{` / `}`.
    Name,
    /// Two rules of one layer share a name.
    DuplicateRule,
    /// A candidate names a rule the layer does not have.
    UnknownRule,
    /// A layer, or a call to a limiter, has no rules.
    NoRules,
    /// A rule's cost cannot work: above the burst, or a rule charged after the response that
    /// reserves nothing.
    Cost,
    /// The algorithm cannot run this rule: a quota too large for its exact arithmetic, a custom
    /// algorithm that cannot be used.
    Algorithm,
    /// A concurrency rule cannot work (a maximum of 0, a lease expiry under 1 ms, a cost
    /// other than 0 or 1).
    Concurrency,
    /// The limiter cannot do what was asked with this rule: run a custom Lua algorithm in
    /// process, charge an algorithm that has no charge, penalize or allow a key on a rule that
    /// reads no runtime overrides; or a layer needs a feature that is off (idempotency keys
    /// scoped by the session's user without `session`).
    Unsupported,
    /// A rule's bans cannot work.
    Bans,
    /// A rule cannot be leased.
    Leasing,
    /// [`FailurePolicy::Fallback`](crate::rate_limit::FailurePolicy::Fallback) cannot work: zero
    /// replicas, or a rule whose share is below its cost (the share's own problem is the
    /// error's `source`).
    Fallback,
    /// An entry of a trusted-proxy list is not an address or a CIDR.
    TrustedProxy,
    /// A forwarding header is neither `x-forwarded-for` nor `forwarded`.
    ForwardedHeader,
    /// A header name is not a valid HTTP header name (`HeaderKey::new`,
    /// `IdempotencyLayerBuilder::scope_header`).
    HeaderName,
    /// A store's own settings cannot work (e.g. a Redis timeout of zero).
    Store,
    /// The session cookie's attributes do not work together.
    Cookie,
    /// A session token header cannot be used.
    Transport,
    /// A duration is outside its range (a session lifetime, a cache TTL, a lock lease, a
    /// penalty), or two durations do not fit together.
    Duration,
    /// A number or a ratio is outside its range (sessions per user, jitter, a body limit).
    Range,
}

cfg_middleware! {
    unused_without {
        impl ConfigError {
            /// An error of `kind` that says `message`.
            pub(crate) fn new(kind: ConfigErrorKind, message: impl Into<String>) -> Self {
                Self {
                    kind,
                    rule: None,
                    setting: None,
                    value: None,
                    message: message.into().into_boxed_str(),
                    source: None,
                }
            }

            /// Names the setting, e.g. `"SessionLayerBuilder::idle_timeout"`.
            pub(crate) fn with_setting(mut self, setting: &'static str) -> Self {
                self.setting = Some(setting);
                self
            }

            /// Records the bad value as text.
            pub(crate) fn with_value(mut self, value: impl fmt::Display) -> Self {
                self.value = Some(value.to_string().into_boxed_str());
                self
            }

            /// A [`ConfigErrorKind::Duration`] error unless `value` is 1 ms to `max`: it says
            /// "`what` of `value`: use 1 ms to `range`", with the value.
            pub(crate) fn check_duration(
                value: Duration,
                max: Duration,
                what: &str,
                range: impl fmt::Display,
            ) -> Result<(), Self> {
                if (Duration::from_millis(1)..=max).contains(&value) {
                    return Ok(());
                }
                Err(Self::new(
                    ConfigErrorKind::Duration,
                    format!("{what} of {value:?}: use 1 ms to {range}"),
                )
                .with_debug_value(value))
            }

            /// A [`ConfigErrorKind::HeaderName`] error: `bad`, given to `setting`, is not a
            /// header name.
            #[cfg_attr(
                not(any(feature = "rate-limit", feature = "idempotency")),
                allow(dead_code)
            )]
            pub(crate) fn header_name(bad: &str, setting: &'static str) -> Self {
                Self::new(
                    ConfigErrorKind::HeaderName,
                    format!(
                        "{setting}: {bad:?} is not a header name (one or more of the letters, \
                         digits and !#$%&'*+-.^_`|~, as in \"x-api-key\")"
                    ),
                )
                .with_setting(setting)
                .with_value(bad)
            }

            /// Records the bad value as its `Debug` text (durations: `0ns`, `30s`).
            pub(crate) fn with_debug_value(self, value: impl fmt::Debug) -> Self {
                self.with_value(format_args!("{value:?}"))
            }

            /// Names the rule the problem concerns, its message unchanged (it names the rule already).
            #[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
            pub(crate) fn of_rule(mut self, rule: &str) -> Self {
                self.rule = Some(rule.into());
                self
            }

            /// The problem, found in `context`: the message starts with "`context`: ".
            pub(crate) fn within(mut self, context: impl fmt::Display) -> Self {
                self.message = format!("{context}: {}", self.message).into_boxed_str();
                self
            }

            /// The problem, found in rule `rule`: the message starts with "rule `rule`: ".
            #[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
            pub(crate) fn in_rule(self, rule: &str) -> Self {
                self.within(format_args!("rule `{rule}`")).of_rule(rule)
            }

            /// Keeps `source` as the cause.
            #[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
            pub(crate) fn caused_by(mut self, source: Self) -> Self {
                self.source = Some(Box::new(source));
                self
            }

            /// What kind of setting is wrong.
            #[must_use]
            pub fn kind(&self) -> ConfigErrorKind {
                self.kind
            }

            /// The name of the rule the problem concerns, if it concerns one.
            #[must_use]
            pub fn rule(&self) -> Option<&str> {
                self.rule.as_deref()
            }

            /// The setting that is wrong, as the method that sets it (e.g. `"Rule::with_cost"`,
            /// `"SessionLayerBuilder::idle_timeout"`, `"RedisBackend::timeout"`), when one setting is.
            #[must_use]
            pub fn setting(&self) -> Option<&str> {
                self.setting
            }

            /// The bad value as text (e.g. `"0ns"`, `"10.0.0.0/33"`, `"6"`), when there is one.
            #[must_use]
            pub fn value(&self) -> Option<&str> {
                self.value.as_deref()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::{ConfigError, ConfigErrorKind};

    #[test]
    fn in_rule_names_the_rule_and_keeps_the_cause() {
        let inner = ConfigError::new(ConfigErrorKind::Cost, "cost 3 is larger than the burst 2")
            .with_value(3)
            .in_rule("api:share");
        assert_eq!(
            inner.to_string(),
            "rule `api:share`: cost 3 is larger than the burst 2"
        );
        assert_eq!(inner.rule(), Some("api:share"));
        let outer = ConfigError::new(ConfigErrorKind::Fallback, format!("the share of {inner}"))
            .with_value(4)
            .caused_by(inner.clone());
        assert_eq!(outer.kind(), ConfigErrorKind::Fallback);
        assert_eq!(outer.value(), Some("4"));
        assert_eq!(outer.rule(), None);
        let source = outer.source().and_then(|s| s.downcast_ref::<ConfigError>());
        assert_eq!(source, Some(&inner));
    }
}
