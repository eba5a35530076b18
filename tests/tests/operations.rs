//! The operations suite: inspect, reset, penalize, the allow lists and
//! escalating bans, against the memory backend, a standalone Redis, a pool and a Cluster. Time
//! moves with the harness' clock seam (`Harness::wait`), never with sleeps.

use std::sync::Arc;
use std::time::Duration;

use redis_guard::ConfigErrorKind;
use redis_guard::rate_limit::{Bans, Decision, Key, Limiter, LimiterError, Quota, Rule};
use redis_guard_tests::{Harness, backend_suite};

async fn check(l: &Arc<dyn Limiter>, rule: &Rule, key: &str) -> Decision {
    l.check(rule, Key::from(key)).await.expect("decision")
}

/// Inspecting shows the quota left and consumes nothing, however often it is called.
async fn inspect_consumes_nothing(h: Harness) {
    let l = h.limiter().await;
    let rule = Rule::new("ops-inspect", Quota::per_hour(10));
    for _ in 0..3 {
        assert!(check(&l, &rule, "alice").await.allowed);
    }
    for _ in 0..20 {
        let seen = l.inspect(&rule, Key::from("alice")).await.expect("inspect");
        assert_eq!((seen.state.limit, seen.state.remaining), (10, 7));
        assert!(seen.state.allowed);
        assert_eq!(
            (seen.blocked_for, seen.allowed_for, seen.ban_level),
            (None, None, 0)
        );
    }
    // An unknown key has its whole quota; inspecting it creates nothing.
    let fresh = l
        .inspect(&rule, Key::from("nobody"))
        .await
        .expect("inspect");
    assert_eq!(fresh.state.remaining, 10);
    // Still 7 left: the 20 inspections took nothing.
    let mut admitted = 0;
    while check(&l, &rule, "alice").await.allowed {
        admitted += 1;
    }
    assert_eq!(admitted, 7);
    let spent = l.inspect(&rule, Key::from("alice")).await.expect("inspect");
    assert!(!spent.state.allowed);
    assert_eq!(spent.state.remaining, 0);
    h.assert_wait(spent.state.retry_after, Duration::from_secs(360));
}

/// Reset forgets the quota state, a penalty and the ban history: the next request sees the full
/// quota.
async fn reset_restores_the_full_quota(h: Harness) {
    let l = h.limiter().await;
    let rule = Rule::new("ops-reset", Quota::per_hour(3)).with_bans(Bans::after(1));
    for _ in 0..3 {
        assert!(check(&l, &rule, "bob").await.allowed);
    }
    assert!(
        !check(&l, &rule, "bob").await.allowed,
        "quota spent, banned"
    );
    let seen = l.inspect(&rule, Key::from("bob")).await.expect("inspect");
    assert_eq!(seen.ban_level, 1);
    l.reset(&rule, Key::from("bob")).await.expect("reset");
    let seen = l.inspect(&rule, Key::from("bob")).await.expect("inspect");
    assert_eq!((seen.state.remaining, seen.ban_level), (3, 0));
    assert_eq!(seen.blocked_for, None);
    for _ in 0..3 {
        assert!(check(&l, &rule, "bob").await.allowed);
    }
    assert!(!check(&l, &rule, "bob").await.allowed);
    // A penalty goes too.
    l.reset(&rule, Key::from("bob")).await.expect("reset");
    l.penalize(&rule, Key::from("bob"), Duration::from_secs(600))
        .await
        .expect("penalize");
    l.reset(&rule, Key::from("bob")).await.expect("reset");
    assert!(check(&l, &rule, "bob").await.allowed);
}

/// A penalty denies the key on every replica for exactly its duration, with the rest of the
/// block as the wait, and consumes none of the quota.
async fn penalize_blocks_exactly_for_the_duration(h: Harness) {
    let (a, b) = (h.limiter().await, h.limiter().await);
    let rule = Rule::new("ops-penalize", Quota::per_hour(5)).with_overrides();
    assert!(check(&a, &rule, "eve").await.allowed);
    a.penalize(&rule, Key::from("eve"), Duration::from_secs(90))
        .await
        .expect("penalize");
    for l in [&a, &b] {
        let d = check(l, &rule, "eve").await;
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        h.assert_wait(d.retry_after, Duration::from_secs(90));
    }
    let seen = b.inspect(&rule, Key::from("eve")).await.expect("inspect");
    assert!(!seen.state.allowed);
    h.assert_wait(seen.blocked_for.expect("blocked"), Duration::from_secs(90));
    // Another key is not affected.
    assert!(check(&b, &rule, "frank").await.allowed);
    h.wait(Duration::from_secs(88)).await;
    let d = check(&b, &rule, "eve").await;
    assert!(!d.allowed, "still blocked 2 s before the end");
    h.assert_wait(d.retry_after, Duration::from_secs(2));
    h.wait(Duration::from_secs(2)).await;
    // The block is over; the four units the first request left (a bit more on the hourly
    // refill) are all there: the denials consumed nothing.
    let mut admitted = 0;
    while check(&a, &rule, "eve").await.allowed {
        admitted += 1;
    }
    assert_eq!(admitted, 4);
    assert!(matches!(
        a.penalize(&rule, Key::from("eve"), Duration::ZERO).await,
        Err(LimiterError::Config(e)) if e.kind() == ConfigErrorKind::Duration && e.value() == Some("0ns")
    ));
}

