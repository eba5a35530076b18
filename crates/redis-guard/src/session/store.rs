//! The storage interface behind the session layer, and the records it moves.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::time::Duration;

use super::SessionError;
use crate::backend::micros;

mod field;

pub(crate) use field::{FieldChange, FieldOutcome, incremented};

/// A boxed, sendable future, as [`Store`] methods return.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a store's calls answer with, as redis-rs' `RedisFuture`: a [`BoxFuture`] of a result
/// that fails with a [`SessionError`].
pub(crate) type StoreFuture<T> = BoxFuture<Result<T, SessionError>>;

/// How long sessions live, and how many one user may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lifetimes {
    /// Idle timeout: a session unused this long ends. Every successful request carrying the
    /// cookie restarts it.
    pub(crate) idle: Duration,
    /// Absolute lifetime: a session ends this long after it was created, however much it is used.
    pub(crate) max: Duration,
    /// Sessions one user may hold at once; when a new one would exceed it, the one closest to
    /// its absolute expiry is ended.
    pub(crate) per_user: u32,
    /// How long a use stays fresh: a session used again within it is not marked used again
    /// (its last-seen time and idle timeout are not rewritten), so most
    /// requests write nothing. `None`: 1 % of the idle timeout.
    pub(crate) seen_every: Option<Duration>,
    /// The longest idle timeout or absolute lifetime one session may be given
    /// ([`Session::set_max_lifetime`](super::Session::set_max_lifetime)); longer ones are cut
    /// to it.
    pub(crate) ceiling: Duration,
}

impl Default for Lifetimes {
    /// 30 minutes idle, 24 hours absolute, 64 per user, a use fresh for 1 % of the idle
    /// timeout, at most 30 days for one session.
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(30 * 60),
            max: Duration::from_secs(24 * 3600),
            per_user: 64,
            seen_every: None,
            ceiling: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

impl Lifetimes {
    pub(crate) fn idle_us(&self) -> u64 {
        micros(self.idle)
    }

    pub(crate) fn max_us(&self) -> u64 {
        micros(self.max)
    }

    /// How long a use stays fresh, in µs.
    pub(crate) fn fresh_us(&self) -> u64 {
        match self.seen_every {
            Some(d) => micros(d),
            None => self.idle_us() / 100,
        }
    }
}

/// Prefix of the metadata fields; user keys may not start with it.
pub(crate) const RESERVED: char = '$';
/// The user id field.
pub(crate) const USER_FIELD: &str = "$user";
/// The absolute expiry field.
pub(crate) const EXP_FIELD: &str = "$exp";
/// Creation time (store clock, µs).
pub(crate) const CREATED_FIELD: &str = "$created";
/// Last use (store clock, µs).
pub(crate) const SEEN_FIELD: &str = "$seen";
/// This session's own idle timeout (µs).
pub(crate) const IDLE_FIELD: &str = "$idle";
/// This session's own absolute lifetime (µs).
pub(crate) const MAX_FIELD: &str = "$max";
/// The device: public handle, client address and user agent (as of the last write or the last
/// use recorded), in one field (see [`Device`]). Recorded for a session with a user only: a
/// listing shows a user's sessions alone.
pub(crate) const DEVICE_FIELD: &str = "$dev";
/// The creation time, absolute expiry and last use of a session stored in Redis, in one field
/// (`created:exp:seen`, see `scripts/record.lua`): a read then parses one metadata pair, not
/// three. At most 50 bytes, so that a small session stays a listpack in Redis (a value longer
/// than `hash-max-listpack-value`, 64 by default, makes the whole hash a hashtable): the device
/// stays in [`DEVICE_FIELD`]. [`Record::get`] answers for the three names from it, and for
/// [`DEVICE_FIELD`] from a fourth part, where sessions stored by an earlier release kept it.
pub(crate) const META_FIELD: &str = "$m";
/// The values [`META_FIELD`] holds, in its order (the device only in the earlier layout).
const PACKED: [&str; 4] = [CREATED_FIELD, EXP_FIELD, SEEN_FIELD, DEVICE_FIELD];
/// The CSRF token ([`Session::csrf_token`](super::Session::csrf_token)). Privilege-bound: a
/// rotation does not carry it over, and `set_user` drops it.
pub(crate) const CSRF_FIELD: &str = "$csrf";

/// What a listing shows of the device a session is used from, stored as one field
/// (`handle TAB address TAB user agent`) so that every load carries one metadata pair more,
/// not three. None of the parts can hold a tab: the handle is base64url, the address an IP
/// address, the user agent visible ASCII and spaces.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Device {
    pub(crate) handle: String,
    /// Empty: none recorded.
    pub(crate) ip: String,
    /// Empty: none recorded.
    pub(crate) user_agent: String,
}

