//! The key scheme: `<prefix>:{<user key, escaped>}:<algorithm code>:<fingerprint>`
//! (the code: each algorithm's [`RemoteForm::CODE`](ratelab_core::toolkit::RemoteForm::CODE); the fingerprint:
//! see [`RemoteForm::key_suffix`](ratelab_core::toolkit::RemoteForm::key_suffix)).
//!
//! The user key is the Redis Cluster hash tag, so every key of one user key
//! sits in one slot. Braces in it must never change which part is the tag,
//! so `{`, `}` and the escape character `%` are percent-encoded (`%7B`,
//! `%7D`, `%25`); every other byte, binary included, is kept as is. The
//! empty key becomes a lone `%`, which no escaped key can be: the tag is
//! never empty (Redis would hash the whole key then). The mapping is
//! injective: two user keys never share state.
//!
//! A user key longer than [`MAX_KEY_LEN`] bytes (before escaping) is
//! replaced by `%H` followed by the 40 lowercase hex digits of the SHA-1 of
//! its bytes, so that the memory a key takes in Redis is bounded whatever a
//! client sends. No escaped key contains `%H` (an escaped `%` is always
//! followed by `25`, `7B` or `7D`), so a hashed key never meets a short one;
//! two long keys share state only if SHA-1 collides.

/// The longest user key, in bytes, used as is in a Redis key; longer keys
/// are hashed (see [`redis_key`]).
pub const MAX_KEY_LEN: usize = 128;

/// The Redis key holding `key`'s state for `algorithm` (the algorithm's
/// [`key_suffix`](ratelab_core::toolkit::RemoteForm::key_suffix)), under `prefix`:
/// `<prefix>:{<user key>}:<algorithm>`, the rule every client in every
/// language follows byte for byte:
///
/// - in the prefix and the user key, `%`, `{` and `}` become `%25`, `%7B`
///   and `%7D`; every other byte, binary included, is kept as is. The braces
///   around the user key are then the Redis Cluster hash tag: every key of one
///   user key sits in one slot;
/// - the empty user key becomes a lone `%` (a hash tag is never empty);
/// - a user key longer than [`MAX_KEY_LEN`] (128) bytes, before escaping,
///   becomes `%H` followed by the 40 lowercase hex digits of the SHA-1 of its
///   raw bytes. No escaped key contains `%H`, so a hashed key never meets a
///   short one, and Redis memory per key is bounded.
///
/// ```
/// use ratelab_redis::redis_key;
/// assert_eq!(redis_key("ratelab", b"alice", "gcra"), b"ratelab:{alice}:gcra");
/// assert_eq!(redis_key("ratelab", b"{x}", "gcra"), b"ratelab:{%7Bx%7D}:gcra");
/// assert_eq!(redis_key("ratelab", b"", "gcra"), b"ratelab:{%}:gcra");
/// // Longer than 128 bytes: `%H` and the SHA-1 of the key, in hex.
/// assert_eq!(
///     redis_key("ratelab", &[b'a'; 129], "gcra"),
///     b"ratelab:{%Hd96debf1bdcbc896e6c134ea76e8141f40d78536}:gcra".to_vec(),
/// );
/// ```
pub fn redis_key(prefix: &str, key: &[u8], algorithm: impl AsRef<str>) -> Vec<u8> {
    let algorithm = algorithm.as_ref();
    let mut out =
        Vec::with_capacity(prefix.len() + key.len().min(MAX_KEY_LEN) + algorithm.len() + 8);
    // The prefix must not hold a brace either, or the tag would be in it.
    escape_into(&mut out, prefix.as_bytes());
    out.extend_from_slice(b":{");
    if key.is_empty() {
        out.push(b'%');
    } else if key.len() > MAX_KEY_LEN {
        out.extend_from_slice(b"%H");
        out.extend_from_slice(sha1_smol::Sha1::from(key).digest().to_string().as_bytes());
    } else {
        escape_into(&mut out, key);
    }
    out.extend_from_slice(b"}:");
    out.extend_from_slice(algorithm.as_bytes());
    out
}

fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        match b {
            b'%' => out.extend_from_slice(b"%25"),
            b'{' => out.extend_from_slice(b"%7B"),
            b'}' => out.extend_from_slice(b"%7D"),
            _ => out.push(b),
        }
    }
}

/// The hash tag Redis Cluster would hash for `key`: the bytes between the
/// first `{` and the next `}`, if non-empty; else the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_never_move_the_tag() {
        let keys: [&[u8]; 8] = [
            b"",
            b"%",
            b"{",
            b"}",
            b"{}",
            b"a}b{c",
            b"%7B",
            &[0xff, 0, b'}'],
        ];
        let mut seen = std::collections::HashSet::new();
        for key in keys {
            let redis = redis_key("pre{fix}", key, "gcra");
            let tag = hash_tag(&redis);
            assert!(!tag.is_empty());
            assert!(!tag.contains(&b'{') && !tag.contains(&b'}'));
            // The tag is exactly the escaped key.
            let expected = redis_key("", key, "")[2..].to_vec();
            assert_eq!(tag, &expected[..expected.len() - 2], "{key:?}");
            assert!(seen.insert(redis), "two keys share {key:?}");
        }
    }

    #[test]
    fn long_keys_are_hashed_and_never_meet_short_ones() {
        let long = vec![b'{'; MAX_KEY_LEN + 1];
        let hashed = redis_key("p", &long, "gcra");
        assert_eq!(hashed.len(), "p:{%H}:gcra".len() + 40);
        assert!(!hash_tag(&hashed).is_empty());
        // The longest key kept as is, and a short key spelling a hashed one.
        let kept = vec![b'a'; MAX_KEY_LEN];
        assert_eq!(
            redis_key("p", &kept, "x").len(),
            "p:{}:x".len() + MAX_KEY_LEN
        );
        let mut spelled = b"%H".to_vec();
        spelled.extend_from_slice(
            sha1_smol::Sha1::from(&long[..])
                .digest()
                .to_string()
                .as_bytes(),
        );
        assert_ne!(redis_key("p", &spelled, "gcra"), hashed);
    }
}
