//! Loading a session from Redis: plain reads while no refresh is due, the load script when one
//! is.
//!
//! A load first reads the hash: `HGETALL key`, one command, no script (under load, the reads
//! that arrive while two are out go together, one pipeline of `HGETALL`s: [`Hashes`]). The
//! key's TTL is what decides validity: every write that marks a use (`touch` in
//! `scripts/record.lua`) sets `$seen` to now and the TTL to the sooner of the idle and the
//! absolute deadline, so a key Redis still returns is a live session, and Redis never returns
//! an expired one. Whether the refresh is due is how long ago the last use was, on Redis's
//! clock: when that is less than the freshness interval (by default 1 % of the idle timeout)
//! the session is served as read, unmarked. Otherwise — the refresh is due, the hash lacks
//! `$exp` or `$seen`, or its times are not ones a touch writes — the load script runs for that
//! entry, exactly as before, and decides with Redis `TIME`: it deletes what has expired or is
//! malformed and marks the use. A load whose refresh is due therefore costs two round trips.
//!
//! Redis's clock is not read on every load. At most once a second ([`RedisClock`]) a load sends
//! `TIME` in the same pipeline as `HGETALL` and decides with it; comparing it with this
//! process's wall clock when the read went out gives how far the two clocks differ, and the
//! loads of the next second take Redis's time as this process's clock, read when the reply
//! is in, less that difference. Redis answered at or after the moment the read went out, so
//! the estimate never falls behind Redis's time (it runs ahead by up to a round trip): a
//! refresh is never later than it is due, and a process whose clock is minutes off Redis's
//! still slides every session as it should.
//!
//! When the absolute deadline set the TTL, sliding extends nothing; the use is still recorded
//! once per interval (its last-seen time, and the device the layer then records), as before.
//!
//! Test clocks (feature `test-util`): a time shift or a frozen clock moves the scripts' time,
//! not Redis's key expiry. Under one, every load sends `HGETALL` and `PTTL` (plus `TIME` under a
//! shift): the TTL the last touch set, `min(idle, $exp − $seen)` rounded up to the millisecond,
//! must be one these lifetimes set (else the script decides), and the elapsed time comes from
//! that clock (the frozen time, or Redis `TIME` plus the shift); a session whose idle or
//! absolute deadline has passed in that time goes to the script, which deletes it: the plain
//! path is exact under a shift too.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use redis::Value;

use super::SessionError;
use super::scripts::{bad_reply, string, strings};
use super::store::{Lifetimes, Record};
use crate::backend::{BackendError, Coalescer, Entry, Form, RedisBackend, Replies, ScriptCall};

/// One session load, as an entry of a coalesced call of the load script.
pub(super) struct LoadEntry {
    key: [String; 1],
    idle: u64,
    /// How long a use stays fresh, when not 1 % of `idle` (the script's default: one argument
    /// less per load).
    fresh: Option<u64>,
}

impl Entry for LoadEntry {
    fn keys(&self) -> &[String] {
        &self.key
    }

    fn arg_count(&self) -> usize {
        1 + usize::from(self.fresh.is_some())
    }

    fn write_args(&self, call: &mut ScriptCall<'_>) {
        call.arg(self.idle);
        if let Some(fresh) = self.fresh {
            call.arg(fresh);
        }
    }
}

/// One plain read of a session's hash, as the read coalescer queues it.
pub(super) struct HashRead {
    /// The session's key (its hash slot picks the coalescer's queue on a cluster).
    key: [String; 1],
}

/// The read coalescer's [`Form`]: the plain reads that go together are one pipeline of
/// `HGETALL`s (of keys in one hash slot, on a cluster: the coalescer queues by slot), each
/// answered as if alone (a key of another type fails its own read only); a read sent alone
/// is its `HGETALL`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Hashes;

impl Form<HashRead> for Hashes {
    type Reply = Value;

