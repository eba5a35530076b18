//! What one cache key holds: a header line the store writes (times on the store's clock), then
//! the response as the layer encoded it.
//!
//! ```text
//! RGC2 <kind> <fresh until µs> <stale until µs> <started µs> <recompute µs>\n<blob>
//! ```
//!
//! `kind` is `E` (an entry: the blob is a response), `P` (hit-for-pass: the last response of
//! this key was not cacheable; requests go straight to the handler until it expires) or `F`
//! (under a key of its own beside an entry: the entry's last fill failed at `started`, and
//! nobody tries again before `fresh until`; no blob). The blob:
//! the variant digest (64 hex digits), the status (u16), the headers (a u32 count, then each
//! header's name and its value), the tags (a u32 count, then u32-length-prefixed bytes), the
//! body. A header's name is one byte, its place in [`NAMES`] (from 1), or 0 then a
//! u16-length-prefixed name; its value is u32-length-prefixed. So a hit makes the headers of
//! the usual responses without reading their names: what it still checks is what a value
//! from Redis must be (a valid name when not one of [`NAMES`], valid values, lengths within
//! the value). Anything else under the key is not ours: [`decode`] answers `None`; a value of
//! the earlier format (`RGC1`, names and values u32-length-prefixed) is [`Stored::Earlier`].

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, StatusCode};

use super::status::CACHE_STATUS;

/// The first bytes of every value the cache writes.
const MAGIC: &str = "RGC2";

/// The first bytes of the values of the earlier format: read as a miss, and overwritten.
const EARLIER: &str = "RGC1";

/// The header names written as their place in this list (from 1): never reordered, only
/// added to at the end (an entry written with a longer list names a header a shorter one
/// does not know: a miss).
const NAMES: [HeaderName; 43] = [
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

/// Entry, hit-for-pass marker, or failed-fill marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Entry,
    Pass,
    Failed,
}

impl Entry {
    /// The variant digest, for logs.
    pub(crate) fn name(&self) -> &str {
        std::str::from_utf8(&self.digest).unwrap_or_default()
    }
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

/// The header line of a value (the memory store writes it; the Redis script writes the same).
pub(crate) fn header(kind: Kind, t: Times) -> String {
    format!(
        "{MAGIC} {} {} {} {} {}\n",
        kind.letter(),
        t.fresh_until,
        t.stale_until,
        t.started,
        t.delta
    )
}

/// A cached response.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) times: Times,
    /// The variant digest it was stored under (64 hex digits), as stored (unchecked: the
    /// lookup compares it with the key's).
    pub(crate) digest: Bytes,
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
        put_bytes(&mut out, value.as_bytes());
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

/// The value `raw` if it is one of ours; `None` for anything else (never a panic).
pub(crate) fn decode(raw: &Bytes) -> Option<Stored> {
    // `RGC2 <kind> ` then four numbers, each ended by a space but the last, by a newline: one
    // pass over the line, no search for its end first.
    let Some(rest) = raw.strip_prefix(MAGIC.as_bytes()) else {
        return raw
            .starts_with(EARLIER.as_bytes())
            .then_some(Stored::Earlier);
    };
    let [b' ', kind, b' ', rest @ ..] = rest else {
        return None;
    };
    let (fresh_until, rest) = number(rest, b' ')?;
    let (stale_until, rest) = number(rest, b' ')?;
    let (started, rest) = number(rest, b' ')?;
    let (delta, rest) = number(rest, b'\n')?;
    let times = Times {
        fresh_until,
        stale_until,
        started,
        delta,
    };
    match kind {
        b'P' => Some(Stored::Pass(times)),
        b'F' => Some(Stored::Failed(times)),
        b'E' => decode_blob(raw.slice(raw.len() - rest.len()..), times).map(Stored::Entry),
        _ => None,
    }
}

/// A number of the header line at the start of `b`, ended by `end`: decimal digits only
/// (one at least), within `u64`; and what follows `end`. Eight digits at a time while there
/// are eight (a time in µs has sixteen), then one at a time.
fn number(b: &[u8], end: u8) -> Option<(u64, &[u8])> {
    // A time in µs, sixteen digits: two chunks and the end, with nothing to check for overflow.
    if let Some((high, rest)) = b.split_first_chunk::<8>()
        && let Some((low, [next, rest @ ..])) = rest.split_first_chunk::<8>()
        && *next == end
        && let (Some(high), Some(low)) = (eight_digits(*high), eight_digits(*low))
    {
        return Some((high * 100_000_000 + low, rest));
    }
    let mut n: u64 = 0;
    let mut rest = b;
    while let Some((chunk, more)) = rest.split_first_chunk::<8>()
        && let Some(v) = eight_digits(*chunk)
    {
        n = n.checked_mul(100_000_000)?.checked_add(v)?;
        rest = more;
    }
    for (i, &d) in rest.iter().enumerate() {
        if d == end {
            return (i > 0 || rest.len() < b.len()).then(|| (n, &rest[i + 1..]));
        }
        let digit = d.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(digit))?;
    }
    None
}

