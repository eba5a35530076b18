//! [`Wire`]: a layer's checked transport, which reads the session ids a request offers and
//! puts a new token on the response.

use http::header::CACHE_CONTROL;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::session::cookie::CookieConfig;
use crate::session::cookie_header::{self, Candidates, ReadCookie};
use crate::session::id::SessionId;
use crate::session::state::CookieAction;
use crate::session::store::{Changes, Record};

/// The reserved field that records which transport created a session: absent (or `cookie`) for
/// cookie sessions, `header` for token sessions.
pub(super) const VIA_FIELD: &str = "$via";
/// [`VIA_FIELD`]'s value for a session created by a header-token layer.
const VIA_HEADER: &str = "header";
/// [`VIA_FIELD`]'s value a cookie session may carry (cookie layers write none).
pub(super) const VIA_COOKIE: &str = "cookie";

/// A layer's transport, checked: what requests read and responses write.
#[derive(Debug)]
pub(crate) enum Wire {
    Cookie,
    Header(TokenHeader),
}

/// The header transport's names.
#[derive(Debug)]
pub(crate) struct TokenHeader {
    request: HeaderName,
    /// `Authorization: Bearer <token>` rather than the bare token.
    bearer: bool,
    response: HeaderName,
}

impl Wire {
    /// The session ids the request offers over this transport.
    pub(crate) fn read(&self, headers: &HeaderMap, cookie: &CookieConfig) -> ReadCookie {
        match self {
            Self::Cookie => cookie_header::read(headers, cookie.name()),
            Self::Header(h) => h.read(headers),
        }
    }

    /// Whether a stored session belongs to this transport: header sessions carry
    /// `$via = header`, cookie sessions no `$via` (those stored before it existed included).
    pub(crate) fn accepts(&self, record: &Record) -> bool {
        let via = record.get(VIA_FIELD);
        match self {
            Self::Cookie => via.is_none_or(|v| v == VIA_COOKIE),
            Self::Header(_) => via == Some(VIA_HEADER),
        }
    }

    /// The fields a new session is created with: a header layer records its transport. Cookie
    /// sessions stay as they were before transports existed (no extra field).
    pub(crate) fn stamp(&self, mut changes: Changes) -> Changes {
        if let Self::Header(_) = self {
            changes
                .set
                .insert(VIA_FIELD.to_owned(), VIA_HEADER.to_owned());
        }
        changes
    }
}

impl TokenHeader {
    /// Names checked by [`Transport::resolve`](super::Transport::resolve): the request header
    /// (`bearer`: `Authorization: Bearer <token>`), and the response header a new token goes in.
    pub(super) fn new(request: HeaderName, bearer: bool, response: HeaderName) -> Self {
        Self {
            request,
            bearer,
            response,
        }
    }

    /// The response header a new token goes in, and whether requests carry `Bearer <token>`.
    #[cfg(test)]
    pub(super) fn response_and_bearer(&self) -> (&HeaderName, bool) {
        (&self.response, self.bearer)
    }

    /// The request header the token comes in.
    pub(crate) fn request_header(&self) -> &HeaderName {
        &self.request
    }

    pub(super) fn read(&self, headers: &HeaderMap) -> ReadCookie {
        let mut values = headers.get_all(&self.request).iter();
        let Some(value) = values.next() else {
            return ReadCookie::Absent;
        };
        if values.next().is_some() {
            // Two credentials: which one the client meant is a guess, so neither counts.
            tracing::debug!(header = %self.request, "session: token header sent twice; ignored");
            return ReadCookie::Malformed;
        }
        let mut token = value.as_bytes().trim_ascii();
        if self.bearer {
            let Some(rest) = strip_bearer(token) else {
                tracing::debug!("session: authorization is not a bearer token; ignored");
                return ReadCookie::Malformed;
            };
            token = rest;
        }
        match SessionId::parse_bytes(token) {
            Some(id) => ReadCookie::Ids(Candidates::one(id)),
            None => {
                tracing::debug!(len = token.len(), "session: malformed token ignored");
                ReadCookie::Malformed
            }
        }
    }

    /// Puts a new token on the response; the token is a credential, so no cache may keep it.
    pub(crate) fn respond(&self, headers: &mut HeaderMap, action: &CookieAction) {
        let CookieAction::Set(id) = action else {
            // Keep: the client's token stays good. Remove: the store no longer knows it.
            return;
        };
        if let Ok(v) = HeaderValue::from_str(&id.encode()) {
            headers.insert(self.response.clone(), v);
            headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        }
    }
}

/// The credentials of `Bearer <credentials>`: the scheme in any case, then one or more spaces.
fn strip_bearer(value: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer";
    let (scheme, rest) = value.split_at_checked(SCHEME.len())?;
    if !scheme.eq_ignore_ascii_case(SCHEME) || rest.first() != Some(&b' ') {
        return None;
    }
    let rest = rest.trim_ascii_start();
    (!rest.is_empty()).then_some(rest)
}
