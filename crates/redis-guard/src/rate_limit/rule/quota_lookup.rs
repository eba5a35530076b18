//! Quotas resolved per request ([`Rule::with_quota_from`] and its `async` twin).
//!
//! [`Rule::with_quota_from`]: crate::rate_limit::Rule::with_quota_from

use std::sync::LazyLock;
use std::time::Duration;

use futures_util::future::join_all;

use super::QuotaFrom;
use crate::ConfigError;
use crate::rate_limit::Check;
use crate::rate_limit::WarnEvery;
use crate::rate_limit::limiter::BoxFuture;
use crate::rate_limit::{Quota, Rule};

/// How long a request waits for its rules' `async` quota lookups at most; what then:
/// [`Rule::with_quota_from_async`](crate::rate_limit::Rule::with_quota_from_async).
pub(crate) const QUOTA_LOOKUP_TIMEOUT: Duration = Duration::from_secs(1);

/// Keeps "quota lookup timed out" to a line a minute for the process.
static SLOW_LOOKUPS: LazyLock<WarnEvery> =
    LazyLock::new(|| WarnEvery::new(Duration::from_secs(60)));

/// A quota being looked up: the index of its check, and the lookup.
pub(crate) type Lookup = (usize, BoxFuture<Option<Quota>>);

/// What a rule's resolver says of one request.
pub(crate) enum Resolved {
    /// The quota is known: the rule's own (no resolver, or it answered `None`) or this one.
    Now(Option<Quota>),
    /// It is being looked up.
    Later(BoxFuture<Option<Quota>>),
}

/// Asks `rule`'s resolver, if it has one, for the quota of the request `parts`.
pub(crate) fn resolve(rule: &Rule, parts: &http::request::Parts) -> Resolved {
    match rule.quota_from() {
        None => Resolved::Now(None),
        Some(QuotaFrom::Now(f)) => Resolved::Now((f.0)(parts)),
        Some(QuotaFrom::Later(f)) => Resolved::Later((f.0)(parts)),
    }
}

/// Whether `check`'s resolved quota works with its rule and cost; logs why not (the layer then
/// answers `500`, as for a misconfigured key).
pub(crate) fn usable(check: &Check) -> Result<(), ConfigError> {
    check
        .rule
        .resolved_problem(&check.quota, check.cost)
        .inspect_err(|err| {
            tracing::warn!(
                rule = check.rule.name(),
                error = %err,
                "the rule's quota resolver gave a quota that cannot work: 500"
            );
        })
}

/// `checks` once `lookups` have answered (within [`QUOTA_LOOKUP_TIMEOUT`]), each looked-up
/// check under its quota; an error when one cannot work.
pub(crate) fn looked_up(
    mut checks: Vec<Check>,
    lookups: Vec<Lookup>,
) -> BoxFuture<Result<Vec<Check>, ConfigError>> {
    Box::pin(async move {
        let (places, futures): (Vec<usize>, Vec<_>) = lookups.into_iter().unzip();
        match tokio::time::timeout(QUOTA_LOOKUP_TIMEOUT, join_all(futures)).await {
            Ok(quotas) => {
                for (i, quota) in places.into_iter().zip(quotas) {
                    // An operator's live quota wins over the plan's (`Rule::live`).
                    if let Some(quota) = quota.filter(|_| !checks[i].live) {
                        checks[i].quota = quota;
                        usable(&checks[i])?;
                    }
                }
            }
            Err(_) => {
                if let Some(unlogged) = SLOW_LOOKUPS.hit() {
                    tracing::warn!(
                        timeout_ms = QUOTA_LOOKUP_TIMEOUT.as_millis(),
                        unlogged,
                        "a rate-limit quota lookup timed out: the request is decided under the rules' own quotas"
                    );
                }
            }
        }
        Ok(checks)
    })
}
