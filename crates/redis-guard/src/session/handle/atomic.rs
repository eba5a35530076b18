//! The atomic helpers of [`Session`]: [`increment`](Session::increment),
//! [`take`](Session::take), [`ensure`](Session::ensure) and
//! [`compare_and_set`](Session::compare_and_set), each one step of the store on a stored session.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Session, check_key};
use crate::backend::BackendError;
use crate::session::SessionError;
use crate::session::state::State;
use crate::session::store::{FieldChange, StoreFuture, incremented};

/// What a one-step store operation found.
enum Stored<T> {
    /// Done in the store.
    Done(T),
    /// No stored session to do it in (none yet, or it ended meanwhile): the caller resolves it
    /// in this request's pending changes, as for a new session.
    Local,
}

fn serialize<T: Serialize + ?Sized>(key: &str, value: &T) -> Result<String, SessionError> {
    serde_json::to_string(value).map_err(|source| SessionError::Serialize {
        key: key.to_owned(),
        source,
    })
}

fn deserialize<T: DeserializeOwned>(key: &str, raw: &str) -> Result<T, SessionError> {
    serde_json::from_str(raw).map_err(|source| SessionError::Deserialize {
        key: key.to_owned(),
        source,
    })
}

impl Session {
    /// Runs `op` on the stored session, unless `field` has a pending change in this request
    /// (then the request's own view wins) or no session is stored. A session that ended
    /// meanwhile is forgotten (`Local`): what follows is a new session, as after `increment`.
    async fn in_store<T>(
        &self,
        state: &mut State,
        field: &str,
        op: impl FnOnce(String) -> StoreFuture<Option<T>>,
    ) -> Result<Stored<T>, SessionError> {
        if state.destroyed {
            return Err(SessionError::Destroyed);
        }
        let pending = state.changes.clear
            || state.changes.set.contains_key(field)
            || state.changes.remove.contains(field);
        let Some((id, _)) = state.live.as_ref().filter(|_| !pending) else {
            return Ok(Stored::Local);
        };
        match op(id.key.clone()).await {
            Ok(Some(out)) => {
                // A write like any other: the device is recorded with it (a session with a
                // user).
                state.device_due |= state.user.is_some();
                Ok(Stored::Done(out))
            }
            Ok(None) => {
                state.live = None;
                Ok(Stored::Local)
            }
            Err(e) => {
                state.failed |= e.is_store_error();
                Err(e)
            }
        }
    }

    /// Records `value` as what the stored session holds under `field` now (`None`: absent).
    fn remember(state: &mut State, field: &str, value: Option<&str>) {
        if let Some((_, record)) = &mut state.live {
            match value {
                Some(v) => record.fields.insert(field.to_owned(), v.to_owned()),
                None => record.fields.remove(field),
            }
        }
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
        let mut state = self.loaded().await?;
        let (store, life) = (&self.shared.store, self.shared.life);
        let counted = self
            .in_store(&mut state, key, |storage_key| {
                store.change_field(
                    storage_key,
                    key.to_owned(),
                    FieldChange::Increment(by),
                    life,
                )
            })
            .await?;
        if let Stored::Done(counted) = counted {
            let value = counted.value.unwrap_or_default();
            let next = value
                .parse()
                .map_err(|_| BackendError::BadReply(format!("an increment replied {value:?}")))?;
            Self::remember(&mut state, key, Some(&value));
            return Ok(next);
        }
        let next = incremented(state.peek(key), by, key)?;
        state.changes.remove.remove(key);
        state.changes.set.insert(key.to_owned(), next.to_string());
        Ok(next)
    }

    /// Reads and removes `key` in one step: of two requests that take the same key at the same
    /// moment, exactly one gets the value. Made for flash messages (shown once, even when two
    /// tabs load at once).
    ///
    /// On a stored session this is one atomic store operation, right away (one round trip; none
    /// when the key was absent when the session was loaded). A key changed earlier in this
    /// request is resolved in the request itself (its removal is written after the handler).
    /// A session that ended meanwhile counts as a new one: `Ok(None)`.
    ///
    /// The value is removed even when it does not deserialize into `T`.
    ///
    /// ```
    /// use redis_guard::session::{Session, SessionError};
    ///
    /// async fn after_login(session: Session) -> Result<(), SessionError> {
    ///     session.insert("flash", &"Welcome back!").await
    /// }
    ///
    /// async fn page(session: Session) -> Result<String, SessionError> {
    ///     let flash: Option<String> = session.take("flash").await?;
    ///     Ok(flash.unwrap_or_default())
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// A reserved or invalid key; [`SessionError::Destroyed`] after
    /// [`destroy`](Self::destroy); [`SessionError::Deserialize`] when the value is not a `T`; a
    /// store error.
    pub async fn take<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, SessionError> {
        check_key(key)?;
        let raw = self.take_raw(key).await?;
        raw.map(|v| deserialize(key, &v)).transpose()
    }

    async fn take_raw(&self, key: &str) -> Result<Option<String>, SessionError> {
        let mut state = self.loaded().await?;
        let absent_at_load = state
            .live
            .as_ref()
            .is_some_and(|(_, r)| r.get(key).is_none());
        if !absent_at_load {
            let (store, life) = (&self.shared.store, self.shared.life);
            let taken = self
                .in_store(&mut state, key, |storage_key| {
                    store.change_field(storage_key, key.to_owned(), FieldChange::Take, life)
                })
                .await?;
            if let Stored::Done(taken) = taken {
                Self::remember(&mut state, key, None);
                return Ok(taken.value);
            }
        }
        let value = state.peek(key).map(str::to_owned);
        state.remove_pending(key);
        Ok(value)
    }

