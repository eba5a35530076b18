//! [`RedisBackend`]: the Redis component every layer runs on.

use std::cell::Cell;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

#[cfg(feature = "test-util")]
use super::ManualClock;
use super::breaker::{Circuit, probe_while_open};
use super::deadline::within;
use super::{BackendError, Breaker, BreakerState, LuaScript, RedisConnection};

/// Default key prefix: every key redis-guard writes starts with `rg:`.
pub(crate) const DEFAULT_PREFIX: &str = "rg:";

/// Default time to wait for Redis, per call.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

/// Redis as the layers use it: a [`RedisConnection`], a key prefix, a timeout per call and a
/// circuit [`Breaker`]. The limiter and the session store both take one, so one Redis is
/// configured once:
///
/// ```no_run
/// use std::time::Duration;
/// use redis_guard::backend::{Breaker, RedisBackend, RedisConnection};
/// use redis_guard::rate_limit::RedisLimiter;
/// use redis_guard::session::RedisSessionStore;
/// # async fn f() -> redis::RedisResult<()> {
/// let redis = RedisBackend::new(RedisConnection::open("redis://127.0.0.1/").await?)
///     .prefix("myapp:")
///     .timeout(Duration::from_millis(50))
///     .breaker(Breaker::new().failures(5).cool_down(Duration::from_secs(1)));
/// let limiter = RedisLimiter::new(redis.clone());
/// let sessions = RedisSessionStore::new(redis);
/// # Ok(()) }
/// ```
///
/// A [`RedisConnection`] converts into a backend with the defaults, so
/// `RedisLimiter::new(conn)` works too. Cheap to clone: clones share the connection.
///
/// Scripts run with `EVALSHA`; when Redis answers `NOSCRIPT` (after a restart, a failover or
/// `SCRIPT FLUSH`) the same call runs as `EVAL` with the script's source, which caches it
/// again. A script is never re-run after any other error, so a call that may have counted is
/// never counted twice.
///
/// Every call goes through the backend's circuit [`Breaker`] (on by default): after five calls
/// in a row found Redis unreachable or too slow, calls fail at once with
/// [`BackendError::CircuitOpen`] until a probe finds Redis back.
#[derive(Clone, Debug)]
pub struct RedisBackend {
    inner: Arc<Settings>,
}

#[derive(Clone, Debug)]
struct Settings {
    conn: RedisConnection,
    prefix: String,
    timeout: Duration,
    /// The circuit breaker: one circuit for a server, one per master of a cluster (so a dead
    /// master stops only the calls to its own slots). Shared by every clone, and by backends
    /// derived from it with the other setters.
    breaker: Arc<[Circuit]>,
    #[cfg(feature = "test-util")]
    shift: Option<ManualClock>,
    /// Whether `shift` replaces Redis `TIME` (from [`FROZEN_ORIGIN_US`]) rather than adds to it.
    #[cfg(feature = "test-util")]
    frozen: bool,
}

/// Where a [frozen](RedisBackend::frozen_time) Redis clock starts, in µs since the Unix epoch: a
/// fixed instant, so that every backend frozen on one [`ManualClock`] reads the same time.
#[cfg(feature = "test-util")]
const FROZEN_ORIGIN_US: u64 = 1_000_000_000_000_000;

impl RedisBackend {
    /// A backend on `conn` with the default prefix (`rg:`), timeout (100 ms)
    /// and circuit breaker ([`Breaker::new`]).
    #[must_use]
    pub fn new(conn: RedisConnection) -> Self {
        let breaker = circuits(&conn, Breaker::new(), DEFAULT_PREFIX);
        Self {
            inner: Arc::new(Settings {
                conn,
                prefix: DEFAULT_PREFIX.to_owned(),
                timeout: DEFAULT_TIMEOUT,
                breaker,
                #[cfg(feature = "test-util")]
                shift: None,
                #[cfg(feature = "test-util")]
                frozen: false,
            }),
        }
    }

