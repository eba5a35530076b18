//! The Redis limiter: one `EVALSHA` per request decides and records every rule at once.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use redis::Value;

use super::algorithm::script::{BUILTIN_SCRIPTS, CUSTOM_BASE, Scripts};
use super::algorithm::{Algorithm, CustomAlgorithm, RuleState};
use super::limiter::{BoxFuture, Check, Limiter, LimiterError};
use crate::backend::{ManualClock, RedisConnection, shift_micros};

/// Default key prefix: `rg:`, so keys read `rg:rl:<rule>:<algorithm>:{<digest>}`.
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
/// Key names are `<prefix>rl:<rule>:<algorithm>:{<digest>}`: the digest is a hash of the client
/// key (see [`Key::digest`](super::Key::digest)), and the braces make it a Cluster hash tag. The
/// algorithm (`gcra`, `fw`, `sl`, `sc`, `tb`, or `x-<name>` for a custom one) is part of the
/// name, so switching a rule's algorithm starts it afresh rather than failing on state of
/// another shape; the old keys expire on their own.
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
    /// Scripts with custom algorithms, by the customs they contain (in id order).
    custom_scripts: Arc<Mutex<HashMap<Vec<CustomAlgorithm>, Arc<Scripts>>>>,
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
                custom_scripts: Arc::default(),
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

    /// How long to wait for Redis (default [`DEFAULT_TIMEOUT`]). It must be more than zero: a
    /// zero timeout would fail every decision (and with [`FailurePolicy::Open`] admit every
    /// request), so [`RateLimitLayerBuilder::build`] and every check refuse it.
    ///
    /// [`FailurePolicy::Open`]: super::FailurePolicy::Open
    /// [`RateLimitLayerBuilder::build`]: super::RateLimitLayerBuilder::build
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

    /// The scripts containing `customs`, built once per set.
    fn scripts_for(&self, customs: Vec<CustomAlgorithm>) -> Arc<Scripts> {
        let mut cache = self
            .inner
            .custom_scripts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            cache
                .entry(customs)
                .or_insert_with_key(|customs| Arc::new(Scripts::with_customs(customs))),
        )
    }

    fn shift_us(&self) -> u64 {
        shift_micros(self.inner.shift.as_ref())
    }

    /// The Redis key that holds `check`'s state.
    #[must_use]
    pub fn key_name(&self, check: &Check) -> String {
        format!(
            "{}rl:{}:{}:{{{}}}",
            self.inner.prefix,
            check.rule.name(),
            check.rule.get_algorithm().key_tag(),
            check.key.digest()
        )
    }
}

impl Limiter for RedisLimiter {
    fn config_problem(&self) -> Option<String> {
        self.inner.timeout.is_zero().then(|| {
            "the Redis timeout is 0, so no decision could ever be made; use at least 1 ms (default 50 ms)"
                .to_owned()
        })
    }

    fn evaluate(&self, checks: Vec<Check>) -> BoxFuture<Result<Vec<RuleState>, LimiterError>> {
        let keys: Vec<String> = checks.iter().map(|c| self.key_name(c)).collect();
        let mut customs: Vec<CustomAlgorithm> = Vec::new();
        let rule_args: Vec<[String; 6]> = checks
            .iter()
            .map(|check| {
                let p = check.rule.params(check.cost);
                let id = match &p.algorithm {
                    Algorithm::Custom(custom) => {
                        let index = customs.iter().position(|c| c == custom).unwrap_or_else(|| {
                            customs.push(custom.clone());
                            customs.len() - 1
                        });
                        CUSTOM_BASE + 1 + index
                    }
                    builtin => usize::from(builtin.builtin_id().unwrap_or(0)),
                };
                [
                    id as u64,
                    p.limit,
                    p.period_us,
                    p.burst,
                    p.emission_us,
                    p.cost,
                ]
                .map(|v| v.to_string())
            })
            .collect();
        let scripts = if customs.is_empty() {
            None
        } else {
            Some(self.scripts_for(customs))
        };
        let call = Call {
            scripts,
            shift: self.shift_us().to_string(),
            request: request_id(),
            keys,
            rule_args,
        };
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            tokio::time::timeout(inner.timeout, call.run(&inner.conn))
                .await
                .map_err(|_| LimiterError::Timeout(inner.timeout))?
        })
    }
}

