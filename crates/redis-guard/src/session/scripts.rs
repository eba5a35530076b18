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
pub(crate) static SAVE: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/save.lua")));
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
