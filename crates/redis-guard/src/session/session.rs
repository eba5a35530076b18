//! [`Session`]: the handle handlers use.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Mutex;

use super::cookie::{CookieConfig, ReadCookie};
use super::id::SessionId;
use super::store::{Changes, EXP_FIELD, Lifetimes, RESERVED, Record, SessionStore, USER_FIELD};
use super::{FailurePolicy, SessionError};

/// Settings shared by every request of a layer.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) life: Lifetimes,
    pub(crate) cookie: CookieConfig,
    pub(crate) failure: FailurePolicy,
    pub(crate) expose_user: bool,
}

/// What the response must say about the cookie.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CookieAction {
    Keep,
    Set(SessionId),
    Remove,
}

#[derive(Debug)]
struct State {
    /// The well-formed ids from the request's cookies, in order (at most
    /// [`MAX_COOKIE_CANDIDATES`](super::MAX_COOKIE_CANDIDATES)).
    cookie_ids: Vec<SessionId>,
    loaded: bool,
    /// The live record and its id, once loaded (or created/rotated).
    live: Option<(SessionId, Record)>,
    changes: Changes,
    user: Option<String>,
    cookie: CookieAction,
    destroyed: bool,
    failed: bool,
    /// The load failed: nothing is written and no cookie is set for the rest of the request
    /// (the client's cookie may name a perfectly good session).
    load_failed: bool,
}

/// The current request's session: read and change it from a handler.
///
/// Nothing is read from the store until a method needs it (a request that never touches its
/// session costs no round trip for that), and changes are written once, after the handler,
/// field by field: two concurrent requests that change different keys both keep their change.
/// Values are stored as JSON.
///
/// With the `axum` feature, `Session` is an extractor; elsewhere take it from the request
/// extensions (`req.extensions().get::<Session>()`).
///
/// ```
/// use redis_guard::session::{Session, SessionError};
///
/// async fn visit(session: Session) -> Result<String, SessionError> {
///     let name: Option<String> = session.get("name").await?;
///     let visits = session.increment("visits", 1).await?;
///     Ok(format!("{} has visited {visits} times", name.as_deref().unwrap_or("someone")))
/// }
/// ```
#[derive(Clone)]
pub struct Session {
    shared: Arc<Shared>,
    state: Arc<Mutex<State>>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

/// Longest user id, in bytes.
const MAX_USER_LEN: usize = 256;

fn check_key(key: &str) -> Result<(), SessionError> {
    if key.starts_with(RESERVED) {
        return Err(SessionError::ReservedKey(key.to_owned()));
    }
    if key.is_empty() || key.len() > 256 {
        return Err(SessionError::InvalidKey(key.chars().take(64).collect()));
    }
    Ok(())
}

impl Session {
    pub(crate) fn new(shared: Arc<Shared>, cookie: ReadCookie) -> Self {
        let cookie_ids = match cookie {
            ReadCookie::Ids(ids) => ids,
            ReadCookie::Absent | ReadCookie::Malformed => Vec::new(),
        };
        Self {
            shared,
            state: Arc::new(Mutex::new(State {
                cookie_ids,
                loaded: false,
                live: None,
                changes: Changes::default(),
                user: None,
                cookie: CookieAction::Keep,
                destroyed: false,
                failed: false,
                load_failed: false,
            })),
        }
    }

    fn fail(&self, state: &mut State, e: SessionError) -> Result<(), SessionError> {
        state.failed = true;
        match self.shared.failure {
            FailurePolicy::Closed => Err(e),
            FailurePolicy::Open => {
                tracing::warn!(error = %e, "session store failed: continuing without a session");
                Ok(())
            }
        }
    }

    async fn ensure_loaded(&self, state: &mut State) -> Result<(), SessionError> {
        if state.loaded {
            return Ok(());
        }
        state.loaded = true;
        match self.load_first_live(&state.cookie_ids).await {
            Ok(Some((id, record))) => {
                state.user = record.user().map(str::to_owned);
                state.live = Some((id, record));
                Ok(())
            }
            Ok(None) => {
                if !state.cookie_ids.is_empty() {
                    tracing::debug!("session: cookie names no live session; ignored");
                }
                Ok(())
            }
            Err(e) => {
                state.load_failed = true;
                self.fail(state, e)
            }
        }
    }

