//! One evaluation of a request's rules on Redis: one script call per hash slot, refunds when a
//! later slot denies.

use std::sync::{Arc, LazyLock};

use super::algorithm::RuleState;
use super::algorithm::script::{BUILTIN_SCRIPTS, Scripts};
use super::limiter::LimiterError;
use super::reply::parse_reply;
use crate::backend::{BackendError, Coalescer, Entry, RedisBackend, ScriptCall};

/// One evaluation: the keys and arguments of every rule.
pub(super) struct Evaluation {
    /// `None`: the built-in scripts.
    scripts: Option<Arc<Scripts>>,
    /// Every rule is GCRA: the lean script decides (the general one still refunds).
    gcra_only: bool,
    keys: Vec<String>,
    /// Per rule: algorithm id, limit, period (µs), burst, emission interval (µs), cost.
    rule_args: Vec<[u64; 6]>,
}

/// A request's rules (all GCRA) as one entry of a coalesced call of the lean script.
pub(super) struct GcraEntry {
    keys: Vec<String>,
    rule_args: Vec<[u64; 6]>,
    dry: bool,
}

impl Entry for GcraEntry {
    fn keys(&self) -> &[String] {
        &self.keys
    }

    fn arg_count(&self) -> usize {
        2 + 6 * self.rule_args.len()
    }

    fn write_args(&self, call: &mut ScriptCall<'_>) {
        // GCRA never reads the request id (only the sliding log names entries with it).
        call.arg("-").arg(u8::from(self.dry));
        for args in &self.rule_args {
            call.arg(&args[..]);
        }
    }
}

impl Evaluation {
    /// `gcra_only`: every rule is built-in GCRA (then `scripts` is `None`).
    pub(super) fn new(
        scripts: Option<Arc<Scripts>>,
        gcra_only: bool,
        keys: Vec<String>,
        rule_args: Vec<[u64; 6]>,
    ) -> Self {
        Self {
            gcra_only: gcra_only && scripts.is_none(),
            scripts,
            keys,
            rule_args,
        }
    }

    fn scripts(&self) -> &Scripts {
        self.scripts.as_deref().unwrap_or(&BUILTIN_SCRIPTS)
    }

    /// The general script's call for the rules at `indices`; `third` is ARGV[3]: the dry-run
    /// flag for an evaluation, the evaluation's Redis time for a refund.
    fn call<'a>(
        &'a self,
        backend: &'a RedisBackend,
        script: &'a redis::Script,
        request: &str,
        indices: &[usize],
        third: u64,
    ) -> ScriptCall<'a> {
        let keys: Vec<&str> = indices.iter().map(|&i| self.keys[i].as_str()).collect();
        let mut call = backend.script(script, &keys);
        call.arg(request).arg(third);
        for &i in indices {
            call.arg(&self.rule_args[i][..]);
        }
        call
    }

    /// Decides the rules at `indices` (`dry`: records nothing).
    async fn evaluate(
        &self,
        gcra: &Coalescer<GcraEntry>,
        request: &str,
        indices: &[usize],
        dry: bool,
    ) -> Result<redis::Value, BackendError> {
        if self.gcra_only {
            let entry = GcraEntry {
                keys: indices.iter().map(|&i| self.keys[i].clone()).collect(),
                rule_args: indices.iter().map(|&i| self.rule_args[i]).collect(),
                dry,
            };
            return gcra.call(entry).await;
        }
        let script = &self.scripts().evaluate;
        self.call(gcra.backend(), script, request, indices, u64::from(dry))
            .run()
            .await
    }

    /// One script call when every key shares a slot (always on a single Redis): atomic. On a
    /// Cluster, one call per hash tag, in order; when one denies, the tags that already admitted
    /// the request are refunded and the rest are evaluated dry (for their headers).
    ///
    /// `gcra` runs the lean GCRA script, coalescing concurrent calls; its backend runs the rest.
    pub(super) async fn run(
        self,
        gcra: &Coalescer<GcraEntry>,
    ) -> Result<Vec<RuleState>, LimiterError> {
        let backend = gcra.backend();
        let n = self.keys.len();
        if self.gcra_only && !backend.connection().is_cluster() {
            // The common case: one entry, moved rather than copied.
            let entry = GcraEntry {
                keys: self.keys,
                rule_args: self.rule_args,
                dry: false,
            };
            let reply = gcra.call(entry).await?;
            return Ok(parse_reply(&reply, n)?.0);
        }
        // Only the sliding log names entries with the request id; GCRA never reads it.
        let request = if self.gcra_only {
            String::from("-")
        } else {
            request_id()
        };
        let groups = backend.slot_groups(&self.keys);
        let mut states: Vec<Option<RuleState>> = vec![None; n];
        // The groups that admitted the request, with the Redis time they were evaluated at.
        let mut committed: Vec<(&[usize], u64)> = Vec::new();
        let mut denied = false;
        for group in &groups {
            let outcome = self
                .evaluate(gcra, &request, group, denied)
                .await
                .map_err(LimiterError::from)
                .and_then(|reply| parse_reply(&reply, group.len()));
            let (group_states, evaluated_at) = match outcome {
                Ok(s) => s,
                Err(e) => {
                    self.refund(backend, &request, &committed).await;
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
                self.refund(backend, &request, &committed).await;
                committed.clear();
            }
        }
        states
            .into_iter()
            .map(|s| s.ok_or_else(|| BackendError::BadReply("a rule got no state".into()).into()))
            .collect()
    }

    /// Gives back what the request took under `groups`. Best effort: a refund that fails leaves
    /// the quota consumed, which errs on the side of limiting.
    async fn refund(&self, backend: &RedisBackend, request: &str, groups: &[(&[usize], u64)]) {
        for (group, evaluated_at) in groups {
            let script = &self.scripts().refund;
            let call = self.call(backend, script, request, group, *evaluated_at);
            if let Err(e) = call.run().await {
                tracing::warn!(error = %e, "rate-limit refund failed; the quota stays consumed");
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_unique() {
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| request_id()).collect();
        assert_eq!(ids.len(), 1000);
    }
}
