//! Operations on one rule and one key: what an operator reads and steers at run time
//! ([`RedisLimiter::inspect`], [`RedisLimiter::reset`], [`RedisLimiter::penalize`],
//! [`RedisLimiter::allow`]), and the
//! escalating bans a rule can carry ([`Bans`]).
//!
//! # Where the state lives
//!
//! Beside its algorithm state, a rule that reads overrides
//! ([`Rule::with_overrides`](crate::rate_limit::Rule::with_overrides), or bans) keeps one small *override*
//! record per key: blocked until, allowed until, ban level (and when it is forgotten),
//! rejections in the current ban window. It is opt-in because reading it costs every request a
//! key and a `GET` per script call: measured with it always on, the `redis` benchmark lost
//! 3–6 % against the bare route. On Redis it is the string key `<prefix>rl:<rule>:ov:{<digest>}`, in the same hash tag as
//! the rule's state, so the evaluation script reads it in the same atomic call on a single Redis,
//! a pool or a Cluster, and a penalty or an allow-list entry written by one replica is seen by
//! every replica on its next decision. The record is only written by an operation or a ban; it
//! carries a `PX` expiry at the latest of its deadlines, so a key nobody steers has no record
//! and costs one `GET` of a missing key per script call. Reading it in the same call is what
//! makes a ban atomic with the rule and an operation visible to every replica at once; a
//! separate read per request would cost a round trip, and a record inside the algorithm's own
//! state would need a different shape for each algorithm (and for custom ones).
//!
//! [`RedisLimiter::inspect`]: crate::rate_limit::RedisLimiter::inspect
//! [`RedisLimiter::reset`]: crate::rate_limit::RedisLimiter::reset
//! [`RedisLimiter::penalize`]: crate::rate_limit::RedisLimiter::penalize
//! [`RedisLimiter::allow`]: crate::rate_limit::RedisLimiter::allow

use std::borrow::Cow;
use std::time::Duration;

use super::interface::{Check, Engine, LimiterError};
use crate::rate_limit::algorithm::ceil_ms;
use crate::rate_limit::{Rule, RuleState};
use crate::{ConfigError, ConfigErrorKind};

/// The longest duration an operation or a ban accepts: 366 days (longer ones are refused, so
/// that every time fits the scripts' exact integer range).
pub(crate) const MAX_OVERRIDE: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// Escalating bans, a rule option ([`Rule::with_bans`](crate::rate_limit::Rule::with_bans)): after
/// [`after`](Self::after) rejections by the rule within [`within`](Self::within), the key is
/// blocked for [`block`](Self::block); each further ban while the previous one is remembered
/// doubles the block, up to [`max`](Self::max). A ban is remembered for
/// [`forget_after`](Self::forget_after) once it ends; then the next ban starts again at
/// `block`.
///
/// The count and the ban are decided in the same atomic evaluation as the rule (the same Lua
/// call on Redis), so every replica counts the same rejections and honours the same ban. Only
/// rejections by the rule's own quota count: requests refused during a ban do not lengthen it.
/// Defaults: within 1 minute, block 1 minute, max 1 day, forget after 1 day. Each of the four
/// durations lasts from 1 ms to 366 days (so that every time fits the scripts' exact integer
/// range); [`Rule::validate`](crate::rate_limit::Rule::validate) refuses others.
///
/// ```
/// use std::time::Duration;
/// use redis_guard::rate_limit::{Bans, Quota, Rule};
///
/// // 5 rejections within 10 s: blocked 1 min, then 2, 4, … at most 1 h.
/// let bans = Bans::after(5)
///     .within(Duration::from_secs(10))
///     .block(Duration::from_secs(60))
///     .max(Duration::from_secs(3600));
/// let rule = Rule::new("login", Quota::per_minute(5)).with_bans(bans);
/// assert!(rule.validate().is_ok());
/// assert_eq!(bans.block_for(3), Duration::from_secs(240));
/// assert_eq!(bans.block_for(10), Duration::from_secs(3600));
///
/// let too_long = Bans::after(3).block(Duration::from_secs(367 * 24 * 60 * 60));
/// assert!(Rule::new("r", Quota::per_minute(1)).with_bans(too_long).validate().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub struct Bans {
    after: u32,
    within: Duration,
    block: Duration,
    max: Duration,
    forget_after: Duration,
}

