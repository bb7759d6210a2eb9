//! The allocator's counters, as the stats JSON reports them (the key names
//! are the C ABI's contract: docs/allocator.md).

use serde::Serialize;

/// Requests the plan did not serve inside serving steps, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Misses {
    /// Larger than the site's recorded largest.
    pub size: u64,
    /// After every site of the plan was taken this step.
    pub order: u64,
    /// A request matching no site at or after the step's cursor (one the
    /// plan does not know: a code path the recorded steps did not take).
    pub unmatched: u64,
    /// A live block held some of the site's bytes.
    pub overlap: u64,
    /// On a stream other than the planned one.
    pub stream: u64,
    /// Made outside any step once the plan serves.
    pub outside_step: u64,
    /// The site's bytes still wait for events of other streams that used
    /// an earlier block there (`record_stream`).
    pub pending: u64,
}

impl Misses {
    /// Misses a re-plan can cure (size, order, unmatched, overlap, pending:
    /// a re-plan gives sites used across streams their own alternating
    /// slots).
    pub fn curable(&self) -> u64 {
        self.size + self.order + self.unmatched + self.overlap + self.pending
    }
}

/// Bad input and failures, counted; the first of each kind is logged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ErrorCounts {
    /// `free` of a pointer the allocator never gave.
    pub unknown_free: u64,
    /// `free` of a pointer already freed.
    pub double_free: u64,
    /// `alloc` of zero bytes (answered NULL).
    pub zero_size: u64,
    /// `alloc` of more bytes than the device has (answered NULL).
    pub too_large: u64,
    /// `alloc` for a device other than the configured one (answered NULL:
    /// one allocator serves one device, as one rank does).
    pub other_device: u64,
    /// `alloc` that neither the plan nor the fallback could serve.
    pub out_of_memory: u64,
    /// Checked mode: guard bytes after a planned block were overwritten.
    pub guard_violations: u64,
    /// `step_begin` / `step_end` out of order.
    pub step_order: u64,
    /// A re-plan whose slab could not be reserved (the old plan stays).
    pub replan_failed: u64,
    /// An event could not be recorded or queried on a stream that used a
    /// freed block: its bytes are kept out of use until `reset`.
    pub event_failed: u64,
}

/// A caching-allocator model's figures over the whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ModelFigures {
    /// Peak reserved bytes.
    pub peak_reserved_bytes: u64,
    /// Peak bytes of live requests.
    pub peak_live_bytes: u64,
    /// `1 - peak_live / peak_reserved`.
    pub fragmentation: f64,
    /// Which rules the model followed (`cuda` or `npu`).
    pub platform: &'static str,
    /// Segments the model asked the device for over the whole run
    /// (`cudaMalloc` / `aclrtMalloc` calls; with expandable segments, the
    /// pages it mapped).
    pub device_allocations: u64,
    /// Segments it gave back (`cudaFree`, each a device synchronisation).
    pub device_frees: u64,
}

/// Figures over the steady steps of the plan serving now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PlanWindow {
    /// The first step of the window (the one after the plan's first).
    pub since_step: u64,
    /// Peak reserved bytes in the window.
    pub peak_reserved_bytes: u64,
    /// Peak live bytes in the window.
    pub peak_live_bytes: u64,
    /// `1 - peak_live / peak_reserved` in the window.
    pub fragmentation: f64,
}

