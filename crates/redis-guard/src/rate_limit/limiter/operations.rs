//! Operations on one rule and one key: what an operator reads and steers at run time
//! ([`RedisLimiter::inspect`], [`RedisLimiter::reset`], [`RedisLimiter::penalize`],
//! [`RedisLimiter::allow`]), and the escalating bans a rule can carry ([`Bans`]). The override
//! record they read and write, and where it lives, is in `overrides.rs`.
//!
//! [`RedisLimiter::inspect`]: crate::rate_limit::RedisLimiter::inspect
//! [`RedisLimiter::reset`]: crate::rate_limit::RedisLimiter::reset
//! [`RedisLimiter::penalize`]: crate::rate_limit::RedisLimiter::penalize
//! [`RedisLimiter::allow`]: crate::rate_limit::RedisLimiter::allow

use std::borrow::Cow;
use std::time::Duration;

use super::interface::{Check, Engine, LimiterError};
use super::overrides::{BanParams, Override, ban_us};
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

/// What [`RedisLimiter::inspect`](crate::rate_limit::RedisLimiter::inspect) reports about one rule
/// and one key.
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
    /// How long the key stays blocked by a [`penalize`](crate::rate_limit::RedisLimiter::penalize)
    /// or a ban.
    pub blocked_for: Option<Duration>,
    /// How long the key stays on the runtime allow list
    /// ([`allow`](crate::rate_limit::RedisLimiter::allow)).
    pub allowed_for: Option<Duration>,
    /// How many bans in a row the key has earned and not yet lived down (0: none).
    pub ban_level: u32,
    /// Rejections counted toward the next ban in the current window.
    pub strikes: u32,
    /// Whether the rule's static allow list holds the key
    /// ([`Rule::with_allowed_keys`](crate::rate_limit::Rule::with_allowed_keys)): it never reaches
    /// the store.
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
    ConfigError::check_duration(
        duration,
        MAX_OVERRIDE,
        "a penalty or allow-list entry",
        "one year",
    )?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_bans_are_named() {
        assert!(Bans::after(0).problem().is_some());
        assert!(Bans::after(1).within(Duration::ZERO).problem().is_some());
        let short_max = Bans::after(1).max(Duration::from_secs(1));
        assert!(short_max.problem().unwrap().contains("max"));
        assert!(Bans::after(1).problem().is_none());
    }
}
