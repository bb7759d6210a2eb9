//! From recorded steps to a plan: one site per request index, sized by its
//! largest request, alive over the union of its recorded lifetimes,
//! placed by tensor-arena's planner.

use std::time::Duration;

use tensor_arena::plan::placement::{self, Interval, Strategy};

use crate::record::{Life, StepRecord};

/// The slot granule: torch's block rounding and the plan's offset
/// alignment.
pub const GRANULE: u64 = 512;

/// Checked mode's guard zone at the end of every slot.
pub const GUARD: u64 = 512;

/// Why a request index has no planned slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unplanned {
    /// Its block outlived the step and the next one: the caller keeps it
    /// (served by the fallback, never by the step slab).
    Outlives,
    /// Recorded on a stream other than the planned one.
    Stream,
}

/// The planned slot of one request index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    /// Offset in the slab.
    pub offset: u64,
    /// Bytes it holds (the capacity, the device pad and the guard).
    pub slot: u64,
    /// The largest request it serves.
    pub capacity: u64,
    /// Why it has no slot, if it has none.
    pub unplanned: Option<Unplanned>,
}

/// A plan of sites.
#[derive(Debug, Clone)]
pub struct SitePlan {
    /// One per request index of the longest recorded step.
    pub sites: Vec<Site>,
    /// Slab bytes: the placement's height.
    pub slab_bytes: u64,
    /// The largest total of slot bytes alive at once in any one recorded
    /// step, with that step's own sizes and lifetimes: no slab serving the
    /// recorded steps can be smaller.
    pub lower_bound: u64,
    /// The lower bound of the union intervals the placement saw.
    pub union_lower_bound: u64,
    /// The planned stream.
    pub stream: u32,
    /// Steps the plan was made from.
    pub steps: Vec<u64>,
    /// Whether the placement proved itself optimal.
    pub optimal: bool,
    /// Wall time of the placement, in seconds.
    pub placement_seconds: f64,
}

/// Slot bytes of a request: rounded with the platform's pad, plus the guard
/// in checked mode.
pub fn slot_for(size: u64, pad: u64, checked: bool) -> u64 {
    size.saturating_add(pad)
        .div_ceil(GRANULE)
        .saturating_mul(GRANULE)
        + if checked { GUARD } else { 0 }
}

/// Plans `steps` (oldest first, `latest` the last ended step).
pub fn plan(
    steps: &[&StepRecord],
    latest: u64,
    pad: u64,
    checked: bool,
    time_limit: Duration,
) -> SitePlan {
    let n = steps.iter().map(|s| s.requests.len()).max().unwrap_or(0);
    let stream = planned_stream(steps);
    let mut intervals = Vec::with_capacity(n);
    let mut sites = Vec::with_capacity(n);
    for k in 0..n {
        let mut max_size = 0u64;
        let (mut kept, mut other_stream) = (false, false);
        let (mut upper, mut wraps, mut carried, mut known) = (k + 1, false, false, false);
        for rec in steps {
            let Some(req) = rec.requests.get(k) else {
                continue;
            };
            max_size = max_size.max(req.size);
            other_stream |= req.stream != stream;
            match req.life(rec.step, latest) {
                Life::InStep(clock) => {
                    upper = upper.max(clock as usize);
                    known = true;
                }
                Life::NextStep(clock) => {
                    carried = true;
                    wraps |= clock > 0;
                    known = true;
                }
                Life::Kept => kept = true,
                Life::Unknown => {}
            }
        }
        let capacity = slot_for(max_size, pad, false) - pad;
        let slot = slot_for(max_size, pad, checked);
        let unplanned = if other_stream {
            Some(Unplanned::Stream)
        } else if kept || !known {
            Some(Unplanned::Outlives)
        } else {
            None
        };
        // A block carried into the next step lives to the end of its own;
        // one freed only after the next step's first requests is alive at
        // both ends, so it gets the whole step.
        let lower = if wraps { 0 } else { k };
        if carried {
            upper = n;
        }
        let live = unplanned.is_none();
        intervals.push(Interval {
            lower,
            upper: upper.max(lower + 1),
            size: if live { slot as usize } else { 0 },
        });
        sites.push(Site {
            offset: 0,
            slot,
            capacity,
            unplanned,
        });
    }
    let start = std::time::Instant::now();
    let strategy = Strategy::default().with_time_limit(time_limit);
    let (offsets, optimal) = match placement::solve(&intervals, &strategy) {
        // Slots are whole granules, so every placement the planner makes
        // is granule-aligned; the check keeps that a fact, not a hope.
        Ok(solution)
            if solution
                .offsets
                .iter()
                .all(|&o| (o as u64).is_multiple_of(GRANULE)) =>
        {
            (solution.offsets, solution.optimal)
        }
        Ok(_) => (stacked(&intervals), false),
        // The placement cannot fail on valid intervals; if it ever did,
        // stacking every slot is still a correct plan.
        Err(_) => (stacked(&intervals), false),
    };
    let placement_seconds = start.elapsed().as_secs_f64();
    let mut slab_bytes = 0u64;
    for (site, (&offset, it)) in sites.iter_mut().zip(offsets.iter().zip(&intervals)) {
        site.offset = offset as u64;
        if it.size > 0 {
            slab_bytes = slab_bytes.max(site.offset + it.size as u64);
        }
    }
    SitePlan {
        lower_bound: per_step_lower_bound(steps, &sites, latest, pad, checked),
        union_lower_bound: placement::lower_bound(&intervals) as u64,
        sites,
        slab_bytes,
        stream,
        steps: steps.iter().map(|s| s.step).collect(),
        optimal,
        placement_seconds,
    }
}

