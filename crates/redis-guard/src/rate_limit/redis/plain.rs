//! A layer's plain rules on Redis (`layer/lean.rs`): every rule GCRA, decided by the lean
//! script with one integer per rule in its reply, or one fixed window, by its plain transaction.
//! What a request sends but its keys (the script's arguments, the key names' heads) is made
//! when the layer is built, and the deny cache is read once per request.

use std::sync::Arc;

use super::denials::{PlainRequest, cache_now, cached_denial, cached_wait, state_keys};
use super::evaluation::{RuleArgs, RuleEntry};
use super::fixed_window_batch::Count;
use super::fixed_window_plain::{self, state};
use super::limiter::DENY_CACHE_MAX_WAIT;
use super::script_reply::parse_compact;
use crate::rate_limit::limiter::operations;
use crate::rate_limit::{
    Algorithm, Few, Key, LimiterError, Mode, PlainStates, PlainStore, RedisLimiter, Rule, RuleState,
};

/// A layer's plain rules, ready on a [`RedisLimiter`].
#[derive(Debug)]
pub(super) struct PlainRules {
    limiter: RedisLimiter,
    rules: Box<[Arc<Rule>]>,
    /// Per rule, its key names up to the digest: `<prefix>rl:<rule>:<tag>:{`.
    heads: Box<[String]>,
    how: How,
}

#[derive(Debug)]
enum How {
    /// Every rule GCRA: the lean script's arguments, and each rule's numbers, which give its
    /// state from its one integer.
    Gcra {
        args: Arc<(Box<[Box<[u8]>]>, usize)>,
        ints: Box<[[u64; 6]]>,
    },
    /// One fixed window, counted by the plain transaction (Redis >= 7; else the general
    /// engine runs its script): its limit, cost, and period in ms.
    Counted {
        limit: u64,
        cost: u64,
        period_ms: u64,
    },
}

impl PlainRules {
    /// `rules` (every one plain) on `limiter`, when they are all GCRA or one fixed window.
    pub(super) fn new(limiter: &RedisLimiter, rules: &[Arc<Rule>]) -> Option<Self> {
        let params = |rule: &Rule| rule.params(rule.quota(), rule.cost(), Mode::Enforce);
        let (how, tag) = match rules {
            [rule] if *rule.algorithm() == Algorithm::FixedWindow => {
                let p = params(rule);
                let how = How::Counted {
                    limit: p.limit,
                    cost: p.cost,
                    period_ms: p.period_us.div_ceil(1000).max(1),
                };
                (how, fixed_window_plain::TAG)
            }
            _ if !rules.is_empty() && rules.iter().all(|r| *r.algorithm() == Algorithm::Gcra) => {
                let args: Vec<RuleArgs> = rules
                    .iter()
                    .map(|rule| {
                        let p = params(rule);
                        let id = Algorithm::Gcra.builtin_id().unwrap_or(0);
                        RuleArgs {
                            ints: [
                                u64::from(id),
                                p.limit,
                                p.period_us,
                                p.burst,
                                p.emission_us,
                                p.cost,
                            ],
                            overrides: operations::script_arg(rule),
                            max_wait_us: p.max_wait_us,
                            held_back: [0, 0],
                        }
                    })
                    .collect();
                let how = How::Gcra {
                    ints: args.iter().map(|a| a.ints).collect(),
                    args: Arc::new(RuleEntry::encode(&args)),
                };
                (how, "gcra")
            }
            _ => return None,
        };
        let heads = rules
            .iter()
            .map(|rule| {
                let mut head = limiter.backend.key(&["rl", rule.name(), tag], "");
                head.pop();
                head
            })
            .collect();
        Some(Self {
            limiter: limiter.clone(),
            rules: rules.into(),
            heads,
            how,
        })
    }

    /// The name of rule `i`'s state for `key`.
    fn key_name(&self, i: usize, key: &Key) -> String {
        let head = &self.heads[i];
        self.limiter.digests.with(key, |digest| {
            let mut name = String::with_capacity(head.len() + digest.len() + 1);
            name.push_str(head);
            name.push_str(digest);
            name.push('}');
            name
        })
    }

    /// The rules' states for `keys` from Redis; the deny cache told. `now`: the cache's time
    /// before the call; `asked`: the request's key in the cache, when it was looked up.
    async fn decide_on_redis(
        &self,
        keys: Few<Key>,
        now: Option<u64>,
        asked: Option<u64>,
    ) -> Result<Few<RuleState>, LimiterError> {
        let keys = keys.as_slice();
        let coalescers = &self.limiter.coalescers;
        let states: Few<RuleState> = match &self.how {
            How::Gcra { args, ints } => {
                let names = keys
                    .iter()
                    .enumerate()
                    .map(|(i, key)| self.key_name(i, key))
                    .collect();
                let entry = RuleEntry::encoded(names, Arc::clone(args));
                parse_compact(&coalescers.gcra.call(entry).await?, ints)?
            }
            &How::Counted {
                limit,
                cost,
                period_ms,
            } => {
                let count = Count {
                    key: [self.key_name(0, &keys[0])],
                    cost,
                    period_ms,
                };
                let reply = coalescers.counts.call(count).await?;
                Few::One(state(&reply, limit, period_ms)?)
            }
        };
        let Some(cache) = self.limiter.deny_cache.as_deref() else {
            return Ok(states);
        };
        let asked_of = || self.rules.iter().map(|r| &**r).zip(keys);
        if states.as_slice().iter().all(|s| s.allowed) {
            // Taken after the reply: a denial cached while this call was out may predate what
            // it recorded.
            if cache.has_denials() {
                let now = cache_now(&self.limiter.backend, cache);
                cache.admitted(now, DENY_CACHE_MAX_WAIT, || state_keys(cache, asked_of()));
            }
        } else if let (Some(now), Some(wait)) = (now, cached_wait(states.as_slice())) {
            let key = asked.unwrap_or_else(|| cache.key(PlainRequest(&self.rules, keys)));
            cache.insert(key, states.as_slice().to_vec(), now, wait);
        }
        Ok(states)
    }
}

impl PlainStore for Arc<PlainRules> {
    fn decide(&self, keys: Few<Key>) -> Option<PlainStates> {
        let limiter = &self.limiter;
        let listed = self
            .rules
            .iter()
            .zip(keys.as_slice())
            .any(|(r, k)| r.allows(k));
        // An allow-listed key is answered in process; an older server's fixed window, by a
        // script; a request whose keys span a Cluster's slots, by one call per slot.
        let counted = matches!(self.how, How::Counted { .. });
        let spans = limiter.backend.connection().is_cluster()
            && keys
                .as_slice()
                .windows(2)
                .any(|k| k[0].as_bytes() != k[1].as_bytes());
        if listed
            || spans
            || (counted && !(limiter.counters.is_known() && limiter.counters.plain()))
        {
            return None;
        }
        let cache = limiter.deny_cache.as_deref();
        let now = cache.map(|cache| cache_now(&limiter.backend, cache));
        let mut asked = None;
        if let (Some(cache), Some(now)) = (cache, now)
            && cache.has_denials()
        {
            let key = cache.key(PlainRequest(&self.rules, keys.as_slice()));
            let of = self.rules.iter().map(|r| &**r).zip(keys.as_slice());
            if let Some(states) = cached_denial(cache, of, key, now) {
                return Some(PlainStates::Now(states.into_iter().collect()));
            }
            asked = Some(key);
        }
        let this = Arc::clone(self);
        Some(PlainStates::Later(Box::pin(async move {
            this.decide_on_redis(keys, now, asked).await
        })))
    }
}
