//! What both caches do before computing: read a key and judge what it holds ([`Call::look`]),
//! XFetch's early recomputation, and the fill lease (wait for another caller's fill, or
//! refresh a stale entry in the background).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::entry::{Entry, Kind, Stored, decode};
use super::fail_safe::{FailSafe, RETRY_AFTER_FAILURE};
use super::policy::stored_grace;
use super::shared::Shared;
use super::store::{Key, NOW, Write};
use super::validate::has_validator;
use crate::backend::{BackendError, LockGuard, micros};

/// What the store holds for a key, as this request may use it.
pub(crate) enum Look {
    Fresh(Entry, u64),
    /// Past its freshness inside its stale window, or softly purged: served at once while
    /// one caller refreshes it.
    Stale(Entry, u64),
    /// Past its stale window: a miss, but the entry is kept, inside `stale_if_error` (then
    /// the copy stands in for a failing or slow origin: see [`Call::rescuable`]) or to be
    /// revalidated with the handler (it has a validator; see [`Call::revalidatable`]).
    Expired(Entry, u64),
    /// As `Expired`, and the last fill failed (on any replica): the copy stands in at once;
    /// when `due`, [`RETRY_AFTER_FAILURE`] has passed and one caller may try again.
    Failing {
        entry: Entry,
        at: u64,
        due: bool,
    },
    /// A hit-for-pass marker: the last response was not cacheable.
    Pass(u64),
    /// Nothing usable (absent, expired, invalidated, not ours): a miss at this time.
    Absent(u64),
    /// The store failed: serve without it.
    Failed(BackendError),
}

/// What waiting for another request's fill came to.
pub(crate) enum Waited {
    /// This request took the lease, the key read at `at`; `copy`: what it held then, if
    /// that may stand in for a failing origin (inside `stale_if_error`); `prior`: what it
    /// held then past its freshness (to be revalidated, when it has a validator).
    Lease {
        guard: LockGuard,
        at: u64,
        copy: Option<Entry>,
        prior: Option<Box<Entry>>,
    },
    /// The key holds a usable entry (fresh or stale), read at this time.
    Filled(Entry, u64),
    /// The fill failed (on any replica): the copy, read at this time, stands in at once.
    Rescued(Entry, u64),
    /// The wait ran out on the fill timeout: the caller stops (its copy, or the timeout's
    /// answer).
    GaveUp,
    /// Compute without the lease (the lock failed, the stampede's wait ran out, the last
    /// response was not cacheable), the key read at this time; `None`: the store failed.
    Alone(Option<u64>),
}

/// One request's work, with the layer's settings and the key's digest.
#[derive(Clone)]
pub(crate) struct Call {
    pub(crate) shared: Arc<Shared>,
    pub(crate) digest: Arc<str>,
    /// The target URI's digest (a response cache entry): its entries' group, and the
    /// implicit tag an unsafe request to the URI invalidates.
    pub(crate) group: Option<Arc<str>>,
    /// Where a hit on Redis finds the `GET` of this key, built once for every request of the
    /// page (a response cache entry); `None`: built for each read.
    pub(crate) read: Option<super::ids::ReadCommand>,
}

