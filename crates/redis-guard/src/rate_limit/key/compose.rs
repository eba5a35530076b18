//! Two extractors as one: [`KeyExtractorExt`] and the extractors it builds, [`And`] and [`Or`].

use http::request::Parts;

use super::digest::Key;
use super::error::KeyError;
use super::extractor::KeyExtractor;

/// Combinators for every [`KeyExtractor`]; import the trait to use them.
///
/// ```
/// use redis_guard::rate_limit::{ClientIp, ExtensionKey, Key, KeyExtractorExt};
///
/// #[derive(Clone)]
/// struct CurrentUser { id: u64 } // put into the extensions by your auth layer
///
/// // Per authenticated user when there is one, else per client IP (`Or` says why the first
/// // extractor must be one the client cannot invent).
/// let api = ExtensionKey::new(|u: &CurrentUser| Key::from(u.id)).or(ClientIp::peer());
/// // Both keys as one, e.g. client IP and a normalized username.
/// let both = ClientIp::peer().and(ExtensionKey::new(|u: &CurrentUser| Key::from(u.id)));
/// # let _ = (api, both);
/// ```
pub trait KeyExtractorExt: KeyExtractor + Sized {
    /// Both keys as one ([`Key::pair`]). Missing when either is missing; misconfigured when
    /// either is. See [`And`].
    #[must_use]
    fn and<B: KeyExtractor>(self, other: B) -> And<Self, B> {
        And {
            first: self,
            second: other,
        }
    }

    /// This extractor's key, or `other`'s when this one has none ([`KeyError::Missing`]);
    /// [`KeyError::Misconfigured`] is returned as is. See [`Or`].
    #[must_use]
    fn or<B: KeyExtractor>(self, other: B) -> Or<Self, B> {
        Or {
            first: self,
            second: other,
        }
    }
}

impl<T: KeyExtractor> KeyExtractorExt for T {}

/// Both keys as one ([`Key::pair`]): built by [`KeyExtractorExt::and`].
///
/// The key is missing when either key is missing, and the extractor is misconfigured when either
/// is (misconfiguration wins over a missing key, so it is never hidden).
///
/// Login throttling per client IP *and* username: guessing one account from one address is
/// slowed down, while other users behind the same NAT keep their own budget. On its own this
/// key lets one address spray many usernames and many addresses attack one account: pair it
/// with a per-IP rule and a per-username rule in the same layer (see the example app's login).
///
/// ```
/// use redis_guard::rate_limit::{ClientIp, HeaderKey, Key, KeyError, KeyExtractor, KeyExtractorExt, PeerAddr};
///
/// let per_ip_and_user = ClientIp::peer()
///     .and(HeaderKey::new("x-username"));
///
/// let mut req = http::Request::post("/login").header("x-username", "alice").body(()).unwrap();
/// req.extensions_mut().insert(PeerAddr("203.0.113.7:50000".parse().unwrap()));
/// let (parts, ()) = req.into_parts();
/// assert_eq!(
///     per_ip_and_user.extract(&parts),
///     Ok(Key::pair(&Key::from("203.0.113.7"), &Key::from("alice"))),
/// );
///
/// let mut req = http::Request::post("/login").body(()).unwrap();
/// req.extensions_mut().insert(PeerAddr("203.0.113.7:50000".parse().unwrap()));
/// let (parts, ()) = req.into_parts();
/// assert_eq!(per_ip_and_user.extract(&parts), Err(KeyError::Missing));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct And<A, B> {
    first: A,
    second: B,
}

