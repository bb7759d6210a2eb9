//! Offset assignment for buffers with lifetimes: the dynamic storage
//! allocation problem in its static form.
//!
//! A buffer is an [`Interval`]: alive during the half-open time range
//! `[lower, upper)` and `size` bytes long. A placement gives every buffer an
//! offset so that buffers alive at the same time never share a byte; its
//! height is the largest `offset + size`. This module knows nothing of specs
//! or devices, so the planner, the MiniMalloc CSV tools and the command line
//! all go through the same code:
//!
//! - [`greedy`], [`greedy_lowest`], [`best_of_orders`]: best-fit or
//!   lowest-first placement in one or every [`GreedyOrder`] (O(n²),
//!   milliseconds for thousands of buffers; best fit in start order is one
//!   sweep over time, O(n log n), the default's first placement above
//!   [`AUTO_BEST_MAX`] buffers);
//! - [`search`]: an exact, anytime branch and bound over canonical
//!   placements (after MiniMalloc, Moffitt, ASPLOS 2023) that fits a
//!   capacity or minimises the height within a time limit;
//! - [`solve`]: picks among them by [`Strategy`], the entry point the
//!   planner and the `tensor-arena plan` command use. Its default,
//!   [`StrategyKind::Auto`], also re-orders best fit round by round
//!   (squeaky-wheel optimisation) while above the lower bound: on
//!   idealloc's S_1 (28,526 buffers, too many for the search) from 1.025x
//!   of it to 1.0002x, on three time-shifted copies of Y_1 (186,555) to
//!   the lower bound in seconds (docs/planner.md). Above 2^32 pairs per
//!   round it starts from the lowest of several sweeps (`lookahead.rs`,
//!   `levels.rs`, the latter around the busiest times' buffers placed
//!   first by the rounds, `hot.rs`) and repairs it window by window
//!   instead (`window.rs`): ten copies of Y_1 (621,850 buffers) one after
//!   the other from the sweep's 1.0215x to the lower bound in about 2 s,
//!   overlapping by half a span 1.0345x to 1.0069x, a random interval
//!   graph of 10^6 buffers 1.110x to 1.012x in about 8 s (`cargo run
//!   --release --example plan_scale`, 2026-12-05, a shared 2-core machine;
//!   BENCHMARKS.md).
//!
//! ```
//! use std::time::Duration;
//! use tensor_arena::plan::placement::{self, Interval, Strategy};
//!
//! // Two long buffers and two short ones that can share the gap between them.
//! let items = [
//!     Interval { lower: 0, upper: 4, size: 30 },
//!     Interval { lower: 0, upper: 2, size: 20 },
//!     Interval { lower: 2, upper: 4, size: 20 },
//!     Interval { lower: 1, upper: 3, size: 10 },
//! ];
//! let strategy = Strategy::search().with_time_limit(Duration::from_secs(1));
//! let solution = placement::solve(&items, &strategy)?;
//! placement::validate(&items, &solution.offsets, None)?;
//! assert_eq!(solution.height, placement::lower_bound(&items));
//! assert!(solution.optimal);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use serde::{Deserialize, Serialize};

mod bound;
mod components;
mod copies;
mod decompose;
mod engine;
mod fit_scan;
mod greedy;
mod hot;
mod layers;
mod levels;
mod lookahead;
mod pair;
mod periodic;
mod reorder;
mod search;
mod start_fit;
mod strategy;
mod sweep;
#[cfg(test)]
mod test_support;
mod validate;
mod window;

pub use bound::{
    PeakBound, busy_times_relaxation, peak_bound, peak_bound_detail, stronger_bound, window_bound,
};
pub use greedy::{
    Greedy, GreedyFit, GreedyOrder, best_of_orders, greedy, greedy_lowest, place_in_sequence,
};
pub(crate) use greedy::{Placed, best_fit_offset, insert_placed};
pub use search::{SearchConfig, SearchOutcome, SearchStatus, search};
pub use strategy::{AUTO_BEST_MAX, DEFAULT_TIME_LIMIT, Solution, Strategy, StrategyKind, solve};
pub use validate::{Violation, validate};

/// One buffer to place: alive in `[lower, upper)`, `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Interval {
    /// First time step at which the buffer is alive.
    pub lower: usize,
    /// First time step at which it is no longer alive.
    pub upper: usize,
    /// Bytes it occupies.
    pub size: usize,
}

