//! The common case, read top to bottom: every rule of the layer plain ([`Rule::is_plain`]:
//! enforced, its own quota, a constant cost, nothing to lease, settle, throttle, override,
//! reserve or set live), decided at once (the [`MemoryLimiter`]) or on the limiter's store
//! (the [`RedisLimiter`], which prepares what a request sends when the layer is built:
//! `redis/plain.rs`).
//!
//! Such a request needs only its keys: the layer borrows its rules, keeps the keys on the
//! stack, gets one [`RuleState`] per rule back, and writes the headers from those numbers. The
//! general engine (`future.rs`) runs for every other layer (among them those that
//! hand the whole decision over:
//! [`extensions`](crate::rate_limit::RateLimitLayerBuilder::extensions), a
//! [`response`](crate::rate_limit::RateLimitLayerBuilder::response) hook), and here for what this
//! path does not do itself: a missing or unusable key, an allow-listed one on a store, a limiter
//! failure in process. Both give the same decision and headers (the rate-limit suite compares
//! them on random rules and requests, in memory and on Redis).
//!
//! [`MemoryLimiter`]: crate::rate_limit::MemoryLimiter
//! [`RedisLimiter`]: crate::rate_limit::RedisLimiter

use std::sync::Arc;

use http::{Request, Response};
use tower_service::Service;

use super::config::{Config, client_key};
use super::future::ResponseFuture;
use super::headers::{self, RateLimitHeaders};
use super::response::RateLimitBody;
use super::service::{in_span, instrumented, take_ready};
use crate::client_ip::ClientAddr;
use crate::rate_limit::{
    Few, Key, Mode, PlainStates, PlainStore, Rule, RuleState, admitting, ceil_secs, denying,
    verdict_metric,
};
use crate::telemetry::Stopwatch;

/// Every rule of a layer whose rules are all plain, and the limiter's decisions of them.
pub(crate) type PlainPlan = (Box<[Arc<Rule>]>, Arc<dyn PlainStore>);

/// The layer's plain plan: every rule, when all are plain, and the limiter's decisions of them
/// ([`Engine::plain_store`](crate::rate_limit::Engine), made ready here). A layer that hands the
/// whole decision over (`extensions`, a `response` hook) keeps the general engine.
pub(super) fn plan(config: &mut Config) {
    let hands_over = config.extensions || config.response.is_some();
    if hands_over || !config.rules.iter().all(|r| r.rule.is_plain()) {
        return;
    }
    let rules: Box<[Arc<Rule>]> = config.rules.iter().map(|r| Arc::clone(&r.rule)).collect();
    let Some(store) = config.limiter.plain_store(&rules) else {
        return;
    };
    config.plain = Some((rules, store));
    config.by_address = config.rules.iter().all(|r| r.client_ip.is_some());
}

/// A plain request denied: the binding rule's prepared `429` (its index), `Retry-After` in
/// seconds, and the rate-limit headers.
#[derive(Debug)]
pub(super) struct Denial {
    prepared: usize,
    secs: u64,
    headers: DenialHeaders,
}

#[derive(Debug)]
enum DenialHeaders {
    /// A layer of one rule, its state: its whole answer is kept for the next denial with the
    /// same numbers (an abusive client is all denials).
    One(RuleState),
    Written(RateLimitHeaders),
}

/// The response to `req` under `rules` (the layer's, all plain) decided by `store`, `inner` the
/// ready service. `general`: the general engine, for what this path leaves to it.
pub(super) fn call<S, ReqBody>(
    inner: &mut S,
    config: &Arc<Config>,
    (rules, store): &PlainPlan,
    mut req: Request<ReqBody>,
    general: impl FnOnce(&mut S, Request<ReqBody>) -> ResponseFuture<S, ReqBody>,
) -> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>> + Clone,
{
    let mut keys: Few<Key> = Few::default();
    // The address a rule keyed by `ClientIp` counted, left for the handler of an admitted
    // request only (a denied one has none to read it).
    let mut client = None;
    if config.by_address {
        // Every rule counts the client's address (the usual layer): read where the request
        // holds it, the request left whole and where it is (not moved: it is large).
        for ip in config.rules.iter().filter_map(|r| r.client_ip.as_ref()) {
            match client_key(ip, req.headers(), req.extensions(), &mut client) {
                Ok(key) => keys.push(key),
                // Misconfigured: as the general plan says (which finds it missing again).
                Err(_) => return general(inner, req),
            }
        }
    } else {
        let (mut parts, body) = req.into_parts();
        for r in &config.rules {
            match r.key(&mut parts, &mut client) {
                Ok(key) => keys.push(key),
                // Skipped, rejected or misconfigured: as the general plan says (which finds
                // the address again).
                Err(_) => return general(inner, Request::from_parts(parts, body)),
            }
        }
        req = Request::from_parts(parts, body);
    }
    let started = Stopwatch::start();
    let states = match in_span(rules.len(), || store.decide(keys)) {
        Some(PlainStates::Now(states)) => states,
        Some(PlainStates::Later(states)) => {
            let states = instrumented(rules.len(), states);
            leave(&mut req, client);
            let ready = take_ready(inner);
            return ResponseFuture::storing(states, ready, req, Arc::clone(config), started);
        }
        None => return general(inner, req),
    };
    // Called here and now: the service `poll_ready` made ready serves this request itself,
    // no clone taken; the request moves once, into it.
    let call = |mut req| {
        leave(&mut req, client);
        inner.call(req)
    };
    decided(config, rules, states.as_slice(), call, req, started)
}

