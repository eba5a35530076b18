//! Login throttling for the demo apps: three rules decided in one all-or-nothing `check_all`
//! call, before the password is looked at.
//!
//! | rule | key | env (default) | stops |
//! | --- | --- | --- | --- |
//! | `login` | client IP + username | `LOGIN_LIMIT` (`5/minute`) | guessing one account's password from one address |
//! | `login-ip` | client IP | `LOGIN_IP_LIMIT` (`30/minute`) | one address spraying many usernames |
//! | `login-user` | username | `LOGIN_USER_LIMIT` (`10/minute`) | many addresses (a botnet) guessing one account |
//!
//! All three use the sliding log: at most N in any window of the period. Every attempt counts,
//! good or bad; a request one rule denies is recorded by none. The per-username rule lets anyone
//! lock an account out of password logins for a minute at a time: that is the price of stopping
//! a distributed guess, and why its quota is a little looser than the per-pair one.
//!
//! The username is normalized (trimmed, lower-cased) and validated against `[a-z0-9_.-]{1,64}`
//! *before* it becomes a key: a name that could never log in costs no Redis call and no memory.

use redis_guard::rate_limit::{Algorithm, Check, Key, Limiter, Rule};

use crate::settings::{self, Lookup};

/// The three login rules.
#[derive(Clone, Debug)]
pub struct LoginRules {
    pair: Rule,
    ip: Rule,
    user: Rule,
}

/// What the limiter said about a login attempt.
#[derive(Debug)]
pub enum Throttle {
    /// Go on and check the password.
    Allowed,
    /// Too many attempts: `429` with this `Retry-After`.
    Limited {
        /// Whole seconds until the attempt would be admitted.
        retry_after_secs: u64,
    },
    /// The limiter could not decide: refuse (fail closed), `503`.
    Unavailable,
}

impl LoginRules {
    /// `LOGIN_LIMIT`, `LOGIN_IP_LIMIT`, `LOGIN_USER_LIMIT`.
    pub fn from_env(get: Lookup<'_>) -> Result<Self, String> {
        let rule = |name: &str, var: &str, default: &str| -> Result<Rule, String> {
            let rule = Rule::new(name, settings::quota(get, var, default)?)
                .with_algorithm(Algorithm::SlidingLog);
            rule.validate().map_err(|e| format!("{var}: {e}"))?;
            Ok(rule)
        };
        Ok(Self {
            pair: rule("login", "LOGIN_LIMIT", "5/minute")?,
            ip: rule("login-ip", "LOGIN_IP_LIMIT", "30/minute")?,
            user: rule("login-user", "LOGIN_USER_LIMIT", "10/minute")?,
        })
    }

    /// The per IP + username quota (`LOGIN_LIMIT`).
    #[must_use]
    pub fn pair_quota(&self) -> redis_guard::rate_limit::Quota {
        *self.pair.quota()
    }

    /// Counts one attempt by `user` (normalized) from `ip` (a [`ClientIp`] key) under all three
    /// rules at once.
    ///
    /// [`ClientIp`]: redis_guard::rate_limit::ClientIp
    pub async fn throttle(&self, limiter: &dyn Limiter, ip: &Key, user: &str) -> Throttle {
        let user = Key::from(user);
        let checks = vec![
            Check::new(self.pair.clone(), Key::pair(ip, &user)),
            Check::new(self.ip.clone(), ip.clone()),
            Check::new(self.user.clone(), user),
        ];
        match limiter.check_all(checks).await {
            Ok(d) if d.allowed => Throttle::Allowed,
            Ok(d) => {
                tracing::debug!(rule = %d.rule, "login throttled");
                Throttle::Limited {
                    retry_after_secs: d.retry_after_secs(),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "login limiter unavailable: refusing logins (fail closed)");
                Throttle::Unavailable
            }
        }
    }
}

/// The username as it is counted and logged in: trimmed and lower-cased, or `None` when it does
/// not match `[A-Za-z0-9_.-]{1,64}` (such a name never logs in).
pub fn normalize_username(raw: &str) -> Option<String> {
    let u = raw.trim();
    let valid = (1..=64).contains(&u.len())
        && u.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    valid.then(|| u.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usernames_are_normalized_before_they_become_keys() {
        assert_eq!(normalize_username(" Alice ").as_deref(), Some("alice"));
        assert_eq!(
            normalize_username("bob.o-k_1").as_deref(),
            Some("bob.o-k_1")
        );
        let long = "a".repeat(64);
        assert_eq!(normalize_username(&long).as_deref(), Some(long.as_str()));
        for bad in [
            "",
            "   ",
            "bad user",
            "a\u{0}b",
            "ålice",
            "a:b",
            &"a".repeat(65),
        ] {
            assert_eq!(normalize_username(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn rules_come_from_the_environment() {
        let rules = LoginRules::from_env(&|_| None).unwrap();
        assert_eq!(
            rules.pair_quota(),
            redis_guard::rate_limit::Quota::per_minute(5)
        );
        let e = LoginRules::from_env(&|n| (n == "LOGIN_IP_LIMIT").then(|| "0/minute".into()))
            .unwrap_err();
        assert!(e.starts_with("LOGIN_IP_LIMIT=\"0/minute\""), "{e}");
    }
}