impl Bans {
    /// Bans after `rejections` rejections (at least 1) within the window, with the defaults.
    pub fn after(rejections: u32) -> Self {
        Self {
            after: rejections,
            within: Duration::from_secs(60),
            block: Duration::from_secs(60),
            max: Duration::from_secs(24 * 60 * 60),
            forget_after: Duration::from_secs(24 * 60 * 60),
        }
    }

    setters! {
        /// The window the rejections are counted in (default 1 minute), from the first one.
        pub fn within(within: Duration) => within;

        /// The first ban's length (default 1 minute).
        pub fn block(block: Duration) => block;

        /// The longest ban (default 1 day): doubling stops here.
        pub fn max(max: Duration) => max;

        /// How long a ban is remembered after it ends (default 1 day): a ban within that time
        /// doubles the last one.
        pub fn forget_after(forget_after: Duration) => forget_after;
    }

    /// How many rejections within the window ban a key.
    #[must_use]
    pub fn rejections(&self) -> u32 {
        self.after
    }

    /// The length of the `level`-th ban in a row (1 = the first): `block × 2^(level-1)`, at most
    /// `max`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_guard::rate_limit::Bans;
    /// let bans = Bans::after(3).block(Duration::from_secs(10)).max(Duration::from_secs(30));
    /// assert_eq!(bans.block_for(1), Duration::from_secs(10));
    /// assert_eq!(bans.block_for(2), Duration::from_secs(20));
    /// assert_eq!(bans.block_for(3), Duration::from_secs(30));
    /// ```
    #[must_use]
    pub fn block_for(&self, level: u32) -> Duration {
        Duration::from_micros(ban_us(self.micros(), u64::from(level)))
    }

    /// Why these bans cannot work, or `None`.
    pub(crate) fn problem(&self) -> Option<String> {
        if self.after == 0 {
            return Some("bans after 0 rejections would ban every key".into());
        }
        for (name, d) in [
            ("within", self.within),
            ("block", self.block),
            ("max", self.max),
            ("forget_after", self.forget_after),
        ] {
            if d < Duration::from_millis(1) || d > MAX_OVERRIDE {
                return Some(format!(
                    "bans: `{name}` is {d:?}; use 1 ms to {MAX_OVERRIDE:?}"
                ));
            }
        }
        (self.max < self.block).then(|| {
            format!(
                "bans: `max` ({:?}) is shorter than `block` ({:?})",
                self.max, self.block
            )
        })
    }

    /// The bans in µs, as both backends use them.
    pub(crate) fn micros(&self) -> BanParams {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        BanParams {
            after: u64::from(self.after),
            within: us(self.within),
            block: us(self.block),
            max: us(self.max),
            forget: us(self.forget_after),
        }
    }

    /// The argument the evaluation scripts take: `after:within:block:max:forget` (µs).
    pub(crate) fn script_arg(&self) -> String {
        let p = self.micros();
        format!(
            "{}:{}:{}:{}:{}",
            p.after, p.within, p.block, p.max, p.forget
        )
    }
}

/// [`Bans`] in microseconds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BanParams {
    after: u64,
    within: u64,
    block: u64,
    max: u64,
    forget: u64,
}

/// The `level`-th ban's length in µs, as `overrides.lua` computes it.
fn ban_us(p: BanParams, level: u64) -> u64 {
    match level {
        0 => 0,
        1..=40 => p.block.saturating_mul(1 << (level - 1)).min(p.max),
        _ => p.max,
    }
}

