//! The redis-guard example on axum: rate limits on Redis, on a Redis Cluster, on the primary
//! Redis Sentinels name, or in memory. See
//! README.md beside this file for what to try.

mod admin;
mod admin_auth;
mod auth;
mod calls;
mod config;
mod metrics;
mod origin;
mod payments;
mod report;
mod slow;
mod stores;
mod users;

use std::process::ExitCode;
use std::sync::Arc;

use axum::Router;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use example_shared::{csrf, serve, settings};
use redis_guard::backend::{RedisBackend, RedisConnection};
use redis_guard::cache::{MemoryCacheStore, RedisCacheStore};
use redis_guard::idempotency::{MemoryIdempotencyStore, RedisIdempotencyStore};
use redis_guard::rate_limit::{
    Algorithm, Global, KeyExtractorExt, Limiter, MemoryLimiter, Quota, RateLimitLayer,
    RedisLimiter, Rule,
};
use redis_guard::session::{
    MemorySessionStore, RedisSessionStore, SessionLayer, SessionStore, SessionUser, Transport,
};
use std::collections::HashSet;

use crate::admin_auth::AdminAuth;

use crate::calls::Calls;
use crate::config::{Config, Store};
use crate::stores::Stores;

#[tokio::main]
async fn main() -> ExitCode {
    settings::main_of("axum-app", run()).await
}

async fn run() -> Result<(), String> {
    let config = Config::from_env()?;
    let admin_auth = AdminAuth::from_env(config.client_ip.clone())?;
    // First: a metric registered before the recorder exists is lost for good.
    let metrics = metrics::install(&config.store)?;
    let (limiter, sessions, stores, backend): (
        Arc<dyn Limiter>,
        Arc<dyn SessionStore>,
        Stores,
        String,
    ) = match &config.store {
        Store::Memory => (
            Arc::new(MemoryLimiter::new()),
            Arc::new(MemorySessionStore::new()),
            Stores::new(
                MemoryCacheStore::new(),
                MemoryIdempotencyStore::new().into(),
                &config.stores,
            )?,
            "in-process memory (set REDIS_URL to share limits and sessions between instances)"
                .to_owned(),
        ),
        redis => {
            let (conn, label) = connect(redis).await?;
            let redis = RedisBackend::new(conn).timeout(config.redis_timeout);
            (
                Arc::new(RedisLimiter::new(redis.clone())),
                Arc::new(RedisSessionStore::new(redis.clone())),
                redis_stores(redis, &config)?,
                label,
            )
        }
    };
    let mut app = router(&config, admin_auth.clone(), limiter, sessions, stores)?;
    // Outside every other layer: a scrape carries no cookie and costs no quota. On the main
    // address only with the admin token (a 404 without `ADMIN_TOKEN`).
    if let Some(auth) = admin_auth {
        app = app.merge(metrics.clone().layer(axum::middleware::from_fn_with_state(
            auth,
            admin_auth::require,
        )));
    }
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .map_err(|e| format!("cannot listen on BIND={}: {e}", config.bind))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("no local address: {e}"))?;
    // `METRICS_BIND`: `/metrics` without a token, on an address kept off the public network.
    let mut metrics_at = String::new();
    if let Some(bind) = config.metrics_bind {
        let metrics_listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|e| format!("cannot listen on METRICS_BIND={bind}: {e}"))?;
        let metrics_addr = metrics_listener
            .local_addr()
            .map_err(|e| format!("no local address: {e}"))?;
        metrics_at = format!(", metrics on http://{metrics_addr}/metrics");
        tokio::spawn(serve::serve(
            metrics_listener,
            metrics,
            config.server,
            serve::shutdown_signal(),
        ));
    }
    println!(
        "axum-app listening on http://{addr} (rate limits and sessions: {backend}){metrics_at}"
    );
    // Not `axum::serve`: it sets no timeout at all (slow loris, slow bodies, slow readers).
    serve::serve(listener, app, config.server, serve::shutdown_signal()).await;
    Ok(())
}