/// One evaluation: the keys and arguments of every rule.
struct Call {
    /// `None`: the built-in scripts.
    scripts: Option<Arc<Scripts>>,
    shift: String,
    request: String,
    keys: Vec<String>,
    rule_args: Vec<[String; 6]>,
}

impl Call {
    fn scripts(&self) -> &Scripts {
        self.scripts.as_deref().unwrap_or(&BUILTIN_SCRIPTS)
    }

    /// Keys and ARGV for the rules at `indices`; `third` is ARGV[3]: the dry-run flag for an
    /// evaluation, the evaluation's Redis time for a refund.
    fn args(&self, indices: &[usize], third: String) -> (Vec<String>, Vec<String>) {
        let keys = indices.iter().map(|&i| self.keys[i].clone()).collect();
        let mut args = vec![self.shift.clone(), self.request.clone(), third];
        for &i in indices {
            args.extend(self.rule_args[i].iter().cloned());
        }
        (keys, args)
    }

    /// One script call when every key shares a slot (always on a single Redis): atomic. On a
    /// Cluster, one call per hash tag, in order; when one denies, the tags that already admitted
    /// the request are refunded and the rest are evaluated dry (for their headers).
    async fn run(self, conn: &RedisConnection) -> Result<Vec<RuleState>, LimiterError> {
        let groups = if conn.is_cluster() {
            group_by_hash_tag(&self.keys)
        } else {
            vec![(0..self.keys.len()).collect()]
        };
        let mut states: Vec<Option<RuleState>> = vec![None; self.keys.len()];
        // The groups that admitted the request, with the Redis time they were evaluated at.
        let mut committed: Vec<(&[usize], u64)> = Vec::new();
        let mut denied = false;
        for group in &groups {
            let (keys, args) = self.args(group, if denied { "1" } else { "0" }.to_owned());
            let outcome = conn
                .invoke(&self.scripts().evaluate, &keys, &args)
                .await
                .map_err(script_error)
                .and_then(|reply| parse_reply(&reply, group.len()));
            let (group_states, evaluated_at) = match outcome {
                Ok(s) => s,
                Err(e) => {
                    self.refund(conn, &committed).await;
                    return Err(e);
                }
            };
            let all_allowed = group_states.iter().all(|s| s.allowed);
            for (&i, state) in group.iter().zip(group_states) {
                states[i] = Some(state);
            }
            if denied {
                continue;
            }
            if all_allowed {
                committed.push((group, evaluated_at));
            } else {
                denied = true;
                self.refund(conn, &committed).await;
                committed.clear();
            }
        }
        states
            .into_iter()
            .map(|s| s.ok_or_else(|| LimiterError::BadReply("a rule got no state".into())))
            .collect()
    }

    /// Gives back what the request took under `groups`. Best effort: a refund that fails leaves
    /// the quota consumed, which errs on the side of limiting.
    async fn refund(&self, conn: &RedisConnection, groups: &[(&[usize], u64)]) {
        for (group, evaluated_at) in groups {
            let (keys, args) = self.args(group, evaluated_at.to_string());
            if let Err(e) = conn.invoke(&self.scripts().refund, &keys, &args).await {
                tracing::warn!(error = %e, "rate-limit refund failed; the quota stays consumed");
            }
        }
    }
}

/// Errors the script itself reports (ours, or a custom algorithm's Lua) are [`LimiterError::Script`];
/// the rest (connection, I/O) stay [`LimiterError::Redis`].
fn script_error(e: redis::RedisError) -> LimiterError {
    let text = e.to_string();
    let from_script = [
        "redis-guard:",
        "user_script",
        "Error compiling script",
        "Error running script",
    ]
    .iter()
    .any(|marker| text.contains(marker));
    if from_script {
        LimiterError::Script(text)
    } else {
        LimiterError::Redis(e)
    }
}

