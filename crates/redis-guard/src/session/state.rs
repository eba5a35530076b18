//! [`State`]: one request's session, and the load and save around the handler.

use std::net::IpAddr;
use std::time::Duration;

use super::cookie_header::{Candidates, ReadCookie};
use super::id::{KeyedId, SessionId, new_handle};
use super::shared::{Shared, Visit};
use super::store::{
    Changes, DEVICE_FIELD, Device, EXP_FIELD, MAX_FIELD, Record, SEEN_FIELD, USER_FIELD,
};
use super::{FailurePolicy, SessionError};

/// What the response must say about the cookie.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CookieAction {
    Keep,
    Set(SessionId),
    Remove,
}

/// One request's session: what the cookie named, what was loaded, what the handler changed.
#[derive(Debug)]
pub(crate) struct State {
    /// The well-formed ids from the request's cookies, in order (at most
    /// [`MAX_COOKIE_CANDIDATES`](super::cookie_header::MAX_COOKIE_CANDIDATES)).
    pub(crate) cookie_ids: Candidates,
    pub(crate) loaded: bool,
    /// The live record and its id, once loaded (or created/rotated).
    pub(crate) live: Option<(KeyedId, Record)>,
    pub(crate) changes: Changes,
    pub(crate) user: Option<String>,
    pub(crate) cookie: CookieAction,
    pub(crate) destroyed: bool,
    pub(crate) failed: bool,
    /// The load failed: nothing is written and no cookie is set for the rest of the request
    /// (the client's cookie may name a perfectly good session).
    pub(crate) load_failed: bool,
    /// The client, as recorded with the session.
    pub(crate) visit: Visit,
    /// `Max-Age` for a cookie this request sets: the session's own absolute lifetime left, when
    /// it has one (`set_max_lifetime`).
    pub(crate) cookie_age: Option<Duration>,
    /// The store marked the session used (a load past the last-seen interval) or wrote to it
    /// (an atomic helper) in this request: the client's device is recorded after the handler
    /// if it changed, even when nothing else is written (a session with a user: see
    /// [`describe_client`](Self::describe_client)).
    pub(crate) device_due: bool,
}

impl State {
    pub(crate) fn new(cookie: ReadCookie, visit: Visit) -> Self {
        let cookie_ids = match cookie {
            ReadCookie::Ids(ids) => ids,
            ReadCookie::Absent | ReadCookie::Malformed => Candidates::new(),
        };
        Self {
            cookie_ids,
            loaded: false,
            live: None,
            changes: Changes::default(),
            user: None,
            cookie: CookieAction::Keep,
            destroyed: false,
            failed: false,
            load_failed: false,
            visit,
            cookie_age: None,
            device_due: false,
        }
    }

    /// The value under `key` as the handler sees it: its pending change, else the loaded one.
    pub(crate) fn peek(&self, key: &str) -> Option<&str> {
        if let Some(v) = self.changes.set.get(key) {
            return Some(v);
        }
        if self.changes.clear || self.changes.remove.contains(key) {
            return None;
        }
        self.live.as_ref().and_then(|(_, r)| r.get(key))
    }

    /// Removes `key` in this request (its removal is written after the handler); returns
    /// whether the handler saw it.
    pub(crate) fn remove_pending(&mut self, key: &str) -> bool {
        let pending = self.changes.set.remove(key).is_some();
        let stored = !self.changes.clear
            && self
                .live
                .as_ref()
                .is_some_and(|(_, r)| r.get(key).is_some());
        if stored {
            self.changes.remove.insert(key.to_owned());
        }
        pending || stored
    }

    /// Ends the session in this request: nothing more is written, the cookie goes.
    pub(crate) fn end(&mut self) {
        self.destroyed = true;
        self.live = None;
        self.changes = Changes::default();
        self.user = None;
        self.cookie = CookieAction::Remove;
    }

    /// After the session ended in this request: a new, empty, anonymous one, created under a
    /// fresh id if anything is written (the cookie's ids are never read again).
    pub(crate) fn restart(&mut self) {
        self.destroyed = false;
        self.live = None;
        self.user = None;
        self.changes = Changes::default();
        self.cookie_ids.clear();
        self.loaded = true;
        self.cookie_age = None;
    }

