//! Sessions as Redis hashes.

mod users;

use std::sync::{Arc, LazyLock};

use redis::Value;
use sha2::{Digest, Sha256};

use super::SessionError;
use super::redis_load::{HashRead, Hashes, LoadEntry, RedisClock};
use super::scripts::{
    DROP, ENSURE_FIELD, INCR, INDEX, LOAD, MOVE, RESTORE, REVOKE, SAVE, SETTLE, SWAP_FIELD,
    SaveEntry, TAKE, TAKE_FIELD, bad_reply, expiry, int, string, strings,
};
use super::store::{
    CSRF_FIELD, Changes, FieldChange, FieldOutcome, Lifetimes, Record, SessionInfo, SessionStore,
    Store, StoreFuture, USER_FIELD,
};
use crate::backend::{Coalescer, DEFAULT_BATCH, Entry, LuaScript as Script, RedisBackend};

/// Sessions in Redis: one hash per session, one field per key, so two concurrent requests that
/// change different keys both keep their change. A load whose idle refresh is not due is one
/// `HGETALL`, no script: the key's TTL follows the sooner of the idle and absolute deadlines,
/// so Redis's own expiry says the session is live, and the last use the hash records, against
/// Redis's clock, says whether the refresh is due. (The store learns Redis's clock from a
/// `TIME` sent with the read at most once a second: a process whose clock differs from
/// Redis's still refreshes on time.) Every other operation, and a load whose refresh is due
/// (after its plain read: two round trips), is one Lua script that enforces the idle and
/// absolute expiry with Redis `TIME`. Under load, the plain reads that arrive while two are out
/// wait for one to return and go together, one pipeline of `HGETALL`s (see
/// [`batch_size`](Self::batch_size)).
///
/// Keys: `<prefix>s:{<SHA-256 of the id>}` per session, `<prefix>u:{<SHA-256 of the user id>}`
/// per user (a sorted set of the user's session keys). Works on a single Redis, through a `bb8`
/// pool, and on a Redis Cluster (no operation touches two slots at once). The prefix, the timeout
/// per call and the connection come from the [`RedisBackend`]; a
/// [`RedisConnection`](crate::backend::RedisConnection) converts into one with the defaults.
///
/// ```no_run
/// use redis_guard::backend::{RedisBackend, RedisConnection};
/// use redis_guard::session::RedisSessionStore;
/// # async fn f() -> redis::RedisResult<()> {
/// let conn = RedisConnection::open("redis://127.0.0.1/").await?;
/// let store = RedisSessionStore::new(RedisBackend::new(conn).prefix("myapp:"));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisSessionStore {
    inner: Arc<Inner>,
}

#[derive(Clone, Debug)]
struct Inner {
    backend: RedisBackend,
    /// Sends the plain reads (`HGETALL`), coalescing those that arrive while reads are out.
    reads: Arc<Coalescer<HashRead, Hashes>>,
    /// Runs the load script, coalescing the loads that arrive while calls are in flight.
    loads: Arc<Coalescer<LoadEntry>>,
    /// Runs the save script, coalescing the same way.
    saves: Arc<Coalescer<SaveEntry>>,
    /// Redis's clock, as the plain reads estimate it.
    clock: Arc<RedisClock>,
    #[cfg(feature = "test-util")]
    between_revoke_steps: Option<Hook>,
}

/// A coalescer of `script` on `backend`, carrying at most `max` entries per call.
fn coalescer<E: Entry>(
    backend: &RedisBackend,
    script: &'static LazyLock<Script>,
    max: usize,
) -> Arc<Coalescer<E>> {
    Arc::new(Coalescer::new(
        backend.clone(),
        LazyLock::force(script),
        max,
    ))
}

/// The coalescer of the plain reads on `backend`, carrying at most `max` reads per call.
fn reads(backend: &RedisBackend, max: usize) -> Arc<Coalescer<HashRead, Hashes>> {
    Arc::new(Coalescer::with_form(backend.clone(), Hashes, max))
}

/// A test hook: runs between two steps of a multi-step operation.
#[cfg(feature = "test-util")]
#[derive(Clone)]
struct Hook(Arc<dyn Fn() -> super::store::BoxFuture<()> + Send + Sync>);

#[cfg(feature = "test-util")]
impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

