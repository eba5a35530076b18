//! A layer's plain rules on Redis (`layer/lean.rs`): every rule GCRA, decided by
//! `gcra_plain.lua` with one integer per rule in its reply, or one fixed window, by its plain
//! transaction. What a request sends but its keys (the rules' numbers, the key names' heads) is
//! made when the layer is built: the requests that queue while calls are out go together, the
//! rules' numbers once per call. The deny cache is read once per request.

use std::sync::{Arc, LazyLock};

use redis::Value;

use super::denials::{answered, asked_plain, cache_now, cached_denial};
use super::fixed_window_plain::{self, Plain};
use super::script_reply::parse_compact;
use crate::backend::{
    BackendError, Coalescer, Entry, Form, LuaScript, RedisBackend, Replies, ScriptCall, replies,
};
use crate::rate_limit::algorithm::Params;
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

/// The script that decides GCRA rules.
static GCRA_PLAIN: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("gcra_plain.lua")));

#[derive(Debug)]
enum How {
    /// Every rule GCRA: the calls of the layer's requests, and each rule's numbers, which give
    /// its state from its one integer.
    Gcra {
        calls: Arc<Coalescer<Keys, Numbers>>,
        ints: Box<[[u64; 6]]>,
    },
    /// One fixed window of these numbers, counted by the plain transaction (Redis >= 7; else
    /// the general engine runs its script), for a key named per request.
    Counted(Params),
}

/// One request of GCRA rules: each rule's state key, in order.
pub(super) struct Keys(pub(super) Few<String>);

impl Entry for Keys {
    fn keys(&self) -> &[String] {
        self.0.as_slice()
    }

    fn arg_count(&self) -> usize {
        0
    }

    fn write_args(&self, _: &mut ScriptCall<'_>) {}

    fn reply_len(&self) -> usize {
        self.0.as_slice().len()
    }
}

/// The calls of `gcra_plain.lua` for one set of rules: their numbers (burst, emission interval,
/// cost per rule), encoded once as one argument, then every queued request's keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Numbers(Arc<str>);

impl Numbers {
    /// The numbers of rules decided with `ints` (algorithm, limit, period, burst, emission
    /// interval, cost).
    pub(super) fn of(ints: &[[u64; 6]]) -> Self {
        let numbers = ints
            .iter()
            .map(|&[.., burst, emission, cost]| format!("{burst}:{emission}:{cost}"))
            .collect::<Vec<_>>()
            .join(",");
        Self(numbers.into())
    }

    /// One call of `gcra_plain.lua` for `keys` (every request's, in order), answered by
    /// `deadline` (`None`: the backend's timeout from now).
    async fn run(
        &self,
        backend: &RedisBackend,
        keys: &[impl AsRef<str>],
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Value, BackendError> {
        let mut call = backend.script_sized(&GCRA_PLAIN, keys, 1, self.0.len());
        call.arg(&*self.0);
        call.until(deadline);
        call.run().await
    }
}

impl Form<Keys> for Numbers {
    type Reply = Value;

    fn keys(entry: &Keys) -> &[String] {
        entry.0.as_slice()
    }

