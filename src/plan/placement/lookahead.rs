//! Best fit in start order with a lookahead for long buffers: more first
//! placements at the sweep's cost, for instances too large for the
//! re-ordering rounds.
//!
//! The sweep ([`start_best_fit`]) places each buffer when it starts, in
//! the tightest gap among the buffers alive then. A long-lived buffer that
//! starts just after a burst of short ones lands on top of them and stays
//! there for its whole life, long after they are gone: on copies of a
//! training step that overlap in time, those long buffers are the ones
//! that end above the lower bound, and local repair cannot move them
//! (docs/planner.md). Here a buffer's lifetime is stretched back by a small
//! fraction of its length before the sweep: a long buffer is then placed a
//! little before the short ones starting just ahead of it, so it goes into
//! the low gap they would have taken, and they fill around it. The
//! stretched lifetimes contain the real ones, so every placement of them
//! is valid for the real buffers. Short buffers (shorter than the
//! inverse of the fraction) are not stretched at all.
//!
//! Which fraction works best varies from instance to instance (and not
//! smoothly), so a few are tried ([`LOOKAHEADS`]), each one sweep of
//! O(n log n), and the lowest placement is kept, the plain sweep included:
//! the result is never higher than the sweep's. Deterministic, unless the
//! deadline stops the sweeps early.
//!
//! Memory: the stretched copy of the instance (24 bytes per buffer) and
//! the offsets of the sweep running (8 bytes per buffer), beside the best
//! offsets so far, plus the sweep's O(alive) ordered maps.

use std::time::Instant;

use super::start_fit::start_best_fit;
use super::{Interval, height};

/// Lookaheads tried, in thousandths of a buffer's lifetime, in order. On
/// ten copies of idealloc's Y_1, shifted by a quarter to a whole span, each
/// of these alone takes the sweep's 1.021-1.050x to 1.007-1.016x; the
/// best of them to 1.007-1.010x. Larger ones stretch lifetimes so far that
/// the space they hold for nothing costs more than the order gains (1%:
/// 1.015-1.016x, 5%: 1.033-1.036x).
pub(super) const LOOKAHEADS: [usize; 4] = [2, 3, 4, 6];

/// `items` with every lifetime started `permille` thousandths of its
/// length earlier (at 0 at the earliest). Buffers that take no room stay
/// as they are.
pub(super) fn stretched(items: &[Interval], permille: usize) -> Vec<Interval> {
    items
        .iter()
        .map(|it| {
            if it.is_trivial() {
                return *it;
            }
            let ahead = (it.upper - it.lower).saturating_mul(permille) / 1000;
            Interval {
                lower: it.lower.saturating_sub(ahead),
                ..*it
            }
        })
        .collect()
}

/// The lowest of the placements of `items` by [`start_best_fit`] over the
/// lifetimes stretched by each of [`LOOKAHEADS`], and `start` (a valid
/// placement, the plain sweep's). Returns the offsets and the lookahead
/// that placed them (`None`: `start` was not beaten). Sweeps stop once
/// `deadline` passes, or once a placement reaches `goal`.
pub(super) fn best_lookahead(
    items: &[Interval],
    start: Vec<usize>,
    goal: usize,
    deadline: Option<Instant>,
) -> (Vec<usize>, Option<usize>) {
    let mut best = (height(items, &start), start, None);
    for permille in LOOKAHEADS {
        if best.0 <= goal || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let offsets = start_best_fit(&stretched(items, permille));
        let h = height(items, &offsets);
        if h < best.0 {
            best = (h, offsets, Some(permille));
        }
    }
    (best.1, best.2)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::test_support::iv;
    use super::super::{lower_bound, validate};
    use super::*;

    #[test]
    fn a_long_buffer_goes_under_the_short_one_before_it() {
        // The plain sweep puts the 4-byte buffer starting at 1 at 0 and
        // the long one starting at 2 on top of it; at 3 the short one is
        // gone and 8 bytes go on top of the long one: 16. Two thousandths
        // of 1,000 steps start the long one at 0, under the short one; the
        // 8 bytes then sit on it at 4: 12, the lower bound.
        let items = [iv(1, 3, 4), iv(2, 1002, 4), iv(3, 4, 8)];
        let sweep = start_best_fit(&items);
        assert_eq!(height(&items, &sweep), 16);
        let (offsets, permille) = best_lookahead(&items, sweep, 0, None);
        validate(&items, &offsets, None).unwrap();
        assert_eq!(height(&items, &offsets), lower_bound(&items));
        assert_eq!(permille, Some(2));
        assert_eq!(offsets, vec![4, 0, 4]);
    }

    #[test]
    fn stretching_keeps_short_and_trivial_buffers() {
        let items = [iv(10, 20, 4), iv(5, 5, 9), iv(0, 3000, 0), iv(2, 3002, 1)];
        let s = stretched(&items, 3);
        assert_eq!(&s[..3], &items[..3]);
        assert_eq!(s[3], iv(0, 3002, 1), "9 steps earlier, cut at 0");
    }

    #[test]
    fn the_goal_and_the_deadline_stop_it() {
        let items = [iv(1, 3, 4), iv(2, 1002, 4), iv(3, 4, 8)];
        let sweep = start_best_fit(&items);
        let (offsets, permille) = best_lookahead(&items, sweep.clone(), 16, None);
        assert_eq!((offsets, permille), (sweep.clone(), None));
        let (offsets, permille) = best_lookahead(&items, sweep.clone(), 0, Some(Instant::now()));
        assert_eq!((offsets, permille), (sweep, None));
    }

    proptest! {
        // Every lookahead placement is valid for the real lifetimes and
        // the kept one is never above the plain sweep.
        #[test]
        fn valid_and_never_above_the_sweep(
            raw in prop::collection::vec((0usize..3000, 0usize..2500, 0usize..40), 0..150),
        ) {
            let items: Vec<Interval> = raw.iter().map(|&(l, d, s)| iv(l, l + d, s)).collect();
            for permille in LOOKAHEADS {
                let offsets = start_best_fit(&stretched(&items, permille));
                prop_assert!(validate(&items, &offsets, None).is_ok());
            }
            let sweep = start_best_fit(&items);
            let (offsets, _) = best_lookahead(&items, sweep.clone(), 0, None);
            prop_assert!(validate(&items, &offsets, None).is_ok());
            prop_assert!(height(&items, &offsets) <= height(&items, &sweep));
            prop_assert!(height(&items, &offsets) >= lower_bound(&items));
        }
    }
}
