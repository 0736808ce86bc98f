//! The native Redis module beside the Lua scripts and redis-cell: server time per call and throughput.

use super::{Summary, Target};
use crate::run::Row;

/// This part's targets.
pub(super) fn targets(_rows: &[Row], _out: &mut Vec<Target>) {}

/// This part's section of the README (empty until it has rows).
pub(super) fn section(_summary: &Summary) -> String {
    String::new()
}
