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

/// Load thresholds of [`peak_bound`], as fractions of the load bound,
/// highest first: the fewer busy times kept, the smaller the instance the
/// search must decide.
const PEAK_SHARES: [f64; 8] = [1.0, 0.99, 0.98, 0.97, 0.95, 0.93, 0.9, 0.85];

/// The instance restricted to its busy times: the buffers alive at some
/// time of maximal load at least `share` of the most, each alive over the
/// run of those times it covers, the times renumbered 0, 1, 2, ...
///
/// Two buffers alive together here share one of the kept times, so they
/// are alive together in `items` too: the offsets of any valid placement
/// of `items` place these buffers validly, and their optimum is no higher
/// than that of `items` (docs/planner.md, "A stronger lower bound").
/// `share` 0 keeps every maximal load, which is `items` itself up to the
/// renumbering of times.
///
/// ```
/// use tensor_arena::plan::placement::{Interval, busy_times_relaxation};
/// let items = [
///     Interval { lower: 0, upper: 10, size: 4 },
///     Interval { lower: 2, upper: 4, size: 4 },  // busiest: 8 bytes
///     Interval { lower: 6, upper: 8, size: 1 },  // 5 bytes: dropped at share 0.9
/// ];
/// let relaxed = busy_times_relaxation(&items, 0.9);
/// assert_eq!(relaxed.len(), 2);
/// assert_eq!(busy_times_relaxation(&items, 0.0).len(), 3);
/// ```
pub fn busy_times_relaxation(items: &[Interval], share: f64) -> Vec<Interval> {
    relax(items, share).into_iter().map(|(_, it)| it).collect()
}

/// [`busy_times_relaxation`] with each kept buffer's index in `items`.
fn relax(items: &[Interval], share: f64) -> Vec<(usize, Interval)> {
    let live = || items.iter().enumerate().filter(|(_, it)| !it.is_trivial());
    let mut starts: Vec<usize> = live().map(|(_, it)| it.lower).collect();
    starts.sort_unstable();
    starts.dedup();
    let mut ends: Vec<usize> = live().map(|(_, it)| it.upper).collect();
    ends.sort_unstable();
    // Load at each start time (the most bytes live are always at one), by
    // differences over the start times each buffer covers.
    let mut delta: Vec<i128> = vec![0; starts.len() + 1];
    for (_, it) in live() {
        delta[starts.partition_point(|&t| t < it.lower)] += it.size as i128;
        delta[starts.partition_point(|&t| t < it.upper)] -= it.size as i128;
    }
    let most = lower_bound(items) as f64;
    let mut kept: Vec<usize> = Vec::new();
    let mut load: i128 = 0;
    for (i, &t) in starts.iter().enumerate() {
        load += delta[i];
        // A start time holds a maximal set of buffers alive together when
        // some buffer ends by the next start: otherwise every buffer alive
        // here is alive there too, with more.
        let next = starts.get(i + 1).copied().unwrap_or(usize::MAX);
        let ends_by_next = ends.partition_point(|&e| e <= next) > ends.partition_point(|&e| e <= t);
        if ends_by_next && load as f64 >= share * most {
            kept.push(t);
        }
    }
    live()
        .filter_map(|(i, it)| {
            let first = kept.partition_point(|&t| t < it.lower);
            let end = kept.partition_point(|&t| t < it.upper);
            (first < end).then_some((
                i,
                Interval {
                    lower: first,
                    upper: end,
                    size: it.size,
                },
            ))
        })
        .collect()
}

/// The largest height proven impossible by the exact search on the
/// instance restricted to its busiest times ([`busy_times_relaxation`]),
/// plus one; at least the load bound ([`lower_bound`]). The kept times go
/// from those of the most bytes live down to those of 85% of it, each
/// relaxation searched in turn (the first with half of the time, each
/// later one with half of what is left); spends at most about
/// `time_limit`.
///
/// ```
/// use std::time::Duration;
/// use tensor_arena::plan::placement::{Interval, lower_bound, peak_bound};
/// // 4 bytes live at every time, yet no placement 4 bytes high: the
/// // 3-byte buffers pin `a` and `g` to opposite ends, and the 2-byte
/// // ones then leave `c` no room (docs/planner.md).
/// let iv = |lower, upper, size| Interval { lower, upper, size };
/// let items = [
///     iv(0, 3, 1), iv(0, 1, 3),             // a, pinned at time 0
///     iv(2, 5, 1), iv(4, 5, 3),             // g, pinned at time 4
///     iv(1, 4, 1),                          // c
///     iv(1, 2, 2), iv(2, 3, 1), iv(3, 4, 2),
/// ];
/// assert_eq!(lower_bound(&items), 4);
/// assert_eq!(peak_bound(&items, Duration::from_secs(1)), 5);
/// ```
pub fn peak_bound(items: &[Interval], time_limit: Duration) -> usize {
    peak_bound_detail(items, time_limit).bound
}