/// Leaves the address the layer counted in the request's extensions, for the handler.
fn leave<ReqBody>(req: &mut Request<ReqBody>, client: Option<ClientAddr>) {
    if let Some(addr) = client {
        req.extensions_mut().insert(addr);
    }
}

/// The answer once the plain `rules`' `states` are known: the inner service called (`call`)
/// with the headers, or the binding rule's `429`. Inlined into its two callers: called, it
/// copies the request in and the future out (about 150 instructions a request, read off
/// `profile --callgrind --only redis-64`).
#[inline(always)]
pub(super) fn decided<S, ReqBody>(
    config: &Arc<Config>,
    rules: &[Arc<Rule>],
    states: &[RuleState],
    call: impl FnOnce(Request<ReqBody>) -> S::Future,
    req: Request<ReqBody>,
    started: Stopwatch,
) -> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    match verdict(config, rules, states, started) {
        Ok(headers) => ResponseFuture::calling(call(req), Some(headers)),
        Err(denial) => ResponseFuture::limited(Arc::clone(config), denial),
    }
}

/// What the plain `rules`' `states` give: the headers of an admitted request, or the denial.
/// The decision is logged and recorded here.
fn verdict(
    config: &Config,
    rules: &[Arc<Rule>],
    states: &[RuleState],
    started: Stopwatch,
) -> Result<RateLimitHeaders, Denial> {
    let named = || rules.iter().map(|r| r.name()).zip(states);
    if states.iter().all(|s| s.allowed) {
        record(config, states, started);
        let ietf = config.ietf_on_allowed.then(|| {
            let state =
                match states {
                    [only] => config.last_state.get_or(
                        only.remaining,
                        ceil_secs(only.reset_after),
                        || headers::states(named()),
                    ),
                    _ => headers::states(named()),
                };
            (config.policy.clone(), state)
        });
        let legacy = config
            .legacy
            .then(|| legacy(states, admitting(states).unwrap_or(0)));
        return Ok(RateLimitHeaders::plain(ietf, legacy));
    }
    let binding = denying(states.iter().enumerate()).unwrap_or(0);
    let retry_after = states[binding].retry_after;
    tracing::debug!(
        rule = rules[binding].name(),
        retry_after_ms = retry_after.as_millis(),
        "rate limited"
    );
    record(config, states, started);
    let headers = match states {
        // A layer of one rule: its `429`s with the same numbers are the same answer.
        [only] => DenialHeaders::One(*only),
        _ => DenialHeaders::Written(denied(
            config,
            rules.iter().map(|r| r.name()),
            states,
            binding,
        )),
    };
    Err(Denial {
        // Every rule is enforced: each has its `429` prepared, in order.
        prepared: binding,
        secs: ceil_secs(retry_after).max(1),
        headers,
    })
}

pub(super) fn answer<B: RateLimitBody>(config: &Config, denial: Denial) -> Response<B::Out> {
    let prepared = &config.denials[denial.prepared];
    let res = match denial.headers {
        DenialHeaders::One(state) => prepared.response_of_one(denial.secs, &state, |map| {
            let name = std::iter::once(config.rules[denial.prepared].rule.name());
            denied(config, name, std::slice::from_ref(&state), 0).insert(map);
        }),
        DenialHeaders::Written(headers) => {
            let mut res = prepared.response_after(denial.secs);
            headers.insert(res.headers_mut());
            res
        }
    };
    res.map(B::answer)
}

