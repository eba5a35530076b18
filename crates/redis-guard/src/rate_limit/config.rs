//! The layer's settings, shared by every clone of it, and the per-request plan they give.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};

use super::limiter::Check;
use super::{Decision, FailurePolicy, KeyError, KeyExtractor, Limiter, MissingKey, Rule, headers};

/// Which rate-limit headers to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeaderMode {
    pub(crate) ietf_on_allowed: bool,
    pub(crate) legacy: bool,
}

/// Builds the response for a denied request. The layer adds `Retry-After` and the `RateLimit`
/// headers when the builder did not set them.
pub type ResponseBuilder = Arc<dyn Fn(&Decision) -> Response<Bytes> + Send + Sync>;

/// One rule of a layer: what to count and what to count it by.
#[derive(Clone)]
pub(crate) struct LayerRule {
    pub(crate) rule: Rule,
    pub(crate) extractor: Arc<dyn KeyExtractor>,
}

/// Shared by every clone of the layer and the services it makes.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) limiter: Arc<dyn Limiter>,
    pub(crate) rules: Vec<LayerRule>,
    pub(crate) missing_key: MissingKey,
    pub(crate) failure: FailurePolicy,
    pub(crate) headers: HeaderMode,
    pub(crate) response: Option<ResponseBuilder>,
    /// `RateLimit-Policy` for all the rules, made when the layer is built.
    pub(crate) policy: HeaderValue,
}

/// What the layer decided to do with a request before asking the limiter.
pub(crate) enum Plan {
    /// Evaluate these checks.
    Check(Vec<Check>),
    /// No rule applies (every key missing and skipped).
    Pass,
    /// Answer at once with this status (missing key rejected, misconfiguration).
    Respond(StatusCode, &'static str),
}

impl Config {
    pub(crate) fn plan(&self, parts: &http::request::Parts) -> Plan {
        let mut checks = Vec::with_capacity(self.rules.len());
        for r in &self.rules {
            match r.extractor.extract(parts) {
                Ok(key) => checks.push(Check::new(r.rule.clone(), key)),
                Err(KeyError::Missing) => match self.missing_key {
                    MissingKey::Skip => {}
                    MissingKey::Reject(status) => {
                        tracing::debug!(rule = r.rule.name(), "rate limit key missing: rejected");
                        return Plan::Respond(status, "The request lacks the rate-limit key.");
                    }
                },
                // The extractor logged the fix once; every request fails the same way until the
                // server is set up right, so it can't go unnoticed.
                Err(KeyError::Misconfigured(_)) => {
                    return Plan::Respond(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "The rate limiter is misconfigured.",
                    );
                }
            }
        }
        if checks.is_empty() {
            Plan::Pass
        } else {
            Plan::Check(checks)
        }
    }

    /// The `RateLimit-Policy` value for `decision`'s rules: the layer's own when every rule was
    /// evaluated (the usual case), made anew when some were skipped for a missing key.
    pub(crate) fn policy(&self, decision: &Decision) -> HeaderValue {
        if decision.rules.len() == self.rules.len() {
            self.policy.clone()
        } else {
            headers::policy(decision.rules.iter().map(|r| (&*r.rule, &r.quota)))
        }
    }

    pub(crate) fn ietf_on_allowed(&self) -> bool {
        self.headers.ietf_on_allowed
    }

    pub(crate) fn legacy_headers(&self) -> bool {
        self.headers.legacy
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limiter", &self.limiter)
            .field(
                "rules",
                &self.rules.iter().map(|r| &r.rule).collect::<Vec<_>>(),
            )
            .field("missing_key", &self.missing_key)
            .field("failure", &self.failure)
            .field("headers", &self.headers)
            .field("custom_response", &self.response.is_some())
            .finish()
    }
}