    /// Loads (and marks used) the first of `ids` that names a live session: a planted id in
    /// front of the real one costs a round trip, not the session.
    async fn load_first_live(
        &self,
        ids: &[SessionId],
    ) -> Result<Option<(SessionId, Record)>, SessionError> {
        for id in ids {
            let loaded = self
                .shared
                .store
                .load(id.storage_key(), self.shared.life)
                .await?;
            if let Some(record) = loaded {
                return Ok(Some((id.clone(), record)));
            }
        }
        Ok(None)
    }

    /// The value under `key`, deserialized; `None` when absent.
    ///
    /// # Errors
    ///
    /// [`SessionError::Deserialize`] when the stored value is not a `T`; a store error when the
    /// session could not be loaded (with [`FailurePolicy::Closed`]).
    pub async fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, SessionError> {
        check_key(key)?;
        let mut state = self.state.lock().await;
        self.ensure_loaded(&mut state).await?;
        let raw = if let Some(v) = state.changes.set.get(key) {
            Some(v.clone())
        } else if state.changes.clear || state.changes.remove.contains(key) {
            None
        } else {
            state
                .live
                .as_ref()
                .and_then(|(_, r)| r.get(key))
                .map(str::to_owned)
        };
        raw.map(|v| {
            serde_json::from_str(&v).map_err(|source| SessionError::Deserialize {
                key: key.to_owned(),
                source,
            })
        })
        .transpose()
    }

    /// Stores `value` under `key` (written after the handler).
    ///
    /// # Errors
    ///
    /// A reserved or invalid key, a value that does not serialize, a destroyed session, or a
    /// store error while loading.
    pub async fn insert<T: Serialize>(&self, key: &str, value: &T) -> Result<(), SessionError> {
        check_key(key)?;
        let json = serde_json::to_string(value).map_err(|source| SessionError::Serialize {
            key: key.to_owned(),
            source,
        })?;
        let mut state = self.state.lock().await;
        self.ensure_loaded(&mut state).await?;
        if state.destroyed {
            return Err(SessionError::Destroyed);
        }
        state.changes.remove.remove(key);
        state.changes.set.insert(key.to_owned(), json);
        Ok(())
    }

    /// Removes `key`; returns whether it was there.
    ///
    /// # Errors
    ///
    /// A reserved or invalid key, or a store error while loading.
    pub async fn remove(&self, key: &str) -> Result<bool, SessionError> {
        check_key(key)?;
        let mut state = self.state.lock().await;
        self.ensure_loaded(&mut state).await?;
        let pending = state.changes.set.remove(key).is_some();
        let stored = !state.changes.clear
            && state
                .live
                .as_ref()
                .is_some_and(|(_, r)| r.get(key).is_some());
        if stored {
            state.changes.remove.insert(key.to_owned());
        }
        Ok(pending || stored)
    }

    /// Removes every key (the session, its id and its user stay).
    ///
    /// # Errors
    ///
    /// A store error while loading.
    pub async fn clear(&self) -> Result<(), SessionError> {
        let mut state = self.state.lock().await;
        self.ensure_loaded(&mut state).await?;
        state.changes.set.clear();
        state.changes.remove.clear();
        state.changes.clear = true;
        Ok(())
    }

    /// Adds `by` to the integer under `key` (0 when absent) and returns the new value. On a
    /// stored session this is one atomic `HINCRBY`, right away: concurrent increments all count.
    ///
    /// # Errors
    ///
    /// [`SessionError::NotAnInteger`] when the key holds something else; a reserved key; a store
    /// error.
    pub async fn increment(&self, key: &str, by: i64) -> Result<i64, SessionError> {
        check_key(key)?;
        let mut state = self.state.lock().await;
        self.ensure_loaded(&mut state).await?;
        if state.destroyed {
            return Err(SessionError::Destroyed);
        }
        let pending = state.changes.clear
            || state.changes.set.contains_key(key)
            || state.changes.remove.contains(key);
        if !pending && let Some((id, _)) = &state.live {
            let storage_key = id.storage_key();
            match self
                .shared
                .store
                .increment(storage_key, key.to_owned(), by, self.shared.life)
                .await
            {
                Ok(Some(value)) => {
                    if let Some((_, record)) = &mut state.live {
                        record.fields.insert(key.to_owned(), value.to_string());
                    }
                    return Ok(value);
                }
                // Destroyed or revoked meanwhile: carry on as a new session.
                Ok(None) => state.live = None,
                Err(e) => {
                    state.failed |= e.is_store_error();
                    return Err(e);
                }
            }
        }
        let current: i64 = match self.peek(&state, key) {
            None => 0,
            Some(v) => v
                .parse()
                .map_err(|_| SessionError::NotAnInteger(key.to_owned()))?,
        };
        let next = current
            .checked_add(by)
            .ok_or_else(|| SessionError::NotAnInteger(key.to_owned()))?;
        state.changes.remove.remove(key);
        state.changes.set.insert(key.to_owned(), next.to_string());
        Ok(next)
    }

