//! The Redis limiter: one `EVALSHA` per request decides and records every rule at once.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use super::algorithm::{RuleState, script};
use super::limiter::{BoxFuture, Check, Limiter, LimiterError};
use crate::backend::{Clock, ManualClock, RedisConnection};

/// Default key prefix: `rg:`, so keys read `rg:rl:<rule>:{<digest>}`.
pub const DEFAULT_PREFIX: &str = "rg:";

/// Default time to wait for Redis before giving up on a decision.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

/// A limiter whose state lives in Redis, shared by every instance of the application.
///
/// Each request costs one round trip: a Lua script reads Redis `TIME`, evaluates every rule and,
/// only when all admit the request, records it. Concurrent requests from any number of app
/// instances are serialized by Redis, so a limit of 50 admits exactly 50. Every key the script
/// writes carries a TTL.
///
/// Key names are `<prefix>rl:<rule>:{<digest>}`: the digest is a hash of the client key (see
/// [`Key::digest`](super::Key::digest)), and the braces make it a Cluster hash tag.
///
/// ```no_run
/// use redis_guard::backend::RedisConnection;
/// use redis_guard::rate_limit::RedisLimiter;
/// use std::time::Duration;
/// # async fn f() -> redis::RedisResult<()> {
/// let conn = RedisConnection::open("redis://127.0.0.1/").await?;
/// let limiter = RedisLimiter::new(conn)
///     .prefix("myapp:")
///     .timeout(Duration::from_millis(100));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisLimiter {
    inner: Arc<Inner>,
}

#[derive(Clone, Debug)]
struct Inner {
    conn: RedisConnection,
    prefix: String,
    timeout: Duration,
    shift: Option<ManualClock>,
}

impl RedisLimiter {
    /// A limiter on `conn` with the default prefix and timeout.
    #[must_use]
    pub fn new(conn: impl Into<RedisConnection>) -> Self {
        Self {
            inner: Arc::new(Inner {
                conn: conn.into(),
                prefix: DEFAULT_PREFIX.to_owned(),
                timeout: DEFAULT_TIMEOUT,
                shift: None,
            }),
        }
    }

    /// Prepends `prefix` to every key (default [`DEFAULT_PREFIX`]): to share one Redis between
    /// applications.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.inner).prefix = prefix.into();
        self
    }

    /// How long to wait for Redis (default [`DEFAULT_TIMEOUT`]).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        Arc::make_mut(&mut self.inner).timeout = timeout;
        self
    }

    /// A test seam: adds `clock`'s reading to Redis `TIME` in every decision, so a test can let
    /// an hour pass with [`ManualClock::advance`] instead of sleeping. The clock is still Redis'
    /// own; the shift only moves it forward, identically for every limiter given the same
    /// `ManualClock`. Production code never calls this.
    #[must_use]
    pub fn time_shift(mut self, clock: ManualClock) -> Self {
        Arc::make_mut(&mut self.inner).shift = Some(clock);
        self
    }

    fn shift_us(&self) -> u64 {
        self.inner.shift.as_ref().map_or(0, |c| {
            u64::try_from(c.now().as_micros()).unwrap_or(u64::MAX)
        })
    }

    /// The Redis key that holds `check`'s state.
    #[must_use]
    pub fn key_name(&self, check: &Check) -> String {
        format!(
            "{}rl:{}:{{{}}}",
            self.inner.prefix,
            check.rule.name(),
            check.key.digest()
        )
    }
}

impl Limiter for RedisLimiter {
    fn evaluate(&self, checks: Vec<Check>) -> BoxFuture<Result<Vec<RuleState>, LimiterError>> {
        let keys: Vec<String> = checks.iter().map(|c| self.key_name(c)).collect();
        let mut args = Vec::with_capacity(1 + checks.len() * 6);
        args.push(self.shift_us());
        for check in &checks {
            let p = check.rule.params(check.cost);
            args.extend([
                u64::from(p.algorithm.lua_id()),
                p.limit,
                p.period_us,
                p.burst,
                p.emission_us,
                p.cost,
            ]);
        }
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let call = inner.conn.invoke(&script::EVALUATE, &keys, &args);
            let reply = tokio::time::timeout(inner.timeout, call)
                .await
                .map_err(|_| LimiterError::Timeout(inner.timeout))?
                .map_err(LimiterError::Redis)?;
            parse_reply(&reply, keys.len())
        })
    }
}

/// Parses `{ {allowed, limit, remaining, retry_after_ms, reset_after_ms}, ... }`.
pub(crate) fn parse_reply(reply: &Value, expected: usize) -> Result<Vec<RuleState>, LimiterError> {
    let bad = |what: &str| LimiterError::BadReply(format!("{what}: {reply:?}"));
    let Value::Array(rows) = reply else {
        return Err(bad("expected an array"));
    };
    if rows.len() != expected {
        return Err(bad(&format!("expected {expected} rows")));
    }
    rows.iter()
        .map(|row| {
            let Value::Array(cells) = row else {
                return Err(bad("expected a row array"));
            };
            let ints: Vec<u64> = cells
                .iter()
                .map(|c| match c {
                    Value::Int(i) => u64::try_from(*i).ok(),
                    _ => None,
                })
                .collect::<Option<_>>()
                .ok_or_else(|| bad("expected non-negative integers"))?;
            let [allowed, limit, remaining, retry_ms, reset_ms] = ints[..] else {
                return Err(bad("expected 5 integers per row"));
            };
            if allowed > 1 {
                return Err(bad("`allowed` must be 0 or 1"));
            }
            Ok(RuleState::from_parts(
                allowed == 1,
                limit,
                remaining,
                retry_ms,
                reset_ms,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_replies_that_do_not_fit() {
        let row = |v: Vec<i64>| Value::Array(v.into_iter().map(Value::Int).collect());
        assert!(parse_reply(&Value::Array(vec![row(vec![1, 10, 9, 0, 6000])]), 1).is_ok());
        for bad in [
            Value::Nil,
            Value::Array(vec![]),
            Value::Array(vec![row(vec![1, 10, 9, 0])]),
            Value::Array(vec![row(vec![2, 10, 9, 0, 1])]),
            Value::Array(vec![row(vec![1, -1, 9, 0, 1])]),
            Value::Array(vec![Value::Okay]),
        ] {
            assert!(
                matches!(parse_reply(&bad, 1), Err(LimiterError::BadReply(_))),
                "{bad:?}"
            );
        }
    }
}
