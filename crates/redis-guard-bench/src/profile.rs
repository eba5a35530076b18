//! The in-process profile: instructions per request of each in-memory stack,
//! counted by callgrind, with no sockets and no Redis.
//!
//! Each [`Stack`] is the app of a harness variant (the same [`Variant::app`]) or, for
//! [`Stack::Abusive`], the `memory` one with a quota of 1 per hour. [`drive`] sends it
//! requests through `tower::Service::call` straight, each carrying the peer address as the
//! server would (`ConnectInfo<SocketAddr>`), one client, and checks every status. [`count`]
//! runs this binary under `valgrind --tool=callgrind` twice per stack, with `n` and `2 n`
//! requests: the difference divided by `n` is the cost of one request, set-up and warm-up
//! cancelled out. Callgrind's counts do not move with the machine's load, so two runs of the
//! same commit agree to a few instructions; `× bare` and `− bare` are what a layer adds to the
//! route.
//!
//! The Redis stacks ([`Stack::RedisAbusive`] and the session ones) start a `redis-server`
//! (not traced: callgrind follows no child) and run on a current-thread runtime; a request
//! that waits is finished there. The session stacks first `POST /start`, as the harness does,
//! and send its cookie with every request; their response bodies are drained, as hyper would.
//!
//! [`Stack::RedisAbusive`] is the harness's `redis-abusive`: it starts a `redis-server` (not
//! traced: callgrind follows no child) and a current-thread runtime; the first request waits
//! for Redis, the others are answered from the deny cache, except one round trip each time the
//! cached denial ends (every 2 s of wall time, the deny cache's longest wait; a few per run
//! under callgrind: a few instructions per request of noise).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::process::Command;
use std::str::FromStr;
use std::task::{Context, Poll, Waker};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, StatusCode, header};
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use http_body_util::BodyExt as _;
use redis_guard::rate_limit::{ClientIp, MemoryLimiter, Quota, RateLimitLayer};
use redis_guard_testkit::RedisServer;
use tokio::runtime::Runtime;
use tower_service::Service;

use crate::throughput::{RedisUse, Variant, by_name, ok_route};

/// The peer every request comes from: one client, one key.
const PEER: &str = "127.0.0.1:40000";

/// Requests per measured run when none are given (the longer run sends twice as many).
pub const DEFAULT_REQUESTS: u64 = 10_000;

/// A service stack the profile measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stack {
    /// The route alone (harness variant `bare`).
    Bare,
    /// `tower_governor` (harness variant `governor`).
    Governor,
    /// `MemoryLimiter`, every request admitted (harness variant `memory`).
    Memory,
    /// The same without the headers of admitted responses (harness variant
    /// `memory-no-headers`).
    MemoryNoHeaders,
    /// `MemoryLimiter` with a quota of 1 per hour: every request after the first is a 429.
    Abusive,
    /// `RedisLimiter` with a quota of 1 per hour (harness variant `redis-abusive`): every
    /// request after the first is a 429 from the deny cache.
    RedisAbusive,
    /// The `memory` stack with redis-guard's default features (`metrics` among them) and no
    /// recorder installed: what an application that leaves the features alone pays. Only in a
    /// binary built with this crate's `guard-default-features` feature (cargo unifies features
    /// per build, so the other stacks carry them too in that binary).
    DefaultFeatures,
    /// The hand-rolled `INCR` + `EXPIRE` in the handler (harness variant `incr-expire`), one
    /// request at a time.
    IncrExpire,
    /// The same with [`IN_FLIGHT`] requests in flight.
    IncrExpire64,
    /// `RedisLimiter`, GCRA, every request admitted (harness variant `redis`), one request at
    /// a time.
    Redis,
    /// The same with [`IN_FLIGHT`] requests in flight: the decisions coalesce.
    Redis64,
    /// `RedisLimiter` with `Algorithm::FixedWindow` (harness variant `redis-fixed-window`), one
    /// request at a time.
    FixedWindow,
    /// The same with [`IN_FLIGHT`] requests in flight.
    FixedWindow64,
    /// The `redis` limiter with coalescing off (harness variant `redis-uncoalesced`), one
    /// request at a time: what coalescing costs the app when there is nothing to coalesce.
    Uncoalesced,
    /// The same with [`IN_FLIGHT`] requests in flight.
    Uncoalesced64,
    /// redis-guard sessions on Redis; the handler reads a value (harness variant
    /// `sessions-read`).
    SessionsRead,
    /// redis-guard sessions; the handler reads a counter and stores it incremented
    /// (`sessions-modify`).
    SessionsModify,
    /// tower-sessions on Redis; the handler reads a value (`tower-sessions-read`).
    TowerSessionsRead,
    /// tower-sessions; the handler reads a counter and stores it incremented
    /// (`tower-sessions-modify`).
    TowerSessionsModify,
    /// The `redis` limiter with its rule leased (harness variant `redis-leased`): the one client
    /// is admitted from leases of its allowance, one Redis call per lease.
    RedisLeased,
    /// redis-guard's `CacheLayer` on `RedisCacheStore` (harness variant `cache-hit`): the first
    /// request fills the entry, every other one is a hit read from Redis.
    CacheHit,
    /// The cache-aside written in the handler, `GET`, else compute and `SET … EX` (harness
    /// variant `hand-cache`): every request after the first is one `GET`.
    HandCache,
    /// The `cache-hit` stack with [`IN_FLIGHT`] requests in flight.
    CacheHit64,
    /// The `hand-cache` stack with [`IN_FLIGHT`] requests in flight.
    HandCache64,
    /// The `sessions-read` stack with [`IN_FLIGHT`] requests in flight.
    SessionsRead64,
    /// The `tower-sessions-read` stack with [`IN_FLIGHT`] requests in flight.
    TowerSessionsRead64,
    /// tower-http-cache's layer on its Redis backend (harness variant `tower-http-cache`).
    TowerHttpCache,
}