/// What [`peak_bound_detail`] established.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeakBound {
    /// The bound of [`peak_bound`].
    pub bound: usize,
    /// The lowest share of the most bytes live whose busy times the search
    /// placed exactly at the load bound: there the load bound is reachable,
    /// so whatever forces a placement above it lies at times less busy
    /// than that. `None` when not even the busiest times were.
    pub at_load_down_to: Option<f64>,
}

/// [`peak_bound`], and how far down from the busiest times the load bound
/// was shown reachable (printed by the `plan_families` example).
pub fn peak_bound_detail(items: &[Interval], time_limit: Duration) -> PeakBound {
    let start = Instant::now();
    let load = lower_bound(items);
    let mut out = PeakBound {
        bound: load,
        at_load_down_to: None,
    };
    let mut last_len = usize::MAX;
    let mut last_at_load = false;
    for &share in &PEAK_SHARES {
        let left = time_limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            break;
        }
        let relaxed = busy_times_relaxation(items, share);
        if relaxed.len() == last_len {
            // The same busy times: the same instance.
            if last_at_load {
                out.at_load_down_to = Some(share);
            }
            continue;
        }
        last_len = relaxed.len();
        let config = SearchConfig {
            capacity: None,
            minimize: true,
            time_limit: left / 2,
            node_limit: None,
        };
        let found = search(&relaxed, None, &config);
        out.bound = out.bound.max(found.proven_bound);
        // Relaxations nest (a lower share keeps more times), so once one
        // is placed at the load bound, every higher share's is too.
        last_at_load = found.height <= load;
        if last_at_load {
            out.at_load_down_to = Some(share);
        }
    }
    out
}