/// What [`RedisLimiter::inspect`](crate::rate_limit::RedisLimiter::inspect) reports about one rule and one key.
///
/// ```
/// use std::time::Duration;
/// use redis_guard::rate_limit::{Key, MemoryLimiter, Quota, Rule};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let limiter = MemoryLimiter::new();
/// let rule = Rule::new("api", Quota::per_minute(10));
/// limiter.check(&rule, Key::from("alice")).await.unwrap();
/// let seen = limiter.inspect(&rule, Key::from("alice")).await.unwrap();
/// assert_eq!(seen.state.remaining, 9); // inspecting consumed nothing
/// assert!(seen.state.allowed && seen.blocked_for.is_none());
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// The rule's state for the key now: whether one more request of the rule's cost would be
    /// admitted (decided without recording it), the limit, the quota left, the wait before a
    /// request would be admitted, and the time until the quota is full. Blocks and runtime
    /// allow-list entries are applied, as for a real request (blocked: nothing left; on the
    /// runtime list: admitted, and the quota does not move).
    pub state: RuleState,
    /// How long the key stays blocked by a [`penalize`](crate::rate_limit::RedisLimiter::penalize) or a ban.
    pub blocked_for: Option<Duration>,
    /// How long the key stays on the runtime allow list ([`allow`](crate::rate_limit::RedisLimiter::allow)).
    pub allowed_for: Option<Duration>,
    /// How many bans in a row the key has earned and not yet lived down (0: none).
    pub ban_level: u32,
    /// Rejections counted toward the next ban in the current window.
    pub strikes: u32,
    /// Whether the rule's static allow list holds the key
    /// ([`Rule::with_allowed_keys`](crate::rate_limit::Rule::with_allowed_keys)): it never reaches the
    /// store.
    pub allow_listed: bool,
}

impl Inspection {
    /// From a dry evaluation of one request costing `cost` and the override record as of
    /// `now`.
    pub(crate) fn new(mut state: RuleState, record: Override, now: u64, cost: u32) -> Self {
        let left = |until: u64| (until > now).then(|| Duration::from_millis(ceil_ms(until - now)));
        if state.allowed && record.allow_until <= now {
            // The dry run reports what would be left after that request: before it, `cost` more.
            state.remaining = state.remaining.saturating_add(cost);
        }
        Self {
            state,
            blocked_for: left(record.block_until),
            allowed_for: left(record.allow_until),
            ban_level: u32::try_from(record.level).unwrap_or(u32::MAX),
            strikes: u32::try_from(record.strikes).unwrap_or(u32::MAX),
            allow_listed: false,
        }
    }

    /// For a key on the rule's static allow list.
    pub(crate) fn allow_listed(limit: u32) -> Self {
        Self {
            state: allow_listed_state(limit),
            blocked_for: None,
            allowed_for: None,
            ban_level: 0,
            strikes: 0,
            allow_listed: true,
        }
    }
}

/// The state reported for a key on a rule's static allow list: admitted, the whole quota left.
pub(crate) fn allow_listed_state(limit: u32) -> RuleState {
    RuleState {
        allowed: true,
        limit,
        remaining: limit,
        retry_after: Duration::ZERO,
        reset_after: Duration::ZERO,
    }
}

/// Checks that `limiter` can run an operation on `rule`.
pub(crate) fn valid<L: Engine + ?Sized>(limiter: &L, rule: &Rule) -> Result<(), LimiterError> {
    if let Some(why) = limiter.config_problem() {
        return Err(why.within("the limiter cannot work").into());
    }
    Ok(rule.validate()?)
}

/// The evaluation scripts' last argument for `rule`: `0` (it reads no override record), `1`
/// (it does), or its bans.
pub(crate) fn script_arg(rule: &Rule) -> Cow<'static, str> {
    match rule.bans() {
        Some(bans) => Cow::Owned(bans.script_arg()),
        None if rule.reads_overrides() => Cow::Borrowed("1"),
        None => Cow::Borrowed("0"),
    }
}

/// As [`valid`] for a rule that reads overrides, and `duration` (of a penalty or an allow-list
/// entry) in µs.
pub(crate) fn valid_for<L: Engine + ?Sized>(
    limiter: &L,
    rule: &Rule,
    duration: Duration,
) -> Result<u64, LimiterError> {
    valid(limiter, rule)?;
    if !rule.reads_overrides() {
        return Err(rule
            .problem(
                ConfigErrorKind::Unsupported,
                "reads no runtime overrides: build it with `.with_overrides()` (or `.with_bans(…)`) to penalize or allow keys at run time",
                "Rule::with_overrides",
            )
            .into());
    }
    if duration < Duration::from_millis(1) || duration > MAX_OVERRIDE {
        return Err(ConfigError::new(
            ConfigErrorKind::Duration,
            format!("a penalty or allow-list entry of {duration:?}: use 1 ms to one year"),
        )
        .with_debug_value(duration)
        .into());
    }
    Ok(u64::try_from(duration.as_micros()).unwrap_or(u64::MAX))
}

