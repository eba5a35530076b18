//! What an admitted evaluation took, kept to give it back later: the request id the state is
//! named by and, on Redis, the keys, arguments and Redis time of each slot group it was decided
//! in (the refund script needs that time as ARGV[3]).
//!
//! Today a receipt releases a request's concurrency leases when its response ends, and renews
//! them while it streams. Settling after the response (charging or refunding a reported cost)
//! runs through the same receipt: it holds every rule of the evaluation, not only the leases.

use std::fmt;
use std::sync::{Arc, LazyLock};

use crate::backend::{LuaScript, RedisBackend};
use crate::rate_limit::MemoryLimiter;
use crate::rate_limit::algorithm::script::{BUILTIN_SCRIPTS, RENEW, Scripts};
use crate::rate_limit::limiter::{BoxFuture, Check, LimiterError};
use crate::rate_limit::redis::RuleArgs;

/// The states of an evaluation, and the receipt of the leases it took.
pub(crate) type Receipted = (Vec<crate::rate_limit::RuleState>, Option<Receipt>);

/// One admitted evaluation, as the store recorded it.
pub(crate) struct Receipt {
    /// The request id its state is named by (the leases' members).
    pub(crate) request: Arc<str>,
    pub(crate) place: Place,
}

/// Where the evaluation was recorded.
pub(crate) enum Place {
    /// On Redis: per slot group (one on a single Redis), what the scripts need to undo it.
    Redis {
        backend: RedisBackend,
        /// `None`: the built-in scripts.
        scripts: Option<Arc<Scripts>>,
        groups: Vec<Group>,
    },
    /// In process: the state entries of the leases, with each one's expiry period (µs); the
    /// checks that may be settled after the response, and the time they were decided at.
    Memory {
        limiter: MemoryLimiter,
        leases: Vec<([u64; 2], u64)>,
        settled: Vec<Check>,
        evaluated_at: u64,
    },
}

/// The rules of one slot group, and the Redis time they were decided at.
pub(crate) struct Group {
    /// Per rule, its state key (not its override key).
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<RuleArgs>,
    /// Per rule, its name, when the request may be settled; empty otherwise.
    pub(crate) names: Vec<Arc<str>>,
    pub(crate) evaluated_at: u64,
}

impl Receipt {
    /// The receipt of an evaluation on Redis; `None` when no rule holds a lease and it is not
    /// to be settled (`settled`).
    pub(crate) fn redis(
        request: &Arc<str>,
        backend: &RedisBackend,
        scripts: Option<&Arc<Scripts>>,
        groups: Vec<Group>,
        settled: bool,
    ) -> Option<Self> {
        let leases = groups.iter().any(|g| g.args.iter().any(RuleArgs::is_lease));
        (leases || settled).then(|| Self {
            request: Arc::clone(request),
            place: Place::Redis {
                backend: backend.clone(),
                scripts: scripts.cloned(),
                groups,
            },
        })
    }

    /// Gives the leases back: the refund script on Redis (one call per slot group), at once in
    /// process.
    pub(crate) fn release(&self) -> BoxFuture<Result<(), LimiterError>> {
        match &self.place {
            Place::Memory {
                limiter, leases, ..
            } => {
                limiter.release_leases(&self.request, leases);
                Box::pin(std::future::ready(Ok(())))
            }
            Place::Redis {
                backend,
                scripts,
                groups,
            } => {
                let scripts = scripts.clone();
                let calls = self.lease_calls(backend, groups);
                Box::pin(async move {
                    let scripts: &Scripts = scripts.as_deref().unwrap_or(&BUILTIN_SCRIPTS);
                    run_all(&calls, &scripts.refund).await.map(drop)
                })
            }
        }
    }

    /// Settles the request's rules after its response: per rule named in `deltas`, that many
    /// more units charged whatever is left (positive) or given back (negative), in the window
    /// it was counted in. One charge and one refund call per slot group at most on Redis; at
    /// once in process.
    pub(crate) fn settle(&self, deltas: &[(Arc<str>, i64)]) -> BoxFuture<Result<(), LimiterError>> {
        let delta = |name: &str| {
            deltas
                .iter()
                .find_map(|(n, d)| (**n == *name).then_some(*d))
                .unwrap_or(0)
        };
        match &self.place {
            Place::Memory {
                limiter,
                settled,
                evaluated_at,
                ..
            } => {
                let lines: Vec<(&Check, i64)> = settled
                    .iter()
                    .map(|c| (c, delta(c.rule.name())))
                    .filter(|&(_, d)| d != 0)
                    .collect();
                limiter.settle_now(&lines, *evaluated_at);
                Box::pin(std::future::ready(Ok(())))
            }
            Place::Redis {
                backend,
                scripts,
                groups,
            } => {
                let (mut charges, mut refunds) = (Vec::new(), Vec::new());
                for g in groups {
                    let (mut up, mut down) = (self.call(backend, g), self.call(backend, g));
                    for ((key, args), name) in g.keys.iter().zip(&g.args).zip(&g.names) {
                        let d = delta(name);
                        let mut ints = args.ints;
                        ints[5] = d.unsigned_abs();
                        let call = if d > 0 { &mut up } else { &mut down };
                        if d != 0 {
                            call.keys.push(key.clone());
                            call.ints.push(ints);
                        }
                    }
                    charges.extend((!up.keys.is_empty()).then_some(up));
                    refunds.extend((!down.keys.is_empty()).then_some(down));
                }
                let scripts = scripts.clone();
                Box::pin(async move {
                    let scripts: &Scripts = scripts.as_deref().unwrap_or(&BUILTIN_SCRIPTS);
                    let charged = run_all(&charges, &scripts.charge).await;
                    run_all(&refunds, &scripts.refund).await?;
                    charged.map(drop)
                })
            }
        }
    }