/// The hash tag of `key` as Redis Cluster computes it: the text between the first `{` and the
/// next `}`, if not empty; otherwise the whole key.
fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// Indices of `keys` grouped by hash tag, groups in order of first appearance.
fn group_by_hash_tag(keys: &[String]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let tag = hash_tag(key);
        match groups.iter_mut().find(|(t, _)| *t == tag) {
            Some((_, g)) => g.push(i),
            None => groups.push((tag, vec![i])),
        }
    }
    groups.into_iter().map(|(_, g)| g).collect()
}

/// A process-unique, unpredictable-enough id for one evaluation: names sliding-log members.
fn request_id() -> String {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: LazyLock<std::collections::hash_map::RandomState> =
        LazyLock::new(std::collections::hash_map::RandomState::new);
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("{:016x}{n:x}", SEED.hash_one(n))
}

/// Parses `{ {allowed, limit, remaining, retry_after_ms, reset_after_ms}, ..., now_us }`: the
/// rules' states and the Redis time (µs) they were decided at.
pub(crate) fn parse_reply(
    reply: &Value,
    expected: usize,
) -> Result<(Vec<RuleState>, u64), LimiterError> {
    let bad = |what: &str| LimiterError::BadReply(format!("{what}: {reply:?}"));
    let Value::Array(rows) = reply else {
        return Err(bad("expected an array"));
    };
    let Some((Value::Int(now), rows)) = rows.split_last() else {
        return Err(bad("expected the time last"));
    };
    let now = u64::try_from(*now).map_err(|_| bad("expected a non-negative time"))?;
    if rows.len() != expected {
        return Err(bad(&format!("expected {expected} rows")));
    }
    let states = rows
        .iter()
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
        .collect::<Result<_, _>>()?;
    Ok((states, now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_tags_follow_the_cluster_rules() {
        assert_eq!(hash_tag("rg:rl:api:{abc}"), "abc");
        assert_eq!(hash_tag("{a}{b}"), "a");
        assert_eq!(hash_tag("x{}y{z}"), "x{}y{z}");
        assert_eq!(hash_tag("no-tag"), "no-tag");
        assert_eq!(hash_tag("{open"), "{open");
        let keys = ["p:{a}", "q:{b}", "r:{a}"].map(String::from);
        assert_eq!(group_by_hash_tag(&keys), vec![vec![0, 2], vec![1]]);
    }

    #[test]
    fn request_ids_are_unique() {
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| request_id()).collect();
        assert_eq!(ids.len(), 1000);
    }

    #[test]
    fn rejects_replies_that_do_not_fit() {
        let row = |v: Vec<i64>| Value::Array(v.into_iter().map(Value::Int).collect());
        let now = Value::Int(1_700_000_000_000_000);
        let (states, at) = parse_reply(
            &Value::Array(vec![row(vec![1, 10, 9, 0, 6000]), now.clone()]),
            1,
        )
        .unwrap();
        assert_eq!((states.len(), at), (1, 1_700_000_000_000_000));
        for bad in [
            Value::Nil,
            Value::Array(vec![]),
            Value::Array(vec![now.clone()]),
            Value::Array(vec![row(vec![1, 10, 9, 0, 6000])]),
            Value::Array(vec![row(vec![1, 10, 9, 0, 6000]), Value::Int(-1)]),
            Value::Array(vec![row(vec![1, 10, 9, 0]), now.clone()]),
            Value::Array(vec![row(vec![2, 10, 9, 0, 1]), now.clone()]),
            Value::Array(vec![row(vec![1, -1, 9, 0, 1]), now.clone()]),
            Value::Array(vec![Value::Okay, now.clone()]),
        ] {
            assert!(
                matches!(parse_reply(&bad, 1), Err(LimiterError::BadReply(_))),
                "{bad:?}"
            );
        }
    }
}
