//! What the Lua scripts do with numbers and text, done the same way in
//! Rust, so that a state decoded here is refused with the very words the
//! scripts use (`corrupt state at <key>: <what>`), byte for byte.

/// 2^53: numbers at or above it are not exact in Lua's doubles.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// `stored(x)` of the prologue: finite, a non-negative integer below 2^53.
#[inline]
pub fn stored(x: f64) -> bool {
    x >= 0.0 && x.fract() == 0.0 && x < EXACT
}

/// `stored(x)` and the integer it holds.
#[inline]
pub fn stored_integer(x: f64) -> Option<u64> {
    // Exact: a non-negative integer below 2^53.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    stored(x).then_some(x as u64)
}

/// `x`, an integer below 2^53, as a double (exact).
#[inline]
#[allow(clippy::cast_precision_loss)]
pub fn double(x: u64) -> f64 {
    x as f64
}

/// `tostring(x)` of Lua 5.1: C's `%.14g`.
pub fn tostring(x: f64) -> String {
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

/// `show(raw)` of the prologue: at most 32 bytes of `raw`, in quotes, bytes
/// outside printable ASCII as `\xNN`, `...` inside the quotes when cut.
pub fn show(raw: &[u8]) -> String {
    format!("\"{}\"", show_bare(raw))
}

/// `show(raw)` without its quotes (how the scripts name a key).
pub fn show_bare(raw: &[u8]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn stored_numbers_are_integers_below_2_53() {
        assert_eq!(stored_integer(5.0), Some(5));
        assert_eq!(stored_integer(9_007_199_254_740_991.0), Some((1 << 53) - 1));
        for bad in [-1.0, 0.5, EXACT, f64::NAN, f64::INFINITY] {
            assert_eq!(stored_integer(bad), None, "{bad}");
        }
    }
}
