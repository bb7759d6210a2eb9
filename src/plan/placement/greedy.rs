//! Greedy placement, in two rules:
//!
//! - **best fit** (TFLite's and XLA's planners): take buffers in some
//!   order, put each into the tightest gap that holds it, or on top;
//! - **lowest first** (the canonical placements of the search, taken
//!   without backtracking): repeatedly place the unplaced buffer that can
//!   go lowest, at that offset, with the order breaking ties. It fills the
//!   slab from the bottom like a skyline and leaves no gap a later buffer
//!   could have used below.
//!
//! The orders are the classic ones (Sekiyama et al., Pisarchyk & Lee); no
//! combination wins everywhere, so [`best_of_orders`] runs them all.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::fit_scan::{Timeline, place_columns};
use super::start_fit::start_best_fit;
use super::{Interval, height, lower_bound};

/// The order in which the greedy placer considers buffers. Ties fall back
/// to larger size, then to input order, so every order is deterministic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GreedyOrder {
    /// Largest first (TFLite's and XLA's "greedy by size").
    Size,
    /// Longest lifetime first.
    Length,
    /// Largest size × lifetime first.
    Area,
    /// Most time-overlapping buffers first ("greedy by conflicts").
    Conflicts,
    /// Largest peak of live bytes during the buffer's lifetime first
    /// ("greedy by breadth"): buffers in the busiest times go first.
    Pressure,
    /// Earliest start first, as a linear-scan allocator would see them.
    Start,
}

impl GreedyOrder {
    /// Every order, in the order [`best_of_orders`] tries them.
    pub const ALL: [GreedyOrder; 6] = [
        GreedyOrder::Size,
        GreedyOrder::Pressure,
        GreedyOrder::Area,
        GreedyOrder::Length,
        GreedyOrder::Conflicts,
        GreedyOrder::Start,
    ];

    /// The kebab-case name (`size`, `length`, ...).
    pub fn name(self) -> &'static str {
        match self {
            GreedyOrder::Size => "size",
            GreedyOrder::Length => "length",
            GreedyOrder::Area => "area",
            GreedyOrder::Conflicts => "conflicts",
            GreedyOrder::Pressure => "pressure",
            GreedyOrder::Start => "start",
        }
    }

    /// The indices of `items` in this order.
    ///
    /// ```
    /// use tensor_arena::plan::placement::{GreedyOrder, Interval};
    /// let items = [
    ///     Interval { lower: 0, upper: 9, size: 1 },
    ///     Interval { lower: 2, upper: 3, size: 50 },
    /// ];
    /// assert_eq!(GreedyOrder::Size.sequence(&items), vec![1, 0]);
    /// assert_eq!(GreedyOrder::Length.sequence(&items), vec![0, 1]);
    /// ```
    pub fn sequence(self, items: &[Interval]) -> Vec<usize> {
        let mut seq: Vec<usize> = (0..items.len()).collect();
        let len = |i: usize| items[i].upper.saturating_sub(items[i].lower);
        let by_size = |a: usize, b: usize| items[b].size.cmp(&items[a].size).then(a.cmp(&b));
        match self {
            GreedyOrder::Size => seq.sort_by(|&a, &b| {
                items[b]
                    .size
                    .cmp(&items[a].size)
                    .then(len(b).cmp(&len(a)))
                    .then(a.cmp(&b))
            }),
            GreedyOrder::Length => seq.sort_by(|&a, &b| len(b).cmp(&len(a)).then(by_size(a, b))),
            GreedyOrder::Area => {
                let area = |i: usize| items[i].size as u128 * len(i) as u128;
                seq.sort_by(|&a, &b| area(b).cmp(&area(a)).then(by_size(a, b)));
            }
            GreedyOrder::Conflicts => {
                let conflicts = conflict_counts(items);
                seq.sort_by(|&a, &b| conflicts[b].cmp(&conflicts[a]).then(by_size(a, b)));
            }
            GreedyOrder::Pressure => {
                let peak = peak_pressure(items);
                seq.sort_by(|&a, &b| peak[b].cmp(&peak[a]).then(by_size(a, b)));
            }
            GreedyOrder::Start => {
                seq.sort_by(|&a, &b| items[a].lower.cmp(&items[b].lower).then(by_size(a, b)))
            }
        }
        seq
    }
}

