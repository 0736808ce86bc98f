//! The Markdown pieces every section is built from: tables, inline charts,
//! and numbers printed without noise digits.

use std::fmt::Write as _;

/// The report's folder of charts, relative to the output folder.
pub const CHARTS: &str = "charts";

/// A Markdown table.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n", header.join(" | "));
    out += &format!("|{}\n", header.iter().map(|_| "---|").collect::<String>());
    for row in rows {
        out += &format!("| {} |\n", row.join(" | "));
    }
    out
}

/// The chart `name` inline (PNG, with a link to the SVG), if it was drawn.
pub fn chart(out: &mut String, charts: &[String], name: &str, alt: &str) {
    if charts.iter().any(|c| c == name) {
        let _ = writeln!(
            out,
            "\n![{alt}]({CHARTS}/{name}.png)\n\n<sub>[SVG]({CHARTS}/{name}.svg)</sub>\n"
        );
    }
}

/// `x` with at most `d` decimals, trailing zeros dropped.
pub fn num(x: f64, d: usize) -> String {
    let s = format!("{x:.d$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// A percentage with three significant digits (26.5, 4.2, 0.0312): small
/// shares stay visible, large ones do not carry noise digits.
pub fn pct(x: f64) -> String {
    if x == 0.0 {
        return "0".to_owned();
    }
    let magnitude = x.abs().log10().floor();
    let decimals = [0, 1, 2, 3, 4, 5, 6]
        .into_iter()
        .find(|&d| f64::from(d) >= 2.0 - magnitude)
        .unwrap_or(6);
    num(x, decimals as usize)
}

/// The GitHub anchor of a section title.
pub fn anchor(title: &str) -> String {
    title.to_lowercase().replace(' ', "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_drop_noise_digits() {
        assert_eq!(num(2.50, 2), "2.5");
        assert_eq!(num(3.0, 1), "3");
        assert_eq!(pct(26.54), "26.5");
        assert_eq!(pct(0.031_24), "0.0312");
        assert_eq!(pct(0.0), "0");
        assert_eq!(anchor("Window edge"), "window-edge");
        let t = table(&["a", "b"], &[vec!["1".into(), "2".into()]]);
        assert_eq!(t, "| a | b |\n|---|---|\n| 1 | 2 |\n");
    }
}
