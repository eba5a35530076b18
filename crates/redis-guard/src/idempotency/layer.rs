//! [`IdempotencyLayer`]: the tower layer, and how it is built.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Method, Request, Response};

use super::key::{HEADER, Scope};
use super::service::Idempotency;
use super::{IdempotencyStore, Rejection};
use crate::problem::Respond;
use crate::{ConfigError, ConfigErrorKind};

/// Runs an unsafe request with an `Idempotency-Key` once, and answers its retries with the
/// stored response; see the [module docs](super) for what it stores, for how long, and why.
///
/// ```
/// # #[cfg(all(feature = "axum", feature = "session"))] {
/// use axum::{Router, routing::post};
/// use redis_guard::idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
/// use redis_guard::session::{MemorySessionStore, SessionLayer};
///
/// let app: Router = Router::new()
///     .route("/payments", post(|| async { (http::StatusCode::CREATED, "paid") }))
///     .layer(IdempotencyLayer::new(MemoryIdempotencyStore::new())?) // or a RedisBackend
///     // Outside: keys are scoped to the session's user.
///     .layer(SessionLayer::new(MemorySessionStore::new())?);
/// # }
/// # Ok::<(), redis_guard::ConfigError>(())
/// ```
///
/// Customized:
///
/// ```
/// use std::time::Duration;
/// use http::{HeaderName, Method};
/// use redis_guard::idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
///
/// let layer = IdempotencyLayer::builder(MemoryIdempotencyStore::new())
///     .methods([Method::POST, Method::PUT, Method::PATCH, Method::DELETE])
///     .scope_header("x-api-key") // keys are per API key
///     .retention(Duration::from_secs(7 * 86_400))
///     .lease(Duration::from_secs(10))
///     .body_limit(64 * 1024)
///     .build()?;
/// # let _ = layer;
/// # Ok::<(), redis_guard::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct IdempotencyLayer {
    shared: Arc<Shared>,
}

impl_layer!(IdempotencyLayer => Idempotency, shared);

/// The settings every request of one layer reads.
pub(crate) struct Shared {
    pub(crate) store: IdempotencyStore,
    pub(crate) methods: Vec<Method>,
    pub(crate) required: bool,
    pub(crate) scope: Scope,
    pub(crate) body_limit: usize,
    pub(crate) response_limit: usize,
    pub(crate) lease: Duration,
    pub(crate) retention: Duration,
    pub(crate) replayed_header: HeaderName,
    pub(crate) fail_open: bool,
    pub(crate) response: Option<Respond<Rejection>>,
    /// Whether the `warn` that the memory store is full of running requests was written: once
    /// per layer, then each refusal at `debug`.
    pub(crate) warned_full: AtomicBool,
    /// Whether the `error` that a request came without a session was written: once per layer.
    pub(crate) warned_no_session: AtomicBool,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("store", &self.store)
            .field("methods", &self.methods)
            .field("required", &self.required)
            .field("scope", &self.scope)
            .field("body_limit", &self.body_limit)
            .field("response_limit", &self.response_limit)
            .field("lease", &self.lease)
            .field("retention", &self.retention)
            .field("replayed_header", &self.replayed_header)
            .field("fail_open", &self.fail_open)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Whether the layer guards `req`: an unsafe method it covers, with a key or on a route
    /// that requires one.
    pub(crate) fn guards<B>(&self, req: &Request<B>) -> bool {
        self.methods.contains(req.method()) && (self.required || req.headers().contains_key(HEADER))
    }
}

impl IdempotencyLayer {
    /// A layer with the defaults: `POST` and `PATCH` guarded, a key required, keys scoped to
    /// the session's user, request bodies up to 1 MiB, responses stored up to 1 MiB, a 60 s
    /// lease, 24 h retention, `503` when the store fails.
    ///
    /// Scoped to the session's user, it needs a [`SessionLayer`](crate::session::SessionLayer)
    /// outside it: a request that reaches it without a session is answered `500`
    /// ([`Rejection::NoSession`]), never run in a scope shared with every other client.
    ///
    /// # Errors
    ///
    /// The store's settings cannot work (a zero Redis timeout), or feature `session` is off
    /// (choose a scope with the [builder](Self::builder)).
    pub fn new(store: impl Into<IdempotencyStore>) -> Result<Self, ConfigError> {
        Self::builder(store).build()
    }