    /// Prepends `prefix` to every key (default `rg:`): to share one Redis between
    /// applications.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        let settings = Arc::make_mut(&mut self.inner);
        settings.prefix = prefix.into();
        for circuit in settings.breaker.iter() {
            circuit.relabel(&settings.prefix);
        }
        self
    }

    /// How long one call may wait for Redis (default 100 ms). It must be more than
    /// zero: a zero timeout would fail every call, so the layer builders refuse it.
    ///
    /// A call that gets no answer fails with [`BackendError::Timeout`] after the timeout and at
    /// most 1 ms later (plus the time the system takes to schedule the waiting task), never
    /// sooner. One timer thread of the process keeps the deadlines of every call in flight, so a
    /// call costs no timer of its own, and times out wherever it is polled: on any Tokio
    /// runtime, including one built without the timer. The deadline runs on the system's
    /// monotonic clock, not on Tokio's: a paused Tokio clock does not move it.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        Arc::make_mut(&mut self.inner).timeout = timeout;
        self
    }

    /// Replaces the circuit breaker (default [`Breaker::new`]; [`Breaker::off`] turns it off).
    /// The new breaker starts closed, and is shared by the clones made from here on.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_guard::backend::{Breaker, RedisBackend, RedisConnection};
    /// # async fn f() -> redis::RedisResult<()> {
    /// let conn = RedisConnection::open("redis://127.0.0.1/").await?;
    /// let redis = RedisBackend::new(conn).breaker(Breaker::new().failures(10));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn breaker(mut self, breaker: Breaker) -> Self {
        let circuits = circuits(&self.inner.conn, breaker, &self.inner.prefix);
        Arc::make_mut(&mut self.inner).breaker = circuits;
        self
    }

    /// Where the circuit breaker stands now: [`BreakerState::Closed`] while calls go to Redis.
    /// On a Redis Cluster, where each master has a circuit of its own, the worst of them: `Open`
    /// if any is open, else `HalfOpen` if any is, else `Closed`.
    #[must_use]
    pub fn breaker_state(&self) -> BreakerState {
        let states = self.inner.breaker.iter().map(Circuit::state);
        let (mut open, mut half) = (false, false);
        for state in states {
            open |= state == BreakerState::Open;
            half |= state == BreakerState::HalfOpen;
        }
        match (open, half) {
            (true, _) => BreakerState::Open,
            (false, true) => BreakerState::HalfOpen,
            (false, false) => BreakerState::Closed,
        }
    }

    /// Where the circuit of the calls on `key` stands: on a Redis Cluster, that of the master
    /// serving its slot (so a dead master does not stop the calls to the others); else the
    /// one circuit.
    #[cfg(any(feature = "rate-limit", feature = "session", feature = "cache"))]
    pub(crate) fn breaker_state_of(&self, key: Option<&str>) -> BreakerState {
        let circuits = &self.inner.breaker;
        let index = key.map_or(0, |key| self.inner.conn.circuit_of(key.as_bytes()));
        circuits[index.min(circuits.len() - 1)].state()
    }

    /// A test seam (feature `test-util`): adds `clock`'s reading to Redis `TIME` in every script,
    /// so a test lets an hour pass with [`ManualClock::advance`] instead of sleeping. The clock is
    /// still Redis' own; the shift only moves it forward.
    #[cfg(feature = "test-util")]
    #[must_use]
    pub fn time_shift(self, clock: ManualClock) -> Self {
        self.test_clock(clock, false)
    }

    /// A test seam (feature `test-util`) for answers exact to the microsecond: the scripts read
    /// `clock` (from a fixed origin) instead of Redis `TIME`, so Redis time stands still between
    /// calls as the memory backend's [`ManualClock`] does, and moves only with
    /// [`ManualClock::advance`]. Backends frozen on one clock share one time, as replicas on one
    /// Redis do. Instead of [`time_shift`](Self::time_shift), whichever is called last.
    ///
    /// ```
    /// use redis_guard::backend::{ManualClock, RedisBackend, RedisConnection};
    /// # async fn f(conn: RedisConnection) {
    /// let clock = ManualClock::new();
    /// let backend = RedisBackend::new(conn).frozen_time(clock.clone());
    /// clock.advance(std::time::Duration::from_millis(300)); // Redis time moves 300 ms, exactly
    /// # }
    /// ```
    #[cfg(feature = "test-util")]
    #[must_use]
    pub fn frozen_time(self, clock: ManualClock) -> Self {
        self.test_clock(clock, true)
    }

    /// The scripts' clock moved by `clock`, or read from it when `frozen`.
    #[cfg(feature = "test-util")]
    fn test_clock(mut self, clock: ManualClock, frozen: bool) -> Self {
        let settings = Arc::make_mut(&mut self.inner);
        settings.shift = Some(clock);
        settings.frozen = frozen;
        self
    }

    /// The connection.
    #[must_use]
    pub fn connection(&self) -> &RedisConnection {
        &self.inner.conn
    }

    /// The timeout per call.
    #[must_use]
    pub fn call_timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Why this backend cannot work as configured, or `None`.
    pub(crate) fn config_problem(&self) -> Option<crate::ConfigError> {
        let timeout = self.inner.timeout;
        timeout.is_zero().then(|| {
            crate::ConfigError::new(
                crate::ConfigErrorKind::Store,
                format!(
                    "the Redis timeout is {timeout:?}, so no call could ever succeed; use at least 1 ms (default {DEFAULT_TIMEOUT:?})"
                ),
            )
            .with_setting("RedisBackend::timeout")
            .with_debug_value(timeout)
        })
    }

    /// The key `<prefix><part>:<part>…:{<tag>}`: the braces make `tag` the Cluster hash tag.
    pub(crate) fn key(&self, parts: &[&str], tag: &str) -> String {
        let mut key = String::with_capacity(
            self.inner.prefix.len()
                + parts.iter().map(|p| p.len() + 1).sum::<usize>()
                + tag.len()
                + 2,
        );
        key.push_str(&self.inner.prefix);
        for part in parts {
            key.push_str(part);
            key.push(':');
        }
        key.push('{');
        key.push_str(tag);
        key.push('}');
        key
    }

    /// The offset added to Redis `TIME` by the test seam, in µs (0 in production). In-process
    /// timers that stand for Redis time (the deny cache) add it too.
    pub(crate) fn shift_us(&self) -> u64 {
        #[cfg(feature = "test-util")]
        if let Some(clock) = &self.inner.shift {
            return super::micros(super::Clock::now(clock));
        }
        0
    }

    /// The time the scripts read when the test seam froze it ([`frozen_time`](Self::frozen_time)),
    /// in µs; `None` (always, in production) when they read Redis `TIME`.
    pub(crate) fn frozen_us(&self) -> Option<u64> {
        #[cfg(feature = "test-util")]
        if self.inner.frozen {
            return Some(FROZEN_ORIGIN_US.saturating_add(self.shift_us()));
        }
        None
    }

    /// A call of `script` on `keys`, with ARGV[1] = the time shift (µs added to Redis `TIME`,
    /// 0 in production); the caller adds the rest of ARGV.
    pub(crate) fn script<'a>(
        &'a self,
        script: &'a LuaScript,
        keys: &[impl AsRef<str>],
    ) -> ScriptCall<'a> {
        self.script_sized(script, keys, 0, 0)
    }

    /// [`script`](Self::script) with room for `args` more arguments of `bytes` bytes in all,
    /// so that the command is written without growing its buffers.
    pub(crate) fn script_sized<'a>(
        &'a self,
        script: &'a LuaScript,
        keys: &[impl AsRef<str>],
        args: usize,
        bytes: usize,
    ) -> ScriptCall<'a> {
        // EVALSHA, the hash, the key count, the keys, the shift, then `args`.
        let key_bytes: usize = keys.iter().map(|k| k.as_ref().len()).sum();
        let (args, bytes) = (4 + keys.len() + args, 7 + 40 + 4 + key_bytes + 20 + bytes);
        // A small command: this thread's spare one, else one that will fit any small one.
        let small = args <= SPARE_ARGS && bytes <= SPARE_BYTES;
        let mut cmd = match small {
            true => SPARE
                .take()
                .unwrap_or_else(|| redis::Cmd::with_capacity(SPARE_ARGS, SPARE_BYTES)),
            false => redis::Cmd::with_capacity(args, bytes),
        };
        cmd.arg("EVALSHA");
        cmd.arg(script.get_hash()).arg(keys.len());
        for key in keys {
            cmd.arg(key.as_ref());
        }
        // ARGV[1]: the shift, or `=<µs>`, a frozen time the scripts read instead of `TIME`.
        match self.frozen_us() {
            Some(us) => cmd.arg(format!("={us}")),
            None => cmd.arg(self.shift_us()),
        };
        // The keys of one call share a slot on a cluster: the first one names the master.
        let circuit = keys
            .first()
            .map_or(0, |key| self.inner.conn.circuit_of(key.as_ref().as_bytes()));
        ScriptCall {
            backend: self,
            script,
            cmd,
            circuit,
            deadline: None,
            small,
        }
    }

    /// Runs `script` with `keys` and ARGV = the time shift, then `args`, under the timeout.
    #[cfg_attr(not(feature = "session"), allow(dead_code))]
    pub(crate) async fn eval(
        &self,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
    ) -> Result<Value, BackendError> {
        let mut call = self.script(script, keys);
        for arg in args {
            call.arg(arg.as_str());
        }
        call.run().await
    }

    /// Runs one plain command (routed by its key on a cluster), under the timeout.
    #[cfg_attr(not(feature = "session"), allow(dead_code))]
    pub(crate) fn query<'a>(
        &'a self,
        cmd: &'a redis::Cmd,
    ) -> impl Future<Output = Result<Value, BackendError>> + Send + 'a {
        self.query_until(cmd, None)
    }

    /// [`query`](Self::query), answered by `deadline` (`None`: the timeout from now).
    pub(crate) async fn query_until(
        &self,
        cmd: &redis::Cmd,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Value, BackendError> {
        // The key of a plain command comes right after its name.
        let circuit = match cmd.args_iter().nth(1) {
            Some(redis::Arg::Simple(key)) => self.inner.conn.circuit_of(key),
            _ => 0,
        };
        let call = pin!(self.inner.conn.query(cmd));
        self.guarded(call, BackendError::Redis, circuit, deadline)
            .await
    }

    /// Runs `pipe`, whose commands all name `key` (one slot of a cluster), in one round trip
    /// under the breaker and the timeout, as [`query`](Self::query) runs a command: the replies
    /// as an array, in order (`EXEC`'s for an atomic one).
    #[cfg(any(feature = "rate-limit", feature = "cache"))]
    #[cfg_attr(not(feature = "cache"), allow(dead_code))]
    pub(crate) async fn pipeline(
        &self,
        pipe: &redis::Pipeline,
        key: &str,
    ) -> Result<Value, BackendError> {
        self.pipeline_until(pipe, key, None).await
    }

    /// [`pipeline`](Self::pipeline), answered by `deadline` (`None`: the timeout from now).
    #[cfg(any(feature = "rate-limit", feature = "cache"))]
    pub(crate) async fn pipeline_until(
        &self,
        pipe: &redis::Pipeline,
        key: &str,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Value, BackendError> {
        let circuit = self.inner.conn.circuit_of(key.as_bytes());
        let call = pin!(self.inner.conn.pipeline(pipe));
        self.guarded(call, BackendError::Redis, circuit, deadline)
            .await
    }

    /// Runs `pipe` (not atomic) in one round trip under the breaker and the timeout (answered
    /// by `deadline`; `None`: the timeout from now), as an array of each command's reply as
    /// Redis sent it (an error reply among them as a [`Value::ServerError`], for the caller to
    /// check). On a cluster the commands must share `key`'s slot.
    #[cfg(feature = "session")]
    pub(crate) async fn pipeline_replies(
        &self,
        pipe: &redis::Pipeline,
        key: &str,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Value, BackendError> {
        let circuit = self.inner.conn.circuit_of(key.as_bytes());
        let call = pin!(self.inner.conn.pipeline_replies(pipe));
        self.guarded(call, BackendError::Redis, circuit, deadline)
            .await
    }

    /// Whether the scripts read Redis `TIME` as it is: no test seam shifts or freezes it. Only
    /// then does Redis' key expiry run on the scripts' clock.
    #[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
    pub(crate) fn reads_redis_time(&self) -> bool {
        #[cfg(feature = "test-util")]
        if self.inner.shift.is_some() {
            return false;
        }
        true
    }

    /// Makes `call` (a future not polled yet: nothing is sent before the breaker allows it)
    /// under the circuit breaker and the timeout (until `deadline`, or the timeout from now);
    /// `error` classifies the errors Redis returns. The only deadline of the call, kept by the
    /// process' one timer thread ([`within`]), not a timer of its own: the connections
    /// redis-guard makes have redis-rs' own response timeout off.
    /// The outcome is recorded, never retried.
    /// `circuit` is the one of the master the call goes to ([`RedisConnection::circuit_of`] its
    /// key; 0 outside a cluster).
    ///
    /// The call is pinned where its caller made it: a call's future is large (redis-rs' futures
    /// nest inside it), and every move of it is a copy of all of it.
    async fn guarded<F: Future<Output = redis::RedisResult<Value>>>(
        &self,
        call: Pin<&mut F>,
        error: fn(redis::RedisError) -> BackendError,
        circuit: usize,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Value, BackendError> {
        let circuits = &self.inner.breaker;
        let index = circuit.min(circuits.len() - 1);
        let permit = circuits[index].admit()?;
        let timeout = self.inner.timeout;
        let deadline = deadline.map_or_else(|| Instant::now() + timeout, tokio::time::Instant::into_std);
        // `call` is a pinned reference: the deadline moves a pointer, not the call.
        let outcome = match within(call, deadline).await {
            Some(reply) => reply.map_err(error),
            None => Err(BackendError::Timeout(timeout)),
        };
        if permit.record(&outcome) {
            self.spawn_probe(index);
        }
        outcome
    }

    /// Starts the background probe of circuit `index`, which has just opened: requests never
    /// wait for a probe. It holds a clone of the connection, and the circuits only weakly.
    fn spawn_probe(&self, index: usize) {
        let circuits = Arc::downgrade(&self.inner.breaker);
        let conn = self.inner.conn.clone();
        let timeout = self.inner.timeout;
        tokio::spawn(probe_while_open(circuits, index, move || {
            let conn = conn.clone();
            async move {
                match tokio::time::timeout(timeout, conn.probe(index)).await {
                    Ok(Ok(_)) => true,
                    Ok(Err(e)) => !BackendError::Redis(e).is_unavailable(),
                    Err(_) => false,
                }
            }
        }));
    }

    /// Indices of `keys` grouped so that each group can go to one script call: one group on a
    /// single Redis; on a cluster, one group per hash tag, in order of first appearance.
    #[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
    pub(crate) fn slot_groups(&self, keys: &[String]) -> Vec<Vec<usize>> {
        if !self.inner.conn.is_cluster() {
            return vec![(0..keys.len()).collect()];
        }
        let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let tag = hash_tag(key);
            match groups.iter_mut().find(|(t, _)| *t == tag) {
                Some((_, g)) => g.push(i),
                None => groups.push((tag, vec![i])),
            }
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }
}

/// One `EVALSHA` being built: the script, its keys and ARGV[1] are in; [`arg`](Self::arg) adds
/// the rest of ARGV, written straight into the command (numbers without an intermediate string).
pub(crate) struct ScriptCall<'a> {
    backend: &'a RedisBackend,
    script: &'a LuaScript,
    cmd: redis::Cmd,
    /// The circuit of the master the call goes to.
    circuit: usize,
    /// When the call must be answered (`None`: the backend's timeout from the start).
    deadline: Option<tokio::time::Instant>,
    /// Whether the command was expected small: it may be kept for the next call.
    small: bool,
}

impl ScriptCall<'_> {
    /// Appends `arg` to ARGV.
    pub(crate) fn arg(&mut self, arg: impl redis::ToRedisArgs) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// Makes the call answer by `deadline` (`None`: the backend's timeout from its start).
    #[cfg_attr(
        not(any(feature = "rate-limit", feature = "session")),
        allow(dead_code)
    )]
    pub(crate) fn until(&mut self, deadline: Option<tokio::time::Instant>) -> &mut Self {
        self.deadline = deadline;
        self
    }

    /// Runs the call under the backend's circuit breaker and timeout; on `NOSCRIPT` loads the
    /// script and runs it again (one call for the breaker). Errors of our scripts and Lua errors
    /// are [`BackendError::Script`].
    pub(crate) async fn run(self) -> Result<Value, BackendError> {
        let outcome = {
            let call = pin!(self.backend.inner.conn.evalsha(self.script, &self.cmd));
            self.backend
                .guarded(call, BackendError::from_script, self.circuit, self.deadline)
                .await
        };
        if self.small {
            spare(self.cmd);
        }
        outcome
    }
}