impl std::fmt::Display for GreedyOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a greedy placer puts each buffer down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GreedyFit {
    /// Buffers in the order's sequence, each into the tightest gap that
    /// holds it ([`greedy`]).
    BestFit,
    /// The buffer that can go lowest next, the order breaking ties
    /// ([`greedy_lowest`]).
    Lowest,
}

impl GreedyFit {
    /// The kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            GreedyFit::BestFit => "best-fit",
            GreedyFit::Lowest => "lowest",
        }
    }
}

/// A greedy placer: an order and a rule. Displays as `order/rule`, for
/// example `size/best-fit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Greedy {
    /// Which buffers go first.
    pub order: GreedyOrder,
    /// How each is put down.
    pub fit: GreedyFit,
}

impl Greedy {
    /// Greedy by size with best fit: the classic baseline.
    pub const BY_SIZE: Greedy = Greedy {
        order: GreedyOrder::Size,
        fit: GreedyFit::BestFit,
    };

    /// Places `items` with this placer.
    pub fn place(self, items: &[Interval]) -> Vec<usize> {
        match self.fit {
            GreedyFit::BestFit => greedy(items, self.order),
            GreedyFit::Lowest => greedy_lowest(items, self.order),
        }
    }
}

impl std::fmt::Display for Greedy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.order.name(), self.fit.name())
    }
}

/// Places every buffer greedily in `order`, each into the tightest gap
/// between already placed, time-overlapping buffers that holds it (best
/// fit), or on top of them when no gap does. Returns one offset per item.
///
/// Runs in O(n²) time: placed buffers are kept sorted by offset, so each
/// placement is one linear scan over those of its time-independent piece.
/// [`GreedyOrder::Start`] is the exception: the same placement comes from
/// one sweep over time in O(n log n).
///
/// ```
/// use tensor_arena::plan::placement::{GreedyOrder, Interval, greedy, height};
/// let items = [
///     Interval { lower: 0, upper: 1, size: 100 },
///     Interval { lower: 1, upper: 2, size: 100 },
/// ];
/// let offsets = greedy(&items, GreedyOrder::Size);
/// assert_eq!(offsets, vec![0, 0]); // never alive together: same bytes
/// assert_eq!(height(&items, &offsets), 100);
/// ```
pub fn greedy(items: &[Interval], order: GreedyOrder) -> Vec<usize> {
    match order {
        // The same placement by one sweep over time, O(n log n).
        GreedyOrder::Start => start_best_fit(items),
        _ => place_in_sequence(items, &order.sequence(items)),
    }
}

/// Runs every [`GreedyOrder`] with both rules ([`GreedyFit`]) and keeps the
/// lowest placement (the first wins ties, so greedy by size with best fit
/// when nothing is better). Stops early once a placement reaches the lower
/// bound.
///
/// ```
/// use tensor_arena::plan::placement::{GreedyOrder, Interval, best_of_orders, greedy, height};
/// let items = [
///     Interval { lower: 0, upper: 1, size: 4 },
///     Interval { lower: 0, upper: 2, size: 2 },
///     Interval { lower: 2, upper: 5, size: 4 },
///     Interval { lower: 1, upper: 3, size: 2 },
/// ];
/// // By size, the two 4-byte buffers both take offset 0 and the 2-byte
/// // ones stack above them; other orders pack everything.
/// assert_eq!(height(&items, &greedy(&items, GreedyOrder::Size)), 8);
/// let (winner, offsets) = best_of_orders(&items);
/// assert_eq!(height(&items, &offsets), 6);
/// println!("won by {winner}");
/// ```
pub fn best_of_orders(items: &[Interval]) -> (Greedy, Vec<usize>) {
    let floor = lower_bound(items);
    let mut best: Option<(usize, Greedy, Vec<usize>)> = None;
    for fit in [GreedyFit::BestFit, GreedyFit::Lowest] {
        for order in GreedyOrder::ALL {
            let placer = Greedy { order, fit };
            let offsets = placer.place(items);
            let h = height(items, &offsets);
            if best.as_ref().is_none_or(|(bh, _, _)| h < *bh) {
                best = Some((h, placer, offsets));
            }
            if h <= floor {
                break;
            }
        }
        if best.as_ref().is_some_and(|(bh, _, _)| *bh <= floor) {
            break;
        }
    }
    match best {
        Some((_, placer, offsets)) => (placer, offsets),
        None => (Greedy::BY_SIZE, Vec::new()),
    }
}

