//! Reading the request's `Cookie` header: which session ids it offers.

use http::HeaderMap;
use http::header::COOKIE;

use super::id::SessionId;

/// The most session ids read from one request's cookies. Each candidate can cost a store round
/// trip until one names a live session, so a request carrying many is cut off here.
pub(crate) const MAX_COOKIE_CANDIDATES: usize = 4;

/// The well-formed session ids a request offers, in order: at most
/// [`MAX_COOKIE_CANDIDATES`], kept in place (a request almost always carries one, and needs no
/// allocation for it). Reads as a slice.
#[derive(Clone)]
pub(crate) struct Candidates {
    ids: [SessionId; MAX_COOKIE_CANDIDATES],
    len: usize,
}

impl Candidates {
    /// No id.
    pub(crate) const fn new() -> Self {
        Self {
            ids: [SessionId::UNUSED; MAX_COOKIE_CANDIDATES],
            len: 0,
        }
    }

    /// `id` alone.
    pub(crate) fn one(id: SessionId) -> Self {
        let mut ids = Self::new();
        ids.push(id);
        ids
    }

    /// Adds `id` at the end; `false` (and nothing added) when the list is full.
    fn push(&mut self, id: SessionId) -> bool {
        let Some(slot) = self.ids.get_mut(self.len) else {
            return false;
        };
        *slot = id;
        self.len += 1;
        true
    }

    /// Forgets every id.
    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }
}

impl std::fmt::Debug for Candidates {
    /// The ids held, as a list (not the unused places).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl std::ops::Deref for Candidates {
    type Target = [SessionId];

    fn deref(&self) -> &[SessionId] {
        &self.ids[..self.len]
    }
}

/// What the request's cookies hold.
#[derive(Debug)]
pub(crate) enum ReadCookie {
    Absent,
    Malformed,
    /// Well-formed ids, in order, 1 to [`MAX_COOKIE_CANDIDATES`].
    Ids(Candidates),
}

/// The session ids in the request's `Cookie` headers: the well-formed values of every cookie
/// with our name, in order, at most [`MAX_COOKIE_CANDIDATES`], duplicates dropped.
///
/// The header is read as bytes: another cookie's non-ASCII value (from a sibling
/// subdomain, say) does not hide ours. Our own values are read strictly (optionally in
/// double quotes, as RFC 6265 allows); malformed ones are ignored, with a debug log, and
/// never reach the store. Several candidates happen when a cookie with our name was also
/// set for a parent domain or a longer path: the load tries each until one names a live
/// session, so a planted id cannot shadow the real one.
pub(crate) fn read(headers: &HeaderMap, name: &str) -> ReadCookie {
    let name = name.as_bytes();
    let mut seen = false;
    let mut ids = Candidates::new();
    for header in headers.get_all(COOKIE) {
        for pair in header.as_bytes().split(|&b| b == b';') {
            let pair = pair.trim_ascii();
            let Some(eq) = pair.iter().position(|&b| b == b'=') else {
                continue;
            };
            let (key, value) = (pair[..eq].trim_ascii(), pair[eq + 1..].trim_ascii());
            if key != name {
                continue;
            }
            seen = true;
            let value = value
                .strip_prefix(b"\"")
                .and_then(|v| v.strip_suffix(b"\""))
                .unwrap_or(value);
            match SessionId::parse_bytes(value) {
                Some(id) if !ids.contains(&id) => {
                    if !ids.push(id) {
                        tracing::debug!("session: more session cookies than we try; ignored");
                        return ReadCookie::Ids(ids);
                    }
                }
                Some(_) => {}
                None => tracing::debug!(
                    len = value.len(),
                    "session: malformed session cookie ignored"
                ),
            }
        }
    }
    if !ids.is_empty() {
        ReadCookie::Ids(ids)
    } else if seen {
        ReadCookie::Malformed
    } else {
        ReadCookie::Absent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(COOKIE, http::HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    fn ids(r: ReadCookie) -> Vec<String> {
        match r {
            ReadCookie::Ids(ids) => ids.iter().map(SessionId::encode).collect(),
            r => panic!("{r:?}"),
        }
    }

    fn read_id(headers: &HeaderMap) -> ReadCookie {
        read(headers, "id")
    }

    #[test]
    fn reads_every_valid_id_in_order_and_ignores_garbage() {
        let id = SessionId::generate().unwrap().encode();
        let other = SessionId::generate().unwrap().encode();
        let long = "a".repeat(5000);
        let both = format!("x=1; id=; id={id}; id=\"{other}\"; id={id}");
        assert_eq!(
            ids(read_id(&headers(&[both.as_bytes()]))),
            [id.clone(), other.clone()]
        );
        // Another cookie's bytes, however odd, do not hide ours; nor do extra headers.
        let odd = [
            b"theme=\xe9t\xe9; a=\x80\xff; ".as_slice(),
            b"id=",
            id.as_bytes(),
        ]
        .concat();
        assert_eq!(
            ids(read_id(&headers(&[&odd, b"id=x"]))),
            std::slice::from_ref(&id)
        );
        // Bounded.
        let many: Vec<String> = (0..10)
            .map(|_| format!("id={}", SessionId::generate().unwrap().encode()))
            .collect();
        let many = many.join("; ");
        assert_eq!(
            ids(read_id(&headers(&[many.as_bytes()]))).len(),
            MAX_COOKIE_CANDIDATES
        );
        for bad in [
            b"id=".as_slice(),
            long.as_bytes(),
            b"id=not base64!",
            b"id=\xff\xfe",
            b"ID=x",
        ] {
            let bad_cookie = [b"id=".as_slice(), bad].concat();
            assert!(!matches!(
                read_id(&headers(&[&bad_cookie])),
                ReadCookie::Ids(_)
            ));
        }
        assert!(matches!(read_id(&headers(&[])), ReadCookie::Absent));
        assert!(matches!(
            read_id(&headers(&[b"other=1"])),
            ReadCookie::Absent
        ));
    }
}