/// Requests the `-64` stacks keep in flight.
pub const IN_FLIGHT: usize = 64;

impl Stack {
    /// Every stack, in the order the table lists them.
    pub const ALL: [Self; 27] = [
        Self::Bare,
        Self::Governor,
        Self::Memory,
        Self::MemoryNoHeaders,
        Self::Abusive,
        Self::RedisAbusive,
        Self::IncrExpire,
        Self::IncrExpire64,
        Self::Redis,
        Self::Redis64,
        Self::FixedWindow,
        Self::FixedWindow64,
        Self::Uncoalesced,
        Self::Uncoalesced64,
        Self::RedisLeased,
        Self::SessionsRead,
        Self::SessionsModify,
        Self::TowerSessionsRead,
        Self::TowerSessionsModify,
        Self::SessionsRead64,
        Self::TowerSessionsRead64,
        Self::CacheHit,
        Self::HandCache,
        Self::CacheHit64,
        Self::HandCache64,
        Self::TowerHttpCache,
        Self::DefaultFeatures,
    ];

    /// The name on the command line and in the table: the harness variant's, `-64` for
    /// [`IN_FLIGHT`] requests in flight.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Abusive => "abusive",
            Self::DefaultFeatures => "default-features",
            Self::IncrExpire64 => "incr-expire-64",
            Self::Redis64 => "redis-64",
            Self::FixedWindow => "fixed-window",
            Self::FixedWindow64 => "fixed-window-64",
            Self::Uncoalesced64 => "redis-uncoalesced-64",
            Self::CacheHit64 => "cache-hit-64",
            Self::HandCache64 => "hand-cache-64",
            Self::SessionsRead64 => "sessions-read-64",
            Self::TowerSessionsRead64 => "tower-sessions-read-64",
            _ => self.variant().map_or("abusive", Variant::name),
        }
    }

    /// Requests kept in flight: [`IN_FLIGHT`] for the `-64` stacks (or `PROFILE_IN_FLIGHT`,
    /// to compare them at another concurrency), else 1.
    fn in_flight(self) -> usize {
        match self {
            Self::IncrExpire64
            | Self::Redis64
            | Self::FixedWindow64
            | Self::Uncoalesced64
            | Self::CacheHit64
            | Self::HandCache64
            | Self::SessionsRead64
            | Self::TowerSessionsRead64 => std::env::var("PROFILE_IN_FLIGHT")
                .ok()
                .and_then(|n| n.parse().ok())
                .filter(|&n| n > 0)
                .unwrap_or(IN_FLIGHT),
            _ => 1,
        }
    }

    /// The harness variant whose app this is (none for [`Abusive`](Self::Abusive)).
    fn variant(self) -> Option<Variant> {
        match self {
            Self::Bare => Some(Variant::Bare),
            Self::Governor => Some(Variant::Governor),
            Self::Memory | Self::DefaultFeatures => Some(Variant::Memory),
            Self::MemoryNoHeaders => Some(Variant::MemoryNoHeaders),
            Self::RedisAbusive => Some(Variant::RedisAbusive),
            Self::IncrExpire | Self::IncrExpire64 => Some(Variant::IncrExpire),
            Self::Redis | Self::Redis64 => Some(Variant::Redis),
            Self::FixedWindow | Self::FixedWindow64 => Some(Variant::RedisFixedWindow),
            Self::Uncoalesced | Self::Uncoalesced64 => Some(Variant::RedisUncoalesced),
            Self::RedisLeased => Some(Variant::RedisLeased),
            Self::SessionsRead | Self::SessionsRead64 => Some(Variant::SessionsRead),
            Self::SessionsModify => Some(Variant::SessionsModify),
            Self::TowerSessionsRead | Self::TowerSessionsRead64 => Some(Variant::TowerSessionsRead),
            Self::TowerSessionsModify => Some(Variant::TowerSessionsModify),
            Self::CacheHit | Self::CacheHit64 => Some(Variant::CacheHit),
            Self::HandCache | Self::HandCache64 => Some(Variant::HandCache),
            Self::TowerHttpCache => Some(Variant::TowerHttpCache),
            Self::Abusive => None,
        }
    }

    /// The status every request but the first gets.
    fn expected(self) -> StatusCode {
        if matches!(self, Self::Abusive | Self::RedisAbusive) {
            StatusCode::TOO_MANY_REQUESTS
        } else {
            StatusCode::OK
        }
    }

    /// The stack's app: the harness variant's, or the abusive one. The Redis stack's runs on
    /// the runtime `rt` against the server at `redis_url`.
    ///
    /// # Errors
    ///
    /// The layer refused its configuration, or Redis could not be reached (described).
    pub fn app(self, rt: &Runtime, redis_url: &str) -> Result<Router, String> {
        if self == Self::DefaultFeatures && !cfg!(feature = "guard-default-features") {
            return Err(format!(
                "{}: build with `--features guard-default-features`",
                self.name()
            ));
        }
        if let (true, Some(variant)) = (self.uses_redis(), self.variant()) {
            return rt.block_on(variant.app(redis_url, None));
        }
        let Some(variant) = self.variant() else {
            let layer = RateLimitLayer::new(
                MemoryLimiter::new(),
                "api",
                ClientIp::peer(),
                Quota::per_hour(1),
            )
            .map_err(|e| format!("rate-limit layer: {e}"))?;
            return Ok(ok_route().layer(layer));
        };
        if self.uses_redis() {
            return rt.block_on(variant.app(redis_url, None));
        }
        // The in-memory variants await nothing: their app is ready at the first poll.
        ready_now(variant.app("", None))?
    }
}

