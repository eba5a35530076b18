//! Configuration from the environment: every setting, its default, and the checks that refuse a
//! bad value when the app starts.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use redis_guard::rate_limit::{ClientIp, FailurePolicy, Mode, Quota};

use crate::stores::StoreSettings;
use example_shared::login::{LoginRules, normalize_username};
use example_shared::serve::Limits;
use example_shared::settings::{self, Lookup};

/// Where the limiter keeps its state.
#[derive(Clone, Debug)]
pub(crate) enum Store {
    /// In this process (`REDIS_URL` unset).
    Memory,
    /// A single Redis.
    Redis(String),
    /// A Redis Cluster (`REDIS_CLUSTER_NODES`).
    Cluster(Vec<String>),
    /// The primary that Redis Sentinels name (`REDIS_SENTINEL`, `REDIS_SENTINEL_MASTER`).
    Sentinel {
        /// The sentinels' `host:port`s.
        sentinels: Vec<String>,
        /// The master name, or `redis://[user:password@]name[/db]`.
        master: String,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) bind: SocketAddr,
    pub(crate) store: Store,
    pub(crate) api_limit: Quota,
    /// `API_PRO_LIMIT`: the `/api/*` quota of callers on the pro plan (`PRO_USERS`).
    pub(crate) api_pro_limit: Quota,
    /// `PRO_USERS`: the users (normalized as they log in) on the pro plan.
    pub(crate) pro_users: Arc<HashSet<String>>,
    /// `SLOW_LIMIT`: `GET /slow/{n}` requests per client IP.
    pub(crate) slow_limit: Quota,
    /// `SESSION_CREATE_LIMIT`: requests per client IP to the routes that start anonymous
    /// sessions (`GET /csrf`, `POST /logout`).
    pub(crate) session_create_limit: Quota,
    /// `METRICS_BIND`: a second address serving `GET /metrics` without the admin token.
    pub(crate) metrics_bind: Option<SocketAddr>,
    /// `API_LIMIT_MODE`: how the `/api/*` rule acts on its verdict.
    pub(crate) api_mode: Mode,
    /// `API_CANDIDATE_LIMIT`: a quota tried in shadow beside `API_LIMIT`.
    pub(crate) api_candidate: Option<Quota>,
    /// `API_THROTTLE_MAX_WAIT`: `/api/*` requests over the limit by at most this wait are held
    /// until their slot instead of answered `429` (`Rule::throttle`); unset: off.
    pub(crate) api_throttle: Option<Duration>,
    pub(crate) calls_limit: Quota,
    /// `REPORT_CONCURRENCY`: `/report` requests in flight per user or IP.
    pub(crate) report_concurrency: u32,
    /// `REPORT_LEASE_EXPIRY_MS`: how long a `/report` lease outlives a crashed instance.
    pub(crate) report_lease_expiry: Duration,
    /// `LIMIT_ON_ERROR` and `REPLICAS`: the rate-limit layers' answer while Redis is down.
    pub(crate) limit_on_error: FailurePolicy,
    pub(crate) redis_timeout: Duration,
    pub(crate) client_ip: ClientIp,
    pub(crate) login: LoginRules,
    pub(crate) cookie_secure: bool,
    pub(crate) session_idle: Duration,
    pub(crate) session_max: Duration,
    /// The server's timeouts and connection cap (`shared/serve.rs`).
    pub(crate) server: Limits,
    /// `CACHE_TTL`, `CACHE_STALE_IF_ERROR`, `PAYMENTS_DELAY_MS`, `PAYMENTS_LIMIT`
    /// (`stores.rs`).
    pub(crate) stores: StoreSettings,
    /// `API_TOTAL_LIMIT` and `API_RESERVE_PRO`: the whole `/api/*` budget of the app, all
    /// callers together, and the share of it kept for the pro plan.
    pub(crate) api_total: Option<(Quota, Option<f64>)>,
}