/// What `GET /export` costs of the `/api/*` rule: ten plain requests.
const EXPORT_COST: u32 = 10;

/// The `/api/*` quota of the caller's plan, decided on the server: a logged-in user named in
/// `PRO_USERS` gets `pro` (`API_PRO_LIMIT`); everyone else keeps the rule's own (`API_LIMIT`,
/// the free plan). Nothing the client sends (an `X-Plan` header, say) chooses it.
fn plan_quota(
    head: &http::request::Parts,
    pro: Quota,
    pro_users: &HashSet<String>,
) -> Option<Quota> {
    is_pro(head, pro_users).then_some(pro)
}

/// Whether the request is a logged-in user's on the pro plan (`PRO_USERS`).
fn is_pro(head: &http::request::Parts, pro_users: &HashSet<String>) -> bool {
    head.extensions
        .get::<SessionUser>()
        .is_some_and(|user| pro_users.contains(&user.0))
}

/// `API_TOTAL_LIMIT`: every `/api/*` caller together, a request costing 1 whatever it is; with
/// `API_RESERVE_PRO`, the last share of it kept for the pro plan, so that free and anonymous
/// traffic cannot use it all up.
fn api_total_rule(total: Quota, reserve: Option<f64>, pro_users: Arc<HashSet<String>>) -> Rule {
    let rule = Rule::new("api-total", total);
    match reserve {
        Some(share) => rule.reserve(share, move |head| is_pro(head, &pro_users)),
        None => rule,
    }
}

/// The caches and the idempotency records on `redis`, shared with every instance.
fn redis_stores(redis: RedisBackend, config: &Config) -> Result<Stores, String> {
    Stores::new(
        RedisCacheStore::new(redis.clone()),
        RedisIdempotencyStore::new(redis).into(),
        &config.stores,
    )
}