/// The headers of a denial by the rule `binding` of the rules `names`, whose states are `states`.
fn denied<'a>(
    config: &Config,
    names: impl Iterator<Item = &'a str> + Clone,
    states: &'a [RuleState],
    binding: usize,
) -> RateLimitHeaders {
    let ietf = Some((config.policy.clone(), headers::states(names.zip(states))));
    let legacy = config.legacy.then(|| legacy(states, binding));
    RateLimitHeaders::plain(ietf, legacy)
}

/// The legacy headers' (limit, remaining, reset) of the binding rule `at`.
fn legacy(states: &[RuleState], at: usize) -> (u32, u32, u64) {
    let s = &states[at];
    (s.limit, s.remaining, ceil_secs(s.reset_after))
}

/// Each rule's verdict in the metrics, with the time the decision took.
fn record(config: &Config, states: &[RuleState], started: Stopwatch) {
    if !started.on() {
        return;
    }
    let seconds = started.elapsed().as_secs_f64();
    for (metrics, state) in config.metrics.iter().zip(states) {
        metrics.record(verdict_metric(state.allowed, Mode::Enforce), seconds);
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::time::Duration;

    use http::{Request, Response, StatusCode};
    use http_body_util::BodyExt;
    use tower::{Layer, Service, ServiceExt, service_fn};

    use crate::backend::ManualClock;
    use crate::client_ip::ClientAddr;
    use crate::rate_limit::Algorithm::{FixedWindow, SlidingCounter, SlidingLog, TokenBucket};
    use crate::rate_limit::layer::response::tests::collected;
    use crate::rate_limit::{Global, Key, MemoryLimiter, Quota, RateLimitLayer, Rule};

    /// A handler that answers with the client address the layer left in the request (empty:
    /// none).
    async fn client_addr_of(req: Request<String>) -> Result<Response<String>, Infallible> {
        let addr = req.extensions().get::<ClientAddr>();
        Ok(Response::new(
            addr.map(ToString::to_string).unwrap_or_default(),
        ))
    }

    /// The answer to a request whose key is `key`: status, headers, body.
    async fn answer(
        layer: &RateLimitLayer,
        key: &str,
    ) -> (StatusCode, http::HeaderMap, bytes::Bytes) {
        let (parts, body) = collected(layer, Some(key)).await.into_parts();
        (parts.status, parts.headers, body)
    }

    /// Counts its clones (an inner service that holds it counts the service's).
    #[derive(Debug)]
    struct Counted(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl Clone for Counted {
        fn clone(&self) -> Self {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Self(std::sync::Arc::clone(&self.0))
        }
    }

    /// The plain path calls the inner service `poll_ready` made ready in place: no clone at
    /// all. The general engine (a soft rule beside) takes it for an admitted request (a clone
    /// stays for the next) and leaves it as it is for a denied one.
    #[tokio::test]
    async fn the_inner_service_is_cloned_only_where_a_request_keeps_it() {
        let plain =
            RateLimitLayer::new(MemoryLimiter::new(), "api", Global, Quota::per_hour(2)).unwrap();
        let general = RateLimitLayer::builder(MemoryLimiter::new())
            .rule("api", Global, Quota::per_hour(2))
            .rule_with(
                Rule::new("soft", Quota::per_hour(1)).with_mode(crate::rate_limit::Mode::Soft),
                Global,
            )
            .build()
            .unwrap();
        assert!(plain.config.plain.is_some() && general.config.plain.is_none());
        // In memory, every algorithm is plain, with a cost and an allow list too.
        for algorithm in [FixedWindow, SlidingLog, SlidingCounter, TokenBucket] {
            let rule = Rule::new("api", Quota::per_hour(2)).with_algorithm(algorithm);
            let rule = rule.with_cost(2).with_allowed_keys([Key::from("vip")]);
            let builder = RateLimitLayer::builder(MemoryLimiter::new()).rule_with(rule, Global);
            assert!(builder.build().unwrap().config.plain.is_some());
        }
        for (layer, expected) in [(plain, 0), (general, 2)] {
            let clones = std::sync::Arc::default();
            let counted = Counted(std::sync::Arc::clone(&clones));
            let mut svc = layer.layer(service_fn(move |_: Request<String>| {
                let _ = &counted;
                std::future::ready(Ok::<_, Infallible>(Response::new(String::new())))
            }));
            let mut statuses = Vec::new();
            for _ in 0..5 {
                let res = svc
                    .ready()
                    .await
                    .unwrap()
                    .call(Request::new(String::new()))
                    .await;
                statuses.push(res.unwrap().status().as_u16());
            }
            assert_eq!(statuses, [200, 200, 429, 429, 429]);
            assert_eq!(
                clones.load(std::sync::atomic::Ordering::Relaxed),
                expected,
                "plain: none; general: one per admitted request"
            );
        }
    }

    /// A layer whose rules are keyed by the client's address reads it where the request holds
    /// it: behind a trusted proxy (the forwarded address counted, and left for the handler and
    /// for a later rule that reads it from the extensions), from the peer, and without any peer
    /// address (a misconfiguration). The general engine answers alike (the rate-limit suite's
    /// `the_plain_path_answers_as_the_general_engine`, whose rules are keyed so too).
    #[tokio::test]
    async fn client_address_rules_read_the_address_where_the_request_holds_it() {
        use crate::client_ip::{ClientIp, PeerAddr};
        use crate::rate_limit::ExtensionKey;

        // Keyed by the peer's address, it would deny the third request.
        let by_addr = ExtensionKey::new(|addr: &ClientAddr| Key::from(addr.to_string()));
        let trusted = ClientIp::trusted_proxies(["10.0.0.0/8"]).unwrap();
        let layer = RateLimitLayer::builder(MemoryLimiter::new())
            .rule("peer", ClientIp::peer(), Quota::per_hour(3))
            .rule("ip", trusted, Quota::per_hour(2))
            .rule("by-addr", by_addr, Quota::per_hour(2))
            .build()
            .unwrap();
        assert!(layer.config.plain.is_some());
        let svc = layer.layer(service_fn(client_addr_of));
        let mut seen = Vec::new();
        for (peer, forwarded) in [
            (Some("10.0.0.1:4000"), Some("203.0.113.7")),
            (Some("10.0.0.1:4000"), Some("203.0.113.7")),
            (Some("10.0.0.1:4000"), Some("203.0.113.8")),
            (Some("10.0.0.1:4000"), Some("203.0.113.7")),
            (Some("192.0.2.9:4000"), Some("203.0.113.7")),
            (None, None),
        ] {
            let mut req = Request::new(String::new());
            if let Some(peer) = peer {
                req.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
            }
            if let Some(forwarded) = forwarded {
                req.headers_mut()
                    .insert("x-forwarded-for", forwarded.parse().unwrap());
            }
            let res = svc.clone().oneshot(req).await.unwrap();
            let status = res.status().as_u16();
            let body = res.into_body().collect().await.unwrap().to_bytes();
            seen.push((status, String::from_utf8(body.to_vec()).unwrap()));
        }
        let statuses: Vec<_> = seen.iter().map(|(status, _)| *status).collect();
        assert_eq!(statuses, [200, 200, 200, 429, 200, 500]);
        // An untrusted peer's forwarding header is not read: the peer is counted.
        let addrs = [&seen[0].1, &seen[2].1, &seen[4].1];
        assert_eq!(addrs, ["203.0.113.7", "203.0.113.8", "192.0.2.9"]);
    }

    /// A client under its quota gets the same numbers request after request: their `RateLimit`
    /// values are one value, written once the numbers come a second time; other numbers get a
    /// value of their own.
    #[tokio::test]
    async fn admitted_requests_with_the_same_numbers_share_their_value() {
        let clock = ManualClock::new();
        let limiter = MemoryLimiter::builder().clock(clock.clone()).build();
        let layer = RateLimitLayer::new(limiter, "api", Global, Quota::per_second(1000)).unwrap();
        let mut seen = Vec::new();
        for after_ms in [0, 1_000, 1_000, 1_000, 0] {
            clock.advance(Duration::from_millis(after_ms));
            let (status, headers, _) = answer(&layer, "k").await;
            assert_eq!(status, StatusCode::OK);
            seen.push(headers["ratelimit"].clone());
        }
        let text: Vec<_> = seen.iter().map(|v| v.to_str().unwrap()).collect();
        let same = "\"api\";r=999;t=1";
        assert_eq!(text, [same, same, same, same, "\"api\";r=998;t=1"]);
        let at = |i: usize| seen[i].as_bytes().as_ptr();
        assert_ne!(at(0), at(1), "numbers seen once are not kept");
        assert_eq!(at(1), at(2), "numbers seen again share one value");
        assert_eq!(at(2), at(3));
        assert_ne!(at(3), at(4), "other numbers get their own");
    }
}
