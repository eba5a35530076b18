//! Loading a session from Redis: plain reads while no refresh is due, the load script when one
//! is.
//!
//! A load first sends `HGETALL key` and `PTTL key` as one pipeline (one round trip, no script).
//! The key's TTL is what decides validity: every write that marks a use (`touch` in
//! `scripts/record.lua`) sets `$seen` to now and the TTL to the sooner of the idle and the
//! absolute deadline, so a key Redis still returns is a live session, and Redis never returns
//! an expired one. How long ago the last use was follows from the same TTL: it was set to
//! `min(idle, $exp − $seen)` (rounded up to the millisecond), and has run down since. When that
//! is less than the freshness interval (by default 1 % of the idle timeout) the session is
//! served as read, unmarked. Otherwise — the refresh is due, the hash lacks `$exp` or `$seen`,
//! or the TTL is not one a touch under these lifetimes set (no TTL, a longer one after the
//! idle timeout was shortened) — the load script runs for that entry, exactly as before, and
//! decides with Redis `TIME`: it deletes what has expired or is malformed and marks the use.
//! A load whose refresh is due therefore costs two round trips.
//!
//! When the absolute deadline set the TTL, sliding extends nothing; the use is still recorded
//! once per interval (its last-seen time, and the device the layer then records), as before.
//!
//! Test clocks (feature `test-util`): a time shift or a frozen clock moves the scripts' time,
//! not Redis's key expiry. Under one, the elapsed time comes from that clock instead (the
//! frozen time, or Redis `TIME`, read in the same pipeline, plus the shift), and a session whose
//! idle or absolute deadline has passed in that time goes to the script, which deletes it: the
//! plain path is exact under a shift too. Production builds never send `TIME`.

use std::sync::Arc;

use redis::Value;

use super::SessionError;
use super::scripts::{bad_reply, string, strings};
use super::store::{Lifetimes, Record};
use crate::backend::{Coalescer, Entry, RedisBackend, ScriptCall};

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

