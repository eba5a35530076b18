//! The admin bearer token (`ADMIN_TOKEN`), shared by every route that needs it: the
//! `/admin/limits/…` routes, `POST /slow/invalidate` and `GET /metrics` on the main address,
//! and `PUT /users/{id}` (which a user may also send for themselves).
//!
//! - The token is at least 32 bytes; a shorter one is refused at start.
//! - It is compared in constant time, and never logged.
//! - Wrong tokens are throttled per client IP: after 10 in a minute, every request from that
//!   address that carries a bearer token is a `429` until the minute has passed — the right
//!   token too, or a guess would still be told apart by its answer. A request without a token
//!   is a plain `401` and costs nothing. The count is kept in this process (each instance
//!   counts its own), so that it works, and `/metrics` stays readable, while Redis is down.
//! - Every admin operation is logged at `info` with the client address, never the token.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use redis_guard::rate_limit::{Algorithm, ClientIp, MemoryLimiter, Quota, Rule};

use crate::admin::problem;

/// The shortest `ADMIN_TOKEN` accepted, in bytes: what `openssl rand -hex 16` prints.
pub(crate) const MIN_TOKEN_BYTES: usize = 32;

/// Wrong tokens per client IP: at most this many in any minute.
const WRONG_TOKENS_PER_MINUTE: u32 = 10;

/// The admin token and the wrong-token throttle; cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct AdminAuth(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    token: Box<str>,
    client_ip: ClientIp,
    wrong_tokens: MemoryLimiter,
    rule: Rule,
}

impl AdminAuth {
    /// `ADMIN_TOKEN` from the process environment: `None` when unset (no admin routes).
    ///
    /// # Errors
    ///
    /// Set but not UTF-8, blank, or shorter than [`MIN_TOKEN_BYTES`]. The message gives the
    /// length, never the value.
    pub(crate) fn from_env(client_ip: ClientIp) -> Result<Option<Self>, String> {
        // Not `settings::from_process_env`, which reads a blank value as unset: a blank token is
        // a mistake to report, not a way to turn the routes off.
        let Some(token) = std::env::var_os("ADMIN_TOKEN") else {
            return Ok(None);
        };
        let Some(token) = token.to_str() else {
            return Err("ADMIN_TOKEN is not valid UTF-8".into());
        };
        let token = token.trim();
        if token.is_empty() {
            return Err("ADMIN_TOKEN is set but empty: set a long random token (openssl rand -hex 32), or unset it to turn the admin routes off".into());
        }
        if token.len() < MIN_TOKEN_BYTES {
            return Err(format!(
                "ADMIN_TOKEN is {} bytes long: at least {MIN_TOKEN_BYTES} are required (openssl rand -hex 32)",
                token.len()
            ));
        }
        Ok(Some(Self(Arc::new(Inner {
            token: token.into(),
            client_ip,
            wrong_tokens: MemoryLimiter::new(),
            rule: Rule::new("admin-token", Quota::per_minute(WRONG_TOKENS_PER_MINUTE))
                .with_algorithm(Algorithm::SlidingLog),
        }))))
    }

    /// Lets the request through when it carries the token: `Ok` with the client address (for
    /// the log line), else the `401` or `429` to answer.
    pub(crate) async fn check(&self, parts: &Parts) -> Result<String, Response> {
        let Some(presented) = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
        else {
            return Err(unauthorized());
        };
        let Ok(ip) = self.0.client_ip.client_ip(parts) else {
            return Err(unauthorized());
        };
        let client = ip.to_string();
        let key = self.0.client_ip.key_for(ip);
        let limiter = &self.0.wrong_tokens;
        // Looked at first, charged only for a wrong token: the operator's own requests cost
        // nothing.
        let seen = limiter.inspect(&self.0.rule, key.clone()).await;
        if !seen.as_ref().is_ok_and(|s| s.state.allowed) {
            let retry = seen.map_or(60, |s| s.state.retry_after.as_secs().max(1));
            tracing::warn!(client, "admin token refused: too many wrong tokens");
            return Err(too_many(retry));
        }
        if constant_time_eq(presented.as_bytes(), self.0.token.as_bytes()) {
            return Ok(client);
        }
        let _ = limiter.check(&self.0.rule, key).await;
        tracing::warn!(client, "wrong admin token");
        Err(unauthorized())
    }
}

/// Middleware for routes behind the token (`from_fn_with_state`); logs what it lets through
/// (scrapes of `/metrics` at `debug`: they come every few seconds).
pub(crate) async fn require(State(auth): State<AdminAuth>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    match auth.check(&parts).await {
        Ok(client) => {
            if parts.method == Method::GET {
                tracing::debug!(client, path = parts.uri.path(), "admin read");
            } else {
                tracing::info!(
                    client,
                    method = %parts.method,
                    path = parts.uri.path(),
                    "admin operation"
                );
            }
            next.run(Request::from_parts(parts, body)).await
        }
        Err(refusal) => refusal,
    }
}

/// `401` with `WWW-Authenticate: Bearer`.
fn unauthorized() -> Response {
    let mut res = problem(
        StatusCode::UNAUTHORIZED,
        "send Authorization: Bearer <ADMIN_TOKEN>",
    );
    res.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(r#"Bearer realm="admin""#),
    );
    res
}

/// `429` with `Retry-After`.
fn too_many(retry_after_secs: u64) -> Response {
    let mut res = problem(
        StatusCode::TOO_MANY_REQUESTS,
        "too many wrong admin tokens from this address; try again later",
    );
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
    res
}

/// Equal in time that does not depend on where the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (
            a.get(i).copied().unwrap_or(0),
            b.get(i).copied().unwrap_or(0),
        );
        diff |= usize::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

/// A `404` for every request: what the token's routes answer when `ADMIN_TOKEN` is unset.
pub(crate) async fn not_found() -> Response {
    problem(
        StatusCode::NOT_FOUND,
        "no such route (ADMIN_TOKEN is unset)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"secret", b"secret"));
        for other in [&b"secreT"[..], b"secre", b"secrets", b""] {
            assert!(!constant_time_eq(b"secret", other));
        }
    }
}
