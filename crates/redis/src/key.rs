//! The key scheme: `<prefix>:{<user key, escaped>}:<algorithm code>`
//! (the codes: `fw`, `sl`, `sc`, `lm`, `lq`, `tb`, `gcra`).
//!
//! The user key is the Redis Cluster hash tag, so every key of one user key
//! sits in one slot. Braces in it must never change which part is the tag,
//! so `{`, `}` and the escape character `%` are percent-encoded (`%7B`,
//! `%7D`, `%25`); every other byte, binary included, is kept as is. The
//! empty key becomes a lone `%`, which no escaped key can be: the tag is
//! never empty (Redis would hash the whole key then). The mapping is
//! injective: two user keys never share state.

/// The Redis key holding `key`'s state for `algorithm`, under `prefix`.
///
/// ```
/// use ratelab_redis::redis_key;
/// assert_eq!(redis_key("ratelab", b"alice", "gcra"), b"ratelab:{alice}:gcra");
/// assert_eq!(redis_key("ratelab", b"{x}", "gcra"), b"ratelab:{%7Bx%7D}:gcra");
/// assert_eq!(redis_key("ratelab", b"", "gcra"), b"ratelab:{%}:gcra");
/// ```
pub fn redis_key(prefix: &str, key: &[u8], algorithm: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + key.len() + algorithm.len() + 8);
    // The prefix must not hold a brace either, or the tag would be in it.
    escape_into(&mut out, prefix.as_bytes());
    out.extend_from_slice(b":{");
    if key.is_empty() {
        out.push(b'%');
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
}
