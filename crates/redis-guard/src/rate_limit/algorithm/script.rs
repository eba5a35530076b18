//! The Lua scripts every Redis evaluation runs: the prelude, the algorithms, a dispatcher.

use std::fmt::Write as _;
use std::sync::LazyLock;

use super::CustomAlgorithm;
use crate::backend::LuaScript;

/// The source of a script made of Lua files, in order, a newline between two.
macro_rules! lua_files {
    ($first:literal $(, $rest:literal)* $(,)?) => {
        concat!(include_str!($first) $(, "\n", include_str!($rest))*)
    };
}

/// The built-in algorithms, in id order (id = position + 1), with their Lua function names.
/// The last, `fixed_window_counter`, has no [`Algorithm`](super::Algorithm) of its own: it is
/// the fixed window's state on Redis >= 7 (see `fixed_window_plain.rs`).
const BUILTIN: [(&str, &str); 7] = [
    ("gcra", include_str!("gcra.lua")),
    ("fixed_window", include_str!("fixed_window.lua")),
    ("sliding_log", include_str!("sliding_log.lua")),
    ("sliding_counter", include_str!("sliding_counter.lua")),
    ("token_bucket", include_str!("token_bucket.lua")),
    ("concurrency", include_str!("concurrency.lua")),
    (
        "fixed_window_counter",
        include_str!("fixed_window_counter.lua"),
    ),
];

/// The id of the fixed window kept as a plain counter (`fixed_window_counter.lua`).
pub(crate) const FIXED_WINDOW_COUNTER: usize = BUILTIN.len();

/// Prelude and algorithm functions, then `local <table> = { f1, f2, … }` with each algorithm's
/// function named `<name><suffix>`, then the custom algorithms (ids from
/// [`CUSTOM_BASE`] + 1 on, in order, each named, with its function when `source` gives one for
/// this table), then `driver`.
fn compose(
    table: &str,
    suffix: &str,
    customs: &[CustomAlgorithm],
    source: fn(&CustomAlgorithm) -> Option<&str>,
    driver: &str,
) -> String {
    let mut src = String::from(lua_files!("overrides.lua", "prelude.lua"));
    for (_, body) in BUILTIN {
        src.push('\n');
        src.push_str(body);
    }
    let functions = BUILTIN
        .map(|(name, _)| format!("{name}{suffix}"))
        .join(", ");
    let names = BUILTIN.map(|(name, _)| format!("'{name}'")).join(", ");
    let _ = write!(
        src,
        "\nlocal {table} = {{ {functions} }}\nlocal names = {{ {names} }}\n"
    );
    for (i, custom) in customs.iter().enumerate() {
        let id = CUSTOM_BASE + 1 + i;
        let _ = writeln!(src, "names[{id}] = '{}'", custom.name());
        if let Some(source) = source(custom) {
            let _ = write!(src, "{table}[{id}] = (function()\n{source}\nend)()\n");
        }
    }
    src.push_str(driver);
    src
}

/// Custom algorithms get ids above this.
pub(crate) const CUSTOM_BASE: usize = 100;

/// The evaluation, refund and charge scripts.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) evaluate: LuaScript,
    pub(crate) refund: LuaScript,
    /// Charges a cost reported after the response (built-in algorithms only).
    pub(crate) charge: LuaScript,
}

impl Scripts {
    /// The scripts with `customs` as algorithms `CUSTOM_BASE + 1 ..`.
    pub(crate) fn with_customs(customs: &[CustomAlgorithm]) -> Self {
        let refund = CustomAlgorithm::refund_source;
        Self {
            evaluate: LuaScript::new(&compose(
                "algorithms",
                "",
                customs,
                |c| Some(c.source()),
                // Live limits' helpers (`Rule::live`) are the driver's own.
                lua_files!("live.lua", "evaluate.lua"),
            )),
            refund: LuaScript::new(&compose("each", "_refund", customs, refund, PER_KEY)),
            charge: LuaScript::new(&compose("each", "_charge", customs, |_| None, PER_KEY)),
        }
    }
}

/// The scripts without custom algorithms, built once.
pub(crate) static BUILTIN_SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts::with_customs(&[]));

/// The driver of the refund, charge and renewal scripts (see `per_key.lua`).
const PER_KEY: &str = include_str!("per_key.lua");

/// The renewal script: pushes the expiry of one request's leases (see `per_key.lua`).
pub(crate) static RENEW: LazyLock<LuaScript> = LazyLock::new(|| {
    let id = super::Algorithm::Concurrency.builtin_id().unwrap_or(0);
    let each = format!("\nlocal each = {{ [{id}] = concurrency_renew }}\n");
    LuaScript::new(&[lua_files!("prelude.lua", "concurrency.lua"), &each, PER_KEY].concat())
});

/// The operations script: read, reset, penalize or allow one rule's key (see `operations.lua`).
pub(crate) static OPERATIONS: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(lua_files!("overrides.lua", "operations.lua")));

#[cfg(test)]
mod tests {
    //! The refund script against a real `redis-server`: a Cluster refund may run after the window
    //! the request was counted in has moved on, and must then give back nothing of the new one.

    use redis::aio::MultiplexedConnection;
    use redis::{AsyncCommands, Value};
    use redis_guard_testkit::RedisServer;

    use super::BUILTIN_SCRIPTS;

    const PERIOD: u64 = 60_000_000;

    /// ARGV for one rule of algorithm `id` (limit 10 per minute, cost 1).
    fn argv(shift: u64, req: &str, third: &str, id: u8) -> Vec<String> {
        let mut v = vec![shift.to_string(), req.to_owned(), third.to_owned()];
        v.extend([u64::from(id), 10, PERIOD, 10, PERIOD / 10, 1].map(|n| n.to_string()));
        v
    }