    fn keys(entry: &HashRead) -> &[String] {
        &entry.key
    }

    async fn call(
        &self,
        backend: &RedisBackend,
        entries: &[&HashRead],
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Replies, BackendError> {
        let mut pipe = redis::Pipeline::with_capacity(entries.len());
        for entry in entries {
            pipe.add_command(hgetall(&entry.key[0]));
        }
        let first = entries.first().map_or("", |e| e.key[0].as_str());
        match backend.pipeline_replies(&pipe, first, deadline).await? {
            Value::Array(replies) if replies.len() == entries.len() => Ok(replies
                .into_iter()
                .map(|reply| match reply {
                    Value::ServerError(e) => Err(BackendError::Redis(e.into())),
                    reply => Ok(reply),
                })
                .collect()),
            other => Err(BackendError::BadReply(format!(
                "a pipeline of {} HGETALL replied {other:?}",
                entries.len()
            ))),
        }
    }

    async fn call_one(
        &self,
        backend: &RedisBackend,
        entry: &HashRead,
    ) -> Result<Value, BackendError> {
        backend.query(&hgetall(&entry.key[0])).await
    }
}

/// `name key`, sized up front (the command's buffer otherwise grows twice as its name and key
/// go in).
fn command(name: &str, key: &str) -> redis::Cmd {
    let mut cmd = redis::Cmd::with_capacity(2, name.len() + key.len());
    cmd.arg(name).arg(key);
    cmd
}

/// `HGETALL key`.
fn hgetall(key: &str) -> redis::Cmd {
    command("HGETALL", key)
}

/// The hash under `key`, read through `reads`: on a single Redis whose reads have room, its
/// `HGETALL` at once, in this future, the room held for it; else queued, to go with the reads
/// that wait for room (on a cluster, by hash slot).
async fn read_hash(
    backend: &RedisBackend,
    reads: &Coalescer<HashRead, Hashes>,
    key: &str,
) -> Result<Value, BackendError> {
    match reads.room() {
        Some(room) => {
            let reply = backend.query(&hgetall(key)).await;
            drop(room);
            reply
        }
        None => {
            reads
                .call(HashRead {
                    key: [key.to_owned()],
                })
                .await
        }
    }
}

/// What the plain read says about a session.
#[derive(Debug, PartialEq)]
enum Plain {
    /// No session under the key.
    Gone,
    /// A live session whose refresh is not due, as read.
    Fresh(Record),
    /// The load script decides: the refresh is due, or the hash or its TTL is not what a touch
    /// leaves.
    Script,
}

/// How often a plain read also asks for the TTL, to estimate Redis's clock again (µs).
const CLOCK_EVERY: u64 = 1_000_000;

/// Redis's clock as this process sees it: how far this process's wall clock ran ahead of it at
/// the last estimate (see the module's docs). Shared by the clones of a store.
#[derive(Debug, Default)]
pub(super) struct RedisClock {
    /// This process's wall clock (µs since the epoch) when the estimate was taken; 0: none yet.
    taken: AtomicU64,
    /// How far this process's wall clock ran ahead of Redis's (µs; negative: behind), never more
    /// than it did: Redis's time estimated from it is never earlier than Redis's own.
    ahead: AtomicI64,
}

impl RedisClock {
    /// How far this process's wall clock runs ahead of Redis's (µs; negative: behind) when it
    /// reads `now`, if the estimate is at most [`CLOCK_EVERY`] old (`None`: time to estimate
    /// again, or this clock stepped back since).
    fn ahead(&self, now: u64) -> Option<i64> {
        let taken = self.taken.load(Ordering::Relaxed);
        if taken == 0 || now < taken || now - taken >= CLOCK_EVERY {
            return None;
        }
        // The two values may come from two estimates made side by side: either holds.
        Some(self.ahead.load(Ordering::Relaxed))
    }

