//! The Redis limiter: one `EVALSHA` decides and records every rule of a request at once (and,
//! under load, of the requests queued with it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::denials::{answered, asked, cache_now, cacheable, cached_denial};
use super::evaluation::{Coalescers, Evaluation, RuleArgs};
use super::fixed_window_plain::{self, Counters};
use super::hot_lease::HotLeases;
use crate::backend::{BackendError, DEFAULT_BATCH, DenyCache, RedisBackend};
use crate::rate_limit::algorithm::script::{CUSTOM_BASE, FIXED_WINDOW_COUNTER, Scripts};
use crate::rate_limit::algorithm::{Algorithm, CustomAlgorithm, RuleState};
use crate::rate_limit::limiter::live::{self, LiveChange, LiveRecord};
use crate::rate_limit::limiter::operations::{self, Inspection};
use crate::rate_limit::limiter::overrides::{Override, Steer};
use crate::rate_limit::limiter::{
    Check, Engine, Held, Limiter, LimiterFuture, PlainStore, chargeable,
};
use crate::rate_limit::{Key, Rule};

/// Default capacity of a [`RedisLimiter`]'s deny cache: how many denied clients it remembers.
pub(crate) const DEFAULT_DENY_CACHE: usize = 10_000;

/// The longest a denial is answered from a [`RedisLimiter`]'s deny cache before Redis is asked
/// again: the longest an operation made on another replica takes to reach a cached client (on
/// the replica that makes it, the cache is cleared at once).
pub(crate) const DENY_CACHE_MAX_WAIT: Duration = Duration::from_secs(2);

/// A limiter whose state lives in Redis, shared by every instance of the application.
///
/// Each request costs one round trip: a Lua script reads Redis `TIME`, evaluates every rule and,
/// only when all admit the request, records it. Concurrent requests from any number of app
/// instances are serialized by Redis, so a limit of 50 admits exactly 50. Every key the script
/// writes carries a TTL. Under load, the requests that queue while calls are in flight share one
/// script call, each still decided on its own (see [`batch_size`](Self::batch_size)). The one
/// exception is a request whose only rule is a [fixed window](Algorithm::FixedWindow) on
/// Redis >= 7: one `MULTI` of `INCRBY` and `PEXPIRE … NX`, no script, coalesced the same way.
///
/// Key names are `<prefix>rl:<rule>:<algorithm>:{<digest>}`: the digest is a hash of the client key
/// (see [`Key::digest`](crate::rate_limit::Key::digest)), and the braces make it a Cluster hash
/// tag. Beside it, `<prefix>rl:<rule>:ov:{<digest>}` holds the key's override record (penalty,
/// allow list entry, bans; see [`RedisLimiter::inspect`]), written only by operations and bans and
/// read by rules built [`with_overrides`](crate::rate_limit::Rule::with_overrides) or with bans,
/// and `<prefix>rl:<rule>:lease:{<digest>}` the units of [leased](crate::rate_limit::Rule::leased)
/// blocks not given back yet. The algorithm (`gcra`, `fwc` — the fixed window's plain counter on
/// Redis >= 7, `fw` on older servers —, `sl`, `sc`, `tb`, or `x-<name>` for a custom one) is part
/// of the name, so switching a rule's algorithm starts it afresh rather than failing on state of
/// another shape; the old keys expire on their own.
///
/// The prefix, the timeout per call and the connection come from the [`RedisBackend`]; a
/// [`RedisConnection`](crate::backend::RedisConnection) converts into one with the defaults.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_guard::backend::{RedisBackend, RedisConnection};
/// use redis_guard::rate_limit::RedisLimiter;
/// # async fn f() -> redis::RedisResult<()> {
/// let conn = RedisConnection::open("redis://127.0.0.1/").await?;
/// let limiter = RedisLimiter::new(conn.clone()); // prefix `rg:`, 100 ms per call
/// let tuned = RedisLimiter::new(RedisBackend::new(conn).prefix("myapp:").timeout(Duration::from_millis(50)));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisLimiter {
    pub(super) backend: RedisBackend,
    /// Run the built-in scripts, coalescing the calls that arrive while others are in flight.
    pub(super) coalescers: Arc<Coalescers>,
    /// Requests denied until a known time, answered in process until then.
    pub(super) deny_cache: Option<Arc<DenyCache<Vec<RuleState>>>>,
    /// Scripts with custom algorithms, by the customs they contain (in id order).
    custom_scripts: Arc<Mutex<HashMap<Vec<CustomAlgorithm>, Arc<Scripts>>>>,
    /// Whether fixed windows are plain counters (Redis >= 7), once known.
    pub(super) counters: Arc<Counters>,
    /// Blocks of [leased](crate::rate_limit::Rule::leased) rules' busy keys.
    pub(super) leases: Arc<HotLeases>,
    /// Copies of the live rules' records ([`Rule::live`](crate::rate_limit::Rule::live)).
    pub(super) live: Arc<super::live::LiveCache>,
    /// The digests of recent keys, for their key names.
    pub(super) digests: Arc<super::digests::Digests>,
}