/// Lowest-first placement: repeatedly takes the unplaced buffer whose
/// lowest possible offset (the top of the placed buffers it overlaps in
/// time) is smallest, ties broken by `order`, and puts it there. Buffers
/// that take no room go to offset 0.
///
/// O(n log n) plus O(log n) per raised buffer: a buffer's lowest offset is
/// the maximum of the "skyline" (the top of the placed buffers alive at
/// each time) over its lifetime, kept in a segment tree; the heap holds
/// possibly stale lower keys, which are refreshed when they surface.
///
/// ```
/// use tensor_arena::plan::placement::{GreedyOrder, Interval, greedy_lowest, validate};
/// let items = [
///     Interval { lower: 0, upper: 2, size: 3 },
///     Interval { lower: 1, upper: 3, size: 5 },
/// ];
/// let offsets = greedy_lowest(&items, GreedyOrder::Size);
/// assert_eq!(offsets, vec![5, 0]); // the larger one first, both at their lowest
/// validate(&items, &offsets, None)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn greedy_lowest(items: &[Interval], order: GreedyOrder) -> Vec<usize> {
    lowest_in_sequence(items, &order.sequence(items))
}

/// [`greedy_lowest`] with the priority of `sequence` (indices into
/// `items`, each once): of the buffers that would go lowest, the earliest
/// in it goes first. O(n log n).
pub(crate) fn lowest_in_sequence(items: &[Interval], sequence: &[usize]) -> Vec<usize> {
    lowest_in_sequence_until(items, sequence, None).unwrap_or_default()
}

/// [`lowest_in_sequence`], giving up (`None`) once `deadline` has passed
/// (the clock is read every 1024 buffers taken off the heap: a buffer goes
/// back on it each time the skyline under it has risen, so a round may
/// take far more than n steps).
pub(crate) fn lowest_in_sequence_until(
    items: &[Interval],
    sequence: &[usize],
    deadline: Option<Instant>,
) -> Option<Vec<usize>> {
    let n = items.len();
    let mut offsets = vec![0usize; n];
    let mut rank = vec![0usize; n];
    for (r, &i) in sequence.iter().enumerate() {
        rank[i] = r;
    }
    let times = super::distinct_times(items);
    let index = |t: usize| times.partition_point(|&x| x < t);
    let mut skyline = MaxTree::new(times.len().saturating_sub(1));
    let mut heap: BinaryHeap<Reverse<(usize, usize, usize)>> = (0..n)
        .filter(|&i| !items[i].is_trivial())
        .map(|i| Reverse((0, rank[i], i)))
        .collect();
    let mut steps = 0u32;
    while let Some(Reverse((key, r, b))) = heap.pop() {
        steps = steps.wrapping_add(1);
        if steps.is_multiple_of(1024) && deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        let it = &items[b];
        let (lo, hi) = (index(it.lower), index(it.upper));
        let lowest = skyline.max(lo, hi);
        if lowest > key {
            heap.push(Reverse((lowest, r, b)));
            continue;
        }
        offsets[b] = lowest;
        skyline.raise(lo, hi, lowest.saturating_add(it.size));
    }
    Some(offsets)
}

/// Range "raise to at least" and range maximum over `len` slots, both
/// O(log len) (a segment tree with max tags).
struct MaxTree {
    len: usize,
    max: Vec<usize>,
    tag: Vec<usize>,
}

impl MaxTree {
    fn new(len: usize) -> MaxTree {
        let size = 4 * len.max(1);
        MaxTree {
            len,
            max: vec![0; size],
            tag: vec![0; size],
        }
    }

    /// Raises every slot in `[lo, hi)` to at least `v`.
    fn raise(&mut self, lo: usize, hi: usize, v: usize) {
        if lo < hi && hi <= self.len {
            self.raise_at(1, 0, self.len, lo, hi, v);
        }
    }

    fn raise_at(&mut self, node: usize, l: usize, r: usize, lo: usize, hi: usize, v: usize) {
        if hi <= l || r <= lo {
            return;
        }
        self.max[node] = self.max[node].max(v);
        if lo <= l && r <= hi {
            self.tag[node] = self.tag[node].max(v);
            return;
        }
        let mid = (l + r) / 2;
        self.raise_at(2 * node, l, mid, lo, hi, v);
        self.raise_at(2 * node + 1, mid, r, lo, hi, v);
    }