impl Device {
    pub(crate) fn parse(field: &str) -> Self {
        let mut parts = field.splitn(3, '\t');
        let mut next = || parts.next().unwrap_or_default().to_owned();
        Self {
            handle: next(),
            ip: next(),
            user_agent: next(),
        }
    }

    pub(crate) fn encode(&self) -> String {
        format!("{}\t{}\t{}", self.handle, self.ip, self.user_agent)
    }
}

/// Part `part` of a `$m` value (see [`PACKED`]); `None` when absent or empty.
fn packed_part(packed: &str, part: usize) -> Option<&str> {
    packed_parts(packed).get(part).copied().flatten()
}

/// The parts of a `$m` value, in [`PACKED`]'s order; `None` when absent or empty. The device,
/// when there, is last: an address may hold ':'. (A byte scan: `splitn` costs several times as
/// much on every read.)
fn packed_parts(packed: &str) -> [Option<&str>; 4] {
    let mut parts = [None; 4];
    let mut rest = packed;
    for (i, slot) in parts.iter_mut().enumerate() {
        let (part, more) = match rest.bytes().position(|b| b == b':') {
            Some(at) if i < PACKED.len() - 1 => (&rest[..at], Some(&rest[at + 1..])),
            _ => (rest, None),
        };
        *slot = Some(part).filter(|p| !p.is_empty());
        match more {
            Some(more) => rest = more,
            None => break,
        }
    }
    parts
}

/// A session's metadata as stored, each as [`Record::get`] answers for its field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Meta<'a> {
    pub(crate) created: Option<&'a str>,
    pub(crate) exp: Option<&'a str>,
    pub(crate) seen: Option<&'a str>,
    pub(crate) device: Option<&'a str>,
    pub(crate) idle: Option<&'a str>,
    pub(crate) max: Option<&'a str>,
}

/// A session's fields as read: name and value pairs, in the order the store gave them. A
/// session holds a handful, so a scan is cheaper than hashing each name (a map would hash every
/// field on the read, and every name looked up).
#[derive(Clone, Default)]
pub(crate) struct Fields(Vec<(String, String)>);

impl Fields {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self(Vec::with_capacity(n))
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Sets `name` to `value`, replacing the value it had.
    pub(crate) fn insert(&mut self, name: String, value: String) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => *v = value,
            None => self.0.push((name, value)),
        }
    }

    pub(crate) fn remove(&mut self, name: &str) {
        self.0.retain(|(n, _)| n != name);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(n, _)| n.as_str())
    }
}

impl PartialEq for Fields {
    /// The same names with the same values, in any order.
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len() && self.0.iter().all(|(n, v)| other.get(n) == Some(v))
    }
}

impl FromIterator<(String, String)> for Fields {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        let mut fields = Self::default();
        for (n, v) in iter {
            fields.insert(n, v);
        }
        fields
    }
}

impl IntoIterator for Fields {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// A session's stored fields: the values (JSON text) under their keys, plus metadata fields whose
/// names start with `$`.
#[derive(Clone, Default)]
pub(crate) struct Record {
    pub(crate) fields: Fields,
    /// Whether the load that read it marked the session used (its last use was no longer
    /// fresh): the layer then records the client's device too. Not part of the record's value.
    pub(crate) marked: bool,
}

impl PartialEq for Record {
    fn eq(&self, other: &Self) -> bool {
        self.fields == other.fields
    }
}

impl Eq for Record {}

impl Record {
    /// The JSON text stored under `key`. The creation time, absolute expiry, last use and
    /// device come from their own fields (the memory store, a change this request made, the
    /// device in Redis, sessions stored in Redis before [`META_FIELD`]) or else from
    /// [`META_FIELD`] (the device: sessions stored when it was its fourth part).
    #[must_use]
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        let part = if key.starts_with(RESERVED) {
            PACKED.iter().position(|name| *name == key)
        } else {
            None
        };
        // One scan: the field itself, else (a packed name) `$m`.
        let mut packed = None;
        for (name, value) in &self.fields.0 {
            if name == key {
                return Some(value);
            }
            if part.is_some() && name == META_FIELD {
                packed = Some(value.as_str());
            }
        }
        packed_part(packed?, part?)
    }

