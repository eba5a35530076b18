//! Sessions as Redis hashes.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Script, Value};
use sha2::{Digest, Sha256};

use super::SessionError;
use super::store::{BoxFuture, Changes, Lifetimes, Record, SessionInfo, SessionStore, USER_FIELD};
use crate::backend::{BackendError, RedisBackend};

fn script(body: &str) -> Script {
    Script::new(&format!("{}\n{body}", include_str!("scripts/prelude.lua")))
}

static LOAD: LazyLock<Script> = LazyLock::new(|| script(include_str!("scripts/load.lua")));
static SAVE: LazyLock<Script> = LazyLock::new(|| script(include_str!("scripts/save.lua")));
static INCR: LazyLock<Script> = LazyLock::new(|| script(include_str!("scripts/incr.lua")));
static TAKE: LazyLock<Script> = LazyLock::new(|| script(include_str!("scripts/take.lua")));
static RESTORE: LazyLock<Script> = LazyLock::new(|| script(include_str!("scripts/restore.lua")));
static INDEX: LazyLock<Script> = LazyLock::new(|| script(include_str!("scripts/index.lua")));
static LIST: LazyLock<Script> = LazyLock::new(|| script(include_str!("scripts/list.lua")));
static TRIM: LazyLock<Script> = LazyLock::new(|| script(include_str!("scripts/trim.lua")));
static REVOKE: LazyLock<Script> = LazyLock::new(|| script(include_str!("scripts/revoke.lua")));
static MOVE: LazyLock<Script> = LazyLock::new(|| script(include_str!("scripts/move.lua")));
static SETTLE: LazyLock<Script> = LazyLock::new(|| script(include_str!("scripts/settle.lua")));
static DROP: LazyLock<Script> = LazyLock::new(|| script(include_str!("scripts/drop.lua")));
static PROBE: LazyLock<Script> = LazyLock::new(|| script(include_str!("scripts/probe.lua")));

/// The idle timeout `probe` uses where none is known (listing): only the absolute expiry and
/// the key's TTL (which follows the idle timeout) decide.
const NO_IDLE: u64 = 1 << 53;

/// Sessions in Redis: one hash per session, one field per key, so two concurrent requests that
/// change different keys both keep their change. Each operation is one Lua script (one round
/// trip) that also enforces the idle and absolute expiry with Redis `TIME`.
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
    #[cfg(feature = "test-util")]
    between_revoke_steps: Option<Hook>,
}

/// A test hook: runs between two steps of a multi-step operation.
#[cfg(feature = "test-util")]
#[derive(Clone)]
struct Hook(Arc<dyn Fn() -> BoxFuture<()> + Send + Sync>);

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
        Self {
            inner: Arc::new(Inner {
                backend: backend.into(),
                #[cfg(feature = "test-util")]
                between_revoke_steps: None,
            }),
        }
    }

    /// The backend: connection, prefix and timeout.
    #[must_use]
    pub fn backend(&self) -> &RedisBackend {
        &self.inner.backend
    }

    /// A test seam (feature `test-util`): `hook` runs inside
    /// [`revoke_user`](SessionStore::revoke_user), after it has taken the user's index and
    /// before it deletes the sessions, so a test can land a login "between the steps".
    #[cfg(feature = "test-util")]
    #[must_use]
    pub fn between_revoke_steps(
        mut self,
        hook: impl Fn() -> BoxFuture<()> + Send + Sync + 'static,
    ) -> Self {
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
    ) -> BoxFuture<Result<Value, SessionError>> {
        let inner = Arc::clone(&self.inner);
        let mut argv = Vec::with_capacity(args.len() + 1);
        argv.push(idle.to_string());
        argv.extend(args);
        Box::pin(async move { Ok(inner.backend.eval(script, &[key], &argv).await?) })
    }

    /// Of `members` (storage keys), those whose session is gone: one probe each, concurrently.
    async fn dead(&self, members: &[String], idle: u64) -> Result<Vec<String>, SessionError> {
        let probes = members
            .iter()
            .map(|m| self.run(&PROBE, self.session_key(m), idle, vec![]));
        let live = futures_util::future::try_join_all(probes).await?;
        Ok(members
            .iter()
            .zip(live)
            .filter(|(_, v)| !matches!(v, Value::Int(1)))
            .map(|(m, _)| m.clone())
            .collect())
    }

    /// Runs `trim.lua` on `user`'s index: removes `gone`, then pops past `cap` (0: no cap),
    /// never `keep`. Returns the popped members.
    async fn trim(
        &self,
        user: &str,
        cap: u32,
        keep: String,
        gone: Vec<String>,
    ) -> Result<Vec<String>, SessionError> {
        let mut args = vec![cap.to_string(), keep];
        args.extend(gone);
        strings(self.run(&TRIM, self.user_key(user), 0, args).await?)
    }

    fn query(&self, cmd: redis::Cmd) -> BoxFuture<Result<Value, SessionError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { Ok(inner.backend.query(&cmd).await?) })
    }
}

