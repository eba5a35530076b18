//! How much traffic a rule admits: `limit` requests per `period`, with a `burst`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

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
/// [`Algorithm`](super::Algorithm). For `Quota::per_minute(5)` (burst 5):
///
/// | algorithm | at most, in any 60 s | |
/// | --- | --- | --- |
/// | `SlidingLog` | **5** | exact: never more than `n` in any window of the period |
/// | `Gcra` (default), `TokenBucket` | **9** (`n + burst − 1`) | 5 at once, then one every 12 s as the rate refills |
/// | `FixedWindow` | **10** (`2n`) | 5 at the end of one window, 5 at the start of the next |
/// | `SlidingCounter` | about 5 | an estimate: a little over or under when traffic is uneven |
///
/// GCRA is right for APIs: smooth, O(1), exact *as a rate*. But when the rule is a security or
/// cost limit stated as "at most N in any period" (login attempts, SMS or calls per number, the
/// seeds' "more than 5 calls in 60 seconds → reject"), use
/// [`Algorithm::SlidingLog`](super::Algorithm::SlidingLog), the only one whose meaning is exactly
/// that; a smaller [`burst`](Quota::burst) makes GCRA stricter at once but never turns it into a
/// window count.
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
    /// A [`QuotaError`] naming the bad value.
    pub fn validate(&self) -> Result<(), QuotaError> {
        if self.limit == 0 {
            return Err(QuotaError::ZeroLimit);
        }
        if self.period.is_zero() {
            return Err(QuotaError::ZeroPeriod);
        }
        if self.period > MAX_PERIOD {
            return Err(QuotaError::PeriodTooLong(self.period));
        }
        if self.period.as_micros() < u128::from(self.limit) {
            return Err(QuotaError::TooFast {
                limit: self.limit,
                period: self.period,
            });
        }
        if self.burst == Some(0) {
            return Err(QuotaError::ZeroBurst);
        }
        // burst × emission interval is how far ahead the schedule may run; keep it within the
        // range every backend computes exactly (Lua numbers are doubles).
        let horizon = u128::from(self.burst_size()) * u128::from(self.emission_interval_us());
        if horizon > MAX_PERIOD.as_micros() * 4 {
            return Err(QuotaError::BurstTooLarge(self.burst_size()));
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
    pub fn parse_many(s: &str) -> Result<Vec<Self>, QuotaError> {
        let quotas = s
            .split([';', ','])
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::parse)
            .collect::<Result<Vec<Self>, _>>()?;
        if quotas.is_empty() {
            return Err(QuotaError::Syntax(s.to_owned()));
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

/// Why a quota is invalid or did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaError {
    /// The string is not of the form `<count>/<period>`.
    #[error(
        "invalid quota `{0}`: expected `<count>/<period>`, e.g. `100/minute`, `5/s` or `10/30s`"
    )]
    Syntax(String),
    /// The count is not a whole number.
    #[error("invalid quota count `{0}`: expected a whole number of requests, e.g. `100/minute`")]
    Count(String),
    /// The period's unit is unknown.
    #[error(
        "invalid quota period unit `{0}`: expected one of ms, s, sec, second, m, min, minute, h, hour, d, day (plural forms too)"
    )]
    Unit(String),
    /// The period's multiplier is not a whole number.
    #[error("invalid quota period `{0}`: expected e.g. `minute`, `30s` or `2h`")]
    Period(String),
    /// The limit is zero: nothing would ever be admitted.
    #[error("quota limit is 0: a quota must admit at least 1 request per period")]
    ZeroLimit,
    /// The period is zero.
    #[error("quota period is 0: the period must be positive")]
    ZeroPeriod,
    /// The period is longer than 366 days.
    #[error("quota period {0:?} is longer than the maximum of 366 days")]
    PeriodTooLong(Duration),
    /// More than one request per microsecond.
    #[error("quota {limit} per {period:?} is faster than 1 request per microsecond")]
    TooFast {
        /// The limit.
        limit: u32,
        /// The period.
        period: Duration,
    },
    /// The burst is zero: nothing would ever be admitted.
    #[error("quota burst is 0: the burst must be at least 1")]
    ZeroBurst,
    /// The burst would let the schedule run years ahead.
    #[error(
        "quota burst {0} is too large for its rate (the full burst would take over 4 years to refill)"
    )]
    BurstTooLarge(u32),
}

