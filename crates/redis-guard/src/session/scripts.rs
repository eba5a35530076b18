//! The Redis store's Lua scripts (`scripts/*.lua`, each behind `record.lua`): one [`Script`]
//! per file, the ARGV they take and the replies they give.

use std::sync::LazyLock;

use redis::Value;

use super::SessionError;
use super::store::{Changes, Lifetimes};
use crate::backend::{BackendError, Entry, LuaScript as Script, ScriptCall};

fn script(body: &str) -> Script {
    Script::new(&format!("{}\n{body}", include_str!("scripts/record.lua")))
}

pub(crate) static LOAD: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/load.lua")));
/// `save.lua`, with the full save (`save_full.lua` after `record.lua`) as the body of a function
/// it calls only for an entry its lean path does not take: the library's top-level definitions
/// would otherwise run on every call.
pub(crate) static SAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "local function full_save(now)\n{}\n{}\nend\n{}",
        include_str!("scripts/record.lua"),
        include_str!("scripts/save_full.lua"),
        include_str!("scripts/save.lua"),
    ))
});
pub(crate) static INCR: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/incr.lua")));
pub(crate) static TAKE: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/take.lua")));
pub(crate) static RESTORE: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/restore.lua")));
pub(crate) static INDEX: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/index.lua")));
pub(crate) static LIST: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/list.lua")));
pub(crate) static TRIM: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/trim.lua")));
pub(crate) static REVOKE: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/revoke.lua")));
pub(crate) static MOVE: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/move.lua")));
pub(crate) static SETTLE: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/settle.lua")));
pub(crate) static DROP: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/drop.lua")));
pub(crate) static PEEK: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/peek.lua")));
pub(crate) static PROBE: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/probe.lua")));
pub(crate) static TAKE_FIELD: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/take_field.lua")));
pub(crate) static ENSURE_FIELD: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/ensure_field.lua")));
pub(crate) static SWAP_FIELD: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/swap_field.lua")));

pub(crate) fn bad_reply(what: String) -> SessionError {
    BackendError::BadReply(what).into()
}

pub(crate) fn strings(v: Value) -> Result<Vec<String>, SessionError> {
    redis::from_redis_value(v).map_err(|e| bad_reply(e.to_string()))
}

pub(crate) fn int(v: &Value) -> Result<Option<i64>, SessionError> {
    match v {
        Value::Nil => Ok(None),
        Value::Int(i) => Ok(Some(*i)),
        other => Err(bad_reply(format!("expected an integer, got {other:?}"))),
    }
}

pub(crate) fn expiry(v: &Value) -> Result<Option<u64>, SessionError> {
    int(v)?
        .map(|i| u64::try_from(i).map_err(|_| bad_reply(format!("negative expiry {i}"))))
        .transpose()
}

/// A bulk-string reply, such as a user id.
pub(crate) fn string(v: Value) -> Result<String, SessionError> {
    redis::from_redis_value(v).map_err(|e| bad_reply(e.to_string()))
}

/// One save (`save.lua`), as an entry of a coalesced call: its key, then idle, max lifetime,
/// freshness, mode (`create` or `update`), clear, the fields to set and the fields to delete.
/// The changes are kept as they came and written straight into the call: nothing is copied per
/// save.
pub(crate) struct SaveEntry {
    key: [String; 1],
    idle: u64,
    max: u64,
    /// How long a use stays fresh: an update within it of the last use recorded writes the
    /// fields alone.
    fresh: u64,
    mode: &'static str,
    changes: Changes,
}

impl SaveEntry {
    pub(crate) fn new(key: String, mode: &'static str, changes: Changes, life: Lifetimes) -> Self {
        Self {
            key: [key],
            idle: life.idle_us(),
            max: life.max_us(),
            fresh: life.fresh_us(),
            mode,
            changes,
        }
    }
}

impl Entry for SaveEntry {
    fn keys(&self) -> &[String] {
        &self.key
    }

    fn arg_count(&self) -> usize {
        6 + 2 * self.changes.set.len() + self.changes.remove.len()
    }

    fn write_args(&self, call: &mut ScriptCall<'_>) {
        let changes = &self.changes;
        call.arg(self.idle)
            .arg(self.max)
            .arg(self.fresh)
            .arg(self.mode)
            .arg(if changes.clear { "1" } else { "0" })
            .arg(changes.set.len());
        for (k, v) in &changes.set {
            call.arg(k.as_str()).arg(v.as_str());
        }
        for k in &changes.remove {
            call.arg(k.as_str());
        }
    }
}

