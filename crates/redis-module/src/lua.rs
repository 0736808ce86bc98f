//! What the Lua scripts' prologue does with its arguments, done the same
//! way here, so that the module accepts the arguments the scripts accept.
//! (How the scripts read and word stored numbers is
//! [`ratelab_core::toolkit::remote::lua`]'s, shared with the algorithm crates.)

pub(crate) use ratelab_core::toolkit::remote::lua::{show, show_bare, stored_integer};

/// `tonumber(s)`: the number in `s`, surrounded by optional white space, as
/// C's `strtod` reads it (decimal, exponent, `inf`, `nan`). Lua also reads
/// hexadecimal (`0x10`) and stops at a NUL byte; the prologue's `integer`
/// refuses both, and so does this.
pub(crate) fn number(s: &[u8]) -> Option<f64> {
    // Rust's parser refuses white space inside, as strtod stops there.
    std::str::from_utf8(trim_c_space(s))
        .ok()?
        .parse::<f64>()
        .ok()
}

/// `s` without C's `isspace` bytes (ASCII white space and the vertical tab)
/// at either end.
fn trim_c_space(s: &[u8]) -> &[u8] {
    let is_space = |b: &u8| b.is_ascii_whitespace() || *b == 0x0b;
    let start = s.iter().position(|b| !is_space(b)).unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !is_space(b))
        .map_or(start, |e| e + 1);
    &s[start..end]
}

/// `integer(s)` of the prologue: a non-negative integer below 2^53 written
/// as Lua's `tonumber` reads it, or `None`.
#[inline]
pub(crate) fn integer(s: &[u8]) -> Option<u64> {
    // The common case, plain digits, without a float parse: sixteen digits
    // fit a u64, and a value below 2^53 is what the float parse would give.
    if !s.is_empty() && s.len() <= 16 && s.iter().all(u8::is_ascii_digit) {
        let n = s.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
        if n < 1 << 53 {
            return Some(n);
        }
    }
    stored_integer(number(s)?)
}

/// `math.ceil(micros / 1000)`: exact for every span the quotas allow.
#[inline]
pub(crate) fn ceil_millis(micros: u64) -> u64 {
    micros.div_ceil(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_as_the_prologue_reads_them() {
        assert_eq!(integer(b"0"), Some(0));
        assert_eq!(integer(b"123456789012345"), Some(123_456_789_012_345));
        assert_eq!(integer(b"9007199254740991"), Some(9_007_199_254_740_991));
        assert_eq!(integer(b"9007199254740992"), None);
        assert_eq!(integer(b"9007199254740993"), None);
        assert_eq!(integer(b"1700000000000003"), Some(1_700_000_000_000_003));
        assert_eq!(integer(b"0009007199254740"), Some(9_007_199_254_740));
        assert_eq!(integer(b" 12 "), Some(12));
        assert_eq!(integer(b"1e3"), Some(1000));
        assert_eq!(integer(b"12.0"), Some(12));
        assert_eq!(integer(b"+7"), Some(7));
        assert_eq!(integer(b"12.5"), None);
        assert_eq!(integer(b"-1"), None);
        assert_eq!(integer(b""), None);
        assert_eq!(integer(b"1 2"), None);
        assert_eq!(integer(b"nan"), None);
        assert_eq!(integer(b"inf"), None);
        assert_eq!(integer(b"abc"), None);
    }
}
