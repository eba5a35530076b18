//! RFC 9457 problem documents: the bodies of the responses the layers write themselves.
//!
//! A problem document names the status and, where it helps the client, what to do; it never
//! carries an internal error's text (a Redis error, a script message), which goes to the log.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

/// An RFC 9457 problem document: `about:blank`, the status' reason as title, `detail` when not
/// empty, and `extra` members.
pub(crate) fn problem(
    status: StatusCode,
    detail: &str,
    extra: &[(&str, serde_json::Value)],
) -> Response<Bytes> {
    let mut doc = serde_json::Map::new();
    doc.insert("type".into(), "about:blank".into());
    doc.insert(
        "title".into(),
        status.canonical_reason().unwrap_or("Error").into(),
    );
    doc.insert("status".into(), status.as_u16().into());
    if !detail.is_empty() {
        doc.insert("detail".into(), detail.into());
    }
    for (k, v) in extra {
        doc.insert((*k).to_owned(), v.clone());
    }
    let body = serde_json::Value::Object(doc).to_string();
    let mut res = Response::new(Bytes::from(body));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    res
}
