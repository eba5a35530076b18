//! `/admin/limits/{rule}/{key}`: inspect, reset, penalize and allow-list one client of one rule,
//! behind a bearer token (`ADMIN_TOKEN`; unset: no admin routes at all, every path is a 404).
//!
//! | route | does |
//! | --- | --- |
//! | `GET /admin/limits/{rule}/{key}` | `200` JSON: the rule's state for the key, consuming nothing |
//! | `DELETE /admin/limits/{rule}/{key}` | `204`: forget the key (quota, penalty, bans) |
//! | `POST /admin/limits/{rule}/{key}/penalize` `{"seconds": n}` | `204`: deny for n s |
//! | `POST /admin/limits/{rule}/{key}/allow` `{"seconds": n}` | `204`: admit uncounted for n s |
//!
//! Rules: `api` (key: `user:<username>` when the client is logged in, else its IP address;
//! IPv6 addresses count per /64) and `calls` (key: the caller's phone number, normalized as
//! `POST /calls` does). A missing or wrong token is a `401` with `WWW-Authenticate: Bearer`, too
//! many wrong tokens from one address a `429` (see `admin_auth.rs`); an unknown rule a `404`; a
//! key or body that does not parse a `400`; all `application/problem+json`. Every operation is
//! logged (client address, rule, key), the token never.
//!
//! Live limits (`Rule::live`): `PUT /admin/rules/{rule}` with `{"quota": "100/minute"}`,
//! `{"mode": "shadow"}` or both sets the rule's quota for every instance on the same Redis from
//! its next request on, and its mode (`enforce`; `shadow`: counted, never denying; `soft`:
//! admitted with `RateLimit-Exceeded`) at once on this instance and from the second request on
//! on the others (within a second on a Redis Cluster). The answer is `204`; a quota or mode that
//! does not parse or cannot work with the rule is a `422`, a body that is not such JSON a `400`,
//! and a refused request changes nothing. `DELETE /admin/rules/{rule}` gives the rule its quota
//! and mode from the environment back (`204`). Only `api` is live; any other name is a `404`.
//! Each change is logged by the limiter (rule, old and new value, version) and here (client
//! address).
//! The routes sit outside the cross-site check: a bearer token is never sent by a browser on its
//! own, so it cannot be forged cross-site.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{FromRequestParts, Path};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use bytes::Bytes;
use redis_guard::rate_limit::{ClientIp, Key, Limiter, LimiterError, Mode, Quota, Rule};
use serde::Deserialize;
use serde_json::json;

use crate::admin_auth::AdminAuth;
use crate::calls::normalize_phone;
use example_shared::login::normalize_username;

/// How a rule's `{key}` is spelled in the admin routes.
#[derive(Clone, Debug)]
enum KeySyntax {
    /// `user:<username>` (`SessionUser::key()`), or an IP address (`ClientIp::key_for`).
    UserOrIp(ClientIp),
    /// A phone number, normalized.
    Phone,
}

impl KeySyntax {
    /// The key the rule's extractor would produce, or `None` when `raw` is malformed.
    fn parse(&self, raw: &str) -> Option<Key> {
        match self {
            Self::UserOrIp(client_ip) => {
                if let Some(user) = raw.strip_prefix("user:") {
                    // `SessionUser::key()`: the pair ("user", name), the name as logged in.
                    let user = normalize_username(user)?;
                    return Some(Key::pair(&Key::from("user"), &Key::from(user.as_str())));
                }
                // An IPv6 group may be written as the limiter names it (`2001:db8::/64`).
                let ip = raw.split_once('/').map_or(raw, |(ip, _)| ip);
                Some(client_ip.key_for(ip.parse::<IpAddr>().ok()?))
            }
            Self::Phone => normalize_phone(raw).map(Key::from),
        }
    }
}

/// What the admin routes need.
#[derive(Clone, Debug)]
struct Admin {
    auth: AdminAuth,
    limiter: Arc<dyn Limiter>,
    rules: Arc<[(Rule, KeySyntax)]>,
}

