//! Live limits in process ([`Rule::live`]): the quotas and modes set on this limiter, shared by
//! its clones, read on every decision of a live rule (`limiter/live.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::MemoryLimiter;
use crate::rate_limit::Rule;
use crate::rate_limit::limiter::live::{self, LiveChange, LiveRecord};
use crate::rate_limit::limiter::{Engine, LimiterError};

/// The live records of one limiter, by rule name.
pub(super) type LiveTable = Arc<Mutex<HashMap<Arc<str>, LiveRecord>>>;

impl MemoryLimiter {
    /// The live record of `rule` (empty when nothing was set).
    pub(super) fn live_record_of(&self, rule: &Rule) -> LiveRecord {
        let table = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        table.get(rule.name()).copied().unwrap_or_default()
    }

    /// Makes `change` to `rule`'s live record: the new version.
    pub(super) fn set_live_now(
        &self,
        rule: &Rule,
        change: LiveChange,
    ) -> Result<u64, LimiterError> {
        live::valid(self as &dyn Engine, rule, change)?;
        let mut table = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        let record = table.entry(Arc::clone(rule.name_arc())).or_default();
        let old = *record;
        *record = change.applied(old, old.version + 1);
        live::log_change(rule, old, change, record.version);
        Ok(record.version)
    }
}