/// The stream most recorded requests used.
fn planned_stream(steps: &[&StepRecord]) -> u32 {
    let mut counts: Vec<(u32, usize)> = Vec::new();
    for req in steps.iter().flat_map(|s| &s.requests) {
        match counts.iter_mut().find(|(s, _)| *s == req.stream) {
            Some((_, c)) => *c += 1,
            None => counts.push((req.stream, 1)),
        }
    }
    counts
        .into_iter()
        .max_by_key(|&(s, c)| (c, std::cmp::Reverse(s)))
        .map_or(0, |(s, _)| s)
}

fn stacked(intervals: &[Interval]) -> Vec<usize> {
    let mut top = 0usize;
    intervals
        .iter()
        .map(|it| {
            let at = top;
            top = top.saturating_add(it.size);
            at
        })
        .collect()
}

/// The largest total of slot bytes of planned sites alive at once in one
/// recorded step (its own sizes and lifetimes, blocks carried in from the
/// step before included), over the recorded steps.
fn per_step_lower_bound(
    steps: &[&StepRecord],
    sites: &[Site],
    latest: u64,
    pad: u64,
    checked: bool,
) -> u64 {
    let planned = |k: usize| sites.get(k).is_some_and(|s| s.unplanned.is_none());
    let mut best = 0u64;
    for (i, rec) in steps.iter().enumerate() {
        let n = rec.requests.len();
        let mut items = Vec::with_capacity(n);
        for (k, req) in rec.requests.iter().enumerate() {
            if !planned(k) {
                continue;
            }
            let upper = match req.life(rec.step, latest) {
                Life::InStep(clock) => (clock as usize).max(k + 1),
                _ => n.max(k + 1),
            };
            items.push(Interval {
                lower: k,
                upper,
                size: slot_for(req.size, pad, checked) as usize,
            });
        }
        if i > 0 {
            let prev = steps[i - 1];
            for (k, req) in prev.requests.iter().enumerate() {
                if let Life::NextStep(clock) = req.life(prev.step, latest)
                    && planned(k)
                    && clock > 0
                {
                    items.push(Interval {
                        lower: 0,
                        upper: clock as usize,
                        size: slot_for(req.size, pad, checked) as usize,
                    });
                }
            }
        }
        best = best.max(placement::lower_bound(&items) as u64);
    }
    best
}
