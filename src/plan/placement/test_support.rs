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

/// `count` random buffers from `next` (a number below its argument): each
/// starts below `starts`, lives 1 to `lengths` and is 1 to `sizes` bytes,
/// drawn in that order.
pub(crate) fn random_items(
    next: &mut impl FnMut(usize) -> usize,
    count: usize,
    starts: usize,
    lengths: usize,
    sizes: usize,
) -> Vec<Interval> {
    (0..count)
        .map(|_| {
            let lower = next(starts);
            let upper = lower + 1 + next(lengths);
            iv(lower, upper, 1 + next(sizes))
        })
        .collect()
}