impl Stack {
    /// Whether the stack needs a `redis-server`.
    fn uses_redis(self) -> bool {
        self.variant()
            .is_some_and(|v| v.redis_use() != RedisUse::None)
    }
}

impl FromStr for Stack {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        by_name(&Self::ALL, Self::name, s, "stack")
    }
}

/// `fut`'s output if it completes at its first poll.
fn ready_now<F: Future>(fut: F) -> Result<F::Output, String> {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(out) => Ok(out),
        Poll::Pending => Err("an in-process stack waited: it is not in-process".to_owned()),
    }
}

/// One `GET /` as `wrk` sends it, from [`PEER`], with the session's `cookie` if any.
fn request(peer: SocketAddr, cookie: Option<&HeaderValue>) -> Request<Body> {
    let mut req = Request::get("/")
        .header(header::HOST, "127.0.0.1")
        .body(Body::empty())
        .unwrap_or_default();
    if let Some(cookie) = cookie {
        req.headers_mut().insert(header::COOKIE, cookie.clone());
    }
    req.extensions_mut().insert(ConnectInfo(peer));
    req
}

/// At most one request in this many may miss a Redis stack's timeout.
const MAX_MISSED_PER: u64 = 100;

/// Attempts at the first requests of a session stack: the store answers within its timeout
/// (100 ms), which the first calls through new code can miss under valgrind (a `503`).
const WARM_UP_ATTEMPTS: u32 = 20;

