//! Best fit in start order, longest lifetimes first: the sweep run once
//! per class of lifetime length, each class around the longer ones
//! already placed.
//!
//! The sweep ([`start_best_fit`](super::start_fit::start_best_fit)) places
//! every buffer when it starts. Where lifetimes vary widely (a random
//! interval graph: most buffers live a few steps, a few live thousands),
//! the long ones land wherever the short ones leave room at their start
//! and stay there: the placement's top sits above the lower bound almost
//! everywhere, though the bytes alive are mostly well below it, and no
//! local move can lower it (the long buffers cross every window). Here
//! the longest buffers are swept first, among themselves (they pack at
//! the bottom); then the next class is swept around them, and so on down
//! to the shortest. A class's buffer takes the tightest gap among the
//! buffers alive at its start that is also clear of the longer buffers
//! starting later in its lifetime (found in the longer classes' start
//! order; among the first [`TRIES`] gaps), else the lowest place above the
//! top clear of them. Every placement is checked against every buffer it
//! overlaps in time, so it is valid.
//!
//! The classes are cut at quantiles of the lifetime lengths
//! ([`CUTS`]), so the cut does not depend on the time unit. Cost: one
//! sweep per class over that class and the longer ones, O(n log n) each,
//! plus the longer buffers starting in each buffer's lifetime.
//!
//! Memory: per buffer its offset and whether it is placed (9 bytes), the
//! start order of the pass (8 bytes) and the longer buffers' start order
//! (8 bytes), beside the sweep's O(alive) ordered maps.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Interval;
use super::start_fit::Live;

/// Classes of lifetime length: buffers longer than the length at each
/// quantile (in thousandths, descending) form a class, longest first; the
/// rest the last. On the random graph of 10^6 buffers (2% of lifetimes up
/// to 8,192 steps, 18% up to 512, 80% up to 32) these are its three kinds:
/// 1.110x for the sweep, 1.036x here, 1.026x after the windowed repair
/// (which lowers little after the sweep: the long buffers cross its
/// windows). Other cuts gave 1.020-1.027x after the repair, with no
/// pattern: these are the graph's own three kinds, not a tuned choice.
/// (With the busiest times' buffers placed first, `hot.rs`, 1.012x.)
pub(super) const CUTS: [usize; 2] = [980, 800];

/// Gaps tried per buffer by best fit; where none is clear, as many
/// candidate offsets from the bottom up before going on top.
pub(super) const TRIES: usize = 64;

/// The layered placement of `items`; one offset per item, 0 for the
/// buffers that take no room.
pub(super) fn levels_best_fit(items: &[Interval]) -> Vec<usize> {
    let mut offsets = vec![0usize; items.len()];
    let mut placed = vec![false; items.len()];
    levels_around(items, &mut offsets, &mut placed);
    offsets
}

/// The layered placement of the buffers not yet `placed`, around those
/// that are (at their `offsets`, valid among themselves; `hot.rs` places
/// some first). Each pass places a class around every buffer placed so
/// far, so the placed ones are treated as longer than any class.
pub(super) fn levels_around(items: &[Interval], offsets: &mut [usize], placed: &mut [bool]) {
    let mut lengths: Vec<usize> = items
        .iter()
        .filter(|it| !it.is_trivial())
        .map(|it| it.upper - it.lower)
        .collect();
    lengths.sort_unstable();
    if lengths.is_empty() {
        return;
    }
    // Lengths bounding the classes from above (exclusive) and below.
    let mut bounds: Vec<usize> = CUTS
        .iter()
        .map(|&q| lengths[(lengths.len() - 1) * q / 1000])
        .collect();
    bounds.dedup();
    let mut above = usize::MAX;
    for floor in bounds.into_iter().chain([0]) {
        let class = |it: &Interval| {
            let len = it.upper - it.lower;
            len > floor && len <= above
        };
        pass(items, offsets, placed, class);
        above = floor;
    }
}