    fn peek(&self, state: &State, key: &str) -> Option<String> {
        if let Some(v) = state.changes.set.get(key) {
            return Some(v.clone());
        }
        if state.changes.clear || state.changes.remove.contains(key) {
            return None;
        }
        state
            .live
            .as_ref()
            .and_then(|(_, r)| r.get(key))
            .map(str::to_owned)
    }

    /// Gives the session a new id, keeping its data, and ends the old id: call it when the user
    /// logs in or gains privileges, so an id planted or seen before cannot ride along.
    ///
    /// # Errors
    ///
    /// A store error, or no randomness for the new id.
    pub async fn cycle_id(&self) -> Result<(), SessionError> {
        let mut state = self.state.lock().await;
        self.ensure_loaded(&mut state).await?;
        let Some((old, record)) = state.live.take() else {
            // A session not stored yet gets a fresh id when it is.
            return Ok(());
        };
        let new = SessionId::generate()?;
        match self
            .shared
            .store
            .rotate(old.storage_key(), new.storage_key(), self.shared.life)
            .await
        {
            Ok(true) => {
                state.cookie = CookieAction::Set(new.clone());
                state.live = Some((new, record));
                Ok(())
            }
            Ok(false) => {
                // Gone meanwhile (expired, destroyed or revoked): whatever follows is a new,
                // anonymous session.
                state.user = None;
                Ok(())
            }
            Err(e) => {
                state.failed |= e.is_store_error();
                Err(e)
            }
        }
    }

    /// Ends the session now: deletes it from the store and sends a cookie that removes it from
    /// the browser. Later changes in this request are refused.
    ///
    /// # Errors
    ///
    /// A store error.
    pub async fn destroy(&self) -> Result<(), SessionError> {
        let mut state = self.state.lock().await;
        // Find which of the cookie's ids is the live session (and its user's index entry goes
        // with it in the store's delete).
        self.ensure_loaded(&mut state).await?;
        state.destroyed = true;
        state.changes = Changes::default();
        state.user = None;
        let id = state.live.take().map(|(id, _)| id);
        if id.is_some() || !state.cookie_ids.is_empty() {
            state.cookie = CookieAction::Remove;
        }
        if let Some(id) = id
            && let Err(e) = self.shared.store.delete(id.storage_key()).await
        {
            state.failed |= e.is_store_error();
            return Err(e);
        }
        Ok(())
    }

    /// Records that the session belongs to `user` (written after the handler), so that
    /// [`revoke_user`](Self::revoke_user) can end it and
    /// [`SessionStore::user_sessions`] lists it. The session is indexed under the user before
    /// the client gets its cookie: if indexing fails, no cookie is sent.
    ///
    /// # Errors
    ///
    /// [`SessionError::InvalidUser`] for an empty id or one longer than 256 bytes; a store error
    /// while loading.
    pub async fn set_user(&self, user: &str) -> Result<(), SessionError> {
        if user.is_empty() || user.len() > MAX_USER_LEN {
            return Err(SessionError::InvalidUser(user.len()));
        }
        let mut state = self.state.lock().await;
        self.ensure_loaded(&mut state).await?;
        if state.destroyed {
            return Err(SessionError::Destroyed);
        }
        state.user = Some(user.to_owned());
        state
            .changes
            .set
            .insert(USER_FIELD.to_owned(), user.to_owned());
        Ok(())
    }

    /// The user the session belongs to, if any.
    ///
    /// # Errors
    ///
    /// A store error while loading.
    pub async fn user(&self) -> Result<Option<String>, SessionError> {
        let mut state = self.state.lock().await;
        self.ensure_loaded(&mut state).await?;
        Ok(state.user.clone())
    }

    /// Ends every session of `user`, this one included if it is theirs ("log out everywhere",
    /// after a password change). Returns how many sessions were ended.
    ///
    /// # Errors
    ///
    /// A store error.
    pub async fn revoke_user(&self, user: &str) -> Result<usize, SessionError> {
        let n = self.shared.store.revoke_user(user.to_owned()).await?;
        let mut state = self.state.lock().await;
        if state.user.as_deref() == Some(user) {
            state.destroyed = true;
            state.live = None;
            state.changes = Changes::default();
            state.user = None;
            state.cookie = CookieAction::Remove;
        }
        Ok(n)
    }