impl RedisSessionStore {
    /// A store on `backend` (or on a connection, with the default prefix and timeout).
    #[must_use]
    pub fn new(backend: impl Into<RedisBackend>) -> Self {
        let backend = backend.into();
        Self {
            inner: Arc::new(Inner {
                reads: reads(&backend, DEFAULT_BATCH),
                loads: coalescer(&backend, &LOAD, DEFAULT_BATCH),
                saves: coalescer(&backend, &SAVE, DEFAULT_BATCH),
                clock: Arc::default(),
                backend,
                #[cfg(feature = "test-util")]
                between_revoke_steps: None,
            }),
        }
    }

    /// How many session loads, or saves, one call may carry (default 64; `1` turns coalescing
    /// off).
    ///
    /// A load whose refresh is not due is a plain read and runs no script at all (see the
    /// type's docs): it sends its `HGETALL` at once while fewer than two such reads are out;
    /// those that arrive while two are out queue, then go together in one pipeline as soon as
    /// one returns, each answered as if alone (a key Redis cannot read as a hash fails only its
    /// own load). The loads that do run the load script, and the saves, go to Redis at once
    /// while fewer than two calls of their script are in flight; those that arrive while two are
    /// out queue, then go together in one `EVALSHA` as soon as one returns. The script runs them
    /// one after the other, in arrival order, each exactly as it would run alone (expiry
    /// checks, the sliding idle timeout; a save never re-creates a session that is gone), and
    /// Redis pays its fixed cost per script call once for the lot. The backend's timeout counts
    /// from the moment a call is queued; one dropped or timed out while queued is never sent.
    /// On a Redis Cluster they queue per hash slot (a call's keys must share one). Logins,
    /// logouts and the atomic helpers are never coalesced.
    ///
    /// ```no_run
    /// use redis_guard::backend::RedisConnection;
    /// use redis_guard::session::RedisSessionStore;
    /// # async fn f() -> redis::RedisResult<()> {
    /// let conn = RedisConnection::open("redis://127.0.0.1/").await?;
    /// let one_call_per_load = RedisSessionStore::new(conn).batch_size(1);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn batch_size(mut self, max: usize) -> Self {
        let inner = Arc::make_mut(&mut self.inner);
        inner.reads = reads(&inner.backend, max);
        inner.loads = coalescer(&inner.backend, &LOAD, max);
        inner.saves = coalescer(&inner.backend, &SAVE, max);
        self
    }

    /// The backend: connection, prefix and timeout.
    #[must_use]
    pub fn backend(&self) -> &RedisBackend {
        &self.inner.backend
    }

    /// A test seam (feature `test-util`): `hook` runs inside
    /// [`revoke_user`](Self::revoke_user), after it has taken the user's index and before it
    /// deletes the sessions, so a test can land a login "between the steps".
    #[cfg(feature = "test-util")]
    #[must_use]
    pub fn between_revoke_steps<F>(mut self, hook: impl Fn() -> F + Send + Sync + 'static) -> Self
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let hook = move || -> super::store::BoxFuture<()> { Box::pin(hook()) };
        Arc::make_mut(&mut self.inner).between_revoke_steps = Some(Hook(Arc::new(hook)));
        self
    }

    /// The Redis key of the session with storage key `storage_key`.
    #[must_use]
    pub fn session_key(&self, storage_key: &str) -> String {
        self.inner.backend.key(&["s"], storage_key)
    }

    /// The Redis key of `user`'s session index.
    #[must_use]
    pub fn user_key(&self, user: &str) -> String {
        self.inner
            .backend
            .key(&["u"], &format!("{:x}", Sha256::digest(user.as_bytes())))
    }

    /// Runs `script` on `key` with ARGV = shift, idle, `args…`, under the timeout.
    fn run(
        &self,
        script: &'static LazyLock<Script>,
        key: String,
        idle: u64,
        args: Vec<String>,
    ) -> StoreFuture<Value> {
        let inner = Arc::clone(&self.inner);
        let mut argv = Vec::with_capacity(args.len() + 1);
        argv.push(idle.to_string());
        argv.extend(args);
        Box::pin(async move { Ok(inner.backend.eval(script, &[key], &argv).await?) })
    }

    /// Runs `script` on the session under `storage_key`, with its idle timeout.
    fn on_session(
        &self,
        script: &'static LazyLock<Script>,
        storage_key: &str,
        life: Lifetimes,
        args: Vec<String>,
    ) -> StoreFuture<Value> {
        self.run(script, self.session_key(storage_key), life.idle_us(), args)
    }

    /// Runs `save.lua` for the session under `storage_key` (coalesced with the saves that
    /// arrive while calls are in flight).
    fn save_call(
        &self,
        storage_key: &str,
        mode: &'static str,
        changes: Changes,
        life: Lifetimes,
    ) -> StoreFuture<Value> {
        let saves = Arc::clone(&self.inner.saves);
        let entry = SaveEntry::new(self.session_key(storage_key), mode, changes, life);
        Box::pin(async move { Ok(saves.call(entry).await?) })
    }

    /// Deletes the session under `storage_key` outright (no script: no liveness to check).
    async fn del_session(&self, storage_key: &str) -> Result<(), SessionError> {
        self.query(redis::cmd("DEL").arg(self.session_key(storage_key)).clone())
            .await
            .map(drop)
    }

    /// `op` on a clone of the store, boxed as [`Store`] methods return it.
    fn detached<T, F>(&self, op: impl FnOnce(Self) -> F) -> StoreFuture<T>
    where
        F: Future<Output = Result<T, SessionError>> + Send + 'static,
    {
        Box::pin(op(self.clone()))
    }

    fn query(&self, cmd: redis::Cmd) -> StoreFuture<Value> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { Ok(inner.backend.query(&cmd).await?) })
    }
}