    /// The maximum over `[lo, hi)`; 0 when the range is empty.
    fn max(&self, lo: usize, hi: usize) -> usize {
        if lo < hi && hi <= self.len {
            self.max_at(1, 0, self.len, lo, hi)
        } else {
            0
        }
    }

    fn max_at(&self, node: usize, l: usize, r: usize, lo: usize, hi: usize) -> usize {
        if hi <= l || r <= lo {
            return 0;
        }
        if lo <= l && r <= hi {
            return self.max[node];
        }
        // A tag covers the whole node, so it bounds every part of it.
        let mid = (l + r) / 2;
        let below =
            self.max_at(2 * node, l, mid, lo, hi)
                .max(self.max_at(2 * node + 1, mid, r, lo, hi));
        below.max(self.tag[node])
    }
}

/// A placed buffer, copied out of `items` so the scan stays in one array.
#[derive(Clone, Copy)]
pub(crate) struct Placed {
    offset: usize,
    end: usize,
    lower: usize,
    upper: usize,
}

impl Placed {
    /// `it` placed at `offset`.
    pub(crate) fn of(it: &Interval, offset: usize) -> Placed {
        Placed {
            offset,
            end: offset.saturating_add(it.size),
            lower: it.lower,
            upper: it.upper,
        }
    }

    /// Its slab offset.
    pub(crate) fn offset(&self) -> usize {
        self.offset
    }

    /// One past the last time step it is alive.
    pub(crate) fn upper(&self) -> usize {
        self.upper
    }
}

/// The best-fit offset for `it` among `placed` (sorted by offset): the
/// tightest gap between buffers alive with it, else the top of those.
pub(crate) fn best_fit_offset(placed: &[Placed], it: &Interval) -> usize {
    let mut cursor = 0usize;
    let mut best: Option<(usize, usize)> = None; // (gap, offset)
    for p in placed {
        if !(it.lower < p.upper && p.lower < it.upper) {
            continue;
        }
        if p.offset > cursor {
            let gap = p.offset - cursor;
            if gap >= it.size && best.is_none_or(|(g, _)| gap < g) {
                best = Some((gap, cursor));
                if gap == it.size {
                    break; // nothing fits tighter
                }
            }
        }
        cursor = cursor.max(p.end);
    }
    best.map_or(cursor, |(_, o)| o)
}

/// Inserts `p` into `placed`, kept sorted by offset.
pub(crate) fn insert_placed(placed: &mut Vec<Placed>, p: Placed) {
    let at = placed.partition_point(|q| q.offset <= p.offset);
    placed.insert(at, p);
}

/// Best-fit placement of `items` taken in the order of `sequence`
/// (indices into `items`; each should appear once). Buffers that take no
/// room ([`Interval::is_trivial`]) go to offset 0.
///
/// Offsets never overflow: each is the end of a stack of distinct buffers,
/// so it is at most the sum of all sizes, and ends saturate beyond that.
pub fn place_in_sequence(items: &[Interval], sequence: &[usize]) -> Vec<usize> {
    // Without a deadline the placement always completes.
    place_in_sequence_until(items, sequence, &Timeline::new(items), None).unwrap_or_default()
}

/// [`place_in_sequence`] with the instance's [`Timeline`] computed once
/// for many rounds; gives up (returns `None`) once `deadline` has passed
/// (the clock is read every 1024 buffers).
pub(crate) fn place_in_sequence_until(
    items: &[Interval],
    sequence: &[usize],
    timeline: &Timeline,
    deadline: Option<Instant>,
) -> Option<Vec<usize>> {
    place_columns(items, sequence, timeline, || {
        deadline.is_some_and(|d| Instant::now() >= d)
    })
}

/// For each buffer, how many other non-trivial buffers are alive with it at
/// some time. O(n log n): those that end by its start or start at or after
/// its end are the only ones that are not.
fn conflict_counts(items: &[Interval]) -> Vec<usize> {
    let live: Vec<&Interval> = items.iter().filter(|it| it.lower < it.upper).collect();
    let mut uppers: Vec<usize> = live.iter().map(|it| it.upper).collect();
    let mut lowers: Vec<usize> = live.iter().map(|it| it.lower).collect();
    uppers.sort_unstable();
    lowers.sort_unstable();
    items
        .iter()
        .map(|it| {
            if it.lower >= it.upper {
                return 0;
            }
            let ended = uppers.partition_point(|&u| u <= it.lower);
            let later = lowers.len() - lowers.partition_point(|&l| l < it.upper);
            // `live` includes the buffer itself.
            live.len() - ended - later - 1
        })
        .collect()
}