    fn fail(&mut self, shared: &Shared, e: SessionError) -> Result<(), SessionError> {
        self.failed = true;
        match shared.failure {
            FailurePolicy::Closed => Err(e),
            FailurePolicy::Open => {
                tracing::warn!(error = %e, "session store failed: continuing without a session");
                Ok(())
            }
        }
    }

    /// Loads the session named by the cookie, once per request.
    pub(crate) async fn ensure_loaded(&mut self, shared: &Shared) -> Result<(), SessionError> {
        if self.loaded {
            return Ok(());
        }
        self.loaded = true;
        match load_first_live(shared, &self.cookie_ids).await {
            Ok(Some((id, record))) => {
                self.user = record.user().map(str::to_owned);
                // Only a session with a user has a device to record.
                self.device_due |= record.marked && self.user.is_some();
                self.live = Some((id, record));
                Ok(())
            }
            Ok(None) => {
                if !self.cookie_ids.is_empty() {
                    tracing::debug!("session: cookie names no live session; ignored");
                }
                Ok(())
            }
            Err(e) => {
                self.load_failed = true;
                self.fail(shared, e)
            }
        }
    }

    /// Loads the session if the request carries a cookie; used to expose the user before the
    /// handler runs.
    pub(crate) async fn preload(
        &mut self,
        shared: &Shared,
    ) -> Result<Option<String>, SessionError> {
        if self.cookie_ids.is_empty() {
            return Ok(None);
        }
        self.ensure_loaded(shared).await?;
        Ok(self.user.clone())
    }

    /// After the handler: writes the changes (one round trip), or refreshes the idle timeout of
    /// an untouched session on a successful response (one round trip). Returns what to do with
    /// the cookie, and whether the store failed during the request.
    pub(crate) async fn finish(&mut self, shared: &Shared, success: bool) -> (CookieAction, bool) {
        let (cookie, failed) = self.write(shared, success).await;
        if matches!(cookie, CookieAction::Set(_))
            && self.cookie_age.is_none()
            && let Some((_, record)) = &self.live
            && record.get(MAX_FIELD).is_some()
        {
            // A rotation: the new cookie keeps the session's own lifetime.
            self.cookie_age = time_left(record, number(record.get(EXP_FIELD)));
        }
        (cookie, failed)
    }

    /// Whether [`finish`](Self::finish) has nothing to do: no change, no device to record, no
    /// idle timeout to restart, the cookie kept. Then it would answer `(Keep, self.failed)`
    /// without a store call, and this answers `Some(self.failed)`; otherwise `None`.
    pub(crate) fn finished_without_store(&self, success: bool) -> Option<bool> {
        let idle = !self.destroyed
            && !self.load_failed
            && self.changes.is_empty()
            && (self.loaded || !success)
            && !self.device_due
            && self.cookie == CookieAction::Keep;
        idle.then_some(self.failed)
    }