/// `REDIS_SENTINEL` (`host:port,host:port,…`) and `REDIS_SENTINEL_MASTER` (the name): both or
/// neither.
fn sentinel(get: Lookup<'_>) -> Result<Option<Store>, String> {
    let master = get("REDIS_SENTINEL_MASTER").map(|m| m.trim().to_owned());
    let Some(list) = get("REDIS_SENTINEL") else {
        return match master {
            Some(_) => Err(
                "REDIS_SENTINEL_MASTER is set without REDIS_SENTINEL (host:port,host:port,…)"
                    .into(),
            ),
            None => Ok(None),
        };
    };
    let mut sentinels = Vec::new();
    for addr in list.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let port = addr
            .rsplit_once(':')
            .map(|(host, port)| (host, port.parse::<u16>()));
        if !matches!(port, Some((host, Ok(p))) if !host.is_empty() && p != 0) {
            return Err(format!(
                "REDIS_SENTINEL={list:?}: {addr:?} is not host:port"
            ));
        }
        sentinels.push(addr.to_owned());
    }
    if sentinels.is_empty() {
        return Err("REDIS_SENTINEL is empty: expected host:port,host:port,…".into());
    }
    match master {
        Some(master) if !master.is_empty() => Ok(Some(Store::Sentinel { sentinels, master })),
        _ => Err(
            "REDIS_SENTINEL is set: REDIS_SENTINEL_MASTER must name the master (e.g. mymaster)"
                .into(),
        ),
    }
}

impl Config {
    /// Reads the environment; the error names the variable and what is wrong with it.
    pub(crate) fn from_env() -> Result<Self, String> {
        Self::from_lookup(&settings::from_process_env)
    }

    pub(crate) fn from_lookup(get: Lookup<'_>) -> Result<Self, String> {
        let bind = settings::bind(get, "127.0.0.1:3000")?;
        let store = if let Some(nodes) = get("REDIS_CLUSTER_NODES") {
            let nodes: Vec<String> = nodes
                .split(',')
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect();
            if nodes.is_empty() {
                return Err("REDIS_CLUSTER_NODES is empty: expected host:port,host:port,…".into());
            }
            if get("REDIS_SENTINEL").is_some() {
                return Err(
                    "REDIS_CLUSTER_NODES and REDIS_SENTINEL are both set: choose one".into(),
                );
            }
            Store::Cluster(nodes)
        } else if let Some(store) = sentinel(get)? {
            store
        } else if let Some(url) = get("REDIS_URL") {
            Store::Redis(url.trim().to_owned())
        } else {
            Store::Memory
        };
        let redis_timeout = settings::redis_timeout(get)?;
        let client_ip = settings::client_ip(get)?;
        let server = Limits::from_env(get)?;
        let metrics_bind = get("METRICS_BIND")
            .map(|v| {
                v.trim().parse().map_err(|e| {
                    format!("METRICS_BIND={v:?} is not a socket address like 127.0.0.1:9100: {e}")
                })
            })
            .transpose()?;
        let cookie_secure = match get("COOKIE_SECURE").as_deref().map(str::trim) {
            None | Some("true" | "1") => true,
            Some("false" | "0") => false,
            Some(v) => return Err(format!("COOKIE_SECURE={v:?} must be true or false")),
        };
        let (session_idle, session_max) = settings::session_lifetimes(get)?;
        let report_concurrency = match get("REPORT_CONCURRENCY") {
            None => 2,
            Some(v) => v
                .trim()
                .parse()
                .ok()
                .filter(|n: &u32| *n > 0)
                .ok_or_else(|| format!("REPORT_CONCURRENCY={v:?} must be a whole number ≥ 1"))?,
        };
        let report_lease_expiry = match get("REPORT_LEASE_EXPIRY_MS") {
            // The library's default (`Rule::lease_expiry`).
            None => Duration::from_secs(30),
            Some(v) => v
                .trim()
                .parse()
                .ok()
                .filter(|ms: &u64| (1..=86_400_000).contains(ms))
                .map(Duration::from_millis)
                .ok_or_else(|| {
                    format!("REPORT_LEASE_EXPIRY_MS={v:?} must be 1 to 86400000 milliseconds")
                })?,
        };
        Ok(Self {
            report_concurrency,
            report_lease_expiry,
            bind,
            client_ip,
            login: LoginRules::from_env(get)?,
            cookie_secure,
            session_idle,
            session_max,
            store,
            api_limit: settings::quota(get, "API_LIMIT", "60/minute")?,
            api_pro_limit: settings::quota(get, "API_PRO_LIMIT", "600/minute")?,
            pro_users: Arc::new(pro_users(get)?),
            slow_limit: settings::quota(get, "SLOW_LIMIT", "30/minute")?,
            session_create_limit: settings::quota(get, "SESSION_CREATE_LIMIT", "30/minute")?,
            metrics_bind,
            api_mode: match get("API_LIMIT_MODE")
                .map(|v| v.trim().to_ascii_lowercase())
                .as_deref()
            {
                None | Some("enforce") => Mode::Enforce,
                Some("shadow") => Mode::Shadow,
                Some("soft") => Mode::Soft,
                Some(other) => {
                    return Err(format!(
                        "API_LIMIT_MODE={other:?} must be enforce, shadow or soft"
                    ));
                }
            },
            api_candidate: get("API_CANDIDATE_LIMIT")
                .map(|_| settings::quota(get, "API_CANDIDATE_LIMIT", ""))
                .transpose()?,
            api_throttle: get("API_THROTTLE_MAX_WAIT")
                .map(|v| {
                    settings::parse_duration("API_THROTTLE_MAX_WAIT", &v, Duration::from_secs(3600))
                })
                .transpose()?,
            calls_limit: settings::quota(get, "CALLS_LIMIT", "5/minute")?,
            limit_on_error: settings::failure_policy(get)?,
            redis_timeout,
            server,
            stores: StoreSettings::from_lookup(get)?,
            api_total: api_total(get)?,
        })
    }
}

