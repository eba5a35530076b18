//! Invalidation after unsafe methods ([RFC 9111 §4.4]): a non-error response to a request
//! whose method is not known to be safe voids the stored responses of its target URI, and of
//! a same-origin `Location` / `Content-Location`.
//!
//! Each target URI has an implicit tag, the digest of the URI as keyed (namespace, host, path,
//! query): every entry records it, and voiding it voids every `Vary` variant of the URI (and
//! its `GET` and `HEAD` entries) on every replica, no `KEYS`, no `SCAN`. On Redis the entries
//! of a URI are listed beside them as they are filled, and voiding the URI deletes them and
//! records when (a fill that started before stores nothing), so that a hit reads no record of
//! its URI.
//!
//! [RFC 9111 §4.4]: https://www.rfc-editor.org/rfc/rfc9111#section-4.4

use std::sync::Arc;

use http::header::{CONTENT_LOCATION, LOCATION};
use http::{Method, Request, Response, request};
use tower_service::Service;

use super::body::ResponseBody;
use super::policy::{host_of, original_path};
use super::shared::Shared;
use super::store::digest;

/// Whether `method` is known to be safe ([RFC 9110 §9.2.1](https://www.rfc-editor.org/rfc/rfc9110#section-9.2.1)):
/// any other one may change the resource.
pub(crate) fn is_safe(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

/// The host as the key holds it (`None` when the layer keys no host, or the request names
/// none).
fn host(shared: &Shared, req: &request::Parts) -> Option<String> {
    if shared.key.host { host_of(req) } else { None }
}

/// The implicit tag of a target URI (host as keyed, path, query), as a record digest.
fn uri_tag(shared: &Shared, host: Option<&str>, path: &str, query: Option<&str>) -> String {
    let normalized = shared.key.query.normalize(query);
    let query = match &normalized {
        Some(q) => q.as_deref(),
        None => query,
    };
    digest([
        b"rg-target-uri".as_slice(),
        shared.key.namespace.as_bytes(),
        host.map_or(&b"\0nohost"[..], str::as_bytes),
        path.as_bytes(),
        query.map_or(&b"\0none"[..], str::as_bytes),
    ])
}

/// The implicit tag of the request's target URI.
pub(crate) fn target_tag(shared: &Shared, req: &request::Parts) -> String {
    let host = host(shared, req);
    uri_tag(shared, host.as_deref(), original_path(req), req.uri.query())
}

/// The implicit tag of the URI a `Location` or `Content-Location` value names, resolved
/// against the request's; `None` when it is of another origin (another host) or not a URI
/// reference.
fn referenced_tag(
    shared: &Shared,
    own_host: Option<&str>,
    base: &str,
    value: &str,
) -> Option<String> {
    let value = value.trim();
    let value = value.split_once('#').map_or(value, |(v, _)| v);
    let (authority, rest) = if let Some((scheme, rest)) = value.split_once("://")
        && !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    {
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        (Some(&rest[..end]), &rest[end..])
    } else if let Some(rest) = value.strip_prefix("//") {
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        (Some(&rest[..end]), &rest[end..])
    } else {
        (None, value)
    };
    if let Some(authority) = authority {
        // Same origin: the host (and port) the request was for. Without a host in the key
        // the layer cannot tell origins apart, so a reference to another origin voids nothing.
        let theirs = authority.to_ascii_lowercase();
        let ours = own_host?;
        if theirs != ours {
            return None;
        }
    }
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    let path = if path.starts_with('/') {
        path.to_owned()
    } else if path.is_empty() {
        if authority.is_some() {
            "/".to_owned()
        } else if query.is_none() {
            return None;
        } else {
            base.to_owned()
        }
    } else {
        let dir = base.rfind('/').map_or("/", |i| &base[..=i]);
        format!("{dir}{path}")
    };
    let path = remove_dot_segments(&path);
    if path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return None;
    }
    Some(uri_tag(shared, own_host, &path, query))
}

/// RFC 3986 §5.2.4 on an absolute path.
fn remove_dot_segments(path: &str) -> String {
    if !path.split('/').any(|s| s == "." || s == "..") {
        return path.to_owned();
    }
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *seg {
            "." => {
                if last {
                    out.push("");
                }
            }
            ".." => {
                out.pop();
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

/// Calls the inner service with an unsafe request; when it answers 2xx or 3xx, voids the
/// stored responses of the target URI and of a same-origin `Location` / `Content-Location`
/// before the response goes out (so that the client's next `GET` sees the change). The store
/// failing only logs: the response is the handler's either way.
pub(crate) async fn unsafe_request<S, ReqBody, ResBody>(
    shared: Arc<Shared>,
    mut inner: S,
    req: Request<ReqBody>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body,
{
    let (parts, body) = req.into_parts();
    let own_host = host(&shared, &parts);
    let path = original_path(&parts).to_owned();
    let target = uri_tag(&shared, own_host.as_deref(), &path, parts.uri.query());
    let req = Request::from_parts(parts, body);
    std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
    let res = inner.call(req).await?;
    let status = res.status();
    if status.is_success() || status.is_redirection() {
        let mut tags = vec![target];
        for name in [LOCATION, CONTENT_LOCATION] {
            for value in res.headers().get_all(&name) {
                if let Ok(value) = value.to_str()
                    && let Some(tag) = referenced_tag(&shared, own_host.as_deref(), &path, value)
                    && !tags.contains(&tag)
                {
                    tags.push(tag);
                }
            }
        }
        let keep = shared.longest_life();
        let voids = tags.iter().map(|tag| shared.store.0.invalidate(tag, keep));
        for outcome in futures_util::future::join_all(voids).await {
            if let Err(e) = outcome {
                tracing::warn!(error = %e, %status, "voiding the stored responses of an unsafe request's target failed: they are served until they expire");
            }
        }
    }
    Ok(res.map(ResponseBody::inner))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::HOST;

    #[test]
    fn dot_segments_are_removed() {
        assert_eq!(remove_dot_segments("/a/b/../c"), "/a/c");
        assert_eq!(remove_dot_segments("/a/./b/."), "/a/b/");
        assert_eq!(remove_dot_segments("/../a"), "/a");
        assert_eq!(remove_dot_segments("/a/b"), "/a/b");
    }

    #[test]
    fn references_resolve_against_the_request() {
        let layer =
            super::super::CacheLayer::new(super::super::MemoryCacheStore::new()).expect("layer");
        let shared = &layer.shared;
        let (req, ()) = Request::post("/users/7?x=1")
            .header(HOST, "Example.org")
            .body(())
            .expect("request")
            .into_parts();
        let tag =
            |path: &str, query: Option<&str>| uri_tag(shared, Some("example.org"), path, query);
        let cases = [
            ("/users/8", Some(tag("/users/8", None))),
            (
                "http://example.org/users/8?y",
                Some(tag("/users/8", Some("y"))),
            ),
            ("https://EXAMPLE.org", Some(tag("/", None))),
            ("//example.org/a", Some(tag("/a", None))),
            ("8", Some(tag("/users/8", None))),
            ("../teams/1#top", Some(tag("/teams/1", None))),
            ("?page=2", Some(tag("/users/7", Some("page=2")))),
            ("http://other.example/users/8", None),
            ("", None),
        ];
        for (value, want) in cases {
            let got = referenced_tag(shared, Some("example.org"), "/users/7", value);
            assert_eq!(got, want, "{value}");
        }
        assert_eq!(target_tag(shared, &req), tag("/users/7", Some("x=1")));
    }
}