impl RedisLimiter {
    /// A limiter on `backend` (or on a connection, with the default prefix and timeout).
    #[must_use]
    pub fn new(backend: impl Into<RedisBackend>) -> Self {
        let backend = backend.into();
        Self {
            coalescers: Arc::new(Coalescers::new(&backend, DEFAULT_BATCH)),
            counters: Arc::new(Counters::new(&backend)),
            deny_cache: Some(Arc::new(DenyCache::new(DEFAULT_DENY_CACHE))),
            custom_scripts: Arc::default(),
            digests: Arc::new(super::digests::Digests::new()),
            leases: Arc::new(HotLeases::new(&backend)),
            live: Arc::new(super::live::LiveCache::new(
                &backend,
                super::live::DEFAULT_LIVE_REFRESH,
            )),
            backend,
        }
    }

    /// How many denied clients the deny cache remembers (default 10 000; `0` turns it
    /// off).
    ///
    /// When Redis denies a request, the wait it names is exact: a denial consumes nothing (on
    /// the fixed window's Lua-free path it counts, but the window's end, the wait, stays), and
    /// other replicas can only use more of the quota, never give it back. So until that wait has
    /// passed (less a millisecond: Redis rounds waits up to whole milliseconds; at most
    /// 2 s, so that operations made elsewhere reach it), the same request
    /// (same rules, keys and costs) is denied in process, with zero round trips: a client
    /// hammering past its limit costs Redis nothing. The trade-off: a limit raised, a key reset
    /// by hand or a Cluster refund reaches a cached client only when its wait ends.
    ///
    /// The headers of a cached denial show the rules' states as Redis last reported them, with
    /// the waits counted down. A request this limiter admits on one of those rules' keys (the
    /// same client asking for less, say) forgets the key's cached denials, so the next request
    /// is answered by Redis with the numbers as they now stand. What a cached denial may still
    /// miss, until its wait ends (at most 2 s):
    ///
    /// - requests that **other replicas** (other `RedisLimiter`s on the same Redis) admitted on
    ///   the key meanwhile: the denial itself stays right (they only used more), but it may show
    ///   more `remaining` and a shorter `retry_after` / `reset_after` than Redis would, so a
    ///   client acting on them may be denied again;
    /// - quota coming back with time: `remaining` is the count when Redis denied, while on GCRA,
    ///   token bucket and sliding windows it grows as the wait runs down.
    ///
    /// A request with a concurrency rule
    /// ([`Rule::concurrency`](crate::rate_limit::Rule::concurrency)) is never cached: a lease may
    /// be released at any moment.
    #[must_use]
    pub fn deny_cache(mut self, capacity: usize) -> Self {
        self.deny_cache = (capacity > 0).then(|| Arc::new(DenyCache::new(capacity)));
        self
    }