    /// Records that Redis's time was at least `redis` when this process's wall clock read `sent`.
    fn learn(&self, sent: u64, redis: u64) {
        let ahead = i64::try_from(i128::from(sent) - i128::from(redis)).unwrap_or(0);
        self.ahead.store(ahead, Ordering::Relaxed);
        self.taken.store(sent.max(1), Ordering::Relaxed);
    }
}

/// This process's wall clock, µs since the epoch (0 before it).
fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, crate::backend::micros)
}

/// Loads the session under Redis key `key`: plain reads, then the load script (through
/// `loads`) only when they say so. `reads` carries the plain reads that go alone (`HGETALL`),
/// `clock` is the store's estimate of Redis's clock.
pub(super) async fn load(
    backend: &RedisBackend,
    reads: &Coalescer<HashRead, Hashes>,
    loads: &Arc<Coalescer<LoadEntry>>,
    clock: &RedisClock,
    key: String,
    life: Lifetimes,
) -> Result<Option<Record>, SessionError> {
    let idle = life.idle_us();
    match read(backend, reads, clock, &key, idle, life.fresh_us()).await? {
        Plain::Gone => return Ok(None),
        Plain::Fresh(record) => return Ok(Some(record)),
        Plain::Script => {}
    }
    let entry = LoadEntry {
        key: [key],
        idle,
        fresh: life.seen_every.map(|_| life.fresh_us()),
    };
    match loads.call(entry).await? {
        Value::Nil => Ok(None),
        v => Ok(Some(Record::from_flat(strings(v)?))),
    }
}

/// The plain read of `key`, and what it says: `HGETALL` alone (through `reads`) while `clock`
/// knows Redis's time, else `HGETALL` and `TIME` in one pipeline, from which `clock` learns it
/// again. Under a test clock: `HGETALL` and `PTTL` (plus `TIME` when the clock shifts Redis
/// time). The replies come as Redis sent them: an error reply is checked here, where its
/// command is known.
async fn read(
    backend: &RedisBackend,
    reads: &Coalescer<HashRead, Hashes>,
    clock: &RedisClock,
    key: &str,
    idle: u64,
    fresh: u64,
) -> Result<Plain, SessionError> {
    let shift = backend.shift_us();
    let frozen = backend.frozen_us();
    let test_clock = frozen.is_some() || shift > 0;
    let sent = if test_clock { 0 } else { wall_us() };
    let ahead = if test_clock { None } else { clock.ahead(sent) };
    if let Some(ahead) = ahead {
        let record = hash_record(read_hash(backend, reads, key).await?)?;
        // Taken after the reply: Redis read the hash no later than this.
        let now = wall_us();
        if now < sent {
            // This clock stepped back while the read was out: the script decides.
            return Ok(if record.fields.is_empty() {
                Plain::Gone
            } else {
                Plain::Script
            });
        }
        let now = now.saturating_add_signed(ahead.saturating_neg());
        return Ok(decide(record, None, now, idle, fresh));
    }
    let mut pipe = redis::Pipeline::with_capacity(3);
    pipe.add_command(hgetall(key));
    if test_clock {
        pipe.add_command(command("PTTL", key));
    }
    if frozen.is_none() {
        pipe.cmd("TIME");
    }
    let Value::Array(replies) = backend.pipeline_replies(&pipe, key, None).await? else {
        return Err(bad_reply("a pipeline reply that is not an array".into()));
    };
    let mut replies = replies.into_iter();
    let Some(hash) = replies.next() else {
        return Err(bad_reply("a session read without its replies".into()));
    };
    let record = hash_record(hash)?;
    if !test_clock {
        // Redis's time when it read the hash, at or after `sent`.
        let now = redis_time(replies.next())?;
        clock.learn(sent, now);
        return Ok(decide(record, None, now, idle, fresh));
    }
    let pttl = match replies.next() {
        Some(Value::Int(ms)) => ms,
        other => return Err(bad_reply(format!("PTTL replied {other:?}"))),
    };
    let now = match frozen {
        Some(us) => us,
        None => redis_time(replies.next())?.saturating_add(shift),
    };
    Ok(decide(record, Some(pttl), now, idle, fresh))
}