impl Call {
    /// Where the entry lives in the store.
    pub(crate) fn key(&self) -> Key<'_> {
        Key {
            name: &self.digest,
            group: self.group.as_deref(),
        }
    }

    /// The records of `tags`: each one's hard record, then each one's soft one.
    pub(crate) fn records_of(&self, tags: &[String]) -> Vec<String> {
        let shared = &self.shared;
        (tags.iter().map(|t| shared.tag_digest(t)))
            .chain(tags.iter().map(|t| shared.soft_tag_digest(t)))
            .collect()
    }

    /// When each of `records` was last invalidated: from `read` (what was read with the
    /// entry, for `asked`), the others read now, in one more round trip.
    async fn tag_times(
        &self,
        records: &[String],
        asked: &[String],
        read: &[Option<u64>],
    ) -> Result<Vec<Option<u64>>, BackendError> {
        let known = |r: &String| {
            let i = asked.iter().position(|a| a == r)?;
            read.get(i).copied()
        };
        let missing: Vec<String> = records
            .iter()
            .filter(|r| known(r).is_none())
            .cloned()
            .collect();
        let mut fetched = if missing.is_empty() {
            Vec::new()
        } else {
            self.shared.store.0.tag_times(&missing).await?
        }
        .into_iter();
        Ok(records
            .iter()
            .map(|r| known(r).unwrap_or_else(|| fetched.next().flatten()))
            .collect())
    }

    fn lock_name(&self) -> String {
        format!("c:{}", self.digest)
    }

    /// The key of the marker that says the entry's last fill failed: a digest of its own, so
    /// that it never holds or shadows an entry.
    fn failure_key(&self) -> String {
        super::store::digest([b"rg-fill-failed".as_slice(), self.digest.as_bytes()])
    }

    /// Records that a fill of this key failed while a copy stood in: for
    /// [`RETRY_AFTER_FAILURE`] every caller, on every replica, gets the copy at once and none
    /// calls the origin. One small key beside the entry, kept as long as a copy may stand in:
    /// the layer's `stale_if_error`, or the copy's own `grace` (its response's
    /// `stale-if-error`) when longer, so that past the first second the marker still says a
    /// try is due and nobody queues behind the origin.
    pub(crate) async fn failed(&self, grace: Duration) {
        let write = Write {
            kind: Kind::Failed,
            started: NOW,
            fresh: RETRY_AFTER_FAILURE,
            stale: Duration::ZERO,
            grace: self.shared.fail_safe.stale_if_error.max(grace),
            blob: Bytes::new(),
        };
        if let Err(e) = self
            .shared
            .store
            .0
            .write(Key::plain(&self.failure_key()), write)
            .await
        {
            tracing::warn!(key = %self.digest, error = %e, "recording a failed cache fill failed: the next request tries the origin again");
        }
    }

    /// An entry past its stale window, inside `stale_if_error`: [`Look::Failing`] when a fill
    /// failed after it was computed, else [`Look::Expired`]. One more read, only on this path.
    async fn expired(&self, entry: Entry, now: u64) -> Look {
        match self
            .shared
            .store
            .0
            .read(Key::plain(&self.failure_key()), &[])
            .await
        {
            Ok(read) => match read.value.and_then(|v| decode(v, &self.digest)) {
                Some(Stored::Failed(t)) if t.started > entry.times.started => Look::Failing {
                    due: read.now >= t.fresh_until,
                    entry,
                    at: now,
                },
                _ => Look::Expired(entry, now),
            },
            Err(e) => {
                tracing::debug!(key = %self.digest, error = %e, "reading the failed-fill marker failed: as if there were none");
                Look::Expired(entry, now)
            }
        }
    }

    /// The fail-safe settings.
    pub(crate) fn fail_safe(&self) -> FailSafe {
        self.shared.fail_safe
    }

    /// `now`, moved past the target URI's last invalidation, read now: a miss's fill counts
    /// from it. The store's clock may lag Redis's a little, and the fill of a response whose
    /// computation started before the URI's invalidation is not stored; so an invalidation
    /// just before this miss must not be taken for one during the computation. Only a miss
    /// pays this read (a hit reads no record of its URI: the invalidation deleted the entry).
    /// Failing, `now` as it is: at worst the fill is not stored.
    async fn past_invalidation(&self, now: u64) -> u64 {
        let Some(group) = &self.group else {
            return now;
        };
        match self.shared.store.0.tag_times(&[group.to_string()]).await {
            Ok(times) => past(now, &times),
            Err(e) => {
                tracing::debug!(key = %self.digest, error = %e, "reading the URI's last invalidation failed: a fill that follows may not be stored");
                now
            }
        }
    }

    /// Reads the key and judges what it holds; a miss at the store's time as read, moved past
    /// the target URI's last invalidation (see [`past_invalidation`](Self::past_invalidation)).
    pub(crate) async fn look(&self) -> Look {
        // One state machine reads and judges (a hit polls no nested future, moves no second
        // answer); every way to a miss leaves the block with the time it was read at.
        let absent = 'judged: {
            let store = &self.shared.store.0;
            // The tag records the entry was last seen to carry are read with it (the memory
            // store also reads its URI's own record).
            let seen = self.shared.memo.get(&self.digest);
            let asked: &[String] = seen.as_deref().unwrap_or_default();
            // The entry alone on Redis (the usual hit): its `GET` awaited in place.
            let alone = match store.redis() {
                Some(redis) if asked.is_empty() => {
                    redis.read_alone(self.key(), self.read.as_ref()).await
                }
                _ => None,
            };
            let read = match alone {
                Some(read) => read,
                None => store.read(self.key(), asked).await,
            };
            let read = match read {
                Ok(read) => read,
                Err(e) => {
                    tracing::warn!(error = %e, "cache store unavailable: serving without it");
                    return Look::Failed(e);
                }
            };
            // Between readings of Redis `TIME` the store's clock may lag Redis's a little (never
            // run ahead). What was written before this read bounds its time from below: the
            // invalidations read with it (so that an entry computed after one is never void by
            // it), and the entry's own write (so that a hit never claims more freshness than it
            // was stored with).
            let mut now = past(read.now, std::iter::once(&read.group).chain(&read.tags));
            if read.foreign {
                tracing::warn!(key = %self.digest, "a cache key holds a value of another type: a miss, overwritten on fill");
                break 'judged now;
            }
            let Some(raw) = read.value else {
                break 'judged now;
            };
            let mut entry = match decode(raw, &self.digest) {
                Some(Stored::Entry(entry)) => entry,
                Some(Stored::Pass(t)) if now < t.fresh_until => return Look::Pass(now),
                Some(Stored::Pass(_)) => break 'judged now,
                Some(Stored::Earlier) => {
                    tracing::debug!(key = %self.digest, "a cache key holds a value of an earlier format: a miss, overwritten on fill");
                    break 'judged now;
                }
                _ => {
                    tracing::warn!(key = %self.digest, "a cache key holds a value that is not this entry: a miss, overwritten on fill");
                    break 'judged now;
                }
            };
            now = now.max(entry.times.started.saturating_add(entry.times.delta));
            if now >= entry.times.stale_until
                && !self.rescuable(&entry, now)
                && !self.revalidatable(&entry, now)
            {
                break 'judged now;
            }
            // Voided when its URI or one of its tags was invalidated since it was computed;
            // purged softly when one of its tags was. (On Redis the URI's invalidation deleted
            // the entry, and a fill that started before it stored nothing: no record is read.)
            let started = entry.times.started;
            let after = |t: &Option<u64>| t.is_some_and(|t| t >= started);
            if after(&read.group) {
                break 'judged now;
            }
            if !(entry.tags.is_empty() && asked.is_empty()) {
                // The tags' hard records, then their soft ones.
                let own = self.records_of(&entry.tags);
                if own[..] != *asked {
                    self.shared.memo.set(&self.digest, &own);
                }
                match self.tag_times(&own, asked, &read.tags).await {
                    Ok(times) => {
                        now = past(now, &times);
                        let (hard, soft) = times.split_at(entry.tags.len());
                        if hard.iter().any(after) {
                            break 'judged now;
                        }
                        entry.purged = soft.iter().any(after);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cache store unavailable: serving without it");
                        return Look::Failed(e);
                    }
                }
            }
            return if now >= entry.times.stale_until {
                if self.rescuable(&entry, now) {
                    self.expired(entry, now).await
                } else {
                    // Kept only to be revalidated: never a copy that stands in.
                    Look::Expired(entry, now)
                }
            } else if now < entry.times.fresh_until && !entry.purged {
                Look::Fresh(entry, now)
            } else {
                Look::Stale(entry, now)
            };
        };
        Look::Absent(self.past_invalidation(absent).await)
    }

    /// XFetch: whether this hit recomputes early.
    pub(crate) fn early(&self, entry: &Entry, now: u64) -> bool {
        let Some(beta) = self.shared.stampede.xfetch else {
            return false;
        };
        #[allow(clippy::cast_precision_loss)]
        let gap = entry.times.delta as f64 * beta * -self.shared.random.draw().ln();
        #[allow(clippy::cast_precision_loss)]
        let early = now as f64 + gap >= entry.times.fresh_until as f64;
        early
    }

    /// Lock on miss: takes the lease, or polls the store (2 ms, doubling to 50 ms) for
    /// another request's fill: until `deadline` (the caller's fill timeout) when there is one,
    /// else for the stampede's wait. An entry that is not `usable` (a value of another type),
    /// or only a fail-safe copy, counts as no fill.
    ///
    /// With a fill timeout the caller never computes on its own while the lease holds: it
    /// waits until the timeout, then stops ([`Waited::GaveUp`]). Only the stampede's wait
    /// running out sends a caller to compute without the lease.
    pub(crate) async fn wait(
        &self,
        mut now: u64,
        deadline: Option<tokio::time::Instant>,
        usable: impl Fn(&Entry) -> bool,
    ) -> Waited {
        // An entry fresh when this request arrived answers it, even if stale now: one stored
        // stale when received (only to be revalidated) came from the handler after it did.
        let arrived = now;
        let stampede = self.shared.stampede;
        let lock = self.shared.store.0.lock();
        let name = self.lock_name();
        let until = deadline.unwrap_or_else(|| tokio::time::Instant::now() + stampede.wait);
        let mut pause = Duration::from_millis(2);
        loop {
            match lock.try_acquire(&name, stampede.lease).await {
                Ok(Some(guard)) => return self.leased(guard, &usable, arrived).await,
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "cache fill lock unavailable: computing without it");
                    return Waited::Alone(Some(now));
                }
            }
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                tracing::debug!(key = %self.digest, "waited the whole bound for a fill");
                // At the fill timeout the caller stops; at the stampede's wait it computes.
                if deadline.is_some() {
                    return Waited::GaveUp;
                }
                return Waited::Alone(Some(now));
            }
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(Duration::from_millis(50));
            match self.look().await {
                Look::Fresh(entry, at) | Look::Stale(entry, at) if usable(&entry) => {
                    return Waited::Filled(entry, at);
                }
                Look::Expired(entry, at) if usable(&entry) && entry.times.fresh_until > arrived => {
                    return Waited::Filled(entry, at);
                }
                // The holder's fill failed: nobody else queues behind the origin.
                Look::Failing { entry, at, .. } if usable(&entry) => {
                    return Waited::Rescued(entry, at);
                }
                Look::Fresh(_, at)
                | Look::Stale(_, at)
                | Look::Absent(at)
                | Look::Expired(_, at)
                | Look::Failing { at, .. } => {
                    now = at;
                }
                Look::Pass(at) => return Waited::Alone(Some(at)),
                Look::Failed(_) => return Waited::Alone(None),
            }
        }
    }

    /// What the key holds once this request has the lease: whoever held it before may have
    /// filled it since our read at `arrived` (then the lease goes back).
    async fn leased(
        &self,
        guard: LockGuard,
        usable: &impl Fn(&Entry) -> bool,
        arrived: u64,
    ) -> Waited {
        let (at, prior) = match self.look().await {
            Look::Fresh(entry, at) if usable(&entry) => {
                release(guard).await;
                return Waited::Filled(entry, at);
            }
            Look::Expired(entry, at) if usable(&entry) && entry.times.fresh_until > arrived => {
                release(guard).await;
                return Waited::Filled(entry, at);
            }
            Look::Failed(_) => {
                release(guard).await;
                return Waited::Alone(None);
            }
            // A fill failed since our read, and no try is due yet.
            Look::Failing {
                entry,
                at,
                due: false,
            } if usable(&entry) => {
                release(guard).await;
                return Waited::Rescued(entry, at);
            }
            Look::Stale(entry, at) | Look::Expired(entry, at) | Look::Failing { entry, at, .. } => {
                (at, Some(entry))
            }
            Look::Fresh(_, at) | Look::Absent(at) | Look::Pass(at) => (at, None),
        };
        let copy = (prior.as_ref())
            .filter(|entry| self.rescuable(entry, at))
            .cloned();
        Waited::Lease {
            guard,
            at,
            copy,
            prior: prior.map(Box::new),
        }
    }

    /// Whether `entry`, read at `at` past its stale window, is still kept to be revalidated:
    /// it has a validator, and it is at most the layer's revalidation window past its
    /// freshness.
    pub(crate) fn revalidatable(&self, entry: &Entry, at: u64) -> bool {
        let window = self.shared.revalidate;
        !window.is_zero()
            && at < entry.times.fresh_until.saturating_add(micros(window))
            && has_validator(&entry.headers)
    }

    /// How long past its freshness the key of a response with these `headers` is kept: its
    /// `grace` (for `stale_if_error`), or the revalidation window when it has a validator
    /// and that is longer.
    pub(crate) fn kept(&self, headers: &http::HeaderMap, grace: Duration) -> Duration {
        if self.shared.revalidate > grace && has_validator(headers) {
            self.shared.revalidate
        } else {
            grace
        }
    }

    /// Whether `entry`, read at `at`, may stand in for a failing origin: it is at most its
    /// [`grace`](Self::grace) past its freshness.
    pub(crate) fn rescuable(&self, entry: &Entry, at: u64) -> bool {
        let grace = micros(self.grace(entry));
        at < entry.times.fresh_until.saturating_add(grace)
    }

    /// How long past its freshness `entry` may stand in for a failing origin: the layer's
    /// `stale_if_error`, unless the stored response says otherwise (its own `stale-if-error`;
    /// none with `must-revalidate`, `proxy-revalidate`, or `s-maxage` for the layer's).
    pub(crate) fn grace(&self, entry: &Entry) -> Duration {
        let shared = &self.shared;
        stored_grace(
            &entry.headers,
            shared.fail_safe.stale_if_error,
            shared.life.max_ttl,
        )
    }

    /// Stale-while-revalidate: when this call takes the key's lease, runs `job` (with the
    /// store's time of a fresh read) in a spawned task, unless another refresh landed first;
    /// the lease is released when it ends. Without the lease (or a runtime) it does nothing.
    pub(crate) async fn refresh_with<F, Fut>(&self, job: F)
    where
        F: FnOnce(Self, u64) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let lease = self.shared.stampede.lease;
        let guard = match self
            .shared
            .store
            .0
            .lock()
            .try_acquire(&self.lock_name(), lease)
            .await
        {
            Ok(Some(guard)) => guard,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cache refresh lock unavailable: not refreshing");
                return;
            }
        };
        let call = self.clone();
        runtime.spawn(async move {
            // Another refresh may have landed between our read and the lease, or another try
            // of a failing origin may have failed.
            let now = match call.look().await {
                Look::Fresh(..) | Look::Failed(_) | Look::Failing { due: false, .. } => None,
                Look::Stale(_, at)
                | Look::Expired(_, at)
                | Look::Failing { at, .. }
                | Look::Absent(at)
                | Look::Pass(at) => Some(at),
            };
            if let Some(now) = now {
                job(call, now).await;
            }
            release(guard).await;
        });
    }
}