    async fn call(
        &self,
        backend: &RedisBackend,
        entries: &[&Keys],
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Replies, BackendError> {
        let reply = if let [one] = entries {
            self.run(backend, one.keys(), deadline).await?
        } else {
            let keys: Vec<&str> = entries
                .iter()
                .flat_map(|e| e.keys().iter().map(String::as_str))
                .collect();
            self.run(backend, &keys, deadline).await?
        };
        if let ([_], Value::Int(_)) = (entries, &reply) {
            return Ok(vec![Ok(reply)]);
        }
        replies(reply, entries, true)
    }

    async fn call_one(&self, backend: &RedisBackend, entry: &Keys) -> Result<Value, BackendError> {
        match self.run(backend, entry.keys(), None).await? {
            // One rule's integer, alone.
            reply @ Value::Int(_) => Ok(reply),
            reply => replies(reply, &[entry], true)?
                .pop()
                .unwrap_or_else(|| Err(BackendError::BadReply("no reply".to_owned()))),
        }
    }
}

impl PlainRules {
    /// `rules` (every one plain) on `limiter`, when they are all GCRA or one fixed window.
    pub(super) fn new(limiter: &RedisLimiter, rules: &[Arc<Rule>]) -> Option<Self> {
        let params = |rule: &Rule| rule.params(rule.quota(), rule.cost(), Mode::Enforce);
        let (how, tag) = match rules {
            [rule] if *rule.algorithm() == Algorithm::FixedWindow => {
                (How::Counted(params(rule)), fixed_window_plain::TAG)
            }
            _ if !rules.is_empty() && rules.iter().all(|r| *r.algorithm() == Algorithm::Gcra) => {
                let ints: Box<[[u64; 6]]> = rules
                    .iter()
                    .map(|rule| {
                        let p = params(rule);
                        [0, p.limit, p.period_us, p.burst, p.emission_us, p.cost]
                    })
                    .collect();
                let calls = limiter.coalescers.gcra(Numbers::of(&ints));
                (How::Gcra { calls, ints }, "gcra")
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

    /// The calls of GCRA rules, and each rule's numbers. (A request's future holds the rules,
    /// so it finds them here, not in a borrow of them.)
    fn gcra(&self) -> (&Coalescer<Keys, Numbers>, &[[u64; 6]]) {
        match &self.how {
            How::Gcra { calls, ints } => (calls, ints),
            How::Counted(_) => unreachable!("GCRA rules' calls"),
        }
    }

    /// The GCRA rules' states from `reply`, the integers Redis answered for `keys`; the deny
    /// cache told.
    fn decided(
        &self,
        reply: Result<Value, BackendError>,
        keys: &Few<Key>,
        now: Option<u64>,
        asked: Option<u64>,
    ) -> Result<Few<RuleState>, LimiterError> {
        let states = parse_compact(&reply?, self.gcra().1)?;
        Ok(self.told(states, keys, now, asked))
    }

    /// `states`, once the deny cache is told of them.
    fn told(
        &self,
        states: Few<RuleState>,
        keys: &Few<Key>,
        now: Option<u64>,
        asked: Option<u64>,
    ) -> Few<RuleState> {
        let Some(cache) = self.limiter.deny_cache.as_deref() else {
            return states;
        };
        let keys = keys.as_slice();
        answered(
            cache,
            &self.limiter.backend,
            states.as_slice(),
            &asked_plain(&self.rules, keys),
            now.map(|now| (now, asked)),
        );
        states
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
        let counted = matches!(self.how, How::Counted(_));
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
            let of = asked_plain(&self.rules, keys.as_slice());
            let key = cache.key(&of);
            if let Some(states) = cached_denial(cache, &of, key, now) {
                return Some(PlainStates::Now(states.into_iter().collect()));
            }
            asked = Some(key);
        }
        let this = Arc::clone(self);
        let calls = match &self.how {
            How::Gcra { calls, .. } => calls,
            How::Counted(params) => {
                let plain = Plain::new(params, self.key_name(0, &keys.as_slice()[0]));
                return Some(PlainStates::Later(Box::pin(async move {
                    let state = plain.state(&this.limiter.coalescers).await?;
                    Ok(this.told(Few::from_buf([state]), &keys, now, asked))
                })));
            }
        };
        let names = Keys(
            keys.as_slice()
                .iter()
                .enumerate()
                .map(|(i, key)| self.key_name(i, key))
                .collect(),
        );
        // A request that finds room on a single Redis makes its call straight, in this one
        // future (a queued request's stays small: the coalescer boxes a call it makes).
        Some(PlainStates::Later(match calls.room() {
            Some(room) => Box::pin(async move {
                let reply = this.gcra().0.call_in(room, names).await;
                this.decided(reply, &keys, now, asked)
            }),
            None => Box::pin(async move {
                let reply = this.gcra().0.call(names).await;
                this.decided(reply, &keys, now, asked)
            }),
        }))
    }
}
