//! [`LuaScript`]: a script the backend runs, with its source at hand.

use std::ops::Deref;

/// The Lua every script starts with.
const PRELUDE: &str = include_str!("prelude.lua");

/// A Lua script: redis-rs' [`redis::Script`] (its SHA-1, what `EVALSHA` names) and its source,
/// which `EVAL` sends when Redis answers `NOSCRIPT`. `EVAL` caches the script as it runs it, is
/// routed by its first key like `EVALSHA`, and passes through proxies that refuse
/// `SCRIPT LOAD`: one command where a load would take two.
#[derive(Debug)]
pub(crate) struct LuaScript {
    code: String,
    script: redis::Script,
}

impl LuaScript {
    /// The script with source `code`, after the prelude every script starts with
    /// (`prelude.lua`: the clock, Redis `TIME` plus the shift in `ARGV[1]` or a test's frozen
    /// time; `idiv` and `cdiv`; `fmt`).
    pub(crate) fn new(code: &str) -> Self {
        let code = format!("{PRELUDE}\n{code}");
        Self {
            script: redis::Script::new(&code),
            code,
        }
    }

    /// The source.
    pub(crate) fn code(&self) -> &str {
        &self.code
    }
}

impl Deref for LuaScript {
    type Target = redis::Script;

    fn deref(&self) -> &redis::Script {
        &self.script
    }
}

#[cfg(test)]
mod tests {
    //! The prelude against a real `redis-server`, and every `.lua` file of the crate read for a
    //! copy of its own.

    use std::path::Path;

    use redis::aio::MultiplexedConnection;
    use redis_guard_testkit::RedisServer;

    use super::LuaScript;

    /// A server of the test's own, and a connection to it.
    async fn connect() -> (RedisServer, MultiplexedConnection) {
        let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
        let conn = server.connect().await;
        (server, conn)
    }

    /// Runs `body` (after the prelude) with `ARGV[1] = clock` and `args` after it.
    async fn run(
        conn: &mut MultiplexedConnection,
        body: &str,
        clock: &str,
        args: &[String],
    ) -> Vec<String> {
        LuaScript::new(body)
            .arg(clock)
            .arg(args)
            .invoke_async(conn)
            .await
            .unwrap_or_else(|e| panic!("{body}: {e}"))
    }

    #[tokio::test]
    async fn the_prelude_divides_exactly_and_formats_integers_as_digits() {
        let (_server, mut conn) = connect().await;
        const MAX: i64 = (1 << 53) - 1;
        let mut pairs = Vec::new();
        for b in [1, 3, 7, 1000, 86_400_000_000, (1 << 52) - 1] {
            let top = MAX - MAX % b;
            for a in [
                0,
                1,
                999,
                1000,
                1001,
                1_790_000_000_123_456,
                MAX,
                top,
                top - 1,
                top - b,
                top - b + 1,
            ] {
                pairs.extend([(a, b), (-a, b)]);
            }
        }
        let args: Vec<String> = pairs
            .iter()
            .flat_map(|(a, b)| [a.to_string(), b.to_string()])
            .collect();
        let got = run(
            &mut conn,
            "local out = {}\n\
             for i = 2, #ARGV, 2 do\n\
               local a, b = tonumber(ARGV[i]), tonumber(ARGV[i + 1])\n\
               out[#out + 1] = fmt(idiv(a, b), cdiv(a, b))\n\
             end\n\
             return out",
            "0",
            &args,
        )
        .await;
        let want: Vec<String> = pairs
            .iter()
            .map(|(a, b)| format!("{}:{}", a.div_euclid(*b), -(-a).div_euclid(*b)))
            .collect();
        assert_eq!(got, want);
        let got = run(
            &mut conn,
            "return { fmt(2 ^ 53 - 1), fmt(-1790000000123456), fmt(1, 2, 3) }",
            "0",
            &[],
        )
        .await;
        assert_eq!(got, ["9007199254740991", "-1790000000123456", "1:2:3"]);
    }

    #[tokio::test]
    async fn the_clock_is_redis_time_plus_the_shift_or_a_frozen_time() {
        let (_server, mut conn) = connect().await;
        // Read as before the prelude held more than the clock: the seam is the tests' contract.
        let read = "return { string.format('%.0f', clock()) }";
        let frozen = run(&mut conn, read, "=1790000000123456", &[]).await;
        assert_eq!(frozen, ["1790000000123456"]);
        let now = |conn: &mut MultiplexedConnection| {
            let mut conn = conn.clone();
            async move {
                let (s, us): (u64, u64) = redis::cmd("TIME")
                    .query_async(&mut conn)
                    .await
                    .expect("TIME");
                s * 1_000_000 + us
            }
        };
        let shift = 3_600_000_000;
        let before = now(&mut conn).await;
        let shifted = run(&mut conn, read, &shift.to_string(), &[]).await;
        let after = now(&mut conn).await;
        let shifted: u64 = shifted[0].parse().expect("digits");
        assert!(
            (before + shift..=after + shift).contains(&shifted),
            "{before} {shifted} {after}"
        );
    }

    /// No script reads the clock, divides or writes a number its own way: each has the
    /// prelude's `clock`, `idiv`, `cdiv` and `fmt`, so all of them round and format alike.
    #[test]
    fn no_script_has_its_own_clock_division_or_number_format() {
        fn lua_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).expect("read the source folder") {
                let path = entry.expect("an entry").path();
                if path.is_dir() {
                    lua_files(&path, out);
                } else if path.extension().is_some_and(|e| e == "lua") {
                    out.push(path);
                }
            }
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        lua_files(&src, &mut files);
        let prelude = src.join("backend/prelude.lua");
        assert!(files.contains(&prelude), "{files:?}");
        let own = [
            "local function clock",
            "local function idiv",
            "local function cdiv",
            "local function fmt",
            "'TIME'",
            "string.format('%.0f",
        ];
        let mut found = Vec::new();
        for file in files.iter().filter(|f| **f != prelude) {
            let text = std::fs::read_to_string(file).expect("read a script");
            for pattern in own.iter().filter(|p| text.contains(*p)) {
                found.push(format!("{}: {pattern}", file.display()));
            }
        }
        assert!(found.is_empty(), "{found:#?}");
    }
}
