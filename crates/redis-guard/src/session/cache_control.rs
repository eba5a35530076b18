//! `Cache-Control` for a response that hands out a session: private, never stored by a shared cache.

use http::HeaderValue;
use http::header::CACHE_CONTROL;

/// Makes a response that depends on a session private: drops `public` and `s-maxage` (which
/// would let a shared cache store it and hand it, or its cookie, to everyone), adds `private`,
/// and, when it carries the session's `Set-Cookie`, `no-cache="Set-Cookie"` unless `no-cache`
/// or `no-store` is there already. The handler's other directives (`max-age`,
/// `must-revalidate`, …) stay.
pub(crate) fn private_cache_control(headers: &mut http::HeaderMap, set_cookie: bool) {
    // The common case: nothing to keep, the value is a constant (put in the place the one
    // lookup found).
    if let http::header::Entry::Vacant(place) = headers.entry(CACHE_CONTROL) {
        place.insert(fallback(set_cookie));
        return;
    }
    let mut directives: Vec<String> = headers
        .get_all(CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(split_directives)
        .filter(|d| {
            let name = directive_name(d);
            !name.eq_ignore_ascii_case("public") && !name.eq_ignore_ascii_case("s-maxage")
        })
        .collect();
    let has = |directives: &[String], name: &str| {
        directives
            .iter()
            .any(|d| directive_name(d).eq_ignore_ascii_case(name))
    };
    if !has(&directives, "private") {
        directives.insert(0, "private".to_owned());
    }
    if set_cookie && !has(&directives, "no-cache") && !has(&directives, "no-store") {
        directives.push("no-cache=\"Set-Cookie\"".to_owned());
    }
    headers.remove(CACHE_CONTROL);
    if let Ok(v) = HeaderValue::from_str(&directives.join(", ")) {
        headers.insert(CACHE_CONTROL, v);
    } else {
        headers.insert(CACHE_CONTROL, fallback(set_cookie));
    }
}

/// `private`, and `no-cache="Set-Cookie"` with the session's cookie: the value for a response
/// that has no `Cache-Control` of its own.
fn fallback(set_cookie: bool) -> HeaderValue {
    HeaderValue::from_static(if set_cookie {
        "private, no-cache=\"Set-Cookie\""
    } else {
        "private"
    })
}

fn directive_name(directive: &str) -> &str {
    directive.split('=').next().unwrap_or("").trim()
}

/// Splits a `Cache-Control` value at commas outside quoted strings (`no-cache="a, b"` is one).
fn split_directives(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in value.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            ',' if !quoted => out.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    out.push(current);
    out.into_iter()
        .map(|d| d.trim().to_owned())
        .filter(|d| !d.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(values: &[&str]) -> String {
        let mut h = http::HeaderMap::new();
        for v in values {
            h.append(CACHE_CONTROL, HeaderValue::from_str(v).unwrap());
        }
        private_cache_control(&mut h, true);
        assert_eq!(h.get_all(CACHE_CONTROL).iter().count(), 1);
        h[CACHE_CONTROL].to_str().unwrap().to_owned()
    }

    #[test]
    fn cache_control_becomes_private() {
        assert_eq!(apply(&[]), "private, no-cache=\"Set-Cookie\"");
        let mut none = http::HeaderMap::new();
        private_cache_control(&mut none, false);
        assert_eq!(none[CACHE_CONTROL], "private");
        assert_eq!(
            apply(&["public, max-age=60", "S-MaxAge=600"]),
            "private, max-age=60, no-cache=\"Set-Cookie\""
        );
        assert_eq!(apply(&["no-store"]), "private, no-store");
        let mut h = http::HeaderMap::new();
        h.insert(
            CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=60"),
        );
        private_cache_control(&mut h, false);
        assert_eq!(h[CACHE_CONTROL], "private, max-age=60");
        assert_eq!(
            apply(&["private=\"a, public\", no-cache"]),
            "private=\"a, public\", no-cache"
        );
    }
}
