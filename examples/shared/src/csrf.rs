//! Cross-site request refusal for the demo apps.
//!
//! A state-changing request (any method but `GET`, `HEAD`, `OPTIONS`, `TRACE`) must
//!
//! 1. not come from another site: with `Sec-Fetch-Site`, only `same-origin` and `none` (typed
//!    URL, bookmark) pass — `same-site` and `cross-site` do not; without it, an `Origin` must name
//!    the `Host` the request was sent to; with neither, the client is not a browser that could be
//!    tricked into sending cookies, and passes (curl, scripts). Otherwise `403`.
//! 2. say `Content-Type: application/json`, otherwise `415`. A cross-site HTML form can only send
//!    `text/plain`, `application/x-www-form-urlencoded` and `multipart/form-data`, and a
//!    cross-site `fetch` with `application/json` needs a CORS preflight these apps never grant:
//!    login CSRF with a `text/plain` body that parses as JSON is shut twice.
//!
//! Both refusals are `application/problem+json` (RFC 9457) and happen before any handler runs:
//! no session is touched, no cookie set, no limiter counted. The checks follow Go's
//! `net/http.CrossOriginProtection` (<https://words.filippo.io/csrf/>).

use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};

/// `None` when the request may go on; otherwise the `403`/`415` response to send instead.
pub fn refusal(method: &Method, headers: &HeaderMap) -> Option<Response<String>> {
    if matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    ) {
        return None;
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        if !matches!(site.as_bytes(), b"same-origin" | b"none") {
            return Some(problem(
                StatusCode::FORBIDDEN,
                "cross-site request refused (Sec-Fetch-Site)",
            ));
        }
    } else if let Some(origin) = headers.get(header::ORIGIN)
        && !same_origin(origin, headers.get(header::HOST))
    {
        return Some(problem(
            StatusCode::FORBIDDEN,
            "cross-site request refused (Origin does not match Host)",
        ));
    }
    if !is_json(headers.get(header::CONTENT_TYPE)) {
        return Some(problem(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send Content-Type: application/json",
        ));
    }
    None
}

/// `Origin: <scheme>://<host>[:port]` names `Host`. The scheme is not compared: behind a TLS
/// proxy the app sees `http` while the browser says `https`.
fn same_origin(origin: &HeaderValue, host: Option<&HeaderValue>) -> bool {
    let (Ok(origin), Some(Ok(host))) = (origin.to_str(), host.map(HeaderValue::to_str)) else {
        return false;
    };
    let authority = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    authority.is_some_and(|a| !a.is_empty() && a.eq_ignore_ascii_case(host.trim()))
}

/// `application/json`, parameters (`; charset=utf-8`) allowed.
fn is_json(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// An RFC 9457 problem response (`application/problem+json`): the status, its reason as
/// title, and `detail`. The demo apps answer every refusal with one.
pub fn problem(status: StatusCode, detail: &str) -> Response<String> {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut res = Response::new(body.to_string());
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(method: &Method, headers: &[(&'static str, &'static str)]) -> u16 {
        let mut map = HeaderMap::new();
        map.insert(header::HOST, HeaderValue::from_static("app.example:3000"));
        for (name, value) in headers {
            map.insert(*name, HeaderValue::from_static(value));
        }
        refusal(method, &map).map_or(200, |r| r.status().as_u16())
    }

    const JSON: (&str, &str) = ("content-type", "application/json; charset=utf-8");

    #[test]
    fn cross_site_and_non_json_writes_are_refused() {
        assert_eq!(status(&Method::POST, &[JSON]), 200, "curl: no Origin");
        assert_eq!(
            status(&Method::GET, &[("sec-fetch-site", "cross-site")]),
            200
        );
        for site in ["same-origin", "none"] {
            assert_eq!(
                status(&Method::POST, &[JSON, ("sec-fetch-site", site)]),
                200
            );
        }
        for site in ["same-site", "cross-site", "garbage"] {
            assert_eq!(
                status(&Method::POST, &[JSON, ("sec-fetch-site", site)]),
                403
            );
        }
        assert_eq!(
            status(
                &Method::POST,
                &[JSON, ("origin", "https://APP.example:3000")]
            ),
            200
        );
        for origin in [
            "https://evil.example",
            "http://app.example:3001",
            "null",
            "app.example:3000",
            "https://",
        ] {
            assert_eq!(
                status(&Method::POST, &[JSON, ("origin", origin)]),
                403,
                "{origin}"
            );
        }
        for ct in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "application/jsonx",
        ] {
            assert_eq!(status(&Method::POST, &[("content-type", ct)]), 415, "{ct}");
        }
        assert_eq!(status(&Method::DELETE, &[]), 415, "no Content-Type");
        // Cross-site wins over the media type: the more telling refusal.
        assert_eq!(
            status(
                &Method::POST,
                &[
                    ("content-type", "text/plain"),
                    ("origin", "https://evil.example")
                ]
            ),
            403
        );
    }
}
