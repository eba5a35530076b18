//! A [`SessionStore`] that counts what the layer asks of the store it wraps: the session metrics
//! of [`telemetry`](crate::telemetry).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use super::SessionError;
use super::store::{
    BoxFuture, Changes, FieldChange, FieldOutcome, Lifetimes, Record, SessionInfo, SessionStore,
    Store,
};
use crate::telemetry::{self, Metric};

/// The layer's store, counted.
pub(crate) struct Metered(pub(crate) Arc<dyn SessionStore>);

impl crate::sealed::Sealed for Metered {}

/// `fut`, with its outcome counted by `count` and its failure under `op`.
fn metered<T: Send + 'static>(
    op: &'static str,
    fut: BoxFuture<Result<T, SessionError>>,
    count: impl FnOnce(&T) -> Option<(Metric, &'static str, &'static str, u64)> + Send + 'static,
) -> BoxFuture<Result<T, SessionError>> {
    Box::pin(observed(op, fut, count))
}

async fn observed<T>(
    op: &'static str,
    fut: impl Future<Output = Result<T, SessionError>>,
    count: impl FnOnce(&T) -> Option<(Metric, &'static str, &'static str, u64)>,
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

/// A write's outcome: merged into a live session, or dropped because it had ended.
fn written<T>(v: &Option<T>) -> Option<(Metric, &'static str, &'static str, u64)> {
    let result = if v.is_some() { "merged" } else { "gone" };
    Some((Metric::SessionSaves, "result", result, 1))
}

impl SessionStore for Metered {}

#[allow(private_interfaces)] // see `Store`
impl Store for Metered {
    fn load(
        &self,
        key: String,
        life: Lifetimes,
    ) -> BoxFuture<Result<Option<Record>, SessionError>> {
        metered("load", self.0.load(key, life), |r| {
            let result = if r.is_some() { "live" } else { "absent" };
            Some((Metric::SessionLoads, "result", result, 1))
        })
    }

    fn create(
        &self,
        key: String,
        changes: Changes,
        life: Lifetimes,
    ) -> BoxFuture<Result<u64, SessionError>> {
        metered("create", self.0.create(key, changes, life), |_| {
            Some((Metric::SessionSaves, "result", "created", 1))
        })
    }

    fn save(
        &self,
        key: String,
        changes: Changes,
        life: Lifetimes,
    ) -> BoxFuture<Result<Option<u64>, SessionError>> {
        metered("save", self.0.save(key, changes, life), written)
    }

    fn increment(
        &self,
        key: String,
        field: String,
        by: i64,
        life: Lifetimes,
    ) -> BoxFuture<Result<Option<i64>, SessionError>> {
        metered("increment", self.0.increment(key, field, by, life), written)
    }

    fn delete(&self, key: String) -> BoxFuture<Result<(), SessionError>> {
        metered("delete", self.0.delete(key), |()| {
            Some((Metric::SessionRevocations, "kind", "destroy", 1))
        })
    }

    fn rotate(
        &self,
        old: String,
        new: String,
        life: Lifetimes,
    ) -> BoxFuture<Result<bool, SessionError>> {
        metered("rotate", self.0.rotate(old, new, life), |&moved| {
            moved.then_some((Metric::SessionRevocations, "kind", "rotate", 1))
        })
    }

    fn index_user(
        &self,
        user: String,
        key: String,
        expires: u64,
        life: Lifetimes,
    ) -> BoxFuture<Result<(), SessionError>> {
        metered("index", self.0.index_user(user, key, expires, life), |()| {
            None
        })
    }

    fn end_user(&self, user: String) -> BoxFuture<Result<usize, SessionError>> {
        metered("revoke", self.0.end_user(user), |&n| {
            Some((Metric::SessionRevocations, "kind", "user", n as u64))
        })
    }

    fn list_user(&self, user: String) -> BoxFuture<Result<Vec<SessionInfo>, SessionError>> {
        metered("list", self.0.list_user(user), |_| None)
    }

    fn end_session(&self, user: String, handle: String) -> BoxFuture<Result<bool, SessionError>> {
        metered("revoke", self.0.end_session(user, handle), |&ended| {
            ended.then_some((Metric::SessionRevocations, "kind", "session", 1))
        })
    }

    fn end_user_except(
        &self,
        user: String,
        keep: String,
    ) -> BoxFuture<Result<usize, SessionError>> {
        metered("revoke", self.0.end_user_except(user, keep), |&n| {
            Some((Metric::SessionRevocations, "kind", "others", n as u64))
        })
    }

    fn check(&self) -> Result<(), crate::ConfigError> {
        self.0.check()
    }

    fn change_field(
        &self,
        key: String,
        field: String,
        change: FieldChange,
        life: Lifetimes,
    ) -> BoxFuture<Result<Option<FieldOutcome>, SessionError>> {
        let op = change.op();
        metered(op, self.0.change_field(key, field, change, life), written)
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
    use crate::session::MemorySessionStore;
    use crate::telemetry::testing::Captured;

    fn block<T>(f: BoxFuture<T>) -> T {
        futures_util::FutureExt::now_or_never(f).expect("the memory store never waits")
    }

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
        let exp = block(store.create(key("a"), set("x"), life)).unwrap();
        block(store.index_user("u".into(), key("a"), exp, life)).unwrap();
        assert!(block(store.load(key("a"), life)).unwrap().is_some());
        assert!(block(store.load(key("nobody"), life)).unwrap().is_none());
        assert!(
            block(store.save(key("a"), set("y"), life))
                .unwrap()
                .is_some()
        );
        assert!(
            block(store.increment(key("a"), "n".into(), 1, life))
                .unwrap()
                .is_some()
        );
        assert!(block(store.rotate(key("a"), key("b"), life)).unwrap());
        // The old id is gone: the write is dropped, never resurrecting it.
        assert!(
            block(store.save(key("a"), set("z"), life))
                .unwrap()
                .is_none()
        );
        assert_eq!(block(store.end_user("u".into())).unwrap(), 1);
        block(store.create(key("c"), set("x"), life)).unwrap();
        block(store.delete(key("c"))).unwrap();
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