impl crate::sealed::Sealed for RedisSessionStore {}

impl SessionStore for RedisSessionStore {}

#[allow(private_interfaces)] // see `Store`
impl Store for RedisSessionStore {
    fn load(&self, key: &str, life: Lifetimes) -> StoreFuture<Option<Record>> {
        let inner = Arc::clone(&self.inner);
        let key = self.session_key(key);
        Box::pin(async move {
            let (reads, loads, clock) = (&inner.reads, &inner.loads, &inner.clock);
            super::redis_load::load(&inner.backend, reads, loads, clock, key, life).await
        })
    }

    fn create(&self, key: String, changes: Changes, life: Lifetimes) -> StoreFuture<u64> {
        let call = self.save_call(&key, "create", changes, life);
        Box::pin(async move {
            expiry(&call.await?)?.ok_or_else(|| bad_reply("create returned nil".into()))
        })
    }

    fn save(&self, key: &str, changes: Changes, life: Lifetimes) -> StoreFuture<Option<u64>> {
        let call = self.save_call(key, "update", changes, life);
        Box::pin(async move { expiry(&call.await?) })
    }

    fn delete(&self, key: String) -> StoreFuture<()> {
        self.detached(move |this| async move {
            let user = this.run(&DROP, this.session_key(&key), 0, vec![]).await?;
            if let Value::Nil = user {
                return Ok(());
            }
            this.unindex(&string(user)?, vec![key]).await
        })
    }

    fn rotate(&self, old: String, new: String, life: Lifetimes) -> StoreFuture<bool> {
        // The two session keys and the user's index may live on three cluster slots, so this is
        // four steps, ordered so that a crash between any two leaves no session or a session
        // that is indexed, never an unrevocable one:
        //   1. take (read and delete) the old session;
        //   2. index the new id next to the old one, refused if the old id has left the index
        //      (a revocation took it): the session then simply ends;
        //   3. restore the data under the new id;
        //   4. drop the old id from the index; if a revocation took the index after step 2,
        //      delete the restored session.
        self.detached(move |this| async move {
            let taken = this.on_session(&TAKE, &old, life, vec![]).await?;
            let data: Vec<String> = match taken {
                Value::Nil => return Ok(false),
                // The CSRF token is privilege-bound: it stays behind.
                v => strings(v)?
                    .chunks(2)
                    .filter(|pair| pair[0] != CSRF_FIELD)
                    .flatten()
                    .cloned()
                    .collect(),
            };
            let user = data
                .chunks(2)
                .find(|pair| pair[0] == USER_FIELD)
                .and_then(|pair| pair.get(1).cloned());
            let ids = vec![old.clone(), new.clone()];
            if let Some(user) = &user {
                let moved = this.run(&MOVE, this.user_key(user), 0, ids.clone()).await?;
                if int(&moved)? != Some(1) {
                    return Ok(false);
                }
            }
            let restored = this.on_session(&RESTORE, &new, life, data).await?;
            let restored = expiry(&restored)?.is_some();
            let Some(user) = user else {
                return Ok(restored);
            };
            if !restored {
                this.unindex(&user, ids).await?;
                return Ok(false);
            }
            let settled = this.run(&SETTLE, this.user_key(&user), 0, ids).await?;
            if int(&settled)? != Some(1) {
                this.del_session(&new).await?;
                return Ok(false);
            }
            Ok(true)
        })
    }