    pub(crate) fn policy(&self) -> FailurePolicy {
        self.shared.failure
    }

    /// Loads the session if the request carries a cookie; used to expose the user before the
    /// handler runs.
    pub(crate) async fn preload(&self) -> Result<Option<String>, SessionError> {
        let mut state = self.state.lock().await;
        if state.cookie_ids.is_empty() {
            return Ok(None);
        }
        self.ensure_loaded(&mut state).await?;
        Ok(state.user.clone())
    }

    /// After the handler: writes the changes (one round trip), or refreshes the idle timeout of
    /// an untouched session on a successful response (one round trip). Returns what to do with
    /// the cookie, and whether the store failed during the request.
    pub(crate) async fn finish(&self, success: bool) -> (CookieAction, bool) {
        let mut state = self.state.lock().await;
        if state.destroyed {
            return (state.cookie.clone(), state.failed);
        }
        if state.load_failed {
            if !state.changes.is_empty() {
                tracing::warn!("session: not saved, the load failed earlier in this request");
            }
            return (CookieAction::Keep, state.failed);
        }
        if state.changes.is_empty() {
            if !state.loaded && success {
                // Untouched, but the cookie came: the session was used, restart its idle timer
                // (on the first candidate that is live).
                if let Err(e) = self.load_first_live(&state.cookie_ids).await {
                    // The response is complete and nothing it relies on was lost.
                    tracing::warn!(error = %e, "session: could not refresh the idle timeout");
                }
            }
            return (state.cookie.clone(), state.failed);
        }
        let changes = std::mem::take(&mut state.changes);
        let user = state
            .user
            .clone()
            .filter(|_| changes.set.contains_key(USER_FIELD));
        let life = self.shared.life;
        let outcome = if let Some((id, record)) = &state.live {
            let key = id.storage_key();
            // An existing session gains a user: index it first, so that it is never live under
            // a user without being revocable. A revocation in between deletes the session and
            // the save below then finds it gone.
            let exp = record.get(EXP_FIELD).and_then(|v| v.parse::<u64>().ok());
            let indexed = match (&user, exp) {
                (Some(user), Some(exp)) => self
                    .shared
                    .store
                    .index_user(user.clone(), key.clone(), exp, life)
                    .await
                    .map(|()| true),
                _ => Ok(false),
            };
            match indexed {
                Ok(indexed) => match self.shared.store.save(key.clone(), changes, life).await {
                    Ok(Some(exp)) => Ok(Some((key, exp, indexed))),
                    Ok(None) => {
                        // Destroyed, revoked or expired meanwhile: the write is dropped and no
                        // cookie is (re-)issued for it.
                        tracing::debug!("session: gone before its changes were saved; dropped");
                        if state.cookie != CookieAction::Keep {
                            state.cookie = CookieAction::Remove;
                        }
                        Ok(None)
                    }
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            }
        } else {
            // A new session, never under the id the client sent (no fixation). Its cookie is
            // only sent once it is indexed under its user (below).
            match SessionId::generate() {
                Ok(id) => {
                    let key = id.storage_key();
                    match self.shared.store.create(key.clone(), changes, life).await {
                        Ok(exp) => {
                            state.cookie = CookieAction::Set(id);
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
                    && let Err(e) = self
                        .shared
                        .store
                        .index_user(user, key.clone(), exp, life)
                        .await
                {
                    tracing::warn!(error = %e, "session: could not index the session under its user");
                    state.failed = true;
                    // Not revocable: the session must not be handed out, nor stay usable.
                    if let Err(e) = self.shared.store.delete(key).await {
                        tracing::warn!(error = %e, "session: could not delete an unindexed session");
                    }
                    state.live = None;
                    state.cookie = CookieAction::Keep;
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "session: could not save");
                state.failed = true;
                if matches!(state.cookie, CookieAction::Set(_)) && state.live.is_none() {
                    state.cookie = CookieAction::Keep;
                }
            }
        }
        (state.cookie.clone(), state.failed)
    }

    /// The session's cookie config.
    pub(crate) fn cookie_config(&self) -> &CookieConfig {
        &self.shared.cookie
    }
}

#[cfg(feature = "axum")]
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Session {
    type Rejection = (http::StatusCode, &'static str);

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Self>().cloned().ok_or_else(|| {
            tracing::error!("Session extractor used on a route without SessionLayer");
            (
                http::StatusCode::INTERNAL_SERVER_ERROR,
                "the session layer is not installed on this route",
            )
        })
    }
}