/// Everything the stats JSON holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    /// `warmup`, `recording` or `serving`.
    pub phase: &'static str,
    /// The backing (`host`, `cuda:0`, `ascend:0`).
    pub backing: String,
    /// Steps begun.
    pub steps: u64,
    /// Every request so far.
    pub requests: u64,
    /// Requests inside serving steps.
    pub requests_after_warmup: u64,
    /// Of those, served from the plan.
    pub served_from_plan: u64,
    /// Of the others (misses of the plan's order and sizes), served in a
    /// gap of the slab no live block held: no device memory, but not the
    /// plan either (not counted in `served_share`).
    pub served_in_slab_gaps: u64,
    /// Of the `overlap` misses, those refused because a block that a miss
    /// of the same step was put in a gap held the site's bytes: the
    /// cascade of one miss into the next (a diagnostic of the placement
    /// of misses; see docs/allocator.md).
    pub overlap_behind_gap_blocks: u64,
    /// Bytes of the slab's idle pages unmapped over the run for misses no
    /// gap held, before they mapped pages past the run's peak (mapped
    /// again as blocks landed there or at the step's end; the
    /// configuration's `lend_slab_pages`).
    pub lent_slab_bytes: u64,
    /// The longest a step boundary kept the training thread waiting for a
    /// plan (made there, or joined from the planner's thread), in seconds:
    /// a measured time, not a decision input.
    pub planning_wait_seconds_max: f64,
    /// Requests of the steps every plan was made from, summed over the
    /// plans (a step counted once per plan it is in).
    pub plan_requests_merged: u64,
    /// Of those, the requests the banded alignment saw: the rest were the
    /// first step, copied from an equal step, kept by the serving
    /// matcher's anchors or already merged into the plan re-planned from
    /// (docs/allocator.md, "Planning off the training thread").
    pub plan_requests_aligned: u64,
    /// `served_from_plan / requests_after_warmup`; `None` (JSON `null`)
    /// before a serving step made a request: nothing was served yet.
    pub served_share: Option<f64>,
    /// Fallback allocations in the last serving step.
    pub fallback_allocations_last_step: u64,
    /// The most fallback allocations in one serving step.
    pub fallback_allocations_max_step: u64,
    /// Misses by reason.
    pub misses: Misses,
    /// Plans made after the first (re-plans).
    pub replans: u64,
    /// Plans made.
    pub plans: u64,
    /// Re-plans that produced the plan already serving (kept, nothing
    /// reserved).
    pub replans_unchanged: u64,
    /// Re-plans made but not installed: a plan taller than the region
    /// serving, whose slab with what lives outside it would have raised
    /// the run's peak, while misses borrow the slab's idle pages
    /// (`lend_slab_pages`): the plan in place kept serving.
    pub replans_declined: u64,
    /// First plans not installed: more than 15% over their own steps'
    /// bound, their slab would have raised the run's peak; the run
    /// recorded one more step and planned again (at most three times).
    pub first_plans_declined: u64,
    /// Requests the current plan serves per step (its sites).
    pub plan_sites: u64,
    /// Bytes of the current slab.
    pub slab_bytes: u64,
    /// The recorded steps' lower bound for what the slab serves.
    pub lower_bound: u64,
    /// `slab_bytes / lower_bound` (0 without a plan).
    pub slab_ratio: f64,
    /// Bytes the fallback holds.
    pub fallback_reserved_bytes: u64,
    /// Bytes held from the backing now: slab, retiring slabs, fallback,
    /// scratch pool and exact regions (as asked for; the backing may round
    /// further).
    pub reserved_bytes: u64,
    /// Bytes of the region the slab holds (at least `slab_bytes`: a
    /// re-plan that needs fewer keeps the region).
    pub region_bytes: u64,
    /// Peak of `reserved_bytes` over the whole run: warm-up, recording,
    /// every plan and every transition between plans (never below
    /// `reserved_bytes`).
    pub peak_reserved_bytes: u64,
    /// Peak bytes of live requests over the whole run.
    pub peak_live_bytes: u64,
    /// `1 - peak_live / peak_reserved` over the whole run (0 before any
    /// request).
    pub fragmentation: f64,
    /// The same figures over the steady steps of the current plan only,
    /// from the end of the first step it serves; `None` before a plan has
    /// served a whole step.
    pub current_plan: Option<PlanWindow>,
    /// Backing reservations (device allocation calls) so far.
    pub backing_reservations: u64,
    /// Backing reservations during the last step.
    pub backing_reservations_last_step: u64,
    /// The live lower bound: the most bytes live at once over the whole
    /// run, each request rounded to 512 bytes as the backing rounds it. No
    /// allocator holds less at that moment.
    pub lower_bound_bytes: u64,
    /// `peak_reserved_bytes / lower_bound_bytes` (`None` before any
    /// request): 1 is the limit.
    pub lower_bound_ratio: Option<f64>,
    /// Calls made to the backing over the whole run, by kind: each a
    /// device call on a GPU or an NPU.
    pub backing_calls: crate::metered::BackingCalls,
    /// Calls that took or gave memory (all but events) in the last step.
    pub backing_calls_last_step: u64,
    /// The most such calls in one steady serving step (a plan serving
    /// since before the step, its region in place).
    pub backing_calls_max_steady_step: u64,
    /// Steady serving steps that made any such call.
    pub steady_steps_with_backing_calls: u64,
    /// The mapping unit of the range regions come from (`None`: whole
    /// regions from the device, one call each).
    pub map_granularity: Option<u64>,
    /// What the backing calls would cost on the platform's device, in
    /// seconds: an estimate from the per-call costs of
    /// [`crate::cost`] (docs/device-costs.md), never a measurement.
    pub device_call_seconds_estimate: f64,
    /// The caching-allocator model (the platform's defaults) fed with
    /// every request of the whole run.
    pub caching_model: ModelFigures,
    /// The same model with `expandable_segments:True`.
    pub expandable_model: ModelFigures,
    /// Errors by kind.
    pub errors: ErrorCounts,
    /// Live blocks (planned and fallback).
    pub live_blocks: u64,
    /// Live blocks in slabs of earlier plans, waiting to be freed.
    pub retiring_live_blocks: u64,
    /// Whether checked mode is on.
    pub checked: bool,
    /// Bytes the allocator's own books hold (the step records and the
    /// plan's basis: their vectors' capacity); bounded by the step cap.
    pub book_bytes: u64,
    /// Steps cut for making too many requests without ending (or for
    /// staying open too long): `step_request_cap`, `step_time_cap_s`.
    pub steps_cut: u64,
}

/// `1 - live / reserved`, 0 when nothing was reserved.
pub fn fragmentation(live: u64, reserved: u64) -> f64 {
    if reserved == 0 {
        0.0
    } else {
        1.0 - live as f64 / reserved as f64
    }
}