/// An `HGETALL` reply as a record (empty: no key).
fn hash_record(hash: Value) -> Result<Record, SessionError> {
    Ok(match hash {
        Value::Array(items) => Record::from_pairs(pairs(items)?),
        Value::Map(map) => Record::from_pairs(
            map.into_iter()
                .map(|(name, value)| Ok((text(name)?, text(value)?)))
                .collect::<Result<_, SessionError>>()?,
        ),
        Value::ServerError(e) => return Err(crate::backend::BackendError::Redis(e.into()).into()),
        other => return Err(bad_reply(format!("HGETALL replied {other:?}"))),
    })
}

/// An `HGETALL` reply's array (RESP2) as name/value pairs.
fn pairs(items: Vec<Value>) -> Result<Vec<(String, String)>, SessionError> {
    if items.len() % 2 == 1 {
        return Err(bad_reply("HGETALL replied a name without its value".into()));
    }
    let mut pairs = Vec::with_capacity(items.len() / 2);
    let mut items = items.into_iter();
    while let (Some(name), Some(value)) = (items.next(), items.next()) {
        pairs.push((text(name)?, text(value)?));
    }
    Ok(pairs)
}

/// A field's name or value: a bulk string's bytes taken as they are (no copy, no generic
/// conversion).
fn text(item: Value) -> Result<String, SessionError> {
    match item {
        Value::BulkString(bytes) => String::from_utf8(bytes)
            .map_err(|_| bad_reply("a session field that is not UTF-8".into())),
        other => string(other),
    }
}

/// Redis `TIME` (seconds and microseconds) in µs.
fn redis_time(reply: Option<Value>) -> Result<u64, SessionError> {
    let parts = strings(reply.unwrap_or(Value::Nil))?;
    let [s, us] = parts.as_slice() else {
        return Err(bad_reply(format!("TIME replied {parts:?}")));
    };
    let parse = |n: &str| {
        n.parse::<u64>()
            .map_err(|_| bad_reply(format!("TIME replied {parts:?}")))
    };
    Ok(parse(s)?
        .saturating_mul(1_000_000)
        .saturating_add(parse(us)?))
}

/// The last use recorded in a hash, as the touch that recorded it wrote it.
struct Touch {
    /// Absolute expiry (µs).
    exp: u64,
    /// Last use (µs).
    seen: u64,
    /// The idle timeout that applies (µs): the session's own, else the layer's.
    idle: u64,
    /// The TTL the touch set (ms): `touch` in record.lua.
    ttl_ms: u64,
}

impl Touch {
    /// The hash's times, with `idle` the layer's idle timeout; `None` when they are missing or
    /// malformed (the script deletes such a session).
    fn of(record: &Record, idle: u64) -> Option<Self> {
        let meta = record.meta();
        let number = |value: Option<&str>| value.map(str::parse::<u64>);
        let (Some(Ok(exp)), Some(Ok(seen))) = (number(meta.exp), number(meta.seen)) else {
            return None;
        };
        let idle = match number(meta.idle) {
            None => idle,
            Some(Ok(own)) => own,
            Some(Err(_)) => return None,
        };
        (exp > seen).then(|| Self {
            exp,
            seen,
            idle,
            ttl_ms: idle.min(exp - seen).div_ceil(1000),
        })
    }

    /// Whether `pttl` (ms), Redis's reply for the key, is a TTL this touch set (not none, not
    /// longer).
    fn set(&self, pttl: i64) -> bool {
        u64::try_from(pttl).is_ok_and(|pttl| pttl <= self.ttl_ms)
    }
}

