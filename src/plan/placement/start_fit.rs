//! Best fit in start order as one sweep over time: the default strategy's
//! first placement, O(n log n).
//!
//! Taken in order of start time, a buffer overlaps in time exactly the
//! placed buffers still alive at its start (every placed buffer started no
//! later). So best fit over the whole lifetime, which in another order has
//! to look at every placed buffer, needs here only the live set: the sweep
//! frees the buffers that ended, then puts the next buffer into the
//! tightest free gap between live ones (the lowest such gap on ties), or on
//! top of them. The live blocks sit in an ordered map by offset and the
//! gaps in an ordered set by (length, offset), so each start and each end
//! costs O(log n).
//!
//! The result is the same placement as [`place_in_sequence`] over
//! [`GreedyOrder::Start`]'s sequence (`start/best-fit`, a linear-scan
//! allocator with best fit), which takes O(n²): the tests check both
//! agree.
//!
//! [`place_in_sequence`]: super::place_in_sequence
//! [`GreedyOrder::Start`]: super::GreedyOrder::Start

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use super::{GreedyOrder, Interval};

/// [`Live::take_lowest_clear`] walks past at most this many live blocks
/// per candidate offset it may try.
const WALK: usize = 256;

/// Free space among the live buffers at the sweep's current time.
#[derive(Default)]
pub(super) struct Live {
    /// Live blocks: offset → end. Disjoint, because the placement is valid
    /// among buffers alive together.
    blocks: BTreeMap<usize, usize>,
    /// Gaps between consecutive blocks (and below the lowest), as
    /// (length, offset); never empty ones.
    gaps: BTreeSet<(usize, usize)>,
}

impl Live {
    /// The end of the highest live block (0 when none is live).
    pub(super) fn top(&self) -> usize {
        self.blocks.last_key_value().map_or(0, |(_, &end)| end)
    }

    /// The end of the highest block below `offset` (0 when none).
    fn end_below(&self, offset: usize) -> usize {
        self.blocks
            .range(..offset)
            .next_back()
            .map_or(0, |(_, &end)| end)
    }

    fn add_gap(&mut self, from: usize, to: usize) {
        if to > from {
            self.gaps.insert((to - from, from));
        }
    }

    fn remove_gap(&mut self, from: usize, to: usize) {
        if to > from {
            self.gaps.remove(&(to - from, from));
        }
    }

    /// Best fit for `size > 0` bytes: the lowest of the tightest gaps that
    /// hold it, else the top. Takes the space and returns the offset.
    fn take(&mut self, size: usize) -> usize {
        let offset = match self.gaps.range((size, 0)..).next().copied() {
            Some((len, at)) => {
                self.gaps.remove(&(len, at));
                self.add_gap(at.saturating_add(size), at.saturating_add(len));
                at
            }
            None => self.top(),
        };
        self.blocks.insert(offset, offset.saturating_add(size));
        offset
    }

    /// Takes `offset..offset + size` (`size > 0`), which must be free
    /// among the live blocks: in a gap or above the top.
    pub(super) fn take_at(&mut self, offset: usize, size: usize) {
        let end = offset.saturating_add(size);
        let below = self.end_below(offset);
        match self.blocks.range(offset..).next().map(|(&next, _)| next) {
            Some(next) => {
                self.remove_gap(below, next);
                self.add_gap(below, offset);
                self.add_gap(end, next);
            }
            None => self.add_gap(below, offset),
        }
        self.blocks.insert(offset, end);
    }

    /// Best fit for `size > 0` bytes among the first `tries` gaps that
    /// hold it (by length, then offset) whose lowest `size` bytes
    /// `clear` accepts: takes the space and returns the offset, or `None`
    /// when none of them does.
    pub(super) fn take_clear(
        &mut self,
        size: usize,
        tries: usize,
        clear: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let (len, at) = self
            .gaps
            .range((size, 0)..)
            .take(tries)
            .find(|&&(_, at)| clear(at))
            .copied()?;
        self.gaps.remove(&(len, at));
        self.add_gap(at.saturating_add(size), at.saturating_add(len));
        self.blocks.insert(at, at.saturating_add(size));
        Some(at)
    }

