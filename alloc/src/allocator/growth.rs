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
//! Only for a plan whose slab is within [`TIGHT`] of its own lower bound:
//! a plan merged from steps of random shapes can be much taller than any
//! of its steps (each site at its largest size), and such a plan is better
//! left to the path that keeps the old region apart (measured on the
//! suite's `random_shapes`: 1.211 -> 1.378 of the live lower bound when it
//! grew in place, the re-plans that follow grew it further; unchanged with
//! the gate).

use super::*;

/// A plan's slab at most this much over its lower bound (numerator,
/// denominator) grows the old region in place.
const TIGHT: (u64, u64) = (5, 4);

impl PlannedAllocator {
    /// Serves `plan` (of `bytes`, more than `old`'s region) from `old`'s
    /// region grown in place, when the bytes right after it are free and
    /// the plan is tight; `Err` gives both back for the other ways (a new
    /// region once the old one is idle, or one more region past it).
    pub(super) fn grow_in_place(
        &mut self,
        plan: site_plan::SitePlan,
        old: PlannedSlab,
        bytes: usize,
    ) -> std::result::Result<PlannedSlab, Box<(site_plan::SitePlan, PlannedSlab)>> {
        let tight =
            plan.slab_bytes.saturating_mul(TIGHT.1) <= plan.lower_bound.saturating_mul(TIGHT.0);
        if !tight || !old.is_one_region() {
            return Err(Box::new((plan, old)));
        }
        let (base, had) = (old.base, old.region_bytes);
        match self.backing.grow_in_place(base, bytes) {
            Ok(true) => {
                if self.checked {
                    let _ = self.backing.fill(base + had, bytes - had, POISON_BYTE);
                }
                Ok(PlannedSlab::grown_in_place(plan, old, bytes))
            }
            Ok(false) => Err(Box::new((plan, old))),
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