/// `API_TOTAL_LIMIT` (unset: none) and `API_RESERVE_PRO` (unset: no reserve), a share such as
/// `10%`, of the total, which is then required: the budget it keeps a share of.
fn api_total(get: Lookup<'_>) -> Result<Option<(Quota, Option<f64>)>, String> {
    let reserve = get("API_RESERVE_PRO")
        .map(|v| {
            v.trim()
                .strip_suffix('%')
                .and_then(|n| n.trim().parse::<f64>().ok())
                .filter(|n| *n > 0.0 && *n < 100.0)
                .map(|n| n / 100.0)
                .ok_or_else(|| {
                    format!(
                        "API_RESERVE_PRO={v:?} must be a share such as 10%, above 0% and below 100%"
                    )
                })
        })
        .transpose()?;
    if get("API_TOTAL_LIMIT").is_none() {
        return match reserve {
            Some(_) => Err("API_RESERVE_PRO needs API_TOTAL_LIMIT: the /api/* budget of every caller together, of which it keeps a share for the pro plan".into()),
            None => Ok(None),
        };
    }
    Ok(Some((
        settings::quota(get, "API_TOTAL_LIMIT", "")?,
        reserve,
    )))
}

/// `PRO_USERS`: comma-separated usernames, each normalized as `POST /login` does.
fn pro_users(get: Lookup<'_>) -> Result<HashSet<String>, String> {
    let Some(v) = get("PRO_USERS") else {
        return Ok(HashSet::new());
    };
    v.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| {
            normalize_username(u).ok_or_else(|| {
                format!("PRO_USERS={v:?}: {u:?} is not a username ([A-Za-z0-9_.-]{{1,64}})")
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Config, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::from_lookup(&|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn the_defaults_are_the_readme_s() {
        let c = with(&[]).unwrap();
        assert_eq!(c.bind, "127.0.0.1:3000".parse().unwrap());
        assert!(matches!(c.store, Store::Memory));
        assert_eq!(c.api_limit, Quota::per_minute(60));
        assert_eq!(c.api_pro_limit, Quota::per_minute(600));
        assert_eq!(c.calls_limit, Quota::per_minute(5));
        assert_eq!(c.limit_on_error, FailurePolicy::default());
        assert_eq!(c.api_mode, Mode::Enforce);
        assert_eq!(c.api_candidate, None);
        assert_eq!(c.api_throttle, None);
        assert_eq!(c.login.pair_quota(), Quota::per_minute(5));
        assert!(c.cookie_secure);
        assert_eq!(c.session_idle, Duration::from_secs(1800));
        assert_eq!(c.session_max, Duration::from_secs(86_400));
        assert_eq!(c.server.header_read_timeout, Duration::from_secs(10));
        assert_eq!(c.server.max_connections, 1024);
        assert_eq!(c.server.max_connections_per_ip, 256);
        assert!(c.pro_users.is_empty());
        assert_eq!(c.slow_limit, Quota::per_minute(30));
        assert_eq!(c.session_create_limit, Quota::per_minute(30));
        assert_eq!(c.metrics_bind, None);
        assert_eq!(c.report_concurrency, 2);
        assert_eq!(c.report_lease_expiry, Duration::from_secs(30));
        assert_eq!(c.api_total, None);
    }

    #[test]
    fn the_pro_reserve_is_a_share_of_the_total() {
        let c = with(&[
            ("API_TOTAL_LIMIT", "100/minute"),
            ("API_RESERVE_PRO", " 10% "),
        ])
        .unwrap();
        assert_eq!(c.api_total, Some((Quota::per_minute(100), Some(0.1))));
        let c = with(&[("API_TOTAL_LIMIT", "100/minute")]).unwrap();
        assert_eq!(c.api_total, Some((Quota::per_minute(100), None)));
        for bad in ["10", "0%", "100%", "-5%", "ten%", "%"] {
            let e =
                with(&[("API_TOTAL_LIMIT", "100/minute"), ("API_RESERVE_PRO", bad)]).unwrap_err();
            assert!(e.starts_with(&format!("API_RESERVE_PRO={bad:?}")), "{e}");
        }
        let e = with(&[("API_RESERVE_PRO", "10%")]).unwrap_err();
        assert!(e.contains("needs API_TOTAL_LIMIT"), "{e}");
    }

    #[test]
    fn the_new_limits_and_addresses_are_checked() {
        let c = with(&[
            ("PRO_USERS", " Carol, bob.k ,"),
            ("METRICS_BIND", "127.0.0.1:9100"),
            ("SLOW_LIMIT", "5/10s"),
            ("API_THROTTLE_MAX_WAIT", "2s"),
        ])
        .unwrap();
        assert_eq!(c.api_throttle, Some(Duration::from_secs(2)));
        let pro: Vec<&str> = {
            let mut v: Vec<&str> = c.pro_users.iter().map(String::as_str).collect();
            v.sort_unstable();
            v
        };
        assert_eq!(pro, ["bob.k", "carol"]);
        assert_eq!(c.metrics_bind, Some("127.0.0.1:9100".parse().unwrap()));
        for (name, bad) in [
            ("PRO_USERS", "carol, not a name"),
            ("METRICS_BIND", "9100"),
            ("SLOW_LIMIT", "lots"),
            ("SESSION_CREATE_LIMIT", "0/minute"),
            ("MAX_CONNECTIONS", "none"),
            ("MAX_CONNECTIONS_PER_IP", "0"),
            ("MAX_CONNECTIONS_PER_IP", "1025"),
            ("API_THROTTLE_MAX_WAIT", "0s"),
            ("API_THROTTLE_MAX_WAIT", "soon"),
        ] {
            let e = with(&[(name, bad)]).unwrap_err();
            assert!(e.starts_with(&format!("{name}={bad:?}")), "{e}");
        }
    }

    #[test]
    fn report_settings_are_checked() {
        let c = with(&[
            ("REPORT_CONCURRENCY", "5"),
            ("REPORT_LEASE_EXPIRY_MS", "1500"),
        ])
        .unwrap();
        assert_eq!(c.report_concurrency, 5);
        assert_eq!(c.report_lease_expiry, Duration::from_millis(1500));
        for bad in ["0", "-1", "two", ""] {
            let e = with(&[("REPORT_CONCURRENCY", bad)]).unwrap_err();
            assert!(e.starts_with("REPORT_CONCURRENCY="), "{e}");
        }
        for bad in ["0", "86400001", "1.5", "soon"] {
            let e = with(&[("REPORT_LEASE_EXPIRY_MS", bad)]).unwrap_err();
            assert!(e.starts_with("REPORT_LEASE_EXPIRY_MS="), "{e}");
        }
    }

    #[test]
    fn sentinel_needs_addresses_and_a_master_name() {
        let c = with(&[
            ("REDIS_URL", "redis://a/"),
            ("REDIS_SENTINEL", "a:26379, b:26380"),
            ("REDIS_SENTINEL_MASTER", " mymaster "),
        ])
        .unwrap();
        assert!(
            matches!(c.store, Store::Sentinel { ref sentinels, ref master }
            if sentinels == &["a:26379", "b:26380"] && master == "mymaster")
        );
        for bad in [
            &[("REDIS_SENTINEL", "a:1")][..],
            &[("REDIS_SENTINEL", "a:1"), ("REDIS_SENTINEL_MASTER", " ")],
            &[("REDIS_SENTINEL_MASTER", "m")],
            &[("REDIS_SENTINEL", " , "), ("REDIS_SENTINEL_MASTER", "m")],
            &[("REDIS_SENTINEL", "a:1,b"), ("REDIS_SENTINEL_MASTER", "m")],
            &[("REDIS_SENTINEL", "a:x"), ("REDIS_SENTINEL_MASTER", "m")],
            &[("REDIS_SENTINEL", ":1"), ("REDIS_SENTINEL_MASTER", "m")],
            &[
                ("REDIS_SENTINEL", "a:1"),
                ("REDIS_SENTINEL_MASTER", "m"),
                ("REDIS_CLUSTER_NODES", "a:2"),
            ],
        ] {
            let e = with(bad).unwrap_err();
            assert!(e.contains("REDIS_SENTINEL"), "{bad:?}: {e}");
        }
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
        assert_eq!(
            with(&[("API_LIMIT_MODE", " Shadow")]).unwrap().api_mode,
            Mode::Shadow
        );
        let e = with(&[("API_LIMIT_MODE", "off")]).unwrap_err();
        assert!(e.starts_with("API_LIMIT_MODE=\"off\""), "{e}");
        let c = with(&[("API_CANDIDATE_LIMIT", "30/minute")]).unwrap();
        assert_eq!(c.api_candidate, Some(Quota::per_minute(30)));
        let e = with(&[("API_CANDIDATE_LIMIT", "lots")]).unwrap_err();
        assert!(e.starts_with("API_CANDIDATE_LIMIT="), "{e}");
        assert!(!with(&[("COOKIE_SECURE", "false")]).unwrap().cookie_secure);
    }

    #[test]
    fn durations_and_timeouts_are_bounded() {
        // 300000000 days overflowed the session expiry and broke every login.
        let e = with(&[("SESSION_MAX", "300000000d")]).unwrap_err();
        assert!(
            e.starts_with("SESSION_MAX=\"300000000d\" is too long"),
            "{e}"
        );
        let e = with(&[("SESSION_IDLE", "3651d"), ("SESSION_MAX", "3651d")]).unwrap_err();
        assert!(e.starts_with("SESSION_IDLE="), "{e}");
        let c = with(&[("SESSION_IDLE", "3650d"), ("SESSION_MAX", "3650d")]).unwrap();
        assert_eq!(c.session_max, settings::MAX_DURATION);
        assert!(
            with(&[("SESSION_MAX", "0s")])
                .unwrap_err()
                .starts_with("SESSION_MAX=")
        );
        assert!(with(&[("SESSION_MAX", "18446744073709551615d")]).is_err());
        // A zero timeout failed every decision: limiting silently off (or every login refused).
        for bad in ["0", "60001", "-1", "1.5", "abc"] {
            let e = with(&[("REDIS_TIMEOUT_MS", bad)]).unwrap_err();
            assert!(e.starts_with(&format!("REDIS_TIMEOUT_MS={bad:?}")), "{e}");
        }
        assert_eq!(
            with(&[("REDIS_TIMEOUT_MS", "1")]).unwrap().redis_timeout,
            Duration::from_millis(1)
        );
        assert_eq!(
            with(&[("REDIS_TIMEOUT_MS", "60000")])
                .unwrap()
                .redis_timeout,
            Duration::from_secs(60)
        );
    }
}
