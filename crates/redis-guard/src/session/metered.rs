//! A [`SessionStore`] that counts what the layer asks of the store it wraps: the session metrics
//! of [`telemetry`](crate::telemetry).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use super::SessionError;
use super::store::{
    Changes, FieldChange, FieldOutcome, Lifetimes, Record, SessionInfo, SessionStore, Store,
    StoreFuture,
};
use crate::telemetry::{self, Metric};

/// The layer's store, counted.
pub(crate) struct Metered(pub(crate) Arc<dyn SessionStore>);

impl crate::sealed::Sealed for Metered {}

/// `fut`, with its outcome counted by `count` and its failure under `op`.
fn metered<T: Send + 'static>(
    op: &'static str,
    fut: StoreFuture<T>,
    count: impl FnOnce(&T) -> Count + Send + 'static,
) -> StoreFuture<T> {
    Box::pin(observed(op, fut, count))
}

async fn observed<T>(
    op: &'static str,
    fut: impl Future<Output = Result<T, SessionError>>,
    count: impl FnOnce(&T) -> Count,
) -> Result<T, SessionError> {
    let result = fut.await;
    match &result {
        Ok(value) => {
            if let Some((metric, label, value, n)) = count(value) {
                telemetry::count(metric, label, value.into(), n);
            }
        }
        Err(_) => telemetry::count(Metric::SessionStoreErrors, "op", op.into(), 1),
    }
    result
}

/// What a call counts, from its outcome: a metric, its label and value, and how many.
type Count = Option<(Metric, &'static str, &'static str, u64)>;

/// A write's outcome: merged into a live session, or dropped because it had ended.
fn written<T>(v: &Option<T>) -> Count {
    let result = if v.is_some() { "merged" } else { "gone" };
    Some((Metric::SessionSaves, "result", result, 1))
}

/// A load's outcome: a live session, or none.
fn loaded(r: &Option<Record>) -> Count {
    let result = if r.is_some() { "live" } else { "absent" };
    Some((Metric::SessionLoads, "result", result, 1))
}

/// A new session.
fn created(_: &u64) -> Count {
    Some((Metric::SessionSaves, "result", "created", 1))
}

/// A revocation of `kind` that ended `n` sessions.
fn revoked(kind: &'static str, n: u64) -> Count {
    Some((Metric::SessionRevocations, "kind", kind, n))
}

/// Counted only when it fails.
fn uncounted<T>(_: &T) -> Count {
    None
}

/// The [`Store`] methods of [`Metered`]: each calls the wrapped store's, and counts its failure
/// under the op name and its outcome as its function says.
macro_rules! counted {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $out:ty, $op:expr, $count:expr;)*) => {
        $(fn $name(&self, $($arg: $ty),*) -> StoreFuture<$out> {
            let op = $op;
            metered(op, self.0.$name($($arg),*), $count)
        })*
    };
}

impl SessionStore for Metered {}

#[allow(private_interfaces)] // see `Store`
impl Store for Metered {
    counted! {
        load(key: &str, life: Lifetimes) -> Option<Record>, "load", loaded;
        create(key: String, changes: Changes, life: Lifetimes) -> u64, "create", created;
        save(key: &str, changes: Changes, life: Lifetimes) -> Option<u64>, "save", written;
        delete(key: String) -> (), "delete", |()| revoked("destroy", 1);
        rotate(old: String, new: String, life: Lifetimes) -> bool, "rotate",
            |&moved| revoked("rotate", 1).filter(|_| moved);
        index_user(user: String, key: String, expires: u64, life: Lifetimes) -> (), "index",
            uncounted;
        end_user(user: String) -> usize, "revoke", |&n| revoked("user", n as u64);
        list_user(user: String) -> Vec<SessionInfo>, "list", uncounted;
        end_session(user: String, handle: String) -> bool, "revoke",
            |&ended| revoked("session", 1).filter(|_| ended);
        end_user_except(user: String, keep: String) -> usize, "revoke",
            |&n| revoked("others", n as u64);
        change_field(key: String, field: String, change: FieldChange, life: Lifetimes)
            -> Option<FieldOutcome>, change.op(), written;
    }

    fn check(&self) -> Result<(), crate::ConfigError> {
        self.0.check()
    }
}

impl fmt::Debug for Metered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ready;
    use crate::session::MemorySessionStore;
    use crate::telemetry::testing::Captured;

    fn set(field: &str) -> Changes {
        let mut c = Changes::default();
        c.set.insert(field.to_owned(), "1".to_owned());
        c
    }

    #[test]
    fn every_outcome_is_counted_once_under_its_label() {
        let metrics = Captured::default();
        let _guard = metrics::set_default_local_recorder(&metrics);
        let store = Metered(Arc::new(MemorySessionStore::new()));
        let life = Lifetimes::default();
        let key = |k: &str| k.to_owned();
        let exp = ready(store.create(key("a"), set("x"), life)).unwrap();
        ready(store.index_user("u".into(), key("a"), exp, life)).unwrap();
        assert!(ready(store.load("a", life)).unwrap().is_some());
        assert!(ready(store.load("nobody", life)).unwrap().is_none());
        assert!(ready(store.save("a", set("y"), life)).unwrap().is_some());
        assert!(
            ready(store.change_field(key("a"), "n".into(), FieldChange::Increment(1), life))
                .unwrap()
                .is_some()
        );
        assert!(ready(store.rotate(key("a"), key("b"), life)).unwrap());
        // The old id is gone: the write is dropped, never resurrecting it.
        assert!(ready(store.save("a", set("z"), life)).unwrap().is_none());
        assert_eq!(ready(store.end_user("u".into())).unwrap(), 1);
        ready(store.create(key("c"), set("x"), life)).unwrap();
        ready(store.delete(key("c"))).unwrap();
        for (metric, n) in [
            (r#"redis_guard_session_loads_total{result="live"}"#, 1),
            (r#"redis_guard_session_loads_total{result="absent"}"#, 1),
            (r#"redis_guard_session_saves_total{result="created"}"#, 2),
            (r#"redis_guard_session_saves_total{result="merged"}"#, 2),
            (r#"redis_guard_session_saves_total{result="gone"}"#, 1),
            (r#"redis_guard_session_revocations_total{kind="rotate"}"#, 1),
            (r#"redis_guard_session_revocations_total{kind="user"}"#, 1),
            (
                r#"redis_guard_session_revocations_total{kind="destroy"}"#,
                1,
            ),
            (r#"redis_guard_session_store_errors_total{op="save"}"#, 0),
        ] {
            assert_eq!(metrics.get(metric), n, "{metric}");
        }
    }
}
