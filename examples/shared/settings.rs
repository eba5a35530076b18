//! Reading the examples' environment variables: shared by both example apps, included with
//! `#[path]`. Every error names the variable and says what is wrong with its value.
//!
//! Values are bounded, not only parsed: a value that parses but cannot work (a zero timeout that
//! silently disables limiting, a lifetime so long that the expiry overflows) is refused at start.

use std::time::Duration;

/// The longest duration any `*_IDLE` / `*_MAX` / timeout variable accepts: ten years.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(3650 * 86_400);

/// `REDIS_TIMEOUT_MS` bounds: 0 would fail every decision, more than a minute is a hang.
pub(crate) const REDIS_TIMEOUT_MS: std::ops::RangeInclusive<u64> = 1..=60_000;

/// Looks a variable up; blank counts as unset.
pub(crate) type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as a [`Lookup`].
pub(crate) fn from_process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `30m`, `24h`, `90s`, `7d`: positive, at most `max`.
pub(crate) fn parse_duration(name: &str, v: &str, max: Duration) -> Result<Duration, String> {
    let v = v.trim();
    let digits = v.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = v.split_at(digits);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{name}={v:?} is not a duration like 30m, 24h or 90s"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{name}={v:?}: the unit must be s, m, h or d")),
    };
    if n == 0 {
        return Err(format!("{name}={v:?} must be positive"));
    }
    match n.checked_mul(secs).map(Duration::from_secs) {
        Some(d) if d <= max => Ok(d),
        _ => Err(format!(
            "{name}={v:?} is too long: at most {}s",
            max.as_secs()
        )),
    }
}

/// The duration in `name`, or `default`; see [`parse_duration`].
pub(crate) fn duration(
    get: Lookup<'_>,
    name: &str,
    default: &str,
    max: Duration,
) -> Result<Duration, String> {
    parse_duration(name, &get(name).unwrap_or_else(|| default.to_owned()), max)
}

/// `REDIS_TIMEOUT_MS`: whole milliseconds in [`REDIS_TIMEOUT_MS`], default the library's.
pub(crate) fn redis_timeout(get: Lookup<'_>) -> Result<Duration, String> {
    let Some(v) = get("REDIS_TIMEOUT_MS") else {
        return Ok(redis_guard::backend::DEFAULT_TIMEOUT);
    };
    match v.trim().parse::<u64>() {
        Ok(ms) if REDIS_TIMEOUT_MS.contains(&ms) => Ok(Duration::from_millis(ms)),
        _ => Err(format!(
            "REDIS_TIMEOUT_MS={v:?} must be a whole number of milliseconds from {} to {}",
            REDIS_TIMEOUT_MS.start(),
            REDIS_TIMEOUT_MS.end()
        )),
    }
}

/// The quota in `name`, or `default`, checked as a rule would be: `5/minute`, `30/10s`.
pub(crate) fn quota(
    get: Lookup<'_>,
    name: &str,
    default: &str,
) -> Result<redis_guard::rate_limit::Quota, String> {
    let v = get(name).unwrap_or_else(|| default.to_owned());
    let quota: redis_guard::rate_limit::Quota = v
        .parse()
        .map_err(|e| format!("{name}={v:?} is not a quota: {e}"))?;
    quota
        .validate()
        .map_err(|e| format!("{name}={v:?} cannot work: {e}"))?;
    Ok(quota)
}

/// `HEADER_READ_TIMEOUT` (default `10s`, at most `1h`): how long a client may take to send a
/// request head; a slow-loris connection is closed after it.
pub(crate) fn header_read_timeout(get: Lookup<'_>) -> Result<Duration, String> {
    duration(get, "HEADER_READ_TIMEOUT", "10s", Duration::from_secs(3600))
}

/// `TRUSTED_PROXIES` (CIDRs whose forwarding header is believed) and `FORWARDED_HEADER`
/// (`x-forwarded-for` or `forwarded`): the client address for rate limits.
pub(crate) fn client_ip(get: Lookup<'_>) -> Result<redis_guard::rate_limit::ClientIp, String> {
    use redis_guard::rate_limit::{ClientIp, ForwardedHeader};
    let forwarded_header: ForwardedHeader = match get("FORWARDED_HEADER") {
        Some(v) => v
            .parse()
            .map_err(|e| format!("FORWARDED_HEADER={v:?}: {e}"))?,
        None => ForwardedHeader::XForwardedFor,
    };
    match get("TRUSTED_PROXIES") {
        Some(cidrs) => Ok(ClientIp::trusted_proxies(
            cidrs.split(',').map(str::trim).filter(|c| !c.is_empty()),
        )
        .map_err(|e| format!("TRUSTED_PROXIES={cidrs:?}: {e}"))?
        .forwarded_header(forwarded_header)),
        None => Ok(ClientIp::peer()),
    }
}

/// `SESSION_IDLE` (default `30m`) and `SESSION_MAX` (default `24h`): positive, at most
/// [`MAX_DURATION`], idle no longer than max.
pub(crate) fn session_lifetimes(get: Lookup<'_>) -> Result<(Duration, Duration), String> {
    let idle = duration(get, "SESSION_IDLE", "30m", MAX_DURATION)?;
    let max = duration(get, "SESSION_MAX", "24h", MAX_DURATION)?;
    if idle > max {
        return Err(format!(
            "SESSION_IDLE ({idle:?}) is longer than SESSION_MAX ({max:?})"
        ));
    }
    Ok((idle, max))
}