/// The admin routes when `ADMIN_TOKEN` is set (an empty router when it is not): `api` is the
/// `API_LIMIT` rule keyed by `client_ip` for logged-out clients, `calls` the `POST /calls` rule.
pub(crate) fn routes(
    auth: Option<AdminAuth>,
    limiter: Arc<dyn Limiter>,
    api_limit: Quota,
    client_ip: ClientIp,
    calls: Rule,
) -> Router {
    let Some(auth) = auth else {
        return Router::new();
    };
    let admin = Admin {
        auth,
        limiter,
        rules: Arc::new([
            (
                Rule::new("api", api_limit).with_overrides().live(),
                KeySyntax::UserOrIp(client_ip),
            ),
            (calls, KeySyntax::Phone),
        ]),
    };
    Router::new()
        .route("/admin/limits/{rule}/{key}", get(inspect).delete(reset))
        .route("/admin/limits/{rule}/{key}/penalize", post(penalize))
        .route("/admin/limits/{rule}/{key}/allow", post(allow))
        .route("/admin/rules/{rule}", put(set_rule).delete(clear_rule))
        .with_state(admin)
}

/// An RFC 9457 problem response ([`example_shared::csrf::problem`]).
pub(crate) fn problem(status: StatusCode, detail: &str) -> Response {
    example_shared::csrf::problem(status, detail).into_response()
}

/// Why an admin request is refused.
#[derive(Debug)]
enum Refusal {
    /// `404`, with the message.
    UnknownRule(String),
    /// `400`, with the message.
    BadKey(String),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Self::UnknownRule(detail) => problem(StatusCode::NOT_FOUND, &detail),
            Self::BadKey(detail) => problem(StatusCode::BAD_REQUEST, &detail),
        }
    }
}

impl Admin {
    /// The rule named `rule` and its key spelled `key`, or why not.
    fn target(&self, rule: &str, key: &str) -> Result<(Rule, Key), Refusal> {
        let Some((rule, syntax)) = self.rules.iter().find(|(r, _)| r.name() == rule) else {
            let names: Vec<&str> = self.rules.iter().map(|(r, _)| r.name()).collect();
            return Err(Refusal::UnknownRule(format!(
                "no rule named {rule:?}; the rules are {}",
                names.join(", ")
            )));
        };
        let Some(key) = syntax.parse(key) else {
            let expected = match syntax {
                KeySyntax::UserOrIp(_) => "`user:<username>` or an IP address",
                KeySyntax::Phone => "a phone number",
            };
            return Err(Refusal::BadKey(format!(
                "malformed key for rule `{}`: expected {expected}",
                rule.name()
            )));
        };
        Ok((rule.clone(), key))
    }
}

/// A limiter failure: the store is unavailable (not the client's fault).
fn unavailable(e: &LimiterError) -> Response {
    tracing::warn!(error = %e, "admin operation failed");
    problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "the rate-limit store is unavailable; try again",
    )
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The rule and key of an authorized admin request: the token is checked before anything else
/// is read, so a caller without it learns nothing (not even which rules exist).
struct Target {
    admin: Admin,
    rule: Rule,
    key: Key,
}

impl Target {
    /// The log line of an operation on the target (the key as the operator spelled it).
    fn log(&self, op: &str, client: &str, raw_key: &str) {
        tracing::info!(
            client,
            op,
            rule = self.rule.name(),
            key = raw_key,
            "admin operation"
        );
    }
}

