//! A [`MemoryLimiter`](super::MemoryLimiter)'s table: the algorithms' states and the override
//! records, each entry with the deadline it expires at.

use std::collections::VecDeque;
use std::sync::Arc;

use super::entry_ids::{EntryId, Ids};
use crate::backend::ExpiringTable;
use crate::rate_limit::algorithm::{Commit, State, ceil_ms};
use crate::rate_limit::limiter::overrides::Override;

/// The algorithms' states, and the override records (penalties, allow-list entries, bans).
#[derive(Debug)]
pub(super) struct Table {
    pub(super) states: ExpiringTable<EntryId, State, Ids>,
    pub(super) overrides: ExpiringTable<EntryId, Override, Ids>,
}

impl Table {
    /// The override record under `oid` as of `now` (none: an empty one).
    pub(super) fn record(&mut self, oid: EntryId, now: u64) -> Override {
        self.overrides
            .get_live_mut(&oid, now)
            .map(|r| r.live(now))
            .unwrap_or_default()
    }

    /// Stores `record` until its latest deadline (whole milliseconds, as Redis' PX), or drops
    /// it when none is left.
    pub(super) fn store(&mut self, oid: EntryId, record: Override, now: u64) {
        let until = record.until();
        if until <= now {
            self.overrides.remove(&oid);
        } else {
            self.overrides
                .insert(oid, record, now + ceil_ms(until - now) * 1000);
        }
    }

    /// Records `commit`; a lease is named `request`.
    pub(super) fn apply(&mut self, id: EntryId, commit: Commit, now: u64, request: &str) {
        // Same expiry as Redis' PX: whole milliseconds, rounded up.
        let expiry = |ttl_us: u64| now + ceil_ms(ttl_us) * 1000;
        match commit {
            Commit::Replace(state, ttl) => {
                self.states.insert(id, state, expiry(ttl));
            }
            Commit::Append { at, n, ttl } => {
                let entries = std::iter::repeat_n(at, usize::try_from(n).unwrap_or(0));
                let live_log = self.states.is_live(&id, now)
                    && matches!(self.states.get_mut(&id), Some(State::Log(_)));
                if live_log {
                    if let Some(State::Log(log)) = self.states.get_mut(&id) {
                        log.extend(entries);
                    }
                    self.states.set_deadline(&id, expiry(ttl));
                } else {
                    self.states.insert(
                        id,
                        State::Log(entries.collect::<VecDeque<_>>()),
                        expiry(ttl),
                    );
                }
            }
            Commit::Lease { expiry: until, ttl } => {
                let lease = (Arc::from(request), until);
                match self.states.get_live_mut(&id, now) {
                    Some(State::Leases(held)) => {
                        held.push(lease);
                        self.states.set_deadline(&id, expiry(ttl));
                    }
                    _ => {
                        self.states
                            .insert(id, State::Leases(vec![lease]), expiry(ttl));
                    }
                }
            }
        }
    }
}
