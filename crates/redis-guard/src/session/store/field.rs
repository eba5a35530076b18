//! [`FieldChange`]: one atomic step on one field of a live session ([`Store::change_field`]),
//! and what it did.
//!
//! [`Store::change_field`]: super::Store::change_field

use std::collections::HashMap;

use crate::session::SessionError;

/// What [`Store::change_field`](super::Store::change_field) does to the field, in one atomic
/// step of the store that also marks the session used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FieldChange {
    /// Reads and deletes it.
    Take,
    /// Sets it to this text unless it holds one already.
    Ensure(String),
    /// Sets it to `new` if it holds exactly the text `expected` (`None`: if it is absent).
    Swap {
        expected: Option<String>,
        new: String,
    },
    /// Adds this to the integer it holds (0 when absent): `HINCRBY`.
    Increment(i64),
}

/// What a [`FieldChange`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FieldOutcome {
    /// Whether [`FieldChange::Swap`] found the expected text and set the field (`false` for the
    /// others).
    pub(crate) set: bool,
    /// [`Take`](FieldChange::Take): the text the field held (`None`: absent), now deleted.
    /// [`Ensure`](FieldChange::Ensure): the text it holds, the one that won. [`Swap`]: the text
    /// it holds afterwards, the new one or the one that did not match. [`Increment`]: the new
    /// integer.
    ///
    /// [`Swap`]: FieldChange::Swap
    /// [`Increment`]: FieldChange::Increment
    pub(crate) value: Option<String>,
}

impl FieldChange {
    /// The store operation's name, as metrics label it.
    #[cfg(feature = "metrics")]
    pub(crate) fn op(&self) -> &'static str {
        match self {
            Self::Take => "take",
            Self::Ensure(_) => "ensure",
            Self::Swap { .. } => "compare_and_set",
            Self::Increment(_) => "increment",
        }
    }

    /// Applies the change to the `field` of a session's `fields` (the memory store; the Redis
    /// store's scripts do the same).
    ///
    /// # Errors
    ///
    /// [`SessionError::NotAnInteger`]: an increment of a field that holds no integer, or past
    /// `i64`; nothing is written.
    pub(crate) fn apply(
        self,
        fields: &mut HashMap<String, String>,
        field: String,
    ) -> Result<FieldOutcome, SessionError> {
        let (set, value) = match self {
            Self::Take => (false, fields.remove(&field)),
            Self::Ensure(value) => (false, Some(fields.entry(field).or_insert(value).clone())),
            Self::Swap { expected, new } => {
                let current = fields.get(&field);
                if current == expected.as_ref() {
                    fields.insert(field, new.clone());
                    (true, Some(new))
                } else {
                    (false, current.cloned())
                }
            }
            Self::Increment(by) => {
                let next = incremented(fields.get(&field).map(String::as_str), by, &field)?;
                fields.insert(field, next.to_string());
                (false, Some(next.to_string()))
            }
        };
        Ok(FieldOutcome { set, value })
    }
}

/// `current` (the text of integer `field`; `None`: absent, 0) plus `by`.
///
/// # Errors
///
/// [`SessionError::NotAnInteger`] when `current` is no integer or the sum leaves `i64`.
pub(crate) fn incremented(
    current: Option<&str>,
    by: i64,
    field: &str,
) -> Result<i64, SessionError> {
    let not_an_integer = || SessionError::NotAnInteger(field.to_owned());
    let current = match current {
        None => 0,
        Some(v) => v.parse::<i64>().map_err(|_| not_an_integer())?,
    };
    current.checked_add(by).ok_or_else(not_an_integer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_change_does_what_the_scripts_do() {
        let mut fields = HashMap::from([("a".to_owned(), "1".to_owned())]);
        let outcome = |set, value: Option<&str>| FieldOutcome {
            set,
            value: value.map(str::to_owned),
        };
        let swap = |expected: Option<&str>, new: &str| FieldChange::Swap {
            expected: expected.map(str::to_owned),
            new: new.to_owned(),
        };
        let ensure = |v: &str| FieldChange::Ensure(v.to_owned());
        for (change, field, want) in [
            (ensure("2"), "a", outcome(false, Some("1"))),
            (ensure("3"), "b", outcome(false, Some("3"))),
            (swap(Some("9"), "4"), "a", outcome(false, Some("1"))),
            (swap(Some("1"), "4"), "a", outcome(true, Some("4"))),
            (swap(None, "5"), "c", outcome(true, Some("5"))),
            (swap(None, "6"), "c", outcome(false, Some("5"))),
            (FieldChange::Take, "a", outcome(false, Some("4"))),
            (FieldChange::Take, "a", outcome(false, None)),
            (FieldChange::Increment(2), "n", outcome(false, Some("2"))),
            (FieldChange::Increment(-5), "n", outcome(false, Some("-3"))),
        ] {
            let got = change.clone().apply(&mut fields, field.to_owned());
            assert_eq!(got.unwrap(), want, "{change:?}");
        }
        // An increment of text, or past i64, writes nothing.
        fields.insert("t".into(), "x".into());
        for (field, by) in [("t", 1), ("n", i64::MIN)] {
            let err = FieldChange::Increment(by).apply(&mut fields, field.to_owned());
            assert!(matches!(err, Err(SessionError::NotAnInteger(f)) if f == field));
        }
        assert_eq!(
            fields,
            HashMap::from([
                ("b".into(), "3".into()),
                ("c".into(), "5".into()),
                ("n".into(), "-3".into()),
                ("t".into(), "x".into())
            ])
        );
    }
}
