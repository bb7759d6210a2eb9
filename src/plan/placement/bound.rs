//! A lower bound stronger than the load bound, for reading a ratio against
//! what is possible: the exact search run on samples of the instance.
//!
//! Any subset of the buffers needs at least as much room as its optimal
//! placement, so a height the search proves impossible for a subset is
//! impossible for the whole. The samples are the buffers nearest in time to
//! the busiest times (those alive there first), a few hundred to a few
//! thousand, where the load bound is decided.

use std::time::{Duration, Instant};

use super::{Interval, SearchConfig, lower_bound, search};

/// Samples per busiest time, smallest first: small ones are often proven
/// within milliseconds, larger ones are stronger when they are.
const SAMPLE_SIZES: [usize; 3] = [150, 600, 2400];

/// Busiest times tried.
const PEAKS: usize = 3;

/// The largest height proven impossible by the exact search on samples of
/// `items`, plus one; at least the load bound ([`lower_bound`]). Spends at
/// most about `time_limit`.
///
/// ```
/// use std::time::Duration;
/// use tensor_arena::plan::placement::{Interval, Strategy, lower_bound, solve, window_bound};
/// let items = [
///     Interval { lower: 0, upper: 2, size: 2 },
///     Interval { lower: 1, upper: 3, size: 2 },
///     Interval { lower: 0, upper: 1, size: 1 },
///     Interval { lower: 2, upper: 3, size: 1 },
/// ];
/// let bound = window_bound(&items, Duration::from_secs(1));
/// assert!(bound >= lower_bound(&items));
/// assert!(bound <= solve(&items, &Strategy::default())?.height);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn window_bound(items: &[Interval], time_limit: Duration) -> usize {
    let start = Instant::now();
    let mut best = lower_bound(items);
    let live: Vec<&Interval> = items.iter().filter(|it| !it.is_trivial()).collect();
    if live.is_empty() {
        return best;
    }
    let peaks = busiest_times(&live, PEAKS);
    let tries = (peaks.len() * SAMPLE_SIZES.len()) as u32;
    for &peak in &peaks {
        // Distance in time from the peak: 0 for buffers alive there.
        let mut near: Vec<(usize, usize)> = live
            .iter()
            .enumerate()
            .map(|(i, it)| {
                let d = if it.lower > peak {
                    it.lower - peak
                } else if it.upper <= peak {
                    peak + 1 - it.upper
                } else {
                    0
                };
                (d, i)
            })
            .collect();
        near.sort_unstable();
        let mut last = 0;
        for &m in &SAMPLE_SIZES {
            let m = m.min(near.len());
            if m == last {
                break;
            }
            last = m;
            let left = time_limit.saturating_sub(start.elapsed());
            if left.is_zero() {
                return best;
            }
            let sample: Vec<Interval> = near[..m].iter().map(|&(_, i)| *live[i]).collect();
            let config = SearchConfig {
                capacity: None,
                minimize: true,
                time_limit: (time_limit / tries).min(left),
                node_limit: None,
            };
            best = best.max(search(&sample, None, &config).proven_bound);
        }
    }
    best
}

/// Up to `count` times of the most bytes live, distinct, busiest first.
fn busiest_times(live: &[&Interval], count: usize) -> Vec<usize> {
    let mut events: Vec<(usize, bool, usize)> = Vec::with_capacity(live.len() * 2);
    for it in live {
        events.push((it.lower, true, it.size));
        events.push((it.upper, false, it.size));
    }
    events.sort_unstable_by_key(|&(t, is_start, _)| (t, is_start));
    let mut load: Vec<(usize, usize)> = Vec::new();
    let mut cur = 0usize;
    let mut k = 0;
    while k < events.len() {
        let t = events[k].0;
        while k < events.len() && events[k].0 == t {
            let (_, is_start, size) = events[k];
            if is_start {
                cur = cur.saturating_add(size);
            } else {
                cur = cur.saturating_sub(size);
            }
            k += 1;
        }
        load.push((cur, t));
    }
    load.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    load.into_iter().take(count).map(|(_, t)| t).collect()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::iv;
    use super::*;

    #[test]
    fn never_above_a_placement_nor_below_the_load_bound() {
        // Small random instances: the search's proof is sound (never above
        // a valid placement's height) and at least the load bound.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % m) as usize
        };
        for _ in 0..60 {
            let items: Vec<Interval> = (0..12)
                .map(|_| {
                    let l = next(10);
                    iv(l, l + 1 + next(5), 1 + next(9))
                })
                .collect();
            let b = window_bound(&items, Duration::from_millis(200));
            let placed = super::super::solve(&items, &super::super::Strategy::search()).unwrap();
            assert!(b >= lower_bound(&items));
            assert!(
                b <= placed.height,
                "{b} above a placement of {}",
                placed.height
            );
            // Where the search proved the optimum, the sample holding
            // every buffer proves it too.
            if placed.optimal {
                assert_eq!(b, placed.height);
            }
        }
    }
}
