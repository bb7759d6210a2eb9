//! Local repair of a placement: re-placing the buffers of one short stretch
//! of time at a time, the rest held where they are.
//!
//! A re-ordering round ([`reorder`](super::reorder)) re-places every
//! buffer, and best fit compares each with every placed buffer alive with
//! it: within one stretch of time where something is always alive, that is
//! quadratic in the stretch, and a stretch of hundreds of thousands of
//! buffers takes minutes per round. Here the moves are neighbourhood-local:
//! for a buffer that ends above the goal (a "squeaky" one), the window is
//! the stretch of time around it that holds about [`WINDOWS`] buffers by
//! start; the buffers whose whole lifetime lies in the window are taken
//! out and placed again by best fit (largest first, then a few
//! squeaky-wheel rounds among themselves), around the buffers that cross
//! the window's edges, which stay put (they are what ties the window to
//! the rest). The window's new placement is kept only when its highest end
//! is lower than before, so the height never rises. A window costs
//! O(w · (w + c)) for its w buffers and the c buffers crossing its edges,
//! independent of n; windows are visited in start order with one sweep, so
//! the buffers crossing an edge are found in O(alive) per window.
//!
//! Memory: per buffer, its position in start order and its rank (two
//! `u32`s and one `usize`), plus the window's own O(w + c).

use std::time::Instant;

use super::Interval;
use super::fit_scan::{Column, Timeline};

/// Buffers per window on each side of the squeaky one, one pass per
/// entry: small windows first (cheap, most repairs), then larger ones for
/// what is left. (A second pass at the same size lowered nothing more on
/// ten copies of Y_1; doubling from 256 spent the time in small windows.)
pub(super) const WINDOWS: [usize; 4] = [256, 1024, 2048, 4096];

/// A window is skipped when more buffers start in it than this many times
/// its nominal size (a long-lived squeaky buffer spans too much). 16, not
/// 4: with copies of Y_1 half a span apart, 4 skipped the windows that
/// lower the height (1.0275x against 1.0216x), at no cost elsewhere.
const SPREAD: usize = 16;

/// Squeaky-wheel rounds within one window at most.
const WINDOW_ROUNDS: usize = 6;

/// A window's rounds stop after this many without a lower top.
const WINDOW_PATIENCE: usize = 2;

/// What the repair did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Repair {
    /// Windows whose buffers were re-placed lower.
    pub improved: u32,
    /// Windows tried.
    pub tried: u32,
}

/// Lowers `offsets` (a valid placement of `items`) window by window until
/// every buffer ends at or below `goal`, the passes are done, or `deadline`
/// passes. Every accepted window keeps the placement valid and lowers that
/// window's highest end, so the height never rises. Deterministic unless
/// the deadline stops it.
pub(super) fn repair(
    items: &[Interval],
    offsets: &mut [usize],
    goal: usize,
    deadline: Option<Instant>,
) -> Repair {
    repair_passes(items, offsets, goal, deadline, false)
}

/// [`repair`] where nothing after it would use the time it saves: a pass
/// of larger windows that lowers nothing ends it only where the pass
/// before it (not the first) lowered nothing either. Where a mid-size pass
/// still lowered the height, the windows are finding what holds it at
/// larger sizes: deepspeed_zero3 subset0.8 x30 a quarter span apart
/// (733,890 buffers) went 1.0686x -> 1.0505x at 1,024 a side, nothing at
/// 2,048, and stopped there at 1.05052x the load bound with 4 of its 10 s
/// left; 4,096 takes it to 1.04572x (docs/planner.md, eighteenth pass).
/// Every pass regardless cost S_1 and four table rows their time to the
/// limit for nothing.
pub(super) fn repair_patiently(
    items: &[Interval],
    offsets: &mut [usize],
    goal: usize,
    deadline: Option<Instant>,
) -> Repair {
    repair_passes(items, offsets, goal, deadline, true)
}

