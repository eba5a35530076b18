//! What one cache key holds: a header the store writes (times on the store's clock), then the
//! response as the layer encoded it.
//!
//! ```text
//! RGC3 <kind> <fresh until> <stale until> <started> <recompute> <blob>
//! ```
//!
//! The header has a fixed length ([`HEADER_LEN`] bytes): the magic `RGC3`, the kind (one
//! byte), then the four times in µs, each a big-endian `u64`; the blob follows at once. So a
//! hit reads the times at fixed places, with nothing to parse.
//!
//! `kind` is `E` (an entry: the blob is a response), `P` (hit-for-pass: the last response of
//! this key was not cacheable; requests go straight to the handler until it expires) or `F`
//! (under a key of its own beside an entry: the entry's last fill failed at `started`, and
//! nobody tries again before `fresh until`; no blob). The blob:
//! the variant digest (64 hex digits), the status (u16), the headers (a u32 count, then each
//! header's name and its value), the tags (a u32 count, then u32-length-prefixed bytes), the
//! body. A header's name is one byte, its place in [`NAMES`] (from 1), or 0 then a
//! u16-length-prefixed name; its value is u32-length-prefixed, or, when it is one of
//! [`VALUES`], its place there with the length's top bit set ([`CODED`]: no value is 2 GiB
//! long). So a hit makes the headers of the usual responses without reading their names, and
//! takes the usual values as constants, neither checked nor shared with the bytes read: what
//! it still checks is what a value from Redis must be (a valid name when not one of [`NAMES`],
//! valid values when not one of [`VALUES`], lengths within the value). Anything else under the key is not ours: [`decode`] answers `None`; a value of
//! an earlier format (`RGC1`, `RGC2`: the times in decimal text) is [`Stored::Earlier`].

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, StatusCode};

use super::status::CACHE_STATUS;

/// The first bytes of every value the cache writes.
const MAGIC: &[u8; 4] = b"RGC3";

/// The first bytes of the values of the earlier formats: read as a miss, and overwritten.
const EARLIER: [&[u8; 4]; 2] = [b"RGC1", b"RGC2"];

/// The length of the header in front of the blob: the magic, the kind, four times.
pub(crate) const HEADER_LEN: usize = 4 + 1 + 4 * 8;

/// The header names written as their place in this list (from 1): never reordered, only
/// added to at the end (an entry written with a longer list names a header a shorter one
/// does not know: a miss).
static NAMES: [HeaderName; 43] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::CACHE_CONTROL,
    header::ETAG,
    header::LAST_MODIFIED,
    header::DATE,
    header::EXPIRES,
    header::VARY,
    header::CONTENT_ENCODING,
    header::CONTENT_LANGUAGE,
    header::CONTENT_DISPOSITION,
    header::CONTENT_LOCATION,
    header::CONTENT_RANGE,
    header::CONTENT_SECURITY_POLICY,
    header::CONTENT_SECURITY_POLICY_REPORT_ONLY,
    header::ACCESS_CONTROL_ALLOW_ORIGIN,
    header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
    header::ACCESS_CONTROL_ALLOW_HEADERS,
    header::ACCESS_CONTROL_ALLOW_METHODS,
    header::ACCESS_CONTROL_EXPOSE_HEADERS,
    header::ACCESS_CONTROL_MAX_AGE,
    header::ACCEPT_RANGES,
    header::AGE,
    header::ALLOW,
    header::LOCATION,
    header::LINK,
    header::SERVER,
    header::SET_COOKIE,
    header::STRICT_TRANSPORT_SECURITY,
    header::X_CONTENT_TYPE_OPTIONS,
    header::X_FRAME_OPTIONS,
    header::X_XSS_PROTECTION,
    header::REFERRER_POLICY,
    header::PRAGMA,
    header::WARNING,
    header::VIA,
    header::RETRY_AFTER,
    header::WWW_AUTHENTICATE,
    header::ALT_SVC,
    header::TRANSFER_ENCODING,
    header::CONNECTION,
    header::TRAILER,
    header::X_DNS_PREFETCH_CONTROL,
];

