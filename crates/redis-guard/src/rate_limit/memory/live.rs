//! Live limits in process ([`Rule::live`]): the quotas set on this limiter, shared by its
//! clones, read on every decision of a live rule (`limiter/live.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::MemoryLimiter;
use crate::rate_limit::limiter::live::{self, LiveRecord};
use crate::rate_limit::limiter::{Engine, LimiterError};
use crate::rate_limit::{Quota, Rule};

/// The live records of one limiter, by rule name.
pub(super) type LiveTable = Arc<Mutex<HashMap<Arc<str>, LiveRecord>>>;

impl MemoryLimiter {
    /// The live quota set for `rule`, if any.
    pub(super) fn live_quota_of(&self, rule: &Rule) -> Option<Quota> {
        let table = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        table.get(rule.name()).and_then(|r| r.quota)
    }

    /// Sets or clears `rule`'s live quota: the new version.
    pub(super) fn set_live_now(
        &self,
        rule: &Rule,
        quota: Option<Quota>,
    ) -> Result<u64, LimiterError> {
        live::valid(self as &dyn Engine, rule, quota.as_ref())?;
        let mut table = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        let record = table.entry(Arc::clone(rule.name_arc())).or_default();
        let old = record.quota;
        *record = LiveRecord {
            version: record.version + 1,
            quota,
        };
        live::log_change(rule, old, quota, record.version);
        Ok(record.version)
    }
}
