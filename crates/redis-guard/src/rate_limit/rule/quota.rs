//! How much traffic a rule admits: `limit` requests per `period`, with a `burst`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::{ConfigError, ConfigErrorKind};

/// The longest period a quota may have. Longer windows are almost always a unit mistake, and the
/// bound keeps every time value the scripts compute exact in Lua's doubles.
pub(crate) const MAX_PERIOD: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// A rate: `limit` requests per `period`, of which up to `burst` may arrive back to back.
///
/// `Quota::per_minute(100)` means *one hundred requests per minute*, and by default all hundred may
/// come at once (burst = limit). Set a smaller [`burst`](Quota::burst) to space requests out:
/// `Quota::per_minute(60).burst(5)` admits 5 at once, then one a second.
///
/// # What `per_minute(n)` admits, by algorithm
///
/// A quota is a *rate*; how many requests it lets through in one stretch of time depends on the
/// [`Algorithm`](crate::rate_limit::Algorithm). For `Quota::per_minute(5)` (burst 5):
///
/// | algorithm | at most, in any 60 s | |
/// | --- | --- | --- |
/// | `SlidingLog` | **5** | exact: never more than `n` in any window of the period |
/// | `Gcra` (default), `TokenBucket` | **9** (`n + burst − 1`) | 5 at once, then one every 12 s as the rate refills |
/// | `FixedWindow` | **10** (`2n`) | 5 at the end of one window, 5 at the start of the next |
/// | `SlidingCounter` | about 5 | an estimate: a little over or under when traffic is uneven |
///
/// GCRA is right for APIs: smooth, O(1), exact *as a rate*. But when the rule is a security or cost
/// limit stated as "at most N in any period" (login attempts, SMS or calls per number,
/// "more than 5 calls in 60 seconds → reject"), use
/// [`Algorithm::SlidingLog`](crate::rate_limit::Algorithm::SlidingLog), the only one whose meaning
/// is exactly that; a smaller [`burst`](Quota::burst) makes GCRA stricter at once but never turns
/// it into a window count.
///
/// Constructors never panic; a quota that cannot work (a zero limit, a burst of zero, a period of
/// zero or over a year) is reported by [`Quota::validate`], which the layer builder calls, so a bad
/// quota fails when the layer is built and never on a request.
///
/// Quotas also parse from strings, for configuration files and environment variables:
///
/// ```
/// use redis_guard::rate_limit::Quota;
/// use std::time::Duration;
///
/// let q: Quota = "100/minute".parse().unwrap();
/// assert_eq!(q, Quota::per_minute(100));
/// assert_eq!("5/s".parse::<Quota>().unwrap(), Quota::per_second(5));
/// assert_eq!("10/30s".parse::<Quota>().unwrap(), Quota::new(10, Duration::from_secs(30)));
///
/// let err = "10/fortnight".parse::<Quota>().unwrap_err();
/// assert!(err.to_string().contains("fortnight"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u32,
    period: Duration,
    burst: Option<u32>,
}

impl Quota {
    /// `limit` requests per `period`.
    #[must_use]
    pub const fn new(limit: u32, period: Duration) -> Self {
        Self {
            limit,
            period,
            burst: None,
        }
    }

    /// `limit` requests per second.
    #[must_use]
    pub const fn per_second(limit: u32) -> Self {
        Self::new(limit, Duration::from_secs(1))
    }

    /// `limit` requests per minute.
    #[must_use]
    pub const fn per_minute(limit: u32) -> Self {
        Self::new(limit, Duration::from_secs(60))
    }

    /// `limit` requests per hour.
    #[must_use]
    pub const fn per_hour(limit: u32) -> Self {
        Self::new(limit, Duration::from_secs(60 * 60))
    }

    /// `limit` requests per day (24 hours).
    #[must_use]
    pub const fn per_day(limit: u32) -> Self {
        Self::new(limit, Duration::from_secs(24 * 60 * 60))
    }

    /// How many requests may arrive back to back. Defaults to the limit.
    #[must_use]
    pub const fn burst(mut self, burst: u32) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Requests admitted per period.
    #[must_use]
    pub const fn limit(&self) -> u32 {
        self.limit
    }

    /// The period the limit applies to.
    #[must_use]
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// The burst: the configured one, or the limit when none was set.
    #[must_use]
    pub const fn burst_size(&self) -> u32 {
        match self.burst {
            Some(b) => b,
            None => self.limit,
        }
    }

    /// One instance's share of this quota among `replicas`: limit and burst divided, rounded
    /// down, at least 1; the same period.
    pub(crate) fn share(self, replicas: std::num::NonZeroU32) -> Self {
        let part = |n: u32| (n / replicas.get()).max(1);
        Self {
            limit: part(self.limit),
            period: self.period,
            burst: self.burst.map(part),
        }
    }