/// A runtime allow-list entry admits the key on every replica without counting it, until it
/// expires; it also lifts a penalty.
async fn allow_bypasses_and_expires(h: Harness) {
    let (a, b) = (h.limiter().await, h.limiter().await);
    let rule = Rule::new("ops-allow", Quota::per_hour(2)).with_overrides();
    assert!(check(&a, &rule, "carol").await.allowed);
    a.penalize(&rule, Key::from("carol"), Duration::from_secs(600))
        .await
        .expect("penalize");
    assert!(!check(&a, &rule, "carol").await.allowed);
    a.allow(&rule, Key::from("carol"), Duration::from_secs(60))
        .await
        .expect("allow");
    for _ in 0..10 {
        for l in [&a, &b] {
            let d = check(l, &rule, "carol").await;
            assert!(d.allowed);
            assert_eq!(d.remaining, 1, "nothing counted while allowed");
        }
    }
    let seen = b.inspect(&rule, Key::from("carol")).await.expect("inspect");
    assert_eq!(seen.blocked_for, None, "allow lifted the penalty");
    h.assert_wait(seen.allowed_for.expect("allowed"), Duration::from_secs(60));
    h.wait(Duration::from_secs(61)).await;
    // Expired: the one unit left, then denied.
    assert!(check(&b, &rule, "carol").await.allowed);
    assert!(!check(&b, &rule, "carol").await.allowed);
    assert_eq!(
        b.inspect(&rule, Key::from("carol"))
            .await
            .expect("inspect")
            .allowed_for,
        None
    );
}

/// The static allow list admits its keys without counting and without the store.
async fn static_allow_list_admits_its_keys(h: Harness) {
    let l = h.limiter().await;
    let rule = Rule::new("ops-static", Quota::per_hour(1)).with_allowed_keys([Key::from("probe")]);
    for _ in 0..5 {
        let d = check(&l, &rule, "probe").await;
        assert!(d.allowed);
        assert_eq!(d.remaining, 1);
    }
    let seen = l.inspect(&rule, Key::from("probe")).await.expect("inspect");
    assert!(seen.allow_listed);
    assert!(check(&l, &rule, "other").await.allowed);
    assert!(!check(&l, &rule, "other").await.allowed);
}

/// After 2 rejections within a minute the key is banned for 10 s, then 20 s, then 25 s (the
/// cap); a reset forgets the history.
async fn bans_escalate_double_and_cap(h: Harness) {
    let l = h.limiter().await;
    let bans = Bans::after(2)
        .within(Duration::from_secs(60))
        .block(Duration::from_secs(10))
        .max(Duration::from_secs(25));
    let rule = Rule::new("ops-bans", Quota::per_hour(1)).with_bans(bans);
    assert!(check(&l, &rule, "troll").await.allowed);
    for (level, ban) in [(1, 10), (2, 20), (3, 25), (4, 25)] {
        // The first rejection counts, the second bans; the answer to it already says so.
        let first = check(&l, &rule, "troll").await;
        assert!(!first.allowed);
        assert!(
            first.retry_after > Duration::from_secs(3000),
            "the quota's wait"
        );
        let banned = check(&l, &rule, "troll").await;
        assert!(!banned.allowed);
        h.assert_wait(banned.retry_after, Duration::from_secs(ban));
        let seen = l.inspect(&rule, Key::from("troll")).await.expect("inspect");
        assert_eq!((seen.ban_level, seen.strikes), (level, 0));
        h.assert_wait(seen.blocked_for.expect("banned"), Duration::from_secs(ban));
        // Rejections during the ban do not count toward the next one.
        for _ in 0..5 {
            let d = check(&l, &rule, "troll").await;
            h.assert_wait(d.retry_after, Duration::from_secs(ban));
        }
        let seen = l.inspect(&rule, Key::from("troll")).await.expect("inspect");
        assert_eq!(seen.strikes, 0);
        h.wait(Duration::from_secs(ban)).await;
    }
    l.reset(&rule, Key::from("troll")).await.expect("reset");
    assert!(check(&l, &rule, "troll").await.allowed);
    assert!(!check(&l, &rule, "troll").await.allowed);
    let seen = l.inspect(&rule, Key::from("troll")).await.expect("inspect");
    assert_eq!((seen.ban_level, seen.strikes), (0, 1));
    // A single rejection within the window, then the window passes: the count starts again.
    h.wait(Duration::from_secs(61)).await;
    assert!(!check(&l, &rule, "troll").await.allowed);
    let seen = l.inspect(&rule, Key::from("troll")).await.expect("inspect");
    assert_eq!((seen.ban_level, seen.strikes), (0, 1));
}

