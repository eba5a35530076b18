//! [`Few`]: a list that is most often one item long, kept without an allocation until it has
//! two.

/// A list that holds its first item inline: a request's checks, an evaluation's commits. One
/// rule per layer is the usual case, and a `Vec` of one costs an allocation per request.
#[derive(Debug, Default)]
pub(crate) enum Few<T> {
    #[default]
    None,
    One(T),
    Many(Vec<T>),
}

impl<T> Few<T> {
    pub(crate) fn push(&mut self, item: T) {
        // In place: only the second item moves the first out (the usual first push is one
        // write, not a list taken apart and put back).
        match self {
            Self::None => *self = Self::One(item),
            Self::Many(all) => all.push(item),
            Self::One(_) => {
                if let Self::One(first) = std::mem::take(self) {
                    *self = Self::Many(vec![first, item]);
                }
            }
        }
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        match self {
            Self::None => &[],
            Self::One(item) => std::slice::from_ref(item),
            Self::Many(all) => all,
        }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            Self::None => &mut [],
            Self::One(item) => std::slice::from_mut(item),
            Self::Many(all) => all,
        }
    }

    pub(crate) fn into_vec(self) -> Vec<T> {
        match self {
            Self::None => Vec::new(),
            Self::One(item) => vec![item],
            Self::Many(all) => all,
        }
    }
}

impl<T> FromIterator<T> for Few<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        let mut few = Self::None;
        items.into_iter().for_each(|item| few.push(item));
        few
    }
}

impl<T> IntoIterator for Few<T> {
    type Item = T;
    type IntoIter = std::iter::Chain<std::option::IntoIter<T>, std::vec::IntoIter<T>>;

    fn into_iter(self) -> Self::IntoIter {
        let (one, many) = match self {
            Self::None => (None, Vec::new()),
            Self::One(item) => (Some(item), Vec::new()),
            Self::Many(all) => (None, all),
        };
        one.into_iter().chain(many)
    }
}

#[cfg(test)]
mod tests {
    use super::Few;

    #[test]
    fn items_keep_their_order_past_the_first() {
        let mut few = Few::default();
        assert!(few.as_slice().is_empty());
        for n in 1..=4 {
            few.push(n);
            assert_eq!(few.as_slice(), (1..=n).collect::<Vec<_>>());
        }
        assert_eq!(few.into_iter().collect::<Vec<_>>(), [1, 2, 3, 4]);
        let mut one = Few::default();
        one.push("a");
        assert!(matches!(one, Few::One("a")));
        assert_eq!(one.into_vec(), ["a"]);
    }
}
