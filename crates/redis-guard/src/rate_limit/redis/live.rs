//! Live limits on Redis ([`Rule::live`]): the rule's record, set by `live_set.lua` and read by
//! the evaluation script in the decision's own call on a single Redis; the copy each limiter
//! keeps, re-read in the background, for a Cluster, for the mode and for refunds and charges
//! (`limiter/live.rs` has the whole picture).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::FromRedisValue;

use super::RedisLimiter;
use crate::backend::{BackendError, LuaScript, RedisBackend};
use crate::rate_limit::Rule;
use crate::rate_limit::limiter::live::{self, LIVE_TTL, LiveChange, LiveRecord};
use crate::rate_limit::limiter::{Engine, LimiterFuture};

/// Sets or clears a live record.
static LIVE_SET: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("live_set.lua")));

/// How often a limiter re-reads a live rule's record at most, by default.
pub(super) const DEFAULT_LIVE_REFRESH: Duration = Duration::from_secs(1);

/// A limiter's copies of the live records of its rules.
#[derive(Debug)]
pub(super) struct LiveCache {
    refresh: Duration,
    /// Whether the script can read a rule's record in the decision's call (not on a Cluster:
    /// the record's slot is not the client key's).
    pub(super) in_call: bool,
    records: Mutex<HashMap<Arc<str>, Copy>>,
}

/// A limiter's copy of one record.
#[derive(Debug, Default)]
struct Copy {
    record: LiveRecord,
    /// When it was last read (`None`: never).
    read_at: Option<Instant>,
    /// A read is under way.
    reading: bool,
    /// Changes taken since the copy was made, other than by a read (a change made here, a
    /// newer version a script saw): a read that began before one of them knows less than it.
    changes: u64,
}

