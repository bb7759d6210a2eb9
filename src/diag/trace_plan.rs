//! What a planned arena would need for a trace: every allocation becomes a
//! buffer alive from its alloc event to its free event (a buffer never
//! freed lives to the end of the trace, from its own alloc event), placed
//! in one slab.
//!
//! Small traces go through the planner's greedy placement whole. Large
//! ones are placed in a way that scales and stays near the lower bound on
//! training traces, which repeat a step:
//!
//! 1. Buffers that live long (more than 1/64 of the trace) are *long*;
//!    the others are cut into *windows*: stretches of overlapping short
//!    lifetimes, in a training trace about one step each. A long buffer
//!    does not join the windows it spans, so they stay apart; a window is
//!    also cut where only a few small buffers cross (a prefetched batch
//!    crossing the step boundary), those becoming long ones.
//! 2. Long buffers are placed first, by the greedy best-fit rule in the
//!    order they start, with their real lifetimes: those never freed stack
//!    up in allocation order, as a stack allocator would put them.
//! 3. Each window is placed on its own around the long buffers alive
//!    during it (best fit in the gaps they leave, greedy by size); a window
//!    that ends above the lower bound is tried again in every greedy order.
//!
//! Time is about linear in the trace for a bounded window size (a window
//! that grows past [`MAX_WINDOW`] is cut, its buffers alive across the cut
//! becoming long ones).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::Serialize;

use super::trace::Trace;
use crate::plan::DEFAULT_OFFSET_ALIGN;
use crate::plan::layout::slot_size;
use crate::plan::placement::{self, GreedyOrder, Interval, Placed, best_fit_offset, insert_placed};

/// Traces with at most this many allocations are placed in one greedy
/// pass; larger ones window by window (see the module docs).
pub const WHOLE_TRACE_LIMIT: usize = 4096;

/// A window is cut once it holds this many buffers.
pub const MAX_WINDOW: usize = 4096;

/// A window is also cut where no more than this many of its buffers are
/// alive, if they hold at most 1/64 of its peak bytes.
const CROSS_MAX: usize = 8;

/// The arena's plan for a trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArenaPlan {
    /// One buffer per allocation, in allocation order: its life in event
    /// indices and its slot size.
    #[serde(skip)]
    pub intervals: Vec<Interval>,
    /// Offset of each buffer in the slab.
    #[serde(skip)]
    pub offsets: Vec<usize>,
    /// The slab: the one device allocation the arena makes.
    pub slab_bytes: u64,
    /// The largest total of slot bytes live at once; no placement is
    /// smaller.
    pub lower_bound: u64,
    /// Bytes of buffers live until the end of the trace (weights, state).
    pub held_bytes: u64,
    /// Independent windows the trace was placed in (1 when placed whole).
    pub windows: usize,
    /// Buffers placed as long-lived ones, before the windows (0 when
    /// placed whole).
    pub long_lived: usize,
}

impl ArenaPlan {
    /// `slab_bytes / lower_bound`: 1.0 is a perfect packing.
    pub fn footprint_ratio(&self) -> f64 {
        if self.lower_bound == 0 {
            1.0
        } else {
            self.slab_bytes as f64 / self.lower_bound as f64
        }
    }
}

/// The intervals of a trace: each allocation lives in
/// `[alloc event, free event)`, or to the end of the trace, and takes its
/// slot size ([`slot_size`] with the planner's default 512-byte alignment).
pub fn intervals(trace: &Trace) -> Vec<Interval> {
    let end = trace.events().len();
    trace
        .allocations()
        .iter()
        .map(|a| Interval {
            lower: a.alloc_at,
            upper: a.free_at.unwrap_or(end).max(a.alloc_at + 1),
            size: slot_size(a.size, DEFAULT_OFFSET_ALIGN as u64)
                .and_then(|s| usize::try_from(s).ok())
                .unwrap_or(usize::MAX),
        })
        .collect()
}

/// Plans a slab for the trace (see the module docs for the method).
///
/// ```
/// use tensor_arena::diag::{plan_trace, Trace};
/// // a and b overlap; c reuses a's bytes.
/// let t = Trace::from_csv("t", "alloc,a,1000\nalloc,b,1000\nfree,a\nalloc,c,1000\n")?;
/// let plan = plan_trace(&t);
/// assert_eq!(plan.slab_bytes, 2 * 1536); // 1000 + 32 rounded to 512
/// assert_eq!(plan.lower_bound, 2 * 1536);
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub fn plan_trace(trace: &Trace) -> ArenaPlan {
    let items = intervals(trace);
    let lower_bound = placement::lower_bound(&items);
    let held_bytes = trace
        .allocations()
        .iter()
        .zip(&items)
        .filter(|(a, _)| a.free_at.is_none())
        .map(|(_, it)| it.size as u64)
        .sum();
    let (offsets, windows, long_lived) = if items.len() <= WHOLE_TRACE_LIMIT {
        (place(&items), 1, 0)
    } else {
        place_windowed(&items, trace.events().len(), lower_bound)
    };
    let slab_bytes = placement::height(&items, &offsets) as u64;
    ArenaPlan {
        intervals: items,
        offsets,
        slab_bytes,
        lower_bound: lower_bound as u64,
        held_bytes,
        windows,
        long_lived,
    }
}