/// For each buffer, the largest number of bytes alive at one time during
/// its lifetime (itself included). O(n log n) with a sparse table of range
/// maxima over the compressed time axis.
fn peak_pressure(items: &[Interval]) -> Vec<usize> {
    let mut times: Vec<usize> = items
        .iter()
        .filter(|it| it.lower < it.upper)
        .flat_map(|it| [it.lower, it.upper])
        .collect();
    times.sort_unstable();
    times.dedup();
    if times.len() < 2 {
        return items.iter().map(|it| it.size).collect();
    }
    let index = |t: usize| times.partition_point(|&x| x < t);
    // Live bytes on each elementary segment [times[k], times[k+1]).
    let segments = times.len() - 1;
    let mut delta = vec![0i128; segments + 1];
    for it in items.iter().filter(|it| it.lower < it.upper) {
        delta[index(it.lower)] += it.size as i128;
        delta[index(it.upper)] -= it.size as i128;
    }
    let mut level = Vec::with_capacity(segments);
    let mut live = 0i128;
    for d in &delta[..segments] {
        live += d;
        level.push(usize::try_from(live).unwrap_or(usize::MAX));
    }
    let table = SparseMax::new(level);
    items
        .iter()
        .map(|it| {
            if it.lower >= it.upper {
                it.size
            } else {
                table.max(index(it.lower), index(it.upper))
            }
        })
        .collect()
}

/// Range maxima in O(1) after O(n log n) preprocessing.
struct SparseMax {
    levels: Vec<Vec<usize>>,
}

impl SparseMax {
    fn new(base: Vec<usize>) -> SparseMax {
        let mut levels = vec![base];
        let mut width = 1;
        while width * 2 <= levels[0].len() {
            let prev = &levels[levels.len() - 1];
            let next: Vec<usize> = (0..prev.len() - width)
                .map(|i| prev[i].max(prev[i + width]))
                .collect();
            levels.push(next);
            width *= 2;
        }
        SparseMax { levels }
    }

