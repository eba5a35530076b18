//! What a request's receipt gives back to Redis when its response ends or streams on: its
//! concurrency leases released (the refund script) or renewed, its cost settled (the charge and
//! refund scripts), one call per slot group.

use std::sync::{Arc, LazyLock};

use super::evaluation::{Group, RuleArgs};
use crate::backend::{LuaScript, RedisBackend};
use crate::rate_limit::algorithm::script::{BUILTIN_SCRIPTS, RENEW, Scripts};
use crate::rate_limit::lease::{Place, Receipt};
use crate::rate_limit::limiter::{LimiterError, LimiterFuture};

/// An evaluation as Redis recorded it: per slot group (one on a single Redis), what the scripts
/// need to undo it.
pub(crate) struct OnRedis {
    backend: RedisBackend,
    /// `None`: the built-in scripts.
    scripts: Option<Arc<Scripts>>,
    groups: Vec<Group>,
}

impl Receipt {
    /// The receipt of an evaluation on Redis whose rules took leases or are to be settled.
    pub(super) fn redis(
        request: &Arc<str>,
        backend: &RedisBackend,
        scripts: &Option<Arc<Scripts>>,
        groups: Vec<Group>,
    ) -> Self {
        let on_redis = OnRedis {
            backend: backend.clone(),
            scripts: scripts.clone(),
            groups,
        };
        Self {
            request: Arc::clone(request),
            place: Place::Redis(on_redis),
        }
    }
}

impl OnRedis {
    /// Gives `request`'s leases back: the refund script, one call per slot group.
    pub(crate) fn release(&self, request: &Arc<str>) -> LimiterFuture<()> {
        let scripts = self.scripts.clone();
        let calls = self.lease_calls(request);
        Box::pin(async move {
            let scripts: &Scripts = scripts.as_deref().unwrap_or(&BUILTIN_SCRIPTS);
            run_all(&calls, &scripts.refund).await.map(drop)
        })
    }

    /// Settles `request`'s rules: per rule, `delta(name)` more units charged (positive) or
    /// given back (negative). One charge and one refund call per slot group at most.
    pub(crate) fn settle(
        &self,
        request: &Arc<str>,
        delta: impl Fn(&str) -> i64,
    ) -> LimiterFuture<()> {
        let (mut charges, mut refunds) = (Vec::new(), Vec::new());
        for g in &self.groups {
            let (mut up, mut down) = (self.call(request, g), self.call(request, g));
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
        let scripts = self.scripts.clone();
        Box::pin(async move {
            let scripts: &Scripts = scripts.as_deref().unwrap_or(&BUILTIN_SCRIPTS);
            let charged = run_all(&charges, &scripts.charge).await;
            run_all(&refunds, &scripts.refund).await?;
            charged.map(drop)
        })
    }

    /// Pushes `request`'s leases' expiry to a full expiry from now; how many were still held.
    pub(crate) fn renew(&self, request: &Arc<str>) -> LimiterFuture<usize> {
        let calls = self.lease_calls(request);
        Box::pin(async move { run_all(&calls, LazyLock::force(&RENEW)).await })
    }

    /// The longest a lease lives without renewal, in µs.
    pub(crate) fn shortest_expiry_us(&self) -> Option<u64> {
        self.leases().map(|a| a.ints[2]).min()
    }

    pub(crate) fn lease_count(&self) -> usize {
        self.leases().count()
    }

    /// The arguments of the rules that took a lease.
    fn leases(&self) -> impl Iterator<Item = &RuleArgs> {
        self.groups
            .iter()
            .flat_map(|g| &g.args)
            .filter(|a| a.is_lease())
    }

    /// An empty call of group `g`'s scripts for `request`: no keys yet.
    fn call(&self, request: &Arc<str>, g: &Group) -> LeaseCall {
        LeaseCall {
            backend: self.backend.clone(),
            request: Arc::clone(request),
            evaluated_at: g.evaluated_at,
            keys: Vec::new(),
            ints: Vec::new(),
        }
    }

    /// One call per slot group that holds leases: their keys, and ARGV after the shift.
    fn lease_calls(&self, request: &Arc<str>) -> Vec<LeaseCall> {
        self.groups
            .iter()
            .filter_map(|g| {
                let mut call = self.call(request, g);
                for (key, args) in g.keys.iter().zip(&g.args).filter(|(_, a)| a.is_lease()) {
                    call.keys.push(key.clone());
                    call.ints.push(args.ints);
                }
                (!call.keys.is_empty()).then_some(call)
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