#[cfg(test)]
mod tests {
    //! `save.lua` against a real `redis-server`, on a frozen clock (`ARGV[1] = "=<µs>"`): its
    //! lean path (a plain update of a fresh session) decides what the full save decides.

    use redis::Value;
    use redis::aio::MultiplexedConnection;
    use redis_guard_testkit::RedisServer;

    use super::SAVE;

    const NOW: i64 = 1_790_000_000_000_000;
    const IDLE: i64 = 3_600_000_000;
    /// 1 % of the idle timeout, the default.
    const FRESH: i64 = 36_000_000;
    const MAX: i64 = 86_400_000_000;

    /// One entry of a coalesced call: `1`, its argument count, then its arguments.
    fn entry(mode: &str, clear: bool, sets: &[(&str, &str)], deletes: &[&str]) -> Vec<String> {
        let mut args = vec![
            IDLE.to_string(),
            MAX.to_string(),
            FRESH.to_string(),
            mode.to_owned(),
            if clear { "1" } else { "0" }.to_owned(),
            sets.len().to_string(),
        ];
        for (f, v) in sets {
            args.extend([(*f).to_owned(), (*v).to_owned()]);
        }
        args.extend(deletes.iter().map(|d| (*d).to_owned()));
        let mut out = vec!["1".to_owned(), args.len().to_string()];
        out.extend(args);
        out
    }

    /// Runs one call of `entries` on `key`, at `now`.
    async fn save(
        conn: &mut MultiplexedConnection,
        key: &str,
        now: i64,
        entries: &[Vec<String>],
    ) -> Vec<Value> {
        let mut call = SAVE.prepare_invoke();
        call.arg(format!("={now}")).arg(entries.len());
        for e in entries {
            call.key(key).arg(e);
        }
        call.invoke_async(conn)
            .await
            .unwrap_or_else(|e| panic!("save: {e}"))
    }

    /// A session last used at `seen`, created at NOW, its TTL as a touch at `seen` sets it.
    async fn stored(conn: &mut MultiplexedConnection, key: &str, exp: i64, seen: i64) {
        let _: () = redis::pipe()
            .del(key)
            .hset_multiple(
                key,
                &[("$m", format!("{NOW}:{exp}:{seen}")), ("a", "1".into())],
            )
            .pexpire(key, 3_600_000)
            .query_async(conn)
            .await
            .expect("store a session");
    }

    async fn hash(conn: &mut MultiplexedConnection, key: &str) -> Vec<(String, String)> {
        let mut all: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(key)
            .query_async(conn)
            .await
            .expect("HGETALL");
        all.sort();
        all
    }

    async fn pttl(conn: &mut MultiplexedConnection, key: &str) -> i64 {
        redis::cmd("PTTL")
            .arg(key)
            .query_async(conn)
            .await
            .expect("PTTL")
    }

