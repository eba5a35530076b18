//! The fixed window without Lua on Redis >= 7: one `MULTI` … `EXEC` per request of one rule,
//! coalesced (`fixed_window_batch.rs`). What a user sees of it: [`Algorithm::FixedWindow`].
//!
//! The shape belongs to the backend, not to the request, so that a rule's count never splits
//! between two keys: every fixed window of a limiter on Redis >= 7 whose clock is Redis' own
//! keeps the `fwc` shape, and the requests that need a script run `fixed_window_counter.lua` on
//! the same key. A test seam that shifts or freezes the scripts' clock keeps `fw`: key expiry
//! cannot follow it.

use std::sync::OnceLock;

use redis::Value;

use super::evaluation::Coalescers;
use super::fixed_window_batch::Count;
use crate::backend::{BackendError, RedisBackend};
use crate::rate_limit::Algorithm;
use crate::rate_limit::algorithm::{Params, RuleState};
use crate::rate_limit::limiter::{Check, Held, LimiterError, LimiterFuture};
use crate::rate_limit::{RedisLimiter, Rule};

/// The key tag of a fixed window kept as a plain counter (`fw` is the script's shape).
pub(super) const TAG: &str = "fwc";

/// Whether a limiter's fixed windows are plain counters: known once its server's version is.
#[derive(Debug)]
pub(super) struct Counters {
    known: OnceLock<bool>,
}

impl Counters {
    /// For a limiter on `backend`: not known yet, unless the backend's clock is not Redis' own.
    pub(super) fn new(backend: &RedisBackend) -> Self {
        let known = OnceLock::new();
        if !backend.reads_redis_time() {
            let _ = known.set(false);
        }
        Self { known }
    }

    /// Whether the shape is known (else [`detect`](Self::detect) it first).
    pub(super) fn is_known(&self) -> bool {
        self.known.get().is_some()
    }

    /// Whether fixed windows are plain counters; before [`detect`](Self::detect), the guess a
    /// server of today gets (what
    /// [`RedisLimiter::key_name`](crate::rate_limit::RedisLimiter::key_name) reports before the
    /// first call).
    pub(super) fn plain(&self) -> bool {
        self.known.get().copied().unwrap_or(true)
    }

    /// Asks the server its version once (`INFO server`; every node of a cluster): plain counters
    /// on Redis >= 7. A server that refuses `INFO` (renamed, or denied by an ACL) keeps the
    /// scripts; an unreachable one is an error, and the next call asks again.
    pub(super) async fn detect(&self, backend: &RedisBackend) -> Result<(), LimiterError> {
        if self.is_known() {
            return Ok(());
        }
        let plain = match backend.query(redis::cmd("INFO").arg("server")).await {
            Ok(reply) => all_at_least_7(&reply),
            Err(e @ BackendError::Redis(_)) if !e.is_unavailable() => {
                tracing::warn!(
                    error = %e,
                    "Redis refused INFO server: fixed windows run as Lua scripts, not as MULTI of INCRBY + PEXPIRE NX"
                );
                false
            }
            Err(e) => return Err(e.into()),
        };
        let _ = self.known.set(plain);
        Ok(())
    }
}

impl RedisLimiter {
    /// As if the server were (`true`) or were not (`false`) Redis >= 7: the tests' seam for the
    /// fallback to scripts on older servers.
    #[cfg(test)]
    pub(super) fn assume_plain_counters(mut self, plain: bool) -> Self {
        let known = OnceLock::from(plain);
        self.counters = std::sync::Arc::new(Counters { known });
        self
    }

