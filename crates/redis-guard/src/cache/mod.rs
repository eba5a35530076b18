//! Response cache: [`CacheLayer`] stores the responses of `GET` and `HEAD` requests in Redis
//! ([`RedisCacheStore`], shared by every replica) or in process ([`MemoryCacheStore`]), and
//! keeps a crowd of requests for one missing entry from recomputing it two hundred times.
//! [`ValueCache`] does the same for values (see [Value cache](#value-cache)).
//!
//! Cache-aside (look in the cache, on a miss compute and store), as a layer: a TTL on every key
//! plus jitter, stampede protection, invalidation by tag without `KEYS`, nothing that crosses
//! hash slots.
//!
//! ```
//! # #[cfg(feature = "axum")] {
//! use std::time::Duration;
//! use axum::{Router, routing::get, response::IntoResponse};
//! use redis_guard::cache::{CacheLayer, CacheTags, MemoryCacheStore};
//!
//! async fn product() -> impl IntoResponse {
//!     // Cached 30 s, then served stale for up to 10 s while one request refreshes it.
//!     (
//!         [("cache-control", "public, max-age=30, stale-while-revalidate=10")],
//!         CacheTags::new(["products"]),
//!         "an expensive page",
//!     )
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cache = CacheLayer::new(MemoryCacheStore::new())?; // or RedisCacheStore::new(backend)
//! let app: Router = Router::new()
//!     .route("/product", get(product))
//!     .layer(cache.clone());
//! // Later, when products change: `cache.invalidate_tag("products").await?`.
//! # Ok(()) }
//! # }
//! ```
//!
//! Every response to a request the layer looks up says where it came from in `x-cache`
//! ([`header`](CacheLayerBuilder::header)): `HIT` (stored and fresh), `STALE` (stored, past
//! its freshness, inside its stale window: served while one request refreshes it; or served
//! in place of a failing handler, see [Fail-safe](#fail-safe)), `REVALIDATED` (stored and
//! stale, confirmed by the handler's `304`: see [Revalidation](#revalidation)) or `MISS`
//! (computed by the handler for this request), and in RFC 9211 `Cache-Status` (see
//! [Conditional requests and `Cache-Status`](#conditional-requests-and-cache-status)). Stored
//! responses also carry `Age`. With the
//! `metrics` feature each of them is counted in
//! [`redis_guard_cache_responses_total`](crate::telemetry::Metric::CacheResponses) by `result` (`hit`,
//! `stale`, `fallback`, `revalidated`, `miss`): the hit ratio.
//!
//! # What is cached
//!
//! - **Requests**: `GET` and `HEAD` only. The key is a per-layer namespace, the method, the
//!   host ([`key_host`](CacheLayerBuilder::key_host): the URI's authority, else `Host`), the
//!   path the client asked for (with `axum`, `OriginalUri`: a `nest` that strips `/a` and `/b`
//!   does not make `/a/x` and `/b/x` one entry), the query
//!   ([`query`](CacheLayerBuilder::query): as sent, sorted, or only some parameters) and the
//!   values of the request headers listed with [`vary`](CacheLayerBuilder::vary), hashed
//!   (SHA-256): no request text appears in key names. **Every request input the handler reads
//!   must be in the key**: a header it reads and `vary` does not list makes one user's variant
//!   everyone's. The namespace is the digest of what the key holds and of the layer's
//!   [`namespace`](CacheLayerBuilder::namespace) name: two layers on one store never share
//!   entries unless they key alike and share a name (replicas do).
//! - **Credentials**: a request carrying a header of
//!   [`credential_headers`](CacheLayerBuilder::credential_headers) (`Authorization`, `Cookie`,
//!   `Proxy-Authorization` by default) passes uncached unless that header is in the key;
//!   [`ignore_cookies`](CacheLayerBuilder::ignore_cookies) says a route does not depend on
//!   cookies. Of the request's own `Cache-Control`, `no-store` (the response is not stored)
//!   and `only-if-cached` (`504` when nothing is stored) are followed; the directives that
//!   would make the server recompute are not (see
//!   [Differences from an HTTP cache](#differences-from-an-http-cache)).
//! - **Responses**: any final status but `206` and `304` when the response states an explicit
//!   expiration ([RFC 9111 §3](https://www.rfc-editor.org/rfc/rfc9111#section-3): a `302`, a
//!   `404` or a `503` with `max-age=60` is stored); under the heuristic
//!   [`ttl`](CacheLayerBuilder::ttl), only 200, 203, 204, 300, 301 and 308 (no error: any path
//!   spelling is a 404 of its own, and a heuristic lifetime would let a client fill the
//!   store). A response marked `must-understand` is stored only with a status the layer knows
//!   (§5.2.2.3). A 5xx never replaces a copy kept for
//!   [`stale_if_error`](CacheLayerBuilder::stale_if_error). The handler's headers rule, as
//!   [RFC 9111 §4.2](https://www.rfc-editor.org/rfc/rfc9111#section-4.2) says:
//!   `no-store` (unless with `must-understand` and a status the layer knows, §5.2.2.3) and
//!   `private` are never cached; `no-cache` is kept only with an `ETag` or a `Last-Modified`,
//!   and then every use asks the handler first (§5.2.2.4: it is stored stale, see
//!   [Revalidation](#revalidation)); the freshness lifetime is
//!   `s-maxage` (this is a shared cache), else `max-age` (the first, when there are two),
//!   else `Expires` − `Date` (an `Expires` that is not a valid date, such as `0`, is in the
//!   past); a response with none of them is **not stored** unless the layer has a heuristic
//!   [`ttl`](CacheLayerBuilder::ttl) (off by default). The response's age on arrival
//!   (its `Age`, plus the time the handler took, or the time since its `Date` when larger)
//!   counts against that lifetime: a response older than its lifetime, `max-age=0` or a past
//!   `Expires` is never served without asking the handler: it is kept only when it has an
//!   `ETag` or a `Last-Modified`, for the [`revalidate`](CacheLayerBuilder::revalidate) window,
//!   so that the next request revalidates it (see [Revalidation](#revalidation)); the requests
//!   that waited for the fill that stored it get it. Capped by
//!   [`max_ttl`](CacheLayerBuilder::max_ttl).
//!   `stale-while-revalidate` sets the stale window (none: [`stale`](CacheLayerBuilder::stale),
//!   zero); `must-revalidate` and `proxy-revalidate` forbid any, and `s-maxage` the layer's.
//! - **Never cached**: a response with `Set-Cookie`; one with `Vary: *`, or whose `Vary` names a
//!   header that is not in the key (such a response would be served to the wrong variant; it
//!   passes uncached instead, so list the headers your handlers vary on); a body larger than
//!   [`body_limit`](CacheLayerBuilder::body_limit) (1 MiB), or announced larger: it streams
//!   through, and at most the limit is held while deciding; a body with trailers.
//! - Status, headers (as bytes: a non-UTF-8 value is kept as it is), tags and body are stored
//!   in **one** value with a TTL: fresh time less jitter
//!   ([`jitter`](CacheLayerBuilder::jitter), up to 10% less at random: never longer than the
//!   handler allows) + stale window (+ the [`revalidate`](CacheLayerBuilder::revalidate)
//!   window, 1 hour, when longer and the response has an `ETag` or a `Last-Modified`). A
//!   hit's `Age` is the entry's age on arrival plus its time in the store.
//! - A response that is not cacheable leaves a **hit-for-pass** marker for the length of the
//!   lease, so the requests waiting for a fill go straight to the handler, and so do the next
//!   ones until the marker expires.
//! - A value under a cache key that is not ours (another type, another format, another
//!   variant's entry) is a miss, logged at `warn`, and overwritten by the next fill. The store
//!   failing (Redis down, too slow) never fails a request: it is served by the handler,
//!   uncached, with a `warn`. So the layer never answers on its own (it has no rejection, unlike
//!   the rate limiter and the sessions): every response is the handler's, fresh or stored, in
//!   [`ResponseBody`], but for the `504` of a hard
//!   [`fill_timeout`](CacheLayerBuilder::fill_timeout), which is off by default.
//!
//! # Cache and sessions
//!
//! A [`SessionLayer`](crate::session::SessionLayer) tells the cache, in the request's and the
//! response's extensions, whether the request carried a session (a cookie or a token, well
//! formed or not) and whether the handler loaded, read or changed one. The cache **never
//! stores** such a response: a page rendered for a user, or from a fresh anonymous session (its
//! CSRF token, its flash), is never served to anyone else. A request that carried a session
//! may still be served an entry: entries are only made of pages that depend on no session. A
//! route whose handler uses the session leaves a hit-for-pass marker, so the next requests go
//! straight to the handler.
//!
//! Both layer orders work, on every transport:
//!
//! - **Cache inside the session layer**, the usual axum layout
//!   (`route("/p", get(h).layer(cache)).layer(sessions)`): the cache reads the mark the
//!   session layer put on the request, which the handler's use of the session updates.
//! - **Cache outside it** (`.layer(sessions).layer(cache)`): the cache reads the mark on the
//!   response. The session layer also sends `Vary` with its credential header (`Cookie`, or
//!   the token's header) on every response to a request that carried one or whose handler used
//!   the session, and `Cache-Control: private` on a response to a token holder, or to a
//!   cookie whose session the handler used: caches in front (a CDN) get the same message.
//!
//! Without the session layer's mark (a cache in another process, a session that is not ours),
//! the credential headers are what keep a user's page out: with a header-token transport
//! other than `Authorization`, add its header to
//! [`credential_headers`](CacheLayerBuilder::credential_headers).
//!
//! ```
//! # #[cfg(all(feature = "axum", feature = "session"))] {
//! use axum::{Router, routing::get};
//! use redis_guard::cache::{CacheLayer, MemoryCacheStore};
//! use redis_guard::session::{MemorySessionStore, Session, SessionError, SessionLayer, Transport};
//!
//! async fn me(session: Session) -> Result<String, SessionError> {
//!     Ok(session.user().await?.unwrap_or_default()) // never cached: it reads the session
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cache = CacheLayer::new(MemoryCacheStore::new())?;
//! let sessions = SessionLayer::builder(MemorySessionStore::new())
//!     .transport(Transport::header("x-session-token"))
//!     .build()?;
//! let app: Router = Router::new()
//!     .route("/api/me", get(me).layer(cache.clone()))
//!     .route("/api/news", get(|| async { "the same for everyone" }).layer(cache))
//!     .layer(sessions);
//! # Ok(()) }
//! # }
//! ```
//!
//! # Stampede protection
//!
//! Two strategies, chosen with [`Stampede`]:
//!
//! - **Lock on miss** ([`Stampede::lock`], the default): the first request for a missing entry
//!   takes a lease ([`backend::Lock`](crate::backend::Lock): random token, compare-and-delete,
//!   expiry), computes and fills; concurrent requests poll for the fill for up to a bound and
//!   answer `HIT`. Two hundred concurrent requests for a cold key run the handler once.
//! - **XFetch** ([`Stampede::xfetch`]): a hit recomputes before expiry with a probability that
//!   grows as expiry nears, scaled by the measured recompute time stored with the entry. No
//!   lock and no waiting; hot keys are refreshed before they expire, cold keys are not
//!   protected.
//!
//! With either, a **stale** entry is served at once to every request, and the one request
//! that takes the lease refreshes it in a spawned task with a clone of the inner service
//! (stale-while-revalidate). Nobody waits for that recomputation.
//!
//! # Tags
//!
//! A handler tags its response with a [`CacheTags`] extension or an `x-cache-tags` header
//! (stripped before the response leaves). [`CacheLayer::invalidate_tag`] voids every entry
//! with the tag, on every replica: the store records **when** the tag was invalidated (one key
//! per tag, `SET` with a TTL as long as an entry can live: `max_ttl` plus jitter, then the
//! longer of the stale window and `stale_if_error`), each entry records when its
//! computation started, and a lookup treats an entry computed before its tags' invalidation as
//! a miss. No `KEYS`, no `SCAN`, no set of members to walk, one key per command (Cluster-safe),
//! and a response computed while the tag was being invalidated is not served afterwards.
//! A lookup reads the tags' records in the same round trip as the entry: the layer remembers
//! which tags each entry it read carried (a bounded table), so only the first lookup of an
//! entry in a process, or one whose tags changed, takes a second round trip for them.
//!
//! [`CacheLayer::invalidate_tag_soft`] is the **soft purge**: the same record in a key of its
//! own, and an entry computed before it is served as stale (at once, to every request) while
//! the one request that takes its lease recomputes it, instead of being a miss. A lookup reads
//! both records of each tag in the same concurrent round.
//!
//! # Revalidation
//!
//! A stale entry that has a validator (an `ETag`, else a `Last-Modified`) is not recomputed
//! in full: the request that refills it (the one that takes the key's lease, on any replica;
//! the others wait for it, as for a fill) passes it to the handler as a conditional request
//! ([RFC 9111 §4.3.1](https://www.rfc-editor.org/rfc/rfc9111#section-4.3.1)):
//! `If-None-Match` with the stored `ETag`, else `If-Modified-Since` with the stored
//! `Last-Modified`. A handler that can tell cheaply that nothing changed (a version column)
//! answers `304 Not Modified`:
//!
//! - the entry is **freshened** (§4.3.4): each header the `304` carries replaces the stored
//!   one (`Cache-Control`, `Expires`, `Date`, `ETag`, headers of its own; not
//!   `Content-Length`, `Content-Encoding` and the other fields that describe the stored body),
//!   its freshness is computed again from them as for a new response, the body is kept, and
//!   it is stored again (`x-cache: REVALIDATED`). A `304` whose `ETag` is not the stored one
//!   updates nothing: the stored response is served once more and the next request computes;
//! - the client gets the stored response, status and body, or `304` when it asked
//!   conditionally and its validator matches; never the `304` to the layer's own request.
//!
//! Any other answer is handled as a fill (§4.3.3): a `200` replaces the entry, a response
//! that is not cacheable leaves a hit-for-pass marker, and a 5xx is the client's answer, or a
//! stale copy where [`stale_if_error`](CacheLayerBuilder::stale_if_error) or the response's
//! own `stale-if-error` allows. An entry with a validator is kept
//! [`revalidate`](CacheLayerBuilder::revalidate) past its freshness (default 1 hour) for
//! this; one inside its stale window is revalidated by the background refresh.
//!
//! A response that may not be reused without asking the handler, `no-cache` (§5.2.2.4) or
//! stale when it arrives (`max-age=0`, a past `Expires`, an `Age` past its lifetime), is
//! stored stale from the start when it has a validator, so that every use is such a
//! conditional request. It is never a hit, nor served inside a stale window; a `no-cache`
//! one never stands in for a failing handler either, while one that was only stale on
//! arrival does where `stale_if_error` allows, as any stale entry. The requests that were
//! waiting for the very answer that stored it get it (the handler gave it after they
//! arrived). Without a validator it is not stored.
//!
//! # Unsafe methods
//!
//! A `2xx` or `3xx` response to a request whose method is not known to be safe (`POST`,
//! `PUT`, `DELETE`, `PATCH`, any method but `GET`, `HEAD`, `OPTIONS` and `TRACE`) voids the
//! stored responses of its target URI before it goes out, as
//! [RFC 9111 §4.4](https://www.rfc-editor.org/rfc/rfc9111#section-4.4) requires: every `Vary`
//! variant, `GET` and `HEAD`, on every replica. So does one to the URI its `Location` or
//! `Content-Location` names, when that is of the same host. Each URI (host, path and query as
//! keyed) is an implicit tag recorded with its entries: on Redis its invalidation deletes the
//! entries its fills listed, in one script on the URI's hash slot, no `KEYS`, no `SCAN`. An error response voids nothing (a route that does not take the method answers
//! `405`, so a client cannot purge pages through it); the store failing only logs. A change the
//! handler makes to other URIs still needs [`CacheTags`] and
//! [`invalidate_tag`](CacheLayer::invalidate_tag).
//!
//! # What a hit costs Redis
//!
//! A hit is one round trip of plain commands, no script: one `GET` of the entry when the
//! handler named no tags for it, else one `MGET` of the entry and its tags' records, with
//! `TIME` in front at most once a second (the store's clock, which every replica shares; in
//! between, the last reading moved on by the process's monotonic clock, never ahead of
//! Redis's). The URI's own invalidation is not read: it deletes the entries of every variant
//! of the URI, which each fill lists beside them, and a fill whose computation started before
//! it stores nothing. On a Cluster every variant of a URI, its list and its record share a
//! hash slot (the URI's digest is their hash tag); a tag the handler named lives in a slot of
//! its own and is read by a `GET` to its master at the same time. Fills and invalidations
//! run scripts.
//!
//! Under load, reads share round trips: while two hits' `GET`s are out, the hits (without
//! tags) that arrive wait for room and go together, one `MGET` of their entries (one per hash
//! slot on a Cluster), as the rate limiter's calls coalesce. A batch waits only for reads
//! that started before it, so a hit never reads what was there before it arrived.
//!
//! # Fail-safe
//!
//! Off by default; on both caches ([`ValueCacheBuilder::stale_if_error`],
//! [`ValueCacheBuilder::fill_timeout`] for values):
//!
//! - [`stale_if_error(d)`](CacheLayerBuilder::stale_if_error): when the handler fails (the
//!   inner service returns an error, answers 5xx, or runs past the hard fill timeout), the
//!   entry is served instead if it is at most `d` past its freshness; past that, the failure
//!   goes to the client as without it. Entries are kept `d` past their freshness (the TTL of
//!   the key is fresh time (less jitter) + the longer of the stale window and `d`). Such a copy
//!   is a miss for every other purpose: the request computes (under the lease), and only its
//!   failure brings the copy out. A 5xx does not replace the copy with a hit-for-pass marker.
//! - **A failing origin is tried once a second, and nobody queues behind it.** The request
//!   whose computation failed records the failure in a small key beside the entry (on Redis
//!   `<prefix>c:{<digest of the entry's digest>}`, kept as long as a copy may stand in)
//!   before it gives the lease back. The requests that were waiting for that fill, and every
//!   request for the key on every replica after it, get the copy at once; for one second
//!   none calls the handler. Then the one request that takes the lease calls it again in a
//!   spawned task while the copy still answers everyone (stale-while-revalidate): one try
//!   per key per second, a success ending it. A key in the store, not the lock held longer,
//!   because a waiting request must tell "the fill failed" from "the fill is still running".
//! - [`fill_timeout(soft, hard)`](CacheLayerBuilder::fill_timeout): the computation runs in a
//!   spawned task holding the lease. A request with a copy inside `stale_if_error` (the one
//!   computing, or one waiting for the fill on any replica) stops waiting after `soft` and
//!   gets the copy; the computation goes on and stores its response. A request without one
//!   waits until `hard`, then gets `504 Gateway Timeout` (a value cache caller: the closure's
//!   error made [`From<FillTimeout>`](FillTimeout)). Both timeouts count from the request's
//!   arrival: nobody answers later than `hard`. Waiting requests wait until their timeout
//!   (the stampede's [`wait`](Stampede::wait) does not cut it short) and never start a
//!   second computation while the lease holds.
//! - Copies served so are `x-cache: STALE` and `Cache-Status: redis-guard; fwd=stale;
//!   ttl=<0 or less>`, as are softly purged entries; logged at `warn` (a failure) or `debug`
//!   (a timeout, or a copy served while the last fill failed), counted as `fallback`.
//!
//! The window follows the stored response: its own `Cache-Control: stale-if-error=<s>`
//! ([RFC 5861 §4](https://www.rfc-editor.org/rfc/rfc5861#section-4)) replaces the layer's
//! (even when the layer's is off); a response marked `must-revalidate` or `proxy-revalidate`
//! is never served stale ([RFC 9111 §5.2.2.2, §5.2.2.8](https://www.rfc-editor.org/rfc/rfc9111#section-5.2.2.2)),
//! and one carrying `s-maxage` not under the layer's window (§5.2.2.10: `s-maxage` implies
//! `proxy-revalidate` for a shared cache), only under its own `stale-if-error`.
//!
//! # Limits
//!
//! - The fill lock is a **lease, not a fencing token** (see [`Lock`](crate::backend::Lock)): a
//!   handler slower than the lease lets a second request recompute. That costs a duplicate
//!   computation, never a wrong answer: the last fill wins.
//! - On a Cluster, freshness is judged by the clock of the master holding the entry and a tag
//!   by the clock of the master holding the tag: masters with skewed clocks shift an
//!   invalidation by the skew.
//! - Every query spelling and path is an entry and a handler run: normalize the query
//!   ([`QueryKey`]) and rate-limit expensive routes. [`MemoryCacheStore`] holds at most 64 MiB
//!   of keys and values by default (hit-for-pass markers included), the entries closest to
//!   expiry going first; a Redis store is bounded by Redis' own `maxmemory` policy.
//!
//! # Value cache
//!
//! [`ValueCache`] is cache-aside for *values* on the same stores: Laravel's
//! `Cache::remember("user:$id", 300, fn() => User::find($id))` and Django's
//! `cache.get_or_set(…)`, typed through serde (the value is stored as JSON):
//!
//! ```
//! use std::time::Duration;
//! use redis_guard::cache::{MemoryCacheStore, ValueCache};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct User { id: u64, name: String }
//!
//! async fn find_user(id: u64) -> Result<Option<User>, std::io::Error> {
//!     Ok(Some(User { id, name: "Ann".into() })) // the database
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cache = ValueCache::new(MemoryCacheStore::new())?; // or RedisCacheStore::new(backend)
//! let id = 7;
//! let user = cache
//!     .get_or_compute(format!("user:{id}"), Duration::from_secs(300), move || find_user(id))
//!     .await?;
//! assert_eq!(user.map(|u| u.name).as_deref(), Some("Ann"));
//! # Ok(()) }
//! ```
//!
//! - **Stampedes**: the [`Stampede`] of the layer. Lock on miss: a crowd of callers of a
//!   cold key, on every replica sharing the store, runs the closure once; the others poll
//!   the store and read its fill. XFetch: hits recompute early. A value past its TTL and
//!   inside its [`stale`](ValueCacheBuilder::stale) window is returned at once while one
//!   caller recomputes it in a spawned task (so the closure and its future are
//!   `Send + 'static`). Every TTL gets up to 10% [`jitter`](ValueCacheBuilder::jitter).
//! - **Errors**: the closure's error is returned to its caller and never cached (with
//!   [`stale_if_error`](ValueCacheBuilder::stale_if_error), the last good value is returned
//!   in its place, see [Fail-safe](#fail-safe)). A value
//!   that is JSON `null` (`Ok(None)`: "not found") is returned and not kept, unless the
//!   cache has a [`negative_ttl`](ValueCacheBuilder::negative_ttl): then it is kept for that
//!   long (so lookups of a missing row do not all reach the database). The store failing
//!   never fails `get_or_compute`: it computes and returns, uncached, with a `warn`; `get`,
//!   `set`, `add`, `forget` and `invalidate_tag` return the
//!   [`BackendError`](crate::backend::BackendError).
//! - **Bad stored data**: a value under the key that is not a `T` (another Redis type,
//!   bytes that are not ours, JSON that no longer decodes after a type change) is a miss,
//!   logged at `warn` and overwritten by the fill.
//! - **Keys**: the cache's [`namespace`](ValueCacheBuilder::namespace) and the key, hashed
//!   (SHA-256) into the store's key space (`<prefix>c:{<digest>}` on Redis, one hash slot per
//!   key on a Cluster): no key text in Redis, every key with a TTL, no `KEYS` or `SCAN`.
//! - **Also**: [`get`](ValueCache::get), [`set`](ValueCache::set),
//!   [`forget`](ValueCache::forget), [`add`](ValueCache::add) (`SET NX` with a TTL: `true`
//!   for the first caller only, the idempotency flag), tags
//!   ([`get_or_compute_tagged`](ValueCache::get_or_compute_tagged),
//!   [`invalidate_tag`](ValueCache::invalidate_tag), as the layer's, in a space of their own:
//!   a layer's invalidation never voids a value, nor the reverse). A value lives at most
//!   [`max_ttl`](ValueCacheBuilder::max_ttl) (1 day by default) plus jitter and its stale
//!   time, and a tag's invalidation is remembered that long.
//!
//! # Conditional requests and `Cache-Status`
//!
//! An entry keeps the handler's headers, `ETag` and `Last-Modified` among them. A request
//! answered from an entry (fresh or stale) gets **`304 Not Modified`**, with no body and
//! without reaching the handler, when the stored status is a 2xx and
//! ([RFC 9110 §13](https://www.rfc-editor.org/rfc/rfc9110#section-13)):
//!
//! - its `If-None-Match` (every field line, a list of entity-tags) names the stored `ETag` by
//!   weak comparison (`W/"a"` matches `"a"`), or is `*`;
//! - or, only when it has no `If-None-Match`, its `If-Modified-Since` (one valid HTTP-date, in
//!   any of the three forms) is not older than the stored `Last-Modified` (without one, the
//!   stored `Date`: [RFC 9111 §4.3.2](https://www.rfc-editor.org/rfc/rfc9111#section-4.3.2)).
//!
//! A malformed header, or a list with one malformed member, is ignored: the full response.
//! The `304` keeps `Cache-Control`, `Content-Location`, `Date`, `ETag`, `Expires`,
//! `Last-Modified` and `Vary` ([RFC 9110 §15.4.5](https://www.rfc-editor.org/rfc/rfc9110#section-15.4.5)),
//! then `Age` and the cache's own headers. The layer answers these two headers itself and
//! takes them off every request it looks up: the client's condition never reaches the
//! handler (its `304` to it would be no entry), which sees only the layer's own when it
//! revalidates a stale entry (see [Revalidation](#revalidation)); the request that computes
//! an entry (a miss) gets the whole response, and one whose entry was just revalidated gets
//! `304` when its condition matches. With
//! [`etag(true)`](CacheLayerBuilder::etag) an entry whose handler sent no `ETag` gets a strong
//! one from its body (a SHA-256 prefix; not for `HEAD`, which has no body), stored and sent
//! with it, so that clients can revalidate pages whose handlers know nothing of validators.
//!
//! [`Cache-Status`](https://www.rfc-editor.org/rfc/rfc9211) says the same as `x-cache`, in
//! the standard's terms, as the last member after those of caches nearer the origin:
//!
//! | Response | `Cache-Status` member |
//! |---|---|
//! | fresh entry | `redis-guard; hit; ttl=<seconds of freshness left, 1 or more>` |
//! | stale entry | `redis-guard; hit; ttl=<0 or less>` |
//! | computed and stored | `redis-guard; fwd=miss; stored` |
//! | computed, not stored (or `504` at the hard fill timeout) | `redis-guard; fwd=miss` |
//! | stale entry revalidated by the handler's `304` (and stored again) | `redis-guard; fwd=stale; fwd-status=304; stored` |
//! | served in place of a failing or slow handler, or softly purged | `redis-guard; fwd=stale; ttl=<0 or less>` |
//!
//! A stale entry inside its stale window is a `hit`, not `fwd=stale`: the request is answered
//! from the cache and not forwarded (RFC 9211 §2.1), and a `ttl` of zero or less says the
//! response is stale (§2.4; §3 shows such a "stale hit"). The refresh it starts runs apart
//! from it. A copy served because the handler failed or was too slow went through the
//! handler first: `fwd=stale` (§2.2, "the cache was allowed to serve a stale response" and
//! forwarded the request); a softly purged entry says the same, its freshness withdrawn.
//!
//! # Differences from an HTTP cache
//!
//! The layer is a shared cache in [RFC 9111](https://www.rfc-editor.org/rfc/rfc9111)'s sense,
//! in front of the application's own handlers. It computes freshness as the RFC does
//! (`s-maxage`, `max-age`, `Expires`, `Age`), stores nothing the handler did not say how long
//! to keep unless a heuristic [`ttl`](CacheLayerBuilder::ttl) is set, serves stale only where
//! the response allows it, and forwards the handler's `Cache-Control` untouched, so browsers
//! and CDNs in front apply their own rules. Where it still differs, on purpose:
//!
//! - **The client cannot bypass it.** A request's `no-cache`, `max-age`, `min-fresh` and
//!   `max-stale` are ignored: the cache answers as it would without them (RFC 9111 §5.2.1
//!   lets a cache do so). In front of an application, honouring them would let any client
//!   send every request to the handler and undo the stampede protection. `no-store` is
//!   followed (the response to it is not stored, §5.2.1.5), and so is `only-if-cached`: a
//!   stored response (fresh, or stale where the response allows), else `504 Gateway Timeout`
//!   without calling the handler (§5.2.1.7).
//! - **Keys are opt-in.** `Vary` headers must be listed with [`vary`](CacheLayerBuilder::vary)
//!   (a response that varies on another is not stored, never served to the wrong variant),
//!   and credentials keep a request out of the cache unless keyed.
//! - **More is refused than the RFC requires**: responses that set cookies are never stored
//!   (a page that sets a cookie is one user's; storing it and dropping the cookie on reuse,
//!   as §3.1 allows, would still store a page rendered for that user); a
//!   `stale-while-revalidate` or `stale-if-error` in a response marked `must-revalidate` is
//!   not followed (the stricter directive wins); an error status is stored only with an
//!   explicit expiration, never under the heuristic; a `no-cache` response only with a
//!   validator (it is revalidated on every use).
//! - **No partial content**: a `Range` request is answered by the handler and a `206` is
//!   never stored or combined (§3.3, §3.4); a full entry is served whole.
//! - **Stale only where allowed by name**: a handler that fails (or a connection it drops) is
//!   answered with a stored copy only under the layer's
//!   [`stale_if_error`](CacheLayerBuilder::stale_if_error) or the response's own
//!   `stale-if-error`, both off unless set; RFC 9111 §4.2.4 would let a cache serve stale
//!   whenever it is disconnected from the origin, which in front of one's own application
//!   would hide its failures.
//! - **No targeted fields**: `CDN-Cache-Control` (RFC 9213) is not read, only
//!   `Cache-Control`: the layer is part of the application, not a CDN, and the field is left
//!   for the CDNs in front of it (forwarded untouched).
//! - **Jitter** makes entries expire up to 10% early (a cache may always drop an entry
//!   sooner), so that entries filled together do not expire together.
//! - **Conditional requests are the layer's**: a client's `If-None-Match` and
//!   `If-Modified-Since` are answered from the cache and never forwarded; the handler sees
//!   only the layer's own, built from the stored validators when it revalidates a stale entry
//!   (see [Revalidation](#revalidation)), so that what it answers can always be stored.
//!   Responses with no validator are recomputed in full, and an entry is kept for
//!   revalidation only [`revalidate`](CacheLayerBuilder::revalidate) past its freshness
//!   (every key has a TTL), not until evicted.
//! - **Unsafe methods void only what the layer can name**: the target URI and a same-host
//!   `Location` / `Content-Location` (see [Unsafe methods](#unsafe-methods)), and only after a
//!   `2xx` or `3xx`. A change the handler makes to other pages needs a tag; a request that
//!   reaches the application without passing through this layer voids nothing.

mod body;
mod entry;
mod fail_safe;
mod flow;
mod future;
mod ids;
mod invalidation;
mod layer;
mod lookup;
mod memory_store;
mod policy;
mod query;
mod redis_store;
mod service;
mod shared;
mod stampede;
mod status;
mod store;
mod tags;
mod validate;
mod value;

pub use body::ResponseBody;
pub use fail_safe::FillTimeout;
pub use future::ResponseFuture;
pub use layer::{CacheLayer, CacheLayerBuilder};
pub use memory_store::MemoryCacheStore;
pub use query::QueryKey;
pub use redis_store::RedisCacheStore;
pub use service::Cache;
pub use stampede::Stampede;
pub use store::CacheStore;
pub use tags::CacheTags;
pub use value::{ValueCache, ValueCacheBuilder};