/// For a session stack, the `Cookie` of the session `POST /start` creates (as the harness
/// does before each run), once a `GET /` with it succeeds; for the others, none.
fn session_cookie(
    stack: Stack,
    app: &mut Router,
    rt: &Runtime,
    peer: SocketAddr,
) -> Result<Option<HeaderValue>, String> {
    if !stack.variant().is_some_and(Variant::needs_session) {
        return Ok(None);
    }
    let mut answered = Vec::new();
    for _ in 0..WARM_UP_ATTEMPTS {
        let mut req = Request::post("/start")
            .header(header::HOST, "127.0.0.1")
            .body(Body::empty())
            .map_err(|e| format!("POST /start: {e}"))?;
        req.extensions_mut().insert(ConnectInfo(peer));
        let res = rt.block_on(app.call(req)).unwrap_or_else(|e| match e {});
        answered.push(res.status());
        let Some(set_cookie) = res
            .headers()
            .get(header::SET_COOKIE)
            .and_then(|v| v.to_str().ok())
        else {
            continue;
        };
        // `name=value; Path=/; ...`: the client sends back `name=value`.
        let pair = set_cookie.split(';').next().unwrap_or_default();
        let cookie = HeaderValue::from_str(pair).map_err(|e| format!("cookie {pair:?}: {e}"))?;
        for _ in 0..WARM_UP_ATTEMPTS {
            let res = rt
                .block_on(app.call(request(peer, Some(&cookie))))
                .unwrap_or_else(|e| match e {});
            answered.push(res.status());
            if res.status() == StatusCode::OK {
                return Ok(Some(cookie));
            }
        }
    }
    Err(format!(
        "{}: no session to measure: POST /start then GET / answered {answered:?}",
        stack.name()
    ))
}

/// Sends `requests` requests through `stack`'s app, each answered at once (the Redis stack's
/// may wait for Redis: on a runtime); checks that every one after the first gets the stack's
/// expected status.
///
/// # Errors
///
/// The app could not be built, waited, or answered another status.
pub fn drive(stack: Stack, requests: u64) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a runtime: {e}"))?;
    let redis = if stack.uses_redis() {
        Some(RedisServer::start().map_err(|e| format!("redis-server: {e}"))?)
    } else {
        None
    };
    let url = redis.as_ref().map(RedisServer::url).unwrap_or_default();
    // Every route turned into a service once, as a server does (`axum::serve` and
    // `into_make_service` call `with_state`): without it axum converts a handler on every call.
    let mut app: Router = stack.app(&rt, &url)?.with_state(());
    // The Redis stack's futures set their timeouts on this runtime, even when polled here.
    let _entered = rt.enter();
    let peer: SocketAddr = PEER.parse().map_err(|e| format!("{PEER}: {e}"))?;
    let cookie = session_cookie(stack, &mut app, &rt, peer)?;
    if stack.in_flight() > 1 {
        return rt.block_on(in_flight(stack, &mut app, peer, cookie.as_ref(), requests));
    }
    let mut cx = Context::from_waker(Waker::noop());
    let mut missed = 0;
    for i in 0..requests {
        let mut fut = pin!(app.call(request(peer, cookie.as_ref())));
        let res = match fut.as_mut().poll(&mut cx) {
            Poll::Ready(res) => res,
            Poll::Pending if redis.is_some() => rt.block_on(fut),
            Poll::Pending => return Err("an in-process stack waited".to_owned()),
        }
        .unwrap_or_else(|e| match e {});
        if i > 0 && res.status() != stack.expected() {
            // A Redis stack's call can miss the store's timeout (100 ms) under valgrind on a
            // busy machine: a few such answers are noise, more are a broken stack.
            missed += 1;
            if redis.is_none() || missed * MAX_MISSED_PER > requests {
                return Err(format!(
                    "{}: request {i} answered {}, not {} ({missed} so far)",
                    stack.name(),
                    res.status(),
                    stack.expected()
                ));
            }
        }
        if cookie.is_some() {
            // Drained, as hyper would: a session's body is where its save may finish.
            let body = rt.block_on(axum::body::to_bytes(res.into_body(), usize::MAX));
            std::hint::black_box(body.map_err(|e| format!("a response body: {e}"))?);
        } else if redis.is_some() && stack != Stack::RedisAbusive {
            // Drained, as hyper would (`redis-abusive` kept as it was first measured).
            ready_now(res.into_body().collect())?.map_err(|e| format!("body: {e}"))?;
        } else {
            std::hint::black_box(res);
        }
    }
    if missed > 0 {
        eprintln!(
            "{}: {missed} of {requests} requests missed the store's timeout",
            stack.name()
        );
    }
    Ok(())
}

/// Sends `requests` requests through `app` with [`Stack::in_flight`] of them in flight at
/// every moment (one runtime thread: the tasks the app spawns run on the traced thread too),
/// each with `cookie` when the stack has one.
async fn in_flight(
    stack: Stack,
    app: &mut Router,
    peer: SocketAddr,
    cookie: Option<&HeaderValue>,
    requests: u64,
) -> Result<(), String> {
    let mut flying = FuturesUnordered::new();
    let mut sent = 0;
    let mut answered = 0;
    let most = stack.in_flight();
    loop {
        while sent < requests && flying.len() < most {
            flying.push(app.call(request(peer, cookie)));
            sent += 1;
        }
        let Some(res) = flying.next().await else {
            return Ok(());
        };
        let res = res.unwrap_or_else(|e| match e {});
        expect(stack, answered, res.status())?;
        answered += 1;
        res.into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?;
    }
}