    /// Decides `checks` by the plain transaction when it can, else by the script call(s): the
    /// rules' states, with the receipt of an admitted request that took leases.
    pub(super) fn route(
        &self,
        checks: &[Check],
    ) -> impl Future<Output = Result<Held, LimiterError>> + Send + 'static {
        let key = |c: &Check| self.key_names(&c.rule, &c.key, false).0;
        let route = Plain::of(checks, &self.counters, key).ok_or_else(|| self.evaluation(checks));
        let coalescers = std::sync::Arc::clone(&self.coalescers);
        async move {
            match route {
                Ok(plain) => Ok((vec![plain.state(&coalescers).await?], None, Vec::new())),
                Err(evaluation) => evaluation.run(&coalescers).await,
            }
        }
    }

    /// Whether the shape of some `rules`' state is not known before the server's version is.
    pub(super) fn needs_shape<'a>(&self, rules: impl IntoIterator<Item = &'a Rule>) -> bool {
        !self.counters.is_known()
            && rules
                .into_iter()
                .any(|rule| *rule.algorithm() == Algorithm::FixedWindow)
    }

    /// `then`, once the server's version is known ([`Counters::detect`]).
    pub(super) fn once_shaped<T: Send + 'static>(
        &self,
        then: impl FnOnce(&Self) -> LimiterFuture<T> + Send + 'static,
    ) -> LimiterFuture<T> {
        let this = self.clone();
        Box::pin(async move {
            this.counters.detect(this.backend()).await?;
            then(&this).await
        })
    }
}

/// Whether every `redis_version` in an `INFO server` reply (one text, or one per node of a
/// cluster) is at least 7 (the first with `PEXPIRE … NX`), and there is one.
fn all_at_least_7(reply: &Value) -> bool {
    let mut texts = Vec::new();
    collect_texts(reply, &mut texts);
    let mut majors = texts
        .iter()
        .flat_map(|text| text.lines())
        .filter_map(|line| line.strip_prefix("redis_version:"))
        .map(|v| v.trim().split('.').next()?.parse::<u64>().ok())
        .peekable();
    majors.peek().is_some() && majors.all(|major| major.is_some_and(|m| m >= 7))
}

fn collect_texts(reply: &Value, out: &mut Vec<String>) {
    match reply {
        Value::BulkString(bytes) => out.push(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) | Value::VerbatimString { text, .. } => out.push(text.clone()),
        Value::Array(items) | Value::Set(items) => {
            items.iter().for_each(|item| collect_texts(item, out));
        }
        Value::Map(pairs) => pairs.iter().for_each(|(_, item)| collect_texts(item, out)),
        _ => {}
    }
}

/// A request decided by the plain transaction: its one rule's key and numbers.
#[derive(Debug)]
pub(super) struct Plain {
    count: Count,
    limit: u64,
}

impl Plain {
    /// The plain transaction for `checks`, when it can decide them: one fixed-window rule
    /// counting something (a probe records nothing), with no override record or bans to apply
    /// and no cost settled after the response, on a limiter whose windows are plain counters.
    /// `key` names the rule's state.
    pub(super) fn of(
        checks: &[Check],
        counters: &Counters,
        key: impl FnOnce(&Check) -> String,
    ) -> Option<Self> {
        let [check] = checks else { return None };
        let rule = &check.rule;
        if !counters.plain()
            || *rule.algorithm() != Algorithm::FixedWindow
            || check.cost == 0
            || rule.reads_overrides()
            || rule.settles_after_response()
            // Its denials would consume the reserve the class is kept.
            || rule.reserve.is_some()
            // Its live record is read by the script.
            || rule.is_live()
        {
            return None;
        }
        Some(Self::new(&check.params(check.cost), key(check)))
    }

    /// The plain transaction of a rule whose numbers are `p`, its state named `key`.
    pub(super) fn new(p: &Params, key: String) -> Self {
        Self {
            count: Count {
                key: [key],
                cost: p.cost,
                period_ms: p.period_us.div_ceil(1000).max(1),
            },
            limit: p.limit,
        }
    }

    /// One transaction, with those of the requests queued with it: counts the cost, the denied
    /// included (as with `INCR` + `EXPIRE`: a denial consumes its units until the window closes), and
    /// opens the window on its first hit.
    pub(super) async fn state(self, coalescers: &Coalescers) -> Result<RuleState, LimiterError> {
        let (limit, period_ms) = (self.limit, self.count.period_ms);
        let reply = coalescers.counts.call(self.count).await?;
        state(reply, limit, period_ms)
    }
}

