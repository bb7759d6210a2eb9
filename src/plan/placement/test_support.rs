//! Helpers for this module's unit tests.

use super::Interval;

/// The buffer alive during `[lower, upper)`, `size` bytes long.
pub(crate) fn iv(lower: usize, upper: usize, size: usize) -> Interval {
    Interval { lower, upper, size }
}

/// A xorshift generator from `seed` (not zero): each call gives a number
/// below `m`. Tests draw random instances from it, the same on every run.
pub(crate) fn xorshift(seed: u64) -> impl FnMut(u64) -> usize {
    let mut x = seed;
    move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m) as usize
    }
}
