//! What the Lua scripts do with numbers and text, done the same way here, so
//! that the module accepts the arguments the scripts accept and writes the
//! error messages they write, byte for byte.

/// 2^53: numbers at or above it are not exact in Lua's doubles.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// `stored(x)` of the prologue: finite, a non-negative integer below 2^53.
#[inline]
pub(crate) fn stored(x: f64) -> bool {
    x >= 0.0 && x.fract() == 0.0 && x < EXACT
}

/// `stored(x)` and the integer it holds.
#[inline]
pub(crate) fn stored_integer(x: f64) -> Option<u64> {
    // Exact: a non-negative integer below 2^53.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    stored(x).then_some(x as u64)
}

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

/// `show(raw)` of the prologue: at most 32 bytes of `raw`, in quotes, bytes
/// outside printable ASCII as `\xNN`, `...` inside the quotes when cut.
pub(crate) fn show(raw: &[u8]) -> String {
    format!("\"{}\"", show_bare(raw))
}

/// `show(raw)` without its quotes (how the scripts name a key).
pub(crate) fn show_bare(raw: &[u8]) -> String {
    let (head, cut) = if raw.len() > 32 {
        (&raw[..32], "...")
    } else {
        (raw, "")
    };
    let mut out = String::with_capacity(head.len() + 3);
    for &b in head {
        if (0x20..=0x7e).contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out.push_str(cut);
    out
}

/// `tostring(x)` of Lua 5.1: C's `%.14g`.
pub(crate) fn tostring(x: f64) -> String {
    if x.is_nan() {
        // glibc prints the sign of a NaN.
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_owned();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_owned();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    // %g takes the exponent of the %e form at precision 14 - 1.
    let scientific = format!("{x:.13e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("{:e} always writes an exponent");
    let exponent: i32 = exponent.parse().expect("a decimal exponent");
    if !(-4..14).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!(
            "{}e{sign}{:02}",
            strip_zeros(mantissa),
            exponent.unsigned_abs()
        );
    }
    let decimals = usize::try_from(13 - exponent).expect("exponent below 14");
    strip_zeros(&format!("{x:.decimals$}")).to_owned()
}

/// `1.500` -> `1.5`, `2.000` -> `2`: %g drops trailing zeros.
fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
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

    #[test]
    fn tostring_is_percent_14g() {
        assert_eq!(tostring(0.0), "0");
        assert_eq!(tostring(12.0), "12");
        assert_eq!(tostring(1.5), "1.5");
        assert_eq!(tostring(-3.25), "-3.25");
        assert_eq!(tostring(12_345_678_901_234.0), "12345678901234");
        assert_eq!(tostring(123_456_789_012_345.0), "1.2345678901234e+14");
        assert_eq!(tostring(1_700_000_000_000_000.0), "1.7e+15");
        assert_eq!(tostring(0.0001), "0.0001");
        assert_eq!(tostring(0.00001), "1e-05");
        assert_eq!(tostring(f64::INFINITY), "inf");
        assert_eq!(tostring(f64::NAN), "nan");
        assert_eq!(tostring(1e300), "1e+300");
    }

    #[test]
    fn show_escapes_and_cuts() {
        assert_eq!(show(b"abc"), "\"abc\"");
        assert_eq!(show(b"a\x00\xff"), "\"a\\x00\\xff\"");
        assert_eq!(show(&[b'x'; 40]), format!("\"{}...\"", "x".repeat(32)));
        assert_eq!(show_bare(b"k{1}"), "k{1}");
    }
}
