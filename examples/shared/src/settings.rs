//! Reading the demo apps' environment variables. Every error names the variable and says what
//! is wrong with its value.
//!
//! Values are bounded, not only parsed: a value that parses but cannot work (a zero timeout that
//! silently disables limiting, a lifetime so long that the expiry overflows) is refused at start.

use std::time::Duration;

use redis_guard::backend::{ConnectOptions, TlsOptions};

/// The longest duration any `*_IDLE` / `*_MAX` / timeout variable accepts: ten years.
pub const MAX_DURATION: Duration = Duration::from_secs(3650 * 86_400);

/// `REDIS_TIMEOUT_MS` bounds: 0 would fail every decision, more than a minute is a hang.
pub const REDIS_TIMEOUT_MS: std::ops::RangeInclusive<u64> = 1..=60_000;

/// Looks a variable up; blank counts as unset.
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as a [`Lookup`].
pub fn from_process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// A duration as [`humantime`] reads it (`90s`, `30m`, `24h`, `7d`, `1h 30m`, `1.5h`): whole
/// seconds, positive, at most `max`.
pub fn parse_duration(name: &str, v: &str, max: Duration) -> Result<Duration, String> {
    let v = v.trim();
    let too_long = || format!("{name}={v:?} is too long: at most {}s", max.as_secs());
    let d = humantime::parse_duration(v).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => too_long(),
        e => format!("{name}={v:?} is not a duration like 30m, 24h or 90s: {e}"),
    })?;
    if d.is_zero() {
        return Err(format!("{name}={v:?} must be positive"));
    }
    // Cookie `Max-Age` and the examples' docs count in seconds.
    if d.subsec_nanos() != 0 {
        return Err(format!("{name}={v:?} must be whole seconds"));
    }
    if d > max {
        return Err(too_long());
    }
    Ok(d)
}

/// The duration in `name`, or `default`; see [`parse_duration`].
pub fn duration(
    get: Lookup<'_>,
    name: &str,
    default: &str,
    max: Duration,
) -> Result<Duration, String> {
    parse_duration(name, &get(name).unwrap_or_else(|| default.to_owned()), max)
}

/// How the apps connect to Redis: lazily (an app starts, and serves by its failure policies,
/// while Redis is down), with `REDIS_TLS_CA`, a PEM file of the certificate authority to trust
/// for `rediss://` addresses (unset: the platform's roots). Read from the process environment,
/// as a path need not be UTF-8.
///
/// # Errors
///
/// A `REDIS_TLS_CA` file that is missing, unreadable or holds no certificate: the message names
/// the variable and the path.
pub fn redis_connect_options() -> Result<ConnectOptions, String> {
    let options = ConnectOptions::new().lazy(true);
    let Some(path) = std::env::var_os("REDIS_TLS_CA") else {
        return Ok(options);
    };
    let shown = std::path::Path::new(&path).display().to_string();
    let pem = std::fs::read(&path)
        .map_err(|e| format!("REDIS_TLS_CA={shown:?}: cannot read the file: {e}"))?;
    let tls = TlsOptions::new().ca_pem(pem);
    tls.validate()
        .map_err(|e| format!("REDIS_TLS_CA={shown:?}: {e}"))?;
    Ok(options.tls(tls))
}

/// `REDIS_TIMEOUT_MS`: whole milliseconds in [`REDIS_TIMEOUT_MS`], default the library's
/// (`RedisBackend::timeout`: 100 ms).
pub fn redis_timeout(get: Lookup<'_>) -> Result<Duration, String> {
    let Some(v) = get("REDIS_TIMEOUT_MS") else {
        return Ok(Duration::from_millis(100));
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
pub fn quota(
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

/// A whole number in `name`, or `default`, within `range`; the error says what it counts.
pub fn number<T>(
    get: Lookup<'_>,
    name: &str,
    default: T,
    range: std::ops::RangeInclusive<T>,
    what: &str,
) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
{
    let Some(v) = get(name) else {
        return Ok(default);
    };
    match v.trim().parse::<T>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(format!(
            "{name}={v:?} must be a whole number of {what} from {} to {}",
            range.start(),
            range.end()
        )),
    }
}

/// `TRUSTED_PROXIES` (CIDRs whose forwarding header is believed) and `FORWARDED_HEADER`
/// (`x-forwarded-for` or `forwarded`): the client address for rate limits.
pub fn client_ip(get: Lookup<'_>) -> Result<redis_guard::rate_limit::ClientIp, String> {
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

/// `LIMIT_ON_ERROR` (`open`, `closed` or `fallback`, the default) and `REPLICAS` (default 1, how
/// many instances share the limits): what the rate-limit layers do while Redis is unavailable.
pub fn failure_policy(get: Lookup<'_>) -> Result<redis_guard::rate_limit::FailurePolicy, String> {
    use redis_guard::rate_limit::FailurePolicy;
    // Checked whatever the policy, so a typo is found before the day Redis fails.
    let replicas = match get("REPLICAS") {
        None => 1,
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) if n >= 1 => n,
            _ => {
                return Err(format!(
                    "REPLICAS={v:?} must be a whole number of instances, at least 1"
                ));
            }
        },
    };
    match get("LIMIT_ON_ERROR")
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        Some("open") => Ok(FailurePolicy::Open),
        Some("closed") => Ok(FailurePolicy::Closed),
        None | Some("fallback") => {
            FailurePolicy::fallback(replicas).map_err(|e| format!("REPLICAS: {e}"))
        }
        Some(_) => Err(format!(
            "LIMIT_ON_ERROR={:?} must be open, closed or fallback",
            get("LIMIT_ON_ERROR").unwrap_or_default()
        )),
    }
}