/// The header values written as their place in this list (see [`CODED`]): never reordered,
/// only added to at the end (an entry written with a longer list names a value a shorter one
/// does not know: a miss). The `Content-Type`s axum's responses send, and a few values of the
/// usual response headers.
static VALUES: [HeaderValue; 24] = [
    HeaderValue::from_static("text/plain; charset=utf-8"),
    HeaderValue::from_static("text/html; charset=utf-8"),
    HeaderValue::from_static("application/json"),
    HeaderValue::from_static("application/octet-stream"),
    HeaderValue::from_static("text/plain"),
    HeaderValue::from_static("text/html"),
    HeaderValue::from_static("text/css"),
    HeaderValue::from_static("text/javascript"),
    HeaderValue::from_static("application/javascript"),
    HeaderValue::from_static("application/xml"),
    HeaderValue::from_static("image/png"),
    HeaderValue::from_static("image/jpeg"),
    HeaderValue::from_static("image/svg+xml"),
    HeaderValue::from_static("application/problem+json"),
    HeaderValue::from_static("accept-encoding"),
    HeaderValue::from_static("Accept-Encoding"),
    HeaderValue::from_static("origin"),
    HeaderValue::from_static("nosniff"),
    HeaderValue::from_static("bytes"),
    HeaderValue::from_static("gzip"),
    HeaderValue::from_static("br"),
    HeaderValue::from_static("*"),
    HeaderValue::from_static("no-cache"),
    HeaderValue::from_static("public"),
];

/// The bit of a value's length that says the rest is its place in [`VALUES`].
const CODED: u32 = 1 << 31;

/// Entry, hit-for-pass marker, or failed-fill marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Entry,
    Pass,
    Failed,
}

impl Kind {
    pub(crate) fn letter(self) -> &'static str {
        match self {
            Self::Entry => "E",
            Self::Pass => "P",
            Self::Failed => "F",
        }
    }
}

/// The times a store writes in front of the blob, on its clock (µs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Times {
    /// Fresh before this.
    pub(crate) fresh_until: u64,
    /// Servable as stale before this.
    pub(crate) stale_until: u64,
    /// When the request that computed it looked the key up (tag invalidations at or after it
    /// make the entry void).
    pub(crate) started: u64,
    /// How long the recomputation took (XFetch's delta).
    pub(crate) delta: u64,
}

/// The header of a value (the memory store writes it; the Redis script writes the same).
pub(crate) fn header(kind: Kind, t: Times) -> [u8; HEADER_LEN] {
    let mut out = [0; HEADER_LEN];
    out[..4].copy_from_slice(MAGIC);
    out[4] = kind.letter().as_bytes()[0];
    for (at, time) in [t.fresh_until, t.stale_until, t.started, t.delta]
        .into_iter()
        .enumerate()
    {
        out[5 + at * 8..13 + at * 8].copy_from_slice(&time.to_be_bytes());
    }
    out
}

/// A cached response.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) times: Times,
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) tags: Vec<String>,
    pub(crate) body: Bytes,
    /// A tag of it was purged softly after it was computed (set by the lookup, not stored):
    /// served as stale while one request recomputes it.
    pub(crate) purged: bool,
    /// `headers` hold an `Age` (set when decoded): when not, a hit looks none up.
    pub(crate) aged: bool,
    /// `headers` hold a `Cache-Status` (of caches nearer the origin; set when decoded): when
    /// not, a hit looks none up.
    pub(crate) relayed: bool,
}

/// A decoded value.
#[derive(Debug)]
pub(crate) enum Stored {
    Entry(Entry),
    /// A value of the earlier format: a miss, overwritten on fill.
    Earlier,
    Pass(Times),
    /// A failed fill: when (`started`), and when the next try is due (`fresh_until`).
    Failed(Times),
}

/// The blob of a response: what the store appends to the header line.
pub(crate) fn encode(
    digest: &str,
    status: StatusCode,
    headers: &HeaderMap,
    tags: &[String],
    body: &[u8],
) -> Bytes {
    let mut out = BytesMut::with_capacity(digest.len() + 64 + body.len());
    out.put_slice(digest.as_bytes());
    out.put_u16(status.as_u16());
    put_count(&mut out, headers.len());
    for (name, value) in headers {
        match NAMES.iter().position(|n| n == name) {
            // At most 43 places: a byte.
            Some(at) => out.put_u8(u8::try_from(at + 1).unwrap_or(0)),
            None => {
                out.put_u8(0);
                // A name is shorter than 64 KiB (http refuses longer ones).
                let name = name.as_str().as_bytes();
                out.put_u16(u16::try_from(name.len()).unwrap_or(u16::MAX));
                out.put_slice(name);
            }
        }
        match VALUES.iter().position(|v| v == value) {
            // At most 24 places: far below the bit.
            Some(at) => out.put_u32(CODED | u32::try_from(at).unwrap_or(0)),
            None => put_bytes(&mut out, value.as_bytes()),
        }
    }
    put_count(&mut out, tags.len());
    for tag in tags {
        put_bytes(&mut out, tag.as_bytes());
    }
    out.put_slice(body);
    out.freeze()
}

