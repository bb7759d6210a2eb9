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

/// The buffers of a public instance under `tests/data/` (MiniMalloc's CSV
/// format), e.g. `minimalloc/F.1048576.csv`.
pub(crate) fn public(path: &str) -> Vec<Interval> {
    let path = format!("{}/tests/data/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("a checked-in instance");
    crate::plan::minimalloc::parse(&text)
        .expect("a valid instance")
        .buffers
}