/// `SESSION_IDLE` (default `30m`) and `SESSION_MAX` (default `24h`): positive, at most
/// [`MAX_DURATION`], idle no longer than max.
pub fn session_lifetimes(get: Lookup<'_>) -> Result<(Duration, Duration), String> {
    let idle = duration(get, "SESSION_IDLE", "30m", MAX_DURATION)?;
    let max = duration(get, "SESSION_MAX", "24h", MAX_DURATION)?;
    if idle > max {
        return Err(format!(
            "SESSION_IDLE ({idle:?}) is longer than SESSION_MAX ({max:?})"
        ));
    }
    Ok((idle, max))
}

/// `BIND`: the socket address to listen on, `default` when unset.
pub fn bind(get: Lookup<'_>, default: &str) -> Result<std::net::SocketAddr, String> {
    let Some(v) = get("BIND") else {
        return default
            .parse()
            .map_err(|e| format!("the default BIND {default:?}: {e}"));
    };
    v.trim()
        .parse()
        .map_err(|e| format!("BIND={v:?} is not a socket address like {default}: {e}"))
}

/// An example's `main`: logs to stderr (`RUST_LOG`, default `info`), runs `app`, and turns its
/// error into one line naming `name` and exit code 2.
pub async fn main_of(
    name: &str,
    app: impl std::future::Future<Output = Result<(), String>>,
) -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match app.await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failure_policy_defaults_to_fallback_and_refuses_bad_values() {
        use redis_guard::rate_limit::FailurePolicy;
        let policy = |vars: &[(&str, &str)]| {
            failure_policy(&|name| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            })
        };
        assert_eq!(
            policy(&[]),
            FailurePolicy::fallback(1).map_err(|e| e.to_string())
        );
        assert_eq!(
            policy(&[("LIMIT_ON_ERROR", "Fallback"), ("REPLICAS", " 3 ")]),
            FailurePolicy::fallback(3).map_err(|e| e.to_string())
        );
        assert_eq!(
            policy(&[("LIMIT_ON_ERROR", "open")]),
            Ok(FailurePolicy::Open)
        );
        assert_eq!(
            policy(&[("LIMIT_ON_ERROR", "closed")]),
            Ok(FailurePolicy::Closed)
        );
        for (vars, starts) in [
            (
                &[("LIMIT_ON_ERROR", "fail-open")][..],
                "LIMIT_ON_ERROR=\"fail-open\" must be",
            ),
            (&[("REPLICAS", "0")][..], "REPLICAS=\"0\" must be"),
            (&[("REPLICAS", "-2")][..], "REPLICAS=\"-2\" must be"),
            (
                &[("LIMIT_ON_ERROR", "open"), ("REPLICAS", "two")][..],
                "REPLICAS=\"two\" must be",
            ),
        ] {
            let e = policy(vars).unwrap_err();
            assert!(e.starts_with(starts), "{e}");
        }
    }

    #[test]
    fn durations_are_humantime_bounded_and_name_the_variable() {
        let max = Duration::from_secs(86_400);
        let ok = |v: &str| parse_duration("X", v, max).unwrap().as_secs();
        assert_eq!(ok("90s"), 90);
        assert_eq!(ok(" 30m "), 1800);
        assert_eq!(ok("24h"), 86_400);
        assert_eq!(ok("1h 30m"), 5400);
        assert_eq!(ok("1.5h"), 5400);
        assert_eq!(ok("1day"), 86_400);
        for (v, why) in [
            ("0s", "must be positive"),
            ("1500ms", "must be whole seconds"),
            ("25h", "is too long: at most 86400s"),
            ("18446744073709551615d", "is too long"),
            ("30x", "is not a duration"),
            ("30", "is not a duration"),
            ("m", "is not a duration"),
        ] {
            let e = parse_duration("X", v, max).unwrap_err();
            assert!(e.starts_with(&format!("X={v:?} {why}")), "{e}");
        }
    }
}