/// [`repair`], or [`repair_patiently`] where `patient`.
fn repair_passes(
    items: &[Interval],
    offsets: &mut [usize],
    goal: usize,
    deadline: Option<Instant>,
    patient: bool,
) -> Repair {
    let mut out = Repair::default();
    let mut by_start: Vec<usize> = (0..items.len())
        .filter(|&i| !items[i].is_trivial())
        .collect();
    by_start.sort_unstable_by_key(|&i| (items[i].lower, items[i].upper, i));
    let mut pos = vec![0u32; items.len()];
    for (p, &i) in by_start.iter().enumerate() {
        pos[i] = u32::try_from(p).unwrap_or(u32::MAX);
    }
    let above = |offsets: &[usize], i: usize| offsets[i].saturating_add(items[i].size) > goal;
    let late = || deadline.is_some_and(|d| Instant::now() >= d);
    let timeline = Timeline::new(items);
    let mut scratch = Scratch::default();
    // Whether the last pass after the first lowered the height.
    let mut lowered_before = false;
    for (pass, half) in WINDOWS.into_iter().enumerate() {
        let height_before = super::height(items, offsets);
        let squeaky: Vec<usize> = by_start
            .iter()
            .copied()
            .filter(|&i| above(offsets, i))
            .collect();
        if squeaky.is_empty() {
            break;
        }
        // Buffers that started before the current window's start and may
        // still be alive at it: a sweep, since windows come in start order.
        let mut active: Vec<usize> = Vec::new();
        let mut swept = 0usize;
        // Squeaky buffers before this position were in a window of this
        // pass already: one window per stretch, not one per buffer.
        let mut covered = 0usize;
        for s in squeaky {
            let p = pos[s] as usize;
            if p < covered || !above(offsets, s) {
                continue; // an earlier window lowered it, or tried to
            }
            if late() {
                return out;
            }
            let a = p.saturating_sub(half);
            let b = (p + half).min(by_start.len() - 1);
            let t0 = items[by_start[a]].lower;
            let t1 = items[s].upper.max(items[by_start[b]].lower);
            let first = by_start.partition_point(|&i| items[i].lower < t0);
            let past = by_start.partition_point(|&i| items[i].lower < t1);
            if past - first > SPREAD * 2 * half {
                continue;
            }
            while swept < first {
                active.push(by_start[swept]);
                swept += 1;
            }
            active.retain(|&i| items[i].upper > t0);
            covered = p + half / 2;
            out.tried += 1;
            if scratch.window(
                items,
                &timeline,
                offsets,
                &by_start[first..past],
                &active,
                t1,
                goal,
                &late,
            ) {
                out.improved += 1;
            }
        }
        // A pass of larger windows that left the height where it was: the
        // next, larger still, costs more and (on ten copies of Y_1, on S_1
        // after the rounds) lowered nothing either, and the time saved
        // goes to what follows (a second start, the late rounds, the
        // search). The first pass does not end it: with copies a quarter
        // span apart, 256 lowered nothing and 1,024 did.
        let lowered = super::height(items, offsets) < height_before;
        if pass > 0 && !lowered && !(patient && lowered_before) {
            break;
        }
        lowered_before = pass > 0 && lowered;
    }
    out
}

/// Buffers reused from window to window.
#[derive(Default)]
struct Scratch {
    /// The window's own buffers (item indices).
    inside: Vec<usize>,
    /// The buffers that stay put: item indices.
    fixed: Vec<usize>,
}