    /// The time one request "costs": `period / limit`, in whole microseconds (rounded to the
    /// nearest, at least 1).
    #[must_use]
    pub fn emission_interval(&self) -> Duration {
        Duration::from_micros(self.emission_interval_us())
    }

    pub(crate) fn emission_interval_us(&self) -> u64 {
        let period = u64::try_from(self.period.as_micros()).unwrap_or(u64::MAX);
        let limit = u64::from(self.limit.max(1));
        ((period + limit / 2) / limit).max(1)
    }

    pub(crate) fn period_us(&self) -> u64 {
        u64::try_from(self.period.as_micros()).unwrap_or(u64::MAX)
    }

    /// Checks that the quota can work; the layer builder calls this.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] of kind [`Quota`](ConfigErrorKind::Quota) naming the bad value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |message: String, value: String| {
            Err(ConfigError::new(ConfigErrorKind::Quota, message).with_value(value))
        };
        if self.limit == 0 {
            return bad(
                "quota limit is 0: a quota must admit at least 1 request per period".to_owned(),
                "0".to_owned(),
            );
        }
        if self.period.is_zero() {
            return bad(
                "quota period is 0: the period must be positive".to_owned(),
                format!("{:?}", self.period),
            );
        }
        if self.period > MAX_PERIOD {
            return bad(
                format!(
                    "quota period {:?} is longer than the maximum of 366 days",
                    self.period
                ),
                format!("{:?}", self.period),
            );
        }
        if self.period.as_micros() < u128::from(self.limit) {
            return bad(
                format!(
                    "quota {} per {:?} is faster than 1 request per microsecond",
                    self.limit, self.period
                ),
                self.to_string(),
            );
        }
        let burst = |message: String| {
            Err(ConfigError::new(ConfigErrorKind::Quota, message)
                .with_setting("Quota::burst")
                .with_value(self.burst_size()))
        };
        if self.burst == Some(0) {
            return burst("quota burst is 0: the burst must be at least 1".to_owned());
        }
        // burst × emission interval is how far ahead the schedule may run; keep it within the
        // range every backend computes exactly (Lua numbers are doubles).
        let horizon = u128::from(self.burst_size()) * u128::from(self.emission_interval_us());
        if horizon > MAX_PERIOD.as_micros() * 4 {
            return burst(format!(
                "quota burst {} is too large for its rate (the full burst would take over 4 years to refill)",
                self.burst_size()
            ));
        }
        Ok(())
    }

    /// Parses several quotas separated by `;` or `,`, e.g. `"10/s; 1000/h"`.
    ///
    /// ```
    /// use redis_guard::rate_limit::Quota;
    /// let qs = Quota::parse_many("10/s; 1000/h").unwrap();
    /// assert_eq!(qs, vec![Quota::per_second(10), Quota::per_hour(1000)]);
    /// ```
    ///
    /// # Errors
    ///
    /// The first part that does not parse, or an empty string.
    pub fn parse_many(s: &str) -> Result<Vec<Self>, ConfigError> {
        let quotas = s
            .split([';', ','])
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::parse)
            .collect::<Result<Vec<Self>, _>>()?;
        if quotas.is_empty() {
            return Err(syntax(s));
        }
        Ok(quotas)
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.period.as_secs();
        let unit = match (secs, self.period.subsec_nanos()) {
            (1, 0) => "second".to_owned(),
            (60, 0) => "minute".to_owned(),
            (3600, 0) => "hour".to_owned(),
            (86_400, 0) => "day".to_owned(),
            (_, 0) => format!("{secs}s"),
            _ => format!("{}ms", self.period.as_millis()),
        };
        write!(f, "{}/{unit}", self.limit)?;
        if let Some(b) = self.burst {
            write!(f, " (burst {b})")?;
        }
        Ok(())
    }
}

/// A quota string that is not of the form `<count>/<period>`.
fn syntax(s: &str) -> ConfigError {
    ConfigError::new(
        ConfigErrorKind::QuotaSyntax,
        format!(
            "invalid quota `{s}`: expected `<count>/<period>`, e.g. `100/minute`, `5/s` or `10/30s`"
        ),
    )
    .with_value(s)
}

/// A period that is not e.g. `minute`, `30s` or `2h`.
fn bad_period(s: &str) -> ConfigError {
    ConfigError::new(
        ConfigErrorKind::QuotaSyntax,
        format!("invalid quota period `{s}`: expected e.g. `minute`, `30s` or `2h`"),
    )
    .with_value(s)
}

impl FromStr for Quota {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let Some((count, period)) = s.split_once('/') else {
            return Err(syntax(s));
        };
        let count = count.trim();
        let limit: u32 = count.parse().map_err(|_| {
            ConfigError::new(
                ConfigErrorKind::QuotaSyntax,
                format!(
                    "invalid quota count `{count}`: expected a whole number of requests, e.g. `100/minute`"
                ),
            )
            .with_value(count)
        })?;
        let period = parse_period(period.trim())?;
        let quota = Self::new(limit, period);
        quota.validate()?;
        Ok(quota)
    }
}

