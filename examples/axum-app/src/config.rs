//! Configuration from the environment (design §6).

use std::net::SocketAddr;
use std::time::Duration;

use redis_guard::rate_limit::{ClientIp, ForwardedHeader, Quota};

/// Where the limiter keeps its state.
#[derive(Clone, Debug)]
pub(crate) enum Store {
    /// In this process (`REDIS_URL` unset).
    Memory,
    /// A single Redis.
    Redis(String),
    /// A Redis Cluster (`REDIS_CLUSTER_NODES`).
    Cluster(Vec<String>),
}

#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) bind: SocketAddr,
    pub(crate) store: Store,
    pub(crate) api_limit: Quota,
    pub(crate) calls_limit: Quota,
    pub(crate) redis_timeout: Duration,
    pub(crate) client_ip: ClientIp,
    pub(crate) login_limit: Quota,
    pub(crate) cookie_secure: bool,
    pub(crate) session_idle: Duration,
    pub(crate) session_max: Duration,
}

/// `30m`, `24h`, `90s`, `7d`.
fn parse_duration(name: &str, v: &str) -> Result<Duration, String> {
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
    n.checked_mul(secs)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{name}={v:?} is too long"))
}

impl Config {
    /// Reads the environment; the error names the variable and what is wrong with it.
    pub(crate) fn from_env() -> Result<Self, String> {
        Self::from_lookup(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
    }

    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let bind = match get("BIND") {
            Some(v) => v.trim().parse().map_err(|e| {
                format!("BIND={v:?} is not a socket address like 127.0.0.1:3000: {e}")
            })?,
            None => SocketAddr::from(([127, 0, 0, 1], 3000)),
        };
        let store = if let Some(nodes) = get("REDIS_CLUSTER_NODES") {
            let nodes: Vec<String> = nodes
                .split(',')
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect();
            if nodes.is_empty() {
                return Err("REDIS_CLUSTER_NODES is empty: expected host:port,host:port,…".into());
            }
            Store::Cluster(nodes)
        } else if let Some(url) = get("REDIS_URL") {
            Store::Redis(url.trim().to_owned())
        } else {
            Store::Memory
        };
        let quota = |name: &str, default: &str| -> Result<Quota, String> {
            let v = get(name).unwrap_or_else(|| default.to_owned());
            v.parse()
                .map_err(|e| format!("{name}={v:?} is not a quota: {e}"))
        };
        let redis_timeout = match get("REDIS_TIMEOUT_MS") {
            Some(v) => Duration::from_millis(v.trim().parse().map_err(|_| {
                format!("REDIS_TIMEOUT_MS={v:?} is not a whole number of milliseconds")
            })?),
            None => redis_guard::rate_limit::DEFAULT_TIMEOUT,
        };
        let forwarded_header: ForwardedHeader = match get("FORWARDED_HEADER") {
            Some(v) => v
                .parse()
                .map_err(|e| format!("FORWARDED_HEADER={v:?}: {e}"))?,
            None => ForwardedHeader::XForwardedFor,
        };
        let client_ip = match get("TRUSTED_PROXIES") {
            Some(cidrs) => {
                ClientIp::trusted_proxies(cidrs.split(',').map(str::trim).filter(|c| !c.is_empty()))
                    .map_err(|e| format!("TRUSTED_PROXIES={cidrs:?}: {e}"))?
                    .forwarded_header(forwarded_header)
            }
            None => ClientIp::peer(),
        };
        let cookie_secure = match get("COOKIE_SECURE").as_deref().map(str::trim) {
            None | Some("true" | "1") => true,
            Some("false" | "0") => false,
            Some(v) => return Err(format!("COOKIE_SECURE={v:?} must be true or false")),
        };
        let duration = |name: &str, default: &str| {
            parse_duration(name, &get(name).unwrap_or_else(|| default.to_owned()))
        };
        let session_idle = duration("SESSION_IDLE", "30m")?;
        let session_max = duration("SESSION_MAX", "24h")?;
        if session_idle > session_max {
            return Err(format!(
                "SESSION_IDLE ({session_idle:?}) is longer than SESSION_MAX ({session_max:?})"
            ));
        }
        Ok(Self {
            bind,
            client_ip,
            login_limit: quota("LOGIN_LIMIT", "5/minute")?,
            cookie_secure,
            session_idle,
            session_max,
            store,
            api_limit: quota("API_LIMIT", "60/minute")?,
            calls_limit: quota("CALLS_LIMIT", "5/minute")?,
            redis_timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Config, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::from_lookup(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_follow_the_design() {
        let c = with(&[]).unwrap();
        assert_eq!(c.bind, "127.0.0.1:3000".parse().unwrap());
        assert!(matches!(c.store, Store::Memory));
        assert_eq!(c.api_limit, Quota::per_minute(60));
        assert_eq!(c.calls_limit, Quota::per_minute(5));
        assert_eq!(c.login_limit, Quota::per_minute(5));
        assert!(c.cookie_secure);
        assert_eq!(c.session_idle, Duration::from_secs(1800));
        assert_eq!(c.session_max, Duration::from_secs(86_400));
    }

    #[test]
    fn cluster_wins_over_url_and_errors_name_the_variable() {
        let c = with(&[
            ("REDIS_URL", "redis://a/"),
            ("REDIS_CLUSTER_NODES", "a:1, b:2"),
        ])
        .unwrap();
        assert!(matches!(c.store, Store::Cluster(ref n) if n == &["a:1", "b:2"]));
        let e = with(&[("API_LIMIT", "abc")]).unwrap_err();
        assert!(e.starts_with("API_LIMIT=\"abc\""), "{e}");
        let e = with(&[("BIND", "nope")]).unwrap_err();
        assert!(e.starts_with("BIND="), "{e}");
        let e = with(&[("TRUSTED_PROXIES", "10.0.0.0/8, 300.1.1.1")]).unwrap_err();
        assert!(
            e.starts_with("TRUSTED_PROXIES=") && e.contains("300.1.1.1"),
            "{e}"
        );
        assert!(with(&[("TRUSTED_PROXIES", "10.0.0.0/8, ::1")]).is_ok());
        assert!(with(&[("FORWARDED_HEADER", "Forwarded")]).is_ok());
        let e = with(&[("FORWARDED_HEADER", "x-real-ip")]).unwrap_err();
        assert!(e.starts_with("FORWARDED_HEADER=\"x-real-ip\""), "{e}");
        assert!(
            with(&[("SESSION_IDLE", "30x")])
                .unwrap_err()
                .starts_with("SESSION_IDLE=")
        );
        assert!(with(&[("SESSION_IDLE", "2h"), ("SESSION_MAX", "1h")]).is_err());
        assert!(with(&[("COOKIE_SECURE", "maybe")]).is_err());
        assert!(!with(&[("COOKIE_SECURE", "false")]).unwrap().cookie_secure);
    }
}