    /// Maximum over `[lo, hi)`; 0 when the range is empty.
    fn max(&self, lo: usize, hi: usize) -> usize {
        if hi <= lo {
            return 0;
        }
        let k = (usize::BITS - 1 - (hi - lo).leading_zeros()) as usize;
        let level = &self.levels[k];
        level[lo].max(level[hi - (1 << k)])
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::iv;
    use super::super::validate;
    use super::*;

    #[test]
    fn disjoint_lifetimes_share_bytes() {
        let items = [iv(0, 1, 100), iv(1, 2, 100)];
        let off = greedy(&items, GreedyOrder::Size);
        assert_eq!(off, vec![0, 0]);
        assert_eq!(height(&items, &off), 100);
        validate(&items, &off, Some(100)).unwrap();
    }

    #[test]
    fn best_fit_takes_the_tightest_gap() {
        // Two long-lived buffers leave gaps of 30 and 10 bytes (made by
        // short-lived fillers); a 10-byte buffer must take the 10-byte gap.
        let items = [
            iv(0, 4, 100), // bottom
            iv(0, 1, 30),  // filler above bottom, frees at t=1
            iv(0, 4, 50),  // middle
            iv(0, 1, 10),  // filler above middle
            iv(0, 4, 60),  // top
            iv(2, 3, 10),  // the buffer to place
        ];
        let seq = [0, 1, 2, 3, 4, 5];
        let off = place_in_sequence(&items, &seq);
        assert_eq!(&off[..5], &[0, 100, 130, 180, 190]);
        assert_eq!(off[5], 180, "best fit picks the 10-byte gap");
        validate(&items, &off, None).unwrap();
    }

    #[test]
    fn orders_sort_by_their_key() {
        let items = [iv(0, 10, 1), iv(2, 3, 50), iv(0, 4, 20), iv(3, 9, 5)];
        assert_eq!(GreedyOrder::Size.sequence(&items), vec![1, 2, 3, 0]);
        assert_eq!(GreedyOrder::Length.sequence(&items), vec![0, 3, 2, 1]);
        // areas: 10, 50, 80, 30
        assert_eq!(GreedyOrder::Area.sequence(&items), vec![2, 1, 3, 0]);
        // conflicts: 0 with all 3; 1 with 0,2 (t=2) and 3? [2,3) vs [3,9): no -> 2;
        // 2 with 0,1,3 -> 3; 3 with 0,2 -> 2
        assert_eq!(conflict_counts(&items), vec![3, 2, 3, 2]);
        assert_eq!(GreedyOrder::Conflicts.sequence(&items), vec![2, 0, 1, 3]);
        // peaks: t in [2,3): 1+50+20 = 71
        assert_eq!(peak_pressure(&items), vec![71, 71, 71, 26]);
        assert_eq!(GreedyOrder::Start.sequence(&items), vec![2, 0, 1, 3]);
    }

    #[test]
    fn trivial_buffers_go_to_zero() {
        let items = [iv(0, 2, 10), iv(1, 1, 10), iv(0, 2, 0), iv(0, 2, 5)];
        let off = greedy(&items, GreedyOrder::Size);
        assert_eq!(off[1], 0);
        assert_eq!(off[2], 0);
        validate(&items, &off, None).unwrap();
        assert_eq!(height(&items, &off), 15);
    }

    #[test]
    fn best_of_orders_beats_size_when_it_can() {
        let items = [iv(0, 1, 4), iv(0, 2, 2), iv(2, 5, 4), iv(1, 3, 2)];
        let size = greedy(&items, GreedyOrder::Size);
        assert_eq!(height(&items, &size), 8);
        let (winner, best) = best_of_orders(&items);
        validate(&items, &best, None).unwrap();
        assert_eq!(height(&items, &best), lower_bound(&items));
        assert_ne!(winner, Greedy::BY_SIZE);
        assert_eq!(best, winner.place(&items));
        // When greedy by size is already optimal, it is the one kept.
        let easy = [iv(0, 2, 10), iv(2, 4, 10)];
        assert_eq!(best_of_orders(&easy).0, Greedy::BY_SIZE);
        assert!(best_of_orders(&[]).1.is_empty());
    }

    #[test]
    fn lowest_first_fills_from_the_bottom() {
        // Size order would put the 50-byte buffer first; lowest first takes
        // whatever can go lowest, so the short-lived ones share offset 0.
        let items = [iv(0, 2, 10), iv(2, 4, 10), iv(1, 3, 50), iv(5, 5, 7)];
        let off = greedy_lowest(&items, GreedyOrder::Size);
        validate(&items, &off, None).unwrap();
        assert_eq!(off, vec![50, 50, 0, 0]);
        let off = greedy_lowest(&items, GreedyOrder::Start);
        assert_eq!(off, vec![0, 0, 10, 0]);
        assert_eq!(height(&items, &off), 60);
        assert_eq!(
            Greedy {
                order: GreedyOrder::Start,
                fit: GreedyFit::Lowest
            }
            .to_string(),
            "start/lowest"
        );
    }

    #[test]
    fn max_tree_matches_a_scan() {
        let mut t = MaxTree::new(9);
        let mut plain = [0usize; 9];
        let ops = [
            (0, 4, 5),
            (2, 9, 3),
            (3, 5, 8),
            (7, 8, 1),
            (6, 9, 6),
            (0, 1, 2),
        ];
        for (lo, hi, v) in ops {
            t.raise(lo, hi, v);
            for x in &mut plain[lo..hi] {
                *x = (*x).max(v);
            }
            for a in 0..9 {
                for b in a..=9 {
                    let want = plain[a..b].iter().copied().max().unwrap_or(0);
                    assert_eq!(
                        t.max(a, b),
                        want,
                        "[{a}, {b}) after raise {lo}..{hi} to {v}"
                    );
                }
            }
        }
    }

    #[test]
    fn sparse_max_matches_a_scan() {
        let base = vec![3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5];
        let t = SparseMax::new(base.clone());
        for lo in 0..base.len() {
            for hi in lo..=base.len() {
                let want = base[lo..hi].iter().copied().max().unwrap_or(0);
                assert_eq!(t.max(lo, hi), want, "[{lo}, {hi})");
            }
        }
    }
}