/// Loads the session under Redis key `key`: plain reads, then the load script (through
/// `loads`) only when they say so.
pub(super) async fn load(
    backend: &RedisBackend,
    loads: &Arc<Coalescer<LoadEntry>>,
    key: String,
    life: Lifetimes,
) -> Result<Option<Record>, SessionError> {
    let idle = life.idle_us();
    match read(backend, &key, idle, life.fresh_us()).await? {
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

/// The plain read of `key`: `HGETALL` and `PTTL` in one pipeline (plus `TIME` under a test
/// clock that shifts Redis time), and what it says. The replies come as Redis sent them: an
/// error reply is checked here, where its command is known.
async fn read(
    backend: &RedisBackend,
    key: &str,
    idle: u64,
    fresh: u64,
) -> Result<Plain, SessionError> {
    // Sized up front: each command's buffer otherwise grows twice as its name and key go in.
    let command = |name: &str| {
        let mut cmd = redis::Cmd::with_capacity(2, name.len() + key.len());
        cmd.arg(name).arg(key);
        cmd
    };
    let mut pipe = redis::Pipeline::with_capacity(3);
    pipe.add_command(command("HGETALL"))
        .add_command(command("PTTL"));
    let shift = backend.shift_us();
    let frozen = backend.frozen_us();
    if frozen.is_none() && shift > 0 {
        pipe.cmd("TIME");
    }
    let Value::Array(mut replies) = backend.pipeline_replies(&pipe, key).await? else {
        return Err(bad_reply("a pipeline reply that is not an array".into()));
    };
    let now = match (frozen, replies.len()) {
        (Some(us), _) => Some(us),
        (None, 3) => Some(redis_time(replies.pop())?.saturating_add(shift)),
        _ => None,
    };
    let (Some(pttl), Some(hash)) = (replies.pop(), replies.pop()) else {
        return Err(bad_reply("a session read without its two replies".into()));
    };
    let pttl = match pttl {
        Value::Int(ms) => ms,
        other => return Err(bad_reply(format!("PTTL replied {other:?}"))),
    };
    let record = match hash {
        Value::Array(items) => Record::from_pairs(pairs(items)?),
        Value::Map(map) => Record::from_pairs(
            map.into_iter()
                .map(|(name, value)| Ok((text(name)?, text(value)?)))
                .collect::<Result<_, SessionError>>()?,
        ),
        Value::ServerError(e) => return Err(crate::backend::BackendError::Redis(e.into()).into()),
        other => return Err(bad_reply(format!("HGETALL replied {other:?}"))),
    };
    Ok(decide(record, pttl, now, idle, fresh))
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

/// The decision on a plain read: `record` is the hash (empty: no key), `pttl` its TTL in ms (−2:
/// no key, −1: none), `now` the scripts' time under a test clock (`None`: Redis's own expiry
/// decides, as in production), `idle` and `fresh` the layer's idle timeout and freshness in µs.
fn decide(record: Record, pttl: i64, now: Option<u64>, idle: u64, fresh: u64) -> Plain {
    if record.fields.is_empty() || pttl == -2 {
        return Plain::Gone;
    }
    let meta = record.meta();
    let number = |value: Option<&str>| value.map(str::parse::<u64>);
    let (Some(Ok(exp)), Some(Ok(seen)), Ok(pttl)) =
        (number(meta.exp), number(meta.seen), u64::try_from(pttl))
    else {
        // Malformed (the script deletes it), or a key without a TTL.
        return Plain::Script;
    };
    let idle = match number(meta.idle) {
        None => idle,
        Some(Ok(own)) => own,
        Some(Err(_)) => return Plain::Script,
    };
    if exp <= seen {
        return Plain::Script;
    }
    // The TTL the last touch set: `touch` in record.lua.
    let set_ms = idle.min(exp - seen).div_ceil(1000);
    if pttl > set_ms {
        return Plain::Script;
    }
    let elapsed = match now {
        Some(now) if now >= exp || now.saturating_sub(seen) >= idle => return Plain::Script,
        Some(now) => now.saturating_sub(seen),
        None => (set_ms - pttl).saturating_mul(1000),
    };
    if elapsed >= fresh {
        Plain::Script
    } else {
        Plain::Fresh(record)
    }
}

#[cfg(test)]
mod tests {
    use super::{Plain, decide};
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
    fn the_ttl_says_whether_the_refresh_is_due() {
        let exp = SEEN + 24 * 60 * MIN;
        let d = |pttl| decide(hash(exp, &[]), pttl, None, IDLE, FRESH);
        assert!(fresh(&d(ms(IDLE))), "just touched");
        assert!(fresh(&d(ms(IDLE - FRESH) + 1)), "one ms short of due");
        assert_eq!(d(ms(IDLE - FRESH)), Plain::Script, "due");
        assert_eq!(d(1), Plain::Script);
        assert_eq!(d(ms(IDLE) + 1), Plain::Script, "a TTL no touch set");
        assert_eq!(d(-1), Plain::Script, "no TTL");
        assert_eq!(d(-2), Plain::Gone);
        assert_eq!(
            decide(Record::default(), -2, None, IDLE, FRESH),
            Plain::Gone
        );
        // A freshness of zero records every use.
        assert_eq!(
            decide(hash(exp, &[]), ms(IDLE), None, IDLE, 0),
            Plain::Script
        );
    }

    #[test]
    fn a_sessions_own_idle_timeout_and_the_absolute_deadline_set_the_ttl() {
        let exp = SEEN + 24 * 60 * MIN;
        let own = (2 * IDLE).to_string();
        let with_own = |pttl| decide(hash(exp, &[("$idle", &own)]), pttl, None, IDLE, FRESH);
        assert!(fresh(&with_own(ms(2 * IDLE))));
        assert!(fresh(&with_own(ms(2 * IDLE - FRESH) + 1)));
        assert_eq!(with_own(ms(2 * IDLE - FRESH)), Plain::Script);
        let bad = decide(hash(exp, &[("$idle", "x")]), ms(IDLE), None, IDLE, FRESH);
        assert_eq!(bad, Plain::Script);
        // Ten minutes to the absolute expiry at the last touch: the TTL was ten minutes.
        let near = SEEN + 10 * MIN;
        let d = |pttl| decide(hash(near, &[]), pttl, None, IDLE, FRESH);
        assert!(fresh(&d(ms(10 * MIN))));
        assert_eq!(d(ms(IDLE)), Plain::Script, "longer than the deadline");
        assert_eq!(d(ms(10 * MIN - FRESH)), Plain::Script, "due");
    }

    #[test]
    fn malformed_hashes_go_to_the_script() {
        let no_seen = Record::from_flat(vec!["$exp".to_owned(), "1".to_owned()]);
        assert_eq!(decide(no_seen, 1000, None, IDLE, FRESH), Plain::Script);
        let no_exp = Record::from_flat(vec!["$seen".to_owned(), SEEN.to_string()]);
        assert_eq!(decide(no_exp, 1000, None, IDLE, FRESH), Plain::Script);
        let odd = hash(SEEN + MIN, &[("$exp", "soon")]);
        assert_eq!(decide(odd, 1000, None, IDLE, FRESH), Plain::Script);
        assert_eq!(
            decide(hash(SEEN, &[]), 1000, None, IDLE, FRESH),
            Plain::Script
        );
    }

    #[test]
    fn under_a_test_clock_its_time_decides() {
        let exp = SEEN + 24 * 60 * MIN;
        let at = |now| decide(hash(exp, &[]), ms(IDLE), Some(now), IDLE, FRESH);
        assert!(fresh(&at(SEEN + FRESH - 1)));
        assert_eq!(at(SEEN + FRESH), Plain::Script, "due");
        assert_eq!(at(SEEN + IDLE), Plain::Script, "idle in shifted time");
        assert_eq!(at(exp), Plain::Script, "past the absolute expiry");
        assert!(fresh(&at(SEEN - 5)), "a clock behind the last use");
    }
}
