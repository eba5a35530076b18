//! The Lua script every Redis evaluation runs: the prelude, the algorithms, the dispatcher.

use std::sync::LazyLock;

/// The built-in algorithms, in id order (id = position + 1), with their Lua function names.
const BUILTIN: [(&str, &str); 5] = [
    ("gcra", include_str!("gcra.lua")),
    ("fixed_window", include_str!("fixed_window.lua")),
    ("sliding_log", include_str!("sliding_log.lua")),
    ("sliding_counter", include_str!("sliding_counter.lua")),
    ("token_bucket", include_str!("token_bucket.lua")),
];

/// The script's source.
pub(crate) fn source() -> String {
    let mut src = String::from(include_str!("prelude.lua"));
    for (_, body) in BUILTIN {
        src.push('\n');
        src.push_str(body);
    }
    let names: Vec<&str> = BUILTIN.iter().map(|(name, _)| *name).collect();
    src.push_str(&format!(
        "\nlocal algorithms = {{ {} }}\nlocal names = {{ '{}' }}\n",
        names.join(", "),
        names.join("', '")
    ));
    src.push_str(include_str!("evaluate.lua"));
    src
}

/// Built once; `redis::Script` keeps its SHA-1 for `EVALSHA`.
pub(crate) static EVALUATE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&source()));
