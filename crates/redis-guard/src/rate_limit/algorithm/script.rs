//! The one Lua script every Redis evaluation runs: the algorithms plus the dispatcher.

use std::sync::LazyLock;

/// Built once; `redis::Script` keeps its SHA-1 for `EVALSHA`.
pub(crate) static EVALUATE: LazyLock<redis::Script> = LazyLock::new(|| {
    let source = [include_str!("gcra.lua"), include_str!("evaluate.lua")].join("\n");
    redis::Script::new(&source)
});