/// The checks whose key is not on their rule's static allow list, and per check the state of
/// those that are (`None` for the others).
pub(crate) fn split_allow_listed(checks: Vec<Check>) -> (Vec<Check>, Vec<Option<RuleState>>) {
    let mut rest = Vec::with_capacity(checks.len());
    let listed = checks
        .into_iter()
        .map(|c| {
            if c.rule.allows(&c.key) {
                Some(allow_listed_state(c.rule.quota().limit()))
            } else {
                rest.push(c);
                None
            }
        })
        .collect();
    (rest, listed)
}

/// Puts the states of the checks that were evaluated back between the allow-listed ones.
pub(crate) fn merge_allow_listed(
    listed: Vec<Option<RuleState>>,
    states: Vec<RuleState>,
) -> Vec<RuleState> {
    let mut states = states.into_iter();
    listed
        .into_iter()
        .filter_map(|s| s.or_else(|| states.next()))
        .collect()
}

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

    /// `steer` for `us` from `now`: a penalty takes the key off the runtime allow list, an
    /// allow-list entry ends its penalty.
    pub(crate) fn steer(&mut self, steer: Steer, now: u64, us: u64) {
        let (on, off) = match steer {
            Steer::Penalize => (&mut self.block_until, &mut self.allow_until),
            Steer::Allow => (&mut self.allow_until, &mut self.block_until),
        };
        (*on, *off) = (now + us, 0);
    }
}

/// What an operator sets on a key for a while: `penalize` or `allow`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Steer {
    /// Blocked ([`RedisLimiter::penalize`](crate::rate_limit::RedisLimiter::penalize)).
    Penalize,
    /// On the runtime allow list ([`RedisLimiter::allow`](crate::rate_limit::RedisLimiter::allow)).
    Allow,
}

impl Steer {
    /// The operation's name in the operations script.
    pub(crate) fn op(self) -> &'static str {
        match self {
            Self::Penalize => "penalize",
            Self::Allow => "allow",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bans_escalate_and_are_capped() {
        let bans = Bans::after(2)
            .within(Duration::from_micros(100))
            .block(Duration::from_micros(1000))
            .max(Duration::from_micros(3000))
            .forget_after(Duration::from_micros(10_000))
            .micros();
        let mut r = Override::default();
        r.strike(0, bans);
        assert_eq!(r.effect(0), Effect::None);
        // The window ended: the count starts again.
        r = r.live(200);
        r.strike(200, bans);
        assert_eq!(r.strikes, 1);
        r.strike(250, bans);
        assert_eq!((r.effect(250), r.level), (Effect::Blocked(1000), 1));
        let mut at = 1250;
        for expected in [2000, 3000, 3000] {
            r = r.live(at);
            r.strike(at, bans);
            r.strike(at, bans);
            assert_eq!(r.effect(at), Effect::Blocked(expected));
            at += expected;
        }
        // Forgotten after `forget_after`: back to the first length.
        r = r.live(at + 10_000);
        assert_eq!(r, Override::default());
    }

    #[test]
    fn the_latest_operation_wins() {
        let mut r = Override::default();
        r.steer(Steer::Penalize, 10, 5);
        assert_eq!(r.effect(12), Effect::Blocked(3));
        r.steer(Steer::Allow, 12, 5);
        assert_eq!(r.effect(12), Effect::Allowed);
        r.steer(Steer::Penalize, 13, 1);
        assert_eq!(r.effect(13), Effect::Blocked(1));
        assert_eq!(r.live(14), Override::default());
    }

    #[test]
    fn invalid_bans_are_named() {
        assert!(Bans::after(0).problem().is_some());
        assert!(Bans::after(1).within(Duration::ZERO).problem().is_some());
        let short_max = Bans::after(1).max(Duration::from_secs(1));
        assert!(short_max.problem().unwrap().contains("max"));
        assert!(Bans::after(1).problem().is_none());
    }
}