impl Interval {
    /// Whether two buffers are alive at some common time. A buffer with an
    /// empty lifetime (`lower >= upper`) is never alive, so it overlaps
    /// nothing.
    pub fn overlaps_in_time(&self, other: &Interval) -> bool {
        self.lower < other.upper
            && other.lower < self.upper
            && self.lower < self.upper
            && other.lower < other.upper
    }

    /// Whether the buffer takes no room: zero bytes or an empty lifetime.
    /// Such buffers can sit anywhere; the placers put them at offset 0.
    pub fn is_trivial(&self) -> bool {
        self.size == 0 || self.lower >= self.upper
    }
}

/// The largest total size of buffers alive at one time: no placement can be
/// lower than this.
///
/// ```
/// use tensor_arena::plan::placement::{Interval, lower_bound};
/// let items = [
///     Interval { lower: 0, upper: 2, size: 10 },
///     Interval { lower: 1, upper: 3, size: 20 },
/// ];
/// assert_eq!(lower_bound(&items), 30);
/// ```
pub fn lower_bound(items: &[Interval]) -> usize {
    // Sweep over start/end events; ends sort before starts at the same time
    // because intervals are half-open.
    let mut events: Vec<(usize, bool, usize)> = Vec::with_capacity(items.len() * 2);
    for it in items.iter().filter(|it| it.lower < it.upper) {
        events.push((it.lower, true, it.size));
        events.push((it.upper, false, it.size));
    }
    events.sort_unstable_by_key(|&(t, is_start, _)| (t, is_start));
    let (mut live, mut best) = (0usize, 0usize);
    for (_, is_start, size) in events {
        if is_start {
            live = live.saturating_add(size);
            best = best.max(live);
        } else {
            live = live.saturating_sub(size);
        }
    }
    best
}

/// The time left until `deadline` (unbounded without one, zero once it
/// passed): the time limit of a search that must end by then.
pub(super) fn time_left(deadline: Option<std::time::Instant>) -> std::time::Duration {
    deadline.map_or(std::time::Duration::MAX, |d| {
        d.saturating_duration_since(std::time::Instant::now())
    })
}

/// Height of a placement: the largest `offset + size`.
///
/// ```
/// use tensor_arena::plan::placement::{Interval, height};
/// let items = [Interval { lower: 0, upper: 1, size: 8 }];
/// assert_eq!(height(&items, &[16]), 24);
/// ```
pub fn height(items: &[Interval], offsets: &[usize]) -> usize {
    items
        .iter()
        .zip(offsets)
        .map(|(it, &o)| o.saturating_add(it.size))
        .max()
        .unwrap_or(0)
}

/// Sum of all sizes, or `None` if it does not fit in `usize`. When it fits,
/// no offset or height any placer here computes can overflow.
pub(crate) fn total_size(items: &[Interval]) -> Option<usize> {
    items
        .iter()
        .try_fold(0usize, |acc, it| acc.checked_add(it.size))
}

/// The distinct start and end times of the buffers that take room,
/// ascending: the time axis the sweeps index by rank.
pub(crate) fn distinct_times(items: &[Interval]) -> Vec<usize> {
    let mut times: Vec<usize> = items
        .iter()
        .filter(|it| !it.is_trivial())
        .flat_map(|it| [it.lower, it.upper])
        .collect();
    times.sort_unstable();
    times.dedup();
    times
}

#[cfg(test)]
mod tests {
    use super::test_support::iv;
    use super::*;

    #[test]
    fn lower_bound_counts_simultaneous_bytes() {
        let items = [iv(0, 2, 10), iv(1, 3, 20), iv(2, 4, 5)];
        // t=1: 10+20, t=2: 20+5
        assert_eq!(lower_bound(&items), 30);
        assert_eq!(lower_bound(&[]), 0);
    }

    #[test]
    fn empty_lifetimes_overlap_nothing() {
        assert!(!iv(5, 5, 10).overlaps_in_time(&iv(0, 10, 10)));
        assert!(!iv(0, 10, 10).overlaps_in_time(&iv(5, 5, 10)));
        assert!(iv(0, 10, 10).overlaps_in_time(&iv(9, 12, 1)));
        assert!(!iv(0, 10, 10).overlaps_in_time(&iv(10, 12, 1)));
        assert!(iv(3, 3, 1).is_trivial() && iv(0, 1, 0).is_trivial());
    }

    #[test]
    fn height_is_the_highest_end() {
        let items = [iv(0, 1, 10), iv(0, 1, 5)];
        assert_eq!(height(&items, &[0, 10]), 15);
        assert_eq!(height(&[], &[]), 0);
    }
}