    /// How many decisions one script call (or one fixed-window transaction) may carry (default
    /// 64; `1` turns coalescing off).
    ///
    /// A request goes to Redis at once while fewer than two calls are in flight. The requests
    /// that arrive while two are out queue, then go together in one `EVALSHA` as soon as one
    /// returns; the script decides them one after the other in arrival order, so each decision
    /// is exactly as atomic and exact as it is alone. Redis pays its fixed cost per script call
    /// once for the lot, and a key that many queued requests share (one busy client) is read
    /// and written once per call. The price is that a request may wait for a call in flight
    /// before its own goes out; the backend's timeout counts from the moment it is queued. A
    /// request that is dropped or times out while queued is never sent.
    ///
    /// The fixed window's Lua-free requests coalesce the same way, into one `MULTI` … `EXEC`
    /// with one `INCRBY` of the summed costs per key.
    ///
    /// Coalescing applies to the built-in algorithms on a single Redis, a pool or a Redis
    /// Cluster; on a Cluster, where the keys of one call must share a hash slot, the requests
    /// queue per slot, and a request whose rules span slots makes one call per slot. Rule sets
    /// with a custom algorithm go one request per call.
    ///
    /// ```no_run
    /// use redis_guard::backend::RedisConnection;
    /// use redis_guard::rate_limit::RedisLimiter;
    /// # async fn f() -> redis::RedisResult<()> {
    /// let conn = RedisConnection::open("redis://127.0.0.1/").await?;
    /// let one_call_per_request = RedisLimiter::new(conn).batch_size(1);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn batch_size(mut self, max: usize) -> Self {
        self.coalescers = Arc::new(Coalescers::new(&self.backend, max));
        self
    }

    /// The backend: connection, prefix and timeout.
    #[must_use]
    pub fn backend(&self) -> &RedisBackend {
        &self.backend
    }

    /// The scripts containing `customs`, built once per set.
    fn scripts_for(&self, customs: Vec<CustomAlgorithm>) -> Arc<Scripts> {
        let mut cache = self
            .custom_scripts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            cache
                .entry(customs)
                .or_insert_with_key(|customs| Arc::new(Scripts::with_customs(customs))),
        )
    }

    /// The Redis key that holds `check`'s state. For a fixed window, the shape (`fwc` or `fw`)
    /// follows the server's version, known from the limiter's first call; before it, `fwc`
    /// unless the backend's clock is shifted.
    #[must_use]
    pub fn key_name(&self, check: &Check) -> String {
        self.key_names(&check.rule, &check.key, false).0
    }

    /// The Redis keys of `rule`'s state and (when `record`) override record for `key`, from
    /// one digest.
    pub(super) fn key_names(
        &self,
        rule: &Rule,
        key: &Key,
        record: bool,
    ) -> (String, Option<String>) {
        let tag = match rule.algorithm() {
            Algorithm::FixedWindow if self.counters.plain() => fixed_window_plain::TAG.into(),
            algorithm => algorithm.key_tag(),
        };
        self.digests.with(key, |digest| {
            (
                self.backend.key(&["rl", rule.name(), &tag], digest),
                record.then(|| self.backend.key(&["rl", rule.name(), "ov"], digest)),
            )
        })
    }

    /// The script call(s) for `checks`: keys, arguments, and which scripts run them.
    pub(super) fn evaluation(&self, checks: &[Check]) -> Evaluation {
        let (keys, records): (Vec<String>, Vec<Option<String>>) = checks
            .iter()
            .map(|c| self.key_names(&c.rule, &c.key, c.rule.reads_overrides()))
            .unzip();
        // The script reads a live rule's record in its call (one more key after the rule's
        // others, its spec marked `L`: `live.lua`), except on a Cluster.
        let in_call = |rule: &Rule| rule.is_live() && self.live.in_call;
        let mut customs: Vec<CustomAlgorithm> = Vec::new();
        let rule_args: Vec<RuleArgs> = checks
            .iter()
            .map(|check| {
                // A record the call reads decides with the rule's own quota where it has none,
                // not this limiter's copy: a record cleared since the copy was read gives the
                // rule its quota back at once.
                let mut check = std::borrow::Cow::Borrowed(check);
                if check.live && self.live.in_call {
                    check.to_mut().quota = *check.rule.quota();
                }
                let p = check.params(check.cost);
                // Only a request held back from a rule's reserve is decided with less.
                let held_back = if check.held_back && check.rule.reserve.is_some() {
                    let decided = check.decided_params(check.cost);
                    [
                        p.limit.saturating_sub(decided.limit),
                        p.burst.saturating_sub(decided.burst),
                    ]
                } else {
                    [0, 0]
                };
                let id = match &p.algorithm {
                    Algorithm::Custom(custom) => {
                        let index = customs.iter().position(|c| c == custom).unwrap_or_else(|| {
                            customs.push(custom.clone());
                            customs.len() - 1
                        });
                        CUSTOM_BASE + 1 + index
                    }
                    Algorithm::FixedWindow if self.counters.plain() => FIXED_WINDOW_COUNTER,
                    builtin => usize::from(builtin.builtin_id().unwrap_or(0)),
                };
                RuleArgs {
                    ints: [
                        id as u64,
                        p.limit,
                        p.period_us,
                        p.burst,
                        p.emission_us,
                        p.cost,
                    ],
                    overrides: match operations::script_arg(&check.rule) {
                        spec if in_call(&check.rule) => format!("L{spec}").into(),
                        spec => spec,
                    },
                    max_wait_us: p.max_wait_us,
                    held_back,
                }
            })
            .collect();
        let scripts = (!customs.is_empty()).then(|| self.scripts_for(customs));
        // A throttled request keeps its receipt too: a waiter that goes away gives its slots
        // back through it.
        let settled = checks
            .iter()
            .any(|c| c.rule.settles_after_response() || c.rule.max_wait().is_some());
        let name = |c: &Check| Arc::clone(c.rule.name_arc());
        // A rule whose quota varies keeps the quota's shape with its state: the general script.
        // A throttled rule reserves slots, and a live rule's record or an override record is
        // read, only by the general script; the lean script names nothing for a receipt.
        let gcra_only = scripts.is_none()
            && !settled
            && checks.iter().all(|c| {
                *c.rule.algorithm() == Algorithm::Gcra
                    && !c.varying
                    && !c.rule.is_dynamic()
                    && !c.rule.is_live()
                    && !c.rule.reads_overrides()
            });
        let mut evaluation = Evaluation {
            scripts,
            gcra_only,
            keys,
            records,
            lives: Vec::new(),
            live_copies: None,
            rule_args,
            dry: false,
            settled: if settled {
                checks.iter().map(name).collect()
            } else {
                Vec::new()
            },
        };
        if checks.iter().any(|c| in_call(&c.rule)) {
            evaluation.lives = checks
                .iter()
                .map(|c| in_call(&c.rule).then(|| self.live_key(&c.rule)))
                .collect();
            let names = checks.iter().filter(|c| in_call(&c.rule)).map(name);
            evaluation.live_copies = Some((Arc::clone(&self.live), names.collect()));
        }
        evaluation
    }
}

