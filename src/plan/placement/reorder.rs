//! Improving a greedy placement by re-ordering: the default strategy's
//! answer for instances too large for the exact search.
//!
//! Best fit places buffers in a sequence; which sequence decides the
//! height, and no fixed order wins everywhere. Squeaky-wheel optimisation
//! (Joslin and Clements, JAIR 1999) learns a better one: after a run, the
//! buffers that ended above the lower bound (the "squeaky wheels") move to
//! the front of the sequence, keeping their relative order, and best fit
//! runs again. Buffers that were placed too late to find room low down are
//! placed first next time, and those they displace get their turn in a
//! later round. Each round costs one best-fit run (O(n²) per
//! time-independent piece, half a second for 30,000 buffers), so the rounds are few and fixed.
//!
//! Chains start from several greedy orders ([`CHAIN_ORDERS`]); each runs
//! [`CHAIN_ROUNDS`] rounds at most and stops after [`CHAIN_PATIENCE`]
//! rounds without a new best of its own. After a chain has lowered the
//! best placement, the first chain that does not ends the re-ordering.
//! If no chain reached the size order, greedy by size runs once at the
//! end, so the result is never above it (the previous default's first
//! placement). Rounds place each time-independent piece on its own
//! (`fit_scan`), which gives the same offsets faster.
//! Everything stops once the goal (the lower bound, or a capacity) is
//! met. The result depends only on the input,
//! unless the deadline stops a round first: then the best complete
//! placement so far comes back.

use std::time::Instant;

use super::fit_scan::Timeline;
use super::greedy::{lowest_in_sequence_until, place_in_sequence_until};
use super::{Greedy, GreedyFit, GreedyOrder, Interval, height};

/// The greedy orders whose sequences the chains start from, in order.
pub(super) const CHAIN_ORDERS: [GreedyOrder; 4] = [
    GreedyOrder::Pressure,
    GreedyOrder::Conflicts,
    GreedyOrder::Area,
    GreedyOrder::Size,
];

/// Rounds per chain at most (the first is the plain greedy order).
pub(super) const CHAIN_ROUNDS: usize = 8;

/// A chain stops after this many rounds without a lower height.
pub(super) const CHAIN_PATIENCE: usize = 3;

/// The best placement the chains found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Reordered {
    /// One offset per item.
    pub offsets: Vec<usize>,
    /// Their height.
    pub height: usize,
    /// The greedy placer, when a plain greedy order (a chain's first
    /// round) produced `offsets`.
    pub placer: Option<Greedy>,
    /// Best-fit runs completed.
    pub rounds: u32,
}

/// Runs the chains, starting from `start` (a valid placement of `items`,
/// produced by `start_placer` if a greedy order did), until a placement of
/// height at most `goal` is found, the chains are done, or `deadline`
/// passes. Buffers ending above `squeak` (the lower bound) move forward.
/// Never returns a placement higher than `start`.
pub(super) fn reorder(
    items: &[Interval],
    start: Vec<usize>,
    start_placer: Option<Greedy>,
    goal: usize,
    squeak: usize,
    deadline: Option<Instant>,
) -> Reordered {
    let mut best = Reordered {
        height: height(items, &start),
        offsets: start,
        placer: start_placer,
        rounds: 0,
    };
    let timeline = Timeline::new(items);
    let mut improved = false;
    // Whether greedy by size has been tried (it ends the chains' orders).
    let mut by_size = start_placer == Some(Greedy::BY_SIZE);
    for order in CHAIN_ORDERS {
        if best.height <= goal {
            break;
        }
        let chain_start = best.height;
        let mut sequence = order.sequence(items);
        let mut chain_best = usize::MAX;
        let mut stale = 0;
        for round in 0..CHAIN_ROUNDS {
            let offsets = if round == 0 && start_placer.is_some_and(|p| p.order == order) {
                // The start is this order's first round already.
                best.offsets.clone()
            } else {
                match place_in_sequence_until(items, &sequence, &timeline, deadline) {
                    Some(offsets) => {
                        best.rounds += 1;
                        offsets
                    }
                    None => return best,
                }
            };
            by_size |= round == 0 && order == GreedyOrder::Size;
            let h = height(items, &offsets);
            if h < best.height {
                best.placer = (round == 0).then_some(Greedy {
                    order,
                    fit: GreedyFit::BestFit,
                });
                best.height = h;
                best.offsets = offsets.clone();
                if h <= goal {
                    return best;
                }
            }
            if h < chain_best {
                chain_best = h;
                stale = 0;
            } else {
                stale += 1;
                if stale >= CHAIN_PATIENCE {
                    break;
                }
            }
            sequence = squeaky_first(items, &sequence, &offsets, squeak);
        }
        // Chains are restarts: once one has helped, a restart that does
        // not is taken as the sign that the rest will not either.
        let helped = best.height < chain_start;
        if improved && !helped {
            break;
        }
        improved |= helped;
    }
    // The chains may end before the size order's: run it once, so the
    // result is never above greedy by size (the previous default) unless
    // the deadline comes first.
    if !by_size && best.height > goal {
        let sequence = GreedyOrder::Size.sequence(items);
        if let Some(offsets) = place_in_sequence_until(items, &sequence, &timeline, deadline) {
            best.rounds += 1;
            let h = height(items, &offsets);
            if h < best.height {
                (best.height, best.offsets) = (h, offsets);
                best.placer = Some(Greedy::BY_SIZE);
            }
        }
    }
    best
}

