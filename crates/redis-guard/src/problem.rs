//! RFC 9457 problem documents: the bodies of the responses the layers write themselves, and
//! [`Respond`], the hook that writes them instead.
//!
//! A problem document names the status and, where it helps the client, what to do; it never
//! carries an internal error's text (a Redis error, a script message), which goes to the log.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

/// The value of a problem document member: strings are escaped by `serde_json`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Member<'a> {
    Str(&'a str),
    Uint(u64),
}

/// An RFC 9457 problem document: `about:blank`, the status' reason as title, `detail` when not
/// empty, and `extra` members (sorted by name, none named like a standard member).
///
/// Written straight into one buffer, members sorted by name as a `serde_json` map sorts them:
/// a denied request is answered often (an abusive client is all denials), so no `Value` tree is
/// built per answer.
pub(crate) fn problem(
    status: StatusCode,
    detail: &str,
    extra: &[(&str, Member<'_>)],
) -> Response<Bytes> {
    let empty = detail.is_empty();
    let standard = [
        ("detail", Member::Str(detail)),
        ("status", Member::Uint(u64::from(status.as_u16()))),
        (
            "title",
            Member::Str(status.canonical_reason().unwrap_or("Error")),
        ),
        ("type", Member::Str("about:blank")),
    ];
    let standard = &standard[usize::from(empty)..];
    debug_assert!(extra.is_sorted_by_key(|(name, _)| *name));
    debug_assert!(
        extra
            .iter()
            .all(|(n, _)| standard.iter().all(|(s, _)| s != n))
    );
    // The exact length when no string needs escaping (the usual case): `Bytes` then keeps the
    // buffer as it is, without a second allocation.
    let members = standard.len() + extra.len();
    let len = 1
        + members
        + standard
            .iter()
            .chain(extra)
            .map(|(name, value)| name.len() + 3 + value.plain_len())
            .sum::<usize>();
    let mut body = Vec::with_capacity(len);
    body.push(b'{');
    let (mut s, mut e) = (standard.iter().peekable(), extra.iter().peekable());
    let mut first = true;
    loop {
        let next = match (s.peek(), e.peek()) {
            (Some(a), Some(b)) if b.0 < a.0 => e.next(),
            (Some(_), _) => s.next(),
            (None, _) => e.next(),
        };
        let Some((name, value)) = next else { break };
        if !first {
            body.push(b',');
        }
        first = false;
        write_member(&mut body, name, *value);
    }
    body.push(b'}');
    let mut res = Response::new(Bytes::from(body));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    res
}

impl Member<'_> {
    /// The length of the value written, when a string needs no escaping.
    fn plain_len(self) -> usize {
        match self {
            Member::Str(s) => s.len() + 2,
            Member::Uint(n) => n.checked_ilog10().map_or(1, |d| d as usize + 1),
        }
    }
}

/// `"name":value`, with `serde_json`'s escaping and number format.
fn write_member(out: &mut Vec<u8>, name: &str, value: Member<'_>) {
    write_str(out, name);
    out.push(b':');
    match value {
        Member::Str(s) => write_str(out, s),
        // Writing into a `Vec` cannot fail, and integers always serialize.
        Member::Uint(n) => {
            let _ = serde_json::to_writer(out, &n);
        }
    }
}

/// A JSON string as `serde_json` writes it: as it is between quotes when nothing in it needs
/// escaping (names and details the layers write), else through `serde_json`.
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    if plain(s) {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing into a `Vec` cannot fail, and strings always serialize.
        let _ = serde_json::to_writer(out, s);
    }
}

/// Whether `s` goes into a JSON string as it is.
fn plain(s: &str) -> bool {
    s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\')
}

/// A layer's hook for its own answers (`.response(…)` on its builder): the answer to a
/// rejection `R`, as bytes.
pub(crate) struct Respond<R>(Arc<Hook<R>>);

/// What a [`Respond`] calls.
type Hook<R> = dyn Fn(&R) -> Response<Bytes> + Send + Sync;

impl<R> Respond<R> {
    pub(crate) fn new(hook: impl Fn(&R) -> Response<Bytes> + Send + Sync + 'static) -> Self {
        Self(Arc::new(hook))
    }

    pub(crate) fn call(&self, rejection: &R) -> Response<Bytes> {
        (self.0)(rejection)
    }
}

impl<R> Clone for Respond<R> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

/// A closure shows as what it is for.
impl<R> fmt::Debug for Respond<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Respond(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(res: &Response<Bytes>) -> &str {
        std::str::from_utf8(res.body()).unwrap()
    }

    #[test]
    fn same_document_as_a_serde_json_map() {
        // Rule names are configuration: whatever they hold comes out escaped, as serde_json
        // escapes it (quotes, backslashes, control characters, non-ASCII kept as is).
        let odd = "a\"b\\c\n\t\u{1}\u{7f}é🙂/";
        let res = problem(
            StatusCode::TOO_MANY_REQUESTS,
            odd,
            &[("retry_after", Member::Uint(7)), ("rule", Member::Str(odd))],
        );
        let expected = serde_json::json!({
            "type": "about:blank",
            "title": "Too Many Requests",
            "status": 429,
            "detail": odd,
            "retry_after": 7,
            "rule": odd,
        });
        assert_eq!(body(&res), expected.to_string());
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(body(&res)).unwrap(),
            expected
        );
        // An extra member sorting before every standard one, and no detail.
        let res = problem(StatusCode::IM_A_TEAPOT, "", &[("a", Member::Str(""))]);
        assert_eq!(
            body(&res),
            r#"{"a":"","status":418,"title":"I'm a teapot","type":"about:blank"}"#
        );
        assert_eq!(
            res.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
    }
}