    /// Stores `make()` under `key` unless the key holds a value, and returns the value the key
    /// holds afterwards. Of concurrent requests that `ensure` the same key of one session,
    /// exactly one stores its value and every one returns that value.
    ///
    /// On a stored session this is one atomic store operation (one round trip; none when the
    /// key already held a value when the session was loaded, or was set earlier in this
    /// request). On a session not stored yet (no cookie) the value is a pending change, stored
    /// with the new session after the handler as usual.
    ///
    /// ```
    /// use redis_guard::session::{Session, SessionError};
    ///
    /// async fn theme(session: Session) -> Result<String, SessionError> {
    ///     session.ensure("theme", || "light".to_owned()).await
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// A reserved or invalid key; a value that does not serialize; [`SessionError::Destroyed`]
    /// after [`destroy`](Self::destroy); [`SessionError::Deserialize`] when the stored value
    /// is not a `T`; a store error.
    pub async fn ensure<T>(&self, key: &str, make: impl FnOnce() -> T) -> Result<T, SessionError>
    where
        T: Serialize + DeserializeOwned,
    {
        check_key(key)?;
        let raw = self.ensure_raw(key, || serialize(key, &make())).await?;
        deserialize(key, &raw)
    }

    /// [`ensure`](Self::ensure) on the stored text of `field` (reserved fields allowed).
    pub(crate) async fn ensure_raw(
        &self,
        field: &str,
        make: impl FnOnce() -> Result<String, SessionError>,
    ) -> Result<String, SessionError> {
        let mut state = self.loaded().await?;
        if state.destroyed {
            return Err(SessionError::Destroyed);
        }
        if let Some(value) = state.peek(field) {
            return Ok(value.to_owned());
        }
        let value = make()?;
        let (store, life) = (&self.shared.store, self.shared.life);
        let ensured = self
            .in_store(&mut state, field, |storage_key| {
                let ensure = FieldChange::Ensure(value.clone());
                store.change_field(storage_key, field.to_owned(), ensure, life)
            })
            .await?;
        if let Stored::Done(ensured) = ensured {
            // The store names the value that won (always: Ensure leaves one in the field).
            let won = ensured.value.unwrap_or(value);
            Self::remember(&mut state, field, Some(&won));
            return Ok(won);
        }
        state.changes.remove.remove(field);
        state.changes.set.insert(field.to_owned(), value.clone());
        Ok(value)
    }

    /// The stored text of `field` as this request sees it (reserved fields allowed).
    pub(crate) async fn peek_raw(&self, field: &str) -> Result<Option<String>, SessionError> {
        Ok(self.loaded().await?.peek(field).map(str::to_owned))
    }

    /// Stores `new` under `key` if the key holds `expected` (`None`: if it is absent), and
    /// returns whether it did. Of concurrent requests that compare-and-set one key with the
    /// same `expected`, exactly one succeeds.
    ///
    /// It compares **serialized JSON**: the stored text with `serde_json::to_string(expected)`.
    /// Use types whose serialization is deterministic (no `HashMap`s, whose key order varies;
    /// a `BTreeMap` is fine).
    ///
    /// On a stored session this is one atomic store operation, right away (one round trip),
    /// and a failed attempt refreshes what [`get`](Self::get) returns for the key, so a retry
    /// loop sees the current value. A key changed earlier in this request is compared with that
    /// change; a session not stored yet (or ended meanwhile) compares with what this request
    /// holds, and the value is written after the handler.
    ///
    /// ```
    /// use redis_guard::session::{Session, SessionError};
    ///
    /// /// Moves a checkout from "cart" to "paid" once, however often the button is pressed.
    /// async fn pay(session: Session) -> Result<bool, SessionError> {
    ///     session
    ///         .compare_and_set("step", Some(&"cart".to_owned()), &"paid".to_owned())
    ///         .await
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// A reserved or invalid key; a value that does not serialize; [`SessionError::Destroyed`]
    /// after [`destroy`](Self::destroy); a store error.
    pub async fn compare_and_set<T: Serialize>(
        &self,
        key: &str,
        expected: Option<&T>,
        new: &T,
    ) -> Result<bool, SessionError> {
        check_key(key)?;
        let expected = expected.map(|v| serialize(key, v)).transpose()?;
        let new = serialize(key, new)?;
        let mut state = self.loaded().await?;
        let (store, life) = (&self.shared.store, self.shared.life);
        let swapped = self
            .in_store(&mut state, key, |storage_key| {
                let (expected, new) = (expected.clone(), new.clone());
                let swap = FieldChange::Swap { expected, new };
                store.change_field(storage_key, key.to_owned(), swap, life)
            })
            .await?;
        if let Stored::Done(swap) = swapped {
            Self::remember(&mut state, key, swap.value.as_deref());
            return Ok(swap.set);
        }
        if state.peek(key) != expected.as_deref() {
            return Ok(false);
        }
        state.changes.remove.remove(key);
        state.changes.set.insert(key.to_owned(), new);
        Ok(true)
    }
}