/// Every greedy order placed on the skyline ([`lowest_in_sequence_until`]:
/// each buffer on the highest of those placed before it during its
/// lifetime, the lowest-going first, ties by the order; O(n log n) each,
/// where a best-fit round is O(n²)). The lowest placement and its height;
/// `None` when `deadline` cut the first order short. Where many small
/// buffers are alive at once it goes lower than best fit: copies of
/// MiniMalloc's F with scaled sizes, 34 a tenth of a span apart (10,064
/// buffers): greedy by area on the skyline 1.122x the load bound, best fit
/// in start order 1.143x, which the best-fit rounds did not lower
/// (docs/planner.md, eleventh pass). Squeaky-wheel chains on the skyline
/// (twelve rounds an order) found nothing lower there and took 5 s.
pub(super) fn lowest_orders(
    items: &[Interval],
    deadline: Option<Instant>,
) -> Option<(usize, Vec<usize>)> {
    let mut best: Option<(usize, Vec<usize>)> = None;
    for order in GreedyOrder::ALL {
        let Some(offsets) = lowest_in_sequence_until(items, &order.sequence(items), deadline)
        else {
            break;
        };
        let h = height(items, &offsets);
        if best.as_ref().is_none_or(|b| h < b.0) {
            best = Some((h, offsets));
        }
    }
    best
}

/// `sequence` with the buffers that end above `squeak` moved to the front,
/// both groups in their old relative order.
fn squeaky_first(
    items: &[Interval],
    sequence: &[usize],
    offsets: &[usize],
    squeak: usize,
) -> Vec<usize> {
    let above =
        |i: usize| !items[i].is_trivial() && offsets[i].saturating_add(items[i].size) > squeak;
    let mut next = Vec::with_capacity(sequence.len());
    next.extend(sequence.iter().copied().filter(|&i| above(i)));
    next.extend(sequence.iter().copied().filter(|&i| !above(i)));
    next
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{iv, random_items};
    use super::super::{greedy, lower_bound, validate};
    use super::*;

    #[test]
    fn squeaky_buffers_move_forward_in_order() {
        let items = [iv(0, 2, 4), iv(0, 2, 4), iv(0, 2, 4), iv(3, 3, 100)];
        // Buffers 0 and 2 end above 4; the trivial one never squeaks.
        let next = squeaky_first(&items, &[1, 0, 3, 2], &[4, 0, 8, 0], 4);
        assert_eq!(next, vec![0, 2, 1, 3]);
    }

    #[test]
    fn never_worse_than_the_start_and_stops_at_the_goal() {
        let items: Vec<Interval> = (0..200)
            .map(|i| iv(i % 37, i % 37 + 1 + (i * 7) % 11, 1 + (i * 7919) % 23))
            .collect();
        let start = greedy(&items, GreedyOrder::Size);
        let start_height = height(&items, &start);
        let lb = lower_bound(&items);
        let out = reorder(&items, start, Some(Greedy::BY_SIZE), lb, lb, None);
        validate(&items, &out.offsets, None).unwrap();
        assert_eq!(out.height, height(&items, &out.offsets));
        assert!(out.height <= start_height);
        // A goal the start already meets runs nothing.
        let start = greedy(&items, GreedyOrder::Size);
        let out = reorder(&items, start.clone(), None, usize::MAX, lb, None);
        assert_eq!((out.rounds, out.offsets), (0, start));
    }

    #[test]
    fn a_passed_deadline_returns_the_start() {
        let items: Vec<Interval> = (0..3000).map(|i| iv(i, i + 5, 1 + i % 7)).collect();
        let start = greedy(&items, GreedyOrder::Start);
        let out = reorder(&items, start, None, 0, 0, Some(Instant::now()));
        validate(&items, &out.offsets, None).unwrap();
        assert_eq!(out.rounds, 0);
    }

    #[test]
    fn the_lowest_of_the_orders_on_the_skyline_is_valid_and_kept() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % m as u64) as usize
        };
        for _ in 0..40 {
            let count = 5 + next(60);
            let items = random_items(&mut next, count, 40, 10, 20);
            let (h, offsets) = lowest_orders(&items, None).unwrap();
            validate(&items, &offsets, None).unwrap();
            assert_eq!(h, height(&items, &offsets));
            let each = GreedyOrder::ALL
                .into_iter()
                .map(|o| height(&items, &super::super::greedy_lowest(&items, o)))
                .min()
                .unwrap();
            assert_eq!(h, each);
            assert!(h >= lower_bound(&items));
        }
        // A deadline already passed stops the first order (the clock is
        // read every 1024 buffers).
        let many: Vec<Interval> = (0..3000)
            .map(|i| iv(i % 50, i % 50 + 3, 1 + i % 7))
            .collect();
        assert!(lowest_orders(&many, Some(Instant::now())).is_none());
    }
}