fn router(
    config: &Config,
    admin_auth: Option<AdminAuth>,
    limiter: Arc<dyn Limiter>,
    sessions: Arc<dyn SessionStore>,
    stores: Stores,
) -> Result<Router, String> {
    // An export costs 10 units of the API quota (all of it when a plan's quota allows fewer).
    let export_cost = EXPORT_COST
        .min(config.api_limit.burst_size())
        .min(config.api_pro_limit.burst_size());
    let pro = config.api_pro_limit;
    let pro_users = Arc::clone(&config.pro_users);
    // Per user when logged in, per client IP otherwise; the quota by the caller's plan.
    let mut api = Rule::new("api", config.api_limit);
    if let Some(max_wait) = config.api_throttle {
        // Wait for the slot instead of 429 when it is at most `API_THROTTLE_MAX_WAIT` away.
        api = api.throttle(max_wait);
    }
    let mut api_limit = RateLimitLayer::builder(Arc::clone(&limiter))
        .rule_with(
            api.with_mode(config.api_mode)
                .with_overrides()
                // PUT /admin/rules/api changes its quota and mode at run time (admin.rs).
                .live()
                .with_quota_from(move |head| plan_quota(head, pro, &pro_users))
                .with_cost_from(move |head| {
                    if head.uri.path() == "/export" {
                        export_cost
                    } else {
                        1
                    }
                }),
            SessionUser::key().or(config.client_ip.clone()),
        )
        .failure_policy(config.limit_on_error);
    if let Some((total, reserve)) = config.api_total {
        let rule = api_total_rule(total, reserve, Arc::clone(&config.pro_users));
        api_limit = api_limit.rule_with(rule, Global);
    }
    if let Some(candidate) = config.api_candidate {
        api_limit = api_limit.candidate("api", candidate);
    }
    let api_limit = api_limit.build().map_err(|e| format!("API_LIMIT: {e}"))?;
    // The rule is "more than N calls in a period → reject": at most N in ANY window of the
    // period, which the sliding log enforces exactly. GCRA would let N through at once and then
    // one every period / N: nearly 2 × N in the first period.
    let calls_rule = Rule::new("calls", config.calls_limit)
        .with_algorithm(Algorithm::SlidingLog)
        .with_overrides();
    calls_rule
        .validate()
        .map_err(|e| format!("CALLS_LIMIT: {e}"))?;
    let remember = auth::remember(config.session_idle, config.session_max);
    let session_layer = SessionLayer::builder(sessions)
        .transport(Transport::cookie().secure(config.cookie_secure))
        .idle_timeout(config.session_idle)
        .max_lifetime(config.session_max)
        // The devices list shows the client address the limiter sees (TRUSTED_PROXIES).
        .client_ip(Some(config.client_ip.clone()))
        .lifetime_ceiling(remember.0)
        .expose_user(true)
        .build()
        .map_err(|e| format!("session settings: {e}"))?;
    let api = Router::new()
        .route("/api/hello", get(auth::hello))
        .route("/export", get(auth::export))
        .layer(api_limit);
    // At most REPORT_CONCURRENCY reports in flight per user (or client IP), across every
    // instance: a lease taken before the handler runs, released when the response ends.
    let report_limit = RateLimitLayer::builder(Arc::clone(&limiter))
        .rule_with(
            Rule::concurrency("report", config.report_concurrency)
                .lease_expiry(config.report_lease_expiry),
            SessionUser::key().or(config.client_ip.clone()),
        )
        .failure_policy(config.limit_on_error)
        .build()
        .map_err(|e| format!("REPORT_CONCURRENCY: {e}"))?;
    // Each new key is a record kept 24 h: counted per user (or client IP), retries included.
    let payments_limit = RateLimitLayer::builder(Arc::clone(&limiter))
        .rule(
            "payments",
            SessionUser::key().or(config.client_ip.clone()),
            config.stores.payments_limit,
        )
        .failure_policy(config.limit_on_error)
        .build()
        .map_err(|e| format!("PAYMENTS_LIMIT: {e}"))?;
    let report = Router::new()
        .route("/report", get(report::report))
        .layer(report_limit)
        // Inside the session layer (required by the default scope, else a `500`): a logged-in
        // user's keys are theirs alone; anonymous visitors share one scope.
        .merge(payments::routes(
            stores.payments,
            payments_limit,
            config.stores.payments_delay,
        ));
    let origin = origin::Origin::default();
    let admin = admin::routes(
        admin_auth.clone(),
        Arc::clone(&limiter),
        config.api_limit,
        config.client_ip.clone(),
        calls_rule.clone(),
    );
    // Every `n` and query is a cache entry of its own: the limit, not the cache, bounds how
    // often one client runs the slow handler.
    let slow_limit = RateLimitLayer::builder(Arc::clone(&limiter))
        .rule("slow", config.client_ip.clone(), config.slow_limit)
        .failure_policy(config.limit_on_error)
        .build()
        .map_err(|e| format!("SLOW_LIMIT: {e}"))?;
    // Every `GET /users/{id}` per client IP: hits, unknown ids (each a lookup of the store,
    // then a brief "not found" entry) and malformed ones alike.
    let users_limit = RateLimitLayer::builder(Arc::clone(&limiter))
        .rule("users", config.client_ip.clone(), config.stores.users_limit)
        .failure_policy(config.limit_on_error)
        .build()
        .map_err(|e| format!("USERS_LIMIT: {e}"))?;
    // The two routes that write to a session the client may not have yet: each call can add
    // one to the store, so each is counted per client IP (with or without a cookie: an unknown
    // id starts a new session too). `POST /login` creates sessions as well, under its own
    // per-IP rule (`LOGIN_IP_LIMIT`).
    let session_create_limit = RateLimitLayer::builder(Arc::clone(&limiter))
        .rule(
            "session-create",
            config.client_ip.clone(),
            config.session_create_limit,
        )
        .failure_policy(config.limit_on_error)
        .build()
        .map_err(|e| format!("SESSION_CREATE_LIMIT: {e}"))?;
    let creating = Router::new()
        .route("/logout", post(auth::logout))
        .route("/csrf", get(auth::csrf))
        .layer(session_create_limit);
    let calls = Router::new()
        .route("/calls", post(calls::handler))
        .with_state(Calls {
            limiter: Arc::clone(&limiter),
            rule: calls_rule,
        });
    let login = Router::new()
        .route("/login", post(auth::login))
        .with_state(auth::Login {
            limiter,
            rules: config.login.clone(),
            client_ip: config.client_ip.clone(),
            remember,
        });
    Ok(Router::new()
        .route("/", get(|| async { Html(include_str!("index.html")) }))
        .route("/me", get(auth::me))
        .route("/logout-all", post(auth::logout_all))
        .route("/logout-others", post(auth::logout_others))
        .route("/flash", get(auth::flash))
        .route("/sessions", get(auth::sessions))
        .route("/sessions/{handle}/revoke", post(auth::revoke))
        .merge(api)
        .merge(creating)
        .merge(report)
        .merge(login)
        .layer(session_layer.clone())
        // Health checks stay outside the session layer: never a cookie, never a store call.
        .route("/healthz", get(|| async { "ok" }))
        // Cached responses never carry a session cookie: outside the session layer.
        .merge(slow::routes(
            stores.responses,
            slow_limit,
            admin_auth.clone(),
            origin.clone(),
            config.stores.ttl,
        ))
        .merge(users::routes(
            stores.values,
            users_limit,
            session_layer.clone(),
            admin_auth.clone(),
            origin.clone(),
            config.stores.ttl,
        ))
        .merge(calls)
        // Outermost: a cross-site or non-JSON write is refused before sessions or limiters.
        .layer(axum::middleware::from_fn(refuse_cross_site))
        // Bearer-token routes: no browser sends the token on its own (see admin.rs).
        .merge(admin)
        .merge(origin::routes(admin_auth, origin))
        // An HTML form, so not JSON: protected by the session's CSRF token (synchronizer token,
        // checked by `CsrfForm`) instead of the JSON rule above.
        .merge(
            Router::new()
                .route("/profile", post(auth::profile))
                .layer(session_layer),
        ))
}