/// Operations refuse an invalid rule with the rule's own error.
async fn operations_validate_the_rule(h: Harness) {
    let l = h.limiter().await;
    let bad = Rule::new("bad name", Quota::per_hour(1));
    assert!(matches!(
        l.reset(&bad, Key::from("k")).await,
        Err(LimiterError::Config(e)) if e.kind() == ConfigErrorKind::Name
    ));
    let bad_bans = Rule::new("ok", Quota::per_hour(1)).with_bans(Bans::after(0));
    assert!(matches!(
        l.inspect(&bad_bans, Key::from("k")).await,
        Err(LimiterError::Config(e)) if e.kind() == ConfigErrorKind::Bans && e.rule() == Some("ok")
    ));
}

/// A rule that does not read overrides refuses penalties and allow-list entries (rather than
/// ignoring them), and still inspects and resets.
async fn steering_needs_a_rule_that_reads_overrides(h: Harness) {
    let l = h.limiter().await;
    let plain = Rule::new("ops-plain", Quota::per_hour(2));
    let minute = Duration::from_secs(60);
    for refused in [
        l.penalize(&plain, Key::from("k"), minute).await,
        l.allow(&plain, Key::from("k"), minute).await,
    ] {
        let Err(LimiterError::Config(why)) = refused else {
            panic!("{refused:?}");
        };
        assert_eq!(why.kind(), ConfigErrorKind::Unsupported, "{why}");
        assert!(why.to_string().contains("with_overrides"), "{why}");
    }
    assert!(check(&l, &plain, "k").await.allowed);
    let seen = l.inspect(&plain, Key::from("k")).await.expect("inspect");
    assert_eq!((seen.state.remaining, seen.blocked_for), (1, None));
    // A record left by the same rule with overrides does not apply to it without them.
    let steerable = plain.clone().with_overrides();
    l.penalize(&steerable, Key::from("k"), minute)
        .await
        .expect("penalize");
    assert!(!check(&l, &steerable, "k").await.allowed);
    assert!(check(&l, &plain, "k").await.allowed);
    l.reset(&plain, Key::from("k")).await.expect("reset");
    assert_eq!(
        l.inspect(&plain, Key::from("k"))
            .await
            .expect("inspect")
            .state
            .remaining,
        2
    );
}

backend_suite!(
    inspect_consumes_nothing,
    reset_restores_the_full_quota,
    penalize_blocks_exactly_for_the_duration,
    allow_bypasses_and_expires,
    static_allow_list_admits_its_keys,
    bans_escalate_double_and_cap,
    operations_validate_the_rule,
    steering_needs_a_rule_that_reads_overrides,
);
backend_suite!(redis_only: every_override_key_has_a_ttl);
backend_suite!(standalone_only: static_allow_list_never_calls_redis);

/// Penalties, allow-list entries and bans leave keys that all expire, in the rule's hash tag,
/// without the raw client key.
async fn every_override_key_has_a_ttl(h: Harness) {
    let l = h.limiter().await;
    let rule = Rule::new("ops-ttl", Quota::per_hour(1)).with_bans(Bans::after(1));
    l.penalize(&rule, Key::from("secret-a"), Duration::from_secs(30))
        .await
        .expect("penalize");
    l.allow(&rule, Key::from("secret-b"), Duration::from_secs(30))
        .await
        .expect("allow");
    check(&l, &rule, "secret-c").await;
    check(&l, &rule, "secret-c").await;
    let keys = h.keys().await;
    let records: Vec<&String> = keys.iter().filter(|k| k.contains(":ov:{")).collect();
    assert_eq!(records.len(), 3, "{keys:?}");
    for key in &keys {
        assert!(!key.contains("secret"), "{key}");
        let ttl = h.pttl(key).await;
        assert!(ttl > 0, "{key} has no TTL ({ttl})");
    }
    l.reset(&rule, Key::from("secret-c")).await.expect("reset");
    assert_eq!(
        h.keys().await.len(),
        keys.len() - 2,
        "state and record gone"
    );
}

/// A request whose every rule allow-lists it never reaches Redis.
async fn static_allow_list_never_calls_redis(h: Harness) {
    let l = h.limiter().await;
    let rule =
        Rule::new("ops-static-redis", Quota::per_hour(1)).with_allowed_keys([Key::from("probe")]);
    let before = h.calls("evalsha").await;
    for _ in 0..10 {
        assert!(check(&l, &rule, "probe").await.allowed);
    }
    assert_eq!(h.calls("evalsha").await, before);
    assert!(h.keys().await.is_empty());
}
