//! In memory on equal terms with governor: the default clocks, the same clock, contention.

use super::{Summary, Target};
use crate::run::Row;

/// This part's targets.
pub(super) fn targets(_rows: &[Row], _out: &mut Vec<Target>) {}

/// This part's section of the README (empty until it has rows).
pub(super) fn section(_summary: &Summary) -> String {
    String::new()
}