/// See `shared/csrf.rs`.
async fn refuse_cross_site(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    match csrf::refusal(req.method(), req.headers()) {
        None => next.run(req).await,
        Some(refusal) => refusal.into_response(),
    }
}

/// The connection `store` names, and how the logs name it; the error names the variable.
/// Lazy: the app starts while Redis is down (each layer answers by its failure policy) and
/// uses Redis once it answers; only a server that is not Redis or refuses the credentials
/// stops it at start.
async fn connect(store: &Store) -> Result<(RedisConnection, String), String> {
    let options = settings::redis_connect_options()?;
    match store {
        Store::Memory => Err("the memory store has no Redis connection".to_owned()),
        Store::Redis(url) => {
            let conn = options
                .open(url)
                .await
                // Redacted: the URL may carry the password, and this goes to the logs.
                .map_err(|e| format!("cannot connect to REDIS_URL={:?}: {e}", redact(url)))?;
            Ok((conn, format!("redis at {}", redact(url))))
        }
        Store::Cluster(nodes) => {
            let nodes_list = nodes.join(",");
            let conn = options
                .cluster(nodes)
                .await
                .map_err(|e| format!("cannot connect to REDIS_CLUSTER_NODES={nodes_list}: {e}"))?;
            Ok((conn, format!("redis cluster via {nodes_list}")))
        }
        Store::Sentinel { sentinels, master } => {
            let list = sentinels.join(",");
            let conn = options.sentinel(sentinels, master).await.map_err(|e| {
                format!(
                    "cannot find the primary REDIS_SENTINEL_MASTER={:?} through REDIS_SENTINEL={list}: {e}",
                    redact(master)
                )
            })?;
            Ok((
                conn,
                format!("redis primary {:?} via sentinels {list}", redact(master)),
            ))
        }
    }
}

/// Hides a password in a Redis URL before printing it.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_passwords() {
        assert_eq!(
            super::redact("redis://:secret@host:6379/0"),
            "redis://***@host:6379/0"
        );
        assert_eq!(super::redact("redis://host/"), "redis://host/");
    }
}
