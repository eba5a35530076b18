//! [`LuaScript`]: a script the backend runs, with its source at hand.

use std::ops::Deref;

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
    /// The script with source `code`, after the clock every script reads (`clock.lua`:
    /// Redis `TIME` plus the shift in `ARGV[1]`, or a test's frozen time).
    pub(crate) fn new(code: &str) -> Self {
        let code = format!("{}\n{code}", include_str!("clock.lua"));
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