    /// An empty call of group `g`'s scripts: no keys yet.
    fn call(&self, backend: &RedisBackend, g: &Group) -> LeaseCall {
        LeaseCall {
            backend: backend.clone(),
            request: Arc::clone(&self.request),
            evaluated_at: g.evaluated_at,
            keys: Vec::new(),
            ints: Vec::new(),
        }
    }

    /// Pushes the leases' expiry to a full expiry from now; how many were still held.
    pub(crate) fn renew(&self) -> BoxFuture<Result<usize, LimiterError>> {
        match &self.place {
            Place::Memory {
                limiter, leases, ..
            } => {
                let held = limiter.renew_leases(&self.request, leases);
                Box::pin(std::future::ready(Ok(held)))
            }
            Place::Redis {
                backend, groups, ..
            } => {
                let calls = self.lease_calls(backend, groups);
                Box::pin(async move { run_all(&calls, LazyLock::force(&RENEW)).await })
            }
        }
    }

    /// The longest a lease of this receipt lives without renewal, in µs.
    pub(crate) fn shortest_expiry_us(&self) -> u64 {
        match &self.place {
            Place::Memory { leases, .. } => leases.iter().map(|&(_, e)| e).min(),
            Place::Redis { groups, .. } => groups
                .iter()
                .flat_map(|g| &g.args)
                .filter(|a| a.is_lease())
                .map(|a| a.ints[2])
                .min(),
        }
        .unwrap_or(u64::MAX)
    }

    /// How many leases the receipt holds.
    pub(crate) fn lease_count(&self) -> usize {
        match &self.place {
            Place::Memory { leases, .. } => leases.len(),
            Place::Redis { groups, .. } => groups
                .iter()
                .flat_map(|g| &g.args)
                .filter(|a| a.is_lease())
                .count(),
        }
    }

    /// One call per slot group that holds leases: their keys, and ARGV after the shift.
    fn lease_calls(&self, backend: &RedisBackend, groups: &[Group]) -> Vec<LeaseCall> {
        groups
            .iter()
            .filter_map(|g| {
                let (keys, ints): (Vec<String>, Vec<[u64; 6]>) = g
                    .keys
                    .iter()
                    .zip(&g.args)
                    .filter(|(_, a)| a.is_lease())
                    .map(|(k, a)| (k.clone(), a.ints))
                    .unzip();
                (!keys.is_empty()).then(|| LeaseCall {
                    backend: backend.clone(),
                    request: Arc::clone(&self.request),
                    evaluated_at: g.evaluated_at,
                    keys,
                    ints,
                })
            })
            .collect()
    }
}

/// A refund or renewal call of one slot group's leases.
struct LeaseCall {
    backend: RedisBackend,
    request: Arc<str>,
    evaluated_at: u64,
    keys: Vec<String>,
    ints: Vec<[u64; 6]>,
}

/// Runs `script` for every call (all of them, even after one fails); the sum of their integer
/// replies, or the first error.
async fn run_all(calls: &[LeaseCall], script: &LuaScript) -> Result<usize, LimiterError> {
    let mut total = 0;
    let mut first_error = None;
    for c in calls {
        let mut call = c.backend.script(script, &c.keys);
        call.arg(&*c.request).arg(c.evaluated_at);
        for ints in &c.ints {
            call.arg(&ints[..]);
        }
        match call.run().await {
            Ok(redis::Value::Int(n)) => total += usize::try_from(n).unwrap_or(0),
            Ok(_) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(total),
    }
}

impl fmt::Debug for Receipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let place = match self.place {
            Place::Redis { .. } => "redis",
            Place::Memory { .. } => "memory",
        };
        f.debug_struct("Receipt")
            .field("request", &self.request)
            .field("place", &place)
            .finish()
    }
}

/// A process-unique, unpredictable-enough id for one evaluation: names sliding-log members and
/// leases.
pub(crate) fn request_id() -> Arc<str> {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: LazyLock<std::collections::hash_map::RandomState> =
        LazyLock::new(std::collections::hash_map::RandomState::new);
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("{:016x}{n:x}", SEED.hash_one(n)).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_unique() {
        let ids: std::collections::HashSet<Arc<str>> = (0..1000).map(|_| request_id()).collect();
        assert_eq!(ids.len(), 1000);
    }
}