impl Scratch {
    /// Re-places the buffers of `starting` (those starting in the window,
    /// in start order) that end by `t1`, around `crossing` (started before
    /// the window, possibly still alive in it) and those of `starting`
    /// that end after `t1`. Returns whether the new placement was kept.
    #[allow(clippy::too_many_arguments)]
    fn window(
        &mut self,
        items: &[Interval],
        timeline: &Timeline,
        offsets: &mut [usize],
        starting: &[usize],
        crossing: &[usize],
        t1: usize,
        goal: usize,
        late: &impl Fn() -> bool,
    ) -> bool {
        self.inside.clear();
        self.fixed.clear();
        for &i in starting {
            if items[i].upper <= t1 {
                self.inside.push(i);
            } else {
                self.fixed.push(i);
            }
        }
        self.fixed.extend_from_slice(crossing);
        let old_top = self
            .inside
            .iter()
            .map(|&i| offsets[i] + items[i].size)
            .max()
            .unwrap_or(0);
        if old_top <= goal {
            return false;
        }
        // Largest first (ties by start), then the squeaky ones forward.
        let mut sequence = self.inside.clone();
        sequence.sort_by_key(|&i| (std::cmp::Reverse(items[i].size), items[i].lower, i));
        let mut best: Option<(usize, Vec<usize>)> = None;
        let mut placed_at = vec![0usize; sequence.len()];
        // The buffers that stay put, once per window (by offset, so each
        // goes to the end of a chunk), copied for every round.
        self.fixed.sort_unstable_by_key(|&i| (offsets[i], i));
        let mut around = Column::default();
        for &i in &self.fixed {
            let (lo, hi) = timeline.ranks(i);
            around.insert(lo, hi, offsets[i], offsets[i] + items[i].size);
        }
        let mut stale = 0;
        for round in 0..WINDOW_ROUNDS {
            if round > 0 && late() {
                break;
            }
            let mut column = around.clone();
            let mut top = 0usize;
            let mut cut = false;
            for (k, &i) in sequence.iter().enumerate() {
                if k % 1024 == 1023 && late() {
                    cut = true;
                    break;
                }
                let (lo, hi) = timeline.ranks(i);
                let offset = column.best_fit(lo, hi, items[i].size);
                placed_at[k] = offset;
                top = top.max(offset + items[i].size);
                column.insert(lo, hi, offset, offset + items[i].size);
            }
            if cut {
                break; // the deadline: an unfinished round is dropped
            }
            let mut by_item: Vec<(usize, usize)> = sequence
                .iter()
                .copied()
                .zip(placed_at.iter().copied())
                .collect();
            by_item.sort_unstable();
            let new: Vec<usize> = by_item.into_iter().map(|(_, o)| o).collect();
            if best.as_ref().is_none_or(|(t, _)| top < *t) {
                best = Some((top, new));
                stale = 0;
            } else {
                stale += 1;
            }
            if top <= goal || stale >= WINDOW_PATIENCE {
                break;
            }
            // Squeaky-wheel: the buffers that ended above the goal go first.
            let squeaks = |&(i, o): &(usize, usize)| o + items[i].size > goal;
            let pairs = || sequence.iter().copied().zip(placed_at.iter().copied());
            let next: Vec<usize> = pairs()
                .filter(squeaks)
                .chain(pairs().filter(|p| !squeaks(p)))
                .map(|(i, _)| i)
                .collect();
            sequence = next;
        }
        match best {
            Some((top, new)) if top < old_top => {
                let mut sorted = self.inside.clone();
                sorted.sort_unstable();
                for (i, o) in sorted.into_iter().zip(new) {
                    offsets[i] = o;
                }
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::test_support::iv;
    use super::super::{GreedyOrder, greedy, height, lower_bound, validate};
    use super::*;

    #[test]
    fn a_bad_window_is_lowered_and_the_rest_kept() {
        // Two buffers stacked in a stretch where they need not be: one
        // short-lived pair placed badly on top of a long one.
        let items = [iv(0, 10, 8), iv(0, 4, 4), iv(5, 9, 4), iv(20, 30, 8)];
        let mut offsets = vec![0, 8, 12, 0];
        let lb = lower_bound(&items);
        assert_eq!(lb, 12);
        let out = repair(&items, &mut offsets, lb, None);
        validate(&items, &offsets, None).unwrap();
        assert_eq!(height(&items, &offsets), 12);
        assert_eq!(out.improved, 1);
        assert_eq!(offsets[3], 0, "a buffer of no squeaky window stays");
    }

    #[test]
    fn a_placement_at_the_goal_is_left_alone() {
        let items = [iv(0, 2, 4), iv(1, 3, 4)];
        let mut offsets = vec![0, 4];
        assert_eq!(repair(&items, &mut offsets, 8, None), Repair::default());
        assert_eq!(offsets, vec![0, 4]);
    }

    /// A long buffer of `s` bytes placed a row up for no reason (from time
    /// `t`, `m` steps), one-step buffers of `s` bytes under it, and at its
    /// end a `k`-byte buffer above it (height `2s + k`, load `s + k`): only
    /// a window holding the long buffer whole (about `m` buffers start
    /// before the `k`-byte one) lowers it, to `s + k`.
    fn gadget(t: usize, m: usize, s: usize, k: usize) -> (Vec<Interval>, Vec<usize>) {
        let mut items = vec![iv(t, t + m, s)];
        let mut offsets = vec![s];
        for j in t..t + m - 1 {
            items.push(iv(j, j + 1, s));
            offsets.push(0);
        }
        items.push(iv(t + m - 1, t + m, k));
        offsets.push(2 * s);
        (items, offsets)
    }

    #[test]
    fn a_stall_after_a_lowering_pass_does_not_end_the_patient_repair() {
        // 600 steps reached by 1,024 a side (height 7 -> 6), then 3,000
        // reached only by 4,096 (6 -> 5, the load bound); 2,048 lowers
        // nothing in between, where the plain repair stops.
        let (mut items, mut offsets) = gadget(0, 600, 2, 3);
        let (more, more_offsets) = gadget(1000, 3000, 1, 4);
        items.extend(more);
        offsets.extend(more_offsets);
        validate(&items, &offsets, None).unwrap();
        let lb = lower_bound(&items);
        assert_eq!((lb, height(&items, &offsets)), (5, 7));
        let mut plain = offsets.clone();
        repair(&items, &mut plain, lb, None);
        validate(&items, &plain, None).unwrap();
        assert_eq!(height(&items, &plain), 6, "the plain repair stops at 2,048");
        let out = repair_patiently(&items, &mut offsets, lb, None);
        validate(&items, &offsets, None).unwrap();
        assert_eq!(height(&items, &offsets), 5);
        assert_eq!(out.improved, 2);
    }

    #[test]
    fn a_patient_repair_still_stops_where_no_larger_pass_lowered() {
        // One gadget of 3,000 steps: 1,024 and 2,048 lower nothing, so
        // the patient repair stops there too (and leaves it at 4).
        let (items, mut offsets) = gadget(0, 3000, 1, 2);
        let lb = lower_bound(&items);
        assert_eq!((lb, height(&items, &offsets)), (3, 4));
        let out = repair_patiently(&items, &mut offsets, lb, None);
        assert_eq!((height(&items, &offsets), out.improved), (4, 0));
    }

    proptest! {
        // The shadow model is the validator: every repaired placement is
        // valid, never higher, and unchanged when nothing is above the goal.
        #[test]
        fn repairs_stay_valid_and_never_rise(
            raw in prop::collection::vec((0usize..60, 0usize..12, 0usize..40), 0..120),
            order in 0usize..3,
        ) {
            let items: Vec<Interval> = raw.iter().map(|&(l, d, s)| iv(l, l + d, s)).collect();
            let order = [GreedyOrder::Start, GreedyOrder::Size, GreedyOrder::Area][order];
            let mut offsets = greedy(&items, order);
            let before = height(&items, &offsets);
            let lb = lower_bound(&items);
            repair(&items, &mut offsets, lb, None);
            prop_assert!(validate(&items, &offsets, None).is_ok());
            prop_assert!(height(&items, &offsets) <= before);
            prop_assert!(height(&items, &offsets) >= lb);
        }
    }
}
