//! The "your devices" methods of [`Session`]: list the user's sessions, end one of them or all
//! but the current one.

use super::Session;
use crate::session::{SessionError, SessionInfo};

impl Session {
    /// The sessions of this session's user (none when logged out), with their metadata, the
    /// current one marked ([`SessionInfo::current`]): a "your devices" page.
    ///
    /// ```
    /// use redis_guard::session::{Session, SessionError};
    ///
    /// async fn devices(session: Session) -> Result<String, SessionError> {
    ///     let mut page = String::new();
    ///     for s in session.sessions().await? {
    ///         let here = if s.current { " (this device)" } else { "" };
    ///         let agent = s.user_agent.as_deref().unwrap_or("unknown browser");
    ///         page.push_str(&format!("{agent}, seen {:?} ago{here}\n", s.idle_for));
    ///     }
    ///     Ok(page)
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// A store error.
    pub async fn sessions(&self) -> Result<Vec<SessionInfo>, SessionError> {
        let (user, current) = self.owner().await?;
        let Some(user) = user else {
            return Ok(Vec::new());
        };
        let mut list = self.shared.store.list_user(user).await?;
        for info in &mut list {
            info.current = current.as_deref() == Some(info.storage_key.as_str());
        }
        Ok(list)
    }

    /// Ends the session of this session's user whose [`handle`](SessionInfo::handle) is
    /// `handle` ("log out that device"); `false` when the user has no such session (a forged
    /// handle, another user's, or logged out: nothing happens). Ending the current session
    /// removes its cookie, as [`destroy`](Self::destroy) does.
    ///
    /// # Errors
    ///
    /// A store error.
    pub async fn revoke_session(&self, handle: &str) -> Result<bool, SessionError> {
        let (user, current) = self.owner().await?;
        let Some(user) = user else {
            return Ok(false);
        };
        let listed = self.shared.store.list_user(user.clone()).await?;
        let Some(info) = listed.into_iter().find(|i| i.handle == handle) else {
            return Ok(false);
        };
        if current.as_deref() == Some(info.storage_key.as_str()) {
            self.destroy().await?;
            return Ok(true);
        }
        self.shared.store.end_session(user, handle.to_owned()).await
    }

    /// Ends every other session of this session's user ("log out everywhere else"), keeping
    /// this one; returns how many ended. Logged out: nothing happens.
    ///
    /// # Errors
    ///
    /// A store error.
    pub async fn revoke_other_sessions(&self) -> Result<usize, SessionError> {
        let (user, current) = self.owner().await?;
        let Some(user) = user else {
            return Ok(0);
        };
        let keep = current.unwrap_or_default();
        self.shared.store.end_user_except(user, keep).await
    }

    /// The stored user of this session and its storage key, once loaded (a user set in this
    /// request but not yet saved does not count: its session is not indexed yet).
    async fn owner(&self) -> Result<(Option<String>, Option<String>), SessionError> {
        let state = self.loaded().await?;
        let Some((id, record)) = &state.live else {
            return Ok((None, None));
        };
        Ok((record.user().map(str::to_owned), Some(id.key.clone())))
    }
}