    fn index_user(
        &self,
        user: String,
        key: String,
        expires: u64,
        life: Lifetimes,
    ) -> StoreFuture<()> {
        self.detached(move |this| async move {
            let cap = life.per_user.max(1);
            let others = strings(
                this.run(
                    &INDEX,
                    this.user_key(&user),
                    0,
                    vec![key.clone(), expires.to_string(), cap.to_string()],
                )
                .await?,
            )?;
            if others.is_empty() {
                return Ok(());
            }
            // Over the cap: entries of sessions that are gone (destroyed, expired) go first, so
            // they never push out a live session. O(cap) probes, only when the cap is reached.
            let dead = this.dead(&others, life.idle_us()).await?;
            let popped = this.trim(&user, cap, key, dead).await?;
            // Sessions pushed out of the index by the cap end now, so that revoke_user still
            // reaches every live session of the user.
            for storage_key in popped {
                this.del_session(&storage_key).await?;
            }
            Ok(())
        })
    }

    fn end_user(&self, user: String) -> StoreFuture<usize> {
        self.detached(move |this| async move {
            let members = strings(this.run(&REVOKE, this.user_key(&user), 0, vec![]).await?)?;
            #[cfg(feature = "test-util")]
            if let Some(Hook(hook)) = &this.inner.between_revoke_steps {
                hook().await;
            }
            // One DEL per session: on a cluster they live on different slots. A failure here
            // leaves some sessions live and out of the index; the error reaches the caller, who
            // must not report the revocation as done.
            for storage_key in &members {
                this.del_session(storage_key).await?;
            }
            Ok(members.len())
        })
    }

    fn check(&self) -> Result<(), crate::ConfigError> {
        self.inner.backend.config_problem().map_or(Ok(()), Err)
    }

    fn list_user(&self, user: String) -> StoreFuture<Vec<SessionInfo>> {
        self.detached(move |this| async move { this.listing(&user).await })
    }

    fn end_session(&self, user: String, handle: String) -> StoreFuture<bool> {
        self.detached(move |this| async move { this.revoke_handle(&user, &handle).await })
    }

    fn end_user_except(&self, user: String, keep: String) -> StoreFuture<usize> {
        self.detached(move |this| async move { this.revoke_others(&user, &keep).await })
    }

    fn change_field(
        &self,
        key: String,
        field: String,
        change: FieldChange,
        life: Lifetimes,
    ) -> StoreFuture<Option<FieldOutcome>> {
        let name = field.clone();
        let (script, args) = match &change {
            FieldChange::Take => (&TAKE_FIELD, vec![field]),
            FieldChange::Increment(by) => (&INCR, vec![field, by.to_string()]),
            FieldChange::Ensure(value) => (&ENSURE_FIELD, vec![field, value.clone()]),
            FieldChange::Swap { expected, new } => {
                let present = if expected.is_some() { "1" } else { "0" };
                let expected = expected.clone().unwrap_or_default();
                (
                    &SWAP_FIELD,
                    vec![field, present.to_owned(), expected, new.clone()],
                )
            }
        };
        let call = self.on_session(script, &key, life, args);
        Box::pin(async move {
            let v = match call.await {
                Ok(Value::Nil) => return Ok(None),
                Ok(v) => v,
                Err(SessionError::Backend(e)) if e.code() == Some("RG_NOT_INTEGER") => {
                    return Err(SessionError::NotAnInteger(name));
                }
                Err(e) => return Err(e),
            };
            let outcome = match change {
                FieldChange::Take => FieldOutcome {
                    set: false,
                    value: strings(v)?.into_iter().next(),
                },
                FieldChange::Ensure(_) => FieldOutcome {
                    set: false,
                    value: Some(string(v)?),
                },
                FieldChange::Increment(_) => FieldOutcome {
                    set: false,
                    value: int(&v)?.map(|n| n.to_string()),
                },
                FieldChange::Swap { .. } => {
                    let mut reply = strings(v)?.into_iter();
                    let set = match reply.next().as_deref() {
                        Some("1") => true,
                        Some("0") => false,
                        other => {
                            return Err(bad_reply(format!("compare-and-set replied {other:?}")));
                        }
                    };
                    FieldOutcome {
                        set,
                        value: reply.next(),
                    }
                }
            };
            Ok(Some(outcome))
        })
    }
}