    /// A builder: settings, then [`build`](IdempotencyLayerBuilder::build).
    ///
    /// `store` is a [`RedisIdempotencyStore`](super::RedisIdempotencyStore), a
    /// [`MemoryIdempotencyStore`](super::MemoryIdempotencyStore), an [`IdempotencyStore`], or a
    /// [`RedisBackend`](crate::backend::RedisBackend) or
    /// [`RedisConnection`](crate::backend::RedisConnection) for the Redis one.
    pub fn builder(store: impl Into<IdempotencyStore>) -> IdempotencyLayerBuilder {
        IdempotencyLayerBuilder {
            shared: Shared {
                store: store.into(),
                methods: vec![Method::POST, Method::PATCH],
                required: true,
                scope: Scope::SessionUser,
                body_limit: 1024 * 1024,
                response_limit: 1024 * 1024,
                lease: Duration::from_secs(60),
                retention: Duration::from_secs(24 * 3600),
                replayed_header: HeaderName::from_static("idempotent-replayed"),
                fail_open: false,
                response: None,
                warned_full: AtomicBool::new(false),
                warned_no_session: AtomicBool::new(false),
            },
            bad_scope_header: None,
        }
    }
}

/// Builds an [`IdempotencyLayer`]; [`build`](Self::build) checks the settings.
#[must_use]
pub struct IdempotencyLayerBuilder {
    shared: Shared,
    /// The text given to [`scope_header`](Self::scope_header) when it is not a header name:
    /// `build` refuses it.
    bad_scope_header: Option<Box<str>>,
}

impl std::fmt::Debug for IdempotencyLayerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyLayerBuilder")
            .field("shared", &self.shared)
            .field("bad_scope_header", &self.bad_scope_header)
            .finish()
    }
}

impl IdempotencyLayerBuilder {
    setters! {
        /// Whether a request of a guarded method must carry a key (default `true`: `400`
        /// without one). With `false`, a request without the header passes unguarded; one
        /// with a malformed key is still a `400`.
        pub fn required(required: bool) => shared.required;

        /// The largest request body read to fingerprint a request (default 1 MiB); a larger
        /// one, or one announced larger, is answered `413`.
        pub fn body_limit(bytes: usize) => shared.body_limit;

        /// The largest response body stored for replay (default 1 MiB). A larger response
        /// goes to the client as it is, and its key is released, so a retry runs again.
        pub fn response_limit(bytes: usize) => shared.response_limit;

        /// How long a running request holds its key (default 60 s; 1 ms to 1 day): a replica
        /// that dies mid-request blocks the key this long at most. A request that runs longer
        /// lets a retry run a second time: keep it above your slowest handler.
        pub fn lease(lease: Duration) => shared.lease;

        /// How long a completed request's response is kept for replay (default 24 h; 1 s to
        /// 366 days). A retry after that runs again.
        pub fn retention(retention: Duration) => shared.retention;

        /// The header that marks a replayed response, with the value `true` (default
        /// `idempotent-replayed`).
        pub fn replayed_header(name: HeaderName) => shared.replayed_header;

        /// What happens when the store fails (Redis down or too slow): `false` (default)
        /// answers `503` with `Retry-After: 1`; `true` runs the request unguarded, with a
        /// `warn`, for routes where a duplicate costs less than an outage.
        pub fn fail_open(open: bool) => shared.fail_open;
    }