/// The value of eight ASCII digits, or `None` when one of them is not a digit.
fn eight_digits(chunk: [u8; 8]) -> Option<u64> {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    let x = u64::from_le_bytes(chunk);
    // Each byte 0x30..=0x3f, and still below 0x40 with 6 added: 0x30..=0x39. (No carry
    // crosses a byte: each stays below 0x46.)
    if x & HIGH != ZEROS || x.wrapping_add(0x0606_0606_0606_0606) & HIGH != ZEROS {
        return None;
    }
    // The first digit is the lowest byte: pairs, then fours, then the eight, each step a
    // multiplication that lines the higher-order part up with the lower.
    let v = x - ZEROS;
    let v = (v * 10 + (v >> 8)) & 0x00FF_00FF_00FF_00FF;
    let v = (v * 100 + (v >> 16)) & 0x0000_FFFF_0000_FFFF;
    Some((v * 10_000 + (v >> 32)) & 0xFFFF_FFFF)
}

fn decode_blob(mut b: Bytes, times: Times) -> Option<Entry> {
    // The digest is not read as text here: the lookup compares it with the key's, byte for
    // byte, and [`Entry::name`] shows one that is not text as empty.
    if b.len() < 64 {
        return None;
    }
    let digest = b.split_to(64);
    let status = StatusCode::from_u16(take_u16(&mut b)?).ok()?;
    let count = take_u32(&mut b)?;
    // Room for the headers at once, and for those a response made from it adds (`Age`,
    // `x-cache`, `Cache-Status`, `Content-Length`); a count from a damaged value reserves
    // little (a header takes 5 bytes at least, and more than 64 grow the map as they come).
    let mut headers = HeaderMap::with_capacity(
        usize::try_from(count)
            .unwrap_or(usize::MAX)
            .min(b.remaining() / 5)
            .min(64)
            + 4,
    );
    let (mut aged, mut relayed) = (false, false);
    for _ in 0..count {
        let name = match usize::from(take_u8(&mut b)?) {
            0 => {
                let len = usize::from(take_u16(&mut b)?);
                let name = HeaderName::from_bytes(b.get(..len)?).ok()?;
                b.advance(len);
                name
            }
            at => NAMES.get(at - 1)?.clone(),
        };
        aged |= name == header::AGE;
        relayed |= name == CACHE_STATUS;
        let value = HeaderValue::from_maybe_shared(take_bytes(&mut b)?).ok()?;
        headers.append(name, value);
    }
    let mut tags = Vec::new();
    for _ in 0..take_u32(&mut b)? {
        tags.push(String::from_utf8(take_bytes(&mut b)?.to_vec()).ok()?);
    }
    Some(Entry {
        times,
        digest,
        status,
        headers,
        tags,
        body: b,
        purged: false,
        aged,
        relayed,
    })
}

fn take_u8(b: &mut Bytes) -> Option<u8> {
    (b.remaining() >= 1).then(|| b.get_u8())
}

fn take_u16(b: &mut Bytes) -> Option<u16> {
    (b.remaining() >= 2).then(|| b.get_u16())
}

fn take_u32(b: &mut Bytes) -> Option<u32> {
    (b.remaining() >= 4).then(|| b.get_u32())
}

