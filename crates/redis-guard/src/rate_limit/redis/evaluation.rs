//! One evaluation of a request's rules on Redis: one script call per hash slot, refunds when a
//! later slot denies.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use super::fixed_window_batch::{Count, Transaction};
use super::live::LiveCache;
use super::plain::{Keys, Numbers};
use super::script_reply::{parse_compact, parse_reply};
use crate::backend::{BackendError, Coalescer, Entry, RedisBackend, ScriptCall, call_alone};
use crate::rate_limit::Few;
use crate::rate_limit::algorithm::RuleState;
use crate::rate_limit::algorithm::script::{BUILTIN_SCRIPTS, Scripts};
use crate::rate_limit::lease::{Receipt, request_id};
use crate::rate_limit::limiter::live::quota_of;
use crate::rate_limit::limiter::{Held, LimiterError};
use crate::rate_limit::{Algorithm, Lease, Quota};

/// One evaluation: per rule, its state key, override key (same hash tag) and live record's key
/// when it reads them, and its arguments.
pub(super) struct Evaluation {
    /// `None`: the built-in scripts.
    pub(super) scripts: Option<Arc<Scripts>>,
    /// Every rule is GCRA, with the built-in scripts, no override record and no receipt to
    /// keep: `gcra_plain.lua` decides what it can (the general script still refunds).
    pub(super) gcra_only: bool,
    pub(super) keys: Vec<String>,
    pub(super) records: Vec<Option<String>>,
    /// Empty: no live record read.
    pub(super) lives: Vec<Option<String>>,
    /// The limiter's copies of the live records, which take those the script saw, and the
    /// names of the rules that read one.
    pub(super) live_copies: Option<(Arc<LiveCache>, Vec<Arc<str>>)>,
    pub(super) rule_args: Vec<RuleArgs>,
    /// Decide, record nothing (inspect).
    pub(super) dry: bool,
    /// Per rule, its name, when the receipt is kept for a response to settle; else empty.
    pub(super) settled: Vec<Arc<str>>,
}

/// One rule's arguments to the evaluation scripts.
#[derive(Clone, Debug)]
pub(super) struct RuleArgs {
    /// Algorithm id, limit, period (µs), burst, emission interval (µs), cost.
    pub(super) ints: [u64; 6],
    /// `0`: the rule reads no override record; `1`: it does; else its bans (it does too).
    pub(super) overrides: Cow<'static, str>,
    /// The throttle's max wait in µs (0: none).
    pub(super) max_wait_us: u64,
    /// The units of the limit and of the burst held back by the rule's reserve: a decision
    /// takes them off, while refunds, charges and receipts take `ints` whole.
    pub(super) held_back: [u64; 2],
}

impl RuleArgs {
    pub(super) fn decided(&self) -> [u64; 6] {
        let mut ints = self.ints;
        ints[1] = ints[1].saturating_sub(self.held_back[0]);
        ints[3] = ints[3].saturating_sub(self.held_back[1]);
        ints
    }

    /// Whether the rule takes a lease (a concurrency rule, cost 1; a probe takes none).
    pub(super) fn is_lease(&self) -> bool {
        Some(self.ints[0]) == Algorithm::Concurrency.builtin_id().map(u64::from) && self.ints[5] > 0
    }
}

/// The rules of one slot group (state keys, arguments, names when settled), and the Redis time
/// they were decided at.
pub(super) struct Group {
    pub(super) keys: Vec<String>,
    pub(super) args: Vec<RuleArgs>,
    pub(super) names: Vec<Arc<str>>,
    pub(super) evaluated_at: u64,
}

/// A request's rules as one entry of a coalesced call of an evaluation script.
pub(super) struct RuleEntry {
    keys: Few<String>,
    rule_args: Vec<RuleArgs>,
    request: Cow<'static, str>,
    dry: bool,
}

impl Entry for RuleEntry {
    fn keys(&self) -> &[String] {
        self.keys.as_slice()
    }

    fn arg_count(&self) -> usize {
        // The request id, the dry-run flag, then 8 per rule (evaluate.lua's header).
        2 + 8 * self.rule_args.len()
    }

    fn write_args(&self, call: &mut ScriptCall<'_>) {
        call.arg(&*self.request).arg(u8::from(self.dry));
        for args in &self.rule_args {
            call.arg(&args.decided()[..])
                .arg(&*args.overrides)
                .arg(args.max_wait_us);
        }
    }
}

/// The most sets of GCRA rules whose calls are kept: a cost that varies per request makes a
/// set of its own.
const GCRA_SETS: usize = 64;