    /// Admits one request at `shift`; the Redis time it was decided at. The evaluation script
    /// takes the coalesced form: here one entry (1 key, 10 arguments: no override record, no
    /// throttle).
    async fn admit(conn: &mut MultiplexedConnection, key: &str, shift: u64, id: u8) -> u64 {
        let mut args = argv(shift, "r", "0", id);
        args.splice(1..1, ["1", "1", "10"].map(String::from));
        args.extend(["0", "0"].map(String::from));
        let reply: Value = BUILTIN_SCRIPTS
            .evaluate
            .key(key)
            .arg(args)
            .invoke_async(conn)
            .await
            .expect("evaluate");
        let Value::Array(mut entries) = reply else {
            panic!("one reply per entry: {reply:?}");
        };
        let reply = entries.pop().expect("one entry");
        let (states, at, _) = crate::rate_limit::redis::parse_reply(&reply, 1, 0).expect("reply");
        assert!(states[0].allowed);
        at
    }

    async fn refund(conn: &mut MultiplexedConnection, key: &str, shift: u64, at: u64, id: u8) {
        let _: Value = BUILTIN_SCRIPTS
            .refund
            .key(key)
            .arg(argv(shift, "r", &at.to_string(), id))
            .invoke_async(conn)
            .await
            .expect("refund");
    }

    async fn connect() -> (RedisServer, MultiplexedConnection) {
        let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
        let conn = server
            .client()
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        (server, conn)
    }

    #[tokio::test]
    async fn fixed_window_refund_never_credits_a_later_window() {
        let (_server, mut conn) = connect().await;
        let key = "t:fw";
        let first = admit(&mut conn, key, 0, 2).await;
        // The window closes; a new request opens the next one.
        let later = PERIOD + 1_000;
        let second = admit(&mut conn, key, later, 2).await;
        let count = |v: String| v.split(':').nth(1).map(str::to_owned);
        let before: String = conn.get(key).await.unwrap();
        assert_eq!(count(before.clone()).as_deref(), Some("1"));
        // The first request's refund arrives late: the new window keeps its count.
        refund(&mut conn, key, later, first, 2).await;
        let after: String = conn.get(key).await.unwrap();
        assert_eq!(
            after, before,
            "refund of an earlier window credited the new one"
        );
        // The second request's refund is for this window, and gives back its unit.
        refund(&mut conn, key, later, second, 2).await;
        let after: String = conn.get(key).await.unwrap();
        assert_eq!(count(after).as_deref(), Some("0"));
    }

    #[tokio::test]
    async fn fixed_window_counter_refund_never_credits_a_later_window() {
        let (_server, mut conn) = connect().await;
        let key = "t:fwc";
        let id = u8::try_from(super::FIXED_WINDOW_COUNTER).expect("a small id");
        let first = admit(&mut conn, key, 0, id).await;
        let second = admit(&mut conn, key, 0, id).await;
        assert_eq!(conn.get::<_, i64>(key).await.unwrap(), 2);
        // The second request's refund is for the open window: it gives back its unit.
        refund(&mut conn, key, 0, second, id).await;
        assert_eq!(conn.get::<_, i64>(key).await.unwrap(), 1);
        // A window that opened after the first request was counted (its expiry a period and 5 s
        // from now): that request's refund is late and gives back nothing of it.
        let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
        let opened_ms = (s * 1_000_000 + us) / 1000 + 5_000;
        let _: i64 = redis::cmd("PEXPIREAT")
            .arg(key)
            .arg(opened_ms + PERIOD / 1000)
            .query_async(&mut conn)
            .await
            .unwrap();
        refund(&mut conn, key, 0, first, id).await;
        assert_eq!(conn.get::<_, i64>(key).await.unwrap(), 1);
        // Nothing to give back below zero.
        let _: () = conn.set_ex(key, 0, 60).await.unwrap();
        refund(&mut conn, key, 0, second, id).await;
        assert_eq!(conn.get::<_, i64>(key).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn sliding_counter_refund_gives_back_in_the_window_it_was_counted_in() {
        let (_server, mut conn) = connect().await;
        let key = "t:sc";
        let first = admit(&mut conn, key, 0, 4).await;
        // Move to the middle of the next aligned window: 30 s from either edge.
        let window = first / PERIOD;
        let shift = (window + 1) * PERIOD + PERIOD / 2 - first;
        let second = admit(&mut conn, key, shift, 4).await;
        let state: String = conn.get(key).await.unwrap();
        assert_eq!(state, format!("{}:1:1", window + 1));
        // The first request was counted in the previous window: its refund lowers that count.
        refund(&mut conn, key, shift, first, 4).await;
        let state: String = conn.get(key).await.unwrap();
        assert_eq!(state, format!("{}:0:1", window + 1));
        // The second was counted in the current one.
        refund(&mut conn, key, shift, second, 4).await;
        let state: String = conn.get(key).await.unwrap();
        assert_eq!(state, format!("{}:0:0", window + 1));
        // A refund from two windows back gives back nothing.
        let third = admit(&mut conn, key, shift, 4).await;
        refund(&mut conn, key, shift + 2 * PERIOD, third - 2 * PERIOD, 4).await;
        let state: String = conn.get(key).await.unwrap();
        assert_eq!(state, format!("{}:0:1", window + 1));
    }

    #[tokio::test]
    async fn a_refund_without_the_evaluation_time_is_an_error() {
        let (_server, mut conn) = connect().await;
        let err = BUILTIN_SCRIPTS
            .refund
            .key("t:x")
            .arg(argv(0, "r", "", 2))
            .invoke_async::<Value>(&mut conn)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("evaluation time"), "{err}");
    }
}