fn take_bytes(b: &mut Bytes) -> Option<Bytes> {
    let len = usize::try_from(take_u32(b)?).ok()?;
    (b.remaining() >= len).then(|| b.split_to(len))
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
        let mut v = header(kind, t).into_bytes();
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
        let digest = "d".repeat(64);
        let blob = encode(
            &digest,
            StatusCode::CREATED,
            &headers,
            &["t".into()],
            b"\0body",
        );
        let Some(Stored::Entry(e)) = decode(&value(Kind::Entry, &blob)) else {
            panic!("an entry");
        };
        assert_eq!(e.name(), digest);
        assert_eq!(e.status, StatusCode::CREATED);
        assert_eq!(e.headers, headers);
        assert_eq!(e.tags, ["t"]);
        assert_eq!(&e.body[..], b"\0body");
        assert_eq!(e.times.delta, 2);
        assert!(matches!(
            decode(&value(Kind::Pass, b"")),
            Some(Stored::Pass(_))
        ));
        assert!(matches!(
            decode(&value(Kind::Failed, b"")),
            Some(Stored::Failed(t)) if t.fresh_until == 10 && t.started == 1
        ));
    }

    #[test]
    fn numbers_of_the_header_line_read_as_decimal() {
        let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
        let mut cases: Vec<u64> = vec![0, 1, 9, 10, 99_999_999, 100_000_000, u64::MAX];
        for _ in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            cases.push(seed >> (seed % 64));
        }
        // Sixteen digits (a time in µs), leading zeros or not.
        cases.extend([
            1_000_000_000_000_000,
            1_765_000_000_123_456,
            9_999_999_999_999_999,
        ]);
        for n in cases {
            let sixteen = format!("{n:016} rest");
            if sixteen.len() == 21 {
                assert_eq!(
                    number(sixteen.as_bytes(), b' '),
                    Some((n, &b"rest"[..])),
                    "{sixteen}"
                );
            }
            let text = format!("{n} rest");
            assert_eq!(
                number(text.as_bytes(), b' '),
                Some((n, &b"rest"[..])),
                "{n}"
            );
            let zeros = format!("000000000{n}\n");
            assert_eq!(
                number(zeros.as_bytes(), b'\n'),
                Some((n, &b""[..])),
                "{zeros}"
            );
        }
        for bad in [
            &b""[..],
            b" ",
            b"1",
            b"12345678",
            b"123456789",
            b"1234567a ",
            b"12345678a ",
            b"123456781234567a ",
            b"1234567812345678",
            b"1234567812345678\n",
            b"/234567812345678 ",
            b"/2345678 ",
            b":2345678 ",
            b"1234567\xff ",
            b"18446744073709551616 ",
            b"99999999999999999999 ",
            b"-1 ",
            b"+1 ",
        ] {
            assert_eq!(number(bad, b' '), None, "{bad:?}");
        }
        for d in 0..=255u8 {
            let mut chunk = *b"12345678";
            chunk[usize::from(d % 8)] = d;
            let expected = std::str::from_utf8(&chunk)
                .ok()
                .filter(|t| t.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|t| t.parse().ok());
            assert_eq!(eight_digits(chunk), expected, "{chunk:?}");
        }
    }

    #[test]
    fn the_names_written_as_places_are_distinct() {
        for (i, name) in NAMES.iter().enumerate() {
            assert_eq!(NAMES.iter().position(|n| n == name), Some(i), "{name}");
        }
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
            decode(&value(Kind::Entry, &good)),
            Some(Stored::Entry(_))
        ));
        let custom = blob(b"\0\0\x05x-one\0\0\0\x01v");
        let Some(Stored::Entry(e)) = decode(&value(Kind::Entry, &custom)) else {
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
        ] {
            assert!(decode(&value(Kind::Entry, &blob(bad))).is_none(), "{bad:?}");
        }
        let mut earlier = b"RGC1 E 10 20 1 2\n".to_vec();
        earlier.extend_from_slice(&good);
        assert!(matches!(
            decode(&Bytes::from(earlier)),
            Some(Stored::Earlier)
        ));
    }

    #[test]
    fn anything_else_is_not_ours() {
        let digest = "d".repeat(64);
        let blob = encode(&digest, StatusCode::OK, &HeaderMap::new(), &[], b"x");
        for cut in 0..blob.len() - 1 {
            // Truncated blobs decode to nothing (or to a shorter body), never panic.
            let _ = decode(&value(Kind::Entry, &blob[..cut]));
        }
        for junk in [
            &b""[..],
            b"hello",
            b"RGC2 E 1 2\n",
            b"RGC2 X 1 2 3 4\n",
            b"RGC2 P 1 2 -3 4\n",
            b"RGC2 P 1 2 +3 4\n",
            b"RGC2 P 1 2 3 18446744073709551616\n",
            b"RGC2 P 1 2  3\n",
            b"\xff\xfe\n",
        ] {
            assert!(decode(&Bytes::copy_from_slice(junk)).is_none(), "{junk:?}");
        }
    }
}
