//! What a planned arena would need for a trace: every allocation becomes a
//! buffer alive from its alloc event to its free event, placed by the
//! planner's placement code.
//!
//! This module is the only place the trace replay chooses a placement
//! strategy ([`place`]); swap it there for a better one.

use serde::Serialize;

use super::trace::Trace;
use crate::plan::DEFAULT_OFFSET_ALIGN;
use crate::plan::layout::ACL_GRANULE;
use crate::plan::placement::{self, GreedyOrder, Interval};

/// Traces with at most this many allocations are placed in one greedy
/// pass; larger ones are split into independent windows (see
/// [`plan_trace`]).
pub const WHOLE_TRACE_LIMIT: usize = 4096;

/// Bytes an allocation of `requested` bytes takes in the slab, by the same
/// rule the planner applies to a buffer: the ACL rule
/// `ALIGN_UP(len, 32) + 32`, rounded to the 512-byte offset alignment.
/// (This equals the caching allocator's block size for the request.)
///
/// ```
/// use tensor_arena::diag::slot_size;
/// assert_eq!(slot_size(480), 512);
/// assert_eq!(slot_size(512), 1024);
/// ```
pub fn slot_size(requested: u64) -> u64 {
    let granule = ACL_GRANULE as u64;
    let align = DEFAULT_OFFSET_ALIGN as u64;
    let padded = requested
        .div_ceil(granule)
        .saturating_mul(granule)
        .saturating_add(granule);
    padded.div_ceil(align).saturating_mul(align)
}

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
/// `[alloc event, free event)`, or to the end of the trace.
pub fn intervals(trace: &Trace) -> Vec<Interval> {
    let end = trace.events().len();
    trace
        .allocations()
        .iter()
        .map(|a| Interval {
            lower: a.alloc_at,
            upper: a.free_at.unwrap_or(end).max(a.alloc_at + 1),
            size: usize::try_from(slot_size(a.size)).unwrap_or(usize::MAX),
        })
        .collect()
}

/// Plans a slab for the trace.
///
/// Up to [`WHOLE_TRACE_LIMIT`] allocations, all buffers go through one
/// [`place`] call. Above it (the greedy placer is quadratic), buffers live
/// to the end of the trace are stacked at the bottom of the slab in
/// allocation order, and the others are cut into windows of overlapping
/// lifetimes (in a training trace, roughly one per step), each placed on
/// its own above them; the slab is the stack plus the tallest window.
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
    let lower_bound = placement::lower_bound(&items) as u64;
    let held: Vec<usize> = (0..items.len())
        .filter(|&i| trace.allocations()[i].free_at.is_none())
        .collect();
    let held_bytes = held.iter().map(|&i| items[i].size as u64).sum();
    if items.len() <= WHOLE_TRACE_LIMIT {
        let offsets = place(&items);
        let slab_bytes = placement::height(&items, &offsets) as u64;
        return ArenaPlan {
            intervals: items,
            offsets,
            slab_bytes,
            lower_bound,
            held_bytes,
            windows: 1,
        };
    }
    let mut offsets = vec![0usize; items.len()];
    let mut base = 0usize;
    for &i in &held {
        offsets[i] = base;
        base = base.saturating_add(items[i].size);
    }
    // Windows: sweep the other buffers by start; a window closes when no
    // buffer seen so far is alive past the next start.
    let mut rest: Vec<usize> = (0..items.len())
        .filter(|&i| trace.allocations()[i].free_at.is_some())
        .collect();
    rest.sort_by_key(|&i| items[i].lower);
    let (mut tallest, mut windows) = (0usize, 0usize);
    let mut start = 0;
    while start < rest.len() {
        let mut reach = items[rest[start]].upper;
        let mut stop = start + 1;
        while stop < rest.len() && items[rest[stop]].lower < reach {
            reach = reach.max(items[rest[stop]].upper);
            stop += 1;
        }
        let window: Vec<Interval> = rest[start..stop].iter().map(|&i| items[i]).collect();
        let placed = place(&window);
        tallest = tallest.max(placement::height(&window, &placed));
        for (&i, off) in rest[start..stop].iter().zip(placed) {
            offsets[i] = base.saturating_add(off);
        }
        windows += 1;
        start = stop;
    }
    ArenaPlan {
        intervals: items,
        offsets,
        slab_bytes: base.saturating_add(tallest) as u64,
        lower_bound,
        held_bytes,
        windows,
    }
}

/// The placement strategy: greedy by size, best fit. The one line to
/// change for a better planner.
pub fn place(items: &[Interval]) -> Vec<usize> {
    placement::greedy(items, GreedyOrder::Size)
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
            assert_eq!(slot_size(r), crate::caching::rules::round_size(r), "{r}");
        }
    }

    #[test]
    fn windowed_plans_are_valid_and_near_the_bound() {
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
        assert!(plan.windows > 1);
        placement::validate(
            &plan.intervals,
            &plan.offsets,
            Some(plan.slab_bytes as usize),
        )
        .unwrap();
        assert!(plan.slab_bytes >= plan.lower_bound);
        assert!(plan.footprint_ratio() < 1.5, "{}", plan.footprint_ratio());
    }
}