fn bad_reply(what: String) -> SessionError {
    BackendError::BadReply(what).into()
}

fn strings(v: Value) -> Result<Vec<String>, SessionError> {
    redis::from_redis_value(v).map_err(|e| bad_reply(e.to_string()))
}

fn int(v: &Value) -> Result<Option<i64>, SessionError> {
    match v {
        Value::Nil => Ok(None),
        Value::Int(i) => Ok(Some(*i)),
        other => Err(bad_reply(format!("expected an integer, got {other:?}"))),
    }
}

fn expiry(v: &Value) -> Result<Option<u64>, SessionError> {
    int(v)?
        .map(|i| u64::try_from(i).map_err(|_| bad_reply(format!("negative expiry {i}"))))
        .transpose()
}

impl crate::sealed::Sealed for RedisSessionStore {}

impl SessionStore for RedisSessionStore {
    fn load(
        &self,
        key: String,
        life: Lifetimes,
    ) -> BoxFuture<Result<Option<Record>, SessionError>> {
        let call = self.run(&LOAD, self.session_key(&key), life.idle_us(), vec![]);
        Box::pin(async move {
            match call.await? {
                Value::Nil => Ok(None),
                v => Ok(Some(Record::from_flat(strings(v)?))),
            }
        })
    }

    fn create(
        &self,
        key: String,
        changes: Changes,
        life: Lifetimes,
    ) -> BoxFuture<Result<u64, SessionError>> {
        let call = self.run(
            &SAVE,
            self.session_key(&key),
            life.idle_us(),
            save_args("create", &changes, life),
        );
        Box::pin(async move {
            expiry(&call.await?)?.ok_or_else(|| bad_reply("create returned nil".into()))
        })
    }

    fn save(
        &self,
        key: String,
        changes: Changes,
        life: Lifetimes,
    ) -> BoxFuture<Result<Option<u64>, SessionError>> {
        let call = self.run(
            &SAVE,
            self.session_key(&key),
            life.idle_us(),
            save_args("update", &changes, life),
        );
        Box::pin(async move { expiry(&call.await?) })
    }

    fn increment(
        &self,
        key: String,
        field: String,
        by: i64,
        life: Lifetimes,
    ) -> BoxFuture<Result<Option<i64>, SessionError>> {
        let call = self.run(
            &INCR,
            self.session_key(&key),
            life.idle_us(),
            vec![field.clone(), by.to_string()],
        );
        Box::pin(async move {
            match call.await {
                Ok(v) => int(&v),
                Err(SessionError::Backend(e)) if e.code() == Some("RG_NOT_INTEGER") => {
                    Err(SessionError::NotAnInteger(field))
                }
                Err(e) => Err(e),
            }
        })
    }

    fn delete(&self, key: String) -> BoxFuture<Result<(), SessionError>> {
        let this = self.clone();
        Box::pin(async move {
            let user = this.run(&DROP, this.session_key(&key), 0, vec![]).await?;
            if let Value::Nil = user {
                return Ok(());
            }
            let user: String =
                redis::from_redis_value(user).map_err(|e| bad_reply(e.to_string()))?;
            this.trim(&user, 0, String::new(), vec![key])
                .await
                .map(drop)
        })
    }

