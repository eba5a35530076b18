//! One evaluation of a request's rules on Redis: one script call per hash slot, refunds when a
//! later slot denies.

use std::sync::{Arc, LazyLock};

use super::algorithm::RuleState;
use super::algorithm::script::{BUILTIN_SCRIPTS, Scripts};
use super::limiter::LimiterError;
use super::reply::parse_reply;
use crate::backend::{BackendError, Coalescer, RedisBackend};

/// One evaluation: the keys and arguments of every rule.
pub(super) struct Evaluation {
    /// `None`: the built-in scripts.
    scripts: Option<Arc<Scripts>>,
    /// Every rule is GCRA: the lean script decides (the general one still refunds).
    gcra_only: bool,
    request: String,
    keys: Vec<String>,
    rule_args: Vec<[String; 6]>,
}

impl Evaluation {
    /// `gcra_only`: every rule is built-in GCRA (then `scripts` is `None`).
    pub(super) fn new(
        scripts: Option<Arc<Scripts>>,
        gcra_only: bool,
        keys: Vec<String>,
        rule_args: Vec<[String; 6]>,
    ) -> Self {
        Self {
            gcra_only: gcra_only && scripts.is_none(),
            // Only the sliding log names entries with the request id; GCRA never reads it.
            request: if gcra_only {
                String::from("-")
            } else {
                request_id()
            },
            scripts,
            keys,
            rule_args,
        }
    }

    fn scripts(&self) -> &Scripts {
        self.scripts.as_deref().unwrap_or(&BUILTIN_SCRIPTS)
    }

    /// Runs the evaluation script for one group of keys: the lean GCRA script through the
    /// coalescer, the general one directly.
    async fn evaluate(
        &self,
        gcra: &Coalescer,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<redis::Value, BackendError> {
        if self.gcra_only {
            gcra.call(keys, args).await
        } else {
            gcra.backend()
                .eval(&self.scripts().evaluate, &keys, &args)
                .await
        }
    }

    /// Keys and ARGV (after the time shift the backend puts first) for the rules at `indices`;
    /// `third` is ARGV[3]: the dry-run flag for an evaluation, the evaluation's Redis time for a
    /// refund.
    fn args(&self, indices: &[usize], third: String) -> (Vec<String>, Vec<String>) {
        let keys = indices.iter().map(|&i| self.keys[i].clone()).collect();
        let mut args = vec![self.request.clone(), third];
        for &i in indices {
            args.extend(self.rule_args[i].iter().cloned());
        }
        (keys, args)
    }

    /// One script call when every key shares a slot (always on a single Redis): atomic. On a
    /// Cluster, one call per hash tag, in order; when one denies, the tags that already admitted
    /// the request are refunded and the rest are evaluated dry (for their headers).
    ///
    /// `gcra` runs the lean GCRA script, coalescing concurrent calls; its backend runs the rest.
    pub(super) async fn run(self, gcra: &Coalescer) -> Result<Vec<RuleState>, LimiterError> {
        let backend = gcra.backend();
        let groups = backend.slot_groups(&self.keys);
        let mut states: Vec<Option<RuleState>> = vec![None; self.keys.len()];
        // The groups that admitted the request, with the Redis time they were evaluated at.
        let mut committed: Vec<(&[usize], u64)> = Vec::new();
        let mut denied = false;
        for group in &groups {
            let (keys, args) = self.args(group, if denied { "1" } else { "0" }.to_owned());
            let outcome = self
                .evaluate(gcra, keys, args)
                .await
                .map_err(LimiterError::from)
                .and_then(|reply| parse_reply(&reply, group.len()));
            let (group_states, evaluated_at) = match outcome {
                Ok(s) => s,
                Err(e) => {
                    self.refund(backend, &committed).await;
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
                self.refund(backend, &committed).await;
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
    async fn refund(&self, backend: &RedisBackend, groups: &[(&[usize], u64)]) {
        for (group, evaluated_at) in groups {
            let (keys, args) = self.args(group, evaluated_at.to_string());
            if let Err(e) = backend.eval(&self.scripts().refund, &keys, &args).await {
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