    /// The metadata [`get`](Self::get) answers for, in one scan of the fields.
    #[must_use]
    pub(crate) fn meta(&self) -> Meta<'_> {
        let mut meta = Meta::default();
        let mut packed = None;
        for (name, value) in &self.fields.0 {
            let value = Some(value.as_str());
            match name.as_str() {
                META_FIELD => packed = value,
                CREATED_FIELD => meta.created = value,
                EXP_FIELD => meta.exp = value,
                SEEN_FIELD => meta.seen = value,
                DEVICE_FIELD => meta.device = value,
                IDLE_FIELD => meta.idle = value,
                MAX_FIELD => meta.max = value,
                _ => {}
            }
        }
        if let Some(packed) = packed {
            let parts = packed_parts(packed);
            let slots = [
                &mut meta.created,
                &mut meta.exp,
                &mut meta.seen,
                &mut meta.device,
            ];
            for (slot, part) in slots.into_iter().zip(parts) {
                if slot.is_none() {
                    *slot = part;
                }
            }
        }
        meta
    }

    /// The user the session belongs to, if any.
    #[must_use]
    pub(crate) fn user(&self) -> Option<&str> {
        self.get(USER_FIELD)
    }

    /// A record from a hash's name/value pairs, as read (a hash has each name once).
    pub(crate) fn from_pairs(pairs: Vec<(String, String)>) -> Self {
        Self {
            fields: Fields(pairs),
            marked: false,
        }
    }

    /// A record from a flat field/value array; one element more at the end (an odd length)
    /// says the load marked the session used (`load.lua`).
    pub(crate) fn from_flat(flat: Vec<String>) -> Self {
        let marked = flat.len() % 2 == 1;
        let mut fields = Fields::with_capacity(flat.len() / 2);
        let mut it = flat.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            // A hash has each name once: no need to look for it first.
            fields.0.push((k, v));
        }
        Self { fields, marked }
    }
}

impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Values can be personal data: list the keys only.
        f.debug_struct("Record")
            .field("keys", &self.fields.names().collect::<Vec<_>>())
            .finish()
    }
}

/// What one request changed: fields to set (JSON text), fields to remove, or everything cleared.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    pub(crate) clear: bool,
    pub(crate) set: BTreeMap<String, String>,
    pub(crate) remove: BTreeSet<String>,
}

impl Changes {
    /// Whether there is nothing to write.
    #[must_use]
    pub(crate) fn is_empty(&self) -> bool {
        !self.clear && self.set.is_empty() && self.remove.is_empty()
    }

    pub(crate) fn apply_to(&self, fields: &mut HashMap<String, String>) {
        if self.clear {
            fields.retain(|k, _| k.starts_with(RESERVED));
        }
        for k in &self.remove {
            fields.remove(k);
        }
        for (k, v) in &self.set {
            fields.insert(k.clone(), v.clone());
        }
    }
}