/// `now`, moved past every time in `records` (tag records read by then: each was written
/// before, so the store's time is later; not a time of ours, `u64::MAX`, says nothing).
fn past<'a>(now: u64, records: impl IntoIterator<Item = &'a Option<u64>>) -> u64 {
    records
        .into_iter()
        .flatten()
        .filter(|&&t| t < u64::MAX)
        .fold(now, |now, &t| now.max(t.saturating_add(1)))
}

/// Releases a fill or refresh lease; a failure only logs (the lease runs out).
pub(crate) async fn release(guard: LockGuard) {
    if let Err(e) = guard.release().await {
        tracing::warn!(error = %e, "releasing a cache fill lock failed; its lease will run out");
    }
}

/// Runs `job`, then releases `guard` (when this caller holds the lease).
pub(crate) async fn holding<T>(guard: Option<LockGuard>, job: impl Future<Output = T>) -> T {
    let out = job.await;
    if let Some(guard) = guard {
        release(guard).await;
    }
    out
}

/// Runs `job`: with a fill timeout (`deadline`) and a runtime, in a spawned task that the
/// caller waits for until then (`None`: it stopped waiting, and the task goes on); else in
/// place. A panic in the task is the caller's.
pub(crate) async fn patiently<T: Send + 'static>(
    key: &str,
    deadline: Option<tokio::time::Instant>,
    job: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    let (Some(deadline), Ok(runtime)) = (deadline, tokio::runtime::Handle::try_current()) else {
        return Some(job.await);
    };
    let mut task = runtime.spawn(job);
    match tokio::time::timeout_at(deadline, &mut task).await {
        Ok(Ok(out)) => Some(out),
        Ok(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Ok(Err(_)) | Err(_) => {
            tracing::debug!(%key, "fill timeout: the computation goes on in the background");
            None
        }
    }
}

/// The store's time `now` (µs) moved on by what has passed since `since`: when a copy is
/// served after a wait, its `Age` and `ttl` count the wait.
pub(crate) fn later(now: u64, since: tokio::time::Instant) -> u64 {
    now.saturating_add(micros(since.elapsed()))
}