thread_local! {
    /// A small command whose call has ended, its buffers kept for the next small call made on
    /// this thread: a thread makes one call after another, and a command costs two
    /// allocations.
    static SPARE: Cell<Option<redis::Cmd>> = const { Cell::new(None) };
}

/// The most arguments (`EVALSHA`, its hash and key count included) of a small command.
const SPARE_ARGS: usize = 16;

/// The most bytes of a small command's arguments: a larger one (a coalesced call of many
/// entries, a session's values) is made to its size and let go after its call.
const SPARE_BYTES: usize = 1024;

/// Keeps `cmd` (made small) for the next small call on this thread, emptied, if it stayed small.
fn spare(mut cmd: redis::Cmd) {
    let args = cmd.args_iter();
    if args.len() > SPARE_ARGS {
        return;
    }
    let bytes: usize = args
        .map(|arg| match arg {
            redis::Arg::Simple(arg) => arg.len(),
            _ => 0,
        })
        .sum();
    if bytes <= SPARE_BYTES {
        cmd.clear();
        drop(SPARE.with(|spare| spare.replace(Some(cmd))));
    }
}

/// The circuits of a backend on `conn`: one per master of a cluster whose slot map is known,
/// else one.
fn circuits(conn: &RedisConnection, config: Breaker, prefix: &str) -> Arc<[Circuit]> {
    let last = conn.circuits().max(1) - 1;
    let mut circuits: Vec<Circuit> = (0..last)
        .map(|master| Circuit::new(config.clone(), prefix, master))
        .collect();
    circuits.push(Circuit::new(config, prefix, last));
    circuits.into()
}

