//! A step that outgrows the plan (issue 38): the larger re-plan's slab is
//! the old slab's region grown in place over the bytes right after it in
//! the mapped range, when they are free, instead of the old region kept
//! with one more region past it (whose offsets start at the first slot
//! that would straddle the old end: the old region's bytes past that
//! point stay held, unused). The blocks still alive in the old slab (the
//! gradients carried to the next `zero_grad`) stay where they are and the
//! new plan's sites wait for them, as at a take-over. The pages the grown
//! region needs are mapped at the plan's swap; the idle pages outside it
//! are unmapped first, as for a new slab.
//!
//! **But not the carried sites' pages** (session 17). The plan's sites of
//! blocks carried into the next step (gradients kept to the next
//! `zero_grad`) are idle there until the blocks the step before made are
//! freed, and in a growing loop those blocks are misses outside the slab
//! (the old plan was too small for them): mapped at the swap, the grown
//! region's carried slots were held beside the blocks they wait for. In
//! generated `loop-23-029` (a conv net doubling its side at step 76) the
//! swap at step 78's end mapped the region's 0.27 MiB of growth at once,
//! the run's peak (1.41 MiB) while 0.10 MiB of misses carried into step
//! 79 lived on: 1.085x the live lower bound, 1.031x with
//! those pages left unmapped until a block lands on them, as at the first
//! slab's take-over (`takeover.rs`: a block maps its own pages while the
//! step before's blocks live, up to 8 blocks, then every page but the
//! carried slots', as many blocks again, then all; the rest at the step's
//! end under the run's peak). Only the carried slots': deferring every
//! grown page (the first form) left misses of the next step under the
//! peak with no idle pages to borrow, which the ninth block then mapped
//! beside them (`loop-1-029` 1.028 -> 1.285x).
//!
//! **Nor the old region's lent pages** (session 18). The growth mapped
//! every unmapped page of the whole region, and the old part's are those
//! the slab lent to misses (or a take-over's deferred ones), whose misses
//! may outlive the step: generated `loop-14-000` mapped a third of its
//! slab back beside the misses carried into the next step, 1.113x; left
//! as the allocator holds them (mapped as blocks land on them, or at a
//! step's end under the run's peak), 1.028x.
//!
//! Only for a plan whose slab is within [`TIGHT`] (3/2) of its own lower
//! bound: a plan merged from steps of random shapes can be much taller than
//! any of its steps (each site at its largest size), and such a plan is
//! better left to the path that keeps the old region apart (measured on
//! the suite's `random_shapes`: 1.211 -> 1.378 of the live lower bound when
//! it grew in place, the re-plans that follow grew it further; unchanged
//! with the gate).
//!
//! A run that grows step after step (every step a new largest input) is
//! planned from its latest step alone when the plan merged from its recent
//! steps is much taller ([`latest_alone`]).
//!
//! A smaller re-plan shrinks the region in place when it is more than
//! [`SHRINK`] over the plan (keeping every block still alive in it), so a
//! loop whose re-plans go down as well as up does not hold the height of
//! its tallest plan for the rest of the run (a generated loop of issue 38:
//! 1.915 -> 1.640 of the live lower bound; the suite unchanged).

use super::*;

/// A plan's slab at most this much over its lower bound (numerator,
/// denominator) grows the old region in place. Was 5/4: a plan from 1.25x
/// to 1.5x its lower bound then kept the old region and got one more past
/// the first slot that would straddle its end, the old bytes past that
/// slot held unused (generated loops of issue 38, 100 replays: median
/// planned / LB 1.260 -> 1.236, p90 1.658 -> 1.568 at 3/2, 13 loops
/// better, 2 worse; the suite's memory unchanged, but `resnet_multiscale`
/// re-plans twice more and serves 86.38% instead of 95.46%, its misses in
/// regions of the range). At 13/8 or more the suite's `random_shapes`
/// grows in place too: 1.211 -> 1.378; at 11/8, `resnet_multiscale`'s cost
/// is the same and the gain less (median 1.240, p90 1.640).
const TIGHT: (u64, u64) = (3, 2);

/// A region more than this much over the smaller plan that takes it over
/// (denominator, numerator) shrinks in place to the plan. A smaller excess
/// stays: its bytes serve the misses of the plan's steps as gaps of the
/// slab, which outside the slab would be regions mapped in chunks (the
/// suite's `fsdp2_checkpoint`, shrunk at every smaller re-plan: 1.115 ->
/// 1.167 of the live lower bound; from 1/16 over to 1/4 over the replays
/// give the same figures).
const SHRINK: (usize, usize) = (8, 9);

