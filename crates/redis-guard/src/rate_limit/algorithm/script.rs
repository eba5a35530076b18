//! The Lua scripts every Redis evaluation runs: the prelude, the algorithms, a dispatcher.

use std::fmt::Write as _;
use std::sync::LazyLock;

use super::CustomAlgorithm;

/// The built-in algorithms, in id order (id = position + 1), with their Lua function names.
const BUILTIN: [(&str, &str); 5] = [
    ("gcra", include_str!("gcra.lua")),
    ("fixed_window", include_str!("fixed_window.lua")),
    ("sliding_log", include_str!("sliding_log.lua")),
    ("sliding_counter", include_str!("sliding_counter.lua")),
    ("token_bucket", include_str!("token_bucket.lua")),
];

/// Prelude and algorithm functions, then `local <table> = { f1, f2, … }` with each algorithm's
/// function named `<name><suffix>`, then the custom algorithms (ids from
/// [`CUSTOM_BASE`] + 1 on, in order; `customs` gives each one's name and source for this table),
/// then `driver`.
fn compose(table: &str, suffix: &str, customs: &[(&str, Option<&str>)], driver: &str) -> String {
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
    for (i, (name, source)) in customs.iter().enumerate() {
        let id = CUSTOM_BASE + 1 + i;
        let _ = writeln!(src, "names[{id}] = '{name}'");
        if let Some(source) = source {
            let _ = write!(src, "{table}[{id}] = (function()\n{source}\nend)()\n");
        }
    }
    src.push_str(driver);
    src
}

/// Custom algorithms get ids above this.
pub(crate) const CUSTOM_BASE: usize = 100;

/// The evaluation and refund scripts.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) evaluate: redis::Script,
    pub(crate) refund: redis::Script,
}

impl Scripts {
    /// The scripts with `customs` as algorithms `CUSTOM_BASE + 1 ..`.
    pub(crate) fn with_customs(customs: &[CustomAlgorithm]) -> Self {
        let evaluate: Vec<_> = customs
            .iter()
            .map(|c| (c.name(), Some(c.source())))
            .collect();
        let refund: Vec<_> = customs
            .iter()
            .map(|c| (c.name(), c.refund_source()))
            .collect();
        Self {
            evaluate: redis::Script::new(&compose(
                "algorithms",
                "",
                &evaluate,
                include_str!("evaluate.lua"),
            )),
            refund: redis::Script::new(&compose(
                "refunds",
                "_refund",
                &refund,
                include_str!("refund.lua"),
            )),
        }
    }
}

/// The scripts without custom algorithms, built once.
pub(crate) static BUILTIN_SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts::with_customs(&[]));