/// One of a user's sessions, as
/// [`RedisSessionStore::user_sessions`](super::RedisSessionStore::user_sessions) and
/// [`Session::sessions`](super::Session::sessions) list them: what a "your devices" page shows.
///
/// Times are relative (the stores' clocks differ: Redis `TIME`, or a monotonic clock in
/// process); subtract them from the current time to show dates.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionInfo {
    /// The session's storage key (SHA-256 of its id). Not a credential, but for the server's
    /// own use: show and accept [`handle`](Self::handle) instead.
    pub storage_key: String,
    /// A stable public name for the session: random, drawn when the session gets its user
    /// (created with one, or logged in) and kept across id rotations; never the id nor its
    /// hash. What
    /// [`RedisSessionStore::revoke_session`](super::RedisSessionStore::revoke_session) takes.
    pub handle: String,
    /// Time left until its absolute expiry.
    pub expires_in: Duration,
    /// Time since it was created.
    pub age: Duration,
    /// Time since it was last marked used (at most
    /// [`last_seen_interval`](super::SessionLayerBuilder::last_seen_interval) stale).
    pub idle_for: Duration,
    /// The client's address at the last write or the last use recorded (at most
    /// [`last_seen_interval`](super::SessionLayerBuilder::last_seen_interval) stale), unless the
    /// layer records none.
    pub ip: Option<IpAddr>,
    /// The client's user agent at the last write or the last use recorded, truncated, unless
    /// the layer records none.
    pub user_agent: Option<String>,
    /// Whether this is the session of the request that listed it (only
    /// [`Session::sessions`](super::Session::sessions) sets it).
    pub current: bool,
}

impl SessionInfo {
    /// The listing of the session under `storage_key` from its stored `fields`, at store time
    /// `now` (µs); `None` when the metadata needed is missing or malformed.
    pub(crate) fn from_fields(
        storage_key: String,
        field: impl Fn(&str) -> Option<String>,
        now: u64,
    ) -> Option<Self> {
        let us = |name: &str| field(name).and_then(|v| v.parse::<u64>().ok());
        let exp = us(EXP_FIELD)?;
        let created = us(CREATED_FIELD).unwrap_or(now);
        let seen = us(SEEN_FIELD).unwrap_or(created);
        let since = |t: u64| Duration::from_micros(now.saturating_sub(t));
        let device = field(DEVICE_FIELD)
            .map(|d| Device::parse(&d))
            .unwrap_or_default();
        let handle = match device.handle.as_str() {
            "" => legacy_handle(&storage_key),
            handle => handle.to_owned(),
        };
        Some(Self {
            handle,
            storage_key,
            expires_in: Duration::from_micros(exp.saturating_sub(now)),
            age: since(created),
            idle_for: since(seen),
            ip: device.ip.parse().ok(),
            user_agent: Some(device.user_agent).filter(|ua| !ua.is_empty()),
            current: false,
        })
    }
}

/// The handle of a session created before sessions had one: derived from its storage key, so it
/// is stable until the next rotation, and one-way (it does not give the storage key away).
fn legacy_handle(storage_key: &str) -> String {
    use base64::Engine as _;
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("redis-guard session handle\0{storage_key}"));
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..16])
}

/// Where sessions live: [`RedisSessionStore`](super::RedisSessionStore) or
/// [`MemorySessionStore`](super::MemorySessionStore), or an `Arc` of either, as
/// [`SessionLayer::new`](super::SessionLayer::new) and
/// [`SessionLayer::builder`](super::SessionLayer::builder) take them.
///
/// Every operation is one atomic step of the store, and every one that reads or writes a session
/// first checks that it is live (idle and absolute expiry): an update to a session that is gone is
/// dropped, never re-creating it.
///
/// This trait is **sealed** and has nothing to call (as tokio's `ToSocketAddrs`): it cannot be
/// implemented outside this crate. Its guarantees (no lost writes, no resurrection, revocation
/// that reaches rotated sessions) live in the details of each operation, which are not a stable
/// contract yet. What an admin task calls on a store (`revoke_user`, `user_sessions`,
/// `revoke_session`, `revoke_user_except`) are inherent methods of the two stores, and of
/// `dyn SessionStore` for code that picks its store at run time and keeps an
/// `Arc<dyn SessionStore>`; a handler calls the same through its [`Session`](super::Session).
///
/// ```
/// use std::sync::Arc;
/// use redis_guard::session::{MemorySessionStore, SessionLayer, SessionStore};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// // e.g. `RedisSessionStore` when a Redis URL is configured
/// let store: Arc<dyn SessionStore> = Arc::new(MemorySessionStore::new());
/// let layer = SessionLayer::new(Arc::clone(&store)).unwrap();
/// assert_eq!(store.revoke_user("alice").await.unwrap(), 0);
/// # let _ = layer; }
/// ```
///
/// What the layer calls is out of reach, and so are the records it moves:
///
/// ```compile_fail
/// use redis_guard::session::SessionStore;
/// fn delete(store: &dyn SessionStore, storage_key: String) {
///     let _ = store.delete(storage_key);
/// }
/// ```
///
/// ```compile_fail
/// use redis_guard::session::{Changes, Lifetimes, Record};
/// ```
#[allow(private_bounds)] // see `Store`
pub trait SessionStore: Store + Send + Sync + fmt::Debug + 'static {}

