//! [`QueryKey`]: how the query string enters the cache key.

use std::sync::Arc;

/// How a [`CacheLayer`](super::CacheLayer) puts the query string in the key
/// ([`query`](super::CacheLayerBuilder::query)). Every spelling of a query is an entry of its
/// own and a run of the handler: `?a=1&b=2`, `?b=2&a=1` and `?a=1&b=2&utm=x` are three. A
/// normalized query makes them one, and the handler sees the normalized query (the request's
/// URI is rewritten before the lookup), so what it renders is always what the key says.
///
/// Parameters are compared by their name as sent (percent-encoded bytes, case-sensitive);
/// empty ones (`&&`) are dropped; repeated names keep their order.
///
/// ```
/// use redis_guard::cache::{CacheLayer, MemoryCacheStore, QueryKey};
///
/// // `/search?q=rust&page=2&utm_source=x` and `/search?page=2&q=rust` share one entry, and the
/// // handler sees `page=2&q=rust` for both.
/// let layer = CacheLayer::builder(MemoryCacheStore::new())
///     .query(QueryKey::only(["q", "page"]))
///     .build()?;
/// # let _ = layer;
/// # Ok::<(), redis_guard::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryKey(Mode);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Mode {
    Exact,
    Sorted,
    Only(Arc<[String]>),
}

impl QueryKey {
    /// The query as sent, byte for byte (the default).
    #[must_use]
    pub fn exact() -> Self {
        Self(Mode::Exact)
    }

    /// The parameters sorted by name.
    ///
    /// ```
    /// use redis_guard::cache::QueryKey;
    /// assert_ne!(QueryKey::sorted(), QueryKey::exact());
    /// ```
    #[must_use]
    pub fn sorted() -> Self {
        Self(Mode::Sorted)
    }

    /// Only the parameters named here, sorted by name; the others are dropped, from the key
    /// and from the request the handler sees.
    ///
    /// ```
    /// use redis_guard::cache::QueryKey;
    /// let key = QueryKey::only(["page"]);
    /// # let _ = key;
    /// ```
    #[must_use]
    pub fn only<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut names: Vec<String> = names.into_iter().map(Into::into).collect();
        names.sort();
        names.dedup();
        Self(Mode::Only(names.into()))
    }

    /// Bytes that tell this setting apart from any other, for the layer's namespace.
    pub(crate) fn describe(&self) -> String {
        match &self.0 {
            Mode::Exact => "exact".to_owned(),
            Mode::Sorted => "sorted".to_owned(),
            Mode::Only(names) => {
                let mut out = String::from("only");
                for n in names.iter() {
                    out.push('\0');
                    out.push_str(n);
                }
                out
            }
        }
    }

    /// The query as keyed (and as the handler sees it), or `None` to leave it as sent.
    pub(crate) fn normalize(&self, query: Option<&str>) -> Option<Option<String>> {
        let keep = match &self.0 {
            Mode::Exact => return None,
            Mode::Sorted => None,
            Mode::Only(names) => Some(names),
        };
        let mut pairs: Vec<&str> = query
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .filter(|p| {
                let name = p.split_once('=').map_or(*p, |(n, _)| n);
                keep.is_none_or(|names| names.binary_search_by(|k| k.as_str().cmp(name)).is_ok())
            })
            .collect();
        // Stable: repeated names keep their order.
        pairs.sort_by_key(|p| p.split_once('=').map_or(*p, |(n, _)| n));
        Some((!pairs.is_empty()).then(|| pairs.join("&")))
    }
}

impl Default for QueryKey {
    fn default() -> Self {
        Self::exact()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_normalize() {
        let sorted = QueryKey::sorted();
        assert_eq!(QueryKey::exact().normalize(Some("b=1&a=2")), None);
        assert_eq!(
            sorted.normalize(Some("b=1&a=2&&a=1&c")),
            Some(Some("a=2&a=1&b=1&c".to_owned()))
        );
        assert_eq!(sorted.normalize(None), Some(None));
        assert_eq!(sorted.normalize(Some("&&")), Some(None));
        let only = QueryKey::only(["page", "q", "q"]);
        assert_eq!(
            only.normalize(Some("utm=x&q=rust&page=2&qq=1&p%61ge=3")),
            Some(Some("page=2&q=rust".to_owned()))
        );
        assert_eq!(only.normalize(Some("utm=x")), Some(None));
        assert_ne!(only.describe(), QueryKey::only(["page"]).describe());
    }
}
