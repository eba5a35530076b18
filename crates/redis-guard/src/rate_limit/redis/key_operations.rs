//! A [`RedisLimiter`]'s operations on one rule and one key (`inspect`, `reset`, `penalize`,
//! `allow`): the operations script on the key's state and override record.

use std::sync::Arc;

use super::RedisLimiter;
use crate::backend::BackendError;
use crate::rate_limit::algorithm::script::OPERATIONS;
use crate::rate_limit::limiter::live;
use crate::rate_limit::limiter::operations::{self, Inspection};
use crate::rate_limit::limiter::overrides::{Override, Steer};
use crate::rate_limit::limiter::{Check, LimiterError, LimiterFuture};
use crate::rate_limit::{Key, Rule};

impl RedisLimiter {
    /// What `rule` knows about `key`: its state (a dry evaluation) and its override record.
    pub(super) fn inspect_on_redis(&self, rule: &Rule, key: Key) -> LimiterFuture<Inspection> {
        if self.needs_shape([rule]) {
            let rule = rule.clone();
            return self.once_shaped(move |this| this.inspect_on_redis(&rule, key));
        }
        if let Err(e) = operations::valid(self, rule) {
            return Box::pin(std::future::ready(Err(e)));
        }
        if rule.allows(&key) {
            let listed = Inspection::allow_listed(rule.quota().limit());
            return Box::pin(std::future::ready(Ok(listed)));
        }
        let mut check = Check::new(rule.clone(), key);
        live::apply(self, std::slice::from_mut(&mut check));
        let evaluation = self.evaluation(std::slice::from_ref(&check)).dry();
        let coalescers = Arc::clone(&self.coalescers);
        // A rule that reads no record has none that applies.
        let record = rule
            .reads_overrides()
            .then(|| self.operation(&check.rule, &check.key, "get", 0));
        Box::pin(async move {
            let (states, ..) = evaluation.run(&coalescers).await?;
            let state = states
                .into_iter()
                .next()
                .ok_or_else(|| BackendError::BadReply("no state".into()))?;
            let (record, now) = match record {
                Some(record) => record.await?,
                None => (Override::default(), 0),
            };
            Ok(Inspection::new(state, record, now, check.cost))
        })
    }

    /// Forgets `rule`'s state and override record for `key`.
    pub(super) fn reset_on_redis(&self, rule: &Rule, key: Key) -> LimiterFuture<()> {
        if self.needs_shape([rule]) {
            let rule = rule.clone();
            return self.once_shaped(move |this| this.reset_on_redis(&rule, key));
        }
        if let Err(e) = operations::valid(self, rule) {
            return Box::pin(std::future::ready(Err(e)));
        }
        let done = self.operation(rule, &key, "reset", 0);
        Box::pin(async move { done.await.map(drop) })
    }

    /// `penalize` or `allow`, its duration validated.
    pub(super) fn steer(&self, rule: &Rule, key: &Key, steer: Steer) -> LimiterFuture<()> {
        if self.needs_shape([rule]) {
            let (rule, key) = (rule.clone(), key.clone());
            return self.once_shaped(move |this| this.steer(&rule, &key, steer));
        }
        match operations::valid_for(self, rule, steer.duration()) {
            Ok(us) => {
                let done = self.operation(rule, key, steer.op(), us);
                Box::pin(async move { done.await.map(drop) })
            }
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    /// Runs the operations script (`get`, `reset`, `penalize`, `allow`) on `rule`'s keys for
    /// `key`: the record afterwards and the Redis time, in µs.
    fn operation(
        &self,
        rule: &Rule,
        key: &Key,
        op: &'static str,
        us: u64,
    ) -> impl Future<Output = Result<(Override, u64), LimiterError>> + Send + 'static {
        let (state, record) = self.key_names(rule, key, true);
        let record = record.unwrap_or_default();
        let backend = self.backend.clone();
        let deny_cache = self.deny_cache.clone().filter(|_| op != "get");
        async move {
            let mut call = backend.script(&OPERATIONS, &[state, record]);
            call.arg(op).arg(us);
            let reply = call.run().await?;
            if let Some(cache) = deny_cache {
                // This replica's cached denials may predate the operation.
                cache.clear();
            }
            parse_record(&reply)
        }
    }
}

/// Parses the operations script's reply: `{ now, block_until, allow_until, level, level_until,
/// strikes, strikes_until }`.
fn parse_record(reply: &redis::Value) -> Result<(Override, u64), LimiterError> {
    let ints: Option<Vec<u64>> = match reply {
        redis::Value::Array(cells) if cells.len() == 7 => cells
            .iter()
            .map(|c| match c {
                redis::Value::Int(i) => u64::try_from(*i).ok(),
                _ => None,
            })
            .collect(),
        _ => None,
    };
    let Some(v) = ints.and_then(|v| <[u64; 7]>::try_from(v).ok()) else {
        return Err(BackendError::BadReply(format!("operations script: {reply:?}")).into());
    };
    let record = Override {
        block_until: v[1],
        allow_until: v[2],
        level: v[3],
        level_until: v[4],
        strikes: v[5],
        strikes_until: v[6],
    };
    Ok((record, v[0]))
}