/// The decision on a plain read: `record` is the hash (empty: no key), `pttl` its TTL in ms
/// (−2: no key, −1: none; `None`: not read, which only a test clock reads), `now` Redis's time
/// as the store estimates it, or the scripts' time under a test clock, `idle` and `fresh` the
/// layer's idle timeout and freshness in µs.
fn decide(record: Record, pttl: Option<i64>, now: u64, idle: u64, fresh: u64) -> Plain {
    if record.fields.is_empty() || pttl == Some(-2) {
        return Plain::Gone;
    }
    let Some(touch) = Touch::of(&record, idle) else {
        // Malformed (the script deletes it).
        return Plain::Script;
    };
    if pttl.is_some_and(|pttl| !touch.set(pttl)) {
        // A key without a TTL, or one no touch under these lifetimes set.
        return Plain::Script;
    }
    let elapsed = now.saturating_sub(touch.seen);
    if now >= touch.exp || elapsed >= touch.idle || elapsed >= fresh {
        Plain::Script
    } else {
        Plain::Fresh(record)
    }
}

#[cfg(test)]
mod tests {
    use super::{CLOCK_EVERY, Plain, RedisClock, decide};
    use crate::session::store::Record;

    const MIN: u64 = 60_000_000;
    const IDLE: u64 = 30 * MIN;
    const FRESH: u64 = IDLE / 100;
    const SEEN: u64 = 1_700_000_000_000_000;

    fn hash(exp: u64, extra: &[(&str, &str)]) -> Record {
        let mut flat = vec![
            "$exp".to_owned(),
            exp.to_string(),
            "$seen".to_owned(),
            SEEN.to_string(),
            "name".to_owned(),
            "\"alice\"".to_owned(),
        ];
        for (k, v) in extra {
            flat.push((*k).to_owned());
            flat.push((*v).to_owned());
        }
        Record::from_flat(flat)
    }

    fn ms(us: u64) -> i64 {
        i64::try_from(us / 1000).expect("fits")
    }

    fn fresh(p: &Plain) -> bool {
        matches!(p, Plain::Fresh(r) if r.get("name") == Some("\"alice\"") && !r.marked)
    }

    #[test]
    fn under_a_test_clock_the_ttl_must_be_one_a_touch_set() {
        let exp = SEEN + 24 * 60 * MIN;
        let d = |pttl| decide(hash(exp, &[]), Some(pttl), SEEN, IDLE, FRESH);
        assert!(fresh(&d(ms(IDLE))), "just touched");
        assert!(fresh(&d(1)), "a TTL a touch set: the clock decides");
        assert_eq!(d(ms(IDLE) + 1), Plain::Script, "a TTL no touch set");
        assert_eq!(d(-1), Plain::Script, "no TTL");
        assert_eq!(d(-2), Plain::Gone);
        assert_eq!(
            decide(Record::default(), Some(-2), SEEN, IDLE, FRESH),
            Plain::Gone
        );
        // A freshness of zero records every use.
        assert_eq!(
            decide(hash(exp, &[]), Some(ms(IDLE)), SEEN, IDLE, 0),
            Plain::Script
        );
    }

    #[test]
    fn a_sessions_own_idle_timeout_and_the_absolute_deadline_set_the_ttl() {
        let exp = SEEN + 24 * 60 * MIN;
        let own = (2 * IDLE).to_string();
        let with_own = |pttl| decide(hash(exp, &[("$idle", &own)]), Some(pttl), SEEN, IDLE, FRESH);
        assert!(fresh(&with_own(ms(2 * IDLE))));
        assert_eq!(with_own(ms(2 * IDLE) + 1), Plain::Script);
        let bad = decide(
            hash(exp, &[("$idle", "x")]),
            Some(ms(IDLE)),
            SEEN,
            IDLE,
            FRESH,
        );
        assert_eq!(bad, Plain::Script);
        // Ten minutes to the absolute expiry at the last touch: the TTL was ten minutes.
        let near = SEEN + 10 * MIN;
        let d = |pttl| decide(hash(near, &[]), Some(pttl), SEEN, IDLE, FRESH);
        assert!(fresh(&d(ms(10 * MIN))));
        assert_eq!(d(ms(IDLE)), Plain::Script, "longer than the deadline");
    }