    /// Writes what the request changed, with the client's details; see [`finish`](Self::finish).
    async fn write(&mut self, shared: &Shared, success: bool) -> (CookieAction, bool) {
        if self.destroyed {
            return (self.cookie.clone(), self.failed);
        }
        if self.load_failed {
            if !self.changes.is_empty() {
                tracing::warn!("session: not saved, the load failed earlier in this request");
            }
            return (CookieAction::Keep, self.failed);
        }
        if self.changes.is_empty() {
            if !self.loaded && success {
                // Untouched, but the cookie came: the session was used, restart its idle timer
                // (on the first candidate that is live).
                match load_first_live(shared, &self.cookie_ids).await {
                    Ok(Some((id, record))) if record.marked => {
                        self.device_due = record.user().is_some();
                        self.live = Some((id, record));
                    }
                    Ok(_) => {}
                    // The response is complete and nothing it relies on was lost.
                    Err(e) => {
                        tracing::warn!(error = %e, "session: could not refresh the idle timeout");
                    }
                }
            }
            // Nothing else to write: the device alone, if the store marked the session used
            // and the client has moved (at most once per last-seen interval).
            let mut device = Changes::default();
            if self.device_due {
                self.describe_client(&mut device);
            }
            if device.is_empty() {
                return (self.cookie.clone(), self.failed);
            }
            self.changes = device;
        }
        let mut changes = std::mem::take(&mut self.changes);
        self.describe_client(&mut changes);
        // The user's index scores sessions by absolute expiry: a session that gains a user, or
        // a new absolute lifetime, is (re-)indexed.
        let user = self.user.clone().filter(|_| {
            changes.set.contains_key(USER_FIELD) || changes.set.contains_key(MAX_FIELD)
        });
        let life = shared.life;
        let outcome = if let Some((id, record)) = &self.live {
            let key = id.key.clone();
            // An existing session gains a user: index it first, so that it is never live under
            // a user without being revocable. A revocation in between deletes the session and
            // the save below then finds it gone.
            // The absolute expiry the index scores it by: read only for a session (re-)indexed,
            // since most writes need none of the times.
            let exp = user.as_ref().and_then(|_| {
                let meta = record.meta();
                match changes.set.get(MAX_FIELD) {
                    Some(max) => number(meta.created)
                        .zip(number(Some(max)))
                        .map(|(created, max)| created.saturating_add(max)),
                    None => number(meta.exp),
                }
            });
            let own = own_max(record.get(MAX_FIELD), &changes);
            if changes.set.contains_key(MAX_FIELD) && self.cookie == CookieAction::Keep {
                // A new lifetime for the cookie too.
                self.cookie = CookieAction::Set(id.id.clone());
            }
            let indexed = match (&user, exp) {
                (Some(user), Some(exp)) => shared
                    .store
                    .index_user(user.clone(), key.clone(), exp, life)
                    .await
                    .map(|()| true),
                _ => Ok(false),
            };
            match indexed {
                Ok(indexed) => match shared.store.save(&key, changes, life).await {
                    Ok(Some(exp)) => {
                        self.cookie_age = own.and_then(|_| time_left(record, Some(exp)));
                        Ok(Some((key, exp, indexed)))
                    }
                    Ok(None) => {
                        // Destroyed, revoked or expired meanwhile: the write is dropped and no
                        // cookie is (re-)issued for it.
                        tracing::debug!("session: gone before its changes were saved; dropped");
                        if self.cookie != CookieAction::Keep {
                            self.cookie = CookieAction::Remove;
                        }
                        Ok(None)
                    }
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            }
        } else {
            // A new session, never under the id the client sent (no fixation). Its cookie is
            // only sent once it is indexed under its user (below). Created with a user, it
            // records its device (see `describe_client`).
            let device = |changes: &mut Changes| {
                if changes.set.contains_key(USER_FIELD) {
                    let device = self.device_with(new_handle()?);
                    changes.set.insert(DEVICE_FIELD.to_owned(), device.encode());
                }
                Ok(())
            };
            match SessionId::generate().and_then(|id| device(&mut changes).map(|()| id)) {
                Ok(id) => {
                    let key = id.storage_key();
                    let age = own_max(None, &changes).map(Duration::from_micros);
                    let changes = shared.transport.stamp(changes);
                    match shared.store.create(key.clone(), changes, life).await {
                        Ok(exp) => {
                            self.cookie = CookieAction::Set(id);
                            self.cookie_age = age;
                            Ok(Some((key, exp, false)))
                        }
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            }
        };
        match outcome {
            Ok(Some((key, exp, indexed))) => {
                if let Some(user) = user.filter(|_| !indexed)
                    && let Err(e) = shared.store.index_user(user, key.clone(), exp, life).await
                {
                    tracing::warn!(error = %e, "session: could not index the session under its user");
                    self.failed = true;
                    // Not revocable: the session must not be handed out, nor stay usable.
                    if let Err(e) = shared.store.delete(key).await {
                        tracing::warn!(error = %e, "session: could not delete an unindexed session");
                    }
                    self.live = None;
                    self.cookie = CookieAction::Keep;
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "session: could not save");
                self.failed = true;
                if matches!(self.cookie, CookieAction::Set(_)) && self.live.is_none() {
                    self.cookie = CookieAction::Keep;
                }
            }
        }
        (self.cookie.clone(), self.failed)
    }
}

impl State {
    /// Adds the client's details to a write, where they differ from what is stored: the write
    /// happens anyway, so they cost no round trip of their own.
    ///
    /// Only a session with a user records its device: a listing, the only place a device
    /// shows, lists a user's sessions, and the write that gives a session its user records
    /// the client of that write. A session without one stores no device and no handle, so
    /// every read of it carries one field less. The session that gains its user in this write
    /// draws its handle here (one stored with a device by an earlier release keeps its own).
    fn describe_client(&self, changes: &mut Changes) {
        let Some((_, record)) = &self.live else {
            return; // a new session: `write` records the device with the handle
        };
        let gains_user = changes.set.contains_key(USER_FIELD);
        if !gains_user && record.user().is_none() {
            return;
        }
        let stored = record.get(DEVICE_FIELD).unwrap_or_default();
        if stored.is_empty() && gains_user && record.user().is_none() {
            match new_handle() {
                Ok(handle) => {
                    let device = self.device_with(handle);
                    changes.set.insert(DEVICE_FIELD.to_owned(), device.encode());
                }
                // Listed under a handle derived from its storage key instead.
                Err(e) => tracing::warn!(error = %e, "session: no handle for its device"),
            }
            return;
        }
        // Compared as stored, without building either device: most writes change neither.
        // (A byte scan for the tabs: `splitn` costs several times as much on every write.)
        let tab = |s: &str| s.bytes().position(|b| b == b'\t');
        let after_handle = tab(stored).map_or("", |at| &stored[at + 1..]);
        let (stored_ip, stored_agent) = match tab(after_handle) {
            Some(at) => (&after_handle[..at], Some(&after_handle[at + 1..])),
            None => (after_handle, None),
        };
        let new_ip = self
            .visit
            .ip
            .is_some_and(|ip| stored_ip.parse::<IpAddr>() != Ok(ip));
        let new_agent = self
            .visit
            .user_agent_differs(stored_agent.unwrap_or_default());
        if !new_ip && !new_agent {
            return;
        }
        let stored = Device::parse(stored);
        let seen = self.device();
        let kept = |now: String, before: &str| {
            if now.is_empty() {
                before.to_owned()
            } else {
                now
            }
        };
        let device = Device {
            ip: kept(seen.ip, &stored.ip),
            user_agent: kept(seen.user_agent, &stored.user_agent),
            handle: stored.handle.clone(),
        };
        if device != stored {
            changes.set.insert(DEVICE_FIELD.to_owned(), device.encode());
        }
    }

    /// This request's client, as recorded (no handle).
    fn device(&self) -> Device {
        self.device_with(String::new())
    }

    /// This request's client, as recorded, under `handle`.
    fn device_with(&self, handle: String) -> Device {
        Device {
            handle,
            ip: self.visit.ip.map(|ip| ip.to_string()).unwrap_or_default(),
            user_agent: self.visit.user_agent().unwrap_or_default(),
        }
    }
}

fn number(v: Option<&str>) -> Option<u64> {
    v.and_then(|v| v.parse().ok())
}

/// The session's own absolute lifetime (µs): set by this write, else `stored`.
fn own_max(stored: Option<&str>, changes: &Changes) -> Option<u64> {
    let set = changes.set.get(MAX_FIELD).map(String::as_str);
    number(set.or(stored))
}

/// How long a stored session has left until `exp`, counted from its last use recorded (at most
/// one [`Lifetimes::seen_every`](super::Lifetimes::seen_every) ago): a cookie's `Max-Age`.
fn time_left(record: &Record, exp: Option<u64>) -> Option<Duration> {
    let now = number(record.get(SEEN_FIELD))?;
    Some(Duration::from_micros(exp?.saturating_sub(now)))
}

/// Loads (and marks used) the first of `ids` that names a live session of this layer's
/// transport: a planted id in front of the real one costs a round trip, not the session.
async fn load_first_live(
    shared: &Shared,
    ids: &[SessionId],
) -> Result<Option<(KeyedId, Record)>, SessionError> {
    for id in ids {
        let id = KeyedId::new(id.clone());
        if let Some(record) = shared.store.load(&id.key, shared.life).await? {
            if shared.transport.accepts(&record) {
                return Ok(Some((id, record)));
            }
            // The other transport's session (a cookie id sent as a token, or the reverse):
            // unknown here, left as it is.
            tracing::debug!("session: created by another transport; ignored");
        }
    }
    Ok(None)
}