    /// The methods the layer guards (default `POST` and `PATCH`); the others pass untouched.
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.shared.methods = methods.into_iter().collect();
        self
    }

    /// Scopes keys by the value of request header `name` (an API key) instead of the
    /// session's user: two clients' keys never meet. A request without the header shares the
    /// anonymous scope.
    ///
    /// `name` is a `&str` (`"x-api-key"`; upper-case letters are lowered), a [`HeaderName`] or
    /// bytes. One that is not a header name fails [`build`](Self::build) with a
    /// [`ConfigError`] of kind [`ConfigErrorKind::HeaderName`] that names it.
    ///
    /// ```
    /// use redis_guard::ConfigErrorKind;
    /// use redis_guard::idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
    ///
    /// let per_key = IdempotencyLayer::builder(MemoryIdempotencyStore::new())
    ///     .scope_header("X-Api-Key")
    ///     .build();
    /// assert!(per_key.is_ok());
    /// let err = IdempotencyLayer::builder(MemoryIdempotencyStore::new())
    ///     .scope_header("x api key")
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.kind(), ConfigErrorKind::HeaderName);
    /// assert_eq!(err.value(), Some("x api key"));
    /// ```
    pub fn scope_header(mut self, name: impl AsRef<[u8]>) -> Self {
        let bytes = name.as_ref();
        match HeaderName::from_bytes(bytes) {
            Ok(name) => {
                self.shared.scope = Scope::Header(name);
                self.bad_scope_header = None;
            }
            Err(_) => self.bad_scope_header = Some(String::from_utf8_lossy(bytes).into()),
        }
        self
    }

    /// Puts every request in one scope, instead of the session's user: the key alone tells
    /// clients apart, on a route with no session layer (a server-to-server API whose one
    /// client picks the keys, a public form).
    ///
    /// **The risk**: a client that sends another client's key (it saw it in a log, or both
    /// picked `order-1`) is replayed that client's response, with whatever data it holds; keys
    /// then work as bearer secrets, safe only as fresh random UUIDs. Prefer
    /// [`scope_header`](Self::scope_header) or [`scope`](Self::scope) when requests carry
    /// anything that tells clients apart.
    ///
    /// ```
    /// # #[cfg(feature = "axum")] {
    /// use axum::{Router, routing::post};
    /// use redis_guard::idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
    ///
    /// // A webhook receiver: one sender, which picks a fresh key per event.
    /// let layer = IdempotencyLayer::builder(MemoryIdempotencyStore::new())
    ///     .shared_scope()
    ///     .build()?;
    /// let app: Router = Router::new()
    ///     .route("/webhooks", post(|| async { "received" }))
    ///     .layer(layer);
    /// # }
    /// # Ok::<(), redis_guard::ConfigError>(())
    /// ```
    pub fn shared_scope(mut self) -> Self {
        self.shared.scope = Scope::Shared;
        self.bad_scope_header = None;
        self
    }

    /// Scopes keys by what `scope` says of the request (e.g. a tenant and user id that an
    /// authentication layer put in the extensions), instead of the session's user; `None`
    /// is the anonymous scope.
    ///
    /// ```
    /// use redis_guard::idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
    ///
    /// #[derive(Clone)]
    /// struct Account(u64);
    ///
    /// let layer = IdempotencyLayer::builder(MemoryIdempotencyStore::new())
    ///     .scope(|parts| parts.extensions.get::<Account>().map(|a| a.0.to_string()))
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), redis_guard::ConfigError>(())
    /// ```
    pub fn scope<F>(mut self, scope: F) -> Self
    where
        F: Fn(&http::request::Parts) -> Option<String> + Send + Sync + 'static,
    {
        self.shared.scope = Scope::Custom(Arc::new(scope));
        self.bad_scope_header = None;
        self
    }

    /// Replaces the layer's own answers (default: an `application/problem+json` document
    /// with the [`Rejection`]'s status). The [`Rejection`] is in the answer's extensions
    /// either way.
    ///
    /// ```
    /// use redis_guard::idempotency::{IdempotencyLayer, MemoryIdempotencyStore, Rejection};
    ///
    /// let layer = IdempotencyLayer::builder(MemoryIdempotencyStore::new())
    ///     .response(|r: &Rejection| {
    ///         http::Response::builder()
    ///             .status(r.status())
    ///             .header("content-type", "application/json")
    ///             .body(format!(r#"{{"error":"{}"}}"#, r.status().as_u16()).into())
    ///             .unwrap_or_default()
    ///     })
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), redis_guard::ConfigError>(())
    /// ```
    pub fn response<F>(mut self, respond: F) -> Self
    where
        F: Fn(&Rejection) -> Response<Bytes> + Send + Sync + 'static,
    {
        self.shared.response = Some(Respond::new(respond));
        self
    }

    /// Checks the settings and builds the layer.
    ///
    /// # Errors
    ///
    /// No method guarded, a zero body or response limit, a lease outside 1 ms..=1 day, a
    /// retention outside 1 s..=366 days, store settings that cannot work, or keys scoped by the
    /// session's user (the default) without feature `session`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
    /// let err = IdempotencyLayer::builder(MemoryIdempotencyStore::new())
    ///     .lease(Duration::ZERO)
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.setting(), Some("IdempotencyLayerBuilder::lease"));
    /// ```
    pub fn build(self) -> Result<IdempotencyLayer, ConfigError> {
        let s = &self.shared;
        if let Some(problem) = s.store.check() {
            return Err(problem.within("idempotency store"));
        }
        if let Some(bad) = &self.bad_scope_header {
            return Err(
                ConfigError::header_name(bad, "IdempotencyLayerBuilder::scope_header")
                    .within("idempotency layer"),
            );
        }
        let day = Duration::from_secs(86_400);
        let problem = if s.methods.is_empty() {
            Some((
                ConfigErrorKind::Range,
                "no method is guarded".to_owned(),
                "IdempotencyLayerBuilder::methods",
                "[]".to_owned(),
            ))
        } else if s.body_limit == 0 {
            Some((
                ConfigErrorKind::Range,
                "body_limit 0 would refuse every body".to_owned(),
                "IdempotencyLayerBuilder::body_limit",
                "0".to_owned(),
            ))
        } else if s.response_limit == 0 {
            Some((
                ConfigErrorKind::Range,
                "response_limit 0 would store no response".to_owned(),
                "IdempotencyLayerBuilder::response_limit",
                "0".to_owned(),
            ))
        } else if !(Duration::from_millis(1)..=day).contains(&s.lease) {
            let lease = s.lease;
            Some((
                ConfigErrorKind::Duration,
                format!("lease {lease:?} is outside 1 ms..=1 day"),
                "IdempotencyLayerBuilder::lease",
                format!("{lease:?}"),
            ))
        } else if !(Duration::from_secs(1)..=day * 366).contains(&s.retention) {
            let keep = s.retention;
            Some((
                ConfigErrorKind::Duration,
                format!("retention {keep:?} is outside 1 s..=366 days"),
                "IdempotencyLayerBuilder::retention",
                format!("{keep:?}"),
            ))
        } else if cfg!(not(feature = "session")) && matches!(s.scope, Scope::SessionUser) {
            Some((
                ConfigErrorKind::Unsupported,
                "keys are scoped by the session's user, and feature `session` is off: choose \
                 scope_header, scope or shared_scope"
                    .to_owned(),
                "IdempotencyLayerBuilder::scope",
                "the session's user".to_owned(),
            ))
        } else {
            None
        };
        if let Some((kind, message, setting, value)) = problem {
            return Err(ConfigError::new(kind, message)
                .with_setting(setting)
                .with_value(value)
                .within("idempotency layer"));
        }
        Ok(IdempotencyLayer {
            shared: Arc::new(self.shared),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::MemoryIdempotencyStore;

    /// Each setting that cannot work is named, with its value.
    #[test]
    fn errors_name_the_setting_and_its_value() {
        type Set = fn(IdempotencyLayerBuilder) -> IdempotencyLayerBuilder;
        let cases: [(Set, _, _, _); 5] = [
            (
                |b| b.methods([]),
                ConfigErrorKind::Range,
                "IdempotencyLayerBuilder::methods",
                "[]",
            ),
            (
                |b| b.body_limit(0),
                ConfigErrorKind::Range,
                "IdempotencyLayerBuilder::body_limit",
                "0",
            ),
            (
                |b| b.response_limit(0),
                ConfigErrorKind::Range,
                "IdempotencyLayerBuilder::response_limit",
                "0",
            ),
            (
                |b| b.lease(Duration::from_secs(86_401)),
                ConfigErrorKind::Duration,
                "IdempotencyLayerBuilder::lease",
                "86401s",
            ),
            (
                |b| b.retention(Duration::from_millis(10)),
                ConfigErrorKind::Duration,
                "IdempotencyLayerBuilder::retention",
                "10ms",
            ),
        ];
        for (set, kind, setting, value) in cases {
            let err = set(IdempotencyLayer::builder(MemoryIdempotencyStore::new()))
                .build()
                .unwrap_err();
            assert!(err.to_string().starts_with("idempotency layer: "), "{err}");
            assert_eq!(err.kind(), kind, "{err}");
            assert_eq!(err.setting(), Some(setting), "{err}");
            assert_eq!(err.value(), Some(value), "{err}");
        }
        assert!(
            IdempotencyLayer::builder(MemoryIdempotencyStore::new())
                .shared_scope()
                .build()
                .is_ok()
        );
        // Keys scoped by the session's user (the default) need feature `session`.
        let default = IdempotencyLayer::new(MemoryIdempotencyStore::new());
        assert_eq!(default.is_ok(), cfg!(feature = "session"), "{default:?}");
        if let Err(err) = default {
            assert_eq!(err.kind(), ConfigErrorKind::Unsupported, "{err}");
            assert_eq!(err.setting(), Some("IdempotencyLayerBuilder::scope"));
        }
    }

    /// A scope header that is not a header name is a build error that names it, never a
    /// panic; a later scope setting replaces it.
    #[test]
    fn a_bad_scope_header_is_a_clear_error_when_the_layer_is_built() {
        let builder =
            || IdempotencyLayer::builder(crate::idempotency::MemoryIdempotencyStore::new());
        for bad in ["x api key", "x-api-key:", ""] {
            let err = builder().scope_header(bad).build().unwrap_err();
            assert_eq!(err.kind(), ConfigErrorKind::HeaderName, "{err}");
            assert_eq!(
                err.setting(),
                Some("IdempotencyLayerBuilder::scope_header"),
                "{err}"
            );
            assert_eq!(err.value(), Some(bad), "{err}");
            assert!(
                err.to_string()
                    .starts_with("idempotency layer: IdempotencyLayerBuilder::scope_header: "),
                "{err}"
            );
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        let name = HeaderName::from_static("x-api-key");
        for good in [
            builder().scope_header("X-Api-Key"),
            builder().scope_header(&name),
            builder().scope_header(name.clone()),
            builder().scope_header("x api").scope_header("x-api-key"),
            builder().scope_header("x api").shared_scope(),
        ] {
            good.build().unwrap();
        }
    }
}
