//! The per-user side of the Redis store: listing a user's sessions, pruning the index, and
//! revoking one session or all but one.

use redis::Value;

use super::RedisSessionStore;
use crate::session::SessionError;
use crate::session::scripts::{LIST, PEEK, PROBE, TRIM, bad_reply, strings};
use crate::session::store::{
    CREATED_FIELD, DEVICE_FIELD, EXP_FIELD, SEEN_FIELD, SessionInfo, Store,
};

/// The idle timeout `probe` uses where none is known (listing): only the absolute expiry and
/// the key's TTL (which follows the idle timeout) decide.
const NO_IDLE: u64 = 1 << 53;

/// The longest handle worth looking up: longer ones name no session.
const MAX_HANDLE_LEN: usize = 64;

/// How many times `revoke_session` follows a session that rotated under it.
const REVOKE_ATTEMPTS: usize = 3;

impl RedisSessionStore {
    /// Of `members` (storage keys), those whose session is gone: one probe each, concurrently.
    pub(super) async fn dead(
        &self,
        members: &[String],
        idle: u64,
    ) -> Result<Vec<String>, SessionError> {
        let probes = members
            .iter()
            .map(|m| self.run(&PROBE, self.session_key(m), idle, vec![]));
        let live = futures_util::future::try_join_all(probes).await?;
        Ok(members
            .iter()
            .zip(live)
            .filter(|(_, v)| !matches!(v, Value::Int(1)))
            .map(|(m, _)| m.clone())
            .collect())
    }

    /// Runs `trim.lua` on `user`'s index: removes `gone`, then pops past `cap` (0: no cap),
    /// never `keep`. Returns the popped members.
    pub(super) async fn trim(
        &self,
        user: &str,
        cap: u32,
        keep: String,
        gone: Vec<String>,
    ) -> Result<Vec<String>, SessionError> {
        let mut args = vec![cap.to_string(), keep];
        args.extend(gone);
        strings(self.run(&TRIM, self.user_key(user), 0, args).await?)
    }

    /// Removes `gone` from `user`'s index.
    pub(super) async fn unindex(&self, user: &str, gone: Vec<String>) -> Result<(), SessionError> {
        self.trim(user, 0, String::new(), gone).await.map(drop)
    }

    /// Ends `user`'s session listed under `handle`; whether one ended.
    pub(super) async fn revoke_handle(
        &self,
        user: &str,
        handle: &str,
    ) -> Result<bool, SessionError> {
        if handle.is_empty() || handle.len() > MAX_HANDLE_LEN {
            return Ok(false);
        }
        // A rotation between the listing and the delete moves the session to a new key under
        // the same handle: look again, a few times.
        let mut ended = false;
        for _ in 0..REVOKE_ATTEMPTS {
            let listing = self.listing(user).await?;
            let Some(info) = listing.into_iter().find(|i| i.handle == handle) else {
                return Ok(ended);
            };
            self.delete(info.storage_key).await?;
            ended = true;
        }
        Ok(ended)
    }

    /// Ends every session of `user` but the one under storage key `keep`; how many ended.
    pub(super) async fn revoke_others(
        &self,
        user: &str,
        keep: &str,
    ) -> Result<usize, SessionError> {
        let mut ended = 0;
        for info in self.listing(user).await? {
            if info.storage_key != keep {
                self.delete(info.storage_key).await?;
                ended += 1;
            }
        }
        Ok(ended)
    }

    /// `user`'s live sessions with their metadata, soonest expiry first: the index, then one
    /// peek per session (concurrently; on a cluster they live on different slots). Entries of
    /// sessions that are gone leave the index.
    pub(super) async fn listing(&self, user: &str) -> Result<Vec<SessionInfo>, SessionError> {
        let flat = strings(self.run(&LIST, self.user_key(user), 0, vec![]).await?)?;
        let members: Vec<String> = flat.iter().step_by(2).cloned().collect();
        let peeks = members
            .iter()
            .map(|m| self.run(&PEEK, self.session_key(m), NO_IDLE, vec![]));
        let peeked = futures_util::future::try_join_all(peeks).await?;
        let mut dead = Vec::new();
        let mut out = Vec::with_capacity(members.len());
        for (member, reply) in members.into_iter().zip(peeked) {
            if let Value::Nil = reply {
                dead.push(member);
                continue;
            }
            let values = strings(reply)?;
            let Some((now, fields)) = values.split_first() else {
                return Err(bad_reply("an empty session listing".into()));
            };
            let now: u64 = now
                .parse()
                .map_err(|_| bad_reply(format!("store time {now:?}")))?;
            const NAMES: [&str; 4] = [EXP_FIELD, CREATED_FIELD, SEEN_FIELD, DEVICE_FIELD];
            let field = |name: &str| {
                let i = NAMES.iter().position(|n| *n == name)?;
                fields.get(i).filter(|v| !v.is_empty()).cloned()
            };
            match SessionInfo::from_fields(member.clone(), field, now) {
                Some(info) => out.push(info),
                None => dead.push(member),
            }
        }
        if !dead.is_empty() {
            self.unindex(user, dead).await?;
        }
        Ok(out)
    }
}