    fn rotate(
        &self,
        old: String,
        new: String,
        life: Lifetimes,
    ) -> BoxFuture<Result<bool, SessionError>> {
        // The two session keys and the user's index may live on three cluster slots, so this is
        // four steps, ordered so that a crash between any two leaves no session or a session
        // that is indexed, never an unrevocable one:
        //   1. take (read and delete) the old session;
        //   2. index the new id next to the old one, refused if the old id has left the index
        //      (a revocation took it): the session then simply ends;
        //   3. restore the data under the new id;
        //   4. drop the old id from the index; if a revocation took the index after step 2,
        //      delete the restored session.
        let this = self.clone();
        Box::pin(async move {
            let taken = this
                .run(&TAKE, this.session_key(&old), life.idle_us(), vec![])
                .await?;
            let data = match taken {
                Value::Nil => return Ok(false),
                v => strings(v)?,
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
            let restored = this
                .run(&RESTORE, this.session_key(&new), life.idle_us(), data)
                .await?;
            let restored = expiry(&restored)?.is_some();
            let Some(user) = user else {
                return Ok(restored);
            };
            if !restored {
                this.trim(&user, 0, String::new(), ids).await?;
                return Ok(false);
            }
            let settled = this.run(&SETTLE, this.user_key(&user), 0, ids).await?;
            if int(&settled)? != Some(1) {
                this.query(redis::cmd("DEL").arg(this.session_key(&new)).clone())
                    .await?;
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
    ) -> BoxFuture<Result<(), SessionError>> {
        let this = self.clone();
        Box::pin(async move {
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
                this.query(
                    redis::cmd("DEL")
                        .arg(this.session_key(&storage_key))
                        .clone(),
                )
                .await?;
            }
            Ok(())
        })
    }

    fn revoke_user(&self, user: String) -> BoxFuture<Result<usize, SessionError>> {
        let this = self.clone();
        Box::pin(async move {
            let members = strings(this.run(&REVOKE, this.user_key(&user), 0, vec![]).await?)?;
            #[cfg(feature = "test-util")]
            if let Some(Hook(hook)) = &this.inner.between_revoke_steps {
                hook().await;
            }
            // One DEL per session: on a cluster they live on different slots. A failure here
            // leaves some sessions live and out of the index; the error reaches the caller, who
            // must not report the revocation as done.
            for storage_key in &members {
                this.query(redis::cmd("DEL").arg(this.session_key(storage_key)).clone())
                    .await?;
            }
            Ok(members.len())
        })
    }

    fn check(&self) -> Result<(), String> {
        self.inner.backend.config_problem().map_or(Ok(()), Err)
    }

    fn user_sessions(&self, user: String) -> BoxFuture<Result<Vec<SessionInfo>, SessionError>> {
        let this = self.clone();
        Box::pin(async move {
            let flat = strings(this.run(&LIST, this.user_key(&user), 0, vec![]).await?)?;
            let members: Vec<String> = flat.iter().step_by(2).cloned().collect();
            let dead = this.dead(&members, NO_IDLE).await?;
            if !dead.is_empty() {
                this.trim(&user, 0, String::new(), dead.clone()).await?;
            }
            Ok(flat
                .chunks(2)
                .filter(|pair| !dead.contains(&pair[0]))
                .filter_map(|pair| {
                    let [key, us] = pair else { return None };
                    let us: u64 = us.parse().ok()?;
                    Some(SessionInfo {
                        storage_key: key.clone(),
                        expires_in: Duration::from_micros(us),
                    })
                })
                .collect())
        })
    }
}

/// ARGV after shift and idle for `save.lua`.
fn save_args(mode: &str, changes: &Changes, life: Lifetimes) -> Vec<String> {
    let mut args = vec![
        life.max_us().to_string(),
        mode.to_owned(),
        if changes.clear { "1" } else { "0" }.to_owned(),
        changes.set.len().to_string(),
    ];
    for (k, v) in &changes.set {
        args.push(k.clone());
        args.push(v.clone());
    }
    args.extend(changes.remove.iter().cloned());
    args
}
