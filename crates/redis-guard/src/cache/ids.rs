//! [`Ids`]: the two digests a cached request is known by (its variant and its target URI), and
//! [`IdMemo`], which remembers them by the request inputs they are made of, so that a page
//! asked for again is not hashed again.
//!
//! The memo is exact: its key is every input of both digests (method, host, path, query, the
//! `vary` headers' values), each length-prefixed, compared byte for byte on a lookup; a
//! keyed hash (foldhash, seeded from the OS's random source) only picks the slot. A request whose inputs are longer than [`MAX_INPUTS`] is
//! hashed every time. Bounded: a shard that fills up starts over.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use http::header::HOST;
use http::request;

use super::invalidation::target_tag;
use super::policy::original_path;
use super::shared::Shared;
use crate::prehashed::{KeyedHash, PreHashed};

/// The names of one cached request in the store.
#[derive(Clone, Debug)]
pub(crate) struct Ids {
    /// The variant digest: the entry's name.
    pub(crate) variant: Arc<str>,
    /// The target URI's digest: the entry's group and the implicit tag of the URI.
    pub(crate) uri: Arc<str>,
    /// The `GET` of the entry on Redis, built by its first hit and sent by every later one.
    pub(crate) read: ReadCommand,
}

pub(crate) use super::redis_store::ReadCommand;

/// The most bytes of request inputs remembered; a longer request is hashed each time.
const MAX_INPUTS: usize = 512;

/// Shards of the memo (concurrent requests for different pages rarely share a lock).
const SHARDS: usize = 8;

/// Pages remembered per shard; a full shard starts over.
const SHARD_CAPACITY: usize = 512;

type Shard = HashMap<u64, (Box<[u8]>, Ids), PreHashed>;

/// The [`Ids`] of recently seen requests, by their inputs.
#[derive(Debug, Default)]
pub(crate) struct IdMemo {
    /// The keyed hash of the inputs.
    hash: KeyedHash,
    shards: [Mutex<Shard>; SHARDS],
}

/// A request's inputs to its digests, written one after another, each length-prefixed.
struct Inputs {
    buf: [u8; MAX_INPUTS],
    len: usize,
    /// They did not fit.
    over: bool,
}

impl Inputs {
    fn put(&mut self, bytes: &[u8]) {
        let end = self.len + 4 + bytes.len();
        let Ok(len) = u32::try_from(bytes.len()) else {
            self.over = true;
            return;
        };
        if self.over || end > MAX_INPUTS {
            self.over = true;
            return;
        }
        self.buf[self.len..self.len + 4].copy_from_slice(&len.to_be_bytes());
        self.buf[self.len + 4..end].copy_from_slice(bytes);
        self.len = end;
    }

    fn get(&self) -> Option<&[u8]> {
        (!self.over).then(|| &self.buf[..self.len])
    }
}

impl IdMemo {
    /// The ids of `req` (a request the layer caches, its query normalized), remembered or
    /// computed.
    pub(crate) fn ids(&self, shared: &Shared, req: &request::Parts) -> Ids {
        let mut inputs = Inputs {
            buf: [0; MAX_INPUTS],
            len: 0,
            over: false,
        };
        inputs.put(req.method.as_str().as_bytes());
        // The host as read by the key (the URI's authority, else every `Host`), before
        // the key lower-cases it: the digests are a function of these bytes.
        if shared.key.host {
            match req.uri.authority() {
                Some(authority) => inputs.put(authority.as_str().as_bytes()),
                None => {
                    inputs.put(b"\0host");
                    for host in req.headers.get_all(HOST) {
                        inputs.put(host.as_bytes());
                    }
                }
            }
        }
        inputs.put(b"\0path");
        inputs.put(original_path(req).as_bytes());
        match req.uri.query() {
            Some(query) => inputs.put(query.as_bytes()),
            None => inputs.put(b"\0none"),
        }
        for name in &shared.key.vary {
            inputs.put(b"\0vary");
            for value in req.headers.get_all(name) {
                inputs.put(value.as_bytes());
            }
        }
        let Some(key) = inputs.get() else {
            return compute(shared, req);
        };
        let mut hasher = self.hash.build_hasher();
        hasher.write(key);
        let hash = hasher.finish();
        // The top bits pick the shard; the table uses the whole hash.
        let shard = &self.shards[usize::try_from(hash >> 61).unwrap_or(0) % SHARDS];
        if let Some((known, ids)) = lock(shard).get(&hash)
            && **known == *key
        {
            return ids.clone();
        }
        let ids = compute(shared, req);
        let mut map = lock(shard);
        if map.len() >= SHARD_CAPACITY && !map.contains_key(&hash) {
            map.clear();
        }
        map.insert(hash, (key.into(), ids.clone()));
        ids
    }
}

fn lock(shard: &Mutex<Shard>) -> std::sync::MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The ids of `req`, hashed.
fn compute(shared: &Shared, req: &request::Parts) -> Ids {
    Ids {
        variant: shared.key.variant_digest(req).into(),
        uri: target_tag(shared, req).into(),
        read: ReadCommand::default(),
    }
}

#[cfg(test)]
mod tests {
    use http::Request;
    use http::header::ACCEPT_LANGUAGE;

    use super::super::{CacheLayer, MemoryCacheStore};

    /// Remembered ids are those the request hashes to, and requests that differ in any input
    /// (including ones that would run together unprefixed) get their own.
    #[test]
    fn remembered_ids_are_the_hashed_ones() {
        let layer = CacheLayer::builder(MemoryCacheStore::new())
            .vary([ACCEPT_LANGUAGE])
            .build()
            .expect("layer");
        let shared = &layer.shared;
        let requests = [
            Request::get("/a?x").header("host", "h"),
            Request::get("/a?x").header("host", "H"),
            Request::get("/a").header("host", "h"),
            Request::get("/a?").header("host", "h"),
            Request::head("/a?x").header("host", "h"),
            Request::get("/a?x")
                .header("host", "h")
                .header("accept-language", "en"),
            Request::get("/a?x")
                .header("host", "h")
                .header("accept-language", "en")
                .header("accept-language", "fr"),
            Request::get("/a?x")
                .header("host", "h")
                .header("accept-language", "en, fr"),
            Request::get("http://other/a?x"),
            Request::get("/a?x"),
            Request::get(format!("/{}", "long".repeat(200))).header("host", "h"),
        ];
        let mut seen = Vec::new();
        for builder in requests {
            let (parts, ()) = builder.body(()).expect("request").into_parts();
            let mut first: Option<super::ReadCommand> = None;
            for _ in 0..2 {
                let ids = shared.ids.ids(shared, &parts);
                let hashed = super::compute(shared, &parts);
                assert_eq!(ids.variant, hashed.variant, "{parts:?}");
                assert_eq!(ids.uri, hashed.uri, "{parts:?}");
                // A remembered page's requests share the command that reads its entry.
                if let Some(first) = &first
                    && parts.uri.path().len() < 100
                {
                    assert!(std::sync::Arc::ptr_eq(first, &ids.read), "{parts:?}");
                }
                first = Some(ids.read);
                seen.push(ids.variant);
            }
        }
        let mut distinct = seen.clone();
        distinct.sort();
        distinct.dedup();
        // `h` and `H` are one host in the key: every other request has ids of its own.
        assert_eq!(distinct.len(), seen.len() / 2 - 1, "{seen:?}");
    }
}