/// What the session layer asks of a store; unnameable outside this crate (it seals
/// [`SessionStore`]). Keys are storage keys
/// ([`SessionId::storage_key`](super::SessionId::storage_key)), never raw ids.
///
/// Its parameter, records, changes and lifetimes are crate-private on purpose: outside this
/// crate none of its methods can be called, even on a `dyn SessionStore`.
#[allow(private_bounds, private_interfaces)]
pub trait Store<Seal = crate::sealed::Private>: crate::sealed::Sealed {
    /// Loads a live session and marks it used (restarting the idle timeout) unless its last use
    /// is still fresh ([`Lifetimes::seen_every`]). When it marks it, the layer records the
    /// client's device with a write of its own if it changed (at most once per
    /// [`Lifetimes::seen_every`]).
    fn load(&self, key: &str, life: Lifetimes) -> StoreFuture<Option<Record>>;

    /// Creates a session with `changes` and returns its absolute expiry (store time, µs).
    fn create(&self, key: String, changes: Changes, life: Lifetimes) -> StoreFuture<u64>;

    /// Writes `changes` to a live session and returns its absolute expiry; `None` when the session
    /// is gone (the changes are dropped).
    fn save(&self, key: &str, changes: Changes, life: Lifetimes) -> StoreFuture<Option<u64>>;

    /// Deletes a session, and its entry in its user's index.
    fn delete(&self, key: String) -> StoreFuture<()>;

    /// Moves a live session's data to `new` and deletes `old`; `false` when `old` is gone. The
    /// CSRF token stays behind: a rotation is a privilege change, and
    /// [`Session::csrf_token`](super::Session::csrf_token) draws a new one. The old
    /// key is deleted first: a failure in between leaves no session rather than two. A session
    /// with a user keeps its place in the user's index under `new` (so `revoke_user` still
    /// reaches it), and a rotation that races with `revoke_user` ends the session; at no point
    /// is the new session live without being indexed.
    fn rotate(&self, old: String, new: String, life: Lifetimes) -> StoreFuture<bool>;

    /// Records session `key` (expiring at `expires`, store time in µs) under `user`. Entries of
    /// sessions that are gone are pruned first; past [`Lifetimes::per_user`], the live sessions
    /// closest to their absolute expiry are ended.
    fn index_user(
        &self,
        user: String,
        key: String,
        expires: u64,
        life: Lifetimes,
    ) -> StoreFuture<()>;

    /// Ends every session of `user`; returns how many were listed (`revoke_user`). The index is
    /// taken in one atomic step, so a session indexed concurrently is either ended or stays in the
    /// index for the next revocation.
    fn end_user(&self, user: String) -> StoreFuture<usize>;

    /// The live sessions of `user`, with their metadata, soonest absolute expiry first. Index
    /// entries of sessions that are gone are pruned on the way (`user_sessions`).
    fn list_user(&self, user: String) -> StoreFuture<Vec<SessionInfo>>;

    /// Ends the session of `user` whose [`handle`](SessionInfo::handle) is `handle`; `false`
    /// when `user` has no such session (a forged handle, or another user's: nothing happens).
    /// A rotation racing with it is followed: the session ends under its new id
    /// (`revoke_session`).
    fn end_session(&self, user: String, handle: String) -> StoreFuture<bool>;

    /// Ends every session of `user` except the one under storage key `keep` ("log out
    /// everywhere else"); returns how many were ended. Sessions `user` logs in with while it
    /// runs may stay (unlike [`end_user`](Self::end_user), which takes the index at once:
    /// keeping one session means going through the list; `revoke_user_except`).
    fn end_user_except(&self, user: String, keep: String) -> StoreFuture<usize>;