/// The coalescers of the built-in scripts, per set of GCRA rules, and of the fixed window's
/// plain transactions.
#[derive(Debug)]
pub(super) struct Coalescers {
    gcra: Mutex<HashMap<Numbers, Arc<Coalescer<Keys, Numbers>>>>,
    pub(super) general: Coalescer<RuleEntry>,
    pub(super) counts: Coalescer<Count, Transaction>,
}

impl Coalescers {
    pub(super) fn new(backend: &RedisBackend, max: usize) -> Self {
        Self {
            counts: Coalescer::with_form(backend.clone(), Transaction, max),
            gcra: Mutex::default(),
            general: Coalescer::new(
                backend.clone(),
                &LazyLock::force(&BUILTIN_SCRIPTS).evaluate,
                max,
            ),
        }
    }

    fn backend(&self) -> &RedisBackend {
        self.general.backend()
    }

    /// The calls of `gcra_plain.lua` for the rules of `numbers`, a layer's plain rules' too.
    pub(super) fn gcra(&self, numbers: Numbers) -> Arc<Coalescer<Keys, Numbers>> {
        let mut sets = self.gcra.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(calls) = sets.get(&numbers) {
            return Arc::clone(calls);
        }
        if sets.len() >= GCRA_SETS {
            sets.clear();
        }
        let max = self.general.max();
        let calls = Arc::new(Coalescer::with_form(
            self.backend().clone(),
            numbers.clone(),
            max,
        ));
        sets.insert(numbers, Arc::clone(&calls));
        calls
    }
}

impl Evaluation {
    fn scripts(&self) -> &Scripts {
        self.scripts.as_deref().unwrap_or(&BUILTIN_SCRIPTS)
    }

    /// Runs `entry`: the built-in scripts coalesced, custom ones alone.
    async fn evaluate(
        &self,
        coalescers: &Coalescers,
        entry: RuleEntry,
    ) -> Result<redis::Value, BackendError> {
        match &self.scripts {
            None => coalescers.general.call(entry).await,
            Some(scripts) => call_alone(coalescers.backend(), &scripts.evaluate, &entry).await,
        }
    }

