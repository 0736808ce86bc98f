//! Small statistics: the spread of repeated measurements, percentiles.

use serde::Serialize;

/// The spread of repeated measurements of one figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// How many measurements.
    pub runs: usize,
    /// The smallest.
    pub min: f64,
    /// The median.
    pub median: f64,
    /// The mean.
    pub mean: f64,
    /// The largest.
    pub max: f64,
    /// The standard deviation (population).
    pub stddev: f64,
}

impl Spread {
    /// The spread of `values`; all zero for none.
    pub fn of(values: &[f64]) -> Self {
        if values.is_empty() {
            return Spread {
                runs: 0,
                min: 0.0,
                median: 0.0,
                mean: 0.0,
                max: 0.0,
                stddev: 0.0,
            };
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let mean = sorted.iter().sum::<f64>() / n as f64;
        let var = sorted.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
        Spread {
            runs: n,
            min: sorted[0],
            median: percentile_sorted(&sorted, 50.0),
            mean,
            max: sorted[n - 1],
            stddev: var.sqrt(),
        }
    }

    /// The spread of counts.
    pub fn of_counts(values: &[usize]) -> Self {
        let values: Vec<f64> = values.iter().map(|&v| v as f64).collect();
        Self::of(&values)
    }

    /// `min–max (median m)` for counts, or a single number when they agree.
    pub fn counts_text(&self) -> String {
        if self.min == self.max {
            format!("{}", self.min)
        } else {
            format!("{}–{} (median {})", self.min, self.max, self.median)
        }
    }
}

/// The `p`th percentile (0–100) of sorted values, by linear interpolation.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let rank = p / 100.0 * (n - 1) as f64;
            let low = rank.floor();
            // 0 <= low <= n - 1: exact.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let i = low as usize;
            let frac = rank - low;
            if i + 1 >= n {
                sorted[n - 1]
            } else {
                sorted[i] + (sorted[i + 1] - sorted[i]) * frac
            }
        }
    }
}

/// Rounds to `digits` decimals, so that figures written to the report and
/// the data files are stable and readable.
pub fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_and_percentiles() {
        let s = Spread::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.min, s.median, s.max, s.mean), (1.0, 2.0, 3.0, 2.0));
        assert_eq!(percentile_sorted(&[0.0, 10.0], 50.0), 5.0);
        assert_eq!(Spread::of_counts(&[10, 10]).counts_text(), "10");
        assert_eq!(
            Spread::of_counts(&[10, 12, 20]).counts_text(),
            "10–20 (median 12)"
        );
        assert_eq!(round(1.23456, 2), 1.23);
    }
}