    /// Checks the store's own settings; [`SessionLayerBuilder::build`](super::SessionLayerBuilder::build)
    /// calls it and fails with the error. The default accepts everything.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`](crate::ConfigError) naming the setting that cannot work.
    fn check(&self) -> Result<(), crate::ConfigError> {
        Ok(())
    }

    /// Changes `field` of a live session as `change` says, in one atomic step (marking the
    /// session used when it writes). `None` when the session is gone (nothing is written).
    fn change_field(
        &self,
        key: String,
        field: String,
        change: FieldChange,
        life: Lifetimes,
    ) -> StoreFuture<Option<FieldOutcome>>;
}

impl<S: SessionStore + ?Sized> SessionStore for std::sync::Arc<S> {}

#[allow(private_interfaces)] // see `Store`
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    forward_to_deref! {
        load(key: &str, life: Lifetimes) -> StoreFuture<Option<Record>>;
        create(key: String, changes: Changes, life: Lifetimes) -> StoreFuture<u64>;
        save(key: &str, changes: Changes, life: Lifetimes)
            -> StoreFuture<Option<u64>>;
        delete(key: String) -> StoreFuture<()>;
        rotate(old: String, new: String, life: Lifetimes) -> StoreFuture<bool>;
        index_user(user: String, key: String, expires: u64, life: Lifetimes)
            -> StoreFuture<()>;
        end_user(user: String) -> StoreFuture<usize>;
        list_user(user: String) -> StoreFuture<Vec<SessionInfo>>;
        end_session(user: String, handle: String) -> StoreFuture<bool>;
        end_user_except(user: String, keep: String) -> StoreFuture<usize>;
        check() -> Result<(), crate::ConfigError>;
        change_field(key: String, field: String, change: FieldChange, life: Lifetimes)
            -> StoreFuture<Option<FieldOutcome>>;
    }
}

#[cfg(test)]
mod tests {
    use super::{Meta, Record};

    fn record(pairs: &[(&str, &str)]) -> Record {
        Record::from_flat(
            pairs
                .iter()
                .flat_map(|(k, v)| [(*k).to_owned(), (*v).to_owned()])
                .collect(),
        )
    }

    /// `meta` answers in one scan what `get` answers field by field, in every layout.
    #[test]
    fn meta_agrees_with_get_in_every_layout() {
        let dev = "h\t2001:db8::7\tan agent";
        let layouts = [
            // The three times in `$m`, the device beside them.
            record(&[
                ("$m", "1:20:3"),
                ("$dev", dev),
                ("$idle", "9"),
                ("k", "\"v\""),
            ]),
            // The device inside `$m`.
            record(&[("$m", &format!("1:20:3:{dev}")), ("$max", "19")]),
            // Each in a field of its own.
            record(&[
                ("$created", "1"),
                ("$exp", "20"),
                ("$seen", "3"),
                ("$dev", dev),
            ]),
            // No creation time, no device.
            record(&[("$m", ":20:3")]),
            record(&[]),
        ];
        for r in &layouts {
            let meta = r.meta();
            let expected = Meta {
                created: r.get("$created"),
                exp: r.get("$exp"),
                seen: r.get("$seen"),
                device: r.get("$dev"),
                idle: r.get("$idle"),
                max: r.get("$max"),
            };
            assert_eq!(meta, expected, "{r:?}");
        }
        assert_eq!(layouts[1].meta().device, Some(dev));
        assert_eq!(layouts[0].meta().exp, Some("20"));
        assert_eq!(layouts[3].meta().created, None);
        assert_eq!(layouts[0].get("k"), Some("\"v\""));
        assert_eq!(layouts[0].get("$m"), Some("1:20:3"));
    }

    #[test]
    fn packed_parts_split_at_the_first_three_colons() {
        use super::packed_parts;
        assert_eq!(
            packed_parts("1:2:3"),
            [Some("1"), Some("2"), Some("3"), None]
        );
        assert_eq!(
            packed_parts("1:2:3:h\t::1\tua"),
            [Some("1"), Some("2"), Some("3"), Some("h\t::1\tua")]
        );
        assert_eq!(packed_parts(":2:3:"), [None, Some("2"), Some("3"), None]);
        assert_eq!(packed_parts(""), [None; 4]);
        assert_eq!(packed_parts("x"), [Some("x"), None, None, None]);
    }
}