impl FromStr for Quota {
    type Err = QuotaError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let Some((count, period)) = s.split_once('/') else {
            return Err(QuotaError::Syntax(s.to_owned()));
        };
        let count = count.trim();
        let limit: u32 = count
            .parse()
            .map_err(|_| QuotaError::Count(count.to_owned()))?;
        let period = parse_period(period.trim())?;
        let quota = Self::new(limit, period);
        quota.validate()?;
        Ok(quota)
    }
}

/// Parses `minute`, `30s`, `2 hours`, `500ms`.
fn parse_period(s: &str) -> Result<Duration, QuotaError> {
    if s.is_empty() {
        return Err(QuotaError::Period(s.to_owned()));
    }
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = s.split_at(digits);
    let n: u64 = if n.is_empty() {
        1
    } else {
        n.parse().map_err(|_| QuotaError::Period(s.to_owned()))?
    };
    let unit_ms: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "ms" | "millis" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        "" => return Err(QuotaError::Period(s.to_owned())),
        other => return Err(QuotaError::Unit(other.to_owned())),
    };
    n.checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(|| QuotaError::Period(s.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        let cases = [
            ("100/minute", Quota::per_minute(100)),
            ("5/s", Quota::per_second(5)),
            ("1000/h", Quota::per_hour(1000)),
            ("10/30s", Quota::new(10, Duration::from_secs(30))),
            (" 7 / 2 hours ", Quota::new(7, Duration::from_secs(7200))),
            ("3/day", Quota::per_day(3)),
            ("20/500ms", Quota::new(20, Duration::from_millis(500))),
            ("60/MIN", Quota::per_minute(60)),
        ];
        for (s, want) in cases {
            assert_eq!(s.parse::<Quota>(), Ok(want), "{s}");
        }
    }

    #[test]
    fn rejects_bad_strings_with_a_message_that_says_why() {
        let zero = "0/minute".parse::<Quota>().unwrap_err();
        assert_eq!(zero, QuotaError::ZeroLimit);
        assert!(zero.to_string().contains("at least 1"), "{zero}");

        let unit = "10/fortnight".parse::<Quota>().unwrap_err();
        assert_eq!(unit, QuotaError::Unit("fortnight".into()));
        assert!(unit.to_string().contains("`fortnight`"), "{unit}");

        let abc = "abc".parse::<Quota>().unwrap_err();
        assert_eq!(abc, QuotaError::Syntax("abc".into()));
        assert!(abc.to_string().contains("<count>/<period>"), "{abc}");

        assert_eq!(
            "x/minute".parse::<Quota>(),
            Err(QuotaError::Count("x".into()))
        );
        assert_eq!("-1/s".parse::<Quota>(), Err(QuotaError::Count("-1".into())));
        assert_eq!(
            "1/".parse::<Quota>(),
            Err(QuotaError::Period(String::new()))
        );
        assert_eq!("1/0s".parse::<Quota>(), Err(QuotaError::ZeroPeriod));
        assert!(matches!(
            "1/400d".parse::<Quota>(),
            Err(QuotaError::PeriodTooLong(_))
        ));
        assert!(matches!(
            "2000000/s".parse::<Quota>(),
            Err(QuotaError::TooFast { .. })
        ));
        assert!(matches!(
            "1/99999999999999999999d".parse::<Quota>(),
            Err(QuotaError::Period(_))
        ));
    }

    #[test]
    fn parses_several() {
        assert_eq!(
            Quota::parse_many("10/s; 1000/h"),
            Ok(vec![Quota::per_second(10), Quota::per_hour(1000)])
        );
        assert_eq!(
            Quota::parse_many(" ; "),
            Err(QuotaError::Syntax(" ; ".into()))
        );
        assert_eq!(Quota::parse_many("10/s; 0/h"), Err(QuotaError::ZeroLimit));
    }

    #[test]
    fn burst_defaults_to_limit_and_validates() {
        assert_eq!(Quota::per_minute(100).burst_size(), 100);
        assert_eq!(Quota::per_minute(100).burst(5).burst_size(), 5);
        assert_eq!(
            Quota::per_minute(1).burst(0).validate(),
            Err(QuotaError::ZeroBurst)
        );
        assert_eq!(Quota::per_minute(0).validate(), Err(QuotaError::ZeroLimit));
        assert!(matches!(
            Quota::per_day(1).burst(u32::MAX).validate(),
            Err(QuotaError::BurstTooLarge(_))
        ));
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
