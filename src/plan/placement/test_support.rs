//! Helpers for this module's unit tests.

use super::Interval;

/// The buffer alive during `[lower, upper)`, `size` bytes long.
pub(crate) fn iv(lower: usize, upper: usize, size: usize) -> Interval {
    Interval { lower, upper, size }
}
