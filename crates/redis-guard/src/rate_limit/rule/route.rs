//! [`Route`]: which requests a rule of a layer applies to, by method and path.

use http::Method;
use http::request::Parts;

/// The requests a rule applies to ([`Rule::for_route`](crate::rate_limit::Rule::for_route)): a
/// path, exact or a prefix, and optionally methods. One layer can then cover an API with a limit
/// per endpoint, with no layer per route. A rule without a route applies to every request.
///
/// Paths are compared as they arrive, byte for byte, without decoding (as axum's router matches
/// them). A prefix matches whole segments: `Route::prefix("/export")` matches `/export`,
/// `/export/` and `/export/2024`, not `/exports`. The query is never looked at. A request its
/// rules' routes all miss passes the layer without a decision.
///
/// A route for `GET` covers `HEAD` too, since servers (axum's router among them) answer `HEAD`
/// with the `GET` handler: otherwise `curl -I` would walk past a `GET` limit.
///
/// With the `axum` feature, the path compared is the one the client sent
/// ([`axum::extract::OriginalUri`] when the router put it in the request extensions), so a layer
/// inside a [`Router::nest`](axum::Router::nest) matches the full path, `/api/search`, not the
/// `/search` left after the nest stripped its prefix. Without it, the request's own path.
///
/// ```
/// use http::Method;
/// use redis_guard::rate_limit::Route;
///
/// let export = Route::prefix("/export").method(Method::GET);
/// let (get, ()) = http::Request::get("/export/2024?x=1").body(()).unwrap().into_parts();
/// let (post, ()) = http::Request::post("/export/2024").body(()).unwrap().into_parts();
/// let (other, ()) = http::Request::get("/exports").body(()).unwrap().into_parts();
/// assert!(export.matches(&get));
/// assert!(!export.matches(&post));
/// assert!(!export.matches(&other));
/// assert!(Route::path("/login").matches(&http::Request::post("/login").body(()).unwrap().into_parts().0));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Route {
    path: String,
    prefix: bool,
    /// Empty: every method.
    methods: Vec<Method>,
}

impl Route {
    /// Requests for exactly `path`, any method.
    pub fn path(path: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            prefix: false,
            methods: Vec::new(),
        }
    }

    /// Requests for `prefix` and every path below it (whole segments), any method.
    /// `Route::prefix("/")` is every path.
    pub fn prefix(prefix: impl Into<String>) -> Self {
        let mut path: String = prefix.into();
        while path.len() > 1 && path.ends_with('/') {
            path.pop();
        }
        Self {
            path,
            prefix: true,
            methods: Vec::new(),
        }
    }

    /// Only requests with `method` (call it again to allow several); `GET` implies `HEAD`.
    pub fn method(mut self, method: Method) -> Self {
        if !self.methods.contains(&method) {
            self.methods.push(method);
        }
        self
    }

    /// Whether the request head matches.
    #[must_use]
    pub fn matches(&self, parts: &Parts) -> bool {
        if !self.methods.is_empty() && !self.allows(&parts.method) {
            return false;
        }
        let path = original_path(parts);
        if !self.prefix {
            return path == self.path;
        }
        if self.path == "/" {
            return true;
        }
        path.strip_prefix(self.path.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    fn allows(&self, method: &Method) -> bool {
        self.methods.contains(method)
            || (method == Method::HEAD && self.methods.contains(&Method::GET))
    }
}

/// The path the client asked for: under an axum `nest`, the router keeps it in [`OriginalUri`]
/// while `parts.uri` holds what is left after the nest's prefix.
///
/// [`OriginalUri`]: axum::extract::OriginalUri
fn original_path(parts: &Parts) -> &str {
    #[cfg(feature = "axum")]
    if let Some(original) = parts.extensions.get::<axum::extract::OriginalUri>() {
        return original.0.path();
    }
    parts.uri.path()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_helpers::request_head as head;

    #[test]
    fn prefixes_match_whole_segments_and_paths_match_exactly() {
        let export = Route::prefix("/export/");
        for (uri, expected) in [
            ("/export", true),
            ("/export/", true),
            ("/export/a/b?q=/x", true),
            ("/exports", false),
            ("/Export", false),
            ("/%65xport", false),
            ("/", false),
            ("/api/export", false),
        ] {
            assert_eq!(export.matches(&head(Method::GET, uri)), expected, "{uri}");
        }
        assert!(Route::prefix("/").matches(&head(Method::GET, "/anything")));
        let login = Route::path("/login")
            .method(Method::POST)
            .method(Method::PUT);
        assert!(login.matches(&head(Method::POST, "/login?next=/")));
        assert!(login.matches(&head(Method::PUT, "/login")));
        assert!(!login.matches(&head(Method::GET, "/login")));
        assert!(!login.matches(&head(Method::POST, "/login/")));
        assert!(Route::path("/x").matches(&head(Method::DELETE, "/x")));
    }

    #[test]
    fn get_implies_head_and_nothing_else() {
        let search = Route::path("/search").method(Method::GET);
        assert!(search.matches(&head(Method::GET, "/search")));
        assert!(search.matches(&head(Method::HEAD, "/search")));
        assert!(!search.matches(&head(Method::POST, "/search")));
        assert!(!search.matches(&head(Method::OPTIONS, "/search")));
        let head_only = Route::path("/search").method(Method::HEAD);
        assert!(!head_only.matches(&head(Method::GET, "/search")));
    }
}