impl FromRequestParts<Admin> for Target {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, admin: &Admin) -> Result<Self, Response> {
        let client = admin.auth.check(parts).await?;
        let Path((rule, raw_key)) = Path::<(String, String)>::from_request_parts(parts, admin)
            .await
            .map_err(IntoResponse::into_response)?;
        let (rule, key) = admin
            .target(&rule, &raw_key)
            .map_err(IntoResponse::into_response)?;
        let target = Self {
            admin: admin.clone(),
            rule,
            key,
        };
        let op = match (parts.method.as_str(), parts.uri.path().rsplit('/').next()) {
            ("GET", _) => "inspect",
            ("DELETE", _) => "reset",
            (_, Some("penalize")) => "penalize",
            _ => "allow",
        };
        target.log(op, &client, &raw_key);
        Ok(target)
    }
}

async fn inspect(Target { admin, rule, key }: Target) -> Response {
    match admin.limiter.inspect(&rule, key).await {
        Ok(seen) => axum::Json(json!({
            "rule": rule.name(),
            "allowed": seen.state.allowed,
            "limit": seen.state.limit,
            "remaining": seen.state.remaining,
            "retry_after_ms": millis(seen.state.retry_after),
            "reset_after_ms": millis(seen.state.reset_after),
            "blocked_for_ms": seen.blocked_for.map(millis),
            "allowed_for_ms": seen.allowed_for.map(millis),
            "ban_level": seen.ban_level,
            "strikes": seen.strikes,
            "allow_listed": seen.allow_listed,
        }))
        .into_response(),
        Err(e) => unavailable(&e),
    }
}

async fn reset(Target { admin, rule, key }: Target) -> Response {
    done(admin.limiter.reset(&rule, key).await)
}

/// The longest penalty or allow-list entry the limiter takes (`Limiter::penalize`): 366 days.
const MAX_OVERRIDE_SECS: u64 = 366 * 24 * 60 * 60;

#[derive(Deserialize)]
struct For {
    seconds: u64,
}

/// The duration of a `{"seconds": n}` body, or `None` when it is not one.
fn duration(body: &Bytes) -> Option<Duration> {
    match serde_json::from_slice::<For>(body) {
        Ok(For { seconds }) if (1..=MAX_OVERRIDE_SECS).contains(&seconds) => {
            Some(Duration::from_secs(seconds))
        }
        _ => None,
    }
}

/// The `400` for a body that is not `{"seconds": n}`.
fn bad_body() -> Response {
    problem(
        StatusCode::BAD_REQUEST,
        &format!(
            r#"expected a JSON body {{"seconds": n}} with n from 1 to {}"#,
            MAX_OVERRIDE_SECS
        ),
    )
}

/// `204`, or `503` when the limiter failed.
fn done(outcome: Result<(), LimiterError>) -> Response {
    match outcome {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => unavailable(&e),
    }
}

async fn penalize(Target { admin, rule, key }: Target, body: Bytes) -> Response {
    match duration(&body) {
        Some(d) => done(admin.limiter.penalize(&rule, key, d).await),
        None => bad_body(),
    }
}

async fn allow(Target { admin, rule, key }: Target, body: Bytes) -> Response {
    match duration(&body) {
        Some(d) => done(admin.limiter.allow(&rule, key, d).await),
        None => bad_body(),
    }
}

/// The live rule of an authorized `/admin/rules/{rule}` request (the token checked first, as
/// for [`Target`]).
struct LiveRule {
    admin: Admin,
    rule: Rule,
}

impl FromRequestParts<Admin> for LiveRule {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, admin: &Admin) -> Result<Self, Response> {
        let client = admin.auth.check(parts).await?;
        let Path(name) = Path::<String>::from_request_parts(parts, admin)
            .await
            .map_err(IntoResponse::into_response)?;
        let live = || admin.rules.iter().map(|(r, _)| r).filter(|r| r.is_live());
        let Some(rule) = live().find(|r| r.name() == name) else {
            let names: Vec<&str> = live().map(Rule::name).collect();
            let detail = format!(
                "no live rule named {name:?}; the live rules are {}",
                names.join(", ")
            );
            return Err(Refusal::UnknownRule(detail).into_response());
        };
        let op = if parts.method == axum::http::Method::PUT {
            "set rule"
        } else {
            "clear rule"
        };
        tracing::info!(client, op, rule = rule.name(), "admin operation");
        Ok(Self {
            admin: admin.clone(),
            rule: rule.clone(),
        })
    }
}