/// The placement for traces placed whole: greedy by size, best fit.
pub fn place(items: &[Interval]) -> Vec<usize> {
    placement::greedy(items, GreedyOrder::Size)
}

/// Best-fit placement of `items[i]` for `i` in `sequence`, around the
/// buffers in `fixed` (sorted by offset). Returns the offsets in sequence
/// order. When the sequence goes by start time, buffers that ended before
/// the current start can never overlap a later one and are dropped from the
/// scan, so that it costs the number of buffers alive at once, not all.
fn best_fit_around(
    items: &[Interval],
    sequence: &[usize],
    fixed: &[Placed],
    by_start: bool,
) -> Vec<usize> {
    let mut placed: Vec<Placed> = fixed.to_vec();
    let mut out = Vec::with_capacity(sequence.len());
    for &i in sequence {
        let it = &items[i];
        if it.is_trivial() {
            out.push(0);
            continue;
        }
        if by_start {
            placed.retain(|p| p.upper() > it.lower);
        }
        let offset = best_fit_offset(&placed, it);
        out.push(offset);
        insert_placed(&mut placed, Placed::of(it, offset));
    }
    out
}

/// Long buffers first, then window by window (module docs).
fn place_windowed(
    items: &[Interval],
    events: usize,
    lower_bound: usize,
) -> (Vec<usize>, usize, usize) {
    let long_after = (events / 64).max(1);
    let mut long: Vec<usize> = Vec::new();
    let mut short: Vec<usize> = Vec::new();
    for (i, it) in items.iter().enumerate() {
        if it.upper - it.lower > long_after {
            long.push(i);
        } else {
            short.push(i);
        }
    }
    short.sort_by_key(|&i| items[i].lower);
    // Windows of overlapping short lifetimes. A window is also cut where
    // at most CROSS_MAX of its buffers, holding at most 1/64 of its peak
    // bytes, are alive (a step boundary crossed by a prefetched batch), and
    // where it reaches MAX_WINDOW buffers; the buffers alive across a cut
    // join the long ones.
    let mut windows: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    // Ends and sizes of the current window's buffers still alive.
    let mut alive: BinaryHeap<Reverse<(usize, usize)>> = BinaryHeap::new();
    let (mut alive_bytes, mut peak_bytes) = (0usize, 0usize);
    for &i in &short {
        let it = &items[i];
        while let Some(&Reverse((upper, size))) = alive.peek() {
            if upper > it.lower {
                break;
            }
            alive.pop();
            alive_bytes -= size;
        }
        let few = alive.len() <= CROSS_MAX && alive_bytes <= peak_bytes / 64;
        let cut = !current.is_empty() && (alive.is_empty() || few || current.len() >= MAX_WINDOW);
        if cut {
            if !alive.is_empty() {
                let (keep, cross): (Vec<usize>, Vec<usize>) =
                    current.iter().partition(|&&j| items[j].upper <= it.lower);
                long.extend(cross);
                current = keep;
                alive.clear();
                alive_bytes = 0;
            }
            if !current.is_empty() {
                windows.push(std::mem::take(&mut current));
            }
            peak_bytes = 0;
        }
        alive.push(Reverse((it.upper, it.size)));
        alive_bytes += it.size;
        peak_bytes = peak_bytes.max(alive_bytes);
        current.push(i);
    }
    if !current.is_empty() {
        windows.push(current);
    }
    let mut offsets = vec![0usize; items.len()];
    let long_seq: Vec<usize> = {
        let sub: Vec<Interval> = long.iter().map(|&i| items[i]).collect();
        GreedyOrder::Start
            .sequence(&sub)
            .into_iter()
            .map(|k| long[k])
            .collect()
    };
    for (&i, off) in long_seq
        .iter()
        .zip(best_fit_around(items, &long_seq, &[], true))
    {
        offsets[i] = off;
    }
    // Long buffers by start, to find those alive in each window: windows
    // come in start order, so one pass keeps the ones that may overlap
    // (extra ones are skipped by the time check of the scan).
    let mut by_start: Vec<usize> = long.clone();
    by_start.sort_by_key(|&i| items[i].lower);
    let mut next_long = 0;
    let mut active: Vec<usize> = Vec::new();
    for window in &windows {
        let start = window.iter().map(|&i| items[i].lower).min().unwrap_or(0);
        let end = window.iter().map(|&i| items[i].upper).max().unwrap_or(0);
        while next_long < by_start.len() && items[by_start[next_long]].lower < end {
            active.push(by_start[next_long]);
            next_long += 1;
        }
        active.retain(|&i| items[i].upper > start);
        let mut fixed: Vec<Placed> = active
            .iter()
            .map(|&i| Placed::of(&items[i], offsets[i]))
            .collect();
        fixed.sort_by_key(|p| p.offset());
        let sub: Vec<Interval> = window.iter().map(|&i| items[i]).collect();
        let height = |seq: &[usize], offs: &[usize]| {
            seq.iter()
                .zip(offs)
                .map(|(&k, &o)| o.saturating_add(sub[k].size))
                .max()
                .unwrap_or(0)
        };
        let mut best: Option<(usize, Vec<usize>, Vec<usize>)> = None;
        for order in GreedyOrder::ALL {
            let seq = order.sequence(&sub);
            let offs = best_fit_around(&sub, &seq, &fixed, false);
            let h = height(&seq, &offs);
            if best.as_ref().is_none_or(|(bh, _, _)| h < *bh) {
                best = Some((h, seq, offs));
            }
            // Only a window that rises above the bound is worth more tries.
            if h <= lower_bound {
                break;
            }
        }
        if let Some((_, seq, offs)) = best {
            for (k, off) in seq.into_iter().zip(offs) {
                offsets[window[k]] = off;
            }
        }
    }
    (offsets, windows.len(), long.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::{SyntheticConfig, synthetic};

    #[test]
    fn slots_match_the_caching_allocator_rounding() {
        for r in [
            0,
            1,
            31,
            32,
            479,
            480,
            481,
            512,
            4096,
            1 << 20,
            (1 << 20) + 7,
        ] {
            assert_eq!(
                slot_size(r, DEFAULT_OFFSET_ALIGN as u64),
                Some(crate::caching::rules::round_size(r)),
                "{r}"
            );
        }
    }

    #[test]
    fn windowed_plans_are_valid_and_within_one_percent() {
        let t = synthetic(&SyntheticConfig {
            steps: 120,
            ..SyntheticConfig::default()
        })
        .unwrap();
        assert!(
            t.allocations().len() > WHOLE_TRACE_LIMIT,
            "exercise windows"
        );
        let plan = plan_trace(&t);
        assert!(plan.windows > 100, "one window a step: {}", plan.windows);
        // The weights and their gradients.
        assert!(plan.long_lived >= 8, "{}", plan.long_lived);
        placement::validate(
            &plan.intervals,
            &plan.offsets,
            Some(plan.slab_bytes as usize),
        )
        .unwrap();
        assert!(plan.slab_bytes >= plan.lower_bound);
        assert!(plan.footprint_ratio() <= 1.01, "{}", plan.footprint_ratio());
    }

    #[test]
    fn lifetimes_across_steps_and_late_held_buffers_stay_within_one_percent() {
        // A prefetched batch crosses every step boundary and 42 buffers are
        // made at random steps and never freed: windows must not collapse.
        for seed in [1, 3] {
            let t = synthetic(&SyntheticConfig {
                steps: 300,
                seed,
                prefetch: true,
                late_held: 42,
                ..SyntheticConfig::default()
            })
            .unwrap();
            let plan = plan_trace(&t);
            assert!(plan.windows >= 290, "{}", plan.windows);
            placement::validate(&plan.intervals, &plan.offsets, None).unwrap();
            assert!(plan.footprint_ratio() <= 1.01, "{}", plan.footprint_ratio());
        }
    }

    #[test]
    fn held_buffers_live_from_their_own_alloc() {
        // A buffer allocated late and never freed does not block the bytes
        // of the ones freed before it was made.
        let t = Trace::from_csv("t", "alloc,a,4096\nfree,a\nalloc,b,4096\n").unwrap();
        let items = intervals(&t);
        assert_eq!((items[1].lower, items[1].upper), (2, 3));
        assert_eq!(plan_trace(&t).slab_bytes, 4608);
    }

    #[test]
    fn oversized_windows_are_cut() {
        // One long chain of overlapping lifetimes: every buffer overlaps
        // the next, so without cuts the whole trace would be one window.
        let mut csv = String::new();
        for i in 0..(3 * MAX_WINDOW) {
            csv.push_str(&format!("alloc,{i},1000\n"));
            if i > 0 {
                csv.push_str(&format!("free,{}\n", i - 1));
            }
        }
        let t = Trace::from_csv("chain", &csv).unwrap();
        let plan = plan_trace(&t);
        assert!(plan.windows >= 3, "{}", plan.windows);
        placement::validate(&plan.intervals, &plan.offsets, None).unwrap();
        assert!(plan.footprint_ratio() <= 1.5, "{}", plan.footprint_ratio());
    }
}