fn put_count(out: &mut BytesMut, n: usize) {
    out.put_u32(u32::try_from(n).unwrap_or(u32::MAX));
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    put_count(out, b.len());
    out.put_slice(b);
}

/// The value `raw` if it is one of ours, an entry only when stored under `digest` (the
/// variant digest the key is named by); `None` for anything else (never a panic). An entry's
/// body is `raw` past its headers.
pub(crate) fn decode(raw: Bytes, digest: &str) -> Option<Stored> {
    let Some((line, _)) = raw.split_first_chunk::<HEADER_LEN>() else {
        return earlier(&raw);
    };
    let Some((magic, [kind, times @ ..])) = line.split_first_chunk::<4>() else {
        return None;
    };
    if magic != MAGIC {
        return earlier(&raw);
    }
    let time = |at: usize| {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(&times[at * 8..at * 8 + 8]);
        u64::from_be_bytes(bytes)
    };
    let times = Times {
        fresh_until: time(0),
        stale_until: time(1),
        started: time(2),
        delta: time(3),
    };
    match kind {
        b'P' => Some(Stored::Pass(times)),
        b'F' => Some(Stored::Failed(times)),
        b'E' => decode_blob(raw, digest.as_bytes(), times).map(Stored::Entry),
        _ => None,
    }
}

/// [`Stored::Earlier`] when `raw` is a value of an earlier format, else `None`.
fn earlier(raw: &Bytes) -> Option<Stored> {
    EARLIER
        .iter()
        .any(|magic| raw.starts_with(*magic))
        .then_some(Stored::Earlier)
}

/// The blob of `raw` (past its header), read in place: the header values not in [`VALUES`]
/// and the body are slices of `raw`, no copy (and when every value is, `raw` is the body
/// alone, never shared).
fn decode_blob(raw: Bytes, digest: &[u8], times: Times) -> Option<Entry> {
    let mut b = Reader {
        raw: &raw,
        at: HEADER_LEN,
    };
    // Compared where it is stored: an entry of another key (a collision of names, a value
    // written by something else) is not this one.
    if b.take(64)? != digest {
        return None;
    }
    let status = StatusCode::from_u16(u16::from_be_bytes(b.array()?)).ok()?;
    let count = u32::from_be_bytes(b.array()?);
    // Room for the headers at once, and for those a response made from it adds (`Age`,
    // `x-cache`, `Cache-Status`, `Content-Length`); a count from a damaged value reserves
    // little (a header takes 5 bytes at least, and more than 64 grow the map as they come).
    let mut headers = HeaderMap::with_capacity(
        usize::try_from(count)
            .unwrap_or(usize::MAX)
            .min(b.left() / 5)
            .min(64)
            + 4,
    );
    let (mut aged, mut relayed) = (false, false);
    for _ in 0..count {
        let [code] = b.array()?;
        let name = match usize::from(code) {
            0 => {
                let len = usize::from(u16::from_be_bytes(b.array()?));
                HeaderName::from_bytes(b.take(len)?).ok()?
            }
            at => NAMES.get(at - 1)?.clone(),
        };
        aged |= name == header::AGE;
        relayed |= name == CACHE_STATUS;
        let len = u32::from_be_bytes(b.array()?);
        let value = if len & CODED == 0 {
            let len = usize::try_from(len).ok()?;
            HeaderValue::from_maybe_shared(b.shared(len)?).ok()?
        } else {
            VALUES.get(usize::try_from(len & !CODED).ok()?)?.clone()
        };
        headers.append(name, value);
    }
    let mut tags = Vec::new();
    for _ in 0..u32::from_be_bytes(b.array()?) {
        let len = b.len()?;
        tags.push(std::str::from_utf8(b.take(len)?).ok()?.to_owned());
    }
    let at = b.at;
    let mut body = raw;
    body.advance(at);
    Some(Entry {
        times,
        status,
        headers,
        tags,
        body,
        purged: false,
        aged,
        relayed,
    })
}