    /// The lowest offset where `size` bytes fit between the live blocks
    /// (or above them all) with `clash(x)`, the end of a block that
    /// `[x, x + size)` would meet besides the live ones, saying none;
    /// takes it. Within a gap, a clash moves the candidate to its end.
    /// After `steps` candidates the buffer goes above every live block
    /// and clash (what [`Live::take_clear`]'s callers did at once).
    pub(super) fn take_lowest_clear(
        &mut self,
        size: usize,
        steps: usize,
        clash: impl Fn(usize) -> Option<usize>,
    ) -> usize {
        let mut left = steps;
        let mut found = None;
        let mut from = 0usize;
        // The gaps in offset order: below each block, then above the top.
        // The walk past gaps too small is bounded as well (live sets of
        // overlapping copies hold thousands of blocks).
        let mut walk = steps.saturating_mul(WALK);
        let tops = self.blocks.iter().map(|(&o, &e)| (o, e));
        'gaps: for (gap_end, end) in tops.chain([(usize::MAX, usize::MAX)]) {
            if walk == 0 {
                break; // on top, below
            }
            walk -= 1;
            let mut x = from;
            while x.saturating_add(size) <= gap_end {
                if left == 0 {
                    break 'gaps;
                }
                left -= 1;
                match clash(x) {
                    Some(e) => x = e.max(x + 1),
                    None => {
                        found = Some(x);
                        break 'gaps;
                    }
                }
            }
            from = end;
        }
        let at = found.unwrap_or_else(|| {
            let mut x = self.top();
            while let Some(e) = clash(x) {
                x = e;
            }
            x
        });
        self.take_at(at, size);
        at
    }

    /// Frees the block at `offset`, merging the gaps on both sides.
    pub(super) fn free(&mut self, offset: usize) {
        let Some(end) = self.blocks.remove(&offset) else {
            return;
        };
        let below = self.end_below(offset);
        self.remove_gap(below, offset);
        if let Some((&next, _)) = self.blocks.range(end..).next() {
            self.remove_gap(end, next);
            self.add_gap(below, next);
        }
        // With no block above, the freed space is above the new top: no gap.
    }
}

/// `start/best-fit` placement in O(n log n); one offset per item. Buffers
/// that take no room ([`Interval::is_trivial`]) go to offset 0.
pub(crate) fn start_best_fit(items: &[Interval]) -> Vec<usize> {
    let mut offsets = vec![0usize; items.len()];
    let mut live = Live::default();
    // Ends by time; ends at or before a start free their bytes for it
    // (lifetimes are half-open).
    let mut ends: BinaryHeap<Reverse<(usize, usize)>> = BinaryHeap::new();
    for i in GreedyOrder::Start.sequence(items) {
        let it = &items[i];
        if it.is_trivial() {
            continue;
        }
        while let Some(&Reverse((upper, offset))) = ends.peek() {
            if upper > it.lower {
                break;
            }
            ends.pop();
            live.free(offset);
        }
        let offset = live.take(it.size);
        offsets[i] = offset;
        ends.push(Reverse((it.upper, offset)));
    }
    offsets
}

#[cfg(test)]
mod tests {
    use super::super::test_support::iv;
    use super::super::{height, place_in_sequence, validate};
    use super::*;

    #[test]
    fn the_lowest_clear_offset_never_meets_a_live_block() {
        // 300 live blocks of 1 byte with 1-byte gaps between them.
        let mut live = Live::default();
        for k in 0..300 {
            live.take_at(2 * k, 1);
        }
        assert_eq!(live.top(), 599);
        // One byte fits the lowest gap; a clash there moves it up its
        // gap's neighbours to the next gap.
        assert_eq!(live.take_lowest_clear(1, 4, |_| None), 1);
        assert_eq!(live.take_lowest_clear(1, 4, |x| (x < 5).then_some(5)), 5);
        // Two bytes fit no gap: after the walk's budget (fewer blocks than
        // are live) the buffer goes on top, clear of every block (a walk
        // cut short must not take the space above the last block it saw).
        assert_eq!(live.take_lowest_clear(2, 1, |_| None), 599);
        assert_eq!(live.take_lowest_clear(2, 64, |_| None), 601);
    }

    fn same_as_the_scan(items: &[Interval]) {
        let sweep = start_best_fit(items);
        let scan = place_in_sequence(items, &GreedyOrder::Start.sequence(items));
        assert_eq!(sweep, scan, "{items:?}");
        validate(items, &sweep, None).unwrap();
    }

    #[test]
    fn reuses_freed_gaps_best_fit() {
        // At t=4 gaps of 30 and 10 bytes open between the long-lived
        // 5-byte buffers; 8 bytes take the 10.
        let items = [
            iv(0, 4, 30),
            iv(1, 9, 5),
            iv(2, 4, 10),
            iv(3, 9, 5),
            iv(4, 6, 8),
        ];
        let off = start_best_fit(&items);
        assert_eq!(off, vec![0, 30, 35, 45, 35]);
        assert_eq!(height(&items, &off), 50);
        same_as_the_scan(&items);
    }

    #[test]
    fn freed_top_lowers_the_top_and_gaps_merge() {
        let items = [
            iv(0, 1, 4),
            iv(0, 3, 4),
            iv(0, 1, 4),
            iv(0, 1, 4),
            iv(1, 3, 12),
            iv(2, 3, 4),
        ];
        // At t=1 the blocks at 0, 8 and 12 end: gap [0, 4) and the top
        // falls to 8; 12 bytes go on top, then 4 into the gap.
        assert_eq!(start_best_fit(&items), vec![0, 4, 8, 12, 8, 0]);
        same_as_the_scan(&items);
    }

    #[test]
    fn trivial_and_tied_buffers() {
        let items = [
            iv(3, 3, 9),
            iv(0, 4, 0),
            iv(0, 4, 6),
            iv(0, 4, 6),
            iv(4, 5, 6),
            iv(4, 4, 0),
        ];
        let off = start_best_fit(&items);
        assert_eq!((off[0], off[1], off[5]), (0, 0, 0));
        same_as_the_scan(&items);
        assert!(start_best_fit(&[]).is_empty());
    }
}
