//! [`Session`]: the handle handlers use.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Mutex;

use super::cookie::CookieConfig;
use super::cookie_header::ReadCookie;
use super::id::{KeyedId, SessionId};
use super::shared::{Shared, Visit};
use super::state::{CookieAction, State};
use super::store::{CSRF_FIELD, Changes, IDLE_FIELD, MAX_FIELD, RESERVED, USER_FIELD};
use super::token::Wire;
use super::{FailurePolicy, SessionError};
use crate::served::SessionMark;

mod atomic;
mod devices;

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
    /// What the response cache learns of this request (see [`SessionMark`]).
    mark: SessionMark,
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
    pub(crate) fn new(shared: Arc<Shared>, cookie: ReadCookie, visit: Visit) -> Self {
        let mark = SessionMark::new(!matches!(cookie, ReadCookie::Absent));
        Self {
            shared,
            state: Arc::new(Mutex::new(State::new(cookie, visit))),
            mark,
        }
    }

    /// What the response cache learns of this request: whether it carried a session and
    /// whether the handler used it.
    pub(crate) fn mark(&self) -> &SessionMark {
        &self.mark
    }

    /// The state, locked, with the session loaded.
    async fn loaded(&self) -> Result<tokio::sync::MutexGuard<'_, State>, SessionError> {
        self.mark.touch();
        let mut state = self.state.lock().await;
        state.ensure_loaded(&self.shared).await?;
        Ok(state)
    }

    /// The value under `key`, deserialized; `None` when absent.
    ///
    /// # Errors
    ///
    /// [`SessionError::Deserialize`] when the stored value is not a `T`; a store error when the
    /// session could not be loaded (with [`FailurePolicy::Closed`]).
    pub async fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, SessionError> {
        check_key(key)?;
        // Decoded under the lock, from the value as loaded: no copy of its text.
        let state = self.loaded().await?;
        state
            .peek(key)
            .map(|v| {
                serde_json::from_str(v).map_err(|source| SessionError::Deserialize {
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
        let mut state = self.loaded().await?;
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
        Ok(self.loaded().await?.remove_pending(key))
    }

    /// Removes every key (the session, its id and its user stay).
    ///
    /// # Errors
    ///
    /// A store error while loading.
    pub async fn clear(&self) -> Result<(), SessionError> {
        let mut state = self.loaded().await?;
        state.changes.set.clear();
        state.changes.remove.clear();
        state.changes.clear = true;
        Ok(())
    }

    /// Gives the session a new id, keeping its data, and ends the old id: call it when the user
    /// logs in or gains privileges, so an id planted or seen before cannot ride along. With a
    /// header [`Transport`](super::Transport) the new token goes back in the response header.
    ///
    /// The CSRF token stays with the old id (the store's rotation does not carry it, so this
    /// costs no write of its own): the next [`csrf_token`](Self::csrf_token) draws a new one.
    ///
    /// # Errors
    ///
    /// A store error, or no randomness for the new id.
    pub async fn cycle_id(&self) -> Result<(), SessionError> {
        let mut state = self.loaded().await?;
        // A token drawn earlier in this request belongs to the privileges before the change.
        state.changes.set.remove(CSRF_FIELD);
        let Some((old, record)) = state.live.take() else {
            // A session not stored yet gets a fresh id when it is.
            return Ok(());
        };
        let new = KeyedId::new(SessionId::generate()?);
        match self
            .shared
            .store
            .rotate(old.key, new.key.clone(), self.shared.life)
            .await
        {
            Ok(true) => {
                let mut record = record;
                record.fields.remove(CSRF_FIELD);
                state.cookie = CookieAction::Set(new.id.clone());
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
    /// the browser (with a header [`Transport`](super::Transport), nothing is sent: the token
    /// just stops working). Later changes in this request are refused.
    ///
    /// # Errors
    ///
    /// A store error.
    pub async fn destroy(&self) -> Result<(), SessionError> {
        // Find which of the cookie's ids is the live session (and its user's index entry goes
        // with it in the store's delete).
        let mut state = self.loaded().await?;
        state.destroyed = true;
        state.changes = Changes::default();
        state.user = None;
        let id = state.live.take().map(|(id, _)| id);
        if id.is_some() || !state.cookie_ids.is_empty() {
            state.cookie = CookieAction::Remove;
        }
        if let Some(id) = id
            && let Err(e) = self.shared.store.delete(id.key).await
        {
            state.failed |= e.is_store_error();
            return Err(e);
        }
        Ok(())
    }

    /// Ends the session as [`destroy`](Self::destroy) does, then carries on with a new, empty,
    /// anonymous session for the rest of the request: log out and still leave a message for
    /// the next page. The new session is stored, under a fresh id, only if something is written
    /// to it; otherwise the cookie is removed.
    ///
    /// ```
    /// use redis_guard::session::{Session, SessionError};
    ///
    /// async fn logout(session: Session) -> Result<(), SessionError> {
    ///     session.flush().await?;
    ///     session.insert("flash", &"You have been logged out.").await
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// A store error.
    pub async fn flush(&self) -> Result<(), SessionError> {
        self.destroy().await?;
        self.mark.touch();
        self.state.lock().await.restart();
        Ok(())
    }

    /// Records that the session belongs to `user` (written after the handler), so that
    /// [`revoke_user`](Self::revoke_user) can end it and
    /// [`RedisSessionStore::user_sessions`](super::RedisSessionStore::user_sessions) lists it. The
    /// session is indexed under the user before the client gets its cookie: if indexing fails, no
    /// cookie is sent.
    ///
    /// A privilege change: the session's CSRF token is dropped (in the same write), so a token
    /// handed out before is refused after it and the next
    /// [`csrf_token`](Self::csrf_token) draws a new one.
    ///
    /// # Errors
    ///
    /// [`SessionError::InvalidUser`] for an empty id or one longer than 256 bytes; a store error
    /// while loading.
    pub async fn set_user(&self, user: &str) -> Result<(), SessionError> {
        if user.is_empty() || user.len() > MAX_USER_LEN {
            return Err(SessionError::InvalidUser(user.len()));
        }
        let mut state = self.loaded().await?;
        if state.destroyed {
            return Err(SessionError::Destroyed);
        }
        state.user = Some(user.to_owned());
        state.remove_pending(CSRF_FIELD);
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
        let state = self.loaded().await?;
        Ok(state.user.clone())
    }

    /// Ends every session of `user`, this one included if it is theirs ("log out everywhere",
    /// after a password change). Returns how many sessions were ended.
    ///
    /// # Errors
    ///
    /// A store error.
    pub async fn revoke_user(&self, user: &str) -> Result<usize, SessionError> {
        let n = self.shared.store.end_user(user.to_owned()).await?;
        self.mark.touch();
        let mut state = self.state.lock().await;
        if state.user.as_deref() == Some(user) {
            state.end();
        }
        Ok(n)
    }

    /// Gives this session its own idle timeout (written after the handler), in place of the
    /// layer's, at most the layer's [`ceiling`](super::SessionLayerBuilder::lifetime_ceiling)
    /// (longer ones are cut to it). It counts from the session's last use, on every later
    /// request too.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::session::{Session, SessionError};
    ///
    /// // "Remember me": a week idle and 30 days in all for this session only.
    /// async fn remember(session: Session) -> Result<(), SessionError> {
    ///     session.set_idle_timeout(Duration::from_secs(7 * 86_400)).await?;
    ///     session.set_max_lifetime(Duration::from_secs(30 * 86_400)).await
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// [`SessionError::InvalidLifetime`] for zero; [`SessionError::Destroyed`]; a store error
    /// while loading.
    pub async fn set_idle_timeout(&self, idle: Duration) -> Result<(), SessionError> {
        self.set_own(IDLE_FIELD, "idle timeout", idle).await
    }

    /// Gives this session its own absolute lifetime (written after the handler), counted from
    /// its creation, in place of the layer's, at most the layer's
    /// [`ceiling`](super::SessionLayerBuilder::lifetime_ceiling) (longer ones are cut to it).
    /// The cookie then carries `Max-Age` (the time left), so the browser keeps it across
    /// restarts; a lifetime that has already passed ends the session. See
    /// [`set_idle_timeout`](Self::set_idle_timeout) for an example.
    ///
    /// # Errors
    ///
    /// [`SessionError::InvalidLifetime`] for zero; [`SessionError::Destroyed`]; a store error
    /// while loading.
    pub async fn set_max_lifetime(&self, max: Duration) -> Result<(), SessionError> {
        self.set_own(MAX_FIELD, "absolute lifetime", max).await
    }

    async fn set_own(
        &self,
        field: &str,
        what: &'static str,
        d: Duration,
    ) -> Result<(), SessionError> {
        if d.is_zero() {
            return Err(SessionError::InvalidLifetime(what));
        }
        let us = d.min(self.shared.life.ceiling).as_micros();
        let mut state = self.loaded().await?;
        if state.destroyed {
            return Err(SessionError::Destroyed);
        }
        state.changes.set.insert(field.to_owned(), us.to_string());
        Ok(())
    }

    /// `Max-Age` for the cookie this request sets, when the session has its own lifetime.
    pub(crate) async fn cookie_age(&self) -> Option<Duration> {
        self.state.lock().await.cookie_age
    }

    pub(crate) fn policy(&self) -> FailurePolicy {
        self.shared.failure
    }

    /// The layer's own answer for `rejection` (its hook's, else the default).
    pub(crate) fn rejected(&self, rejection: super::Rejection) -> http::Response<bytes::Bytes> {
        super::rejection::answer(&self.shared, rejection)
    }

    /// Loads the session if the request carries a cookie; used to expose the user before the
    /// handler runs.
    pub(crate) async fn preload(&self) -> Result<Option<String>, SessionError> {
        self.mark.touch();
        self.state.lock().await.preload(&self.shared).await
    }

    /// After the handler: see [`State::finish`].
    pub(crate) async fn finish(&self, success: bool) -> (CookieAction, bool) {
        self.state.lock().await.finish(&self.shared, success).await
    }

    /// [`finish`](Self::finish)'s answer when it has nothing to do and the state is free
    /// (see [`State::finished_without_store`]): whether the store failed during the request,
    /// the cookie kept. `None`: run `finish`.
    pub(crate) fn finished_at_once(&self, success: bool) -> Option<bool> {
        self.state.try_lock().ok()?.finished_without_store(success)
    }

    /// The session's cookie config.
    pub(crate) fn cookie_config(&self) -> &CookieConfig {
        &self.shared.cookie
    }

    /// How the session's id travels.
    pub(crate) fn transport(&self) -> &Wire {
        &self.shared.transport
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
