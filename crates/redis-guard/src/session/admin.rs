//! What an admin task calls on a session store: a user's sessions listed and revoked ("log out
//! everywhere", a "your devices" page run from outside a request). A handler calls the same
//! through its [`Session`](super::Session).
//!
//! They are inherent methods of [`MemorySessionStore`], [`RedisSessionStore`] and
//! `dyn SessionStore` (one definition, `store_operations!`, each example shown with its own
//! type), built on the sealed engine the layer drives: [`SessionStore`] itself has nothing to
//! call.

use super::store::Store;
use super::{MemorySessionStore, RedisSessionStore, SessionError, SessionInfo, SessionStore};

/// The admin operations as inherent methods of `$ty`, whose examples build their store with
/// `$setup` (`[fence, imports, let store = …;]`).
macro_rules! store_operations {
    ($ty:ty, $setup:tt) => {
        impl $ty {
            /// Ends every session of `user` (log out everywhere, a password change); returns
            /// how many were listed. The index is taken in one atomic step, so a session
            /// indexed concurrently is either ended or stays in the index for the next
            /// revocation; a session rotated meanwhile is ended under its new id.
            ///
            #[doc = operation_example!($setup,
                        "let ended = store.revoke_user(\"alice\").await?;",
                        "assert_eq!(ended, 0); // alice had no session",
                    )]
            ///
            /// # Errors
            ///
            /// [`SessionError::Backend`]: the store failed.
            pub async fn revoke_user(&self, user: &str) -> Result<usize, SessionError> {
                self.end_user(user.to_owned()).await
            }

            /// The live sessions of `user`, with their metadata, soonest absolute expiry first:
            /// what a "your devices" page shows. Index entries of sessions that are gone are
            /// pruned on the way.
            ///
            #[doc = operation_example!($setup,
                        "for s in store.user_sessions(\"alice\").await? {",
                        "    println!(\"{} from {:?}, idle {:?}\", s.handle, s.ip, s.idle_for);",
                        "}",
                    )]
            ///
            /// # Errors
            ///
            /// [`SessionError::Backend`]: the store failed.
            pub async fn user_sessions(
                &self,
                user: &str,
            ) -> Result<Vec<SessionInfo>, SessionError> {
                self.list_user(user.to_owned()).await
            }

            /// Ends the session of `user` whose [`handle`](SessionInfo::handle) is `handle`;
            /// `false` when `user` has no such session (a forged handle, or another user's:
            /// nothing happens). A rotation racing with it is followed: the session ends under
            /// its new id.
            ///
            #[doc = operation_example!($setup,
                        "assert!(!store.revoke_session(\"alice\", \"no-such-handle\").await?);",
                    )]
            ///
            /// # Errors
            ///
            /// [`SessionError::Backend`]: the store failed.
            pub async fn revoke_session(
                &self,
                user: &str,
                handle: &str,
            ) -> Result<bool, SessionError> {
                self.end_session(user.to_owned(), handle.to_owned()).await
            }

            /// Ends every session of `user` except the one under storage key `keep`
            /// ([`SessionInfo::storage_key`], or
            /// [`SessionId::storage_key`](super::SessionId::storage_key)): "log out everywhere
            /// else". Returns how many were ended. Sessions `user` logs in with while it runs
            /// may stay (unlike `revoke_user`, which takes the index at once: keeping one
            /// session means going through the list).
            ///
            #[doc = operation_example!($setup,
                        "let listed = store.user_sessions(\"alice\").await?;",
                        "if let Some(newest) = listed.last() {",
                        "    store.revoke_user_except(\"alice\", &newest.storage_key).await?;",
                        "}",
                    )]
            ///
            /// # Errors
            ///
            /// [`SessionError::Backend`]: the store failed.
            pub async fn revoke_user_except(
                &self,
                user: &str,
                keep: &str,
            ) -> Result<usize, SessionError> {
                self.end_user_except(user.to_owned(), keep.to_owned()).await
            }
        }
    };
}

store_operations!(
    MemorySessionStore,
    [
        "",
        "use redis_guard::session::MemorySessionStore;\n",
        "let store = MemorySessionStore::new();"
    ]
);

store_operations!(
    RedisSessionStore,
    [
        "no_run",
        "use redis_guard::{backend::RedisConnection, session::RedisSessionStore};\n",
        "let store = RedisSessionStore::new(RedisConnection::open(\"redis://127.0.0.1/\").await?);"
    ]
);

store_operations!(
    dyn SessionStore,
    [
        "",
        "use std::sync::Arc;\nuse redis_guard::session::{MemorySessionStore, SessionStore};\n",
        "let store: Arc<dyn SessionStore> = Arc::new(MemorySessionStore::new()); // or a RedisSessionStore"
    ]
);

/// Test seams (feature `test-util`): what the store holds, read and removed under a storage key
/// as the layer does, for suites that check a store's record behind the layer's back.
#[cfg(feature = "test-util")]
impl dyn SessionStore {
    /// The fields (values as JSON text, and metadata) of the live session under `storage_key`,
    /// loaded as the layer loads it with default settings.
    ///
    /// # Errors
    ///
    /// [`SessionError::Backend`]: the store failed.
    #[doc(hidden)]
    pub async fn stored_fields(
        &self,
        storage_key: &str,
    ) -> Result<Option<std::collections::HashMap<String, String>>, SessionError> {
        let record = self
            .load(storage_key, super::store::Lifetimes::default())
            .await?;
        Ok(record.map(|r| r.fields.into_iter().collect()))
    }

    /// Deletes the session under `storage_key`, and its entry in its user's index.
    ///
    /// # Errors
    ///
    /// [`SessionError::Backend`]: the store failed.
    #[doc(hidden)]
    pub async fn delete_stored(&self, storage_key: &str) -> Result<(), SessionError> {
        self.delete(storage_key.to_owned()).await
    }
}
