//! A [`RedisLimiter`]'s requests on leased rules: from a busy key's block, or on to Redis.

use super::Leased;
use crate::rate_limit::RedisLimiter;
use crate::rate_limit::limiter::{Check, Held, LimiterFuture};
use crate::rate_limit::redis::denials::{answered, asked};

impl RedisLimiter {
    /// Evaluates `checks`, with the leases (and receipts to settle) an admitted request took:
    /// one boxed future, the only one of a request on the hot path. A request whose only rule
    /// is [leased](super::Rule::leased) goes to its key's block when the key is busy.
    pub(in crate::rate_limit) fn evaluate_held(&self, checks: Vec<Check>) -> LimiterFuture<Held> {
        let [check] = checks.as_slice() else {
            return self.evaluate_unleased(checks);
        };
        if check.rule.max_block().is_none() || check.rule.allows(&check.key) {
            return self.evaluate_unleased(checks);
        }
        match self.leases.take(check, || self.lease_keys(check)) {
            Leased::Now(state) => Box::pin(std::future::ready(Ok((vec![state], None, Vec::new())))),
            Leased::Normal(None) => self.evaluate_unleased(checks),
            Leased::Normal(Some(given_back)) => {
                let normal = self.evaluate_unleased(checks);
                Box::pin(async move {
                    given_back.await;
                    normal.await
                })
            }
            Leased::Reserve(reserved) => {
                let deny_cache = self.deny_cache.clone();
                let backend = self.backend.clone();
                Box::pin(async move {
                    let state = reserved.await?;
                    if let Some(cache) = deny_cache {
                        // As any decision: admitted, the key's cached denials are stale (a
                        // denial is not cached, so the request's key is never made).
                        answered(&cache, &backend, &[state], &asked(&checks), None);
                    }
                    Ok((vec![state], None, Vec::new()))
                })
            }
        }
    }

    /// The Redis keys a leased `check` reserves on: its state and its open-block count.
    fn lease_keys(&self, check: &Check) -> [String; 2] {
        let state = self.key_names(&check.rule, &check.key, false).0;
        let open = self
            .backend
            .key(&["rl", check.rule.name(), "lease"], &check.key.digest());
        [state, open]
    }
}
