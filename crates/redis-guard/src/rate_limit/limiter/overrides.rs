//! The override record of one rule and one key: what penalties, runtime allow-list entries and
//! bans leave on it, read by every decision of a rule that reads overrides.
//!
//! # Where it lives
//!
//! Beside its algorithm state, a rule that reads overrides
//! ([`Rule::with_overrides`](crate::rate_limit::Rule::with_overrides), or bans) keeps one small
//! *override* record per key: blocked until, allowed until, ban level (and when it is forgotten),
//! rejections in the current ban window. It is opt-in because reading it costs every request a key
//! and a `GET` per script call: measured with it always on, the `redis` benchmark lost 3–6 %
//! against the bare route. On Redis it is the string key `<prefix>rl:<rule>:ov:{<digest>}`, in the
//! same hash tag as the rule's state, so the evaluation script reads it in the same atomic call on
//! a single Redis, a pool or a Cluster, and a penalty or an allow-list entry written by one replica
//! is seen by every replica on its next decision. The record is only written by an operation or a
//! ban; it carries a `PX` expiry at the latest of its deadlines, so a key nobody steers has no
//! record and costs one `GET` of a missing key per script call. Reading it in the same call is what
//! makes a ban atomic with the rule and an operation visible to every replica at once; a separate
//! read per request would cost a round trip, and a record inside the algorithm's own state would
//! need a different shape for each algorithm (and for custom ones).

use std::time::Duration;

use crate::backend::micros;

/// One rule's override record for one key: the twin of `overrides.lua`, stored by Redis as
/// `block_until:allow_until:level:level_until:strikes:strikes_until` (µs of Redis time) and by the
/// memory limiter as this struct. A field whose time has passed counts as 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Override {
    /// Denied until (penalty or ban).
    pub(crate) block_until: u64,
    /// Admitted without counting until.
    pub(crate) allow_until: u64,
    /// Bans in a row, remembered until `level_until`.
    pub(crate) level: u64,
    pub(crate) level_until: u64,
    /// Rejections in the ban window that ends at `strikes_until`.
    pub(crate) strikes: u64,
    pub(crate) strikes_until: u64,
}

/// How an override changes one rule's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    /// No override: the algorithm decides and records.
    None,
    /// On the runtime allow list: admitted, nothing recorded.
    Allowed,
    /// Blocked for this many µs: denied.
    Blocked(u64),
}

impl Override {
    /// The record as of `now`: fields whose time has passed cleared.
    pub(crate) fn live(mut self, now: u64) -> Self {
        if self.block_until <= now {
            self.block_until = 0;
        }
        if self.allow_until <= now {
            self.allow_until = 0;
        }
        if self.level_until <= now {
            (self.level, self.level_until) = (0, 0);
        }
        if self.strikes_until <= now {
            (self.strikes, self.strikes_until) = (0, 0);
        }
        self
    }

    /// When the record can be forgotten: its latest deadline.
    pub(crate) fn until(&self) -> u64 {
        self.block_until
            .max(self.allow_until)
            .max(self.level_until)
            .max(self.strikes_until)
    }

    /// What the record does to a request at `now` (a live record).
    pub(crate) fn effect(&self, now: u64) -> Effect {
        if self.allow_until > now {
            Effect::Allowed
        } else if self.block_until > now {
            Effect::Blocked(self.block_until - now)
        } else {
            Effect::None
        }
    }

    /// Counts one rejection by the rule at `now`; bans when it is the `after`-th in the window.
    pub(crate) fn strike(&mut self, now: u64, bans: BanParams) {
        if self.strikes_until <= now {
            (self.strikes, self.strikes_until) = (0, now + bans.within);
        }
        self.strikes += 1;
        if self.strikes >= bans.after {
            self.level += 1;
            self.block_until = now + ban_us(bans, self.level);
            self.level_until = self.block_until + bans.forget;
            (self.strikes, self.strikes_until) = (0, 0);
        }
    }

    /// `steer` from `now`: a penalty takes the key off the runtime allow list, an allow-list
    /// entry ends its penalty.
    pub(crate) fn steer(&mut self, steer: Steer, now: u64) {
        let (on, off) = match steer {
            Steer::Penalize(_) => (&mut self.block_until, &mut self.allow_until),
            Steer::Allow(_) => (&mut self.allow_until, &mut self.block_until),
        };
        (*on, *off) = (now + micros(steer.duration()), 0);
    }
}

/// What an operator sets on a key, and for how long: `penalize` or `allow`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Steer {
    /// Blocked ([`RedisLimiter::penalize`](crate::rate_limit::RedisLimiter::penalize)).
    Penalize(Duration),
    /// On the runtime allow list ([`RedisLimiter::allow`](crate::rate_limit::RedisLimiter::allow)).
    Allow(Duration),
}

impl Steer {
    /// The operation's name in the operations script.
    pub(crate) fn op(self) -> &'static str {
        match self {
            Self::Penalize(_) => "penalize",
            Self::Allow(_) => "allow",
        }
    }

    pub(crate) fn duration(self) -> Duration {
        match self {
            Self::Penalize(d) | Self::Allow(d) => d,
        }
    }
}

/// [`Bans`] in microseconds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BanParams {
    pub(crate) after: u64,
    pub(crate) within: u64,
    pub(crate) block: u64,
    pub(crate) max: u64,
    pub(crate) forget: u64,
}

/// The `level`-th ban's length in µs, as `overrides.lua` computes it.
pub(super) fn ban_us(p: BanParams, level: u64) -> u64 {
    match level {
        0 => 0,
        1..=40 => p.block.saturating_mul(1 << (level - 1)).min(p.max),
        _ => p.max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::Bans;

    /// Bans escalating, capped, and their count restarting with the window are `operations.rs`
    /// `bans_escalate_double_and_cap` (on every backend); here the level forgotten
    /// `forget_after` past the last ban.
    #[test]
    fn a_ban_level_is_forgotten_after_forget_after() {
        let bans = Bans::after(1)
            .block(Duration::from_micros(1000))
            .forget_after(Duration::from_micros(10_000))
            .micros();
        let mut r = Override::default();
        r.strike(0, bans);
        assert_eq!((r.effect(0), r.level), (Effect::Blocked(1000), 1));
        assert_eq!(r.live(1000 + 9_999).level, 1);
        assert_eq!(r.live(1000 + 10_000), Override::default());
    }

    #[test]
    fn the_latest_operation_wins() {
        let mut r = Override::default();
        let us = Duration::from_micros;
        r.steer(Steer::Penalize(us(5)), 10);
        assert_eq!(r.effect(12), Effect::Blocked(3));
        r.steer(Steer::Allow(us(5)), 12);
        assert_eq!(r.effect(12), Effect::Allowed);
        r.steer(Steer::Penalize(us(1)), 13);
        assert_eq!(r.effect(13), Effect::Blocked(1));
        assert_eq!(r.live(14), Override::default());
    }
}
