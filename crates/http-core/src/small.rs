//! [`SmallBytes`]: the keys a request builds (the client's, the limiter's),
//! in place when short, so that the common request allocates nothing.

use std::fmt;
use std::sync::Arc;

/// Bytes kept in place up to `N` (at most 255), shared on the heap past
/// that: a clone copies at most `N` bytes or counts a reference.
#[derive(Clone)]
pub(crate) enum SmallBytes<const N: usize> {
    Inline { len: u8, bytes: [u8; N] },
    Shared(Arc<[u8]>),
}

impl<const N: usize> SmallBytes<N> {
    /// The most bytes kept in place.
    pub(crate) const INLINE: usize = N;

    /// The concatenation of `parts`.
    pub(crate) fn concat(parts: &[&[u8]]) -> Self {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        match u8::try_from(len) {
            Ok(short) if len <= N => {
                let mut bytes = [0; N];
                let mut at = 0;
                for part in parts {
                    bytes[at..at + part.len()].copy_from_slice(part);
                    at += part.len();
                }
                SmallBytes::Inline { len: short, bytes }
            }
            _ => SmallBytes::Shared(parts.concat().into()),
        }
    }

    /// The first `len` of `bytes` (at most `N`), as they lie.
    pub(crate) fn in_place(bytes: [u8; N], len: usize) -> Self {
        let len = len.min(N);
        match u8::try_from(len) {
            Ok(len) => SmallBytes::Inline { len, bytes },
            Err(_) => SmallBytes::Shared(bytes[..len].into()),
        }
    }

    /// Kept in place (no heap).
    #[cfg(test)]
    pub(crate) fn is_inline(&self) -> bool {
        matches!(self, SmallBytes::Inline { .. })
    }
}

impl<const N: usize> std::ops::Deref for SmallBytes<N> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            SmallBytes::Inline { len, bytes } => &bytes[..usize::from(*len)],
            SmallBytes::Shared(bytes) => bytes,
        }
    }
}

impl<const N: usize> PartialEq for SmallBytes<N> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<const N: usize> Eq for SmallBytes<N> {}

impl<const N: usize> fmt::Debug for SmallBytes<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_place_up_to_n_shared_past_it() {
        for len in [0, 1, 7, 8, 9, 300] {
            let whole: Vec<u8> = (0..=u8::MAX).cycle().take(len).collect();
            let (a, b) = whole.split_at(len / 3);
            let key = SmallBytes::<8>::concat(&[a, b, b""]);
            assert_eq!(&*key, &whole[..], "{len}");
            assert_eq!(key.is_inline(), len <= 8, "{len}");
            assert_eq!(key.clone(), key);
        }
        let key = SmallBytes::<4>::in_place(*b"abcd", 2);
        assert_eq!((&*key, key.is_inline()), (&b"ab"[..], true));
        // A length past `N` keeps the `N` bytes there are.
        assert_eq!(&*SmallBytes::<4>::in_place(*b"abcd", 9), b"abcd");
    }
}