    /// One script call when every key shares a slot (always on a single Redis): atomic. On a
    /// Cluster, one call per hash tag, in order; when one denies, the tags that already admitted
    /// are refunded and the rest evaluated dry (for their headers).
    pub(super) async fn run(mut self, coalescers: &Coalescers) -> Result<Held, LimiterError> {
        let backend = coalescers.backend();
        let n = self.rule_args.len();
        // Only the sliding log and the leases name entries with the request id; GCRA never
        // reads it.
        let id = (!self.gcra_only).then(request_id);
        let request: Cow<'static, str> = match &id {
            None => Cow::Borrowed("-"),
            Some(id) => Cow::Owned(id.to_string()),
        };
        // A receipt is kept when the request may take leases or be settled.
        let keep = !self.dry
            && (!self.settled.is_empty() || self.rule_args.iter().any(RuleArgs::is_lease));
        if !backend.connection().is_cluster() {
            // The receipt's copy of the rules.
            let leases = keep.then(|| (self.keys.clone(), self.rule_args.clone()));
            // The quota each live rule's arguments carry (none when the call reads no record):
            // what the script decides with where the record has none.
            let live_args: Vec<Option<Quota>> = if self.live_copies.is_some() {
                self.lives
                    .iter()
                    .zip(&self.rule_args)
                    .filter(|(live, _)| live.is_some())
                    .map(|(_, args)| quota_of(args.ints[1], args.ints[2], args.ints[3]))
                    .collect()
            } else {
                Vec::new()
            };
            // GCRA rules counted for good, with no live record read and no receipt (which
            // needs the time) kept: one integer per rule serves.
            let gcra = self.gcra_only
                && self.live_copies.is_none()
                && leases.is_none()
                && !self.dry
                && self.rule_args.iter().all(|args| args.ints[5] > 0);
            // The common case: one entry, its keys and arguments moved rather than copied.
            let keys = std::mem::take(&mut self.keys);
            let keys = if self.records.iter().all(Option::is_none) && self.lives.is_empty() {
                keys
            } else {
                let records = std::mem::take(&mut self.records);
                let mut lives = std::mem::take(&mut self.lives).into_iter();
                keys.into_iter()
                    .zip(records)
                    .flat_map(|(key, record)| {
                        std::iter::once(key)
                            .chain(record)
                            .chain(lives.next().flatten())
                    })
                    .collect()
            };
            let lives = self
                .live_copies
                .as_ref()
                .map_or(0, |(_, names)| names.len());
            if gcra {
                let decided: Few<_> = self.rule_args.iter().map(RuleArgs::decided).collect();
                let numbers = Numbers::of(decided.as_slice());
                let reply = coalescers
                    .gcra(numbers)
                    .call(Keys(Few::from_vec(keys)))
                    .await?;
                let states = parse_compact(&reply, decided.as_slice())?;
                return Ok((states, None, Vec::new()));
            }
            let entry = RuleEntry {
                keys: Few::from_vec(keys),
                rule_args: std::mem::take(&mut self.rule_args),
                request,
                dry: self.dry,
            };
            let reply = self.evaluate(coalescers, entry).await?;
            let (states, evaluated_at, seen) = parse_reply(&reply, n, lives)?;
            let mut live = Vec::new();
            if let Some((copies, names)) = &self.live_copies {
                live.reserve(names.len());
                for ((name, record), args) in names.iter().zip(seen).zip(live_args) {
                    copies.took(name, record, false);
                    if let Some(quota) = record.quota.or(args) {
                        live.push((Arc::clone(name), quota));
                    }
                }
            }
            let lease = match (leases, &id) {
                (Some((keys, args)), Some(id)) if states.iter().all(|s| s.allowed) => {
                    let group = Group {
                        keys,
                        args,
                        names: self.settled.clone(),
                        evaluated_at,
                    };
                    let receipt = Receipt::redis(id, backend, &self.scripts, vec![group]);
                    Lease::new(vec![receipt])
                }
                _ => None,
            };
            return Ok((states, lease, live));
        }
        // A rule's override key shares its state key's hash tag.
        let groups = backend.slot_groups(&self.keys);
        // Every rule is in one group: each state is set.
        let mut states = vec![RuleState::from_parts(false, 0, 0, 0, 0); n];
        // The groups that admitted the request, with the Redis time they were evaluated at.
        let mut committed: Vec<(&[usize], u64)> = Vec::new();
        let mut denied = false;
        for group in &groups {
            let entry = RuleEntry {
                keys: group
                    .iter()
                    .flat_map(|&i| {
                        // A Cluster's calls read no live record.
                        std::iter::once(&self.keys[i]).chain(&self.records[i])
                    })
                    .cloned()
                    .collect(),
                rule_args: group.iter().map(|&i| self.rule_args[i].clone()).collect(),
                request: request.clone(),
                dry: denied || self.dry,
            };
            let outcome = self
                .evaluate(coalescers, entry)
                .await
                .map_err(LimiterError::from)
                .and_then(|reply| parse_reply(&reply, group.len(), 0));
            let (group_states, evaluated_at, _) = match outcome {
                Ok(s) => s,
                Err(e) => {
                    self.refund(backend, &request, &committed).await;
                    return Err(e);
                }
            };
            let all_allowed = group_states.iter().all(|s| s.allowed);
            for (&i, state) in group.iter().zip(group_states) {
                states[i] = state;
            }
            if denied || self.dry {
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
        let lease = match &id {
            Some(id) if keep && !denied => {
                let groups = committed
                    .iter()
                    .map(|(group, evaluated_at)| Group {
                        keys: group.iter().map(|&i| self.keys[i].clone()).collect(),
                        args: group.iter().map(|&i| self.rule_args[i].clone()).collect(),
                        names: group
                            .iter()
                            .filter_map(|&i| self.settled.get(i).cloned())
                            .collect(),
                        evaluated_at: *evaluated_at,
                    })
                    .collect();
                Lease::new(vec![Receipt::redis(id, backend, &self.scripts, groups)])
            }
            _ => None,
        };
        // The checks carry the quotas they were decided with.
        Ok((states, lease, Vec::new()))
    }

    /// Charges each rule its cost whatever is left (`charge_all`): one call per hash slot.
    pub(super) async fn charge(&self, backend: &RedisBackend) -> Result<(), LimiterError> {
        let request = request_id();
        for group in backend.slot_groups(&self.keys) {
            let keys: Vec<&str> = group.iter().map(|&i| self.keys[i].as_str()).collect();
            let mut call = backend.script(&self.scripts().charge, &keys);
            call.arg(&*request).arg(0);
            for &i in &group {
                call.arg(&self.rule_args[i].ints[..]);
            }
            call.run().await?;
        }
        Ok(())
    }

    /// Gives back what the request took under `groups`. Best effort: a refund that fails leaves
    /// the quota consumed, which errs on the side of limiting.
    async fn refund(&self, backend: &RedisBackend, request: &str, groups: &[(&[usize], u64)]) {
        for (group, evaluated_at) in groups {
            let keys: Vec<&str> = group.iter().map(|&i| self.keys[i].as_str()).collect();
            let mut call = backend.script(&self.scripts().refund, &keys);
            call.arg(request).arg(*evaluated_at);
            for &i in *group {
                call.arg(&self.rule_args[i].ints[..]);
            }
            if let Err(e) = call.run().await {
                tracing::warn!(error = %e, "rate-limit refund failed; the quota stays consumed");
            }
        }
    }
}