/// The rule's state from `(count, pttl)`: admitted while the count is within `limit`, the
/// window's end from the key's expiry.
fn state((count, ttl): (i64, i64), limit: u64, period_ms: u64) -> Result<RuleState, LimiterError> {
    if ttl < -1 {
        let text = format!("MULTI INCRBY PEXPIRE PTTL: count {count}, PTTL {ttl}");
        return Err(BackendError::BadReply(text).into());
    }
    // No expiry (-1) cannot follow `PEXPIRE NX`; should it, the window is a whole period.
    let reset_ms = u64::try_from(ttl).unwrap_or(period_ms).max(1);
    let count = u64::try_from(count).unwrap_or(0);
    let allowed = count <= limit;
    Ok(RuleState::from_parts(
        allowed,
        limit,
        limit.saturating_sub(count),
        if allowed { 0 } else { reset_ms },
        reset_ms,
    ))
}

#[cfg(test)]
mod tests {
    //! Which path a fixed window takes on a real `redis-server` (7.x here): the plain
    //! transaction once the server's version is known, the scripts when it is older.

    use redis_guard_testkit::RedisServer;

    use super::*;
    use crate::backend::RedisConnection;
    use crate::rate_limit::{Key, Quota, RedisLimiter, Rule};

    /// `cmd` on `server`, on a connection of its own.
    async fn query<T: redis::FromRedisValue>(server: &RedisServer, cmd: &mut redis::Cmd) -> T {
        let mut conn = server
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        cmd.query_async(&mut conn).await.unwrap()
    }

    /// Calls of `command` the server has served (`INFO commandstats`).
    async fn calls(server: &RedisServer, command: &str) -> u64 {
        let info: String = query(server, redis::cmd("INFO").arg("commandstats")).await;
        redis_guard_testkit::inspect::command_calls(&info, command)
    }

    async fn limiter(server: &RedisServer) -> RedisLimiter {
        RedisLimiter::new(RedisConnection::open(&server.url()).await.unwrap())
    }

    fn rule() -> Rule {
        Rule::new("fw", Quota::per_hour(2)).with_algorithm(Algorithm::FixedWindow)
    }

    #[tokio::test]
    async fn an_older_server_keeps_the_scripts() {
        let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
        let limiter = limiter(&server).await.assume_plain_counters(false);
        for allowed in [true, true, false] {
            let d = limiter.check(&rule(), Key::from("k")).await.unwrap();
            assert_eq!(d.allowed, allowed);
        }
        assert_eq!(calls(&server, "incrby").await, 0);
        assert_eq!(calls(&server, "evalsha").await, 3);
        let key = limiter.key_name(&Check::new(rule(), Key::from("k")));
        assert!(key.contains(":fw:"), "{key}");
        let state: String = query(&server, redis::cmd("GET").arg(&key)).await;
        assert!(
            state.ends_with(":2"),
            "the script's start:count, the denial uncounted: {state}"
        );
    }

    fn info(text: &str) -> Value {
        Value::VerbatimString {
            format: redis::VerbatimFormat::Text,
            text: text.to_owned(),
        }
    }

    #[test]
    fn plain_counters_need_redis_7_on_every_node() {
        let v = |version: &str| format!("# Server\r\nredis_version:{version}\r\nredis_mode:x\r\n");
        assert!(all_at_least_7(&Value::BulkString(v("7.0.15").into_bytes())));
        assert!(all_at_least_7(&info(&v("7.2.4"))));
        assert!(all_at_least_7(&info(&v("8.0.0"))));
        assert!(!all_at_least_7(&info(&v("6.2.14"))));
        let node = |version: &str| (Value::SimpleString("n".into()), info(&v(version)));
        assert!(all_at_least_7(&Value::Map(vec![
            node("7.0.0"),
            node("7.2.4")
        ])));
        assert!(!all_at_least_7(&Value::Map(vec![
            node("7.0.0"),
            node("6.2.0")
        ])));
        for bad in [Value::Nil, info("redis_mode:standalone"), info(&v("seven"))] {
            assert!(!all_at_least_7(&bad), "{bad:?}");
        }
    }
}