impl From<RedisConnection> for RedisBackend {
    fn from(conn: RedisConnection) -> Self {
        Self::new(conn)
    }
}

/// The hash tag of `key` as Redis Cluster computes it: the text between the first `{` and the
/// next `}`, if not empty; otherwise the whole key.
#[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

#[cfg(test)]
mod tests {
    use super::{SPARE, SPARE_ARGS, SPARE_BYTES, hash_tag, spare};

    #[test]
    fn hash_tags_follow_the_cluster_rules() {
        assert_eq!(hash_tag("rg:rl:api:{abc}"), "abc");
        assert_eq!(hash_tag("x{}y{z}"), "x{}y{z}");
        assert_eq!(hash_tag("no-tag"), "no-tag");
        assert_eq!(hash_tag("{open"), "{open");
    }

    /// A thread keeps the last small command it ran, emptied, and nothing larger: a call of many
    /// entries or of large values does not stay in memory after it.
    #[test]
    fn a_thread_keeps_only_a_small_command_emptied() {
        let command = |args: usize, bytes: usize| {
            let mut cmd = redis::cmd("EVALSHA");
            for _ in 1..args {
                cmd.arg(vec![b'x'; bytes / args]);
            }
            cmd
        };
        spare(command(SPARE_ARGS, SPARE_BYTES - 100));
        let kept = SPARE.take().expect("a small command is kept");
        assert_eq!(kept.args_iter().len(), 0, "kept emptied");
        for (args, bytes) in [(SPARE_ARGS + 1, 100), (4, SPARE_BYTES * 2)] {
            spare(command(args, bytes));
            assert!(SPARE.take().is_none(), "{args} arguments of {bytes} bytes");
        }
    }
}
