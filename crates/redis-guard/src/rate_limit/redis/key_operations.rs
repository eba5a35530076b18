//! The operations script behind a [`RedisLimiter`]'s operations on one rule and one key
//! (`inspect`, `reset`, `penalize`, `allow`, in `limiter.rs`): on the key's override record.

use super::RedisLimiter;
use super::script_reply::ints;
use crate::rate_limit::algorithm::script::OPERATIONS;
use crate::rate_limit::limiter::LimiterError;
use crate::rate_limit::limiter::overrides::Override;
use crate::rate_limit::{Key, Rule};

impl RedisLimiter {
    /// Runs the operations script (`get`, `reset`, `penalize`, `allow`) on `rule`'s keys for
    /// `key`: the record afterwards and the Redis time, in µs.
    pub(super) fn operation(
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

/// Parses the operations script's reply (`operations.lua`'s header has it).
fn parse_record(reply: &redis::Value) -> Result<(Override, u64), LimiterError> {
    let v: [u64; 7] = ints(reply, "operations script")?;
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