impl RedisLimiter {
    /// [`evaluate_held`](Self::evaluate_held) for requests decided on Redis one by one.
    pub(super) fn evaluate_unleased(&self, checks: Vec<Check>) -> LimiterFuture<Held> {
        if self.needs_shape(checks.iter().map(|c| &*c.rule)) {
            return self.once_shaped(move |this| this.evaluate_unleased(checks));
        }
        if checks.iter().any(|c| c.rule.allows(&c.key)) {
            // Allow-listed rules are answered here; the others (if any) go to Redis.
            let (rest, listed) = operations::split_allow_listed(checks);
            if rest.is_empty() {
                let states = operations::merge_allow_listed(listed, Vec::new());
                return Box::pin(std::future::ready(Ok((states, None, Vec::new()))));
            }
            let held = self.evaluate_unleased(rest);
            return Box::pin(async move {
                let (states, lease, live) = held.await?;
                Ok((operations::merge_allow_listed(listed, states), lease, live))
            });
        }
        // Every admitted decision tells the cache, cacheable or not: it moved its keys' states.
        let deny_cache = self.deny_cache.clone();
        let cache = deny_cache.clone().filter(|_| cacheable(&checks));
        // Look the request up before building anything for Redis: a cached denial costs no key
        // name, digest or argument. While the cache holds no denial (the common case), nothing
        // is hashed or locked: the request's key is made only if Redis denies it.
        let cached = cache.map(|cache| {
            let now = cache_now(&self.backend, &cache);
            let asked = asked(&checks);
            let key = cache.has_denials().then(|| cache.key(&asked));
            let hit = key.and_then(|key| cached_denial(&cache, &asked, key, now));
            (now, key, hit)
        });
        if let Some((_, _, Some(states))) = cached {
            return Box::pin(std::future::ready(Ok((states, None, Vec::new()))));
        }
        let decided = self.route(&checks);
        let Some(deny_cache) = deny_cache else {
            return Box::pin(decided);
        };
        let backend = self.backend.clone();
        Box::pin(async move {
            let (states, lease, live) = decided.await?;
            answered(
                &deny_cache,
                &backend,
                &states,
                &asked(&checks),
                cached.map(|(now, key, _)| (now, key)),
            );
            Ok((states, lease, live))
        })
    }
}