impl LiveCache {
    pub(super) fn new(backend: &RedisBackend, refresh: Duration) -> Self {
        Self {
            refresh,
            in_call: !backend.connection().is_cluster(),
            records: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Copy>> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `record`, read by a read that began when the copy had taken `changes` (`None`: the
    /// read failed, the copy stands), unless a newer one is known; `gone`: there is no record
    /// (expired, deleted by hand), which wins over the copy's version unless the copy took a
    /// change after the read began.
    fn store_read(&self, rule: &Arc<str>, record: Option<LiveRecord>, gone: bool, changes: u64) {
        let mut records = self.lock();
        let copy = records.entry(Arc::clone(rule)).or_default();
        match record {
            Some(record)
                if record.version >= copy.record.version || (gone && copy.changes == changes) =>
            {
                copy.record = record;
            }
            _ => {}
        }
        copy.read_at = Some(Instant::now());
        copy.reading = false;
    }

    /// Takes `record` of rule `name`, unless a newer one is known: one a change made here
    /// wrote (`made`), or what an evaluation script saw, taken only when its version is newer
    /// than the copy's. A script's newer record replaces the copy at once: the layer splits
    /// the rule's next request into calls by its mode, and refunds and charges take its quota.
    /// (The decision that saw it names the quota the script used whatever the copy says.)
    pub(super) fn took(&self, name: &Arc<str>, record: LiveRecord, made: bool) {
        let mut records = self.lock();
        let copy = records.entry(Arc::clone(name)).or_default();
        let version = copy.record.version;
        if record.version > version || (made && record.version == version) {
            copy.record = record;
            copy.changes += 1;
        }
    }
}

impl RedisLimiter {
    /// How often each live rule's record ([`Rule::live`]) is re-read at most, in the
    /// background (default 1 s). On a single Redis or a pool the decision reads the record
    /// itself, in its own script call (its headers name the quota it read), and the copy only
    /// feeds the mode, refunds and charges, and takes any newer record a decision read; on a
    /// Cluster the copy decides, so a change made on another replica takes effect here within
    /// this time (at once on the replica that made it).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_guard::backend::RedisConnection;
    /// use redis_guard::rate_limit::RedisLimiter;
    /// # async fn f() -> redis::RedisResult<()> {
    /// let conn = RedisConnection::open("redis://127.0.0.1/").await?;
    /// let limiter = RedisLimiter::new(conn).live_refresh(Duration::from_millis(200));
    /// # let _ = limiter; Ok(()) }
    /// ```
    #[must_use]
    pub fn live_refresh(mut self, every: Duration) -> Self {
        self.live = Arc::new(LiveCache::new(&self.backend, every));
        self
    }

    /// The key of `rule`'s live record: one per rule, in a slot of its own on a Cluster.
    pub(super) fn live_key(&self, rule: &Rule) -> String {
        self.backend.key(&["rl", rule.name(), "live"], "rule")
    }

    /// The copy of `rule`'s live record, re-read in the background once it is older than the
    /// refresh interval (never on the request's path).
    pub(super) fn cached_live_record(&self, rule: &Rule) -> LiveRecord {
        let cache = &self.live;
        let mut records = cache.lock();
        let copy = records.entry(Arc::clone(rule.name_arc())).or_default();
        let stale = copy.read_at.is_none_or(|at| at.elapsed() >= cache.refresh);
        if stale
            && !copy.reading
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            copy.reading = true;
            let (this, name, key, changes) = (
                self.clone(),
                Arc::clone(rule.name_arc()),
                self.live_key(rule),
                copy.changes,
            );
            runtime.spawn(async move { this.read_live(&name, &key, changes).await });
        }
        copy.record
    }

    /// Reads the record at `key` into the copy of rule `name`, which had taken `changes`.
    async fn read_live(&self, name: &Arc<str>, key: &str, changes: u64) {
        let read = self.backend.query(redis::cmd("GET").arg(key)).await;
        let (record, gone) = match read {
            Ok(redis::Value::Nil) => (Some(LiveRecord::default()), true),
            Ok(redis::Value::BulkString(v)) => (
                std::str::from_utf8(&v).ok().and_then(LiveRecord::decode),
                false,
            ),
            Ok(_) => (None, false),
            Err(e) => {
                tracing::debug!(rule = %name, error = %e, "reading a live rule quota failed; the last copy stands");
                (None, false)
            }
        };
        self.live.store_read(name, record, gone, changes);
    }

    /// Makes `change` to `rule`'s live record on Redis (`set_rule_quota`, `clear_rule_quota`,
    /// `set_rule_mode`, `clear_rule_mode`).
    pub(super) fn set_live_record(&self, rule: &Rule, change: LiveChange) -> LimiterFuture<u64> {
        if let Err(e) = live::valid(self as &dyn Engine, rule, change) {
            return Box::pin(std::future::ready(Err(e)));
        }
        let (this, rule, key) = (self.clone(), rule.clone(), self.live_key(rule));
        Box::pin(async move {
            let mut call = this.backend.script(&LIVE_SET, &[key]);
            let (part, value) = change.encode();
            call.arg(part)
                .arg(value)
                .arg(u64::try_from(LIVE_TTL.as_millis()).unwrap_or(u64::MAX));
            let reply = call.run().await?;
            let bad = || BackendError::BadReply(format!("live quota script: {reply:?}"));
            let (old, version) =
                <(Vec<u8>, i64)>::from_redis_value_ref(&reply).map_err(|_| bad())?;
            let version = u64::try_from(version).map_err(|_| bad())?;
            // What the record was before, where it was one (else: nothing set).
            let old = LiveRecord::decode(&String::from_utf8_lossy(&old)).unwrap_or_default();
            let new = change.applied(old, version);
            this.live.took(rule.name_arc(), new, true);
            live::log_change(&rule, old, change, version);
            Ok(version)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::{Mode, Quota};

    fn cache() -> LiveCache {
        LiveCache {
            refresh: DEFAULT_LIVE_REFRESH,
            in_call: true,
            records: Mutex::default(),
        }
    }

    fn record(cache: &LiveCache, rule: &Arc<str>) -> LiveRecord {
        cache.lock().get(rule).map(|c| c.record).unwrap_or_default()
    }

    #[test]
    fn a_read_that_began_before_a_change_does_not_undo_it() {
        let (cache, rule): (_, Arc<str>) = (cache(), Arc::from("api"));
        let shadow = LiveRecord {
            version: 1,
            quota: None,
            mode: Some(Mode::Shadow),
        };
        // A read begins (no change taken yet), then a change is made here, then the read
        // finds no record: the change stands.
        cache.took(&rule, shadow, true);
        cache.store_read(&rule, Some(LiveRecord::default()), true, 0);
        assert_eq!(record(&cache, &rule), shadow);
        // A read that began after it and finds no record: the record is gone (expired,
        // deleted by hand).
        cache.store_read(&rule, Some(LiveRecord::default()), true, 1);
        assert_eq!(record(&cache, &rule), LiveRecord::default());
        // A newer version a script saw counts as a change too, and is taken whole.
        let soft = LiveRecord {
            version: 3,
            quota: Some(Quota::per_minute(5)),
            mode: Some(Mode::Soft),
        };
        cache.took(&rule, soft, false);
        cache.store_read(&rule, Some(LiveRecord::default()), true, 1);
        assert_eq!(record(&cache, &rule), soft);
        // An older version read, or a failed read, never replaces a newer copy; nor does an
        // older version a script saw (a call that was out while the record changed).
        cache.store_read(&rule, Some(shadow), false, 2);
        assert_eq!(record(&cache, &rule), soft);
        cache.store_read(&rule, None, false, 2);
        assert_eq!(record(&cache, &rule), soft);
        cache.took(&rule, shadow, false);
        assert_eq!(record(&cache, &rule), soft);
    }
}
