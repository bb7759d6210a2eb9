//! From recorded steps to a plan: one site per request index, sized by its
//! largest request, alive over the union of its recorded lifetimes,
//! placed by tensor-arena's planner.

use std::time::Duration;

use tensor_arena::plan::placement::{self, Interval, Strategy};

use crate::record::{Life, StepRecord};

/// The slot granule: torch's block rounding and the plan's offset
/// alignment.
pub const GRANULE: u64 = 512;

/// Plans of at most this many slots are validated after placement.
const VALIDATE_MAX: usize = 50_000;

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
    /// A second slot, used by odd steps, for a site whose block lives into
    /// the next step past the next step's own request at this index (a
    /// `loss` kept until it is reassigned): two instances are alive at
    /// once there, so the site alternates between two slots.
    pub alternate: Option<u64>,
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

/// `size` rounded up to the next of four steps per power of two (1, 1.25,
/// 1.5, 1.75 times a power of two), as `roundup_power2_divisions:4` rounds.
pub fn bucket(size: u64) -> u64 {
    if size <= 4 {
        return size;
    }
    let p = 1u64 << (63 - size.leading_zeros()); // the power of two at or below
    let step = p / 4;
    size.div_ceil(step).saturating_mul(step)
}

/// Whether some request index had different sizes in `steps`: the shapes
/// change from step to step.
pub fn shapes_change(steps: &[&StepRecord]) -> bool {
    let n = steps.iter().map(|s| s.requests.len()).max().unwrap_or(0);
    steps.iter().any(|s| s.requests.len() != n)
        || (0..n).any(|k| {
            let mut sizes = steps
                .iter()
                .filter_map(|s| s.requests.get(k))
                .map(|r| r.size);
            let first = sizes.next();
            sizes.any(|x| Some(x) != first)
        })
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
        let mut min_size = u64::MAX;
        let (mut kept, mut other_stream) = (false, false);
        let (mut upper, mut wraps, mut carried, mut known) = (k + 1, false, false, false);
        let mut doubled = false;
        for rec in steps {
            let Some(req) = rec.requests.get(k) else {
                continue;
            };
            max_size = max_size.max(req.size);
            min_size = min_size.min(req.size);
            other_stream |= req.stream != stream;
            match req.life(rec.step, latest) {
                Life::InStep(clock) => {
                    upper = upper.max(clock as usize);
                    known = true;
                }
                Life::NextStep(clock) => {
                    carried = true;
                    wraps |= clock > 0;
                    doubled |= clock as usize > k;
                    known = true;
                }
                Life::Kept => kept = true,
                Life::Unknown => {}
            }
        }
        // A site whose size changed between the recorded steps follows a
        // changing shape (a sequence length): it gets room to grow, the
        // next bucket of four per power of two (at most 25% more), so that
        // a somewhat longer step still fits.
        let max_size = if min_size < max_size {
            bucket(max_size)
        } else {
            max_size
        };
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
        if live && doubled {
            intervals.push(Interval {
                lower,
                upper: upper.max(lower + 1),
                size: slot as usize,
            });
        }
        sites.push(Site {
            offset: 0,
            alternate: (live && doubled).then_some(0),
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
    // The placement is checked, not trusted (up to a size where the check
    // stays quick; the serving path's live-overlap check is the safety net
    // either way).
    let offsets = if intervals.len() > VALIDATE_MAX
        || placement::validate(&intervals, &offsets, None).is_ok()
    {
        offsets
    } else {
        stacked(&intervals)
    };
    let slab_bytes = placement::height(&intervals, &offsets) as u64;
    // Intervals are in site order, a doubled site's second slot right
    // after its first.
    let mut next = offsets.iter();
    for site in &mut sites {
        site.offset = next.next().map_or(0, |&o| o as u64);
        if site.alternate.is_some() {
            site.alternate = next.next().map(|&o| o as u64);
        }
    }
    // Serving never checks the slab's bounds: every slot must lie inside.
    let inside = |s: &Site| {
        s.unplanned.is_some()
            || (s.offset + s.slot <= slab_bytes
                && s.alternate.is_none_or(|a| a + s.slot <= slab_bytes))
    };
    if !sites.iter().all(inside) {
        let offsets = stacked(&intervals);
        let mut next = offsets.iter();
        for site in &mut sites {
            site.offset = next.next().map_or(0, |&o| o as u64);
            if site.alternate.is_some() {
                site.alternate = next.next().map(|&o| o as u64);
            }
        }
    }
    let slab_bytes = slab_bytes.max(
        sites
            .iter()
            .filter(|s| s.unplanned.is_none())
            .map(|s| s.offset.max(s.alternate.unwrap_or(0)) + s.slot)
            .max()
            .unwrap_or(0),
    );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{FreedAt, Request};

    fn req(size: u64, freed: Option<(u64, u32)>) -> Request {
        Request {
            size,
            stream: 0,
            freed: freed.map(|(step, clock)| FreedAt { step, clock }),
        }
    }

    #[test]
    fn buckets_are_four_per_power_of_two() {
        assert_eq!(bucket(1000), 1024);
        assert_eq!(bucket(1024), 1024);
        assert_eq!(bucket(1025), 1280);
        assert_eq!(bucket(85 * 1024), 96 * 1024);
        assert_eq!(bucket(3), 3);
        for size in [5u64, 77, 4097, 1 << 40, (1 << 40) + 1] {
            let b = bucket(size);
            assert!(b >= size && b <= size + size / 4, "{size} -> {b}");
        }
    }

    #[test]
    fn every_slot_lies_in_the_slab_with_doubled_and_unplanned_sites() {
        // Step 1 and 2 alike: site 0 a temporary; site 1 carried past the
        // next step's own request 1 (doubled); site 2 kept in step 1 and
        // carried past request 2 in step 2 (doubled but unplanned); site 3
        // a temporary after them.
        let steps: Vec<StepRecord> = (1..=2)
            .map(|s| StepRecord {
                step: s,
                requests: vec![
                    req(1000, Some((s, 1))),
                    req(3000, Some((s + 1, 3))),
                    req(5000, if s == 1 { None } else { Some((s + 1, 4)) }),
                    req(7000, Some((s, 4))),
                ],
            })
            .collect();
        let refs: Vec<&StepRecord> = steps.iter().collect();
        let plan = plan(&refs, 3, 0, true, Duration::from_secs(1));
        assert!(plan.sites[1].alternate.is_some());
        assert_eq!(plan.sites[2].unplanned, Some(Unplanned::Outlives));
        assert_eq!(plan.sites[2].alternate, None);
        for s in plan.sites.iter().filter(|s| s.unplanned.is_none()) {
            assert!(
                s.offset + s.slot <= plan.slab_bytes,
                "{s:?} past {}",
                plan.slab_bytes
            );
            if let Some(a) = s.alternate {
                assert!(a + s.slot <= plan.slab_bytes && a != s.offset);
            }
        }
    }
}