/// An error unless `status` is what `stack` answers.
fn expect(stack: Stack, i: u64, status: StatusCode) -> Result<(), String> {
    if status == stack.expected() {
        return Ok(());
    }
    Err(format!(
        "{}: request {i} answered {status}, not {}",
        stack.name(),
        stack.expected()
    ))
}

/// Instructions callgrind counted for one stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Count {
    /// The stack.
    pub stack: Stack,
    /// Instructions per request: (run of `2 n`) − (run of `n`), divided by `n`.
    pub per_request: u64,
}

/// Runs `exe` (this binary) under callgrind for every stack of `stacks`, with `requests` and
/// twice as many, keeping the callgrind files in `dir` (`callgrind.<stack>.<requests>`, for
/// `callgrind_annotate`).
///
/// # Errors
///
/// valgrind is missing or failed, or its output had no count.
pub fn count(
    exe: &Path,
    stacks: &[Stack],
    requests: u64,
    dir: &Path,
) -> Result<Vec<Count>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    stacks
        .iter()
        .map(|&stack| {
            let short = collected(exe, stack, requests, dir)?;
            let long = collected(exe, stack, 2 * requests, dir)?;
            Ok(Count {
                stack,
                per_request: long.saturating_sub(short) / requests,
            })
        })
        .collect()
}

/// The instructions of one callgrind run of `exe --stack <stack> --requests <requests>`.
fn collected(exe: &Path, stack: Stack, requests: u64, dir: &Path) -> Result<u64, String> {
    let out: PathBuf = dir.join(format!("callgrind.{}.{requests}", stack.name()));
    let output = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(exe)
        .args(["--stack", stack.name(), "--requests", &requests.to_string()])
        // Under valgrind the app is far slower than Redis: with the default 100 ms, queued
        // calls time out and the failure policy decides instead.
        .env("PROFILE_REDIS_TIMEOUT_MS", "10000")
        .output()
        .map_err(|e| format!("running valgrind (apt-get install valgrind): {e}"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!(
            "callgrind run of {} failed:\n{stderr}",
            stack.name()
        ));
    }
    // `==123== Collected : 456789`
    stderr
        .lines()
        .find_map(|line| {
            let (_, n) = line.split_once("Collected :")?;
            n.trim().parse().ok()
        })
        .ok_or_else(|| format!("no instruction count in callgrind's output:\n{stderr}"))
}

/// The table of `counts`: instructions per request, and over `bare` when it was measured.
#[must_use]
pub fn markdown_table(counts: &[Count]) -> String {
    let bare = counts
        .iter()
        .find(|c| c.stack == Stack::Bare)
        .map(|c| c.per_request);
    let mut table = String::from(
        "| stack | instructions/request | − bare | × bare |\n| --- | ---: | ---: | ---: |\n",
    );
    for c in counts {
        let (minus, times) = match bare {
            Some(b) if b > 0 => (
                format!("{}", c.per_request.cast_signed() - b.cast_signed()),
                format!("{:.2}", ratio(c.per_request, b)),
            ),
            _ => ("—".to_owned(), "—".to_owned()),
        };
        let _ = writeln!(
            table,
            "| `{}` | {} | {minus} | {times} |",
            c.stack.name(),
            c.per_request
        );
    }
    table
}

/// `a ÷ b` for the table (both far below 2^52).
#[allow(clippy::cast_precision_loss)]
fn ratio(a: u64, b: u64) -> f64 {
    a as f64 / b as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stack_answers_at_once_with_its_status() {
        let built =
            |s: &Stack| *s != Stack::DefaultFeatures || cfg!(feature = "guard-default-features");
        for stack in Stack::ALL.into_iter().filter(built) {
            drive(stack, 5).unwrap();
        }
    }

    #[test]
    fn the_table_subtracts_bare() {
        let counts = [
            Count {
                stack: Stack::Bare,
                per_request: 1000,
            },
            Count {
                stack: Stack::Memory,
                per_request: 1500,
            },
        ];
        let table = markdown_table(&counts);
        assert!(table.contains("| `bare` | 1000 | 0 | 1.00 |"), "{table}");
        assert!(
            table.contains("| `memory` | 1500 | 500 | 1.50 |"),
            "{table}"
        );
    }
}