impl crate::sealed::Sealed for RedisLimiter {}

impl Limiter for RedisLimiter {}

impl Engine for RedisLimiter {
    fn live_record(&self, rule: &Rule) -> LiveRecord {
        self.cached_live_record(rule)
    }

    fn set_live(&self, rule: &Rule, change: LiveChange) -> LimiterFuture<u64> {
        self.set_live_record(rule, change)
    }

    fn config_problem(&self) -> Option<crate::ConfigError> {
        self.backend.config_problem()
    }

    fn charge_checks(&self, checks: Vec<Check>) -> LimiterFuture<()> {
        if self.needs_shape(checks.iter().map(|c| &*c.rule)) {
            return self.once_shaped(move |this| this.charge_checks(checks));
        }
        let checks = match chargeable(checks) {
            Ok(checks) => checks,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let this = self.clone();
        Box::pin(async move {
            if checks.is_empty() {
                return Ok(());
            }
            this.evaluation(&checks).charge(&this.backend).await
        })
    }

    fn evaluate_leased(&self, checks: Vec<Check>) -> LimiterFuture<Held> {
        self.evaluate_held(checks)
    }

    fn plain_store(&self, rules: &[Arc<Rule>]) -> Option<Arc<dyn PlainStore>> {
        let rules = super::plain::PlainRules::new(self, rules)?;
        Some(Arc::new(Arc::new(rules)))
    }

    fn inspect_key(&self, rule: &Rule, key: Key) -> LimiterFuture<Inspection> {
        if self.needs_shape([rule]) {
            let rule = rule.clone();
            return self.once_shaped(move |this| this.inspect_key(&rule, key));
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
        let mut evaluation = self.evaluation(std::slice::from_ref(&check));
        evaluation.dry = true;
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

    fn reset_key(&self, rule: &Rule, key: Key) -> LimiterFuture<()> {
        if self.needs_shape([rule]) {
            let rule = rule.clone();
            return self.once_shaped(move |this| this.reset_key(&rule, key));
        }
        if let Err(e) = operations::valid(self, rule) {
            return Box::pin(std::future::ready(Err(e)));
        }
        let done = self.operation(rule, &key, "reset", 0);
        Box::pin(async move { done.await.map(drop) })
    }

    fn steer_key(&self, rule: &Rule, key: Key, steer: Steer) -> LimiterFuture<()> {
        if self.needs_shape([rule]) {
            let rule = rule.clone();
            return self.once_shaped(move |this| this.steer_key(&rule, key, steer));
        }
        match operations::valid_for(self, rule, steer.duration()) {
            Ok(us) => {
                let done = self.operation(rule, &key, steer.op(), us);
                Box::pin(async move { done.await.map(drop) })
            }
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}
