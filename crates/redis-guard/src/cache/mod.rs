//! Response cache: [`CacheLayer`] stores the responses of `GET` and `HEAD` requests in Redis
//! ([`RedisCacheStore`], shared by every replica) or in process ([`MemoryCacheStore`]), and
//! keeps a crowd of requests for one missing entry from recomputing it two hundred times.
//!
//! The Redis cookbook's cache-aside, as a layer: a TTL on every key plus jitter, stampede
//! protection, invalidation by tag without `KEYS`, nothing that crosses hash slots.
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
//! its freshness, inside its stale window: served while one request refreshes it), or `MISS`
//! (computed by the handler for this request). Stored responses also carry `Age`. With the
//! `metrics` feature each of them is counted in
//! [`redis_guard_cache_responses_total`](crate::telemetry::CACHE_RESPONSES) by `result` (`hit`,
//! `stale`, `miss`): the hit ratio.
//!
//! # What is cached
//!
//! - **Requests**: `GET` and `HEAD` only. The key is the method, path, query and the values of
//!   the request headers listed with [`vary`](CacheLayerBuilder::vary), hashed (SHA-256): no
//!   request text appears in key names. A request carrying `Authorization` passes uncached
//!   unless `Authorization` is in the key; one carrying a `Cookie` passes uncached unless
//!   `Cookie` is in the key or [`ignore_cookies`](CacheLayerBuilder::ignore_cookies) says the
//!   route does not depend on cookies. The request's own `Cache-Control` is ignored: a client
//!   cannot make the server recompute.
//! - **Responses**: statuses 200, 203, 204, 300, 301, 308, 404, 405, 410, 414 and 501. The
//!   handler's `Cache-Control` rules: `no-store`, `no-cache` and `private` are never cached;
//!   `s-maxage`, else `max-age`, sets how long it stays fresh (`max-age=0` is not cached; none:
//!   [`ttl`](CacheLayerBuilder::ttl), 60 s), capped by [`max_ttl`](CacheLayerBuilder::max_ttl);
//!   `stale-while-revalidate` sets the stale window (none: [`stale`](CacheLayerBuilder::stale),
//!   zero).
//! - **Never cached**: a response with `Set-Cookie`; one with `Vary: *`, or whose `Vary` names a
//!   header that is not in the key (such a response would be served to the wrong variant; it
//!   passes uncached instead, so list the headers your handlers vary on); a body larger than
//!   [`body_limit`](CacheLayerBuilder::body_limit) (1 MiB), or announced larger: it streams
//!   through, and at most the limit is held while deciding; a body with trailers.
//! - Status, headers (as bytes: a non-UTF-8 value is kept as it is), tags and body are stored
//!   in **one** value with a TTL: fresh time + jitter ([`jitter`](CacheLayerBuilder::jitter),
//!   up to 10% more at random) + stale window.
//! - A response that is not cacheable leaves a **hit-for-pass** marker for the length of the
//!   lease, so the requests waiting for a fill go straight to the handler, and so do the next
//!   ones until the marker expires.
//! - A value under a cache key that is not ours (another type, another format, another
//!   variant's entry) is a miss, logged at `warn`, and overwritten by the next fill. The store
//!   failing (Redis down, too slow) never fails a request: it is served by the handler,
//!   uncached, with a `warn`.
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
//! per tag, `SET` with a TTL longer than any entry lives), each entry records when its
//! computation started, and a lookup treats an entry computed before its tags' invalidation as
//! a miss. No `KEYS`, no `SCAN`, no set of members to walk, one key per command (Cluster-safe),
//! and a response computed while the tag was being invalidated is not served afterwards.
//! A lookup of a tagged entry costs one more round trip (the tags' keys, read concurrently).
//!
//! # Limits
//!
//! - The fill lock is a **lease, not a fencing token** (see [`Lock`](crate::backend::Lock)): a
//!   handler slower than the lease lets a second request recompute. That costs a duplicate
//!   computation, never a wrong answer: the last fill wins.
//! - On a Cluster, freshness is judged by the clock of the master holding the entry and a tag
//!   by the clock of the master holding the tag: masters with skewed clocks shift an
//!   invalidation by the skew.
//! - [`MemoryCacheStore`] counts entries, not bytes: capacity × body limit bounds its memory.
//!
//! # Differences from an HTTP cache
//!
//! This is a server-side cache for the application's own responses, not an RFC 9111 shared
//! cache: it does not revalidate with `ETag`/`Last-Modified`, and it ignores the request's
//! `Cache-Control`. It forwards the handler's `Cache-Control` untouched, so browsers and CDNs
//! in front apply their own rules.

mod body;
mod entry;
mod flow;
mod future;
mod layer;
mod memory_store;
mod policy;
mod query;
mod redis_store;
mod service;
mod shared;
mod stampede;
mod store;
mod tags;

pub use body::CacheBody;
pub use future::ResponseFuture;
pub use layer::{CacheConfigError, CacheLayer, CacheLayerBuilder, DEFAULT_BODY_LIMIT};
pub use memory_store::MemoryCacheStore;
pub use query::QueryKey;
pub use redis_store::RedisCacheStore;
pub use service::CacheService;
pub use stampede::Stampede;
pub use store::{Backing, CacheStore};
pub use tags::CacheTags;