impl PlannedAllocator {
    /// The bytes `old`'s one region keeps when a plan of `bytes` (fewer
    /// than it has) takes it over: `bytes`, or up to the end of its highest
    /// live block; `None`, and nothing changed, when that is not less than
    /// the region, or the region is not one region of a mapped range. The
    /// region's bytes past that are free from now on, their pages idle.
    pub(super) fn shrink_in_place(&mut self, old: &PlannedSlab, bytes: usize) -> Option<usize> {
        if !old.is_one_region() {
            return None;
        }
        // Waiting blocks (freed, their other streams' uses still pending)
        // keep their pages mapped as live ones do: a side stream may still
        // read them.
        let keep = (bytes as u64)
            .max(old.live_end())
            .max(self.pending_end_in(old.base, old.region_bytes))
            .next_multiple_of(site_plan::GRANULE) as usize;
        let loose = keep.saturating_mul(SHRINK.1) < old.region_bytes.saturating_mul(SHRINK.0);
        (loose && self.backing.shrink_in_place(old.base, keep)).then_some(keep)
    }

    /// Serves `plan` (of `bytes`, more than `old`'s region) from `old`'s
    /// region grown in place, when the bytes right after it are free and
    /// the plan is tight; `Err` gives both back for the other ways (a new
    /// region once the old one is idle, or one more region past it).
    pub(super) fn grow_in_place(
        &mut self,
        plan: site_plan::SitePlan,
        old: PlannedSlab,
        bytes: usize,
        steps: &[StepRecord],
    ) -> std::result::Result<PlannedSlab, Box<(site_plan::SitePlan, PlannedSlab)>> {
        let tight =
            plan.slab_bytes.saturating_mul(TIGHT.1) <= plan.lower_bound.saturating_mul(TIGHT.0);
        if !tight || !old.is_one_region() {
            return Err(Box::new((plan, old)));
        }
        let (base, had) = (old.base, old.region_bytes);
        // The carried sites' pages wait for their blocks (see the module's
        // comment).
        let defer = self.carried_slots_of(&plan, steps);
        // The old region's pages unmapped now (lent to misses that may
        // outlive the step, or a take-over's deferred ones) stay so: they
        // are mapped as blocks land on them or at a step's end under the
        // run's peak, as they would have been without the growth.
        match self
            .backing
            .grow_in_place_deferred(base, bytes, &defer, &self.deferred)
        {
            Ok(Some(later)) => {
                if self.checked {
                    // Only the mapped pages; the others when they are.
                    let mut at = base + had;
                    for &(a, l) in later.iter().chain(std::iter::once(&(base + bytes, 0))) {
                        if a > at {
                            let _ = self.backing.fill(at, a - at, POISON_BYTE);
                        }
                        at = at.max(a + l);
                    }
                }
                if !later.is_empty() {
                    self.deferred.extend(later);
                    self.deferred.sort_unstable();
                    self.held_next_step = defer
                        .iter()
                        .map(|&(o, l)| (base + o as usize, l as usize))
                        .collect();
                }
                Ok(PlannedSlab::grown_in_place(plan, old, bytes))
            }
            Ok(None) => Err(Box::new((plan, old))),
            Err(e) => {
                self.error(Kind::Replan, || {
                    format!(
                        "the slab's {had}-byte region could not grow to {bytes} bytes in place: {e}; a region past it is tried"
                    )
                });
                Err(Box::new((plan, old)))
            }
        }
    }
}

/// A merged plan this much taller than the plan of its latest step alone
/// (numerator, denominator) is replaced by that one when the latest step
/// is its largest (see [`latest_alone`]).
const LOOSE: (u64, u64) = (5, 4);

/// The plan of `steps`' latest step alone, when that step is the largest
/// of them (the run is growing: a new largest input) and `plan`, merged
/// from all of them, is more than [`LOOSE`] over it: steps whose every
/// size differs merge into sites whose lifetimes, in the merged order,
/// overlap, and the slab holds several steps' blocks at once (a synthetic
/// loop growing 3% a step: 10.2 MiB for a 5.9 MiB step). The smaller steps
/// before it are not served by such a plan either (their sizes are new to
/// every site): the latest step's own plan costs them nothing.
pub(super) fn latest_alone(
    plan: site_plan::SitePlan,
    steps: &[&StepRecord],
    job: &PlanJob,
) -> site_plan::SitePlan {
    let Some(latest) = steps.iter().max_by_key(|r| r.step) else {
        return plan;
    };
    if steps.len() < 2 {
        return plan;
    }
    let mut merger = crate::merge::Merger::new();
    merger.fold(latest, None);
    let merged = merger.restrict(&[latest]);
    let alone = site_plan::plan(
        &[latest],
        merged,
        job.latest,
        job.pad,
        job.checked,
        PLACEMENT_TIME_LIMIT,
        site_plan::Room {
            capacity: job.region,
            held: &job.held,
            parity: job.parity,
        },
    );
    let largest = alone.lower_bound >= plan.lower_bound;
    let loose = plan.slab_bytes.saturating_mul(LOOSE.1) > alone.slab_bytes.saturating_mul(LOOSE.0);
    if largest && loose { alone } else { plan }
}
