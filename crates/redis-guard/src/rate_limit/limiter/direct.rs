//! What a handler or an admin task calls on a limiter outside a layer: checks for limits that
//! need the request body (calls per phone number, logins per user name), and the operations on
//! one rule and one key (inspect, reset, penalize, allow, charge).
//!
//! They are inherent methods of [`MemoryLimiter`], [`RedisLimiter`] and `dyn Limiter` (one
//! definition, `limiter_operations!`, each example shown with its own type), built on the
//! sealed engine the layer drives: [`Limiter`] itself has nothing to call.

use std::time::Duration;

use super::interface::{Engine, check_all};
use super::live::LiveChange;
use super::overrides::Steer;
use crate::rate_limit::{
    Check, Decision, Inspection, Key, Limiter, LimiterError, MemoryLimiter, Quota, RedisLimiter,
    Rule,
};

/// The user operations as inherent methods of `$ty`, whose examples build their limiter with
/// `$setup` (`[fence, imports, let limiter = …;]`).
macro_rules! limiter_operations {
    ($ty:ty, $setup:tt) => {
        impl $ty {
            /// Checks one request for `key` against `rule`: the call for limits that need the
            /// request body, such as "5 calls per minute per phone number". A rule's mode,
            /// cost resolver and quota resolver are the layer's business: a direct call
            /// enforces the rule with its own cost and quota.
            ///
            #[doc = operation_example!($setup,
                "let calls = Rule::new(\"calls\", Quota::per_minute(5));",
                "for _ in 0..5 {",
                "    assert!(limiter.check(&calls, Key::from(\"+15550100\")).await?.allowed);",
                "}",
                "assert!(!limiter.check(&calls, Key::from(\"+15550100\")).await?.allowed);",
            )]
            ///
            /// # Errors
            ///
            /// [`LimiterError`]: the store failed, or the rule is invalid.
            pub async fn check(&self, rule: &Rule, key: Key) -> Result<Decision, LimiterError> {
                check_all(self, vec![Check::new(rule.clone(), key)]).await
            }

            /// Checks one request against several rules, all or nothing: nothing is counted
            /// when any denies. The [`Decision`] of an admitted request holds the leases of its
            /// concurrency rules ([`Decision::lease`]).
            ///
            #[doc = operation_example!($setup,
                "let per_ip = Rule::new(\"login-ip\", Quota::per_minute(20));",
                "let per_user = Rule::new(\"login-user\", Quota::per_minute(5));",
                "let d = limiter.check_all(vec![",
                "    Check::new(per_ip, Key::from(\"203.0.113.7\")),",
                "    Check::new(per_user, Key::from(\"alice\")),",
                "]).await?;",
                "assert!(d.allowed);",
                "assert_eq!(d.remaining, 4);",
            )]
            ///
            /// # Errors
            ///
            /// [`LimiterError`]: the store failed, a rule is invalid, or there is no check.
            pub async fn check_all(&self, checks: Vec<Check>) -> Result<Decision, LimiterError> {
                check_all(self, checks).await
            }

            /// What `rule` knows about `key`: the answer one more request would get (decided
            /// without recording anything, so inspecting never consumes quota, counts a
            /// rejection or starts a ban), and the key's penalty, runtime allow-list entry and
            /// ban level. See [`Inspection`].
            ///
            #[doc = operation_example!($setup,
                "let api = Rule::new(\"api\", Quota::per_minute(60));",
                "for _ in 0..3 {",
                "    limiter.check(&api, Key::from(\"alice\")).await?;",
                "}",
                "let seen = limiter.inspect(&api, Key::from(\"alice\")).await?;",
                "assert_eq!(seen.state.remaining, 57);",
                "// Inspecting again: nothing was consumed.",
                "assert_eq!(limiter.inspect(&api, Key::from(\"alice\")).await?.state.remaining, 57);",
            )]
            ///
            /// # Errors
            ///
            /// [`LimiterError`]: the store failed, or the rule is invalid.
            pub async fn inspect(&self, rule: &Rule, key: Key) -> Result<Inspection, LimiterError> {
                self.inspect_key(rule, key).await
            }

            /// Forgets everything `rule` knows about `key`: its quota state, penalty, runtime
            /// allow-list entry and ban history. The next request sees the full quota. On Redis
            /// every replica sees it at once; a replica that cached a denial of the key answers
            /// from that cache for at most 2 s.
            ///
            #[doc = operation_example!($setup,
                "let api = Rule::new(\"api\", Quota::per_hour(1));",
                "assert!(limiter.check(&api, Key::from(\"bob\")).await?.allowed);",
                "assert!(!limiter.check(&api, Key::from(\"bob\")).await?.allowed);",
                "limiter.reset(&api, Key::from(\"bob\")).await?;",
                "assert!(limiter.check(&api, Key::from(\"bob\")).await?.allowed);",
            )]
            ///
            /// # Errors
            ///
            /// [`LimiterError`]: the store failed, or the rule is invalid.
            pub async fn reset(&self, rule: &Rule, key: Key) -> Result<(), LimiterError> {
                self.reset_key(rule, key).await
            }

            /// Blocks `key` under `rule` for `duration` (1 ms to
            /// 366 days): every request is denied by
            /// the rule, with `Retry-After` the rest of the block, on every replica. The rule
            /// must read overrides ([`Rule::with_overrides`] or bans; otherwise
            /// a [`LimiterError::Config`] of kind [`Unsupported`](crate::ConfigErrorKind::Unsupported)). Replaces an earlier penalty and ends a runtime
            /// allow-list entry; a `reset` or an `allow` lifts it. Denials during the block
            /// record nothing.
            ///
            #[doc = operation_example!($setup,
                "let api = Rule::new(\"api\", Quota::per_minute(60)).with_overrides();",
                "limiter.penalize(&api, Key::from(\"mallory\"), Duration::from_secs(600)).await?;",
                "let d = limiter.check(&api, Key::from(\"mallory\")).await?;",
                "assert!(!d.allowed);",
                "// The rest of the block, counted from when it was set.",
                "assert!(d.retry_after > Duration::from_secs(590));",
                "assert!(d.retry_after <= Duration::from_secs(600));",
            )]
            ///
            /// # Errors
            ///
            /// [`LimiterError`]: the store failed, the rule is invalid, or the duration is out
            /// of range.
            pub async fn penalize(
                &self,
                rule: &Rule,
                key: Key,
                duration: Duration,
            ) -> Result<(), LimiterError> {
                self.steer_key(rule, key, Steer::Penalize(duration)).await
            }

            /// Puts `key` on `rule`'s runtime allow list for `duration` (1 ms to
            /// 366 days): the rule admits it without
            /// counting, on every replica, until the entry expires. The rule must read
            /// overrides, as for `penalize`. Ends a penalty or ban in progress (not the ban
            /// history). For a list fixed at start, use [`Rule::with_allowed_keys`], which
            /// costs no Redis call.
            ///
            #[doc = operation_example!($setup,
                "let api = Rule::new(\"api\", Quota::per_hour(1)).with_overrides();",
                "limiter.allow(&api, Key::from(\"load-test\"), Duration::from_secs(3600)).await?;",
                "for _ in 0..10 {",
                "    assert!(limiter.check(&api, Key::from(\"load-test\")).await?.allowed);",
                "}",
            )]
            ///
            /// # Errors
            ///
            /// [`LimiterError`]: the store failed, the rule is invalid, or the duration is out
            /// of range.
            pub async fn allow(
                &self,
                rule: &Rule,
                key: Key,
                duration: Duration,
            ) -> Result<(), LimiterError> {
                self.steer_key(rule, key, Steer::Allow(duration)).await
            }

            /// Charges `key` `cost` more units of `rule` whatever is left: a cost learnt after
            /// the request was admitted (the tokens an answer used, once its stream ended). The
            /// key may go over its limit; [`charged_after_response`](Rule::charged_after_response),
            /// which has a layer do this itself, says how each algorithm keeps the debt. A cost
            /// of 0 does nothing.
            ///
            #[doc = operation_example!($setup,
                "let tokens = Rule::new(\"tokens\", Quota::per_hour(10_000));",
                "limiter.charge(&tokens, Key::from(\"acme\"), 9_000).await?;",
                "let seen = limiter.inspect(&tokens, Key::from(\"acme\")).await?;",
                "assert_eq!(seen.state.remaining, 1_000);",
                "limiter.charge(&tokens, Key::from(\"acme\"), 5_000).await?;",
                "assert!(!limiter.check(&tokens, Key::from(\"acme\")).await?.allowed);",
            )]
            ///
            /// # Errors
            ///
            /// [`LimiterError`]: the store failed, the rule is invalid, or its algorithm has no
            /// charge (a custom one, or leases: a [`LimiterError::Config`] of kind [`Unsupported`](crate::ConfigErrorKind::Unsupported)).
            pub async fn charge(
                &self,
                rule: &Rule,
                key: Key,
                cost: u32,
            ) -> Result<(), LimiterError> {
                self.charge_checks(vec![Check::new(rule.clone(), key).with_cost(cost)])
                    .await
            }

            /// `charge` for several rules and keys at once, each check's cost: one script call
            /// per hash slot on Redis.
            ///
            #[doc = operation_example!($setup,
                "let tokens = Rule::new(\"tokens\", Quota::per_hour(10_000));",
                "let answers = Rule::new(\"answers\", Quota::per_hour(100));",
                "limiter.charge_all(vec![",
                "    Check::new(tokens.clone(), Key::from(\"acme\")).with_cost(900),",
                "    Check::new(answers, Key::from(\"acme\")),",
                "]).await?;",
                "assert_eq!(limiter.inspect(&tokens, Key::from(\"acme\")).await?.state.remaining, 9_100);",
            )]
            ///
            /// # Errors
            ///
            /// As `charge`.
            pub async fn charge_all(&self, checks: Vec<Check>) -> Result<(), LimiterError> {
                self.charge_checks(checks).await
            }

            /// Changes the quota of a [live](Rule::live) rule at run time, for every limiter on
            /// the same store, until `clear_rule_quota`: an incident
            /// cut, a launch raise. Each key keeps what it used, in units. Logged at `info`
            /// with the old and new quota and the version. Where it is kept and how soon each
            /// replica follows (on Redis, its next request; on a Cluster, within
            /// [`live_refresh`](crate::rate_limit::RedisLimiter::live_refresh)): the guide's
            /// "Live limits".
            ///
            #[doc = operation_example!($setup,
                "let api = Rule::new(\"api\", Quota::per_minute(60)).live();",
                "let version = limiter.set_rule_quota(&api, Quota::per_minute(2)).await?;",
                "for _ in 0..2 {",
                "    assert!(limiter.check(&api, Key::from(\"k\")).await?.allowed);",
                "}",
                "assert!(!limiter.check(&api, Key::from(\"k\")).await?.allowed);",
                "assert!(limiter.clear_rule_quota(&api).await? > version);",
                "assert!(limiter.check(&api, Key::from(\"k\")).await?.allowed);",
            )]
            ///
            /// # Errors
            ///
            /// [`LimiterError`]: the store failed, the rule is not live or is invalid, or
            /// `quota` cannot work with it (a cost above its burst; another period for a window
            /// algorithm): a [`LimiterError::Config`].
            pub async fn set_rule_quota(
                &self,
                rule: &Rule,
                quota: Quota,
            ) -> Result<u64, LimiterError> {
                self.set_live(rule, LiveChange::Quota(Some(quota))).await
            }

            /// Gives a [live](Rule::live) rule its own quota back: the version of the change.
            ///
            /// # Errors
            ///
            /// As `set_rule_quota`.
            pub async fn clear_rule_quota(&self, rule: &Rule) -> Result<u64, LimiterError> {
                self.set_live(rule, LiveChange::Quota(None)).await
            }

            /// Changes the [mode](crate::rate_limit::Mode) of a [live](Rule::live) rule at run
            /// time, for every layer on the same store, until `clear_rule_mode`: a limit that
            /// turns out wrong in an incident goes to `Shadow` (counted, never denying), or
            /// `Soft`, and back to `Enforce`. Logged at `info` with the old and new mode and
            /// the version; its quota (live or not) stays as it is. A layer takes the mode from
            /// its limiter's copy of the rule's record: at once on the limiter that made the
            /// change; on a single Redis, from a replica's second decision of the rule after the
            /// change (the first reads the record in its script call); on a Cluster, within
            /// [`live_refresh`](crate::rate_limit::RedisLimiter::live_refresh).
            ///
            #[doc = operation_example!($setup,
                "use redis_guard::rate_limit::Mode;",
                "let api = Rule::new(\"api\", Quota::per_minute(60)).live();",
                "let version = limiter.set_rule_mode(&api, Mode::Shadow).await?;",
                "assert!(limiter.clear_rule_mode(&api).await? > version);",
            )]
            ///
            /// # Errors
            ///
            /// [`LimiterError`]: the store failed, or the rule is not live or is invalid (a
            /// [`LimiterError::Config`]).
            pub async fn set_rule_mode(
                &self,
                rule: &Rule,
                mode: crate::rate_limit::Mode,
            ) -> Result<u64, LimiterError> {
                self.set_live(rule, LiveChange::Mode(Some(mode))).await
            }

            /// Gives a [live](Rule::live) rule its own mode back: the version of the change.
            ///
            /// # Errors
            ///
            /// As `set_rule_mode`.
            pub async fn clear_rule_mode(&self, rule: &Rule) -> Result<u64, LimiterError> {
                self.set_live(rule, LiveChange::Mode(None)).await
            }
        }
    };
}

limiter_operations!(
    MemoryLimiter,
    [
        "",
        "use std::time::Duration;\nuse redis_guard::rate_limit::{Check, Key, MemoryLimiter, Quota, Rule};\n",
        "let limiter = MemoryLimiter::new();"
    ]
);

limiter_operations!(
    RedisLimiter,
    [
        "no_run",
        "use std::time::Duration;\nuse redis_guard::backend::RedisConnection;\nuse redis_guard::rate_limit::{Check, Key, Quota, RedisLimiter, Rule};\n",
        "let limiter = RedisLimiter::new(RedisConnection::open(\"redis://127.0.0.1/\").await?);"
    ]
);

limiter_operations!(
    dyn Limiter,
    [
        "",
        "use std::{sync::Arc, time::Duration};\nuse redis_guard::rate_limit::{Check, Key, Limiter, MemoryLimiter, Quota, Rule};\n",
        "let limiter: Arc<dyn Limiter> = Arc::new(MemoryLimiter::new()); // or a RedisLimiter"
    ]
);