/// The larger of [`window_bound`] and [`peak_bound`], each with half of
/// `time_limit`: a lower bound on the optimal height, at least the load
/// bound, that `--bound` prints in `tensor-arena plan` and the
/// `plan_families` example.
pub fn stronger_bound(items: &[Interval], time_limit: Duration) -> usize {
    let half = time_limit / 2;
    window_bound(items, half).max(peak_bound(items, half))
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
    use super::super::test_support::{iv, xorshift};
    use super::*;

    #[test]
    fn never_above_a_placement_nor_below_the_load_bound() {
        // Small random instances: the search's proof is sound (never above
        // a valid placement's height) and at least the load bound.
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
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

    /// The optimal height by brute force: every offset of every buffer,
    /// depth first, kept only below the best height found so far.
    fn brute_force_optimum(items: &[Interval]) -> usize {
        fn go(items: &[Interval], offsets: &mut Vec<usize>, height: usize, best: &mut usize) {
            let i = offsets.len();
            if height >= *best {
                return;
            }
            if i == items.len() {
                *best = height;
                return;
            }
            let it = items[i];
            for o in 0..best.saturating_sub(it.size) {
                let clear = items[..i].iter().zip(offsets.iter()).all(|(other, &p)| {
                    !it.overlaps_in_time(other) || o + it.size <= p || p + other.size <= o
                });
                if clear {
                    offsets.push(o);
                    go(items, offsets, height.max(o + it.size), best);
                    offsets.pop();
                }
            }
        }
        let mut best = items.iter().map(|it| it.size).sum::<usize>() + 1;
        go(items, &mut Vec::new(), 0, &mut best);
        best.min(items.iter().map(|it| it.size).sum())
    }

    /// 4 bytes live at every time, optimum 5: `a` and `g` pinned to
    /// opposite ends by the 3-byte buffers, `c` then has no room.
    fn pinned() -> Vec<Interval> {
        vec![
            iv(0, 3, 1),
            iv(0, 1, 3),
            iv(2, 5, 1),
            iv(4, 5, 3),
            iv(1, 4, 1),
            iv(1, 2, 2),
            iv(2, 3, 1),
            iv(3, 4, 2),
        ]
    }

    /// Small random instances (few times, sizes 1 to 4 bytes; their
    /// optimum is almost always the load bound), and [`pinned`] shifted
    /// in time with up to three random buffers added (often above it).
    fn small_instances(count: usize) -> Vec<Vec<Interval>> {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        (0..count)
            .map(|k| {
                if k % 2 == 1 {
                    let shift = next(3);
                    let mut items: Vec<Interval> = pinned()
                        .into_iter()
                        .map(|it| iv(it.lower + shift, it.upper + shift, it.size))
                        .collect();
                    for _ in 0..next(4) {
                        let l = next(8);
                        items.push(iv(l, l + 1 + next(2), 1 + next(2)));
                    }
                    return items;
                }
                let n = 5 + next(3);
                (0..n)
                    .map(|_| {
                        let l = next(6);
                        iv(l, l + 1 + next(3), 1 + next(4))
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn relaxations_keep_every_placement_valid() {
        // Any valid placement of the instance, restricted to the kept
        // buffers, is valid for the relaxation: its optimum is no higher.
        for items in small_instances(200) {
            let offsets = super::super::greedy(&items, super::super::GreedyOrder::Size);
            for share in [0.0, 0.5, 0.8, 0.9, 1.0] {
                let kept = relax(&items, share);
                let relaxed: Vec<Interval> = kept.iter().map(|&(_, it)| it).collect();
                let mapped: Vec<usize> = kept.iter().map(|&(i, _)| offsets[i]).collect();
                assert!(
                    super::super::validate(&relaxed, &mapped, None).is_ok(),
                    "share {share}: {items:?} -> {relaxed:?}"
                );
                // Every buffer alive at a busiest time is kept.
                if share == 1.0 {
                    assert_eq!(lower_bound(&relaxed), lower_bound(&items));
                }
            }
            // Share 0 keeps every buffer that takes room.
            assert_eq!(
                relax(&items, 0.0).len(),
                items.iter().filter(|it| !it.is_trivial()).count()
            );
        }
    }

    #[test]
    fn bounds_lie_between_the_load_bound_and_the_brute_force_optimum() {
        // Soundness against an exact optimum computed without the search,
        // and strength: on some of these instances the optimum is above
        // the load bound, and the bound shows it.
        let mut above_load = 0;
        let mut shown = 0;
        for items in small_instances(150) {
            let load = lower_bound(&items);
            let optimum = brute_force_optimum(&items);
            let peak = peak_bound(&items, Duration::from_millis(300));
            let stronger = stronger_bound(&items, Duration::from_millis(300));
            for b in [peak, stronger] {
                assert!(b >= load, "{b} below the load bound {load}: {items:?}");
                assert!(b <= optimum, "{b} above the optimum {optimum}: {items:?}");
            }
            if optimum > load {
                above_load += 1;
                if stronger > load {
                    shown += 1;
                }
            }
        }
        assert!(above_load > 0, "no instance above its load bound");
        assert!(
            shown > 0,
            "no gap above the load bound shown of {above_load}"
        );
    }

    #[test]
    fn the_detail_says_how_far_down_the_load_bound_is_reachable() {
        // The pinned gadget: its busiest times are all of it, and they
        // cannot be placed at the load bound.
        let alone = peak_bound_detail(&pinned(), Duration::from_secs(1));
        assert_eq!(alone.bound, 5);
        assert_eq!(alone.at_load_down_to, None);
        // The gadget beside a busier buffer alone: the busiest times fit
        // the load bound (10), the gadget's times (at most 0.4 of it) are
        // never kept, so every share is shown reachable and the bound stays.
        let mut items = pinned();
        items.push(iv(10, 11, 10));
        let d = peak_bound_detail(&items, Duration::from_secs(1));
        assert_eq!(d.bound, 10);
        assert_eq!(d.at_load_down_to, Some(PEAK_SHARES[PEAK_SHARES.len() - 1]));
    }
}