impl<A: KeyExtractor, B: KeyExtractor> KeyExtractor for And<A, B> {
    fn extract(&self, parts: &Parts) -> Result<Key, KeyError> {
        match (self.first.extract(parts), self.second.extract(parts)) {
            (Ok(a), Ok(b)) => Ok(Key::pair(&a, &b)),
            (Err(e @ KeyError::Misconfigured(_)), _) | (_, Err(e @ KeyError::Misconfigured(_))) => {
                Err(e)
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    }

    fn validate(&self) -> Result<(), crate::ConfigError> {
        self.first.validate()?;
        self.second.validate()
    }
}

/// The first extractor's key, or the second's when the first has none: built by
/// [`KeyExtractorExt::or`].
///
/// The first extractor must give keys a client cannot invent (an authenticated user, a verified
/// API key): `HeaderKey::new(..).or(ClientIp::peer())` is no limit at all against a client that
/// sends a new header value per request. See [`HeaderKey`](super::HeaderKey#a-header-is-what-the-client-says-it-is).
///
/// Only [`KeyError::Missing`] falls through to the second extractor; a misconfigured first
/// extractor is an error, not a reason to count requests differently. Both keys count in one
/// bucket space, so give them distinct shapes if they could collide (a user id `"7"` and an
/// address never do).
///
/// Per user when signed in, per client IP otherwise:
///
/// ```
/// use redis_guard::rate_limit::{ClientIp, ExtensionKey, Key, KeyExtractor, KeyExtractorExt, PeerAddr};
///
/// #[derive(Clone)]
/// struct CurrentUser { id: u64 }
///
/// let per_user_or_ip = ExtensionKey::new(|u: &CurrentUser| Key::from(format!("user:{}", u.id)))
///     .or(ClientIp::peer());
///
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(PeerAddr("203.0.113.7:50000".parse().unwrap()));
/// req.extensions_mut().insert(CurrentUser { id: 7 });
/// let (parts, ()) = req.into_parts();
/// assert_eq!(per_user_or_ip.extract(&parts), Ok(Key::from("user:7")));
///
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(PeerAddr("203.0.113.7:50000".parse().unwrap()));
/// let (parts, ()) = req.into_parts();
/// assert_eq!(per_user_or_ip.extract(&parts), Ok(Key::from("203.0.113.7")));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Or<A, B> {
    first: A,
    second: B,
}

impl<A: KeyExtractor, B: KeyExtractor> KeyExtractor for Or<A, B> {
    fn extract(&self, parts: &Parts) -> Result<Key, KeyError> {
        match self.first.extract(parts) {
            Err(KeyError::Missing) => self.second.extract(parts),
            other => other,
        }
    }

    fn validate(&self) -> Result<(), crate::ConfigError> {
        self.first.validate()?;
        self.second.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::super::global::Global;
    use super::*;

    /// Always misconfigured.
    struct Broken;

    impl KeyExtractor for Broken {
        fn extract(&self, _: &Parts) -> Result<Key, KeyError> {
            Err(KeyError::Misconfigured("broken"))
        }
    }

    fn missing(_: &Parts) -> Option<Key> {
        None
    }

    fn some(_: &Parts) -> Option<Key> {
        Some(Key::from("some"))
    }

    fn parts() -> Parts {
        http::Request::new(()).into_parts().0
    }

    #[test]
    fn and_pairs_keys() {
        let p = parts();
        assert_eq!(
            Global.and(some).extract(&p),
            Ok(Key::pair(&Key::from("global"), &Key::from("some")))
        );
        assert_ne!(Global.and(some).extract(&p), some.and(Global).extract(&p));
        assert_eq!(Global.and(missing).extract(&p), Err(KeyError::Missing));
        assert_eq!(missing.and(Global).extract(&p), Err(KeyError::Missing));
        assert_eq!(missing.and(missing).extract(&p), Err(KeyError::Missing));
        let broken = Err(KeyError::Misconfigured("broken"));
        assert_eq!(Broken.and(Global).extract(&p), broken);
        assert_eq!(Global.and(Broken).extract(&p), broken);
        assert_eq!(missing.and(Broken).extract(&p), broken);
        assert_eq!(Broken.and(missing).extract(&p), broken);
    }

    #[test]
    fn or_falls_back_on_missing_only() {
        let p = parts();
        assert_eq!(some.or(Global).extract(&p), Ok(Key::from("some")));
        assert_eq!(missing.or(Global).extract(&p), Ok(Key::from("global")));
        assert_eq!(missing.or(missing).extract(&p), Err(KeyError::Missing));
        let broken = Err(KeyError::Misconfigured("broken"));
        assert_eq!(Broken.or(Global).extract(&p), broken);
        assert_eq!(missing.or(Broken).extract(&p), broken);
        assert_eq!(some.or(Broken).extract(&p), Ok(Key::from("some")));
    }

    #[test]
    fn compositions_nest() {
        let p = parts();
        let nested = missing.or(some).and(Global.or(Broken));
        assert_eq!(
            nested.extract(&p),
            Ok(Key::pair(&Key::from("some"), &Key::from("global")))
        );
        let _debug = format!("{:?}", Global.and(Global).or(Global));
    }
}