/// Parses `minute`, `30s`, `2 hours`, `500ms`.
fn parse_period(s: &str) -> Result<Duration, ConfigError> {
    if s.is_empty() {
        return Err(bad_period(s));
    }
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = s.split_at(digits);
    let n: u64 = if n.is_empty() {
        1
    } else {
        n.parse().map_err(|_| bad_period(s))?
    };
    let unit_ms: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "ms" | "millis" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        "" => return Err(bad_period(s)),
        other => {
            return Err(ConfigError::new(
                ConfigErrorKind::QuotaSyntax,
                format!(
                    "invalid quota period unit `{other}`: expected one of ms, s, sec, second, m, min, minute, h, hour, d, day (plural forms too)"
                ),
            )
            .with_value(other));
        }
    };
    n.checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(|| bad_period(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (`"100/minute"`, `"5/s"`, `"10/30s"` and `parse_many("10/s; 1000/h")`: `Quota`'s doc
    /// examples.)
    #[test]
    fn parses_the_documented_forms() {
        let cases = [
            ("1000/h", Quota::per_hour(1000)),
            (" 7 / 2 hours ", Quota::new(7, Duration::from_secs(7200))),
            ("3/day", Quota::per_day(3)),
            ("20/500ms", Quota::new(20, Duration::from_millis(500))),
            ("60/MIN", Quota::per_minute(60)),
        ];
        for (s, want) in cases {
            assert_eq!(s.parse::<Quota>(), Ok(want), "{s}");
        }
    }

    /// The kind, the value and the message of a parse or validation error.
    fn why<T: std::fmt::Debug>(r: Result<T, ConfigError>) -> (ConfigErrorKind, String, String) {
        let e = r.unwrap_err();
        (
            e.kind(),
            e.value().unwrap_or_default().to_owned(),
            e.to_string(),
        )
    }

    #[test]
    fn rejects_bad_strings_with_a_message_that_says_why() {
        use ConfigErrorKind::{Quota as Bad, QuotaSyntax as Syntax};
        for (s, kind, value, says) in [
            ("0/minute", Bad, "0", "limit is 0: a quota must admit"),
            ("10/fortnight", Syntax, "fortnight", "unit `fortnight`"),
            ("abc", Syntax, "abc", "<count>/<period>"),
            ("x/minute", Syntax, "x", "quota count `x`"),
            ("-1/s", Syntax, "-1", "quota count `-1`"),
            ("1/", Syntax, "", "quota period ``"),
            (
                "1/99999999999999999999d",
                Syntax,
                "99999999999999999999d",
                "period `9",
            ),
            ("1/0s", Bad, "0ns", "period is 0"),
            ("1/400d", Bad, "34560000s", "longer than the maximum"),
            ("2000000/s", Bad, "2000000/second", "faster than 1 request"),
        ] {
            let (got_kind, got, text) = why(s.parse::<Quota>());
            assert_eq!((got_kind, got.as_str()), (kind, value), "{s}");
            assert!(text.contains(says), "{s}: {text}");
        }
    }

    #[test]
    fn parses_several() {
        let (kind, value, _) = why(Quota::parse_many(" ; "));
        assert_eq!(
            (kind, value.as_str()),
            (ConfigErrorKind::QuotaSyntax, " ; ")
        );
        let (kind, _, text) = why(Quota::parse_many("10/s; 0/h"));
        assert_eq!(kind, ConfigErrorKind::Quota);
        assert!(text.contains("limit is 0"), "{text}");
    }

    #[test]
    fn burst_defaults_to_limit_and_validates() {
        assert_eq!(Quota::per_minute(100).burst_size(), 100);
        assert_eq!(Quota::per_minute(100).burst(5).burst_size(), 5);
        let zero = Quota::per_minute(1).burst(0).validate().unwrap_err();
        assert_eq!(zero.kind(), ConfigErrorKind::Quota);
        assert_eq!(
            (zero.setting(), zero.value()),
            (Some("Quota::burst"), Some("0"))
        );
        assert!(zero.to_string().contains("burst is 0"), "{zero}");
        let (_, _, text) = why(Quota::per_minute(0).validate());
        assert!(text.contains("limit is 0"), "{text}");
        let large = Quota::per_day(1).burst(u32::MAX).validate().unwrap_err();
        assert_eq!(large.value(), Some(u32::MAX.to_string().as_str()));
        assert!(
            large.to_string().contains("too large for its rate"),
            "{large}"
        );
    }

    #[test]
    fn emission_interval_is_period_over_limit() {
        assert_eq!(
            Quota::per_minute(10).emission_interval(),
            Duration::from_secs(6)
        );
        assert_eq!(Quota::per_second(3).emission_interval_us(), 333_333);
        assert_eq!(Quota::per_second(1_000_000).emission_interval_us(), 1);
    }
}
