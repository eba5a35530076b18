//! The Lua scripts every Redis evaluation runs: the prelude, the algorithms, a dispatcher.

use std::fmt::Write as _;
use std::sync::LazyLock;

/// The built-in algorithms, in id order (id = position + 1), with their Lua function names.
const BUILTIN: [(&str, &str); 5] = [
    ("gcra", include_str!("gcra.lua")),
    ("fixed_window", include_str!("fixed_window.lua")),
    ("sliding_log", include_str!("sliding_log.lua")),
    ("sliding_counter", include_str!("sliding_counter.lua")),
    ("token_bucket", include_str!("token_bucket.lua")),
];

/// Prelude and algorithm functions, then `local <table> = { f1, f2, … }` with each algorithm's
/// function named `<name><suffix>`, then `driver`.
fn compose(table: &str, suffix: &str, driver: &str) -> String {
    let mut src = String::from(include_str!("prelude.lua"));
    for (_, body) in BUILTIN {
        src.push('\n');
        src.push_str(body);
    }
    let functions: Vec<String> = BUILTIN
        .iter()
        .map(|(name, _)| format!("{name}{suffix}"))
        .collect();
    let names: Vec<String> = BUILTIN
        .iter()
        .map(|(name, _)| format!("'{name}'"))
        .collect();
    let _ = write!(
        src,
        "\nlocal {table} = {{ {} }}\nlocal names = {{ {} }}\n",
        functions.join(", "),
        names.join(", ")
    );
    src.push_str(driver);
    src
}

/// Decides and records (see `evaluate.lua`).
pub(crate) static EVALUATE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&compose("algorithms", "", include_str!("evaluate.lua"))));

/// Gives back what an evaluation took (see `refund.lua`).
pub(crate) static REFUND: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(&compose("refunds", "_refund", include_str!("refund.lua")))
});