/// The body of `PUT /admin/rules/{rule}`: a quota, a mode, or both.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleBody {
    quota: Option<String>,
    mode: Option<String>,
}

/// A mode as the admin API spells it.
fn parse_mode(name: &str) -> Option<Mode> {
    match name {
        "enforce" => Some(Mode::Enforce),
        "shadow" => Some(Mode::Shadow),
        "soft" => Some(Mode::Soft),
        _ => None,
    }
}

async fn set_rule(LiveRule { admin, rule }: LiveRule, body: Bytes) -> Response {
    let body = match serde_json::from_slice::<RuleBody>(&body) {
        Ok(body) if body.quota.is_some() || body.mode.is_some() => body,
        _ => {
            return problem(
                StatusCode::BAD_REQUEST,
                r#"expected a JSON body {"quota": "100/minute"}, {"mode": "shadow"} or both"#,
            );
        }
    };
    // Both parsed before either is set: a request that is refused changes nothing.
    let quota = match body.quota.as_deref().map(str::parse::<Quota>).transpose() {
        Ok(quota) => quota,
        Err(e) => return problem(StatusCode::UNPROCESSABLE_ENTITY, &e.to_string()),
    };
    let mode = match body
        .mode
        .as_deref()
        .map(|m| parse_mode(m).ok_or(m))
        .transpose()
    {
        Ok(mode) => mode,
        Err(m) => {
            return problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                &format!("unknown mode {m:?}: expected enforce, shadow or soft"),
            );
        }
    };
    if let Some(quota) = quota
        && let Some(refused) = refusal(admin.limiter.set_rule_quota(&rule, quota).await)
    {
        return refused;
    }
    if let Some(mode) = mode
        && let Some(refused) = refusal(admin.limiter.set_rule_mode(&rule, mode).await)
    {
        return refused;
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn clear_rule(LiveRule { admin, rule }: LiveRule) -> Response {
    if let Some(refused) = refusal(admin.limiter.clear_rule_quota(&rule).await) {
        return refused;
    }
    refusal(admin.limiter.clear_rule_mode(&rule).await)
        .unwrap_or_else(|| StatusCode::NO_CONTENT.into_response())
}

/// The answer refusing a live-rule change that was not made (`None`: it was): `422` for a
/// quota the rule cannot work with, else `503`.
fn refusal(outcome: Result<u64, LimiterError>) -> Option<Response> {
    match outcome {
        Ok(_) => None,
        Err(LimiterError::Config(e)) => {
            Some(problem(StatusCode::UNPROCESSABLE_ENTITY, &e.to_string()))
        }
        Err(e) => Some(unavailable(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_spelled_as_the_extractors_make_them() {
        let api = KeySyntax::UserOrIp(ClientIp::peer());
        assert_eq!(api.parse("203.0.113.7"), Some(Key::from("203.0.113.7")));
        assert_eq!(
            api.parse("::ffff:203.0.113.7"),
            Some(Key::from("203.0.113.7"))
        );
        assert_eq!(api.parse("2001:db8::1"), Some(Key::from("2001:db8::/64")));
        assert_eq!(api.parse("2001:db8::/64"), api.parse("2001:db8::ffff"));
        assert_eq!(
            api.parse("user:Alice"),
            Some(Key::pair(&Key::from("user"), &Key::from("alice")))
        );
        for bad in ["", "user:", "user:a b", "300.1.1.1", "alice"] {
            assert_eq!(api.parse(bad), None, "{bad}");
        }
        assert_eq!(
            KeySyntax::Phone.parse("+1 (555) 010-0000"),
            Some(Key::from("+15550100000"))
        );
        assert_eq!(KeySyntax::Phone.parse("call me"), None);
    }
}