    #[test]
    fn malformed_hashes_go_to_the_script() {
        let no_seen = Record::from_flat(vec!["$exp".to_owned(), "1".to_owned()]);
        assert_eq!(
            decide(no_seen, Some(1000), SEEN, IDLE, FRESH),
            Plain::Script
        );
        let no_exp = Record::from_flat(vec!["$seen".to_owned(), SEEN.to_string()]);
        assert_eq!(decide(no_exp, Some(1000), SEEN, IDLE, FRESH), Plain::Script);
        let odd = hash(SEEN + MIN, &[("$exp", "soon")]);
        assert_eq!(decide(odd, Some(1000), SEEN, IDLE, FRESH), Plain::Script);
        assert_eq!(
            decide(hash(SEEN, &[]), Some(1000), SEEN, IDLE, FRESH),
            Plain::Script
        );
    }

    #[test]
    fn under_a_test_clock_its_time_decides() {
        let exp = SEEN + 24 * 60 * MIN;
        let at = |now| decide(hash(exp, &[]), Some(ms(IDLE)), now, IDLE, FRESH);
        assert!(fresh(&at(SEEN + FRESH - 1)));
        assert_eq!(at(SEEN + FRESH), Plain::Script, "due");
        assert_eq!(at(SEEN + IDLE), Plain::Script, "idle in shifted time");
        assert_eq!(at(exp), Plain::Script, "past the absolute expiry");
        assert!(fresh(&at(SEEN - 5)), "a clock behind the last use");
    }

    #[test]
    fn without_the_ttl_redis_time_decides() {
        let exp = SEEN + 24 * 60 * MIN;
        let at = |now| decide(hash(exp, &[]), None, now, IDLE, FRESH);
        assert!(fresh(&at(SEEN)), "just touched");
        assert!(fresh(&at(SEEN + FRESH - 1)));
        assert_eq!(at(SEEN + FRESH), Plain::Script, "due");
        assert_eq!(at(SEEN + IDLE), Plain::Script, "idle");
        assert_eq!(at(exp), Plain::Script, "past the absolute expiry");
        assert!(fresh(&at(SEEN - 1)), "a last use ahead of the estimate");
        assert_eq!(
            decide(Record::default(), None, SEEN, IDLE, FRESH),
            Plain::Gone
        );
        let own = (2 * IDLE).to_string();
        let with_own = |now| decide(hash(exp, &[("$idle", &own)]), None, now, IDLE, FRESH);
        assert!(fresh(&with_own(SEEN + FRESH - 1)));
        assert_eq!(with_own(SEEN + FRESH), Plain::Script);
    }

    #[test]
    fn the_clock_estimate_holds_for_a_second_and_follows_the_offset() {
        let clock = RedisClock::default();
        assert_eq!(clock.ahead(SEEN), None, "nothing learnt yet");
        // This process's clock runs 3 s ahead of Redis's.
        clock.learn(SEEN, SEEN - 3_000_000);
        assert_eq!(clock.ahead(SEEN), Some(3_000_000));
        assert_eq!(clock.ahead(SEEN + 500_000), Some(3_000_000));
        assert_eq!(
            clock.ahead(SEEN + CLOCK_EVERY),
            None,
            "a second old: estimate again"
        );
        assert_eq!(clock.ahead(SEEN - 1), None, "this clock stepped back");
        // Now 2 s behind.
        clock.learn(SEEN + 10, SEEN + 2_000_010);
        assert_eq!(clock.ahead(SEEN + 10), Some(-2_000_000));
    }
}