/// One sweep: the buffers of `class` placed around the `placed` ones.
fn pass(
    items: &[Interval],
    offsets: &mut [usize],
    placed: &mut [bool],
    class: impl Fn(&Interval) -> bool,
) {
    let mut order: Vec<usize> = (0..items.len())
        .filter(|&i| !items[i].is_trivial() && (placed[i] || class(&items[i])))
        .collect();
    if order.iter().all(|&i| placed[i]) {
        return;
    }
    // At one start time the placed buffers go in first (they are live
    // there for the new ones); then the new ones by size, largest first.
    order.sort_unstable_by_key(|&i| (items[i].lower, !placed[i], Reverse(items[i].size), i));
    // The placed buffers by start: those starting later in a new buffer's
    // lifetime are the ones it must stay clear of.
    let mut later: Vec<usize> = order.iter().copied().filter(|&i| placed[i]).collect();
    later.sort_by_key(|&i| items[i].lower);
    let mut live = Live::default();
    let mut ends: BinaryHeap<Reverse<(usize, usize)>> = BinaryHeap::new();
    let mut ahead: Vec<(usize, usize)> = Vec::new();
    for i in order {
        let it = &items[i];
        while let Some(&Reverse((upper, offset))) = ends.peek() {
            if upper > it.lower {
                break;
            }
            ends.pop();
            live.free(offset);
        }
        if placed[i] {
            live.take_at(offsets[i], it.size);
        } else {
            let a = later.partition_point(|&j| items[j].lower <= it.lower);
            let b = later.partition_point(|&j| items[j].lower < it.upper);
            ahead.clear();
            ahead.extend(
                later[a..b]
                    .iter()
                    .map(|&j| (offsets[j], offsets[j] + items[j].size)),
            );
            let size = it.size;
            let clash = |x: usize| ahead.iter().find(|&&(o, e)| o < x + size && x < e).copied();
            // Where none of the tightest gaps is clear at its bottom, the
            // lowest clear offset, a clash moving the candidate up within
            // its gap (not the top of everything live: around hot buffers
            // placed first, the cold ones of overlapping copies of a trace
            // went there, 1.33x the bound where this gives 1.11x).
            offsets[i] = match live.take_clear(size, TRIES, |x| clash(x).is_none()) {
                Some(at) => at,
                None => live.take_lowest_clear(size, TRIES, |x| clash(x).map(|(_, e)| e)),
            };
            placed[i] = true;
        }
        ends.push(Reverse((it.upper, offsets[i])));
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::start_fit::start_best_fit;
    use super::super::test_support::iv;
    use super::super::{height, lower_bound, validate};
    use super::*;

    #[test]
    fn long_buffers_go_under_and_short_ones_around_them() {
        // The sweep puts the short buffer starting at 0 at the bottom, the
        // long one starting at 1 over it, and the large short one at 2
        // (after the first has ended) on top of the long one: 4 + 4 + 8.
        // Longest first, the long one is at the bottom from the start and
        // the large one sits on it at 4: 12, the lower bound.
        let mut items = vec![iv(0, 2, 4), iv(1, 1000, 4), iv(2, 3, 8)];
        // Enough short buffers elsewhere that the long one is its own
        // class (above the 98th percentile of lengths).
        items.extend((0..60).map(|k| iv(2000 + 4 * k, 2003 + 4 * k, 1)));
        let sweep = start_best_fit(&items);
        assert_eq!(height(&items, &sweep), 16);
        let offsets = levels_best_fit(&items);
        validate(&items, &offsets, None).unwrap();
        assert_eq!(height(&items, &offsets), lower_bound(&items));
        assert_eq!(&offsets[..3], &[4, 0, 4]);
    }

    #[test]
    fn a_new_buffer_stays_clear_of_longer_ones_starting_later() {
        // The long buffer (placed first, at 0) starts at 5; the short one
        // alive over 0..10 must not take the free space under it.
        let mut items = vec![iv(5, 5000, 8), iv(0, 10, 4)];
        items.extend((0..60).map(|k| iv(6000 + 2 * k, 6020 + 2 * k, 1)));
        let offsets = levels_best_fit(&items);
        validate(&items, &offsets, None).unwrap();
        assert_eq!((offsets[0], offsets[1]), (0, 8));
    }

    #[test]
    fn buffers_placed_beforehand_stay_and_the_rest_go_around() {
        // The short buffer at 0..2 is placed at 8 beforehand; the long one
        // alive with it goes under it, the large one after it around both.
        let items = vec![iv(0, 2, 4), iv(1, 1000, 8), iv(2, 3, 8)];
        let mut offsets = vec![8, 0, 0];
        let mut placed = vec![true, false, false];
        levels_around(&items, &mut offsets, &mut placed);
        validate(&items, &offsets, None).unwrap();
        assert_eq!(offsets, vec![8, 0, 8]);
        assert!(placed.iter().all(|&p| p));
    }

    #[test]
    fn a_buffer_goes_up_its_gap_past_a_clash_not_on_top() {
        // Placed beforehand: two long buffers at 0..10 and 30..40 (a gap
        // of 20 between them) and one starting later at 10..14. The new
        // buffer alive over 1..10 meets the later one at the gap's bottom,
        // so the tightest gap is not clear there; above the clash, at 14,
        // it is. (Going on top of everything live put it at 40.)
        let items = vec![iv(0, 100, 10), iv(0, 100, 10), iv(5, 100, 4), iv(1, 10, 8)];
        let mut offsets = vec![0, 30, 10, 0];
        let mut placed = vec![true, true, true, false];
        levels_around(&items, &mut offsets, &mut placed);
        validate(&items, &offsets, None).unwrap();
        assert_eq!(offsets[3], 14);
        assert_eq!(height(&items, &offsets), 40);
    }

    #[test]
    fn empty_and_trivial() {
        assert!(levels_best_fit(&[]).is_empty());
        let items = [iv(3, 3, 5), iv(0, 1, 0)];
        assert_eq!(levels_best_fit(&items), vec![0, 0]);
    }

    proptest! {
        // The shadow model is the validator: every layered placement is
        // valid, whatever the mix of lengths, ties and trivial buffers.
        #[test]
        fn layered_placements_are_valid(
            raw in prop::collection::vec((0usize..200, 0usize..120, 0usize..40), 0..160),
        ) {
            let items: Vec<Interval> = raw
                .iter()
                .map(|&(l, d, s)| iv(l, l + d * d / 8, s))
                .collect();
            let offsets = levels_best_fit(&items);
            prop_assert!(validate(&items, &offsets, None).is_ok());
            prop_assert!(height(&items, &offsets) >= lower_bound(&items));
        }
    }
}