/// A blob read from its start: `at` is where the next field begins in `raw`.
struct Reader<'a> {
    raw: &'a Bytes,
    at: usize,
}

impl Reader<'_> {
    /// How many bytes are left.
    fn left(&self) -> usize {
        self.raw.len() - self.at
    }

    /// The next `len` bytes.
    fn take(&mut self, len: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(len)?;
        let bytes = self.raw.get(self.at..end)?;
        self.at = end;
        Some(bytes)
    }

    /// The next `N` bytes.
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let bytes = *self.raw.get(self.at..)?.first_chunk::<N>()?;
        self.at += N;
        Some(bytes)
    }

    /// A u32 length.
    fn len(&mut self) -> Option<usize> {
        usize::try_from(u32::from_be_bytes(self.array()?)).ok()
    }

    /// The next `len` bytes, shared with `raw`.
    fn shared(&mut self, len: usize) -> Option<Bytes> {
        let end = self.at.checked_add(len)?;
        if end > self.raw.len() {
            return None;
        }
        let bytes = self.raw.slice(self.at..end);
        self.at = end;
        Some(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(kind: Kind, blob: &[u8]) -> Bytes {
        let t = Times {
            fresh_until: 10,
            stale_until: 20,
            started: 1,
            delta: 2,
        };
        let mut v = header(kind, t).to_vec();
        v.extend_from_slice(blob);
        Bytes::from(v)
    }

    #[test]
    fn a_response_round_trips_with_bytes_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("x-raw", HeaderValue::from_bytes(b"caf\xe9").unwrap());
        headers.append("x-two", HeaderValue::from_static("a"));
        headers.append("x-two", HeaderValue::from_static("b"));
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        headers.append(header::VARY, HeaderValue::from_static("a"));
        headers.append(header::VARY, HeaderValue::from_static("b"));
        headers.insert(
            header::X_DNS_PREFETCH_CONTROL,
            HeaderValue::from_static("off"),
        );
        // Values of the list, and a value that only starts like one.
        headers.append(header::VARY, HeaderValue::from_static("accept-encoding"));
        headers.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static("gzip, br"),
        );
        let digest = "d".repeat(64);
        let blob = encode(
            &digest,
            StatusCode::CREATED,
            &headers,
            &["t".into()],
            b"\0body",
        );
        let Some(Stored::Entry(e)) = decode(value(Kind::Entry, &blob), &digest) else {
            panic!("an entry");
        };
        assert!(
            decode(value(Kind::Entry, &blob), &"e".repeat(64)).is_none(),
            "another key's entry"
        );
        assert_eq!(e.status, StatusCode::CREATED);
        assert_eq!(e.headers, headers);
        assert_eq!(e.tags, ["t"]);
        assert_eq!(&e.body[..], b"\0body");
        assert_eq!(e.times.delta, 2);
        assert!(matches!(
            decode(value(Kind::Pass, b""), &digest),
            Some(Stored::Pass(_))
        ));
        assert!(matches!(
            decode(value(Kind::Failed, b""), &digest),
            Some(Stored::Failed(t)) if t.fresh_until == 10 && t.started == 1
        ));
    }

    /// The times read back as written, whatever their size, and the header as the Redis
    /// script writes it (`struct.pack('>I8', …)` of each time, big-endian).
    #[test]
    fn times_round_trip_at_fixed_places() {
        for n in [
            0,
            1,
            255,
            256,
            1_765_000_000_123_456,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let t = Times {
                fresh_until: n,
                stale_until: n ^ 1,
                started: n / 3,
                delta: 7,
            };
            let mut raw = header(Kind::Pass, t).to_vec();
            raw.extend_from_slice(b"ignored");
            assert!(
                matches!(decode(Bytes::from(raw), ""), Some(Stored::Pass(read)) if read == t),
                "{n}"
            );
        }
        let t = Times {
            fresh_until: 1_765_000_000_123_456,
            stale_until: 2,
            started: 3,
            delta: 42,
        };
        let mut script = b"RGC3E".to_vec();
        script.extend_from_slice(b"\x00\x06\x45\x42\x16\x09\x32\x40");
        script.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3]);
        script.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 42]);
        assert_eq!(header(Kind::Entry, t)[..], script[..]);
    }

    #[test]
    fn the_names_and_values_written_as_places_are_distinct() {
        for (i, name) in NAMES.iter().enumerate() {
            assert_eq!(NAMES.iter().position(|n| n == name), Some(i), "{name}");
        }
        for (i, value) in VALUES.iter().enumerate() {
            assert_eq!(VALUES.iter().position(|v| v == value), Some(i), "{value:?}");
        }
    }

    /// A value of the list is written as its place, and read back as the same value; its
    /// entry's body is the value read, never a copy.
    #[test]
    fn usual_values_are_written_as_places() {
        let digest = "d".repeat(64);
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        let blob = encode(&digest, StatusCode::OK, &headers, &[], b"ok");
        // `Content-Type` (the first name), then the first value's place (0) with the bit set.
        let place = [&[1][..], &CODED.to_be_bytes()].concat();
        assert!(blob.windows(5).any(|w| w == place), "{blob:?}");
        assert!(!blob.windows(9).any(|w| w == b"text/plai"), "{blob:?}");
        let raw = value(Kind::Entry, &blob);
        let end = raw.as_ptr_range().end;
        let Some(Stored::Entry(e)) = decode(raw, &digest) else {
            panic!("an entry");
        };
        assert_eq!(e.headers, headers);
        assert_eq!(&e.body[..], b"ok");
        assert_eq!(e.body.as_ptr_range().end, end, "the body is the value read");
    }

    /// A header whose name is a place past the list, or a name that is not one, or a value
    /// that is not one: not ours. A value of the earlier format: a miss of its own kind.
    #[test]
    fn damaged_headers_and_the_earlier_format_are_not_entries() {
        let digest = "d".repeat(64);
        let blob = |header: &[u8]| {
            let mut b = digest.as_bytes().to_vec();
            b.extend_from_slice(&200u16.to_be_bytes());
            b.extend_from_slice(&1u32.to_be_bytes());
            b.extend_from_slice(header);
            b.extend_from_slice(&0u32.to_be_bytes());
            b.extend_from_slice(b"body");
            b
        };
        let good = blob(b"\x01\0\0\0\x02ok");
        assert!(matches!(
            decode(value(Kind::Entry, &good), &digest),
            Some(Stored::Entry(_))
        ));
        let custom = blob(b"\0\0\x05x-one\0\0\0\x01v");
        let Some(Stored::Entry(e)) = decode(value(Kind::Entry, &custom), &digest) else {
            panic!("an entry");
        };
        assert_eq!(e.headers["x-one"], "v");
        for bad in [
            &b"\x2c\0\0\0\x02ok"[..],
            b"\xff\0\0\0\x02ok",
            b"\x01\0\0\0\x02o\n",
            b"\x01\0\0\0\x09ok",
            b"\0\0\x05x one\0\0\0\x01v",
            b"\0\0\0\0\0\0\x01v",
            b"\0\xff\xffx-one\0\0\0\x01v",
            b"\x01\x80\0\0\x18",
            b"\x01\xff\xff\xff\xff",
        ] {
            assert!(
                decode(value(Kind::Entry, &blob(bad)), &digest).is_none(),
                "{bad:?}"
            );
        }
        for magic in ["RGC1", "RGC2"] {
            let mut earlier = format!("{magic} E 10 20 1 2\n").into_bytes();
            earlier.extend_from_slice(&good);
            assert!(matches!(
                decode(Bytes::from(earlier), &digest),
                Some(Stored::Earlier)
            ));
            assert!(matches!(
                decode(Bytes::from(magic), &digest),
                Some(Stored::Earlier)
            ));
        }
    }

    #[test]
    fn anything_else_is_not_ours() {
        let digest = "d".repeat(64);
        let blob = encode(&digest, StatusCode::OK, &HeaderMap::new(), &[], b"x");
        for cut in 0..blob.len() - 1 {
            // Truncated blobs decode to nothing (or to a shorter body), never panic.
            let _ = decode(value(Kind::Entry, &blob[..cut]), &digest);
        }
        let mut unknown_kind = value(Kind::Pass, b"").to_vec();
        unknown_kind[4] = b'X';
        let short = value(Kind::Pass, b"");
        for junk in [
            &b""[..],
            b"hello",
            b"RGC3",
            b"RGC3P",
            &short[..short.len() - 1],
            &unknown_kind,
            b"RGC4P0000000000000000000000000000000",
            b"\xff\xfe\n",
        ] {
            assert!(
                decode(Bytes::copy_from_slice(junk), &digest).is_none(),
                "{junk:?}"
            );
        }
    }
}