    /// Runs the command `args` (its name first), which must succeed.
    async fn run(conn: &mut MultiplexedConnection, args: &[&str]) {
        let _: Value = redis::cmd(args[0])
            .arg(&args[1..])
            .query_async(conn)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", args[0]));
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(f, v)| ((*f).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[tokio::test]
    async fn a_lean_save_writes_the_fields_alone_and_never_revives_an_ended_session() {
        let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
        let mut conn = server.connect().await;
        let conn = &mut conn;
        let key = "s";
        let plain = entry("update", false, &[("b", "2")], &["a"]);
        let exp = NOW + MAX;
        let m = format!("{NOW}:{exp}:{NOW}");

        // Fresh: the fields alone; the times and the TTL stay as the last use set them.
        stored(conn, key, exp, NOW).await;
        run(conn, &["PEXPIRE", key, "1234567"]).await;
        let got = save(conn, key, NOW + FRESH - 1, std::slice::from_ref(&plain)).await;
        assert_eq!(got, [Value::Int(exp)]);
        assert_eq!(hash(conn, key).await, pairs(&[("$m", &m), ("b", "2")]));
        assert!((1_200_000..=1_234_567).contains(&pttl(conn, key).await));

        // Due to be marked used: the new last use and the TTL are written with the fields.
        stored(conn, key, exp, NOW).await;
        let got = save(conn, key, NOW + FRESH, std::slice::from_ref(&plain)).await;
        assert_eq!(got, [Value::Int(exp)]);
        let touched = format!("{NOW}:{exp}:{}", NOW + FRESH);
        assert_eq!(
            hash(conn, key).await,
            pairs(&[("$m", &touched), ("b", "2")])
        );
        assert!(pttl(conn, key).await > 3_590_000);

        // Gone (destroyed, revoked, expired by its TTL): nothing is re-created.
        run(conn, &["DEL", key]).await;
        let got = save(conn, key, NOW + 1, std::slice::from_ref(&plain)).await;
        assert_eq!(got, [Value::Nil]);
        assert_eq!(hash(conn, key).await, []);

        // Past its absolute expiry, however fresh its last use: ended and deleted.
        stored(conn, key, NOW + 10_000_000, NOW).await;
        let got = save(conn, key, NOW + 10_000_000, std::slice::from_ref(&plain)).await;
        assert_eq!(got, [Value::Nil]);
        assert_eq!(hash(conn, key).await, []);

        // Its own idle timeout (shorter than the freshness interval) has passed: ended.
        stored(conn, key, exp, NOW).await;
        run(conn, &["HSET", key, "$idle", "5000000"]).await;
        let got = save(conn, key, NOW + 5_000_000, std::slice::from_ref(&plain)).await;
        assert_eq!(got, [Value::Nil]);
        assert_eq!(hash(conn, key).await, []);

        // The layer's idle timeout has passed (a freshness longer than it, as configured).
        stored(conn, key, exp, NOW).await;
        let mut long_fresh = plain.clone();
        long_fresh[4] = (IDLE + 1).to_string();
        let got = save(conn, key, NOW + IDLE, &[long_fresh]).await;
        assert_eq!(got, [Value::Nil]);
        assert_eq!(hash(conn, key).await, []);
    }

    #[tokio::test]
    async fn lean_and_full_entries_of_one_call_run_in_order_each_as_alone() {
        let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
        let mut conn = server.connect().await;
        let conn = &mut conn;
        let exp = NOW + MAX;
        stored(conn, "s", exp, NOW).await;
        let at = NOW + 1;
        let got = save(
            conn,
            "s",
            at,
            &[
                entry("update", false, &[("b", "1")], &[]),
                // A clear runs the full save: it sees the lean entry's field and deletes it.
                entry("update", true, &[("c", "2")], &[]),
                entry("update", false, &[("d", "3")], &[]),
                // A `$` field runs the full save too.
                entry("update", false, &[("$user", "u")], &[]),
            ],
        )
        .await;
        assert_eq!(got, vec![Value::Int(exp); 4]);
        let m = format!("{NOW}:{exp}:{NOW}");
        assert_eq!(
            hash(conn, "s").await,
            pairs(&[("$m", &m), ("$user", "u"), ("c", "2"), ("d", "3")])
        );

        // Lean entries of one session after one another decide on the metadata the first read,
        // until an entry runs the full save: here one that ends the session (an own lifetime
        // already past), after which nothing is written again.
        stored(conn, "s", exp, NOW).await;
        let got = save(
            conn,
            "s",
            at,
            &[
                entry("update", false, &[("b", "1")], &[]),
                entry("update", false, &[("c", "2")], &["a"]),
                entry("update", false, &[("$max", "1")], &[]),
                entry("update", false, &[("d", "3")], &[]),
            ],
        )
        .await;
        assert_eq!(
            got,
            [Value::Int(exp), Value::Int(exp), Value::Nil, Value::Nil]
        );
        assert_eq!(hash(conn, "s").await, []);
        // A lean entry that ends an expired session: the next one finds it gone.
        stored(conn, "s", at, NOW).await;
        let got = save(
            conn,
            "s",
            at,
            &[
                entry("update", false, &[("b", "1")], &[]),
                entry("update", false, &[("c", "2")], &[]),
            ],
        )
        .await;
        assert_eq!(got, [Value::Nil, Value::Nil]);
        assert_eq!(hash(conn, "s").await, []);

        // A key Redis cannot read as a hash fails its own entry; the others stand.
        run(conn, &["SET", "s", "text"]).await;
        let got = save(conn, "s", at, &[entry("update", false, &[("b", "1")], &[])]).await;
        assert!(
            matches!(&got[..], [Value::BulkString(e)] if e.starts_with(b"WRONGTYPE")),
            "{got:?}"
        );

        // A malformed call writes nothing and says so.
        let mut bad = entry("update", false, &[("b", "1")], &[]);
        bad[1] = "99".to_owned();
        let err = SAVE
            .key("t")
            .arg("=1")
            .arg(1)
            .arg(bad)
            .invoke_async::<Value>(conn)
            .await
            .expect_err("malformed");
        assert_eq!(err.code(), Some("RG_ARITY"), "{err}");
    }
}
